"""A file system error under a read is a JournalIOError (path, errno, what to do), never a bare
OSError: the reads of an open journal (read, follow) and a store's look at its journals."""

from __future__ import annotations

import errno
import pathlib
import threading

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine.store import DirectoryStore
from journal.fs import OsFileSystem


def _written(path: pathlib.Path, fs: FaultyFileSystem) -> journal.Journal:
    j = journal.open(str(path), create=True, fs=fs)
    for i in range(3):
        j.append({"n": i}, durability="sync")
    return j


@pytest.mark.parametrize("op", ["open_read", "pread"])
def test_a_read_fault_is_a_journal_io_error(tmp_path: pathlib.Path, op: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with _written(tmp_path / "j", fs) as j:
        fs.fail(op, errno.EIO, after=fs.calls[op], times=-1)
        with pytest.raises(journal.JournalIOError) as got:
            list(j.read())
        assert got.value.errno == errno.EIO and str(tmp_path / "j") in str(got.value)
        stop = threading.Event()
        with pytest.raises(journal.JournalIOError):
            for _ in j.follow(stop=stop, idle_timeout_s=5):
                stop.set()
        fs.clear()
        assert [r.event["n"] for r in j.read()] == [0, 1, 2]  # the handle goes on once the disk does


def test_a_store_that_cannot_list_says_so_typed(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    store = DirectoryStore(str(tmp_path / "store"), fs)
    with store.open("a", create=True) as j:
        j.append({"n": 1})
    fs.fail("listdir", errno.EIO, after=fs.calls["listdir"], times=-1)
    for look in (lambda: store.exists("a"), store.names):
        with pytest.raises(journal.JournalIOError) as got:
            look()
        assert got.value.errno == errno.EIO
