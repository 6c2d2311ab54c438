"""The deployment correction (``litellm_proteus/deployment_correction.py``): the shrunk residual,
its windows apart from the breaker's, the shared Redis windows, and the predictor applying it."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from litellm_proteus.compliance import ComplianceController, ComplianceSettings
from litellm_proteus.deployment_correction import (
    CorrectionSettings,
    DeploymentCorrection,
    alarm_best_p,
    alarm_correction,
    correction,
)
from litellm_proteus.predictor import Candidate, ProteusPredictor
from litellm_proteus.quality_breaker import BreakerSettings, QualityBreaker

ON = CorrectionSettings(enabled=True, min_labels=20, prior=100, refresh_s=0.0, label_window=200)


def _window(residuals):
    r = np.asarray(residuals, dtype=float)
    return len(r), float(r.sum()), float((r * r).sum())


def test_the_correction_is_the_mean_residual_shrunk_by_the_prior():
    assert correction(*_window([-0.5] * 19), ON) == 0.0  # too few labels
    assert correction(*_window([-0.5] * 20), ON) == pytest.approx(20 / 120 * -0.5)
    assert correction(*_window([0.1] * 100), ON) == 0.0  # above its predictions: p is never raised
    assert correction(*_window([-0.15] * 10_000), ON) == pytest.approx(-0.15, abs=0.002)  # many labels: the whole residual


def test_z_leaves_the_shortfall_within_noise_uncorrected():
    """Binary labels against p = 0.7: residuals 0.3 or -0.7.  z counts only what lies beyond z
    standard errors of the mean residual."""
    gated = CorrectionSettings(min_labels=20, prior=0, z=1.0)
    at_its_predictions = _window([0.3] * 70 + [-0.7] * 30)  # 70 % right: mean residual 0
    assert correction(*at_its_predictions, gated) == 0.0
    assert correction(*_window([0.3] * 68 + [-0.7] * 32), gated) == 0.0  # 2 pp short: within one SE
    n, total, total_sq = _window([0.3] * 50 + [-0.7] * 50)  # 20 pp short
    se = np.sqrt((total_sq / n - (total / n) ** 2) * n / (n - 1) / n)
    assert correction(n, total, total_sq, gated) == pytest.approx(-0.2 + se)
    assert correction(n, total, total_sq, CorrectionSettings(min_labels=20, prior=0)) == pytest.approx(-0.2)


def test_the_alarm_counts_only_the_shortfall_the_labels_prove():
    settings = CorrectionSettings(min_labels=20, prior=100, alarm_z=1.645)
    n, total, total_sq = _window([0.3] * 65 + [-0.7] * 35)  # 5 pp short: within 1.645 SE (4.8 pp)
    assert correction(n, total, total_sq, settings) < 0.0  # routing is lowered on it
    assert alarm_correction(n, total, total_sq, settings) == 0.0  # the infeasible flag is not
    n, total, total_sq = _window([0.3] * 400 + [-0.7] * 600)  # 30 pp short
    se = np.sqrt((total_sq / n - (total / n) ** 2) * n / (n - 1) / n)
    assert alarm_correction(n, total, total_sq, settings) == pytest.approx(-0.3 + 1.645 * se)  # no shrinkage
    assert alarm_correction(*_window([-0.5] * 19), settings) == 0.0  # too few labels


def test_the_alarm_best_p_swaps_each_routing_correction_for_its_alarm_correction():
    assert alarm_best_p([0.7, 0.6], [-0.2, 0.0], [0.0, 0.0]) == pytest.approx(0.9)
    assert alarm_best_p([0.7, 0.6], [-0.2, 0.0], [-0.5, 0.0]) == pytest.approx(0.6)
    assert alarm_best_p([0.7, 0.6], (), [-0.1, 0.0]) == pytest.approx(0.6)  # no correction applied
    assert alarm_best_p([0.05, 0.02], [0.0, 0.0], [-0.2, -0.2]) == 0.0  # clipped like p


def test_offsets_follow_the_window_and_stay_apart_from_the_breakers():
    controller = ComplianceController(ComplianceSettings())
    corrector = DeploymentCorrection(ON, controller)
    breaker = QualityBreaker(BreakerSettings(enabled=True, min_labels=20, refresh_s=0.0), controller)
    for _ in range(100):
        corrector.record("d1", -0.3)
    assert corrector.offsets(["d1", "d2"]) == ({"d1": pytest.approx(-0.15), "d2": 0.0},  # shrunk: 100 / (100 + 100)
                                               {"d1": pytest.approx(-0.3), "d2": 0.0})  # proven: no noise, no shrinkage
    assert breaker.residuals.stats(["d1"]) == {"d1": (0, 0.0, 0.0)}  # the breaker's window is its own
    for _ in range(200):  # the window (200) now holds only labels that agree with the predictions
        corrector.record("d1", 0.0)
    assert corrector.offsets(["d1"]).routing["d1"] == pytest.approx(0.0, abs=1e-12)


def test_each_deployment_is_fresh_on_its_own_and_read_at_once_after_a_label_of_ours():
    """A proxy's model groups ask for different deployments: reading one group's must not make
    another's cached numbers look fresh."""
    now = [0.0]
    controller = ComplianceController(ComplianceSettings())
    corrector = DeploymentCorrection(ON.model_copy(update={"refresh_s": 60.0, "min_labels": 2, "prior": 1}),
                                     controller, clock=lambda: now[0])
    assert corrector.cached_offsets(["a"]) is None  # never read: due, and the request path must not read here
    assert corrector.offsets(["a"]).routing == {"a": 0.0} and corrector.offsets(["b"]).routing == {"b": 0.0}
    assert corrector.cached_offsets(["a", "b"]).routing == {"a": 0.0, "b": 0.0}
    for _ in range(3):
        controller.record_residual("correction:b", -0.5, 200)  # another worker's labels for b
    now[0] = 30.0
    assert corrector.offsets(["a"]).routing == {"a": 0.0}  # a read for group A ...
    assert corrector.offsets(["b"]).routing == {"b": 0.0}  # ... leaves b on its own clock: cached until 60 s
    now[0] = 61.0
    assert corrector.cached_offsets(["b"]) is None
    assert corrector.offsets(["a"]).routing == {"a": 0.0}
    assert corrector.offsets(["b"]).routing["b"] == pytest.approx(3 / 4 * -0.5)
    corrector.record("b", -0.5)  # this process's own label: read at once, within refresh_s
    assert corrector.offsets(["b"]).routing["b"] == pytest.approx(4 / 5 * -0.5)


