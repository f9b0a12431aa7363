"""The recording file system and the power-loss model know hard links (a fork links sealed segments)."""

from __future__ import annotations

import errno
import random

import pytest

from journal.crashsim.faults import FaultyFileSystem
from journal.crashsim.memfs import LINK, MemFileSystem
from journal.crashsim.model import Replay, crash_points, exhaustive
from journal.fs import write_new


def _with_file() -> MemFileSystem:
    """A file system whose durable starting image holds the file /p/a."""
    return MemFileSystem.from_image(({"/p/a": b"A" * 100}, frozenset({"/", "/p"})))


def _link_into_new_dir(fs: MemFileSystem) -> None:
    """A new directory /c made durable, then /p/a linked as /c/a and /c synced."""
    fs.mkdir("/c")
    fs.fsync_dir("/")
    fs.link("/p/a", "/c/a")
    fs.fsync_dir("/c")


def test_a_link_is_a_second_name_of_the_same_file() -> None:
    fs = _with_file()
    _link_into_new_dir(fs)
    assert fs.snapshot()[0] == {"/p/a": b"A" * 100, "/c/a": b"A" * 100}
    f = fs.open_write("/p/a", create=False)
    f.pwrite(b"B", 0)
    f.close()
    g = fs.open_read("/c/a")
    assert g.pread(1, 0) == b"B"  # one inode: a write through one name shows through the other
    g.close()
    fs.unlink("/p/a")
    assert fs.exists("/c/a") and not fs.exists("/p/a")
    assert [op.kind for op in fs.log].count(LINK) == 1


def test_link_refuses_what_link_2_refuses() -> None:
    fs = _with_file()
    _link_into_new_dir(fs)
    with pytest.raises(FileExistsError):
        fs.link("/p/a", "/c/a")
    with pytest.raises(FileNotFoundError):
        fs.link("/p/none", "/c/none")
    with pytest.raises(OSError) as e:
        fs.link("/p", "/c/p")
    assert e.value.errno == errno.EPERM


def test_a_link_survives_a_crash_only_once_its_directory_is_synced() -> None:
    fs = _with_file()
    _link_into_new_dir(fs)
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    points = set(crash_points(fs.log))
    link_at = next(i for i, op in enumerate(fs.log) if op.kind == LINK)
    synced_at = next(i for i, op in enumerate(fs.log) if op.kind == "dirsync" and op.path == "/c")
    seen_with, seen_without = 0, 0
    while True:
        if replay.point in points:
            for state in exhaustive(replay, "psow", random.Random(0)):
                files, _ = replay.build(state).image
                assert files.get("/p/a") == b"A" * 100  # the source is never touched
                if "/c/a" in files:
                    assert files["/c/a"] == b"A" * 100
                    assert state.point > link_at
                    seen_with += 1
                else:
                    assert state.point <= synced_at, state.describe(fs.log)
                    seen_without += 1
        if replay.point >= len(fs.log):
            break
        replay.advance()
    assert seen_with and seen_without


def test_link_is_an_injectable_operation() -> None:
    fs = FaultyFileSystem(MemFileSystem())
    fs.mkdir("/p")
    write_new(fs, "/p/a", b"A")
    fs.fail("link", errno.EIO)
    with pytest.raises(OSError) as e:
        fs.link("/p/a", "/p/b")
    assert e.value.errno == errno.EIO and not fs.exists("/p/b")
    fs.link("/p/a", "/p/b")
    assert fs.calls["link"] == 2 and fs.injected == [("link", 0)]
