"""The decision log written by the strategy and the hook around LiteLLM's in-process ``Router``
(upstream HTTP mocked by respx): decisions, outcomes of a retried call, in-process feedback."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import threading
import time
import weakref

import httpx
import litellm
import pytest
from prometheus_client import REGISTRY

from litellm_proteus.decision_log import feedback_record, iter_records, join_log
from litellm_proteus.feedback import FeedbackError, send_feedback
from litellm_proteus.router_strategy import proteus_hook

from ..conftest import redis_holds
from .test_strategy import HOSTS, QUESTION, completion_body, model_list, upstream  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def hook_and_transport(monkeypatch):
    monkeypatch.setattr(litellm, "disable_aiohttp_transport", True)  # respx mocks httpx
    monkeypatch.setattr(litellm, "callbacks", [proteus_hook])


def wait_for(condition, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_retried_call_logs_its_decisions_and_outcomes_and_takes_feedback(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.7},
            "decision_log": {"dir": str(directory), "log_prompts": True}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args,
                            num_retries=2, disable_cooldowns=True)
    upstream["gpt-4-1106-preview"].mock(return_value=httpx.Response(500, json={"error": {"message": "down"}}))
    call_id = "call-retried"  # as the proxy does; without one, each attempt gets an id of its own
    records = lambda: [r for r in iter_records(directory) if r["call_id"] == call_id]  # noqa: E731
    succeeded = lambda: any(r["type"] == "outcome" and r["success"] for r in records())  # noqa: E731

    async def ask():
        response = await router.acompletion(
            model="proteus-auto", messages=QUESTION, metadata={"tau": 0.85}, litellm_call_id=call_id
        )
        for _ in range(200):  # LiteLLM runs success callbacks as tasks of this loop
            if succeeded():
                break
            await asyncio.sleep(0.05)
        return response

    response = asyncio.run(ask())
    assert response.choices[0].message.content != "gpt-4-1106-preview"  # the retry went elsewhere
    assert succeeded()
    kinds = [(r["type"], r.get("success")) for r in records()]
    assert kinds.count(("decision", None)) == 2  # the first pick, then the retry's
    assert ("outcome", False) in kinds and ("outcome", True) in kinds
    [row] = [r for r in join_log(directory) if r.call_id == call_id]
    chosen = row.decision["candidates"][row.decision["chosen"]]
    assert chosen["model"] == response.choices[0].message.content and row.outcome["success"] is True
    assert row.decision["prompt"] == "What is the capital of France?" and row.decision["tau_requested"] == row.decision["tau"] == 0.85
    assert {c["model"] for c in row.decision["candidates"]} == set(HOSTS) - {"gpt-4-1106-preview"}
    assert all(0 <= c["p"] <= 1 and c["cost_usd"] > 0 for c in row.decision["candidates"])

    state_key = row.decision["state_key"]
    assert state_key == "tau:0.85"  # a request that sends its own tau has its tau bucket's controller state
    labels = lambda: REGISTRY.get_sample_value("proteus_realised_labels", {"state_key": state_key}) or 0.0  # noqa: E731
    before = labels()
    assert send_feedback(call_id, 0.5)["call_id"] == call_id  # in-process: the live strategy
    assert labels() == before + 1
    assert REGISTRY.get_sample_value("proteus_predicted_accuracy", {"state_key": state_key}) is not None
    with pytest.raises(FeedbackError, match="already has feedback"):
        send_feedback(call_id, 1.0)
    assert wait_for(lambda: any(r["type"] == "feedback" for r in records()))
    assert [r["score"] for r in records() if r["type"] == "feedback"] == [0.5]


def test_a_request_tau_beyond_the_artifacts_range_logs_the_tau_its_state_answers_for(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", disable_cooldowns=True,
                            routing_strategy_args={"artifact": str(steerable_artifact), "decision_log": {"dir": str(directory)},
                                                   "allow_raise": {"standard": True}})
    top = router.proteus_strategy.engine.predictor.taus.hi

    async def ask(tau, call_id):
        await router.acompletion(model="proteus-auto", messages=QUESTION, metadata={"tau": tau}, litellm_call_id=call_id)

    for call_id, tau in (("above", 0.999), ("inside", top)):
        asyncio.run(ask(tau, call_id))
    assert wait_for(lambda: {r["call_id"] for r in iter_records(directory) if r["type"] == "decision"} == {"above", "inside"})
    decisions = {r["call_id"]: r for r in iter_records(directory) if r["type"] == "decision"}
    above, inside = decisions["above"], decisions["inside"]
    assert (above["tau"], above["tau_requested"], above["tau_served"]) == (0.999, 0.999, pytest.approx(top))
    assert above["state_key"] == inside["state_key"] and "tau_served" not in inside  # one state; recorded where clamped


def test_a_decision_the_full_queue_dropped_takes_no_feedback(steerable_artifact, tmp_path, upstream, monkeypatch):  # noqa: F811
    from litellm_proteus.router_strategy.patch import active_strategy

    directory = tmp_path / "log"
    args = {"artifact": str(steerable_artifact), "tiers": {"standard": 0.85},
            "decision_log": {"dir": str(directory), "queue_size": 1}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    writer = active_strategy().decision_log
    disk_free = threading.Event()  # a stalled disk: the writer thread waits in its first file write
    write_files = writer._write_files
    monkeypatch.setattr(writer, "_write_files", lambda lines: disk_free.wait(30) and write_files(lines))
    filler = lambda n: feedback_record(f"filler-{n}", 1.0, "test")  # noqa: E731  any record the readers take
    assert writer.submit(filler(1)) is True  # taken by the writer thread, which then stalls
    assert wait_for(lambda: writer._queue.qsize() == 0)
    assert writer.submit(filler(2)) is True  # the queue (1) is full now
    dropped = writer.dropped

    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id="dropped-call"))
    assert writer.dropped > dropped  # the decision did not fit the queue
    disk_free.set()
    assert writer.flush()  # the queue has room again: only the missing decision can refuse the feedback
    with pytest.raises(FeedbackError) as info:
        send_feedback("dropped-call", 1.0)
    assert info.value.status == 404 and "unknown call_id 'dropped-call'" in str(info.value)
    assert writer.flush()
    assert [r for r in iter_records(directory) if r["call_id"] == "dropped-call"] == []


def test_a_decision_the_writer_cannot_log_takes_no_feedback(steerable_artifact, tmp_path, upstream, monkeypatch):  # noqa: F811
    from litellm_proteus import decision_log

    directory = tmp_path / "log"
    args = {"artifact": str(steerable_artifact), "tiers": {"standard": 0.85}, "decision_log": {"dir": str(directory)}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    fit_line = decision_log.fit_line
    def too_large(record, max_bytes):  # as a decision over max_bytes even without its text
        if record.get("call_id") == "unlogged-call" and record["type"] == "decision":
            return None, record
        return fit_line(record, max_bytes)

    monkeypatch.setattr(decision_log, "fit_line", too_large)
    from litellm_proteus.router_strategy.patch import active_strategy

    writer = active_strategy().decision_log
    dropped = writer.dropped
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id="unlogged-call"))
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, litellm_call_id="logged-call"))
    assert writer.flush()
    assert writer.dropped == dropped + 1
    with pytest.raises(FeedbackError) as info:
        send_feedback("unlogged-call", 1.0)
    assert info.value.status == 404 and "unknown call_id 'unlogged-call'" in str(info.value)
    assert send_feedback("logged-call", 1.0)["call_id"] == "logged-call"
    assert writer.flush()
    assert [r["type"] for r in iter_records(directory) if r["call_id"] == "unlogged-call" and r["type"] != "outcome"] == []


@pytest.mark.parametrize("body, why", [
    (b'{"call_id":' + b"[" * 100_000 + b"]" * 100_000 + b',"score":1}', "nested deeper than the JSON parser goes"),
    (b'{"call_id": "c", "score": ' + b"1" * 5_000 + b"}", "a number of more than 4300 digits"),
    (b'{"call_id": "c", "score": 1', "it is not JSON (Expecting ',' delimiter at line 1 column 28)"),
    (b'[1, 2]', "got list"),
    (b'{"call_id": "x", "score": 0.5, "source": "\xff"}', "it is not UTF-8 JSON (byte 42: invalid start byte)"),
    (b"\xff\xfe{", "it is not UTF-8 JSON (byte 2: truncated data)"),
])
def test_a_feedback_body_that_is_not_a_json_object_is_a_400_saying_why(body, why):
    from litellm.proxy._types import ProxyException
    from starlette.requests import Request

    from litellm_proteus.router_strategy.feedback_route import require_json_object

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    request = Request({"type": "http", "method": "POST", "path": "/proteus/feedback", "headers": []}, receive)
    with pytest.raises(ProxyException) as info:
        asyncio.run(require_json_object(request))
    assert str(info.value.code) == "400" and "body must be a JSON object" in info.value.message
    assert why in info.value.message


def test_the_writer_thread_waits_on_redis_longer_than_the_request_path(tmp_path):
    from litellm_proteus.config import ProteusConfig
    from litellm_proteus.decision_log import WRITE_TIMEOUT_S
    from litellm_proteus.router_strategy.serving_log import shared_decision_log

    config = ProteusConfig.parse({"redis": {"url": "redis://127.0.0.1:1/0", "timeout_ms": 50},
                                  "decision_log": {"dir": str(tmp_path / "timeouts"), "redis_index": True}})
    writer, desk = shared_decision_log(config)
    timeout = lambda client: client.connection_pool.connection_kwargs["socket_timeout"]  # noqa: E731
    assert timeout(desk.redis) == 0.05  # feedback lookups answer a client: the request budget
    assert timeout(writer.redis) == WRITE_TIMEOUT_S > 0.05  # a 512-record pipeline off the request path


# -- retries and fallbacks as the proxy runs them -------------------------------------------------
def failing(route, times: int | None = None, text: str = "") -> None:
    """``route`` answers HTTP 500 (``times`` times, then ``text``; always without ``times``)."""
    error = httpx.Response(500, json={"error": {"message": "upstream down", "type": "server_error"}})
    if times is None:
        route.mock(return_value=error)
    else:
        route.mock(side_effect=[error] * times + [httpx.Response(200, json=completion_body(text))])


def proxy_like_router(artifact, directory, model_list_=None, **router_kwargs):
    args = {"artifact": str(artifact), "tiers": {"premium": 0.9, "standard": 0.85, "economy": 0.7},
            "decision_log": {"dir": str(directory), "log_responses": True}}
    router_kwargs.setdefault("num_retries", 2)
    return litellm.Router(model_list=model_list_ or model_list(), routing_strategy="proteus", routing_strategy_args=args,
                          disable_cooldowns=True, **router_kwargs)


async def proxy_call(router, call_id: str, tau: float = 0.85, **extra) -> tuple[dict, object]:
    """As LiteLLM's proxy calls the router: the request's call id and one logging object shared by
    every attempt (so LiteLLM runs its failure callbacks once); a request that fails ends in the
    proxy's post-call failure hook.  ``extra``: more request fields (``stream``).  Returns (request
    data, response or exception)."""
    from datetime import datetime

    data = {"model": "proteus-auto", "messages": QUESTION, "metadata": {"tau": tau}, "litellm_call_id": call_id, **extra}
    logging_obj, data = litellm.utils.function_setup(original_function="acompletion", rules_obj=litellm.utils.Rules(),
                                                     start_time=datetime.now(), **data)
    data["litellm_logging_obj"] = logging_obj
    try:
        result: object = await router.acompletion(**data)
    except Exception as exc:  # noqa: BLE001  the request's error, as the proxy answers it
        await proteus_hook.async_post_call_failure_hook(request_data=data, original_exception=exc, user_api_key_dict=None)
        result = exc
    for _ in range(100):  # success callbacks run as tasks of this loop
        await asyncio.sleep(0.02)
    return data, result


def outcomes_of(directory, call_id: str) -> list[tuple[str, bool]]:
    from litellm_proteus.router_strategy.patch import active_strategy

    assert active_strategy().decision_log.flush()
    return [(r.get("deployment_id"), r["success"]) for r in iter_records(directory) if r["call_id"] == call_id and r["type"] == "outcome"]


def picks_of(directory, call_id: str) -> list[str]:
    return [r["candidates"][r["chosen"]]["deployment_id"] for r in iter_records(directory)
            if r["call_id"] == call_id and r["type"] == "decision"]


def test_every_failed_attempt_of_a_retried_call_has_its_failure_outcome(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = proxy_like_router(steerable_artifact, directory)
    failing(upstream["gpt-4-1106-preview"])
    failing(upstream["mistralai/mixtral-8x7b-chat"])
    _, response = asyncio.run(proxy_call(router, "retried-twice"))
    assert response.choices[0].message.content == "mistralai/mistral-7b-chat"
    picks = picks_of(directory, "retried-twice")
    assert picks == ["gpt-4-1106-preview", "mixtral-8x7b-chat", "mistral-7b-chat"]
    assert outcomes_of(directory, "retried-twice") == [(picks[0], False), (picks[1], False), (picks[2], True)]
    failures = [r for r in iter_records(directory) if r["type"] == "outcome" and not r["success"]]
    # without log_prompts an error keeps its type, not the upstream's message (it may quote the prompt)
    assert all("upstream down" not in r["error"] and r["error"].startswith("InternalServerError (") for r in failures), failures
    [row] = [r for r in join_log(directory) if r.call_id == "retried-twice"]
    assert row.outcome["success"] is True and row.outcome["deployment_id"] == "mistral-7b-chat"
    assert row.outcome["response"] == "mistralai/mistral-7b-chat"


def test_a_request_whose_every_attempt_failed_has_a_failure_outcome_per_pick(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = proxy_like_router(steerable_artifact, directory)
    for slot in HOSTS:
        failing(upstream[slot])
    _, error = asyncio.run(proxy_call(router, "all-failed"))
    assert isinstance(error, litellm.InternalServerError)
    picks = picks_of(directory, "all-failed")
    assert len(picks) == 3 and outcomes_of(directory, "all-failed") == [(p, False) for p in picks]
    with pytest.raises(FeedbackError) as info:  # no pick answered: a score would charge one that did not
        send_feedback("all-failed", 1.0)
    assert info.value.status == 409 and "not answered by the deployment PROTEUS picked" in str(info.value)


def test_a_fallback_groups_answer_is_no_outcome_of_the_failed_pick(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = proxy_like_router(steerable_artifact, directory, num_retries=1, fallbacks=[{"proteus-auto": ["plain"]}])
    for slot in HOSTS:
        failing(upstream[slot])
    data, response = asyncio.run(proxy_call(router, "fell-back"))
    assert response.choices[0].message.content == "plain"
    picks = picks_of(directory, "fell-back")
    assert len(picks) == 2  # the pick and its retry's
    assert outcomes_of(directory, "fell-back") == [(picks[0], False), (picks[1], False)]  # plain's answer is neither's
    [row] = [r for r in join_log(directory) if r.call_id == "fell-back"]
    assert row.outcome["success"] is False and row.outcome["deployment_id"] == picks[1]
    assert "upstream down" not in row.outcome["error"] and "InternalServerError" in row.outcome["error"]
    headers = asyncio.run(proteus_hook.async_post_call_response_headers_hook(data, None, response))
    assert headers == {"x-proteus-fallback": "plain"}  # no x-proteus-model: the pick did not answer
    with pytest.raises(FeedbackError) as info:  # the score would be plain's answer charged to the pick
        send_feedback("fell-back", 0.0)
    assert info.value.status == 409 and picks[1] in str(info.value)


def test_a_group_of_one_deployment_retries_it_after_a_failure(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = proxy_like_router(steerable_artifact, directory, model_list_=model_list()[:1])  # gpt-4 alone
    failing(upstream["gpt-4-1106-preview"], times=1, text="gpt-4 after a failure")
    data, response = asyncio.run(proxy_call(router, "solo"))
    assert not isinstance(response, Exception), response
    assert response.choices[0].message.content == "gpt-4 after a failure"
    assert upstream["gpt-4-1106-preview"].call_count == 2
    assert picks_of(directory, "solo") == ["gpt-4-1106-preview"] * 2
    assert outcomes_of(directory, "solo") == [("gpt-4-1106-preview", False), ("gpt-4-1106-preview", True)]
    [row] = [r for r in join_log(directory) if r.call_id == "solo"]
    assert row.outcome["success"] is True
    headers = asyncio.run(proteus_hook.async_post_call_response_headers_hook(data, None, response))
    assert headers["x-proteus-model"] == "gpt-4-1106-preview" and "x-proteus-fallback" not in headers
    assert send_feedback("solo", 1.0)["call_id"] == "solo"


def test_a_custom_auth_raw_key_reaches_no_file_and_no_redis_key_and_meets_its_cli_tier(steerable_artifact, tmp_path, upstream, redis_server):  # noqa: F811
    """A ``custom_auth`` key LiteLLM keeps raw in ``user_api_key_hash`` (``acme-secret-key-123``): the
    tier ``proteus tiers set`` gave the raw key applies, and the decision log line, the Redis decision
    index and the tier's Redis key hold its hash only."""
    import redis
    from litellm.proxy._types import UserAPIKeyAuth
    from litellm.proxy.litellm_pre_call_utils import LiteLLMProxyRequestSetup

    from litellm_proteus.cli import main
    from litellm_proteus.router_strategy.patch import active_strategy
    from litellm_proteus.tiers import hash_key

    secret = "acme-secret-key-123"
    assert main(["tiers", "--redis-url", redis_server.url, "set", secret, "premium"]) == 0
    directory = tmp_path / "log"
    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.9, "standard": 0.85},
            "redis": {"url": redis_server.url, "timeout_ms": 500, "cache_ttl_s": 0},
            "decision_log": {"dir": str(directory), "redis_stream": "proteus:decisions"}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    data = {"metadata": {}}  # what the proxy's pre-call step puts in a request authenticated by custom_auth
    LiteLLMProxyRequestSetup.add_user_api_key_auth_to_request_metadata(data, UserAPIKeyAuth(api_key=secret), "metadata")
    assert data["metadata"]["user_api_key_hash"] == secret  # LiteLLM leaves such a key as it is
    metadata = dict(data["metadata"])
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata=metadata, litellm_call_id="raw-key-call"))
    assert (metadata["proteus"]["tier"], metadata["proteus"]["tier_source"]) == ("premium", "redis")
    assert active_strategy().decision_log.flush()
    [decision] = [r for r in iter_records(directory) if r["call_id"] == "raw-key-call" and r["type"] == "decision"]
    assert decision["key_hash"] == hash_key(secret) != secret
    for path in directory.iterdir():
        assert secret.encode() not in path.read_bytes(), path
    client = redis.Redis.from_url(redis_server.url)
    assert client.exists(b"proteus:decision:raw-key-call")  # the decision index entry
    assert redis_holds(client, secret) == []


