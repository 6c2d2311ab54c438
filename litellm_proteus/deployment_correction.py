"""The deployment correction: each deployment's predicted p, lowered by what its own feedback says.

The head's p_i(x) is calibrated per slot on validation.  A deployment whose answers change (a
provider swaps the model behind a name) keeps its predictions, and the tier's compliance controller
only moves the tier's offset: it pays for the worse deployment with dearer routing everywhere,
and stops paying once its offset has moved traffic off that deployment (the tier's residual
shrinks with the deployment's share).  The correction puts the evidence where it belongs.  Per
deployment it keeps the residuals ``r = label - p`` of its last ``label_window`` feedback labels,
with p the calibrated prediction *before* correction, and adds to every p predicted for it::

    c = min(0, n / (n + prior) * mean(r))        (0 below min_labels labels)

It only lowers p.  A deployment's residual mixes its own bias with the traffic it served: raised on
the labels of an easy mix, a cheap deployment keeps its raised p when the mix turns hard, and the
tier loses accuracy the controller does not see.  Lowering is the side that keeps tau; paying less
on the labels' evidence is the controller's job (delta below 0 only while the labels' lower 95 %
bound is above tau).

The calibrated p plus c, clipped to [0, 1], is what the controller's window (whose own residual is
then what the corrections leave), exploration and the decision log see (each candidate's
``p_correction``: what clipping kept of c).  Eq. 2 and the operating points' quality rule work on
the head's raw p; c is added there too.  A corrected deployment stays a
candidate: it is chosen wherever it still wins at its corrected p, so its window keeps moving,
and the correction fades as fresh labels agree with its predictions again.  Because ``r`` is taken
against the uncorrected p, ``c`` estimates the deployment's bias, not what is left of it.

The windows are kept and read as ``deployment_residuals.py`` says, under ``correction:<deployment
id>`` (apart from the quality breaker's, whose residuals are taken against the corrected p).  Gauge
``proteus_deployment_correction{deployment}``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .compliance_metrics import record_correction
from .deployment_residuals import DeploymentResiduals

STORE_PREFIX = "correction:"


class CorrectionSettings(BaseModel):
    """``routing_strategy_args.compliance.correction``."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = Field(True, description="lower each deployment's predicted p by its feedback residual")
    label_window: int = Field(500, ge=10, le=100_000, description="feedback labels kept per deployment")
    min_labels: int = Field(20, ge=2, description="labels before a deployment's p is corrected")
    prior: float = Field(
        100.0, gt=0,
        description="labels that weigh as much as the predictions: the correction is n / (n + prior) of the mean residual",
    )
    refresh_s: float = Field(1.0, ge=0, le=3600, description="how long a process reuses the residuals it read")

    @model_validator(mode="after")
    def _labels_fit_the_window(self) -> "CorrectionSettings":
        if self.min_labels > self.label_window:
            raise ValueError(f"min_labels ({self.min_labels}) must be at most label_window ({self.label_window})")
        return self


def correction(n: int, total: float, settings: CorrectionSettings) -> float:
    """c for ``n`` residuals summing to ``total`` (never above 0)."""
    if n < settings.min_labels:
        return 0.0
    return min(n / (n + settings.prior) * (total / n), 0.0)


class DeploymentCorrection:
    """``record(deployment, residual)`` per feedback label, ``offsets(ids)`` per request.

    ``store``: the compliance controller, whose ``residual_stats`` / ``record_residual`` keep the
    windows in Redis or in this process."""

    def __init__(self, settings: CorrectionSettings, store, clock=time.monotonic):
        self.settings = settings
        self.residuals = DeploymentResiduals(store, settings.label_window, settings.refresh_s, STORE_PREFIX, clock)
        self._exported: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, deployment_id: str, residual: float) -> None:
        """``residual``: label - the deployment's calibrated p before correction."""
        if self.settings.enabled and deployment_id:
            self.residuals.record(deployment_id, residual)

    def offsets(self, deployment_ids: Sequence[str]) -> dict[str, float]:
        """The correction of each of ``deployment_ids`` now (0.0 for all when disabled)."""
        if not self.settings.enabled:
            return {d: 0.0 for d in deployment_ids}
        return self._offsets(self.residuals.stats(deployment_ids))

    def cached_offsets(self, deployment_ids: Sequence[str]) -> dict[str, float] | None:
        """``offsets`` from this process's fresh copy, or None when a read is due (no store call)."""
        if not self.settings.enabled:
            return {d: 0.0 for d in deployment_ids}
        stats = self.residuals.cached(deployment_ids)
        return None if stats is None else self._offsets(stats)

    def _offsets(self, stats: dict) -> dict[str, float]:
        offsets = {d: correction(n, total, self.settings) for d, (n, total, _) in stats.items()}
        with self._lock:  # racing threads cannot leave an older value on the gauge
            changed = {d: c for d, c in offsets.items() if self._exported.get(d) != c}
            if changed:
                record_correction(changed)
                self._exported.update(changed)
        return offsets
