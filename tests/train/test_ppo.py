import math

import numpy as np
import pytest
import torch

from litellm_proteus.model import ModelConfig, ProteusModel
from litellm_proteus.predictor import TauMapper
from proteus_train.calibration import calibrate, cost_frontier, derive_tau_range
from proteus_train.config import TrainConfig
from proteus_train.heads import fit_boosts, masked_bce
from proteus_train.ppo import dual_update, reward


def test_dual_update_is_projected_gradient_step():
    assert dual_update(0.0, 0.9, 0.8, 0.4) == pytest.approx(0.04)
    assert dual_update(0.05, 0.8, 1.0, 0.4) == 0.0  # [.]_+ keeps lambda >= 0
    assert dual_update(1.0, 0.9, 0.9, 0.4) == 1.0
    assert dual_update(9.9, 1.0, 0.0, 0.4, lam_max=10.0) == 10.0


def test_reward_equation_4():
    correct = torch.tensor([1.0, 0.0])
    cost = torch.tensor([0.5, 0.1])
    r = reward(correct, cost, tau=0.9, tau_norm=0.25, lam=2.0)
    w_q, w_c = math.exp(0.5), math.exp(1.5)
    expected = torch.tensor([w_q - w_c * 0.5 + 2.0 * 0.1, -w_c * 0.1 + 2.0 * -0.9])
    assert torch.allclose(r, expected)
    no_lambda = reward(correct, cost, tau=0.9, tau_norm=0.25, lam=2.0, use_lambda=False)
    assert torch.allclose(no_lambda, torch.tensor([w_q - w_c * 0.5, -w_c * 0.1]))


def test_reward_weights_shift_from_cost_to_quality():
    correct, cost = torch.tensor([1.0]), torch.tensor([1.0])
    low = reward(correct, cost, 0.8, 0.0, 0.0)
    high = reward(correct, cost, 0.9, 1.0, 0.0)
    assert float(low) < 0 < float(high)


def test_masked_bce_ignores_nan():
    logits = torch.tensor([[0.0, 5.0]])
    targets = torch.tensor([[1.0, float("nan")]])
    assert float(masked_bce(logits, targets)) == pytest.approx(math.log(2), rel=1e-5)


def test_derived_tau_range_uses_best_single_ceiling_and_oracle():
    scores = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 5, dtype=float)  # each model 0.5, oracle 0.75
    perfect_p = scores + 0.1 * np.array([1, 0])  # a head that knows the outcomes: ceiling 0.75
    lo, hi = derive_tau_range(scores, perfect_p, below_best=0.1)
    assert lo == pytest.approx(0.4) and hi == pytest.approx(0.74)  # capped 0.01 under the oracle
    clueless = np.tile([0.9, 0.1], (20, 1))  # always model 0: ceiling = best single = 0.5
    assert derive_tau_range(scores, clueless, below_best=0.1) == (0.4, 0.51)


def test_calibration_is_monotone_and_conservative():
    taus = np.array([0.80, 0.82, 0.84, 0.86, 0.88])
    acc = np.array([0.83, 0.82, 0.86, 0.87, 0.89])  # dips: envelope must not trust 0.83 at 0.80
    table, declared = calibrate(taus, acc, margin=0.0, step=0.01)
    req, pol = np.array(table.requested), np.array(table.policy_tau)
    assert np.all(np.diff(pol) >= 0)
    assert declared == (0.80, 0.89)
    # requested 0.83 needs a policy tau whose envelope accuracy >= 0.83 -> 0.84 (not 0.80)
    assert pol[np.isclose(req, 0.83)][0] == pytest.approx(0.84)
    assert pol[np.isclose(req, 0.82)][0] == pytest.approx(0.80)


def test_cost_frontier_is_the_upper_concave_hull():
    costs = np.array([1.0, 2.0, 3.0, 4.0, 2.5, 5.0, 1.0])
    accs = np.array([0.70, 0.80, 0.82, 0.90, 0.75, 0.90, 0.60])
    # (2.5, .75), (5, .90) and (1, .60) are dominated; (3, .82) lies under the chord (2, .80) -> (4, .90)
    assert cost_frontier(costs, accs) == [0, 1, 3]
    # on a straight line the middle point adds nothing a mixture of the ends does not give
    assert cost_frontier(np.array([1.0, 2.0, 3.0]), np.array([0.7, 0.8, 0.9])) == [0, 2]
    assert cost_frontier(np.array([1.0]), np.array([0.5])) == [0]