def test_a_tier_stored_under_a_raw_custom_auth_key_still_applies_with_a_warning(steerable_artifact, upstream, redis_server, caplog):  # noqa: F811
    """redis-cli, or a release that stored keys unhashed, left a tier under the raw key: the request
    keeps that tier (no silent move to the default) and the log says to run ``proteus tiers rehash``."""
    import logging

    import redis
    from litellm.proxy._types import UserAPIKeyAuth
    from litellm.proxy.litellm_pre_call_utils import LiteLLMProxyRequestSetup

    secret = "acme-raw-tier-key"
    redis.Redis.from_url(redis_server.url).set(f"proteus:tier:{secret}", "premium")
    args = {"artifact": str(steerable_artifact), "tiers": {"premium": 0.9, "standard": 0.85},
            "redis": {"url": redis_server.url, "timeout_ms": 500, "cache_ttl_s": 0}}
    router = litellm.Router(model_list=model_list(), routing_strategy="proteus", routing_strategy_args=args)
    data = {"metadata": {}}
    LiteLLMProxyRequestSetup.add_user_api_key_auth_to_request_metadata(data, UserAPIKeyAuth(api_key=secret), "metadata")
    metadata = dict(data["metadata"])
    with caplog.at_level(logging.WARNING):
        asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata=metadata))
    assert (metadata["proteus"]["tier"], metadata["proteus"]["tier_source"]) == ("premium", "redis")
    assert "proteus tiers rehash" in caplog.text and secret not in caplog.text
    # a Redis blip: the key keeps its last known tier, read under the raw key as before
    redis.Redis.from_url(redis_server.url).client_pause(1500)
    blip = dict(data["metadata"])
    asyncio.run(router.acompletion(model="proteus-auto", messages=QUESTION, metadata=blip))
    assert (blip["proteus"]["tier"], blip["proteus"]["tier_source"]) == ("premium", "redis")


