"""Prometheus gauges of live compliance, per controller state key (``tier:<name>@<tau>`` or ``tau:<bucket>``).

- ``proteus_predicted_accuracy{state_key}``: mean calibrated p of the chosen deployments over the
  window (label-free);
- ``proteus_realised_accuracy{state_key}``: mean feedback score over the window's labelled
  decisions, with ``proteus_realised_labels{state_key}`` labels behind it;
- ``proteus_delta{state_key}`` and ``proteus_infeasible{state_key}`` (0/1): the compliance
  controller's tau offset and infeasible flag;
- ``proteus_breaker_open{deployment}`` (0/1): whether the quality breaker leaves the deployment out;
- ``proteus_deployment_correction{deployment}``: what the deployment correction adds to its predicted p;
- ``proteus_decision_log_dropped_total``: decision log records that did not reach the log's file
  (writer queue full, a failed file write, a line over ``max_bytes`` even without its text fields);
- ``proteus_decision_log_truncated_total``: records written with ``prompt`` / ``response`` cut to fit
  ``max_bytes``.

With a compliance controller on the strategy (``strategy.compliance``), every gauge is read from its
``snapshot(state_key)`` (state shared through Redis).  Without one, this process keeps the last
``WINDOW`` decisions and ``WINDOW`` labels per state key, and delta / infeasible stay 0.  Decisions
refresh a state key's gauges at most every ``EXPORT_EVERY_S``, and a decision that comes sooner sets a
timer that refreshes them once the interval is over, so the gauges show the last decision's state
after traffic stops; feedback refreshes them at once.  Under
several proxy workers (LiteLLM's ``PROMETHEUS_MULTIPROC_DIR``), a gauge shows the value its live
workers set most recently (``multiprocess_mode="livemostrecent"``).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

from .observability import optional_metrics

WINDOW = 1000
EXPORT_EVERY_S = 1.0  # per state key, on the request path: a controller snapshot may read Redis


class _Window:
    def __init__(self) -> None:
        self.p: deque[float] = deque(maxlen=WINDOW)
        self.labels: deque[float] = deque(maxlen=WINDOW)


_windows: dict[str, _Window] = {}
_exported: dict[str, float] = {}
_trailing: dict[str, tuple[threading.Timer, Any]] = {}  # a refresh due at the end of the interval (and its controller), per state key
_lock = threading.Lock()
_write_lock = threading.Lock()


class _Gauges:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge

        def gauge(name: str, text: str) -> Any:
            return Gauge(name, text, ["state_key"], multiprocess_mode="livemostrecent")

        self.predicted = gauge("proteus_predicted_accuracy", "mean calibrated p of chosen deployments over the window")
        self.realised = gauge("proteus_realised_accuracy", "mean feedback score over the window's labelled decisions")
        self.labels = gauge("proteus_realised_labels", "feedback labels behind proteus_realised_accuracy")
        self.delta = gauge("proteus_delta", "compliance controller tau offset")
        self.infeasible = gauge("proteus_infeasible", "1 when the tier's tau cannot be reached on the current window")
        self.dropped = Counter("proteus_decision_log_dropped", "decision log records that did not reach the log file")
        self.truncated = Counter("proteus_decision_log_truncated", "decision log records with text cut to fit max_bytes")
        self.breaker = Gauge("proteus_breaker_open", "1 while the quality breaker leaves the deployment out",
                             ["deployment"], multiprocess_mode="livemostrecent")
        self.correction = Gauge("proteus_deployment_correction", "what the deployment correction adds to its predicted p",
                                ["deployment"], multiprocess_mode="livemostrecent")


gauges = optional_metrics(_Gauges)


def record_breaker(opened: dict[str, bool]) -> None:
    """The quality breaker's verdict per deployment, as last read."""
    m = gauges()
    if m is not None:
        for deployment, is_open in opened.items():
            m.breaker.labels(deployment).set(1.0 if is_open else 0.0)


def record_correction(offsets: dict[str, float]) -> None:
    """The deployment correction per deployment, as last read."""
    m = gauges()
    if m is not None:
        for deployment, offset in offsets.items():
            m.correction.labels(deployment).set(offset)


def _window(state_key: str) -> _Window:
    with _lock:
        return _windows.setdefault(state_key, _Window())


def local_snapshot(state_key: str) -> dict[str, Any]:
    window = _window(state_key)
    with _lock:
        p, labels = list(window.p), list(window.labels)
    return {
        "n": len(p),
        "p_mean": sum(p) / len(p) if p else None,
        "n_labels": len(labels),
        "realised_mean": sum(labels) / len(labels) if labels else None,
        "delta": 0.0,
        "infeasible": False,
    }


def record_decision(state_key: str, p_chosen: float) -> None:
    window = _window(state_key)
    with _lock:
        window.p.append(p_chosen)


def record_feedback(state_key: str, score: float) -> None:
    window = _window(state_key)
    with _lock:
        window.labels.append(score)


def export(state_key: str, controller: Any = None, every_s: float = 0.0) -> dict[str, Any] | None:
    """Set the gauges of ``state_key`` from the controller's snapshot, else this process's window;
    with ``every_s``, at most that often per state key (None when skipped)."""
    now = time.monotonic()
    with _lock:
        since = now - _exported.get(state_key, -every_s)
        if every_s and since < every_s:
            if state_key not in _trailing:  # off the request path: the snapshot may read Redis
                timer = threading.Timer(every_s - since, _trailing_export, (state_key, controller))
                timer.daemon = True
                _trailing[state_key] = (timer, controller)
                timer.start()
            return None
        _exported[state_key] = now
    if getattr(controller, "released", False):  # a replaced controller's state is no longer what routes
        return None
    live = controller is not None and controller.settings.enabled  # a disabled controller records nothing
    snapshot = controller.snapshot(state_key) if live else local_snapshot(state_key)
    g = gauges()
    if g is None:
        return snapshot
    with _write_lock:  # ``release`` takes it too: once it returns, a replaced controller writes nothing
        if getattr(controller, "released", False):
            return None
        for gauge, field in ((g.predicted, "p_mean"), (g.realised, "realised_mean")):
            value = snapshot.get(field)
            if value is not None and math.isfinite(value):  # the controller says NaN for an empty window
                gauge.labels(state_key).set(float(value))
        g.labels.labels(state_key).set(float(snapshot.get("n_labels") or 0))
        g.delta.labels(state_key).set(float(snapshot.get("delta") or 0.0))
        g.infeasible.labels(state_key).set(1.0 if snapshot.get("infeasible") else 0.0)
    return snapshot


def release(controllers: Any) -> None:
    """``controllers`` no longer route (a settings change replaced them): their pending refreshes
    are cancelled, and one already running writes nothing (``ComplianceController.released``)."""
    ids = {id(c) for c in controllers}
    if not ids:
        return
    with _lock:
        for key in [k for k, (_, c) in _trailing.items() if id(c) in ids]:
            _trailing.pop(key)[0].cancel()
    with _write_lock:  # waits for a refresh writing now; the flag is set before this is called
        pass


def _trailing_export(state_key: str, controller: Any) -> None:
    with _lock:
        if _trailing.get(state_key, (None, None))[1] is controller:  # not a newer controller's timer
            _trailing.pop(state_key)
    export(state_key, controller)


def record_log_drop(n: int = 1) -> None:
    g = gauges()
    if g is not None and n > 0:
        g.dropped.inc(n)


def record_log_truncated(n: int = 1) -> None:
    g = gauges()
    if g is not None and n > 0:
        g.truncated.inc(n)
