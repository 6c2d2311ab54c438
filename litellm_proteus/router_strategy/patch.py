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

import functools
import inspect
import logging
import weakref
from typing import Any

import litellm
from litellm import Router
from litellm.router_utils import routing_groups

from ..artifact import MANIFEST_FILE, ArtifactError, file_sha256, read_manifest
from ..config import STRATEGY_NAME, ProteusConfig, ProteusConfigError
from ..costs import deployment_id
from ..engine import DecisionEngine, DeploymentMappingError
from ..observability import ensure_log_handler
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


def active_strategy() -> ProteusRoutingStrategy | None:
    return _active() if _active is not None else None


def _startup_error(problem: str) -> ProteusStartupError:
    message = f"PROTEUS routing cannot start: {problem}"
    logger.error(message)
    return ProteusStartupError(message)


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


PRICE_DRIFT = 1.5  # a live price this far from training (either way) moves the fixed points off the cost frontier


def warn_price_drift(engine: DecisionEngine, model_list: list) -> dict[str, float]:
    """The deployments whose live price differs from the training price the artifact's fixed
    operating points (single-model, cluster ladders) were chosen at by more than PRICE_DRIFT either
    way, by name: price ratio.  Said once at start-up with those past ``rule_price_limit`` (a point
    picking one of them takes the cheapest candidate predicted at least as accurate): retraining
    puts the points back on the cost frontier."""
    calibration = engine.manifest.calibration
    if not any(point.kind in ("slot", "cluster") for point in calibration.requested_point + calibration.frontier_point):
        return {}
    drift = {}
    for group in engine.config.groups:
        for scored in engine.score_all(d for d in model_list if d.get("model_name") == group)[0]:
            ratio = scored.price_ratio
            if ratio is not None and not 1 / PRICE_DRIFT <= ratio <= PRICE_DRIFT:
                drift[f"{group}/{engine.slots[scored.slot]} (id {deployment_id(scored.deployment)})"] = round(ratio, 3)
    if drift:
        limit = engine.config.rule_price_limit
        past = [name for name, ratio in drift.items() if limit is not None and ratio > limit]
        logger.warning(
            "PROTEUS: live prices differ from the prices the artifact's single-model and cluster operating points were "
            "chosen at (live / training price, per deployment): %s. Those points keep routing to a deployment up to "
            "rule_price_limit=%s times its training price%s; retrain on current prices to put them back on the cost frontier",
            drift, limit, f"; past it they take the cheapest candidate predicted at least as accurate instead of: {past}"
            if past else "",
        )
    return drift


def install(router: Router, routing_strategy_args: Any) -> ProteusRoutingStrategy:
    """Build the strategy for ``router`` from its ``routing_strategy_args`` and set it.

    Raises ProteusStartupError naming the bad field, the artifact problem, or every deployment of a
    PROTEUS group without a trained slot or a price."""
    global _active
    try:
        config = ProteusConfig.parse(routing_strategy_args)
        # The manifest alone tells whether every deployment maps to a slot (milliseconds); the
        # weights and the encoder load after.  Both are checked so one start-up names every problem.
        engine = DecisionEngine(read_manifest(artifact_dir(config)), config)
    except (ProteusConfigError, ArtifactError) as exc:
        raise _startup_error(str(exc)) from exc
    problems: list[str] = []
    try:
        engine.check_model_list(router.model_list or [])
    except DeploymentMappingError as exc:
        problems.append(str(exc))
    judge = config.shadow.judge_model if config.shadow.enabled else None
    groups = {d.get("model_name") for d in router.model_list or []}
    if judge is not None and judge not in groups:
        problems.append(f"shadow.judge_model {judge!r} is not a model group of this proxy; groups: {sorted(map(str, groups))}")
    try:
        fingerprint = file_sha256(artifact_dir(config) / MANIFEST_FILE)  # covers the weights' hash too
        engine.predictor = predictor = load_predictor(config, fingerprint)
    except (ArtifactError, ValueError, OSError) as exc:
        problems.append(f"artifact {artifact_dir(config)}: {exc}")
    except Exception as exc:  # e.g. a corrupt encoder file: still a start-up error that names it
        problems.append(f"artifact {artifact_dir(config)}: cannot load ({type(exc).__name__}: {exc})")
    if problems:
        raise _startup_error("; ".join(problems))
    previous = _installed.get(router)  # a settings change: what still means the same carries over
    store = shared_store(config.redis, previous.tier_store if previous is not None else None) if config.redis else None
    strategy = ProteusRoutingStrategy(router, config, engine, store, replaces=previous)
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
    warn_price_drift(engine, router.model_list or [])
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
            install(self, self.routing_strategy_args)

    setattr(routing_strategy_init, PATCH_MARKER, True)
    setattr(_apply_updated_routing_strategy_args, PATCH_MARKER, True)
    Router.routing_strategy_init = routing_strategy_init  # type: ignore[method-assign]
    Router._apply_updated_routing_strategy_args = _apply_updated_routing_strategy_args  # type: ignore[method-assign]
