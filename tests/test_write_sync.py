"""The durable write in one call (native/write_sync.c, ``journal._write_sync``) against its twin,
journal/fs.py's write_all and fdatasync called one by one: the same bytes on disk for any
writes (hypothesis), the same answer for a failed write and for a failed fdatasync, and the
writer's outcomes for each the same on both paths.

The faults are real ones, not stand-ins: a descriptor opened read-only makes pwrite fail
(EBADF), /dev/null takes a pwrite and refuses an fdatasync (EINVAL), a file-size limit
(RLIMIT_FSIZE, in a child process) makes a journal's pwrite stop short and then fail (EFBIG)
while its rollback's ftruncate still works, and tests/native/io_faults.c, preloaded into a
child, fails the C library's pwrite and fdatasync themselves (EIO, EINTR, a write of nothing),
which both paths call.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import journal
from journal import fs
from journal.engine import native, writer
from journal.fs import File, OsFile, OsFileSystem, SyncError, write_all_synced
from tests.native_modules import compiled

ROOT = Path(__file__).resolve().parents[1]
LLONG_MAX = 2**63 - 1


def _module() -> Any:
    return compiled("journal._write_sync", "the one-call durable write")


class PathKind:
    """Which path write_all_synced takes in a test, and how often the C call ran."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.c_calls = 0

    def took_its_path(self) -> bool:
        return self.c_calls > 0 if self.kind == "c" else self.c_calls == 0


