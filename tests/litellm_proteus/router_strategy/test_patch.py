"""Registration of ``routing_strategy: proteus`` in LiteLLM: every Router (re)build installs it, and
a LiteLLM change that breaks the hooks fails here loudly."""

from __future__ import annotations

import asyncio
import inspect
import logging
from contextlib import asynccontextmanager
from importlib.metadata import version

import litellm
import pytest
import yaml
from litellm import Router

import litellm_proteus.router_strategy as plugin
from litellm_proteus.router_strategy import patch
from litellm_proteus.router_strategy.strategy import ProteusRoutingStrategy

GPT4 = {"model": "openai/gpt-4-1106-preview", "mock_response": "gpt-4", "api_key": "x",
        "input_cost_per_token": 1e-5, "output_cost_per_token": 3e-5}
MIXTRAL = {"model": "openai/mixtral", "mock_response": "mixtral", "api_key": "x",
           "input_cost_per_token": 6e-7, "output_cost_per_token": 6e-7}


def model_list():
    return [
        {"model_name": "proteus-auto", "litellm_params": dict(GPT4)},
        {"model_name": "proteus-auto", "litellm_params": dict(MIXTRAL),
         "model_info": {"proteus_model": "mistralai/mixtral-8x7b-chat"}},
    ]


def strategy_of(router: Router) -> object | None:
    bound = router.__dict__.get("async_get_available_deployment")
    owner = getattr(bound, "__self__", None)
    return owner if isinstance(owner, ProteusRoutingStrategy) else None


def test_installed_litellm_is_in_the_supported_range():
    from packaging.specifiers import SpecifierSet

    assert version("litellm") in SpecifierSet(patch.SUPPORTED_LITELLM)


def test_proteus_is_a_valid_strategy_and_unknown_names_are_still_rejected():
    from litellm.router_utils.routing_groups import VALID_ROUTING_STRATEGIES, validate_routing_strategy

    assert "proteus" in VALID_ROUTING_STRATEGIES
    validate_routing_strategy("proteus")
    with pytest.raises(ValueError, match="Invalid routing_strategy: 'proteus-typo'"):
        Router(model_list=model_list(), routing_strategy="proteus-typo")


def test_wrappers_keep_litellms_signatures_and_apply_is_idempotent():
    assert getattr(Router.routing_strategy_init, patch.PATCH_MARKER)
    assert list(inspect.signature(Router.routing_strategy_init).parameters) == [
        "self", "routing_strategy", "routing_strategy_args"
    ]
    before = Router.routing_strategy_init
    plugin.apply()
    assert Router.routing_strategy_init is before


def test_every_router_rebuild_installs_the_strategy(steerable_artifact, monkeypatch):
    install = patch._install
    args = {"artifact": str(steerable_artifact)}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    first = strategy_of(router)
    assert first is not None and router.proteus_strategy is first and plugin.active_strategy() is first

    router.update_settings(routing_strategy="simple-shuffle")  # LiteLLM's re-init drops custom strategies
    assert strategy_of(router) is None and not hasattr(router, "proteus_strategy")

    built = []
    monkeypatch.setattr(patch, "_install", lambda *a: built.append(a[1]) or install(*a))
    # back with other args than it left with: LiteLLM inits the strategy with them, then reports them as updated
    back = {**args, "allow_direct_deployments": True}
    router.update_settings(routing_strategy="proteus", routing_strategy_args=back)
    assert strategy_of(router) is not None and built == [back]  # built once

    new_args = {**args, "tiers": {"gold": 0.8}, "default_tier": "gold"}
    router.update_settings(routing_strategy_args=new_args)  # args-only update (e.g. from the DB)
    assert strategy_of(router).config.tiers == {"gold": 0.8} and built == [back, new_args]

    # a rebuild keeps the tier store: its connections and every key's last known tier
    with_redis = {**new_args, "redis": {"url": "redis://127.0.0.1:1/0"}}
    router.update_settings(routing_strategy_args=with_redis)
    store = strategy_of(router).tier_store
    router.update_settings(routing_strategy_args={**with_redis, "allow_direct_deployments": True})
    assert store is not None and strategy_of(router).tier_store is store

    # the proxy's DB path: a plain router first, router settings applied afterwards
    late = Router(model_list=model_list())
    assert strategy_of(late) is None
    late.update_settings(routing_strategy="proteus", routing_strategy_args=args)
    assert strategy_of(late) is not None


