"""The text PROTEUS routes on: one definition for the proxy and for training/evaluation.

The same query must give the same text in both places, because the text is what the encoder embeds
and what ``predictor.mixing_draw`` hashes: a logged conversation routed offline (``proteus eval``)
and the same conversation sent to the proxy must take the same operating point.

- a turn is a string, or a message ``{"role": ..., "content": ...}`` whose content is a string or a
  list of parts; text parts (``{"type": "text" | "input_text" | "output_text", "text": ...}``, or
  bare strings, as LiteLLM builds for ``/v1/completions`` prompt lists) keep their text, the
  rest (images, audio, tool calls) is dropped;
- turns are joined by a blank line, parts within one turn by a newline; empty ones are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TURN_SEPARATOR = "\n\n"
PART_SEPARATOR = "\n"
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def content_text(content: Any) -> str:
    """The text of one message's ``content`` (a string, a list of parts, or one part)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        return str(content.get("text") or "") if content.get("type", "text") in TEXT_PART_TYPES else ""
    if isinstance(content, (list, tuple)):
        return PART_SEPARATOR.join(t for t in (content_text(part) for part in content) if t)
    return ""


def turn_text(turn: Any) -> str:
    """One turn: a message's content text, a bare string, or a bare content part (Responses API)."""
    if isinstance(turn, Mapping) and "content" in turn:
        return content_text(turn.get("content"))
    return content_text(turn)


def turns_text(turns: Iterable[Any]) -> str:
    return TURN_SEPARATOR.join(t for t in (turn_text(turn) for turn in turns) if t)


def request_text(messages: Iterable[Any] | None = None, input: Any = None) -> str:
    """What a request routes on: its ``messages`` (chat), else its ``input`` (a string, or a list of
    strings or Responses-API items, for embeddings, completions and responses)."""
    if messages:
        return turns_text(messages)
    if isinstance(input, str):
        return input
    if isinstance(input, (list, tuple)):
        return turns_text(input)
    return ""
