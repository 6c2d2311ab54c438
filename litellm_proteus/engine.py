"""The PROTEUS decision engine: everything between a request and ``ProteusPredictor.decide``.

Plain Python (no proxy, no event loop), so each rule is unit-testable:

- tau resolution: request ``metadata.tau`` (or ``litellm_metadata.tau``) > the key's tier from key
  metadata > from team metadata > from Redis > the default tier.  The request's tau is capped at
  its tier's tau unless the tier's ``allow_raise`` policy says otherwise (client metadata is
  untrusted); lowering it is always allowed.  The decision records which source won.
- deployments <-> trained slots: ``model_info.proteus_model``, else ``litellm_params.model`` (with
  or without its provider prefix) when it names a slot.
- live prices: the deployment's own ``input_cost_per_token``/``output_cost_per_token``
  (``litellm_params``, then ``model_info``), else LiteLLM's cost map (``litellm.model_cost``) by
  deployment id, model, model without provider prefix, ``model_info.base_model``.
- c_i = prompt_tokens * input_price_i + avg_output_tokens[slot_i] * output_price_i, with prompt
  tokens counted once per request by ``litellm.token_counter`` (its default tokenizer: one count
  for all candidates keeps the comparison fair); the predictor normalises c_i like training did.
- retries: deployments recorded in ``metadata.previous_models`` (LiteLLM's retry breadcrumbs) are
  never re-picked; if that leaves nothing, only the one that failed last is excluded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .config import ProteusConfig
from .exploration import explore_decision
from .observability import RateLimitedWarnings
from .predictor import Candidate, Decision

logger = logging.getLogger("litellm_proteus.engine")
_warnings = RateLimitedWarnings(logger)

TAU_SOURCES = ("request", "key_metadata", "team_metadata", "redis", "default")
METADATA_KEYS = ("metadata", "litellm_metadata")


class TauError(ValueError):
    """A tau that is not a number in (0, 1]."""


class DeploymentMappingError(ValueError):
    """Deployments of a PROTEUS group that cannot be scored (no slot or no price)."""


# -- tau ------------------------------------------------------------------------------------------
def short_repr(value: Any, limit: int = 80) -> str:
    """``repr`` cut to ``limit`` characters: error messages echo client input, not megabytes of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def parse_tau(value: Any) -> float:
    """A request's tau: a number (or numeric string) in (0, 1]; anything else is a TauError."""
    if isinstance(value, bool):
        number = math.nan
    elif isinstance(value, (int, float, str)):
        try:
            number = float(value.strip() if isinstance(value, str) else value)
        except (ValueError, OverflowError):  # OverflowError: an int too large for a float
            number = math.nan
    else:
        number = math.nan
    if not (math.isfinite(number) and 0.0 < number <= 1.0):
        raise TauError(f"tau must be a number in (0, 1] (the target fraction of correct answers); got {short_repr(value)}")
    return number


def request_tau(*metadatas: Mapping[str, Any] | None) -> float | None:
    """``tau`` from the first metadata dict that carries one (``metadata`` then ``litellm_metadata``)."""
    for metadata in metadatas:
        if isinstance(metadata, Mapping) and metadata.get("tau") is not None:
            return parse_tau(metadata["tau"])
    return None


@dataclass(frozen=True)
class TierChoice:
    tier: str
    source: str  # key_metadata | team_metadata | redis | default


@dataclass(frozen=True)
class TauResolution:
    tau: float  # what the router is asked for (before clamping to the artifact's range)
    source: str  # one of TAU_SOURCES: where ``tau`` came from
    tier: str
    tier_source: str
    requested: float | None  # the request's own tau, if any
    capped: bool  # the request asked above its tier and the tier does not allow it


def metadata_tier(metadata: Mapping[str, Any] | None, config: ProteusConfig, where: str) -> str | None:
    """The tier named in a key's/team's metadata; anything but a configured tier name is ignored
    with a (rate-limited) warning: the request still gets served, at the next source's tier."""
    if not isinstance(metadata, Mapping):
        return None
    tier = metadata.get(config.tier_metadata_key)
    if tier is None:
        return None
    if not isinstance(tier, str) or tier not in config.tiers:
        _warnings.warn(
            f"tier:{where}:{short_repr(tier)}",  # each bad value is reported, each at most every 30 s
            "ignoring %s.%s=%s: not a configured tier (allowed: %s)",
            where,
            config.tier_metadata_key,
            short_repr(tier),
            sorted(config.tiers),
        )
        return None
    return tier


