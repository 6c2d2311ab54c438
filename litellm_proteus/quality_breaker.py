"""The quality breaker: a deployment whose feedback proves it worse than predicted stops being a candidate.

A provider can change a model behind the same name; its predictions stay, its answers get worse.
The compliance controller only moves the tier's offset, which buys nothing where the top operating
point's choice is that deployment.  The breaker keeps, per deployment, the residuals
``label - calibrated p`` of its last ``label_window`` feedback labels; while their 95 % upper bound
lies below ``-threshold``::

    mean(r) + 1.96 * sd(r) / sqrt(n) < -threshold      (n >= min_labels)

the deployment is left out of the candidates (every request is still routed: if every candidate
is out, none is).  A left-out deployment gets no new labels, so it cannot prove itself fixed: after
``cooldown_s`` its window is cleared and it is a candidate again (half-open, as a circuit breaker),
to be left out anew once ``min_labels`` fresh labels prove it still worse.  The windows are kept
and read as ``deployment_residuals.py`` says, under ``breaker:<deployment id>``.  Gauge ``proteus_breaker_open{deployment}``; a warning
when a deployment goes out or comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from .compliance_metrics import has_series, record_breaker
from .deployment_residuals import DeploymentResiduals, mean_and_se
from .settings_types import Integer, Number

logger = logging.getLogger("litellm_proteus.quality_breaker")
STORE_PREFIX = "breaker:"  # its residual windows, apart from the deployment correction's
Z_95 = 1.96


class BreakerSettings(BaseModel):
    """``routing_strategy_args.compliance.breaker``."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool = Field(False, description="leave out deployments whose feedback proves them worse than predicted")
    threshold: Number = Field(0.05, gt=0, le=0.5, description="how far below its calibrated p a deployment must be proven")
    label_window: Integer = Field(500, ge=10, le=100_000, description="feedback labels kept per deployment")
    min_labels: Integer = Field(20, ge=2, description="labels before a deployment can be left out")
    refresh_s: Number = Field(1.0, ge=0, le=3600, description="how long a process reuses the residuals it read")
    cooldown_s: Number = Field(
        600.0, gt=0, description="a left-out deployment is a candidate again after this long, with a fresh window"
    )

    @model_validator(mode="after")
    def _labels_fit_the_window(self) -> "BreakerSettings":
        if self.min_labels > self.label_window:
            raise ValueError(f"min_labels ({self.min_labels}) must be at most label_window ({self.label_window})")
        return self


def breaker_open(n: int, total: float, total_sq: float, settings: BreakerSettings) -> bool:
    """Whether ``n`` residuals with sum ``total`` and sum of squares ``total_sq`` prove the
    deployment ``threshold`` below its predictions."""
    if n < settings.min_labels:
        return False
    mean, se = mean_and_se(n, total, total_sq)
    return mean + Z_95 * se < -settings.threshold


class QualityBreaker:
    """``record(deployment, residual)`` per feedback label, ``open_ids(ids)`` per request.

    ``store``: the compliance controller, whose ``residual_stats`` / ``record_residual`` keep the
    windows in Redis or in this process.  ``writer``: the strategy's gauge writer
    (``compliance_metrics.Writer``)."""

    def __init__(self, settings: BreakerSettings, store, clock=time.monotonic, writer=None):
        self.settings, self.clock, self.writer = settings, clock, writer
        self.residuals = DeploymentResiduals(store, settings.label_window, settings.refresh_s, STORE_PREFIX, clock)
        self._open: dict[str, bool] = {}
        self._opened_at: dict[str, float] = {}  # when this process first saw the deployment left out
        self._lock = threading.Lock()

    def record(self, deployment_id: str, residual: float) -> None:
        if self.settings.enabled and deployment_id:
            self.residuals.record(deployment_id, residual)

    def open_ids(self, deployment_ids: Sequence[str]) -> set[str]:
        """The deployments among ``deployment_ids`` that are left out now."""
        if not self.settings.enabled:
            return set()
        now = self.clock()
        stats = self.residuals.stats(deployment_ids)
        opened = {d: breaker_open(*stats[d], self.settings) for d in deployment_ids}
        cooled = [d for d, is_open in opened.items()
                  if is_open and now - self._opened_at.get(d, now) >= self.settings.cooldown_s]
        for d in cooled:  # half-open: a fresh window, so fresh labels decide
            self.residuals.clear(d)
            opened[d] = False
        with self._lock:
            changed = {d: is_open for d, is_open in opened.items() if self._open.get(d) != is_open}
            for d, is_open in changed.items():
                if is_open:
                    n, total, _ = stats[d]
                    logger.warning(
                        "PROTEUS quality breaker: deployment %s is left out: its last %d feedback labels are %.1f pp below "
                        "its predictions", d, n, -100.0 * total / n,
                    )
                elif d in self._open:
                    logger.warning("PROTEUS quality breaker: deployment %s is a candidate again%s", d,
                                   " (cooldown over: its window starts afresh)" if d in cooled else "")
                if is_open:
                    self._opened_at.setdefault(d, now)
                else:
                    self._opened_at.pop(d, None)
            self._open.update(changed)
            # under the lock: racing threads cannot leave an older verdict on the gauge; a series
            # retired meanwhile (``compliance_metrics.retire_unused``) is written again
            written = {d: is_open for d, is_open in opened.items() if d in changed or not has_series("breaker", d)}
            if written:
                record_breaker(written, self.writer)
        return {d for d, is_open in opened.items() if is_open}
