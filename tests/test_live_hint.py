"""LIVE.hint (journal/engine/live_hint.py): a read-only open that starts its scan where the last
writer's close left off finds what the full scan finds, and any hint that does not hold (damaged,
crafted, stale, from elsewhere, a link) only means the full scan, with no error."""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import xxhash

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import format as fmt
from journal.engine import live_hint
from journal.engine.core import Journal
from journal.engine.verify import CORRUPT, verify
from journal.errors import CorruptionError

INTERVAL = 4096  # many index points over a small segment
BLOCKS: dict[str, Any] = {"index_interval_bytes": INTERVAL}
FRAMES: dict[str, Any] = {"index_interval_bytes": INTERVAL, "block_bytes": 0}


def _append(path: Path, start: int, count: int, **options: Any) -> None:
    with journal.open(path, create=True, **options) as j:
        for b in range(0, count, 50):
            n = min(50, count - b)
            j.append_many([{"n": start + b + i, "pad": "x" * (i % 97)} for i in range(n)], durability="flush")
            j.append({"single": start + b}, durability="sync")  # a frame of its own between blocks


def _state(path: Path, **options: Any) -> tuple[Any, ...]:
    with Journal.open(path, readonly=True, **options) as r:
        recs = [(x.seq, x.payload) for x in r.read()]
        gets = [(s, None if (g := r.get(s)) is None else g.payload) for s in range(1, r.last_seq + 2, 3)]
        return (r.last_seq, recs, gets, list(r._index), r._next_index_at, r.recovery.live_records, r.recovery.tail)


def _note(path: Path, **options: Any) -> str:
    with Journal.open(path, readonly=True, **options) as r:
        return r.live_hint_note


def _full_scan(path: Path, **options: Any) -> tuple[Any, ...]:
    hint = path / live_hint.HINT_FILE
    kept = path / "kept.hint"
    there = hint.exists() or hint.is_symlink()
    if there:
        os.rename(hint, kept)
    try:
        assert _note(path, **options) == "no hint"
        return _state(path, **options)
    finally:
        if there:
            os.rename(kept, hint)


def _hint(path: Path) -> live_hint.LiveHint:
    return live_hint.read_hint(journal.fs.OsFileSystem(), str(path))


def _put(path: Path, hint: live_hint.LiveHint) -> None:
    (path / live_hint.HINT_FILE).write_bytes(live_hint.encode(hint))


def _live(path: Path) -> Path:
    return sorted(path.glob("*.seg"))[-1]


@pytest.mark.parametrize("options", [BLOCKS, FRAMES], ids=["blocks", "frames"])
def test_a_hint_gives_what_the_full_scan_gives(tmp_path: Path, options: dict[str, Any]) -> None:
    path = tmp_path / "j"
    _append(path, 0, 2000, **options)
    assert (path / live_hint.HINT_FILE).exists()
    hint = _hint(path)
    assert hint.frame_seq == 2000 + 40 and len(hint.points) > 5
    assert _note(path, **options) == "used"
    got = _state(path, **options)
    assert got == _full_scan(path, **options)
    assert got[0] == 2040 and len(got[1]) == 2040


@pytest.mark.parametrize("options", [BLOCKS, FRAMES], ids=["blocks", "frames"])
def test_a_hint_from_an_earlier_close_scans_on_over_what_came_after(tmp_path: Path, options: dict[str, Any]) -> None:
    path = tmp_path / "j"
    _append(path, 0, 1000, **options)
    early = (path / live_hint.HINT_FILE).read_bytes()
    _append(path, 1000, 1500, **options)
    (path / live_hint.HINT_FILE).write_bytes(early)  # stale but true: names a frame of the prefix
    assert _hint(path).frame_seq == 1020
    assert _note(path, **options) == "used"
    got = _state(path, **options)
    assert got == _full_scan(path, **options)
    assert got[0] == 2500 + 50


