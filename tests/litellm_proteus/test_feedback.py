"""Feedback validation (FeedbackDesk), across processes through Redis, offline into a log folder,
and the ``proteus feedback`` command."""

from __future__ import annotations

import http.server
import json
import math
import socket
import threading
import time

import pytest

from litellm_proteus.cli import main as proteus_cli
from litellm_proteus.config import DecisionLogSettings, RedisSettings
from litellm_proteus.decision_log import DecisionLogWriter, iter_records, join_log, outcome_record, redis_client
from litellm_proteus.feedback import FeedbackDesk, FeedbackError, append_to_log_dir, parse_feedback_body, send_feedback

from .test_decision_log import make_decision


@pytest.fixture
def log(tmp_path):
    settings = DecisionLogSettings(dir=str(tmp_path / "log"), feedback_max_age_s=3600)
    writer = DecisionLogWriter(settings)
    yield settings, writer
    writer.close()


def feedback_in(directory) -> list[dict]:
    return [r for r in iter_records(directory) if r["type"] == "feedback"]


def refused(desk: FeedbackDesk, *args, **kwargs) -> FeedbackError:
    with pytest.raises(FeedbackError) as info:
        desk.accept(*args, **kwargs)
    return info.value


def test_feedback_rules_and_nothing_written_on_refusal(log, tmp_path):
    settings, writer = log
    desk = FeedbackDesk(settings, writer.submit)
    now = time.time()
    desk.remember(make_decision("fresh", ts=now - 10))
    desk.remember(make_decision("old", ts=now - 7200))
    for bad in (-0.01, 1.5, math.nan, "0.5", True, None):
        error = refused(desk, "fresh", bad)
        assert (error.status, error.param) == (400, "score") and "[0, 1]" in str(error)
    assert refused(desk, "nobody", 1.0).status == 404
    assert refused(desk, "", 1.0).status == 400
    late = refused(desk, "old", 1.0)
    assert late.status == 410 and "feedback_max_age_s" in str(late)
    decision = desk.accept("fresh", 0.75, "judge")
    assert decision["call_id"] == "fresh" and decision["state_key"] == "tier:standard"
    assert refused(desk, "fresh", 1.0).status == 409
    writer.flush()
    assert [(r["call_id"], r["score"], r["source"]) for r in feedback_in(tmp_path / "log")] == [("fresh", 0.75, "judge")]


def test_any_worker_finds_a_decision_through_redis_and_duplicates_are_refused_across_workers(tmp_path, redis_server):
    settings = DecisionLogSettings(dir=str(tmp_path / "log"))
    redis_a = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    redis_b = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    writer_a = DecisionLogWriter(settings, redis_a)  # the worker that routed the request
    writer_b = DecisionLogWriter(settings, redis_b)
    try:
        desk_a = FeedbackDesk(settings, writer_a.submit, redis_a)
        desk_b = FeedbackDesk(settings, writer_b.submit, redis_b)
        record = make_decision("shared")
        desk_a.remember(record)
        writer_a.submit(record)
        assert writer_a.flush()
        assert desk_b.accept("shared", 1.0)["call_id"] == "shared"  # not in B's memory: from Redis
        assert refused(desk_a, "shared", 0.0).status == 409
        redis_server.stop()
        error = refused(desk_b, "never-seen", 1.0)
        assert error.status == 503 and "Redis" in str(error)
        writer_b.flush()
    finally:
        writer_a.close()
        writer_b.close()
    assert [r["score"] for r in feedback_in(tmp_path / "log")] == [1.0]


def failed_pick(call_id: str, ts: float, deployment: str = "d2") -> dict:
    return outcome_record(call_id=call_id, deployment_id=deployment, success=False, response_cost=None, latency_ms=None,
                          error="InternalServerError: boom", ts=ts)


