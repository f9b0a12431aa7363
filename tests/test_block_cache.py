"""The process's cache of decoded block frames (journal/engine/block_cache.py): a block read
before is not decoded again, its budget holds, a closed segment's entries go, and a frame
rewritten at the same offset since it was decoded is read anew, never served stale."""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import block_cache
from journal.engine.block_cache import CACHE, BlockCache, PointBlock
from journal.fs import OsFileSystem
from tests.conftest import count_decodes

pytestmark = pytest.mark.usefixtures("block_cache_at_default")


def _event(i: int, fill: str = "a") -> dict[str, Any]:
    return {"type": "tool_result", "i": i, "text": f"{fill * 300} {i}"}


def _three_blocks(path: Path) -> None:
    with journal.open(path, create=True) as j:
        for first in (1, 41, 81):  # three append_many: three block frames of 40 records
            j.append_many([_event(i) for i in range(first, first + 40)], durability="flush")


def test_every_block_read_before_is_read_again_without_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j"
    _three_blocks(path)
    with journal.open(path, readonly=True) as j:
        for seq in (5, 45, 85, 5):  # builds the index, then decodes each block once
            j.get(seq)
        calls = count_decodes(monkeypatch)
        # Not only the block read last: each of the three, in any order.
        got = [j.get(seq) for seq in (1, 80, 42, 120, 81, 3)]
        assert [r.event for r in got if r is not None] == [_event(s) for s in (1, 80, 42, 120, 81, 3)]
        assert calls == []


def test_with_no_budget_every_read_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "j"
    _three_blocks(path)
    assert journal.set_block_cache_bytes(0) == journal.BLOCK_CACHE_BYTES_DEFAULT
    with journal.open(path, readonly=True) as j:
        for seq in (5, 45, 85):
            j.get(seq)
        calls = count_decodes(monkeypatch)
        assert [j.get(s).event for s in (5, 45, 85)] == [_event(s) for s in (5, 45, 85)]  # type: ignore[union-attr]
        assert len(calls) == 3
    assert len(CACHE) == 0


def test_closing_a_handle_drops_its_blocks(tmp_path: Path) -> None:
    path = tmp_path / "j"
    _three_blocks(path)
    before = len(CACHE)
    with journal.open(path, readonly=True) as j:
        for seq in (5, 45, 85, 5, 45, 85):
            j.get(seq)
        assert len(CACHE) == before + 3
    assert len(CACHE) == before


def test_a_frame_rewritten_where_a_decoded_block_was_is_read_anew(tmp_path: Path) -> None:
    """A reader keeps a decoded block; the same segment file (same inode, same offsets, same
    salt) then holds another block there, as after a rolled-back batch written again. The read
    must give the new record: the cache is keyed by the segment and offset, and used only while
    the frame's header (its checksum) is the one decoded."""
    a, b = tmp_path / "a", tmp_path / "b"
    with journal.open(a, create=True):
        pass
    shutil.copytree(a, b)  # the same journal id, segment name and salt
    for path, fill in ((a, "a"), (b, "b")):
        with journal.open(path) as j:
            j.append_many([_event(i, fill) for i in range(1, 41)], durability="flush")
    (seg,) = [n for n in os.listdir(a) if n.endswith(".seg")]
    with journal.open(a, readonly=True) as j:
        j.get(5)
        first = j.get(5)  # decoded, and kept
        assert first is not None and first.event == _event(5, "a")
        with open(b / seg, "rb") as src, open(a / seg, "r+b") as dst:  # in place: the reader's file
            dst.write(src.read())
        again = j.get(5)
        assert again is not None and again.event == _event(5, "b")


def _block(offset: int, size: int) -> PointBlock:
    return PointBlock(offset, 1, b"x" * size, (size // 2, size - size // 2), b"\0\0", b"h" * 32)


def test_the_budget_holds_and_the_least_recently_used_go_first() -> None:
    one = _block(0, 1000).cost()
    cache = BlockCache(3 * one)
    for offset in (0, 100, 200):
        cache.put(7, _block(offset, 1000))
    assert cache.get(7, 0) is not None  # now the most recently used
    cache.put(7, _block(300, 1000))
    assert cache.get(7, 100) is None  # the least recently used went
    assert [cache.get(7, o) is not None for o in (0, 200, 300)] == [True, True, True]
    assert cache.used_bytes == 3 * one
    cache.put(7, _block(400, 10 * one))  # larger than the whole budget: not kept, nothing evicted
    assert cache.get(7, 400) is None and len(cache) == 3
    cache.put(7, _block(0, 1000))  # the same key again: replaced, not counted twice
    assert cache.used_bytes == 3 * one
    assert cache.resize(one) == 3 * one
    assert len(cache) == 1 and cache.used_bytes == one
    cache.put(8, _block(0, 10))
    cache.forget(7)
    assert cache.get(8, 0) is not None and len(cache) == 1
    cache.forget(8)
    assert len(cache) == 0 and cache.used_bytes == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True, None])
def test_a_budget_that_is_not_a_count_of_bytes_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="budget"):
        journal.set_block_cache_bytes(bad)
    assert CACHE.budget_bytes == journal.BLOCK_CACHE_BYTES_DEFAULT


def test_a_table_that_does_not_add_up_is_refused() -> None:
    with pytest.raises(journal.JournalError):
        PointBlock(0, 1, b"xyz", (1, 1), b"\0\0", b"")


def test_threads_sharing_the_cache_keep_its_count_exact() -> None:
    """Handles in many threads put, get and forget at once: the bytes counted are always those
    of the entries kept, and the budget holds."""
    one = _block(0, 500).cost()
    cache = BlockCache(20 * one)
    threads, rounds = 8, 300
    start = threading.Barrier(threads)

    def work(owner: int) -> None:
        start.wait()
        for k in range(rounds):
            cache.put(owner, _block(k % 30, 500))
            cache.get(owner, (k * 7) % 30)
            if k % 50 == 49:
                cache.forget(owner)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    kept = [cache.get(o, k) for o in range(threads) for k in range(30)]
    assert cache.used_bytes == sum(b.cost() for b in kept if b is not None) <= 20 * one


def test_owners_are_never_given_twice() -> None:
    got = {block_cache.new_owner() for _ in range(1000)}
    assert len(got) == 1000


def test_a_failed_read_of_a_cached_blocks_header_is_an_io_error_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header read that checks a cached block (an I/O path of its own) fails with EIO: the
    read raises JournalIOError naming the journal, and the next read, the disk well again, is
    served from the cache as before."""
    path = tmp_path / "j"
    _three_blocks(path)
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(path, readonly=True, fs=fs) as j:
        for seq in (5, 5):  # the index, then the block decoded and kept
            j.get(seq)
        calls = count_decodes(monkeypatch)
        fs.fail("pread", errno.EIO, after=fs.calls["pread"])  # the next pread: the header's
        with pytest.raises(journal.JournalIOError):
            j.get(6)
        assert fs.injected and calls == []
        got = j.get(7)
        assert got is not None and got.event == _event(7) and calls == []