def test_concurrent_requests_sharing_a_call_id_each_get_their_own_picks_outcome(steerable_artifact, tmp_path, upstream):  # noqa: F811
    """Clients choose call ids (the proxy takes ``x-litellm-call-id`` as sent): two requests in flight
    with one call id, each with its own logging object, settle only their own picks."""
    directory = tmp_path / "log"
    router = proxy_like_router(steerable_artifact, directory)
    both_picked = asyncio.Event()
    picked = 0

    async def after_both_picks(request):  # each upstream answers once both requests have picked
        nonlocal picked
        picked += 1
        if picked == 2:
            both_picked.set()
        await asyncio.wait_for(both_picked.wait(), 10)
        slot = next(s for s, (base, _) in HOSTS.items() if str(request.url).startswith(base))
        return httpx.Response(200, json=completion_body(slot))

    for slot in HOSTS:
        upstream[slot].mock(side_effect=after_both_picks)

    async def both():
        return await asyncio.gather(proxy_call(router, "shared", tau=0.9), proxy_call(router, "shared", tau=0.7))

    (high, high_response), (low, low_response) = asyncio.run(both())
    picks = {high["metadata"]["proteus"]["deployment_id"], low["metadata"]["proteus"]["deployment_id"]}
    assert len(picks) == 2, picks  # the two taus pick two deployments
    for data, response in ((high, high_response), (low, low_response)):
        assert response.choices[0].message.content.endswith(data["metadata"]["proteus"]["deployment_id"])
    assert sorted(picks_of(directory, "shared")) == sorted(picks)
    assert sorted(outcomes_of(directory, "shared")) == sorted((p, True) for p in picks)  # both answered