def tier_from_metadata(
    key_metadata: Mapping[str, Any] | None, team_metadata: Mapping[str, Any] | None, config: ProteusConfig
) -> TierChoice | None:
    for where, metadata in (("key_metadata", key_metadata), ("team_metadata", team_metadata)):
        tier = metadata_tier(metadata, config, where)
        if tier is not None:
            return TierChoice(tier, where)
    return None


def resolve_tau(config: ProteusConfig, requested: float | None, tier: TierChoice | None) -> TauResolution:
    """Apply the precedence and the per-tier cap (see the module docstring)."""
    tier = tier or TierChoice(config.default_tier, "default")
    tier_tau = config.tiers[tier.tier]
    if requested is None:
        return TauResolution(tier_tau, tier.source, tier.tier, tier.source, None, False)
    if requested > tier_tau and not config.may_raise(tier.tier):
        return TauResolution(tier_tau, tier.source, tier.tier, tier.source, requested, True)
    return TauResolution(requested, "request", tier.tier, tier.source, requested, False)


# -- deployments, slots, prices -------------------------------------------------------------------
def deployment_id(deployment: Mapping[str, Any]) -> str:
    return str((deployment.get("model_info") or {}).get("id", ""))


def _model_name_variants(model: str) -> list[str]:
    variants = [model]
    if "/" in model:
        variants.append(model.split("/", 1)[1])  # drop the provider prefix (openai/, together_ai/ ...)
    return variants


def deployment_slot(deployment: Mapping[str, Any], slots: Sequence[str]) -> int:
    """The trained slot a deployment plays; DeploymentMappingError names it otherwise."""
    info = deployment.get("model_info") or {}
    params = deployment.get("litellm_params") or {}
    explicit = info.get("proteus_model")
    name = deployment.get("model_name", "?")
    if explicit is not None:
        if explicit not in slots:
            raise DeploymentMappingError(
                f"deployment {name!r} (id {deployment_id(deployment)}): model_info.proteus_model={explicit!r} "
                f"is not a slot of the artifact; slots: {list(slots)}"
            )
        return slots.index(explicit)
    for candidate in _model_name_variants(str(params.get("model", ""))):
        if candidate in slots:
            return slots.index(candidate)
    raise DeploymentMappingError(
        f"deployment {name!r} (model {params.get('model')!r}, id {deployment_id(deployment)}) maps to no trained "
        f"slot: set model_info.proteus_model to one of {list(slots)}"
    )


@dataclass(frozen=True)
class Prices:
    input_per_token: float
    output_per_token: float
    source: str  # litellm_params | model_info | cost_map:<key>


PRICE_FIELDS = ("input_cost_per_token", "output_cost_per_token")


def _override_price(entry: Any, field: str, where: str) -> float | None:
    """An operator-set price: absent -> None; present but not a number >= 0 -> DeploymentMappingError."""
    if not isinstance(entry, Mapping) or entry.get(field) is None:
        return None
    value = entry[field]
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not (math.isfinite(number) and number >= 0):
        raise DeploymentMappingError(f"{where}.{field}={short_repr(value)}: must be a number >= 0 (USD per token)")
    return number


def _cost_map_prices(
    deployment: Mapping[str, Any], cost_map: Mapping[str, Mapping[str, Any]] | None
) -> tuple[str, tuple[float | None, float | None]] | None:
    """(key, (input, output)) of the first cost-map entry with a usable input price: by deployment
    id, model, model without provider prefix, ``model_info.base_model``."""
    if cost_map is None:
        import litellm

        cost_map = litellm.model_cost
    params = deployment.get("litellm_params") or {}
    info = deployment.get("model_info") or {}
    keys = [deployment_id(deployment), *_model_name_variants(str(params.get("model", "")))]
    if info.get("base_model"):
        keys.append(str(info["base_model"]))
    for key in filter(None, keys):
        try:
            pair = tuple(_override_price(cost_map.get(key), f, "cost_map") for f in PRICE_FIELDS)
        except DeploymentMappingError:  # a broken map entry is not the operator's: try the next key
            continue
        if pair[0] is not None:
            return key, pair  # type: ignore[return-value]
    return None


