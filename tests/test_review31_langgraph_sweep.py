"""Review of issue 31: the TTL sweep deletes any number of expired items.

A sweep wrote every expired item's delete in one record: once the expired items' deletes passed
the record size limit, every sweep raised BatchTooLargeError (the background sweeper swallowed it
and tried again, forever), so expired items were never deleted and the store only grew. Deletes
of expired items need not be one record: each stands on its own.
"""

from __future__ import annotations

import pathlib
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import PutOp

from journal.adapters.langgraph_store import JournalStore

RECORD_BYTES = 64 * 1024  # a small record limit, so that a few thousand items pass it
ITEMS = 4_000  # deletes of ~40 bytes each: about 160 KiB, over two records' worth
PER_BATCH = 200  # each put batch well under the limit


def test_sweep_of_more_expired_items_than_one_record_holds(tmp_path: pathlib.Path) -> None:
    now = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    with JournalStore(tmp_path, clock=lambda: now[0], record_size_bytes_max=RECORD_BYTES) as store:
        for start in range(0, ITEMS, PER_BATCH):
            store.batch([PutOp(("users", "u"), f"key-{i:06d}", {"v": i}, ttl=1.0)
                         for i in range(start, start + PER_BATCH)])
        store.put(("keep",), "k", {"v": 1})  # no TTL: never swept
        now[0] += timedelta(minutes=5)
        assert store.sweep_ttl() == ITEMS
        assert store.search(("users",), limit=10) == []
    with JournalStore(tmp_path, clock=lambda: now[0], record_size_bytes_max=RECORD_BYTES) as store:
        assert store.search(("users",), limit=10) == []  # the deletes are stored, not only folded
        assert store.get(("keep",), "k") is not None


def test_a_search_refreshing_more_items_than_one_record_holds(tmp_path: pathlib.Path) -> None:
    """A read that refreshes TTLs wrote every refresh in one record: past the record limit the
    search itself failed, blaming "the batch's puts" of a batch that had none."""
    now = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    ttl: Any = {"refresh_on_read": True}
    with JournalStore(tmp_path, clock=lambda: now[0], record_size_bytes_max=RECORD_BYTES, ttl=ttl) as store:
        for start in range(0, ITEMS, PER_BATCH):
            store.batch([PutOp(("users", "u"), f"key-{i:06d}", {"v": i}, ttl=10.0)
                         for i in range(start, start + PER_BATCH)])
        now[0] += timedelta(minutes=8)
        assert len(store.search(("users",), limit=ITEMS)) == ITEMS  # refreshed to 10 minutes after now
    now[0] += timedelta(minutes=5)  # past the first expiry, before the refreshed one
    with JournalStore(tmp_path, clock=lambda: now[0], record_size_bytes_max=RECORD_BYTES, ttl=ttl) as store:
        assert store.sweep_ttl() == 0  # the refreshes are stored, not only folded
