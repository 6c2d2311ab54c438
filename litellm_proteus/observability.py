"""What every routing decision leaves behind: response headers, one JSON log line, Prometheus series.

- Headers (set on the proxy's response): ``x-proteus-tau`` (the tau routed for, after clamping),
  ``x-proteus-tau-source`` (request | key_metadata | team_metadata | redis | default),
  ``x-proteus-tier``, ``x-proteus-mu``, ``x-proteus-model`` (the trained slot),
  ``x-proteus-tau-clamped: true`` when tau was outside the artifact's trained range, and
  ``x-proteus-tau-capped: true`` when the request asked above its tier's tau; with either,
  ``x-proteus-tau-requested`` shows the tau asked for; ``x-proteus-device``: where the decision ran.  ``x-proteus-delta``: the compliance
  controller's offset (routed at calibrated(tau + delta)); ``x-proteus-infeasible: true`` when even
  the top operating point is predicted below tau on the recent window.  On an error response (every
  attempt failed) the request's context only (tau, its source, tier, delta, infeasible, the tau
  moves) and ``x-proteus-failed``: the trained slot of the last pick, which failed; no header there
  describes an answer.
- Log: logger ``litellm_proteus.decisions``, INFO, one JSON object per decision.
- Prometheus (``prometheus_client`` default registry, which LiteLLM's ``prometheus`` callback
  serves on ``/metrics``): ``proteus_decisions_total{model_group,tier,tau_source,model}``,
  ``proteus_decisions_by_device_total{model_group,device}``,
  ``proteus_mu`` and ``proteus_decision_latency_seconds`` histograms, ``proteus_tau_clamped_total``,
  ``proteus_tier_lookup_errors_total``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

decision_logger = logging.getLogger("litellm_proteus.decisions")

HEADER_PREFIX = "x-proteus-"


def operating_point_label(rule: str, policy_tau: float | None, models: list[str]) -> str:
    """The header form of a decision's operating point: ``policy@<calibrated policy tau>``,
    ``slot:<model>``, ``quality`` or ``cluster`` (x-proteus-model names the cluster's model).  Why a
    prompt may get a cheaper model at a higher tau: the points differ per prompt, not on average."""
    kind, _, rest = rule.partition(":")
    if kind == "policy":
        return "policy" if policy_tau is None else f"policy@{policy_tau:.4f}"
    if kind == "slot" and rest.isdigit() and int(rest) < len(models):
        return f"slot:{models[int(rest)]}"
    return kind


@dataclass(frozen=True)
class DecisionRecord:
    """What the strategy stores in the request's metadata (``metadata["proteus"]``)."""

    model_group: str
    deployment_id: str
    model: str  # trained slot
    tau: float  # the tau routed for: after the tier cap and clamping to the trained range
    tau_requested: float  # the request's own tau (else its tier's), before cap and clamp
    tau_source: str
    tier: str
    tier_source: str
    mu: float
    clamped: bool
    capped: bool
    candidates: int
    excluded: int  # deployments skipped because they already failed this request
    prompt_tokens: int
    cost_usd: float  # estimated cost of this request on the chosen deployment
    latency_ms: float
    device: str = ""  # where the decision ran (cpu, cuda, cuda:N); "" = not recorded
    delta: float = 0.0  # compliance controller's tau offset
    infeasible: bool = False
    state_key: str = ""  # compliance controller state (tier:<name>@<tau> | tau:<bucket>)
    operating_point: str = ""  # the calibrated point that decided (operating_point_label); "" = not recorded
    # the model the operating point picked when, priced past rule_price_limit, it gave way to ``model``; "" = it did not
    repriced_from: str = ""
    breaker_excluded: int = 0  # deployments the quality breaker left out of this request's candidates

    def headers(self) -> dict[str, str]:
        """The headers of a response this decision's pick answered."""
        headers = self.context_headers()
        headers["x-proteus-mu"] = f"{self.mu:.4f}"
        headers["x-proteus-model"] = self.model
        if self.device:
            headers["x-proteus-device"] = self.device
        if self.operating_point:
            headers["x-proteus-operating-point"] = self.operating_point
        if self.repriced_from:
            headers["x-proteus-repriced-from"] = self.repriced_from
        return headers

    def failure_headers(self) -> dict[str, str]:
        """The headers of an error response whose last attempt was this decision's pick: what the
        request was routed for, and the pick that failed (``x-litellm-model-id`` names its deployment)."""
        return {**self.context_headers(), "x-proteus-failed": self.model}

    def context_headers(self) -> dict[str, str]:
        """What the request was routed for, whatever answered it."""
        headers = {
            "x-proteus-tau": f"{self.tau:.4g}",
            "x-proteus-tau-source": self.tau_source,
            "x-proteus-tier": self.tier,
            "x-proteus-delta": f"{self.delta:.4f}",
        }
        if self.infeasible:
            headers["x-proteus-infeasible"] = "true"
        if self.clamped:
            headers["x-proteus-tau-clamped"] = "true"
        if self.capped:
            headers["x-proteus-tau-capped"] = "true"
        if self.clamped or self.capped:
            headers["x-proteus-tau-requested"] = f"{self.tau_requested:.4g}"
        return headers

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "DecisionRecord | None":
        if not isinstance(data, dict):
            return None
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})  # missing defaults apply
        except (KeyError, TypeError):
            return None


