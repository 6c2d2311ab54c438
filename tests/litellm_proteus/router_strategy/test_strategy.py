"""LiteLLM's ``Router`` in-process with the PROTEUS strategy; upstream HTTP mocked by respx.

Deployments are OpenAI-compatible endpoints on fake hosts, so LiteLLM really builds and sends
each request and only the network is replaced."""

from __future__ import annotations

import asyncio
import logging

import httpx
import litellm
import pytest
import respx
from litellm import Router

import litellm_proteus.router_strategy  # noqa: F401  (registers the strategy)
from litellm_proteus.observability import DecisionRecord

HOSTS = {
    "gpt-4-1106-preview": ("http://gpt4.upstream.test/v1", (10e-6, 30e-6)),
    "mistralai/mixtral-8x7b-chat": ("http://mixtral.upstream.test/v1", (0.6e-6, 0.6e-6)),
    "mistralai/mistral-7b-chat": ("http://mistral.upstream.test/v1", (0.2e-6, 0.2e-6)),
}
PLAIN = "http://plain.upstream.test/v1"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def model_list(prices=None):
    prices = {**{slot: p for slot, (_, p) in HOSTS.items()}, **(prices or {})}
    deployments = [
        {
            "model_name": "proteus-auto",
            "litellm_params": {
                "model": f"openai/{slot.split('/')[-1]}",
                "api_base": base,
                "api_key": "sk-upstream",
                "input_cost_per_token": prices[slot][0],
                "output_cost_per_token": prices[slot][1],
            },
            "model_info": {"id": slot.split("/")[-1], "proteus_model": slot},
        }
        for slot, (base, _) in HOSTS.items()
    ]
    deployments.append(
        {"model_name": "plain", "litellm_params": {"model": "openai/plain", "api_base": PLAIN, "api_key": "sk-upstream",
                                                   "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},  # a judge too
         "model_info": {"id": "plain"}}
    )
    return deployments


def make_router(artifact, prices=None, *, redis=None, allow_direct_deployments=False, **kwargs) -> Router:
    args = {"artifact": str(artifact), "tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.7},
            "batching": {"max_batch": 8, "max_wait_ms": 20}, "allow_direct_deployments": allow_direct_deployments}
    if redis is not None:
        args["redis"] = redis
    kwargs.setdefault("disable_cooldowns", True)  # retries must avoid the failed deployment on their own
    kwargs.setdefault("num_retries", 2)
    return Router(model_list=model_list(prices), routing_strategy="proteus", routing_strategy_args=args, **kwargs)


def completion_body(text: str) -> dict:
    return {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


@pytest.fixture(autouse=True)
def httpx_transport(monkeypatch):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx


@pytest.fixture
def upstream():
    with respx.mock(assert_all_called=False) as mock:
        routes = {
            slot: mock.post(f"{base}/chat/completions").mock(return_value=httpx.Response(200, json=completion_body(slot)))
            for slot, (base, _) in HOSTS.items()
        }
        routes["plain"] = mock.post(f"{PLAIN}/chat/completions").mock(
            return_value=httpx.Response(200, json=completion_body("plain"))
        )
        yield routes


@pytest.fixture(scope="module")
def router(steerable_artifact):
    return make_router(steerable_artifact)


async def ask(router, model="proteus-auto", **metadata):
    md = dict(metadata)
    response = await router.acompletion(model=model, messages=QUESTION, metadata=md)
    return response.choices[0].message.content, DecisionRecord.from_dict(md.get("proteus")), md


def test_tau_chooses_the_deployment(router, upstream):
    low, low_decision, _ = asyncio.run(ask(router, tau=0.7))
    high, high_decision, _ = asyncio.run(ask(router, tau=0.85))
    assert low == "mistralai/mixtral-8x7b-chat" and high == "gpt-4-1106-preview"
    assert (low_decision.tau_source, low_decision.model, low_decision.deployment_id) == ("request", low, "mixtral-8x7b-chat")
    assert high_decision.mu > low_decision.mu
    assert upstream["gpt-4-1106-preview"].call_count == 1 and upstream["mistralai/mixtral-8x7b-chat"].call_count == 1


def test_tier_from_metadata_caps_a_raised_tau(router, upstream):
    _, decision, _ = asyncio.run(ask(router, tau=0.9, user_api_key_metadata={"proteus_tier": "economy"}))
    assert (decision.tau, decision.tau_source, decision.tier, decision.capped) == (0.7, "key_metadata", "economy", True)
    assert decision.model == "mistralai/mixtral-8x7b-chat"
    assert decision.headers()["x-proteus-tau-capped"] == "true"


def test_failed_deployment_is_never_repicked(router, upstream):
    upstream["gpt-4-1106-preview"].mock(return_value=httpx.Response(500, json={"error": {"message": "upstream down"}}))
    text, decision, metadata = asyncio.run(ask(router, tau=0.85))
    assert upstream["gpt-4-1106-preview"].call_count == 1  # tried once, then never again
    assert text in ("mistralai/mixtral-8x7b-chat", "mistralai/mistral-7b-chat")
    assert [r["deployment_id"] for r in metadata["previous_models"]] == ["gpt-4-1106-preview"]
    assert decision.excluded == 1 and decision.candidates == 2


def test_a_group_of_one_deployment_tries_it_again_after_a_failure(steerable_artifact, upstream):
    """As LiteLLM's own strategies do: were the failed deployment left out, the retry would have no
    candidate and answer a 429 about cooldowns that do not exist."""
    args = {"artifact": str(steerable_artifact), "tiers": {"standard": 0.85}}
    router = Router(model_list=model_list()[:1], routing_strategy="proteus", routing_strategy_args=args,  # gpt-4 alone
                    num_retries=2, disable_cooldowns=True)
    error = httpx.Response(500, json={"error": {"message": "upstream down"}})
    upstream["gpt-4-1106-preview"].mock(side_effect=[error, httpx.Response(200, json=completion_body("recovered"))])
    text, decision, metadata = asyncio.run(ask(router, tau=0.85))
    assert text == "recovered" and upstream["gpt-4-1106-preview"].call_count == 2
    assert [r["deployment_id"] for r in metadata["previous_models"]] == ["gpt-4-1106-preview"]
    assert (decision.candidates, decision.excluded) == (1, 0)


def test_cooled_down_deployments_are_not_candidates(steerable_artifact, upstream):
    router = make_router(steerable_artifact, disable_cooldowns=False, allowed_fails=0, cooldown_time=300)
    upstream["gpt-4-1106-preview"].mock(return_value=httpx.Response(500, json={"error": {"message": "down"}}))
    asyncio.run(ask(router, tau=0.85))
    text, decision, _ = asyncio.run(ask(router, tau=0.85))
    assert upstream["gpt-4-1106-preview"].call_count == 1  # in cooldown: not offered to PROTEUS again
    assert decision.candidates == 2 and decision.excluded == 0 and text != "gpt-4-1106-preview"


def test_a_price_change_in_the_config_changes_routing(steerable_artifact, upstream):
    cheap_gpt4 = make_router(steerable_artifact, prices={"gpt-4-1106-preview": (1e-8, 1e-8)})
    text, decision, _ = asyncio.run(ask(cheap_gpt4, tau=0.7))
    assert text == "gpt-4-1106-preview" and decision.cost_usd < 1e-5


def test_groups_not_managed_by_proteus_keep_litellms_strategy(router, upstream):
    text, decision, metadata = asyncio.run(ask(router, model="plain", tau=0.9))
    assert text == "plain" and decision is None and "proteus" not in metadata


def test_naming_one_deployment_of_a_proteus_group_is_refused(router, upstream):
    """Deployment ids leak in x-litellm-model-id: asking for one must not skip the key's tier."""
    with pytest.raises(litellm.BadRequestError) as info:
        asyncio.run(ask(router, model="gpt-4-1106-preview", tau=0.7))
    assert "one deployment of the PROTEUS group 'proteus-auto'" in str(info.value)
    assert "allow_direct_deployments" in str(info.value)
    assert sum(route.call_count for route in upstream.values()) == 0


def test_naming_a_deployments_litellm_model_does_not_skip_the_tier(steerable_artifact, upstream):
    """The proxy passes a request for a deployment's litellm_params.model with specific_deployment:
    the router then offers every deployment of that model, a PROTEUS group's included."""
    deployments = model_list()
    deployments.append({"model_name": "gpt-4-direct", "model_info": {"id": "gpt-4-direct"},
                        "litellm_params": {**deployments[0]["litellm_params"], "api_base": PLAIN}})
    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.9, "economy": 0.7}, "default_tier": "economy"}
    router = Router(model_list=deployments, routing_strategy="proteus", routing_strategy_args=args, disable_cooldowns=True)

    async def direct(model: str) -> str:
        response = await router.acompletion(model=model, messages=QUESTION, specific_deployment=True, metadata={})
        return response.choices[0].message.content

    with pytest.raises(litellm.BadRequestError) as info:  # only proteus-auto has Mixtral: refused
        asyncio.run(direct("openai/mixtral-8x7b-chat"))
    assert "one deployment of the PROTEUS group 'proteus-auto'" in str(info.value)
    assert upstream["mistralai/mixtral-8x7b-chat"].call_count == 0
    upstream["plain"].mock(return_value=httpx.Response(200, json=completion_body("gpt-4 through gpt-4-direct")))
    # GPT-4 is also the group gpt-4-direct's: served there, never by proteus-auto's deployment
    assert asyncio.run(direct("openai/gpt-4-1106-preview")) == "gpt-4 through gpt-4-direct"
    assert upstream["gpt-4-1106-preview"].call_count == 0
    allowed = make_router(steerable_artifact, allow_direct_deployments=True)
    response = asyncio.run(allowed.acompletion(model="openai/mixtral-8x7b-chat", messages=QUESTION, specific_deployment=True))
    assert response.choices[0].message.content == "mistralai/mixtral-8x7b-chat"

