"""Per-deployment windows of feedback residuals, read through a short cache.

The quality breaker and the deployment correction both judge a deployment by the residuals of its
last feedback labels.  The windows live in a store -- the compliance controller, which keeps them
in Redis (shared by every worker and instance) or, while Redis is down, in this process -- and each
process re-reads a deployment's window at most every ``refresh_s`` seconds, and at once after a
label it recorded for it itself, so the request path rarely waits on Redis.  Freshness is kept per
deployment: a proxy's model groups ask for different deployments.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence

Stats = tuple[int, float, float]  # labels, sum of residuals, sum of their squares


def mean_and_se(n: int, total: float, total_sq: float) -> tuple[float, float]:
    """The mean of ``n`` >= 2 residuals (sum ``total``, sum of squares ``total_sq``) and its
    standard error, from their sample variance."""
    mean = total / n
    variance = max(total_sq / n - mean * mean, 0.0) * n / (n - 1)
    return mean, math.sqrt(variance / n)


class DeploymentResiduals:
    """``record`` per feedback label, ``stats`` per request, ``clear`` to start a window afresh.

    ``store``: the compliance controller (``record_residual`` / ``residual_stats`` /
    ``clear_residuals``).  ``prefix`` keeps one user's windows apart from another's in the store."""

    def __init__(self, store, window: int, refresh_s: float, prefix: str = "", clock=time.monotonic):
        self.store, self.window, self.refresh_s, self.prefix, self.clock = store, window, refresh_s, prefix, clock
        self._stats: dict[str, Stats] = {}
        self._read_at: dict[str, float] = {}
        self._generation = 0  # bumped by every change made here: a read that began before it is stale
        self._lock = threading.Lock()

    def _changed(self, deployment_id: str) -> None:
        with self._lock:
            self._generation += 1
            self._read_at.pop(deployment_id, None)  # this process's next request reads it afresh

    def record(self, deployment_id: str, residual: float) -> None:
        self.store.record_residual(self.prefix + deployment_id, float(residual), self.window)
        self._changed(deployment_id)

    def clear(self, deployment_id: str) -> None:
        self.store.clear_residuals(self.prefix + deployment_id)
        self._changed(deployment_id)

    def cached(self, deployment_ids: Sequence[str]) -> dict[str, Stats] | None:
        """This process's fresh copy of every one of ``deployment_ids``, or None when a read is due
        (never calls the store: safe on the event loop)."""
        now = self.clock()
        with self._lock:
            if all(now - self._read_at.get(d, -math.inf) < self.refresh_s for d in deployment_ids):
                return {d: self._stats[d] for d in deployment_ids}
        return None

    def stats(self, deployment_ids: Sequence[str]) -> dict[str, Stats]:
        fresh = self.cached(deployment_ids)
        if fresh is not None:
            return fresh
        now = self.clock()
        with self._lock:
            generation = self._generation
        read = self.store.residual_stats([self.prefix + d for d in deployment_ids])
        stats = {d: read[self.prefix + d] for d in deployment_ids}
        with self._lock:
            if generation == self._generation:  # no change of ours landed during the read
                self._stats.update(stats)
                self._read_at.update(dict.fromkeys(deployment_ids, now))
        return stats
