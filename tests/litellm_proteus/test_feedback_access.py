"""Who may send feedback (``decision_log.feedback_from``), call ids clients choose (collisions, ids
that look like index suffixes), what the feedback index keeps of a decision (no prompt), and what an
outcome keeps of an upstream error without ``log_prompts``."""

from __future__ import annotations

import json
import time

import pytest

from litellm_proteus.attempts import Attempt, breadcrumb_error, error_text
from litellm_proteus.config import DecisionLogSettings, ProteusConfig, ProteusConfigError, RedisSettings
from litellm_proteus.decision_log import (DecisionLogWriter, index_entry, iter_records, outcome_record, prompt_sha256,
                                          redis_client)
from litellm_proteus.feedback import IN_PROCESS, FeedbackCaller, FeedbackDesk, FeedbackError
from litellm_proteus.tiers import hash_key

from .test_decision_log import make_decision

ALICE, BOB = hash_key("sk-alice"), hash_key("sk-bob")


def decision(call_id: str, key_hash: str | None = ALICE, **kwargs) -> dict:
    return {**make_decision(call_id, ts=kwargs.pop("ts", time.time() - 1), **kwargs), "key_hash": key_hash}


def caller(key: str | None, admin: bool = False) -> FeedbackCaller:
    return FeedbackCaller(None if key is None else hash_key(key), admin)


def refused(desk: FeedbackDesk, *args, **kwargs) -> FeedbackError:
    with pytest.raises(FeedbackError) as info:
        desk.accept(*args, **kwargs)
    return info.value


@pytest.fixture
def log(tmp_path):
    made = []

    def make(redis=None, **overrides):
        settings = DecisionLogSettings(dir=str(tmp_path / "log"), **overrides)
        writer = DecisionLogWriter(settings, redis)
        made.append(writer)
        return settings, writer, FeedbackDesk(settings, writer.submit, redis)

    yield make
    for writer in made:
        writer.close()


def feedback_records(tmp_path) -> list[dict]:
    return [r for r in iter_records(tmp_path / "log") if r["type"] == "feedback"]


# -- 1. who may send feedback ---------------------------------------------------------------------------
def test_by_default_only_the_requesting_key_or_an_admin_may_score_a_call_and_a_refusal_records_nothing(log, tmp_path):
    settings, writer, desk = log()
    assert settings.feedback_from == "owner"
    for call_id in ("a1", "a2"):
        desk.remember(decision(call_id))
    error = refused(desk, "a1", 1.0, caller=caller("sk-bob"))
    assert (error.status, error.param) == (403, "call_id")
    assert "decision_log.feedback_from is 'owner'" in str(error) and "the key that made the request" in str(error)
    assert refused(desk, "a1", 1.0, caller=caller(None)).status == 403  # a keyless caller owns no keyed call
    writer.flush()
    assert feedback_records(tmp_path) == []  # nothing recorded: the owner's score still goes in
    assert desk.accept("a1", 0.5, caller=caller("sk-alice"))["call_id"] == "a1"
    assert desk.accept("a2", 0.5, caller=caller("sk-bob", admin=True))["call_id"] == "a2"  # a proxy admin
    writer.flush()
    assert [r["call_id"] for r in feedback_records(tmp_path)] == ["a1", "a2"]


def test_admin_rule_takes_only_admins_and_any_rule_takes_every_key(log):
    _, _, admins = log(feedback_from="admin")
    admins.remember(decision("a"))
    error = refused(admins, "a", 1.0, caller=caller("sk-alice"))  # not even the owner
    assert error.status == 403 and "only a proxy admin" in str(error)
    assert admins.accept("a", 1.0, caller=caller("sk-master", admin=True))["call_id"] == "a"
    _, _, anyone = log(feedback_from="any")
    anyone.remember(decision("b"))
    assert anyone.accept("b", 1.0, caller=caller("sk-bob"))["call_id"] == "b"


def test_in_process_feedback_counts_as_an_admin(log):
    _, _, desk = log(feedback_from="admin")
    desk.remember(decision("a"))
    assert IN_PROCESS.admin and desk.accept("a", 1.0)["call_id"] == "a"


