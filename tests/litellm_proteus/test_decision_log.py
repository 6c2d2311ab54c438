"""The decision log writer (rotation, bounded queue, Redis stream and index) and its reader."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shutil
import threading
import time

import pytest
import redis as redis_lib

from litellm_proteus import decision_log
from litellm_proteus.config import DecisionLogSettings, ProteusConfig, ProteusConfigError, RedisSettings
from litellm_proteus.decision_log import (
    SCHEMA,
    DecisionLogWriter,
    LoggedCandidate,
    RotatingJsonl,
    decision_record,
    feedback_record,
    iter_records,
    index_entry,
    join_log,
    log_files,
    outcome_record,
    prompt_sha256,
    redis_client,
)


def make_decision(call_id: str, ts: float | None = None, tier: str = "standard", p: float = 0.8) -> dict:
    return decision_record(
        call_id=call_id, key_hash="abc", tier=tier, tau_source="default", state_key=f"tier:{tier}", tau=0.82,
        tau_requested=None, tau_effective=0.82, delta=0.0, mu=0.5, model_group="proteus-auto",
        candidates=[LoggedCandidate("d1", 0, "cheap", 1e-4, 0.6), LoggedCandidate("d2", 1, "strong", 1e-3, p)],
        chosen=1, propensity=1.0, prompt="What is 2+2?", artifact="sha", log_prompt=False, ts=ts,
    )


def settings(tmp_path, **overrides) -> DecisionLogSettings:
    return DecisionLogSettings(dir=str(tmp_path / "log"), **overrides)


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_records_carry_the_schema_and_hash_the_prompt_unless_prompts_are_logged():
    record = make_decision("c1")
    assert record["schema"] == SCHEMA == 2 and record["type"] == "decision"
    assert "prompt" not in record and len(record["prompt_sha256"]) == 64
    assert record["candidates"][1] == {"deployment_id": "d2", "slot": 1, "model": "strong", "cost_usd": 1e-3, "p": 0.8,
                                    "p_correction": 0.0}
    with_prompt = decision_record(**{**_decision_kwargs(), "log_prompt": True})
    assert with_prompt["prompt"] == "What is 2+2?"


def _decision_kwargs() -> dict:
    return dict(
        call_id="c", key_hash=None, tier="t", tau_source="request", state_key="tier:t", tau=0.9, tau_requested=0.9,
        tau_effective=0.9, delta=0.0, mu=0.9, model_group="g", candidates=[LoggedCandidate("d", 0, "m", 0.0, 0.9)],
        chosen=0, propensity=1.0, prompt="What is 2+2?", artifact="", log_prompt=False,
    )


def test_files_rotate_by_size_and_keep_at_most_max_files(tmp_path):
    writer = DecisionLogWriter(settings(tmp_path, max_bytes=4096, max_files=6))
    for i in range(100):  # ~540 bytes each, 7 a file: 15 files' worth, numbered 0..14
        assert writer.submit(make_decision(f"call-{i}", ts=1000.0 + i))
    assert writer.flush()
    writer.close()
    files = log_files(tmp_path / "log")
    assert [f.name.rsplit("-", 1)[1] for f in files] == ["9.jsonl", "10.jsonl", "11.jsonl", "12.jsonl", "13.jsonl", "14.jsonl"]
    assert all(f.stat().st_size <= 4096 for f in files)
    ids = [r["call_id"] for r in iter_records(tmp_path / "log")]
    assert ids == [f"call-{i}" for i in range(100 - len(ids), 100)]  # the newest, in order (file -9 before -10)


def test_a_half_written_last_line_is_skipped(tmp_path):
    writer = DecisionLogWriter(settings(tmp_path))
    writer.submit(make_decision("whole"))
    writer.flush()
    writer.close()
    [path] = log_files(tmp_path / "log")
    with open(path, "a") as handle:
        handle.write(json.dumps(make_decision("torn"))[:57])
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == ["whole"]


def test_a_full_queue_drops_and_counts_while_redis_stalls_the_writer(tmp_path, redis_server):
    from prometheus_client import REGISTRY

    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=5000))
    writer = DecisionLogWriter(settings(tmp_path, queue_size=2, redis_stream="proteus:decisions"), client)
    before = REGISTRY.get_sample_value("proteus_decision_log_dropped_total") or 0.0
    admin = redis_lib.Redis.from_url(redis_server.url)
    admin.execute_command("CLIENT", "PAUSE", 1500, "WRITE")  # the writer's XADD blocks ~1.5 s
    assert writer.submit(make_decision("first"))
    assert wait_until(lambda: writer._queue.qsize() == 0)  # the writer holds "first", stalled on Redis
    accepted = [writer.submit(make_decision(f"next-{i}")) for i in range(4)]
    assert accepted == [True, True, False, False]
    assert writer.dropped == 2
    assert REGISTRY.get_sample_value("proteus_decision_log_dropped_total") == before + 2
    assert writer.flush()
    writer.close()
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == ["first", "next-0", "next-1"]
    assert admin.xlen("proteus:decisions") == 3


def test_redis_stream_and_index_and_redis_dying_leaves_the_files_whole(tmp_path, redis_server):
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=200))
    writer = DecisionLogWriter(settings(tmp_path, redis_stream="proteus:decisions", redis_stream_maxlen=1000), client, retry_after_s=0.2)
    writer.submit(make_decision("a"))
    writer.submit(outcome_record(call_id="a", deployment_id="d2", success=True, response_cost=0.01, latency_ms=12.0, error=None,
                                 response="the answer"))
    assert writer.flush()
    admin = redis_lib.Redis.from_url(redis_server.url, decode_responses=True)
    entries = admin.xrange("proteus:decisions")
    assert [json.loads(fields["record"])["type"] for _, fields in entries] == ["decision", "outcome"]
    assert json.loads(admin.hget("proteus:decision:a", "decision"))["call_id"] == "a"
    indexed = json.loads(admin.hget("proteus:decision:a", "outcome"))  # feedback checks the pick answered
    assert (indexed["deployment_id"], indexed["success"]) == ("d2", True) and "response" not in indexed
    assert json.loads(entries[1][1]["record"])["response"] == "the answer"  # the stream has the whole record
    assert 0 < admin.ttl("proteus:decision:a") <= 7 * 86400
    redis_server.stop()
    for i in range(5):
        writer.submit(make_decision(f"after-{i}"))
    assert writer.flush()
    writer.close()
    assert writer.redis_skipped >= 5
    assert [r["call_id"] for r in iter_records(tmp_path / "log") if r["type"] == "decision"] == ["a"] + [f"after-{i}" for i in range(5)]


class TimesOutFirst:
    """A real Redis client whose first ``failures`` pipeline executions time out before sending,
    as a reply that misses the socket timeout on a busy host does."""

    def __init__(self, url: str, failures: int):
        self.client, self.failures = redis_lib.Redis.from_url(url, decode_responses=True), failures

    def pipeline(self, transaction: bool = True):
        pipe, outer = self.client.pipeline(transaction=transaction), self

        class Flaky:
            def __getattr__(self, name):
                return getattr(pipe, name)

            def execute(self):
                if outer.failures > 0:
                    outer.failures -= 1
                    raise redis_lib.TimeoutError("Timeout reading from socket")
                return pipe.execute()

        return Flaky()


def test_index_entries_a_failed_write_missed_are_sent_with_the_next_one(tmp_path, redis_server):
    writer = DecisionLogWriter(settings(tmp_path, redis_index=True), TimesOutFirst(redis_server.url, 1), retry_after_s=0.0)
    writer.submit(make_decision("lost-reply"))
    assert writer.flush()
    admin = redis_lib.Redis.from_url(redis_server.url, decode_responses=True)
    assert admin.hget("proteus:decision:lost-reply", "decision") is None  # the write timed out
    writer.submit(make_decision("next"))
    assert writer.flush()
    writer.close()
    assert {json.loads(admin.hget(f"proteus:decision:{c}", "decision"))["call_id"] for c in ("lost-reply", "next")} == {"lost-reply", "next"}
    assert writer.redis_skipped == 0  # nothing the index needs was given up


def test_the_index_backlog_is_bounded_by_the_queue_size(tmp_path, redis_server):
    writer = DecisionLogWriter(settings(tmp_path, redis_index=True, queue_size=3), TimesOutFirst(redis_server.url, 10**6),
                               retry_after_s=0.0)
    for i in range(5):
        writer.submit(make_decision(f"d{i}"))
        assert writer.flush()
    assert len(writer._index_backlog) == 3 and writer.redis_skipped == 2  # the oldest two given up, counted
    assert [entry[1] for entry in writer._index_backlog] == [f"proteus:decision:d{i}" for i in (2, 3, 4)]
    writer.close()
    assert writer.redis_skipped == 5 and not writer._index_backlog  # what closing could not send is counted


def test_a_submit_racing_close_is_written_or_refused_never_lost(tmp_path):
    """Many threads submit while the writer closes: every record submit accepted is in the file."""
    writer = DecisionLogWriter(settings(tmp_path, queue_size=100_000))
    accepted, start = [], threading.Barrier(5)

    def submit_many(n):
        start.wait()
        for i in range(400):
            if writer.submit(make_decision(f"t{n}-{i}")):
                accepted.append(f"t{n}-{i}")

    threads = [threading.Thread(target=submit_many, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    start.wait()
    writer.close()
    for thread in threads:
        thread.join()
    written = {r["call_id"] for r in iter_records(tmp_path / "log")}
    assert set(accepted) == written and writer.dropped == 4 * 400 - len(accepted)


def test_join_log_pairs_the_latest_decision_outcome_and_feedback(tmp_path):
    writer = DecisionLogWriter(settings(tmp_path))
    for record in (
        make_decision("x", ts=10.0, p=0.7),
        outcome_record(call_id="x", deployment_id="d2", success=False, response_cost=None, latency_ms=5.0, error="boom", ts=11.0),
        make_decision("x", ts=12.0, p=0.9),  # a retry decides again
        outcome_record(call_id="x", deployment_id="d2", success=True, response_cost=0.002, latency_ms=7.0, error=None, ts=13.0),
        feedback_record("x", 0.0, "api", ts=14.0),
        feedback_record("x", 1.0, "judge", ts=15.0),
        make_decision("y", ts=20.0),
        feedback_record("orphan", 1.0, "api", ts=21.0),
    ):
        writer.submit(record)
    writer.flush()
    writer.close()
    rows = join_log(tmp_path / "log")
    assert [r.call_id for r in rows] == ["x", "y"]
    x, y = rows
    assert x.decision["candidates"][1]["p"] == 0.9 and x.outcome["success"] is True and x.feedback == 1.0
    assert y.outcome is None and y.feedback is None


def test_join_log_keeps_a_call_id_with_the_first_key_that_used_it(tmp_path):
    """A client-chosen call id sent by two keys is the first key's, as in the feedback index: the
    other key's later decision replaces none of the first key's (whose retry still does)."""
    directory = tmp_path / "log"
    directory.mkdir()
    alice = {**make_decision("order-1", ts=10.0, p=0.7), "key_hash": "alice"}
    bob = {**make_decision("order-1", ts=11.0, p=0.5), "key_hash": "bob"}
    retry = {**make_decision("order-1", ts=12.0, p=0.9), "key_hash": "alice"}
    for order in ([alice, bob], [bob, alice], [alice, bob, retry]):  # files read in any order
        (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in order))
        [row] = join_log(directory)
        assert row.decision["key_hash"] == "alice"
        assert row.decision["ts"] == max(r["ts"] for r in order if r["key_hash"] == "alice")


def test_join_log_pairs_a_decision_with_the_outcome_of_its_own_pick(tmp_path):
    """A retried call has a failure outcome per failed attempt; a fallback group's answer is no pick's
    outcome, so the pick keeps its failure; schema 1 records (no deployment) read as schema 1 readers read them."""
    first = {**make_decision("retried", ts=10.0), "chosen": 0}  # d1
    directory = tmp_path / "log"
    directory.mkdir()
    records = [
        first, outcome_record(call_id="retried", deployment_id="d1", success=False, response_cost=0.0, latency_ms=1.0,
                              error="boom", ts=11.0),
        make_decision("retried", ts=12.0),  # d2
        outcome_record(call_id="retried", deployment_id="d2", success=True, response_cost=0.002, latency_ms=7.0,
                       error=None, ts=13.0),
        make_decision("fell-back", ts=20.0),
        outcome_record(call_id="fell-back", deployment_id="d2", success=False, response_cost=None, latency_ms=None,
                       error="boom", ts=21.0),
        make_decision("same-deployment", ts=30.0),  # retried on d2 itself: the first failure is not the retry's
        outcome_record(call_id="same-deployment", deployment_id="d2", success=False, response_cost=None, latency_ms=None,
                       error="boom", ts=31.0),
        make_decision("same-deployment", ts=32.0),
        {**make_decision("old", ts=40.0), "schema": 1},
        {"schema": 1, "type": "outcome", "call_id": "old", "ts": 41.0, "success": True, "response_cost": 0.5,
         "latency_ms": 1.0, "error": None},
    ]
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = {row.call_id: row for row in join_log(directory)}
    assert rows["retried"].outcome["deployment_id"] == "d2" and rows["retried"].outcome["success"] is True
    assert rows["fell-back"].outcome["success"] is False and rows["fell-back"].outcome["error"] == "boom"
    assert rows["same-deployment"].outcome is None  # its retry's outcome is not known
    assert rows["old"].outcome["response_cost"] == 0.5 and rows["old"].decision["schema"] == 1


def test_decision_log_config_errors_name_the_field():
    with pytest.raises(ProteusConfigError, match=r"decision_log: .*set dir"):
        ProteusConfig.parse({"decision_log": {}})
    with pytest.raises(ProteusConfigError, match=r"decision_log.max_bytes"):
        ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "max_bytes": 10}})
    with pytest.raises(ProteusConfigError, match=r"decision_log.redis_stream needs routing_strategy_args.redis"):
        ProteusConfig.parse({"decision_log": {"redis_stream": "s"}})
    with pytest.raises(ProteusConfigError, match=r"decision_log.bogus.*allowed: \[.*'log_prompts'"):
        ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "bogus": 1}})
    assert ProteusConfig.parse({}).decision_log is None


class FullDisk:
    """``open`` for the decision log module whose files share ``free`` bytes: a write past them puts
    what fits and fails with ENOSPC, as a filling disk does.  Truncating gives the bytes back."""

    def __init__(self, free: int):
        self.free = free
        self.failures = 0

    def open(self, path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)
        return _DiskFile(self, handle) if "a" in mode else handle  # the writer's files; reading is untouched


class _DiskFile:
    def __init__(self, disk: FullDisk, raw):
        self.disk, self.raw = disk, raw

    def write(self, data) -> int:
        data = data if isinstance(data, str) else bytes(data)  # text or binary files; the lines are ASCII
        if len(data) <= self.disk.free:
            self.disk.free -= len(data)
            return self.raw.write(data)
        part = data[: self.disk.free]
        if part:
            self.raw.write(part)
        self.disk.free = 0
        self.disk.failures += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def truncate(self, size: int) -> int:
        freed = os.fstat(self.raw.fileno()).st_size - size
        self.disk.free += max(0, freed)
        return self.raw.truncate(size)

    def fileno(self) -> int:
        return self.raw.fileno()

    def close(self) -> None:
        self.raw.close()

    def __getattr__(self, name):
        return getattr(self.raw, name)


def lines_on_disk(directory) -> list[str]:
    return [line for path in log_files(directory) for line in path.read_text().split("\n")]


def dropped_metric() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("proteus_decision_log_dropped_total") or 0.0


def test_a_full_disk_counts_every_record_it_loses_leaves_no_torn_line_and_redis_still_indexes_them(
        tmp_path, redis_server, monkeypatch, caplog):
    disk = FullDisk(free=60 * 560 + 100)  # ~60 of 200 decisions fit (each line ~540 bytes), then part of one
    monkeypatch.setattr(decision_log, "open", disk.open, raising=False)
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=5000))
    writer = DecisionLogWriter(settings(tmp_path), client)
    before = dropped_metric()
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        for i in range(200):
            assert writer.submit(make_decision(f"call-{i}"))
        assert writer.flush()
    assert disk.failures > 0
    lines = lines_on_disk(tmp_path / "log")
    assert lines[-1] == ""  # the files end with a whole line
    written = [json.loads(line)["call_id"] for line in lines if line]  # every line parses: no torn one
    assert 50 <= len(written) < 200
    assert writer.dropped == 200 - len(written)
    assert dropped_metric() == before + writer.dropped
    assert "records not written to" in caplog.text and "No space left on device" in caplog.text
    admin = redis_lib.Redis.from_url(redis_server.url, decode_responses=True)
    assert all(admin.exists(f"proteus:decision:call-{i}") for i in range(200))  # feedback still finds them all
    disk.free = 10**9  # space again: the next records are written after the last whole line
    writer.submit(make_decision("after"))
    assert writer.flush()
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == written + ["after"]
    assert writer.dropped == 200 - len(written)
    current = log_files(tmp_path / "log")[-1]
    os.truncate(current, 0)  # logrotate's copytruncate empties the file under the writer
    writer.submit(make_decision("after-truncation"))
    assert writer.flush()
    disk.free = 100  # the disk fills up during the next line
    writer.submit(make_decision("lost"))
    assert writer.flush()
    writer.close()
    data = current.read_bytes()
    assert b"\0" not in data  # cut back to the file's real end, not the size the writer had counted
    assert [json.loads(line)["call_id"] for line in data.decode().splitlines()] == ["after-truncation"]
    assert writer.dropped == 200 - len(written) + 1


def test_without_redis_a_decision_the_full_disk_lost_is_reported_unlogged(tmp_path, monkeypatch):
    disk = FullDisk(free=3 * 540)  # ~540-byte lines: 2 or 3 fit
    monkeypatch.setattr(decision_log, "open", disk.open, raising=False)
    writer = DecisionLogWriter(settings(tmp_path))
    unlogged: list[str] = []
    writer.on_unlogged = lambda record: unlogged.append(record["call_id"])  # the feedback desk forgets them
    for i in range(6):
        assert writer.submit(make_decision(f"call-{i}"))
    assert writer.flush()
    writer.close()
    written = [r["call_id"] for r in iter_records(tmp_path / "log")]
    assert 1 <= len(written) <= 3 and sorted(written + unlogged) == [f"call-{i}" for i in range(6)]
    assert writer.dropped == 6 - len(written)


def test_a_log_folder_removed_while_the_writer_runs_is_made_again_and_loses_nothing(tmp_path):
    writer = DecisionLogWriter(settings(tmp_path, max_bytes=4096))  # ~540-byte lines: 7 a file
    for i in range(3):
        writer.submit(make_decision(f"before-{i}"))
    assert writer.flush()
    shutil.rmtree(tmp_path / "log")
    for i in range(3):
        writer.submit(make_decision(f"after-{i}"))
    assert writer.flush()
    shutil.rmtree(tmp_path / "log")
    # one batch (as the writer thread drains it; the thread waits on the empty queue) that fills the
    # removed file's last 4 places, then crosses into new files
    writer._write([make_decision(f"batch-{i}") for i in range(20)])
    assert writer.flush()
    writer.close()
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == [f"batch-{i}" for i in range(20)]
    assert len(log_files(tmp_path / "log")) >= 3
    assert writer.dropped == 0


def test_a_file_deleted_after_a_rotation_inside_a_batch_gets_only_its_own_lines_again(tmp_path, monkeypatch):
    def open_and_delete_the_second(path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)
        if str(path).endswith("-1.jsonl"):
            os.unlink(path)  # deleted under the writer right away: its lines go to no file
        return handle

    monkeypatch.setattr(decision_log, "open", open_and_delete_the_second, raising=False)
    writer = DecisionLogWriter(settings(tmp_path, max_bytes=4096))
    writer._write([make_decision(f"batch-{i}") for i in range(12)])  # file -0 holds 7, file -1 (deleted) the rest
    assert writer.flush()
    writer.close()
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == [f"batch-{i}" for i in range(12)]  # none twice
    assert [f.name.rsplit("-", 1)[1] for f in log_files(tmp_path / "log")] == ["0.jsonl", "2.jsonl"]
    assert writer.dropped == 0


def test_a_file_deleted_twice_while_written_counts_its_lines_as_dropped(tmp_path, monkeypatch):
    def open_and_delete(path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)
        if not str(path).endswith("-0.jsonl"):
            os.unlink(path)
        return handle

    monkeypatch.setattr(decision_log, "open", open_and_delete, raising=False)
    files = RotatingJsonl(tmp_path, 4096, 10)
    lines = [json.dumps({"n": i, "pad": "x" * 500}) + "\n" for i in range(10)]  # 7 a file
    failed, error = files.write_lines(lines)
    files.close()
    assert (failed, error.errno) == ([7, 8, 9], errno.ENOENT)  # the last 3: in file -1, again in file -2, both deleted
    assert [json.loads(line)["n"] for path in tmp_path.glob("*.jsonl") for line in path.read_text().splitlines()] \
        == list(range(7))


def test_a_record_that_is_not_json_is_dropped_alone_and_counted(tmp_path, monkeypatch, caplog):
    import threading

    writer = DecisionLogWriter(settings(tmp_path))
    gate = threading.Event()  # the writer thread waits in its first file write: the next records form one batch
    write_files = writer._write_files
    monkeypatch.setattr(writer, "_write_files", lambda lines: gate.wait(30) and write_files(lines))
    writer.submit(make_decision("first"))
    assert wait_until(lambda: writer._queue.qsize() == 0)
    bad = make_decision("bad")
    bad["candidates"] = {object()}  # not JSON
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        for record in (make_decision("good-1"), bad, make_decision("good-2")):
            assert writer.submit(record)
        assert writer._queue.qsize() == 3
        gate.set()
        assert writer.flush()
    writer.close()
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == ["first", "good-1", "good-2"]
    assert writer.dropped == 1
    assert "cannot be written as JSON" in caplog.text


def test_a_decision_too_large_to_log_is_forgotten_by_the_feedback_desk(tmp_path):
    from litellm_proteus.feedback import FeedbackDesk, FeedbackError

    writer = DecisionLogWriter(settings(tmp_path, max_bytes=4096))
    desk = FeedbackDesk(writer.settings, writer.submit)
    writer.on_unlogged = desk.forget
    huge = make_decision("huge")
    huge["candidates"] = huge["candidates"] * 100  # over max_bytes without any text
    fine = make_decision("fine")
    for record in (huge, fine):
        desk.remember(record)
        assert writer.submit(record)
    assert writer.flush()
    with pytest.raises(FeedbackError) as info:
        desk.accept("huge", 1.0)
    assert info.value.status == 404
    assert desk.accept("fine", 1.0) == index_entry(fine)
    retried = make_decision("huge")  # a retry's decision under the same call id, remembered before the first is forgotten
    desk.remember(retried)
    desk.forget(huge)
    assert desk.lookup("huge") == index_entry(retried)
    writer.close()


def test_only_the_text_field_that_was_cut_is_marked_truncated():
    short_prompt = {**make_decision("both"), "prompt": "What is 2+2?", "response": "y" * 10_000}
    line, fitted = decision_log.fit_line(short_prompt, 4096)
    assert len(line) <= 4096 and fitted["prompt"] == "What is 2+2?" and "prompt_truncated" not in fitted
    assert fitted["response_truncated"] is True and 2000 < len(fitted["response"]) < 4096
    short_response = {**make_decision("both"), "prompt": "p" * 10_000, "response": "42"}
    line, fitted = decision_log.fit_line(short_response, 4096)
    assert len(line) <= 4096 and fitted["response"] == "42" and "response_truncated" not in json.loads(line)
    assert fitted["prompt_truncated"] is True and 2000 < len(fitted["prompt"]) < 4096
    both_long = {**make_decision("both"), "prompt": "p" * 10_000, "response": "r" * 10_000}
    line, fitted = decision_log.fit_line(both_long, 4096)
    assert len(line) <= 4096 and fitted["prompt_truncated"] is True and fitted["response_truncated"] is True


def test_a_record_over_max_bytes_keeps_the_head_of_its_text_marked_and_counted_or_is_dropped(tmp_path):
    from prometheus_client import REGISTRY

    prompt = "Summarise this: " + "x" * 300_000
    big = decision_record(**{**_decision_kwargs(), "call_id": "big", "prompt": prompt, "log_prompt": True})
    accented = decision_record(**{**_decision_kwargs(), "call_id": "accented", "prompt": "é" * 300_000, "log_prompt": True})
    answer = outcome_record(call_id="big", deployment_id="d2", success=True, response_cost=0.1, latency_ms=1.0, error=None, response="y" * 300_000)
    huge = make_decision("too-many-candidates")
    huge["candidates"] = huge["candidates"] * 100  # ~9 KB without any text field: cannot fit
    truncated_before = REGISTRY.get_sample_value("proteus_decision_log_truncated_total") or 0.0
    dropped_before = dropped_metric()
    writer = DecisionLogWriter(settings(tmp_path, max_bytes=4096))
    for record in (make_decision("small-1"), big, accented, answer, huge, make_decision("small-2")):
        assert writer.submit(record)
    assert writer.flush()
    writer.close()
    assert all(path.stat().st_size <= 4096 for path in log_files(tmp_path / "log"))
    records = {(r["type"], r["call_id"]): r for r in iter_records(tmp_path / "log")}
    assert sorted(records) == [("decision", "accented"), ("decision", "big"), ("decision", "small-1"),
                               ("decision", "small-2"), ("outcome", "big")]
    logged = records[("decision", "big")]
    assert logged["prompt_truncated"] is True and 3000 < len(logged["prompt"]) < 4096
    assert prompt.startswith(logged["prompt"]) and logged["prompt_sha256"] == prompt_sha256(prompt)
    assert records[("decision", "accented")]["prompt_truncated"] is True
    assert set(records[("decision", "accented")]["prompt"]) == {"é"}
    assert records[("outcome", "big")]["response_truncated"] is True and records[("outcome", "big")]["response"].startswith("yyy")
    assert "prompt_truncated" not in records[("decision", "small-1")]
    assert (writer.truncated, writer.dropped) == (3, 1)
    assert REGISTRY.get_sample_value("proteus_decision_log_truncated_total") == truncated_before + 3
    assert dropped_metric() == dropped_before + 1


def test_rotating_files_refuse_a_line_over_max_bytes(tmp_path):
    files = RotatingJsonl(tmp_path, 4096, 3, prefix="shadow-")
    assert files.write('{"a":1}\n') is True
    assert files.write('{"b":"' + "z" * 5000 + '"}\n') is False
    assert files.write('{"c":3}\n') is True
    files.close()
    [path] = tmp_path.glob("shadow-*.jsonl")
    assert path.read_text() == '{"a":1}\n{"c":3}\n'


@pytest.mark.parametrize(("line", "error"), [
    ("{not json", r":2: not a JSON record"),
    ("42", r":2: each line must be a JSON object"),
    (json.dumps({**make_decision("future"), "schema": 3}), r":2: field 'schema' is 3; supported: 1, 2"),
    (json.dumps({**make_decision("odd"), "type": "verdict"}), r":2: field 'type' is 'verdict'"),
])
def test_a_line_readers_cannot_read_is_an_error_naming_its_file_and_line(tmp_path, line, error):
    """Only a torn last line is skipped: a bad line elsewhere (or a complete last line) is refused, as
    ``proteus train`` refuses it, by ``compliance`` and ``feedback --log`` alike."""
    from litellm_proteus.feedback import append_to_log_dir

    directory = tmp_path / "log"
    directory.mkdir()
    path = directory / "decisions-20260101T000000-1-0.jsonl"
    for text in (f"{json.dumps(make_decision('a'))}\n{line}\n{json.dumps(make_decision('b'))}\n",
                 f"{json.dumps(make_decision('a'))}\n{line}\n"):
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"decisions-20260101T000000-1-0\.jsonl{error}"):
            join_log(directory)
        with pytest.raises(ValueError, match=rf"decisions-20260101T000000-1-0\.jsonl{error}"):
            append_to_log_dir(directory, "a", 1.0, "cli")
    assert log_files(directory) == [path]  # nothing written


def test_a_torn_last_line_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    directory = tmp_path / "log"
    directory.mkdir()
    path = directory / "decisions-20260101T000000-1-0.jsonl"
    path.write_text(f"{json.dumps(make_decision('a'))}\n\n{json.dumps(make_decision('b'))[:40]}")
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        assert [r["call_id"] for r in iter_records(directory)] == ["a"]
    assert "decisions-20260101T000000-1-0.jsonl:3: skipped the last line" in caplog.text


def test_a_call_id_reused_by_another_request_keeps_each_request_with_its_own_outcome_and_feedback(tmp_path, caplog):
    """A client sending x-litellm-call-id: fixed-id-1 twice: feedback sent for the first request labels
    it, not the later decision about another prompt; a retry (same prompt, before any feedback) is
    still the same request."""
    haiku = {**make_decision("fixed-id-1", ts=10.0), "prompt_sha256": prompt_sha256("Write a haiku")}
    retry = {**haiku, "ts": 12.0}
    france = {**make_decision("fixed-id-1", ts=20.0), "chosen": 0,
              "prompt_sha256": prompt_sha256("What is the capital of France?")}
    again = {**france, "ts": 30.0}  # the same prompt again, after the call's feedback: another request
    directory = tmp_path / "log"
    directory.mkdir()
    records = [
        haiku, outcome_record(call_id="fixed-id-1", deployment_id="d2", success=False, response_cost=None,
                              latency_ms=1.0, error="boom", ts=11.0),
        retry, outcome_record(call_id="fixed-id-1", deployment_id="d2", success=True, response_cost=0.002,
                              latency_ms=7.0, error=None, ts=13.0),
        feedback_record("fixed-id-1", 0.0, "cli", ts=14.0),
        france, outcome_record(call_id="fixed-id-1", deployment_id="d1", success=True, response_cost=0.001,
                               latency_ms=2.0, error=None, ts=21.0),
        feedback_record("fixed-id-1", 1.0, "cli", ts=22.0),
        again,
    ]
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        rows = join_log(directory)
    assert "1 call id(s) were reused by distinct requests" in caplog.text
    assert [(r.decision["ts"], r.feedback) for r in rows] == [(12.0, 0.0), (20.0, 1.0), (30.0, None)]
    assert [r.outcome["response_cost"] if r.outcome else None for r in rows] == [0.002, 0.001, None]
    picks = join_log(directory, every_pick=True)
    assert [(p.decision["ts"], p.outcome["success"] if p.outcome else None) for p in picks] == [
        (10.0, False), (12.0, True), (20.0, True), (30.0, None)]


def test_feedback_log_scores_the_latest_request_of_a_reused_call_id(tmp_path):
    from litellm_proteus.feedback import FeedbackError, append_to_log_dir

    directory = tmp_path / "log"
    directory.mkdir()
    haiku = {**make_decision("fixed-id-1", ts=10.0), "prompt_sha256": prompt_sha256("Write a haiku")}
    france = {**make_decision("fixed-id-1", ts=20.0), "prompt_sha256": prompt_sha256("What is the capital of France?")}
    records = [haiku, feedback_record("fixed-id-1", 0.0, "cli", ts=11.0), france]
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert append_to_log_dir(directory, "fixed-id-1", 1.0, "cli")["ts"] == 20.0  # not a 409: France has none
    with pytest.raises(FeedbackError, match="already has feedback"):
        append_to_log_dir(directory, "fixed-id-1", 1.0, "cli")
    assert [(r.decision["ts"], r.feedback) for r in join_log(directory)] == [(10.0, 0.0), (20.0, 1.0)]


# -- values a log line or Redis cannot hold ------------------------------------------------------------
def test_feedback_max_age_s_is_bounded_to_an_expiry_redis_takes():
    """The Redis index expires each call's hash after ``feedback_max_age_s``: ``.inf`` or 1e17 is no
    EXPIRE Redis takes, so the config refuses them, naming the field and the allowed values."""
    import yaml

    for raw in (yaml.safe_load("feedback_max_age_s: .inf")["feedback_max_age_s"], 1e17, 315360001):
        with pytest.raises(ProteusConfigError, match=r"decision_log\.feedback_max_age_s: .*\(allowed: a number > 0 "
                                                     r"and <= 315360000\)"):
            ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "feedback_max_age_s": raw}})
    assert ProteusConfig.parse({"decision_log": {"dir": "/tmp/x", "feedback_max_age_s": 315360000}}
                               ).decision_log.feedback_max_age_s == 315360000


def test_the_longest_feedback_max_age_s_indexes_decisions_in_redis(tmp_path, redis_server):
    from litellm_proteus.feedback import FeedbackDesk

    config = settings(tmp_path, feedback_max_age_s=315360000)
    client = redis_client(RedisSettings(url=redis_server.url, timeout_ms=1000))
    writer = DecisionLogWriter(config, client)
    try:
        writer.submit(make_decision("c1"))
        assert writer.flush()
        assert writer.dropped == writer.redis_skipped == 0
        assert 0 < client.ttl(config.redis_key_prefix + "c1") <= 315360000
        other_worker = FeedbackDesk(config, writer.submit, client)  # nothing in its memory: the index
        assert other_worker.accept("c1", 1.0)["call_id"] == "c1"
    finally:
        writer.close()


class _UnusedRedis:
    def pipeline(self, *args, **kwargs):
        raise AssertionError("the index TTL fails first")


def test_an_error_computing_the_index_ttl_is_redis_trouble_never_a_file_drop(tmp_path, caplog):
    """Settings that bypassed validation (``model_copy``) with an infinite age: the records are in
    the file, so none is counted as dropped; the index entries wait as after any failed Redis write."""
    config = settings(tmp_path).model_copy(update={"feedback_max_age_s": float("inf")})
    writer = DecisionLogWriter(config, _UnusedRedis())
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.decision_log"):
        writer.submit(make_decision("c1"))
        assert writer.flush()
    assert writer.dropped == 0 and len(writer._index_backlog) == 1
    assert "Redis write failed (files unaffected" in caplog.text
    writer.close()
    assert not writer._thread.is_alive() and writer.redis_skipped == 1
    assert [r["call_id"] for r in iter_records(tmp_path / "log")] == ["c1"]


def test_a_record_with_nan_or_an_infinity_is_dropped_and_counted_never_written_as_invalid_json(tmp_path):
    with pytest.raises(ValueError):
        decision_log.compact({"x": float("nan")})
    with pytest.raises(ValueError):
        decision_log.fit_line({"x": float("inf")}, 4096)
    for directory, redis_stream in ((tmp_path / "files", None), (None, "s")):
        config = DecisionLogSettings(dir=str(directory) if directory else None, redis_stream=redis_stream)
        writer = DecisionLogWriter(config)
        for record in (make_decision("good-1"), {**make_decision("bad"), "mu": float("nan")},
                       {**make_decision("worse"), "delta": float("-inf")}, make_decision("good-2")):
            assert writer.submit(record)
        assert writer.flush()
        writer.close()
        assert writer.dropped == 2
        if directory is not None:
            text = "".join(path.read_text() for path in log_files(directory))
            assert "NaN" not in text and "Infinity" not in text
            assert [json.loads(line, parse_constant=pytest.fail)["call_id"] for line in text.splitlines()] == ["good-1", "good-2"]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), True, False, 10**400, "0.01", None])
def test_an_outcome_keeps_a_cost_or_latency_only_as_a_finite_number(value):
    record = outcome_record(call_id="c", deployment_id="d1", success=True, response_cost=value, latency_ms=value,
                            error=None)
    assert record["response_cost"] is None and record["latency_ms"] is None
    kept = outcome_record(call_id="c", deployment_id="d1", success=True, response_cost=0, latency_ms=12.5, error=None)
    assert (kept["response_cost"], kept["latency_ms"]) == (0.0, 12.5)
    assert json.loads(decision_log.compact(record))["response_cost"] is None


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), True, 10**400])
def test_litellms_cost_that_is_no_finite_number_is_logged_as_null(tmp_path, cost):
    """``response_cost`` as LiteLLM's success callback hands it over (``serving_log.log_outcome``)."""
    from datetime import datetime, timedelta
    from types import SimpleNamespace

    from litellm_proteus.router_strategy import serving_log

    config = settings(tmp_path)
    writer = DecisionLogWriter(config)
    strategy = SimpleNamespace(decision_log=writer, feedback_desk=None, config=SimpleNamespace(decision_log=config),
                               shadow=None, replaced_by=None)
    start = datetime(2026, 1, 1)
    kwargs = {"litellm_call_id": "c1", "response_cost": cost,
              "litellm_params": {"model_info": {"id": "d2"}, "metadata": {"proteus": {"deployment_id": "d2"}}}}
    try:
        serving_log.log_outcome(strategy, kwargs, None, start, start + timedelta(milliseconds=250), True)
        assert writer.flush()
    finally:
        writer.close()
    [outcome] = [r for r in iter_records(tmp_path / "log") if r["type"] == "outcome"]
    assert (outcome["call_id"], outcome["response_cost"], outcome["latency_ms"]) == ("c1", None, 250.0)
    assert writer.dropped == 0


