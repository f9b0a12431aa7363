"""The read-only open's bookkeeping of the live segment: what it builds from its scan is what a
writer's open builds (the sparse index get() enters the segment through, the record count), and
a segment short of a window is read once, without a zeroed buffer filled afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
from journal.engine import tail
from journal.engine.core import Journal


def _write(path: Path, batches: int, per_batch: int, **options: object) -> None:
    with journal.open(path, create=True, **options) as j:  # type: ignore[arg-type]
        for b in range(batches):
            j.append_many(
                [{"n": b * per_batch + i, "pad": "x" * (i % 97)} for i in range(per_batch)], durability="flush"
            )
            if b % 3 == 0:
                j.append({"single": b}, durability="sync")  # a frame of its own between blocks
        j.sync()


def _bookkeeping(j: Journal) -> tuple[list[tuple[int, int]], int, int, int]:
    return list(j._index), j._next_index_at, j.recovery.live_records, j.last_seq


@pytest.mark.parametrize(
    "options",
    [
        {"index_interval_bytes": 4096},  # many index points over one segment of blocks
        {"index_interval_bytes": 4096, "block_bytes": 0},  # a frame a record: thousands of frames
        # Rolled segments: the live one starts at a base seq past 1.
        {"index_interval_bytes": 4096, "block_bytes": 0, "segment_size_bytes": 64 * 1024},
    ],
)
def test_readonly_open_builds_the_writers_index(tmp_path: Path, options: dict[str, object]) -> None:
    path = tmp_path / "j"
    _write(path, batches=12, per_batch=150, **options)
    with Journal.open(path, **options) as w:  # type: ignore[arg-type]
        want = _bookkeeping(w)
    with Journal.open(path, readonly=True, **options) as r:  # type: ignore[arg-type]
        got = _bookkeeping(r)
        assert r._active_header is not None
        assert r.recovery.live_records == r.last_seq - (r._active_header.base_seq - 1)
        # And get() through it: every index point's record, and the records between them.
        for seq in range(max(1, r.last_seq - 400), r.last_seq + 1, 7):
            rec = r.get(seq)
            assert rec is not None and rec.seq == seq
    assert len(want[0]) > 3
    assert got == want


class _CountingFileBytes(tail.FileBytes):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.into_calls = 0

    def read_into(self, offset: int, buf: memoryview) -> int:
        self.into_calls += 1
        return super().read_into(offset, buf)


def _scan(path: Path, window_bytes: int | None) -> tuple[int, list[int]]:
    seg = sorted(path.glob("*.seg"))[-1]
    fs = journal.fs.OsFileSystem()
    f = fs.open_read(str(seg))
    try:
        src = _CountingFileBytes(f)
        header = journal.engine.format.decode_segment_header(
            src.read(0, journal.engine.format.SEGMENT_HEADER_SIZE_BYTES)
        )
        offsets = [
            fr.offset
            for win in tail.scan_windows(
                src, journal.engine.format.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq, window_bytes
            )
            for fr in win.res.frames
        ]
        return src.into_calls, offsets
    finally:
        f.close()


def test_a_segment_within_one_window_is_read_once_into_bytes(tmp_path: Path) -> None:
    path = tmp_path / "j"
    _write(path, batches=6, per_batch=100, block_bytes=0)
    into_calls, one = _scan(path, None)
    assert into_calls == 0  # one pread to the end: no buffer zeroed first
    # Windows smaller than the segment still share one reused buffer, and find the same frames.
    into_calls, windowed = _scan(path, 4096)
    assert into_calls > 1
    assert windowed == one and len(one) > 600
