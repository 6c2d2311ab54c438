"""The shadow evaluation's daily USD cap (UTC day).

Spend is the sum of the shadow and judge calls' costs (usage x the deployment's price).  With Redis
configured it is shared by every worker and proxy: ``INCRBYFLOAT <key_prefix><yyyymmdd>`` (atomic;
the key expires two days later); without Redis each process counts its own spend.  A job
*reserves* its estimated cost before its first call (atomically: the reservation is refused when it
would pass the cap) and settles the difference to its calls' real cost when it ends, so concurrent
jobs pass the cap only by what their estimates fell short of.

While a configured Redis cannot be reached no reservation is admitted: the cap is shared, and a
process counting from its own zero could spend a whole cap more per process.  What running jobs
settle meanwhile is kept and added to the shared total once Redis answers again.  Each settlement
carries an id that Redis remembers for the key's lifetime, so one whose reply was lost (a timeout
after Redis applied it) is never added twice.  A reservation carries an id too, drawn before it is
sent: when its call fails the job does not run, and a *release* by that id is kept like a
settlement and sent once Redis answers.  The release takes back the reservation if Redis made it
and leaves a tombstone either way, so a reservation that reaches Redis after its release (a
command still in flight when the client gave up) is refused, and a release sent twice takes back
once: a reservation whose reply was lost costs nothing once its release is sent.

A settings change that replaces the shadow evaluator gives it a new budget (the cap may change).
When the new one counts in the same place -- the same Redis URL and key prefix, or both in process
memory -- it ``replaces`` the old one and shares its ledger: the day's local spend, the total Redis
last gave, and the settlements and releases not yet sent.  Jobs of the replaced evaluator still
running settle into that ledger, so their reservations are taken back (or made real) where the new
budget counts, and what the old one could not send is sent by the new one.

The replaced budget's own Redis client is closed (``close``) once no live strategy uses its
evaluator.  A job of that evaluator settling later still sends its settlement through it (to the
store its reservation was made in, whether or not a new budget shares the ledger): the connection
that opens closes again once no call of that budget is running.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, NamedTuple

from .observability import RateLimitedWarnings

logger = logging.getLogger("litellm_proteus.shadow")
KEY_TTL_S = 2 * 86400
CLIENT_NAME = "proteus-shadow-budget"  # how the budgets' connections show in Redis's CLIENT LIST
# KEYS: the day's key, the reservation's id key; ARGV: amount, cap, ttl.  Adds the amount unless the
# total would pass the cap (or already has) or the id is taken (released already: this call outlived
# its client's wait); the id key holds the amount for a release.  Returns {1 | 0, total} (the total
# as a string: Lua numbers cut to integers).
_RESERVE_LUA = """
local before = redis.call('GET', KEYS[1]) or '0'
local usd, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then return {0, before} end
if tonumber(before) >= cap or tonumber(before) + usd > cap then return {0, before} end
local total = redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, total}
"""

# KEYS: the day's key, the reservation's id key; ARGV: ttl.  Takes back the amount the id key holds
# and leaves the tombstone 'released' (a reservation never made, or released already: nothing to take
# back).  Returns the total (as a string).
_RELEASE_LUA = """
local held = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[2], 'released', 'EX', ARGV[1])
if held and held ~= 'released' then
  local minus = string.sub(held, 1, 1) == '-' and string.sub(held, 2) or '-' .. held
  redis.call('INCRBYFLOAT', KEYS[1], minus)
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return redis.call('GET', KEYS[1]) or '0'
"""


# KEYS: the day's key, the settlement's id key; ARGV: amount, ttl.  Adds the amount once per id.
# Returns the total (as a string).
_CHARGE_LUA = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[2]) then
  redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return redis.call('GET', KEYS[1]) or '0'
"""


class Reservation(NamedTuple):
    """What ``reserve`` answered: the day charged (None: refused), the day's total, and whether the
    refusal was Redis's (it could not be reached) rather than the cap's -- decided by the call that
    refused, so a retry window that ends meanwhile cannot turn one into the other."""

    day: str | None
    total: float
    redis_down: bool = False


