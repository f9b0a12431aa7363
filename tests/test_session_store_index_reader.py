"""The store's read-only index reader (``journal.session.store.read_index``): what the store's
own loading and the viewer's listing of a file store both read. It takes no lock, writes
nothing, reads again when a compaction replaced the index under it, and checks every field's
type, since an index's bytes may be crafted."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any

import pytest
import xxhash

import journal
from journal.api import UnexpectedLinkError
from journal.fs import OsFileSystem
from journal.session import store as st
from journal.session.store import INDEX_FILE, INDEX_LOCK, SessionInfo, SessionStore, read_index
from journal.view.source import FileStore


def _store(tmp_path: pathlib.Path, n: int = 3) -> tuple[SessionStore, list[str]]:
    store = SessionStore(tmp_path / "store")
    ids = []
    for i in range(n):
        s = store.create(workspace={"path": f"/w/{i}"})
        s.append("user.message", {"text": f"hello {i}"})
        ids.append(s.session_id)
        s.close()
    return store, ids


def _write_snapshot(root: pathlib.Path, generation: int, sessions: dict[str, Any]) -> None:
    """An index snapshot as the store frames it (header, JSON, checksum), with ``sessions`` as given."""
    body = json.dumps({"version": 2, "generation": generation, "sessions": sessions}).encode()
    head = b"journal-session-index 2 %d %d\n" % (generation, len(sessions)) + body + b"\n"
    (root / INDEX_FILE).write_bytes(head + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(head))


def _tree(root: pathlib.Path) -> dict[str, tuple[int, int, bytes]]:
    """Every path under ``root`` with its mode, mtime and (files) bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            data = pathlib.Path(p).read_bytes() if os.path.isfile(p) and not os.path.islink(p) else b""
            out[p] = (s.st_mode, s.st_mtime_ns, data)
    s = os.lstat(root)
    out[str(root)] = (s.st_mode, s.st_mtime_ns, b"")
    return out


def test_the_reader_reads_what_the_store_lists(tmp_path: pathlib.Path) -> None:
    store, ids = _store(tmp_path)
    got = read_index(store.root)
    assert got is not None and got.exact
    assert sorted(got.sessions) == ids
    assert sorted(got.sessions.values(), key=lambda i: i.session_id) == store.list()
    assert FileStore(store.root)._index() == got.sessions


def _compact_once_after(monkeypatch: pytest.MonkeyPatch, step: str, writer: SessionStore) -> list[str]:
    """Make the reader's ``step`` (a function of journal.session.store) run a writer's compaction
    once, right after it returns: the interleaving forced, no thread, no timing. The list it
    returns says whether it ran."""
    real = getattr(st, step)
    ran: list[str] = []

    def then_compact(root: str, fs: Any) -> Any:
        got = real(root, fs)
        if not ran:
            ran.append(root)  # first: the compaction's own reading comes here too
            with writer._locked():
                writer._compact([])
        return got

    monkeypatch.setattr(st, step, then_compact)
    return ran


def test_a_compaction_between_the_snapshot_and_the_logs_is_read_again(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, ids = _store(tmp_path, n=1)
    before = read_index(store.root)
    assert before is not None
    # The log of the snapshot's generation holds the close (open False): what a read of the old
    # snapshot plus the logs left after a compaction would miss.
    assert before.sessions[ids[0]].open is False
    ran = _compact_once_after(monkeypatch, "_read_snapshot", SessionStore(store.root))
    after = read_index(store.root)
    assert ran and after is not None
    assert after.sessions == before.sessions  # not the old snapshot without its log's updates
    assert after.generation == before.generation + 1  # read again from the new snapshot
    assert FileStore(store.root)._index() == before.sessions


def test_a_log_removed_while_it_is_opened_is_read_again(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = _store(tmp_path, n=2)
    expected = read_index(store.root)
    assert expected is not None
    # The logs as listed; the compaction then removes the listed one before it is opened.
    ran = _compact_once_after(monkeypatch, "_log_generations", SessionStore(store.root))
    got = read_index(store.root)
    assert ran and got is not None
    assert got.generation == expected.generation + 1 and got.sessions == expected.sessions


def test_compactions_on_every_read_give_up_after_the_attempts(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _ = _store(tmp_path, n=1)
    writer = SessionStore(store.root)
    real = st._read_snapshot
    reads: list[int] = []
    compacting: list[int] = []

    def always_compacted(root: str, fs: Any) -> Any:
        got = real(root, fs)
        if compacting:
            return got  # the compaction's own read
        reads.append(1)
        compacting.append(1)
        with writer._locked():
            writer._compact([])
        compacting.clear()
        return got

    monkeypatch.setattr(st, "_read_snapshot", always_compacted)
    assert read_index(store.root) is None  # never a mix of two generations
    assert len(reads) == st.INDEX_LOAD_ATTEMPTS


def test_a_crafted_index_is_read_with_nothing_of_the_wrong_type(tmp_path: pathlib.Path) -> None:
    store, ids = _store(tmp_path, n=3)
    a, b, c = ids
    read = read_index(store.root)
    assert read is not None
    good = dict(read.sessions[a].__dict__)
    root = pathlib.Path(store.root)
    for p in root.glob(st.INDEX_LOG_PREFIX + "*"):
        shutil.rmtree(p)  # the crafted snapshot alone, then the crafted log
    generation = 5
    journal_dir = root / f"{st.INDEX_LOG_PREFIX}{generation:010d}"
    _write_snapshot(root, generation, {
        a: good,
        b: {**good, "session_id": b, "last_seq": "7", "workspace": ["x"], "open": "yes", "created": 5,
            "status": None, "parent": {"p": 1}, "fork_seq": -1, "extra": True},
        c: {**good, "session_id": c, "last_seq": 2**64 - 1},  # every field but this one as the store writes it
        "../../etc": {**good, "session_id": "../../etc"},
        "s0": "not an entry",
    })
    with journal.open(str(journal_dir), create=True) as j:
        j.append_many([
            {"op": "put", "id": "..", "info": {**good, "session_id": ".."}},
            {"op": "set", "id": "..", "fields": {"open": True}},
            {"op": "set", "id": a, "fields": {"last_seq": 2**64, "open": 1}},
        ], durability="sync")
    got = read_index(store.root)
    assert got is not None and not got.exact
    assert sorted(got.sessions) == [a, b, c]  # the ids that break the store's rule are dropped
    for info in got.sessions.values():
        assert type(info.last_seq) is int and 0 <= info.last_seq <= st.INDEX_SEQ_MAX
        assert info.fork_seq is None or (type(info.fork_seq) is int and info.fork_seq >= 0)
        assert type(info.workspace) is dict and type(info.open) is bool and type(info.status) is str
        assert all(v is None or type(v) is str for v in (info.created, info.updated, info.parent))
    assert got.sessions[b] == SessionInfo(b, "active", {}, None, good["updated"], 0, None, None, False)
    assert got.sessions[c].last_seq == 0 and got.sessions[c].fork_seq is None
    assert got.sessions[a].last_seq == 0 and got.sessions[a].open is False
    assert got.sessions[a].workspace == {"path": "/w/0"}
    # The viewer shows that, and the store, which never trusts a crafted index, rebuilds it from its
    # sessions' journals.
    view = FileStore(store.root).entries()
    assert sorted(view) == ids and view[a].info.workspace == {"path": "/w/0"}
    listed = {i.session_id: i for i in store.list()}
    assert sorted(listed) == ids and all(i.last_seq == 2 and not i.open for i in listed.values())
    assert listed[b].workspace == {"path": "/w/1"}
    rebuilt = read_index(store.root)
    assert rebuilt is not None and rebuilt.exact


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"version": 2, "sessions": [1]}', b'{"version": 9, "sessions": {}}',
                                  b'{"version": 2, "sessions": {"s1": {"last_seq": 1' + b"9" * 5000 + b"}}}"])
