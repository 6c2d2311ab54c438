"""The micro-batcher: concurrent submits share one call, bounded by size, off the event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from litellm_proteus.batcher import MicroBatcher


def test_concurrent_requests_are_batched_and_answered_in_order():
    seen_batches: list[list[int]] = []
    threads: set[str] = set()
    release = threading.Event()

    def work(items):
        threads.add(threading.current_thread().name)
        release.wait(5)  # the first batch holds the worker so the rest queue up
        seen_batches.append(list(items))
        return [i * 10 for i in items]

    batcher = MicroBatcher(work, max_batch=4, max_wait_ms=50)

    async def main():
        loop_thread = threading.current_thread().name
        first = asyncio.ensure_future(batcher.submit(0))
        await asyncio.sleep(0.05)
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in range(1, 10)]
        await asyncio.sleep(0.05)
        release.set()
        results = await asyncio.gather(first, *rest)
        return loop_thread, results

    loop_thread, results = asyncio.run(main())
    batcher.close()
    assert results == [i * 10 for i in range(10)]
    assert max(len(b) for b in seen_batches) == 4  # bounded batch
    assert sorted(i for b in seen_batches for i in b) == list(range(10))
    assert len(seen_batches) < 10  # some requests really shared a call
    assert threads == {"proteus-batcher"} and loop_thread not in threads  # never on the event loop


def test_a_failing_batch_fails_each_waiter_and_the_worker_survives():
    calls = []

    def work(items):
        calls.append(list(items))
        if "bad" in items:
            raise ValueError("boom")
        return [x.upper() for x in items]

    batcher = MicroBatcher(work, max_batch=8, max_wait_ms=0)
    with pytest.raises(ValueError, match="boom"):
        batcher.submit_future("bad").result(5)
    assert batcher.submit_future("ok").result(5) == "OK"
    batcher.close()
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit_future("late")


def test_result_count_mismatch_is_an_error():
    batcher = MicroBatcher(lambda items: [], max_batch=2, max_wait_ms=0)
    with pytest.raises(RuntimeError, match="returned 0 results for 1 items"):
        batcher.submit_future(1).result(5)
    batcher.close()


@pytest.mark.parametrize("kwargs", [{"max_batch": 0}, {"max_wait_ms": -1}])
def test_bad_settings(kwargs):
    with pytest.raises(ValueError):
        MicroBatcher(lambda items: items, **kwargs)


def test_one_bad_item_fails_alone_not_the_batch_it_shared():
    release, started = threading.Event(), threading.Event()
    calls: list[list[int]] = []

    def work(items):
        started.set()
        release.wait(5)
        calls.append(list(items))
        if -1 in items:
            raise ValueError("bad item")
        return [i * 10 for i in items]

    batcher = MicroBatcher(work, max_batch=8, max_wait_ms=0)

    async def main():
        first = asyncio.ensure_future(batcher.submit(0))  # holds the worker while the rest queue up
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        rest = [asyncio.ensure_future(batcher.submit(i)) for i in (1, -1, 2)]
        await asyncio.sleep(0.05)
        release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    results = asyncio.run(main())
    batcher.close()
    assert results[0] == 0 and results[1] == 10 and results[3] == 20
    assert isinstance(results[2], ValueError) and str(results[2]) == "bad item"
    assert calls == [[0], [1, -1, 2], [1], [-1], [2]]  # the shared batch failed, then each item ran alone