class RateLimitedWarnings:
    """At most one warning line per ``kind`` every ``every_s`` seconds: a misconfiguration that hits
    every request (an unknown tier in a key's metadata, Redis down) must not flood the log."""

    MAX_KINDS = 1024

    def __init__(self, logger: logging.Logger, every_s: float = 30.0):
        self.logger, self.every_s = logger, every_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def warn(self, kind: str, message: str, *args: Any) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -self.every_s) < self.every_s:
                return False
            if len(self._last) >= self.MAX_KINDS:  # kinds may carry client-controlled values: stay bounded
                self._last.clear()
            self._last[kind] = now
        self.logger.warning(message, *args)
        return True


def log_decision(record: DecisionRecord) -> None:
    if decision_logger.isEnabledFor(logging.INFO):
        decision_logger.info(json.dumps({"event": "proteus_decision", **record.to_dict()}, sort_keys=True))


def ensure_log_handler(level: int = logging.INFO) -> None:
    """Make decision lines visible in the proxy's output when nothing else configured logging."""
    if not decision_logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        decision_logger.addHandler(handler)
        decision_logger.propagate = False
    if decision_logger.level == logging.NOTSET or decision_logger.level > level:
        decision_logger.setLevel(level)


class _Metrics:
    """Created once per process, on first use, in the default registry."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.decisions = Counter(
            "proteus_decisions", "PROTEUS routing decisions", ["model_group", "tier", "tau_source", "model"]
        )
        self.mu = Histogram(
            "proteus_mu", "quality preference mu per decision", ["model_group"], buckets=[i / 10 for i in range(1, 11)]
        )
        self.latency = Histogram(
            "proteus_decision_latency_seconds",
            "time from candidates known to deployment chosen (tier lookup + batched inference)",
            ["model_group"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.clamped = Counter("proteus_tau_clamped", "decisions whose tau was clamped to the trained range", ["model_group"])
        self.tier_errors = Counter("proteus_tier_lookup_errors", "Redis tier lookups that failed or timed out")
        self.devices = Counter("proteus_decisions_by_device", "PROTEUS routing decisions per device that ran them",
                               ["model_group", "device"])


def optional_metrics(build: Callable[[], T]) -> Callable[[], T | None]:
    """A getter of one ``build()`` per process, registered on first use; None where metrics cannot
    exist: no prometheus_client (metrics are optional), or the names are already registered by an
    earlier copy of the module (reload)."""
    built: list[T | None] = []  # one attempt per process: a failure is remembered, not retried per request

    def get() -> T | None:
        if not built:
            try:
                built.append(build())
            except (ImportError, ValueError):
                built.append(None)
        return built[0]

    return get


metrics = optional_metrics(_Metrics)


def record_metrics(record: DecisionRecord) -> None:
    m = metrics()
    if m is None:
        return
    m.decisions.labels(record.model_group, record.tier, record.tau_source, record.model).inc()
    m.mu.labels(record.model_group).observe(record.mu)
    m.latency.labels(record.model_group).observe(record.latency_ms / 1000.0)
    if record.clamped:
        m.clamped.labels(record.model_group).inc()
    if record.device:
        m.devices.labels(record.model_group, record.device).inc()


def record_tier_error() -> None:
    m = metrics()
    if m is not None:
        m.tier_errors.inc()
