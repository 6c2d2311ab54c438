"""What the strategy and the proxy hook write to the decision log, and the per-process writer.

- ``log_routed``: after a PROTEUS pick, the ``decision`` record (queued; the in-memory feedback
  index learns it at once and forgets it when the queue or the writer drops it, the compliance
  gauges at once);
- the ``outcome`` record of each PROTEUS pick (``response_cost``, latency, error, the deployment),
  attributed by the attempt ledger (``litellm_proteus/attempts.py``, per request: ``request_key``):
  ``log_outcome`` from LiteLLM's success/failure callbacks, ``log_repick`` when the router picks again
  for a request (a retry or a fallback: the picks LiteLLM's retry breadcrumbs name failed),
  ``log_request_failed`` from the proxy's post-call failure hook; an answer from a deployment PROTEUS
  did not pick (a fallback group's) is no pick's outcome;
- shadow evaluation (``litellm_proteus/shadow.py``): ``log_routed`` samples the request and
  remembers its candidates, ``log_outcome`` starts the shadow job once the pick's response is
  complete (a failed pick's job is dropped).

One writer (thread, files, Redis) per process and decision-log configuration, shared by the
strategies of rebuilt routers, as the predictors and batchers are.  A settings change that gives
another configuration starts another writer and feedback desk; ``release_unused`` (called by the
strategy's ``release_unused`` whenever a router's strategy is replaced) then closes the writers no
live strategy uses: what they have queued is written, their thread ends and their file closes.  The
new desk takes over the in-memory feedback index of the desk it replaces, so a decision routed
before the change still takes its feedback without Redis.  An outcome is written by the log that is
current when it arrives: with another ``dir``, the outcomes of calls in flight at the change go to
the new folder.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Any, Sequence

from .. import compliance_metrics
from ..attempts import Attempt, AttemptLedger, answering_deployment_id, breadcrumb_error, current_strategy, error_text, metadatas_of
from ..config import ProteusConfig
from ..decision_log import (
    WRITE_TIMEOUT_S,
    DecisionLogWriter,
    LoggedCandidate,
    append_records,
    decision_record,
    finite_number,
    fit_line,
    outcome_record,
    redis_client,
)
from ..compliance import Control
from ..costs import deployment_id
from ..engine import Routed, ScoredDeployment, TauResolution
from ..request import METADATA_KEYS, ProteusRequest, failed_deployment_ids, short_repr
from ..tiers import hash_key
from ..feedback import FeedbackDesk
from ..shadow import SHADOW_METADATA_KEY, ShadowEvaluator, ShadowJob, job_candidates, response_text
from ..shadow_budget import CLIENT_NAME as SHADOW_CLIENT_NAME
from ..shadow_budget import DailyBudget

logger = logging.getLogger("litellm_proteus.serving_log")
_logs: dict[str, tuple[DecisionLogWriter, FeedbackDesk]] = {}
# the desk of the last writer released: a log turned off and on again takes its feedback index back
_retired_desk: FeedbackDesk | None = None
attempts = AttemptLedger()  # the open PROTEUS picks of each request of this process
_shadows: dict[str, ShadowEvaluator] = {}
_lock = threading.Lock()


def _redis(config: ProteusConfig, client_name: str | None = None) -> tuple[Any, float]:
    """(client or None, seconds to keep local state after a Redis failure)."""
    if config.redis is None:
        return None, 1.0
    return redis_client(config.redis, client_name=client_name), config.redis.retry_after_s


def shared_shadow(config: ProteusConfig, replaces: ShadowEvaluator | None = None) -> ShadowEvaluator | None:
    """The shadow evaluator for ``config.shadow`` (None when it is off); its rows go beside the
    decision log, rotated by the same limits; its daily spend is shared through Redis when configured.
    A new evaluator's budget goes on from the ledger of the one it ``replaces`` (the router's previous
    strategy's) when both count in the same place (``DailyBudget``): the day's spend and what is not
    yet sent to Redis carry over, and the replaced evaluator's running jobs settle there."""
    settings, log = config.shadow, config.decision_log
    if not settings.enabled or log is None or log.dir is None:
        return None
    key = f"{settings.model_dump_json()}|{log.dir}|{log.max_bytes}|{log.max_files}|{log.file_mode}|{config.redis_url}"
    with _lock:
        if key not in _shadows:
            client, retry = _redis(config, SHADOW_CLIENT_NAME)  # the budget's own: closed with the evaluator
            budget = DailyBudget(float(settings.daily_budget_usd), client, settings.redis_key_prefix, retry,
                                 redis_url=config.redis_url, replaces=replaces.budget if replaces is not None else None)
            _shadows[key] = ShadowEvaluator(settings, log.dir, log.max_bytes, log.max_files, budget, file_mode=log.file_mode)
        return _shadows[key]


