"""``route_log`` (offline: eval, calibration) must route exactly as the proxy's predictor does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from litellm_proteus.artifact import TauCalibration, load_artifact, save_artifact
from litellm_proteus.predictor import Candidate, ProteusPredictor
from proteus_train.routing import route_log

ROUTERBENCH_MODELS = [f"model-{i}" for i in range(11)]

CALIBRATION = TauCalibration(
    requested=[0.7, 0.9],
    policy_tau=[0.72, 0.95],
    margin=0.01,
    frontier_policy_tau=[0.66, 0.75, 0.85, 0.95],
    frontier_accuracy=[0.70, 0.78, 0.86, 0.92],
    frontier_cost_usd=[1e-4, 5e-4, 2e-3, 1e-2],
)


@pytest.fixture
def tau_sensitive_artifact(build_random_artifact, tmp_path):
    """A random artifact whose Beta head is not at its initial mu = 1/2: mu follows tau."""
    model, manifest = build_random_artifact(ROUTERBENCH_MODELS, seed=5, calibration=CALIBRATION)
    torch.manual_seed(5)
    with torch.no_grad():
        for parameter in model.beta_head.parameters():
            parameter.add_(torch.randn_like(parameter))
    return save_artifact(tmp_path / "artifact", model, manifest)


@pytest.mark.parametrize("with_draws", [True, False])
def test_route_log_matches_the_runtime_decision(tau_sensitive_artifact, with_draws):
    directory = tau_sensitive_artifact
    model, manifest = load_artifact(directory)
    predictor = ProteusPredictor(directory, device="cpu")
    rng = np.random.default_rng(1)
    n, k = 300, len(manifest.models)
    embeddings = rng.normal(size=(n, 384)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    costs = 10 ** rng.uniform(-5, -2, size=(n, k))
    taus = rng.uniform(0.65, 0.95, n)  # some outside tau_range (0.7, 0.9): clamped alike
    draws = rng.random(n) if with_draws else None
    offline = route_log(model, manifest, embeddings, costs, taus, draws=draws)
    candidates = [[Candidate(slot, float(c)) for slot, c in enumerate(row)] for row in costs]
    online = predictor.decide_embeddings(embeddings, taus.tolist(), candidates, None if draws is None else draws.tolist())
    assert offline.choice.tolist() == [d.slot for d in online]
    assert offline.mu == pytest.approx(np.array([d.mu for d in online]), abs=1e-6)
    if with_draws:
        assert len({d.policy_tau for d in online}) > 2  # the rows really were spread over the frontier
    # ... and the policy tau matters: routing every row at the table's point changes the choices
    other = route_log(model, manifest, embeddings, costs, taus, draws=None if with_draws else rng.random(n))
    assert not np.allclose(other.mu, offline.mu)


def test_route_log_rejects_misaligned_draws(make_artifact):
    model, manifest = load_artifact(make_artifact(calibration=CALIBRATION))
    with pytest.raises(ValueError, match="draws has 2 rows for 3"):
        route_log(model, manifest, np.zeros((3, 384), np.float32), np.ones((3, len(manifest.models))), 0.8, draws=np.zeros(2))


def test_route_log_chooses_among_each_rows_candidates_as_the_runtime_does(tau_sensitive_artifact):
    """A decision log knows only some slots per request: offline routing never picks another, and
    picks what the runtime picks among the same live candidates."""
    model, manifest = load_artifact(tau_sensitive_artifact)
    predictor = ProteusPredictor(tau_sensitive_artifact, device="cpu")
    rng = np.random.default_rng(2)
    n, k = 200, len(manifest.models)
    embeddings = rng.normal(size=(n, 384)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    costs = 10 ** rng.uniform(-5, -2, size=(n, k))
    taus = rng.uniform(0.7, 0.9, n)
    free = route_log(model, manifest, embeddings, costs, taus).choice
    allowed = np.ones((n, k), dtype=bool)
    allowed[np.arange(n), free] = False  # take away each row's unconstrained choice
    offline = route_log(model, manifest, embeddings, np.where(allowed, costs, np.nan), taus, candidates=allowed)
    assert allowed[np.arange(n), offline.choice].all()
    live = [[Candidate(slot, float(costs[i, slot])) for slot in np.flatnonzero(allowed[i])] for i in range(n)]
    online = predictor.decide_embeddings(embeddings, taus.tolist(), live)
    assert offline.choice.tolist() == [d.slot for d in online]