def deployment_prices(
    deployment: Mapping[str, Any], cost_map: Mapping[str, Mapping[str, Any]] | None = None
) -> Prices | None:
    """Live per-token prices of a deployment, field by field: ``litellm_params``, then ``model_info``,
    then LiteLLM's cost map (overriding only the output price keeps the map's input price, as
    LiteLLM's own spend tracking does).  An override that is not a number >= 0 is a
    DeploymentMappingError naming it; no input price anywhere -> None; no output price -> 0."""
    name = deployment.get("model_name", "?")
    overrides = {
        where: {f: _override_price(deployment.get(where), f, f"deployment {name!r}: {where}") for f in PRICE_FIELDS}
        for where in ("litellm_params", "model_info")
    }
    chosen: dict[str, tuple[float, str]] = {}
    for field in PRICE_FIELDS:
        for where, values in overrides.items():
            if values[field] is not None:
                chosen[field] = (values[field], where)
                break
    if len(chosen) < len(PRICE_FIELDS):
        found = _cost_map_prices(deployment, cost_map)
        if found is not None:
            key, pair = found
            for field, value in zip(PRICE_FIELDS, pair):
                if field not in chosen and value is not None:
                    chosen[field] = (value, f"cost_map:{key}")
    if PRICE_FIELDS[0] not in chosen:
        return None
    sources = list(dict.fromkeys(chosen[f][1] for f in PRICE_FIELDS if f in chosen))  # input's first
    output = chosen.get(PRICE_FIELDS[1], (0.0, ""))[0]
    return Prices(chosen[PRICE_FIELDS[0]][0], output, source="+".join(sources))


def failed_deployment_ids(*metadatas: Mapping[str, Any] | None) -> list[str]:
    """Deployment ids LiteLLM recorded as failed for this request, oldest first.

    LiteLLM 1.106 appends one record per failed attempt to ``metadata.previous_models``
    (``deployment_id``); older releases stored the failed call's kwargs (``model_info.id``).
    Malformed records are skipped.  (The proxy hook drops client-sent breadcrumbs: only LiteLLM's
    own retries may shrink the candidate set.)"""
    ids: list[str] = []
    for metadata in metadatas:
        if not isinstance(metadata, Mapping):
            continue
        records = metadata.get("previous_models")
        if not isinstance(records, (list, tuple)):
            continue
        for record in records:
            if not isinstance(record, Mapping):
                continue
            info = record.get("model_info")
            dep_id = record.get("deployment_id") or (info.get("id") if isinstance(info, Mapping) else None)
            if isinstance(dep_id, str) and dep_id and dep_id not in ids:
                ids.append(dep_id)
    return ids


