from __future__ import annotations

from typing import get_args, get_origin

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
        ({"tiers": {"premium": True}}, "routing_strategy_args.tiers: tier 'premium': tau must be a number in (0, 1]; got True"),
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


def boolean_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every boolean in the config models, walked from the fields' types (a mapping of booleans
    contributes its value under the key ``premium``), so a boolean added later is covered too."""
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        values = get_args(annotation)[1] if get_origin(annotation) is dict else None
        if annotation is bool:
            paths.append((*prefix, name))
        elif values is bool or get_args(values)[:1] == (bool,):
            paths.append((*prefix, name, "premium"))
        for nested in (*get_args(annotation), annotation):
            if isinstance(nested, type) and issubclass(nested, BaseModel):
                paths.extend(boolean_paths(nested, (*prefix, name)))
    return paths


BOOLEAN_PATHS = boolean_paths(ProteusConfig)


def config_with(path: tuple[str, ...], value) -> dict:
    raw: dict = {}
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {"dir": "decision-logs"} if part == "decision_log" else {})  # a log needs a sink
    node[path[-1]] = value
    return raw


def test_the_walk_finds_the_documented_booleans():
    assert {
        ("allow_raise", "premium"), ("allow_direct_deployments",), ("log_decisions",),
        ("predictor_options", "mix_operating_points"), ("compliance", "enabled"),
        ("compliance", "breaker", "enabled"), ("compliance", "correction", "enabled"),
        ("decision_log", "log_prompts"), ("decision_log", "log_responses"), ("decision_log", "redis_index"),
    } <= set(BOOLEAN_PATHS)


@pytest.mark.parametrize("path", BOOLEAN_PATHS, ids=".".join)
@pytest.mark.parametrize("value", ["no", "yes", "true", "off", 1, 0, 1.0, None])
def test_booleans_take_only_true_or_false(path, value):
    """YAML's quoted "no" or a 1 would otherwise be coerced (pydantic's lax mode) into a setting the
    operator did not write."""
    with pytest.raises(ProteusConfigError) as info:
        ProteusConfig.parse(config_with(path, value))
    assert f"{CONFIG_PATH}.{'.'.join(path)}: Input should be a valid boolean (allowed: true or false)" in str(info.value)


@pytest.mark.parametrize("path", BOOLEAN_PATHS, ids=".".join)
@pytest.mark.parametrize("value", [True, False])
def test_booleans_accept_true_and_false(path, value):
    node = ProteusConfig.parse(config_with(path, value))
    for part in path:
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    assert node is value


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
