"""The hindsight limit: hand-made cases and the scipy LP on random ones."""

from __future__ import annotations

import numpy as np
import pytest

from proteus_train.evaluation.limit import limit_cost_lp, limit_curve


def test_two_queries_by_hand():
    # query 0: both models correct; query 1: only the expensive one
    scores = np.array([[1.0, 1.0], [0.0, 1.0]])
    costs = np.array([[1.0, 10.0], [1.0, 10.0]])
    curve = limit_curve(scores, costs)
    assert curve.base_accuracy == pytest.approx(0.5) and curve.max_accuracy == pytest.approx(1.0)
    assert curve.cost(0.5) == pytest.approx(1.0)  # everyone on the cheap model already reaches 50 %
    assert curve.cost(0.0) == pytest.approx(1.0)
    assert curve.cost(1.0) == pytest.approx(5.5)  # query 1 upgraded: (1 + 10) / 2
    assert curve.cost(0.75) == pytest.approx(3.25)  # half of query 1 upgraded: (1 + 1 + 0.5 * 9) / 2
    assert curve.cost(1.01) is None  # beyond the oracle: infeasible
    assert curve.cost_per_1k(1.0) == pytest.approx(5500.0)


def test_dominated_and_non_convex_models_are_skipped():
    # model 1 is dearer and worse than model 0's outcome on this query: never worth buying;
    # model 2 (0.5 at cost 2) lies under the chord from model 0 to model 3 (1.0 at cost 3)
    scores = np.array([[0.2, 0.1, 0.5, 1.0]])
    costs = np.array([[1.0, 1.5, 2.9, 3.0]])
    curve = limit_curve(scores, costs)
    for tau in (0.2, 0.4, 0.6, 0.8, 1.0):
        assert curve.cost(tau) == pytest.approx(limit_cost_lp(scores, costs, tau))


@pytest.mark.parametrize("seed", range(6))
def test_greedy_equals_the_linear_program(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(3, 25)), int(rng.integers(2, 6))
    scores = (rng.random((n, k)) < 0.6).astype(float) if seed % 2 else rng.random((n, k))
    costs = rng.random((n, k)) * rng.choice([1.0, 1e-3], size=(n, k))
    if seed % 3 == 0:
        costs[:, 0] = costs[:, 1]  # ties in cost
    curve = limit_curve(scores, costs)
    for tau in np.linspace(0.0, 1.0, 21):
        lp = limit_cost_lp(scores, costs, tau)
        greedy = curve.cost(float(tau))
        assert (greedy is None) == (lp is None)
        if lp is not None:
            assert greedy == pytest.approx(lp, rel=1e-7, abs=1e-12)


def test_limit_is_monotone_and_below_any_routing():
    rng = np.random.default_rng(9)
    scores = (rng.random((200, 5)) < 0.5).astype(float)
    costs = rng.random((200, 5))
    curve = limit_curve(scores, costs)
    taus = np.linspace(curve.base_accuracy, curve.max_accuracy, 30)
    values = [curve.cost(t) for t in taus]
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))
    for _ in range(20):  # any concrete routing pays at least the limit for its accuracy
        choice = rng.integers(0, 5, size=200)
        acc = scores[np.arange(200), choice].mean()
        assert costs[np.arange(200), choice].mean() >= curve.cost(acc) - 1e-12


def test_rejects_unknown_outcomes():
    with pytest.raises(ValueError, match="NaN"):
        limit_curve(np.array([[1.0, np.nan]]), np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="shape"):
        limit_curve(np.ones((2, 2)), np.ones((2, 3)))