def test_calibration_frontier_mixes_to_exactly_the_target():
    taus = np.array([0.80, 0.82, 0.84, 0.86, 0.88])
    acc = np.array([0.80, 0.82, 0.86, 0.85, 0.90])  # 0.84's 0.86 is not trusted (0.86 gives 0.85)
    cost = np.array([1.0, 2.0, 4.0, 5.0, 9.0])  # 0.86: no more accurate than 0.84 (trusted), dearer
    table, declared = calibrate(taus, acc, margin=0.01, step=0.01, costs_usd=cost)
    assert table.frontier_policy_tau == [0.80, 0.82, 0.84, 0.88]
    assert table.frontier_accuracy == pytest.approx([0.80, 0.82, 0.85, 0.90])
    assert table.frontier_cost_usd == pytest.approx([1.0, 2.0, 4.0, 9.0])
    assert declared == (0.80, 0.89)
    from litellm_proteus.artifact import Manifest

    manifest = Manifest.model_construct(tau_range=declared, tau_train_range=(0.80, 0.88), calibration=table)
    mapper = TauMapper(manifest)
    draws = (np.arange(10_000) + 0.5) / 10_000  # evenly spread draws: the shares come out exact
    acc_at = dict(zip(taus, acc))
    cost_at = dict(zip(taus, cost))
    for tau in (0.80, 0.815, 0.83, 0.85, 0.87, 0.89):
        chosen = np.array([mapper.policy_tau(tau, u) for u in draws])
        assert set(np.round(chosen, 6)) <= set(table.frontier_policy_tau)
        mixed_acc = np.mean([acc_at[t] for t in chosen])
        mixed_cost = np.mean([cost_at[t] for t in chosen])
        assert mixed_acc >= tau + 0.01 - 1e-4  # the target, as the pure table promises it
        alone = mapper.policy_tau(tau)  # no draw: the single point the table picks
        assert acc_at[alone] >= tau + 0.01 - 1e-9
        assert mixed_cost <= cost_at[alone] + 1e-9
    # 0.83 + 0.01 sits 2/3 of the way from 0.82 (cost 2) to 0.85 (cost 4): mixed cost 3.33 instead of 4
    chosen = np.array([mapper.policy_tau(0.83, u) for u in draws])
    assert np.mean(chosen == 0.84) == pytest.approx(2 / 3, abs=1e-3)
    assert mapper.policy_tau(0.83) == pytest.approx(0.84)


def _boost_case(offset: float, n: int = 4000, seed: int = 0):
    """Two models; model 1 is right exactly where the predictor says it is likelier than model 0,
    but its predictions are shifted down by ``offset`` (a systematic under-rating b can undo)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, 2, generator=g)
    outcomes = torch.stack([(p[:, 0] >= p[:, 1]).float(), (p[:, 1] > p[:, 0]).float()], dim=-1)
    p_seen = p - torch.tensor([0.0, offset])
    model = ProteusModel(ModelConfig(embed_dim=4, n_models=2, hidden_dim=8))
    return model, p_seen, outcomes


def test_fit_boosts_falls_back_to_zero_when_argmax_p_routes_better():
    # Predictions are already right: any boost can only move queries to the wrong model.
    model, p, outcomes = _boost_case(offset=0.0)
    accuracy = fit_boosts(model, p, outcomes, TrainConfig(data=["unused"], boost_steps=50))
    assert torch.equal(model.boost, torch.zeros(2))
    assert accuracy == pytest.approx(1.0)


def test_fit_boosts_keeps_a_boost_that_undoes_systematic_underrating():
    model, p, outcomes = _boost_case(offset=0.3)
    plain = float(outcomes.gather(-1, p.argmax(-1, keepdim=True)).mean())
    accuracy = fit_boosts(model, p, outcomes, TrainConfig(data=["unused"]))
    assert float(model.boost[1] - model.boost[0]) > 0.1
    assert accuracy > plain + 0.1
