"""The session store: ids, permissions, listing from the index alone, and an index that heals."""

from __future__ import annotations

import collections
import itertools
import os
import pathlib
import shutil
import stat
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st_

from journal import session
from journal.fs import File, Lock, OsFileSystem
from journal.session import store as st
from journal.session.session import SessionIds
from journal.session.store import SessionStore

EPOCH_S = 1_767_225_600.0  # 2026-01-01: where the fake clocks below start


class CountingFS(OsFileSystem):
    """Counts opens per file name; ``nosync`` skips fsyncs to build big stores quickly."""

    def __init__(self, nosync: bool = False) -> None:
        self.opens: collections.Counter[str] = collections.Counter()
        self.nosync = nosync

    def open_read(self, path: str) -> File:
        self.opens[os.path.basename(path)] += 1
        return super().open_read(path)

    def open_write(self, path: str, create: bool) -> File:
        self.opens[os.path.basename(path)] += 1
        f = super().open_write(path, create)
        if self.nosync:
            f.fsync = f.fdatasync = lambda: None  # type: ignore[method-assign]
        return f

    def fsync_dir(self, path: str) -> None:
        if not self.nosync:
            super().fsync_dir(path)

    def try_lock(self, path: str) -> Lock | None:
        self.opens[os.path.basename(path)] += 1
        return super().try_lock(path)


