"""The proxy-side configuration of PROTEUS, validated with pydantic.

It lives in LiteLLM's own slot for strategy settings, ``router_settings.routing_strategy_args``
(next to ``routing_strategy: proteus``), so LiteLLM passes it to the router on every (re)build and
runtime settings updates reach it the same way::

    router_settings:
      routing_strategy: proteus
      routing_strategy_args:
        artifact: null            # null = the bundled default artifact
        device: auto              # auto | cpu | cuda | cuda:N
        predictor_options: {}     # PredictorOptions: threads, precision, memory_cache, mix_operating_points ...
        groups: [proteus-auto]    # model_names routed by PROTEUS; other groups keep LiteLLM's strategy
        default_tier: standard
        tiers: {premium: 0.85, standard: 0.82, economy: 0.79}
        allow_raise: {premium: true}   # may a request ask for a tau above its tier's? (default: no)
        redis: {url: redis://127.0.0.1:6379/0, timeout_ms: 50}
        allow_direct_deployments: false   # may a request name one deployment of a group (skipping tau)?
        batching: {max_batch: 32, max_wait_ms: 0}   # 0: a lone request runs at once
        decision_log: {dir: /var/log/proteus}   # durable decisions, outcomes, feedback (docs/decision-log.md)

Errors name the field (``routing_strategy_args.tiers.premium: ...``) and the allowed values.
"""

from __future__ import annotations

import math
import os
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator

from .compliance import ComplianceSettings
from .exploration import ExplorationSettings
from .settings_types import Integer, Number
from .shadow_settings import ShadowSettings

STRATEGY_NAME = "proteus"
CONFIG_PATH = "router_settings.routing_strategy_args"
ENV_PREFIX = "os.environ/"
DEFAULT_TIERS: dict[str, float] = {"premium": 0.85, "standard": 0.82, "economy": 0.79}
NULL_MEANS = "proteus_null_means"  # a field's json_schema_extra: what null does, said in its errors' allowed values
VALUES_ALLOWED = "proteus_values_allowed"  # a mapping field's json_schema_extra: what each of its values takes
_BOUND_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


class ProteusConfigError(ValueError):
    """A ``routing_strategy_args`` block that cannot be used; the message names the field."""


REDIS_SCHEMES = ("redis://", "rediss://", "unix://")  # what redis-py's from_url takes


