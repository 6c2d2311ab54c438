"""The deployment correction: each deployment's predicted p, lowered by what its own feedback says.

The head's p_i(x) is calibrated per slot on validation.  A deployment whose answers change (a
provider swaps the model behind a name) keeps its predictions, and the tier's compliance controller
only moves the tier's offset: it pays for the worse deployment with dearer routing everywhere,
and stops paying once its offset has moved traffic off that deployment (the tier's residual
shrinks with the deployment's share).  The correction puts the evidence where it belongs.  Per
deployment it keeps the residuals ``r = label - p`` of its last ``label_window`` feedback labels,
with p the calibrated prediction *before* correction, and adds to every p predicted for it::

    c = min(0, n / (n + prior) * mean(r) + z * SE)        (0 below min_labels labels)

with SE the standard error of mean(r): ``z`` > 0 leaves a shortfall within the labels' noise
uncorrected (less cost on traffic whose labels agree with the predictions, slower recovery).
It only lowers p.  A deployment's residual mixes its own bias with the traffic it served: raised on
the labels of an easy mix, a cheap deployment keeps its raised p when the mix turns hard, and the
tier loses accuracy the controller does not see.  Lowering is the side that keeps tau; paying less
on the labels' evidence is the controller's job (delta below 0 only while the labels' one-sided
95 % lower bound is above tau, and what is served now, less the same half-width, too).

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
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from .compliance_metrics import has_series, record_correction
from .deployment_residuals import DeploymentResiduals, mean_and_se
from .settings_types import Integer, Number

STORE_PREFIX = "correction:"


class CorrectionSettings(BaseModel):
    """``routing_strategy_args.compliance.correction``."""

    model_config = ConfigDict(extra="forbid")
    enabled: StrictBool = Field(True, description="lower each deployment's predicted p by its feedback residual")
    label_window: Integer = Field(500, ge=10, le=100_000, description="feedback labels kept per deployment")
    min_labels: Integer = Field(20, ge=2, description="labels before a deployment's p is corrected")
    prior: Number = Field(
        100.0, ge=0,
        description="labels that weigh as much as the predictions: the correction is n / (n + prior) of the mean residual",
    )
    z: Number = Field(
        0.0, ge=0, le=5,
        description="standard errors of the mean residual that are not corrected: c counts only the shortfall beyond z * SE",
    )
    alarm_z: Number = Field(
        1.645, ge=0, le=5,
        description="the infeasible flag counts a deployment's shortfall only beyond alarm_z standard errors of its mean residual",
    )
    refresh_s: Number = Field(1.0, ge=0, le=3600, description="how long a process reuses the residuals it read")

    @model_validator(mode="after")
    def _labels_fit_the_window(self) -> "CorrectionSettings":
        if self.min_labels > self.label_window:
            raise ValueError(f"min_labels ({self.min_labels}) must be at most label_window ({self.label_window})")
        return self


def shortfall(n: int, total: float, total_sq: float, min_labels: int, prior: float, z: float) -> float:
    """min(0, n / (n + prior) * mean + z * SE) of ``n`` residuals with sum ``total`` and sum of
    squares ``total_sq``; 0 below ``min_labels``."""
    if n < max(min_labels, 2):
        return 0.0
    mean, se = mean_and_se(n, total, total_sq)
    return min(n / (n + prior) * mean + z * se, 0.0)


def correction(n: int, total: float, total_sq: float, settings: CorrectionSettings) -> float:
    """c: what routing adds to the deployment's p."""
    return shortfall(n, total, total_sq, settings.min_labels, settings.prior, settings.z)


def alarm_correction(n: int, total: float, total_sq: float, settings: CorrectionSettings) -> float:
    """What the infeasible flag adds instead: the shortfall the labels prove, min(0, mean + alarm_z * SE)."""
    return shortfall(n, total, total_sq, settings.min_labels, 0.0, settings.alarm_z)


def alarm_best_p(p: Sequence[float], p_correction: Sequence[float], alarm: Sequence[float]) -> float:
    """The best candidate's p as the infeasible flag reads it: each candidate's routing correction
    (``p_correction``, included in ``p``) replaced by its alarm correction (either empty: none)."""
    applied, proven = p_correction or [0.0] * len(p), alarm or [0.0] * len(p)
    return max(min(max(pi - ci + ai, 0.0), 1.0) for pi, ci, ai in zip(p, applied, proven, strict=True))


class Offsets(NamedTuple):
    """Per deployment id, from one read of the windows."""

    routing: dict[str, float]  # c: what routing adds to the deployment's p
    alarm: dict[str, float]  # what the infeasible flag adds instead (``alarm_correction``)


class DeploymentCorrection:
    """``record(deployment, residual)`` per feedback label, ``offsets(ids)`` per request.

    ``store``: the compliance controller, whose ``residual_stats`` / ``record_residual`` keep the
    windows in Redis or in this process.  ``writer``: the strategy's gauge writer
    (``compliance_metrics.Writer``)."""

    def __init__(self, settings: CorrectionSettings, store, clock=time.monotonic, writer=None):
        self.settings, self.writer = settings, writer
        self.residuals = DeploymentResiduals(store, settings.label_window, settings.refresh_s, STORE_PREFIX, clock)
        self._exported: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, deployment_id: str, residual: float) -> None:
        """``residual``: label - the deployment's calibrated p before correction."""
        if self.settings.enabled and deployment_id:
            self.residuals.record(deployment_id, residual)

    def offsets(self, deployment_ids: Sequence[str]) -> Offsets:
        """The corrections of ``deployment_ids`` now (0.0 for all when disabled)."""
        if not self.settings.enabled:
            return Offsets(dict.fromkeys(deployment_ids, 0.0), dict.fromkeys(deployment_ids, 0.0))
        return self._offsets(self.residuals.stats(deployment_ids))

    def cached_offsets(self, deployment_ids: Sequence[str]) -> Offsets | None:
        """``offsets`` from this process's fresh copy, or None when a read is due (no store call)."""
        if not self.settings.enabled:
            return self.offsets(deployment_ids)
        stats = self.residuals.cached(deployment_ids)
        return None if stats is None else self._offsets(stats)

    def _offsets(self, stats: dict) -> Offsets:
        routing = {d: correction(n, total, total_sq, self.settings) for d, (n, total, total_sq) in stats.items()}
        alarm = {d: alarm_correction(n, total, total_sq, self.settings) for d, (n, total, total_sq) in stats.items()}
        with self._lock:  # racing threads cannot leave an older value on the gauge
            # a series retired meanwhile (``compliance_metrics.retire_unused``) is written again
            changed = {d: c for d, c in routing.items() if self._exported.get(d) != c or not has_series("correction", d)}
            if changed:
                record_correction(changed, self.writer)
                self._exported.update(changed)
        return Offsets(routing, alarm)