@pytest.fixture(params=["c", "python"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[PathKind]:
    """Each test that takes it runs through the C call (counted) and through the Python calls."""
    pk = PathKind(request.param)
    if pk.kind == "c":
        real = _module().write_all_sync

        def counted(fd: int, data: bytes | memoryview, offset: int, first_last: int) -> int:
            pk.c_calls += 1
            result: int = real(fd, data, offset, first_last)
            return result

        monkeypatch.setattr(fs, "_WRITE_ALL_SYNC", counted)
        # A lone sync record takes the C call that also compresses and frames it
        # (native/zstd_held.c, frame_write_sync), where that module is built: counted too.
        lone = writer.FRAME_WRITE_SYNC
        if lone is not None:

            def lone_counted(*args: Any) -> tuple[int, int]:
                pk.c_calls += 1
                result: tuple[int, int] = lone(*args)
                return result

            monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", lone_counted)
    else:
        monkeypatch.setattr(fs, "_WRITE_ALL_SYNC", None)
        monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", None)
    yield pk


def _open(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> OsFile:
    return OsFile(str(path), os.open(path, flags, 0o600))


def test_its_use_follows_journal_pure() -> None:
    mod = _module()
    assert native.PURE_ENV == "JOURNAL_PURE"  # the switch fs.py reads by name
    assert mod.NO_PROGRESS == fs._NO_PROGRESS > max(errno.errorcode)
    if native.forced_pure():
        assert fs._WRITE_ALL_SYNC is None
    else:
        assert fs._WRITE_ALL_SYNC is mod.write_all_sync


def test_a_plain_file_takes_the_c_call_and_a_wrapped_one_its_own_methods(tmp_path: Path, path_kind: PathKind) -> None:
    f = _open(tmp_path / "plain")
    write_all_synced(f, b"abc", 5)
    assert path_kind.took_its_path()
    calls = path_kind.c_calls

    for name in ("pwrite", "fdatasync"):  # a test counting or failing either sees every call
        g = _open(tmp_path / name)
        seen: list[str] = []
        inner = getattr(g, name)

        def wrapped(*args: Any, _inner: Any = inner, _name: str = name, _seen: list[str] = seen) -> Any:
            _seen.append(_name)
            return _inner(*args)

        setattr(g, name, wrapped)
        write_all_synced(g, b"xyz", 0)
        assert seen == [name] and path_kind.c_calls == calls
        assert g.pread(3, 0) == b"xyz"
        g.close()

    class Sub(OsFile):
        pass

    s = Sub(str(tmp_path / "sub"), os.open(tmp_path / "sub", os.O_RDWR | os.O_CREAT, 0o600))
    write_all_synced(s, b"q", 0)
    assert path_kind.c_calls == calls and s.pread(1, 0) == b"q"
    f.close()
    s.close()


@settings(max_examples=60, deadline=None)
@given(
    hs.lists(
        hs.tuples(hs.integers(0, 70_000), hs.binary(min_size=1, max_size=9_000), hs.integers(0, 10_000)),
        min_size=1,
        max_size=8,
    )
)
def test_the_c_call_writes_what_the_python_calls_write(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, bytes, int]]
) -> None:
    mod = _module()
    d = tmp_path_factory.mktemp("twin")
    c_file, py_file = _open(d / "c"), _open(d / "py")
    try:
        for offset, data, first_last in writes:
            assert mod.write_all_sync(c_file.fileno(), memoryview(data), offset, first_last) == 0
            fs.write_all(py_file, data, offset, first_last)
            py_file.fdatasync()
        assert (d / "c").read_bytes() == (d / "py").read_bytes()
    finally:
        c_file.close()
        py_file.close()


def test_the_c_call_answers_a_failed_write_and_a_failed_sync_apart(tmp_path: Path) -> None:
    mod = _module()
    (tmp_path / "ro").write_bytes(b"kept")
    ro = os.open(tmp_path / "ro", os.O_RDONLY)
    rw = os.open(tmp_path / "rw", os.O_RDWR | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        assert mod.write_all_sync(ro, b"x", 0, 0) == errno.EBADF  # a write: positive
        assert mod.write_all_sync(ro, b"xy", 0, 1) == errno.EBADF  # its first bytes last: the same
        assert mod.write_all_sync(null, b"x", 0, 0) == -errno.EINVAL  # the write went, its sync not
        assert mod.write_all_sync(null, b"", 0, 0) == -errno.EINVAL  # nothing to write: the sync still runs
        # What pwrite refuses, as os.pwrite does: a descriptor that is none, a negative offset,
        # and (before any byte is written) an end past the largest offset.
        assert mod.write_all_sync(-1, b"x", 0, 0) == errno.EBADF
        assert mod.write_all_sync(rw, b"x", -1, 0) == errno.EINVAL
        assert mod.write_all_sync(rw, b"xy", LLONG_MAX - 1, 0) == errno.EFBIG
        assert os.fstat(rw).st_size == 0
    finally:
        for fd in (ro, rw, null):
            os.close(fd)
    assert (tmp_path / "ro").read_bytes() == b"kept"
    with pytest.raises(ValueError, match="first_last is a count of bytes"):
        mod.write_all_sync(0, b"x", 0, -1)
    with pytest.raises(TypeError):
        mod.write_all_sync(0, "text", 0, 0)


def test_a_failed_write_raises_oserror_and_nothing_is_synced(tmp_path: Path, path_kind: PathKind) -> None:
    (tmp_path / "ro").write_bytes(b"kept")
    f = _open(tmp_path / "ro", os.O_RDONLY)
    try:
        for first_last in (0, 2):
            with pytest.raises(OSError) as info:
                write_all_synced(f, b"new bytes", 0, first_last)
            assert info.value.errno == errno.EBADF and not isinstance(info.value, SyncError)
            assert str(info.value) == "[Errno 9] Bad file descriptor"  # as os.pwrite says it
    finally:
        f.close()
    assert path_kind.took_its_path()
    assert (tmp_path / "ro").read_bytes() == b"kept"


def test_a_failed_fdatasync_raises_sync_error(path_kind: PathKind) -> None:
    f = OsFile(os.devnull, os.open(os.devnull, os.O_RDWR))
    try:
        with pytest.raises(SyncError) as info:
            write_all_synced(f, b"gone", 0)
        assert info.value.errno == errno.EINVAL
        assert str(info.value) == "[Errno 22] Invalid argument"  # as os.fdatasync says it
    finally:
        f.close()
    assert path_kind.took_its_path()


def test_a_sync_error_reads_as_the_error_it_stands_for() -> None:
    for exc in (OSError(5, "injected", "/a"), OSError(5, "moved", "/a", None, "/b"), OSError("no errno")):
        assert str(fs._as_sync_error(exc)) == str(exc)
        assert fs._as_sync_error(exc).errno == exc.errno


class _Remembering(OsFileSystem):
    """The real file layer, remembering the files it opens for writing (left unwrapped)."""

    def __init__(self) -> None:
        self.written: list[File] = []

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        self.written.append(f)
        return f


def _live_segment(rfs: _Remembering) -> OsFile:
    segs = [f for f in rfs.written if isinstance(f, OsFile) and f.path.endswith(".seg")]
    assert segs, [f.path for f in rfs.written]
    return segs[-1]


def _big_batch(n: int) -> list[dict[str, Any]]:
    # Past one block frame (32 KiB of payload by default): several frames, first header last.
    return [{"n": i, "text": os.urandom(1500).hex()} for i in range(n)]


def test_batches_of_several_frames_take_the_one_call_too(tmp_path: Path, path_kind: PathKind) -> None:
    with journal.open(str(tmp_path / "j"), create=True) as j:
        events = _big_batch(40)
        assert all(isinstance(o, journal.Committed) for o in j.append_many(events, durability="sync"))
    with journal.open(str(tmp_path / "s"), create=True, sector_bytes=4096) as s:  # a record and its padding
        assert isinstance(s.append({"n": 1}, durability="sync"), journal.Committed)
    assert path_kind.took_its_path()
    with journal.open(str(tmp_path / "j")) as again:
        assert [r.event for r in again.read()] == events


def test_a_journal_whose_fdatasync_fails_stops_on_both_paths(tmp_path: Path, path_kind: PathKind) -> None:
    rfs = _Remembering()
    j = journal.open(str(tmp_path / "j"), create=True, fs=rfs)
    try:
        assert isinstance(j.append({"n": 1}, durability="sync"), journal.Committed)
        seg = _live_segment(rfs)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, seg.fileno())  # the segment's descriptor now takes writes and refuses syncs
        os.close(null)
        out = j.append({"n": 2}, durability="sync")
        assert isinstance(out, journal.AckLost), out
        assert out.reason == "fdatasync failed: [Errno 22] Invalid argument"
        with pytest.raises(journal.JournalFailStoppedError):
            j.append({"n": 3}, durability="sync")
    finally:
        j.close()
    assert path_kind.took_its_path()
    with journal.open(str(tmp_path / "j")) as again:  # the acknowledged record is there
        assert [r.event for r in again.read()] == [{"n": 1}]


# --- faults in a child process: RLIMIT_FSIZE, and the C library's calls failed by a preload ---

CHILD = textwrap.dedent(
    """
    import ctypes, json, os, resource, signal, sys
    import journal
    from journal import fs

    path, fault = sys.argv[1], sys.argv[2]
    from journal.engine import writer
    uses_c = fs._WRITE_ALL_SYNC is not None and writer.FRAME_WRITE_SYNC is not None
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's default: exit
    j = journal.open(path, create=True, block_bytes=32 * 1024)
    assert isinstance(j.append({"n": 1}, durability="sync"), journal.Committed)
    start = j._active_size
    batch = [{"n": 2, "text": os.urandom(1500).hex()} for _ in range(40)]  # several frames (blocks of 32 KiB)
    if fault == "fsize":
        # The next pwrite may write one byte past start, then no more (EFBIG); shrinking the
        # file back to start, the rollback, stays allowed.
        resource.setrlimit(resource.RLIMIT_FSIZE, (start + 1, resource.RLIM_INFINITY))
        outs = [j.append({"n": 2, "pad": "x" * 500}, durability="sync")]
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    else:
        # io_faults.c: which (1 pwrite, 2 fdatasync), calls let through, calls failed, errno
        which, let_through, times, err, many = (int(x) for x in fault.split(","))
        ctypes.CDLL(None).jn_fault_arm(which, let_through, times, err)
        outs = j.append_many(batch, durability="sync") if many else [j.append({"n": 2}, durability="sync")]
        ctypes.CDLL(None).jn_fault_arm(0, 0, 0, 0)
    try:
        after = type(j.append({"n": 3}, durability="sync")).__name__
    except journal.JournalFailStoppedError:
        after = "fail-stopped"
    j.close()
    with journal.open(path) as r:
        ns = [rec.event["n"] for rec in r.read()]
    print(json.dumps({"uses_c": uses_c, "outs": sorted({type(o).__name__ for o in outs}),
                      "reasons": sorted({getattr(o, "reason", "").replace(path, "<journal>") for o in outs}),
                      "after": after, "ns": ns}))
    """
)


@pytest.fixture(scope="module")
def io_faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):
        if os.environ.get("JOURNAL_REQUIRE_NATIVE") == "1":
            pytest.fail("no C compiler for tests/native/io_faults.c and JOURNAL_REQUIRE_NATIVE=1")
        pytest.skip("the preloaded fault injector needs a C compiler on Linux")
    out = tmp_path_factory.mktemp("io_faults") / "io_faults.so"
    src = ROOT / "tests" / "native" / "io_faults.c"
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"]
    res = subprocess.run([cc, *flags, "-o", str(out), str(src), "-ldl"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return out


def _child(tmp_path: Path, fault: str, pure: bool, preload: Path | None = None) -> dict[str, Any]:
    env = dict(os.environ, JOURNAL_PURE="1" if pure else "0")
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    name = f"{fault.replace(',', '_')}-{'pure' if pure else 'shipped'}"
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / name), fault],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    got: dict[str, Any] = json.loads(res.stdout)
    assert got.pop("uses_c") is not pure  # the shipped child took the C call, the pure one not
    return got


