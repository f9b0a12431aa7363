"""The session store on the servers (journal/session/catalog_store.py): list and latest from the
server's catalog, forks copied server-side with their header in the same copy, snapshots in a
journal of the store, archive, and what a crash or a fault between two steps leaves."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

import journal
from journal import session as S
from journal.session import catalog_store as cs
from journal.session import fork as forking
from journal.session import snapshot
from journal.session.errors import StoreError
from journal.session.reducer import SessionReducer
from journal.session.store import SessionExistsError, SessionNotFoundError
from tests.backends import Backend, made_or_skipped
from tests.session_gen import add_turns

SERVERS = ("postgres", "nats")


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


@pytest.fixture
def store(server: Backend) -> Iterator[cs.CatalogSessionStore]:
    st = S.open_store(server.store_location())
    assert isinstance(st, cs.CatalogSessionStore)
    try:
        yield st
    finally:
        st.close()


def made_session(st: cs.CatalogSessionStore, turns: int = 3, path: str = "/repo", seed: int = 1) -> str:
    with st.create(workspace={"path": path}) as s:
        add_turns(s, random.Random(seed), turns, 0)
        return s.session_id


class CountingOpens:
    """Counts the journals a store opens (a listing must open none)."""

    def __init__(self, st: cs.CatalogSessionStore) -> None:
        self.opened: list[str] = []
        real = st.backing.open

        def counted(name: str, *args: Any, **kwargs: Any) -> journal.Journal:
            self.opened.append(name)
            return real(name, *args, **kwargs)

        st.backing.open = counted  # type: ignore[method-assign]


def test_create_open_list_latest_come_from_the_catalog(store: cs.CatalogSessionStore) -> None:
    a = made_session(store, path="/a", seed=1)
    b = made_session(store, path="/b", seed=2)
    c = made_session(store, path="/a", seed=3)
    counting = CountingOpens(store)
    listed = store.list()
    assert [i.session_id for i in listed] == sorted([a, b, c])
    assert store.latest(workspace="/a").session_id == c  # type: ignore[union-attr]
    assert [i.session_id for i in store.list(workspace="/b")] == [b]
    assert counting.opened == []  # not one log read: the catalog answered
    for i in listed:
        with journal.open(store.journal_path(i.session_id), readonly=True) as j:
            assert i.last_seq == j.last_seq and not i.open
    with store.open(a) as s:
        assert store.info(a).open
        s.append("user.message", {"text": "more"})
        last = s.journal.last_seq
    got = store.info(a)
    assert got.last_seq == last and not got.open
    assert store.latest().session_id == a  # type: ignore[union-attr]
    with pytest.raises(SessionExistsError):
        store.create(session_id=a)
    with pytest.raises(SessionNotFoundError):
        store.open("s-none")


def test_a_journal_the_catalog_missed_is_found_and_an_empty_one_is_no_session(store: cs.CatalogSessionStore) -> None:
    """What a crash between the steps of a create leaves: a session journal without its entry
    (listed once found), and an empty journal without its header (skipped, then finished)."""
    with S.Session.attach(store.backing.open("s-orphan", create=True), create=True, session_id="s-orphan",
                          workspace={"path": "/o"}) as s:
        s.append("user.message", {"text": "hi"})
    store.backing.open("s-empty", create=True).close()
    assert [i.session_id for i in store.list()] == ["s-orphan"]
    assert store.info("s-orphan").workspace == {"path": "/o"} and store.info("s-orphan").last_seq == 2
    counting = CountingOpens(store)
    store.list()
    assert counting.opened == ["s-empty"]  # entered once; only the empty one is looked at again
    with pytest.raises(SessionNotFoundError):
        store.open("s-empty")
    with store.create(session_id="s-empty", workspace={"path": "/e"}) as s:
        assert s.journal.last_seq == 1
    assert [i.session_id for i in store.list()] == ["s-empty", "s-orphan"]
    store.backing.delete("s-orphan")
    assert [i.session_id for i in store.list()] == ["s-empty"]  # its entry went with its journal
    assert store.rebuild_index() == 1


def _clean_point(st: cs.CatalogSessionStore, sid: str) -> int:
    with st.backing.open(sid, readonly=True) as j:
        points = forking.scan_points(j, S.Registry())
    return points[len(points) // 2].seq


def test_a_fork_copies_the_prefix_on_the_server_with_its_header(store: cs.CatalogSessionStore) -> None:
    parent = made_session(store, turns=6)
    with store.backing.open(parent, readonly=True) as pj:
        parent_recs = [(r.seq, r.payload) for r in pj.read()]
    at = _clean_point(store, parent)
    got = store.fork(parent, at_seq=at, session_id="s-child", origin="eval")
    assert (got.session_id, got.fork_seq, got.header_seq, got.parent_session_id) == ("s-child", at, at + 1, parent)
    with store.backing.open("s-child", readonly=True) as cj:
        child = list(cj.read())
    assert [(r.seq, r.payload) for r in child[:at]] == parent_recs[:at]
    assert child[at].event["type"] == "session.started" and child[at].event["data"]["lineage"]["forkSeq"] == at
    assert len(child) == at + 1
    with store.backing.open(parent, readonly=True) as pj:
        assert [(r.seq, r.payload) for r in pj.read()] == parent_recs  # not a byte of the parent changed
    info = store.info("s-child")
    assert (info.parent, info.fork_seq, info.last_seq) == (parent, at, at + 1)
    with store.open("s-child") as s:  # the child is a session of its own, writable
        s.append("user.message", {"text": "child"})
    with store.backing.open(parent, readonly=True) as pj:
        unclean = next(r.seq for r in pj.read() if r.event.get("type") == "turn.started")
    with pytest.raises(forking.UncleanForkPointError):
        store.fork(parent, at_seq=unclean, session_id="s-bad")
    assert not store.backing.exists("s-bad")
    with pytest.raises(SessionExistsError):
        store.fork(parent, at_seq=at, session_id="s-child")


def test_a_fork_cut_short_inside_its_copy_leaves_no_child(server: Backend, store: cs.CatalogSessionStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault at the copy's last step (PostgreSQL: the header's insert, inside the copy's
    transaction; JetStream: the metadata message, the commit point) leaves no child, and the
    same fork made again succeeds (on JetStream over the records the first one left)."""
    parent = made_session(store, turns=4)
    at = _clean_point(store, parent)
    from journal.remote import jetstream, records

    class Cut(Exception):
        pass

    def cut(*args: Any, **kwargs: Any) -> Any:
        raise Cut()

    if server.name == "postgres":
        monkeypatch.setattr(records, "frame_of", cut)
    else:
        monkeypatch.setattr(jetstream.JetStreamJournal, "_publish_meta", cut)
    with pytest.raises(Cut):
        store.fork(parent, at_seq=at, session_id="s-cut")
    monkeypatch.undo()
    assert not store.backing.exists("s-cut")
    assert "s-cut" not in [i.session_id for i in store.list()]
    store.fork(parent, at_seq=at, session_id="s-cut")
    with store.backing.open("s-cut", readonly=True) as cj:
        assert cj.last_seq == at + 1 and [r.seq for r in cj.read()] == list(range(1, at + 2))