@pytest.mark.parametrize(
    "bad",
    [{"tiers": {"premium": 1.5}}, {"default_tier": "nope"}, {"no_such_field": 1}, {"artifact": "/nonexistent-artifact"}],
)
def test_a_refused_runtime_update_keeps_the_serving_args_and_is_refused_every_time(steerable_artifact, bad):
    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.85, "standard": 0.8}, "default_tier": "standard"}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    serving = strategy_of(router)
    for _ in range(2):  # LiteLLM applies an update only when it differs from the router's args
        with pytest.raises(patch.ProteusStartupError) as info:
            router.update_settings(routing_strategy_args={**args, **bad})
        assert str(info.value).startswith("PROTEUS refuses the routing_strategy_args update and keeps its current ones")
        assert router.routing_strategy_args == args and router.get_settings()["routing_strategy_args"] == args
        assert strategy_of(router) is serving
    response = router.completion(model="proteus-auto", messages=[{"role": "user", "content": "hi"}])
    assert response.choices[0].message.content in ("gpt-4", "mixtral")


def test_the_same_refused_update_again_is_refused_without_a_rebuild(steerable_artifact, monkeypatch, caplog):
    args = {"artifact": str(steerable_artifact)}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    bad = {**args, "tiers": {"premium": 1.5}}
    with caplog.at_level(logging.ERROR, logger="litellm_proteus.router"):
        with pytest.raises(patch.ProteusStartupError):
            router.update_settings(routing_strategy_args=bad)
        builds = []
        monkeypatch.setattr(patch, "_install", lambda *a: builds.append(a))
        for _ in range(3):  # as LiteLLM's database sync re-sends it
            with pytest.raises(patch.ProteusStartupError, match="tier 'premium'"):
                router.update_settings(routing_strategy_args=bad)
    assert builds == [] and sum("refuses" in r.getMessage() for r in caplog.records) == 1
    assert router.routing_strategy_args == args
    monkeypatch.setattr(patch, "REFUSAL_RECHECK_S", 0.0)  # past the recheck time it is built again
    patch._refused[router] = (*patch._refused[router][:2], 0.0)
    router.update_settings(routing_strategy_args=bad)  # the stub "installs" it
    assert len(builds) == 1


def test_any_error_building_the_strategy_is_a_refusal_that_restores_the_serving_args(steerable_artifact, monkeypatch):
    args = {"artifact": str(steerable_artifact)}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    serving = strategy_of(router)

    def broken(*_, **__):
        raise RuntimeError("something unforeseen")

    monkeypatch.setattr(patch, "ProteusRoutingStrategy", broken)
    for _ in range(2):
        with pytest.raises(patch.ProteusStartupError, match="cannot build the strategy .RuntimeError: something unforeseen"):
            router.update_settings(routing_strategy_args={**args, "default_tier": "premium"})
        assert router.routing_strategy_args == args and strategy_of(router) is serving


def test_an_unusable_decision_log_folder_is_a_startup_error_naming_it(steerable_artifact, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = {"artifact": str(steerable_artifact), "decision_log": {"dir": str(blocker / "logs")}}
    with pytest.raises(patch.ProteusStartupError) as info:
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    message = str(info.value)
    assert message.startswith("PROTEUS routing cannot start: router_settings.routing_strategy_args.decision_log.dir")
    assert str(blocker / "logs") in message


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda ml, art: ml[1]["model_info"].pop("proteus_model"), "'openai/mixtral'"),
        (lambda ml, art: ml[0]["litellm_params"].update(model="openai/gpt-4o"), "maps to no trained slot"),
        (lambda ml, art: [ml[1]["litellm_params"].pop(k) for k in ("input_cost_per_token", "output_cost_per_token")]
         and ml[1]["litellm_params"].update(model="openai/not-in-any-cost-map"), "has no price"),
    ],
)
def test_unroutable_deployments_stop_the_router_naming_them(steerable_artifact, mutate, fragment):
    models = model_list()
    mutate(models, steerable_artifact)
    with pytest.raises(patch.ProteusStartupError) as info:
        Router(model_list=models, routing_strategy="proteus", routing_strategy_args={"artifact": str(steerable_artifact)})
    assert fragment in str(info.value) and "proteus-auto" in str(info.value)