class RedisSettings(BaseModel):
    """Where per-key tiers live (``proteus tiers set``).  ``url`` wins over host/port."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, description="redis://[:password@]host:port/db")
    host: str = "127.0.0.1"
    port: Integer = Field(6379, ge=1, le=65535)
    db: Integer = Field(0, ge=0)
    password: str | None = None
    timeout_ms: Number = Field(50.0, gt=0, le=10_000, description="per lookup of a key with a last known tier; slower -> that tier")
    unknown_key_timeout_ms: Number = Field(
        1000.0, gt=0, le=60_000,
        description="per lookup of a key with no last known tier (every key after a restart): a slow answer is "
                    "waited for this long rather than serve the default tier; a refused connection fails at once",
    )
    key_prefix: str = "proteus:tier:"
    cache_ttl_s: Number = Field(5.0, ge=0, le=3600, description="in-process cache of looked-up tiers (0 = off)")
    retry_after_s: Number = Field(1.0, ge=0, le=3600, description="after a failed lookup, the default tier without asking Redis for this long")
    max_connections: Integer = Field(64, ge=1, le=10_000, description="Redis connections per event loop")
    connect_timeout_ms: Number = Field(
        1000.0, gt=0, le=60_000,
        description="the first connection of each event loop (warmed at proxy start-up); not part of timeout_ms",
    )
    stale_ttl_s: Number = Field(
        3600.0, ge=0, le=7 * 86400,
        description="a key's last tier read from Redis is used for this long while Redis is slow or down (0 = off)",
    )

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

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(REDIS_SCHEMES):
            raise ValueError(f"must start with one of {', '.join(REDIS_SCHEMES)} (e.g. redis://127.0.0.1:6379/0); got {value[:80]!r}")
        if value is not None:
            from redis.connection import parse_url  # what every client of this URL will do with it

            try:
                parse_url(value)
            except ValueError as exc:  # e.g. a port that is not a number
                raise ValueError(f"cannot be used ({exc}), e.g. redis://127.0.0.1:6379/0") from None
        return value

    def connection_url(self) -> str:
        if self.url:
            return self.url
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/{self.db}"


class BatchingSettings(BaseModel):
    """Micro-batching of concurrent routing decisions in one worker thread."""

    model_config = ConfigDict(extra="forbid")
    max_batch: Integer = Field(32, ge=1, le=1024)
    max_wait_ms: Number = Field(
        0.0,
        ge=0,
        le=1000,
        description="how long the first request waits for company; 0 = natural batching: a lone request runs at "
        "once, and requests arriving during a forward pass form the next batch",
    )


class PredictorOptions(BaseModel):
    """How the predictor runs (``routing_strategy_args.predictor_options``); the speed options are
    measured in ``encoder.py`` and ``docs/``.  Unknown keys are refused, naming the allowed ones."""

    model_config = ConfigDict(extra="forbid")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="transformer encoder precision: auto = fp16 on CUDA, bf16 on CPUs with native bf16, else fp32"
    )
    quantize: Literal["none", "int8"] | None = Field(None, description="int8 moves embeddings: evaluate it first")
    memory_cache: Integer = Field(1024, ge=0, description="in-process LRU of embeddings (exact; 0 = off)")
    threads: Integer | None = Field(None, ge=1, description="torch intra-op threads (process-wide)")
    backend: Literal["auto", "hf", "fused", "static"] = Field("auto", description="transformer implementation")
    max_tokens: Integer | None = Field(None, ge=8, description="override the artifact's encoder length (changes embeddings)")
    truncation: Literal["head", "tail", "head_tail"] | None = Field(None, description="override the artifact's truncation")
    max_batch_tokens: Integer | None = Field(
        None, ge=0, description="padded tokens per encoder pass (default: 2,048 on CPU, no limit on CUDA; 0 = no limit)"
    )
    runtime: Literal["auto", "numpy", "torch"] = Field(
        "auto", description="forward pass: auto = numpy for a static-table artifact on the CPU (no torch), else torch"
    )
    cuda_graphs: StrictBool = Field(
        True, description="replay the encoder and heads as captured CUDA graphs when the device is CUDA"
    )
    tokenizer_threads: Integer | None = Field(
        None, ge=1, description="threads tokenising a batch (null = the cores this process may use, at most 8)"
    )
    mix_operating_points: StrictBool = Field(
        True, description="reach a tau between two frontier operating points by routing a prompt-hash share at each"
    )

    def as_kwargs(self) -> dict[str, Any]:
        """Only what was set: the predictor's own defaults apply to the rest."""
        return self.model_dump(exclude_unset=True)


FEEDBACK_MAX_AGE_LIMIT_S = 10 * 365 * 86400  # ten years: an EXPIRE Redis takes (.inf or 1e17 it refuses)


class DecisionLogSettings(BaseModel):
    """The decision log (``litellm_proteus/decision_log.py``) and the feedback it makes possible."""

    model_config = ConfigDict(extra="forbid")
    dir: str | None = Field(None, description="directory of rotating JSONL files; null = no files")
    max_bytes: Integer = Field(64 * 2**20, ge=4096, description="a file is closed and a new one started past this size")
    max_files: Integer = Field(100, ge=1, description="files kept per proxy process; the oldest are deleted")
    queue_size: Integer = Field(10_000, ge=1, description="records waiting for the writer thread; more are dropped (counted)")
    log_prompts: StrictBool = Field(False, description="store the prompt text (its SHA-256 is always stored)")
    log_responses: StrictBool = Field(False, description="store the response text in outcome records")
    file_mode: Literal["0600", "0640"] = Field(
        "0600", description="mode of the log's files, whatever the umask: '0600' owner only, '0640' group read too; "
        "a log directory PROTEUS makes gets 0700 / 0750 (quoted: YAML reads 0640 as a number)"
    )
    redis_stream: str | None = Field(
        None, description="also XADD every record to this Redis stream (needs routing_strategy_args.redis)"
    )
    redis_stream_maxlen: Integer = Field(1_000_000, ge=1, description="approximate length cap of the stream (MAXLEN ~)")
    redis_index: StrictBool = Field(
        True, description="keep each decision (and its call's latest outcome) in Redis for feedback_max_age_s, so any "
        "worker can accept or refuse its feedback"
    )
    redis_key_prefix: str = "proteus:decision:"
    index_size: Integer = Field(100_000, ge=1, description="decisions kept in memory per process for feedback lookups")
    feedback_max_age_s: Number = Field(
        7 * 86400.0, gt=0, le=FEEDBACK_MAX_AGE_LIMIT_S,
        description="feedback for an older decision is refused (late); also the Redis index's EXPIRE, so finite",
    )
    feedback_from: Literal["owner", "admin", "any"] = Field(
        "owner",
        description="who may score a call over HTTP: owner = the key that made the request, or a proxy admin; "
        "admin = proxy admins only; any = every authenticated key",
    )

    @model_validator(mode="after")
    def _a_sink(self) -> "DecisionLogSettings":
        if self.dir is None and self.redis_stream is None:
            raise ValueError("set dir (JSONL files) or redis_stream (or both)")
        return self


class ProteusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    artifact: str | None = Field(None, description="artifact directory; null = the bundled default")
    device: str = "auto"
    encoder_cache_dir: str | None = None
    predictor_options: PredictorOptions = Field(default_factory=PredictorOptions)
    groups: list[str] = Field(default_factory=lambda: ["proteus-auto"], min_length=1)
    default_tier: str = "standard"
    tiers: dict[str, Number] = Field(default_factory=lambda: dict(DEFAULT_TIERS), min_length=1,
                                     json_schema_extra={VALUES_ALLOWED: "a number in (0, 1]"})
    allow_raise: dict[str, StrictBool] = Field(default_factory=dict)
    tier_metadata_key: str = Field("proteus_tier", min_length=1, description="key/team metadata field naming the tier")
    redis: RedisSettings | None = None
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    compliance: ComplianceSettings = Field(
        default_factory=ComplianceSettings, description="live compliance controller (docs/live-compliance.md)"
    )
    prompt_tokens: Literal["chars", "litellm"] = Field(
        "chars",
        description="prompt tokens in c_i: 'chars' = ceil(characters / 4), training's estimate (no tokenizer); "
        "'litellm' = litellm.token_counter (cl100k_base, ~31 MiB per worker)",
    )
    rule_price_limit: Number | None = Field(
        1.5,
        gt=1,
        description="a single-model or cluster operating point whose pick's live price is past this multiple of the "
        "training price the point was chosen at takes the cheapest candidate predicted at least as accurate "
        "instead; null = never",
        json_schema_extra={NULL_MEANS: "to turn the price check off"},
    )
    log_decisions: StrictBool = True
    decision_log: DecisionLogSettings | None = Field(None, description="null = no decision log and no feedback")
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings,
                                             description="safe exploration (litellm_proteus/exploration.py); off by default")
    shadow: ShadowSettings = Field(default_factory=ShadowSettings,
                                   description="shadow evaluation (litellm_proteus/shadow.py); off by default")
    allow_direct_deployments: StrictBool = Field(
        False,
        description="may a request name one deployment of a PROTEUS group (by its id, or its litellm_params.model "
        "with specific_deployment) and so skip tau and tiers?",
    )

    @property
    def redis_url(self) -> str | None:
        """The Redis URL every shared piece (tiers, controller, logs, shadow budget) connects to."""
        return self.redis.connection_url() if self.redis is not None else None

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
        if self.decision_log is not None and self.decision_log.redis_stream and self.redis is None:
            raise ValueError("decision_log.redis_stream needs routing_strategy_args.redis (where the stream lives)")
        unknown = sorted(set(self.exploration.tiers) - set(self.tiers))
        if unknown:
            raise ValueError(f"exploration.tiers names unknown tiers {unknown}; allowed: {allowed}")
        unknown = sorted(set(self.shadow.tiers) - set(self.tiers))
        if unknown:
            raise ValueError(f"shadow.tiers names unknown tiers {unknown}; allowed: {allowed}")
        if self.shadow.enabled and (self.decision_log is None or self.decision_log.dir is None):
            raise ValueError("shadow evaluation writes its rows beside the decision log: set decision_log.dir")
        if self.shadow.enabled and not self.decision_log.log_prompts:
            raise ValueError("shadow rows store the prompt text: set decision_log.log_prompts: true (or shadow.rate: 0)")
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
                f"{'.'.join([where, *map(str, e['loc'])])}: {e['msg'].removeprefix('Value error, ')}{_allowed(cls, e)}"
                for e in exc.errors()
            )
            raise ProteusConfigError(f"invalid PROTEUS config: {problems}") from exc


