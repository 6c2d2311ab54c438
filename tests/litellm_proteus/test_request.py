"""Reading a request once (``litellm_proteus.request``): typed values out of LiteLLM's kwargs."""

from __future__ import annotations

import dataclasses

import pytest

from litellm_proteus.config import ProteusConfig
from litellm_proteus.request import (
    RequestShapeError,
    TauError,
    TierChoice,
    check_shape,
    read_request,
    short_repr,
)

CONFIG = ProteusConfig.parse({"tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.7}})
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def test_a_request_is_read_into_one_frozen_value():
    kwargs = {
        "litellm_metadata": {"tau": "0.8"},
        "metadata": {
            "user_api_key_hash": "abc",
            "user_api_key_team_metadata": {"proteus_tier": "economy"},
            "previous_models": [{"deployment_id": "d1"}, {"model_info": {"id": "d2"}}, "junk"],
        },
    }
    request = read_request(CONFIG, MESSAGES, None, kwargs)
    assert request.text == "What is 2+2?" and request.messages == tuple(MESSAGES)
    assert (request.tau, request.tau_field) == (0.8, "litellm_metadata")
    assert request.metadata_tier == TierChoice("economy", "team_metadata")
    assert request.key_hash == "abc" and request.failed_ids == ("d1", "d2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.tau = 1.0  # type: ignore[misc]


def test_input_requests_and_absent_fields():
    request = read_request(CONFIG, None, ["first", "second"], {"metadata": "not an object"})
    assert request.text == "first\n\nsecond" and request.messages is None
    assert (request.tau, request.metadata_tier, request.key_hash, request.failed_ids) == (None, None, None, ())


@pytest.mark.parametrize("tau", ["abc", float("nan"), 10**400, [0.9], {"v": 0.9}, True])
def test_a_bad_tau_is_a_tau_error(tau):
    with pytest.raises(TauError, match=r"tau must be a number in \(0, 1\]"):
        read_request(CONFIG, MESSAGES, None, {"metadata": {"tau": tau}})


@pytest.mark.parametrize("key", ["Tau", "TAU", " tau"])
def test_a_misspelt_tau_key_is_a_tau_error_naming_the_key_it_is_read_from(key):
    with pytest.raises(TauError, match=rf"metadata has '{key}', not 'tau': the accuracy target is read from metadata\.tau \(lower case\)"):
        read_request(CONFIG, MESSAGES, None, {"metadata": {key: 0.8}})
    both = read_request(CONFIG, MESSAGES, None, {"metadata": {key: 0.8, "tau": 0.9}})
    assert both.tau == 0.9  # the right key wins; the other is the client's own business


@pytest.mark.parametrize(
    "messages, input, field",
    [(5, None, "messages"), ("hi", None, "messages"), ({"role": "user"}, None, "messages"), (None, 5, "input"),
     (None, {"a": 1}, "input")],
)
def test_wrong_shapes_name_their_field(messages, input, field):
    with pytest.raises(RequestShapeError, match=field) as info:
        read_request(CONFIG, messages, input, {})
    assert info.value.field == field
    check_shape(MESSAGES, "a string")  # the right shapes pass


def test_a_client_body_with_no_messages_is_refused_but_the_router_may_get_an_empty_list():
    with pytest.raises(RequestShapeError) as info:
        check_shape([], None, empty_messages=False)
    assert info.value.field == "messages"
    assert str(info.value).startswith("messages must be a non-empty JSON array of messages") and "got an empty array" in str(info.value)
    check_shape([], None)  # LiteLLM's router path


def test_short_repr_survives_what_repr_cannot():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert short_repr(deep).startswith("[[")
    assert short_repr(10**5000) == "<int too large to show>"
    assert len(short_repr("x" * 10_000)) == 80
