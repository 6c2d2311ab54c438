"""``proteus replay`` pieces on a small synthetic log: task pools, shifted streams, the trailing
window, compliance recovery, and one stream through the real predictor + controller."""

from __future__ import annotations

import numpy as np
import pytest

from litellm_proteus.compliance import ComplianceController, ComplianceSettings
from litellm_proteus.deployment_correction import DeploymentCorrection
from proteus_train.evaluation.baselines import Split
from proteus_train.replay import (
    Degradation, Trace, build_stream, degradation_for, replay_stream, summarize, task_pools, trailing,
)

TASKS_TEST = ["easy"] * 40 + ["mid"] * 30 + ["hard"] * 30
TASKS_KNOWN = ["easy"] * 10 + ["mid"] * 10 + ["hard"] * 10
SCORES_KNOWN = np.repeat([[0.9, 0.8], [0.6, 0.5], [0.2, 0.1]], 10, axis=0)


def test_pools_order_tasks_by_train_difficulty_and_pool_small_ones():
    pools = task_pools(TASKS_TEST, TASKS_KNOWN, SCORES_KNOWN, min_rows=30)
    assert pools.hardest_tasks == ["hard"] and pools.easiest_tasks == ["easy"]
    assert set(np.asarray(TASKS_TEST)[pools.hardest]) == {"hard"}
    pooled = task_pools(TASKS_TEST, TASKS_KNOWN, SCORES_KNOWN, min_rows=50)
    assert pooled.hardest_tasks == ["hard", "mid"] and len(pooled.hardest) == 60
    with pytest.raises(ValueError, match="at least 2 tasks"):
        task_pools(["a"] * 5, ["a"] * 5, np.ones((5, 2)), 1)


def test_streams_shift_as_the_scenarios_say():
    pools = task_pools(TASKS_TEST, TASKS_KNOWN, SCORES_KNOWN, min_rows=30)
    tasks = np.asarray(TASKS_TEST)
    rows, shift = build_stream("hardest", pools, 300, 100, seed=1)
    assert shift == 100 and len(rows) == 300
    assert set(tasks[rows[100:]]) == {"hard"} and len(set(tasks[rows[:100]])) == 3
    rows, shift = build_stream("drift", pools, 400, 100, seed=1)
    assert shift == 0
    assert (tasks[rows[:100]] == "hard").mean() < 0.3 and (tasks[rows[-100:]] == "hard").mean() > 0.7
    rows, shift = build_stream("as-is", pools, 250, 100, seed=1)
    assert shift == 250 and sorted(rows[:100]) == list(range(100))  # each shuffle uses every row once
    degrade_rows, shift = build_stream("degrade", pools, 250, 100, seed=1)
    assert shift == 100 and (degrade_rows == rows).all()  # the same traffic; only outcomes change
    with pytest.raises(ValueError, match="scenario must be one of"):
        build_stream("sideways", pools, 10, 5, seed=0)


def test_trailing_window_and_recovery():
    np.testing.assert_allclose(trailing(np.array([1.0, 0.0, 1.0, 1.0]), 2), [np.nan, 0.5, 0.5, 1.0])
    correct = np.r_[np.ones(200), np.zeros(100), np.ones(300)]  # short after the shift at 200, then back
    trace = Trace(correct, np.full(600, 0.002), np.zeros(600), np.zeros(600, dtype=bool), np.full(600, 0.8))
    report = summarize(trace, tau=0.8, shift=200, window=100, static_cost=1.0)
    # the first window at tau ends at request 379 (20 misses in 100), and none after it falls short
    assert report["requests_to_compliance"] == 179
    assert report["cost_per_1k"] == pytest.approx(2.0) and report["cost_vs_static"] == pytest.approx(1.0)
    assert report["accuracy_after_shift"] == 0.75 and not report["met_after_shift"] and report["met_settled"]
    # windows below tau by more than their noise (0.0784) end at requests 227-371: 145 of the 501 full windows
    assert report["silent_shortfall_share"] == round(145 / 501, 4) and report["false_alarm_share"] == 0.0


