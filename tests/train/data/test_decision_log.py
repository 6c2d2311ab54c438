"""The decision-log loader: bandit rows (one labelled slot), propensities, latest feedback, time split."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proteus_train.data import load_logs
from proteus_train.data.common import RoutingLogWarning

SLOTS = ["big", "mid", "small"]


def decision(call_id, ts, chosen, propensity=1.0, prompt="What is 2 + 2?", tier="standard"):
    return {"schema": 1, "type": "decision", "call_id": call_id, "ts": ts, "key_hash": None, "tier": tier,
            "tau_source": "tier", "state_key": f"tier:{tier}", "tau_requested": None, "tau_effective": 0.8,
            "delta": 0.0, "mu": 0.5, "model_group": "auto",
            "candidates": [{"deployment_id": f"d{j}", "slot": j, "model": m, "cost_usd": 0.01 / (j + 1), "p": 0.9 - 0.1 * j}
                           for j, m in enumerate(SLOTS)],
            "chosen": chosen, "propensity": propensity, "prompt_sha256": "x", "prompt": prompt, "artifact": "abc"}


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def feedback(call_id, ts, score, source="api"):
    return {"schema": 1, "type": "feedback", "call_id": call_id, "ts": ts, "score": score, "source": source}


def test_bandit_rows_hold_only_the_chosen_slots_latest_feedback(tmp_path):
    records = [decision(f"c{i}", 100.0 + i, i % 3, propensity=1.0 if i % 4 else 0.25, prompt=f"prompt {i}") for i in range(20)]
    records += [{"schema": 1, "type": "outcome", "call_id": "c1", "ts": 101.5, "success": True, "response_cost": 0.5,
                 "latency_ms": 10.0, "error": None}]
    records += [feedback(f"c{i}", 200.0 + i, 1.0) for i in range(0, 20, 2)]
    records += [feedback("c0", 300.0, 0.0, source="judge"), feedback("c0", 250.0, 1.0)]  # the latest (ts 300) wins
    write(tmp_path / "decisions-20260101T000000-1-0.jsonl", records[:15])
    write(tmp_path / "decisions-20260101T000100-1-1.jsonl", records[15:])
    with pytest.warns(RoutingLogWarning, match="dropped 10 rows with no observed score"):
        log = load_logs(tmp_path)
    assert log.models == SLOTS and log.source == "decision-log" and log.bandit
    assert len(log) == 10 and log.sample_ids[0] == "c0"
    assert np.isfinite(log.scores).sum(axis=1).tolist() == [1] * 10
    assert log.scores[0].tolist()[0] == 0.0  # c0 chose slot 0; latest feedback 0.0
    assert log.logged_choice.tolist() == [i % 3 for i in range(0, 20, 2)]
    assert log.propensity.tolist() == [0.25 if i % 4 == 0 else 1.0 for i in range(0, 20, 2)]
    assert log.costs[0].tolist() == pytest.approx([0.01, 0.005, 0.01 / 3])
    assert set(log.split.tolist()) == {"train", "val"}
    prov = log.provenance
    assert prov["n_decisions"] == 20 and prov["n_labelled"] == 10 and prov["label_share"] == 0.5
    assert prov["first_decision_utc"] == "1970-01-01T00:01:40Z" and prov["feedback_sources"] == {"api": 9, "judge": 1}
    assert prov["labels_per_model"] == {"big": 4, "mid": 3, "small": 3}


def test_response_cost_replaces_the_chosen_slots_estimate(tmp_path):
    records = [decision("a", 1.0, 1), feedback("a", 2.0, 1.0),
               {"schema": 1, "type": "outcome", "call_id": "a", "ts": 1.5, "success": True, "response_cost": 0.7}]
    records += [decision(f"b{i}", 3.0 + i, 0, prompt=f"p{i}") for i in range(3)] + [feedback(f"b{i}", 9.0, 0.0) for i in range(3)]
    log = load_logs(write(tmp_path / "decisions-x.jsonl", records))
    assert log.costs[0, 1] == 0.7 and log.costs[0, 0] == 0.01


@pytest.mark.parametrize("change, message", [
    ({"prompt": None}, "log_prompts: true"),
    ({"chosen": 3}, "field 'chosen' must be an index"),
    ({"propensity": 0.0}, "field 'propensity' must lie in"),
    ({"schema": 2}, "field 'schema' is 2; supported: 1"),
    ({"type": "vote"}, "field 'type' is 'vote'; allowed"),
])
def test_malformed_records_are_named(tmp_path, change, message):
    bad = {**decision("a", 1.0, 0), **change}
    write(tmp_path / "decisions-x.jsonl", [decision("b", 0.5, 1), bad, feedback("a", 2.0, 1.0), feedback("b", 2.0, 1.0)])
    with pytest.raises(ValueError, match=message):
        load_logs(tmp_path / "decisions-x.jsonl")


def test_feedback_score_outside_unit_interval_is_refused(tmp_path):
    write(tmp_path / "decisions-x.jsonl", [decision("a", 1.0, 0), feedback("a", 2.0, 1.5)])
    with pytest.raises(ValueError, match=r"field 'score' must be a number in \[0, 1\]"):
        load_logs(tmp_path / "decisions-x.jsonl")


def test_with_models_reorders_to_an_artifacts_slots(tmp_path):
    records = [decision(f"c{i}", float(i), i % 3, prompt=f"p{i}") for i in range(6)] + [feedback(f"c{i}", 9.0, 1.0) for i in range(6)]
    log = load_logs(write(tmp_path / "decisions-x.jsonl", records)).with_models(["small", "extra", "big", "mid"])
    assert log.models == ["small", "extra", "big", "mid"]
    assert log.logged_choice.tolist() == [2, 3, 0, 2, 3, 0]
    assert np.isnan(log.scores[:, 1]).all() and log.scores[0, 2] == 1.0
    with pytest.raises(ValueError, match="not among"):
        log.with_models(["big", "mid"])