def test_a_call_whose_pick_did_not_answer_takes_no_feedback(log, tmp_path):
    """The answer came from a fallback group (or nothing answered): a score would be charged to the
    deployment PROTEUS picked.  A retried call whose later pick answered takes its score."""
    settings, writer = log
    desk = FeedbackDesk(settings, writer.submit)
    now = time.time()
    desk.remember(make_decision("fell-back", ts=now - 5))
    desk.settle(failed_pick("fell-back", now - 4))
    error = refused(desk, "fell-back", 1.0)
    assert (error.status, error.param) == (409, "call_id")
    assert "not answered by the deployment PROTEUS picked (d2: InternalServerError: boom)" in str(error)
    desk.remember({**make_decision("retried", ts=now - 9), "chosen": 0})  # d1 failed ...
    desk.settle(failed_pick("retried", now - 8, "d1"))
    desk.remember(make_decision("retried", ts=now - 7))  # ... the retry picked d2, which answered
    assert desk.accept("retried", 1.0)["call_id"] == "retried"
    writer.flush()
    assert [r["call_id"] for r in feedback_in(tmp_path / "log")] == ["retried"]


def test_a_worker_that_did_not_route_the_call_refuses_its_feedback_when_the_pick_failed(tmp_path, redis_server):
    settings = DecisionLogSettings(dir=str(tmp_path / "log"))
    redis_a = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    redis_b = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    writer = DecisionLogWriter(settings, redis_a)
    try:
        decision = make_decision("fell-back")
        writer.submit(decision)
        writer.submit(failed_pick("fell-back", decision["ts"] + 1))
        assert writer.flush()
        other_worker = FeedbackDesk(settings, writer.submit, redis_b)  # nothing in its memory: Redis
        assert refused(other_worker, "fell-back", 1.0).status == 409
    finally:
        writer.close()


