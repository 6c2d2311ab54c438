"""The PROTEUS decision engine: everything between a request and ``ProteusPredictor.decide``.

Plain Python (no proxy, no event loop), so each rule is unit-testable:

- tau resolution: request ``metadata.tau`` (or ``litellm_metadata.tau``) > the key's tier from key
  metadata > from team metadata > from Redis > the default tier.  The request's tau is capped at
  its tier's tau unless the tier's ``allow_raise`` policy says otherwise (client metadata is
  untrusted); lowering it is always allowed.  The decision records which source won.
- deployments <-> trained slots: ``model_info.proteus_model``, else ``litellm_params.model`` (with
  or without its provider prefix) when it names a slot.
- live prices: ``costs.deployment_prices``.
- c_i = prompt_tokens * input_price_i + avg_output_tokens[slot_i] * output_price_i, with prompt
  tokens counted once per request for all candidates (one count keeps the comparison fair):
  ``prompt_tokens: chars`` (default) estimates ceil(characters / 4) of the routing text, as
  training estimated logged prompts; ``litellm`` counts with ``litellm.token_counter``
  (``token_count.py``).  The predictor normalises c_i like training did.
- retries: deployments that already failed the request (``ProteusRequest.failed_ids``) are left
  out; if that leaves nothing, only the one that failed last is; if that one is the only candidate,
  it is tried again (as LiteLLM's own strategies retry a group's only deployment).

Its inputs are typed values (``request.ProteusRequest``, ``TierChoice``, deployments): reading the
raw request is ``request.py``'s job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import ProteusConfig
from .costs import DeploymentMappingError, Prices, deployment_id, deployment_prices, model_name_variants
from .exploration import explore_decision
from .replicas import balance as balance_replicas
from .predictor import Candidate, Decision
from .request import TierChoice
from .token_count import TokenCounter, choose_counter

logger = logging.getLogger("litellm_proteus.engine")

TAU_SOURCES = ("request", "key_metadata", "team_metadata", "redis", "default")


@dataclass(frozen=True)
class TauResolution:
    tau: float  # what the router is asked for (before clamping to the artifact's range)
    source: str  # one of TAU_SOURCES: where ``tau`` came from
    tier: str
    tier_source: str
    requested: float | None  # the request's own tau, if any
    capped: bool  # the request asked above its tier and the tier does not allow it


def resolve_tau(config: ProteusConfig, requested: float | None, tier: TierChoice | None) -> TauResolution:
    """Apply the precedence and the per-tier cap (see the module docstring)."""
    tier = tier or TierChoice(config.default_tier, "default")
    tier_tau = config.tiers[tier.tier]
    if requested is None:
        return TauResolution(tier_tau, tier.source, tier.tier, tier.source, None, False)
    if requested > tier_tau and not config.may_raise(tier.tier):
        return TauResolution(tier_tau, tier.source, tier.tier, tier.source, requested, True)
    return TauResolution(requested, "request", tier.tier, tier.source, requested, False)


# -- deployments and slots -----------------------------------------------------------------------
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
    for candidate in model_name_variants(str(params.get("model", ""))):
        if candidate in slots:
            return slots.index(candidate)
    raise DeploymentMappingError(
        f"deployment {name!r} (model {params.get('model')!r}, id {deployment_id(deployment)}) maps to no trained "
        f"slot: set model_info.proteus_model to one of {list(slots)}"
    )


def exclude_failed(deployments: Sequence[Mapping[str, Any]], failed_ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """Drop every deployment that already failed this request; if none would remain, drop only the
    one that failed last; if that one is the only deployment, keep it: a retry with no other
    candidate tries it again, as LiteLLM's own strategies do (an empty pool would answer a 429 about
    cooldowns that do not exist)."""
    if not failed_ids:
        return list(deployments)
    remaining = [d for d in deployments if deployment_id(d) not in failed_ids]
    if remaining:
        return remaining
    return [d for d in deployments if deployment_id(d) != failed_ids[-1]] or list(deployments)


# -- prices against training -----------------------------------------------------------------------
PRICE_DRIFT = 1.5  # a live price this far from training (either way) moves the fixed points off the cost frontier


def within_price_limit(ratio: float | None, limit: float | None) -> bool:
    """``rule_price_limit``: a price ratio (live / training) up to the limit is priced as trained;
    without a ratio or a limit, every price is."""
    return limit is None or ratio is None or ratio <= limit


@dataclass
class PriceDrift:
    """``DecisionEngine.price_drift``: live / training price per deployment (``group/slot (id ..)``),
    and which of them are past ``rule_price_limit``."""

    ratios: dict[str, float] = field(default_factory=dict)
    past_limit: list[str] = field(default_factory=list)

    def warning(self, limit: float | None) -> str:
        """What an operator reads: what happens, and the fix."""
        keep = ("keep routing to every deployment whatever its price (rule_price_limit: null)" if limit is None else
                f"keep routing to a deployment up to rule_price_limit={limit:g} times its training price")
        past = (f"; past it they take the cheapest candidate predicted at least as accurate instead of: {self.past_limit}"
                if self.past_limit else "")
        return (
            "live prices differ from the prices the artifact's single-model and cluster operating points were chosen "
            f"at (live / training price, per deployment): {self.ratios}. Those points {keep}{past}; retrain on "
            "current prices to put them back on the cost frontier"
        )


# -- the decision ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScoredDeployment:
    deployment: Mapping[str, Any]
    slot: int
    prices: Prices
    # the slot's average training request at these prices / at the training prices (None: unknown)
    price_ratio: float | None = None


@dataclass(frozen=True)
class DecisionRequest:
    text: str  # what the encoder sees
    messages: Sequence[Mapping[str, Any]] | None  # for counting prompt tokens (None: count ``text``)
    tau: float
    candidates: Sequence[ScoredDeployment]
    delta: float = 0.0  # compliance controller's offset: route at calibrated(tau + delta)
    exploration_rate: float = 0.0  # litellm_proteus.exploration; 0 = the policy's choice
    p_offsets: tuple[float, ...] = ()  # per candidate: the deployment correction added to its p (empty: none)


@dataclass(frozen=True)
class Routed:
    decision: Decision
    prompt_tokens: int
    cost_usd: float  # estimated cost of this request on the chosen deployment
    costs_usd: tuple[float, ...]  # per candidate, in the order given
    propensity: float = 1.0  # probability of this choice (< 1 only under exploration)


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
        token_counter: TokenCounter | None = None,
        cost_map: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        self.manifest = manifest
        self.config = config
        self.predictor = predictor
        self.slots: list[str] = list(manifest.models)
        if token_counter is None:
            self._count_tokens, self.token_counter_name = choose_counter(config.prompt_tokens), config.prompt_tokens
        else:
            self._count_tokens, self.token_counter_name = token_counter, "custom"
        self._cost_map = cost_map
        outputs = manifest.avg_output_tokens
        fallback = sum(outputs.values()) / len(outputs) if outputs else 0.0
        self.avg_output_tokens = [float(outputs.get(slot, fallback)) for slot in self.slots]
        inputs, references = manifest.avg_input_tokens, manifest.avg_cost_usd
        self._avg_input_tokens = [inputs.get(slot) for slot in self.slots]
        self._training_cost = [references.get(slot) for slot in self.slots]
        cal = manifest.calibration  # does any tau route by a single-model or cluster point?
        self.has_fixed_points = any(point.kind in ("slot", "cluster") for point in cal.requested_point + cal.frontier_point)

    def price_ratio(self, slot: int, prices: Prices) -> float | None:
        """The slot's average training request (its mean prompt and output tokens) priced at
        ``prices``, over its mean cost at the training prices (``avg_cost_usd``); None when the
        artifact has no such reference for the slot (no measured output tokens, or no cost)."""
        tokens_in, reference = self._avg_input_tokens[slot], self._training_cost[slot]
        if tokens_in is None or reference is None or not math.isfinite(reference):
            return None
        live = tokens_in * prices.input_per_token + self.avg_output_tokens[slot] * prices.output_per_token
        if reference <= 0:  # free at training: any price is past every limit
            return math.inf if live > 0 else None
        return live / reference

    def priced_as_trained(self, scored: ScoredDeployment) -> bool:
        """Is this deployment priced as the fixed operating points (single-model, cluster ladders)
        were chosen at: at most ``rule_price_limit`` times its training price?  Past it, a point that
        picks it takes the cheapest candidate predicted at least as accurate (operating_points.py)."""
        return within_price_limit(scored.price_ratio, self.config.rule_price_limit)

    def price_drift(self, scored: Iterable[ScoredDeployment]) -> PriceDrift:
        """The deployments priced more than PRICE_DRIFT from training either way, or past
        ``rule_price_limit``, when the artifact has fixed points (whose place on the cost frontier
        those prices move)."""
        drift = PriceDrift()
        if not self.has_fixed_points:
            return drift
        limit = self.config.rule_price_limit
        upper = PRICE_DRIFT if limit is None else min(PRICE_DRIFT, limit)  # every deployment past the limit is said
        for c in scored:
            if c.price_ratio is not None and not 1 / PRICE_DRIFT <= c.price_ratio <= upper:
                name = f"{c.deployment.get('model_name')}/{self.slots[c.slot]} (id {deployment_id(c.deployment)})"
                drift.ratios[name] = float(f"{c.price_ratio:.3g}")  # significant digits: a tiny ratio never reads 0.0
                if not self.priced_as_trained(c):
                    drift.past_limit.append(name)
        return drift

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
        return ScoredDeployment(deployment, slot, prices, self.price_ratio(slot, prices))

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
        for r in requests:
            if r.p_offsets and len(r.p_offsets) != len(r.candidates):
                raise ValueError(f"p_offsets has {len(r.p_offsets)} entries for {len(r.candidates)} candidates")
        tokens = [self._count_tokens(r.messages, r.text) for r in requests]
        candidates = [
            [Candidate(c.slot, self.cost_usd(c, n), r.p_offsets[i] if r.p_offsets else 0.0, self.priced_as_trained(c))
             for i, c in enumerate(r.candidates)]
            for r, n in zip(requests, tokens)
        ]
        if self.predictor is None:
            raise RuntimeError("DecisionEngine.decide needs a predictor")
        decisions = self.predictor.decide(
            [r.text for r in requests], [r.tau for r in requests], candidates, [r.delta for r in requests]
        )
        routed = []
        for d, r, n, cands in zip(decisions, requests, tokens, candidates):
            slots, costs = [c.slot for c in r.candidates], [c.cost_usd for c in cands]
            d, propensity = explore_decision(d, r.exploration_rate, slots, self.manifest.models)
            d = balance_replicas(d, slots, costs)  # the model is chosen: spread it over its replicas
            routed.append(Routed(d, n, costs[d.index], tuple(costs), propensity))
        return routed
