"""Prometheus gauges of live compliance, per controller state key (``tier:<name>@<tau>`` or ``tau:<bucket>``).

- ``proteus_predicted_accuracy{state_key}``: mean calibrated p of the chosen deployments over the
  window (label-free);
- ``proteus_realised_accuracy{state_key}``: mean feedback score over the window's labelled
  decisions, with ``proteus_realised_labels{state_key}`` labels behind it;
- ``proteus_delta{state_key}`` and ``proteus_infeasible{state_key}`` (0/1): the compliance
  controller's tau offset and infeasible flag;
- ``proteus_tau{state_key}``: the tau the state answers for (a tier's; a tau bucket's bottom), so an
  alert can compare realised accuracy with it (``examples/prometheus/proteus-alerts.yaml``);
- ``proteus_breaker_open{deployment}`` (0/1): whether the quality breaker leaves the deployment out;
- ``proteus_deployment_correction{deployment}``: what the deployment correction adds to its predicted p;
- ``proteus_decision_log_dropped_total``: decision log records that did not reach the log's file
  (writer queue full, a failed file write, a line over ``max_bytes`` even without its text fields);
- ``proteus_decision_log_truncated_total``: records written with ``prompt`` / ``response`` cut to fit
  ``max_bytes``;
- ``proteus_call_id_conflicts_total``: decisions whose call id (a client-chosen ``x-litellm-call-id``)
  was already indexed for another key: not indexed, they take no feedback from their key.

With a compliance controller on the strategy (``strategy.compliance``), every gauge is read from its
``snapshot(state_key)`` (state shared through Redis).  Without one, or with compliance turned off,
this process keeps the last ``WINDOW`` decisions and ``WINDOW`` labels per state key, and delta /
infeasible read 0.  Decisions refresh a state key's gauges at most every ``EXPORT_EVERY_S``, and a
decision that comes sooner sets a timer that refreshes them once the interval is over, so the gauges
show the last decision's state after traffic stops; feedback refreshes them at once.

Each strategy writes through its ``Writer``: the state keys it routes on (``compliance.StateKeys``:
its tiers at their taus, and the tau buckets of request-sent taus, with compliance on or off), and
nothing once a settings change has replaced it.  ``retire_unused``, run whenever a router's strategy
is replaced, takes out the series no live strategy writes: the state keys none routes on (a tier
whose tau changed; every key once no router uses PROTEUS), with their windows and pending refreshes,
and the deployments none has in a PROTEUS group with the breaker / the correction on (deployments
removed without a settings change: started by a decision, at most ``strategy.SWEEP_EVERY_S``
apart, in a worker thread that no request waits on).  A
state key that stays keeps its series, which the next decision on it writes from the new
controller; turning compliance off writes its delta and infeasible 0 at once.  Under
several proxy workers (LiteLLM's ``PROMETHEUS_MULTIPROC_DIR``) a gauge shows the value its live
workers set most recently (``multiprocess_mode="livemostrecent"``); prometheus_client cannot take a
series out of a worker's file, so a retired one is written as NaN at timestamp 0, which the
collector's most-recent merge never picks: it leaves the scrape once every live worker has retired
it (a worker not yet re-configured still shows its own value).
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Collection, Container, Sequence
from typing import Any

from .observability import optional_metrics

WINDOW = 1000
EXPORT_EVERY_S = 1.0  # per state key, on the request path: a controller snapshot may read Redis


def state_tau(state_key: str) -> float | None:
    """The tau a state key (``compliance.state_key_for``) answers for: a tier's tau, or the bottom of
    a tau bucket (every tau in it is at least that); None for a key of another form."""
    if state_key.startswith("tier:"):
        text = state_key.rpartition("@")[2]
    else:
        text = state_key[len("tau:"):] if state_key.startswith("tau:") else ""
    try:
        return float(text)
    except ValueError:
        return None


class _Window:
    def __init__(self) -> None:
        self.p: deque[float] = deque(maxlen=WINDOW)
        self.labels: deque[float] = deque(maxlen=WINDOW)


class Writer:
    """What one strategy writes: the gauges of the state keys in ``states`` (None: any), read from
    ``controller``, and its breaker's and correction's deployment gauges.  ``retired`` (set by
    ``retire_unused`` once a settings change replaced the strategy): nothing more."""

    def __init__(self, controller: Any = None, states: Container[str] | None = None):
        self.controller = controller
        self.states = states
        self.retired = False
        with _lock:
            _writers.add(self)

    def writes(self, state_key: str) -> bool:
        return not self.retired and (self.states is None or state_key in self.states)


_windows: dict[str, _Window] = {}
_exported: dict[str, float] = {}
# a refresh due at the end of the interval (its timer, controller and writer), per state key
_trailing: dict[str, tuple[threading.Timer, Any, Writer | None]] = {}
_written: dict[str, Writer | None] = {}  # the state keys with series, and who wrote them last
_deployments: dict[str, set[str]] = {"breaker": set(), "correction": set()}  # deployments with series
_writers: "weakref.WeakSet[Writer]" = weakref.WeakSet()
_lock = threading.Lock()
_write_lock = threading.Lock()  # held while gauges are written and while series are retired


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
        self.tau = gauge("proteus_tau", "the tau the state answers for (a tier's; a tau bucket's bottom)")
        self.dropped = Counter("proteus_decision_log_dropped", "decision log records that did not reach the log file")
        self.truncated = Counter("proteus_decision_log_truncated", "decision log records with text cut to fit max_bytes")
        self.conflicts = Counter("proteus_call_id_conflicts", "decisions whose call id another key had already used")
        self.breaker = Gauge("proteus_breaker_open", "1 while the quality breaker leaves the deployment out",
                             ["deployment"], multiprocess_mode="livemostrecent")
        self.correction = Gauge("proteus_deployment_correction", "what the deployment correction adds to its predicted p",
                                ["deployment"], multiprocess_mode="livemostrecent")

    def per_state(self) -> tuple[Any, ...]:
        return self.predicted, self.realised, self.labels, self.delta, self.infeasible, self.tau


gauges = optional_metrics(_Gauges)


def record_breaker(opened: dict[str, bool], writer: Writer | None = None) -> None:
    """The quality breaker's verdict per deployment, as last read."""
    m = gauges()
    if m is not None:
        with _write_lock:
            if writer is not None and writer.retired:
                return
            for deployment, is_open in opened.items():
                m.breaker.labels(deployment).set(1.0 if is_open else 0.0)
                _deployments["breaker"].add(deployment)


