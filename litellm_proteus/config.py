"""The proxy-side configuration of PROTEUS, validated with pydantic.

It lives in LiteLLM's own slot for strategy settings, ``router_settings.routing_strategy_args``
(next to ``routing_strategy: proteus``), so LiteLLM passes it to the router on every (re)build and
runtime settings updates reach it the same way::

    router_settings:
      routing_strategy: proteus
      routing_strategy_args:
        artifact: null            # null = the bundled default artifact
        device: auto              # auto | cpu | cuda | cuda:N
        predictor_options: {}     # passed to ProteusPredictor (threads, precision, memory_cache, mix_operating_points ...)
        groups: [proteus-auto]    # model_names routed by PROTEUS; other groups keep LiteLLM's strategy
        default_tier: standard
        tiers: {premium: 0.85, standard: 0.82, economy: 0.79}
        allow_raise: {premium: true}   # may a request ask for a tau above its tier's? (default: no)
        redis: {url: redis://127.0.0.1:6379/0, timeout_ms: 50}
        allow_direct_deployments: false   # may a request name one deployment of a group (skipping tau)?
        batching: {max_batch: 32, max_wait_ms: 0}   # 0: a lone request runs at once

Errors name the field (``routing_strategy_args.tiers.premium: ...``) and the allowed values.
"""

from __future__ import annotations

import math
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .exploration import ExplorationSettings

STRATEGY_NAME = "proteus"
CONFIG_PATH = "router_settings.routing_strategy_args"
ENV_PREFIX = "os.environ/"
DEFAULT_TIERS: dict[str, float] = {"premium": 0.85, "standard": 0.82, "economy": 0.79}


class ProteusConfigError(ValueError):
    """A ``routing_strategy_args`` block that cannot be used; the message names the field."""