def test_missing_or_corrupt_artifact_and_bad_config_stop_the_router(steerable_artifact, tmp_path):
    import shutil

    with pytest.raises(patch.ProteusStartupError, match="does not exist"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args={"artifact": str(tmp_path / "nope")})
    with pytest.raises(patch.ProteusStartupError, match="manifest.json' is a file, not a directory"):
        Router(model_list=model_list(), routing_strategy="proteus",
               routing_strategy_args={"artifact": str(steerable_artifact / "manifest.json")})
    corrupt = tmp_path / "corrupt"
    shutil.copytree(steerable_artifact, corrupt)
    weights = corrupt / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(patch.ProteusStartupError, match="corrupt or replaced"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args={"artifact": str(corrupt)})
    with pytest.raises(patch.ProteusStartupError, match="routing_strategy_args: default_tier 'gold' is not a tier"):
        Router(model_list=model_list(), routing_strategy="proteus",
               routing_strategy_args={"artifact": str(steerable_artifact), "default_tier": "gold"})


def test_a_shadow_judge_model_that_is_no_group_stops_the_router(steerable_artifact, tmp_path):
    shadow = {"rate": 0.5, "judge_model": "no-such-group", "daily_budget_usd": 1.0}
    args = {"artifact": str(steerable_artifact), "decision_log": {"dir": str(tmp_path), "log_prompts": True}, "shadow": shadow}
    with pytest.raises(patch.ProteusStartupError, match="shadow.judge_model 'no-such-group' is not a model group of this proxy"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    args["shadow"] = {**shadow, "judge_model": "proteus-auto"}  # any group of the config judges
    assert strategy_of(Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)) is not None


def test_a_shadow_judge_group_with_an_unpriced_deployment_stops_the_router(steerable_artifact, tmp_path):
    """The daily cap counts every judge call: a judge the proxy cannot price is refused at start-up."""
    unpriced = {"model_name": "judge", "litellm_params": {"model": "openai/proteus-test-unpriced-judge", "api_key": "x"}}
    shadow = {"rate": 0.5, "judge_model": "judge", "daily_budget_usd": 1.0}
    args = {"artifact": str(steerable_artifact), "decision_log": {"dir": str(tmp_path), "log_prompts": True}, "shadow": shadow}
    with pytest.raises(patch.ProteusStartupError, match="shadow.judge_model 'judge' has deployments without a price"):
        Router(model_list=model_list() + [unpriced], routing_strategy="proteus", routing_strategy_args=args)
    priced = {**unpriced, "litellm_params": {**unpriced["litellm_params"], "input_cost_per_token": 1e-6,
                                             "output_cost_per_token": 2e-6}}
    assert strategy_of(Router(model_list=model_list() + [priced], routing_strategy="proteus",
                              routing_strategy_args=args)) is not None


def test_a_corrupt_static_table_is_a_startup_error_naming_it(tmp_path):
    import shutil

    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR, MANIFEST_FILE, read_manifest
    from litellm_proteus.encoder import STATIC_TABLE_FILE

    artifact = shutil.copytree(DEFAULT_ARTIFACT_DIR, tmp_path / "artifact")
    (artifact / "encoder" / STATIC_TABLE_FILE).write_bytes(b"not a table")
    with pytest.raises(patch.ProteusStartupError, match=f"{STATIC_TABLE_FILE}: content hash does not match"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args={"artifact": str(artifact)})
    # an artifact written before encoder files were hashed: the table itself says it is unreadable
    manifest = read_manifest(artifact)
    manifest.encoder.files_sha256 = {}
    (artifact / MANIFEST_FILE).write_text(manifest.model_dump_json())
    with pytest.raises(patch.ProteusStartupError, match=f"{STATIC_TABLE_FILE}: unreadable static token table"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args={"artifact": str(artifact)})


