"""Every outcome, driven by faults injected through the file layer."""

from __future__ import annotations

import errno
import pathlib
import threading

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from tests.conftest import report_count, segments, snapshot_files

SWEPT_OPS = ("pwrite", "fdatasync", "fsync", "truncate", "rename", "fsync_dir", "open_write")
SITES_CHECKED_MIN = 25  # of the 38 call sites the workload below has (6 of them fail its open)


def faulty() -> FaultyFileSystem:
    return FaultyFileSystem(OsFileSystem())


def reopen_records(path: str) -> list[object]:
    with journal.open(path) as j:
        return [r.event for r in j.read()]


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_failed_write_is_rolled_back_and_not_committed(jpath: str, err: int) -> None:
    fs = faulty()
    with journal.open(jpath, create=True, fs=fs) as j:
        j.append({"n": 1})
        fs.fail("pwrite", err, after=fs.calls["pwrite"])
        out = j.append({"n": 2})
        assert isinstance(out, journal.NotCommitted) and out.errno == err and "rolled back" in out.reason
        # The journal carries on: the seq is reused, nothing of the failed record remains.
        assert j.append({"n": 3}) == journal.Committed(2, "sync")
    assert reopen_records(jpath) == [{"n": 1}, {"n": 3}]


def test_short_write_is_truncated_back(jpath: str) -> None:
    fs = faulty()
    with journal.open(jpath, create=True, fs=fs) as j:
        j.append({"n": 1})
        # The segment up to its last frame, without the reserved zeros after it (the frame is
        # raw JSON: it ends in "}").
        committed = segments(jpath)[-1].read_bytes().rstrip(b"\0")
        fs.fail("short_write", after=fs.calls["short_write"])
        out = j.append_many([{"n": 2, "pad": "x" * 500}, {"n": 3}])
        assert all(isinstance(o, journal.NotCommitted) for o in out)
        assert segments(jpath)[-1].read_bytes() == committed  # cut back to the last good frame
        assert j.append({"n": 4}) == journal.Committed(2, "sync")
    assert reopen_records(jpath) == [{"n": 1}, {"n": 4}]


def test_failed_fdatasync_is_ack_lost_and_fail_stop(jpath: str) -> None:
    fs = faulty()
    j = journal.open(jpath, create=True, fs=fs)
    j.append({"n": 1})
    fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
    lost = j.append({"n": 2}, idempotency_key="k2")
    assert isinstance(lost, journal.AckLost) and lost.seq == 2 and lost.key == "k2" and "fdatasync" in lost.reason
    with pytest.raises(journal.JournalFailStoppedError, match="reopen"):
        j.append({"n": 3})
    with pytest.raises(journal.JournalFailStoppedError):
        j.resolve(lost)
    fs.clear()
    j.close()
    with journal.open(jpath) as j2:
        # The bytes did reach the OS, so after reopening the record is there.
        resolved = j2.resolve(lost)
        assert isinstance(resolved, journal.Committed) and resolved.seq == 2
        retry = j2.append({"n": 2}, idempotency_key="k2")
        assert isinstance(retry, journal.Committed) and retry.duplicate and retry.seq == 2


def test_failed_rollback_is_ack_lost_and_resolves_not_committed(jpath: str) -> None:
    fs = faulty()
    j = journal.open(jpath, create=True, fs=fs)
    j.append({"n": 1})
    fs.fail("short_write", after=fs.calls["short_write"])
    fs.fail("truncate", after=fs.calls["truncate"])
    lost = j.append({"n": 2, "pad": "y" * 300})
    assert isinstance(lost, journal.AckLost) and "rollback failed" in lost.reason
    with pytest.raises(journal.JournalFailStoppedError):
        j.append({"n": 3})
    j.close()
    with journal.open(jpath) as j2:
        assert j2.recovery.tail == "torn"  # half a frame was left behind: cut and quarantined
        assert isinstance(j2.resolve(lost), journal.NotCommitted)
        assert j2.append({"n": 2}) == journal.Committed(2, "sync")


@pytest.mark.parametrize("op", ["rename", "fsync_dir", "fsync", "open_write"])
def test_failed_roll_over_is_not_committed_then_fail_stop(jpath: str, op: str) -> None:
    fs = faulty()
    j = journal.open(jpath, create=True, fs=fs, segment_size_bytes=4096, compress=False)
    j.append({"fill": "z" * 3900}, durability="flush")
    fs.fail(op, errno.EIO, after=fs.calls[op])
    out = j.append({"n": 2, "pad": "q" * 200})
    assert isinstance(out, journal.NotCommitted) and "roll-over" in out.reason
    with pytest.raises(journal.JournalFailStoppedError):
        j.append({"n": 3})
    fs.clear()
    j.close()
    with journal.open(jpath) as j2:
        assert j2.last_seq == 1
        assert j2.append({"n": 2}) == journal.Committed(2, "sync")
    assert reopen_records(jpath)[1] == {"n": 2}
    assert not [p for p in pathlib.Path(jpath).iterdir() if p.name.endswith(".tmp")]


