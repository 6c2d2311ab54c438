from __future__ import annotations

import re
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from litellm_proteus.config import CONFIG_PATH, ProteusConfig, ProteusConfigError, RedisSettings, load_config_file


def test_defaults_are_valid_and_documented_fields_exist():
    config = ProteusConfig.parse(None)
    assert config.default_tier in config.tiers
    assert config.groups == ["proteus-auto"]
    assert config.may_raise(config.default_tier) is False  # capping is the default policy
    assert config.batching.max_batch >= 1 and config.redis is None


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"default_tier": "gold"}, "default_tier 'gold' is not a tier; allowed: ['economy', 'premium', 'standard']"),
        ({"tiers": {"premium": 1.5}}, "routing_strategy_args.tiers: tier 'premium': tau must be a number in (0, 1]"),
        ({"allow_raise": {"platinum": True}}, "allow_raise names unknown tiers ['platinum']"),
        ({"device": "tpu"}, "routing_strategy_args.device"),
        ({"batching": {"max_batch": 0}}, "routing_strategy_args.batching.max_batch: Input should be greater than or equal to 1 (allowed: an integer >= 1 and <= 1024)"),
        ({"redis": {"timeout_ms": 0}}, "routing_strategy_args.redis.timeout_ms: Input should be greater than 0 (allowed: a number > 0 and <= 10000)"),
        ({"groups": []}, "routing_strategy_args.groups"),
        ({"tierz": {}}, "routing_strategy_args.tierz: Extra inputs are not permitted"),
        ({"tiers": {"premium": True}}, "routing_strategy_args.tiers.premium: Input should be a valid number (allowed: a number in (0, 1])"),
        ({"tier_metadata_key": ""}, "routing_strategy_args.tier_metadata_key"),
        ({"compliance": {"enabled": "maybe"}}, "routing_strategy_args.compliance.enabled: Input should be a valid boolean (allowed: true or false)"),
        ({"exploration": {"rate": "high"}}, "routing_strategy_args.exploration.rate: Input should be a valid number, unable to parse string as a number (allowed: a number >= 0.0 and <= 1.0)"),
        ({"redis": {"url": "http://foo:6379"}}, "routing_strategy_args.redis.url: must start with one of redis://, rediss://, unix://"),
    ],
)
def test_bad_config_names_the_field(raw, fragment):
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse(raw)
    assert fragment in str(info.value)


def typed_paths(model: type[BaseModel], prefix: tuple = ()) -> dict[tuple, type]:
    """Every bool, int and float in the config models and its type, walked from the fields' types
    (through ``X | None``, ``Annotated``, a mapping's values under the key ``premium`` and a
    sequence's items at index 0), so a field added later is covered too."""
    paths: dict[tuple, type] = {}

    def walk(annotation: Any, path: tuple) -> None:
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Annotated:
            walk(args[0], path)
        elif annotation in (bool, int, float):
            paths[path] = annotation
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths.update(typed_paths(annotation, path))
        elif origin is dict:
            walk(args[1], (*path, "premium"))
        elif origin in (list, tuple, set, frozenset):
            walk(args[0], (*path, 0))
        elif origin in (Union, UnionType):
            for option in args:
                walk(option, path)

    for name, field in model.model_fields.items():
        walk(field.annotation, (*prefix, name))
    return paths


TYPED_PATHS = typed_paths(ProteusConfig)
BOOLEAN_PATHS = [path for path, kind in TYPED_PATHS.items() if kind is bool]
NUMBER_PATHS = [path for path, kind in TYPED_PATHS.items() if kind in (int, float)]


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def config_with(path: tuple, value) -> dict:
    for part in reversed(path):
        if isinstance(part, int):
            value = [value]
        else:  # a decision log needs a sink
            value = {part: {"dir": "decision-logs", **value} if part == "decision_log" else value}
    return value


def test_the_walk_finds_the_documented_booleans():
    assert {
        ("allow_raise", "premium"), ("allow_direct_deployments",), ("log_decisions",),
        ("predictor_options", "mix_operating_points"), ("compliance", "enabled"),
        ("compliance", "breaker", "enabled"), ("compliance", "correction", "enabled"),
        ("decision_log", "log_prompts"), ("decision_log", "log_responses"), ("decision_log", "redis_index"),
    } <= set(BOOLEAN_PATHS)


@pytest.mark.parametrize("path", BOOLEAN_PATHS, ids=dotted)
@pytest.mark.parametrize("value", ["no", "yes", "true", "off", 1, 0, 1.0, None])
def test_booleans_take_only_true_or_false(path, value):
    """YAML's quoted "no" or a 1 would otherwise be coerced (pydantic's lax mode) into a setting the
    operator did not write."""
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse(config_with(path, value))
    assert f"{CONFIG_PATH}.{dotted(path)}: Input should be a valid boolean (allowed: true or false)" in str(info.value)


@pytest.mark.parametrize("path", BOOLEAN_PATHS, ids=dotted)
@pytest.mark.parametrize("value", [True, False])
def test_booleans_accept_true_and_false(path, value):
    node = ProteusConfig.parse(config_with(path, value))
    for part in path:
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    assert node is value


def test_the_walk_finds_the_documented_numbers():
    assert {
        ("tiers", "premium"): float, ("rule_price_limit",): float, ("exploration", "rate"): float,
        ("exploration", "tiers", "premium"): float, ("shadow", "daily_budget_usd"): float, ("shadow", "candidates"): int,
        ("redis", "timeout_ms"): float, ("redis", "port"): int, ("predictor_options", "threads"): int,
        ("batching", "max_batch"): int, ("decision_log", "feedback_max_age_s"): float, ("compliance", "margin"): float,
        ("compliance", "breaker", "threshold"): float, ("compliance", "correction", "min_labels"): int,
    }.items() <= TYPED_PATHS.items()


