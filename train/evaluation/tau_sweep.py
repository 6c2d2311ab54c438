"""A router over a tau grid: its curve, the highest tau it keeps, tau-mu adaptability, and the tiers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


from .baselines import (
    Router,
    Split,
)
from .metrics import (
    Bootstrap,
    floor_compliance,
    meets,
    pearson,
    per_query,
    tolerance_compliance,
)

TIER_NAMES: tuple[str, ...] = ("Economy", "Standard", "Premium")


@dataclass
class Curve:
    """A tau-capable router swept over a grid of taus on the test set."""

    taus: np.ndarray
    correct: np.ndarray  # [N, T]
    cost: np.ndarray  # [N, T] USD
    mu: np.ndarray | None  # [N, T]
    knobs: list

    @property
    def accuracy(self) -> np.ndarray:
        return self.correct.mean(axis=0)

    @property
    def cost_per_1k(self) -> np.ndarray:
        return self.cost.mean(axis=0) * 1000.0

    def rows(self, boot: Bootstrap | None, limit=None) -> list[dict]:
        acc, cost = self.accuracy, self.cost_per_1k
        if boot is not None:
            acc_lo, acc_hi = boot.interval(self.correct)
            cost_lo, cost_hi = (x * 1000.0 for x in boot.interval(self.cost))
        out = []
        for j, tau in enumerate(self.taus):
            row = {
                "tau": float(tau),
                "accuracy": float(acc[j]),
                "accuracy_ci_low": float(acc_lo[j]) if boot else None,
                "accuracy_ci_high": float(acc_hi[j]) if boot else None,
                "cost_per_1k": float(cost[j]),
                "cost_ci_low": float(cost_lo[j]) if boot else None,
                "cost_ci_high": float(cost_hi[j]) if boot else None,
                "mu_mean": float(self.mu[:, j].mean()) if self.mu is not None else None,
                "meets_floor": bool(meets(acc[j], tau)),
                "meets_floor_ci_low": bool(meets(acc_lo[j], tau)) if boot else None,
            }
            if self.knobs[j] is not None:
                row["knob"] = float(self.knobs[j])
            if limit is not None:
                row["limit_cost_per_1k"] = limit.cost_per_1k(float(tau))
            out.append(row)
        return out


def sweep(router: Router, test: Split, taus: np.ndarray) -> Curve:
    correct, cost, mus, knobs = [], [], [], []
    for tau in taus:
        routed = router.route_split(test, float(tau))
        correct.append(per_query(routed.assign, test.scores))
        cost.append(per_query(routed.assign, test.costs))
        mus.append(routed.mu)
        knobs.append(routed.knob)
    mu = None if any(m is None for m in mus) else np.stack(mus, axis=1)
    return Curve(np.asarray(taus, dtype=float), np.stack(correct, 1), np.stack(cost, 1), mu, knobs)


def max_compliant_tau(curve: Curve) -> tuple[float | None, float | None]:
    """(largest tau such that every grid tau up to it is met, the first tau missed)."""
    best = None
    for tau, acc in zip(curve.taus, curve.accuracy):
        if not meets(acc, tau):
            return best, float(tau)
        best = float(tau)
    return best, None


def adaptability(curve: Curve) -> dict:
    acc, taus, cost = curve.accuracy, curve.taus, curve.cost_per_1k
    pooled = None
    if curve.mu is not None:
        pooled = pearson(np.broadcast_to(taus, curve.mu.shape).ravel(), curve.mu.ravel())
    return {
        "tau_mu_corr": pearson(taus, curve.mu.mean(axis=0)) if curve.mu is not None else None,
        "tau_mu_corr_pooled": pooled,
        "floor_compliance": floor_compliance(acc, taus),
        "tol2_compliance": tolerance_compliance(acc, taus, 0.02),
        "tol5_compliance": tolerance_compliance(acc, taus, 0.05),
        "cost_range": float(cost[-1] / cost[0]) if cost[0] > 0 else None,
        "n_tau_levels": int(len(taus)),
    }


def tiers(router: Router, test: Split, tau_range: tuple[float, float], per_tier: int = 5) -> list[dict]:
    lo, hi = tau_range
    edges = np.linspace(lo, hi, len(TIER_NAMES) + 1)
    rows = []
    for name, t_lo, t_hi in zip(TIER_NAMES, edges[:-1], edges[1:]):
        curve = sweep(router, test, np.linspace(t_lo, t_hi, per_tier))
        acc = curve.accuracy
        rows.append(
            {
                "name": name,
                "tau_lo": float(t_lo),
                "tau_hi": float(t_hi),
                "accuracy": float(acc.mean()),
                "cost_per_1k": float(curve.cost_per_1k.mean()),
                "margin_pp": float((acc.mean() - (t_lo + t_hi) / 2) * 100),
                "worst_margin_pp": float(np.min(acc - curve.taus) * 100),
                "meets_floor": bool(np.all(meets(acc, curve.taus))),
            }
        )
    return rows