def test_direct_deployments_when_the_operator_allows_them(steerable_artifact, upstream):
    router = make_router(steerable_artifact, allow_direct_deployments=True)
    text, decision, _ = asyncio.run(ask(router, model="mistral-7b-chat", tau=0.9))
    assert text == "mistralai/mistral-7b-chat" and decision is None


def test_a_group_left_with_only_unscorable_deployments_is_a_clear_server_error(steerable_artifact, upstream):
    from litellm.types.router import Deployment

    router = make_router(steerable_artifact)
    unmapped = {"model_name": "proteus-auto", "model_info": {"id": "typo"},
                "litellm_params": {"model": "openai/gpt-4o", "api_base": HOSTS["gpt-4-1106-preview"][0], "api_key": "k",
                                   "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6}}
    router.add_deployment(Deployment(**unmapped))
    for slot in HOSTS:
        router.delete_deployment(slot.split("/")[-1])
    with pytest.raises(litellm.InternalServerError) as info:
        asyncio.run(ask(router, tau=0.8))
    message = str(info.value)
    assert "PROTEUS cannot route group 'proteus-auto'" in message and "maps to no trained slot" in message
    assert "Try again" not in message


def test_invalid_tau_is_a_bad_request_naming_tau(router, upstream):
    with pytest.raises(litellm.BadRequestError, match=r"tau must be a number in \(0, 1\]"):
        asyncio.run(ask(router, tau="high"))
    assert sum(route.call_count for route in upstream.values()) == 0


def test_concurrent_requests_share_batches(router, upstream):
    async def burst():
        return await asyncio.gather(*(ask(router, tau=0.7 if i % 2 else 0.85) for i in range(12)))

    before = len(router.proteus_strategy.batcher.batch_sizes)
    results = asyncio.run(burst())
    assert [text for text, _, _ in results] == [
        "mistralai/mixtral-8x7b-chat" if i % 2 else "gpt-4-1106-preview" for i in range(12)
    ]
    sizes = router.proteus_strategy.batcher.batch_sizes[before:]
    assert sum(sizes) == 12 and max(sizes) > 1


def test_sync_router_calls_work(router, upstream):
    metadata = {"tau": 0.7}
    response = router.completion(model="proteus-auto", messages=QUESTION, metadata=metadata)
    assert response.choices[0].message.content == "mistralai/mixtral-8x7b-chat"
    assert metadata["proteus"]["tau_source"] == "request"


def test_decisions_run_on_the_model_thread(router, upstream, monkeypatch):
    """All torch work on one thread (see litellm_proteus/model_thread.py), whatever thread asks."""
    import threading

    from litellm_proteus.model_thread import THREAD_NAME
    from litellm_proteus.router_strategy.strategy import _predictors

    threads: list[str] = []
    for predictor in _predictors.values():
        original = predictor.decide

        def recording(*args, _original=original, **kwargs):
            threads.append(threading.current_thread().name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(predictor, "decide", recording)
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata={"tau": 0.8}))
    router.completion(model="proteus-auto", messages=QUESTION, metadata={"tau": 0.8})  # the sync path too
    assert len(threads) == 2 and all(name.startswith(THREAD_NAME) for name in threads)


def test_sync_calls_do_not_leak_redis_connections(steerable_artifact, upstream, redis_server):
    import redis

    from litellm_proteus.tiers import CLIENT_NAME

    raw = redis.Redis.from_url(redis_server.url)
    router = make_router(steerable_artifact, redis={"url": redis_server.url, "cache_ttl_s": 0})
    for _ in range(10):
        metadata = {"tau": 0.7, "user_api_key_hash": "h" * 64}
        router.completion(model="proteus-auto", messages=QUESTION, metadata=metadata)
        assert metadata["proteus"]["tier_source"] == "default"  # Redis was asked (and had no tier)
    assert [c for c in raw.client_list() if c.get("name") == CLIENT_NAME] == []


def test_a_changed_manifest_loads_a_new_predictor_and_the_old_one_is_released(steerable_artifact, tmp_path, upstream):
    import json
    import shutil

    from litellm_proteus.router_strategy.strategy import _batchers, _predictors

    artifact = shutil.copytree(steerable_artifact, tmp_path / "artifact")
    router = make_router(artifact)
    first, first_batcher = router.proteus_strategy.engine.predictor, router.proteus_strategy.batcher
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["calibration"]["margin"] = 0.05  # same weights, new calibration: as a retrain with another margin
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    router.routing_strategy_init(routing_strategy="proteus", routing_strategy_args=router.routing_strategy_args)
    second = router.proteus_strategy.engine.predictor
    assert second is not first and second.manifest.calibration.margin == 0.05
    assert not any(p is first for p in _predictors.values())  # nothing else used it: released
    assert not any(b is first_batcher for b in _batchers.values())
    with pytest.raises(RuntimeError, match="closed"):
        first_batcher.submit_future(None)
    text, decision, _ = asyncio.run(ask(router, tau=0.7))
    assert decision is not None and decision.model == "mistralai/mixtral-8x7b-chat"


def test_feedback_trains_the_deployment_correction_against_the_p_before_correction(steerable_artifact):
    """A logged p already holds its p_correction: the correction's window must see label - (p - p_correction),
    or it would only estimate what is left of the bias and fade while the bias lasts."""
    from litellm_proteus.router_strategy.strategy import ProteusRoutingStrategy

    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.9}, "default_tier": "premium",
            "compliance": {"correction": {"enabled": True, "min_labels": 2, "prior": 1, "refresh_s": 0}}}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    strategy = router.__dict__["async_get_available_deployment"].__self__
    assert isinstance(strategy, ProteusRoutingStrategy)
    record = {"state_key": "tier:premium", "tau": 0.9, "chosen": 0,
              "candidates": [{"deployment_id": "gpt-4", "slot": 0, "model": "m", "cost_usd": 1e-3, "p": 0.6, "p_correction": -0.2}]}
    for score in (1.0, 0.0):
        strategy.on_feedback(record, score)
    n, total, _ = strategy.compliance.residual_stats(["correction:gpt-4"])["correction:gpt-4"]
    assert n == 2 and total == pytest.approx((1.0 - 0.8) + (0.0 - 0.8))
    assert strategy.correction.offsets(["gpt-4"]).routing["gpt-4"] == pytest.approx(2 / 3 * -0.3)


