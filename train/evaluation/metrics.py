"""Metric functions of the paper (section 3, "Metrics"), each a small pure function.

Conventions (documented once, here):
- accuracies are fractions in [0, 1]; ``pp`` values are percentage points (x 100);
- a routing is either a choice vector ``[N]`` of model indices or an assignment matrix ``[N, K]``
  of routing probabilities (Random routes uniformly: its accuracy is the exact expectation, no
  sampling noise);
- ``cost_per_1k`` is the mean logged USD cost per routed query x 1000 (USD per 1K queries);
- "meets tau" compares with a 1e-9 tolerance so that accuracy 0.8 == tau 0.80 on a float grid.
"""

from __future__ import annotations

import math

import numpy as np

FLOOR_EPS = 1e-9


def assignment_matrix(assign: np.ndarray, n_models: int) -> np.ndarray:
    """Choice vector [N] -> one-hot [N, K]; an [N, K] assignment passes through (rows sum to 1)."""
    assign = np.asarray(assign)
    if assign.ndim == 2:
        if assign.shape[1] != n_models:
            raise ValueError(f"assignment has {assign.shape[1]} columns, expected {n_models}")
        return assign.astype(np.float64)
    out = np.zeros((len(assign), n_models))
    out[np.arange(len(assign)), assign.astype(np.int64)] = 1.0
    return out


def per_query(assign: np.ndarray, values: np.ndarray) -> np.ndarray:
    """values[row, choice] per row (expected value for an assignment matrix)."""
    values = np.asarray(values, dtype=np.float64)
    assign = np.asarray(assign)
    if assign.ndim == 2:
        return (assign * values).sum(axis=1)
    return values[np.arange(len(assign)), assign.astype(np.int64)]


def accuracy(assign: np.ndarray, scores: np.ndarray) -> float:
    return float(per_query(assign, scores).mean())


def cost_per_1k(assign: np.ndarray, costs: np.ndarray) -> float:
    return float(per_query(assign, costs).mean() * 1000.0)


def oracle_choice(scores: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Per row the best-scoring model, the cheapest among equally good ones (cheapest correct)."""
    scores = np.asarray(scores, dtype=np.float64)
    best = scores.max(axis=1, keepdims=True)
    masked = np.where(scores >= best - 1e-12, costs, np.inf)
    return masked.argmin(axis=1)


def meets(acc: float | np.ndarray, tau: float | np.ndarray) -> np.ndarray | bool:
    return np.asarray(acc) >= np.asarray(tau) - FLOOR_EPS


def floor_compliance(accuracies: np.ndarray, taus: np.ndarray) -> float:
    """Fraction of tau levels where achieved accuracy >= tau."""
    accuracies, taus = np.asarray(accuracies, dtype=float), np.asarray(taus, dtype=float)
    if accuracies.shape != taus.shape or accuracies.size == 0:
        raise ValueError("accuracies and taus must be non-empty and equally long")
    return float(np.mean(meets(accuracies, taus)))


def tolerance_compliance(accuracies: np.ndarray, taus: np.ndarray, tolerance: float) -> float:
    """Fraction of tau levels where |accuracy - tau| <= tolerance (absolute, e.g. 0.02 = +-2 pp).

    The paper's footnote ("+6% margin at low tau exceeds the +-5% band") shows the band is two-sided:
    overshooting by more than the tolerance also counts as a miss."""
    accuracies, taus = np.asarray(accuracies, dtype=float), np.asarray(taus, dtype=float)
    if accuracies.shape != taus.shape or accuracies.size == 0:
        raise ValueError("accuracies and taus must be non-empty and equally long")
    return float(np.mean(np.abs(accuracies - taus) <= tolerance + FLOOR_EPS))


def pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson correlation; None when either side is constant (undefined, never silently 0)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError("pearson needs two equally long arrays of at least 2 values")
    if np.std(x) < 1e-12 or np.std(y) < 1e-12:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def routing_efficiency(acc: float, acc_random: float, latency_ms: float) -> float | None:
    """RE = (Acc - Acc_random) / latency in pp per ms; None (N/A) for zero-latency routers."""
    if latency_ms is None or latency_ms <= 0:
        return None
    return (acc - acc_random) * 100.0 / latency_ms


def routing_performance_index(
    acc: float, acc_oracle: float, cost: float, cost_max: float, router_ms: float, llm_latency_s: float
) -> float:
    """RPI = Acc/Acc_oracle x (1 - Cost/Cost_max) x (1 - t_router/t_LLM) x 100.

    ``cost`` and ``cost_max`` in the same unit (we use USD per 1K queries); Cost_max is the cost of
    always routing to the most expensive model, so Best Fixed = the most expensive model scores 0."""
    if acc_oracle <= 0 or cost_max <= 0 or llm_latency_s <= 0:
        raise ValueError("acc_oracle, cost_max and llm_latency_s must be positive")
    return acc / acc_oracle * (1.0 - cost / cost_max) * (1.0 - (router_ms / 1000.0) / llm_latency_s) * 100.0


class Bootstrap:
    """Percentile bootstrap over test queries with one fixed set of resamples.

    The same resamples are reused for every router and tau (paired comparisons); they are stored as
    multinomial count vectors so a mean over all resamples is one matrix product."""

    def __init__(self, n: int, resamples: int = 1000, seed: int = 0, level: float = 0.95):
        if n < 1 or resamples < 1:
            raise ValueError("bootstrap needs n >= 1 rows and resamples >= 1")
        rng = np.random.default_rng(seed)
        self.n, self.level = n, level
        self.counts = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)

    def means(self, values: np.ndarray) -> np.ndarray:
        """[N] or [N, M] per-query values -> [B] or [B, M] resampled means."""
        return self.counts @ np.asarray(values, dtype=np.float64) / self.n

    def interval(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        alpha = (1.0 - self.level) / 2.0
        boot = self.means(values)
        low, high = np.quantile(boot, [alpha, 1.0 - alpha], axis=0)
        return low, high


def json_safe(value):
    """Recursively turn numpy scalars into Python numbers and NaN/inf into None (valid JSON)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_safe(v) for v in value.tolist()]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value
