"""Races and limits of the writer, each first found as a bug in review of the storage core.

Each test was a failing reproducer; its docstring says what the bug was. They stay as
regression tests of the fixes. No test waits for time to pass: each interleaving is forced with
events set from inside the writer (a pwrite that blocks until released, a wait on the handle's
condition variable, a request joining the queue), so a slow machine cannot make a race pass.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Callable

import pytest
import zstandard

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import encoding
from journal.engine import format as fmt
from journal.engine.reader import Cursor
from journal.fs import OsFileSystem
from tests.conftest import frames_of, live_segment


class _GateFile:
    """A file whose next pwrite (once armed) blocks until released, then writes or fails."""

    def __init__(self, fs: GateFS, inner) -> None:
        self._fs = fs
        self._inner = inner
        self.path = inner.path

    def pread(self, size: int, offset: int) -> bytes:
        return self._inner.pread(size, offset)

    def pwrite(self, data, offset: int) -> int:
        fs = self._fs
        if fs.armed:
            fs.armed = False
            fs.entered.set()
            assert fs.release.wait(5), "test gate never released"
            if fs.fail_errno is not None:
                raise OSError(fs.fail_errno, "injected by the gate", self.path)
        return self._inner.pwrite(data, offset)

    def truncate(self, size: int) -> None:
        if self._fs.before_truncate is not None:
            hook, self._fs.before_truncate = self._fs.before_truncate, None
            hook()
        self._inner.truncate(size)

    def fsync(self) -> None:
        self._inner.fsync()

    def fdatasync(self) -> None:
        self._inner.fdatasync()

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class GateFS(OsFileSystem):
    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_errno: int | None = None
        self.before_truncate = None

    def arm(self, fail_errno: int | None = None) -> None:
        self.entered.clear()
        self.release.clear()
        self.fail_errno = fail_errno
        self.armed = True

    def open_write(self, path: str, create: bool):
        return _GateFile(self, super().open_write(path, create))


WAIT_S = 10  # how long an event may take before the test gives up: a hang, never a timing


def _run(fn, box: list, key: str, done: threading.Event | None = None):
    """Run ``fn`` in a thread named ``key``; its result (or exception) goes to ``box``."""

    def target() -> None:
        try:
            box.append((key, fn()))
        except BaseException as exc:
            box.append((key, exc))
        finally:
            if done is not None:
                done.set()

    t = threading.Thread(target=target, name=key, daemon=True)
    t.start()
    return t


class WatchedCondition(threading.Condition):
    """The handle's condition variable, telling the test which threads began to wait on it (a
    retry waiting for its original's outcome). The event is set under the handle's mutex, just
    before the wait releases it: whatever the test does next happens while that thread waits."""

    def __init__(self, lock) -> None:
        super().__init__(lock)
        self.waiting: dict[str, threading.Event] = {}

    def event(self, name: str) -> threading.Event:
        return self.waiting.setdefault(name, threading.Event())

    def wait(self, timeout=None):
        self.event(threading.current_thread().name).set()
        return super().wait(timeout)


def watch_waits(j) -> WatchedCondition:
    cv = WatchedCondition(j._mu)
    j._cv = cv
    return cv


def watch_queue(j, on_queued=None) -> dict[str, threading.Event]:
    """Events set when a thread (by name) has queued a request: it then waits for a leader.
    ``on_queued(req, leading)`` runs under the mutex right after."""
    queued: dict[str, threading.Event] = {}
    enqueue = j._enqueue

    def watched(req):
        leading = enqueue(req)
        if on_queued is not None:
            on_queued(req, leading)
        queued.setdefault(threading.current_thread().name, threading.Event()).set()
        return leading

    j._enqueue = watched
    return queued


def queued_event(queued: dict[str, threading.Event], name: str) -> threading.Event:
    return queued.setdefault(name, threading.Event())


# --- 1. idempotency-key duplicates acknowledged before the original is settled ---------------


def test_duplicate_key_is_committed_although_the_original_was_rolled_back(jpath: str) -> None:
    """the writer (_submit): a retry whose key matches a key that is only *claimed* (its
    record is queued or in the leader's in-flight batch) gets ``Committed(duplicate=True)`` at
    once, at the durability it asked for, without waiting for the original's outcome. Here the
    original's write fails and is rolled back (NotCommitted, seq reused), yet the retry was told
    Committed(seq 1, "sync"): an acknowledged record that is not, and never will be, in the
    journal. (Even without a failure the duplicate claims "sync" before the original's
    fdatasync has returned, so a power loss can lose an acknowledged record.)"""
    fs = GateFS()
    j = journal.open(jpath, create=True, fs=fs)
    cv = watch_waits(j)
    try:
        fs.arm(fail_errno=errno.ENOSPC)
        box: list = []
        ta = _run(lambda: j.append({"n": 1}, idempotency_key="k"), box, "a")
        assert fs.entered.wait(WAIT_S)
        # The retry must wait for the original's outcome: it waits on the handle's condition, or
        # (the bug) returns at once. Either sets the event.
        tb = _run(lambda: j.append({"n": 1}, idempotency_key="k"), box, "b", done=cv.event("b"))
        assert cv.event("b").wait(WAIT_S)
        assert "b" not in dict(box), f"the retry returned {dict(box)['b']} while its original was in flight"
        fs.release.set()
        ta.join(WAIT_S)
        tb.join(WAIT_S)
        out = dict(box)
        a, b = out["a"], out["b"]
        assert isinstance(a, journal.NotCommitted), a
        # The original is gone, so the retry is the record: written, synced, at the freed seq.
        assert b == journal.Committed(1, "sync") and not b.duplicate, f"retry was told {b}; the original was {a}"
        rec = j.get(1)
        assert rec is not None and rec.key == "k" and rec.event == {"n": 1}, rec
    finally:
        fs.release.set()
        j.close()


def test_duplicate_key_reports_a_stale_seq_after_renumbering(jpath: str) -> None:
    """the writer: a duplicate's outcome is computed from the claimed seq
    at submit time. When an earlier batch is rolled back, the queued original is renumbered
    (seq 2 -> 1) and the key map is updated, but the duplicate already holds Committed(seq 2)
    and returns it: the caller is acknowledged a seq that holds a different record (or none)."""
    fs = GateFS()
    j = journal.open(jpath, create=True, fs=fs)
    cv = watch_waits(j)
    queued = watch_queue(j)
    try:
        fs.arm(fail_errno=errno.ENOSPC)
        box: list = []
        tx = _run(lambda: j.append({"x": 1}), box, "x")  # leads alone, blocks, then fails
        assert fs.entered.wait(WAIT_S)
        ta = _run(lambda: j.append({"n": 1}, idempotency_key="k"), box, "a")  # queued at seq 2
        assert queued_event(queued, "a").wait(WAIT_S)
        # A duplicate of seq 2: it waits for the original's outcome (or, the bug, answers at once).
        tb = _run(lambda: j.append({"n": 1}, idempotency_key="k"), box, "b", done=cv.event("b"))
        assert cv.event("b").wait(WAIT_S)
        fs.release.set()
        for t in (tx, ta, tb):
            t.join(WAIT_S)
        out = dict(box)
        assert isinstance(out["x"], journal.NotCommitted), out
        a, b = out["a"], out["b"]
        assert isinstance(a, journal.Committed) and a.seq == 1, a
        assert isinstance(b, journal.Committed) and b.duplicate
        assert b.seq == a.seq, f"duplicate told seq {b.seq}, the record is at seq {a.seq}"
    finally:
        fs.release.set()
        j.close()


# --- 2. sync()/flush() return while buffered records are still in flight ---------------------


@pytest.mark.parametrize("call", ["sync", "flush"])
def test_sync_returns_while_buffered_records_are_in_another_threads_batch(jpath: str, call: str) -> None:
    """the writer (_submit): flush()/sync() return at once when the queue is empty and (for
    sync) ``_unsynced`` is False. But the queue is also empty while another thread leads a batch
    that carries this handle's buffered records, and ``_unsynced`` only turns True after that
    batch's pwrite. So sync() returns "everything appended so far is durable" before the
    buffered record has even reached the OS; here that write then fails, the buffered record is
    lost and the journal fail-stops, yet sync()/flush() returned normally instead of raising
    JournalFailStoppedError."""
    fs = GateFS()
    j = journal.open(jpath, create=True, fs=fs)
    settled = threading.Event()  # the call either queued behind the batch, or returned
    watch_queue(j, on_queued=lambda req, leading: settled.set() if threading.current_thread().name == "call" else None)
    try:
        assert isinstance(j.append({"b": 1}, durability="buffered"), journal.Committed)
        fs.arm(fail_errno=errno.ENOSPC)
        box: list = []
        tl = _run(lambda: j.append({"s": 1}), box, "leader")  # carries the buffered record
        assert fs.entered.wait(WAIT_S)
        ts = _run(getattr(j, call), box, "call", done=settled)
        assert settled.wait(WAIT_S)
        returned_early = dict(box).get("call", "still waiting")
        fs.release.set()
        tl.join(WAIT_S)
        ts.join(WAIT_S)
        result = dict(box)["call"]
        assert returned_early == "still waiting", (
            f"{call}() returned {returned_early!r} while the batch carrying the buffered record was "
            f"still in flight; that write then failed and the record is lost"
        )
        assert isinstance(result, journal.JournalFailStoppedError), result
    finally:
        fs.release.set()
        j.close()


# --- 3. close() swallows the failure of its final flush --------------------------------------


def test_close_reports_a_failed_flush_of_buffered_records(jpath: str) -> None:
    """the writer (close): close() writes buffered records with ``_submit([], "flush")``
    and ignores the result. If that write fails, the buffered records are lost and the journal
    fail-stops, but close() returns normally: unlike flush() and sync() (which raise
    JournalFailStoppedError), the caller is never told its records did not reach the OS."""
    fs = FaultyFileSystem(OsFileSystem())
    j = journal.open(jpath, create=True, fs=fs)
    j.append({"n": 1}, durability="buffered")
    fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
    with pytest.raises(journal.JournalFailStoppedError):
        j.close()
    fs.clear()
    with journal.open(jpath) as j2:  # the write failed whole and was rolled back: the record is lost
        assert [r.event for r in j2.read()] == []


# --- 4. lock-free reader: spurious corruption while the writer appends -----------------------


def test_reader_raises_corruption_on_a_healthy_journal_being_appended(jpath: str) -> None:
    """the reader (_check_live_tail): the cursor scans a chunk read up to the size it saw
    (a multi-page pwrite can be seen half done: i_size grows page by page), stops at the
    incomplete frame, then re-reads the *current* file to look for a durable point after it.
    By then the writer has finished that frame (commit-marked, synced) and written the next
    batch, so find_durable_point finds a commit frame followed by a higher seq and the reader
    raises CorruptionError on a perfectly healthy journal. The search should be limited to the
    bytes of the snapshot the scan used (or re-scan from the stop offset first)."""
    with journal.open(jpath, create=True, compress=False) as j:
        j.append({"n": 1})
        j.append({"n": 2})
        j.append(os.urandom(20000))  # seq 3: a multi-page frame, commit-marked
        j.append({"n": 4})  # a later batch: proves seq 3's fdatasync completed
    seg = live_segment(jpath)
    full = seg.read_bytes()
    f3 = frames_of(seg)[2]
    assert f3.seq == 3 and f3.flags & fmt.FLAG_COMMIT
    # The reader sees the file while the writer's pwrite of seq 3 is half done.
    with open(seg, "r+b") as fh:
        fh.truncate(f3.offset + 9000)

    class AfterFirstChunk(OsFileSystem):
        def open_read(self, path: str):
            inner = super().open_read(path)

            class F:
                def __init__(self) -> None:
                    self.path = inner.path
                    self.done = False

                def pread(self, size: int, offset: int) -> bytes:
                    data = inner.pread(size, offset)
                    if offset == fmt.SEGMENT_HEADER_SIZE_BYTES and not self.done:
                        self.done = True
                        seg.write_bytes(full)  # the writer completes seq 3 and appends seq 4
                    return data

                def size(self) -> int:
                    return inner.size()

                def close(self) -> None:
                    inner.close()

            return F()

    cur = Cursor(AfterFirstChunk(), jpath, 0, fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
    try:
        seen = [r.seq for r in cur.read()]  # raises CorruptionError today
        assert seen[:2] == [1, 2]
    finally:
        cur.close()


# --- 5. lock-free reader sees records of a write that is then rolled back --------------------


def test_follower_never_sees_a_rolled_back_record(jpath: str) -> None:
    """the writer: a short write (ENOSPC after part of the batch reached the
    file) leaves complete, checksum-valid frames in the live segment until ``_roll_back``
    truncates them. A lock-free reader (follow(), a read-only handle, another process) reading in
    that window yields the record; the writer then answers NotCommitted ("nothing of the record
    is on disk and never will be") and reuses its seq for the next record. The follower has
    moved past that seq and never yields the real record: its view of the journal silently
    diverges from the journal. GUARANTEES.md promises readers see records "as they are on
    disk" and NotCommitted bytes "never will be part of the journal"; neither holds."""
    fs = GateFS()
    j = journal.open(jpath, create=True, fs=fs, compress=False, block_bytes=0)  # a batch of two frames
    follower = Cursor(OsFileSystem(), jpath, 0, fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
    seen: list[tuple[int, object]] = []
    try:
        j.append({"n": 1})

        active = j._active
        inner_pwrite = active.pwrite
        state = {"calls": 0}

        def pwrite(data, offset):
            # The next batch's first pwrite gets only its first frame out, then the disk is full.
            state["calls"] += 1
            if state["calls"] == 1:
                first = fmt.FRAME_HEADER_SIZE_BYTES + fmt.read_frame_header(bytes(data[:32]), 0)[1]
                return inner_pwrite(memoryview(data)[:first], offset)
            if state["calls"] == 2:
                raise OSError(errno.ENOSPC, "disk full", active.path)
            return inner_pwrite(data, offset)

        # A lock-free follower reads in the window between the short write and the rollback.
        fs.before_truncate = lambda: seen.extend((r.seq, r.event) for r in follower.read())
        active.pwrite = pwrite
        outs = j.append_many([{"n": "phantom"}, {"n": "phantom-2"}])
        assert all(isinstance(o, journal.NotCommitted) for o in outs), outs
        assert j.append({"n": 2}) == journal.Committed(2, "sync")
        seen.extend((r.seq, r.event) for r in follower.read())
        truth = [(r.seq, r.event) for r in j.read()]
        assert seen == truth, f"follower saw {seen}, the journal holds {truth}"
    finally:
        follower.close()
        j.close()


# --- 6. a reopened journal never fdatasyncs what the previous writer left unsynced -----------


def test_reopened_journal_reports_sync_without_ever_syncing(jpath: str) -> None:
    """the writer (_open_writer) starts with ``_unsynced = False`` and fdatasyncs the live
    segment only when it cuts a tail. Records a previous writer wrote at "flush" (or a sync
    batch whose fdatasync it never reached before kill -9) may still be only in the page cache.
    On the reopened handle a retry with the same idempotency key at "sync" returns
    Committed(durability="sync", duplicate=True), and sync() ("everything appended so far is
    durable") returns, both without a single fdatasync: a power loss now loses a record the
    journal just called synced. resolve() has the same problem (it always answers "sync")."""
    with journal.open(jpath, create=True) as j:
        assert j.append({"n": 1}, durability="flush", idempotency_key="k") == journal.Committed(1, "flush")
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(jpath, fs=fs) as j2:
        out = j2.append({"n": 1}, durability="sync", idempotency_key="k")
        assert isinstance(out, journal.Committed) and out.duplicate and out.durability == "sync"
        j2.sync()
        assert fs.calls["fdatasync"] + fs.calls["fsync"] > 0, "Committed(sync) and sync() without any fsync"


def test_reopen_makes_a_killed_writers_tail_durable_before_appending(jpath: str) -> None:
    """find_durable_point assumes "the writer never writes a batch before the previous batch's
    fdatasync has returned", so a genuine frame with a higher seq after a commit frame proves
    that commit was durable. Across a reopen that held only if the reopening writer makes the
    tail durable first: writer A writes a sync batch (commit on seq 3) and is killed before its
    fdatasync; writer B reopens and appends seq 4; a power loss could then keep 3 and 4, lose 2,
    and recovery would refuse a journal that lost nothing acknowledged. Recovery now fdatasyncs
    the live segment before anything is appended."""

    class KilledBeforeSync(OsFileSystem):
        def open_write(self, path: str, create: bool):
            f = super().open_write(path, create)
            f.fdatasync = lambda: None  # type: ignore[method-assign]  # killed before it runs
            return f

    with journal.open(jpath, create=True, compress=False) as j:
        assert j.append({"n": 1}) == journal.Committed(1, "sync")
    ja = journal.open(jpath, fs=KilledBeforeSync(), compress=False)
    ja.append_many([os.urandom(9000), {"n": 3}])  # writer A dies before its fdatasync
    ja._release()  # the kernel drops A's lock when it dies
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(jpath, compress=False, fs=fs) as jb:
        assert jb.last_seq == 3
        synced_at_open = fs.calls["fdatasync"]
        assert synced_at_open >= 1  # before any append: seqs 2-3 are durable from here on
        assert [op for op, _ in fs.trace if op == "pwrite"] == []
        assert jb.append({"n": 4}, durability="flush") == journal.Committed(4, "flush")


# --- 7. append_many loses the outcomes of its first chunk when a later chunk is refused -----


def test_append_many_returns_outcomes_of_a_chunk_that_fail_stopped(jpath: str) -> None:
    """the writer (append_many): events are submitted in chunks of BATCH_RECORDS_MAX. If
    the first chunk's fdatasync fails, its records are AckLost and the journal fail-stops; the
    next chunk's _submit then raises JournalFailStoppedError and the AckLost outcomes (seq,
    digest, key: what resolve() needs) are thrown away. The caller cannot tell which records
    may be on disk. The remaining chunks should get NotCommitted instead of an exception."""
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(jpath, create=True, fs=fs) as j:
        fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
        outs = j.append_many([{"n": i} for i in range(4097)])  # raises today
        assert len(outs) == 4097
        assert isinstance(outs[0], journal.AckLost)
        assert isinstance(outs[-1], journal.NotCommitted)


# --- 8. limits ---------------------------------------------------------------------------------


def test_one_append_many_call_is_not_bounded_by_the_batch_size(jpath: str) -> None:
    """the writer (_take_batch) always takes the first request whole, so one append_many
    call of up to 4096 records is one write of any size (here 6 MiB; up to 4096 x 16 MiB),
    although GUARANTEES.md says "A batch is bounded (4 MiB, 4096 records)" and DESIGN asks for
    a limit on everything. Split a request by bytes as well as by records."""
    writes: list[int] = []

    class Recording(OsFileSystem):
        def open_write(self, path: str, create: bool):
            f = super().open_write(path, create)
            inner = f.pwrite

            def pwrite(data, offset):
                writes.append(len(data))
                return inner(data, offset)

            f.pwrite = pwrite  # type: ignore[method-assign]
            return f

    with journal.open(jpath, create=True, fs=Recording(), compress=False) as j:
        outs = j.append_many([os.urandom(1024 * 1024) for _ in range(6)])
        assert all(isinstance(o, journal.Committed) for o in outs)
    assert max(writes) <= 4 * 1024 * 1024, f"one write of {max(writes)} bytes"


# --- 9. error messages ---------------------------------------------------------------------


def test_record_too_large_on_read_says_what_to_do(jpath: str) -> None:
    """the reader raises RecordTooLargeError while *reading* a record larger than the
    handle's record_size_bytes_max; its message (errors.RecordTooLargeError) is written for appends:
    "store large outputs elsewhere ... nothing was written". A reader is told nothing useful
    (open the journal with record_size_bytes_max at least N to read it)."""
    with journal.open(jpath, create=True, record_size_bytes_max=100_000) as j:
        j.append({"blob": "x" * 50_000})
    with journal.open(jpath, readonly=True, record_size_bytes_max=10_000) as j:
        with pytest.raises(journal.JournalError) as info:
            list(j.read())
    assert "nothing was written" not in str(info.value), str(info.value)


# --- 10. an interrupted follower takes group-commit leadership with it ------------------------


def test_interrupted_follower_does_not_wedge_the_writer(jpath: str) -> None:
    """the writer (_submit): a follower parks on ``req.wake.acquire()``. If that wait is
    interrupted (KeyboardInterrupt / any signal handler exception in the main thread; the
    acquire is interruptible), the request stays in the queue. When the leader finishes it
    calls _hand_off(), which releases that request's lock to make it the next leader; nobody is
    there to lead, ``_leader`` stays True, and every later append queues behind it forever.
    Fix: on an exception while waiting, remove the request from the queue under the mutex (or,
    if leadership was already handed to it, hand it on)."""
    import signal

    class Interrupted(Exception):
        pass

    interrupted = threading.Event()

    def handler(signum, frame):
        if not interrupted.is_set():  # once: a repeated signal must not land in the recovery path
            interrupted.set()
            raise Interrupted

    class ParkedLock:
        """The follower's wake lock: says when the follower blocks on it, inside the writer's
        try block, so the signal lands while it is parked and not before."""

        def __init__(self, inner: threading.Lock, parked: threading.Event) -> None:
            self._inner = inner
            self._parked = parked

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            if blocking:
                self._parked.set()
            return self._inner.acquire(blocking, timeout)

        def release(self) -> None:
            self._inner.release()

    old = signal.signal(signal.SIGUSR1, handler)
    fs = GateFS()
    j = journal.open(jpath, create=True, fs=fs)
    parked = threading.Event()
    main = threading.main_thread().ident
    assert threading.get_ident() == main

    def park(req, leading: bool) -> None:
        if not leading and threading.get_ident() == main:
            req.wake = ParkedLock(req.wake, parked)

    watch_queue(j, on_queued=park)
    try:
        fs.arm()
        box: list = []
        tl = _run(lambda: j.append({"leader": 1}), box, "leader")
        assert fs.entered.wait(WAIT_S)

        def interrupt() -> None:
            parked.wait(WAIT_S)  # (not parked by then: interrupt anyway, and the test fails below)
            # A signal that lands after the follower said it parks but before it blocks in the
            # lock is only seen when the lock is released: send it until the handler has run.
            while True:
                signal.pthread_kill(main, signal.SIGUSR1)
                if interrupted.wait(0.01):
                    return

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(Interrupted):
            j.append({"follower": 1})  # parks as a follower, then is interrupted
        assert parked.is_set(), "the follower was interrupted before it parked"
        fs.release.set()
        tl.join(WAIT_S)
        tn = _run(lambda: j.append({"next": 1}), box, "next")
        tn.join(WAIT_S)
        assert not tn.is_alive(), "the next append never returns: leadership was handed to a dead waiter"
    finally:
        fs.release.set()
        signal.signal(signal.SIGUSR1, old)
        j._closed = True  # close() could block on the wedged queue
        j._release()


def test_sync_append_leads_when_only_buffered_records_are_queued(jpath: str) -> None:
    """the writer (_append_alone): a sync append that finds the queue non-empty joins it under
    the same hold of the mutex. Buffered records queue with no leader, so a version that parked
    whenever the queue was non-empty waited for a leader that never came. Fix: lead when
    nobody does."""
    j = journal.open(jpath, create=True)
    try:
        assert isinstance(j.append({"b": 1}, durability="buffered"), journal.Committed)
        box: list = []
        t = _run(lambda: j.append({"s": 2}), box, "sync")
        t.join(10)
        assert not t.is_alive(), "a sync append behind buffered records never returned"
        assert box == [("sync", journal.Committed(2, "sync"))]
        assert [r.event for r in j.read()] == [{"b": 1}, {"s": 2}]
    finally:
        j.close()


def test_contended_sync_appends_all_commit_in_order(jpath: str) -> None:
    """the writer (_append_alone): with many threads every sync append joins the queue; mixed
    with buffered appends from the same threads, every record commits once, seqs are contiguous
    and each thread's records are in its own order."""
    j = journal.open(jpath, create=True)
    seqs: dict[int, list[int]] = {}

    def worker(n: int) -> None:
        got = seqs.setdefault(n, [])
        for i in range(60):
            out = j.append({"t": n, "i": i}, durability="buffered" if i % 5 == 0 else "sync")
            assert isinstance(out, journal.Committed)
            got.append(out.seq)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not any(t.is_alive() for t in threads), "an append never returned"
        assert sorted(s for v in seqs.values() for s in v) == list(range(1, 8 * 60 + 1))
        records = list(j.read())
        assert [r.seq for r in records] == list(range(1, 8 * 60 + 1))
        for n, got in seqs.items():
            assert got == sorted(got)
            assert [r.event["i"] for r in records if r.event["t"] == n] == list(range(60))
    finally:
        j.close()


def _queue_behind_a_gated_leader(
    j, gate: GateFS, queued: dict[str, threading.Event], lead_event: dict, names: list[str], box: list,
    text: Callable[[int], str] = lambda n: "w" * 300,
) -> list[threading.Thread]:
    """Start an append named "lead" and hold it in its write (the gate), then one append per
    name in ``names`` ({"n": i, "text": text(i)}), each seen queued behind it before the next
    starts. The threads, lead first; the test releases the gate."""
    gate.arm()
    threads = [_run(lambda: j.append(lead_event), box, "lead")]
    assert gate.entered.wait(WAIT_S), "the leading append never reached its write"
    for n, name in enumerate(names):
        threads.append(_run(lambda n=n: j.append({"n": n, "text": text(n)}), box, name))
        assert queued_event(queued, name).wait(WAIT_S), f"{name} never queued"
    return threads


@pytest.mark.parametrize("fault", [None, "the block's write"])
def test_sync_appends_that_wait_for_one_group_commit_share_a_block(jpath: str, fault: str | None) -> None:
    """the writer (_append_alone, _write_batch): a sync append compresses its record once it
    knows whether it writes alone. One that leads at once gets a frame of its own; the ones that
    queue behind it meet in the next batch and share a block frame, compressed once (one write,
    one fdatasync, so one fate: with the write failing, none of them is committed and the
    journal goes on)."""
    gate = GateFS()
    fs = FaultyFileSystem(gate)
    j = journal.open(jpath, create=True, fs=fs)
    queued = watch_queue(j)
    waiting = [f"w{n}" for n in range(4)]
    box: list = []
    try:
        assert j.append({"first": True}) == journal.Committed(1, "sync")
        threads = _queue_behind_a_gated_leader(j, gate, queued, {"lead": True, "text": "l" * 300}, waiting, box)
        if fault is not None:
            fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])  # the next write: the leader's is counted
        gate.release.set()
        for t in threads:
            t.join(WAIT_S)
            assert not t.is_alive(), "an append never returned"
        got = dict(box)
        assert got["lead"] == journal.Committed(2, "sync")
        if fault is None:
            assert sorted(got[name].seq for name in waiting) == [3, 4, 5, 6]
            assert all(got[name] == journal.Committed(got[name].seq, "sync") for name in waiting)
        else:
            assert fs.injected, "the block's write was never failed"
            assert all(isinstance(got[name], journal.NotCommitted) for name in waiting)
        after = j.append({"after": True})
        assert isinstance(after, journal.Committed)
    finally:
        j.close()
    frames = frames_of(live_segment(jpath))
    kinds = [(f.flags & fmt.FLAG_KIND_MASK, f.records) for f in frames]
    if fault is None:
        assert kinds == [(fmt.KIND_DATA, 1), (fmt.KIND_DATA, 1), (fmt.KIND_BLOCK, 4), (fmt.KIND_DATA, 1)]
        assert frames[2].flags & fmt.FLAG_COMMIT and frames[2].flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD
    else:
        assert kinds == [(fmt.KIND_DATA, 1)] * 3
    with journal.open(jpath) as r:
        events = [rec.event for rec in r.read()]
        assert r.recovery.actions == []
    expected_waiting = [] if fault else sorted(({"n": n, "text": "w" * 300} for n in range(4)), key=lambda e: e["n"])
    assert events[:2] == [{"first": True}, {"lead": True, "text": "l" * 300}]
    assert sorted(events[2:-1], key=lambda e: e["n"]) == expected_waiting and events[-1] == {"after": True}


def _words(seed: int) -> str:
    """Text with some repetition and some entropy: zstd's levels make different frames of it."""
    rng = random.Random(seed)
    vocab = ["tool_result", "assistant", "passes", "src/engine.py", "line", "def", "return", "ok", "0x1f", "path"]
    return " ".join(rng.choice(vocab) + str(rng.randrange(100)) for _ in range(80))


def _block_bodies(jpath: str) -> list[tuple[bytes, bytes]]:
    """(the records' joined payloads, the stored zstd body) of every block frame of the live segment."""
    data = live_segment(jpath).read_bytes()
    out = []
    for f in frames_of(live_segment(jpath)):
        if f.flags & fmt.FLAG_KIND_MASK != fmt.KIND_BLOCK:
            continue
        stored = data[f.offset + fmt.FRAME_HEADER_SIZE_BYTES : f.offset + fmt.FRAME_HEADER_SIZE_BYTES + f.stored_len]
        head = fmt.BLOCK_COUNT_SIZE_BYTES + fmt.BLOCK_ENTRY_SIZE_BYTES * f.records
        body = stored[head:]
        out.append((zstandard.ZstdDecompressor().decompress(body, max_output_size=f.raw_len), body))
    return out


def test_a_block_callers_wait_for_is_compressed_at_the_records_level_and_a_buffered_one_at_the_blocks(
    jpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """the writer (_write_batch's ``waited``): the leader of a group commit compresses a block of
    the records of callers parked until its write returns, on every one of those callers' path:
    at encoding.ZSTD_LEVEL, as their records alone would be. A block of buffered records (their
    callers already hold their answer) is compressed at encoding.BLOCK_ZSTD_LEVEL."""
    monkeypatch.setattr(encoding, "BLOCK_ZSTD_LEVEL", 19)  # far from ZSTD_LEVEL: the two bodies differ
    gate = GateFS()
    j = journal.open(jpath, create=True, fs=gate)
    queued = watch_queue(j)
    waiting = [f"w{n}" for n in range(4)]
    box: list = []
    try:
        assert j.append({"first": True}) == journal.Committed(1, "sync")
        threads = _queue_behind_a_gated_leader(
            j, gate, queued, {"lead": True, "text": "l" * 300}, waiting, box, text=lambda n: _words(n)
        )
        gate.release.set()
        for t in threads:
            t.join(WAIT_S)
            assert not t.is_alive(), "an append never returned"
        for n in range(6):
            j.append({"buffered": n, "text": _words(100 + n)}, durability="buffered")
        j.sync()
    finally:
        j.close()
    (waited_raw, waited_body), (buffered_raw, buffered_body) = _block_bodies(jpath)
    opts = journal.Options()
    assert waited_body == encoding._compressed(waited_raw, opts, block=False)[0]
    assert waited_body != encoding._compressed(waited_raw, opts, block=True)[0]
    assert buffered_body == encoding._compressed(buffered_raw, opts, block=True)[0]
    assert buffered_body != encoding._compressed(buffered_raw, opts, block=False)[0]


def test_a_sync_append_deferred_for_a_group_commit_that_ended_is_compressed_alone(jpath: str) -> None:
    """the writer (Journal.append, _append_alone): whether to defer compression is decided from
    a look at the group commit without the mutex. A record deferred because a commit was under
    way, whose caller then finds nobody leading, is written alone: compressed alone, in a data
    frame of its own, never stored raw."""
    gate = GateFS()
    j = journal.open(jpath, create=True, fs=gate)
    box: list = []
    text = "z" * 400
    try:
        t, proceed = _late_deferred_append(j, gate, {"lead": True, "text": text}, {"late": True, "text": text}, box)
        assert dict(box)["lead"] == journal.Committed(1, "sync")
        proceed.set()
        t.join(WAIT_S)
        assert not t.is_alive() and dict(box)["late"] == journal.Committed(2, "sync")
    finally:
        j.close()
    frames = frames_of(live_segment(jpath))
    assert [(f.flags & fmt.FLAG_KIND_MASK, f.records) for f in frames] == [(fmt.KIND_DATA, 1)] * 2
    assert all(f.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD for f in frames)
    with journal.open(jpath, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [{"lead": True, "text": text}, {"late": True, "text": text}]


def _late_deferred_append(
    j, gate: GateFS, lead_event: dict, event: dict, box: list
) -> tuple[threading.Thread, threading.Event]:
    """Start an append named "late" that encodes while a leading append is in its write (so its
    record is deferred), then waits before it takes the mutex until the returned event is set;
    the leader is let go and has returned by then."""
    proceed = threading.Event()
    arrived = threading.Event()
    append_alone = j._append_alone

    def late(enc, level):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "late":
            arrived.set()
            assert proceed.wait(WAIT_S), "the test never let the late append go on"
        return append_alone(enc, level)

    j._append_alone = late
    gate.arm()
    lead = _run(lambda: j.append(lead_event), box, "lead")
    assert gate.entered.wait(WAIT_S), "the leading append never reached its write"
    t = _run(lambda: j.append(event), box, "late")
    assert arrived.wait(WAIT_S), "the late append never got past encoding"
    gate.release.set()
    lead.join(WAIT_S)
    assert not lead.is_alive()
    return t, proceed


def test_a_failure_compressing_a_lone_deferred_record_gives_its_seq_back(
    jpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """the writer (_append_alone): a deferred record whose caller leads alone is compressed after
    the caller took the leader's role and a seq. An exception there (MemoryError, or Ctrl-C in
    the zstd call) must end the role and give the seq back, as any failure before the write
    does: left as it was, every later append and close() waited for a leader that had gone."""
    import journal.engine.writer as writer_mod

    gate = GateFS()
    j = journal.open(jpath, create=True, fs=gate)
    box: list = []
    hung = False
    try:
        t, proceed = _late_deferred_append(j, gate, {"lead": True}, {"late": True, "text": "z" * 400}, box)

        def failing(enc, options):  # type: ignore[no-untyped-def]
            raise MemoryError("injected while compressing")

        monkeypatch.setattr(writer_mod, "alone_spec", failing)
        proceed.set()
        t.join(WAIT_S)
        assert not t.is_alive()
        assert isinstance(dict(box)["late"], MemoryError)
        monkeypatch.undo()
        after = _run(lambda: j.append({"after": True}), box, "after")
        after.join(WAIT_S)
        hung = after.is_alive()
        assert not hung, "an append after the failure waited for a leader that had gone"
        assert dict(box)["after"] == journal.Committed(2, "sync")  # the failed record's seq, given back
    finally:
        if not hung:
            j.close()
    with journal.open(jpath) as r:
        assert [rec.event for rec in r.read()] == [{"lead": True}, {"after": True}]


def test_a_failure_compressing_a_batch_rolls_it_back_and_the_journal_goes_on(
    jpath: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """the writer (_write_batch): the leader compresses the deferred records of a batch before
    anything is written. An exception there is a batch that was never written: its callers get
    NotCommitted and the journal goes on (it fail-stopped, calling the records AckLost)."""
    import journal.engine.writer as writer_mod

    gate = GateFS()
    j = journal.open(jpath, create=True, fs=gate)
    queued = watch_queue(j)
    box: list = []
    try:
        threads = _queue_behind_a_gated_leader(j, gate, queued, {"lead": True}, ["w0", "w1", "w2"], box)
        real = writer_mod.frame_specs
        calls: list[int] = []

        def failing(items, options, blocks, waited=False):  # type: ignore[no-untyped-def]
            calls.append(len(items))
            if len(calls) == 1:
                raise MemoryError("injected while compressing the batch")
            return real(items, options, blocks, waited)

        monkeypatch.setattr(writer_mod, "frame_specs", failing)
        gate.release.set()
        for t in threads:
            t.join(WAIT_S)
            assert not t.is_alive(), "an append never returned"
        got = dict(box)
        assert got["lead"] == journal.Committed(1, "sync") and calls[0] == 3
        assert all(isinstance(got[f"w{n}"], journal.NotCommitted) for n in range(3)), got
        assert j.append({"after": True}) == journal.Committed(2, "sync")
    finally:
        j.close()
    with journal.open(jpath) as r:
        assert [rec.event for rec in r.read()] == [{"lead": True}, {"after": True}]
