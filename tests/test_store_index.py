"""The session store's index: a snapshot and a log of updates, so creating and closing a session
costs the same however many sessions the store holds (journal/session/store.py, docs/SESSIONS.md).

Checked here: what an update reads and writes does not grow with the store; compaction folds the
log into a snapshot of a new generation and removes the old log; what a crash or a failed call
leaves at every step of a compaction still lists right, and the next call cleans it up; a v1
index (a snapshot without a log) is read as it is; a damaged log is rebuilt from the sessions;
listing opens the index files only; several processes updating at once lose nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest
import xxhash

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import File, OsFileSystem
from journal.session import store as st
from journal.session.store import INDEX_FILE, INDEX_LOG_PREFIX, SessionStore
from tests.conftest import report_count


class CountingFS(FaultyFileSystem):
    """Counts, per file, opens and the bytes read and written through the file layer."""

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.opens: collections.Counter[str] = collections.Counter()
        self.read_bytes: collections.Counter[str] = collections.Counter()
        self.written_bytes: collections.Counter[str] = collections.Counter()

    def _count(self, f: File) -> File:
        fs, path, pread, pwrite = self, f.path, f.pread, f.pwrite

        def counted_pread(size: int, offset: int) -> bytes:
            data = pread(size, offset)
            fs.read_bytes[path] += len(data)
            return data

        def counted_pwrite(data: Any, offset: int) -> int:
            n = pwrite(data, offset)
            fs.written_bytes[path] += n
            return n

        f.pread = counted_pread  # type: ignore[method-assign]
        f.pwrite = counted_pwrite  # type: ignore[method-assign]
        return f

    def open_read(self, path: str) -> File:
        self.opens[path] += 1
        return self._count(super().open_read(path))

    def open_write(self, path: str, create: bool) -> File:
        self.opens[path] += 1
        return self._count(super().open_write(path, create))

    def reset(self) -> None:
        for c in (self.opens, self.read_bytes, self.written_bytes):
            c.clear()


def index_files(root: pathlib.Path, counter: collections.Counter[str]) -> int:
    return sum(n for p, n in counter.items() if os.path.relpath(p, root).startswith(("index", INDEX_LOG_PREFIX)))


def fill(store: SessionStore, n: int) -> list[str]:
    ids = []
    for k in range(n):
        with store.create({"path": f"/w{k % 5}"}) as s:
            ids.append(s.session_id)
    return ids


def summary(store: SessionStore) -> dict[str, tuple[str, int, Any]]:
    return {i.session_id: (i.status, i.last_seq, i.workspace.get("path")) for i in store.list()}


def generation(root: pathlib.Path) -> int:
    first = (root / INDEX_FILE).read_bytes().split(b"\n", 1)[0].split()
    return int(first[2])


def logs(root: pathlib.Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(INDEX_LOG_PREFIX))


# --- an update's cost ------------------------------------------------------------------------


def test_create_and_close_cost_the_same_however_many_sessions(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    fs = CountingFS()
    store = SessionStore(root, fs=fs)
    costs = []
    for size in (10, 400):
        fill(store, size - len(store.list()))
        store.rebuild_index()  # a snapshot of every entry ...
        fill(store, 5)  # ... and a log after it
        fs.reset()
        with store.create({"path": "/probe"}):
            pass
        snapshot = str(root / INDEX_FILE)
        costs.append((index_files(root, fs.read_bytes), index_files(root, fs.written_bytes), fs.opens[snapshot],
                      fs.read_bytes[snapshot]))
    (_, written_small, opens_small, _), (read_big, written_big, opens_big, snapshot_read) = costs
    report_count("store index bytes (read, written, snapshot opens, snapshot bytes read) per create+close at 10 "
                 "and 400 sessions (tests/test_store_index.py)", f"{costs}")
    assert written_big <= written_small + 64, costs  # one small record each, never the whole index
    # What an update reads of the index is the snapshot's first line (twice: create, close) and
    # the log's live segment, which its size limit bounds: nothing that grows with the store.
    assert snapshot_read <= 2 * st.HEAD_BYTES_MAX, costs
    assert read_big <= 2 * (st.INDEX_LOG_SEGMENT_BYTES + 1024) + snapshot_read, costs
    assert (root / INDEX_FILE).stat().st_size > 60_000, "the probe ran against a big snapshot"
    assert opens_big == opens_small == 2, costs


def test_listing_opens_the_index_files_and_no_session_journal(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    fs = CountingFS()
    store = SessionStore(root, fs=fs)
    ids = fill(store, 30)
    fs.reset()
    assert [i.session_id for i in store.list()] == ids
    latest = store.latest(workspace="/w2")
    assert latest is not None and latest.workspace == {"path": "/w2"}
    opened = {os.path.relpath(p, root).split(os.sep)[0] for p in fs.opens}
    assert opened <= {INDEX_FILE, *logs(root)}, opened
    assert not any("sessions" in p for p in fs.opens), sorted(fs.opens)


# --- compaction ------------------------------------------------------------------------------


@pytest.fixture
def small_log(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(st, "INDEX_COMPACT_RECORDS_MIN", 8)
    return 8


def test_compaction_folds_the_log_into_a_new_generation(tmp_path: pathlib.Path, small_log: int) -> None:
    root = tmp_path / "root"
    store = SessionStore(root)
    ids = fill(store, 20)  # 40 updates: several compactions
    assert generation(root) >= 3
    assert logs(root) == [f"{INDEX_LOG_PREFIX}{generation(root):010d}"], "older logs are removed"
    with journal.open(root / logs(root)[0], readonly=True) as j:
        assert j.last_seq < max(small_log, 20)
    assert [i.session_id for i in store.list()] == ids
    assert all(not i.open for i in store.list())
    assert SessionStore(root).rebuild_index() == 20 and summary(SessionStore(root)) == summary(store)


def test_what_a_crash_during_compaction_leaves_lists_right(tmp_path: pathlib.Path, small_log: int) -> None:
    root = tmp_path / "root"
    store = SessionStore(root)
    fill(store, 3)
    want = summary(store)
    g = generation(root)
    # 1. Killed after making the new log's directory, before the snapshot: an empty log of the
    #    next generation. It is read (as nothing) and updates still go to generation g.
    (root / f"{INDEX_LOG_PREFIX}{g + 1:010d}").mkdir(mode=0o700)
    assert summary(SessionStore(root)) == want
    with store.create({"path": "/after-1"}) as s:
        want[s.session_id] = ("active", 1, "/after-1")
    assert summary(SessionStore(root)) == want and generation(root) == g
    # 2. Killed after the snapshot, before the old logs were removed: they are ignored.
    old = root / f"{INDEX_LOG_PREFIX}{g:010d}"
    keep = tmp_path / "old-log"
    shutil.copytree(old, keep)
    assert SessionStore(root).rebuild_index() == len(want)
    g2 = generation(root)
    assert g2 > g + 1 and not old.exists()
    shutil.copytree(keep, old)  # as if its removal never happened
    assert summary(SessionStore(root)) == want
    with store.create({"path": "/after-2"}) as s:
        want[s.session_id] = ("active", 1, "/after-2")
    assert summary(SessionStore(root)) == want
    fill(store, small_log)  # the next compaction removes every older log
    assert logs(root) == [f"{INDEX_LOG_PREFIX}{generation(root):010d}"]
    assert len(store.list()) == len(want) + small_log


SWEPT = ("open_read", "open_write", "pwrite", "short_write", "fsync", "fdatasync", "truncate", "rename", "unlink",
         "mkdir", "rmdir", "fsync_dir", "listdir")


@pytest.mark.parametrize("op", ["compacting-close", "rebuild"])
def test_every_failed_call_of_a_compaction_keeps_the_index_right(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    """Each file-layer call a compaction makes, failed in turn (EIO): the store lists what it
    holds, and doing it again works and leaves one log."""
    template = tmp_path / "template"
    template.mkdir()
    store = SessionStore(template / "root")
    ids = fill(store, 4)
    want = summary(store)
    with journal.open(template / "root" / logs(template / "root")[0], readonly=True) as j:
        logged = j.last_seq
    # The close of the session opened below is the update that reaches the threshold.
    monkeypatch.setattr(st, "INDEX_COMPACT_RECORDS_MIN", logged + 2)

    def run(fs: FaultyFileSystem, root: pathlib.Path) -> None:
        s = SessionStore(root, fs=fs)
        if op == "rebuild":
            s.rebuild_index()
        else:
            with s.open(ids[0]) as sess:
                sess.append("user.message", {"text": "more"})

    def truth(root: pathlib.Path) -> dict[str, tuple[str, int, Any]]:
        """What the journals hold: the index must agree with them."""
        out = {}
        for sid, (status, _, path) in want.items():
            with journal.open(root / "sessions" / sid / "journal", readonly=True) as j:
                out[sid] = (status, j.last_seq, path)
        return out

    counting = FaultyFileSystem(OsFileSystem())
    shutil.copytree(template, tmp_path / "count")
    run(counting, tmp_path / "count" / "root")
    assert generation(tmp_path / "count" / "root") == generation(template / "root") + 1, "no compaction ran"
    sites = [(o, n) for o in SWEPT for n in range(counting.calls[o])]
    broken = []
    for o, n in sites:
        d = tmp_path / f"{o}-{n}"
        shutil.copytree(template, d)
        root = d / "root"
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(o, errno.EIO, after=n)
        try:
            run(fs, root)
        except (journal.JournalError, OSError):
            pass
        try:
            got = summary(SessionStore(root))
            if got != truth(root):
                broken.append(f"{o}#{n}: lists {got}")
            run(FaultyFileSystem(OsFileSystem()), root)  # again, without the fault
            if summary(SessionStore(root)) != truth(root):
                broken.append(f"{o}#{n}: after the retry lists {summary(SessionStore(root))}")
            # A log whose removal failed is older than the snapshot: ignored, and removed by the
            # next compaction.
            if any(int(name[len(INDEX_LOG_PREFIX):]) > generation(root) for name in logs(root)[:-1]):
                broken.append(f"{o}#{n}: after the retry, logs {logs(root)} (snapshot {generation(root)})")
            SessionStore(root).rebuild_index()
            if len(logs(root)) != 1 or summary(SessionStore(root)) != truth(root):
                broken.append(f"{o}#{n}: after a rebuild, logs {logs(root)}")
        except Exception as exc:  # every broken promise is reported
            broken.append(f"{o}#{n}: {type(exc).__name__}: {exc}")
    report_count(f"store index fault sites checked, {op} (tests/test_store_index.py)", len(sites))
    assert len(sites) >= 10
    assert broken == []


# --- other index states ----------------------------------------------------------------------


def test_a_version_1_index_is_read_without_a_rebuild(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    store = SessionStore(root)
    ids = fill(store, 5)
    want = summary(store)
    # What the previous version wrote: one snapshot, no log.
    entries = {i.session_id: dataclasses.asdict(i) for i in store.list()}
    body = json.dumps({"version": 1, "sessions": entries}, sort_keys=True, separators=(",", ":")).encode()
    head = b"journal-session-index 1\n" + body + b"\n"
    for name in logs(root):
        shutil.rmtree(root / name)
    (root / INDEX_FILE).write_bytes(head + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(head))
    fs = CountingFS()
    assert summary(SessionStore(root, fs=fs)) == want
    assert not any("sessions" in p for p in fs.opens), "read from the v1 index, not rebuilt"
    with SessionStore(root).create({"path": "/new"}) as s:
        want[s.session_id] = ("active", 1, "/new")
    assert summary(SessionStore(root)) == want and logs(root) == [f"{INDEX_LOG_PREFIX}{0:010d}"]
    assert [i.session_id for i in SessionStore(root).list()][:5] == ids


def test_a_damaged_log_is_rebuilt_from_the_sessions(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    store = SessionStore(root)
    fill(store, 4)
    want = summary(store)
    seg = sorted((root / logs(root)[0]).glob("*.seg"))[0]
    data = bytearray(seg.read_bytes())
    data[100] ^= 0xFF  # inside the first record, which later records prove durable
    seg.write_bytes(bytes(data))
    assert summary(SessionStore(root)) == want
    assert generation(root) >= 2  # the rebuild wrote a new snapshot and dropped the damaged log


def test_processes_updating_at_once_lose_nothing(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    SessionStore(root)
    code = (
        "import sys; from journal.session.store import SessionStore\n"
        "s = SessionStore(sys.argv[1])\n"
        "for k in range(15):\n"
        "    with s.create({'path': sys.argv[2]}) as x: x.append('user.message', {'text': str(k)})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root), f"/p{i}"]) for i in range(4)]
    assert [p.wait(120) for p in procs] == [0] * 4
    listed = SessionStore(root).list()
    assert len(listed) == 60 and all(i.last_seq == 2 and not i.open for i in listed)
    assert sorted(collections.Counter(i.workspace["path"] for i in listed).values()) == [15] * 4
