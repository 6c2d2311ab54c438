"""The proxy hook without a proxy: tau validation (HTTP 400), anti-forgery, decision headers."""

from __future__ import annotations

import asyncio

import pytest
from litellm import Router
from litellm.proxy._types import ProxyException

from litellm_proteus.observability import DecisionRecord
from litellm_proteus.router_strategy import proteus_hook

DEPLOYMENTS = [
    {"model_name": "proteus-auto", "litellm_params": {"model": "openai/gpt-4-1106-preview", "mock_response": "a",
                                                      "api_key": "x", "input_cost_per_token": 1e-5, "output_cost_per_token": 3e-5}},
    {"model_name": "plain", "litellm_params": {"model": "openai/plain", "mock_response": "b", "api_key": "x"}},
]
RECORD = DecisionRecord(
    model_group="proteus-auto", deployment_id="d1", model="gpt-4-1106-preview", tau=0.7, tau_requested=0.95,
    tau_source="redis", tier="economy", tier_source="redis", mu=0.25, clamped=False, capped=True, candidates=3,
    excluded=0, prompt_tokens=12, cost_usd=0.003, latency_ms=4.0,
)


@pytest.fixture(scope="module", autouse=True)
def router(steerable_artifact):
    return Router(model_list=DEPLOYMENTS, routing_strategy="proteus", routing_strategy_args={"artifact": str(steerable_artifact)},
                  model_group_alias={"auto": "proteus-auto"})


def pre_call(data):
    return asyncio.run(proteus_hook.async_pre_call_hook(user_api_key_dict=None, cache=None, data=data, call_type="acompletion"))


@pytest.mark.parametrize("tau", ["abc", float("nan"), 0, -1, 1.2, True])
def test_bad_tau_is_http_400_naming_tau(tau):
    with pytest.raises(ProxyException) as info:
        pre_call({"model": "proteus-auto", "metadata": {"tau": tau}})
    assert info.value.code == "400" and info.value.type == "invalid_request_error"
    assert info.value.param == "tau" and "(0, 1]" in info.value.message


@pytest.mark.parametrize("field", ["metadata", "litellm_metadata"])
def test_a_bad_tau_error_names_the_field_that_sent_it(field):
    with pytest.raises(ProxyException) as info:
        pre_call({"model": "proteus-auto", field: {"tau": "abc"}})
    assert info.value.message.startswith(f"invalid {field}.tau: ")


def test_aliases_are_managed_and_other_groups_are_left_alone():
    with pytest.raises(ProxyException):
        pre_call({"model": "auto", "litellm_metadata": {"tau": "x"}})
    data = {"model": "plain", "metadata": {"tau": "x", "previous_models": [{"deployment_id": "d"}]}}
    assert pre_call(data) is data and data["metadata"] == {"tau": "x", "previous_models": [{"deployment_id": "d"}]}


@pytest.mark.parametrize("metadata", ["tau=0.8", [0.8], 0.8])
def test_metadata_that_is_not_an_object_is_http_400_naming_it(metadata):
    with pytest.raises(ProxyException) as info:
        pre_call({"model": "proteus-auto", "metadata": metadata})
    assert (info.value.code, info.value.param) == ("400", "metadata")
    assert "metadata must be a JSON object" in info.value.message


@pytest.mark.parametrize(
    "body, field",
    [({"messages": 5}, "messages"), ({"messages": "hi"}, "messages"), ({"messages": {"role": "user"}}, "messages"),
     ({"messages": [1, 2]}, "messages"), ({"messages": ["hi"]}, "messages"),
     ({"input": 5}, "input"), ({"input": {"text": "hi"}}, "input")],
)
def test_messages_or_input_of_the_wrong_shape_is_http_400_naming_it(body, field):
    with pytest.raises(ProxyException) as info:
        pre_call({"model": "proteus-auto", **body})
    assert (info.value.code, info.value.param, info.value.type) == ("400", field, "invalid_request_error")
    assert info.value.message.startswith(f"{field} must be") or info.value.message.startswith(f"{field}[0] must be")
    deep: list = ["x"]
    for _ in range(900):
        deep = [deep]
    data = {"model": "proteus-auto", "messages": [{"role": "user", "content": deep}], "input": "ok"}
    assert pre_call(data) is data  # deep, but the right shape: routed on its text


