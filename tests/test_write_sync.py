"""The durable write in one call (native/write_sync.c, ``journal._write_sync``) against its twin,
journal/fs.py's write_all and fdatasync called one by one: the same bytes on disk for any
writes (hypothesis), the same answer for a failed write and for a failed fdatasync, and the
writer's outcomes for each the same on both paths.

The faults are real ones, not stand-ins: a descriptor opened read-only makes pwrite fail
(EBADF), /dev/null takes a pwrite and refuses an fdatasync (EINVAL), and a file-size limit
(RLIMIT_FSIZE, in a child process) makes a journal's pwrite stop short and then fail (EFBIG)
while its rollback's ftruncate still works.
"""

from __future__ import annotations

import errno
import json
import os
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
from journal.engine import native
from journal.fs import File, OsFile, OsFileSystem, SyncError, write_all_synced
from tests.native_modules import compiled

ROOT = Path(__file__).resolve().parents[1]


def _module() -> Any:
    return compiled("journal._write_sync", "the one-call durable write")


@pytest.fixture(params=["c", "python"])
def path_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test that takes it runs through the C call and through the two Python calls."""
    if request.param == "c":
        monkeypatch.setattr(fs, "_WRITE_ALL_SYNC", _module().write_all_sync)
    else:
        monkeypatch.setattr(fs, "_WRITE_ALL_SYNC", None)
    yield request.param


def _open(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> OsFile:
    return OsFile(str(path), os.open(path, flags, 0o600))


def test_its_use_follows_journal_pure() -> None:
    mod = _module()
    assert native.PURE_ENV == "JOURNAL_PURE"  # the switch fs.py reads by name
    if native.forced_pure():
        assert fs._WRITE_ALL_SYNC is None
    else:
        assert fs._WRITE_ALL_SYNC is mod.write_all_sync


@pytest.mark.parametrize("setting", ["1", "true", "yes", "0", ""])
def test_journal_pure_is_read_as_the_engine_reads_it(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv("JOURNAL_PURE", setting)
    call = fs._write_sync_in_c()
    if native.forced_pure():
        assert call is None
    else:
        assert call is _module().write_all_sync


def test_a_plain_file_takes_the_c_call_and_a_wrapped_one_its_own_methods(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _module().write_all_sync
    calls: list[tuple[int, int]] = []

    def counted(fd: int, data: bytes | memoryview, offset: int) -> int:
        calls.append((fd, offset))
        result: int = real(fd, data, offset)
        return result

    monkeypatch.setattr(fs, "_WRITE_ALL_SYNC", counted)
    f = _open(tmp_path / "plain")
    write_all_synced(f, b"abc", 5)
    assert calls == [(f.fileno(), 5)]

    for name in ("pwrite", "fdatasync"):  # a test counting or failing either sees every call
        g = _open(tmp_path / name)
        seen: list[str] = []
        inner = getattr(g, name)

        def wrapped(*args: Any, _inner: Any = inner, _name: str = name, _seen: list[str] = seen) -> Any:
            _seen.append(_name)
            return _inner(*args)

        setattr(g, name, wrapped)
        write_all_synced(g, b"xyz", 0)
        assert seen == [name] and len(calls) == 1
        assert g.pread(3, 0) == b"xyz"
        g.close()

    class Sub(OsFile):
        pass

    s = Sub(str(tmp_path / "sub"), os.open(tmp_path / "sub", os.O_RDWR | os.O_CREAT, 0o600))
    write_all_synced(s, b"q", 0)
    assert len(calls) == 1 and s.pread(1, 0) == b"q"
    f.close()
    s.close()


@settings(max_examples=60, deadline=None)
@given(hs.lists(hs.tuples(hs.integers(0, 70_000), hs.binary(min_size=1, max_size=9_000)), min_size=1, max_size=8))
def test_the_c_call_writes_what_the_two_calls_write(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, bytes]]
) -> None:
    mod = _module()
    d = tmp_path_factory.mktemp("twin")
    c_file, py_file = _open(d / "c"), _open(d / "py")
    try:
        for offset, data in writes:
            assert mod.write_all_sync(c_file.fileno(), memoryview(data), offset) == 0
            fs.write_all(py_file, data, offset)
            py_file.fdatasync()
        assert (d / "c").read_bytes() == (d / "py").read_bytes()
    finally:
        c_file.close()
        py_file.close()


def test_the_c_call_answers_a_failed_write_and_a_failed_sync_apart(tmp_path: Path) -> None:
    mod = _module()
    (tmp_path / "ro").write_bytes(b"kept")
    ro = os.open(tmp_path / "ro", os.O_RDONLY)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        assert mod.write_all_sync(ro, b"x", 0) == errno.EBADF  # a write: positive
        assert mod.write_all_sync(null, b"x", 0) == -errno.EINVAL  # the write went, its sync not
        assert mod.write_all_sync(null, b"", 0) == -errno.EINVAL  # nothing to write: the sync still runs
    finally:
        os.close(ro)
        os.close(null)
    assert (tmp_path / "ro").read_bytes() == b"kept"
    for fd, offset in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="offset of 0 or more"):
            mod.write_all_sync(fd, b"x", offset)
    with pytest.raises(TypeError):
        mod.write_all_sync(0, "text", 0)


def test_a_failed_write_raises_oserror_and_nothing_is_synced(tmp_path: Path, path_kind: str) -> None:
    (tmp_path / "ro").write_bytes(b"kept")
    f = _open(tmp_path / "ro", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as info:
            write_all_synced(f, b"new bytes", 0)
        assert info.value.errno == errno.EBADF and not isinstance(info.value, SyncError)
        assert str(info.value) == "[Errno 9] Bad file descriptor"  # as os.pwrite says it
    finally:
        f.close()
    assert (tmp_path / "ro").read_bytes() == b"kept"


def test_a_failed_fdatasync_raises_sync_error(path_kind: str) -> None:
    f = OsFile(os.devnull, os.open(os.devnull, os.O_RDWR))
    try:
        with pytest.raises(SyncError) as info:
            write_all_synced(f, b"gone", 0)
        assert info.value.errno == errno.EINVAL
        assert str(info.value) == "[Errno 22] Invalid argument"  # as os.fdatasync says it
    finally:
        f.close()


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


def test_a_journal_whose_fdatasync_fails_stops_on_both_paths(tmp_path: Path, path_kind: str) -> None:
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
        assert "fdatasync failed" in out.reason and "Invalid argument" in out.reason
        with pytest.raises(journal.JournalFailStoppedError):
            j.append({"n": 3}, durability="sync")
    finally:
        j.close()
    with journal.open(str(tmp_path / "j")) as again:  # the acknowledged record is there
        assert [r.event for r in again.read()] == [{"n": 1}]


CHILD = textwrap.dedent(
    """
    import json, resource, signal, sys
    import journal
    from journal.fs import OsFileSystem

    class Remembering(OsFileSystem):
        def __init__(self):
            self.written = []
        def open_write(self, path, create):
            f = super().open_write(path, create)
            self.written.append(f)
            return f

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's default: exit
    rfs = Remembering()
    j = journal.open(sys.argv[1], create=True, fs=rfs)
    assert isinstance(j.append({"n": 1}, durability="sync"), journal.Committed)
    start = j._active_size
    # The next pwrite may write one byte past start, then no more (EFBIG); shrinking the file
    # back to start, the rollback, stays allowed.
    resource.setrlimit(resource.RLIMIT_FSIZE, (start + 1, resource.RLIM_INFINITY))
    out = j.append({"n": 2, "pad": "x" * 500}, durability="sync")
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    after = j.append({"n": 3}, durability="sync")
    j.close()
    with journal.open(sys.argv[1]) as r:
        events = [rec.event for rec in r.read()]
    print(json.dumps({"out": type(out).__name__, "reason": getattr(out, "reason", ""),
                      "after": type(after).__name__, "events": events}))
    """
)


def _child(tmp_path: Path, pure: bool) -> dict[str, Any]:
    env = dict(os.environ, JOURNAL_PURE="1" if pure else "0")
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / ("pure" if pure else "shipped"))],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    got: dict[str, Any] = json.loads(res.stdout)
    return got


def test_a_journal_whose_write_fails_rolls_it_back_on_both_paths(tmp_path: Path) -> None:
    _module()  # the shipped child takes the C call only where it is built
    shipped, pure = _child(tmp_path, pure=False), _child(tmp_path, pure=True)
    for got in (shipped, pure):
        assert got["out"] == "NotCommitted" and "write failed" in got["reason"], got
        assert "File too large" in got["reason"], got
        assert got["after"] == "Committed"
        assert got["events"] == [{"n": 1}, {"n": 3}]
    assert shipped == pure