def test_snapshots_live_in_a_journal_of_the_store(server: Backend, store: cs.CatalogSessionStore) -> None:
    sid = made_session(store, turns=5)
    red = SessionReducer()
    slot = store.snapshot_slot(sid, red)
    with store.backing.open(sid, readonly=True) as j:
        first = snapshot.resume(j, S.Registry(), red, slot)
        assert not first.from_snapshot and "no snapshot" in (first.rebuild_reason or "")
        snapshot.take(j, S.Registry(), red, slot)
    with store.open(sid) as s:
        add_turns(s, random.Random(9), 2, 10)
    for _ in range(3):  # each save drops the older ones
        with store.backing.open(sid, readonly=True) as j:
            snapshot.take(j, S.Registry(), red, slot)
    with store.backing.open(sid, readonly=True) as j:
        got = snapshot.resume(j, S.Registry(), red, slot)
        full = snapshot.resume(j, S.Registry(), red, None)
        assert got.from_snapshot and got.snapshot_seq == j.last_seq
        assert red.dump(got.state) == red.dump(full.state)
    name = cs.snapshot_journal_name(sid, red.name)
    with store.backing.open(name, readonly=True) as sj:
        assert len(list(sj.read())) == 1  # only the latest is kept
        last = sj.last_seq
    assert [i.session_id for i in store.list()] == [sid]  # snapshot journals are no sessions
    server.tamper(_journal_url(store, name), last)
    with store.backing.open(sid, readonly=True) as j:
        damaged = snapshot.resume(j, S.Registry(), red, slot)
    assert not damaged.from_snapshot and red.dump(damaged.state) == red.dump(full.state)
    assert damaged.rebuild_reason


