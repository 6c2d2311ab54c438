"""Mixing two cost-frontier operating points per request (``TauCalibration.frontier_*``)."""

from __future__ import annotations

import numpy as np
import pytest

from litellm_proteus.artifact import TauCalibration
from litellm_proteus.predictor import Candidate, ProteusPredictor, mixing_draw

# tau 0.75 + margin 0.01 = 0.76 lies 60 % of the way from the 0.70 point to the 0.80 point
FRONTIER = TauCalibration(
    requested=[0.7, 0.9],
    policy_tau=[0.75, 0.95],
    margin=0.01,
    frontier_policy_tau=[0.66, 0.8, 0.95],
    frontier_accuracy=[0.70, 0.80, 0.92],
    frontier_cost_usd=[1e-4, 1e-3, 1e-2],
)


def test_mixing_draw_is_a_deterministic_uniform_hash():
    draws = np.array([mixing_draw(f"prompt number {i}") for i in range(5000)])
    assert ((draws >= 0) & (draws < 1)).all()
    assert len(np.unique(draws)) == 5000
    counts = np.histogram(draws, bins=10, range=(0, 1))[0]
    assert counts.min() > 420 and counts.max() < 580  # 500 +- ~4 standard deviations
    assert mixing_draw("prompt number 7") == draws[7]
    assert 0 <= mixing_draw("lone surrogate \ud800 and emoji \U0001f600") < 1  # any str hashes


def test_requests_mix_the_two_frontier_points_by_prompt(make_artifact):
    predictor = ProteusPredictor(make_artifact(calibration=FRONTIER), device="cpu")
    prompts = [f"Question {i}: what is {i} times {i + 3}?" for i in range(200)]
    cands = [[Candidate(0, 1e-4), Candidate(5, 1e-2)]] * len(prompts)
    decisions = predictor.decide(prompts, [0.75] * len(prompts), cands)
    chosen = np.array([d.policy_tau for d in decisions])
    assert set(chosen) == {0.66, 0.8}
    expected_upper = np.array([mixing_draw(p) < 0.6 for p in prompts])
    assert np.array_equal(chosen == 0.8, expected_upper)
    assert 0.5 < expected_upper.mean() < 0.7
    embeddings = predictor.encoder.encode(prompts)
    assert predictor.decide_embeddings(embeddings, [0.75] * len(prompts), cands, [mixing_draw(p) for p in prompts]) == decisions
    again = predictor.decide(prompts, [0.75] * len(prompts), cands)
    assert again == decisions  # the same prompt always routes the same way
    # Without draws every request takes the table's single point that meets tau alone
    alone = predictor.decide_embeddings(embeddings[:5], [0.75] * 5, cands[:5])
    assert [d.policy_tau for d in alone] == pytest.approx([np.interp(0.75, [0.7, 0.9], [0.75, 0.95])] * 5)


def test_draws_must_match_requests(make_artifact):
    predictor = ProteusPredictor(make_artifact(calibration=FRONTIER), device="cpu")
    emb = np.zeros((2, 384), dtype=np.float32)
    with pytest.raises(ValueError, match="draws"):
        predictor.decide_embeddings(emb, [0.8, 0.8], [[Candidate(0, 1e-4)]] * 2, draws=[0.5])


def test_artifact_without_frontier_ignores_draws(make_artifact):
    predictor = ProteusPredictor(make_artifact(), device="cpu")
    assert predictor.taus.policy_tau(0.8, 0.1) == predictor.taus.policy_tau(0.8) == 0.8


def test_mixing_can_be_switched_off(make_artifact):
    predictor = ProteusPredictor(make_artifact(calibration=FRONTIER), device="cpu", mix_operating_points=False)
    prompts = [f"Question {i}" for i in range(20)]
    decisions = predictor.decide(prompts, [0.75] * 20, [[Candidate(0, 1e-4)]] * 20)
    assert [d.policy_tau for d in decisions] == pytest.approx([0.8] * 20)


def test_reference_p_follows_the_routing_that_serves_tau():
    from litellm_proteus.predictor import TauMapper

    class _Manifest:  # the fields TauMapper reads
        tau_range = (0.6, 0.95)
        calibration = FRONTIER.model_copy(update={"frontier_p_ref": [0.68, 0.78, 0.9], "requested_p_ref": [0.72, 0.9]})

    mapper = TauMapper(_Manifest())
    # mixing: 60 % at the 0.80 point, 40 % at the 0.70 point (tau 0.75 + margin 0.01)
    assert mapper.reference_p(0.75, mixing=True) == pytest.approx(0.4 * 0.68 + 0.6 * 0.78)
    # one point per request: the table's reference, interpolated like its policy tau
    assert mapper.reference_p(0.8, mixing=False) == pytest.approx(0.81)
    old = TauMapper(type("Old", (), {"tau_range": (0.6, 0.95), "calibration": FRONTIER})())
    assert old.reference_p(0.75, mixing=True) is None and old.reference_p(0.75, mixing=False) is None
    with pytest.raises(ValueError, match="frontier_p_ref"):
        FRONTIER.model_validate({**FRONTIER.model_dump(), "frontier_p_ref": [0.7]})
