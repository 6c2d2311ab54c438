"""Per-key tiers in a real redis-server: the store, its failure modes, and ``proteus tiers``."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import yaml

from litellm_proteus.cli import main
from litellm_proteus.config import RedisSettings
from litellm_proteus.tiers import CACHE_MAX_ENTRIES, TierStore, TierStoreError, hash_key, shared_store

from .conftest import SlowFirstConnect, free_port


def test_hash_key_is_litellms_key_hash():
    from litellm.proxy.utils import hash_token

    assert hash_key("sk-alice") == hash_token("sk-alice")
    already = hash_token("sk-alice")
    assert hash_key(already) == already  # hashes pass through unchanged


def test_cli_set_get_list_delete(redis_server, capsys):
    url = ["tiers", "--redis-url", redis_server.url]
    assert main([*url, "set", "sk-alice", "premium"]) == 0
    assert main([*url, "set", hash_key("sk-bob"), "economy"]) == 0
    capsys.readouterr()
    assert main([*url, "get", "sk-alice"]) == 0
    assert capsys.readouterr().out.split() == [hash_key("sk-alice"), "premium"]
    assert main([*url, "list"]) == 0
    listed = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert listed == {hash_key("sk-alice"): "premium", hash_key("sk-bob"): "economy"}
    assert main([*url, "delete", "sk-alice"]) == 0
    assert main([*url, "get", "sk-alice"]) == 1
    assert "default tier applies" in capsys.readouterr().out


def test_cli_rejects_unknown_tiers_listing_the_allowed_ones(redis_server, tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "router_settings": {
                    "routing_strategy": "proteus",
                    "routing_strategy_args": {
                        "tiers": {"gold": 0.9, "bronze": 0.75},
                        "default_tier": "bronze",
                        "redis": {"url": redis_server.url},
                    },
                }
            }
        )
    )
    assert main(["tiers", "--config", str(config), "set", "sk-x", "premium"]) == 2
    err = capsys.readouterr().err
    assert "unknown tier 'premium'" in err and "['bronze', 'gold']" in err
    assert main(["tiers", "set", "sk-x", "gold", "--config", str(config)]) == 0  # Redis URL from the config
    store = TierStore(RedisSettings(url=redis_server.url))
    assert store.get(hash_key("sk-x")) == "gold"


@pytest.mark.parametrize("key", ["", "  "])
@pytest.mark.parametrize("action", [["set", "premium"], ["get"], ["delete"]])
def test_cli_refuses_an_empty_key_before_touching_redis(redis_server, capsys, key, action):
    import redis

    assert main(["tiers", "--redis-url", redis_server.url, action[0], key, *action[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the API key is empty") and "raw key (sk-...) or its LiteLLM hash" in err
    assert redis.Redis.from_url(redis_server.url).keys("*") == []  # no "proteus:tier:" key written


def test_cli_reports_an_unreachable_redis(capsys):
    assert main(["tiers", "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "get", "sk-x"]) == 1
    assert "error: Redis at" in capsys.readouterr().err


def test_async_lookup_and_cache(redis_server):
    store = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=60))
    store.set(hash_key("sk-a"), "premium")

    async def lookups():
        first = await store.aget(hash_key("sk-a"))
        store.set(hash_key("sk-a"), "economy")
        cached = await store.aget(hash_key("sk-a"))
        missing = await store.aget(hash_key("sk-none"))
        return first, cached, missing

    assert asyncio.run(lookups()) == ("premium", "premium", None)
    uncached = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=0))
    assert asyncio.run(uncached.aget(hash_key("sk-a"))) == "economy"


def test_unreachable_or_silent_redis_raises_tier_store_error():
    refused = TierStore(RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_ms=100))
    with pytest.raises(TierStoreError):
        asyncio.run(refused.aget("h"))
    with socket.socket() as silent:  # accepts connections, never answers: the timeout must fire
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        slow = TierStore(RedisSettings(port=silent.getsockname()[1], timeout_ms=100, connect_timeout_ms=100))
        with pytest.raises(TierStoreError, match="did not answer within 100"):
            asyncio.run(slow.aget("h"))


def test_after_a_failure_redis_is_not_asked_again_for_a_while():
    refused = TierStore(RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_ms=100, retry_after_s=60))

    async def twice():
        messages = []
        for _ in range(2):
            with pytest.raises(TierStoreError) as info:
                await refused.aget("h")
            messages.append(str(info.value))
        return messages

    first, second = asyncio.run(twice())
    assert "did not answer within 100" in first and "ConnectionError" in first
    assert "failed recently; asking again in" in second
    eager = TierStore(RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", timeout_ms=100, retry_after_s=0))
    for _ in range(2):
        with pytest.raises(TierStoreError, match="did not answer"):
            asyncio.run(eager.aget("h"))


def test_a_key_of_the_wrong_type_fails_alone_and_is_listed_as_unreadable(redis_server, capsys):
    import redis

    store = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=0))
    store.set(hash_key("sk-good"), "premium")
    raw = redis.Redis.from_url(redis_server.url)
    raw.hset(store.redis_key(hash_key("sk-hash")), "tier", "premium")

    async def lookups():
        with pytest.raises(TierStoreError, match="WRONGTYPE"):
            await store.aget(hash_key("sk-hash"))
        return await store.aget(hash_key("sk-good"))  # Redis answered: no back-off

    assert asyncio.run(lookups()) == "premium"
    assert main(["tiers", "--redis-url", redis_server.url, "list"]) == 0
    listed = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert listed[hash_key("sk-good")] == "premium" and "WRONGTYPE" in listed[hash_key("sk-hash")]


def proteus_connections(raw) -> int:
    from litellm_proteus.tiers import CLIENT_NAME

    return sum(1 for client in raw.client_list() if client.get("name") == CLIENT_NAME)


def test_aclose_ends_the_loops_connections(redis_server):
    import redis

    raw = redis.Redis.from_url(redis_server.url)
    store = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=0))

    async def lookup_then_close():
        await store.aget("h")
        during = proteus_connections(raw)
        await store.aclose()
        return during

    for _ in range(5):  # five private loops, as five sync Router calls make
        assert asyncio.run(lookup_then_close()) == 1
    assert proteus_connections(raw) == 0


def test_a_slow_first_connection_is_not_a_failed_lookup(redis_server):
    """The first connection takes 6x the lookup budget (a cold start on a busy machine): the lookup
    still answers from Redis, and the next lookups keep to the budget on the open connection."""
    TierStore(RedisSettings(url=redis_server.url)).set(hash_key("sk-slow"), "economy")
    relay = SlowFirstConnect(redis_server.port, delay_s=0.3)
    try:
        store = TierStore(RedisSettings(url=relay.url, timeout_ms=50, cache_ttl_s=0))

        async def lookups():
            return [await store.aget(hash_key("sk-slow")) for _ in range(3)]

        assert asyncio.run(lookups()) == ["economy"] * 3
        assert relay.accepted == 1
    finally:
        relay.close()


def test_warm_opens_the_first_connection_before_any_lookup(redis_server):
    import redis

    raw = redis.Redis.from_url(redis_server.url)
    store = TierStore(RedisSettings(url=redis_server.url))

    async def warm_then_count():
        assert store.start_warming() is not None
        await store._warming
        return proteus_connections(raw)

    assert asyncio.run(warm_then_count()) == 1
    assert store.start_warming() is None  # no running loop: nothing to warm
    refused = TierStore(RedisSettings(url=f"redis://127.0.0.1:{free_port()}/0", retry_after_s=60))
    assert asyncio.run(refused.warm()) is False
    with pytest.raises(TierStoreError, match="failed recently"):  # the start-up failure counts
        asyncio.run(refused.aget("h"))


def test_a_known_key_keeps_its_last_tier_while_redis_is_down(redis_server):
    store = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=0, timeout_ms=100))
    store.set(hash_key("sk-known"), "economy")

    async def before():
        return await store.alookup(hash_key("sk-known")), await store.alookup(hash_key("sk-no-tier"))

    fresh, no_tier = asyncio.run(before())
    assert (fresh.tier, fresh.stale) == ("economy", False) and (no_tier.tier, no_tier.stale) == (None, False)
    redis_server.stop()

    async def during():
        return [await store.alookup(hash_key(k)) for k in ("sk-known", "sk-known", "sk-no-tier")]

    known, again, still_none = asyncio.run(during())
    assert (known.tier, known.stale) == ("economy", True) and "ConnectionError" in known.error
    assert (again.tier, again.stale) == ("economy", True) and "failed recently" in again.error
    assert (still_none.tier, still_none.stale) == (None, True)
    with pytest.raises(TierStoreError):  # never read from Redis: the documented default-tier fallback
        asyncio.run(store.alookup(hash_key("sk-unknown")))
    expired = TierStore(RedisSettings(url=redis_server.url, stale_ttl_s=0))
    with pytest.raises(TierStoreError):
        asyncio.run(expired.alookup(hash_key("sk-known")))


def test_the_last_known_tiers_are_bounded(redis_server):
    store = TierStore(RedisSettings(url=redis_server.url))
    for i in range(CACHE_MAX_ENTRIES + 5):
        store._remember(f"h{i}", "economy", 0.0)
    assert len(store._last_known) == CACHE_MAX_ENTRIES
    assert "h0" not in store._last_known and f"h{CACHE_MAX_ENTRIES + 4}" in store._last_known


def test_one_shared_store_per_redis_settings():
    settings = RedisSettings(url="redis://127.0.0.1:1/0")
    assert shared_store(settings) is shared_store(RedisSettings(url="redis://127.0.0.1:1/0"))
    assert shared_store(settings) is not shared_store(settings.model_copy(update={"timeout_ms": 60.0}))


def test_a_store_that_replaces_another_keeps_its_last_known_tiers_and_the_released_one_closes(redis_server):
    import time

    from litellm_proteus import tiers

    settings = RedisSettings(url=redis_server.url, key_prefix="replaced:")
    old = shared_store(settings)
    old._last_known["k"] = ("premium", time.monotonic() + 60)
    old.set("k", "premium")  # opens the store's sync client
    new = shared_store(settings.model_copy(update={"timeout_ms": 61.0}), replaces=old)
    assert new is not old and new._last_known["k"][0] == "premium"  # same Redis and prefix: the same tiers
    other = shared_store(settings.model_copy(update={"key_prefix": "other:", "timeout_ms": 62.0}), replaces=old)
    assert "k" not in other._last_known
    assert tiers.release_unused([s for s in tiers._shared_stores.values() if s is not old]) == 1
    assert old._sync_client is None and old not in tiers._shared_stores.values()


# -- raw keys are never stored ---------------------------------------------------------------------
RAW_KEY = "acme-secret-key-123"  # a custom_auth key: LiteLLM keeps it as it is in user_api_key_hash


def litellm_key_hash(raw: str) -> str:
    """What the proxy puts in a request's ``user_api_key_hash`` for a key its auth returned as
    ``api_key`` (LiteLLM's own ``UserAPIKeyAuth`` and pre-call metadata code)."""
    from litellm.proxy._types import UserAPIKeyAuth
    from litellm.proxy.litellm_pre_call_utils import LiteLLMProxyRequestSetup

    data = {"metadata": {}}
    LiteLLMProxyRequestSetup.add_user_api_key_auth_to_request_metadata(data, UserAPIKeyAuth(api_key=raw), "metadata")
    return data["metadata"]["user_api_key_hash"]


@pytest.mark.parametrize("raw", [
    "sk-alice",  # a virtual key: LiteLLM's SHA-256 hex
    RAW_KEY,  # custom_auth: LiteLLM keeps it raw; PROTEUS hashes it
    "AB" * 32,  # 64 hex digits in upper case: not hash_token's output
    "header.payload.signature",  # a JWT: LiteLLM's hashed-jwt- form
    "Bearer acme-secret-key-123",
])
def test_hash_key_never_returns_a_raw_key_and_agrees_with_litellm(raw):
    from litellm.proxy.utils import hash_token

    from litellm_proteus.tiers import is_key_hash

    proxy_side = litellm_key_hash(raw)  # the request's user_api_key_hash
    assert hash_key(raw) == hash_key(proxy_side)  # `proteus tiers set RAW` and the request meet
    assert is_key_hash(hash_key(raw)) and raw.removeprefix("Bearer ") not in hash_key(raw)
    assert hash_token(raw.removeprefix("Bearer ")) in hash_key(raw)  # LiteLLM's SHA-256


def test_hashes_and_the_master_key_alias_pass_through():
    from litellm.proxy.utils import hash_token

    for already in (hash_token("sk-a"), f"hashed-jwt-{hash_token('a.b.c')}", "litellm_proxy_master_key"):
        assert hash_key(already) == already == hash_key(litellm_key_hash(already))


def test_cli_set_with_a_raw_key_and_a_request_with_it_meet_at_one_redis_key_holding_no_raw_key(redis_server, capsys):
    import redis

    assert main(["tiers", "--redis-url", redis_server.url, "set", RAW_KEY, "premium"]) == 0
    assert RAW_KEY not in capsys.readouterr().out
    # the strategy's lookup: TierStore.alookup(hash_key(request.key_hash)), key_hash from the metadata
    store = TierStore(RedisSettings(url=redis_server.url))
    lookup = asyncio.run(store.alookup(hash_key(litellm_key_hash(RAW_KEY))))
    assert lookup.tier == "premium"
    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert raw.keys("*") == [f"proteus:tier:{hash_key(RAW_KEY)}"]
    assert main(["tiers", "--redis-url", redis_server.url, "list"]) == 0
    out = capsys.readouterr()
    assert RAW_KEY not in out.out + out.err and out.out.split() == [hash_key(RAW_KEY), "premium"]


@pytest.mark.parametrize("key", ["sk-a\nfake-key\tpremium", "sk-a\r", "sk-\x1b[2Ja", "sk-a\u2028b", "sk-a\x85"])
@pytest.mark.parametrize("action", [["set", "premium"], ["get"], ["delete"]])
def test_cli_refuses_a_key_with_control_characters_in_one_line(redis_server, capsys, key, action):
    import redis

    assert main(["tiers", "--redis-url", redis_server.url, action[0], key, *action[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the API key holds a control character (") and err.count("\n") == 1
    assert redis.Redis.from_url(redis_server.url).keys("*") == []


def test_cli_list_prints_one_line_per_key_with_control_characters_escaped(redis_server, capsys):
    import redis

    raw = redis.Redis.from_url(redis_server.url)
    raw.set("proteus:tier:x\nforged-key\tpremium", "economy")  # written by something other than the CLI
    raw.set(f"proteus:tier:{hash_key('sk-b')}", "gold\r\nsk-c\tpremium")
    assert main(["tiers", "--redis-url", redis_server.url, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{hash_key('sk-b')}\t'gold\\r\\nsk-c\\tpremium'", "'x\\nforged-key\\tpremium'\teconomy"]


def test_cli_rehash_moves_tiers_stored_under_raw_keys_to_their_hashes(redis_server, capsys, tmp_path):
    import redis

    raw = redis.Redis.from_url(redis_server.url, decode_responses=True)
    raw.set(f"proteus:tier:{RAW_KEY}", "premium")  # written by redis-cli, say
    raw.set("proteus:tier:other-key", "economy")
    raw.set(f"proteus:tier:{hash_key('other-key')}", "standard")  # its hash has a tier: that one is kept
    raw.set(f"proteus:tier:{hash_key('sk-a')}", "economy")
    raw.set("proteus:tier:litellm_proxy_master_key", "premium")
    raw.set("proteus:tier:shadow:budget:2026-01-01", "0.15")  # another subsystem under the prefix: no tier
    raw.hset("proteus:tier:decision:abc", "owner", "x")
    url = ["tiers", "--redis-url", redis_server.url]
    raw.set(f"proteus:tier:{hash_key('sk-gold')}", "gold")  # a tier the config no longer has
    config = tmp_path / "config.yaml"
    config.write_text("router_settings:\n  routing_strategy: proteus\n  routing_strategy_args:\n"
                      "    tiers: {premium: 0.85, standard: 0.82, economy: 0.79}\n")
    assert main([*url, "--config", str(config), "list"]) == 0
    listed = capsys.readouterr()
    assert "4 key(s) are raw keys" in listed.err and f"3 key(s) name no tier of {config}" in listed.err
    assert f"{hash_key('sk-gold')}\tgold\t(not a tier: the default tier applies)" in listed.out
    assert main([*url, "--config", str(config), "get", "sk-gold"]) == 1  # as a key with no tier: the default applies
    assert f"gold\t(not a tier of {config}" in capsys.readouterr().out
    assert main([*url, "get", "sk-gold"]) == 0  # without --config, the proxy's tiers are unknown: said as stored
    capsys.readouterr()
    assert main([*url, "rehash"]) == 0
    out = capsys.readouterr()
    assert RAW_KEY not in out.out and "2 raw key(s) rehashed; 2 raw key(s) left, their values naming no tier" in out.err
    assert sorted(raw.keys("*")) == sorted(f"proteus:tier:{k}" for k in (
        hash_key(RAW_KEY), hash_key("other-key"), hash_key("sk-a"), hash_key("sk-gold"), "litellm_proxy_master_key",
        "shadow:budget:2026-01-01", "decision:abc"))
    assert raw.get(f"proteus:tier:{hash_key(RAW_KEY)}") == "premium"
    assert raw.get(f"proteus:tier:{hash_key('other-key')}") == "standard"
    assert raw.get("proteus:tier:shadow:budget:2026-01-01") == "0.15"


def test_a_slow_answer_for_a_key_with_no_last_known_tier_is_waited_for(redis_server):
    """A reply later than ``timeout_ms`` (a busy event loop, a Redis stall) is not an outage: a key
    seen for the first time (every key, after a restart) waits up to ``unknown_key_timeout_ms``
    rather than take the default tier, and its timeout opens no circuit for other such keys; a key
    with a last known tier gets it at ``timeout_ms``."""
    import redis

    store = TierStore(RedisSettings(url=redis_server.url, cache_ttl_s=0, timeout_ms=50, retry_after_s=60))
    for key, tier in (("sk-known", "economy"), ("sk-new", "premium"), ("sk-new-2", "premium")):
        store.set(hash_key(key), tier)
    pauser = redis.Redis.from_url(redis_server.url)

    async def lookups():
        known = await store.alookup(hash_key("sk-known"))  # remembered from here on
        pauser.client_pause(300)  # every client's next command waits 300 ms in Redis
        stale = await store.alookup(hash_key("sk-known"))
        started = time.monotonic()
        new = await store.alookup(hash_key("sk-new"))
        waited = time.monotonic() - started
        return known, stale, new, waited, await store.alookup(hash_key("sk-new-2"))

    known, stale, new, waited, second = asyncio.run(lookups())
    assert (known.tier, known.stale) == ("economy", False)
    assert (stale.tier, stale.stale) == ("economy", True)  # served at timeout_ms from its last answer
    assert (new.tier, new.stale) == ("premium", False) and waited > 0.05
    assert (second.tier, second.stale) == ("premium", False)  # the known key's short timeout opened no circuit for it
    silent_budget = TierStore(RedisSettings(url=redis_server.url, timeout_ms=50, unknown_key_timeout_ms=100, retry_after_s=60))
    silent_budget.set(hash_key("sk-late"), "premium")

    async def too_late():
        assert await silent_budget.aget(hash_key("sk-warm")) is None  # the loop's connection is open
        pauser.client_pause(400)
        with pytest.raises(TierStoreError, match="did not answer within 100"):
            await silent_budget.alookup(hash_key("sk-late"))
        with pytest.raises(TierStoreError, match="failed recently"):  # past its own budget: an outage
            await silent_budget.alookup(hash_key("sk-other"))

    asyncio.run(too_late())
    pauser.client_unpause()
    pauser.close()


def test_a_config_that_is_not_yaml_is_an_error_naming_the_file(tmp_path, capsys):
    from litellm_proteus.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n")
    assert main(["tiers", "--config", str(bad), "list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{bad}: not YAML" in err and "Traceback" not in err


def _proxy_config(path, args) -> str:
    path.write_text(yaml.safe_dump({"router_settings": {"routing_strategy": "proteus", "routing_strategy_args": args}}))
    return str(path)


def test_cli_with_a_config_writes_to_the_redis_the_proxy_reads(redis_server, tmp_path, capsys, monkeypatch):
    """The config's redis host and port are where the proxy looks tiers up: $PROTEUS_REDIS_URL (another
    Redis) must not take the tier elsewhere; a config with no redis section looks up no tiers at all."""
    host, port = redis_server.url.split("//")[1].split("/")[0].split(":")
    monkeypatch.setenv("PROTEUS_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    config = _proxy_config(tmp_path / "hostport.yaml", {"tiers": {"gold": 0.9}, "default_tier": "gold",
                                                          "redis": {"host": host, "port": int(port)}})
    assert main(["tiers", "--config", config, "set", "sk-hp", "gold"]) == 0
    assert TierStore(RedisSettings(url=redis_server.url)).get(hash_key("sk-hp")) == "gold"
    none = _proxy_config(tmp_path / "noredis.yaml", {"tiers": {"gold": 0.9}, "default_tier": "gold"})
    assert main(["tiers", "--config", none, "set", "sk-nr", "gold"]) == 2
    err = capsys.readouterr().err
    assert "routing_strategy_args.redis is not set, so the proxy looks up no per-key tiers" in err
    assert TierStore(RedisSettings(url=redis_server.url)).get(hash_key("sk-nr")) is None


def test_cli_refuses_a_malformed_config_and_a_limit_below_one_by_name(redis_server, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("router_settings: [1, 2]\n")
    assert main(["tiers", "--config", str(bad), "list"]) == 2
    assert "router_settings must be a mapping; got list" in capsys.readouterr().err
    for limit in ("0", "-1"):
        assert main(["tiers", "--redis-url", redis_server.url, "list", "--limit", limit]) == 2
        assert f"--limit must be an integer >= 1; got {limit}" in capsys.readouterr().err
    for i in range(3):
        main(["tiers", "--redis-url", redis_server.url, "set", f"sk-lim{i}", "premium"])
    capsys.readouterr()
    assert main(["tiers", "--redis-url", redis_server.url, "list", "--limit", "2"]) == 0
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 2 and "listed the first 2 keys (--limit); there may be more" in out.err