def test_tiers_outside_the_declared_range_are_announced_at_startup(steerable_artifact, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):
        Router(model_list=model_list(), routing_strategy="proteus",
               routing_strategy_args={"artifact": str(steerable_artifact),
                                      "tiers": {"premium": 0.95, "standard": 0.85, "economy": 0.6}})
    assert "tiers {'economy': 0.6, 'premium': 0.95} lie outside the artifact's declared tau range [0.7, 0.9]" in caplog.text


def test_slots_no_deployment_plays_are_announced_at_startup(steerable_artifact, caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args={"artifact": str(steerable_artifact)})
    assert "slots no deployment plays" in caplog.text  # the artifact's third slot has no deployment
    assert "{'proteus-auto': ['mistralai/mistral-7b-chat']}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):  # the GPT-4 deployment is gone too
        Router(model_list=model_list()[1:], routing_strategy="proteus", routing_strategy_args={"artifact": str(steerable_artifact)})
    assert "{'proteus-auto': ['gpt-4-1106-preview', 'mistralai/mistral-7b-chat']}" in caplog.text


def test_deployments_without_a_pinned_id_are_announced_when_their_correction_is_kept_by_id(steerable_artifact, caplog):
    import logging

    def start(deployments, **args) -> str:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):
            Router(model_list=deployments, routing_strategy="proteus",
                   routing_strategy_args={"artifact": str(steerable_artifact), **args})
        return caplog.text

    said = start(model_list())  # neither deployment pins model_info.id
    assert "deployments without model_info.id" in said and "'proteus-auto/openai/gpt-4-1106-preview'" in said
    pinned = model_list()
    for n, deployment in enumerate(pinned):
        deployment.setdefault("model_info", {})["id"] = f"dep-{n}"
    assert "without model_info.id" not in start(pinned)
    assert "without model_info.id" not in start(model_list(), compliance={"correction": {"enabled": False}})

def test_unknown_predictor_options_stop_the_router(steerable_artifact):
    with pytest.raises(patch.ProteusStartupError, match=r"predictor_options\.warp_speed: Extra inputs are not permitted \(allowed: \[.*threads"):
        Router(model_list=model_list(), routing_strategy="proteus",
               routing_strategy_args={"artifact": str(steerable_artifact), "predictor_options": {"warp_speed": 9}})


def test_predictor_options_reach_the_predictor(steerable_artifact):
    from litellm_proteus.config import ProteusConfig
    from litellm_proteus.router_strategy.strategy import load_predictor

    def predictor(**options):
        return load_predictor(ProteusConfig.parse({"artifact": str(steerable_artifact), **options}))

    assert predictor().mix_operating_points is True
    assert predictor(predictor_options={"mix_operating_points": False}).mix_operating_points is False
    with pytest.raises(patch.ProteusStartupError,
                       match=r"predictor_options\.mix_operating_points: Input should be a valid boolean \(allowed: true or false\)"):
        Router(model_list=model_list(), routing_strategy="proteus",
               routing_strategy_args={"artifact": str(steerable_artifact), "predictor_options": {"mix_operating_points": "no"}})


