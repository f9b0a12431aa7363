"""Commit groups under injected I/O errors: every I/O site of the group, each held to the outcome
journal/engine/group.py documents for it, then reopened as after a process exit (the OS kept what
was written) or a power loss (only what was synced), and every acknowledged record checked.

The faults go through journal.crashsim.faults.FaultyFileSystem over the recording in-memory file
system, restricted to the paths of one site (a log file, a segment, a GROUP marker), so a call
number names a call of that site alone.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.crashsim.memfs import Image, MemFileSystem
from journal.crashsim.model import CrashState, Replay
from journal.crashsim.workloads import group as wgroup
from journal.engine import group_log as glog
from journal.engine.group import CommitGroup
from journal.errors import JournalFailStoppedError, JournalIOError

ROOT = "/store"
A, B, C = f"{ROOT}/a", f"{ROOT}/b", f"{ROOT}/c/d"
ROTATE_BYTES = 1024  # a few records of ~300 bytes fill a log


class SiteFaults(FaultyFileSystem):
    """FaultyFileSystem whose calls count, and fail, only on the paths ``where`` accepts."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.where: Callable[[str], bool] = lambda path: False

    def check(self, op: str, path: str) -> None:
        if self.where(path):
            super().check(op, path)


def is_log(path: str) -> bool:
    return path.endswith(glog.LOG_SUFFIX)


def is_segment(path: str) -> bool:
    return path.endswith(".seg")


def event(n: int, pad: int = 200) -> dict[str, Any]:
    return {"n": n, "pad": "x" * pad}


@pytest.fixture
def mem() -> MemFileSystem:
    fs = MemFileSystem()
    fs.record_reads = False
    fs.mkdir(ROOT)
    fs.fsync_dir("/")
    return fs


@pytest.fixture
def fs(mem: MemFileSystem) -> SiteFaults:
    return SiteFaults(mem)


@pytest.fixture
def small_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(glog, "LOG_ROTATE_BYTES", ROTATE_BYTES)  # the group reads it at each commit
    yield


def power_loss(mem: MemFileSystem) -> Image:
    """The disk a power loss now leaves: every write not synced, every entry not fsynced, lost."""
    replay = Replay(mem.log, mem.base, mem.base_inodes)
    while replay.point < len(mem.log):
        replay.advance()
    return replay.build(CrashState(replay.point)).image


def after_exit(mem: MemFileSystem) -> Image:
    return mem.snapshot()


def records(image: Image, path: str, fs: Any = None) -> list[tuple[int, Any]]:
    """Open ``path`` on ``image`` (the group's recovery runs first) and read every record."""
    with journal.open(path, fs=fs or MemFileSystem.from_image(image)) as j:
        return [(r.seq, r.event) for r in j.read()]


def open_three(fs: SiteFaults) -> tuple[CommitGroup, list[Any]]:
    g = journal.open_group(ROOT, fs=fs)
    fs.inner.mkdir(posixpath.dirname(C))
    return g, [journal.open(p, create=True, fs=fs, group=g) for p in (A, B, C)]


def close_all(g: CommitGroup, js: list[Any]) -> None:
    for j in js:
        j.close()
    g.close()


def listing(mem: MemFileSystem, under: str) -> list[str]:
    files, _dirs = mem.snapshot()
    return sorted(p for p in files if p.startswith(under))


# --- the log's write --------------------------------------------------------------------------


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC])
def test_log_write_failure_is_not_committed_and_the_journal_goes_on(
    mem: MemFileSystem, fs: SiteFaults, err: int
) -> None:
    g, (a, b, c) = open_three(fs)
    assert a.append(event(1)) == journal.Committed(1, "sync")
    fs.where = is_log
    fs.fail("pwrite", err, after=fs.calls["pwrite"])
    out = a.append(event(2))
    assert isinstance(out, journal.NotCommitted) and out.errno == err
    assert g.failed is None
    # The journal and the group go on: the seq is given again, the others append as before.
    assert a.append(event(3)) == journal.Committed(2, "sync")
    assert b.append(event(4), durability="flush") == journal.Committed(1, "flush")
    close_all(g, [a, b, c])
    for image in (after_exit(mem), power_loss(mem)):
        assert records(image, A) == [(1, event(1)), (2, event(3))]
        assert records(image, B) == [(1, event(4))]


