"""Per-API-key SLA tiers in Redis, and the ``proteus tiers set|get|list|delete|rehash`` command.

Redis holds ``<key_prefix><key hash> -> <tier name>``; a raw API key is never stored (``hash_key``).
The key hash is LiteLLM's (``litellm.proxy.utils.hash_token``: the SHA-256 hex of the raw key), in
the forms LiteLLM puts in a request's ``user_api_key_hash`` (``UserAPIKeyAuth.api_key``):

- a virtual key ``sk-...``: its SHA-256 hex (64 lower-case hex digits);
- the master key: LiteLLM's alias ``litellm_proxy_master_key`` (the key itself never leaves auth);
- a JWT (three dot-separated parts): ``hashed-jwt-<SHA-256 hex>``;
- a ``custom_auth`` key LiteLLM leaves as it is (any other string, e.g. ``acme-secret-key-123``):
  PROTEUS hashes it (SHA-256 hex) wherever it matches or records a key: tier lookups, the decision
  log's ``key_hash``, the Redis decision index.

So ``proteus tiers set <raw key> premium`` and a request authenticated with that raw key meet at the
same Redis key, and a key already in one of these forms passes through unchanged.  (A raw key that is
itself 64 lower-case hex digits is taken for a hash, as LiteLLM's own code takes it: a ``custom_auth``
issuing such keys should return ``hash_token(key)`` as ``api_key``, as ``static_keys`` does.)
The proxy looks tiers up with a bounded timeout (``timeout_ms``); Redis trouble never fails a request:

- each event loop's first connection is opened at proxy start-up (``warm``) and, if a request comes
  first, waited for up to ``connect_timeout_ms``, outside the per-lookup budget: a cold start on a
  busy machine is not a Redis failure;
- answers are cached in-process for ``cache_ttl_s``; each key's last answer is also kept for
  ``stale_ttl_s`` (bounded, least recently used dropped first) and served while Redis is slow or
  down (stale-if-error), so a Redis blip never moves a known key to another tier;
- a key with no last known tier (every key after a restart) waits up to ``unknown_key_timeout_ms``
  for a slow answer (a busy event loop, a Redis stall): its tier is worth a wait, the default tier
  may break its SLA; it gets the default tier, with a warning, when Redis refuses or stays silent
  that long.

``proteus tiers set|get|delete`` refuse a key holding a control character; ``list`` prints such keys
and tiers ``repr``-escaped and warns about raw keys in Redis, which ``rehash`` moves to their hashes;
a request whose raw key has no tier under its hash finds one under the raw key, with a warning
(docs/resilience.md).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import sys
import threading
import time
import unicodedata
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Collection

from .config import DEFAULT_TIERS, ProteusConfigError, RedisSettings, load_config_file

logger = logging.getLogger("litellm_proteus.tiers")
_HEX64 = re.compile(r"[0-9a-f]{64}")  # hash_token's output (fullmatch)
_HASHED_JWT = re.compile(r"hashed-jwt-[0-9a-f]{64}")  # UserAPIKeyAuth's form of a JWT (fullmatch)
MASTER_KEY_ALIAS = "litellm_proxy_master_key"  # litellm.constants.LITELLM_PROXY_MASTER_KEY_ALIAS
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
CACHE_MAX_ENTRIES = 10_000
CLIENT_NAME = "litellm-proteus"  # how the proxy's connections show in Redis's CLIENT LIST


class TierStoreError(RuntimeError):
    """Redis could not answer (down, slow, refused)."""


def is_key_hash(value: str) -> bool:
    """Whether ``value`` is in a form LiteLLM gives a key in ``user_api_key_hash``: a SHA-256 hex
    digest, ``hashed-jwt-<digest>`` or the master key's alias."""
    return bool(_HEX64.fullmatch(value) or _HASHED_JWT.fullmatch(value)) or value == MASTER_KEY_ALIAS


def hash_key(key_or_hash: str) -> str:
    """The key's hash as LiteLLM forms it (``UserAPIKeyAuth._safe_hash_litellm_api_key``: a leading
    ``Bearer `` dropped, a JWT as ``hashed-jwt-<SHA-256>``, any other key its SHA-256 hex), a key
    already in such a form unchanged (``is_key_hash``).  Unlike LiteLLM, a key that is not ``sk-...``
    nor a JWT is hashed too: what this returns is never a raw key (but for 64 hex digits, taken for
    a hash)."""
    key = key_or_hash.strip()
    token = key[7:] if key[:7].lower() == "bearer " else key
    if is_key_hash(token):
        return token
    digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
    if not token.startswith("sk-") and len(token.split(".")) == 3:
        return f"hashed-jwt-{digest}"
    return digest