def _journal_url(st: cs.CatalogSessionStore, name: str) -> str:
    head, _, query = st.root.partition("?")
    return f"{head}?journal={quote(name, safe='')}" + (f"&{query}" if query else "")


def test_a_fork_checks_from_the_parents_fork_snapshot(store: cs.CatalogSessionStore) -> None:
    parent = made_session(store, turns=6)
    red = forking.ForkReducer()
    with store.backing.open(parent, readonly=True) as j:
        snapshot.take(j, S.Registry(), red, store.snapshot_slot(parent, red))
        last_clean = forking.scan_points(j, S.Registry())[-1].last_seq
    got = store.fork(parent, session_id="s-snapfork")
    assert got.fork_seq == last_clean
    assert got.checked_from_seq > 0 and got.snapshot_reason is None


def test_archive_is_refused_under_a_writer_and_then_opens_read_only(store: cs.CatalogSessionStore) -> None:
    sid = made_session(store)
    s = store.open(sid)
    with pytest.raises(StoreError, match="open for writing elsewhere"):
        store.archive(sid)
    s.close()
    assert store.archive(sid).status == "archived"
    with pytest.raises(StoreError, match="archived"):
        store.open(sid)
    with store.open(sid, readonly=True) as r:
        assert r.journal.last_seq == store.info(sid).last_seq
    assert store.list(status="active") == [] and store.latest() is None


def test_concurrent_updates_of_one_entry_keep_both(server: Backend, store: cs.CatalogSessionStore,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Two updaters read the same value, then both write: the second must merge into the first's
    (PostgreSQL: the row lock taken by the read; JetStream: the expected last subject sequence
    and a read again)."""
    cat = store.catalog
    cat.put("k", {"a": 0, "b": 0})
    errors: list[BaseException] = []

    def update(c: Any, field: str) -> None:
        try:
            assert c.update("k", {field: 1})
        except BaseException as exc:
            errors.append(exc)

    if server.name == "nats":
        both_read = threading.Barrier(2, timeout=30)
        real_read = cat._read  # type: ignore[attr-defined]
        reads = {"n": 0}

        def racing_read(subject: str) -> tuple[dict[str, Any] | None, int]:
            got = real_read(subject)
            reads["n"] += 1
            if reads["n"] <= 2:
                both_read.wait()  # both have read the same value before either writes
            return got

        monkeypatch.setattr(cat, "_read", racing_read)
        threads = [threading.Thread(target=update, args=(cat, f)) for f in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    else:
        import psycopg
        from psycopg import sql

        from tests.backend_postgres import PG_URL

        table = sql.Identifier(store.backing._schema, "catalog")  # type: ignore[attr-defined]
        with psycopg.connect(PG_URL) as other:  # a transaction of its own, holding the row
            other.execute(sql.SQL("SELECT value FROM {} WHERE catalog = %s AND key = 'k' FOR UPDATE").format(table),
                          (cs.CATALOG_NAME,))
            t = threading.Thread(target=update, args=(cat, "a"))
            t.start()
            with psycopg.connect(PG_URL, autocommit=True) as watch:
                for _ in range(3000):  # until the updater waits for the row (a condition, not a delay)
                    row = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                        "AND query LIKE %s",  # this store's schema: not another run's wait
                                        (f"%{store.backing._schema}%catalog%",)).fetchone()  # type: ignore[attr-defined]
                    if row and row[0]:
                        break
                    watch.execute("SELECT pg_sleep(0.01)")
                else:
                    pytest.fail("the update never waited for the row another transaction holds")
            other.execute(sql.SQL("UPDATE {} SET value = %s WHERE catalog = %s AND key = 'k'").format(table),
                          ('{"a":0,"b":1}', cs.CATALOG_NAME))
            other.commit()
        t.join(60)
    assert errors == []
    assert cat.get("k") == {"a": 1, "b": 1}
    assert cat.update("missing", {"a": 1}) is False and cat.get("missing") is None


CHILD = r"""
import random, sys
from journal import session as S
from tests.session_gen import add_turns
st = S.open_store(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
parents = []
while True:
    if parents and rng.random() < 0.4:
        parent = rng.choice(parents)
        with st.backing.open(parent, readonly=True) as j:
            from journal.session import fork
            points = fork.scan_points(j, S.Registry())
        st.fork(parent, at_seq=rng.choice(points).seq)
    else:
        with st.create(workspace={"path": "/k"}) as s:
            add_turns(s, rng, 2, 0)
            parents.append(s.session_id)
    print("op", flush=True)
"""


def test_a_store_writer_killed_at_random_moments_leaves_a_true_index(server: Backend, tmp_path: pathlib.Path,
                                                                      store: cs.CatalogSessionStore) -> None:
    """SIGKILL a process creating and forking sessions after a random number of operations: every
    listed session opens and holds its header, every journal with a header is listed, each
    fork's child holds its parent's prefix up to its fork seq and its own header after it."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rng = random.Random(5)
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])}
    for round_ in range(4):
        proc = subprocess.Popen([sys.executable, str(script), store.root, str(round_)], stdout=subprocess.PIPE,
                                env=env, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randrange(1, 6)):
            assert proc.stdout.readline() == "op\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    listed = {i.session_id: i for i in store.list()}
    assert len(listed) >= 4
    names = [n for n in store.backing.names() if "%" not in n]
    for name in names:
        with store.backing.open(name, readonly=True) as j:
            if j.last_seq == 0:
                assert name not in listed  # a create cut short before its header
                continue
            recs = list(j.read())
        assert name in listed and listed[name].last_seq == len(recs)
        info = listed[name]
        if info.parent is not None:
            assert info.fork_seq is not None
            with store.backing.open(info.parent, readonly=True) as pj:
                prefix = [r.payload for r in pj.read() if r.seq <= info.fork_seq]
            assert [r.payload for r in recs[: info.fork_seq]] == prefix
            assert recs[info.fork_seq].event["sessionId"] == name
        with store.open(name) as s:  # every listed session opens for writing, repaired
            assert s.session_id == name