def test_feedback_from_is_validated_like_every_setting():
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse({"decision_log": {"dir": "x", "feedback_from": "owners"}})
    assert "routing_strategy_args.decision_log.feedback_from: Input should be 'owner', 'admin' or 'any'" in str(info.value)


def test_the_route_names_the_caller_by_the_hash_the_decision_log_stores():
    from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
    from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

    from litellm_proteus.router_strategy.feedback_route import caller_of

    # what LiteLLM's auth (a virtual key, the static_keys custom_auth) returns: the key's hash
    assert caller_of(UserAPIKeyAuth(api_key=hash_key("sk-alice"))) == FeedbackCaller(ALICE, False)
    master = UserAPIKeyAuth(api_key=LITELLM_PROXY_MASTER_KEY_ALIAS, user_role=LitellmUserRoles.PROXY_ADMIN)
    assert caller_of(master) == FeedbackCaller(hash_key(LITELLM_PROXY_MASTER_KEY_ALIAS), True)
    internal = UserAPIKeyAuth(api_key=hash_key("sk-bob"), user_role=LitellmUserRoles.INTERNAL_USER)
    assert caller_of(internal) == FeedbackCaller(BOB, False)


def test_the_owner_check_holds_on_a_worker_that_did_not_route_the_call(log, tmp_path, redis_server):
    client_a = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    client_b = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    _, writer_a, desk_a = log(client_a)  # the worker that routed Alice's call
    _, writer_b, desk_b = log(client_b)
    record = decision("shared")
    desk_a.remember(record)
    writer_a.submit(record)
    assert writer_a.flush()
    assert refused(desk_b, "shared", 0.0, caller=caller("sk-bob")).status == 403  # from Redis, with its key hash
    assert desk_b.accept("shared", 1.0, caller=caller("sk-alice"))["call_id"] == "shared"
    assert refused(desk_a, "shared", 1.0, caller=caller("sk-alice")).status == 409


# -- 2. client-chosen call ids ----------------------------------------------------------------------------
def test_call_ids_that_look_like_index_suffixes_are_plain_unknown_ids(log, redis_server):
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    _, writer, desk = log(client)
    for record in (decision("A"), decision("order-2002:feedback"), decision("B")):
        desk.remember(record)
        writer.submit(record)
    writer.submit(outcome_record(call_id="B", deployment_id="d2", success=False, response_cost=None, latency_ms=1.0,
                                 error="boom"), ALICE)
    assert writer.flush()
    assert desk.accept("A", 1.0, caller=caller("sk-alice"))["call_id"] == "A"
    _, _, other_worker = log(client)  # finds everything through Redis only
    for call_id in ("A:feedback", "A:outcome", "B:outcome", "order-2002", "B:decision"):
        error = refused(other_worker, call_id, 1.0, caller=caller("sk-alice"))
        assert error.status == 404, (call_id, error)
    # the decision "order-2002:feedback" marked nothing scored: its own feedback goes in once
    assert other_worker.accept("order-2002:feedback", 1.0, caller=caller("sk-alice"))["call_id"] == "order-2002:feedback"
    assert refused(other_worker, "order-2002:feedback", 1.0, caller=caller("sk-alice")).status == 409
    assert refused(other_worker, "B", 1.0, caller=caller("sk-alice")).status == 409  # B's own outcome: its pick failed


def test_an_index_of_string_keys_from_an_earlier_release_is_no_error(log, redis_server):
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    client.set("proteus:decision:old", json.dumps(decision("old")))
    client.set("proteus:decision:old:feedback", "1")
    _, writer, desk = log(client)
    assert refused(desk, "old", 1.0).status == 404
    assert refused(desk, "old:feedback", 1.0).status == 404
    record = decision("old")  # the same id routed again: indexed over the old string
    desk.remember(record)
    writer.submit(record)
    assert writer.flush()
    _, _, other = log(client)
    assert other.accept("old", 1.0, caller=caller("sk-alice"))["call_id"] == "old"