def test_log_write_failure_fails_every_append_of_that_group_commit(mem: MemFileSystem, fs: SiteFaults) -> None:
    """Three journals' appends: the first leads (its log write held until the other two have
    queued), the other two meet in the next group commit, whose one log write fails: both are
    NotCommitted, their frames cut out of their segments, and both journals go on."""
    meeting = wgroup.Meeting()
    with wgroup.small_logs(glog.LOG_ROTATE_BYTES, 0, meeting):
        g = journal.open_group(ROOT, fs=wgroup.HeldLogFs(fs, meeting))
        fs.inner.mkdir(posixpath.dirname(C))
        js = [journal.open(p, create=True, fs=fs, group=g) for p in (A, B, C)]
        for n, j in enumerate(js):
            assert j.append(event(10 + n)) == journal.Committed(1, "sync")
        fs.where = is_log
        fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"] + 1)  # the second log write from now
        meeting.arm(2)
        outs: dict[int, Any] = {}
        barrier = threading.Barrier(3)

        def append(n: int) -> None:
            barrier.wait()
            outs[n] = js[n].append(event(20 + n))

        threads = [threading.Thread(target=append, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert fs.injected == [("pwrite", fs.calls["pwrite"] - 1)]
        committed = [n for n, o in outs.items() if isinstance(o, journal.Committed)]
        refused = [n for n, o in outs.items() if isinstance(o, journal.NotCommitted)]
        assert len(committed) == 1 and len(refused) == 2, outs
        assert g.failed is None
        for n, j in enumerate(js):
            assert j.append(event(30 + n)) == journal.Committed(2 if n in refused else 3, "sync")
        close_all(g, js)
    for image in (after_exit(mem), power_loss(mem)):
        for n, path in enumerate((A, B, C)):
            want = [event(10 + n)] + ([event(20 + n)] if n in committed else []) + [event(30 + n)]
            assert [e for _s, e in records(image, path)] == want


def test_log_cut_back_failure_is_ack_lost_and_fail_stop(mem: MemFileSystem, fs: SiteFaults) -> None:
    g, (a, b, c) = open_three(fs)
    assert a.append(event(1)) == journal.Committed(1, "sync")
    fs.where = is_log
    fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
    fs.fail("truncate", errno.EIO, after=fs.calls["truncate"])
    out = a.append(event(2))
    assert isinstance(out, journal.AckLost)
    assert g.failed is not None and "cut" in g.failed
    with pytest.raises(JournalFailStoppedError):
        a.append(event(3))
    assert not isinstance(b.append(event(4)), journal.Committed)
    close_all(g, [a, b, c])
    assert listing(mem, f"{ROOT}/.journal-group/g-"), "a fail-stopped group keeps its logs for recovery"
    for image in (after_exit(mem), power_loss(mem)):
        got = records(image, A)
        assert got[:1] == [(1, event(1))] and got in ([(1, event(1))], [(1, event(1)), (2, event(2))])
        assert records(image, B) == []


# --- the log's fdatasync ------------------------------------------------------------------------


def test_log_fdatasync_failure_is_ack_lost_and_fail_stops_the_group(mem: MemFileSystem, fs: SiteFaults) -> None:
    g, (a, b, c) = open_three(fs)
    assert a.append(event(1)) == journal.Committed(1, "sync")
    assert b.append(event(2)) == journal.Committed(1, "sync")
    fs.where = is_log
    fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
    lost = a.append(event(3))
    assert isinstance(lost, journal.AckLost) and lost.seq == 2
    assert g.failed is not None and "fdatasync" in g.failed
    with pytest.raises(JournalFailStoppedError):
        a.append(event(4))
    # The other journals of the group cannot commit any more either: the group has stopped.
    for j in (b, c):
        try:
            out = j.append(event(5))
        except JournalFailStoppedError:
            continue
        assert not isinstance(out, journal.Committed), out
    close_all(g, [a, b, c])
    assert listing(mem, f"{ROOT}/.journal-group/g-"), "a fail-stopped group keeps its logs for recovery"
    # After a process exit the record whose ack was lost is there, and resolve() says so.
    image = after_exit(mem)
    assert records(image, A) == [(1, event(1)), (2, event(3))]
    with journal.open(A, fs=MemFileSystem.from_image(image)) as j:
        assert isinstance(j.resolve(lost), journal.Committed)
    assert records(image, B) == [(1, event(2))]
    # After a power loss every acknowledged record is there (the AckLost one may be or not).
    image = power_loss(mem)
    assert records(image, A)[:1] == [(1, event(1))]
    assert records(image, B) == [(1, event(2))]


# --- the log's rotation ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["open_write", "pwrite", "fsync", "rename", "fsync_dir"])
def test_new_log_failure_at_rotation_keeps_the_old_log(
    mem: MemFileSystem, fs: SiteFaults, small_logs: None, op: str
) -> None:
    g, (a, b, c) = open_three(fs)
    instance = listing(mem, f"{ROOT}/.journal-group/g-")[0].rsplit("/", 1)[0]
    # The next call of ``op`` in the group's directory, but on the current log, fails: the next
    # log's making (temp file, its write, fsync, rename, the directory's fsync).
    fs.where = lambda path: path.startswith(instance) and not path.endswith(glog.log_name(1))
    fs.fail(op, errno.EIO, after=fs.calls[op])
    acked: dict[str, list[Any]] = {A: [], B: []}
    for n in range(12):
        path, j = (A, a) if n % 2 else (B, b)
        assert j.append(event(n, 300)) == journal.Committed(len(acked[path]) + 1, "sync")
        acked[path].append(event(n, 300))
    assert fs.injected, "no rotation was tried"
    assert g.failed is None
    # The rotation was tried again at a later group commit, and made it.
    assert any(p.endswith(glog.log_name(3)) or p.endswith(glog.log_name(2)) for p in listing(mem, instance))
    image = power_loss(mem)
    for path in (A, B):
        assert [e for _s, e in records(image, path)] == acked[path]
    close_all(g, [a, b, c])
    assert not [p for p in listing(mem, f"{ROOT}/.journal-group/") if is_log(p)]  # retired at close


def test_segment_fdatasync_failure_while_a_log_is_retired(
    mem: MemFileSystem, fs: SiteFaults, small_logs: None
) -> None:
    """The group fail-stops and keeps its logs; a power loss then drops the segments' unsynced
    frames, and the next open writes every acknowledged record back from the logs."""
    g, (a, b, c) = open_three(fs)
    fs.where = is_segment
    fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"], times=-1)
    acked: dict[str, list[Any]] = {A: [], B: []}
    for n in range(40):
        path, j = (A, a) if n % 2 else (B, b)
        try:
            out = j.append(event(n, 300))
        except JournalFailStoppedError:
            break
        if not isinstance(out, journal.Committed):
            break
        acked[path].append(event(n, 300))
    assert g.failed is not None and "retiring" in g.failed, g.failed
    assert sum(len(v) for v in acked.values()) >= 3
    logs = [p for p in listing(mem, f"{ROOT}/.journal-group/g-") if is_log(p)]
    for j in (a, b, c):
        with contextlib.suppress(JournalFailStoppedError):  # its own segment's fdatasync fails too
            j.close()
    g.close()
    assert [p for p in listing(mem, f"{ROOT}/.journal-group/g-") if is_log(p)] == logs and len(logs) == 2
    image = power_loss(mem)
    files, _dirs = image
    assert len(files[f"{A}/00000000000000000001.seg"]) < len(after_exit(mem)[0][f"{A}/00000000000000000001.seg"])
    for path in (A, B):
        assert [e for _s, e in records(image, path)] == acked[path]


def test_close_segment_fdatasync_failure_keeps_the_logs(mem: MemFileSystem, fs: SiteFaults) -> None:
    g, (a, b, c) = open_three(fs)
    for n in range(3):
        assert a.append(event(n)) == journal.Committed(n + 1, "sync")
    assert b.append(event(9)) == journal.Committed(1, "sync")
    fs.where = lambda path: path.startswith(A + "/") and is_segment(path)
    fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"], times=-1)
    with pytest.raises(JournalFailStoppedError, match="fdatasync of the live segment at close"):
        a.close()
    assert g.failed is not None
    assert not isinstance(b.append(event(10)), journal.Committed)
    b.close()
    c.close()
    g.close()
    assert [p for p in listing(mem, f"{ROOT}/.journal-group/g-") if is_log(p)]
    image = power_loss(mem)
    assert [e for _s, e in records(image, A)] == [event(n) for n in range(3)]
    assert [e for _s, e in records(image, B)] == [event(9)]


# --- joining ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["open_write", "pwrite", "fsync", "rename"])
def test_marker_write_failure_at_join(mem: MemFileSystem, fs: SiteFaults, op: str) -> None:
    g = journal.open_group(ROOT, fs=fs)
    fs.where = lambda path: posixpath.basename(path).startswith("GROUP")
    fs.fail(op, errno.EIO, after=fs.calls[op])
    with pytest.raises(JournalIOError):
        journal.open(A, create=True, fs=fs, group=g)
    assert fs.injected
    # Nothing was admitted: the journal opens again, joins, and appends through the group.
    with journal.open(A, create=True, fs=fs, group=g) as j:
        assert j.append(event(1)) == journal.Committed(1, "sync")
    g.close()
    assert records(power_loss(mem), A) == [(1, event(1))]


# --- recovery ----------------------------------------------------------------------------------------


def dead_group_image(mem: MemFileSystem, fs: SiteFaults) -> tuple[Image, dict[str, list[Any]]]:
    """Journals whose acknowledged records, after a power loss, are only in their group's log."""
    _g, (a, b, _c) = open_three(fs)
    acked = {A: [event(1), event(2)], B: [event(3)]}
    for path, j in ((A, a), (B, b)):
        for e in acked[path]:
            assert isinstance(j.append(e), journal.Committed)
    image = power_loss(mem)  # the process and the machine die here: the group is never closed
    seg = f"{A}/00000000000000000001.seg"
    assert len(image[0][seg]) < len(after_exit(mem)[0][seg]), "the segment's frames were synced"
    return image, acked


@pytest.mark.parametrize("op", ["pwrite", "fdatasync", "open_write"])
def test_recovery_segment_failure_fails_the_open_and_loses_nothing(
    mem: MemFileSystem, fs: SiteFaults, op: str
) -> None:
    image, acked = dead_group_image(mem, fs)
    files, _dirs = image
    logs = sorted(p for p in files if is_log(p))
    assert logs, "the dead group's log is on the disk"
    disk = MemFileSystem.from_image(image)
    again = SiteFaults(disk)
    again.where = is_segment
    again.fail(op, errno.EIO, after=0, times=-1)
    with pytest.raises(JournalIOError):
        journal.open(A, fs=again)
    assert again.injected
    # The logs stay until a recovery has synced what it wrote back: the next open recovers.
    assert sorted(p for p in disk.snapshot()[0] if is_log(p)) == logs
    again.clear()
    for path in (A, B):
        assert [e for _s, e in records(image, path, fs=again)] == acked[path]
    assert not [p for p in disk.snapshot()[0] if is_log(p)]
