"""Review of the day's changes (d8ff1d4, 1feb2f1, 91b8f5a, c70c6fc/ef731d3), as an attacker
and as a careful user.

1. PostgreSQL ``_Writer.close`` runs ``pg_advisory_unlock_all()`` before it closes the
   connection: a store's shared writer connection keeps the locks of its other journals, a
   writer whose server session is gone closes, and close does not wait on a server that stopped
   answering (it did not before).
2. Snapshots record their registry's fingerprint: crafted fields are refused without a crash,
   a fork's snapshot made with a custom registry is used by a fork of the child with it.
3. A writer keeps its dictionary file: links planted at its name (or at its temp name) are never
   followed nor written through, other kinds of files are refused without a hang, a read-only
   handle writes nothing, and a copy taken by the writer reads back on its own.
4. The benchmark's shared syncfs acknowledges an event only after a syncfs begun after its write.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import os
import select
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import session
from journal.engine.dictionary import Dictionary, dictionary_file_name, encode_dictionary_file
from journal.errors import JournalFailStoppedError
from journal.outcomes import Committed, NotCommitted
from journal.session import fork as forking
from journal.session import snapshot
from journal.session.fork import FORK_SNAPSHOT_NAME
from journal.session.registry import DurabilityClass, EventType, Registry
from tests.backend_postgres import PG_URL, PostgresBackend, connect, unreachable
from tests.session_gen import FIXED_TIME, write_session
from tests.test_dictionary_file_kept import _train, append_until_roll, event, jopen, reads_back
from tests.test_session_open_tail import _falls_back, _rewrite, _session

# --- 1. PostgreSQL: the writer lock let go at close ----------------------------------------------

_pg_why = unreachable()
needs_pg = pytest.mark.skipif(_pg_why is not None, reason=_pg_why or "")


def _holds_lock(target: str) -> bool:
    """Whether a writer of ``target`` would be refused right now (JournalLockedError)."""
    try:
        j = journal.open(target)
    except journal.JournalLockedError:
        return True
    j.close()
    return False


@needs_pg
def test_pg_closing_one_store_journal_keeps_the_other_journals_writer_lock(pg: PostgresBackend) -> None:
    """A store's journals share one writer connection (StoreWriter): the close of one must not let
    go of the lock another still writes under (pg_advisory_unlock_all releases every lock of the
    server session)."""
    st = journal.store(pg.store_location())
    if True:
        a = st.open("a", create=True)
        b = st.open("b", create=True)
        a.append({"n": 1}, durability="flush")
        b.append({"n": 1}, durability="flush")
        a_any: Any = a
        b_any: Any = b
        w = b_any._writer
        assert a_any._writer is w  # one connection for both
        a.close()
        assert not w.conn.closed
        assert _holds_lock(pg.target("b"))  # b's writer lock is still held
        assert not _holds_lock(pg.target("a"))  # a's is let go
        assert b.append({"n": 2}, durability="sync") == Committed(2, "sync")
        b.close()
        assert not _holds_lock(pg.target("b"))


@needs_pg
def test_pg_close_after_the_server_ended_the_writer_session(pg: PostgresBackend) -> None:
    """The server gone from under the writer (its backend terminated): close returns, without a
    hang, and the next writer opens."""
    target = pg.target()
    j = journal.open(target, create=True)
    j.append({"n": 1}, durability="sync")
    j_any: Any = j
    pid = j_any.backend_pid
    with connect() as c:
        c.execute("SELECT pg_terminate_backend(%s)", (pid,))
    try:
        j.close()
    except JournalFailStoppedError:
        pass
    with journal.open(target) as k:
        assert k.last_seq == 1


@needs_pg
def test_pg_close_of_a_writer_left_inside_a_transaction_does_not_unlock_in_it(pg: PostgresBackend) -> None:
    """A writer connection not idle (inside a transaction) is closed without the unlock (which
    would run inside that transaction); the next writer still opens once the backend is gone."""
    target = pg.target()
    j = journal.open(target, create=True)
    j.append({"n": 1}, durability="sync")
    j_any: Any = j
    w = j_any._writer
    w.conn.execute("BEGIN")
    sent: list[str] = []
    real = w.conn.execute

    def spy(query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return real(query, *args, **kwargs)

    w.conn.execute = spy
    j.close()
    assert not any("unlock" in q for q in sent), sent
    assert w.conn.closed


class _StallingProxy:
    """A TCP proxy to the test server whose server-to-client direction can be stalled: a server
    that stopped answering while the kernel still acknowledges (a frozen backend)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stalled = threading.Event()
        self.resumed = threading.Event()
        self.stop = threading.Event()
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self) -> None:
        while not self.stop.is_set():
            r, _, _ = select.select([self.listener], [], [], 0.05)
            if not r:
                continue
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.socks += [client, server]
            for src, dst, down in ((client, server, False), (server, client, True)):
                t = threading.Thread(target=self._pump, args=(src, dst, down), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while not self.stop.is_set():
                r, _, _ = select.select([src], [], [], 0.05)
                if not r:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                if down and self.stalled.is_set():
                    self.resumed.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self.resumed.set()
        self.stop.set()
        for s in [self.listener, *self.socks]:
            s.close()
        for t in self.threads:
            t.join(5)


@needs_pg
def test_pg_close_does_not_wait_on_a_server_that_stopped_answering(
    pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() waits for the unlock's answer at most UNLOCK_WAIT_S (made short here), then
    closes the connection anyway."""
    from urllib.parse import urlsplit

    from journal.remote.postgres import connection

    monkeypatch.setattr(connection, "UNLOCK_WAIT_S", 0.2)

    u = urlsplit(PG_URL)
    proxy = _StallingProxy(u.hostname or "127.0.0.1", u.port or 5432)
    done = threading.Event()
    try:
        via = PG_URL.replace(f"{u.hostname}:{u.port or 5432}", f"127.0.0.1:{proxy.port}")
        j = journal.open(f"{via}?journal={uuid.uuid4().hex[:12]}&schema={pg.schema}", create=True)
        j.append({"n": 1}, durability="sync")
        proxy.stalled.set()  # from here the server's answers do not reach the client

        def close() -> None:
            try:
                j.close()
            except Exception:  # only whether it returns matters here
                pass
            done.set()

        t = threading.Thread(target=close, daemon=True)
        t.start()
        # Before d8ff1d4, close sent Terminate and returned at once; now after at most 0.2 s of
        # waiting. 30 s is a bound that only a hang reaches, not a sleep.
        returned = done.wait(30.0)
    finally:
        proxy.resumed.set()
        proxy.close()
    done.wait(10.0)
    assert returned, "close() is blocked on the stalled server"


# --- 2. Snapshots and the registry's fingerprint ----------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "ABCDEF0123456789",  # upper case
        "0123456789abcde",  # 15 digits
        "0123456789abcdef0",  # 17 digits
        123,
        ["0123456789abcdef"],
        {"x": 1},
        True,
        "",
        "0" * 5_000_000,  # huge
        # full-width digits and letters
        "".join(chr(0xFF10 + i) for i in range(10)) + "".join(chr(0xFF41 + i) for i in range(6)),
    ],
)
def test_a_crafted_registry_field_is_refused_and_the_open_replays(tmp_path: Path, value: Any) -> None:
    p = _session(tmp_path)
    _rewrite(p, registry=value)
    _falls_back(p, "fields out of range", tmp_path)


def test_a_fork_snapshot_saved_with_a_custom_registry_is_used_by_a_fork_of_the_child(tmp_path: Path) -> None:
    reg = Registry()
    reg.register(EventType("myrt.cache_hit", DurabilityClass.ORDINARY, ignorable=True))
    parent = tmp_path / "parent"
    write_session(str(parent), 5, 6).close()
    child, grandchild, other = tmp_path / "child", tmp_path / "grandchild", tmp_path / "other"
    forking.fork(parent, child, registry=reg, time=FIXED_TIME)
    assert (child / FORK_SNAPSHOT_NAME).exists()
    got = forking.fork(child, grandchild, registry=reg, time=FIXED_TIME)
    assert got.snapshot_reason is None and got.checked_from_seq > 0, got
    # Another registry replays past it, and says why.
    got2 = forking.fork(child, other, time=FIXED_TIME)
    assert got2.checked_from_seq == 0 and "another event-type registry" in (got2.snapshot_reason or ""), got2


def test_a_fork_of_a_child_forked_before_fingerprints_still_uses_its_fork_snapshot(tmp_path: Path) -> None:
    parent, child = tmp_path / "parent", tmp_path / "child"
    write_session(str(parent), 5, 6).close()
    forking.fork(parent, child, time=FIXED_TIME)
    snap = str(child / FORK_SNAPSHOT_NAME)
    saved = snapshot.read(snap)
    Path(snap).write_bytes(snapshot.encode(dataclasses.replace(saved, registry=None)))  # as saved yesterday
    for n in range(2):  # and it stays so: no fork saves the child's fork snapshot again
        got = forking.fork(child, tmp_path / f"grandchild{n}", time=FIXED_TIME)
        assert got.checked_from_seq > 0, got.snapshot_reason


def test_the_fingerprint_covers_every_field_that_changes_a_replay_and_not_the_doc() -> None:
    base = EventType("myrt.thing", DurabilityClass.ORDINARY)
    variants = [
        EventType("myrt.thing", DurabilityClass.ORDINARY, ignorable=True),
        EventType("myrt.thing", DurabilityClass.ORDINARY, model_visible=True),
        EventType("myrt.thing", DurabilityClass.BOUNDARY),
        EventType("myrt.thing", DurabilityClass.ORDINARY, session.Role.JOB_OPEN),
        EventType("myrt.other", DurabilityClass.ORDINARY),
    ]
    prints = set()
    for t in [base, *variants]:
        r = Registry()
        r.register(t)
        prints.add(r.fingerprint())
    assert len(prints) == 1 + len(variants)
    r1, r2 = Registry(), Registry()
    r1.register(base)
    r2.register(EventType("myrt.thing", DurabilityClass.ORDINARY, doc="other words"))
    assert r1.fingerprint() == r2.fingerprint()
    # Order of registration does not matter.
    r3, r4 = Registry(), Registry()
    a, b = EventType("myrt.a", DurabilityClass.ORDINARY), EventType("myrt.b", DurabilityClass.ORDINARY)
    r3.register(a), r3.register(b)
    r4.register(b), r4.register(a)
    assert r3.fingerprint() == r4.fingerprint()


# --- 3. The writer keeps its dictionary file ---------------------------------------------------


@pytest.fixture(scope="module")
def trained() -> Dictionary:
    return _train(2)


def _append_until_not_committed(j: Any, first: int) -> tuple[Any, int]:
    i = first
    while True:
        out = j.append(event(i))
        if not isinstance(out, Committed):
            return out, i
        i += 1
        assert i - first < 10_000


@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_planted_at_the_dictionary_name_is_never_followed(
    tmp_path: Path, trained: Dictionary, dangling: bool
) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    outside = tmp_path / "outside.zdict"
    good = encode_dictionary_file(Dictionary(1, trained.data))
    if not dangling:
        outside.write_bytes(good)  # even the right bytes: a link is never the journal's file
    with jopen(path, create=True, dictionary=trained) as j:
        n = append_until_roll(j, path, 0)
        dict_file.unlink()
        dict_file.symlink_to(outside)
        out, n = _append_until_not_committed(j, n)
        assert isinstance(out, NotCommitted), out
        with pytest.raises(JournalFailStoppedError):
            j.append(event(n))
    assert dict_file.is_symlink()
    if dangling:
        assert not outside.exists() and not os.path.lexists(outside)
    else:
        assert outside.read_bytes() == good


def test_a_link_planted_at_the_dictionary_name_fails_the_close_and_is_not_written_through(
    tmp_path: Path, trained: Dictionary
) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    outside = tmp_path / "nothing-here"
    j = jopen(path, create=True, dictionary=trained)
    for i in range(3):
        j.append(event(i))
    dict_file.unlink()
    dict_file.symlink_to(outside)
    with pytest.raises(journal.JournalError):
        j.close()
    assert not os.path.lexists(outside) and dict_file.is_symlink()


def test_a_link_planted_at_the_temp_name_is_not_written_through(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    with jopen(path, create=True, dictionary=trained) as j:
        n = append_until_roll(j, path, 0)
        dict_file.unlink()
        (path / (dictionary_file_name(1) + ".tmp")).symlink_to(victim)
        n = append_until_roll(j, path, n)  # the rewrite replaces the link, never writes through it
    assert victim.read_bytes() == b"precious"
    assert dict_file.is_file() and not dict_file.is_symlink()
    reads_back(path, n)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_another_kind_of_file_at_the_dictionary_name_is_refused_without_a_hang(
    tmp_path: Path, trained: Dictionary, kind: str
) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    with jopen(path, create=True, dictionary=trained) as j:
        n = append_until_roll(j, path, 0)
        dict_file.unlink()
        if kind == "directory":
            dict_file.mkdir()
        else:
            os.mkfifo(dict_file)
        out, n = _append_until_not_committed(j, n)
        assert isinstance(out, NotCommitted) and "refused" in out.reason, out
    assert dict_file.is_dir() if kind == "directory" else dict_file.is_fifo()


def test_a_read_only_handle_writes_no_dictionary_file(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    with jopen(path, create=True, dictionary=trained) as j:
        for i in range(5):
            j.append(event(i))
    dict_file.unlink()
    before = sorted(os.listdir(path))
    r = jopen(path, readonly=True, dictionary=trained)
    r.close()
    assert sorted(os.listdir(path)) == before


def test_a_close_after_a_fail_stop_writes_nothing_and_raises_nothing_new(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    other = encode_dictionary_file(_train(5))
    j = jopen(path, create=True, dictionary=trained)
    n = append_until_roll(j, path, 0)
    dict_file.unlink()
    dict_file.write_bytes(other)
    out, n = _append_until_not_committed(j, n)
    assert isinstance(out, NotCommitted)
    with pytest.raises(JournalFailStoppedError):
        j.append(event(n))
    j.close()  # the fail-stop was already reported; the close raises nothing new
    assert dict_file.read_bytes() == other


def test_a_store_build_with_a_dictionary_opens_and_reads_back(tmp_path: Path, trained: Dictionary) -> None:
    st = journal.store(tmp_path / "store")
    with st.open("a", create=True, dictionary=trained, segment_size_bytes=64 * 1024) as j:
        for i in range(5):
            j.append(event(i))
    assert (tmp_path / "store" / "a" / dictionary_file_name(1)).is_file()
    reads_back(tmp_path / "store" / "a", 5)


def test_a_copy_taken_by_the_writer_reads_back_on_its_own(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    with jopen(path, create=True, dictionary=trained) as j:
        for i in range(5):
            j.append(event(i))
        (path / dictionary_file_name(1)).unlink()
        dst = tmp_path / "copy"
        dst.mkdir()
        j.copy_prefix(dst, 5)
    with journal.open(dst, readonly=True) as c:
        assert [r.event for r in c.read()] == [event(i) for i in range(5)]


def test_a_close_after_a_seal_keeps_the_dictionary_file(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    j = jopen(path, create=True, dictionary=trained)
    for i in range(5):
        j.append(event(i))
    (path / dictionary_file_name(1)).unlink()
    j.seal()
    j.close()
    reads_back(path, 5)


# --- 4. The benchmark's shared syncfs -----------------------------------------------------------


def test_the_shared_syncfs_acknowledges_only_after_a_syncfs_begun_after_the_write(tmp_path: Path) -> None:
    from journal.benchmark.sessions import _ReservedFilesSyncedTogether

    sessions, threads, per = 4, 4, 50
    store = _ReservedFilesSyncedTogether(str(tmp_path), sessions)
    mu = threading.Condition()
    written: set[tuple[int, int]] = set()  # (session, end) whose pwrite returned
    syncs: list[frozenset[tuple[int, int]]] = []  # what each syncfs saw written when it began
    done: list[frozenset[tuple[int, int]]] = []  # syncfs that returned
    acked: dict[int, frozenset[tuple[int, int]]] = {}  # a thread's last append: what was synced then
    wait_gen: dict[int, int] = {}  # a thread waiting in append: the notify_all calls before it waited
    waiting: set[int] = set()
    notifies = [0]
    ws: list[threading.Thread] = []
    fails = {"left": 3}
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, at: int) -> int:
        got = real_pwrite(fd, data, at)
        with mu:
            written.add((store.fds.index(fd), at + len(data)))
            mu.notify_all()
        return got

    def syncfs(fd: int) -> int:
        with mu:
            seen = frozenset(written)  # what this syncfs covers: the writes done when it begins
            if fails["left"] > 0 and len(syncs) % 7 == 3:
                fails["left"] -= 1
                syncs.append(frozenset())
                ctypes.set_errno(errno.EIO)  # as the real call leaves it (use_errno=True)
                return -1
            first = not syncs
            syncs.append(seen)
            if len(syncs) == 2:
                # The second lasts until every other thread has either taken its acknowledgement
                # (from the first, which began before their writes: wrong) or waits again, after
                # it began (since the last notify): an acknowledgement then cannot come from a syncfs
            # that returned later.
                me = threading.get_ident()
                others = [w.ident for w in ws if w.ident != me]
                assert mu.wait_for(lambda: all(i in acked or (i in waiting and wait_gen[i] == notifies[0])
                                               for i in others), timeout=30)
            if first:
                go.set()  # the other threads write only now, while this syncfs is under way
                # The first syncfs lasts until every thread has written (and is counted): their
                # events must wait for another one, begun after their writes, and share it.
                assert mu.wait_for(lambda: store._written >= threads, timeout=30)
            done.append(seen)
        return 0

    class Cv(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            me = threading.get_ident()
            with mu:  # a thread counted in _written now waits: the first syncfs may look again
                wait_gen[me] = notifies[0]
                waiting.add(me)
                mu.notify_all()
            try:
                return super().wait(timeout)
            finally:
                with mu:
                    waiting.discard(me)

        def notify_all(self) -> None:
            with mu:
                notifies[0] += 1
            super().notify_all()

        def __exit__(self, *exc: Any) -> None:
            # append returns right after: what the syncfs calls that returned by now cover
            with mu:
                acked[threading.get_ident()] = frozenset().union(*done)
                mu.notify_all()
            super().__exit__(*exc)

    store_any: Any = store
    store_any._syncfs = syncfs
    store._cv = Cv()
    bad: list[str] = []
    go = threading.Event()

    def worker(t: int) -> None:
        if t:
            assert go.wait(30)
        for k in range(per):
            while True:
                try:
                    store.append(t, {"type": "x", "n": k, "t": t})
                    break
                except OSError:
                    continue  # a failed syncfs: not acknowledged, try the write again
            end = store.ends[t]
            with mu:
                if (t, end) not in acked[threading.get_ident()]:
                    bad.append(f"session {t} end {end} acknowledged with no syncfs begun after it")

    import unittest.mock

    with unittest.mock.patch("journal.benchmark.sessions.os.pwrite", pwrite):
        ws += [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
    store.close()
    assert not bad, bad[:5]
    assert len(done) < threads * per  # shared: fewer syncs than events