def test_the_first_key_owns_a_call_id_in_memory(log):
    _, _, desk = log()
    first, retry, other = decision("same", ts=time.time() - 3), decision("same", ts=time.time() - 2), \
        decision("same", key_hash=BOB, ts=time.time() - 1)
    assert desk.remember(first) and desk.remember(retry)  # the same key routes its call again: updated
    assert desk.remember(other) is False and desk.conflicts == 1  # another key's request: not taken
    assert desk.lookup("same") == index_entry(retry)
    desk.settle(outcome_record(call_id="same", deployment_id="d2", success=False, response_cost=None, latency_ms=1.0,
                               error="bob's call failed"), BOB)  # the other key's outcome: not this call's
    assert refused(desk, "same", 1.0, caller=caller("sk-bob")).status == 403
    assert desk.accept("same", 1.0, caller=caller("sk-alice"))["call_id"] == "same"


def test_the_first_key_owns_a_call_id_on_every_worker(log, redis_server):
    client_a = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    client_b = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    _, writer_a, desk_a = log(client_a)
    _, writer_b, desk_b = log(client_b)
    alice = decision("order-1", ts=time.time() - 2)
    desk_a.remember(alice)
    writer_a.submit(alice)
    assert writer_a.flush()
    bob = decision("order-1", key_hash=BOB, ts=time.time() - 1)  # the same id sent by Bob to another worker
    assert desk_b.remember(bob)  # that worker had not seen it: the index decides
    writer_b.submit(bob)
    writer_b.submit(outcome_record(call_id="order-1", deployment_id="d2", success=False, response_cost=None,
                                   latency_ms=1.0, error="bob's call failed"), BOB)
    assert writer_b.flush()
    assert writer_b.index_conflicts == 1 and writer_a.index_conflicts == 0
    indexed = json.loads(client_a.hget("proteus:decision:order-1", "decision"))
    assert indexed["key_hash"] == ALICE and client_a.hget("proteus:decision:order-1", "outcome") is None
    assert refused(desk_b, "order-1", 1.0, caller=caller("sk-bob")).status == 403  # even where Bob's call ran
    assert desk_b.accept("order-1", 1.0, caller=caller("sk-alice"))["key_hash"] == ALICE


def test_a_call_id_reused_for_another_prompt_takes_its_own_feedback_in_memory(log):
    _, _, desk = log()
    first = decision("reused", ts=time.time() - 3)
    desk.remember(first)
    assert desk.accept("reused", 1.0)["prompt_sha256"] == first["prompt_sha256"]
    assert refused(desk, "reused", 0.0).status == 409
    time.sleep(0.002)  # routed after the first request's score
    again = {**decision("reused", ts=time.time()), "prompt_sha256": prompt_sha256("another question")}
    assert desk.remember(again)  # another prompt under the id: another request, scored afresh
    assert desk.accept("reused", 0.0)["prompt_sha256"] == again["prompt_sha256"]
    assert refused(desk, "reused", 1.0).status == 409


def test_a_call_id_reused_for_the_same_prompt_after_its_feedback_is_another_request_in_memory(log):
    _, _, desk = log()
    first, retry = decision("asked-twice", ts=time.time() - 3), decision("asked-twice", ts=time.time() - 2.5)
    assert desk.remember(first) and desk.remember(retry)  # a retry before feedback: one request
    desk.accept("asked-twice", 1.0)
    assert refused(desk, "asked-twice", 1.0).status == 409
    time.sleep(0.002)
    again = decision("asked-twice", ts=time.time())  # the same prompt asked again after its score
    assert desk.remember(again)
    assert desk.accept("asked-twice", 0.0)["ts"] == again["ts"]  # as call_requests reads the log
    assert refused(desk, "asked-twice", 0.0).status == 409