def test_a_snapshot_that_is_no_index_is_none(tmp_path: pathlib.Path, body: bytes) -> None:
    root = tmp_path / "store"
    root.mkdir()
    head = b"journal-session-index 2 1 0\n" + body + b"\n"
    (root / INDEX_FILE).write_bytes(head + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(head))
    assert read_index(root) is None


def test_reading_writes_nothing_even_where_the_store_would(tmp_path: pathlib.Path) -> None:
    store, ids = _store(tmp_path, n=2)
    held = store.open(ids[0])  # an entry marked open ...
    held.journal.close()  # ... whose writer is gone: a listing would refresh it from its journal
    held.store = None
    SessionStore(tmp_path / "other").create().close()
    os.rename(tmp_path / "other" / "sessions" / os.listdir(tmp_path / "other" / "sessions")[-1],
              os.path.join(store.root, "sessions", "s" + "f" * 20))  # a session the index lacks
    before = _tree(pathlib.Path(store.root))
    got = read_index(store.root)
    view = FileStore(store.root).entries()
    assert got is not None and got.sessions[ids[0]].open is True  # as the index says: not refreshed
    assert "s" + "f" * 20 not in got.sessions and "s" + "f" * 20 in view
    assert _tree(pathlib.Path(store.root)) == before


def test_reading_takes_no_lock(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, ids = _store(tmp_path, n=2)
    # A lock taken while the writer holds it would fail at once rather than wait.
    monkeypatch.setattr(st, "INDEX_LOCK_TIMEOUT_S", 0.0)
    lock = OsFileSystem().try_lock(os.path.join(store.root, INDEX_LOCK))
    assert lock is not None
    try:
        got = read_index(store.root)
        assert got is not None and sorted(got.sessions) == ids
        assert sorted(FileStore(store.root).entries()) == ids
        with pytest.raises(st.StoreError):
            store.rebuild_index()  # the lock is held indeed
    finally:
        lock.release()


def test_a_link_at_the_index_is_never_followed(tmp_path: pathlib.Path) -> None:
    store, ids = _store(tmp_path, n=2)
    index = pathlib.Path(store.root, INDEX_FILE)
    elsewhere = tmp_path / "elsewhere.json"
    index.rename(elsewhere)
    index.symlink_to(elsewhere)
    with pytest.raises(UnexpectedLinkError):
        read_index(store.root)  # the store says so (its listing raises it)
    view = FileStore(store.root).entries()
    assert sorted(view) == ids and not any(e.in_index for e in view.values())  # read from the headers


@pytest.mark.parametrize("name", sorted(st._FIELD_RULES))
def test_the_fast_check_and_the_field_rules_agree(name: str) -> None:
    """A listing checks an entry with the store's field names in one expression (_as_written);
    a crafted one field by field (_FIELD_RULES): both must say the same of every value."""
    good = dict(SessionInfo("s0", "active", {}, None, None, 0).__dict__)
    ok = st._FIELD_RULES[name][0]
    values: list[Any] = [None, True, False, 0, 1, -1, st.INDEX_SEQ_MAX, st.INDEX_SEQ_MAX + 1, 1.0, "", "x", {}, [],
                         {"a": 1}]
    for v in values:
        assert st._as_written({**good, name: v}) == ok(v), (name, v)
