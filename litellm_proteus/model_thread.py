"""One thread per process for all torch work on the routing path: loading the predictor (whose
encoder runs a probe forward pass), and every decision.

Why: libgomp (the OpenMP runtime of the PyPI torch wheels) keeps one worker team per thread that
enters a parallel region.  Once two teams exist, workers outnumber 2 cores and libgomp throttles
their spinning to ~100 iterations whatever ``GOMP_SPINCOUNT`` says, so every kernel pays a sleep and
a wake-up.  Measured on 2 cores (bf16, 128-token prompt, batch 1): predictor loaded and run on the
main thread 13.0 ms; loaded on the main thread and run on the batcher's thread 19.1 ms; loaded and
run on one other thread 14.7 ms.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")
THREAD_NAME = "proteus-model"

_executor: concurrent.futures.ThreadPoolExecutor | None = None
_lock = threading.Lock()
_local = threading.local()


def _mark() -> None:
    _local.is_model_thread = True


def on_model_thread() -> bool:
    return bool(getattr(_local, "is_model_thread", False))


def run_on_model_thread(fn: Callable[..., R], /, *args, **kwargs) -> R:
    """``fn(*args, **kwargs)`` on the process's model thread (directly when already on it); blocks
    until it returns and re-raises what it raised."""
    global _executor
    if on_model_thread():
        return fn(*args, **kwargs)
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME, initializer=_mark)
        executor = _executor
    return executor.submit(fn, *args, **kwargs).result()