def test_a_call_id_reused_for_another_prompt_takes_its_own_feedback_on_every_worker(log, redis_server):
    clients = [redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000)) for _ in range(3)]
    (_, writer, desk), (_, _, worker_b), (_, _, worker_c) = (log(client) for client in clients)
    first = decision("reused-2", ts=time.time() - 3)
    desk.remember(first)
    writer.submit(first)
    assert writer.flush()
    assert worker_b.accept("reused-2", 1.0)["prompt_sha256"] == first["prompt_sha256"]
    assert refused(worker_c, "reused-2", 1.0).status == 409  # the index holds the first request's score
    time.sleep(0.002)  # routed after the first request's score
    again = {**decision("reused-2", ts=time.time()), "prompt_sha256": prompt_sha256("another question")}
    desk.remember(again)
    writer.submit(again)
    assert writer.flush()
    assert clients[0].hget("proteus:decision:reused-2", "feedback") is None  # the new request's check is fresh
    assert worker_c.accept("reused-2", 0.0)["prompt_sha256"] == again["prompt_sha256"]
    assert refused(worker_c, "reused-2", 0.0).status == 409


def test_a_call_id_reused_for_the_same_prompt_after_its_feedback_is_another_request_on_every_worker(log, redis_server):
    clients = [redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000)) for _ in range(2)]
    (_, writer, desk), (_, _, worker_b) = (log(client) for client in clients)
    first, retry = decision("asked-twice-2", ts=time.time() - 3), decision("asked-twice-2", ts=time.time() - 2)
    desk.remember(first)
    assert desk.accept("asked-twice-2", 1.0)["ts"] == first["ts"]  # scored before the writer indexed it
    writer.submit(first)
    writer.submit(retry)  # a retry routed before the score, on a worker whose writer lags
    assert writer.flush()  # decisions made before the score, indexed after it, keep the score
    assert refused(worker_b, "asked-twice-2", 1.0).status == 409
    assert refused(desk, "asked-twice-2", 1.0).status == 409
    time.sleep(0.002)
    again = decision("asked-twice-2", ts=time.time())  # the same prompt, asked again after the score
    desk.remember(again)
    writer.submit(again)
    assert writer.flush()
    assert worker_b.accept("asked-twice-2", 0.0)["ts"] == again["ts"]  # as call_requests reads the log
    assert refused(desk, "asked-twice-2", 0.0).status == 409

def test_a_score_is_refused_again_by_the_worker_that_took_it_after_redis_restarts_empty(log, redis_server):
    from .conftest import start_redis

    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=300))
    _, writer, desk = log(client)
    first = decision("restarted-1", ts=time.time() - 2)
    desk.remember(first)
    writer.submit(first)
    assert writer.flush()
    desk.accept("restarted-1", 1.0)  # claimed in Redis
    redis_server.stop()
    restarted = start_redis(redis_server.port)  # no persistence: every claim is gone
    try:
        assert client.hget("proteus:decision:restarted-1", "feedback") is None
        assert refused(desk, "restarted-1", 0.0).status == 409  # this worker's memory still knows
    finally:
        restarted.stop()


def test_a_score_taken_while_redis_was_down_is_told_to_redis_when_it_answers_again(log, tmp_path):
    from .conftest import start_redis

    server = start_redis(directory=tmp_path)
    clients = [redis_client(RedisSettings(url=server.url, timeout_ms=300)) for _ in range(2)]
    (_, writer, desk), (_, _, other_worker) = (log(client) for client in clients)
    first = decision("outage-1", ts=time.time() - 2)
    desk.remember(first)
    writer.submit(first)
    assert writer.flush()
    clients[0].save()  # the index survives the outage; no claim is in it yet
    server.stop()
    restarted = None
    try:
        desk.accept("outage-1", 1.0)  # Redis down: taken on this worker's memory, its record queued
        assert refused(desk, "outage-1", 1.0).status == 409
        writer.flush()  # the writer cannot tell Redis yet: the index entry waits in its backlog
        restarted = start_redis(server.port, tmp_path)
        assert clients[1].hget("proteus:decision:outage-1", "feedback") is None
        time.sleep(writer.retry_after_s + 0.1)
        later = decision("outage-2", ts=time.time())
        desk.remember(later)
        writer.submit(later)  # the writer's next write sends its backlog first
        assert writer.flush()
        assert clients[1].hget("proteus:decision:outage-1", "feedback") is not None
        assert refused(other_worker, "outage-1", 0.0).status == 409  # every worker refuses a second score
    finally:
        for running in (restarted, server):
            if running is not None:
                running.stop()


