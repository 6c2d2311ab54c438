"""The validated reference p (``TauCalibration.requested_p_ref`` / ``frontier_p_ref``) is what the
serving path's decisions predict when every row is routed at that entry."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from litellm_proteus.artifact import PCalibration, SlotCalibration, TauCalibration, load_artifact, save_artifact
from litellm_proteus.operating_points import POLICY, OperatingPoint
from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.p_reference import with_reference_p

MODELS = [f"model-{i}" for i in range(4)]
CALIBRATION = TauCalibration(
    requested=[0.7, 0.8, 0.9],
    policy_tau=[0.72, 0.8, 0.95],
    margin=0.01,
    frontier_policy_tau=[0.66, 0.75, 0.85, 0.95],
    frontier_accuracy=[0.70, 0.78, 0.86, 0.92],
    frontier_cost_usd=[1e-4, 5e-4, 2e-3, 1e-2],
    frontier_point=[OperatingPoint(kind="slot", slot=0), POLICY, POLICY, OperatingPoint(kind="quality")],
)
P_CALIBRATION = PCalibration(slots=[SlotCalibration(method="platt", a=1.5, b=-0.2)] * len(MODELS))


def test_reference_p_is_the_mean_calibrated_p_the_runtime_chooses_at_each_entry(build_random_artifact, tmp_path):
    model, manifest = build_random_artifact(MODELS, seed=3, calibration=CALIBRATION, p_calibration=P_CALIBRATION)
    torch.manual_seed(3)
    with torch.no_grad():  # off its initial mu = 1/2: the policy tau matters
        for parameter in model.beta_head.parameters():
            parameter.add_(torch.randn_like(parameter))
    rng = np.random.default_rng(0)
    n = 200
    embeddings = rng.normal(size=(n, 384)).astype(np.float32)
    costs = 10 ** rng.uniform(-5, -2, size=(n, len(MODELS)))
    calibration = with_reference_p(model, manifest, embeddings, costs)
    assert len(calibration.requested_p_ref) == 3 and len(calibration.frontier_p_ref) == 4
    directory = save_artifact(tmp_path / "artifact", model, manifest.model_copy(update={"calibration": calibration}))
    assert load_artifact(directory)[1].calibration.frontier_p_ref == calibration.frontier_p_ref
    predictor = ProteusPredictor(directory, device="cpu")
    candidates = [[Candidate(s, float(c)) for s, c in enumerate(row)] for row in costs]

    def served_p(tau: float, draws=None) -> float:
        decisions = predictor.decide_embeddings(embeddings, [tau] * n, candidates, draws)
        return float(np.mean([d.p[d.index] for d in decisions]))

    for tau, reference in zip(CALIBRATION.requested, calibration.requested_p_ref):  # one point per request
        assert served_p(tau) == pytest.approx(reference, abs=1e-6)
    for i in (1, 2):  # tau = accuracy - margin routes every row (draw 0) at hull point i
        tau = CALIBRATION.frontier_accuracy[i] - CALIBRATION.margin
        assert served_p(tau, [0.0] * n) == pytest.approx(calibration.frontier_p_ref[i], abs=1e-6)
    assert len(set(calibration.frontier_p_ref)) == 4  # the points really differ
