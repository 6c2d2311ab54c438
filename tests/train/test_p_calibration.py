"""Per-slot p calibration: the fits, the choice by cross-validated log-loss, the manifest field, and
the runtime applying it to the reported p while routing on the raw p."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from litellm_proteus.artifact import MANIFEST_FILE, PCalibration, SlotCalibration, read_manifest
from proteus_train.p_calibration import (
    expected_calibration_error,
    fit_isotonic,
    fit_p_calibration,
    fit_platt,
)


def overconfident(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw p pushed away from 0.5 (true probability = 0.5 + (p - 0.5) / 2)."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    return p, (rng.random(n) < 0.5 + (p - 0.5) / 2).astype(float)


def test_ece_of_perfect_and_biased_predictions():
    y = np.r_[np.ones(70), np.zeros(30)]
    assert expected_calibration_error(np.full(100, 0.7), y) == pytest.approx(0.0)
    assert expected_calibration_error(np.full(100, 0.9), y) == pytest.approx(0.2)


def test_fits_reduce_calibration_error_on_held_out_rows():
    p, y = overconfident(4000)
    test_p, test_y = overconfident(4000, seed=1)
    before = expected_calibration_error(test_p, test_y)
    for fit in (fit_isotonic, fit_platt):
        after = expected_calibration_error(fit(p, y).apply(test_p), test_y)
        assert after < before / 2
    platt = fit_platt(p, y)
    assert 0.3 < platt.a < 0.7  # shrinks the logit
    iso = fit_isotonic(p, y)
    assert np.all(np.diff(iso.y) >= 0) and np.all(np.diff(iso.x) >= 0)


def test_choice_per_slot_by_cross_validated_log_loss():
    p_bad, y_bad = overconfident(2000)
    rng = np.random.default_rng(2)
    p_good = rng.uniform(0.05, 0.95, 2000)
    y_good = (rng.random(2000) < p_good).astype(float)
    scores = np.stack([y_bad, y_good], axis=1)
    scores[:10, 1] = np.nan  # unobserved cells are left out
    cal = fit_p_calibration(np.stack([p_bad, p_good], axis=1), scores, fitted_on="test")
    assert cal.slots[0].method in ("platt", "isotonic")
    assert cal.metrics["per_slot"]["0"]["ece_after_in_sample"] < cal.metrics["per_slot"]["0"]["ece_before"]
    losses = cal.metrics["per_slot"]["1"]["cv_log_loss"]
    assert losses[cal.slots[1].method] == min(losses.values())


def test_an_unlabelled_slot_and_separable_outcomes_fit_without_numpy_warnings():
    """A decision log may never label a slot, and a slot's few labels may be separable by p."""
    p = np.linspace(0.05, 0.95, 200)
    scores = np.stack([(p > 0.5).astype(float), np.full(200, np.nan)], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cal = fit_p_calibration(np.stack([p, p], axis=1), scores, fitted_on="test")
        separable = fit_platt(p, scores[:, 0])
    assert cal.slots[1].method == "identity" and np.isnan(cal.metrics["per_slot"]["1"]["cv_log_loss"]["identity"])
    assert separable.a > 10  # steep, and finite


def test_manifest_field_is_optional_and_checked(make_artifact):
    directory = make_artifact(["small", "large"])
    assert read_manifest(directory).p_calibration is None
    raw = json.loads((directory / MANIFEST_FILE).read_text())
    raw["p_calibration"] = {"slots": [{"method": "platt", "a": 0.5, "b": 0.1}]}  # one slot for two models
    (directory / MANIFEST_FILE).write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="p_calibration.slots has 1 entries for 2 model slots"):
        read_manifest(directory)
    with pytest.raises(ValueError, match="non-decreasing"):
        SlotCalibration(method="isotonic", x=[0.2, 0.1], y=[0.1, 0.2])


def test_predictor_reports_calibrated_p_and_routes_as_before(make_artifact, tmp_path):
    from litellm_proteus.predictor import Candidate, ProteusPredictor

    plain_dir = make_artifact(["small", "large"], directory=tmp_path / "plain")
    calibrated = PCalibration(slots=[
        SlotCalibration(method="isotonic", x=[0.0, 1.0], y=[0.3, 0.3]),  # constant 0.3
        SlotCalibration(method="platt", a=1.0, b=0.0),  # identity through the logit
    ])
    cal_dir = make_artifact(["small", "large"], directory=tmp_path / "calibrated", p_calibration=calibrated)
    emb = np.random.default_rng(0).normal(size=(6, 384)).astype(np.float32)
    candidates = [[Candidate(1, 0.01), Candidate(0, 0.001), Candidate(1, 0.02)]] * 6
    plain = ProteusPredictor(plain_dir).decide_embeddings(emb, [0.8] * 6, candidates)
    cal = ProteusPredictor(cal_dir).decide_embeddings(emb, [0.8] * 6, candidates)
    assert [d.index for d in cal] == [d.index for d in plain] and [d.scores for d in cal] == [d.scores for d in plain]
    for a, b in zip(plain, cal):
        assert b.p[1] == pytest.approx(0.3)  # slot 0, calibrated
        assert b.p[0] == pytest.approx(a.p[0], abs=1e-6) and b.p[2] == pytest.approx(a.p[2], abs=1e-6)


def test_isotonic_calibration_of_tied_p_is_their_mean_outcome_whatever_the_row_order():
    """A prompt asked again gives the same p on every row: those rows are one point, calibrated to
    their mean outcome, not to whichever block the row order happened to leave last."""
    v = float(np.float32(0.3))
    for y in ([1, 1, 0, 0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 1, 1, 1.0]):
        cal = fit_isotonic(np.full(8, v), np.array(y))
        assert cal.x == [v] and cal.apply(np.array([v]))[0] == pytest.approx(0.375)
    cal = fit_isotonic(np.full(8, 0.45), np.array([1, 1, 0, 0, 0, 0, 0, 1.0]))  # float64 ties: one knot, no error
    assert cal.x == [0.45] and cal.y == [0.375]
    # ties beside distinct values: the tied rows pool with their neighbours as one weighted point
    cal = fit_isotonic(np.array([0.2, 0.5, 0.5, 0.5, 0.8]), np.array([1.0, 0.0, 0.0, 1.0, 1.0]))
    assert cal.x == pytest.approx([0.425, 0.8]) and cal.y == pytest.approx([0.5, 1.0])  # (0.2, 1) and 3 x (0.5, 1/3)
