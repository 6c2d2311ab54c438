"""Prompt-token counts for the cost estimate c_i (``engine.DecisionEngine``), by ``prompt_tokens``.

One count per request serves every candidate, so the counter scales the prompt's share of each c_i
alike and never reorders two deployments with equal prices.

- ``chars`` (default): ceil(characters / ``CHARS_PER_TOKEN``) of the routing text.  Training
  estimated every logged prompt and the artifact's ``avg_output_tokens`` the same way, so live c_i
  stay in the units the artifact's cost bounds were fitted in; no tokenizer is loaded.
- ``litellm``: ``litellm.token_counter`` (its default tokenizer, cl100k_base: ~31 MiB per worker on
  the first call).  Only the proxy counts this way, and it always has LiteLLM; ``chars`` needs no
  LiteLLM (``proteus bench`` on a host with the trainer's dependencies only: its engine counts ``chars``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .costs import CHARS_PER_TOKEN

logger = logging.getLogger("litellm_proteus.token_count")

TokenCounter = Callable[[Sequence[Mapping[str, Any]] | None, str], int]


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]] | None, text: str) -> int:
    """ceil(characters / CHARS_PER_TOKEN) of the routing text (at least 1): training's estimate."""
    del messages  # ``text`` is the messages' text as the encoder sees it
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def count_prompt_tokens(messages: Sequence[Mapping[str, Any]] | None, text: str) -> int:
    """``litellm.token_counter`` of the messages (of ``text`` without them)."""
    import litellm

    try:
        if messages:
            return int(litellm.token_counter(messages=list(messages)))
        return int(litellm.token_counter(text=text))
    except Exception as exc:  # tokenizer trouble must not fail routing
        logger.warning("token counting failed (%s); estimating from length", exc)
        return estimate_prompt_tokens(messages, text)


COUNTERS: dict[str, TokenCounter] = {"chars": estimate_prompt_tokens, "litellm": count_prompt_tokens}


def choose_counter(name: str) -> TokenCounter:
    """The counter for ``prompt_tokens: name``."""
    if name not in COUNTERS:
        raise ValueError(f"prompt_tokens={name!r}: must be one of {sorted(COUNTERS)}")
    if name == "litellm":  # fail at start-up, not on every request
        try:
            import litellm  # noqa: F401
        except ImportError as exc:
            raise ValueError("prompt_tokens='litellm' needs LiteLLM installed; use prompt_tokens='chars'") from exc
    return COUNTERS[name]
