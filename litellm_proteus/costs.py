"""Cost normalisation: USD per call -> c_hat in [0, 1], identical in training and at inference.

The paper normalises costs "online using exponential moving average of percentile-based bounds".
Our choices, where it is silent:
- ``space``: ``usd_per_call`` (default, the paper's literal reading: linear in dollars) or
  ``log10_usd_per_call`` (bounds and values on log10 cost).  Measured on RouterBench-partial, the
  log scale over-penalises the good cheap models against the cheapest ones and under-penalises
  GPT-4 in dollar terms: PROTEUS paid ~3x CARROT-Balanced's cost for the same accuracy;
- percentiles 5 and 95 of the costs seen in a batch, EMA momentum 0.9 per batch;
- c_hat = clip((f(c) - low) / (high - low), 0, 1) with f the identity or log10.
The final bounds are stored in the artifact, so a live price at inference is normalised exactly as
the training costs were; a price change in the proxy config moves c_hat without retraining (the
policy's choices; the single-model and cluster operating points keep the models the calibration chose).

Live prices of a deployment (``deployment_prices``): its own ``input_cost_per_token`` /
``output_cost_per_token`` (``litellm_params``, then ``model_info``), else LiteLLM's cost map
(``litellm.model_cost``) by deployment id, model, model without provider prefix,
``model_info.base_model``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np

from .request import short_repr

# Token estimate of a text, in training (every logged prompt and response) and at serving by default.
CHARS_PER_TOKEN = 4
# Free deployments (local models) still need a finite log-cost.
MIN_COST_USD = 1e-9


SPACES = ("usd_per_call", "log10_usd_per_call")


@dataclass
class CostNormalizer:
    space: str = "usd_per_call"  # the trainer's default (TrainConfig.cost_space)
    low: float = float("nan")
    high: float = float("nan")
    lower_percentile: float = 5.0
    upper_percentile: float = 95.0
    momentum: float = 0.9

    @property
    def initialised(self) -> bool:
        return bool(np.isfinite(self.low) and np.isfinite(self.high))

    def __post_init__(self) -> None:
        """Reject bounds no router can use (a corrupted manifest): NaN bounds mean "not yet updated";
        otherwise both finite with low <= high (equal when every logged cost is the same), and in
        usd_per_call space low > 0 (costs are clipped to MIN_COST_USD before the percentiles)."""
        if self.space not in SPACES:
            raise ValueError(f"cost_normalization.space must be one of {SPACES}; got {self.space!r}")
        problems = []
        for name in ("low", "high", "lower_percentile", "upper_percentile", "momentum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                problems.append(f"cost_normalization.{name} must be a number; got {value!r}")
        if problems:
            raise ValueError("; ".join(problems))
        low, high = float(self.low), float(self.high)
        if not (math.isnan(low) and math.isnan(high)):  # NaN, NaN: bounds not yet updated
            if not (math.isfinite(low) and math.isfinite(high)):
                problems.append(f"cost_normalization.low/high must be finite numbers; got low={self.low}, high={self.high}")
            elif not low <= high:
                problems.append(f"cost_normalization.low must be <= cost_normalization.high; got low={self.low}, "
                                f"high={self.high}")
            elif self.space == "usd_per_call" and low <= 0:
                problems.append(f"cost_normalization.low must be > 0 in usd_per_call space (USD per call); got {self.low}")
        if not 0 <= self.lower_percentile < self.upper_percentile <= 100:
            problems.append("cost_normalization.lower_percentile and upper_percentile must satisfy 0 <= lower < upper "
                            f"<= 100; got {self.lower_percentile}, {self.upper_percentile}")
        if not 0 <= self.momentum < 1:
            problems.append(f"cost_normalization.momentum must lie in [0, 1); got {self.momentum}")
        if problems:
            raise ValueError("; ".join(problems))

    def transform(self, costs_usd: Any) -> np.ndarray:
        costs = np.maximum(np.asarray(costs_usd, dtype=np.float64), MIN_COST_USD)
        return np.log10(costs) if self.space == "log10_usd_per_call" else costs

    def update(self, costs_usd: Any) -> None:
        """EMA-update the bounds with one batch of observed per-call costs (NaN ignored)."""
        logs = self.transform(costs_usd)
        logs = logs[np.isfinite(logs)]
        if logs.size == 0:
            return
        lo, hi = np.percentile(logs, [self.lower_percentile, self.upper_percentile])
        if not self.initialised:
            self.low, self.high = float(lo), float(hi)
        else:
            self.low = self.momentum * self.low + (1 - self.momentum) * float(lo)
            self.high = self.momentum * self.high + (1 - self.momentum) * float(hi)

    def normalize(self, costs_usd: Any) -> np.ndarray:
        if not self.initialised:
            raise RuntimeError("CostNormalizer used before any update(): bounds unknown")
        span = max(self.high - self.low, 1e-12)
        return np.clip((self.transform(costs_usd) - self.low) / span, 0.0, 1.0).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CostNormalizer":
        known = {f.name for f in dataclass_fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"cost_normalization has unknown field(s) {unknown}; allowed: {sorted(known)}")
        fields = {}
        for k, v in data.items():
            if k == "space":
                continue
            try:
                if isinstance(v, bool):
                    raise TypeError(v)
                fields[k] = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"cost_normalization.{k} must be a number; got {v!r}") from None
        norm = cls(space=data.get("space"), **fields)  # type: ignore[arg-type]
        if not norm.initialised:
            raise ValueError("cost_normalization.low/high must be finite numbers")
        return norm


# -- live deployment prices -----------------------------------------------------------------------
class DeploymentMappingError(ValueError):
    """Deployments of a PROTEUS group that cannot be scored (no slot or no price)."""


def deployment_id(deployment: Mapping[str, Any]) -> str:
    return str((deployment.get("model_info") or {}).get("id", ""))


def model_name_variants(model: str) -> list[str]:
    variants = [model]
    if "/" in model:
        variants.append(model.split("/", 1)[1])  # drop the provider prefix (openai/, together_ai/ ...)
    return variants


@dataclass(frozen=True)
class Prices:
    input_per_token: float
    output_per_token: float
    source: str  # litellm_params | model_info | cost_map:<key>


PRICE_FIELDS = ("input_cost_per_token", "output_cost_per_token")
PER_SECOND_FIELDS = ("input_cost_per_second", "output_cost_per_second")  # LiteLLM's per-second billing


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
    keys = [deployment_id(deployment), *model_name_variants(str(params.get("model", "")))]
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
    name = f"deployment {deployment_id(deployment) or '?'!r} (group {deployment.get('model_name', '?')!r}, model " \
           f"{(deployment.get('litellm_params') or {}).get('model', '?')!r})"
    overrides = {
        where: {f: _override_price(deployment.get(where), f, f"{name}: {where}") for f in PRICE_FIELDS}
        for where in ("litellm_params", "model_info")
    }
    for where, values in overrides.items():
        per_second = [f for f in PER_SECOND_FIELDS if isinstance(deployment.get(where), Mapping)
                      and deployment[where].get(f) is not None]
        if per_second and values[PRICE_FIELDS[0]] is None:  # LiteLLM bills it by the second: a token price is no estimate
            raise DeploymentMappingError(
                f"{name}: {where}.{per_second[0]} prices it per second, which PROTEUS cannot compare with per-token "
                f"costs; set {where}.{PRICE_FIELDS[0]} and {where}.{PRICE_FIELDS[1]} (USD per token) as well")
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