# -- lines readers cannot key or order -----------------------------------------------------------------
_BAD_KEYS = [
    ({"call_id": None}, r":2: field 'call_id' is missing; it must be a non-empty string"),
    ({"call_id": ""}, r":2: field 'call_id' is ''; it must be a non-empty string"),
    ({"call_id": 7}, r":2: field 'call_id' is 7; it must be a non-empty string"),
    ({"ts": None}, r":2: field 'ts' is missing; it must be a finite number"),
    ({"ts": "soon"}, r":2: field 'ts' is 'soon'; it must be a finite number"),
    ({"ts": True}, r":2: field 'ts' is True; it must be a finite number"),
    ({"ts": float("nan")}, r":2: field 'ts' is nan; it must be a finite number"),
    ({"ts": float("inf")}, r":2: field 'ts' is inf; it must be a finite number"),
]


@pytest.mark.parametrize(("change", "error"), _BAD_KEYS)
@pytest.mark.parametrize("kind", ["decision", "outcome", "feedback"])
def test_a_record_without_a_call_id_or_a_finite_ts_is_an_error_naming_its_line_and_field(tmp_path, capsys, kind, change,
                                                                                         error):
    from litellm_proteus.cli import main as proteus_cli
    from litellm_proteus.feedback import append_to_log_dir

    record = {"decision": make_decision("a", ts=1000.0),
              "outcome": outcome_record(call_id="a", deployment_id="d2", success=True, response_cost=None,
                                        latency_ms=None, error=None, ts=1001.0),
              "feedback": feedback_record("a", 1.0, "api", ts=1002.0)}[kind]
    record = {**record, **change}
    for field, value in change.items():
        if value is None:
            del record[field]
    directory = tmp_path / "log"
    directory.mkdir()
    path = directory / "decisions-20260101T000000-1-0.jsonl"
    path.write_text(f"{json.dumps(make_decision('a', ts=999.0))}\n{json.dumps(record)}\n")
    where = rf"decisions-20260101T000000-1-0\.jsonl{error}"
    with pytest.raises(ValueError, match=where):
        join_log(directory)
    with pytest.raises(ValueError, match=where):
        append_to_log_dir(directory, "a", 1.0, "cli")
    assert proteus_cli(["feedback", "a", "1", "--log", str(directory)]) == 2
    message = capsys.readouterr().err
    assert message.startswith("error: ") and "Traceback" not in message
    assert re.search(where, message)
    assert log_files(directory) == [path]  # nothing written
