"""Review of issue 31: two SessionKeys never share a transcript journal, however long their parts.

A key whose escaped name is too long is stored under a digest of the key; a digest of the parts
joined by a separator the parts may themselves hold makes two keys one journal, and the second
key's entries were stored, acknowledged, in the first key's transcript.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from journal.adapters.claude_agent_sdk import JournalSessionStore, journal_name

LONG = "p" * 300  # past the longest escaped name, so the name is a digest
A: Any = {"project_key": LONG + "\0x", "session_id": "s"}
B: Any = {"project_key": LONG, "session_id": "x\0s"}
C: Any = {"project_key": LONG, "session_id": "s", "subpath": "\0"}
D: Any = {"project_key": LONG, "session_id": "s"}


def test_keys_with_separators_get_distinct_journals() -> None:
    assert journal_name(A) != journal_name(B)
    assert journal_name(C) != journal_name(D)


def test_entries_of_one_long_key_never_load_as_another(tmp_path: pathlib.Path) -> None:
    async def main() -> tuple[Any, Any]:
        async with JournalSessionStore(tmp_path) as store:
            await store.append(A, [{"type": "user", "uuid": "a1", "timestamp": "2024-01-01T00:00:00Z"}])
            await store.append(B, [{"type": "user", "uuid": "b1", "timestamp": "2024-01-01T00:00:00Z"}])
        async with JournalSessionStore(tmp_path) as store:  # a new process: nothing cached
            return await store.load(A), await store.load(B)

    got_a, got_b = asyncio.run(main())
    assert [e["uuid"] for e in got_a] == ["a1"]
    assert [e["uuid"] for e in got_b] == ["b1"]
