"""A session store whose sessions share a commit group (SessionStore(root, commit_group=True))."""

from __future__ import annotations

import glob
import os
import pathlib
import subprocess
import sys

import pytest

import journal
from journal.engine import group as grp
from journal.engine.format import SEGMENT_HEADER_SIZE_BYTES
from journal.engine.verify import verify
from journal.session.store import SessionStore

SESSIONS = 3
TOOL_CALLS = 20  # tool.requested is a durability boundary: each one is synced through the group


def _write(store: SessionStore) -> dict[str, int]:
    """Sessions with durable events; their ids and last seqs."""
    last: dict[str, int] = {}
    opened = [store.create({"path": f"/w{i}"}) for i in range(SESSIONS)]
    for k in range(TOOL_CALLS):
        for s in opened:
            s.append("user.message", {"text": f"message {k} " + "x" * 200})
            s.journal.sync()
    for s in opened:
        last[s.session_id] = s.journal.last_seq
    for s in opened:
        s.close()
    return last


def test_sessions_of_a_grouped_store_read_back_after_close(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    with SessionStore(root, commit_group=True) as store:
        last = _write(store)
        assert store._group is not None  # the sessions went through the group
    assert not [n for n in os.listdir(root / grp.GROUP_DIR) if n.startswith(grp.INSTANCE_PREFIX)]
    plain = SessionStore(root)  # no group needed to read them
    for sid, seq in last.items():
        with plain.open(sid, readonly=True) as s:
            texts = [e.data.get("text") for e in s.read() if e.type == "user.message"]
            assert s.journal.last_seq == seq
            assert texts == [f"message {k} " + "x" * 200 for k in range(TOOL_CALLS)]


def test_store_close_with_a_session_open_refuses_and_keeps_the_group(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "store", commit_group=True)
    s = store.create()
    s.append("user.message", {"text": "hi"})
    with pytest.raises(journal.GroupError, match="still open"):
        store.close()
    s.close()
    store.close()  # now it can
    store.close()  # and again: idempotent


_CHILD = r"""
import glob, json, os, sys
from journal.session.store import SessionStore
root, out = sys.argv[1], sys.argv[2]
store = SessionStore(root, commit_group=True)
opened = [store.create() for _ in range({sessions})]
# What each segment holds now was synced without the group (the session's build, its open).
synced = {{p: os.path.getsize(p) for p in glob.glob(os.path.join(root, "sessions", "*", "journal", "*.seg"))}}
for k in range({calls}):
    for s in opened:
        s.append("user.message", {{"text": f"message {{k}}"}})
        s.journal.sync()
with open(out, "w") as f:
    json.dump({{s.session_id: s.journal.last_seq for s in opened}}, f)
# A power loss that keeps the group's synced log and none of the bytes the sessions' segments
# got through the group: each is cut back to what it held before, and the process dies without
# closing anything.
for path in glob.glob(os.path.join(root, "sessions", "*", "journal", "*.seg")):
    os.truncate(path, synced.get(path, {header}))
os._exit(0)
"""


def test_a_grouped_store_recovers_sessions_from_the_group_log_after_a_crash(tmp_path: pathlib.Path) -> None:
    root, out = tmp_path / "store", tmp_path / "acked.json"
    code = _CHILD.format(sessions=SESSIONS, calls=TOOL_CALLS, header=SEGMENT_HEADER_SIZE_BYTES)
    subprocess.run([sys.executable, "-c", code, str(root), str(out)], check=True)
    import json

    acked: dict[str, int] = json.loads(out.read_text())
    segs = glob.glob(str(root / "sessions" / "*" / "journal" / "*.seg"))
    assert len(segs) == SESSIONS
    # A tool that changes nothing says the group's log is unrecovered rather than judge the
    # segments (they lack what only the log holds), and changes nothing.
    store = SessionStore(root)
    first = store.journal_path(next(iter(acked)))
    before = {p: pathlib.Path(p).read_bytes() for p in segs}
    with pytest.raises(journal.GroupRecoveryPendingError, match="Open the journal once"):
        verify(first)
    assert {p: pathlib.Path(p).read_bytes() for p in segs} == before
    # A read-only open (the viewer's) recovers the dead group first: every synced event is back.
    for sid, seq in acked.items():
        with store.open(sid, readonly=True) as s:
            texts = [e.data.get("text") for e in s.read() if e.type == "user.message"]
            assert s.journal.last_seq >= seq
            assert texts == [f"message {k}" for k in range(TOOL_CALLS)]
    assert not [n for n in os.listdir(root / grp.GROUP_DIR) if n.startswith(grp.INSTANCE_PREFIX)]
    assert verify(first).verdict == "clean"  # and now the segments hold it all
