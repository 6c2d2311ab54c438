"""All torch work of the routing path runs on one thread per process (see model_thread.py)."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from litellm_proteus.model_thread import THREAD_NAME, on_model_thread, run_on_model_thread


def test_every_caller_lands_on_the_same_dedicated_thread():
    def where() -> tuple[int, str]:
        return threading.get_ident(), threading.current_thread().name

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        seen = set(pool.map(lambda _: run_on_model_thread(where), range(16)))
    assert len(seen) == 1
    ident, name = seen.pop()
    assert ident != threading.get_ident() and name.startswith(THREAD_NAME)
    assert not on_model_thread()


def test_calls_from_the_model_thread_run_inline_instead_of_deadlocking():
    outer = run_on_model_thread(lambda: (threading.get_ident(), run_on_model_thread(threading.get_ident)))
    assert outer[0] == outer[1]
    assert run_on_model_thread(on_model_thread) is True


def test_results_and_errors_come_back_to_the_caller():
    assert run_on_model_thread(pow, 2, 10) == 1024
    assert run_on_model_thread(dict, a=1) == {"a": 1}
    with pytest.raises(ZeroDivisionError):
        run_on_model_thread(lambda: 1 / 0)
    assert run_on_model_thread(lambda: "still serving") == "still serving"