def streaming(route, text: str) -> None:
    """``route`` answers a stream (server-sent events): ``text`` word by word, then its usage."""
    chunk = lambda delta, finish=None, **more: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",  # noqa: E731
                                                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **more}
    words = text.split("/")
    events = [chunk({"role": "assistant", "content": words[0]})] + [chunk({"content": "/" + w}) for w in words[1:]]
    events.append(chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)}))
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    route.mock(return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode()))


def streaming_router(steerable_artifact, directory, upstream):
    """``proxy_like_router`` over upstreams that stream their answers."""
    router = proxy_like_router(steerable_artifact, directory)
    for slot in HOSTS:
        streaming(upstream[slot], slot)
    return router


def test_a_fully_read_streams_pick_has_its_success_outcome(steerable_artifact, tmp_path, upstream):  # noqa: F811
    directory = tmp_path / "log"
    router = streaming_router(steerable_artifact, directory, upstream)

    async def read_all():
        data, stream = await proxy_call(router, "streamed", stream=True)
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
        for _ in range(100):  # the stream's success callback runs as a task of this loop
            await asyncio.sleep(0.02)
        return data, text

    data, text = asyncio.run(read_all())
    [pick] = picks_of(directory, "streamed")
    assert text.endswith(pick) and data["metadata"]["proteus"]["deployment_id"] == pick
    assert outcomes_of(directory, "streamed") == [(pick, True)]
    [row] = [r for r in join_log(directory) if r.call_id == "streamed"]
    assert row.outcome["success"] is True and row.outcome["response"] == text


