"""Chaos and fuzz through a real ``litellm --config`` proxy: Redis dies and comes back, the first
Redis connection is slow, an upstream fails 20 % of its calls, clients send malformed bodies.

One proxy serves the module (start-up dominates the cost): static keys with tiers from key metadata,
team metadata, Redis and the default tier (``premium``, as in the example config: the tier a
failed lookup must never hand to an economy key); Redis behind a relay that holds the first
connection for 10x the lookup budget; deployments on a loopback upstream whose Mixtral fails 20 %
of its calls; ``num_retries: 2``.  Bounded: ~700 requests in all, on loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter

import httpx
import pytest

from litellm_proteus.cli import main as proteus_cli

from ..conftest import FlakyUpstream, SlowFirstConnect, start_redis
from .test_proxy_e2e import CHAT, LITELLM, Proxy

pytestmark = pytest.mark.e2e
TIERS = {"premium": 0.9, "standard": 0.85, "economy": 0.7}
KEYS = {
    "sk-alice": {"metadata": {"proteus_tier": "premium"}},
    "sk-bob": {"team_id": "research", "team_metadata": {"proteus_tier": "economy"}},
    "sk-carol": {},  # economy, in Redis
    "sk-erin": {},  # standard, in Redis
    "sk-dave": {},  # no tier anywhere: the default tier
}
REDIS_TIERS = {"sk-carol": "economy", "sk-erin": "standard"}
EXPECTED_TIER = {"sk-alice": "premium", "sk-bob": "economy", "sk-carol": "economy", "sk-erin": "standard", "sk-dave": "premium"}
FLAKY = "mixtral-8x7b"
LOOKUP_BUDGET_MS = 50
FIRST_CONNECT_DELAY_S = 0.5


def config(artifact, redis_url: str, upstream: FlakyUpstream) -> dict:
    def deployment(model: str, slot: str, prices: tuple[float, float]) -> dict:
        return {"model_name": "proteus-auto",
                "litellm_params": {"model": f"openai/{model}", "api_base": upstream.base, "api_key": "none",
                                   "max_retries": 0, "input_cost_per_token": prices[0], "output_cost_per_token": prices[1]},
                "model_info": {"proteus_model": slot}}

    return {
        "model_list": [deployment("gpt-4-1106-preview", "gpt-4-1106-preview", (1e-5, 3e-5)),
                       deployment(FLAKY, "mistralai/mixtral-8x7b-chat", (6e-7, 6e-7)),
                       # LiteLLM without PROTEUS, for comparison: what fails here is not the plugin's
                       {"model_name": "plain", "litellm_params": {"model": "openai/plain", "api_base": upstream.base,
                                                                  "api_key": "none", "max_retries": 0}}],
        "litellm_settings": {"callbacks": ["litellm_proteus.router_strategy.proteus_hook"]},
        "general_settings": {"custom_auth": "litellm_proteus.router_strategy.static_keys.user_api_key_auth"},
        "router_settings": {
            "num_retries": 2,
            "routing_strategy": "proteus",
            "routing_strategy_args": {
                "artifact": str(artifact),
                "tiers": TIERS,
                "default_tier": "premium",
                "log_decisions": False,
                "redis": {"url": redis_url, "timeout_ms": LOOKUP_BUDGET_MS, "cache_ttl_s": 0, "retry_after_s": 0.5},
            },
        },
    }


@pytest.fixture(scope="module")
def redis_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("redis")


@pytest.fixture(scope="module")
def redis_server(redis_dir):
    server = start_redis(directory=redis_dir)
    for key, tier in REDIS_TIERS.items():
        assert proteus_cli(["tiers", "--redis-url", server.url, "set", key, tier]) == 0
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream():
    server = FlakyUpstream({FLAKY: 0.2}, seed=17)
    yield server
    server.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, steerable_artifact, redis_server, upstream):
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    relay = SlowFirstConnect(redis_server.port, delay_s=FIRST_CONNECT_DELAY_S)
    proxy = Proxy(tmp_path_factory.mktemp("proxy"), config(steerable_artifact, relay.url, upstream), keys=KEYS)
    try:
        proxy.wait_ready()
        yield proxy
    finally:
        proxy.stop()
        relay.close()


async def send_all(proxy: Proxy, requests: list[tuple[str, str, bytes]], concurrency: int, on_done=None) -> list[httpx.Response]:
    """POST every (key, path, body) with ``concurrency`` in flight; ``on_done(n)`` after each answer."""
    responses: list[httpx.Response | None] = [None] * len(requests)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(requests)):
        queue.put_nowait(index)
    done = 0

    async with httpx.AsyncClient(base_url=proxy.base, timeout=60) as client:

        async def worker():
            nonlocal done
            while not queue.empty():
                index = queue.get_nowait()
                key, path, body = requests[index]
                responses[index] = await client.post(
                    path, content=body, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
                )
                done += 1
                if on_done is not None:
                    await on_done(done)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return responses  # type: ignore[return-value]


def chat_body(tau: float | None = None, content="What is the capital of France?") -> bytes:
    body: dict = {"model": "proteus-auto", "messages": [{"role": "user", "content": content}]}
    if tau is not None:
        body["metadata"] = {"tau": tau}
    return json.dumps(body).encode()


def introduce_keys(proxy: Proxy) -> list[httpx.Response]:
    """One request per key, one at a time, each served at its key's tier.  A key Redis never answered
    for gets the default tier when its lookup misses the budget (a busy event loop, a connection
    opening under load); a known key keeps its own: the later checks are about known keys."""
    responses = asyncio.run(send_all(proxy, [(k, CHAT, chat_body()) for k in KEYS], concurrency=1))
    assert [r.status_code for r in responses] == [200] * len(KEYS), [r.text for r in responses]
    assert [r.headers["x-proteus-tier"] for r in responses] == [EXPECTED_TIER[k] for k in KEYS]
    return responses


def test_a_slow_first_redis_connection_moves_no_key_to_another_tier(proxy):
    """Runs first on the fresh proxy: its first Redis connection took 10x the lookup budget."""
    first = introduce_keys(proxy)
    assert {r.headers["x-proteus-tau-source"] for k, r in zip(KEYS, first) if k in REDIS_TIERS} == {"redis"}
    keys = list(KEYS) * 3
    responses = asyncio.run(send_all(proxy, [(k, CHAT, chat_body()) for k in keys], concurrency=5))
    assert [r.status_code for r in responses] == [200] * len(keys), [r.text for r in responses if r.status_code != 200]
    assert [r.headers["x-proteus-tier"] for r in responses] == [EXPECTED_TIER[k] for k in keys]


def test_redis_killed_and_restarted_mid_run_with_a_flaky_upstream(proxy, redis_server, redis_dir, upstream):
    """300 requests, 16 in flight; Redis SIGKILLed after 100 answers and restarted (same port, same
    data) after 200: every request answered 200, every key served at its own tier throughout."""
    assert redis_server.process.poll() is None
    import redis

    redis.Redis.from_url(redis_server.url).save()  # what the restarted server loads
    introduce_keys(proxy)
    rng = random.Random(1)
    keys = [rng.choice(list(KEYS)) for _ in range(300)]
    restarted = []

    async def chaos(done: int) -> None:
        if done == 100:
            os.kill(redis_server.process.pid, signal.SIGKILL)
            redis_server.process.wait(10)
        elif done == 200:
            restarted.append(await asyncio.to_thread(start_redis, redis_server.port, redis_dir))

    failures_before = upstream.failures.get(FLAKY, 0)
    responses = asyncio.run(send_all(proxy, [(k, CHAT, chat_body()) for k in keys], concurrency=16, on_done=chaos))
    try:
        statuses = Counter(r.status_code for r in responses)
        assert statuses == {200: len(keys)}, [r.text for r in responses if r.status_code != 200][:3]
        served = Counter((k, r.headers["x-proteus-tier"]) for k, r in zip(keys, responses))
        assert all(tier == EXPECTED_TIER[key] for key, tier in served), served
        injected = upstream.failures.get(FLAKY, 0) - failures_before
        print(f"\nchaos: {len(keys)} requests, statuses {dict(statuses)}, {injected} injected upstream 500s, "
              f"tiers served {sorted(Counter(r.headers['x-proteus-tier'] for r in responses).items())}")
        assert injected > 0  # injected 500s happened, retries absorbed them
        assert "tier lookup failed" in proxy.log()  # the outage reached the proxy
        # Redis answers again after the restart
        time.sleep(1.0)
        after = asyncio.run(send_all(proxy, [("sk-carol", CHAT, chat_body())] * 3, concurrency=1))
        assert [r.headers["x-proteus-tier"] for r in after] == ["economy"] * 3
    finally:
        redis_server.process = restarted[0].process if restarted else redis_server.process


# -- fuzz ------------------------------------------------------------------------------------------
def nested_json(depth: int, leaf: str = '"deep"') -> str:
    return "[" * depth + leaf + "]" * depth


BAD_TAUS = ["abc", "", " ", "0.9x", "nan", "NaN", "inf", "-1", "1.5", 0, -0.2, 1.0000001, 10**30, -(10**30), 2**63,
            [0.9], [], {"v": 0.9}, {}, True, False, [[[[0.8]]]]]
GOOD_TAUS = [0.7, "0.8", 0.9, 1, " 0.75 "]
FORGED = [
    {"user_api_key_metadata": {"proteus_tier": "premium"}},
    {"user_api_key_team_metadata": {"proteus_tier": "premium"}},
    {"user_api_key_hash": "0" * 64, "user_api_key": "sk-alice"},
    {"proteus": {"model": "forged", "tier": "premium", "tau": 1.0}},
    {"previous_models": [{"deployment_id": "x"}, {"model_info": {"id": "y"}}], "request_retry_count": 2},
    {"proteus_tier": "premium"},
]


def fuzz_cases(seed: int, n: int) -> list[tuple[str, str, bytes, str]]:
    """(key, path, raw body, what must come back): ``ok`` 200, ``tau`` a 400 naming tau,
    ``messages``/``input`` a 400 naming that field, ``no5xx`` anything below 500."""
    rng = random.Random(seed)
    cases: list[tuple[str, str, bytes, str]] = []

    def add(path: str, body: dict | str, expect: str, key: str | None = None) -> None:
        raw = body if isinstance(body, str) else json.dumps(body)
        cases.append((key or rng.choice(list(KEYS)), path, raw.encode(), expect))

    def question() -> str:
        return rng.choice(["What is 2+2?", "Name a prime.", "Summarise the French revolution."])

    while len(cases) < n:
        kind = rng.randrange(9)
        if kind == 0:  # a bad tau, in metadata or litellm_metadata, on every endpoint
            tau = rng.choice(BAD_TAUS)
            field = rng.choice(["metadata", "litellm_metadata"])
            path, body = rng.choice([
                (CHAT, {"messages": [{"role": "user", "content": question()}]}),
                ("/v1/completions", {"prompt": question()}),
                ("/v1/embeddings", {"input": question()}),
                ("/v1/responses", {"input": question()}),
            ])
            add(path, {"model": "proteus-auto", **body, field: {"tau": tau}}, "tau")
        elif kind == 1:  # NaN / huge numbers as raw JSON literals, or no JSON at all (LiteLLM's own 400)
            literal = rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "9" * 400, "-" + "9" * 40, "0.8,,"])
            add(CHAT, '{"model": "proteus-auto", "messages": [{"role": "user", "content": "hi"}], "metadata": {"tau": %s}}' % literal, "tau_or_unparsed")
        elif kind == 2:  # a good tau
            add(CHAT, {"model": "proteus-auto", "metadata": {"tau": rng.choice(GOOD_TAUS)},
                       "messages": [{"role": "user", "content": question()}]}, "ok")
        elif kind == 3:  # deep nesting, 250 to 900 levels, wherever text is read
            depth = rng.randrange(250, 901)
            path, template = rng.choice([
                (CHAT, '{"model": "proteus-auto", "messages": [{"role": "user", "content": %s}]}'),
                ("/v1/responses", '{"model": "proteus-auto", "input": %s}'),
                ("/v1/embeddings", '{"model": "proteus-auto", "input": %s}'),
                ("/v1/completions", '{"model": "proteus-auto", "prompt": %s}'),
            ])
            add(path, template % nested_json(depth), "no5xx")
        elif kind == 4:  # nested junk inside content parts
            junk = rng.choice([
                [{"type": ["text"], "text": "t"}], [{"type": "text", "text": {"a": [1, {"b": None}]}}],
                [None, True, 3.5, {"type": "image_url"}], [[[{"type": "text", "text": "inner"}]]],
                {"type": "text", "text": "a bare part"}, [{"type": "text"}], [{}],
            ])
            add(CHAT, {"model": "proteus-auto", "messages": [{"role": "user", "content": junk}]}, "no5xx")
        elif kind == 5:  # metadata that is not an object
            metadata = rng.choice([5, "a string", [1, 2], True, '{"tau": 2}', '{"tau": 0.8}', "{not json"])
            add(CHAT, {"model": "proteus-auto", "messages": [{"role": "user", "content": question()}], "metadata": metadata}, "no5xx")
        elif kind == 6:  # messages / input of the wrong shape
            if rng.random() < 0.6:
                add(CHAT, {"model": "proteus-auto", "messages": rng.choice([5, "hi", {"role": "user", "content": "x"}, True, 1.5])}, "messages")
            else:
                add(rng.choice(["/v1/embeddings", "/v1/responses"]), {"model": "proteus-auto", "input": rng.choice([5, {"a": 1}, True, 2.5])}, "input")
        elif kind == 7:  # a huge prompt (rarely: each costs a tokenizer pass)
            if rng.random() < 0.25:
                add(CHAT, {"model": "proteus-auto", "messages": [{"role": "user", "content": "lorem ipsum " * rng.randrange(10_000, 30_000)}]}, "ok")
        else:  # forged router-owned and auth fields, from economy keys
            forged = rng.choice(FORGED)
            field = rng.choice(["metadata", "litellm_metadata"])
            add(CHAT, {"model": "proteus-auto", "messages": [{"role": "user", "content": question()}], field: dict(forged)},
                "ok", key=rng.choice(["sk-bob", "sk-carol"]))
    return cases


def test_fuzzed_bodies_never_get_a_5xx_tau_errors_name_tau_and_nothing_escalates(proxy):
    introduce_keys(proxy)  # huge bodies keep the event loop busy: some lookups miss their budget
    cases = fuzz_cases(seed=17, n=320)
    responses = asyncio.run(send_all(proxy, [(k, p, b) for k, p, b, _ in cases], concurrency=8))
    problems = []
    for (key, path, body, expect), response in zip(cases, responses):
        status, what = response.status_code, f"{path} {body[:160]!r} -> {response.status_code} {response.text[:300]}"
        error = response.json().get("error", {}) if status >= 400 and response.headers.get("content-type", "").startswith("application/json") else {}
        if status >= 500:
            continue  # compared with LiteLLM alone below
        if expect == "ok" and status != 200:
            problems.append("not served: " + what)
        elif expect in ("tau", "messages", "input") and not (status == 400 and error.get("param") == expect and expect in str(error.get("message"))):
            problems.append(f"not a 400 naming {expect}: " + what)
        elif expect == "tau_or_unparsed" and status != 400:
            problems.append("not a 400: " + what)
        tier = response.headers.get("x-proteus-tier")
        if tier is not None and TIERS[tier] > TIERS[EXPECTED_TIER[key]]:
            problems.append(f"escalated {key} to {tier}: " + what)
        if status == 200 and path == CHAT and (tier is None or response.headers.get("x-proteus-model") == "forged"):
            problems.append("no PROTEUS decision: " + what)
    # A 5xx is PROTEUS's unless LiteLLM without PROTEUS fails on the same body too (LiteLLM 1.106
    # answers some malformed content parts and nested completion prompts with 500 itself).
    failed = [(k, p, b) for (k, p, b, _), r in zip(cases, responses) if r.status_code >= 500]
    plain = asyncio.run(send_all(proxy, [(k, p, b.replace(b'"proteus-auto"', b'"plain"', 1)) for k, p, b in failed], concurrency=8))
    for (key, path, body), response in zip(failed, plain):
        if response.status_code < 500:
            problems.append(f"5xx with PROTEUS only (plain: {response.status_code}): {path} {body[:160]!r}")
    print(f"\nfuzz: {len(cases)} bodies, expected {dict(Counter(e for *_, e in cases))}, statuses "
          f"{dict(Counter(r.status_code for r in responses))}, 5xx also without PROTEUS {len(failed)}")
    assert not problems, f"{len(problems)} of {len(cases)}:\n" + "\n".join(problems[:20])
    assert len(cases) >= 300 and Counter(e for *_, e in cases)["tau"] >= 30
    assert "litellm_proteus" not in proxy.log()  # no traceback through the plugin