class TickingClock:
    """utc_now's stand-in: a millisecond later at every call, so "updated" orders by call."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)

    def __call__(self) -> str:
        n = next(self._ticks)
        return f"2026-01-01T00:{n // 60_000:02d}:{n // 1000 % 60:02d}.{n % 1000:03d}Z"


def test_create_open_list_latest_archive(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither order below may rest on the millisecond clock: both creates get their ids from a
    # clock that stands still (their order is the generator's), and "updated" from a fake
    # clock that moves on at every call.
    monkeypatch.setattr(st, "new_session_id", SessionIds(clock=lambda: EPOCH_S))
    monkeypatch.setattr(st, "utc_now", TickingClock())
    store = SessionStore(tmp_path / "root")
    with store.create({"path": "/a"}) as s1:
        s1.append("user.message", {"text": "one"})
        first = s1.session_id
    with store.create({"path": "/b"}) as s2:
        second = s2.session_id
    assert first < second  # ids sort by creation, even within one millisecond
    listed = store.list()
    assert [i.session_id for i in listed] == [first, second]
    assert listed[0].workspace == {"path": "/a"} and listed[0].status == "active" and listed[0].last_seq == 2
    assert listed[0].created and listed[0].updated and not listed[0].open
    latest = store.latest()
    assert latest is not None and latest.session_id == second
    with store.open(first) as s:
        s.append("user.message", {"text": "again"})
    latest = store.latest()
    assert latest is not None and latest.session_id == first and latest.last_seq == 3
    latest_b = store.latest(workspace="/b")
    assert latest_b is not None and latest_b.session_id == second
    assert store.archive(first).status == "archived"
    assert [i.session_id for i in store.list(status="active")] == [second]
    with pytest.raises(st.StoreError, match="archived"):
        store.open(first)
    with store.open(first, readonly=True) as s:
        assert s.journal.last_seq == 3


# Clock steps in milliseconds: mostly standing still or small, sometimes a jump back or ahead.
CLOCK_STEPS_MS = st_.one_of(st_.just(0), st_.integers(-3, 3), st_.integers(-86_400_000, 86_400_000))
# The low part a new millisecond starts at: anything, the top of the range included.
LOWS = st_.one_of(st_.integers(0, 2**32 - 1), st_.integers(2**32 - 3, 2**32 - 1))


@given(steps=st_.lists(CLOCK_STEPS_MS, min_size=1, max_size=300), lows=st_.lists(LOWS, min_size=1, max_size=20))
def test_session_ids_increase_whatever_the_clock_does(steps: list[int], lows: list[int]) -> None:
    """Every id is greater than the one before, is a valid session id of the same length, and
    never runs behind the clock: with a clock that stands still, goes back or jumps ahead, and
    random low parts at the edge of their range."""
    readings = list(itertools.accumulate(steps, initial=int(EPOCH_S * 1000)))
    clock = iter(readings)
    low = itertools.cycle(lows)
    ids_of = SessionIds(clock=lambda: next(clock) / 1000, random_low=lambda: next(low))
    ids = [ids_of() for _ in readings]
    assert all(a < b for a, b in itertools.pairwise(ids)), ids
    assert {len(i) for i in ids} == {21}
    for sid in ids:
        assert st.check_session_id(sid) == sid
    high = 0
    for n, (sid, reading) in enumerate(zip(ids, readings, strict=True)):
        high = max(high, reading)
        # Never behind the clock's highest reading so far; ahead of it only by overflows of the
        # low part, one millisecond each.
        assert high <= int(sid[1:13], 16) <= high + n, (sid, reading, high)


def test_session_ids_from_threads_are_all_different_and_in_each_threads_order() -> None:
    ids_of = SessionIds(clock=lambda: EPOCH_S)  # one millisecond for all of them
    made: dict[int, list[str]] = {}

    def make(t: int) -> None:
        made[t] = [ids_of() for _ in range(2000)]

    threads = [threading.Thread(target=make, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({i for v in made.values() for i in v}) == 8000
    assert all(v == sorted(v) for v in made.values())


@pytest.mark.parametrize("bad", ["", "..", "a/b", "../x", "a\\b", ".hidden", "a..b", "x" * 129, "a b", "é"])
def test_session_ids_are_validated(tmp_path: pathlib.Path, bad: str) -> None:
    store = SessionStore(tmp_path / "root")
    with pytest.raises(st.InvalidSessionIdError):
        store.create(session_id=bad)
    with pytest.raises(st.InvalidSessionIdError):
        store.session_dir(bad)


def test_everything_is_owner_only(tmp_path: pathlib.Path) -> None:
    old = os.umask(0o022)
    try:
        store = SessionStore(tmp_path / "root")
        with store.create({"path": "/a"}) as s:
            s.append("user.message", {"text": "secret"})
        store.artifacts.put(b"secret output")
        store.list()
    finally:
        os.umask(old)
    for p in pathlib.Path(tmp_path / "root").rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


def test_listing_thousands_of_sessions_reads_only_the_index(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    fs = CountingFS(nosync=True)
    SessionStore(root, fs=fs)
    n = 2000
    for k in range(n):  # written behind the store's back: the first listing must find them
        sid = f"s{k:05d}"
        os.mkdir(root / "sessions" / sid, 0o700)
        with session.open(
            root / "sessions" / sid / "journal", create=True, session_id=sid, fs=fs, workspace={"path": f"/w{k % 7}"}
        ) as s:
            s.append("user.message", {"text": "hi"})
    store = SessionStore(root, fs=fs)
    assert len(store.list()) == n  # rebuilt from the sessions
    fs.opens.clear()
    listed = store.list()
    assert len(listed) == n and listed[5].workspace == {"path": "/w5"} and listed[5].last_seq == 2
    assert dict(fs.opens) == {"index.json": 1}
    latest = store.latest(workspace="/w3")
    assert latest is not None and latest.workspace == {"path": "/w3"}
    assert dict(fs.opens) == {"index.json": 2}


def _ids(store: SessionStore) -> list[str]:
    return [i.session_id for i in store.list()]


def test_the_index_is_rebuilt_when_missing_damaged_or_stale(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    store = SessionStore(root)
    ids = []
    for k in range(3):
        with store.create({"path": f"/w{k}"}) as s:
            ids.append(s.session_id)
    index = root / "index.json"
    index.unlink()
    assert _ids(store) == ids and index.exists()
    data = bytearray(index.read_bytes())
    data[40] ^= 0x20
    index.write_bytes(bytes(data))
    assert _ids(store) == ids
    # A session that appears, disappears or moves behind the store's back.
    sid = "s-manual"
    os.mkdir(root / "sessions" / sid, 0o700)
    with session.open(root / "sessions" / sid / "journal", create=True, session_id=sid) as s:
        s.append("user.message", {"text": "x"})
    assert sid in _ids(store) and store.info(sid).last_seq == 2
    os.rename(root / "sessions" / ids[0], root / "archive" / ids[0])
    assert store.info(ids[0]).status == "archived"
    shutil.rmtree(root / "archive" / ids[0])
    assert ids[0] not in _ids(store)


def test_a_writer_that_died_leaves_an_entry_that_is_refreshed(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "root")
    s = store.create({"path": "/a"})
    for k in range(5):
        s.append("user.message", {"text": f"m{k}"})
    s.journal.close()  # the process "dies": the store never hears of the close
    s.store = None
    info = store.info(s.session_id)
    assert info.last_seq == 6 and not info.open


def test_fork_through_the_store_is_listed_with_its_parent(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "root")
    with store.create({"path": "/a"}) as s:
        s.append("user.message", {"text": "hello"})
        parent = s.session_id
    got = store.fork(parent, origin="test")
    info = store.info(got.session_id)
    assert info.parent == parent and info.fork_seq == 2 and info.last_seq == 3 and info.workspace == {"path": "/a"}
    with store.open(got.session_id) as child:
        child.append("user.message", {"text": "a different future"})
    assert store.info(got.session_id).last_seq == 4 and store.info(parent).last_seq == 2


def test_archive_is_refused_while_a_writer_holds_the_session(tmp_path: pathlib.Path) -> None:
    store = SessionStore(tmp_path / "root")
    s = store.create()
    with pytest.raises(st.StoreError, match="open for writing"):
        store.archive(s.session_id)
    s.close()
    assert store.archive(s.session_id).status == "archived"
    # Archiving again finishes whatever an interrupted archive left (it is idempotent) ...
    assert store.archive(s.session_id).status == "archived"
    # ... and a session that exists nowhere is still an error.
    with pytest.raises(st.SessionNotFoundError):
        store.archive("s-no-such-session")
