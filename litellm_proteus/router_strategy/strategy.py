"""``ProteusRoutingStrategy``: LiteLLM's custom-routing-strategy hook, driven by the decision engine.

LiteLLM's ``Router.set_custom_routing_strategy`` replaces the router's whole deployment pick, so
this class does, per request:

- groups listed in ``groups`` (after model-group aliases): LiteLLM's own candidate filtering
  (``Router.async_get_healthy_deployments``: cooldowns, health checks, team/tag/order filters,
  retry skips), minus deployments that already failed this request (``previous_models``; when all
  did, all but the one that failed last, and that one when it is the only candidate:
  ``engine.exclude_failed``), then
  tau resolution (metadata, then Redis with a bounded timeout), then one micro-batched model call;
- every other group: the same candidate filtering, then the strategy LiteLLM would use for it
  (its routing group's selector, else ``simple-shuffle``, LiteLLM's default).  LiteLLM's
  auto-router pre-routing hook is not run (PROTEUS replaces model choice).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import litellm
from litellm.litellm_core_utils.core_helpers import get_metadata_variable_name_from_kwargs
from litellm.router_strategy.simple_shuffle import simple_shuffle
from litellm.router_utils.handle_error import async_raise_no_deployment_exception
from litellm.types.router import CustomRoutingStrategyBase

from ..artifact import DEFAULT_ARTIFACT_DIR
from .. import compliance, compliance_metrics, tiers
from ..compliance import Control, StateKeys, shared_controller, state_key_for
from ..costs import deployment_id
from ..decision_log import chosen_p, uncorrected_p
from ..batcher import BatcherClosed, MicroBatcher
from ..model_thread import run_on_model_thread
from ..config import STRATEGY_NAME, ProteusConfig
from ..engine import DecisionEngine, DecisionRequest, TauResolution, exclude_failed, resolve_tau
from ..request import ProteusRequest, RequestShapeError, TauError, TierChoice, read_request
from ..deployment_correction import DeploymentCorrection, alarm_best_p
from ..quality_breaker import QualityBreaker
from ..observability import (
    DecisionRecord,
    RateLimitedWarnings,
    log_decision,
    operating_point_label,
    record_metrics,
    record_tier_error,
)
from ..tiers import TierLookup, TierStore, TierStoreError, hash_key
from . import serving_log
from .compat import get_parent_otel_span_from_kwargs, model_from_alias

logger = logging.getLogger("litellm_proteus.router")
DECISION_METADATA_KEY = "proteus"
WARN_EVERY_S = 30.0

_predictors: dict[tuple, Any] = {}
_batchers: dict[tuple[int, int, float], MicroBatcher] = {}
_shared_lock = threading.Lock()
_live: list[weakref.ref] = []  # the strategies of the last ``release_unused``: whose deployments keep gauges
_next_sweep = 0.0  # when a decision next runs ``sweep_deployments``
SWEEP_EVERY_S = 60.0  # how often decisions look for deployments removed at runtime (/model/delete): their gauges go


def artifact_dir(config: ProteusConfig) -> Path:
    """``artifact`` (relative paths: to the proxy's working directory), or the bundled default."""
    return Path(config.artifact).expanduser().resolve() if config.artifact else DEFAULT_ARTIFACT_DIR


def load_predictor(config: ProteusConfig, fingerprint: str = ""):
    """One predictor per (artifact, content fingerprint, device, cache, options) per process: router
    rebuilds reuse it; a replaced artifact is loaded afresh.  ``fingerprint`` must change whenever
    the manifest or the weights do (``install`` passes the manifest file's hash, which includes the
    weights' hash): retraining with another calibration margin gives the same weights."""
    from ..predictor import ProteusPredictor

    options = tuple(sorted((k, repr(v)) for k, v in config.predictor_options.as_kwargs().items()))
    key = (str(artifact_dir(config)), fingerprint, config.device, config.encoder_cache_dir, options)
    with _shared_lock:
        if key not in _predictors:
            _predictors[key] = run_on_model_thread(  # all torch work on one thread: see model_thread.py
                ProteusPredictor, key[0], device=config.device, encoder_cache_dir=config.encoder_cache_dir,
                **config.predictor_options.as_kwargs(),
            )
        return _predictors[key]


def shared_batcher(engine: DecisionEngine, config: ProteusConfig) -> MicroBatcher:
    """One worker thread per predictor, decision settings and batching policy.  ``DecisionEngine.decide``
    depends on the predictor and on the engine's token counter and rule price limit (prices travel
    with each request), so engines of rebuilt routers that agree on those share it; the model thread
    runs one decision at a time, so two policies never run a predictor concurrently."""
    predictor = engine.predictor
    key = (id(predictor), engine.token_counter_name, repr(config.rule_price_limit), config.batching.max_batch,
           config.batching.max_wait_ms)
    with _shared_lock:
        if key not in _batchers:

            def decide(requests, engine=engine):
                return run_on_model_thread(engine.decide, requests)

            _batchers[key] = MicroBatcher(
                decide, max_batch=config.batching.max_batch, max_wait_ms=config.batching.max_wait_ms
            )
        return _batchers[key]


def gauge_deployments(live: "list[ProteusRoutingStrategy]") -> tuple[set[str], set[str]]:
    """The deployments of the ``live`` strategies' groups with the quality breaker on, and those
    with the deployment correction on: whose gauges stay."""
    breakers: set[str] = set()
    corrections: set[str] = set()
    for strategy in live:
        router = strategy._router()
        ids = {deployment_id(d) for d in (router.model_list or [] if router is not None else [])
               if d.get("model_name") in strategy._groups}
        if strategy.breaker.settings.enabled:
            breakers |= ids
        if strategy.correction.settings.enabled:
            corrections |= ids
    return breakers, corrections


def sweep_due() -> bool:
    """Whether a decision should start ``sweep_deployments`` (at most one per ``SWEEP_EVERY_S``)."""
    global _next_sweep
    now = time.monotonic()
    with _shared_lock:
        if now < _next_sweep:
            return False
        _next_sweep = now + SWEEP_EVERY_S
        return True


def sweep_deployments() -> int:
    """Retire the gauges of deployments the live strategies no longer have (a deployment removed
    without a settings change); the state keys change only with a strategy (``release_unused``).
    Runs beside requests (a worker thread), so a failure is logged, not raised."""
    try:
        live = [s for s in (ref() for ref in _live) if s is not None]
        breakers, corrections = gauge_deployments(live)
        return compliance_metrics.retire_unused([s.gauges for s in live], breakers, corrections, states=False)
    except Exception:  # noqa: BLE001 - gauges are best effort; routing goes on
        logger.exception("PROTEUS: retiring the gauges of removed deployments failed")
        return 0


def release_unused(live: "list[ProteusRoutingStrategy]") -> int:
    """Release the shared runtime resources none of the ``live`` strategies uses: drop the
    predictors, stop the batcher threads, close the decision-log writers (thread, file, Redis) and
    shadow evaluators, the compliance controllers (Redis connection; their pending gauge refreshes
    are cancelled) and the tier stores, and retire the gauges no live strategy writes (the state
    keys none routes on, the deployments none has: ``compliance_metrics.retire_unused``).
    ``install`` calls it whenever a router's strategy is replaced, so a settings change keeps only
    what the new configuration uses (a router re-configured with another artifact, log folder or
    Redis would otherwise keep the old ones for the life of the process).  Returns how many entries
    were released."""
    predictors = {id(s.engine.predictor) for s in live}
    batchers = {id(s.batcher) for s in live}
    with _shared_lock:
        stale_batchers = [k for k, b in _batchers.items() if id(b) not in batchers]
        stale_predictors = [k for k, p in _predictors.items() if id(p) not in predictors]
        closing = [_batchers.pop(k) for k in stale_batchers]
        for key in stale_predictors:
            del _predictors[key]
    for batcher in closing:
        batcher.close(timeout=0)  # decisions already queued still run; then the thread ends
    controllers = compliance.release_unused([s.compliance for s in live])
    compliance_metrics.release(controllers)
    _live[:] = [weakref.ref(s) for s in live]
    compliance_metrics.retire_unused([s.gauges for s in live], *gauge_deployments(live))
    logs = serving_log.release_unused(live)
    stores = tiers.release_unused([s.tier_store for s in live if s.tier_store is not None])
    return len(stale_batchers) + len(stale_predictors) + len(controllers) + logs + stores


def state_keys(config: ProteusConfig, taus: Any) -> StateKeys:
    """The state keys a strategy routes on (``_control``): each tier's at its effective tau, and
    the tau buckets of request-sent taus within the artifact's range."""
    bucket = config.compliance.tau_bucket
    tiers = frozenset(state_key_for(name, "tier", taus.effective(tau)[0], bucket) for name, tau in config.tiers.items())
    return StateKeys(tiers, bucket, (taus.lo, taus.hi))


class ProteusRoutingStrategy(CustomRoutingStrategyBase):
    def __init__(self, router: Any, config: ProteusConfig, engine: DecisionEngine, tier_store: TierStore | None,
                 replaces: "ProteusRoutingStrategy | None" = None):
        """``replaces``: the router's previous strategy (a settings change), whose feedback index,
        compliance state and shadow budget this one goes on from where their meaning is unchanged."""
        self._router = weakref.ref(router)  # the router holds our bound methods: no strong cycle
        self.config = config
        self.routing_strategy_args: Any = None  # the raw args it was installed from (patch.install)
        self.replaced_by: ProteusRoutingStrategy | None = None  # set by the strategy a settings change installs
        self.engine = engine
        self.tier_store = tier_store
        self.batcher = shared_batcher(engine, config)
        self._groups = frozenset(config.groups)
        self._warnings = RateLimitedWarnings(logger, WARN_EVERY_S)
        self._prices_reported: dict[str, float] = {}  # report_price_drift: the ratio last said per deployment
        # decision log writer and feedback desk (None without routing_strategy_args.decision_log)
        self.decision_log, self.feedback_desk = serving_log.shared_decision_log(
            config, replaces.feedback_desk if replaces is not None else None) or (None, None)
        # None unless shadow evaluation is on; its budget goes on from the replaced one's
        self.shadow = serving_log.shared_shadow(config, replaces.shadow if replaces is not None else None)
        redis = config.redis
        self.compliance = shared_controller(
            config.compliance,
            config.redis_url,
            redis.timeout_ms / 1000.0 if redis else 0.05,
            engine.manifest.calibration.margin,
            replaces.compliance if replaces is not None else None,
        )
        # what it writes on /metrics: the state keys it routes on, until a settings change replaces it
        self.gauges = compliance_metrics.Writer(self.compliance, state_keys(config, engine.predictor.taus))
        self.breaker = QualityBreaker(config.compliance.breaker, self.compliance, writer=self.gauges)
        self.correction = DeploymentCorrection(config.compliance.correction, self.compliance, writer=self.gauges)
        if replaces is not None:  # its picks still in flight log through this one (its writer closes)
            replaces.replaced_by = self
            serving_log.attempts.reassign(replaces, self)  # and their ledger entries hold it no more

    @property
    def router(self) -> Any:
        router = self._router()
        if router is None:
            raise RuntimeError("the LiteLLM Router of this PROTEUS strategy no longer exists")
        return router

    def manages(self, model: Any) -> bool:
        if not isinstance(model, str):
            return False
        if model in self._groups:
            return True
        router = self._router()
        return router is not None and (model_from_alias(router, model) or model) in self._groups

    def reaches(self, model: Any, request_fallbacks: Any = None) -> bool:
        """Whether a request for ``model`` may be routed by PROTEUS: the group is managed, or one of
        its fallbacks is (the router's fallback tables, with ``*`` entries, and the request's own
        ``fallbacks``; one level, as LiteLLM falls back)."""
        if self.manages(model):
            return True
        router = self._router()
        targets: list[Any] = list(request_fallbacks) if isinstance(request_fallbacks, list) else []
        for table in (
            getattr(router, "fallbacks", None),
            getattr(router, "context_window_fallbacks", None),
            getattr(router, "content_policy_fallbacks", None),
        ):
            for entry in table if isinstance(table, list) else ():
                for source, listed in entry.items() if isinstance(entry, dict) else ():
                    if source in (model, "*"):
                        targets.extend(listed if isinstance(listed, list) else [listed])
        names = (t.get("model") if isinstance(t, dict) else t for t in targets)
        return any(self.manages(name) for name in names)

    # -- LiteLLM entry points -----------------------------------------------------------------
    async def async_get_available_deployment(
        self,
        model: str,
        messages: list[dict[str, str]] | None = None,
        input: str | list | None = None,
        specific_deployment: bool | None = False,
        request_kwargs: dict | None = None,
    ):
        request_kwargs = {} if request_kwargs is None else request_kwargs
        serving_log.log_repick(request_kwargs)  # a retry or a fallback: the failed PROTEUS picks get their outcomes
        router = self.router
        span = get_parent_otel_span_from_kwargs(request_kwargs)
        managed = self.manages(model)
        if managed:
            try:  # reject bad input before any work (the proxy's pre-call hook already did)
                request = read_request(self.config, messages, input, request_kwargs)
            except (TauError, RequestShapeError) as exc:
                raise litellm.BadRequestError(message=str(exc), model=model, llm_provider=STRATEGY_NAME) from exc
        healthy = await router.async_get_healthy_deployments(
            model=model,
            request_kwargs=request_kwargs,
            messages=messages,
            input=input,
            specific_deployment=specific_deployment,
            parent_otel_span=span,
        )
        if isinstance(healthy, dict):  # a specific deployment was asked for (by id)
            return self._direct_deployment(model, healthy)
        if not managed:  # by its litellm_params.model (the proxy sets specific_deployment), or another group
            healthy = self._without_direct_deployments(model, healthy)
            return await self._litellm_pick(model, healthy, messages, input, request_kwargs, span)
        return await self._proteus_pick(model, healthy, request, request_kwargs, span)

    def get_available_deployment(
        self,
        model: str,
        messages: list[dict[str, str]] | None = None,
        input: str | list | None = None,
        specific_deployment: bool | None = False,
        request_kwargs: dict | None = None,
    ):
        """Sync Router calls: run the async pick on a private event loop in a helper thread (works
        whether or not the calling thread runs a loop).  The proxy always uses the async path."""
        coroutine = self.async_get_available_deployment(
            model=model,
            messages=messages,
            input=input,
            specific_deployment=specific_deployment,
            request_kwargs=request_kwargs,
        )

        async def pick_then_close():
            try:
                return await coroutine
            finally:  # the private loop ends here: its Redis connections must end with it
                if self.tier_store is not None:
                    await self.tier_store.aclose()

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="proteus-sync") as pool:
            return pool.submit(asyncio.run, pick_then_close()).result()

    def _direct_deployment(self, model: str, deployment: dict) -> dict:
        """A request naming one deployment of a PROTEUS group would skip the tier and tau that the
        group exists to enforce: refused unless ``allow_direct_deployments``."""
        group = deployment.get("model_name")
        if group in self._groups and not self.config.allow_direct_deployments:
            raise self._direct_refusal(model, group)
        return deployment

    def _without_direct_deployments(self, model: str, healthy: Any) -> Any:
        """The deployments a request for a model PROTEUS does not manage may take: a name that is a
        deployment's ``litellm_params.model`` reaches every deployment of that model, PROTEUS groups'
        too, which would skip their tier and tau; those are left out unless
        ``allow_direct_deployments``, and a request left with none is refused."""
        if self.config.allow_direct_deployments or not isinstance(healthy, list):
            return healthy
        kept = [d for d in healthy if not (isinstance(d, dict) and d.get("model_name") in self._groups)]
        if healthy and not kept:
            raise self._direct_refusal(model, healthy[0].get("model_name"))
        return kept

    @staticmethod
    def _direct_refusal(model: str, group: Any) -> Exception:
        return litellm.BadRequestError(
            message=(
                f"model {model!r} names one deployment of the PROTEUS group {group!r}; request model {group!r} "
                "(PROTEUS picks the deployment for the request's tau), or set "
                "routing_strategy_args.allow_direct_deployments: true"
            ),
            model=model,
            llm_provider=STRATEGY_NAME,
        )

    # -- picks ----------------------------------------------------------------------------------
    async def _litellm_pick(self, model, healthy, messages, input, request_kwargs, span):
        router = self.router
        strategy, selector = router._get_routing_context(model, request_kwargs)
        if selector is None or strategy in (None, "simple-shuffle", STRATEGY_NAME):
            return simple_shuffle(
                resolve_model_alias=lambda name: model_from_alias(router, name),
                healthy_deployments=healthy,
                model=model,
                request_kwargs=request_kwargs,
            )
        deployment = await router._select_deployment_async(
            strategy=strategy,
            selector=selector,
            model=model,
            healthy_deployments=healthy,
            messages=messages,
            input=input,
            request_kwargs=request_kwargs,
        )
        if deployment is None:
            raise await async_raise_no_deployment_exception(litellm_router_instance=router, model=model, parent_otel_span=span)
        # as LiteLLM's own pick does: a per-request strategy's limits (rpm) are checked and counted here
        await router._async_override_selector_pre_call_check(strategy, selector, deployment, span)
        return deployment

    async def _decide(self, request: DecisionRequest) -> Any:
        """The decision, batched.  A settings change may release this strategy's batcher while the
        pick awaits its tier or state: the pick then decides alone with its own engine, whose slots
        its candidates were scored for."""
        try:
            return await self.batcher.submit(request)
        except BatcherClosed:
            decided = await asyncio.to_thread(run_on_model_thread, self.engine.decide, [request])
            return decided[0]

    async def _proteus_pick(self, model, healthy, request: ProteusRequest, request_kwargs, span):
        start = time.perf_counter()
        pool = exclude_failed(healthy, request.failed_ids)
        scored, problems = self.engine.score_all(pool)
        if problems:  # deployments added at runtime (e.g. /model/new) that cannot be scored: each new set said at once
            self._warn("unscored:" + "; ".join(problems), "skipping deployments PROTEUS cannot score: " + "; ".join(problems))
        if self.engine.has_fixed_points:
            self.report_price_drift(scored)
        if not scored:
            if pool:  # a configuration error, not a transient shortage: say so instead of "try again"
                raise litellm.InternalServerError(
                    message=f"PROTEUS cannot route group {model!r}: none of its available deployments can be "
                    "scored: " + "; ".join(problems),
                    model=model,
                    llm_provider=STRATEGY_NAME,
                )
            raise await async_raise_no_deployment_exception(
                litellm_router_instance=self.router, model=model, parent_otel_span=span
            )
        unfiltered = len(scored)
        if self.breaker.settings.enabled:
            scored = await self._without_open_breakers(scored)
        p_offsets, alarm_offsets = await self._corrections(scored) if self.correction.settings.enabled else ((), ())
        tier = await self._tier(request)
        resolution = resolve_tau(self.config, request.tau, tier)
        control = await self._off_loop(self._control, resolution)
        routed = await self._decide(
            DecisionRequest(
                request.text, request.messages, resolution.tau, scored, control.delta,
                self.config.exploration.rate_for(resolution.tier), p_offsets,
            )
        )
        decision = routed.decision
        await self._off_loop(self._record_decision, control, decision, alarm_offsets)
        if sweep_due():  # in a worker thread, not awaited: no request waits on it
            asyncio.get_running_loop().run_in_executor(None, sweep_deployments)
        chosen = scored[decision.index]
        record = DecisionRecord(
            model_group=model,
            deployment_id=deployment_id(chosen.deployment),
            model=decision.model,
            tau=decision.tau_effective,
            tau_requested=resolution.requested if resolution.requested is not None else resolution.tau,
            tau_source=resolution.source,
            tier=resolution.tier,
            tier_source=resolution.tier_source,
            mu=decision.mu,
            clamped=decision.clamped,
            capped=resolution.capped,
            candidates=len(scored),
            excluded=len(healthy) - len(pool),
            prompt_tokens=routed.prompt_tokens,
            cost_usd=routed.cost_usd,
            latency_ms=(time.perf_counter() - start) * 1000.0,
            device=str(self.engine.predictor.device),
            delta=control.delta,
            infeasible=control.infeasible,
            state_key=control.state_key,
            operating_point=operating_point_label(decision.rule, decision.policy_tau, self.engine.predictor.models),
            repriced_from=decision.repriced_from or "",
            breaker_excluded=unfiltered - len(scored),
        )
        metadata_key = get_metadata_variable_name_from_kwargs(request_kwargs)
        if not isinstance(request_kwargs.get(metadata_key), dict):
            request_kwargs[metadata_key] = {}
        metadata = request_kwargs[metadata_key]
        decision_metadata = record.to_dict()  # and the request's id: the one an earlier pick of the request set
        decision_metadata[serving_log.REQUEST_FIELD] = serving_log.request_id(metadata.get(DECISION_METADATA_KEY))
        metadata[DECISION_METADATA_KEY] = decision_metadata
        if self.config.log_decisions:
            log_decision(record)
        record_metrics(record)
        serving_log.log_routed(self, request_kwargs, model, resolution, routed, scored, request, control)
        return chosen.deployment

    async def _without_open_breakers(self, scored: list) -> list:
        """The candidates the quality breaker has not left out (all of them if it left out every one)."""
        ids = [deployment_id(s.deployment) for s in scored]
        out = await self._off_loop(self.breaker.open_ids, ids)
        kept = [s for s, d in zip(scored, ids) if d not in out]
        return kept or scored

    async def _corrections(self, scored: list) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per candidate, what the deployment correction adds to its predicted p, and what the
        infeasible flag adds instead."""
        ids = [deployment_id(s.deployment) for s in scored]
        offsets = self.correction.cached_offsets(ids)
        if offsets is None:  # a read is due: it may go to Redis, so off the event loop
            offsets = await self._off_loop(self.correction.offsets, ids)
        return tuple(offsets.routing[d] for d in ids), tuple(offsets.alarm[d] for d in ids)

    def on_feedback(self, decision_record: dict, score: float) -> None:
        """A feedback score in [0, 1] for a logged decision (``litellm_proteus/feedback.py``)."""
        p = chosen_p(decision_record)
        # first: the gauges then read the controller's updated window
        self.compliance.record_feedback(decision_record["state_key"], decision_record["tau"], p, score)
        chosen = decision_record["candidates"][decision_record["chosen"]]
        deployment = str(chosen.get("deployment_id") or "")
        self.breaker.record(deployment, score - p)
        # against the p before correction: the correction estimates the deployment's bias
        self.correction.record(deployment, score - uncorrected_p(chosen))
        serving_log.on_feedback(self, decision_record, score)

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in a worker thread when the controller shares its state through Redis (a
        blocking client: a slow Redis must not stall the event loop), else here (in-memory, fast)."""
        if self.compliance.redis is None:
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    def _record_decision(self, control: Control, decision: Any, alarm_offsets: tuple[float, ...]) -> None:
        p_chosen = float(decision.p[decision.index])
        predictor = self.engine.predictor
        p_ref = predictor.taus.reference_p(decision.tau_effective, predictor.mix_operating_points)
        # the infeasible flag reads each candidate with the shortfall its labels prove, not the routing correction
        p_best = alarm_best_p(decision.p, decision.p_correction, alarm_offsets)
        self.compliance.record_decision(control.state_key, decision.tau_effective, p_chosen, p_best, p_ref)
        serving_log.record_gauges(self, control.state_key, p_chosen)

    def _control(self, resolution: TauResolution) -> Control:
        """The compliance controller's offset for this request's state (tier, or tau bucket)."""
        tau = self.engine.predictor.taus.effective(resolution.tau)[0]
        key = state_key_for(resolution.tier, resolution.source, tau, self.config.compliance.tau_bucket)
        return self.compliance.control(key, tau)

    # -- tiers ----------------------------------------------------------------------------------
    async def _tier(self, request: ProteusRequest) -> TierChoice | None:
        if request.metadata_tier is not None:
            return request.metadata_tier
        if self.tier_store is None or request.key_hash is None:
            return None
        key_hash = hash_key(request.key_hash)
        try:
            lookup = await self.tier_store.alookup(key_hash)
            if lookup.tier is None and key_hash != request.key_hash.strip():
                try:  # while Redis is down too: the raw key's last known tier is still the key's tier
                    lookup = await self._raw_key_tier(request.key_hash.strip(), lookup)
                except TierStoreError:
                    if not lookup.stale:
                        raise
        except TierStoreError as exc:
            record_tier_error()
            self._warn("redis", f"tier lookup failed, using the default tier {self.config.default_tier!r}: {exc}")
            return None
        if lookup.stale:
            record_tier_error()
            self._warn("redis_stale", f"tier lookup failed, using the key's last known tier: {lookup.error}")
        if lookup.tier is None:
            return None
        if lookup.tier not in self.config.tiers:
            self._warn("tier", f"Redis names tier {lookup.tier!r} for a key, not a configured tier {sorted(self.config.tiers)}; using the default")
            return None
        return TierChoice(lookup.tier, "redis")

    async def _raw_key_tier(self, raw: str, hashed: TierLookup) -> TierLookup:
        """A custom_auth key (LiteLLM passes it raw) whose tier sits under the raw key, as redis-cli or
        a release that stored keys unhashed wrote it: used, with a warning to move it to the hash."""
        lookup = await self.tier_store.alookup(raw)
        if lookup.tier is None:
            return hashed
        self._warn("raw_key", "a key's tier is stored under the raw API key, not its hash: it is used, but run "
                   "`proteus tiers rehash` to store tiers by hash only")
        return lookup

    def report_price_drift(self, scored) -> dict[str, float]:
        """Warn about deployments priced PRICE_DRIFT off training (``DecisionEngine.price_drift``),
        once per deployment and price: at start-up, and when a price changes at runtime."""
        drift = self.engine.price_drift(scored)
        new = {name: ratio for name, ratio in drift.ratios.items() if self._prices_reported.get(name) != ratio}
        if new:
            if len(self._prices_reported) > 4096:  # deployments come and go at runtime: stay bounded
                self._prices_reported.clear()
            self._prices_reported.update(new)
            said = type(drift)(new, [name for name in drift.past_limit if name in new])
            logger.warning("PROTEUS: %s", said.warning(self.config.rule_price_limit))
        return new

    def _warn(self, kind: str, message: str) -> None:
        self._warnings.warn(kind, "PROTEUS: %s", message)
