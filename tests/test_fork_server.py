"""The kill tests' fork-server helpers: every line that arrived is read, a kill reaches its child or none."""

from __future__ import annotations

import os
import signal

import pytest

from tests.fork_server import ForkedChild, PipeLines


def test_lines_written_in_one_burst_are_all_read_while_the_writer_is_silent() -> None:
    # A child's last lines (``ack``, ``end``, ``reaped``) often arrive in one read. With the
    # write end still open and nothing more coming, a reader that asks select before each line
    # would wait out its timeout on the second; the timeout here is zero, so it would fail.
    r, w = os.pipe()
    try:
        os.write(w, b"ack 29\nend\nreaped 7\n")
        lines = PipeLines(r, 0, "the writer")
        assert [lines.line(), lines.line(), lines.line()] == ["ack 29", "end", "reaped 7"]
        with pytest.raises(AssertionError, match="the writer stopped answering"):
            lines.line()
    finally:
        os.close(r)
        os.close(w)


def test_a_line_split_across_writes_is_read_whole() -> None:
    r, w = os.pipe()
    try:
        lines = PipeLines(r, 0, "the writer")
        os.write(w, b"beg")
        with pytest.raises(AssertionError, match="stopped answering"):
            lines.line()  # half a line is no line
        os.write(w, b"in 3\nsynced\n")
        assert lines.line() == "begin 3"
        assert lines.line() == "synced"
    finally:
        os.close(r)
        os.close(w)


def test_a_closed_pipe_is_a_dead_writer_and_its_last_partial_line_is_shown() -> None:
    r, w = os.pipe()
    try:
        os.write(w, b"ack 1\nbeg")
        os.close(w)
        lines = PipeLines(r, 5, "the writer")
        assert lines.line() == "ack 1"
        with pytest.raises(AssertionError, match=r"the writer died: its pipe closed after b'beg'"):
            lines.line()
    finally:
        os.close(r)


def _child_waiting_on(r: int) -> int:
    """A child that ends when a byte comes on ``r`` (or at EOF)."""
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        os._exit(0)
    return pid


def test_a_kill_reaches_a_live_child() -> None:
    r, w = os.pipe()
    try:
        child = ForkedChild(_child_waiting_on(r))
        assert child.kill()
        _, status = os.waitpid(child.pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        child.close()
    finally:
        os.close(r)
        os.close(w)


def test_a_kill_after_the_child_ended_and_was_reaped_reaches_nobody() -> None:
    # The fork server reaps a child as soon as it ends; the test may still be reading its
    # earlier lines and decide to kill it then. A kill by pid would fail, or hit a process that
    # reuses the pid; through the pidfd it reports that the child is gone.
    r, w = os.pipe()
    try:
        child = ForkedChild(_child_waiting_on(r))
        os.write(w, b"x")
        _, status = os.waitpid(child.pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert not child.kill()
        child.close()
    finally:
        os.close(r)
        os.close(w)
