"""The shadow evaluation's daily USD cap (UTC day).

Spend is the sum of the shadow and judge calls' costs (usage x the deployment's price).  With Redis
configured it is shared by every worker and proxy: ``INCRBYFLOAT <key_prefix><yyyymmdd>`` (atomic;
the key expires two days later); without Redis, or while Redis cannot be reached, each process
counts its own spend.  A job checks the cap before each call, so a day's spend can pass the cap by
at most the calls in flight when it was reached.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

from .observability import RateLimitedWarnings

logger = logging.getLogger("litellm_proteus.shadow")
KEY_TTL_S = 2 * 86400


def utc_day(now: float | None = None) -> str:
    return datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y%m%d")


class DailyBudget:
    """``cap_usd`` per UTC day; ``redis_client``: a sync ``redis.Redis`` (or None: per process).
    The async methods run Redis calls in a worker thread (never on the event loop)."""

    def __init__(self, cap_usd: float, redis_client: Any = None, key_prefix: str = "proteus:shadow:spend:",
                 retry_after_s: float = 1.0, clock: Any = time.time):
        self.cap_usd = cap_usd
        self.redis = redis_client
        self.key_prefix = key_prefix
        self.retry_after_s = retry_after_s
        self.clock = clock
        self._local: dict[str, float] = {}
        self._lock = threading.Lock()
        self._redis_down_until = 0.0
        self._warnings = RateLimitedWarnings(logger, 60.0)

    def key(self, day: str) -> str:
        return f"{self.key_prefix}{day}"

    # -- sync (a worker thread, or tests) ----------------------------------------------------
    def spent(self) -> float:
        day = utc_day(self.clock())
        if self._use_redis():
            try:
                value = self.redis.get(self.key(day))
                return float(value or 0.0)
            except Exception as exc:  # redis.RedisError, OSError: count locally until it is back
                self._redis_failed(exc)
        with self._lock:
            return self._local.get(day, 0.0)

    def charge(self, usd: float) -> float:
        """Add ``usd`` to today's spend; returns the new total."""
        day = utc_day(self.clock())
        if usd <= 0:
            return self.spent()
        if self._use_redis():
            try:
                pipe = self.redis.pipeline(transaction=True)
                pipe.incrbyfloat(self.key(day), usd)
                pipe.expire(self.key(day), KEY_TTL_S)
                total, _ = pipe.execute()
                return float(total)
            except Exception as exc:
                self._redis_failed(exc)
        with self._lock:
            for old in [d for d in self._local if d != day]:
                del self._local[old]
            self._local[day] = self._local.get(day, 0.0) + usd
            return self._local[day]

    def exhausted(self) -> bool:
        return self.spent() >= self.cap_usd

    # -- async (the proxy's event loop) -------------------------------------------------------
    async def aexhausted(self) -> bool:
        return await asyncio.to_thread(self.exhausted) if self.redis is not None else self.exhausted()

    async def acharge(self, usd: float) -> float:
        return await asyncio.to_thread(self.charge, usd) if self.redis is not None else self.charge(usd)

    def _use_redis(self) -> bool:
        return self.redis is not None and time.monotonic() >= self._redis_down_until

    def _redis_failed(self, exc: Exception) -> None:
        self._redis_down_until = time.monotonic() + self.retry_after_s
        self._warnings.warn("redis", "PROTEUS shadow: Redis budget unavailable, counting this process's spend: %s", exc)