def shared_decision_log(config: ProteusConfig, replaces: FeedbackDesk | None = None) -> tuple[DecisionLogWriter, FeedbackDesk] | None:
    """The writer and feedback desk for ``config.decision_log`` (None when it is not configured).  A new
    desk takes over the in-memory index of the desk it ``replaces`` (the router's previous strategy's)."""
    settings = config.decision_log
    if settings is None:
        return None
    key = f"{settings.model_dump_json()}|{config.redis_url}"
    with _lock:
        if key not in _logs:
            client, retry = _redis(config)
            writer_client = redis_client(config.redis, WRITE_TIMEOUT_S) if config.redis else None
            writer = DecisionLogWriter(settings, writer_client, retry_after_s=retry, owns_redis=True)
            desk = FeedbackDesk(settings, writer.submit, client)
            replaces = replaces or _retired_desk
            if replaces is not None:  # decisions routed under the earlier configuration keep their feedback
                desk.adopt(replaces)
            writer.on_unlogged = _forget  # a decision the writer could not log takes no feedback
            _logs[key] = (writer, desk)
        return _logs[key]


def _forget(record: dict) -> None:
    """A decision no log kept: every desk that remembers it forgets it (a desk may have taken it
    over from the one that remembered it first)."""
    with _lock:
        desks = [desk for _, desk in _logs.values()]
    for desk in desks:
        desk.forget(record)


def release_unused(live: Sequence[Any]) -> int:
    """Close the decision-log writers and shadow evaluators (files, their budget's Redis client) none
    of the ``live`` strategies uses; returns how many were released."""
    global _retired_desk
    writers = {id(s.decision_log) for s in live}
    shadows = {id(s.shadow) for s in live}
    with _lock:
        logs = [_logs.pop(k) for k in [k for k, (w, _) in _logs.items() if id(w) not in writers]]
        evaluators = [_shadows.pop(k) for k in [k for k, e in _shadows.items() if id(e) not in shadows]]
    for writer, desk in logs:
        writer.close(wait=False)  # off the caller's thread: the writer ends once its queue is written
        if desk.redis is not None:  # the desk's own client (the writer's has its own timeout)
            desk.redis.close()
        _retired_desk = desk  # its in-memory index answers while Redis is down or not configured
    for evaluator in evaluators:
        evaluator.close()
    return len(logs) + len(evaluators)


def record_gauges(strategy: Any, state_key: str, p_chosen: float) -> None:
    """The compliance gauges of one decision (they read the controller's snapshot: maybe Redis)."""
    writer = getattr(strategy, "gauges", None)
    compliance_metrics.record_decision(state_key, p_chosen, writer)
    compliance_metrics.export(state_key, getattr(strategy, "compliance", None), compliance_metrics.EXPORT_EVERY_S, writer)


