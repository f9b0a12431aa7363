"""The block cache is one for the process, behind one lock: a child forked while another thread
of the parent held that lock must not inherit it held (its first point read into a block would
wait forever), as dictionary.py's tables lock is made anew in a forked child."""

from __future__ import annotations

import os
import threading

import pytest

from journal.engine import block_cache


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork only")
def test_a_child_forked_while_a_thread_holds_the_cache_lock_can_use_the_cache() -> None:
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with block_cache.CACHE._mu:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait()
        pid = os.fork()
        if pid == 0:  # the child: no thread there will ever release the parent's lock
            code = 1
            try:
                # Non-blocking: a lock left held is a failure here, not a hang.
                code = 0 if block_cache.CACHE._mu.acquire(blocking=False) else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        t.join()
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child found the block cache's lock held"
