"""Which PROTEUS pick each outcome of a request belongs to (the decision log's ``outcome`` records).

A request (one ``litellm_call_id``) may be routed several times: LiteLLM picks again after a failed
attempt (a retry), and after the retries it falls back to another model group (a fallback).  The
proxy shares one logging object across all of them, so LiteLLM's callbacks do not tell what became
of each pick: the failure callback runs for the first failed attempt only (a logging object runs
its failure handlers once, ``has_logged_async_failure``, streaming calls included), and the success
callback runs for whichever deployment answered, a fallback group's included, with the request's
metadata (and the PROTEUS decision in it) carried over from the failed attempts.

``AttemptLedger`` keeps, per request, the PROTEUS picks whose outcome is not known yet (open
attempts) and settles each from what is known first:

- a failure callback that names a pick's deployment: that pick failed (the callback's error and
  latency);
- the router picking again for the request (``repicked``: a retry or a fallback) with LiteLLM's retry
  breadcrumbs (``previous_models``) naming a pick's deployment: that pick failed (the breadcrumb
  holds its error);
- a success callback (``answered``): the pick of the deployment that answered succeeded; every other
  open pick of the request failed (it did not give the answer: a fallback group's deployment, say,
  gave it, and that answer is no pick's outcome);
- the request ending in an error (``ended``: the proxy's post-call failure hook): its open picks failed.

A request is keyed by its call id and a random id its first pick puts in the request's decision
metadata, which its retries and fallbacks carry (``serving_log.request_key``): clients choose call
ids (the proxy takes ``x-litellm-call-id`` as sent), so two requests in flight may share one, and
neither may settle the other's picks.  A pick whose callback never comes (an abandoned stream, a
cancelled request) stays open until ``max_calls`` newer requests push it out; it holds its strategy
weakly, and a settings change hands it to the strategy that replaces its own (``reassign``), so an
open pick keeps no replaced strategy alive.

Requests are remembered (bounded, oldest first out) after their picks are settled, so a late or
repeated callback settles nothing twice.  Thread-safe: Router SDK sync calls pick on a helper thread.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from .decision_log import NO_OWNER

MAX_CALLS = 50_000  # requests remembered per process; the oldest go first


def _nobody() -> None:
    return None


class Attempt:
    """One PROTEUS pick of a request: the deployment it chose, the strategy that logged its decision
    (``owner``, whose decision log takes the outcome; held weakly: None once that strategy is gone)
    and the key hash of its decision (``key_hash``; the feedback index takes the outcome only while
    that key owns the call id; ``NO_OWNER``: not known).  An owner that takes no weak reference (a
    stand-in object) is held as it is."""

    __slots__ = ("deployment_id", "key_hash", "log", "_owner")

    def __init__(self, deployment_id: str, owner: Any = None, key_hash: Any = NO_OWNER, log: Any = None):
        self.deployment_id = deployment_id
        self.key_hash = key_hash
        self.log = log  # the settings of the decision log that holds the pick's decision (DecisionLogSettings)
        self._owner: Callable[[], Any]
        if owner is None:
            self._owner = _nobody
        else:
            try:
                self._owner = weakref.ref(owner)
            except TypeError:
                self._owner = lambda: owner

    @property
    def owner(self) -> Any:
        return self._owner()

    def _key(self) -> tuple:
        return self.deployment_id, self.key_hash, id(self.owner)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Attempt) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.deployment_id, self.key_hash))

    def __repr__(self) -> str:
        return f"Attempt({self.deployment_id!r}, owner={self.owner!r}, key_hash={self.key_hash!r})"


def current_strategy(strategy: Any) -> Any:
    """The router's current strategy: a pick that began under a strategy a settings change replaced
    logs where the router logs now (the end of its ``replaced_by`` chain; the replaced strategy's
    writer is closed, its desk copied)."""
    while getattr(strategy, "replaced_by", None) is not None:
        strategy = strategy.replaced_by
    return strategy


class AttemptLedger:
    """Open attempts per request key (``serving_log.request_key``: the call id and the request's own id)."""

    def __init__(self, max_calls: int = MAX_CALLS):
        self.max_calls = max_calls
        self._calls: OrderedDict[Hashable, list[Attempt]] = OrderedDict()  # open attempts, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._calls)

    def known(self, key: Hashable) -> bool:
        """Whether a PROTEUS pick of this request was opened here (and is still remembered)."""
        with self._lock:
            return key in self._calls

    def open(self, key: Hashable, attempt: Attempt) -> None:
        """A new pick for the request (held for the strategy that stands for its owner: see ``reassign``)."""
        with self._lock:
            owner = attempt.owner
            current = current_strategy(owner)
            if current is not owner:
                attempt = Attempt(attempt.deployment_id, current, attempt.key_hash, attempt.log)
            opened = self._calls.pop(key, [])
            self._calls[key] = [*opened, attempt]
            while len(self._calls) > self.max_calls:
                self._calls.popitem(last=False)

    def reassign(self, old: Any, new: Any) -> int:
        """A settings change replaced strategy ``old`` by ``new`` (``old.replaced_by`` is set first):
        ``old``'s open attempts log through ``new``, and hold ``old`` no more.  Returns how many."""
        moved = 0
        with self._lock:
            for key, opened in self._calls.items():
                if any(a.owner is old for a in opened):
                    self._calls[key] = [Attempt(a.deployment_id, new, a.key_hash, a.log) if a.owner is old else a
                                        for a in opened]
                    moved += sum(a.owner is old for a in opened)
        return moved

    def repicked(self, key: Hashable, failed_ids: Sequence[str]) -> list[Attempt]:
        """The router picks again for the request, and ``failed_ids`` (LiteLLM's retry breadcrumbs) name
        the deployments that failed it: the open attempts of those deployments (returned) failed."""
        with self._lock:
            opened = self._calls.get(key)
            if not opened or not failed_ids:
                return []
            closed = [a for a in opened if a.deployment_id in failed_ids]
            self._calls[key] = [a for a in opened if a.deployment_id not in failed_ids]
            return closed

    def failed(self, key: Hashable, deployment_id: str | None) -> Attempt | None:
        """A failure callback for ``deployment_id``: the request's oldest open attempt of that deployment
        (returned; None when there is none) failed."""
        with self._lock:
            opened = self._calls.get(key) or []
            attempt = next((a for a in opened if deployment_id is not None and a.deployment_id == deployment_id), None)
            if attempt is not None:
                opened[:] = [a for a in opened if a is not attempt]
            return attempt

    def answered(self, key: Hashable, deployment_id: str | None) -> tuple[Attempt | None, list[Attempt]]:
        """A success callback for ``deployment_id``: ``(the request's latest open attempt of that
        deployment, which answered, or None; the request's other open attempts, which did not)``."""
        with self._lock:
            opened = self._calls.get(key) or []
            served = next((a for a in reversed(opened) if deployment_id is not None and a.deployment_id == deployment_id), None)
            if key in self._calls:
                self._calls[key] = []
            return served, [a for a in opened if a is not served]

    def ended(self, key: Hashable) -> list[Attempt]:
        """The request ended in an error: its open attempts (returned) failed."""
        with self._lock:
            opened = self._calls.get(key) or []
            if key in self._calls:
                self._calls[key] = []
            return opened


# -- what LiteLLM says about an attempt --------------------------------------------------------------
METADATA_KEYS = ("metadata", "litellm_metadata")


def answering_deployment_id(kwargs: Mapping[str, Any]) -> str | None:
    """The deployment a success/failure callback is about: LiteLLM puts the picked deployment's
    ``model_info`` in the call's ``litellm_params`` (then its ``standard_logging_object.model_id``, and
    the ``model_info`` in the request metadata, say the same)."""
    params = kwargs.get("litellm_params")
    params = params if isinstance(params, Mapping) else {}
    candidates: list[Any] = [_id(params.get("model_info"))]
    standard = kwargs.get("standard_logging_object")
    if isinstance(standard, Mapping):
        candidates.append(standard.get("model_id"))
    for holder in (params, kwargs):
        for key in METADATA_KEYS:
            metadata = holder.get(key)
            if isinstance(metadata, Mapping):
                candidates.append(_id(metadata.get("model_info")))
    return next((str(c) for c in candidates if isinstance(c, (str, int)) and not isinstance(c, bool) and str(c)), None)


def _id(model_info: Any) -> Any:
    return model_info.get("id") if isinstance(model_info, Mapping) else None


def breadcrumb_error(metadatas: Sequence[Any], deployment_id: str, message: bool = True) -> str | None:
    """The error LiteLLM's retry breadcrumbs (``previous_models``, one record per failed attempt,
    oldest first) hold for the latest failed attempt on ``deployment_id``, as ``Type: message``;
    ``message`` False: the type only (an upstream's message may quote the request: ``error_text``)."""
    error = None
    for metadata in metadatas:
        records = metadata.get("previous_models") if isinstance(metadata, Mapping) else None
        for record in records if isinstance(records, (list, tuple)) else ():
            if not isinstance(record, Mapping) or _breadcrumb_deployment(record) != deployment_id:
                continue
            kind, text = record.get("exception_type"), record.get("exception_string")
            if kind or text:
                error = f"{kind or 'Exception'}: {text or ''}" if message else f"{kind or 'Exception'}{MESSAGE_LEFT_OUT}"
    return None if error is None else error[:1000]


def _breadcrumb_deployment(record: Mapping[str, Any]) -> str | None:
    value = record.get("deployment_id") or _id(record.get("model_info"))
    return str(value) if value else None


def metadatas_of(kwargs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The request metadata dicts of a call's kwargs (``metadata``, ``litellm_metadata``, also under
    ``litellm_params`` as LiteLLM's callbacks carry them)."""
    params = kwargs.get("litellm_params")
    holders = [kwargs] + ([params] if isinstance(params, Mapping) else [])
    return [h[k] for h in holders for k in METADATA_KEYS if isinstance(h.get(k), Mapping)]


MESSAGE_LEFT_OUT = " (message not logged: decision_log.log_prompts is false)"


def error_text(exception: Any, message: bool = True) -> str:
    """An attempt's error for its outcome record: ``Type: message`` (at most 1,000 characters);
    ``message`` False (``decision_log.log_prompts`` off): an upstream's message may quote the request,
    prompt included, so only the exception's type, its HTTP status and LiteLLM's error class are kept."""
    if exception is None:
        return "unknown error"
    if message:
        return f"{type(exception).__name__}: {exception}"[:1000]
    kind = type(exception)
    status = getattr(exception, "status_code", None)
    parts = [f"HTTP {status}" if isinstance(status, int) and not isinstance(status, bool) else None]
    if kind.__module__.startswith("litellm"):
        parts.append(f"litellm.{kind.__name__}")
    details = ", ".join(p for p in parts if p)
    return f"{kind.__name__}{f' ({details})' if details else ''}{MESSAGE_LEFT_OUT}"
