"""``decide_embeddings`` scores all requests at once; it must equal scoring them one by one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from litellm_proteus.model import INFERENCE_LAMBDA, routing_scores
from litellm_proteus.predictor import Candidate, ProteusPredictor


def one_by_one(predictor: ProteusPredictor, embeddings, taus, candidates):
    """The per-request loop eq. 2 was first written as (reference implementation)."""
    effective = [predictor.taus.effective(t) for t in taus]
    tau_norm = torch.tensor([predictor.taus.policy_tau_norm(t) for t, _ in effective], dtype=torch.float32)
    with torch.inference_mode():
        z = predictor.network.model.embed(torch.as_tensor(embeddings))
        p_all = torch.sigmoid(predictor.network.model.performance_logits(z))
        mu = predictor.network.model.policy(z, tau_norm, INFERENCE_LAMBDA).mean
        boost, gamma = predictor.network.model.boost.detach(), predictor.network.model.gamma.detach()
    out = []
    for row, cands in enumerate(candidates):
        slots = torch.tensor([c.slot for c in cands])
        cost_norm = torch.as_tensor(predictor.costs.normalize([c.cost_usd for c in cands]))
        s = routing_scores(p_all[row, slots].unsqueeze(0), mu[row : row + 1], boost[slots], gamma, cost_norm).squeeze(0)
        out.append((int(s.argmax()), s.tolist(), p_all[row, slots].tolist(), float(mu[row])))
    return out


def test_batched_scores_equal_per_request_scores(make_artifact):
    predictor = ProteusPredictor(make_artifact(seed=3), device="cpu")
    rng = np.random.default_rng(0)
    n = 200
    embeddings = rng.normal(size=(n, 384)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    taus = rng.uniform(0.6, 0.97, n).tolist()  # some outside tau_range: clamped
    candidates = [
        [Candidate(int(s), float(10 ** rng.uniform(-6, -1))) for s in rng.integers(0, 11, rng.integers(1, 14))]
        for _ in range(n)
    ]  # 1..13 candidates per request, repeated slots included (one model, several deployments)
    batched = predictor.decide_embeddings(embeddings, taus, candidates)
    for decision, (index, scores, p, mu), cands in zip(batched, one_by_one(predictor, embeddings, taus, candidates), candidates):
        assert decision.index == index and decision.slot == cands[index].slot
        assert decision.scores == pytest.approx(scores, abs=1e-6) and len(decision.scores) == len(cands)
        assert decision.p == pytest.approx(p, abs=1e-7) and decision.mu == pytest.approx(mu, abs=1e-7)


def test_repeated_prompts_hit_the_memory_cache(make_artifact):
    predictor = ProteusPredictor(make_artifact(), device="cpu")
    assert predictor.encoder.backend == "fused" and predictor.encoder.memory is not None
    cands = [Candidate(0, 1e-4), Candidate(5, 1e-2)]
    first = predictor.decide(["What is the capital of France?"], [0.85], [cands])
    again = predictor.decide(["What is the capital of France?"], [0.85], [cands])
    assert predictor.encoder.memory.hits == 1 and first == again


def test_predictor_speed_options_are_validated(make_artifact):
    with pytest.raises(ValueError, match="threads must be >= 1"):
        ProteusPredictor(make_artifact(), device="cpu", threads=0)