def test_an_abandoned_streams_open_pick_keeps_no_replaced_strategy_alive(steerable_artifact, tmp_path, upstream):  # noqa: F811
    """A stream read in part, then dropped (a client that went away): no callback comes, so its pick
    stays open in the attempt ledger; a settings change hands it to the new strategy, and the replaced
    strategy can go."""
    from litellm_proteus.router_strategy import serving_log

    directory = tmp_path / "log"
    router = streaming_router(steerable_artifact, directory, upstream)

    async def read_one_chunk():
        _, stream = await proxy_call(router, "abandoned", stream=True)
        async for _ in stream:
            break  # the rest is never read

    asyncio.run(read_one_chunk())

    def open_picks():  # the call's open picks in the attempt ledger
        return [a for key, opened in serving_log.attempts._calls.items()
                if (key[0] if isinstance(key, tuple) else key) == "abandoned" for a in opened]

    assert len(open_picks()) == 1
    assert outcomes_of(directory, "abandoned") == []  # no callback came
    replaced = router.proteus_strategy
    old = weakref.ref(replaced)
    changed = copy.deepcopy(replaced.routing_strategy_args)
    changed["decision_log"]["log_prompts"] = True
    router.update_settings(routing_strategy_args=changed)
    new = router.proteus_strategy
    assert new is not replaced and replaced.replaced_by is new
    del replaced
    gc.collect()
    assert old() is None  # the open pick holds no reference to it
    [attempt] = open_picks()
    assert attempt.owner is new  # a late callback would log through the strategy that replaced it