def record_correction(offsets: dict[str, float], writer: Writer | None = None) -> None:
    """The deployment correction per deployment, as last read."""
    m = gauges()
    if m is not None:
        with _write_lock:
            if writer is not None and writer.retired:
                return
            for deployment, offset in offsets.items():
                m.correction.labels(deployment).set(offset)
                _deployments["correction"].add(deployment)


def has_series(kind: str, deployment: str) -> bool:
    """Whether ``deployment`` has a ``kind`` ("breaker" / "correction") series: a retired one is
    written again by the next read that has the deployment, even if its value is unchanged."""
    return deployment in _deployments[kind]


def local_snapshot(state_key: str) -> dict[str, Any]:
    with _lock:
        window = _windows.get(state_key) or _Window()
        p, labels = list(window.p), list(window.labels)
    return {
        "n": len(p),
        "p_mean": sum(p) / len(p) if p else None,
        "n_labels": len(labels),
        "realised_mean": sum(labels) / len(labels) if labels else None,
        "delta": 0.0,
        "infeasible": False,
    }


def _window(state_key: str, writer: Writer | None) -> _Window | None:
    """With ``_lock`` held; None for a state key ``writer`` does not write."""
    if writer is not None and not writer.writes(state_key):
        return None
    return _windows.setdefault(state_key, _Window())


def record_decision(state_key: str, p_chosen: float, writer: Writer | None = None) -> None:
    with _lock:
        window = _window(state_key, writer)
        if window is not None:
            window.p.append(p_chosen)


def record_feedback(state_key: str, score: float, writer: Writer | None = None) -> None:
    with _lock:
        window = _window(state_key, writer)
        if window is not None:
            window.labels.append(score)


def export(state_key: str, controller: Any = None, every_s: float = 0.0, writer: Writer | None = None) -> dict[str, Any] | None:
    """Set the gauges of ``state_key`` from the controller's snapshot, else this process's window;
    with ``every_s``, at most that often per state key (None when skipped).  ``writer``: the
    strategy's (its controller is the one read); None when it does not write ``state_key``."""
    if writer is not None:
        controller = writer.controller
    now = time.monotonic()
    with _lock:
        if writer is not None and not writer.writes(state_key):  # a retired state, or a replaced strategy
            return None
        since = now - _exported.get(state_key, -every_s)
        if every_s and since < every_s:
            if state_key not in _trailing:  # off the request path: the snapshot may read Redis
                timer = threading.Timer(every_s - since, _trailing_export, (state_key, controller, writer))
                timer.daemon = True
                _trailing[state_key] = (timer, controller, writer)
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
    with _write_lock:  # ``release`` and ``retire_unused`` take it too: once they return, what they retired writes nothing
        if getattr(controller, "released", False) or (writer is not None and not writer.writes(state_key)):
            return None
        for gauge, field in ((g.predicted, "p_mean"), (g.realised, "realised_mean")):
            value = snapshot.get(field)
            if value is not None and math.isfinite(value):  # the controller says NaN for an empty window
                gauge.labels(state_key).set(float(value))
        g.labels.labels(state_key).set(float(snapshot.get("n_labels") or 0))
        g.delta.labels(state_key).set(float(snapshot.get("delta") or 0.0))
        g.infeasible.labels(state_key).set(1.0 if snapshot.get("infeasible") else 0.0)
        tau = state_tau(state_key)
        if tau is not None:
            g.tau.labels(state_key).set(tau)
        _written[state_key] = writer
    return snapshot