@pytest.mark.parametrize(("yaml_args", "problem"), [
    ("exploration: {rate: true}", "exploration.rate: Input should be a valid number (allowed: a number >= 0.0 and <= 1.0)"),
    ("redis: {url: 'redis://127.0.0.1:1/0', timeout_ms: true}",
     "redis.timeout_ms: Input should be a valid number (allowed: a number > 0 and <= 10000)"),
    ("tiers: {premium: true, standard: 0.82}", "tiers.premium: Input should be a valid number (allowed: a number in (0, 1])"),
], ids=["exploration-rate", "redis-timeout", "tier-tau"])
def test_a_yaml_boolean_for_a_number_is_refused_at_start_and_in_an_update(steerable_artifact, yaml_args, problem):
    """Read as 1 by pydantic's lax mode, these would explore on every request, give Redis 1 ms, or a
    tier tau 1.0: the proxy refuses them, naming the field, at start-up and in a settings change."""
    from litellm_proteus.config import CONFIG_PATH

    args = {"artifact": str(steerable_artifact)}
    refused = {**args, **yaml.safe_load(yaml_args)}
    with pytest.raises(patch.ProteusStartupError) as info:
        Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=refused)
    assert f"invalid PROTEUS config: {CONFIG_PATH}.{problem}" in str(info.value)
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    serving = strategy_of(router)
    with pytest.raises(patch.ProteusStartupError) as info:
        router.update_settings(routing_strategy_args=refused)
    assert f"invalid PROTEUS config: {CONFIG_PATH}.{problem}" in str(info.value)
    assert strategy_of(router) is serving and router.routing_strategy_args == args


def test_check_litellm_fails_loudly_when_internals_change(monkeypatch):
    patch.check_litellm()
    monkeypatch.delattr(Router, "_get_routing_context")
    with pytest.raises(patch.IncompatibleLiteLLMError, match=r"supports litellm>=1\.104\.0,<1\.107; .*Router._get_routing_context is missing"):
        patch.check_litellm()


def test_check_litellm_notices_changed_parameters(monkeypatch):
    async def changed(self, model, request_kwargs):  # lost messages/input/specific_deployment/...
        return []

    monkeypatch.setattr(Router, "async_get_healthy_deployments", changed)
    with pytest.raises(patch.IncompatibleLiteLLMError, match="async_get_healthy_deployments lacks parameters"):
        patch.check_litellm()


def test_custom_strategy_contract_is_litellms():
    from litellm.types.router import CustomRoutingStrategyBase

    assert issubclass(ProteusRoutingStrategy, CustomRoutingStrategyBase)
    assert litellm.Router.set_custom_routing_strategy is not None


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(
    ("error", "traceback_kept"),
    [(patch.ProteusStartupError("PROTEUS routing cannot start: invalid PROTEUS config"), False),
     (ValueError("not a PROTEUS refusal"), True)],
)
def test_uvicorn_leaves_out_the_lifespan_traceback_of_a_refusal_only(error, traceback_kept):
    """uvicorn's own lifespan driving a Starlette app whose start-up raises, as LiteLLM's does."""
    from starlette.applications import Starlette
    from uvicorn import Config
    from uvicorn.lifespan.on import LifespanOn

    @asynccontextmanager
    async def lifespan(app):
        raise error
        yield

    uvicorn_error = logging.getLogger("uvicorn.error")
    records = Records()
    uvicorn_error.addHandler(records)  # on the logger itself: whatever configured uvicorn's handlers
    try:
        lifespan_on = LifespanOn(Config(Starlette(lifespan=lifespan), lifespan="on", log_config=None))
        asyncio.run(lifespan_on.startup())
    finally:
        uvicorn_error.removeHandler(records)
    errors = [r.getMessage() for r in records.records if r.levelno >= logging.ERROR]
    assert lifespan_on.should_exit  # start-up still fails: uvicorn exits with status 3
    assert errors[-1] == "Application startup failed. Exiting."
    assert any(f"{type(error).__name__}: {error}" in m and m.startswith("Traceback") for m in errors) is traceback_kept
    assert len(errors) == (2 if traceback_kept else 1)


def test_uvicorn_records_with_exc_info_keep_their_traceback():
    """Only Starlette's formatted start-up traceback is left out, not e.g. an error while serving."""
    uvicorn_error = logging.getLogger("uvicorn.error")
    records = Records()
    uvicorn_error.addHandler(records)
    try:
        try:
            raise patch.ProteusStartupError("PROTEUS routing cannot start: x")
        except patch.ProteusStartupError:
            uvicorn_error.exception("Exception in ASGI application\n")
    finally:
        uvicorn_error.removeHandler(records)
    assert [r.exc_info[0] for r in records.records] == [patch.ProteusStartupError]