def utc_day(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y%m%d")


def checked_usd(usd: float, what: str, refund: bool) -> float:
    """``usd`` as a float, or ValueError: a NaN total compares False with the cap and admits every
    later reservation, an infinite one refuses them all."""
    value = float(usd)
    if not math.isfinite(value) or (value < 0 and not refund):
        raise ValueError(f"shadow budget {what} of {usd!r} USD: must be a finite number{'' if refund else ' >= 0'}")
    return value


class DailyBudget:
    """``cap_usd`` per UTC day; ``redis_client``: a sync ``redis.Redis`` (or None: per process).
    The async methods run Redis calls in a worker thread (never on the event loop)."""

    def __init__(self, cap_usd: float, redis_client: Any = None, key_prefix: str = "proteus:shadow:spend:",
                 retry_after_s: float = 1.0, clock: Any = time.time, redis_url: str | None = None,
                 replaces: "DailyBudget | None" = None):
        """``redis_url``: where ``redis_client`` connects; ``replaces``: the budget of the evaluator a
        settings change replaces, whose ledger this one shares when both count in the same place."""
        self.cap_usd = cap_usd
        self.redis = redis_client
        self.key_prefix = key_prefix
        self.retry_after_s = retry_after_s
        self.clock = clock
        self.store = ("redis", redis_url, key_prefix) if redis_client is not None else ("process",)
        same = replaces is not None and replaces.store == self.store
        # The ledger (shared, never rebound, with a budget this one replaces: see the module's doc).
        self._local: dict[str, float] = replaces._local if same else {}  # without Redis: each day's spend
        # with Redis: each day's total as Redis last answered it
        self._seen: dict[str, float] = replaces._seen if same else {}
        # with Redis: what is still to be sent, in order -- ("charge", id, day, usd) settled while it was
        # down, ("release", id, day, 0.0) a reservation whose call failed
        self._pending: list[tuple[str, str, str, float]] = replaces._pending if same else []
        self._lock = replaces._lock if same else threading.Lock()
        # one thread at a time sends the pending settlements
        self._sync_lock = replaces._sync_lock if same else threading.Lock()
        self._redis_down_until = 0.0
        self._warnings = RateLimitedWarnings(logger, 60.0)
        # this budget's own client (never shared): closed once its evaluator is released and no call runs
        self._closed = False
        self._calls = 0
        self._calls_lock = threading.Lock()
        self._reserve = redis_client.register_script(_RESERVE_LUA) if redis_client is not None else None
        self._charge = redis_client.register_script(_CHARGE_LUA) if redis_client is not None else None
        self._release = redis_client.register_script(_RELEASE_LUA) if redis_client is not None else None

    def key(self, day: str) -> str:
        return f"{self.key_prefix}{day}"

    # -- sync (a worker thread, or tests) ----------------------------------------------------
    def spent(self) -> float:
        """Today's spend: the shared total when Redis answers; while it does not, the total it last
        gave plus what this process settled since."""
        day = utc_day(self.clock())
        if self.redis is None:
            with self._lock:
                return self._local.get(day, 0.0)
        if self._use_redis():
            with self._calling():
                try:
                    self._sync()
                    return self._saw(day, self.redis.get(self.key(day)))
                except Exception as exc:  # redis.RedisError, OSError: settle locally until it is back
                    self._redis_failed(exc)
        return self._estimate(day)

    def reserve(self, usd: float) -> Reservation:
        """Add ``usd`` to today's spend unless the total would pass the cap.  Refused, with
        ``redis_down``, while a configured Redis cannot be reached.  ValueError for an amount that
        is not a finite number >= 0."""
        usd = checked_usd(usd, "reservation", refund=False)
        day = utc_day(self.clock())
        if self.redis is None:
            with self._lock:  # checked and added at once: a replaced budget's jobs share this ledger
                before = self._local.get(day, 0.0)
                if before >= self.cap_usd or before + usd > self.cap_usd:
                    return Reservation(None, before)
                return Reservation(day, self._add_local(usd, day))
        if self._use_redis():
            reservation = uuid.uuid4().hex
            with self._calling():
                try:
                    self._sync()
                    try:
                        ok, total = self._reserve(keys=[self.key(day), self._reservation_key(day, reservation)],
                                                  args=[repr(float(usd)), repr(float(self.cap_usd)), KEY_TTL_S])
                    except Exception:
                        # Redis may have made it and lost only the reply; the job will not run, so it is released
                        with self._lock:
                            self._pending.append(("release", reservation, day, 0.0))
                        raise
                    return Reservation(day if int(ok) else None, self._saw(day, total))
                except Exception as exc:
                    self._redis_failed(exc)
        return Reservation(None, self._estimate(day), redis_down=True)

    def charge(self, usd: float, day: str | None = None) -> float:
        """Add ``usd`` (negative: a refund) to the spend of ``day`` (default today); returns the new total.
        ValueError for an amount that is not a finite number."""
        usd = checked_usd(usd, "charge", refund=True)
        day = day or utc_day(self.clock())
        if usd == 0:
            return self.spent()
        if self.redis is None:
            with self._lock:
                return self._add_local(usd, day)
        settlement = ("charge", uuid.uuid4().hex, day, usd)
        if self._use_redis():
            with self._calling():
                try:
                    self._sync()
                    return self._send(settlement)
                except Exception as exc:
                    self._redis_failed(exc)
        with self._lock:
            self._pending.append(settlement)
        return self._estimate(day)

    def _add_local(self, usd: float, day: str) -> float:
        """Without Redis, under ``_lock``: add ``usd`` to the spend of ``day`` (days other than it
        and today are forgotten); returns its total."""
        today = utc_day(self.clock())
        for old in [d for d in self._local if d not in (day, today)]:
            del self._local[old]
        self._local[day] = self._local.get(day, 0.0) + usd
        return self._local[day]

    # -- async (the proxy's event loop) -------------------------------------------------------
    async def areserve(self, usd: float) -> Reservation:
        return await asyncio.to_thread(self.reserve, usd) if self.redis is not None else self.reserve(usd)

    async def acharge(self, usd: float, day: str | None = None) -> float:
        return await asyncio.to_thread(self.charge, usd, day) if self.redis is not None else self.charge(usd, day)

    def close(self) -> None:
        """No live strategy uses this budget's evaluator (a settings change replaced it): its Redis
        connections close at once, or when the calls running on them end."""
        if self.redis is None:
            return
        with self._calls_lock:
            self._closed = True
            if not self._calls:
                self.redis.close()

    # -- Redis --------------------------------------------------------------------------------
    @contextmanager
    def _calling(self):
        """Around each use of the client: on a closed budget (a replaced evaluator's job settling
        late) the connection the use opened closes again when no other use is running, so none is
        cut under a call and none stays open."""
        with self._calls_lock:
            self._calls += 1
        try:
            yield
        finally:
            with self._calls_lock:
                self._calls -= 1
                if self._closed and not self._calls:
                    self.redis.close()

    def _reservation_key(self, day: str, reservation: str) -> str:
        return f"{self.key(day)}:reservation:{reservation}"

    def _send(self, entry: tuple[str, str, str, float]) -> float:
        kind, op, day, usd = entry
        if kind == "release":
            total = self._release(keys=[self.key(day), self._reservation_key(day, op)], args=[KEY_TTL_S])
        else:
            total = self._charge(keys=[self.key(day), f"{self.key(day)}:op:{op}"], args=[repr(float(usd)), KEY_TTL_S])
        return self._saw(day, total)

    def _sync(self) -> None:
        """Send the pending settlements and releases (raises on a Redis error; what is not sent stays
        pending, and one sent twice counts once)."""
        with self._sync_lock:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    settlement = self._pending[0]
                self._send(settlement)
                with self._lock:
                    self._pending.remove(settlement)

    def _saw(self, day: str, total: Any) -> float:
        today = utc_day(self.clock())
        with self._lock:
            for old in [d for d in self._seen if d not in (day, today)]:
                del self._seen[old]  # in place: the ledger may be shared
            self._seen[day] = float(total or 0.0)
            return self._seen[day]

    def _estimate(self, day: str) -> float:
        with self._lock:
            return self._seen.get(day, 0.0) + sum(usd for _, _, d, usd in self._pending if d == day)

    def _use_redis(self) -> bool:
        return self.redis is not None and time.monotonic() >= self._redis_down_until

    def _redis_failed(self, exc: Exception) -> None:
        self._redis_down_until = time.monotonic() + self.retry_after_s
        self._warnings.warn("redis", "PROTEUS shadow: Redis budget unavailable, no shadow job is admitted until it answers: %s", exc)
