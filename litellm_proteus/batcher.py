"""Micro-batching of routing decisions in one worker thread.

Concurrent requests each ``await batcher.submit(item)``; a single daemon thread takes the first
waiting item, then gathers more for at most ``max_wait_ms`` or until ``max_batch`` items, runs
``fn(items)`` once (one encoder + heads forward pass for the whole batch) and hands each caller its
result.  The event loop only enqueues and awaits a future: model work never runs on it.
One thread is enough: torch already parallelises inside a batch, and a second concurrent forward
pass would only compete for the same cores (or GPU).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
logger = logging.getLogger("litellm_proteus.batcher")


@dataclass
class _Job(Generic[T]):
    item: T
    future: concurrent.futures.Future


_STOP = object()


class BatcherClosed(RuntimeError):
    """``submit`` on a closed batcher (a settings change released it)."""


class MicroBatcher(Generic[T, R]):
    def __init__(
        self,
        fn: Callable[[Sequence[T]], Sequence[R]],
        *,
        max_batch: int = 32,
        max_wait_ms: float = 0.0,
        name: str = "proteus-batcher",
    ):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1; got {max_batch}")
        if max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0; got {max_wait_ms}")
        self._fn = fn
        self.max_batch = max_batch
        self.max_wait = max_wait_ms / 1000.0
        self._name = name
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.batch_sizes: list[int] = []  # recent batch sizes (bounded), for tests and metrics

    # -- client side --------------------------------------------------------------------------
    def submit_future(self, item: T) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise BatcherClosed("MicroBatcher is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(_Job(item, future))
        return future

    async def submit(self, item: T) -> R:
        return await asyncio.wrap_future(self.submit_future(item))

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
            self._queue.put(_STOP)
        if thread is not None:
            thread.join(timeout)

    # -- worker side --------------------------------------------------------------------------
    def _gather(self, first: _Job) -> tuple[list[_Job], bool]:
        batch, stop = [first], False
        deadline = time.monotonic() + self.max_wait
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is _STOP:
                stop = True
                break
            batch.append(job)
        return batch, stop

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stop = self._gather(first)
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            if live:
                self.batch_sizes = (self.batch_sizes + [len(live)])[-1000:]
                self._run_batch(live)
            if stop:
                return

    def _call(self, jobs: list[_Job]) -> list:
        results = list(self._fn([job.item for job in jobs]))
        if len(results) != len(jobs):
            raise RuntimeError(f"batch function returned {len(results)} results for {len(jobs)} items")
        return results

    def _run_batch(self, live: list[_Job]) -> None:
        """Run one batch; if it fails, run its items one by one, so that one bad request fails alone
        instead of taking every request batched with it down (every waiter hears its own outcome)."""
        try:
            results = self._call(live)
        except BaseException as exc:
            if len(live) == 1:
                logger.exception("routing decision failed")
                live[0].future.set_exception(exc)
                return
            logger.warning("routing batch of %d failed (%r); retrying its items one by one", len(live), exc)
            for job in live:
                self._run_batch([job])
            return
        for job, result in zip(live, results):
            job.future.set_result(result)
