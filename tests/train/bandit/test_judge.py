"""``proteus judge`` against a mock judge model answering through respx (the rubric and its parse: tests/litellm_proteus/test_judge_rubric.py)."""

from __future__ import annotations

import argparse
import json

import httpx
import litellm
import pytest
import respx

from proteus_train.data import load_logs
from litellm_proteus.judge_rubric import RUBRIC
from proteus_train.judge import judge

BASE = "http://127.0.0.1:9/v1"


def body(text: str) -> dict:
    return {"id": "j", "object": "chat.completion", "created": 1, "model": "judge",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}


def write_log(directory, n=6):
    records = []
    for i in range(n):
        records.append({"schema": 1, "type": "decision", "call_id": f"c{i}", "ts": float(i), "tier": "standard",
                        "candidates": [{"deployment_id": "a", "slot": 0, "model": "big", "cost_usd": 0.01, "p": 0.9},
                                       {"deployment_id": "b", "slot": 1, "model": "small", "cost_usd": 0.001, "p": 0.6}],
                        "chosen": i % 2, "propensity": 1.0, "prompt": f"question {i}", "tau_effective": 0.8})
        records.append({"schema": 1, "type": "outcome", "call_id": f"c{i}", "ts": i + 0.5, "success": True,
                        "response": f"answer {i}"})
    records.append({"schema": 1, "type": "feedback", "call_id": "c5", "ts": 9.0, "score": 1.0, "source": "api"})
    (directory / "decisions-20260101T000000-1-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def args_for(log, **overrides):
    values = dict(log=str(log), judge_model="openai/judge", api_base=BASE, api_key_env="PROTEUS_TEST_JUDGE_KEY",
                  sample=1.0, budget_usd=None, seed=0, max_tokens=50)
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.fixture
def judge_upstream(monkeypatch):
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    replies = iter(["Correct.\nSCORE: 1", "Wrong.\nSCORE: 0", "no idea", "Half.\nSCORE: 0.5", "SCORE: 3"])
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{BASE}/chat/completions").mock(side_effect=lambda request: httpx.Response(200, json=body(next(replies))))
        yield route


def test_judge_writes_feedback_for_parsed_scores_and_counts_the_rest(tmp_path, judge_upstream):
    write_log(tmp_path)
    summary = judge(args_for(tmp_path))
    assert summary["eligible"] == 5 and summary["sampled"] == 5  # c5 already has feedback
    assert (summary["scored"], summary["unscored"], summary["failed"]) == (3, 2, 0)
    assert judge_upstream.call_count == 5
    sent = json.loads(judge_upstream.calls[0].request.content)
    assert sent["model"] == "judge" and sent["messages"][0]["content"] == RUBRIC and "question 0" in sent["messages"][1]["content"]
    written = [json.loads(line) for line in open(summary["written"])]
    assert [(r["call_id"], r["score"], r["source"]) for r in written] == [("c0", 1.0, "judge"), ("c1", 0.0, "judge"), ("c3", 0.5, "judge")]
    log = load_logs(tmp_path)  # the trainer reads the judge's labels
    assert log.provenance["feedback_sources"] == {"api": 1, "judge": 3} and log.provenance["n_labelled"] == 4


def test_a_bare_proxy_group_name_is_sent_to_the_api_base(tmp_path, judge_upstream):
    write_log(tmp_path, n=1)
    summary = judge(args_for(tmp_path, judge_model="proteus-judge"))  # docs/learn-from-traffic.md's proxy form
    assert (summary["scored"], summary["failed"]) == (1, 0)
    assert json.loads(judge_upstream.calls[0].request.content)["model"] == "proteus-judge"


def test_sampling_is_by_call_id_and_budget_stops_the_run(tmp_path, monkeypatch):
    write_log(tmp_path, n=40)
    monkeypatch.setenv("PROTEUS_TEST_JUDGE_KEY", "sk-test")
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)
    monkeypatch.setattr(litellm, "completion_cost", lambda **kwargs: 0.01)
    with respx.mock() as mock:
        route = mock.post(f"{BASE}/chat/completions").mock(return_value=httpx.Response(200, json=body("ok\nSCORE: 1")))
        first = judge(args_for(tmp_path, sample=0.3, budget_usd=0.025))
    assert 3 <= first["sampled"] <= 25 and route.call_count == 3 and first["stopped_by_budget"]
    assert first["spent_usd"] == pytest.approx(0.03)


def test_bad_flags_are_named(tmp_path):
    from litellm_proteus.cli import main

    assert main(["judge", "--log", str(tmp_path), "--judge-model", "x", "--sample", "0"]) == 2
    assert main(["judge", "--log", str(tmp_path / "missing"), "--judge-model", "x"]) == 2