def log_routed(
    strategy: Any,
    request_kwargs: dict,
    model_group: str,
    resolution: TauResolution,
    routed: Routed,
    scored: Sequence[ScoredDeployment],
    request: ProteusRequest,
    control: Control,
) -> None:
    """Record one PROTEUS decision in the decision log (when configured)."""
    strategy = current_strategy(strategy)
    decision = routed.decision
    state_key = control.state_key
    p = [float(x) for x in decision.p]
    if strategy.decision_log is None:
        return
    # The proxy sets litellm_call_id before routing (retries share it); a Router SDK call without
    # one gets an id here, which LiteLLM then uses for that attempt.
    if not request_kwargs.get("litellm_call_id"):
        request_kwargs["litellm_call_id"] = str(uuid.uuid4())
    slots = strategy.engine.slots
    record = decision_record(
        call_id=str(request_kwargs["litellm_call_id"]),
        key_hash=None if request.key_hash is None else hash_key(request.key_hash),
        tier=resolution.tier,
        tau_source=resolution.source,
        state_key=state_key,
        tau=resolution.tau,
        tau_requested=resolution.requested,
        tau_served=strategy.engine.predictor.taus.effective(resolution.tau)[0],
        tau_effective=float(decision.tau_effective),
        delta=float(control.delta),
        mu=float(decision.mu),
        model_group=model_group,
        candidates=[
            LoggedCandidate(deployment_id(c.deployment), c.slot, slots[c.slot], float(cost), p_i,
                            float(decision.p_correction[i]) if decision.p_correction else 0.0)
            for i, (c, cost, p_i) in enumerate(zip(scored, routed.costs_usd, p))
        ],
        chosen=decision.index,
        propensity=float(routed.propensity),
        prompt=request.text,
        artifact=strategy.engine.manifest.weights_sha256,
        log_prompt=strategy.config.decision_log.log_prompts,
    )
    # Remembered before it is queued, so the writer's forget (a record it cannot log) always comes after;
    # a dropped decision takes no feedback (it would have no decision in the log).  A call id another
    # key used first (client-chosen) is not remembered: it stays that key's.
    remembered = strategy.feedback_desk.remember(record)
    if not strategy.decision_log.submit(record) and remembered:
        strategy.feedback_desk.forget(record)
    key = request_key(request_kwargs)
    if key is not None:
        attempts.open(key, Attempt(deployment_id(scored[decision.index].deployment), strategy, record["key_hash"],
                                   strategy.decision_log.settings))
    shadow = getattr(strategy, "shadow", None)
    if shadow is not None and request.messages is not None and not _is_shadow_call(request_kwargs) \
            and shadow.sample(resolution.tier):
        candidates, served = job_candidates([slots[c.slot] for c in scored], [c.deployment for c in scored],
                                            routed.costs_usd, decision.index)
        shadow.offer(ShadowJob(record["call_id"], request.text, [dict(m) for m in request.messages], resolution.tier,
                               float(decision.tau_effective), candidates, served))


def _is_shadow_call(request_kwargs: dict) -> bool:
    return any(isinstance(request_kwargs.get(k), dict) and SHADOW_METADATA_KEY in request_kwargs[k] for k in METADATA_KEYS)


def on_feedback(strategy: Any, decision: dict, score: float) -> None:
    """Feedback for one logged decision: the compliance gauges (the strategy also hands it to the controller)."""
    writer = getattr(strategy, "gauges", None)  # a decision on a state it no longer routes on: no gauge for it
    compliance_metrics.record_feedback(decision["state_key"], score, writer)
    compliance_metrics.export(decision["state_key"], getattr(strategy, "compliance", None), writer=writer)


def _decision_metadata(kwargs: dict) -> dict | None:
    from .strategy import DECISION_METADATA_KEY

    params = kwargs.get("litellm_params")  # a client may send any value under this key
    for holder in (params if isinstance(params, dict) else {}, kwargs):
        for key in METADATA_KEYS:
            metadata = holder.get(key)
            if isinstance(metadata, dict) and isinstance(metadata.get(DECISION_METADATA_KEY), dict):
                return metadata[DECISION_METADATA_KEY]
    return None


# In the request's decision metadata (``metadata["proteus"]``, which only the router writes: the proxy
# hook drops a client's copy): the request's own id, set by its first PROTEUS pick and kept by the
# picks of its retries and fallbacks (LiteLLM retries with the same metadata dict, and falls back
# with a copy of it), never shared with another request even when the call id is.
REQUEST_FIELD = "request"


