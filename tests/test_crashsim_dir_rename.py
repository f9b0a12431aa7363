"""The recording file system and the power-loss model rename whole directories (a fork does)."""

from __future__ import annotations

import errno
import random

import pytest

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.model import Replay, crash_points, exhaustive
from journal.fs import write_new


def _build_then_rename(fs: MemFileSystem) -> None:
    """Make /.t with a synced file in it and a synced entry, rename it to /c, fsync /."""
    fs.mkdir("/.t")
    fs.mkdir("/.t/sub")
    write_new(fs, "/.t/a", b"A" * 100)
    write_new(fs, "/.t/sub/b", b"B" * 10)
    fs.fsync_dir("/.t/sub")
    fs.fsync_dir("/.t")
    fs.rename("/.t", "/c")
    fs.open_write("/c/late", create=True).close()  # after the move, never synced
    fs.fsync_dir("/")


def test_the_current_view_moves_the_whole_tree() -> None:
    fs = MemFileSystem()
    _build_then_rename(fs)
    files, dirs = fs.snapshot()
    assert files == {"/c/a": b"A" * 100, "/c/sub/b": b"B" * 10, "/c/late": b""}
    assert dirs == {"/", "/c", "/c/sub"}
    assert not fs.exists("/.t")


def test_rename_refuses_what_rename_2_refuses() -> None:
    fs = MemFileSystem()
    fs.mkdir("/a")
    fs.mkdir("/b")
    fs.open_write("/b/x", create=True).close()
    with pytest.raises(OSError) as e:
        fs.rename("/a", "/b")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        fs.rename("/a", "/a/inner")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(NotADirectoryError):
        fs.rename("/a", "/b/x")
    with pytest.raises(IsADirectoryError):
        fs.rename("/b/x", "/a")
    fs.mkdir("/e")
    fs.rename("/a", "/e")  # onto an empty directory: replaced
    assert fs.is_dir("/e") and not fs.exists("/a")


def test_every_crash_image_has_the_directory_whole_under_one_name_or_not_at_all() -> None:
    fs = MemFileSystem()
    _build_then_rename(fs)
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    points = set(crash_points(fs.log))
    names: set[str] = set()
    n = 0
    while True:
        if replay.point in points:
            for state in exhaustive(replay, "psow", random.Random(0)):
                files, dirs = replay.build(state).image
                tops = {d for d in dirs if d.count("/") == 1 and d != "/"}
                assert len(tops) <= 1, (state.describe(fs.log), dirs)
                n += 1
                if not tops:
                    continue
                (top,) = tops
                names.add(top)
                synced = fs.log.index(next(op for op in fs.log if op.kind == "dirsync" and op.path == "/.t"))
                if state.point > synced:  # the files and entries made durable before the move
                    assert files[top + "/a"] == b"A" * 100
                    assert files[top + "/sub/b"] == b"B" * 10
                    assert top + "/sub" in dirs
        if replay.point >= len(fs.log):
            break
        replay.advance()
    assert names == {"/.t", "/c"} and n > 20
    final = replay.build(next(iter(exhaustive(replay, "psow", random.Random(0))))).image
    assert set(final[0]) >= {"/c/a", "/c/sub/b"}