def _allowed(model: type[BaseModel], error: dict) -> str:
    """What an error's field takes: the field names for an unknown key, the type and bounds for a
    value of the wrong type or out of bounds ("" when neither says more)."""
    if error["type"] == "extra_forbidden":
        return f" (allowed: {_allowed_fields(model, error['loc'])})"
    kind = error["type"]
    values = _allowed_values(model, error["loc"]) if kind.endswith(("_parsing", "_type")) or kind in _BOUND_ERRORS else ""
    return f" (allowed: {values})" if values else ""


def _model_at(model: type[BaseModel], path: tuple) -> type[BaseModel] | None:
    """The nested settings model a field path leads to (None where it leaves them)."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        nested = [a for a in (*getattr(annotation, "__args__", ()), annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _field_at(model: type[BaseModel], loc: tuple) -> Any:
    """The pydantic FieldInfo at ``loc`` (None where loc leaves the settings models)."""
    owner = _model_at(model, loc[:-1])
    return owner.model_fields.get(str(loc[-1])) if owner is not None and loc else None


def _type_at(model: type[BaseModel], loc: tuple) -> tuple[Any, list]:
    """The type at ``loc`` and its constraints: a field's, or the values' of a mapping field
    (``allow_raise.premium``); (None, []) where loc leaves the settings models."""
    field = _field_at(model, loc)
    if field is not None:
        return field.annotation, field.metadata
    mapping = _field_at(model, loc[:-1]) if len(loc) > 1 else None
    if mapping is None or get_origin(mapping.annotation) is not dict:
        return None, []
    value = get_args(mapping.annotation)[1]
    return (get_args(value)[0], list(get_args(value)[1:])) if get_origin(value) is Annotated else (value, [])


def _allowed_values(model: type[BaseModel], loc: tuple) -> str:
    """What a field takes: its type and bounds (``a number >= 0 and <= 1``), and what null does where
    it declares that (``NULL_MEANS``)."""
    mapping = _field_at(model, loc[:-1]) if len(loc) > 1 and _field_at(model, loc) is None else None
    if mapping is not None and isinstance(mapping.json_schema_extra, dict) and VALUES_ALLOWED in mapping.json_schema_extra:
        return str(mapping.json_schema_extra[VALUES_ALLOWED])
    annotation, metadata = _type_at(model, loc)
    options = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) in (Union, UnionType) else []
    optional = len(options) == 1 and len(get_args(annotation)) == 2  # ``X | None``: X, or null
    bare = options[0] if optional else annotation
    bare = get_args(bare)[0] if get_origin(bare) is Annotated else bare  # Number -> float
    kind = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(bare, "")
    bounds = [f"{sign} {getattr(m, attr)}" for m in metadata
              for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if hasattr(m, attr)]
    field = _field_at(model, loc)
    extra = field.json_schema_extra if field is not None and isinstance(field.json_schema_extra, dict) else {}
    null = ", or null" + (f" {extra[NULL_MEANS]}" if NULL_MEANS in extra else "") if optional else ""
    return f"{kind} {' and '.join(bounds)}".rstrip() + null if kind else ""


def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names allowed where an unknown key ``loc`` appeared (nested settings models too)."""
    owner = _model_at(model, loc[:-1])
    return sorted(owner.model_fields) if owner is not None else []


def load_config_file(path: str, redis_url: str | None = None) -> ProteusConfig:
    """The PROTEUS block of a LiteLLM proxy ``config.yaml`` (for ``proteus tiers --config``);
    ``redis_url`` replaces the file's ``redis.url`` before validation (so an ``os.environ/...`` URL
    that is not set here does not matter)."""
    import yaml

    with open(path) as handle:
        try:
            data = yaml.safe_load(handle) or {}
        except yaml.YAMLError as exc:
            raise ProteusConfigError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProteusConfigError(f"{path}: expected a mapping (a LiteLLM proxy config); got {type(data).__name__}")
    settings = data.get("router_settings") or {}
    if not isinstance(settings, dict):
        raise ProteusConfigError(f"{path}: router_settings must be a mapping; got {type(settings).__name__}")
    if settings.get("routing_strategy") != STRATEGY_NAME:
        raise ProteusConfigError(f"{path}: router_settings.routing_strategy is not {STRATEGY_NAME!r}")
    args = settings.get("routing_strategy_args")
    if redis_url is not None and isinstance(args, dict):
        redis = args.get("redis") if isinstance(args.get("redis"), dict) else {}
        args = {**args, "redis": {**redis, "url": redis_url}}
    return ProteusConfig.parse(args, where=f"{path}: {CONFIG_PATH}")