def request_id(previous_decision: Any) -> str:
    """The request id for a pick's decision metadata: the one an earlier pick of the request (its
    decision metadata ``previous_decision``) set, else a new one."""
    known = previous_decision.get(REQUEST_FIELD) if isinstance(previous_decision, dict) else None
    return known if isinstance(known, str) and known else uuid.uuid4().hex


def request_key(kwargs: Any) -> tuple[str, str] | None:
    """The attempt ledger's key of the request ``kwargs`` belong to (a pick's request kwargs, a
    callback's kwargs, the proxy's request data): (call id, request id); None without either."""
    if not isinstance(kwargs, dict):
        return None
    call_id = kwargs.get("litellm_call_id")
    decision = _decision_metadata(kwargs)
    request = decision.get(REQUEST_FIELD) if decision is not None else None
    if not call_id or not isinstance(request, str) or not request:
        return None
    return str(call_id), request


def deployment_by_id(strategy: Any, model_id: str) -> dict | None:
    """The strategy's router's deployment whose id is ``model_id`` (None when it was removed)."""
    return next((d for d in strategy.router.model_list if deployment_id(d) == model_id), None)


def _write_outcome(attempt: Attempt, call_id: str, success: bool, *, response_cost: float | None = None,
                   latency_ms: float | None = None, error: str | None = None, response: str | None = None,
                   client_disconnected: bool = False) -> None:
    """The outcome record of one pick, beside its decision: in the log of the strategy that logged the
    decision (or of the strategy a settings change put in its place, while it logs to the same folder;
    a change that turned the log off or moved it leaves the outcome a file of its own in the decision's
    folder); the feedback desk learns it too."""
    strategy = current_strategy(attempt.owner)
    writer = getattr(strategy, "decision_log", None)
    folder = attempt.log.dir if attempt.log is not None else None
    if writer is None and folder is None:
        return
    record = outcome_record(call_id=call_id, deployment_id=attempt.deployment_id, success=success,
                            response_cost=response_cost, latency_ms=latency_ms, error=error, response=response,
                            client_disconnected=client_disconnected)
    if folder is not None and (writer is None or writer.settings.dir is None or not same_folder(writer.settings.dir, folder)):
        line, fitted = fit_line(record, attempt.log.max_bytes)  # within max_bytes, as the writer keeps it
        try:
            if line is not None:
                append_records(folder, [fitted])
        except OSError as exc:
            logger.warning("PROTEUS decision log: the outcome of call %s could not be written beside its decision "
                           "in %s: %s", short_repr(call_id), folder, exc)
    else:
        writer.submit(record, attempt.key_hash)
    desk = getattr(strategy, "feedback_desk", None) or _retired_desk
    if desk is not None:  # a failed pick takes no score, wherever the log went
        desk.settle(record, attempt.key_hash)
    if strategy is None:
        return
    if (not success or client_disconnected) and getattr(strategy, "shadow", None) is not None:
        strategy.shadow.forget(call_id)  # only a pick's whole answer is judged