def test_a_writer_that_died_without_closing_leaves_a_hint_still_used(tmp_path: Path) -> None:
    path = tmp_path / "j"
    _append(path, 0, 600, **BLOCKS)
    before = _hint(path)
    child = textwrap.dedent(
        f"""
        import os, journal
        j = journal.open({str(path)!r}, index_interval_bytes={INTERVAL})
        for i in range(900):
            j.append({{"late": i, "pad": "y" * (i % 51)}}, durability="flush")
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, cwd=os.getcwd())
    assert _hint(path) == before  # no close: the earlier close's hint is the one there
    assert _note(path, **BLOCKS) == "used"
    got = _state(path, **BLOCKS)
    assert got == _full_scan(path, **BLOCKS)
    assert got[0] == 612 + 900 and got[6] == "zeros"  # the writer's reserved space after its frames


def _fallback(path: Path, reason: str, **options: Any) -> None:
    note = _note(path, **options)
    assert note.startswith("hint not") and reason in note, note
    assert _state(path, **options) == _full_scan(path, **options)


@pytest.fixture
def closed(tmp_path: Path) -> Path:
    path = tmp_path / "j"
    _append(path, 0, 800, **BLOCKS)
    return path


def test_a_hint_with_a_bad_checksum_falls_back(closed: Path) -> None:
    data = bytearray((closed / live_hint.HINT_FILE).read_bytes())
    data[40] ^= 1
    (closed / live_hint.HINT_FILE).write_bytes(bytes(data))
    _fallback(closed, "checksum", **BLOCKS)


def test_a_hint_past_the_end_of_the_file_falls_back(closed: Path) -> None:
    size = _live(closed).stat().st_size
    _put(closed, _hint(closed)._replace(frame_offset=size + 100))
    _fallback(closed, "past the end", **BLOCKS)


def test_a_hint_into_the_middle_of_a_frame_falls_back(closed: Path) -> None:
    hint = _hint(closed)
    _put(closed, hint._replace(frame_offset=hint.frame_offset + 8))
    _fallback(closed, "no genuine frame", **BLOCKS)


def test_a_hint_naming_another_frame_falls_back(closed: Path) -> None:
    hint = _hint(closed)
    _put(closed, hint._replace(frame_checksum=hint.frame_checksum ^ 1))
    _fallback(closed, "another checksum", **BLOCKS)
    points = tuple(p for p in hint.points if p[0] < hint.frame_seq - 1)
    _put(closed, hint._replace(frame_seq=hint.frame_seq - 1, records=hint.records - 1, points=points))
    _fallback(closed, "not the record frame", **BLOCKS)


def test_a_hint_of_another_journal_segment_or_salt_falls_back(closed: Path, tmp_path: Path) -> None:
    hint = _hint(closed)
    other = tmp_path / "other"
    _append(other, 0, 800, **BLOCKS)  # the same records, the same offsets: another id and salt
    (closed / live_hint.HINT_FILE).write_bytes((other / live_hint.HINT_FILE).read_bytes())
    _fallback(closed, "another journal", **BLOCKS)
    _put(closed, hint._replace(journal_id=_hint(other).journal_id))
    _fallback(closed, "another journal", **BLOCKS)
    _put(closed, hint._replace(salt=hint.salt ^ 1))
    _fallback(closed, "another journal, segment or salt", **BLOCKS)
    _put(closed, hint._replace(segment=fmt.segment_name(2)))
    _fallback(closed, "another journal, segment or salt", **BLOCKS)
    _put(closed, hint._replace(base_seq=2))
    _fallback(closed, "another journal, segment or salt", **BLOCKS)


def test_a_live_file_shorter_than_the_hint_falls_back(closed: Path) -> None:
    hint = _hint(closed)
    os.truncate(_live(closed), hint.frame_offset + 40)  # cut inside the hint's frame
    _fallback(closed, "no genuine frame", **BLOCKS)
    assert _state(closed, **BLOCKS)[0] < hint.frame_seq


def test_a_hint_naming_a_sealed_segment_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "j"
    options = BLOCKS
    _append(path, 0, 300, **options)
    first = (path / live_hint.HINT_FILE).read_bytes()
    assert live_hint.decode(first).segment == fmt.segment_name(1)
    with Journal.open(path, **options) as j:
        j.seal()
    _append(path, 300, 300, **options)
    assert len(list(path.glob("*.seg"))) == 2
    (path / live_hint.HINT_FILE).write_bytes(first)  # segment 1 is sealed now; the live one is another
    _fallback(path, "another journal, segment or salt", **options)


def test_a_huge_length_field_allocates_nothing_beyond_the_cap(closed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def bounded(f: Any, size: int, offset: int) -> bytes:
        asked.append(size)
        assert size <= live_hint.HINT_BYTES_MAX, "a read sized by the file, past the cap"
        return journal.fs.pread_upto(f, size, offset)

    monkeypatch.setattr(live_hint, "pread_upto", bounded)
    good = (closed / live_hint.HINT_FILE).read_bytes()
    # A point count of 2**32 - 1 under a valid checksum: refused by the lengths, not allocated.
    body = bytearray(good[:-8])
    body[12:16] = (0xFFFFFFFF).to_bytes(4, "little")
    crafted = bytes(body) + struct.pack("<Q", xxhash.xxh64_intdigest(bytes(body)))
    tracemalloc.start()
    with pytest.raises(live_hint.HintError, match="lengths"):
        live_hint.decode(crafted)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * live_hint.HINT_BYTES_MAX
    (closed / live_hint.HINT_FILE).write_bytes(crafted)
    _fallback(closed, "lengths", **BLOCKS)
    # A file over the cap (a hole: it costs no disk) is refused by its size, before any read.
    with open(closed / live_hint.HINT_FILE, "r+b") as f:
        f.truncate(1 << 40)
    _fallback(closed, "over HINT_BYTES_MAX", **BLOCKS)
    assert asked and max(asked) <= live_hint.HINT_BYTES_MAX


def test_a_link_at_the_hint_is_refused(closed: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.hint"
    os.rename(closed / live_hint.HINT_FILE, target)  # a hint that would hold
    os.symlink(target, closed / live_hint.HINT_FILE)
    _fallback(closed, "link", **BLOCKS)


def test_a_damaged_frame_in_the_skipped_prefix_is_still_reported(closed: Path) -> None:
    hint = _hint(closed)
    live = _live(closed)
    data = live.read_bytes()
    header = fmt.decode_segment_header(data)
    frames = fmt.record_frames(
        fmt.scan(data[: hint.frame_offset], fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames
    )
    victim = frames[len(frames) // 2]
    with open(live, "r+b") as f:
        f.seek(victim.payload_offset + 3)
        byte = f.read(1)[0]
        f.seek(victim.payload_offset + 3)
        f.write(bytes([byte ^ 0xFF]))
    with Journal.open(closed, readonly=True, **BLOCKS) as r:
        assert r.live_hint_note == "used"  # the open skips the prefix: its damage is found on reading
        with pytest.raises(CorruptionError):
            list(r.read())
        with pytest.raises(CorruptionError):
            r.get(victim.seq)
    assert verify(str(closed)).verdict == CORRUPT  # verify scans everything, hint or not


def test_a_directory_holding_only_a_hint_is_not_refused_as_foreign(tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.mkdir()
    (path / live_hint.HINT_FILE).write_bytes(b"left over")
    with pytest.raises(journal.errors.NotAJournalError, match="holds no segment"):
        Journal.open(path, readonly=True)


@pytest.mark.parametrize("op", ["pread", "open_write", "rename"])
def test_a_hint_that_cannot_be_written_fails_nothing(tmp_path: Path, op: str) -> None:
    path = tmp_path / "j"
    fs = FaultyFileSystem(journal.fs.OsFileSystem(), advisory_sites=True)
    j = Journal.open(path, create=True, fs=fs, **BLOCKS)
    j.append_many([{"n": i} for i in range(300)])
    fs.fail(op, errno.EACCES, after=fs.calls[op], times=1000)
    j.close()  # the hint is best effort: its failure is the full scan for the next reader, no error
    assert fs.injected and not (path / live_hint.HINT_FILE).exists()
    assert _note(path, **BLOCKS) == "no hint" and _state(path, **BLOCKS)[0] == 300


def test_a_close_with_nothing_written_keeps_the_hint_without_a_scan(closed: Path) -> None:
    before = (closed / live_hint.HINT_FILE).read_bytes()
    fs = FaultyFileSystem(journal.fs.OsFileSystem(), advisory_sites=True)
    j = Journal.open(closed, fs=fs, **BLOCKS)
    reads = fs.calls["pread"]
    j.close()
    assert fs.calls["pread"] - reads == 1  # the hint itself, read to compare: no frame of the segment
    assert (closed / live_hint.HINT_FILE).read_bytes() == before
    assert _note(closed, **BLOCKS) == "used"


def test_a_close_with_nothing_written_refreshes_a_stale_hint(tmp_path: Path) -> None:
    path = tmp_path / "j"
    _append(path, 0, 500, **BLOCKS)
    early = (path / live_hint.HINT_FILE).read_bytes()
    _append(path, 500, 500, **BLOCKS)
    latest = (path / live_hint.HINT_FILE).read_bytes()
    (path / live_hint.HINT_FILE).write_bytes(early)  # as a writer that died without closing leaves it
    Journal.open(path, **BLOCKS).close()
    assert (path / live_hint.HINT_FILE).read_bytes() == latest
