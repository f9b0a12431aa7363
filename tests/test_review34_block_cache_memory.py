"""The block cache's budget counts what its entries hold: a journal of many small block frames
(two short records each, as pairs of appends make) must not keep more memory in the cache than
the bytes it counts against journal.set_block_cache_bytes."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import pytest

import journal
from journal.engine.block_cache import CACHE

RECORDS = 4000  # 2,000 blocks of two records: enough entries that per-entry costs dominate


pytestmark = pytest.mark.usefixtures("block_cache_at_default")


def test_many_small_blocks_hold_no_more_memory_than_the_bytes_counted(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True) as j:
        for i in range(0, RECORDS, 2):
            j.append_many([{"i": i}, {"i": i + 1}], durability="flush")
    with journal.open(path, readonly=True) as j:
        # Build the handle's dense index with the cache off, so only the cache's entries grow below.
        journal.set_block_cache_bytes(0)
        for _ in range(3):
            for seq in range(1, RECORDS + 1, 2):
                assert j.get(seq) is not None
        journal.set_block_cache_bytes(journal.BLOCK_CACHE_BYTES_DEFAULT)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for seq in range(1, RECORDS + 1, 2):
                assert j.get(seq) is not None
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(CACHE) == RECORDS // 2
        # What the cache counts is what the budget limits: the memory it holds must not exceed it.
        assert held <= CACHE.used_bytes, (held, CACHE.used_bytes)