def same_folder(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def _error_messages(attempt: Attempt) -> bool:
    """Whether an outcome of ``attempt`` keeps its error's message: only with ``decision_log.log_prompts``
    (an upstream's error message may quote the request, prompt included)."""
    strategy = current_strategy(attempt.owner)
    settings = getattr(getattr(strategy, "config", None), "decision_log", None)
    return bool(getattr(settings, "log_prompts", False))


def log_repick(request_kwargs: dict) -> None:
    """The router is picking a deployment for a request (any group: a retry, or a fallback to another
    group): the request's open PROTEUS picks whose deployments LiteLLM's retry breadcrumbs name failed
    (LiteLLM ran no failure callback for them when an earlier attempt of the request had one)."""
    key = request_key(request_kwargs)
    if key is None or not attempts.known(key):
        return
    call_id = key[0]
    metadatas = metadatas_of(request_kwargs)
    for attempt in attempts.repicked(key, failed_deployment_ids(*metadatas)):
        error = breadcrumb_error(metadatas, attempt.deployment_id, _error_messages(attempt)) \
            or "the attempt failed (LiteLLM retried the request)"
        _write_outcome(attempt, str(call_id), False, error=error)


def log_request_failed(request_data: Any, exception: Any) -> None:
    """The proxy answered the request with an error: its open PROTEUS picks failed."""
    key = request_key(request_data)
    if key is None:
        return
    call_id = key[0]
    metadatas = metadatas_of(request_data)
    for attempt in attempts.ended(key):
        keep = _error_messages(attempt)
        error = breadcrumb_error(metadatas, attempt.deployment_id, keep) or error_text(exception, keep)
        _write_outcome(attempt, str(call_id), False, error=error)


def log_outcome(strategy: Any, kwargs: dict, response: Any, start_time: Any, end_time: Any, success: bool) -> None:
    """A success/failure callback: the outcome of the PROTEUS pick it is about, if any.

    The deployment the callback names must be the one the pick chose: a fallback group's answer
    (LiteLLM carries the failed pick's request metadata into the fallback call) settles the pick as
    failed and is no pick's outcome.  A request the attempt ledger does not know (it keeps the last
    ``attempts.MAX_CALLS`` requests) is attributed by the decision in its metadata, under the same rule."""
    if not isinstance(kwargs, dict):
        return
    call_id = kwargs.get("litellm_call_id")
    if not call_id:
        return
    call_id = str(call_id)
    answering = answering_deployment_id(kwargs)
    key = request_key(kwargs)
    if key is not None and attempts.known(key):
        if success:
            attempt, others = attempts.answered(key, answering)
            metadatas = metadatas_of(kwargs)
            for other in others:  # picks that did not give the answer (a fallback group's deployment did)
                error = breadcrumb_error(metadatas, other.deployment_id, _error_messages(other)) \
                    or f"deployment {answering} answered the call"
                _write_outcome(other, call_id, False, error=error)
        else:
            attempt = attempts.failed(key, answering)
    else:
        decision = _decision_metadata(kwargs)
        if strategy is None or decision is None or answering is None or decision.get("deployment_id") != answering:
            return
        attempt = Attempt(answering, strategy)
    if attempt is None:
        return
    owner = current_strategy(attempt.owner)
    if owner is None or (owner.decision_log is None and attempt.log is None):
        return
    # what the outcome may keep (error messages, response text): the decision's log's settings
    settings = attempt.log if attempt.log is not None else owner.config.decision_log
    try:
        latency_ms: float | None = (end_time - start_time).total_seconds() * 1000.0
    except (TypeError, AttributeError):
        latency_ms = None
    cost = kwargs.get("response_cost")
    error = None if success else error_text(kwargs.get("exception"), bool(settings and settings.log_prompts))
    disconnected = success and client_disconnected(kwargs)
    shadow = getattr(owner, "shadow", None)
    if shadow is not None and success and not disconnected:  # a stream's callback carries the assembled response
        shadow.answered(call_id, kwargs.get("complete_streaming_response") or response,
                        judge=owner.router.acompletion, lookup=lambda model_id: deployment_by_id(owner, model_id),
                        judge_deployments=lambda: owner.router.get_model_list(model_name=shadow.settings.judge_model) or [])
    _write_outcome(
        attempt, call_id, success,
        response_cost=finite_number(cost),  # LiteLLM's cost may be NaN, an infinity or a bool: null then
        latency_ms=latency_ms,
        error=error,
        response=response_text(response) if success and settings is not None and settings.log_responses else None,
        client_disconnected=disconnected,
    )


def client_disconnected(kwargs: dict) -> bool:
    """Whether the proxy marked the call's client as gone mid-stream (LiteLLM's
    ``_record_streaming_client_disconnect_if_needed`` sets ``client_disconnected`` in the call's
    metadata before it bills the part sent as a success)."""
    return any(metadata.get("client_disconnected") is True for metadata in metadatas_of(kwargs))
