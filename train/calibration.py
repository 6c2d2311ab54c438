"""Validation calibration: operating curves, the cost frontier and the tau table.

- ``derive_tau_range``: the tau training range from validation data (never the test split);
- ``accuracy_curve``: accuracy, mean mu and cost of deterministic routing at each policy tau;
- ``cost_frontier``: the upper concave hull of (cost, accuracy) the runtime mixes between;
- ``rule_points``: the non-policy operating points (policy beyond the grid, each single model,
  quality-greedy, cluster ladders) with their validation accuracy and cost;
- ``calibrate``: requested tau -> the cheapest operating point meeting it (+ margin), the cost
  frontier over every point, and the declared tau range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from litellm_proteus.artifact import TauCalibration
from litellm_proteus.operating_points import POLICY, OperatingPoint, nearest_centroid
from litellm_proteus.costs import CostNormalizer
from litellm_proteus.model import INFERENCE_LAMBDA, ProteusModel


def calibration_sample(n: int, cap: int, seed: int) -> slice | np.ndarray:
    """Positions of the at most ``cap`` of ``n`` rows a calibration step measures on: all of them
    (``slice(None)``, no copy, no draw) up to ``cap``, else a seeded sample in row order.  Accuracy
    measured on 16k rows has a standard error under 0.4 pp, and the margin counts the sampled rows."""
    if n <= cap:
        return slice(None)
    return np.sort(np.random.default_rng(seed).choice(n, size=cap, replace=False))


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
    device = next(model.parameters()).device
    z = model.embed(emb.to(device))
    p = torch.sigmoid(model.performance_logits(z)) if p is None else p.to(device)
    cost = torch.as_tensor(normalizer.normalize(costs_usd), device=device)
    choices, mus = [], []
    for tau in policy_taus:
        mu = model.policy(z, (tau - lo) / (hi - lo), INFERENCE_LAMBDA).mean
        choices.append(model.scores(p, mu, cost).argmax(-1).cpu().numpy())
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


def monotone_envelope(accuracies: np.ndarray) -> np.ndarray:
    """acc_c(t) = min over t' >= t of acc(t'): a policy tau counts as reaching only what every higher
    tau reaches too.  -inf marks a point with no estimate (an off-policy point the log cannot vouch
    for): it never meets a tau and does not pull the points below it down."""
    acc = np.asarray(accuracies, dtype=np.float64)
    unknown = np.isneginf(acc)
    envelope = np.minimum.accumulate(np.where(unknown, np.inf, acc)[::-1])[::-1]
    return np.where(unknown, -np.inf, envelope)


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


@dataclass
class CandidatePoint:
    """An operating point beside the policy grid, measured on the calibration rows."""

    rule: OperatingPoint
    accuracy: float
    cost_usd: float
    policy_tau: float | None = None  # kind "policy": its own policy tau; other kinds: set by calibrate (fallback)


class UnreachableTauRange(ValueError):
    """No operating point's accuracy reaches the bottom of the tau range + the margin: no tau in the
    range can be promised, so there is no declared range (``calibrate``)."""

    def __init__(self, best: float, lo: float, margin: float):
        self.best, self.lo, self.margin = best, lo, margin
        super().__init__(
            f"no operating point reaches the bottom of the tau range {lo:.4f} + margin {margin:.4f}: the best "
            f"accuracy an operating point reaches is {best:.4f}, so no tau from {lo:.4f} up can be promised"
        )

    @property
    def reachable(self) -> float:
        """The highest tau an operating point meets with the margin."""
        return self.best - self.margin


def calibrate(
    policy_taus: np.ndarray,
    accuracies: np.ndarray,
    margin: float,
    step: float,
    costs_usd: np.ndarray | None = None,
    extra: list[CandidatePoint] | None = None,
    frontier: bool = True,
    centroids: np.ndarray | None = None,
    strict: bool = True,
) -> tuple[TauCalibration, tuple[float, float]]:
    """Monotone table requested tau -> smallest policy tau whose validation accuracy (made
    non-decreasing from above: acc_c(t) = min_{t' >= t} acc(t')) reaches requested + margin.
    Given the curve's ``costs_usd``, also the cost frontier of (cost, acc_c) for mixing.

    ``extra`` points (``rule_points``; they need ``costs_usd``) compete with the policy grid: a
    requested tau goes to the cheapest point meeting it, the frontier is the hull over all points,
    and the declared range reaches the best point's accuracy minus the margin.  A rule point's
    fallback policy tau is the cheapest grid point at least as accurate (else the most accurate grid
    point with an estimate; the grid's top when none has one).

    Declared range: from the training range's lower end up to the highest requested tau reachable.
    ``UnreachableTauRange`` when no point reaches the lower end + margin (no range to declare);
    with ``strict`` False the range's first step is declared anyway (the caller says it cannot be met).
    """
    extra = list(extra or [])
    if extra and costs_usd is None:
        raise ValueError("calibrate: extra operating points need the policy curve's costs_usd")
    conservative = monotone_envelope(accuracies)
    # a grid point without an estimate (-inf) is no fallback: else the most accurate one that has one
    known = np.flatnonzero(np.isfinite(conservative))
    for point in extra:
        if point.rule.kind != "policy":
            ok = np.nonzero(conservative >= point.accuracy)[0]
            at = ok[np.argmin(np.asarray(costs_usd)[ok])] if ok.size else (known[-1] if known.size else len(policy_taus) - 1)
            point.policy_tau = float(policy_taus[at])
    lo = float(policy_taus[0])
    best = max([float(conservative.max(initial=-np.inf))] + [p.accuracy for p in extra])
    top = best - margin
    if strict and not top >= lo - 1e-9:  # not even the range's bottom is met: no range to declare (NaN included)
        raise UnreachableTauRange(best, lo, margin)
    hi = max(top, lo + step)
    requested = np.round(np.arange(lo, hi + 1e-9, step), 6)
    mapped, mapped_points, from_extra = [], [], False
    for target in requested:
        ok = np.nonzero(conservative >= target + margin)[0]
        tau, point, cost = (float(policy_taus[ok[0]]), POLICY, None) if ok.size else (float(policy_taus[-1]), POLICY, None)
        if ok.size and costs_usd is not None:
            cost = float(costs_usd[ok[0]])
        for candidate in extra:
            if candidate.accuracy >= target + margin and (cost is None or candidate.cost_usd < cost):
                tau, point, cost = float(candidate.policy_tau), candidate.rule, candidate.cost_usd
                from_extra = True
        mapped.append(tau)
        mapped_points.append(point)
    hull: list[int] = []
    all_acc = np.concatenate([conservative, [p.accuracy for p in extra]])
    all_tau = list(map(float, policy_taus)) + [float(p.policy_tau) for p in extra]
    all_rule = [POLICY] * len(policy_taus) + [p.rule for p in extra]
    all_cost = None
    if costs_usd is not None:
        all_cost = np.concatenate([np.asarray(costs_usd, dtype=np.float64), [p.cost_usd for p in extra]])
        if frontier:
            known = np.flatnonzero(np.isfinite(all_acc))
            hull = [int(known[i]) for i in cost_frontier(all_cost[known], all_acc[known])]
    any_rule = lambda points: any(p.kind != "policy" for p in points)  # noqa: E731
    frontier_rules = [all_rule[i] for i in hull]
    table = TauCalibration(
        requested=requested.tolist(),
        policy_tau=mapped,
        margin=margin,
        frontier_policy_tau=[all_tau[i] for i in hull],
        frontier_accuracy=[float(all_acc[i]) for i in hull],
        frontier_cost_usd=[float(f"{all_cost[i]:.6g}") for i in hull] if all_cost is not None else [],
        # stored (step-wise table) once any entry is not a policy-grid point: no interpolation across it
        requested_point=mapped_points if from_extra else [],
        frontier_point=frontier_rules if any_rule(frontier_rules) else [],
        centroids=np.round(centroids, 6).tolist() if any(p.kind == "cluster" for p in mapped_points + frontier_rules) else [],
    )
    return table, (round(lo, 4), round(float(requested[-1]), 4))


@dataclass
class CalibrationRows:
    """One set of calibration rows as the rule points see them."""

    emb: np.ndarray  # [N, D] encoder embeddings
    scores: np.ndarray  # [N, K] logged outcome, NaN = unobserved
    costs_usd: np.ndarray  # [N, K] logged cost, missing filled
    p: np.ndarray  # [N, K] predicted correctness (out-of-fold for training rows)


def kmeans(x: np.ndarray, k: int, seed: int, iterations: int = 30) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding; the [k, D] centroids."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=np.float64)
    centroids = [x[rng.integers(len(x))]]
    d = ((x - centroids[0]) ** 2).sum(-1)  # each row's squared distance to its nearest centroid so far
    for _ in range(1, k):
        if len(centroids) > 1:
            d = np.minimum(d, ((x - centroids[-1]) ** 2).sum(-1))
        centroids.append(x[rng.choice(len(x), p=d / d.sum()) if d.sum() > 0 else rng.integers(len(x))])
    c = np.asarray(centroids)
    for _ in range(iterations):
        assign = nearest_centroid(x, c)
        moved = np.array([x[assign == j].mean(0) if (assign == j).any() else c[j] for j in range(k)])
        if np.allclose(moved, c):
            break
        c = moved
    return c


def price_ladders(acc: np.ndarray, cost: np.ndarray, n_prices: int = 24, lowest_price: float = 1e-3) -> list[list[int]]:
    """For a range of prices of accuracy, each group's option maximising its mean accuracy - price x
    mean cost ([G, O] each; cost scaled by its largest entry; an option with accuracy -inf is never
    taken): the distinct ladders on the lower (cost, accuracy) hull, cheapest last."""
    scale = max(float(cost.max()), 1e-12)
    ladders: list[list[int]] = []
    for price in np.concatenate([[0.0], np.geomspace(lowest_price, 1e2, n_prices)]):
        ladder = (acc - price * cost / scale).argmax(1).tolist()
        if ladder not in ladders:
            ladders.append(ladder)
    return ladders


def group_ladders(
    groups: np.ndarray, n_groups: int, scores: np.ndarray, costs_usd: np.ndarray, n_prices: int = 24
) -> list[list[int]]:
    """Slot per group for a range of prices of accuracy (``price_ladders`` over each group's mean
    accuracy and cost per slot on these rows; an empty group: the rows' overall means)."""
    observed = np.nan_to_num(scores, nan=0.0)
    acc = np.array([observed[groups == g].mean(0) if (groups == g).any() else observed.mean(0) for g in range(n_groups)])
    cost = np.array([costs_usd[groups == g].mean(0) if (groups == g).any() else costs_usd.mean(0) for g in range(n_groups)])
    return price_ladders(acc, cost, n_prices)


def cluster_ladders(emb: np.ndarray, scores: np.ndarray, costs_usd: np.ndarray, centroids: np.ndarray) -> list[list[int]]:
    """``group_ladders`` over the nearest-centroid clusters, without the one-slot ladders (the
    single-model points already cover them)."""
    ladders = group_ladders(nearest_centroid(emb, centroids), len(centroids), scores, costs_usd)
    return [ladder for ladder in ladders if len(set(ladder)) > 1]


def rules_beside_policy(n_slots: int, ladders: list[list[int]] | None = None) -> list[OperatingPoint]:
    """Each single model, quality-greedy (argmax p + b) and each cluster ladder."""
    rules = [OperatingPoint(kind="slot", slot=k) for k in range(n_slots)] + [OperatingPoint(kind="quality")]
    return rules + [OperatingPoint(kind="cluster", cluster_slots=ladder) for ladder in ladders or []]


def rule_choice(rule: OperatingPoint, emb: np.ndarray, p: np.ndarray, boost: np.ndarray,
                centroids: np.ndarray | None) -> np.ndarray:
    """The slot a non-policy rule routes each row to ([N]), as the runtime does (operating_points.py)."""
    if rule.kind == "slot":
        return np.full(len(p), rule.slot)
    if rule.kind == "quality":
        return (p + boost[None, :]).argmax(1)
    return np.asarray(rule.cluster_slots)[nearest_centroid(emb, centroids)]


def rule_points(
    rows: list[CalibrationRows],
    boost: np.ndarray,
    centroids: np.ndarray | None = None,
    ladders: list[list[int]] | None = None,
    val_slack_rows: CalibrationRows | None = None,
    val_slack: float = 0.0,
) -> list[CandidatePoint]:
    """Each single model, quality-greedy (argmax p + b) and each cluster ladder, measured on the
    calibration rows pooled (row-weighted) and, like the policy curve, no higher than validation
    (``val_slack_rows``) + ``val_slack``."""
    def measure(r: CalibrationRows, rule: OperatingPoint) -> tuple[float, float]:
        choice = rule_choice(rule, r.emb, r.p, boost, centroids)
        at = np.arange(len(choice))
        return float(np.nan_to_num(r.scores, nan=0.0)[at, choice].mean()), float(r.costs_usd[at, choice].mean())

    points = []
    total = sum(len(r.scores) for r in rows)
    for rule in rules_beside_policy(rows[0].scores.shape[1], ladders):
        measured = [measure(r, rule) for r in rows]
        acc = sum(a * len(r.scores) for (a, _), r in zip(measured, rows)) / total
        cost = sum(c * len(r.scores) for (_, c), r in zip(measured, rows)) / total
        if val_slack_rows is not None:
            acc = min(acc, measure(val_slack_rows, rule)[0] + val_slack)
        points.append(CandidatePoint(rule, acc, cost))
    return points
