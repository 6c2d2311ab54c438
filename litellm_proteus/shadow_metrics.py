"""Prometheus metrics of the shadow evaluation (``litellm_proteus.shadow``), plus this process's
counts of the same events (``counts``: what the tests and the log lines read).

- ``proteus_shadow_calls_total{kind="candidate"|"judge", outcome="ok"|"error"}``;
- ``proteus_shadow_spend_usd_total``: USD spent by this process's shadow and judge calls;
- ``proteus_shadow_budget_spent_usd``: today's spend against the daily cap, as last read (shared
  through Redis when configured; the value its live workers set most recently);
- ``proteus_shadow_skipped_total{reason}``: sampled requests not shadowed: ``budget`` (the day's cap
  is spent), ``budget_unavailable`` (the budget's Redis is down), ``busy`` (``max_in_flight`` jobs
  running), ``no_answer`` (forgotten before its response completed), ``unscored`` (no answer could be
  judged), ``too_large`` (the row is over the log's ``max_bytes``), ``unpriced_judge`` (a judge
  deployment has no price), ``error`` (the job failed);
- ``proteus_shadow_rows_total``: shadow rows written.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from .observability import optional_metrics

counts: Counter = Counter()
_lock = threading.Lock()


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter as PromCounter, Gauge

        self.calls = PromCounter("proteus_shadow_calls", "shadow evaluation calls", ["kind", "outcome"])
        self.spend = PromCounter("proteus_shadow_spend_usd", "USD spent by shadow and judge calls")
        self.budget = Gauge("proteus_shadow_budget_spent_usd", "today's shadow spend against the daily cap",
                            multiprocess_mode="livemostrecent")
        self.skipped = PromCounter("proteus_shadow_skipped", "sampled requests not shadowed", ["reason"])
        self.rows = PromCounter("proteus_shadow_rows", "shadow rows written")


metrics = optional_metrics(_Metrics)


def _count(key: str, amount: float = 1) -> None:
    with _lock:
        counts[key] += amount


def record_call(kind: str, ok: bool, cost_usd: float) -> None:
    outcome = "ok" if ok else "error"
    _count(f"calls:{kind}:{outcome}")
    _count("spend_usd", cost_usd)
    m = metrics()
    if m is not None:
        m.calls.labels(kind, outcome).inc()
        if cost_usd > 0:
            m.spend.inc(cost_usd)


def record_budget(spent_today_usd: float) -> None:
    m = metrics()
    if m is not None:
        m.budget.set(spent_today_usd)


def record_skip(reason: str) -> None:
    _count(f"skipped:{reason}")
    m = metrics()
    if m is not None:
        m.skipped.labels(reason).inc()


def record_row() -> None:
    _count("rows")
    m = metrics()
    if m is not None:
        m.rows.inc()


def snapshot() -> dict[str, Any]:
    with _lock:
        return dict(counts)