def exclude_failed(deployments: Sequence[Mapping[str, Any]], failed_ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """Drop every deployment that already failed this request; if none would remain, drop only
    the one that failed last (a retry must never re-pick the deployment that just failed)."""
    if not failed_ids:
        return list(deployments)
    remaining = [d for d in deployments if deployment_id(d) not in failed_ids]
    if remaining:
        return remaining
    return [d for d in deployments if deployment_id(d) != failed_ids[-1]]


# -- the decision ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoredDeployment:
    deployment: Mapping[str, Any]
    slot: int
    prices: Prices


@dataclass(frozen=True)
class DecisionRequest:
    text: str  # what the encoder sees
    messages: Sequence[Mapping[str, Any]] | None  # for counting prompt tokens (None: count ``text``)
    tau: float
    candidates: Sequence[ScoredDeployment]
    exploration_rate: float = 0.0  # litellm_proteus.exploration; 0 = the policy's choice


@dataclass(frozen=True)
class Routed:
    decision: Decision
    prompt_tokens: int
    cost_usd: float  # estimated cost of this request on the chosen deployment
    costs_usd: tuple[float, ...]  # per candidate, in the order given
    propensity: float = 1.0  # probability of this choice (< 1 only under exploration)


def count_prompt_tokens(messages: Sequence[Mapping[str, Any]] | None, text: str) -> int:
    import litellm

    try:
        if messages:
            return int(litellm.token_counter(messages=list(messages)))
        return int(litellm.token_counter(text=text))
    except Exception as exc:  # tokenizer trouble must not fail routing: ~4 characters per token
        logger.warning("token counting failed (%s); estimating from length", exc)
        return max(1, len(text) // 4)


class DecisionEngine:
    """Slot mapping, cost estimation and batched decisions for one artifact.

    Built from the manifest alone, so start-up checks (slots, prices) run before the weights and
    the encoder load; ``predictor`` is attached afterwards and only ``decide`` needs it."""

    def __init__(
        self,
        manifest: Any,
        config: ProteusConfig,
        predictor: Any = None,
        *,
        token_counter: Callable[[Sequence[Mapping[str, Any]] | None, str], int] = count_prompt_tokens,
        cost_map: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self.manifest = manifest
        self.config = config
        self.predictor = predictor
        self.slots: list[str] = list(manifest.models)
        self._count_tokens = token_counter
        self._cost_map = cost_map
        outputs = manifest.avg_output_tokens
        fallback = sum(outputs.values()) / len(outputs) if outputs else 0.0
        self.avg_output_tokens = [float(outputs.get(slot, fallback)) for slot in self.slots]

    def score(self, deployment: Mapping[str, Any]) -> ScoredDeployment:
        """Slot and live prices of one deployment; DeploymentMappingError says what is missing."""
        slot = deployment_slot(deployment, self.slots)
        prices = deployment_prices(deployment, self._cost_map)
        if prices is None:
            params = deployment.get("litellm_params") or {}
            raise DeploymentMappingError(
                f"deployment {deployment.get('model_name')!r} (model {params.get('model')!r}, id "
                f"{deployment_id(deployment)}) has no price: set litellm_params.input_cost_per_token and "
                "output_cost_per_token (LiteLLM's cost map does not know this model)"
            )
        return ScoredDeployment(deployment, slot, prices)

    def score_all(self, deployments: Iterable[Mapping[str, Any]]) -> tuple[list[ScoredDeployment], list[str]]:
        scored, problems = [], []
        for deployment in deployments:
            try:
                scored.append(self.score(deployment))
            except DeploymentMappingError as exc:
                problems.append(str(exc))
        return scored, problems

    def check_model_list(self, model_list: Iterable[Mapping[str, Any]]) -> None:
        """Start-up check: every deployment of every PROTEUS group maps to a slot and has a price."""
        model_list = list(model_list)
        problems = []
        for group in self.config.groups:
            members = [d for d in model_list if d.get("model_name") == group]
            if not members:
                problems.append(f"group {group!r} has no deployments in model_list")
            problems += self.score_all(members)[1]
        if problems:
            raise DeploymentMappingError("deployments of PROTEUS groups cannot be routed: " + "; ".join(problems))

    def cost_usd(self, candidate: ScoredDeployment, prompt_tokens: int) -> float:
        prices = candidate.prices
        return prompt_tokens * prices.input_per_token + self.avg_output_tokens[candidate.slot] * prices.output_per_token

    def decide(self, requests: Sequence[DecisionRequest]) -> list[Routed]:
        """One batched forward pass (runs in the batcher's worker thread)."""
        if not requests:
            return []
        tokens = [self._count_tokens(r.messages, r.text) for r in requests]
        candidates = [
            [Candidate(c.slot, self.cost_usd(c, n)) for c in r.candidates] for r, n in zip(requests, tokens)
        ]
        if self.predictor is None:
            raise RuntimeError("DecisionEngine.decide needs a predictor")
        decisions = self.predictor.decide([r.text for r in requests], [r.tau for r in requests], candidates)
        explored = [explore_decision(d, r.exploration_rate, [c.slot for c in r.candidates], self.manifest.models)
                    for d, r in zip(decisions, requests)]
        return [
            Routed(d, n, cands[d.index].cost_usd, tuple(c.cost_usd for c in cands), propensity)
            for (d, propensity), n, cands in zip(explored, tokens, candidates)
        ]