@pytest.mark.parametrize(("alarm_z", "flagged"), [(0.0, True), (5.0, False)])
def test_the_infeasible_flag_counts_only_the_shortfall_the_labels_prove(steerable_artifact, upstream, alarm_z, flagged):
    """Four labels put both deployments 0.4 below their predictions, within their noise (SE 0.29):
    routing lowers their p by it, but a tier is said to be infeasible only on a proven shortfall."""
    args = {"artifact": str(steerable_artifact),
            "compliance": {"min_decisions": 1,
                           "correction": {"min_labels": 2, "prior": 0, "alarm_z": alarm_z, "refresh_s": 0}}}
    router = Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    strategy = router.__dict__["async_get_available_deployment"].__self__
    for deployment in ("gpt-4-1106-preview", "mixtral-8x7b-chat"):
        for residual in (0.1, -0.9, 0.1, -0.9):
            strategy.correction.record(deployment, residual)
    _, first, _ = asyncio.run(ask(router, tau=0.7))
    assert not first.infeasible  # no decision recorded yet
    _, second, _ = asyncio.run(ask(router, tau=0.7))
    assert second.infeasible is flagged
    assert second.headers().get("x-proteus-infeasible") == ("true" if flagged else None)


def test_a_runtime_price_change_is_reported_once_per_deployment_and_price(upstream, caplog):
    from litellm_proteus.artifact import DEFAULT_ARTIFACT_DIR

    router = make_router(DEFAULT_ARTIFACT_DIR)  # the bundled artifact routes some taus by cluster ladders
    strategy = router.proteus_strategy
    assert strategy.engine.has_fixed_points and strategy._prices_reported == {}  # list prices: nothing to say

    def drift_lines():
        return [r.getMessage() for r in caplog.records if "live prices differ" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):
        router.set_model_list(model_list({"mistralai/mistral-7b-chat": (2e-5, 2e-5)}))  # 100x, at runtime
        for _ in range(3):
            asyncio.run(ask(router, tau=0.8))
        assert len(drift_lines()) == 1 and "mistral-7b-chat" in drift_lines()[0] and "retrain" in drift_lines()[0]
        router.set_model_list(model_list({"mistralai/mistral-7b-chat": (4e-5, 4e-5)}))  # a new price: said again
        asyncio.run(ask(router, tau=0.8))
        assert len(drift_lines()) == 2


