"""The live segment's reserved space: set ahead of the records, cut at seal and close, read as
"nothing written yet" by readers, and truncated without a quarantine copy by recovery."""

from __future__ import annotations

import errno
import pathlib
import shutil

import pytest

import journal
from journal import format as fmt
from journal.faults import FaultyFileSystem
from journal.fs import OsFileSystem

from .conftest import live_segment, segments

RESERVE = fmt.RESERVE_BYTES_DEFAULT


def events(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"type": "message", "i": i, "text": "r" * (30 + i % 11)} for i in range(start, start + n)]


def data_end(path: str | pathlib.Path) -> int:
    """Where the live segment's last frame ends (its records are raw JSON: they end in "}")."""
    return len(live_segment(path).read_bytes().rstrip(b"\0"))


def test_reserved_while_open_and_cut_at_close(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append_many(events(5))
        size = live_segment(jpath).stat().st_size
        assert size >= data_end(jpath) + RESERVE - 4096 and size % 4096 == 0
        assert not any(live_segment(jpath).read_bytes()[data_end(jpath) :])
    assert live_segment(jpath).stat().st_size == data_end(jpath)  # at rest: ends at its last frame
    with journal.open(jpath) as j:
        assert j.recovery.tail == "clean" and j.recovery.actions == [] and j.last_seq == 5


def test_a_reader_sees_every_record_of_a_writer_with_reserved_space(jpath: str) -> None:
    with journal.open(jpath, create=True) as w:
        w.append_many(events(3))
        with journal.open(jpath, readonly=True) as r:
            assert [rec.seq for rec in r.read()] == [1, 2, 3]
            follow = r.follow(after_seq=3, poll_interval_s=0.01)
            w.append({"type": "late"})
            assert next(follow).event == {"type": "late"}
        assert segments(jpath)[-1].stat().st_size > data_end(jpath)


def test_a_killed_writers_reserved_zeros_are_cut_without_a_quarantine_copy(jpath: str, tmp_path: pathlib.Path) -> None:
    crashed = tmp_path / "crashed"
    with journal.open(jpath, create=True) as j:
        j.append_many(events(4))
        shutil.copytree(jpath, crashed)  # what a writer killed now leaves: the zeros included
    size = live_segment(crashed).stat().st_size
    end = data_end(crashed)
    assert size > end
    with journal.open(crashed) as j:
        rep = j.recovery
        assert (rep.tail, rep.truncated_at, rep.truncated_bytes) == ("zeros", end, size - end)
        assert rep.quarantined == [] and not (crashed / "quarantine").exists()
        assert "nothing to keep" in rep.summary()
        assert j.last_seq == 4 and [r.event for r in j.read()] == events(4)
        assert j.append({"after": True}) == journal.Committed(5, "sync")


def test_roll_over_seals_segments_that_end_at_their_footer(jpath: str) -> None:
    with journal.open(jpath, create=True, segment_size_bytes=8192) as j:
        for i in range(400):
            j.append(events(1, i)[0], durability="flush")
        sealed = segments(jpath)[:-1]
        assert len(sealed) >= 3
        for seg in sealed:
            data = seg.read_bytes()
            header = fmt.decode_segment_header(data)
            res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
            assert res.stop == fmt.Stop.SEALED and res.stop_offset == len(data)
    with journal.open(jpath, readonly=True) as j:
        assert [r.seq for r in j.read(after_seq=100)] == list(range(101, 401))


def test_reserve_bytes_zero_turns_it_off(jpath: str) -> None:
    with journal.open(jpath, create=True, reserve_bytes=0) as j:
        j.append_many(events(3))
        assert live_segment(jpath).stat().st_size == data_end(jpath)
    with pytest.raises(ValueError, match="reserve_bytes"):
        journal.open(jpath, reserve_bytes=-1)


def test_a_failed_reservation_is_harmless(jpath: str) -> None:
    """A file system that refuses to grow the file ahead (a full disk): the write grows it
    itself, as without a reservation, and the append commits."""
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(jpath, create=True, fs=fs) as j:
        fs.fail("truncate", errno.ENOSPC, after=fs.calls["truncate"])
        assert j.append({"n": 1}) == journal.Committed(1, "sync")
        assert fs.injected, "the reservation was never tried"
        assert live_segment(jpath).stat().st_size == data_end(jpath)
        assert j.append({"n": 2}) == journal.Committed(2, "sync")
    with journal.open(jpath) as j:
        assert [r.event for r in j.read()] == [{"n": 1}, {"n": 2}] and j.recovery.actions == []


def test_a_failed_cut_at_close_leaves_zeros_the_next_open_cuts(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    j = journal.open(jpath, create=True, fs=fs)
    j.append_many(events(3))
    fs.fail("truncate", errno.EIO, after=fs.calls["truncate"])
    j.close()  # nothing acknowledged is at stake: close does not raise
    assert fs.injected and live_segment(jpath).stat().st_size > data_end(jpath)
    with journal.open(jpath) as j:
        assert j.recovery.tail == "zeros" and j.recovery.quarantined == []
        assert [r.event for r in j.read()] == events(3)


def test_a_failed_write_gives_the_reservation_back(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(jpath, create=True, fs=fs) as j:
        j.append({"n": 1})
        fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
        assert isinstance(j.append({"n": 2}), journal.NotCommitted)
        assert live_segment(jpath).stat().st_size == data_end(jpath)  # rolled back to the frame
        assert j.append({"n": 3}) == journal.Committed(2, "sync")
        assert live_segment(jpath).stat().st_size > data_end(jpath)  # reserved again
    with journal.open(jpath) as j:
        assert [r.event for r in j.read()] == [{"n": 1}, {"n": 3}]


def polls_max(idle_s: float, interval_s: float) -> int:
    return int(idle_s / interval_s) + 1


class _CountingFS(OsFileSystem):
    """Counts the bytes its files' preads return."""

    def __init__(self) -> None:
        super().__init__()
        self.read_bytes = 0

    def open_read(self, path: str):  # type: ignore[no-untyped-def]
        f = super().open_read(path)
        fs = self
        inner = f.pread

        def pread(size: int, offset: int) -> bytes:
            data = inner(size, offset)
            fs.read_bytes += len(data)
            return data

        f.pread = pread  # type: ignore[method-assign]
        return f


def test_an_idle_follower_does_not_reread_the_reserved_space(jpath: str) -> None:
    """A follower at the end of the live segment looks at one frame header per poll, not at the
    whole reserved space (an idle `tail -f` costs what it did before reservation)."""
    with journal.open(jpath, create=True) as w:
        w.append_many(events(3))
        fs = _CountingFS()
        with journal.open(jpath, readonly=True, fs=fs) as r:
            stop = __import__("threading").Event()
            got = [rec.seq for rec in r.follow(poll_interval_s=0.005, idle_timeout_s=0.5, stop=stop)]
            assert got == [1, 2, 3]
            # Opening reads the live segment once, the first poll reads on to its end and checks
            # the tail once; every later poll reads a footer tail and one header. Without that,
            # each of the ~100 polls here would read the 1 MiB of reserved space twice.
            first_look = 3 * (RESERVE + 64 * 1024)
            assert fs.read_bytes < first_look + polls_max(0.5, 0.005) * 4096, fs.read_bytes
            # It still sees what comes next.
            w.append({"type": "late"})
            assert next(r.follow(after_seq=3, poll_interval_s=0.005)).event == {"type": "late"}
