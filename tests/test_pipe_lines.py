"""The kill tests' line reader: lines that arrived together are all seen, without waiting."""

from __future__ import annotations

import os

import pytest

from tests.pipe_lines import PipeLines


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