@pytest.mark.parametrize("prompt", [5, {"a": 1}, None, [], [1, "a"], [True], [[]], [[1, "x"]], 1.5])
def test_a_completions_prompt_in_none_of_openais_forms_is_http_400_naming_it(prompt):
    """LiteLLM answers these with a 500 (``Unmapped prompt format``) after its retries."""
    data = {"model": "proteus-auto", "prompt": prompt}
    with pytest.raises(ProxyException) as info:
        asyncio.run(proteus_hook.async_pre_call_hook(user_api_key_dict=None, cache=None, data=data, call_type="atext_completion"))
    assert (info.value.code, info.value.param) == ("400", "prompt") and "prompt must be a string" in info.value.message


@pytest.mark.parametrize("prompt", ["Say hi", ["Say hi", "Say bye"], [1, 2, 3], [[1, 2], [3]]])
def test_a_completions_prompt_in_each_of_openais_forms_is_routed(prompt):
    data = {"model": "proteus-auto", "prompt": prompt}
    assert asyncio.run(proteus_hook.async_pre_call_hook(user_api_key_dict=None, cache=None, data=data,
                                                        call_type="atext_completion")) is data


def test_client_sent_retry_breadcrumbs_are_dropped():
    """Only LiteLLM's own retries may shrink the candidate set (see request.failed_deployment_ids)."""
    data = {"model": "proteus-auto", "metadata": {"tau": 0.8, "previous_models": [{"deployment_id": "d"}],
                                                  "request_retry_count": 3}}
    assert pre_call(data)["metadata"] == {"tau": 0.8}


def test_a_request_that_may_fall_back_to_proteus_is_checked_too():
    with pytest.raises(ProxyException) as info:
        pre_call({"model": "plain", "metadata": {"tau": 2}, "fallbacks": ["proteus-auto"]})
    assert info.value.param == "tau"
    with pytest.raises(ProxyException):
        pre_call({"model": "plain", "metadata": {"tau": 2}, "fallbacks": [{"model": "auto"}]})
    assert pre_call({"model": "plain", "metadata": {"tau": 2}, "fallbacks": ["plain"]})["metadata"] == {"tau": 2}


def test_client_cannot_plant_a_decision():
    data = {"model": "proteus-auto", "metadata": {"tau": 0.8, "proteus": RECORD.to_dict()}}
    assert pre_call(data) is data and "proteus" not in data["metadata"]


@pytest.mark.parametrize("model", ["proteus-auto", "plain"])
@pytest.mark.parametrize("field", ["metadata", "litellm_metadata"])
def test_every_metadata_field_the_plugin_sets_is_dropped_from_a_client_request(model, field):
    from litellm_proteus.router_strategy.hook import PLUGIN_METADATA_KEYS
    from litellm_proteus.router_strategy.serving_log import _is_shadow_call

    assert set(PLUGIN_METADATA_KEYS) == {"proteus", "proteus_shadow_of"}
    forged = {"proteus": RECORD.to_dict(), "proteus_shadow_of": "someone-elses-call", "tau": 0.8}
    data = {"model": model, field: dict(forged), "messages": [{"role": "user", "content": "hi"}]}
    assert _is_shadow_call(data)  # what the client wanted: its request exempt from shadow sampling
    assert pre_call(data) is data and data[field] == {"tau": 0.8}
    assert not _is_shadow_call(data)


def test_headers_come_from_the_routers_decision():
    headers = asyncio.run(proteus_hook.async_post_call_response_headers_hook(
        data={"metadata": {"proteus": RECORD.to_dict()}}, user_api_key_dict=None, response=object()))
    assert headers == {
        "x-proteus-tau": "0.7", "x-proteus-tau-source": "redis", "x-proteus-tier": "economy", "x-proteus-mu": "0.2500",
        "x-proteus-model": "gpt-4-1106-preview", "x-proteus-delta": "0.0000", "x-proteus-tau-capped": "true", "x-proteus-tau-requested": "0.95",
    }
    assert asyncio.run(proteus_hook.async_post_call_response_headers_hook(
        data={"metadata": {}}, user_api_key_dict=None, response=object())) is None


def test_an_error_response_says_what_was_asked_and_which_pick_failed_not_what_answered():
    """LiteLLM's failure path calls the hook with no response: every attempt failed."""
    headers = asyncio.run(proteus_hook.async_post_call_response_headers_hook(
        data={"metadata": {"proteus": RECORD.to_dict()}}, user_api_key_dict=None, response=None))
    assert headers == {
        "x-proteus-tau": "0.7", "x-proteus-tau-source": "redis", "x-proteus-tier": "economy", "x-proteus-delta": "0.0000",
        "x-proteus-tau-capped": "true", "x-proteus-tau-requested": "0.95", "x-proteus-failed": "gpt-4-1106-preview",
    }
