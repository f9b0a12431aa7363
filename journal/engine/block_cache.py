"""Decoded block frames kept for point reads, within one byte budget for the whole process.

A point read of a record that shares a block frame with others decodes the whole block (zstd
takes ~120 µs for one of the default 128 KiB, ~30 µs for 32 KiB), where JSONL with a
line-offset index reads one line. Keeping decoded blocks, as a database keeps decoded pages
(SQLite's page cache, RocksDB's block cache), turns a read into a block read before into a
slice. One cache serves every journal handle of the process: a runtime holding a thousand
sessions open spends one budget, not a thousand.

An entry belongs to one open segment (its ``owner``, a number never given twice) and one frame
offset, and is used only while the frame at that offset still has the header it had when it
was decoded: the caller reads the header again on every use. The header holds the checksum of
the frame's bytes (with the segment's salt), its lengths and seq, so a frame rolled back and
rewritten since is decoded anew, never served stale. Only a verified, decoded frame is put in.
"""

from __future__ import annotations

import itertools
import os
import threading
from array import array
from collections import OrderedDict
from itertools import accumulate

from journal.errors import InvariantError
from journal.record import Record

# The budget of decoded block bytes the process keeps: 256 blocks of the default 128 KiB, 32 of
# BLOCK_BYTES_LIMIT (1 MiB). RocksDB keeps 32 MB of decoded blocks by default (8 MB before its
# version 8), for one database; this one is for every journal of the process. Reads over more
# data than this decode most blocks again (bench/README.md gives both figures);
# set_block_cache_bytes changes it (0: no cache, every read decodes).
BLOCK_CACHE_BYTES_DEFAULT = 32 * 1024 * 1024
# What an entry costs beyond its payload, record table and flags: the Python objects (the block,
# its payload's, table's, flags' and header's object headers, the 32-byte header), its key and
# its place in the order and in its owner's set. Measured with tracemalloc at ~680 bytes an entry
# of a block of two short records (tests/test_review34_block_cache_memory.py), rounded up so that
# many tiny blocks cannot hold more memory than the budget.
ENTRY_OVERHEAD_BYTES = 768
_owners = itertools.count(1)


def new_owner() -> int:
    """A number for one open segment's entries, never given to another."""
    return next(_owners)


class PointBlock:
    """A block frame a point read verified and decoded: its records by seq. Each read gets a
    Record of its own (a caller's change to one event reaches no other read)."""

    __slots__ = ("first_seq", "flags", "head", "last_seq", "offset", "payload", "starts")

    def __init__(
        self, offset: int, first_seq: int, payload: bytes, lengths: tuple[int, ...], flags: bytes, head: bytes
    ) -> None:
        if len(lengths) != len(flags) or sum(lengths) != len(payload):
            raise InvariantError("a decoded block's table adds up to its payload")
        self.offset = offset
        self.first_seq = first_seq
        self.last_seq = first_seq + len(lengths) - 1
        self.payload = payload
        self.starts = array("Q", accumulate(lengths, initial=0))  # record i is payload[starts[i]:starts[i+1]]
        self.flags = flags
        self.head = head  # the frame's header as read when it was decoded

    def record(self, seq: int, segment: str, bytes_flag: int, synthetic_flag: int) -> Record:
        i = seq - self.first_seq
        f = self.flags[i]
        payload = self.payload[self.starts[i] : self.starts[i + 1]]
        return Record(seq, payload, bool(f & bytes_flag), None, bool(f & synthetic_flag), segment, self.offset)

    def cost(self) -> int:
        return len(self.payload) + 8 * len(self.starts) + len(self.flags) + ENTRY_OVERHEAD_BYTES


class BlockCache:
    """Least recently used decoded blocks, by (owner, offset), within ``budget_bytes``."""

    def __init__(self, budget_bytes: int) -> None:
        self._check(budget_bytes)
        self._mu = threading.Lock()  # every journal handle of the process, from any thread
        self._budget = budget_bytes
        self._used = 0
        self._entries: OrderedDict[tuple[int, int], PointBlock] = OrderedDict()
        self._by_owner: dict[int, set[int]] = {}  # owner -> offsets it has in _entries

    @staticmethod
    def _check(budget_bytes: int) -> None:
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise ValueError(f"the block cache's budget is a number of bytes >= 0 (0: off), not {budget_bytes!r}")

    @property
    def budget_bytes(self) -> int:
        return self._budget

    @property
    def used_bytes(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, owner: int, offset: int) -> PointBlock | None:
        """The block ``owner`` decoded at ``offset``, if still kept; the caller checks that the
        frame there still has the block's ``head`` before using it."""
        key = (owner, offset)
        with self._mu:
            block = self._entries.get(key)
            if block is not None:
                self._entries.move_to_end(key)
            return block

    def put(self, owner: int, block: PointBlock) -> None:
        """Keep ``block`` (replacing what ``owner`` had at its offset), then give back the least
        recently used entries until the budget holds. A block larger than the budget is not kept."""
        cost = block.cost()
        key = (owner, block.offset)
        with self._mu:
            self._remove(key)
            if cost > self._budget:
                return
            self._entries[key] = block
            self._by_owner.setdefault(owner, set()).add(block.offset)
            self._used += cost
            self._shrink()

    def forget(self, owner: int) -> None:
        """Drop every entry of ``owner`` (its segment was closed: nothing can read them again)."""
        with self._mu:
            for offset in list(self._by_owner.get(owner, ())):
                self._remove((owner, offset))

    def resize(self, budget_bytes: int) -> int:
        """Set the budget (0: keep nothing); returns the one before. Entries over it go at once."""
        self._check(budget_bytes)
        with self._mu:
            before, self._budget = self._budget, budget_bytes
            self._shrink()
            return before

    def _remove(self, key: tuple[int, int]) -> None:
        block = self._entries.pop(key, None)
        if block is None:
            return
        self._used -= block.cost()
        owned = self._by_owner[key[0]]
        owned.discard(key[1])
        if not owned:
            del self._by_owner[key[0]]

    def _shrink(self) -> None:
        while self._used > self._budget and self._entries:
            self._remove(next(iter(self._entries)))

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock as one forked, perhaps half way
        # through a put: the child has no such thread to release it (its first point read into
        # a block would wait forever), and the entries may not add up to _used. It starts empty.
        self._mu = threading.Lock()
        self._used = 0
        self._entries = OrderedDict()
        self._by_owner = {}


CACHE = BlockCache(BLOCK_CACHE_BYTES_DEFAULT)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CACHE._after_fork_in_child)


def set_block_cache_bytes(budget_bytes: int) -> int:
    """Set how many bytes of decoded block frames the process keeps for point reads, for every
    journal it has open (0: none, every point read into a block decodes it); returns the budget
    before. The default is BLOCK_CACHE_BYTES_DEFAULT (32 MiB)."""
    return CACHE.resize(budget_bytes)


__all__ = ["BLOCK_CACHE_BYTES_DEFAULT", "CACHE", "BlockCache", "PointBlock", "new_owner", "set_block_cache_bytes"]
