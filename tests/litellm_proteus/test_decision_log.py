"""The decision log writer (rotation, bounded queue, Redis stream and index) and its reader."""

from __future__ import annotations

import json
import time

import pytest
import redis as redis_lib

from litellm_proteus.config import DecisionLogSettings, ProteusConfig, ProteusConfigError, RedisSettings
from litellm_proteus.decision_log import (
    SCHEMA,
    DecisionLogWriter,
    LoggedCandidate,
    decision_record,
    feedback_record,
    iter_records,
    join_log,
    log_files,
    outcome_record,
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
    assert record["schema"] == SCHEMA == 1 and record["type"] == "decision"
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
    writer.submit(outcome_record(call_id="a", success=True, response_cost=0.01, latency_ms=12.0, error=None))
    assert writer.flush()
    admin = redis_lib.Redis.from_url(redis_server.url, decode_responses=True)
    entries = admin.xrange("proteus:decisions")
    assert [json.loads(fields["record"])["type"] for _, fields in entries] == ["decision", "outcome"]
    assert json.loads(admin.get("proteus:decision:a"))["call_id"] == "a"
    assert 0 < admin.ttl("proteus:decision:a") <= 7 * 86400
    redis_server.stop()
    for i in range(5):
        writer.submit(make_decision(f"after-{i}"))
    assert writer.flush()
    writer.close()
    assert writer.redis_skipped >= 5
    assert [r["call_id"] for r in iter_records(tmp_path / "log") if r["type"] == "decision"] == ["a"] + [f"after-{i}" for i in range(5)]


def test_join_log_pairs_the_latest_decision_outcome_and_feedback(tmp_path):
    writer = DecisionLogWriter(settings(tmp_path))
    for record in (
        make_decision("x", ts=10.0, p=0.7),
        outcome_record(call_id="x", success=False, response_cost=None, latency_ms=5.0, error="boom", ts=11.0),
        make_decision("x", ts=12.0, p=0.9),  # a retry decides again
        outcome_record(call_id="x", success=True, response_cost=0.002, latency_ms=7.0, error=None, ts=13.0),
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
