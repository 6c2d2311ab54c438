import os
import sys
import threading

import pytest

from proteus_train.bench.proxy import run_niced

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux behaviour")


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux_only
def test_run_niced_lowers_only_the_load_threads_priority():
    before = _niceness()
    inside = run_niced(_niceness, 5)
    assert inside == min(before + 5, 19)
    assert _niceness() == before  # the calling thread (and the process's model thread) keep theirs


def test_run_niced_zero_runs_in_place_and_errors_reach_the_caller():
    assert run_niced(threading.get_native_id, 0) == threading.get_native_id()
    with pytest.raises(ZeroDivisionError):
        run_niced(lambda: 1 / 0, 3)
