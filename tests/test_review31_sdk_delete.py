"""Review of issue 31: deleting a session removes its own transcripts and no other journal.

The index's entries name their transcript journal, and delete removed every journal its entries
named: an index entry naming another key's transcript (a crafted or damaged index: every byte
read may be crafted) made the delete of one session remove another session's acknowledged
entries. A transcript's name follows from its key, so delete removes only the names its keys give.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

import journal
from journal.adapters.claude_agent_sdk import INDEX_PREFIX, JournalSessionStore, journal_name

A: Any = {"project_key": "proj", "session_id": "a"}
B: Any = {"project_key": "proj", "session_id": "b"}


def test_delete_never_removes_a_journal_another_key_owns(tmp_path: pathlib.Path) -> None:
    async def write() -> None:
        async with JournalSessionStore(tmp_path) as store:
            await store.append(A, [{"type": "user", "uuid": "a1", "timestamp": "2024-01-01T00:00:00Z"}])
            await store.append(B, [{"type": "user", "uuid": "b1", "timestamp": "2024-01-01T00:00:00Z"}])

    asyncio.run(write())
    with journal.open(tmp_path / (INDEX_PREFIX + "proj")) as j:  # an entry of session a naming b's transcript
        j.append({"op": "put", "project": "proj", "session": "a", "subpath": "x", "journal": journal_name(B),
                  "mtime": 1, "summary": None, "acked": False}, durability="sync")

    async def delete_a() -> Any:
        async with JournalSessionStore(tmp_path) as store:
            await store.delete(A)
            return await store.load(A), await store.load(B)

    got_a, got_b = asyncio.run(delete_a())
    assert got_a is None
    assert got_b is not None and [e["uuid"] for e in got_b] == ["b1"]