def test_silent_shortfall_counts_only_unflagged_requests_and_false_alarms_only_flags_on_met_windows():
    correct = np.r_[np.ones(200), np.zeros(100), np.ones(300)]
    flagged = np.zeros(600, dtype=bool)
    flagged[250:450] = True  # the flag comes 23 requests after the windows fall short and stays 71 past recovery
    trace = Trace(correct, np.full(600, 0.002), np.zeros(600), flagged, np.full(600, 0.8))
    report = summarize(trace, tau=0.8, shift=200, window=100, static_cost=1.0)
    assert report["silent_shortfall_share"] == round(23 / 501, 4)  # requests 227-249
    assert report["false_alarm_share"] == round(71 / 501, 4)  # requests 379-449: their windows meet tau


def test_a_stream_through_the_predictor_and_the_controller(make_artifact):
    from litellm_proteus.predictor import ProteusPredictor

    predictor = ProteusPredictor(make_artifact(["small", "large"]))
    rng = np.random.default_rng(0)
    n = 120
    split = Split(rng.normal(size=(n, 384)).astype(np.float32), rng.integers(0, 2, (n, 2)).astype(float),
                  np.tile([0.001, 0.01], (n, 1)), rng.random(n))
    controller = ComplianceController(ComplianceSettings(min_decisions=10, min_labels=5, window=50))
    trace = replay_stream(predictor, controller, np.arange(n), split, 0.8, "tier", 1.0, 20, 8, seed=0)
    chosen = np.where(trace.cost == 0.01, 1, 0)
    np.testing.assert_array_equal(trace.correct, split.scores[np.arange(n), chosen])
    snap = controller.snapshot("tier:tier@0.8")
    assert snap["n"] == 50
    assert snap["n_labels"] == 93  # labels wait 20 requests: requests 0..92 are back by the last batch (112)
    assert (trace.delta >= 0).all() and trace.delta[:8].max() == 0.0


def test_degradation_thins_one_slots_outcomes_from_the_shift_by_seed():
    degradation = Degradation(slot=1, start=1000, drop=0.15, rate=0.75, seed=3)
    kept = degradation.keep(21_000)
    assert (kept[:1000] == 1).all() and set(np.unique(kept)) == {0.0, 1.0}
    assert abs((1 - kept[1000:].mean()) - 0.15 / 0.75) < 0.01  # success rate 0.75 -> 0.60
    assert (Degradation(1, 1000, 0.15, 0.75, 3).keep(21_000) == kept).all()  # deterministic by seed
    with pytest.raises(ValueError, match="--degrade-drop must be in"):
        Degradation(slot=1, start=10, drop=0.8, rate=0.75, seed=0)