def _both(tmp_path: Path, fault: str, preload: Path | None = None) -> dict[str, Any]:
    _module()  # the shipped child takes the C call only where it is built
    shipped, pure = _child(tmp_path, fault, False, preload), _child(tmp_path, fault, True, preload)
    assert shipped == pure
    return shipped


ROLLED_BACK = "write failed and was rolled back: write failed: "


def test_a_journal_whose_write_fails_rolls_it_back_on_both_paths(tmp_path: Path) -> None:
    got = _both(tmp_path, "fsize")
    assert got["outs"] == ["NotCommitted"] and got["reasons"] == [ROLLED_BACK + "[Errno 27] File too large"]
    assert got["after"] == "Committed" and got["ns"] == [1, 3]


# (fault, outcome, reason, the next append, the records read back). The fault is io_faults.c's
# (which: 1 pwrite, 2 fdatasync; calls let through; calls failed; errno, 0 a write of nothing;
# 1 for 40 events of 3 KB, several frames written with their first header last, the second
# pwrite being that header). After a failed fdatasync the bytes are in the file all the same.
NO_PROGRESS = "[Errno 28] short write made no progress: '<journal>/00000000000000000001.seg'"
FAULTS = [
    ("1,0,1,5,0", "NotCommitted", ROLLED_BACK + "[Errno 5] Input/output error", "Committed", [1, 3]),
    ("1,0,1,0,0", "NotCommitted", ROLLED_BACK + NO_PROGRESS, "Committed", [1, 3]),
    ("1,0,3,4,0", "Committed", "committed", "Committed", [1, 2, 3]),  # EINTR three times: made again
    ("2,0,2,4,0", "Committed", "committed", "Committed", [1, 2, 3]),
    ("2,0,1,5,0", "AckLost", "fdatasync failed: [Errno 5] Input/output error", "fail-stopped", [1, 2]),
    ("1,1,1,5,1", "NotCommitted", ROLLED_BACK + "[Errno 5] Input/output error", "Committed", [1, 3]),
    ("2,0,1,5,1", "AckLost", "fdatasync failed: [Errno 5] Input/output error", "fail-stopped", [1] + [2] * 40),
]


