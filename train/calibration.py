"""Validation calibration: operating curves, the cost frontier and the tau table.

- ``derive_tau_range``: the tau training range from validation data (never the test split);
- ``accuracy_curve``: accuracy, mean mu and cost of deterministic routing at each policy tau;
- ``cost_frontier``: the upper concave hull of (cost, accuracy) the runtime mixes between;
- ``calibrate``: requested tau -> policy tau meeting it (+ margin), and the declared tau range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from litellm_proteus.artifact import TauCalibration
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.model import INFERENCE_LAMBDA, ProteusModel


def oracle_accuracy(scores: np.ndarray) -> float:
    return float(np.nanmax(np.nan_to_num(scores, nan=0.0), axis=1).mean())


def best_single_accuracy(scores: np.ndarray) -> float:
    return float(np.nanmax(np.nanmean(scores, axis=0)))


def derive_tau_range(
    val_scores: np.ndarray, val_p: np.ndarray, below_best: float, headroom: float = 0.01
) -> tuple[float, float]:
    """Training tau range from validation data only (never the test split).

    The paper's range runs from the best single model's accuracy to just under the oracle's.  Above
    what a router can reach, eq. 3 only drives lambda up, so the upper end is instead the reachable
    ceiling -- validation accuracy of routing every query to argmax_i p_i(x), or the best single
    model, whichever is higher -- plus ``headroom`` (and at most 0.01 under the oracle).  The lower end
    sits ``below_best`` under the best single model so economy tiers are trained too.  The declared
    range is then narrowed by ``calibrate`` to what validation shows is met.
    """
    observed = np.nan_to_num(val_scores, nan=0.0)
    best = best_single_accuracy(val_scores)
    quality_max = float(observed[np.arange(len(observed)), np.argmax(val_p, axis=1)].mean())
    hi = min(max(best, quality_max) + headroom, oracle_accuracy(val_scores) - 0.01, 0.999)
    lo = max(best - below_best, 0.01)
    return round(lo, 4), round(max(hi, lo + 0.02), 4)


@dataclass
class OperatingCurve:
    """Deterministic routing (lambda = 1) on some rows at each policy tau of a grid."""

    accuracy: np.ndarray
    mu_mean: np.ndarray
    cost_usd: np.ndarray  # mean logged cost per query

    @staticmethod
    def pooled(a: "OperatingCurve", n_a: int, b: "OperatingCurve", n_b: int) -> "OperatingCurve":
        """The curve over a's rows and b's rows together."""
        mix = lambda x, y: (x * n_a + y * n_b) / (n_a + n_b)  # noqa: E731
        return OperatingCurve(mix(a.accuracy, b.accuracy), mix(a.mu_mean, b.mu_mean), mix(a.cost_usd, b.cost_usd))


@torch.no_grad()
def policy_choices(
    model: ProteusModel,
    emb: torch.Tensor,
    costs_usd: np.ndarray,
    normalizer: CostNormalizer,
    policy_taus: np.ndarray,
    tau_range: tuple[float, float],
    p: torch.Tensor | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Slot chosen by deterministic routing (lambda = 1) per policy tau and row ([T, N]), and the
    mean mu per policy tau ([T]).  ``p`` overrides the performance head (out-of-fold predictions)."""
    lo, hi = tau_range
    z = model.embed(emb)
    p = torch.sigmoid(model.performance_logits(z)) if p is None else p
    cost = torch.as_tensor(normalizer.normalize(costs_usd))
    choices, mus = [], []
    for tau in policy_taus:
        mu = model.policy(z, (tau - lo) / (hi - lo), INFERENCE_LAMBDA).mean
        choices.append(model.scores(p, mu, cost).argmax(-1).numpy())
        mus.append(float(mu.mean()))
    return np.stack(choices) if choices else np.zeros((0, len(emb)), dtype=np.int64), np.asarray(mus)


def accuracy_curve(
    model: ProteusModel,
    emb: torch.Tensor,
    scores: np.ndarray,
    costs_usd: np.ndarray,
    normalizer: CostNormalizer,
    policy_taus: np.ndarray,
    tau_range: tuple[float, float],
    p: torch.Tensor | None = None,
) -> OperatingCurve:
    """Accuracy, mean mu and mean cost of deterministic routing (lambda = 1) at each policy tau.

    ``p`` overrides the performance head (out-of-fold predictions for training rows)."""
    observed = np.nan_to_num(scores, nan=0.0)
    rows = np.arange(len(observed))
    choices, mus = policy_choices(model, emb, costs_usd, normalizer, policy_taus, tau_range, p)
    accs = [observed[rows, choice].mean() for choice in choices]
    costs = [costs_usd[rows, choice].mean() for choice in choices]
    return OperatingCurve(np.asarray(accs), mus, np.asarray(costs))


def cost_frontier(costs: np.ndarray, accuracies: np.ndarray) -> list[int]:
    """Indices of the points on the upper concave hull of (cost, accuracy), cheapest first, with
    strictly increasing accuracy.  Routing a share of queries at each of two adjacent hull points
    reaches any accuracy between them, and no mixture of the points reaches it for less."""
    hull: list[int] = []
    for i in np.lexsort((-accuracies, costs)):  # by cost, the more accurate first on ties
        if hull and accuracies[i] <= accuracies[hull[-1]]:
            continue  # costs as much as a kept point, no more accurate
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b on or under the chord a -> i: mixing a and i beats it
            if (accuracies[b] - accuracies[a]) * (costs[i] - costs[a]) <= (accuracies[i] - accuracies[a]) * (costs[b] - costs[a]) + 1e-12:
                hull.pop()
            else:
                break
        hull.append(int(i))
    return hull


def calibrate(
    policy_taus: np.ndarray,
    accuracies: np.ndarray,
    margin: float,
    step: float,
    costs_usd: np.ndarray | None = None,
) -> tuple[TauCalibration, tuple[float, float]]:
    """Monotone table requested tau -> smallest policy tau whose validation accuracy (made
    non-decreasing from above: acc_c(t) = min_{t' >= t} acc(t')) reaches requested + margin.
    Given the curve's ``costs_usd``, also the cost frontier of (cost, acc_c) for mixing.

    Declared range: from the training range's lower end up to the highest requested tau reachable.
    """
    conservative = np.minimum.accumulate(accuracies[::-1])[::-1]
    lo = float(policy_taus[0])
    top = float(conservative[-1] - margin)
    hi = max(top, lo + step)
    requested = np.round(np.arange(lo, hi + 1e-9, step), 6)
    mapped = []
    for target in requested:
        ok = np.nonzero(conservative >= target + margin)[0]
        mapped.append(float(policy_taus[ok[0]]) if ok.size else float(policy_taus[-1]))
    frontier = [] if costs_usd is None else cost_frontier(np.asarray(costs_usd), conservative)
    table = TauCalibration(
        requested=requested.tolist(),
        policy_tau=mapped,
        margin=margin,
        frontier_policy_tau=[float(policy_taus[i]) for i in frontier],
        frontier_accuracy=[float(conservative[i]) for i in frontier],
        frontier_cost_usd=[float(f"{costs_usd[i]:.6g}") for i in frontier] if costs_usd is not None else [],
    )
    return table, (round(lo, 4), round(float(requested[-1]), 4))
