"""journal.store(path): a directory of journals (journal/engine/store.py), faults included."""

from __future__ import annotations

import errno
import os
import pathlib

import pytest

import journal
from journal.api import Store
from journal.crashsim.faults import FaultyFileSystem
from journal.engine.store import TRASH_DIR, DirectoryStore
from journal.fs import OsFileSystem


def test_open_list_copy_delete(tmp_path: pathlib.Path) -> None:
    store = journal.store(tmp_path / "s")
    assert isinstance(store, Store) and store.names() == []
    with store.open("a", create=True, segment_size_bytes=4096) as j:
        for i in range(60):
            j.append({"i": i, "pad": "x" * 100}, durability="flush")
    assert store.exists("a") and not store.exists("b") and store.names() == ["a"]
    store.copy("a", "b")
    root = tmp_path / "s"
    sealed = sorted(p for p in (root / "a").iterdir() if p.suffix == ".seg")[:-1]
    assert sealed and all((root / "b" / p.name).stat().st_ino == p.stat().st_ino for p in sealed)
    with store.open("b") as b:
        assert [r.event["i"] for r in b.read()] == list(range(60))
        b.append({"i": 60})
    with store.open("a", readonly=True) as a:
        assert a.last_seq == 60 and [r.event["i"] for r in a.read()][-1] == 59
    with pytest.raises(FileExistsError):
        store.copy("a", "b")
    with pytest.raises(journal.JournalNotFoundError):
        store.copy("nope", "c")
    with pytest.raises(journal.JournalNotFoundError):
        store.open("nope")
    store.delete("a")
    store.delete("a")  # a missing one: nothing to do
    assert store.names() == ["b"]
    assert not (root / TRASH_DIR).exists() or not list((root / TRASH_DIR).iterdir())


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "x" * 201, "sp ace", "é"])
def test_names_that_could_escape_the_directory_are_refused(tmp_path: pathlib.Path, name: str) -> None:
    store = DirectoryStore(tmp_path)
    with pytest.raises(journal.InvalidArgumentError):
        store.open(name, create=True)
    assert os.listdir(tmp_path) == []


def test_a_failed_create_leaves_nothing_under_the_name(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    store = DirectoryStore(tmp_path, fs=fs)
    fs.fail("rename", errno.EIO, after=fs.calls["rename"] + 1)  # the publishing rename (the first is the segment's)
    with pytest.raises(OSError):
        store.open("a", create=True)
    assert fs.injected and not store.exists("a") and store.names() == []
    assert [n for n in os.listdir(tmp_path) if not n.startswith(".")] == []
    fs.clear()
    with store.open("a", create=True) as j:  # and the next try makes it
        j.append({"n": 1})
    assert store.names() == ["a"]


def test_a_delete_cut_short_after_its_rename_is_finished_by_the_next_store(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    store = DirectoryStore(tmp_path, fs=fs)
    with store.open("a", create=True) as j:
        j.append({"n": 1})
    fs.fail("unlink", errno.EIO, after=fs.calls["unlink"])  # removing the renamed journal's files
    with pytest.raises(OSError):
        store.delete("a")
    assert fs.injected and store.names() == []  # the rename is the commit point: it is gone
    assert os.listdir(tmp_path / TRASH_DIR)
    fs.clear()
    DirectoryStore(tmp_path, fs=fs)
    assert os.listdir(tmp_path / TRASH_DIR) == []


def test_a_failed_copy_leaves_no_target(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    store = DirectoryStore(tmp_path, fs=fs)
    with store.open("a", create=True, segment_size_bytes=4096) as j:
        for i in range(60):
            j.append({"i": i, "pad": "x" * 100}, durability="flush")
    fs.fail("link", errno.EIO, after=fs.calls["link"] + 1)
    with pytest.raises(OSError):
        store.copy("a", "b")
    assert fs.injected and not store.exists("b") and store.names() == ["a"]
    fs.clear()
    store.copy("a", "b")
    with store.open("b", readonly=True) as b:
        assert b.last_seq == 60
