"""The hindsight limit: the least cost at which *any* router could reach accuracy tau on a test set.

With every outcome known, the problem is the linear program

    min  sum_{q,i} x_qi c_qi   s.t.  sum_i x_qi = 1 (each query routed once),
         (1/N) sum_{q,i} x_qi s_qi >= tau,   x >= 0,

the LP relaxation of a multiple-choice knapsack.  Its exact optimum is a greedy: start every query
on its cheapest model, then buy "upgrades" along each query's lower convex hull of
(cost, score) points in decreasing order of score gained per dollar, the last one fractionally.
At most one query is split, so the LP value is also the integral optimum up to one query's cost:
it is the floor no router can beat.  ``limit_cost_lp`` (scipy) cross-checks it in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LimitCurve:
    """The piecewise-linear optimal cost as a function of the accuracy target."""

    base_accuracy: float  # everyone on the cheapest model
    base_cost: float  # mean USD per query there
    max_accuracy: float  # the oracle's
    gain: np.ndarray  # cumulative mean-accuracy gain after each upgrade (increasing)
    spend: np.ndarray  # cumulative mean-cost increase after each upgrade

    def cost(self, tau: float) -> float | None:
        """Least mean USD per query reaching mean accuracy tau; None when tau > oracle accuracy."""
        need = tau - self.base_accuracy
        if need <= 1e-12:
            return self.base_cost
        if tau > self.max_accuracy + 1e-12:
            return None
        # the cost curve is piecewise linear in the gained accuracy, through (0, 0) and the upgrades
        return self.base_cost + float(np.interp(need, np.r_[0.0, self.gain], np.r_[0.0, self.spend]))

    def cost_per_1k(self, tau: float) -> float | None:
        cost = self.cost(tau)
        return None if cost is None else cost * 1000.0


def _hull_upgrades(scores: np.ndarray, costs: np.ndarray) -> tuple[int, list[tuple[float, float]]]:
    """For one query: the start model (cheapest, best score among the cheapest) and the
    (delta_cost, delta_score) steps along the upper-left convex hull of better, dearer models."""
    order = np.lexsort((-scores, costs))  # by cost, then best score first
    start = int(order[0])
    hull = [(float(costs[start]), float(scores[start]))]
    for j in order[1:]:
        c, s = float(costs[j]), float(scores[j])
        if s <= hull[-1][1] + 1e-12:  # dominated: dearer and not better than the current top
            continue
        # keep the hull concave: drop points whose slope is not larger than the next one's
        while len(hull) >= 2:
            (c0, s0), (c1, s1) = hull[-2], hull[-1]
            if (s1 - s0) * (c - c1) <= (s - s1) * (c1 - c0):
                hull.pop()
            else:
                break
        hull.append((c, s))
    steps = [(hull[i + 1][0] - hull[i][0], hull[i + 1][1] - hull[i][1]) for i in range(len(hull) - 1)]
    return start, steps


def limit_curve(scores: np.ndarray, costs: np.ndarray) -> LimitCurve:
    scores = np.asarray(scores, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    if scores.shape != costs.shape or scores.ndim != 2 or len(scores) == 0:
        raise ValueError("scores and costs must be equal-shaped non-empty [N, K] arrays")
    if not (np.isfinite(scores).all() and np.isfinite(costs).all()):
        raise ValueError("the limit needs every outcome and cost known (no NaN)")
    n = len(scores)
    base_s = base_c = 0.0
    d_cost: list[float] = []
    d_score: list[float] = []
    for row in range(n):
        start, steps = _hull_upgrades(scores[row], costs[row])
        base_s += scores[row, start]
        base_c += costs[row, start]
        for dc, ds in steps:
            d_cost.append(dc)
            d_score.append(ds)
    dc_arr, ds_arr = np.asarray(d_cost), np.asarray(d_score)
    order = np.argsort(-(ds_arr / dc_arr), kind="stable")  # best accuracy per dollar first
    return LimitCurve(
        base_accuracy=base_s / n,
        base_cost=base_c / n,
        max_accuracy=float(scores.max(axis=1).mean()),
        gain=np.cumsum(ds_arr[order]) / n,
        spend=np.cumsum(dc_arr[order]) / n,
    )


def limit_cost_lp(scores: np.ndarray, costs: np.ndarray, tau: float) -> float | None:
    """The same optimum from scipy's LP solver (slow; for tests and spot checks)."""
    from scipy.optimize import linprog

    n, k = scores.shape
    a_eq = np.kron(np.eye(n), np.ones((1, k)))
    result = linprog(
        c=costs.reshape(-1) / n,
        A_ub=-scores.reshape(1, -1) / n,
        b_ub=[-tau],
        A_eq=a_eq,
        b_eq=np.ones(n),
        bounds=(0, None),
        method="highs",
    )
    return float(result.fun) if result.status == 0 else None
