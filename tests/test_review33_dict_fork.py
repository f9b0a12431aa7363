"""The process-wide lock of zstd's dictionary tables (journal/engine/dictionary.py) is made anew
in a child after fork: held by another thread of the parent as one forked, the child has no
thread to release it, and its first dictionary load would wait forever."""

from __future__ import annotations

import os

import pytest

from journal.engine import dictionary as dic


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_the_lock_is_held_can_take_it() -> None:
    read_end, write_end = os.pipe()
    with dic._tables_mu:  # as another thread making tables would hold it
        pid = os.fork()
        if pid == 0:  # the child: report whether it could take the lock, and leave
            os.close(read_end)
            took = dic._tables_mu.acquire(blocking=False)
            os.write(write_end, b"1" if took else b"0")
            os._exit(0)
    os.close(write_end)
    got = os.read(read_end, 1)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert got == b"1"