# -- 3. memory -----------------------------------------------------------------------------------------------
def test_the_index_keeps_no_prompt_and_only_the_chosen_candidate(log, tmp_path, redis_server):
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    prompt = "secret " * 150_000  # ~1 MB
    settings, writer, desk = log(client, log_prompts=True, max_bytes=4 * 2**20)
    from litellm_proteus.decision_log import LoggedCandidate, decision_record

    record = decision_record(
        call_id="big", key_hash=ALICE, tier="standard", tau_source="default", state_key="tier:standard", tau=0.82,
        tau_requested=None, tau_effective=0.82, delta=0.0, mu=0.5, model_group="proteus-auto",
        candidates=[LoggedCandidate("d1", 0, "cheap", 1e-4, 0.6), LoggedCandidate("d2", 1, "strong", 1e-3, 0.8, 0.05)],
        chosen=1, propensity=1.0, prompt=prompt, artifact="sha", log_prompt=True,
    )
    assert desk.remember(record) and writer.submit(record) and writer.flush()
    kept = desk._decisions["big"]
    assert "secret" not in json.dumps(kept) and len(json.dumps(kept)) < 1000
    assert kept["candidates"] == [record["candidates"][1]] and kept["chosen"] == 0
    indexed = client.hget("proteus:decision:big", "decision")
    assert "secret" not in indexed and len(indexed) < 1000
    assert [r.get("prompt") == prompt for r in iter_records(tmp_path / "log")] == [True]  # the log has it
    answer = desk.accept("big", 1.0, caller=caller("sk-alice"))
    assert (answer["state_key"], answer["tau"], answer["candidates"][0]["deployment_id"]) == ("tier:standard", 0.82, "d2")


# -- 4. upstream error messages ------------------------------------------------------------------------------
def test_without_log_prompts_an_error_keeps_its_type_and_status_not_its_message():
    import litellm

    upstream = litellm.BadRequestError(message="invalid request: 'tell me the secret plan' is too long",
                                       model="m", llm_provider="openai")
    assert "secret plan" in error_text(upstream, True)
    kept = error_text(upstream)
    assert "secret plan" in kept  # the default keeps the message (callers with log_prompts)
    redacted = error_text(upstream, False)
    assert "secret" not in redacted and redacted.startswith("BadRequestError (HTTP 400, litellm.BadRequestError)")
    assert error_text(ValueError("the prompt"), False).startswith("ValueError (message not logged")
    crumbs = [{"previous_models": [{"deployment_id": "d1", "exception_type": "BadRequestError",
                                    "exception_string": "the secret plan"}]}]
    assert "secret" in breadcrumb_error(crumbs, "d1")
    assert breadcrumb_error(crumbs, "d1", False).startswith("BadRequestError (message not logged")


@pytest.mark.parametrize("log_prompts", [False, True])
def test_an_outcome_keeps_the_upstream_message_only_with_log_prompts(tmp_path, log_prompts):
    from types import SimpleNamespace

    import litellm

    from litellm_proteus.router_strategy import serving_log

    settings = DecisionLogSettings(dir=str(tmp_path / "log"), log_prompts=log_prompts)
    writer = DecisionLogWriter(settings)
    try:
        owner = SimpleNamespace(config=SimpleNamespace(decision_log=settings), decision_log=writer,
                                feedback_desk=FeedbackDesk(settings, writer.submit), shadow=None, replaced_by=None)
        serving_log.attempts.open(("err-1", "request-1"), Attempt("d1", owner, ALICE))
        upstream = litellm.BadRequestError(message="rejected: 'the secret plan'", model="m", llm_provider="openai")
        serving_log.log_request_failed({"litellm_call_id": "err-1", "metadata": {"proteus": {"request": "request-1"}}}, upstream)
        writer.flush()
        [outcome] = [r for r in iter_records(tmp_path / "log") if r["type"] == "outcome"]
        assert ("secret plan" in outcome["error"]) is log_prompts and "BadRequestError" in outcome["error"]
    finally:
        writer.close()
