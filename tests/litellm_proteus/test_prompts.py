"""The text a request routes on (``litellm_proteus.prompts``), for every request shape LiteLLM passes."""

from __future__ import annotations

import pytest

from litellm_proteus.prompts import MAX_DEPTH, MAX_PARTS, content_text, request_text, turns_text

IMAGE = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}


@pytest.mark.parametrize(
    "content, text",
    [
        ("plain", "plain"),
        ([{"type": "text", "text": "a"}, IMAGE, {"type": "text", "text": "b"}], "a\nb"),
        ([{"type": "input_text", "text": "responses"}], "responses"),
        (["from a completions prompt list"], "from a completions prompt list"),  # what LiteLLM builds for /v1/completions
        ([{"type": "input_audio", "input_audio": {}}], ""),
        (None, ""),
        (42, ""),
        ([{"type": "text", "text": 10 ** 5000}, {"type": "text", "text": "kept"}], "kept"),  # past str()'s digit limit
    ],
)
def test_content_text_keeps_text_parts_only(content, text):
    assert content_text(content) == text


def test_chat_messages_join_turns_by_a_blank_line_and_skip_empty_ones():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": [{"type": "text", "text": "what is"}, IMAGE]},
    ]
    assert request_text(messages) == "be brief\n\nwhat is"


@pytest.mark.parametrize(
    "input, text",
    [
        ("a string", "a string"),
        (["a", "b"], "a\n\nb"),  # embeddings / completions lists
        ([{"role": "user", "content": "What is 17*23?"}], "What is 17*23?"),  # Responses API message items
        ([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
          {"type": "function_call_output", "call_id": "c", "output": "{}"}], "hi"),
        ([{"type": "input_text", "text": "bare part"}], "bare part"),
        ([[1, 2, 3]], ""),  # token ids: nothing to embed
        (None, ""),
    ],
)
def test_input_of_embeddings_completions_and_responses(input, text):
    assert request_text(None, input) == text


def test_messages_win_over_input():
    assert request_text([{"role": "user", "content": "m"}], "i") == "m"
    assert turns_text([]) == ""


def nested(depth: int, leaf):
    """``leaf`` inside ``depth`` lists, built without recursion."""
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def test_nested_lists_flatten_in_order():
    assert content_text([["a", [{"type": "text", "text": "b"}]], "c"]) == content_text(["a", "b", "c"]) == "a\nb\nc"


@pytest.mark.parametrize("depth", [250, 900, 100_000])
def test_deep_nesting_is_walked_without_recursion_and_bounded(depth):
    """Content nested far beyond Python's recursion limit: parts past MAX_DEPTH are dropped."""
    content = [nested(depth, "deep"), "shallow"]
    message = [{"role": "user", "content": content}]
    assert request_text(message) == "shallow"
    assert request_text(None, content) == "shallow"
    assert content_text(nested(MAX_DEPTH - 1, "kept")) == "kept"


def test_the_walk_stops_after_max_parts():
    assert content_text(["x"] * (MAX_PARTS + 10)).count("x") == MAX_PARTS - 1  # the outer list is one part


@pytest.mark.parametrize(
    "turns, text",
    [
        ("one string turn", "one string turn"),
        ({"role": "user", "content": "one message"}, "one message"),
        (5, ""),
        ([{"type": ["unhashable"], "text": "t"}, {"type": "text", "text": {"nested": "object"}}], ""),
    ],
)
def test_odd_turn_shapes_give_text_or_nothing_never_an_error(turns, text):
    assert turns_text(turns) == text