@dataclass(frozen=True)
class TierLookup:
    tier: str | None  # None: Redis holds no tier for the key
    stale: bool = False  # Redis could not answer: this is the key's last known tier
    error: str = ""  # why Redis could not answer (stale lookups only)


class TierStore:
    def __init__(self, settings: RedisSettings):
        self.settings = settings
        self.timeout = settings.timeout_ms / 1000.0
        self.connect_timeout = settings.connect_timeout_ms / 1000.0
        self.unknown_key_timeout = max(self.timeout, settings.unknown_key_timeout_ms / 1000.0)
        self._async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # Per event loop: the task opening its first connection (kept once it succeeded).
        self._first_connects: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._warming: asyncio.Task | None = None
        self._sync_client: Any = None
        self._cache: dict[str, tuple[str | None, float]] = {}
        self._last_known: OrderedDict[str, tuple[str | None, float]] = OrderedDict()  # key hash -> (tier, expiry)
        # Monotonic times before which Redis is not asked again: after any failure (for keys with a
        # last known tier, served from it), and after an outage (a refused connection, or silence
        # past ``unknown_key_timeout``: for every key).  A reply slower than ``timeout`` is no outage.
        self._down_until = 0.0
        self._unreachable_until = 0.0

    def redis_key(self, key_hash: str) -> str:
        return f"{self.settings.key_prefix}{key_hash}"

    # -- async (the proxy) --------------------------------------------------------------------
    def _async_client(self):
        # redis.asyncio connections belong to one event loop: one client per loop.
        loop = asyncio.get_running_loop()
        client = self._async_clients.get(loop)
        if client is None:
            import redis.asyncio as aioredis

            client = aioredis.Redis.from_url(
                self.settings.connection_url(),
                # Lookups are bounded by asyncio.wait_for(timeout); the socket limits only bound the
                # connection handshake, which may take up to connect_timeout on a busy event loop.
                socket_timeout=self.connect_timeout,
                socket_connect_timeout=self.connect_timeout,
                decode_responses=True,
                retry_on_timeout=False,
                max_connections=self.settings.max_connections,  # a slow Redis must not pile up sockets
                client_name=CLIENT_NAME,
            )
            self._async_clients[loop] = client
        return client

    async def warm(self) -> bool:
        """Open the running loop's first connection now (the proxy calls this at start-up); False,
        with a warning, when Redis cannot be reached (lookups then fall back as documented)."""
        try:
            await self._first_connection()
        except Exception as exc:  # start-up goes on without Redis
            self._down_until = self._unreachable_until = time.monotonic() + self.settings.retry_after_s
            logger.warning("PROTEUS: Redis at %s is not reachable at start-up (%s); tiers fall back to the default tier until it is", self._where(), _reason(exc))
            return False
        return True

    def start_warming(self) -> asyncio.Task | None:
        """``warm`` in the background when called on a running event loop (the proxy builds its
        Router inside its start-up event, on the loop that serves requests); None otherwise."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        self._warming = loop.create_task(self.warm())  # referenced: a task nobody holds may be collected
        return self._warming

    async def _first_connection(self) -> None:
        """Wait (up to ``connect_timeout``) for the running loop's first connection; at once when it
        is open.  Concurrent callers share one attempt; a failed attempt is retried by the next call."""
        loop = asyncio.get_running_loop()
        task = self._first_connects.get(loop)
        if task is not None and task.done() and (task.cancelled() or task.exception() is not None):
            task = None
        if task is None:
            task = loop.create_task(asyncio.wait_for(self._async_client().ping(), self.connect_timeout))
            self._first_connects[loop] = task
        if not task.done():
            await asyncio.shield(task)
        task.result()

    async def aclose(self) -> None:
        """Close the running loop's client (a private loop, as the sync Router path uses, ends with it)."""
        self._first_connects.pop(asyncio.get_running_loop(), None)
        client = self._async_clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def close(self) -> None:
        """No live strategy uses this store (a settings change replaced it): close its clients.  An
        event loop's client closes on that loop (a task, or a call handed to a loop running in
        another thread); a closed loop's connections went with it."""
        clients, self._async_clients = list(self._async_clients.items()), weakref.WeakKeyDictionary()
        self._first_connects = weakref.WeakKeyDictionary()
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, client in clients:
            if loop.is_closed():
                continue
            if loop is current:
                task = loop.create_task(client.aclose())
                _closing.add(task)  # referenced until done: a task nobody holds may be collected
                task.add_done_callback(_closing.discard)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)
        if self._sync_client is not None:
            self._sync_client.close()
            self._sync_client = None

    async def aget(self, key_hash: str, patient: bool = False) -> str | None:
        """The key's tier or None; TierStoreError when Redis cannot answer within ``timeout_ms``
        (``patient``: ``unknown_key_timeout_ms``).

        After a failure Redis is not asked again for ``retry_after_s``: a Redis outage costs each
        request nothing, instead of one timeout.  A ``patient`` lookup skips only an outage (a
        refused connection, or silence past its own budget), not another lookup's short timeout."""
        now = time.monotonic()
        cached = self._cache.get(key_hash)
        if cached is not None and cached[1] > now:
            return cached[0]
        blocked_until = self._unreachable_until if patient else self._down_until
        if now < blocked_until:
            raise TierStoreError(f"Redis at {self._where()} failed recently; asking again in {blocked_until - now:.1f} s")
        import redis

        budget_ms = self.settings.connect_timeout_ms
        try:
            await self._first_connection()
            timeout = self.unknown_key_timeout if patient else self.timeout
            budget_ms = timeout * 1000.0
            tier = await asyncio.wait_for(self._async_client().get(self.redis_key(key_hash)), timeout)
        except redis.exceptions.ResponseError as exc:  # Redis answered (e.g. WRONGTYPE): this key only
            raise TierStoreError(f"Redis at {self._where()}: {exc}") from exc
        except (asyncio.TimeoutError, OSError, redis.exceptions.RedisError) as exc:
            self._down_until = time.monotonic() + self.settings.retry_after_s
            if patient or not isinstance(exc, asyncio.TimeoutError):
                self._unreachable_until = self._down_until
            raise TierStoreError(f"Redis at {self._where()} failed or did not answer within {budget_ms:g} ms ({_reason(exc)})") from exc
        except Exception as exc:  # anything else from the client library: still never a failed request
            raise TierStoreError(f"Redis at {self._where()} failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(tier, str):
            tier = None
        if self.settings.cache_ttl_s > 0:
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[key_hash] = (tier, now + self.settings.cache_ttl_s)
        self._remember(key_hash, tier, now)
        return tier

    async def alookup(self, key_hash: str) -> TierLookup:
        """``aget``, but while Redis cannot answer a key with a last known tier (read from Redis at
        most ``stale_ttl_s`` ago) gets that tier, marked stale; TierStoreError only for other keys."""
        known = self._last_known.get(key_hash)
        if known is not None and known[1] <= time.monotonic():
            known = None
        try:
            return TierLookup(await self.aget(key_hash, patient=known is None))
        except TierStoreError as exc:
            if known is None:
                raise
            return TierLookup(known[0], stale=True, error=str(exc))

    def _remember(self, key_hash: str, tier: str | None, now: float) -> None:
        if self.settings.stale_ttl_s <= 0:
            return
        self._last_known[key_hash] = (tier, now + self.settings.stale_ttl_s)
        self._last_known.move_to_end(key_hash)
        while len(self._last_known) > CACHE_MAX_ENTRIES:
            self._last_known.popitem(last=False)

    def _where(self) -> str:
        return re.sub(r"//[^@/]*@", "//***@", self.settings.connection_url())

    # -- sync (the CLI) -----------------------------------------------------------------------
    def _client(self):
        if self._sync_client is None:
            import redis

            self._sync_client = redis.Redis.from_url(
                self.settings.connection_url(),
                socket_timeout=max(self.timeout, 2.0),
                socket_connect_timeout=max(self.timeout, 2.0),
                decode_responses=True,
            )
        return self._sync_client

    def get(self, key_hash: str) -> str | None:
        return self._client().get(self.redis_key(key_hash))

    def set(self, key_hash: str, tier: str) -> None:
        self._client().set(self.redis_key(key_hash), tier)

    def delete(self, key_hash: str) -> bool:
        return bool(self._client().delete(self.redis_key(key_hash)))

    def rehash(self, tiers: Collection[str]) -> list[tuple[str, str, bool]]:
        """Move each tier stored under a raw key (a Redis key whose suffix is not ``is_key_hash``) to
        the key's hash and delete the raw one: ``(key hash, the raw key's tier, moved)`` per raw key,
        ``moved`` False where the hash had a tier already (that one is kept).  Only values that name
        one of ``tiers`` are tiers: under a ``key_prefix`` another subsystem shares, its keys (not
        strings, or strings that name no tier) are left alone."""
        import redis

        client = self._client()
        done: list[tuple[str, str, bool]] = []
        for redis_key in client.scan_iter(match=f"{self.settings.key_prefix}*", count=500):
            raw = redis_key[len(self.settings.key_prefix) :]
            if is_key_hash(raw):
                continue
            try:
                tier = client.get(redis_key)
            except redis.exceptions.ResponseError:  # not a string (WRONGTYPE): not a tier
                continue
            if tier is None or tier not in tiers:
                continue
            key_hash = hash_key(raw)
            moved = bool(client.set(self.redis_key(key_hash), tier, nx=True))
            client.delete(redis_key)
            done.append((key_hash, tier, moved))
        return sorted(done)

    def list(self, limit: int = 10_000) -> list[tuple[str, str]]:
        """(key hash, tier) pairs; a key holding something other than a string shows as unreadable."""
        import redis

        client = self._client()
        out: list[tuple[str, str]] = []
        for redis_key in client.scan_iter(match=f"{self.settings.key_prefix}*", count=500):
            if len(out) >= limit:
                break
            try:
                tier = client.get(redis_key)
            except redis.exceptions.ResponseError as exc:  # e.g. WRONGTYPE: report it, list the rest
                tier = f"<unreadable: {exc}>"
            if tier is not None:
                out.append((redis_key[len(self.settings.key_prefix) :], tier))
        return sorted(out)


_shared_stores: dict[str, TierStore] = {}
_shared_lock = threading.Lock()
_closing: set[asyncio.Task] = set()


def shared_store(settings: RedisSettings, replaces: TierStore | None = None) -> TierStore:
    """One store per Redis settings per process: a rebuilt Router (config reload, settings update)
    keeps the open connections and every key's last known tier.  A new store that ``replaces`` the
    router's previous one on the same Redis and key prefix (other timeouts, say) takes over its last
    known tiers.  ``release_unused`` closes the stores no live strategy uses."""
    key = settings.model_dump_json()
    with _shared_lock:
        store = _shared_stores.get(key)
        if store is None:
            store = _shared_stores[key] = TierStore(settings)
            if replaces is not None and (replaces.settings.connection_url(), replaces.settings.key_prefix) == (
                    settings.connection_url(), settings.key_prefix):
                store._last_known.update(replaces._last_known)
        return store


def release_unused(live: Any) -> int:
    """Close the shared stores not in ``live``; returns how many."""
    keep = {id(store) for store in live}
    with _shared_lock:
        stale = [_shared_stores.pop(k) for k in [k for k, s in _shared_stores.items() if id(s) not in keep]]
    for store in stale:
        store.close()
    return len(stale)


def control_character(key: str) -> str | None:
    """The first control character in ``key`` (``'\\n' at position 3``), or None.  No API key holds
    one (an HTTP header cannot carry CR or LF), and one in a Redis key prints as a line of its own."""
    for i, char in enumerate(key):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            return f"{char!r} at position {i}"
    return None


def shown(text: str) -> str:
    """``text`` for a line of CLI output: as it is, or ``repr``-escaped when it holds a control character."""
    return repr(text) if control_character(text) is not None else text


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- CLI ------------------------------------------------------------------------------------------
def _common_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--config", default=default, help="the proxy config.yaml (tier names and Redis settings from routing_strategy_args)"
    )
    parser.add_argument(
        "--redis-url", default=default, help=f"overrides the config; default $PROTEUS_REDIS_URL or {DEFAULT_REDIS_URL}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _common_options(parser, None)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    # The options are accepted after the action too; SUPPRESS keeps an absent one from
    # overwriting a value given before the action.
    set_p = actions.add_parser("set", help="assign a tier to an API key")
    set_p.add_argument(
        "key", metavar="KEY_OR_HASH", help="the raw key (sk-... or a custom_auth key; stored hashed) or its LiteLLM hash"
    )
    set_p.add_argument("tier")
    get_p = actions.add_parser("get", help="show a key's tier")
    get_p.add_argument("key", metavar="KEY_OR_HASH")
    del_p = actions.add_parser("delete", help="remove a key's tier (it falls back to the default tier)")
    del_p.add_argument("key", metavar="KEY_OR_HASH")
    list_p = actions.add_parser("list", help="list every key hash with a tier")
    list_p.add_argument("--limit", type=int, default=10_000)
    rehash_p = actions.add_parser(
        "rehash", help="move tiers stored under raw keys (not key hashes) to the keys' hashes (values naming a tier only)"
    )
    for action_parser in (set_p, get_p, del_p, list_p, rehash_p):
        _common_options(action_parser, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.action in ("set", "get", "delete") and not args.key.strip():
        # it would name the Redis key "<key_prefix>" itself, which no API key hashes to
        print(f"error: the API key is empty ({args.key!r}); pass a raw key (sk-...) or its LiteLLM hash", file=sys.stderr)
        return 2
    if args.action == "list" and args.limit < 1:
        print(f"error: --limit must be an integer >= 1; got {args.limit}", file=sys.stderr)
        return 2
    tiers: dict[str, float] = dict(DEFAULT_TIERS)
    settings = RedisSettings()
    if args.config:
        try:
            config = load_config_file(args.config, redis_url=args.redis_url)
        except (OSError, ProteusConfigError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if config.redis is None and not args.redis_url:  # a tier set elsewhere would never be read
            print(f"error: {args.config}: routing_strategy_args.redis is not set, so the proxy looks up no per-key "
                  f"tiers (every key gets the default tier {config.default_tier!r}); add a redis section (url, or "
                  "host and port) to the config, or pass --redis-url", file=sys.stderr)
            return 2
        tiers = config.tiers
        settings = config.redis or settings
    # with --config, the Redis the proxy reads (its url, or host and port), never $PROTEUS_REDIS_URL
    url = args.redis_url or (settings.connection_url() if args.config else
                             os.environ.get("PROTEUS_REDIS_URL") or DEFAULT_REDIS_URL)
    settings = settings.model_copy(update={"url": url})
    store = TierStore(settings)
    import redis

    if args.action in ("set", "get", "delete") and (problem := control_character(args.key)) is not None:
        print(f"error: the API key holds a control character ({problem}); API keys hold none: pass the key as "
              "clients send it", file=sys.stderr)
        return 2
    source = args.config or "the default tiers (pass --config to use your proxy's)"
    try:
        if args.action == "set":
            if args.tier not in tiers:
                print(f"error: unknown tier {args.tier!r}; allowed tiers in {source}: {sorted(tiers)}", file=sys.stderr)
                return 2
            key_hash = hash_key(args.key)
            store.set(key_hash, args.tier)
            print(f"{key_hash}\t{args.tier}\t(tau {tiers[args.tier]})")
        elif args.action == "get":
            key_hash = hash_key(args.key)
            tier = store.get(key_hash)
            if tier is None:
                print(f"{key_hash}\t(no tier: the default tier applies)")
                return 1
            if args.config and tier not in tiers:  # without --config the proxy's tiers are unknown here
                print(f"{key_hash}\t{shown(tier)}\t(not a tier of {source}: the default tier applies)")
                return 1
            print(f"{key_hash}\t{tier}")
        elif args.action == "delete":
            key_hash = hash_key(args.key)
            print(f"{key_hash}\t{'deleted' if store.delete(key_hash) else 'had no tier'}")
        elif args.action == "rehash":
            moved = store.rehash(tiers)
            for key_hash, tier, took in moved:
                print(f"{key_hash}\t{shown(tier)}\t{'moved' if took else 'not moved: the hash has a tier already'}")
            left = sum(not is_key_hash(key) for key, _ in store.list())
            print(f"{len(moved)} raw key(s) rehashed" + (f"; {left} raw key(s) left, their values naming no tier of "
                                                        f"{source}" if left else ""), file=sys.stderr)
        else:
            raw = unknown = listed = 0
            for key_hash, tier in store.list(limit=args.limit):
                listed += 1
                raw += not is_key_hash(key_hash)
                foreign = bool(args.config) and tier not in tiers  # without --config the proxy's tiers are unknown here
                unknown += foreign
                print(f"{shown(key_hash)}\t{shown(tier)}" + ("\t(not a tier: the default tier applies)" if foreign else ""))
            if raw:
                print(f"warning: {raw} key(s) are raw keys, not key hashes: a request finds them by a second "
                      f"lookup, with a warning; `proteus tiers rehash` moves their tiers to their hashes", file=sys.stderr)
            if unknown:
                print(f"warning: {unknown} key(s) name no tier of {source}: the proxy serves them the default tier",
                      file=sys.stderr)
            if listed == args.limit:
                print(f"warning: listed the first {listed} keys (--limit); there may be more", file=sys.stderr)
    except redis.exceptions.RedisError as exc:
        print(f"error: Redis at {store._where()}: {exc}", file=sys.stderr)
        return 1
    return 0
