"""The live segment's reserved space: set ahead of the records, cut at seal and close, read as
"nothing written yet" by readers, and truncated without a quarantine copy by recovery."""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import threading

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import format as fmt
from journal.engine import tail
from journal.fs import OsFileSystem
from tests.conftest import live_segment, segments

RESERVE = fmt.RESERVE_BYTES_DEFAULT
WAIT_S = 10  # how long a forced interleaving may take before the test gives up: a hang, never a timing


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


# --- found in review: races and error paths of the reservation ------------------------------

PAGE = 4096


class _SplitPreadFS(OsFileSystem):
    """The first long pread of the live tail returns its first page as it was, lets ``during``
    run (a writer appending), then returns the later pages as they are: what a page-by-page
    copy racing a pwrite can show. Its files cannot tell holes (no ``seek_data``/``seek_hole``:
    a file system without SEEK_DATA, or reserved space written as zeros), so a reader reads the
    reserved space whole, in one long pread, as the race needs; where holes are known it reads
    only the page before the hole, and the race has nothing to split."""

    def __init__(self, during) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.during = during
        self.fired = False

    def open_read(self, path: str):  # type: ignore[no-untyped-def]
        f = super().open_read(path)
        inner = f.pread
        fs = self

        def pread(size: int, offset: int) -> bytes:
            boundary = (offset // PAGE + 1) * PAGE
            if (
                not fs.fired
                and offset > fmt.SEGMENT_HEADER_SIZE_BYTES
                and size > boundary - offset
                and not any(inner(fmt.FRAME_HEADER_SIZE_BYTES, offset))
            ):
                fs.fired = True
                first = inner(boundary - offset, offset)
                fs.during()
                return first + inner(size - len(first), boundary)
            return inner(size, offset)

        f.pread = pread  # type: ignore[method-assign]
        f.seek_data = None  # type: ignore[method-assign, assignment]
        f.seek_hole = None  # type: ignore[method-assign, assignment]
        return f


def _three_more(w: journal.Journal):  # type: ignore[no-untyped-def]
    def during() -> None:
        w.append(b"a" * 6000)  # lands where the reader saw zeros
        w.append(b"b" * 6000)  # commit-marked, on a later page
        w.append({"n": 4})  # a higher seq: proves the one before was durable

    return during


def test_a_reader_racing_appends_into_reserved_space_reports_no_corruption(jpath: str) -> None:
    from journal.engine.reader import Cursor

    with journal.open(jpath, create=True, compress=False) as w:
        w.append({"n": 1})
        fs = _SplitPreadFS(_three_more(w))
        cur = Cursor(fs, jpath, 0, fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
        try:
            assert [r.seq for r in cur.read()] == [1]
            assert fs.fired, "the race was not staged"
            assert [r.seq for r in cur.read()] == [2, 3, 4]
        finally:
            cur.close()


def test_verify_racing_appends_into_reserved_space_reports_no_corruption(jpath: str) -> None:
    from journal.engine import verify as V

    with journal.open(jpath, create=True, compress=False) as w:
        w.append({"n": 1})
        during = _three_more(w)
        orig = V._read
        calls = []

        def split_read(fs: OsFileSystem, p: str) -> tail.InMemory:
            calls.append(p)
            with open(p, "rb") as f:
                first = f.read(PAGE)
                if len(calls) == 1:
                    during()
                return tail.InMemory(first + f.read())

        V._read = split_read  # type: ignore[assignment]
        try:
            rep = V.verify(jpath)
        finally:
            V._read = orig  # type: ignore[assignment]
        assert len(calls) >= 2, "verify believed the torn read"
        assert rep.verdict != "corrupt" and not rep.problems


def test_a_reservation_that_fails_after_growing_the_file_is_still_cut_at_seal(jpath: str) -> None:
    """A file system may report an error after the size changed: seal and close look at the
    file's real size, so the footer still ends the sealed segment."""

    class GrowThenFail(OsFileSystem):
        armed = False

        def open_write(self, path: str, create: bool):  # type: ignore[no-untyped-def]
            f = super().open_write(path, create)
            inner = f.truncate
            fs = self

            def truncate(size: int) -> None:
                grow = size > f.size()
                inner(size)
                if fs.armed and grow:
                    fs.armed = False
                    raise OSError(errno.EINTR, "reported after the size changed", f.path)

            f.truncate = truncate  # type: ignore[method-assign]
            return f

    fs = GrowThenFail()
    with journal.open(jpath, create=True, fs=fs, compress=False, segment_size_bytes=65536, reserve_bytes=8192) as j:
        i = 0
        while j._active_size < 58000:
            j.append({"n": i, "pad": "q" * 300})
            i += 1
        fs.armed = True  # the next reservation (capped at the segment size) errs after growing
        for _ in range(60):
            assert isinstance(j.append({"n": i, "pad": "q" * 300}), journal.Committed)
            i += 1
        assert not fs.armed, "the failure was never injected"
    sealed = segments(jpath)[0]
    data = sealed.read_bytes()
    header = fmt.decode_segment_header(data)
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    assert res.stop == fmt.Stop.SEALED and res.stop_offset == len(data)
    with journal.open(jpath) as j:
        assert j.last_seq == i and j.recovery.actions == []


def test_a_refused_reservation_in_group_commits_and_roll_over(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    # Small blocks: each append_many is several frames (blocks of a few records), so each batch
    # is written header last.
    opts = {"segment_size_bytes": 4096, "reserve_bytes": 4096, "block_bytes": 256}
    with journal.open(jpath, create=True, fs=fs, **opts) as j:
        fs.fail("truncate", errno.ENOSPC, after=fs.calls["truncate"], times=1000)
        for k in range(20):
            outs = j.append_many(events(15, 15 * k))  # header-last batches
            assert all(isinstance(o, journal.Committed) for o in outs)
        j.sync()
        assert fs.injected
        fs.clear()
    assert len(segments(jpath)) > 3
    for seg in segments(jpath)[:-1]:
        data = seg.read_bytes()
        header = fmt.decode_segment_header(data)
        res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        assert res.stop == fmt.Stop.SEALED and res.stop_offset == len(data)
    with journal.open(jpath) as j:
        assert j.recovery.actions == [] and [r.event for r in j.read()] == events(300)


def test_a_read_only_open_names_a_writers_reserved_space(jpath: str) -> None:
    with journal.open(jpath, create=True) as w:
        w.append_many(events(2))
        with journal.open(jpath, readonly=True) as r:
            assert r.recovery.tail == "zeros"
    with journal.open(jpath, readonly=True) as r:
        assert r.recovery.tail == "clean"


def test_the_same_follower_sees_a_record_after_idle_polls(jpath: str) -> None:
    import threading

    with journal.open(jpath, create=True) as w:
        w.append_many(events(3))
        with journal.open(jpath, readonly=True) as r:
            stop = threading.Event()
            follow = r.follow(poll_interval_s=0.005, stop=stop)
            assert [next(follow).seq for _ in range(3)] == [1, 2, 3]
            timer = threading.Timer(0.2, lambda: w.append({"type": "late"}))  # after idle polls
            timer.start()
            try:
                assert next(follow).event == {"type": "late"}
            finally:
                timer.join()
                stop.set()


class _ShrinkAfterSizeFS(OsFileSystem):
    """size() reports the file as it is, then (once armed) the file is cut to ``cut_to``: what
    a reader sees when the writer cuts its reserved space between the reader's size() and its
    preads (the writer does so to seal and to close)."""

    def __init__(self, skip_calls: int) -> None:
        super().__init__()
        self.cut_to: int | None = None
        self.skip_calls = skip_calls  # size() calls to let pass before the cut

    def open_read(self, path: str):  # type: ignore[no-untyped-def]
        f = super().open_read(path)
        inner = f.size
        fs = self

        def size() -> int:
            n = inner()
            if fs.cut_to is not None and fs.skip_calls:
                fs.skip_calls -= 1
            elif fs.cut_to is not None and n > fs.cut_to:
                os.truncate(path, fs.cut_to)
                fs.cut_to = None
            return n

        f.size = size  # type: ignore[method-assign]
        return f


@pytest.mark.parametrize("skip_calls", [0, 1])  # the cut under the seek's size(), or the read's
def test_a_reader_whose_file_shrinks_under_it_neither_fails_nor_spins(jpath: str, skip_calls: int) -> None:
    """Was a bug: the reserved space is cut off before the seal is written, so a follower's
    stale size made read_seal assert on a short read, and a span read could loop on an empty
    pread until the seal landed (forever, had the writer died in between)."""
    from journal.engine.reader import Cursor

    with journal.open(jpath, create=True) as w:
        w.append_many(events(5))
        end = data_end(jpath)
        fs = _ShrinkAfterSizeFS(skip_calls)
        cur = Cursor(fs, jpath, 0, fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
        try:
            fs.cut_to = end
            assert [r.seq for r in cur.read()] == [1, 2, 3, 4, 5]
            assert fs.cut_to is None, "the cut was not staged"
            w.append({"n": 6})
            assert [r.seq for r in cur.read()] == [6]
        finally:
            cur.close()


def test_read_seal_with_a_stale_size_says_not_sealed(jpath: str) -> None:
    from journal.engine.segment import read_header, read_seal

    with journal.open(jpath, create=True) as w:
        w.append_many(events(3))
    seg = live_segment(jpath)
    fs = OsFileSystem()
    f = fs.open_read(str(seg))
    try:
        header = read_header(f, seg.name)
        for stale in (f.size() + 8, f.size() + 4096, f.size() + RESERVE):
            assert read_seal(f, header, seg.name, stale) is None
    finally:
        f.close()


# --- found in the second review ---------------------------------------------------------------


@pytest.mark.parametrize("action", ["close", "roll-over"])
def test_verify_while_the_writer_closes_or_rolls_over_is_not_corrupt(tmp_path: pathlib.Path, action: str) -> None:
    """Was a bug: verify's walk saw the reserved zeros, the writer then cut them (close) or
    sealed (roll-over), and verify mixed the two reads into "zeroed bytes" and "no valid seal
    footer" problems. Everything it says of the live segment now comes from one read."""
    from journal.engine import verify as V

    path = str(tmp_path / "j")
    w = journal.open(path, create=True, compress=False, segment_size_bytes=65536)
    for i in range(3):
        w.append({"n": i})
    orig = V._read
    done = []

    def between(fs: OsFileSystem, p: str) -> bytes:  # runs after the walk's read, before verify's own
        if not done:
            done.append(p)
            if action == "close":
                w.close()
            else:
                i = 0
                while len(segments(path)) < 2:
                    w.append({"fill": "x" * 2000, "i": i})
                    i += 1
        return orig(fs, p)

    V._read = between  # type: ignore[assignment]
    try:
        rep = V.verify(path)
    finally:
        V._read = orig  # type: ignore[assignment]
        w.close()
    assert done and rep.verdict in (V.CLEAN, V.TORN) and not rep.problems, [p.describe() for p in rep.problems]
    assert V.verify(path).verdict == V.CLEAN


def test_verify_during_a_header_last_batch_reads_again(jpath: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's body is written before its first header: in between, a live writer's tail
    looks torn. With the lock held verify reads again and finds the batch whole.

    The interleaving is forced: the writer stops after the body until verify has read the live
    segment (torn-looking), and verify's second read waits until the header has landed."""
    from journal.engine import verify as V

    reports = []
    torn_read = threading.Event()  # verify read the live segment between the body and the header
    header_written = threading.Event()
    reads: list[str] = []
    read = V._read

    def watched_read(fs: OsFileSystem, p: str) -> tail.InMemory:
        reads.append(p)
        if len(reads) > 1:  # reading again: only once the writer's header is there
            assert header_written.wait(WAIT_S), "the writer never wrote the batch's header"
        look = read(fs, p)  # verify reads a look a window at a time: here all of it at once, now
        try:
            data = tail.InMemory(look.read(0, look.size))
        finally:
            look.file.close()
        torn_read.set()
        return data

    monkeypatch.setattr(V, "_read", watched_read)

    class VerifyBeforeHeader(OsFileSystem):
        armed = False
        body_done = False

        def open_write(self, path: str, create: bool):  # type: ignore[no-untyped-def]
            f = super().open_write(path, create)
            inner = f.pwrite
            fs = self

            def pwrite(data, offset: int) -> int:  # type: ignore[no-untyped-def]
                n = inner(data, offset)
                if fs.body_done:  # the batch's first header: the batch is whole now
                    fs.body_done = False
                    header_written.set()
                if fs.armed and len(data) > fmt.FRAME_HEADER_SIZE_BYTES:  # the body: its header comes next
                    fs.armed = False
                    fs.body_done = True
                    verifier.start()
                    assert torn_read.wait(WAIT_S), "verify never read the live segment"
                return n

            f.pwrite = pwrite  # type: ignore[method-assign]
            return f

    verifier = threading.Thread(target=lambda: reports.append(V.verify(jpath)), daemon=True)
    fs = VerifyBeforeHeader()
    with journal.open(jpath, create=True, fs=fs, block_bytes=0) as w:  # five frames: header last
        w.append({"n": 0})
        fs.armed = True
        w.append_many([{"n": i} for i in range(1, 6)])
        verifier.join(WAIT_S)  # with the lock still held, as while the writer appends
    assert header_written.is_set() and len(reads) >= 2, reads
    assert reports, "verify never ran"
    assert reports[0].verdict == V.CLEAN and reports[0].torn_tail is None, reports[0].summary()


def test_a_blocked_waiter_is_not_the_lock_holder() -> None:
    from journal.fs import holder_in_proc_locks

    lines = [
        "1: POSIX  ADVISORY  WRITE 100 fe:00:77 0 EOF",
        "2: FLOCK  ADVISORY  READ 200 fe:00:77 0 EOF",
        "2: -> FLOCK  ADVISORY  WRITE 300 fe:00:77 0 EOF",
        "3: FLOCK  ADVISORY  WRITE 400 fe:00:78 0 EOF",
    ]
    assert holder_in_proc_locks(lines, "fe:00:77") is None  # shared holder, blocked writer
    assert holder_in_proc_locks(lines, "fe:00:78") == 400
    assert holder_in_proc_locks([], "fe:00:78") is None


def test_a_racing_reader_with_a_lower_record_limit_gets_the_right_error(jpath: str) -> None:
    """Was a bug: the reread of the frame at a damaged offset refused frames over the reader's
    own record limit, so a race turned RecordTooLargeError into corruption of committed data."""
    from journal.engine.reader import Cursor

    with journal.open(jpath, create=True, compress=False) as w:
        w.append({"n": 1})

        def during() -> None:
            w.append(b"a" * 9000)  # over the reader's limit below
            w.append(b"b" * 6000)
            w.append({"n": 4})

        fs = _SplitPreadFS(during)
        cur = Cursor(fs, jpath, 0, 4096)
        try:
            with pytest.raises(journal.RecordTooLargeError):
                for _ in range(3):
                    list(cur.read())
            assert fs.fired
        finally:
            cur.close()


def test_a_damaged_footer_before_a_later_segment_is_reported_not_skipped(jpath: str) -> None:
    """Was a bug (older than the reservation): a non-last segment whose seal footer is damaged
    was read as the live segment, and read() stopped at its end without a word."""
    with journal.open(jpath, create=True, compress=False, segment_size_bytes=8192) as w:
        for i in range(200):
            w.append({"i": i, "pad": "x" * 100}, durability="flush")
    first = segments(jpath)[0]
    data = bytearray(first.read_bytes())
    data[-12] ^= 0xFF  # inside the footer's payload
    first.write_bytes(bytes(data))
    with journal.open(jpath, readonly=True) as j:
        with pytest.raises(journal.CorruptionError, match="no valid seal footer"):
            list(j.read())
