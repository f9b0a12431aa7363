"""Review of issue 33's session snapshot with big data: an open reads the head alone, also when
the head is longer than the first read (HEAD_READ_BYTES); the history parts after it (most of a
long session's file, up to 2 GiB) are not read to find it. The first read is made small here
instead of writing a head past 64 KiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal.fs import File
from journal.session import snapshot as snap
from journal.session.session import SESSION_SNAPSHOT_NAME
from tests.session_gen import write_session


def test_a_head_longer_than_the_first_read_is_read_without_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "s"
    s = write_session(str(p), 1, 60)
    assert s.save_snapshot()
    s.close()
    data = (p / SESSION_SNAPSHOT_NAME).read_bytes()
    head_end = data.find(b"\n", len(snap.SESSION_MAGIC)) + 24  # the head and its checksum line
    assert len(data) > 4 * head_end  # most of the file is history
    monkeypatch.setattr(snap, "HEAD_READ_BYTES", head_end // 4)
    reads: list[tuple[int, int]] = []
    real = snap.pread_upto

    def counting(f: File, n: int, offset: int) -> bytes:
        reads.append((offset, n))
        return real(f, n, offset)

    monkeypatch.setattr(snap, "pread_upto", counting)
    saved, parts = snap.read_session(p / SESSION_SNAPSHOT_NAME)
    try:
        assert saved.last_seq == s.state.last_seq
        # Reads may double up to the head; none reaches far into the history.
        assert max(off + n for off, n in reads) <= 2 * head_end, reads
        assert parts.read(0)  # the parts are still found where the head says
    finally:
        parts.close()
