"""The two places where PROTEUS touches LiteLLM internals (litellm 1.104.0 to 1.106.x), applied on import.

1. ``litellm.router_utils.routing_groups.VALID_ROUTING_STRATEGIES`` gains ``"proteus"``: LiteLLM
   rejects unknown ``routing_strategy`` names when a Router is built or re-configured.
2. ``Router.routing_strategy_init`` and ``Router._apply_updated_routing_strategy_args`` are wrapped:
   every path that (re)configures a router's strategy goes through one of them (``Router.__init__``,
   ``update_settings`` switching strategy or changing ``routing_strategy_args``), and
   ``routing_strategy_init`` first *removes* any custom strategy.  The wrappers call the original
   and then, when the strategy is ``proteus``, validate the config, load the artifact, check the
   deployments and ``set_custom_routing_strategy`` on that router.  So the strategy is live on every
   Router the proxy builds, in every worker, after ``--reload``, config reloads and DB model syncs.

``check_litellm`` verifies the internals used here and in ``strategy.py`` exist; it runs on import,
so an incompatible LiteLLM fails at start-up with a message, not mid-request (tests cover it too).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import time
import logging
import re
import sys
import weakref
from typing import Any

import litellm
from litellm import Router
from litellm.router_utils import routing_groups

from ..artifact import MANIFEST_FILE, ArtifactError, file_sha256, read_manifest
from ..config import CONFIG_PATH, STRATEGY_NAME, ProteusConfig, ProteusConfigError
from ..costs import deployment_id
from ..engine import DecisionEngine, DeploymentMappingError
from ..observability import ensure_log_handler
from ..shadow import unpriced, unpriced_judge_message
from ..tiers import shared_store
from .compat import ROUTER_METHOD_ALIASES
from .strategy import ProteusRoutingStrategy, artifact_dir, load_predictor, release_unused

logger = logging.getLogger("litellm_proteus.router")
# The tested range (pyproject.toml states the same; tests/test_packaging.py keeps them equal):
# CI runs the suite on the newest testable release and the proxy end-to-end tests on the oldest.
SUPPORTED_LITELLM = ">=1.104.0,<1.107"
PATCH_MARKER = "__proteus_patched__"

# Router internals PROTEUS relies on, with the parameters it passes.
REQUIRED_ROUTER_API: dict[str, tuple[str, ...]] = {
    "routing_strategy_init": ("routing_strategy", "routing_strategy_args"),
    "_apply_updated_routing_strategy_args": (),
    "set_custom_routing_strategy": ("CustomRoutingStrategy",),
    "async_get_healthy_deployments": (
        "model",
        "request_kwargs",
        "messages",
        "input",
        "specific_deployment",
        "parent_otel_span",
    ),
    "_get_routing_context": ("model", "request_kwargs"),
    "_select_deployment_async": (
        "strategy",
        "selector",
        "model",
        "healthy_deployments",
        "messages",
        "input",
        "request_kwargs",
    ),
    "_async_override_selector_pre_call_check": ("strategy", "selector", "deployment", "parent_otel_span"),
    "get_model_from_alias": ("model",),
    "_normalize_strategy": ("strategy",),
}


class ProteusStartupError(RuntimeError):
    """PROTEUS cannot serve with this configuration; raised while the Router is being built."""


class IncompatibleLiteLLMError(RuntimeError):
    pass


def check_litellm() -> None:
    problems = []
    for name, params in REQUIRED_ROUTER_API.items():
        fn = inspect.getattr_static(Router, name, None) or inspect.getattr_static(Router, ROUTER_METHOD_ALIASES.get(name, name), None)
        if fn is None:
            problems.append(f"Router.{name} is missing")
            continue
        fn = getattr(fn, "__func__", fn)
        have = inspect.signature(getattr(fn, "__wrapped__", fn)).parameters
        missing = [p for p in params if p not in have]
        if missing:
            problems.append(f"Router.{name} lacks parameters {missing}")
    if not isinstance(getattr(routing_groups, "VALID_ROUTING_STRATEGIES", None), tuple):
        problems.append("litellm.router_utils.routing_groups.VALID_ROUTING_STRATEGIES is missing")
    if problems:
        raise IncompatibleLiteLLMError(
            f"litellm-proteus supports litellm{SUPPORTED_LITELLM}; found litellm {_litellm_version()}: " + "; ".join(problems)
        )


def _litellm_version() -> str:
    try:
        from importlib.metadata import version

        return version("litellm")
    except Exception:  # pragma: no cover - metadata missing in odd installs
        return getattr(litellm, "__version__", "unknown")


# The most recently installed strategy: the proxy hook (pre-call validation, headers) reads it.
_active: weakref.ref | None = None
# Each Router's current strategy: what they use stays loaded, what none uses is released.
_installed: "weakref.WeakKeyDictionary[Router, ProteusRoutingStrategy]" = weakref.WeakKeyDictionary()
_refused: "weakref.WeakKeyDictionary[Router, tuple[str, str, float]]" = weakref.WeakKeyDictionary()  # last refused update
REFUSAL_RECHECK_S = 60.0  # the same refused update is built again (and logged again) at most this often


def _args_fingerprint(args: Any) -> str:
    return json.dumps(args, sort_keys=True, default=repr)


def active_strategy() -> ProteusRoutingStrategy | None:
    return _active() if _active is not None else None


def _startup_error(problem: str, update: bool = False) -> ProteusStartupError:
    """``update``: a runtime settings update of a router PROTEUS already serves, which keeps serving."""
    prefix = "PROTEUS refuses the routing_strategy_args update and keeps its current ones" if update else "PROTEUS routing cannot start"
    message = f"{prefix}: {problem}"
    logger.error(message)
    return ProteusStartupError(message)


class HideRefusalTraceback(logging.Filter):
    """Drops uvicorn's lifespan traceback of a start-up that PROTEUS refused.

    A refusal raised while LiteLLM builds its Router at start-up propagates out of the ASGI lifespan:
    Starlette formats the whole chain (some 370 lines through FastAPI's nested lifespans) into the
    ``lifespan.startup.failed`` message, which uvicorn logs before "Application startup failed.
    Exiting." and exit status 3.  The refusal's own error line (``_startup_error``) already names
    the field and the allowed values, so that record adds only noise.  Any other exception keeps
    its traceback, and so does every other uvicorn record."""

    def filter(self, record: logging.LogRecord) -> bool:
        # uvicorn logs the message inside Starlette's ``except`` block, so the exception being
        # handled is the one the formatted traceback ends with.
        if record.exc_info or not isinstance(record.msg, str) or not record.msg.startswith("Traceback (most recent call last)"):
            return True
        return not isinstance(sys.exc_info()[1], ProteusStartupError)


def hide_refusal_tracebacks(logger_name: str = "uvicorn.error") -> None:
    """Idempotent; dictConfig (uvicorn's logging set-up) keeps a logger's filters."""
    target = logging.getLogger(logger_name)
    if not any(isinstance(f, HideRefusalTraceback) for f in target.filters):
        target.addFilter(HideRefusalTraceback())


def warn_tiers_outside_range(config: ProteusConfig, tau_range: tuple[float, float]) -> list[str]:
    """Tiers the artifact cannot promise are served at the nearest end of its range (the response
    says so with x-proteus-tau-clamped); say it once at start-up too, where the operator looks."""
    lo, hi = tau_range
    outside = sorted(name for name, tau in config.tiers.items() if not lo <= tau <= hi)
    if outside:
        logger.warning(
            "PROTEUS: tiers %s lie outside the artifact's declared tau range [%g, %g]: their requests are routed "
            "at the nearest end of the range (retrain on data that reaches them, or change the tiers)",
            {name: config.tiers[name] for name in outside}, lo, hi,
        )
    return outside


def warn_slots_without_deployments(engine: DecisionEngine, model_list: list) -> dict[str, list[str]]:
    """Per PROTEUS group, the artifact's slots no deployment plays: their share of traffic goes to
    the other slots (a deployment LiteLLM dropped at start-up, e.g. for a price that is not a number,
    shows up here).  Said once at start-up."""
    missing = {}
    for group in engine.config.groups:
        played = {c.slot for c in engine.score_all(d for d in model_list if d.get("model_name") == group)[0]}
        names = [name for i, name in enumerate(engine.slots) if i not in played]
        if names:
            missing[group] = names
    if missing:
        logger.warning("PROTEUS: artifact slots no deployment plays, per group (their requests go to the other slots; "
                       "a deployment LiteLLM could not create is missing from model_list): %s", missing)
    return missing


GENERATED_ID = re.compile(r"[0-9a-f]{64}")  # LiteLLM's id for a deployment without model_info.id: sha256 of its params


def warn_generated_ids(config: ProteusConfig, model_list: list) -> list[str]:
    """The deployments of PROTEUS groups whose id LiteLLM generated, when per-deployment state is
    kept by id (the correction, the breaker): LiteLLM hashes every ``litellm_params`` value into it,
    so editing a price, a key, an ``api_base`` or a timeout gives the deployment a new id, and the
    labels that corrected it are left behind.  Said once at start-up."""
    if not (config.compliance.enabled and (config.compliance.correction.enabled or config.compliance.breaker.enabled)):
        return []
    names = [f"{d.get('model_name')}/{(d.get('litellm_params') or {}).get('model')}" for d in model_list
             if d.get("model_name") in config.groups and GENERATED_ID.fullmatch(str(deployment_id(d) or ""))]
    if names:
        logger.warning("PROTEUS: deployments without model_info.id (LiteLLM ids them by a hash of their litellm_params, "
                       "so editing a price, key, api_base or timeout starts their deployment correction afresh): %s; "
                       "set model_info.id to keep it", names)
    return names


def install(router: Router, routing_strategy_args: Any) -> ProteusRoutingStrategy:
    """Build the strategy for ``router`` from its ``routing_strategy_args`` and set it.

    Raises ProteusStartupError naming the bad field, the artifact problem, or every deployment of a
    PROTEUS group without a trained slot or a price; a router PROTEUS already serves keeps its
    strategy then (a runtime update is refused)."""
    update = router in _installed
    try:
        return _install(router, routing_strategy_args, update)
    except ProteusStartupError:
        release_unused(list(_installed.values()))  # e.g. a predictor loaded for the refused settings
        raise


def _install(router: Router, routing_strategy_args: Any, update: bool) -> ProteusRoutingStrategy:
    global _active
    try:
        config = ProteusConfig.parse(routing_strategy_args)
        # The manifest alone tells whether every deployment maps to a slot (milliseconds); the
        # weights and the encoder load after.  Both are checked so one start-up names every problem.
        engine = DecisionEngine(read_manifest(artifact_dir(config)), config)
    except (ProteusConfigError, ArtifactError) as exc:
        raise _startup_error(str(exc), update) from exc
    problems: list[str] = []
    try:
        engine.check_model_list(router.model_list or [])
    except DeploymentMappingError as exc:
        problems.append(str(exc))
    judge = config.shadow.judge_model if config.shadow.enabled else None
    groups = {d.get("model_name") for d in router.model_list or []}
    if judge is not None and judge not in groups:
        problems.append(f"shadow.judge_model {judge!r} is not a model group of this proxy; groups: {sorted(map(str, groups))}")
    elif judge is not None:  # the daily cap must count every judge call
        no_price = unpriced([d for d in router.model_list or [] if d.get("model_name") == judge])
        if no_price:
            problems.append(unpriced_judge_message(judge, no_price))
    try:
        fingerprint = file_sha256(artifact_dir(config) / MANIFEST_FILE)  # covers the weights' hash too
        engine.predictor = predictor = load_predictor(config, fingerprint)
    except (ArtifactError, ValueError, OSError) as exc:
        problems.append(f"artifact {artifact_dir(config)}: {exc}")
    except Exception as exc:  # e.g. a corrupt encoder file: still a start-up error that names it
        problems.append(f"artifact {artifact_dir(config)}: cannot load ({type(exc).__name__}: {exc})")
    if problems:
        raise _startup_error("; ".join(problems), update)
    previous = _installed.get(router)  # a settings change: what still means the same carries over
    try:
        store = shared_store(config.redis, previous.tier_store if previous is not None else None) if config.redis else None
        strategy = ProteusRoutingStrategy(router, config, engine, store, replaces=previous)
    except OSError as exc:  # the decision log's folder or files (the only files the strategy opens)
        where = f"decision_log.dir {config.decision_log.dir!r}" if config.decision_log else "files"
        raise _startup_error(f"{CONFIG_PATH}.{where} cannot be used: {exc}", update) from exc
    except Exception as exc:  # anything else building it: still a refusal, so install()'s clean-up runs
        raise _startup_error(f"cannot build the strategy ({type(exc).__name__}: {exc})", update) from exc
    strategy.routing_strategy_args = copy.deepcopy(routing_strategy_args)  # what a refused update restores (apply())
    router.set_custom_routing_strategy(strategy)
    if strategy.tier_store is not None:
        strategy.tier_store.start_warming()  # the first Redis connection opens before the first request
    router.proteus_strategy = strategy  # type: ignore[attr-defined]  # for introspection and tests
    _active = weakref.ref(strategy)
    _installed[router] = strategy
    release_unused(list(_installed.values()))  # what this router's previous strategy alone used
    if config.log_decisions:
        ensure_log_handler()
    warn_tiers_outside_range(config, engine.manifest.tau_range)
    warn_slots_without_deployments(engine, router.model_list or [])
    if not update:
        warn_generated_ids(config, router.model_list or [])
    strategy.report_price_drift(engine.score_all(d for d in router.model_list or [] if d.get("model_name") in config.groups)[0])
    logger.info(
        "PROTEUS routing groups %s with artifact %s (slots %s) on %s",
        config.groups,
        predictor.artifact_dir,
        predictor.models,
        predictor.device,
    )
    return strategy


def apply() -> None:
    """Idempotent: patch LiteLLM once per process."""
    check_litellm()
    hide_refusal_tracebacks()
    if STRATEGY_NAME not in routing_groups.VALID_ROUTING_STRATEGIES:
        routing_groups.VALID_ROUTING_STRATEGIES = (*routing_groups.VALID_ROUTING_STRATEGIES, STRATEGY_NAME)
    if getattr(Router.routing_strategy_init, PATCH_MARKER, False):
        return
    original_init = Router.routing_strategy_init
    original_apply_args = Router._apply_updated_routing_strategy_args

    @functools.wraps(original_init)
    def routing_strategy_init(self: Router, routing_strategy: Any, routing_strategy_args: dict) -> None:
        original_init(self, routing_strategy=routing_strategy, routing_strategy_args=routing_strategy_args)
        if Router._normalize_strategy(routing_strategy) == STRATEGY_NAME:
            install(self, routing_strategy_args)
        else:
            self.__dict__.pop("proteus_strategy", None)
            if _installed.pop(self, None) is not None:
                release_unused(list(_installed.values()))

    @functools.wraps(original_apply_args)
    def _apply_updated_routing_strategy_args(self: Router) -> None:
        original_apply_args(self)
        if Router._normalize_strategy(self.routing_strategy) == STRATEGY_NAME:
            serving = _installed.get(self)
            attempt = _args_fingerprint(self.routing_strategy_args)
            if serving is not None and _args_fingerprint(serving.routing_strategy_args) == attempt:
                # already built from these args: update_settings switching to proteus with its args
                # runs routing_strategy_init with them, then reports them as updated
                return
            refused = _refused.get(self)
            if serving is not None and refused is not None and refused[0] == attempt and time.monotonic() < refused[2]:
                # the same refused update again (LiteLLM's database sync re-sends it): no rebuild, no new log
                # line until REFUSAL_RECHECK_S has passed (an artifact fixed on disk is then taken)
                self.routing_strategy_args = serving.routing_strategy_args
                raise ProteusStartupError(refused[1])
            try:
                install(self, self.routing_strategy_args)
                _refused.pop(self, None)
            except ProteusStartupError as exc:
                # LiteLLM stored the refused args before this call: put back the ones still serving, so
                # the router reports them and the same update is refused again, not taken as applied.
                if serving is not None:
                    self.routing_strategy_args = serving.routing_strategy_args
                    _refused[self] = (attempt, str(exc), time.monotonic() + REFUSAL_RECHECK_S)
                raise

    setattr(routing_strategy_init, PATCH_MARKER, True)
    setattr(_apply_updated_routing_strategy_args, PATCH_MARKER, True)
    Router.routing_strategy_init = routing_strategy_init  # type: ignore[method-assign]
    Router._apply_updated_routing_strategy_args = _apply_updated_routing_strategy_args  # type: ignore[method-assign]
