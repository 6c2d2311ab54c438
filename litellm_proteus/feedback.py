"""Feedback: an outcome score in [0, 1] for one routed request, keyed by its ``litellm_call_id``.

Three ways in, one set of rules (``FeedbackDesk.accept``):

- ``send_feedback(call_id, score)`` in Python: through the proxy (``url=``), into a log directory
  (``log_dir=``), or, inside the proxy process, straight to the live strategy;
- ``proteus feedback CALL_ID SCORE --url PROXY | --log DIR`` (``feedback_cli.py``);
- ``POST /proteus/feedback`` on the proxy (``router_strategy/feedback_route.py``).

A score that is not a number in [0, 1], a body with a field other than ``call_id``, ``score`` and
``source``, a source longer than 64 characters (400), an unknown call id (404), a caller that
``decision_log.feedback_from`` does not let score the call (403: by default only the key that made
the request, or a proxy admin), a second score for the same call (409), a score for a call whose
PROTEUS pick failed (409: the answer, if any, came from a fallback group, and the score would be
charged to a deployment that did not answer) and a score for a decision older than
``decision_log.feedback_max_age_s`` (410) are refused with ``FeedbackError`` and change nothing.
Accepted feedback is appended to the decision log and handed to the strategy's
``on_feedback(decision_entry, score)``.  ``send_feedback`` inside the proxy process counts as a proxy
admin; ``log_dir`` feedback checks no key (whoever may write the folder may label it).

Where a decision is found: with ``routing_strategy_args.redis``, the Redis index the decision-log
writer keeps (one hash per call, ``<redis_key_prefix><call_id>``: the owning key, the decision's
index entry, the latest outcome summary, and the duplicate check; kept ``feedback_max_age_s``), so
any worker of any proxy instance can accept (or refuse) it; else, and while Redis has not indexed it
yet or is down, this process's bounded in-memory index (``decision_log.index_size`` entries, and
each call's latest outcome).  Only the entry (``decision_log.index_entry``: no prompt, no response,
only the chosen candidate) is kept.  The first key to use a call id owns it (client-chosen
``x-litellm-call-id`` headers may collide): a later decision of another key under it is neither
indexed nor remembered, and takes no feedback from that key.  Duplicates are refused across
processes with one atomic ``HSETNX`` per call; without Redis, per process.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import DecisionLogSettings
from .compliance_metrics import record_call_id_conflict
from .decision_log import (
    CLAIM_SCRIPT,
    INDEX_DECISION,
    INDEX_FEEDBACK,
    INDEX_OUTCOME,
    NO_OWNER,
    append_records,
    chosen_deployment_id,
    index_entry,
    index_key,
    index_ttl_s,
    outcome_summary,
    feedback_record,
    call_requests,
    iter_records,
    latest_outcome,
    outcome_of,
)
from .observability import RateLimitedWarnings
from .request import short_repr

logger = logging.getLogger("litellm_proteus.feedback")

FEEDBACK_ROUTE = "/proteus/feedback"
FEEDBACK_SOURCES_MAX_LEN = 64


class FeedbackError(ValueError):
    """A refused feedback; ``status`` is the HTTP status the proxy answers with."""

    def __init__(self, message: str, status: int, param: str | None = None):
        super().__init__(message)
        self.status, self.param = status, param


FEEDBACK_FIELDS = ("call_id", "score", "source")  # a feedback body's fields; source is optional
CALL_ID_MAX_LEN = 256


def parse_score(score: Any) -> float:
    bad = FeedbackError(f"score must be a number in [0, 1]; got {short_repr(score)}", 400, "score")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise bad
    if isinstance(score, int):  # exact: float() of a huge int overflows
        if not 0 <= score <= 1:
            raise bad
    elif not math.isfinite(score) or not 0 <= score <= 1:
        raise bad
    return float(score)


def parse_call_id(call_id: Any) -> str:
    if not isinstance(call_id, str) or not call_id or len(call_id) > CALL_ID_MAX_LEN:
        raise FeedbackError(
            f"call_id must be the request's litellm_call_id (the x-litellm-call-id response header, at most "
            f"{CALL_ID_MAX_LEN} characters); got {short_repr(call_id)}",
            400,
            "call_id",
        )
    return call_id


def parse_source(source: Any) -> str:
    if not isinstance(source, str) or not source or len(source) > FEEDBACK_SOURCES_MAX_LEN:
        raise FeedbackError(
            f"source must be a non-empty string of at most {FEEDBACK_SOURCES_MAX_LEN} characters (e.g. 'api', "
            f"'judge'); got {short_repr(source)}",
            400,
            "source",
        )
    return source


def parse_feedback_body(body: Any, default_source: str = "api") -> tuple[str, float, str]:
    """``(call_id, score, source)`` from a feedback body ``{"call_id": ..., "score": 0..1, "source": ...}``;
    FeedbackError (400) for anything else, unknown keys included (a misspelt field is not ignored)."""
    if not isinstance(body, dict):
        raise FeedbackError(f'body must be a JSON object {{"call_id": ..., "score": 0..1}}; got {type(body).__name__}', 400)
    unknown = [key for key in body if key not in FEEDBACK_FIELDS]
    if unknown:
        names = ", ".join(short_repr(key, 40) for key in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise FeedbackError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {names}: a feedback body has call_id, score "
            f"(a number in [0, 1]) and optionally source",
            400,
            str(unknown[0])[:40],
        )
    call_id, score = parse_call_id(body.get("call_id")), parse_score(body.get("score"))
    return call_id, score, parse_source(body.get("source", default_source))


@dataclass(frozen=True)
class FeedbackCaller:
    """Who sends a feedback: ``key_hash`` is ``tiers.hash_key`` of the caller's key as LiteLLM logs
    it (the hash the decision log stores for the request's key), ``admin`` a proxy admin."""

    key_hash: str | None
    admin: bool = False


IN_PROCESS = FeedbackCaller(None, admin=True)  # send_feedback inside the proxy process: the operator's own code
FEEDBACK_FROM_RULES = {
    "owner": "only the key that made the request, or a proxy admin, may score it",
    "admin": "only a proxy admin may score it",
}


class FeedbackDesk:
    """Decisions this process routed (bounded), the owner, duplicate and age checks, and the hand-off
    to the log.

    It keeps each decision's index entry (``decision_log.index_entry``: no prompt, only the chosen
    candidate), at most ``index_size`` of them.  The first key to route a call id owns it: a later
    decision of another key under the same id (a client-chosen ``x-litellm-call-id``) is not
    remembered (``remember`` says False; warned and counted), and its outcomes are not taken.  With
    the Redis index, the index's entry is the call's (the first key's on any worker); this process's
    own entry is used while the writer has not indexed it yet, and while Redis is down.

    ``redis`` is a sync ``redis.Redis`` or None; ``append`` queues a record in the decision log and
    says whether it was taken."""

    def __init__(self, settings: DecisionLogSettings, append: Any, redis: Any = None):
        self.settings = settings
        self.append = append
        self.redis = redis
        self.conflicts = 0  # decisions not remembered: their call id was another key's
        self._decisions: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._outcomes: OrderedDict[str, dict[str, Any]] = OrderedDict()  # each call's latest outcome
        self._scored: OrderedDict[str, float] = OrderedDict()  # call id -> when its score was taken
        self._lock = threading.Lock()
        self._warnings = RateLimitedWarnings(logger, 30.0)

    @property
    def indexed(self) -> bool:
        return self.redis is not None and self.settings.redis_index

    def remember(self, decision: dict[str, Any]) -> bool:
        """Keep ``decision``'s index entry; False (nothing kept) when its call id is remembered for another key."""
        entry = index_entry(decision)
        call_id = entry["call_id"]
        with self._lock:
            known = self._decisions.get(call_id)
            if known is None or known.get("key_hash") == entry.get("key_hash"):  # a retry of the same key's call
                if known is not None and (known.get("prompt_sha256") != entry.get("prompt_sha256")
                                          or call_id in self._scored):
                    # another prompt, or a decision after the call's feedback (a retry never follows
                    # it): another request reusing the call id (``call_requests``), scored afresh
                    self._scored.pop(call_id, None)
                    self._outcomes.pop(call_id, None)
                self._decisions[call_id] = entry
                self._decisions.move_to_end(call_id)
                while len(self._decisions) > self.settings.index_size:
                    self._decisions.popitem(last=False)
                return True
            self.conflicts += 1
        if not self.indexed:  # with the Redis index, the writer counts it (once, on whichever worker)
            record_call_id_conflict()
            self._warnings.warn("conflict", "PROTEUS feedback: call id %s was used by another key first: this "
                                "decision takes no feedback from its key (counted)", short_repr(call_id))
        return False

    def settle(self, outcome: dict[str, Any], owner: Any = NO_OWNER) -> None:
        """Remember ``outcome`` (its summary) as its call's latest: a score for a call whose pick failed
        is refused.  ``owner``: the key hash of the decision it is the outcome of; an outcome of another
        key's decision than the one remembered for the call id is not taken."""
        with self._lock:
            known = self._decisions.get(outcome["call_id"])
            if owner is not NO_OWNER and known is not None and known.get("key_hash") != owner:
                return
            self._outcomes[outcome["call_id"]] = outcome_summary(outcome)
            self._outcomes.move_to_end(outcome["call_id"])
            while len(self._outcomes) > self.settings.index_size:
                self._outcomes.popitem(last=False)

    def adopt(self, other: "FeedbackDesk") -> None:
        """Take over ``other``'s remembered decisions, outcomes and scored call ids (the desk of an
        earlier decision-log configuration), newest kept within ``index_size``; this desk's own stay newer."""
        with other._lock:
            decisions, outcomes, scored = list(other._decisions.items()), list(other._outcomes.items()), list(other._scored.items())
        with self._lock:
            mine, self._decisions = self._decisions, OrderedDict(decisions)
            self._decisions.update(mine)
            my_outcomes, self._outcomes = self._outcomes, OrderedDict(outcomes)
            self._outcomes.update(my_outcomes)
            self._scored = OrderedDict([*scored, *self._scored.items()])
            for table in (self._decisions, self._outcomes, self._scored):
                while len(table) > self.settings.index_size:
                    table.popitem(last=False)

    def forget(self, decision: dict[str, Any]) -> None:
        """Forget ``decision`` (this very decision: a retry's later decision under the same call id
        stays): the log did not keep it, so it takes no feedback here either."""
        entry = index_entry(decision)
        with self._lock:
            if self._decisions.get(entry["call_id"]) == entry:
                del self._decisions[entry["call_id"]]

    def lookup(self, call_id: str) -> dict[str, Any] | None:
        return self.find(call_id)[0]

    def find(self, call_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the call's decision entry, its latest outcome): from the Redis index when it has the call,
        else from memory."""
        with self._lock:
            decision, outcome = self._decisions.get(call_id), self._outcomes.get(call_id)
        if not self.indexed:
            return decision, outcome
        import redis as redis_lib

        try:
            line, outcome_line = self.redis.hmget(index_key(self.settings.redis_key_prefix, call_id),
                                                  [INDEX_DECISION, INDEX_OUTCOME])
        except redis_lib.ResponseError:  # not a hash (an index of an earlier release): no entry
            line = outcome_line = None
        except Exception as exc:  # Redis down: only this process's decisions can be found
            if decision is not None:
                return decision, outcome
            raise FeedbackError(f"decision index unavailable (Redis: {exc}); retry later", 503) from exc
        indexed, indexed_outcome = _object(line, "ts", "candidates", "chosen"), _object(outcome_line, "ts")
        if indexed is None:
            return decision, outcome
        if decision is not None and decision.get("key_hash") == indexed.get("key_hash") \
                and float(decision["ts"]) >= float(indexed["ts"]):  # a retry the writer has not indexed yet
            return decision, outcome if outcome is not None else indexed_outcome
        mine = decision is not None and decision.get("key_hash") == indexed.get("key_hash")
        return indexed, indexed_outcome if indexed_outcome is not None or not mine else outcome

    def authorize(self, call_id: str, decision: dict[str, Any], caller: FeedbackCaller) -> None:
        """FeedbackError (403) unless ``decision_log.feedback_from`` lets ``caller`` score ``decision``."""
        rule = self.settings.feedback_from
        if rule == "any" or caller.admin or (rule == "owner" and caller.key_hash == decision.get("key_hash")):
            return
        raise FeedbackError(
            f"feedback for call_id {call_id!r} is refused: decision_log.feedback_from is {rule!r}: "
            f"{FEEDBACK_FROM_RULES[rule]}",
            403,
            "call_id",
        )

    def accept(self, call_id: Any, score: Any, source: Any = "api", now: float | None = None,
               caller: FeedbackCaller = IN_PROCESS) -> dict[str, Any]:
        """Validate, record and return the decision entry the score is for; FeedbackError otherwise."""
        score, call_id, source = parse_score(score), parse_call_id(call_id), parse_source(source)
        decision, outcome = self.find(call_id)
        if decision is None:
            raise FeedbackError(
                f"unknown call_id {call_id!r}: no decision for it, or it is older than the decision index keeps "
                f"(decision_log.feedback_max_age_s {self.settings.feedback_max_age_s:g}s in Redis; the last "
                f"{self.settings.index_size} decisions of each worker in memory): too late, or never routed", 404, "call_id")
        self.authorize(call_id, decision, caller)
        now = time.time() if now is None else now
        age = now - float(decision["ts"])
        if age > self.settings.feedback_max_age_s:
            raise FeedbackError(
                f"feedback for {call_id!r} is late: its decision is {age:.0f}s old, "
                f"decision_log.feedback_max_age_s is {self.settings.feedback_max_age_s:g}",
                410,
                "call_id",
            )
        if outcome is not None and outcome_of(decision, outcome):
            refuse_unanswered(call_id, decision, outcome)
        ts = feedback_ts(now, float(decision["ts"]))
        self._claim(call_id, float(decision["ts"]), ts)
        if not self.append(feedback_record(call_id, score, source, ts=ts)):
            self._release(call_id)
            raise FeedbackError("decision log queue is full; retry later", 503)
        return decision

    def _claim(self, call_id: str, decision_ts: float, ts: float) -> None:
        """Take the call's one score, taken at ``ts`` (its feedback record's: after its decision's).
        Redis, when it answers, decides for every worker (its index starts a reused call id's new
        request afresh); this process's memory decides while it is down, and the writer tells Redis
        of the score (the feedback record's index entry) once it answers."""
        duplicate = FeedbackError(f"call_id {call_id!r} already has feedback", 409, "call_id")
        fresh = None
        if self.redis is not None:
            try:
                fresh = bool(self.redis.eval(CLAIM_SCRIPT, 1, index_key(self.settings.redis_key_prefix, call_id),
                                             index_ttl_s(self.settings), repr(ts)))
            except Exception:  # Redis down: this process's memory is what there is
                fresh = None
        with self._lock:
            scored = self._scored.get(call_id)
            # this process's memory refuses too: a Redis restarted empty has forgotten the claims it took
            # (``scored``: when the call's score was taken; a decision after it is another request)
            if fresh is False or (scored is not None and decision_ts <= scored):
                raise duplicate
            self._scored[call_id] = ts
            self._scored.move_to_end(call_id)
            while len(self._scored) > self.settings.index_size:
                self._scored.popitem(last=False)

    def _release(self, call_id: str) -> None:
        with self._lock:
            self._scored.pop(call_id, None)
        if self.redis is not None:
            try:
                self.redis.hdel(index_key(self.settings.redis_key_prefix, call_id), INDEX_FEEDBACK)
            except Exception:
                pass


def feedback_ts(now: float, decision_ts: float) -> float:
    """A feedback record's ``ts``: ``now``, but never at or before its decision's, which another
    instance's clock (running ahead of this one) may have stamped: readers (``call_requests``) and the
    duplicate checks take feedback only after its decision."""
    return max(now, math.nextafter(decision_ts, math.inf))


def _object(line: Any, *required: str) -> dict[str, Any] | None:
    """An index field's JSON object with the ``required`` fields; None for an absent field or anything else."""
    if not line:
        return None
    try:
        value = json.loads(line)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) and all(k in value for k in required) else None


def refuse_unanswered(call_id: str, decision: dict[str, Any], outcome: dict[str, Any]) -> None:
    """FeedbackError (409) when ``outcome``, the outcome of ``decision``'s pick, is a failure: the
    deployment PROTEUS picked did not answer (a fallback group did, or nothing did), so a score would
    be charged to it (compliance controller, quality breaker, deployment correction, training) for
    an answer it did not give."""
    if outcome.get("success") is not False:
        return
    raise FeedbackError(
        f"call_id {call_id!r} was not answered by the deployment PROTEUS picked ({chosen_deployment_id(decision)}: "
        f"{outcome.get('error') or 'its attempt failed'}); what the client got, if anything, is no whole answer of "
        "that pick (a fallback group's answer, or the part of a stream sent before it broke), so a score for it is not taken",
        409,
        "call_id",
    )


def submit_to_strategy(strategy: Any, call_id: Any, score: Any, source: Any,
                       caller: FeedbackCaller = IN_PROCESS) -> dict[str, Any]:
    """Accept feedback from ``caller`` in the proxy process and hand it to the strategy's ``on_feedback``."""
    desk = getattr(strategy, "feedback_desk", None)
    if desk is None:
        raise FeedbackError("feedback needs routing_strategy_args.decision_log in the proxy config", 404)
    decision = desk.accept(call_id, score, source, caller=caller)
    strategy.on_feedback(decision, float(score))
    return decision


def append_to_log_dir(directory: str | Path, call_id: Any, score: Any, source: str, max_age_s: float | None = None) -> dict[str, Any]:
    """Offline feedback: the decision must be in the log at ``directory``; the feedback record goes
    into a file of its own there (the proxy's controller does not see it: use ``url`` for that)."""
    score, call_id, source = parse_score(score), parse_call_id(call_id), parse_source(source)
    # the score labels the call's latest request (call_requests: a reused call id is a request per prompt)
    owned = [r for r in call_requests(r for r in iter_records(directory) if r["call_id"] == call_id).requests if r.owned]
    if not owned:
        raise FeedbackError(f"unknown call_id {call_id!r}: no decision for it in {directory}", 404, "call_id")
    request = max(owned, key=lambda r: r.number)
    if request.feedback:
        raise FeedbackError(f"call_id {call_id!r} already has feedback in {directory}", 409, "call_id")
    decision = request.decision
    outcome = latest_outcome(decision, request.outcomes)
    if outcome is not None:
        refuse_unanswered(call_id, decision, dict(outcome))
    now = time.time()
    if max_age_s is not None and now - float(decision["ts"]) > max_age_s:
        raise FeedbackError(f"feedback for {call_id!r} is late: its decision is older than {max_age_s:g}s", 410, "call_id")
    append_records(directory, [feedback_record(call_id, score, source, ts=feedback_ts(now, float(decision["ts"])))])
    return decision


def _post_feedback(url: str, body: dict[str, Any], api_key: str | None, timeout_s: float) -> dict[str, Any]:
    """POST ``body`` to ``<url>/proteus/feedback``; the proxy's answer, or FeedbackError: the proxy's
    refusal with its status, a URL without http(s):// or one that is malformed (a bad port, an empty
    or over-long host name: 400), no answer (connection refused, timeout: 503), an HTTP 200 answer
    that is not a JSON object (502: not a PROTEUS proxy's answer)."""
    import httpx

    if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
        raise FeedbackError(f"proxy URL {short_repr(url)} needs http:// or https:// (e.g. http://127.0.0.1:4000)", 400)
    target = url.rstrip("/") + FEEDBACK_ROUTE
    try:
        parsed = httpx.URL(url)
        if not parsed.host:
            raise httpx.InvalidURL("it names no host")
        if parsed.port is not None and not 1 <= parsed.port <= 65535:
            raise httpx.InvalidURL(f"port {parsed.port} is not in 1-65535")
        response = httpx.post(
            target, json=body, headers={"Authorization": f"Bearer {api_key}"} if api_key else {}, timeout=timeout_s
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, UnicodeError) as exc:  # UnicodeError: a host label over 63 characters
        raise FeedbackError(f"proxy URL {short_repr(url)} is malformed ({type(exc).__name__}: {exc}); e.g. http://127.0.0.1:4000",
                            400) from exc
    except httpx.HTTPError as exc:
        raise FeedbackError(f"cannot reach the proxy at {target}: {type(exc).__name__}: {exc or 'no answer'}", 503) from exc
    try:
        answer = response.json()
    except ValueError:
        if response.status_code == 200:
            raise FeedbackError(f"the answer from {target} (HTTP 200) is not JSON, so not a PROTEUS proxy's: "
                                f"{short_repr(response.text[:200], 200)}; pass the proxy's base URL", 502) from None
        answer = {"error": {"message": response.text[:500]}}
    if response.status_code == 200 and not isinstance(answer, dict):
        raise FeedbackError(f"the answer from {target} (HTTP 200) is not a JSON object, so not a PROTEUS proxy's: "
                            f"{short_repr(answer, 200)}", 502)
    if response.status_code != 200:
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if response.status_code == 404 and not message:  # not PROTEUS's answer: no such route there
            raise FeedbackError(
                f"no feedback route at {target} (HTTP 404): pass the proxy's base URL, e.g. http://127.0.0.1:4000, "
                f"without /v1", 404,
            )
        if not message and isinstance(answer, dict):
            message = answer.get("detail")
        raise FeedbackError(f"proxy refused the feedback (HTTP {response.status_code}): {message or answer}", response.status_code)
    return answer


def send_feedback(
    call_id: str,
    score: float,
    *,
    url: str | None = None,
    api_key: str | None = None,
    log_dir: str | Path | None = None,
    source: str = "python",
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Record ``score`` for the request ``call_id``.

    - ``url``: POST it to a proxy's ``/proteus/feedback`` with ``api_key`` (reaches the controller);
    - ``log_dir``: append it to a decision log folder (offline; checks the same rules);
    - neither: inside the proxy process, hand it to the live strategy.

    Returns the proxy's JSON answer (``url``), the decision record (``log_dir``) or, in the proxy
    process, the decision's index entry (``decision_log.index_entry``); raises FeedbackError."""
    if url is not None:  # checked here too: JSON cannot carry NaN or infinities to the proxy's check
        body = {"call_id": parse_call_id(call_id), "score": parse_score(score), "source": parse_source(source)}
        return _post_feedback(url, body, api_key, timeout_s)
    if log_dir is not None:
        return append_to_log_dir(log_dir, call_id, score, source)
    from .router_strategy.patch import active_strategy

    strategy = active_strategy()
    if strategy is None:
        raise FeedbackError("no PROTEUS strategy runs in this process: pass url= (a proxy) or log_dir=", 404)
    return submit_to_strategy(strategy, call_id, score, source)


__all__ = ["FEEDBACK_FIELDS", "FEEDBACK_ROUTE", "FeedbackCaller", "FeedbackDesk", "FeedbackError", "parse_feedback_body", "send_feedback",
           "submit_to_strategy"]