def test_a_degraded_stream_changes_outcomes_not_predictions(make_artifact):
    from litellm_proteus.predictor import ProteusPredictor

    predictor = ProteusPredictor(make_artifact(["small", "large"]))
    rng = np.random.default_rng(0)
    n = 400
    split = Split(rng.normal(size=(n, 384)).astype(np.float32), np.ones((n, 2)), np.tile([0.001, 0.01], (n, 1)),
                  rng.random(n))
    rows = np.arange(n)
    static = replay_stream(predictor, None, rows, split, 0.8, "tier", 0.0, 20, 8, seed=0)
    degradation = degradation_for(static, split, rows, start=100, drop=0.5, seed=1)
    served = np.bincount(static.slot[100:], minlength=2)
    assert degradation.slot == served.argmax() and degradation.rate == 1.0
    degraded = replay_stream(predictor, None, rows, split, 0.8, "tier", 0.0, 20, 8, seed=0, degradation=degradation)
    np.testing.assert_array_equal(degraded.slot, static.slot)  # the head's predictions and choices stay
    np.testing.assert_array_equal(degraded.p_chosen, static.p_chosen)
    hit = (static.slot == degradation.slot) & (np.arange(n) >= 100)
    assert (degraded.correct[~hit] == 1).all() and 0.3 < 1 - degraded.correct[hit].mean() < 0.7
    # with labels the controller sees the degraded outcomes: its residual turns negative
    controller = ComplianceController(ComplianceSettings(min_decisions=10, min_labels=5, window=50))
    replay_stream(predictor, controller, rows, split, 0.8, "tier", 1.0, 20, 8, seed=0, degradation=degradation)
    assert controller.snapshot("tier:tier@0.8")["realised_mean"] < 1.0
    # with the deployment correction the degraded slot's own labels lower its p: it is served less
    # (outcomes all 1 before the shift: p is never raised for them; a short window forgets them)
    worse = degradation_for(static, split, rows, start=100, drop=0.9, seed=1)
    degraded = replay_stream(predictor, None, rows, split, 0.8, "tier", 0.0, 20, 8, seed=0, degradation=worse)
    corrected = ComplianceController(ComplianceSettings(min_decisions=10, min_labels=5, window=50, correction={
        "enabled": True, "min_labels": 5, "prior": 5, "label_window": 40}))
    trace = replay_stream(predictor, corrected, rows, split, 0.8, "tier", 1.0, 20, 8, seed=0, degradation=worse)
    at, on_slot = np.arange(n), trace.slot == worse.slot
    assert (trace.p_offset[at < 100] == 0).all() and trace.p_offset.max() <= 0
    assert DeploymentCorrection(corrected.settings.correction, corrected).offsets([str(worse.slot)]).routing[str(worse.slot)] < -0.1
    late = at >= 250
    assert on_slot[late].mean() < 0.1 < 0.5 < (static.slot[late] == worse.slot).mean()
    assert trace.correct[late].mean() > degraded.correct[late].mean() + 0.3


def test_the_infeasible_flag_reads_the_proven_shortfall_not_the_routing_correction(make_artifact):
    """Slot 0 (p about 0.5) fails from request 100 on; slot 1 is known to be far worse already.
    The flag waits until its labels prove the shortfall beyond alarm_z standard errors."""
    from litellm_proteus.predictor import ProteusPredictor

    predictor = ProteusPredictor(make_artifact(["small", "large"], tau_range=(0.3, 0.9), tau_train_range=(0.25, 0.95)))
    rng = np.random.default_rng(0)
    n = 400
    split = Split(rng.normal(size=(n, 384)).astype(np.float32), np.ones((n, 2)), np.tile([0.001, 0.01], (n, 1)),
                  rng.random(n))
    rows = np.arange(n)
    fails = Degradation(slot=0, start=100, drop=0.9, rate=1.0, seed=1)

    def served(alarm_z: float):
        controller = ComplianceController(ComplianceSettings(min_decisions=10, min_labels=5, window=50, correction={
            "min_labels": 5, "prior": 5, "label_window": 40, "alarm_z": alarm_z}))
        for _ in range(40):  # slot 1: 0.45 below its predictions, with no noise to doubt it
            controller.record_residual("correction:1", -0.45, 40)
        return replay_stream(predictor, controller, rows, split, 0.45, "tier", 1.0, 20, 8, seed=0, degradation=fails)

    on_any, on_proof = served(0.0), served(5.0)
    np.testing.assert_array_equal(on_any.slot, on_proof.slot)  # the flag routes nothing
    assert (on_any.slot[:100] == 0).all() and not on_any.infeasible[:100].any()
    first = [int(np.argmax(t.infeasible)) if t.infeasible.any() else n for t in (on_any, on_proof)]
    assert 100 < first[0] < first[1] < n  # flagged on any shortfall first, on 5 SE of proof later