@pytest.mark.parametrize("path", NUMBER_PATHS, ids=dotted)
@pytest.mark.parametrize("value", [True, False])
def test_numbers_refuse_booleans(path, value):
    """Pydantic's lax mode reads true as 1 and false as 0: ``exploration.rate: true`` would explore on
    every request.  The error has every field's form: the field, pydantic's reason, the allowed values."""
    number = TYPED_PATHS[path] is float
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse(config_with(path, value))
    reason = "Input should be a valid number (allowed: a number" if number else "Input should be a valid integer (allowed: an integer"
    assert re.fullmatch(rf"invalid PROTEUS config: {re.escape(f'{CONFIG_PATH}.{dotted(path)}: {reason}')}[^;]*\)", str(info.value))


def test_numbers_keep_their_other_coercions():
    """Only booleans are refused: an integer for a number, a numeric string, a whole float for an integer."""
    config = ProteusConfig.parse({"rule_price_limit": 4, "exploration": {"rate": "0.5"}, "tiers": {"standard": 1},
                                  "redis": {"timeout_ms": "20", "port": "6380", "db": 2.0}, "batching": {"max_batch": 8}})
    assert (config.rule_price_limit, config.exploration.rate, config.tiers) == (4.0, 0.5, {"standard": 1.0})
    assert (config.redis.timeout_ms, config.redis.port, config.redis.db, config.batching.max_batch) == (20.0, 6380, 2, 8)


def test_yaml_booleans_are_booleans_and_quoted_ones_are_refused():
    assert ProteusConfig.parse(yaml.safe_load("log_decisions: false")).log_decisions is False
    with pytest.raises(ProteusConfigError, match=r"routing_strategy_args\.log_decisions: .*\(allowed: true or false\)"):
        ProteusConfig.parse(yaml.safe_load("log_decisions: 'no'"))


def test_not_a_mapping():
    with pytest.raises(ProteusConfigError, match="must be a mapping"):
        ProteusConfig.parse(["premium"])


def test_redis_url_wins_over_host_port():
    assert RedisSettings(url="redis://h:1/2").connection_url() == "redis://h:1/2"
    assert RedisSettings(host="h", port=7, db=3, password="pw").connection_url() == "redis://:pw@h:7/3"


def test_load_config_file_reads_the_proxy_config(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "router_settings": {
                    "routing_strategy": "proteus",
                    "routing_strategy_args": {"tiers": {"gold": 0.9}, "default_tier": "gold"},
                }
            }
        )
    )
    assert load_config_file(str(path)).tiers == {"gold": 0.9}
    path.write_text(yaml.safe_dump({"router_settings": {"routing_strategy": "simple-shuffle"}}))
    with pytest.raises(ProteusConfigError, match="routing_strategy is not 'proteus'"):
        load_config_file(str(path))


def test_redis_settings_read_os_environ_references(monkeypatch):
    monkeypatch.setenv("PROTEUS_TEST_REDIS", "redis://cache:6380/1")
    assert RedisSettings(url="os.environ/PROTEUS_TEST_REDIS").connection_url() == "redis://cache:6380/1"
    monkeypatch.delenv("PROTEUS_TEST_REDIS")
    with pytest.raises(ProteusConfigError, match="routing_strategy_args.redis.url: environment variable PROTEUS_TEST_REDIS is not set"):
        ProteusConfig.parse({"redis": {"url": "os.environ/PROTEUS_TEST_REDIS"}})


def test_predictor_options_are_named_fields_and_errors_name_them():
    from litellm_proteus.config import ProteusConfig, ProteusConfigError

    config = ProteusConfig.parse({"predictor_options": {"threads": 2, "precision": "bf16"}})
    assert config.predictor_options.as_kwargs() == {"threads": 2, "precision": "bf16"}  # unset options stay unset
    assert ProteusConfig.parse({}).predictor_options.as_kwargs() == {}
    with pytest.raises(ProteusConfigError, match=r"predictor_options\.warp_speed: .*allowed: \[.*'mix_operating_points'.*'threads'"):
        ProteusConfig.parse({"predictor_options": {"warp_speed": 9}})
    with pytest.raises(ProteusConfigError, match=r"predictor_options\.threads: Input should be greater than or equal to 1"):
        ProteusConfig.parse({"predictor_options": {"threads": 0}})
    with pytest.raises(ProteusConfigError, match=r"predictor_options\.precision: Input should be 'auto', 'fp32', 'bf16' or 'fp16'"):
        ProteusConfig.parse({"predictor_options": {"precision": "fp8"}})


def test_predictor_options_name_the_runtime():
    from litellm_proteus.config import ProteusConfig, ProteusConfigError

    assert ProteusConfig.parse({"predictor_options": {"runtime": "torch"}}).predictor_options.as_kwargs() == {"runtime": "torch"}
    with pytest.raises(ProteusConfigError, match=r"predictor_options\.runtime: Input should be 'auto', 'numpy' or 'torch'"):
        ProteusConfig.parse({"predictor_options": {"runtime": "jax"}})


def test_a_redis_url_redis_cannot_parse_is_refused_naming_it():
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse({"redis": {"url": "redis://127.0.0.1:notaport/0"}})
    assert "redis.url" in str(info.value) and "cannot be used" in str(info.value) and "Port" in str(info.value)
