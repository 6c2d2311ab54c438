"""The text PROTEUS routes on: one definition for the proxy and for training/evaluation.

The same query must give the same text in both places, because the text is what the encoder embeds
and what ``predictor.mixing_draw`` hashes: a logged conversation routed offline (``proteus eval``)
and the same conversation sent to the proxy must take the same operating point.

- a turn is a string, or a message ``{"role": ..., "content": ...}`` whose content is a string or a
  list of parts; text parts (``{"type": "text" | "input_text" | "output_text", "text": ...}``, or
  bare strings, as LiteLLM builds for ``/v1/completions`` prompt lists) keep their text, the
  rest (images, audio, tool calls) is dropped;
- turns are joined by a blank line, parts within one turn by a newline; empty ones are skipped;
- content is client input: it is walked iteratively (no recursion), parts nested deeper than
  ``MAX_DEPTH`` lists are dropped and the walk stops after ``MAX_PARTS`` parts, so no body can
  exhaust the stack or the CPU.  Real conversations are far inside both bounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

TURN_SEPARATOR = "\n\n"
PART_SEPARATOR = "\n"
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
MAX_DEPTH = 32  # list nesting kept within one message's content
MAX_PARTS = 100_000  # parts (lists, dicts, strings) visited per call


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        kind, text = part.get("type", "text"), part.get("text")
        if isinstance(kind, str) and kind in TEXT_PART_TYPES and isinstance(text, (str, int, float)) and text:
            try:
                return str(text)  # a nested object is not text (and its repr could recurse)
            except ValueError:  # an int past Python's 4,300-digit string limit: no text to route on
                return ""
    return ""


def content_text(content: Any) -> str:
    """The text of one message's ``content`` (a string, a list of parts, or one part).

    Nested lists flatten in order: ``[["a"], "b"]`` reads like ``["a", "b"]``."""
    texts: list[str] = []
    stack: list[tuple[Any, int]] = [(content, 0)]  # (node, list depth), popped last-in first-out
    visited = 0
    while stack and visited < MAX_PARTS:
        node, depth = stack.pop()
        visited += 1
        if isinstance(node, (list, tuple)):
            if depth < MAX_DEPTH:
                stack.extend((child, depth + 1) for child in reversed(node))
            continue
        text = _part_text(node)
        if text:
            texts.append(text)
    return PART_SEPARATOR.join(texts)


def turn_text(turn: Any) -> str:
    """One turn: a message's content text, a bare string, or a bare content part (Responses API)."""
    if isinstance(turn, Mapping) and "content" in turn:
        return content_text(turn.get("content"))
    return content_text(turn)


def turns_text(turns: Iterable[Any]) -> str:
    if isinstance(turns, (str, Mapping)) or not isinstance(turns, Iterable):
        return turn_text(turns)
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