class RedisSettings(BaseModel):
    """Where per-key tiers live (``proteus tiers set``).  ``url`` wins over host/port."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, description="redis://[:password@]host:port/db")
    host: str = "127.0.0.1"
    port: int = Field(6379, ge=1, le=65535)
    db: int = Field(0, ge=0)
    password: str | None = None
    timeout_ms: float = Field(50.0, gt=0, le=10_000, description="per lookup; slower Redis -> default tier")
    key_prefix: str = "proteus:tier:"
    cache_ttl_s: float = Field(5.0, ge=0, le=3600, description="in-process cache of looked-up tiers (0 = off)")
    retry_after_s: float = Field(1.0, ge=0, le=3600, description="after a failed lookup, the default tier without asking Redis for this long")
    max_connections: int = Field(64, ge=1, le=10_000, description="Redis connections per event loop")

    @field_validator("url", "password", mode="before")
    @classmethod
    def _from_environment(cls, value: Any) -> Any:
        """``os.environ/NAME`` reads the variable, as elsewhere in LiteLLM configs."""
        if isinstance(value, str) and value.startswith(ENV_PREFIX):
            name = value[len(ENV_PREFIX) :]
            if name not in os.environ:
                raise ValueError(f"environment variable {name} is not set")
            return os.environ[name]
        return value

    def connection_url(self) -> str:
        if self.url:
            return self.url
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/{self.db}"


class BatchingSettings(BaseModel):
    """Micro-batching of concurrent routing decisions in one worker thread."""

    model_config = ConfigDict(extra="forbid")
    max_batch: int = Field(32, ge=1, le=1024)
    max_wait_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="how long the first request waits for company; 0 = natural batching: a lone request runs at "
        "once, and requests arriving during a forward pass form the next batch",
    )


class ProteusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact: str | None = Field(None, description="artifact directory; null = the bundled default")
    device: str = "auto"
    encoder_cache_dir: str | None = None
    predictor_options: dict[str, Any] = Field(
        default_factory=dict,
        description="extra ProteusPredictor options, e.g. {threads: 4, precision: bf16, memory_cache: 4096}",
    )
    groups: list[str] = Field(default_factory=lambda: ["proteus-auto"], min_length=1)
    default_tier: str = "standard"
    tiers: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_TIERS), min_length=1)
    allow_raise: dict[str, bool] = Field(default_factory=dict)
    tier_metadata_key: str = Field("proteus_tier", description="key/team metadata field naming the tier")
    redis: RedisSettings | None = None
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    log_decisions: bool = True
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings,
                                             description="safe exploration (litellm_proteus/exploration.py); off by default")
    allow_direct_deployments: bool = Field(
        False,
        description="may a request name one deployment of a PROTEUS group (by its id, or with specific_deployment) "
        "and so skip tau and tiers?",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu", "cuda") and not (value.startswith("cuda:") and value[5:].isdigit()):
            raise ValueError(f"must be one of 'auto', 'cpu', 'cuda', 'cuda:N'; got {value!r}")
        return value

    @field_validator("tiers")
    @classmethod
    def _tiers(cls, tiers: dict[str, float]) -> dict[str, float]:
        for name, tau in tiers.items():
            if not name:
                raise ValueError("tier names must be non-empty")
            if not (isinstance(tau, (int, float)) and math.isfinite(tau) and 0.0 < tau <= 1.0):
                raise ValueError(f"tier {name!r}: tau must be a number in (0, 1]; got {tau!r}")
        return tiers

    @field_validator("groups")
    @classmethod
    def _groups(cls, groups: list[str]) -> list[str]:
        if len(set(groups)) != len(groups) or any(not g for g in groups):
            raise ValueError(f"model group names must be non-empty and unique; got {groups}")
        return groups

    @model_validator(mode="after")
    def _tier_names(self) -> "ProteusConfig":
        allowed = sorted(self.tiers)
        if self.default_tier not in self.tiers:
            raise ValueError(f"default_tier {self.default_tier!r} is not a tier; allowed: {allowed}")
        unknown = sorted(set(self.allow_raise) - set(self.tiers))
        if unknown:
            raise ValueError(f"allow_raise names unknown tiers {unknown}; allowed: {allowed}")
        unknown = sorted(set(self.exploration.tiers) - set(self.tiers))
        if unknown:
            raise ValueError(f"exploration.tiers names unknown tiers {unknown}; allowed: {allowed}")
        return self

    def may_raise(self, tier: str) -> bool:
        return self.allow_raise.get(tier, False)

    @classmethod
    def parse(cls, raw: Any, where: str = CONFIG_PATH) -> "ProteusConfig":
        """Validate a raw mapping; errors become one ProteusConfigError naming each bad field."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ProteusConfigError(f"{where} must be a mapping; got {type(raw).__name__}")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join([where, *map(str, e['loc'])])}: {e['msg'].removeprefix('Value error, ')}"
                + (f" (allowed: {_allowed_fields(cls, e['loc'])})" if e["type"] == "extra_forbidden" else "")
                for e in exc.errors()
            )
            raise ProteusConfigError(f"invalid PROTEUS config: {problems}") from exc


def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names allowed where an unknown key ``loc`` appeared (nested settings models too)."""
    for part in loc[:-1]:
        annotation = model.model_fields[str(part)].annotation if str(part) in model.model_fields else None
        nested = [a for a in (*getattr(annotation, "__args__", ()), annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return sorted(model.model_fields)


def load_config_file(path: str, redis_url: str | None = None) -> ProteusConfig:
    """The PROTEUS block of a LiteLLM proxy ``config.yaml`` (for ``proteus tiers --config``);
    ``redis_url`` replaces the file's ``redis.url`` before validation (so an ``os.environ/...`` URL
    that is not set here does not matter)."""
    import yaml

    with open(path) as handle:
        data = yaml.safe_load(handle) or {}
    settings = (data.get("router_settings") or {}) if isinstance(data, dict) else {}
    if settings.get("routing_strategy") != STRATEGY_NAME:
        raise ProteusConfigError(f"{path}: router_settings.routing_strategy is not {STRATEGY_NAME!r}")
    args = settings.get("routing_strategy_args")
    if redis_url is not None and isinstance(args, dict):
        redis = args.get("redis") if isinstance(args.get("redis"), dict) else {}
        args = {**args, "redis": {**redis, "url": redis_url}}
    return ProteusConfig.parse(args, where=f"{path}: {CONFIG_PATH}")