def test_disabled_records_nothing_and_corrects_nothing():
    controller = ComplianceController(ComplianceSettings())
    corrector = DeploymentCorrection(CorrectionSettings(enabled=False), controller)
    for _ in range(50):
        corrector.record("d1", -0.9)
    assert corrector.offsets(["d1"]).routing == {"d1": 0.0}
    assert controller.residual_stats(["correction:d1"]) == {"correction:d1": (0, 0, 0)}


def test_every_worker_reads_the_same_redis_windows(redis_server):
    a = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    b = ComplianceController(ComplianceSettings(), redis_url=redis_server.url)
    writer, reader = DeploymentCorrection(ON, a), DeploymentCorrection(ON, b)
    for r in [-0.5, -0.1] * 50:
        writer.record("d1", r)
    assert reader.offsets(["d1"]).routing["d1"] == pytest.approx(100 / 200 * -0.3)  # b never recorded a label itself


def test_settings_name_the_bad_field():
    with pytest.raises(ValidationError, match="prior"):
        ComplianceSettings(correction={"enabled": True, "prior": -1})
    with pytest.raises(ValidationError, match="z"):
        ComplianceSettings(correction={"enabled": True, "z": 6})
    with pytest.raises(ValidationError, match="extra"):
        ComplianceSettings(correction={"enabld": True})
    with pytest.raises(ValidationError, match=r"min_labels \(600\) must be at most label_window \(500\)"):
        ComplianceSettings(correction={"enabled": True, "min_labels": 600})


def test_the_predictor_adds_each_candidates_offset_to_its_p(make_artifact):
    predictor = ProteusPredictor(make_artifact(seed=3), device="cpu")
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(64, 384)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    slots = [0, 5, 10]
    plain = predictor.decide_embeddings(embeddings, [0.85] * 64, [[Candidate(s, 1e-3 * (s + 1)) for s in slots]] * 64)
    zero = predictor.decide_embeddings(embeddings, [0.85] * 64,
                                       [[Candidate(s, 1e-3 * (s + 1), 0.0) for s in slots]] * 64)
    assert zero == plain
    chosen = {d.index for d in plain}
    favourite = max(chosen, key=[d.index for d in plain].count)
    offsets = [-0.9 if i == favourite else 0.0 for i in range(3)]  # the favourite proven far worse than predicted
    corrected = predictor.decide_embeddings(
        embeddings, [0.85] * 64, [[Candidate(s, 1e-3 * (s + 1), o) for s, o in zip(slots, offsets)]] * 64
    )
    assert all(d.index != favourite for d in corrected) and all(d.p_correction == () for d in plain)
    for before, after in zip(plain, corrected):  # clipped to [0, 1]; p_correction: what clipping kept
        assert after.p == pytest.approx([min(max(p + o, 0.0), 1.0) for p, o in zip(before.p, offsets)], abs=1e-6)
        assert after.p_correction == pytest.approx([a - b for a, b in zip(after.p, before.p)], abs=1e-12)