def test_each_new_set_of_unscorable_deployments_is_named_at_once(steerable_artifact, upstream, caplog):
    from litellm.types.router import Deployment

    router = make_router(steerable_artifact)

    def unmapped(dep_id, model):
        return Deployment(**{"model_name": "proteus-auto", "model_info": {"id": dep_id},
                             "litellm_params": {"model": model, "api_base": PLAIN, "api_key": "k",
                                                "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6}})

    with caplog.at_level(logging.WARNING, logger="litellm_proteus.router"):
        router.add_deployment(unmapped("typo-1", "openai/gpt-4o"))
        asyncio.run(ask(router, tau=0.8))
        router.add_deployment(unmapped("typo-2", "openai/claude-x"))
        asyncio.run(ask(router, tau=0.8))
    said = [r.getMessage() for r in caplog.records if "cannot score" in r.getMessage()]
    assert len(said) == 2 and "typo-2" in said[1]


def test_a_pick_whose_batcher_a_settings_change_released_still_decides(steerable_artifact, upstream):
    """A settings change closes the batcher of the strategy it replaces; a pick of that strategy still
    awaiting its tier then decides alone with its own engine, and the request is answered."""
    import copy

    router = make_router(steerable_artifact, num_retries=0)
    alone = copy.deepcopy(router.routing_strategy_args)
    alone["batching"]["max_batch"] = 7  # a batcher no other router of this module shares: the change closes it
    router.update_settings(routing_strategy_args=alone)
    old = router.proteus_strategy
    looked_up = old._tier

    async def slow_tier(request):
        await asyncio.sleep(0.3)
        return await looked_up(request)

    old._tier = slow_tier

    async def main():
        pending = asyncio.create_task(ask(router, tau=0.7))
        await asyncio.sleep(0.05)
        changed = copy.deepcopy(router.routing_strategy_args)
        changed["batching"]["max_batch"] = 13
        router.update_settings(routing_strategy_args=changed)
        assert router.proteus_strategy is not old
        with pytest.raises(RuntimeError, match="closed"):
            old.batcher.submit_future(None)
        return await pending

    text, decision, _ = asyncio.run(main())
    assert decision is not None and decision.model == "mistralai/mixtral-8x7b-chat" and text


def test_engines_that_count_tokens_or_limit_rule_prices_otherwise_use_their_own_batcher(steerable_artifact):
    """The batcher decides with the engine that created it: a settings change of the token counter or
    the rule price limit must not route with the old engine's."""
    import copy

    router = make_router(steerable_artifact)
    first = router.proteus_strategy.batcher
    for change in ({"prompt_tokens": "litellm"}, {"rule_price_limit": 3.0}):
        args = {**copy.deepcopy(router.routing_strategy_args), **change}
        router.update_settings(routing_strategy_args=args)
        assert router.proteus_strategy.batcher is not first
        first = router.proteus_strategy.batcher
    same = copy.deepcopy(router.routing_strategy_args)
    same["tiers"]["premium"] = 0.91  # not a decision setting of the engine: the batcher is shared
    router.update_settings(routing_strategy_args=same)
    assert router.proteus_strategy.batcher is first


def test_a_request_whose_litellm_params_is_not_an_object_is_still_routed(router, upstream):
    """A client may send any value under ``litellm_params``: reading the decision metadata of a retry
    must not crash the pick (LiteLLM's own routing ignores it)."""
    deployment = asyncio.run(router.async_get_available_deployment(
        model="proteus-auto", messages=QUESTION, request_kwargs={"litellm_params": "x", "litellm_call_id": "c-1",
                                                                 "metadata": {"tau": 0.7}}))
    assert deployment["litellm_params"]["model"]


def test_a_request_overriding_the_routing_strategy_of_another_group_keeps_its_rate_limit(steerable_artifact):
    """For a group PROTEUS does not manage, a per-request ``routing_strategy`` selects as LiteLLM's own
    pick does, its pre-call check included: an rpm limit of 1 refuses the second pick."""
    router = make_router(steerable_artifact)
    plain = next(d for d in router.model_list if d["model_name"] == "plain")
    plain["litellm_params"]["rpm"] = 1
    router.set_model_list(router.model_list)

    async def picks():
        out = []
        for _ in range(3):
            try:
                deployment = await router.async_get_available_deployment(
                    model="plain", messages=QUESTION, request_kwargs={"routing_strategy": "usage-based-routing-v2", "metadata": {}})
                out.append(deployment["model_info"]["id"])
            except litellm.RateLimitError:
                out.append("rate limited")
        return out

    assert asyncio.run(picks()) == ["plain", "rate limited", "rate limited"]
