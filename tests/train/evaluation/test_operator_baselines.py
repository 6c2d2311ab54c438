"""Single-Model and LiteLLM-Complexity: the baselines an operator sets up in an afternoon."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.evaluation.baselines import FitContext, Split
from proteus_train.evaluation.complexity_classifier import TIERS, ComplexityClassifier
from proteus_train.evaluation.metrics import accuracy
from proteus_train.evaluation.operator_baselines import LiteLLMComplexityRouter, SingleModelRouter


def _split(scores: np.ndarray, costs: np.ndarray, prompts=None) -> Split:
    return Split(np.zeros((len(scores), 4), dtype=np.float32), scores, costs, prompts=prompts)


def test_single_model_takes_the_cheapest_model_clearing_tau_plus_margin():
    rng = np.random.default_rng(0)
    n = 1000
    scores = np.stack([rng.random(n) < q for q in (0.6, 0.8, 0.9)], axis=1).astype(float)
    costs = np.tile([1.0, 2.0, 10.0], (n, 1))
    val = _split(scores, costs)
    router = SingleModelRouter().fit(FitContext(val, val, margin=0.02))
    acc = scores.mean(axis=0)
    assert router.model_for([acc[1] - 0.03, acc[1] - 0.01, acc[2] - 0.02, 0.99]).tolist() == [1, 2, 2, 2]
    assert router.validated_top() == pytest.approx(acc[2] - 0.02)
    routed = router.route(val.emb, val.costs, acc[0] - 0.05)
    assert (routed.assign == 0).all() and routed.knob == 0.0


def test_litellm_classifier_runs_locally_through_a_router():
    classifier = ComplexityClassifier()
    assert classifier.boundaries == (0.15, 0.35, 0.6)  # LiteLLM's documented defaults
    tiers, scores = classifier.classify([
        "hi",
        "Write a python function and class for an async LRU cache; explain step by step, first design then prove it.",
    ])
    assert TIERS[tiers[0]] == "SIMPLE" and tiers[1] > tiers[0] and scores[1] > scores[0]
    assert classifier.latency_ms(["hi"] * 5) > 0
    with pytest.raises(ValueError, match="3 increasing"):
        ComplexityClassifier([0.5, 0.2, 0.9])


def test_complexity_router_learns_the_ladder_on_train_and_validation(synth_splits):
    train, val, test = synth_splits
    router = LiteLLMComplexityRouter().fit(FitContext(train, val, margin=0.0))
    # the prompt texts separate the rows only the dearest model solves: a ladder sends them there
    assert any(len(set(lad.slots)) > 1 for lad in router.ladders)
    cheap = router.route_split(test, 0.0).assign
    top = router.route_split(test, 1.0).assign
    assert accuracy(top, test.scores) > accuracy(cheap, test.scores)
    per_row = router.route_split(test, np.where(np.arange(len(test)) % 2 == 0, 0.0, 1.0)).assign
    assert np.array_equal(per_row[::2], cheap[::2]) and np.array_equal(per_row[1::2], top[1::2])
    details = router.details()
    assert details["classify_ms"] > 0 and details["tier_boundaries"][0] == [0.15, 0.35, 0.6]
    with pytest.raises(ValueError, match="prompt"):
        router.route_split(Split(test.emb, test.scores, test.costs), 0.5)


def _row(tau, acc, cost, low=None):
    return {"tau": tau, "accuracy": acc, "cost_per_1k": cost, "cost_ci_low": cost if low is None else low,
            "meets_floor": acc >= tau}


def test_per_tau_comparison_names_the_cheapest_meeting_the_floor():
    from proteus_train.evaluation.compare import per_tau_rows, per_tau_table

    metrics = {
        "per_tau": [_row(0.7, 0.72, 1.0), _row(0.8, 0.79, 2.0), _row(0.9, 0.91, 5.0, low=3.5)],
        "baselines_per_tau": {
            "Single-Model": [_row(0.7, 0.75, 2.0), _row(0.8, 0.85, 3.0), _row(0.9, 0.92, 4.0)],
            "LiteLLM-Complexity": [_row(0.7, 0.69, 0.5), _row(0.8, 0.81, 2.5), _row(0.9, 0.85, 1.0)],
        },
    }
    rows = per_tau_rows(metrics)
    assert [r["cheapest_meeting_floor"] for r in rows] == ["PROTEUS", "LiteLLM-Complexity", "Single-Model"]
    assert rows[0]["Single-Model"]["ratio"] == 0.5 and rows[0]["LiteLLM-Complexity"]["proteus_not_dearer"] is None
    assert rows[2]["Single-Model"]["proteus_not_dearer"] is True  # dearer, but within its cost interval
    assert "| 0.800 | 0.790 / 2.000 (miss) |" in "\n".join(per_tau_table(rows))


def test_compare_cli_names_a_missing_run(tmp_path, capsys):
    from proteus_train.evaluation.compare import main

    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_compare_reads_a_relative_artifact_beside_its_metrics_from_any_folder(tmp_path, monkeypatch, capsys):
    import json

    import proteus_train.evaluation.compare as compare

    run = tmp_path / "runs" / "eval"
    (run / "art").mkdir(parents=True)
    (run / "art" / "manifest.json").write_text(json.dumps({"tau_range": [0.6, 0.9]}))
    (run / "metrics.json").write_text(json.dumps({"artifact": "art"}))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    read = []
    monkeypatch.setattr(compare, "run_summary", lambda metrics, manifest: read.append(manifest))
    monkeypatch.setattr(compare, "markdown", lambda summaries: "")
    assert compare.main([str(run)]) == 0
    assert read == [{"tau_range": [0.6, 0.9]}]
    (run / "metrics.json").write_text(json.dumps({"artifact": "gone"}))
    assert compare.main([str(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: {run / 'metrics.json'}: artifact 'gone' not found: no manifest.json in 'gone' or '{run / 'gone'}'" in err
    (run / "metrics.json").write_text("{not json")
    assert compare.main([str(run)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {run / 'metrics.json'}: cannot read the run's metrics (")
