"""The quality breaker: a deployment whose feedback proves it worse than predicted stops being a candidate.

A provider can change a model behind the same name; its predictions stay, its answers get worse.
The compliance controller only moves the tier's offset, which buys nothing where the top operating
point's choice is that deployment.  The breaker keeps, per deployment, the residuals
``label - calibrated p`` of its last ``label_window`` feedback labels; while their 95 % upper bound
lies below ``-threshold``::

    mean(r) + 1.96 * sd(r) / sqrt(n) < -threshold      (n >= min_labels)

the deployment is left out of the candidates (every request is still routed: if every candidate
is out, none is).  The residuals are stored by the compliance controller's backends (Redis, shared
by every worker; the process's own while Redis is down); each process re-reads them at most every
``refresh_s`` seconds, so the request path does not wait on Redis.  Labels of a deployment while
it is out keep coming from decisions made before, and from exploration; as its window refills with
better outcomes (the provider fixed it) the bound rises and it comes back.  Gauge:
``proteus_breaker_open{deployment}``; a warning when a deployment goes out or comes back.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from .compliance_metrics import record_breaker

logger = logging.getLogger("litellm_proteus.quality_breaker")
Z_95 = 1.96


class BreakerSettings(BaseModel):
    """``routing_strategy_args.compliance.breaker``."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(False, description="leave out deployments whose feedback proves them worse than predicted")
    threshold: float = Field(0.05, gt=0, le=0.5, description="how far below its calibrated p a deployment must be proven")
    label_window: int = Field(500, ge=10, le=100_000, description="feedback labels kept per deployment")
    min_labels: int = Field(20, ge=2, description="labels before a deployment can be left out")
    refresh_s: float = Field(1.0, ge=0, le=3600, description="how long a process reuses the residuals it read")


def breaker_open(n: int, total: float, total_sq: float, settings: BreakerSettings) -> bool:
    """Whether ``n`` residuals with sum ``total`` and sum of squares ``total_sq`` prove the
    deployment ``threshold`` below its predictions."""
    if n < settings.min_labels:
        return False
    mean = total / n
    variance = max(total_sq / n - mean * mean, 0.0) * n / (n - 1)
    return mean + Z_95 * math.sqrt(variance / n) < -settings.threshold


class QualityBreaker:
    """``record(deployment, residual)`` per feedback label, ``open_ids(ids)`` per request.

    ``store``: the compliance controller, whose ``residual_stats`` / ``record_residual`` keep the
    windows in Redis or in this process."""

    def __init__(self, settings: BreakerSettings, store):
        self.settings, self.store = settings, store
        self._open: dict[str, bool] = {}
        self._read_at = -math.inf
        self._lock = threading.Lock()

    def record(self, deployment_id: str, residual: float) -> None:
        if self.settings.enabled and deployment_id:
            self.store.record_residual(deployment_id, float(residual), self.settings.label_window)
            with self._lock:
                self._read_at = -math.inf  # this process's next request reads the new label

    def open_ids(self, deployment_ids: Sequence[str]) -> set[str]:
        """The deployments among ``deployment_ids`` that are left out now."""
        if not self.settings.enabled:
            return set()
        now = time.monotonic()
        with self._lock:
            fresh = now - self._read_at < self.settings.refresh_s and all(d in self._open for d in deployment_ids)
            if fresh:
                return {d for d in deployment_ids if self._open[d]}
        stats = self.store.residual_stats(list(deployment_ids))
        opened = {d: breaker_open(*stats[d], self.settings) for d in deployment_ids}
        with self._lock:
            for d, is_open in opened.items():
                if is_open and not self._open.get(d):
                    n, total, _ = stats[d]
                    logger.warning(
                        "PROTEUS quality breaker: deployment %s is left out: its last %d feedback labels are %.1f pp below "
                        "its predictions", d, n, -100.0 * total / n,
                    )
                elif not is_open and self._open.get(d):
                    logger.warning("PROTEUS quality breaker: deployment %s is a candidate again", d)
            self._open.update(opened)
            self._read_at = now
        record_breaker(opened)
        return {d for d, is_open in opened.items() if is_open}