@pytest.mark.parametrize("settings, fragment", [('{"start-z": 0}', "start-z: Extra inputs are not permitted"),
                                                ('{"start_z": -1}', "start_z: Input should be greater than or equal to 0")])
def test_bad_compliance_settings_name_the_field_and_the_allowed_ones(tmp_path, capsys, settings, fragment):
    from litellm_proteus.cli import main

    assert main(["replay", "--out", str(tmp_path), "--compliance", settings]) == 2
    err = capsys.readouterr().err
    assert f"error: --compliance: {fragment}" in err and "start_z" in err.split("fields:")[1]


def test_a_stream_shorter_than_its_window_names_the_flags_it_breaks(tmp_path, capsys):
    from litellm_proteus.cli import main

    assert main(["replay", "--out", str(tmp_path), "--length", "400"]) == 2  # --window 500, --shift-at 1000 by default
    err = capsys.readouterr().err
    assert "error: need 0 < --shift-at (1000) < --length (400); 1 <= --window (500) <= --length (400)" in err


@pytest.mark.parametrize("argv, message", [
    (["--window", "0"], "1 <= --window (0) <= --length (4000)"),
    (["--seed", "-1"], "--seed (-1) >= 0"),
    (["--min-group-rows", "-1"], "--min-group-rows (-1) >= 1"),
    (["--fixed-deltas", "nan", "0.01"], "--fixed-deltas: offsets must be finite numbers"),
    (["--tiers", "a=0.7", "a=0.8"], "--tiers: tier 'a' is given twice (0.7 and 0.8)"),
])
def test_bad_flags_are_refused_naming_them_and_leave_no_out_folder(tmp_path, capsys, argv, message):
    from litellm_proteus.cli import main

    assert main(["replay", "--out", str(tmp_path / "out"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys):
    from litellm_proteus.cli import main

    (tmp_path / "afile").write_text("")
    assert main(["replay", "--out", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert "error: --out" in err and "is a file" in err


def test_a_stream_too_long_to_hold_is_refused_naming_the_limit(tmp_path, capsys):
    from litellm_proteus.cli import main

    assert main(["replay", "--out", str(tmp_path), "--length", "100000000"]) == 2
    assert "--length (100000000) <= 1000000" in capsys.readouterr().err


def test_test_tasks_unseen_in_train_and_val_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"none of the test tasks \['arc', 'mbpp'\] appears there \(train/validation tasks: \['wino'\]\)"):
        task_pools(["arc"] * 5 + ["mbpp"] * 5, ["wino"] * 5, np.ones((5, 2)), 1)


@pytest.mark.parametrize("label_delay, labels_read", [(0, 12), (1, 12), (3, 10)])
def test_labels_reach_the_controller_only_for_requests_already_decided(label_delay, labels_read):
    from types import SimpleNamespace

    class Taus:
        def effective(self, tau):
            return tau, None

        def reference_p(self, *_):
            return 0.8

    class Predictor:  # every request: slot 0 at p 0.9, and its outcome is 1
        taus, mix_operating_points = Taus(), False

        def decide_embeddings(self, emb, taus, candidates, draws, deltas):
            return [SimpleNamespace(slot=0, index=0, p=[0.9] * len(c), p_correction=None, tau_effective=t)
                    for c, t in zip(candidates, taus)]

    n = 16
    split = Split(np.zeros((n, 4), dtype=np.float32), np.ones((n, 2)), np.ones((n, 2)), np.zeros(n))
    controller = ComplianceController(ComplianceSettings())
    labels = []
    record = controller.record_feedback
    controller.record_feedback = lambda key, tau, p, correct: (labels.append((float(p), float(correct))),
                                                               record(key, tau, p, correct))
    replay_stream(Predictor(), controller, np.arange(n), split, 0.8, "tier", 1.0, label_delay, 4, seed=0)
    # the last batch starts at request 12: it reads the labels of requests 0 .. min(11, 12 - label_delay)
    assert labels == [(0.9, 1.0)] * labels_read
