"""``evaluate`` end to end on synthetic splits (random-weight PROTEUS), plus its helpers, the report
and the figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from proteus_train.evaluation.baselines import BASELINE_NAMES
from proteus_train.evaluation.baselines import Assignment, Router, Split
from proteus_train.evaluation.evaluate import EvalConfig, ProteusRouter, evaluate, tau_grid
from proteus_train.evaluation.headroom import headroom
from proteus_train.evaluation.tau_sweep import Curve, adaptability, max_compliant_tau
from proteus_train.evaluation.metrics import Bootstrap, json_safe
from proteus_train.evaluation.plots import FIGURES, write_figures
from proteus_train.evaluation.report import render

ROUTER_KEYS = {"accuracy", "cost_per_1k", "oracle_gap_pp", "re", "rpi"}
PER_TAU_KEYS = {"tau", "accuracy", "accuracy_ci_low", "accuracy_ci_high", "cost_per_1k", "mu_mean", "meets_floor"}


@pytest.fixture(scope="module")
def result(synth_splits, build_random_artifact):
    from .conftest import SYNTH_MODELS

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module-scoped: set up before the per-test autouse thread fixture

    ranges = dict(tau_range=(0.6, 0.75), tau_train_range=(0.55, 0.8))
    model, manifest = build_random_artifact(SYNTH_MODELS, **ranges)
    other, other_manifest = build_random_artifact(SYNTH_MODELS, seed=1, **ranges)
    train, val, test = synth_splits
    config = EvalConfig(seeds=2, bootstrap=200, dynamic_queries=300, dynamic_window=50)
    try:
        return evaluate(
            model, manifest, train, val, test, config=config, encoder_ms=4.0, dataset="synthetic",
            ablations={"-Critic": (ProteusRouter(other, other_manifest, name="-Critic"), test.emb)},
        )
    finally:
        torch.set_num_threads(threads)


def test_tau_grid_includes_both_ends():
    assert tau_grid(0.85, 0.91, 0.01).tolist() == [0.85, 0.86, 0.87, 0.88, 0.89, 0.9, 0.91]
    assert tau_grid(0.8, 0.825, 0.01).tolist() == [0.8, 0.81, 0.82, 0.825]
    with pytest.raises(ValueError):
        tau_grid(0.8, 0.9, 0.0)


def make_curve(taus, accs, mus=None) -> Curve:
    n = 10
    correct = np.tile(np.asarray(accs, dtype=float), (n, 1))
    mu = None if mus is None else np.tile(np.asarray(mus, dtype=float), (n, 1))
    return Curve(np.asarray(taus, dtype=float), correct, np.tile(np.linspace(1, 2, len(taus)), (n, 1)), mu, [None] * len(taus))


def test_max_compliant_tau_stops_at_the_first_miss():
    taus = [0.70, 0.71, 0.72, 0.73]
    assert max_compliant_tau(make_curve(taus, [0.75, 0.71, 0.70, 0.80])) == (0.71, 0.72)  # 0.73 met again: irrelevant
    assert max_compliant_tau(make_curve(taus, [0.75, 0.75, 0.75, 0.75])) == (0.73, None)
    assert max_compliant_tau(make_curve(taus, [0.60, 0.75, 0.75, 0.75])) == (None, 0.70)


def test_adaptability_on_a_known_curve():
    taus = [0.80, 0.82, 0.84, 0.86]
    ad = adaptability(make_curve(taus, [0.85, 0.83, 0.84, 0.85], mus=[0.1, 0.2, 0.3, 0.4]))
    assert ad["tau_mu_corr"] == pytest.approx(1.0)
    assert ad["floor_compliance"] == pytest.approx(0.75)
    assert ad["tol2_compliance"] == pytest.approx(0.75)  # 0.85 vs 0.80 is 5 pp over
    assert ad["tol5_compliance"] == pytest.approx(1.0)
    assert ad["cost_range"] == pytest.approx(2.0)


def test_metrics_have_every_key_of_the_issue(result):
    m = result.metrics
    for key in ("dataset", "n_train", "n_test", "models", "tau_range", "oracle", "routers", "adaptability", "per_tau",
                "max_compliant_tau", "baselines_per_tau", "tiers", "dynamic", "limit"):
        assert key in m, key
    assert set(m["routers"]) == {"PROTEUS", *BASELINE_NAMES}
    for name, row in m["routers"].items():
        assert ROUTER_KEYS <= set(row), name
    assert set(m["oracle"]) >= {"accuracy", "cost_per_1k"}
    assert set(m["adaptability"]) >= {"tau_mu_corr", "floor_compliance", "tol2_compliance", "tol5_compliance", "cost_range"}
    assert [r["tau"] for r in m["per_tau"]] == tau_grid(0.6, 0.75, 0.01).tolist()
    assert all(PER_TAU_KEYS <= set(r) for r in m["per_tau"])
    assert set(m["baselines_per_tau"]) == {"Calibrated-Threshold", "OmniRouter-Style", "Single-Model", "LiteLLM-Complexity"}
    assert all(len(rows) == len(m["per_tau"]) for rows in m["baselines_per_tau"].values())
    assert [t["name"] for t in m["tiers"]] == ["Economy", "Standard", "Premium"]
    assert set(m["dynamic"]) == {"step", "drift", "cyclic", "realistic"}
    assert all({"floor_satisfaction", "mean_overshoot_pp"} <= set(s) for s in m["dynamic"].values())
    assert len(m["limit"]) == len(m["per_tau"])
    json.dumps(json_safe(m), allow_nan=False)


def test_numbers_are_consistent(result):
    m = result.metrics
    oracle = m["oracle"]["accuracy"]
    for name, row in m["routers"].items():
        assert row["accuracy"] <= oracle + 1e-12, name
        assert row["accuracy_ci_low"] <= row["accuracy"] <= row["accuracy_ci_high"], name
        assert row["oracle_gap_pp"] == pytest.approx((oracle - row["accuracy"]) * 100)
    for name in ("Random", "Cheapest", "BestFixed"):
        assert m["routers"][name]["re"] is None  # zero-latency static rules
    assert m["routers"]["PROTEUS"]["latency_ms"] >= 4.0  # encoder time + its own decision time
    assert m["routers"]["PROTEUS"]["tau"] == pytest.approx(0.675)  # the headline tau: middle of the range
    # nobody pays less than the hindsight limit for their accuracy
    limit = result.plots["limit"]
    for row in m["routers"].values():
        assert row["cost_per_1k"] >= limit.cost_per_1k(row["accuracy"]) - 1e-9
    for row in m["per_tau"]:
        assert row["meets_floor"] == (row["accuracy"] >= row["tau"] - 1e-9)
        assert row["limit_cost_per_1k"] is None or row["limit_cost_per_1k"] >= 0
    costs = [r["cost_per_1k"] for r in m["limit"]]
    assert costs == sorted(costs)


class HindsightRouter(Router):
    """Routes each row to its first correct model (model 0 when none is): a known, data-peeking gain."""

    name = "MLP"

    def __init__(self, splits: list[Split]):
        self.lookup = {s.emb.tobytes(): s.scores for s in splits}

    def route(self, emb, costs, tau=None):
        scores = self.lookup[np.asarray(emb, dtype=np.float32).tobytes()]
        return Assignment(np.argmax(scores > 0.5, axis=1))


def test_headroom_on_a_known_case(synth_splits, build_random_artifact):
    from .conftest import SYNTH_MODELS

    _, val, test = synth_splits
    model, manifest = build_random_artifact(SYNTH_MODELS, tau_range=(0.6, 0.75), tau_train_range=(0.55, 0.8))
    proteus = ProteusRouter(model, manifest)
    boot = Bootstrap(len(test), 300, seed=0)
    room = headroom(proteus, {"MLP": HindsightRouter([val, test])}, val, test, boot, margin=0.02)

    best_val, best_test = val.scores.mean(0).max(), test.scores.mean(0).max()
    assert room["best_single_val"] == {"model": SYNTH_MODELS[int(val.scores.mean(0).argmax())], "accuracy": pytest.approx(best_val)}
    assert room["best_single_test"]["accuracy"] == pytest.approx(best_test)
    oracle_val, oracle_test = val.scores.max(1).mean(), test.scores.max(1).mean()
    assert room["oracle_val"] == pytest.approx(oracle_val)
    hindsight = room["routers"]["MLP"]  # routes like the oracle: its gain is the oracle's
    assert hindsight["val_accuracy"] == pytest.approx(oracle_val)
    assert hindsight["val_gain_pp"] == pytest.approx((oracle_val - best_val) * 100)
    assert hindsight["test_gain_pp"] == pytest.approx((oracle_test - best_test) * 100)
    lo, hi = hindsight["test_gain_ci_pp"]
    assert 0 < lo <= hindsight["test_gain_pp"] <= hi
    assert room["max_val_gain_pp"] == pytest.approx(hindsight["val_gain_pp"])
    assert oracle_val - best_val > 0.02 and room["val_gain_exceeds_margin"] is True
    # PROTEUS at mu = 1 is argmax p + b, whatever tau
    quality = proteus.quality_choice(test.emb, test.costs)
    with torch.no_grad():
        p = torch.sigmoid(model.performance_logits(model.embed(torch.as_tensor(test.emb)))).numpy()
    assert (quality == (p + model.boost.detach().numpy()).argmax(1)).all()
    row = room["routers"]["PROTEUS (mu = 1)"]
    assert row["test_accuracy"] == pytest.approx(test.scores[np.arange(len(test)), quality].mean())
    assert set(room["routers"]) == {"PROTEUS (mu = 1)", "PROTEUS (top of range)", "MLP"}
    # a margin no routing clears
    assert headroom(proteus, {}, val, test, boot, margin=1.0)["val_gain_exceeds_margin"] is False


def test_headroom_in_metrics_and_report(result):
    room = result.metrics["headroom"]
    assert set(room["routers"]) == {"PROTEUS (mu = 1)", "PROTEUS (top of range)", "MLP", "CARROT-Quality", "Pairwise-Switch"}
    switch = room["pairwise_switch"]
    assert switch["anchor"] in result.metrics["models"] and 0 <= switch["val_switch_share"] <= 1
    assert (switch["val_switch_share"] > 0) == (switch["val_max_win_probability"] > 0.5)
    top = room["routers"]["PROTEUS (top of range)"]
    assert top["test_accuracy"] == pytest.approx(result.metrics["per_tau"][-1]["accuracy"])
    text = render(result.metrics)
    assert "Headroom above the best single model" in text
    claim = "can be promised from this data" if room["val_gain_exceeds_margin"] else "can be promised honestly"
    assert claim in text
    assert f"expects another model to win on {switch['val_switch_share'] * 100:.1f}% of validation queries" in text


def test_baselines_beyond_their_validated_range_are_marked(result):
    m = result.metrics
    assert set(m["baselines_validated_top"]) == {"Calibrated-Threshold", "OmniRouter-Style", "Single-Model", "LiteLLM-Complexity"}
    for name, rows in m["baselines_per_tau"].items():
        top = m["baselines_validated_top"][name]
        assert [r["validated"] for r in rows] == [r["tau"] <= top + 1e-9 for r in rows]
    # a baseline whose validation supports none of the grid: every row marked, and the report says so
    capped = json.loads(json.dumps(json_safe(m)))
    capped["baselines_validated_top"]["OmniRouter-Style"] = 0.5
    for row in capped["baselines_per_tau"]["OmniRouter-Style"]:
        row["validated"] = False
    text = render(capped)
    assert "OmniRouter-Style" in text and "Its own validation supports taus up to 0.500 only" in text
    assert "beyond the tau its own validation supports" in text


def test_ablation_rows(result):
    row = result.metrics["ablations"]["-Critic"]
    full = result.metrics["routers"]["PROTEUS"]
    assert row["delta_accuracy_pp"] == pytest.approx((row["accuracy"] - full["accuracy"]) * 100)
    lo, hi = row["delta_accuracy_ci_pp"]
    assert lo <= row["delta_accuracy_pp"] + 1e-9 and row["delta_accuracy_pp"] <= hi + 1e-9


def test_report_has_the_three_tables_and_says_what_fails(result):
    text = render(result.metrics, command="proteus eval --artifact A --out O", artifact="A", figures=list(FIGURES))
    for heading in ("## Table 1", "## Table 2", "## Table 4"):
        assert heading in text
    for name in ("PROTEUS", *BASELINE_NAMES):
        assert name in text
    assert "proteus eval --artifact A --out O" in text
    # a random-weight router cannot keep its promises; the report must say so plainly
    if result.metrics["adaptability"]["floor_compliance"] < 1:
        assert "Floor compliance does not hold" in text
    assert "Calibrated-Threshold" in text.split("## Table 2")[1]


def test_figures_are_written(result, tmp_path):
    paths = write_figures(result.metrics, result.plots, tmp_path)
    assert [p.name for p in paths] == list(FIGURES)
    for path in paths:
        assert path.stat().st_size > 10_000
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_model_pool(synth_splits, build_random_artifact):
    """RouteLLM's MMLU set has two models: every baseline and metric must cope with K = 2."""
    from proteus_train.evaluation.baselines import Split

    train, val, test = (Split(s.emb, s.scores[:, [1, 3]], s.costs[:, [1, 3]], prompts=s.prompts) for s in synth_splits)
    model, manifest = build_random_artifact(["small", "huge"], tau_range=(0.6, 0.75), tau_train_range=(0.55, 0.8))
    config = EvalConfig(seeds=1, bootstrap=50, dynamic_queries=100, dynamic_window=20)
    m = evaluate(model, manifest, train, val, test, config=config, encoder_ms=1.0).metrics
    assert set(m["routers"]) == {"PROTEUS", *BASELINE_NAMES}
    assert m["routers"]["Cheapest"]["model"] == "small" and m["routers"]["BestFixed"]["model"] == "huge"
    assert m["oracle"]["accuracy"] >= max(r["accuracy"] for r in m["routers"].values())