@pytest.mark.parametrize(("fault", "outcome", "reason", "after", "ns"), FAULTS)
def test_a_fault_in_the_c_librarys_calls_ends_the_same_on_both_paths(
    tmp_path: Path, io_faults: Path, fault: str, outcome: str, reason: str, after: str, ns: list[int]
) -> None:
    got = _both(tmp_path, fault, io_faults)
    assert got == {"outs": [outcome], "reasons": [reason], "after": after, "ns": ns}


def test_a_rolled_back_write_leaves_nothing_to_sync(tmp_path: Path) -> None:
    # The rollback synced the file: a sync() right after has nothing to make durable, and asks
    # the disk for nothing (a needless fdatasync could fail and stop the journal).
    rfs = _Remembering()
    with journal.open(str(tmp_path / "j"), create=True, fs=rfs) as j:
        assert isinstance(j.append({"n": 1}, durability="sync"), journal.Committed)
        seg = _live_segment(rfs)
        syncs: list[int] = []
        real_pwrite, real_sync = seg.pwrite, seg.fdatasync

        def failing_pwrite(data: bytes | memoryview, offset: int) -> int:
            raise OSError(errno.EIO, "injected")

        def counted_sync() -> None:
            syncs.append(1)
            real_sync()

        seg.pwrite = failing_pwrite  # type: ignore[method-assign]
        seg.fdatasync = counted_sync  # type: ignore[method-assign]
        out = j.append({"n": 2}, durability="sync")
        assert isinstance(out, journal.NotCommitted), out
        assert syncs == [1]  # the rollback's
        seg.pwrite = real_pwrite  # type: ignore[method-assign]
        j.sync()
        assert syncs == [1]
        assert isinstance(j.append({"n": 3}, durability="sync"), journal.Committed)
        assert syncs == [1, 1]
