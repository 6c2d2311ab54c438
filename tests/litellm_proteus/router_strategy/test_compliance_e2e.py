"""The compliance controller through a real ``litellm --config ... --num_workers 2`` proxy and a real
redis-server: both workers read and move one delta; with Redis killed, every request is served."""

from __future__ import annotations

import concurrent.futures

import pytest
import redis

from litellm_proteus.compliance import CLIENT_NAME_PREFIX

from ..conftest import start_redis
from .test_proxy_e2e import LITELLM, Proxy, proxy_config

pytestmark = pytest.mark.e2e
STATE = "proteus:compliance:tier:economy@0.7"  # sk-bob's team is on the economy tier (tau 0.7)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, steerable_artifact):
    if LITELLM is None:
        pytest.skip("the litellm console script is not installed")
    server = start_redis()
    config = proxy_config(steerable_artifact, server.url)
    # Economy routes to Mixtral (p 0.70), below tau + margin = 0.8, so delta rises until GPT-4 (p 0.92)
    # takes over and then falls: every decision moves it.  One decision suffices to start.
    config["router_settings"]["routing_strategy_args"]["compliance"] = {
        "min_decisions": 1, "step": 0.05, "window": 20, "margin": 0.1,
    }
    proxy = Proxy(tmp_path_factory.mktemp("proxy-2w"), config, extra_args=("--num_workers", "2", "--timeout_worker_healthcheck", "120"))
    try:
        proxy.wait_ready()
        yield proxy, server
    finally:
        proxy.stop()
        server.stop()


def worker_pids(client: redis.Redis) -> set[str]:
    return {c["name"][len(CLIENT_NAME_PREFIX):] for c in client.client_list() if c.get("name", "").startswith(CLIENT_NAME_PREFIX)}


def test_both_workers_read_and_move_one_delta_then_survive_redis_dying(shared):
    proxy, server = shared
    client = redis.Redis.from_url(server.url, decode_responses=True)
    # Concurrent requests spread over both workers (bounded: 8 rounds of 16).
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for _ in range(8):
            statuses = list(pool.map(lambda _: proxy.chat("sk-bob").status_code, range(16)))
            assert statuses == [200] * 16
            if len(worker_pids(client)) >= 2:
                break
    assert len(worker_pids(client)) == 2, proxy.log()[-3000:]  # both workers wrote the shared state

    # One request at a time: whichever worker serves it routes at the delta Redis holds, and moves it.
    moved = 0
    for _ in range(12):
        before = float(client.hget(STATE, "delta"))
        response = proxy.chat("sk-bob")
        assert response.status_code == 200
        assert float(response.headers["x-proteus-delta"]) == pytest.approx(before, abs=5e-5)
        moved += float(client.hget(STATE, "delta")) != before
    assert moved >= 10
    assert int(client.llen(STATE + ":decisions")) == 20  # the window: every worker's decisions in one list

    server.stop()  # Redis dies mid-run: no request fails, none hangs
    for _ in range(10):
        response = proxy.chat("sk-bob")
        assert response.status_code == 200 and "x-proteus-delta" in response.headers
    assert "keeps its own controller state" in proxy.log()
