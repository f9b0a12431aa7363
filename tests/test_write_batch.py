"""A commit group's batch write in one call (native/write_sync.c's ``write_batch``) against its twin,
journal/fs.py's write_all and fdatasync called one by one: the same bytes on disk for any batch
(hypothesis), the same answers for a failed write of a journal's frames (the log is then not
tried), a failed write of the last item, and a failed fdatasync of it.

The faults are real: a descriptor opened read-only makes pwrite fail (EBADF) and /dev/null takes
a pwrite and refuses an fdatasync (EINVAL)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from journal import fs
from journal.fs import OsFile, SyncError, write_batch
from tests.native_modules import compiled


def _module() -> Any:
    return compiled("journal._write_sync", "the one-call durable write")


@pytest.fixture(params=["c", "python"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Each test runs through the C call (its calls counted in the list) and through the twin."""
    calls: list[int] = []
    if request.param == "c":
        real = _module().write_batch

        def counted(items: list[tuple[int, bytes, int, int]], sync_last: bool) -> list[int]:
            calls.append(len(items))
            out: list[int] = real(items, sync_last)
            return out

        monkeypatch.setattr(fs, "_WRITE_BATCH", counted)
    else:
        monkeypatch.setattr(fs, "_WRITE_BATCH", None)
    yield calls


def _open(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> OsFile:
    return OsFile(str(path), os.open(path, flags, 0o600))


def test_the_module_constant_matches() -> None:
    assert _module().NOT_TRIED == fs._NOT_TRIED > fs._NO_PROGRESS


@settings(max_examples=60, deadline=None)
@given(
    writes=hs.lists(
        hs.tuples(hs.integers(0, 2), hs.binary(min_size=1, max_size=300), hs.integers(0, 4000), hs.integers(0, 40)),
        min_size=1,
        max_size=6,
    ),
    sync=hs.booleans(),
)
def test_the_c_call_writes_what_the_python_calls_write(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, bytes, int, int]], sync: bool
) -> None:
    got: dict[str, list[bytes]] = {}
    for side in ("c", "python"):
        d = tmp_path_factory.mktemp(side)
        files = [_open(d / f"f{k}") for k in range(3)]
        saved = fs._WRITE_BATCH
        fs._WRITE_BATCH = saved if side == "c" else None
        try:
            answers = write_batch([(files[k], data, off, first) for k, data, off, first in writes], sync)
        finally:
            fs._WRITE_BATCH = saved
        assert answers == [None] * len(writes)
        got[side] = [f.pread(10_000, 0) for f in files]
        for f in files:
            f.close()
    assert got["c"] == got["python"]


def test_a_failed_frames_write_is_answered_and_the_log_not_tried(tmp_path: Path, kind: list[int]) -> None:
    (tmp_path / "ro").write_bytes(b"")
    ro = _open(tmp_path / "ro", os.O_RDONLY)
    ok, log = _open(tmp_path / "ok"), _open(tmp_path / "log")
    answers = write_batch([(ok, b"abc", 0, 0), (ro, b"xyz", 0, 0), (log, b"entry", 0, 0)], True)
    assert answers[0] is None
    assert isinstance(answers[1], OSError) and answers[1].errno == errno.EBADF
    assert isinstance(answers[2], OSError) and answers[2].errno == errno.ECANCELED
    assert log.size() == 0  # the log was not written
    assert ok.pread(3, 0) == b"abc"  # the others' frames were
    assert kind == ([3] if kind else [])


def test_a_failed_sync_of_the_last_is_a_sync_error(tmp_path: Path, kind: list[int]) -> None:
    frames = _open(tmp_path / "frames")
    null = OsFile("/dev/null", os.open("/dev/null", os.O_WRONLY))
    answers = write_batch([(frames, b"abc", 0, 0), (null, b"entry", 0, 0)], True)
    assert answers[0] is None
    assert isinstance(answers[1], SyncError) and answers[1].errno == errno.EINVAL
    # Without the fdatasync the same batch goes through.
    assert write_batch([(frames, b"abc", 0, 0), (null, b"entry", 0, 0)], False) == [None, None]


def test_a_failed_write_of_the_last_is_an_oserror_not_a_sync_error(tmp_path: Path, kind: list[int]) -> None:
    (tmp_path / "ro").write_bytes(b"")
    ro = _open(tmp_path / "ro", os.O_RDONLY)
    answers = write_batch([(_open(tmp_path / "a"), b"abc", 0, 0), (ro, b"entry", 0, 0)], True)
    assert answers[0] is None
    assert isinstance(answers[1], OSError) and not isinstance(answers[1], SyncError)
    assert answers[1].errno == errno.EBADF


def test_a_wrapped_file_takes_its_own_methods(tmp_path: Path, kind: list[int]) -> None:
    f = _open(tmp_path / "w")
    seen: list[int] = []
    inner = f.pwrite

    def pwrite(data: bytes | memoryview, offset: int) -> int:
        seen.append(offset)
        return inner(data, offset)

    f.pwrite = pwrite  # type: ignore[method-assign]
    assert write_batch([(f, b"abc", 7, 0), (_open(tmp_path / "log"), b"e", 0, 0)], False) == [None, None]
    assert seen == [7] and kind == []  # never the C call: the wrapper saw the write


def test_the_c_call_refuses_bad_items() -> None:
    c = _module().write_batch
    with pytest.raises(ValueError):
        c([], True)
    with pytest.raises(TypeError):
        c([(1, b"x", 0)], True)
    with pytest.raises(ValueError):
        c([(1, b"x", 0, -1)], True)
    with pytest.raises(TypeError):
        c([[1, b"x", 0, 0]], True)