def test_open_store_picks_the_store_by_its_target(tmp_path: pathlib.Path) -> None:
    from journal.session.store import SessionStore

    assert isinstance(S.open_store(str(tmp_path / "dir")), SessionStore)
    with pytest.raises(StoreError, match="keeps no catalog"):
        cs.CatalogSessionStore(journal.store(str(tmp_path / "plain")))
    assert cs.snapshot_journal_name("s1", "a.b") != cs.snapshot_journal_name("s1.a", "b")
    assert "%" not in uuid.uuid4().hex  # ids made by the store never hold the mark's '%'


def test_the_commands_take_a_store_url(store: cs.CatalogSessionStore) -> None:
    """`journal sessions URL` lists from the catalog; `journal fork --store URL` forks there."""
    import json

    parent = made_session(store, turns=4)
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[1])}

    def cli(*argv: str) -> Any:
        out = subprocess.run([sys.executable, "-m", "journal.cli", *argv, "--json"], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    points = cli("fork", "--store", store.root, parent, "--points")
    got = cli("fork", "--store", store.root, parent, "s-cli", "--at-seq", str(points[0]["seq"]))
    assert got["sessionId"] == "s-cli" and got["forkSeq"] == points[0]["seq"]
    listed = cli("sessions", store.root)
    assert sorted(r["sessionId"] for r in listed) == sorted([parent, "s-cli"])
    assert [r["sessionId"] for r in cli("sessions", store.root, "--latest")] in ([parent], ["s-cli"])


def test_other_journals_of_the_store_are_no_sessions(store: cs.CatalogSessionStore) -> None:
    """`journal sessions postgresql://...` listed every journal of the schema as an active
    session: an app's own journal beside its sessions (JSON or bytes records, no session header)
    came out as a session with no workspace. Only a journal that begins with a session header is
    one; a fork (whose first record is its parent's header) still is."""
    sid = made_session(store, turns=2)
    with store.backing.open("s-raw-json", create=True) as j:
        j.append({"type": "user.message", "text": "no header"})
    with store.backing.open("s-raw-bytes", create=True) as j:
        j.append(b"\x00 not a session")
    with S.Session.attach(store.backing.open("s-orphan", create=True), create=True, session_id="s-orphan",
                          workspace={"path": "/o"}) as s:
        s.append("user.message", {"text": "hi"})
    assert [i.session_id for i in store.list()] == sorted([sid, "s-orphan"])
    assert store.rebuild_index() == 2
    assert [i.session_id for i in store.list()] == sorted([sid, "s-orphan"])
