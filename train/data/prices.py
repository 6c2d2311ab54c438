"""Per-model list prices for logs that record token counts but no per-call cost (SPROUT, RouteLLM).

Prices are USD per 1M tokens, ``(input, output)``.  A user table passed as ``load_logs(prices=...)``
is merged over these defaults (user entries win), so it only needs the models that are missing or
priced differently.  Entries may be ``(input, output)`` pairs or ``{"input": x, "output": y}``.

Sources (list prices, checked against LiteLLM 1.106.0's cost map where it has the model):
OpenAI and AWS Bedrock public price pages, and IBM watsonx.ai's price list (per 1K-token resource
unit, same price for input and output, except Llama-3.1-405B which is priced separately).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

PricePair = tuple[float, float]

#: SPROUT (CARROT-LLM-Routing/SPROUT) model columns.
SPROUT_PRICES: dict[str, PricePair] = {
    "openai-gpt-4o": (2.50, 10.00),
    "openai-gpt-4o-mini": (0.15, 0.60),
    # The paper's 14th SPROUT model; column name as in CARROT's naming scheme (unverified offline).
    "openai-o3-mini": (1.10, 4.40),
    "aws-claude-3-5-sonnet-v1": (3.00, 15.00),
    "aws-titan-text-premier-v1": (0.50, 1.50),
    "wxai-llama-3-1-70b-instruct": (1.80, 1.80),
    "wxai-llama-3-1-8b-instruct": (0.60, 0.60),
    "wxai-llama-3-2-1b-instruct": (0.10, 0.10),
    "wxai-llama-3-2-3b-instruct": (0.15, 0.15),
    "wxai-llama-3-3-70b-instruct": (0.71, 0.71),
    "wxai-llama-3-405b-instruct": (5.00, 16.00),
    "wxai-mixtral-8x7b-instruct-v01": (0.60, 0.60),
    "wxai-granite-3-2b-instruct-8k-max-tokens": (0.10, 0.10),
    "wxai-granite-3-8b-instruct-8k-max-tokens": (0.20, 0.20),
}

#: RouteLLM eval CSV model columns (prices as stated in the shared data's PROVENANCE.md).
ROUTELLM_PRICES: dict[str, PricePair] = {
    "gpt-4-1106-preview": (10.00, 30.00),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": (0.60, 0.60),
}

DEFAULT_PRICES: dict[str, PricePair] = {**SPROUT_PRICES, **ROUTELLM_PRICES}


def _pair(model: str, value: Any) -> PricePair:
    given = value
    if isinstance(value, Mapping):
        missing = [k for k in ("input", "output") if k not in value]
        if missing:
            raise ValueError(f"prices[{model!r}] lacks {missing}; give {{'input': x, 'output': y}} (USD per 1M tokens)")
        value = (value["input"], value["output"])
    # float() would read a string's characters ('35' -> 3.0, 5.0) and a bool as 1.0 / 0.0: numbers only
    if (isinstance(value, (str, bytes)) or not isinstance(value, Iterable)
            or any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in value)):
        pair = None
    else:
        try:
            pair = tuple(float(v) for v in value)
        except OverflowError:  # an integer past float's range: refused below as not finite
            pair = (math.inf, math.inf)
    if pair is None or len(pair) != 2:
        raise ValueError(
            f"prices[{model!r}] = {given!r}; expected (input, output) USD per 1M tokens, two numbers, or "
            "{'input': x, 'output': y}"
        )
    pin, pout = pair
    if not (math.isfinite(pin) and math.isfinite(pout)) or pin < 0 or pout < 0:
        raise ValueError(f"prices[{model!r}] = {value!r}; prices must be finite and >= 0")
    return pin, pout


def price_table(overrides: Mapping[str, Any] | None = None) -> dict[str, PricePair]:
    """Defaults merged with ``overrides`` (validated)."""
    table = dict(DEFAULT_PRICES)
    for model, value in (overrides or {}).items():
        table[str(model)] = _pair(str(model), value)
    return table


def lookup(table: Mapping[str, PricePair], models: list[str], where: str) -> list[PricePair]:
    """Prices of ``models`` in order; a clear error naming every model without a price."""
    missing = [m for m in models if m not in table]
    if missing:
        raise ValueError(
            f"{where}: no price for model(s) {missing}; pass load_logs(prices={{model: (input_usd_per_1M, "
            f"output_usd_per_1M)}}) (known models: {sorted(table)})"
        )
    return [table[m] for m in models]


def read_price_file(path: str | None) -> dict[str, Any] | None:
    """A user's price table: JSON or YAML mapping model -> [input, output] USD per 1M tokens (or
    {"input": .., "output": ..}); ``None`` -> None (defaults only)."""
    if not path:
        return None
    import json

    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        table = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:  # ValueError: bad JSON, or not UTF-8
        mark = getattr(exc, "problem_mark", None)  # YAML's: where the parser stopped
        why = f"{exc.problem} at line {mark.line + 1} column {mark.column + 1}" if mark is not None else str(exc)
        raise ValueError(f"{path}: not a {'JSON' if path.endswith('.json') else 'YAML'} price table ({why})") from None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: a price table maps model names to [input, output] USD per 1M tokens")
    for model, value in table.items():
        try:
            _pair(str(model), value)  # validates, naming the model
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return table