def test_offline_feedback_into_a_log_folder_and_the_cli(log, tmp_path, capsys):
    settings, writer = log
    writer.submit(make_decision("c1"))
    writer.submit(make_decision("c2", ts=time.time() - 100))
    writer.flush()
    directory = tmp_path / "log"
    assert append_to_log_dir(directory, "c1", 1.0, "python")["call_id"] == "c1"
    writer.submit(make_decision("c4"))
    writer.submit(failed_pick("c4", time.time() + 1))
    writer.flush()
    with pytest.raises(FeedbackError, match="not answered by the deployment PROTEUS picked"):
        append_to_log_dir(directory, "c4", 1.0, "python")
    with pytest.raises(FeedbackError, match="already has feedback"):
        append_to_log_dir(directory, "c1", 0.0, "python")
    assert proteus_cli(["feedback", "c2", "0.5", "--log", str(directory)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"call_id": "c2", "state_key": "tier:standard", "score": 0.5}
    for argv, message in (
        (["feedback", "c3", "1", "--log", str(directory)], "unknown call_id 'c3'"),
        (["feedback", "c1", "1.5", "--log", str(directory)], "score must be a number in [0, 1]"),
        (["feedback", "c2", "1", "--log", str(directory)], "already has feedback"),
        (["feedback", "c1", "1", "--log", str(tmp_path / "missing")], "does not exist"),
        *((["feedback", "c3", "1", "--log", str(directory), "--max-age-s", bad], "--max-age-s must be a number of seconds > 0")
          for bad in ("nan", "inf", "0", "-1")),
        (["feedback", "c3", "1", "--url", "http://127.0.0.1:1", "--max-age-s", "60"], "--max-age-s applies to --log only"),
    ):
        assert proteus_cli(argv) == 2
        error = capsys.readouterr().err
        assert error.startswith("error: ") and message in error
    assert sorted((r["call_id"], r["score"], r["source"]) for r in feedback_in(directory)) == [("c1", 1.0, "python"), ("c2", 0.5, "cli")]


def test_a_huge_integer_score_is_a_400_naming_the_range(log):
    settings, writer = log
    desk = FeedbackDesk(settings, writer.submit)
    desk.remember(make_decision("fresh"))
    for bad in (10**400, -(10**400), 2):
        error = refused(desk, "fresh", bad)
        assert (error.status, error.param) == (400, "score") and "[0, 1]" in str(error) and len(str(error)) < 200
    assert desk.accept("fresh", 1)["call_id"] == "fresh"  # the int 1 is a score


def test_unknown_fields_and_a_long_source_are_400s_that_say_what_is_allowed():
    for body, named in (({"call_id": "c", "score": 1, "scor": 2}, ["'scor'"]),
                        ({"id": "c", "rating": 1}, ["'id'", "'rating'"])):
        with pytest.raises(FeedbackError) as info:
            parse_feedback_body(body)
        message = str(info.value)
        assert info.value.status == 400 and all(name in message for name in named)
        assert "call_id, score" in message and "source" in message
    with pytest.raises(FeedbackError) as info:
        parse_feedback_body({"call_id": "c", "score": 1, "source": "s" * 65})
    assert (info.value.status, info.value.param) == (400, "source") and "at most 64 characters" in str(info.value)
    assert parse_feedback_body({"call_id": "c", "score": 1}) == ("c", 1.0, "api")
    assert parse_feedback_body({"call_id": "c", "score": 0.5, "source": "judge"}) == ("c", 0.5, "judge")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answering_server(answer):
    """A real HTTP server on loopback whose every POST gets ``answer(path) -> (status, body bytes)``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if body.startswith((b"{", b"[")) else "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def not_found_server():
    """Every POST gets FastAPI's 404 ({"detail": "Not Found"})."""
    server = answering_server(lambda path: (404, b'{"detail":"Not Found"}'))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_cli_says_error_and_exits_2_when_the_proxy_url_is_wrong(capsys, not_found_server, monkeypatch):
    monkeypatch.delenv("PROTEUS_DEBUG", raising=False)
    for url, message in (
        (f"http://127.0.0.1:{free_port()}", "cannot reach the proxy at http://127.0.0.1:"),
        ("127.0.0.1:4411", "needs http:// or https://"),
        (not_found_server + "/v1", "without /v1"),
    ):
        assert proteus_cli(["feedback", "some-call", "1", "--url", url, "--api-key", "sk-x"]) == 2
        error = capsys.readouterr().err
        assert error.startswith("error: ") and message in error and "Traceback" not in error
    with pytest.raises(FeedbackError, match="needs http:// or https://"):
        send_feedback("some-call", 1.0, url="localhost:4000")


@pytest.fixture
def html_ok_server():
    """Every POST gets HTTP 200 and an HTML page (not a PROTEUS proxy); ``[1, 2]`` off the feedback path."""
    server = answering_server(lambda path: (200, b"<html><body>LiteLLM UI</body></html>" if path.endswith("/feedback") else b"[1, 2]"))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_malformed_proxy_url_is_a_400_naming_it():
    for url in ("http://" + "a" * 64 + ".example.com:4000",  # a host name label over 63 characters
                "http://127.0.0.1:port", "http://[::1", "http://:4000",
                "http://127.0.0.1:99999", "http://127.0.0.1:0"):  # no such port: not "cannot reach" (503)
        with pytest.raises(FeedbackError) as info:
            send_feedback("some-call", 1.0, url=url, timeout_s=2.0)
        assert info.value.status == 400, url
        assert "malformed" in str(info.value) and url[:20] in str(info.value)


def test_an_http_200_answer_that_is_not_a_json_object_is_an_error(html_ok_server, monkeypatch):
    with pytest.raises(FeedbackError) as info:
        send_feedback("some-call", 1.0, url=html_ok_server, timeout_s=5.0)
    assert info.value.status == 502 and "is not JSON" in str(info.value) and "LiteLLM UI" in str(info.value)
    from litellm_proteus import feedback

    monkeypatch.setattr(feedback, "FEEDBACK_ROUTE", "/other")  # the server answers a JSON list there
    with pytest.raises(FeedbackError) as info:
        send_feedback("some-call", 1.0, url=html_ok_server, timeout_s=5.0)
    assert info.value.status == 502 and "not a JSON object" in str(info.value)


@pytest.mark.parametrize("score", [float("nan"), float("inf"), -0.5, 2])
def test_a_score_json_cannot_carry_or_outside_the_range_is_refused_before_it_is_sent(score, capsys, not_found_server):
    """The proxy would check it, but NaN and infinities are not JSON: the sender names ``score`` itself."""
    with pytest.raises(FeedbackError) as info:
        send_feedback("some-call", score, url=not_found_server)
    assert (info.value.status, info.value.param) == (400, "score") and "score must be a number in [0, 1]" in str(info.value)
    assert proteus_cli(["feedback", "some-call", str(score), "--url", not_found_server, "--api-key", "sk-x"]) == 2
    assert "score must be a number in [0, 1]" in capsys.readouterr().err


# -- clocks that disagree ------------------------------------------------------------------------------
def test_feedback_taken_on_a_clock_behind_the_decisions_labels_it_and_refuses_a_second_score(log, tmp_path):
    """The decision was stamped by an instance whose clock runs 0.5 s ahead of this one: the feedback
    record still comes after it, so every reader labels the call, and a second score is a 409."""
    settings, writer = log
    desk = FeedbackDesk(settings, writer.submit)
    now = time.time()
    decision = make_decision("c1", ts=now + 0.5)
    desk.remember(decision)
    writer.submit(decision)
    assert desk.accept("c1", 1.0, now=now)["call_id"] == "c1"
    error = refused(desk, "c1", 0.0, now=now + 1)
    assert (error.status, str(error)) == (409, "call_id 'c1' already has feedback")
    writer.flush()
    [feedback] = feedback_in(tmp_path / "log")
    assert decision["ts"] < feedback["ts"] <= decision["ts"] + 1e-6
    assert [(row.call_id, row.feedback) for row in join_log(tmp_path / "log")] == [("c1", 1.0)]
    desk.remember(make_decision("c2", ts=now - 5))  # clocks that agree: stamped when taken
    desk.accept("c2", 0.5, now=now)
    writer.flush()
    assert {r["call_id"]: r["ts"] for r in feedback_in(tmp_path / "log")}["c2"] == now


def test_across_workers_feedback_on_a_clock_behind_the_decisions_is_claimed_after_it(tmp_path, redis_server):
    settings = DecisionLogSettings(dir=str(tmp_path / "log"))
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    writer = DecisionLogWriter(settings, client)
    try:
        now = time.time()
        decision = make_decision("c1", ts=now + 0.5)  # routed on an instance whose clock runs ahead
        writer.submit(decision)
        assert writer.flush()
        behind = FeedbackDesk(settings, writer.submit, client)
        assert behind.accept("c1", 1.0, now=now)["call_id"] == "c1"
        assert float(client.hget(settings.redis_key_prefix + "c1", "feedback")) > decision["ts"]
        assert refused(FeedbackDesk(settings, writer.submit, client), "c1", 0.0, now=now + 1).status == 409
        assert writer.flush()
    finally:
        writer.close()
    assert [(row.call_id, row.feedback) for row in join_log(tmp_path / "log")] == [("c1", 1.0)]


def test_offline_feedback_on_a_clock_behind_the_decisions_labels_it(log, tmp_path):
    settings, writer = log
    decision = make_decision("c1", ts=time.time() + 30)  # copied from a host whose clock runs ahead
    writer.submit(decision)
    writer.flush()
    append_to_log_dir(tmp_path / "log", "c1", 1.0, "cli")
    [feedback] = feedback_in(tmp_path / "log")
    assert feedback["ts"] > decision["ts"]
    assert [(row.call_id, row.feedback) for row in join_log(tmp_path / "log")] == [("c1", 1.0)]
    with pytest.raises(FeedbackError, match="already has feedback"):
        append_to_log_dir(tmp_path / "log", "c1", 0.0, "cli")
