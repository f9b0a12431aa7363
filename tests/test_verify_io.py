"""verify and salvage read through the file layer, and a failure there is a JournalIOError.

Was a bug: both opened files around journal.fs (``open()``, ``os.listdir``, ``os.path.getsize``)
and an unreadable segment ended `journal verify` in a Python traceback, where every other command
raises JournalIOError and exits 1 with a message that says what to do. The faults are injected
at every read call site of a clean run (journal.crashsim.faults); through the real command the
segment is made unreadable for real (EACCES, ELOOP, EISDIR) in ways that also work as root.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable

import pytest

import journal
from journal.cli import common
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import salvage as S
from journal.engine import verify as V
from journal.errors import JournalIOError
from journal.fs import File, OsFileSystem
from tests.conftest import segments, snapshot_files

READ_OPS = ("open_read", "pread", "listdir")


def make(path: pathlib.Path) -> None:
    """Sealed segments, a live one, and a quarantine/ directory: every kind of read verify does."""
    with journal.open(path, create=True, segment_size_bytes=4096, compress=False) as j:
        for i in range(0, 100, 5):
            j.append_many([{"i": i + k, "pad": "x" * 60} for k in range(5)], durability="sync")
    with open(segments(path)[-1], "ab") as f:
        f.write(b"\x17" * 20)  # a torn tail, which the next writer's open cuts into quarantine/
    with journal.open(path, segment_size_bytes=4096, compress=False) as j:
        assert j.recovery.quarantined
        j.append({"i": 100, "pad": "x" * 60}, durability="sync")


@pytest.fixture
def jdir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "j"
    make(path)
    assert len(segments(path)) >= 3
    return path


def counted(run: Callable[[FaultyFileSystem], object]) -> FaultyFileSystem:
    """The calls a fault-free run makes, by operation."""
    fs = FaultyFileSystem(OsFileSystem())
    run(fs)
    return fs


@pytest.mark.parametrize("op", READ_OPS)
def test_verify_raises_journal_io_error_at_every_read(jdir: pathlib.Path, op: str) -> None:
    counting = counted(lambda fs: V.verify(str(jdir), fs=fs))
    clean = V.verify(str(jdir), fs=FaultyFileSystem(OsFileSystem()))
    assert clean.verdict == V.CLEAN and clean.quarantined
    assert counting.calls[op] >= (1 if op == "listdir" else 3), counting.calls
    before = snapshot_files(jdir)
    for n in range(counting.calls[op]):
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(op, errno.EACCES, after=n)
        with pytest.raises(JournalIOError) as got:
            V.verify(str(jdir), fs=fs)
        assert fs.injected == [(op, n)], (op, n)
        assert got.value.errno == errno.EACCES and isinstance(got.value, OSError)
        assert str(jdir) in str(got.value) and "run it again" in str(got.value)
    assert snapshot_files(jdir) == before


@pytest.mark.parametrize("op", READ_OPS)
def test_salvage_raises_journal_io_error_at_every_read(
    tmp_path: pathlib.Path, jdir: pathlib.Path, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The destination's close leaves LIVE.hint at best effort, reading the live segment to name
    # its last frame: a read there that fails only means no hint (tests/test_live_hint.py; the
    # hint's own files are no fault sites, journal/crashsim/faults.py). Every other read must
    # fail the salvage.
    monkeypatch.setattr("journal.engine.core.Journal._write_live_hint", lambda self: None)
    counting = counted(lambda fs: S.salvage(str(jdir), str(tmp_path / "count"), fs=fs))
    assert counting.calls[op] >= 1, counting.calls
    before = snapshot_files(jdir)
    for n in range(counting.calls[op]):
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(op, errno.EACCES, after=n)
        with pytest.raises(JournalIOError) as got:
            S.salvage(str(jdir), str(tmp_path / f"{op}{n}"), fs=fs)
        assert fs.injected == [(op, n)], (op, n)
        assert got.value.errno == errno.EACCES
    assert snapshot_files(jdir) == before


def test_salvage_writes_its_destination_through_the_file_layer(tmp_path: pathlib.Path, jdir: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    rep = S.salvage(str(jdir), str(tmp_path / "out"), fs=fs)
    assert rep.copied == 101 and not rep.losses
    assert fs.calls["open_write"] >= 1 and fs.calls["fdatasync"] + fs.calls["fsync"] >= 1


class ReadCountingFS(OsFileSystem):
    """Counts, per path, the bytes read and the listings made through the file layer."""

    def __init__(self) -> None:
        self.read_bytes: Counter[str] = Counter()
        self.listed: list[str] = []

    def open_read(self, path: str) -> File:
        f = super().open_read(path)
        inner, counts = f.pread, self.read_bytes

        def pread(size: int, offset: int) -> bytes:
            got = inner(size, offset)
            counts[os.path.basename(path)] += len(got)
            return got

        f.pread = pread  # type: ignore[method-assign]
        return f

    def listdir(self, path: str) -> list[str]:
        self.listed.append(path)
        return super().listdir(path)


@pytest.mark.parametrize("tool", ["verify", "salvage"])
def test_every_byte_is_read_through_the_file_layer(tmp_path: pathlib.Path, jdir: pathlib.Path, tool: str) -> None:
    fs = ReadCountingFS()
    if tool == "verify":
        V.verify(str(jdir), fs=fs)
    else:
        S.salvage(str(jdir), str(tmp_path / "out"), fs=fs)
    segs = segments(jdir)
    for seg in segs:
        assert fs.read_bytes[seg.name] >= seg.stat().st_size, (seg.name, fs.read_bytes)
    if tool == "verify":  # the live segment is read again for the tail's verdict
        assert fs.read_bytes[segs[-1].name] >= 2 * segs[-1].stat().st_size
        assert str(jdir / "quarantine") in fs.listed
    assert str(jdir) in fs.listed


def test_walk_journal_raises_journal_io_error(jdir: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    fs.fail("pread", errno.EIO)
    with pytest.raises(JournalIOError) as got:
        S.walk_journal(str(jdir), fs=fs)
    assert got.value.errno == errno.EIO


# --- through the real command --------------------------------------------------------------


def _unreadable(seg: pathlib.Path, how: str) -> list[str]:
    """Make ``seg`` fail to read with an OSError; returns the prefix to run the command under."""
    if how == "eacces":
        seg.chmod(0)
        if os.geteuid() != 0:
            return []
        # Root reads any file whatever its mode: drop the capabilities that let it.
        setpriv = shutil.which("setpriv")
        drop = [setpriv or "setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        if setpriv is None or subprocess.run([*drop, "cat", str(seg)], capture_output=True).returncode == 0:
            pytest.skip("cannot make a file unreadable for root here (needs setpriv)")
        return drop
    data = seg.read_bytes()
    seg.unlink()
    if how == "eloop":
        seg.symlink_to(seg.name)  # a symlink to itself: open fails with ELOOP
    elif how == "eisdir":
        seg.mkdir()  # opening a directory read-only works; reading it fails with EISDIR
    else:
        raise AssertionError(how)
    assert data
    return []


@pytest.mark.parametrize("how", ["eacces", "eloop", "eisdir"])
@pytest.mark.parametrize("command", ["verify", "salvage"])
def test_command_on_an_unreadable_segment_exits_1_with_one_line(
    tmp_path: pathlib.Path, jdir: pathlib.Path, how: str, command: str
) -> None:
    prefix = _unreadable(segments(jdir)[1], how)
    dest = tmp_path / "out"
    args = [str(jdir)] + ([str(dest)] if command == "salvage" else [])
    proc = subprocess.run([*prefix, sys.executable, "-m", "journal.cli", command, *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == common.ERROR, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"journal {command}: ") and proc.stdout == ""
    if how == "eloop":
        # A link where a segment belongs is refused as a link (docs/GUARANTEES.md, "Links"),
        # naming the file and what to do, never followed.
        assert "[Errno 40]" in lines[0] and segments(jdir)[1].name in lines[0] and "move it away" in lines[0]
    else:
        assert f"reading journal {str(jdir)!r} failed" in lines[0] and "fix the cause" in lines[0]
    assert not dest.exists(), "salvage writes nothing when it cannot read its source"