def release(controllers: Any) -> None:
    """``controllers`` no longer route (a settings change replaced them): their pending refreshes
    are cancelled, and one already running writes nothing (``ComplianceController.released``)."""
    ids = {id(c) for c in controllers}
    if not ids:
        return
    with _lock:
        for key in [k for k, (_, c, _) in _trailing.items() if id(c) in ids]:
            _trailing.pop(key)[0].cancel()
    with _write_lock:  # waits for a refresh writing now; the flag is set before this is called
        pass


def _trailing_export(state_key: str, controller: Any, writer: Writer | None = None) -> None:
    with _lock:
        entry = _trailing.get(state_key)
        if entry is not None and entry[0] is threading.current_thread():  # this timer's entry, not a newer one's
            _trailing.pop(state_key)
    export(state_key, controller, writer=writer)


def _multiprocess() -> bool:
    from prometheus_client import values

    return bool(getattr(values.ValueClass, "_multiprocess", False))


def _retire_series(gauge: Any, label: str) -> None:
    """``gauge``'s series of ``label`` leaves what is scraped (with ``_write_lock`` held)."""
    if not _multiprocess():
        try:
            gauge.remove(label)
        except KeyError:  # a series never written (NaN p): prometheus_client before 0.22 raises on it
            pass
        return
    # Multiprocess mode: ``remove`` only forgets this process's child (with a warning); the value
    # stays in the worker's mmap file, which MultiProcessCollector reads.  For ``livemostrecent`` the
    # collector keeps, per series, the sample with the highest timestamp above 0: written at
    # timestamp 0 the series drops out once no live worker holds a newer value for it.  NaN, should
    # a collector ever take it anyway: no comparison with NaN is true, so no alert fires on it.
    child = gauge.labels(label)
    try:
        child._value.set(math.nan, timestamp=0.0)
    except (AttributeError, TypeError):  # another value class: at least no 0/1 that an alert compares
        child.set(math.nan)


def retire_unused(live: Sequence[Writer], breakers: Collection[str], corrections: Collection[str], *,
                  states: bool = True) -> int:
    """The writers not in ``live`` (of strategies a settings change replaced) write nothing more;
    the series of state keys no ``live`` writer writes are retired with their windows and pending
    refreshes, and so are the deployment series outside ``breakers`` / ``corrections`` (the
    deployments of the live strategies with the breaker / the correction on).  A state key that
    stays, last written by a retired writer, is written at once by a live one whose controller is
    off (its delta and infeasible flag no longer apply); with a controller on, the next decision
    writes it (its snapshot may read Redis: not here).  ``states=False``: the deployment series
    only (``live`` may be a moment old).  Returns how many series (per label) were retired."""
    keep = {id(w) for w in live}
    with _write_lock:  # a write under way ends first; every write after this block sees the flags
        with _lock:
            if states:
                for writer in list(_writers):
                    if id(writer) not in keep:
                        writer.retired = True
            known = (set(_written) | set(_windows) | set(_exported) | set(_trailing)) if states else set()
            gone = [k for k in known if not any(w.writes(k) for w in live)]
            for key in gone:
                _windows.pop(key, None)
                _exported.pop(key, None)
                entry = _trailing.pop(key, None)
                if entry is not None:
                    entry[0].cancel()
            for key in [k for k, (_, _, w) in _trailing.items() if w is not None and w.retired]:
                _trailing.pop(key)[0].cancel()
            handed = []  # states that stay, handed from a retired writer to one with compliance off
            for key, last in _written.items() if states else ():
                if key not in gone and last is not None and last.retired:
                    writers = [w for w in live if w.writes(key)]  # a tau: key may be another router's too
                    if not any(w.controller is not None and w.controller.settings.enabled for w in writers):
                        handed.append((key, writers[0]))
            retired_keys = [k for k in gone if k in _written]
            for key in retired_keys:
                del _written[key]
            retired_deployments = {"breaker": _deployments["breaker"] - set(breakers),
                                   "correction": _deployments["correction"] - set(corrections)}
            for kind, ids in retired_deployments.items():
                _deployments[kind] -= ids
        g = gauges()
        if g is not None:
            for key in retired_keys:
                for gauge in g.per_state():
                    _retire_series(gauge, key)
            for deployment in retired_deployments["breaker"]:
                _retire_series(g.breaker, deployment)
            for deployment in retired_deployments["correction"]:
                _retire_series(g.correction, deployment)
    for state_key, writer in handed:  # this process's window: no Redis
        export(state_key, writer=writer)
    return len(retired_keys) + sum(len(ids) for ids in retired_deployments.values())


def record_log_drop(n: int = 1) -> None:
    g = gauges()
    if g is not None and n > 0:
        g.dropped.inc(n)


def record_call_id_conflict(n: int = 1) -> None:
    g = gauges()
    if g is not None and n > 0:
        g.conflicts.inc(n)


def record_log_truncated(n: int = 1) -> None:
    g = gauges()
    if g is not None and n > 0:
        g.truncated.inc(n)