def test_failed_truncate_during_recovery_changes_nothing_committed(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append_many([{"n": i} for i in range(5)])
    with open(segments(jpath)[-1], "ab") as f:
        f.write(b"\x01" * 50)
    fs = faulty()
    fs.fail("truncate", errno.EIO)
    with pytest.raises(journal.JournalIOError) as exc:
        journal.open(jpath, fs=fs)
    assert exc.value.errno == errno.EIO and "open it again" in str(exc.value)
    # The quarantine copy was made before the truncate was tried; a clean reopen finishes it.
    with journal.open(jpath) as j:
        assert j.last_seq == 5 and j.recovery.tail == "torn"


def test_queued_appends_after_a_fail_stop_are_not_committed(jpath: str) -> None:
    fs = faulty()
    j = journal.open(jpath, create=True, fs=fs)
    fs.fail("fdatasync", errno.EIO, times=-1)
    results: list[object] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            out: object = j.append({"i": i})
        except journal.JournalFailStoppedError as exc:
            out = exc
        with lock:
            results.append(out)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 16
    # Never Committed: each was lost in flight, refused, or never written.
    assert not any(isinstance(r, journal.Committed) for r in results)
    assert any(isinstance(r, journal.AckLost) for r in results)
    j.close()


def test_every_fault_site_of_a_workload_keeps_the_contract(tmp_path: pathlib.Path) -> None:
    """Count a small workload's file calls, then fail each call in turn.

    Every site's fault must actually be raised, and only the open may fail with an error (then
    nothing was acknowledged, and the journal must still open and hold nothing): an append or a
    close that raises instead of returning an outcome fails the test."""

    def workload(fs: FaultyFileSystem, path: str, outs: list[object]) -> None:
        j = journal.open(path, create=True, fs=fs, segment_size_bytes=4096, compress=False)
        outs.append("opened")
        with j:
            for i in range(12):
                try:
                    outs.append(j.append({"i": i, "pad": "p" * 600}, durability="sync" if i % 3 else "flush"))
                except journal.JournalFailStoppedError:
                    outs.append("stopped")

    counting = faulty()
    workload(counting, str(tmp_path / "count"), [])
    sites = [(op, n) for op, count in counting.calls.items() for n in range(count) if op in SWEPT_OPS]
    assert {op for op, _ in sites} >= {"pwrite", "fdatasync", "truncate", "rename", "fsync_dir", "open_write"}
    checked = failed_open = 0
    for op, n in sites:
        path = str(tmp_path / f"{op}{n}")
        fs = faulty()
        fs.fail(op, errno.EIO, after=n)
        outs: list[object] = []
        try:
            workload(fs, path, outs)
        except journal.JournalError as exc:
            # Only the open may fail; then nothing was acknowledged and nothing may be read back.
            assert outs == [], (op, n, outs, exc)
            assert fs.injected == [(op, n)], (op, n, fs.injected)
            failed_open += 1
            with journal.open(path, create=True) as j:  # creating never finished: create it again
                assert list(j.read()) == [], (op, n)
            continue
        assert fs.injected == [(op, n)], f"the fault at {op} #{n} was never raised: {fs.injected}"
        checked += 1
        outs = outs[1:]
        committed = {o.seq: i for i, o in enumerate(outs) if isinstance(o, journal.Committed)}
        with journal.open(path) as j:
            survivors = {r.seq: r.event for r in j.read()}
        # Every Committed record is there byte for byte; seqs are contiguous from 1.
        assert all(survivors.get(seq) == {"i": i, "pad": "p" * 600} for seq, i in committed.items()), (op, n)
        assert sorted(survivors) == list(range(1, len(survivors) + 1))
        # A NotCommitted record left nothing behind: every surviving record was acknowledged,
        # or was in flight when the journal fail-stopped (AckLost).
        acked = {o.seq for o in outs if isinstance(o, (journal.Committed, journal.AckLost))}
        assert set(survivors) <= acked, (op, n)
        before = snapshot_files(path)
        with journal.open(path) as j:
            assert j.recovery.truncated_at is None, (op, n)
        assert snapshot_files(path) == before
    report_count(
        "fault sites checked (tests/test_faults.py)",
        f"{checked} with the workload running on, {failed_open} failing its open, of {len(sites)} sites",
    )
    assert checked >= SITES_CHECKED_MIN and checked + failed_open == len(sites)


def test_failed_write_with_acknowledged_buffered_records_queued_behind_it_fail_stops(jpath: str) -> None:
    """Their callers hold seqs already: renumbering them would hand the same seq out twice."""
    fs = faulty()
    j = journal.open(jpath, create=True, fs=fs)
    j.append({"n": 1})
    told: list[object] = []

    class Interposer:
        """On the failing pwrite, another caller appends buffered (as a concurrent thread could)."""

        def __init__(self, f: journal.fs.File) -> None:  # type: ignore[name-defined]
            self._f = f
            self.path = f.path

        def pwrite(self, data: bytes | memoryview, offset: int) -> int:
            if not told:
                told.append(j.append({"n": "buffered"}, durability="buffered"))
                raise OSError(errno.EIO, "injected", self.path)
            return self._f.pwrite(data, offset)

        def __getattr__(self, name: str) -> object:
            return getattr(self._f, name)

    j._active = Interposer(j._active)  # type: ignore[assignment, arg-type]
    out = j.append({"n": 2})
    assert isinstance(out, journal.NotCommitted)
    assert told == [journal.Committed(3, "buffered")]
    with pytest.raises(journal.JournalFailStoppedError, match="buffered"):
        j.append({"n": 3})
    j.close()
    with journal.open(jpath) as j2:
        assert [r.event for r in j2.read()] == [{"n": 1}]
