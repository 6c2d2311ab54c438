"""Prompt-token counts for the cost estimate c_i (``engine.DecisionEngine``).

One count per request serves every candidate, so the choice of tokenizer scales the prompt's share
of each c_i alike and never reorders two deployments with equal prices.  In order of preference:

- ``litellm``: ``litellm.token_counter`` (its default tokenizer), what the proxy always has.
- ``encoder``: where LiteLLM is not installed (a GPU host running ``proteus bench`` with the
  trainer's dependencies only), the serving encoder's own Rust ``tokenizers`` tokenizer, already
  loaded by the predictor: offline, no extra memory.  Not tiktoken: its encodings download on first
  use unless LiteLLM's bundled copy is present, and a host without LiteLLM is the one missing it.
- ``chars/4``: without either, characters // 4 (at least 1).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("litellm_proteus.token_count")

TokenCounter = Callable[[Sequence[Mapping[str, Any]] | None, str], int]
COUNTERS = ("litellm", "encoder", "chars/4")


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def count_prompt_tokens(messages: Sequence[Mapping[str, Any]] | None, text: str) -> int:
    """``litellm.token_counter`` of the messages (of ``text`` without them)."""
    import litellm

    try:
        if messages:
            return int(litellm.token_counter(messages=list(messages)))
        return int(litellm.token_counter(text=text))
    except Exception as exc:  # tokenizer trouble must not fail routing: ~4 characters per token
        logger.warning("token counting failed (%s); estimating from length", exc)
        return estimate_tokens(text)


def litellm_importable() -> bool:
    try:
        import litellm  # noqa: F401
    except ImportError:  # also what ``sys.modules['litellm'] = None`` raises
        return False
    return True


def encoder_counter(encoder: Any) -> TokenCounter:
    """Content tokens of the routed text (``DecisionRequest.text``) by the encoder's tokenizer."""

    def count(messages: Sequence[Mapping[str, Any]] | None, text: str) -> int:
        del messages  # ``text`` is the messages' text as the encoder sees it
        return max(1, len(encoder.content_ids([text])[0]))

    return count


def choose_counter(encoder: Any = None) -> tuple[TokenCounter, str]:
    """(counter, its name in COUNTERS): LiteLLM's when importable, else the encoder's, else chars/4."""
    if litellm_importable():
        return count_prompt_tokens, "litellm"
    if encoder is not None and hasattr(encoder, "content_ids"):
        logger.info("LiteLLM is not installed: prompt tokens are counted by the encoder's tokenizer")
        return encoder_counter(encoder), "encoder"
    logger.info("LiteLLM is not installed and no encoder is loaded: prompt tokens estimated as characters / 4")
    return (lambda messages, text: estimate_tokens(text)), "chars/4"
