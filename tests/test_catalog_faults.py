"""Faults injected into the session store's catalogs while they do I/O: ``PostgresCatalog``
(journal/remote/postgres_store.py) and ``JetStreamCatalog`` (journal/remote/jetstream_store.py),
each of their calls, and every call of the session store on a server that uses them
(journal/session/catalog_store.py).

A fault lands at one chosen step of a call and holds from there until the test lifts it (a
server that stays away: JetStream's own retries meet it too, in a retry window made short for
the faulted calls so that the suite does not wait):

- PostgreSQL: a statement, a BEGIN or a COMMIT on the catalog's connection, whose server session
  is ended (``pg_terminate_backend``) just before the step reaches the server ("cut-before"), or
  just after the server did it and before its answer is read ("cut-after"), or the driver's error
  with the connection left inside a command, the step never sent ("mid-command"); and a write waiting
  for a row lock another transaction holds, cancelled there (a server error) or cut.
- JetStream: the NATS client's publish, which every request of the catalog goes through, fails
  as the client fails when its connection is lost: closed ("closed"), its buffer full while it
  connects again ("buffer-full"), a timeout ("timeout"); or the message is sent and its answer
  never comes ("no-answer"); or the server answers that nothing serves it ("no-responders").

After each fault:

1. the caller gets a ``JournalIOError`` that names the catalog and says to try again, never the
   driver's exception;
2. a store of its own, on another connection, reads the key's value from before the call or the
   one the call writes, never a mix (and the value from before whenever the faulted step never
   reached the server); the listing names only sessions that open, every session journal with a
   header is listed, and ``refresh`` and ``rebuild_index`` bring the entries in line with the
   journals;
3. the next call, on the same store (its catalog connects again), succeeds.

Swept: every step of every catalog call; every step of making a catalog on a new store; on
JetStream, a fault at any one step that passes (retried within the call, unseen by the caller);
for each call of the session store that uses the catalog (create, open and close, fork, archive,
list, info, refresh, rebuild_index), the first catalog call of each method and the last, with
the connection down there, or with that call's write done and its answer lost. Where a fault
lands is a step counted on the catalog's own connection, never a moment in time; the two waits
for the server (a write waiting for its row lock, a new stream getting its leader) poll a
condition.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import importlib
import json
import pathlib
import random
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, cast

import pytest

import journal
from journal import session as S
from journal.api import Catalog, CatalogStore, JournalIOError
from journal.session import catalog_store as cs
from journal.session import fork as forking
from journal.session.store import SessionExistsError, info_from_journal
from tests.backends import Backend, made_or_skipped
from tests.conftest import report_count
from tests.session_gen import add_turns

SERVERS: Final = ("postgres", "nats")
PG_KINDS: Final = ("cut-before", "cut-after", "mid-command")
NATS_KINDS: Final = ("closed", "buffer-full", "timeout", "no-answer", "no-responders")
REACHES_SERVER: Final = frozenset({"cut-after", "no-answer"})  # the server did the faulted step
CASES: Final = [("postgres", k) for k in PG_KINDS] + [("nats", k) for k in NATS_KINDS]
DOWN: Final = {"postgres": "cut-before", "nats": "closed"}  # nothing of the faulted step is done
ANSWER_LOST: Final = {"postgres": "cut-after", "nats": "no-answer"}  # done, and the caller never hears
CATALOG_METHODS: Final = ("get", "put", "update", "delete", "items")
# JetStream's retry window while a fault holds (the store's own settings before and after it).
FAULT_CONNECT_TIMEOUT_S: Final = 0.1
FAULT_ACK_TIMEOUT_S: Final = 0.5  # every step of an armed call has it: room for a loaded machine
WAIT_S: Final = 60.0

SITES: dict[str, int] = {}  # fault sites checked, by kind of test (reported, and each test holds a floor)


def _count(what: str, sites: int) -> None:
    SITES[what] = SITES.get(what, 0) + sites
    report_count(f"catalog fault sites, {what}", SITES[what])


# --- where the faults land ------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One exchange of a catalog call with its server."""

    n: int  # since the injector was armed, from 1
    call: int  # the catalog call it belongs to, since armed, from 1
    method: str  # that call's method
    nth: int  # that call's rank among the calls of its method, from 1
    what: str  # the statement, or the subject
    write: bool  # the server changes something when it does this step


class Injector:
    """Counts the steps of the catalog calls it is aimed at, and fails the first one ``when``
    picks and every later one (``once``: that one only) while it is armed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.armed = False
        self.kind = ""
        self.when: Callable[[Step], bool] = lambda s: False
        self.once = False
        self.steps: list[Step] = []
        self.fired: list[Step] = []
        self.call = 0
        self.method = ""
        self.nth = 0
        self._nth_of: dict[str, int] = {}
        # Called with (method, nth, args) as each catalog call starts, while armed.
        self.before_call: Callable[[str, int, tuple[Any, ...]], None] | None = None

    def aim(self, cat: Any) -> None:
        """Count the calls of ``cat`` (their steps are told apart by the connection they use)."""
        for method in CATALOG_METHODS:
            real = getattr(cat, method)

            def tracked(*args: Any, _real: Callable[..., Any] = real, _method: str = method) -> Any:
                if self.armed:
                    self.call += 1
                    self.method = _method
                    self.nth = self._nth_of[_method] = self._nth_of.get(_method, 0) + 1
                    if self.before_call is not None:
                        self.before_call(_method, self.nth, args)
                return _real(*args)

            self._monkeypatch.setattr(cat, method, tracked)

    def arm(self, kind: str, when: Callable[[Step], bool], once: bool = False) -> None:
        self.kind, self.when, self.once = kind, when, once
        self.steps, self.fired = [], []
        self.call, self.method, self.nth, self._nth_of = 0, "", 0, {}
        self.armed = True

    def count(self) -> None:
        """Armed, with no fault: the steps are counted only."""
        self.arm("", lambda s: False)

    def disarm(self) -> None:
        self.armed = False
        self.before_call = None

    def close(self) -> None:
        self.disarm()

    def _fires(self, what: str, write: bool) -> bool:
        step = Step(len(self.steps) + 1, self.call, self.method, self.nth, what, write)
        self.steps.append(step)
        hit = (not self.once) if self.fired else self.when(step)
        if hit:
            self.fired.append(step)
        return hit


class PostgresFaults(Injector):
    """The steps of a ``PostgresCatalog``: each ``execute``, BEGIN and COMMIT on its connection."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch)
        import psycopg

        from tests.backend_postgres import connect

        self._cat: Any = None
        self._admin = connect()
        real_execute = psycopg.Connection.execute
        real_enter = psycopg.Transaction.__enter__
        real_exit = psycopg.Transaction.__exit__
        self._real_execute = real_execute

        def execute(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return self._step(conn, query, lambda: real_execute(conn, query, params, **kwargs))

        def enter(tx: Any) -> Any:
            return self._step(tx.connection, "BEGIN", lambda: real_enter(tx))

        def exit_(tx: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
            if exc_type is not None:  # the rollback of a block that failed: not a step of its own
                return real_exit(tx, exc_type, exc, tb)
            return self._step(tx.connection, "COMMIT", lambda: real_exit(tx, exc_type, exc, tb))

        monkeypatch.setattr(psycopg.Connection, "execute", execute)
        monkeypatch.setattr(psycopg.Transaction, "__enter__", enter)
        monkeypatch.setattr(psycopg.Transaction, "__exit__", exit_)

    def aim(self, cat: Any) -> None:
        self._cat = cat
        super().aim(cat)

    def backend_pid(self) -> int:
        return int(self._cat._conn.info.backend_pid)

    def terminate(self, pid: int) -> None:
        """End the server session ``pid``. Its SIGTERM is sent when this returns, so it is handled
        before that session reads anything more from its client: the next step meets its end."""
        row = self._admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        assert row and row[0], f"no server session {pid} to end"

    def cancel(self, pid: int) -> None:
        row = self._admin.execute("SELECT pg_cancel_backend(%s)", (pid,)).fetchone()
        assert row and row[0], f"no server session {pid} to cancel"

    def waits_for(self, pid: int, holder: int) -> bool:
        row = self._admin.execute("SELECT %s = ANY(pg_blocking_pids(%s))", (holder, pid)).fetchone()
        return bool(row and row[0])

    def pause(self) -> None:
        """Between two looks at the server (a condition polled, not a delay waited for)."""
        self._admin.execute("SELECT pg_sleep(0.005)")

    def close(self) -> None:
        super().close()
        self._admin.close()

    def _step(self, conn: Any, query: Any, run: Callable[[], Any]) -> Any:
        if not self.armed or self._cat is None or conn is not self._cat._conn:
            return run()
        what = _statement(conn, query)
        write = what == "COMMIT" or what.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "CREATE")
        if not self._fires(what, write):
            return run()
        pid = int(conn.info.backend_pid)
        if self.kind == "cut-before":
            self.terminate(pid)
            run()  # reaches a server session that is gone: the driver's error
            pytest.fail(f"{what!r} succeeded on a connection whose server session was ended")
        if self.kind == "mid-command":
            # The driver's error with libpq left inside a command on a connection it calls OK (seen
            # once in CI after a server session was ended): a statement is on its way and its
            # answer unread. The step's own statement is never sent.
            import psycopg

            conn.pgconn.send_query(b"SELECT 1")
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE and not conn.closed
            raise psycopg.OperationalError(f"{what!r} failed, the connection left inside a command (injected)")
        if self.kind != "cut-after":
            raise AssertionError(f"no such fault on PostgreSQL: {self.kind!r}")
        run()  # done by the server, its answer read; then the connection is lost
        self.terminate(pid)
        self._real_execute(conn, "SELECT 1")  # the loss, as the driver reports it to the next read
        pytest.fail("a connection whose server session was ended answered")


def _statement(conn: Any, query: Any) -> str:
    if isinstance(query, str):
        return query
    try:
        return str(query.as_string(conn))
    except Exception:
        return repr(query)


class NatsFaults(Injector):
    """The steps of a ``JetStreamCatalog``: each publish of the NATS client on its store's
    connection to one of the catalog's subjects (its stream's API, its values' subjects)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(monkeypatch)
        import nats.aio.client
        import nats.errors

        self._cat: Any = None
        self._store: Any = None
        self._settings: Any = None
        self._nc: Any = None
        raised: dict[str, Callable[[], BaseException]] = {
            "closed": nats.errors.ConnectionClosedError,
            "buffer-full": nats.errors.OutboundBufferLimitError,  # while it connects again
            "timeout": nats.errors.TimeoutError,
        }
        real = nats.aio.client.Client.publish

        async def publish(nc: Any, subject: str, payload: bytes = b"", reply: str = "",
                          headers: dict[str, str] | None = None) -> None:
            cat = self._cat
            ours = (self.armed and cat is not None and nc is self._nc
                    and (subject.startswith(cat._prefix) or subject.endswith("." + cat._stream)))
            if not ours:
                return await real(nc, subject, payload, reply, headers)
            # A value's publish, a purge and the stream's making change the server; reads do not.
            write = subject.startswith(cat._prefix) or ".PURGE." in subject or ".CREATE." in subject
            if not self._fires(subject, write):
                return await real(nc, subject, payload, reply, headers)
            if self.kind in raised:
                raise raised[self.kind]()
            if self.kind == "no-answer":  # the server does it; its answer goes where nobody listens
                return await real(nc, subject, payload, nc.new_inbox(), headers)
            if self.kind == "no-responders":  # the server answers: nothing serves this subject
                return await real(nc, f"journal-test.nowhere.{uuid.uuid4().hex}", payload, reply, headers)
            raise AssertionError(f"no such fault on JetStream: {self.kind!r}")

        monkeypatch.setattr(nats.aio.client.Client, "publish", publish)

    def aim(self, cat: Any) -> None:
        if self._store is not None:
            self._store._settings = self._settings
        self._cat = cat
        self._store = cat._store
        self._settings = self._store._settings
        self._nc = self._store._connection().nc
        super().aim(cat)

    def arm(self, kind: str, when: Callable[[Step], bool], once: bool = False) -> None:
        super().arm(kind, when, once)
        if kind:
            # A fault that passes is tried again within the store's own window.
            connect_timeout_s = self._settings.connect_timeout_s if once else FAULT_CONNECT_TIMEOUT_S
            self._store._settings = dataclasses.replace(self._settings, connect_timeout_s=connect_timeout_s,
                                                        ack_timeout_s=FAULT_ACK_TIMEOUT_S)

    def disarm(self) -> None:
        super().disarm()
        if self._store is not None:
            self._store._settings = self._settings


@pytest.fixture
def inject(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Injector]]:
    made: list[Injector] = []

    def make(server: str) -> Injector:
        inj: Injector = PostgresFaults(monkeypatch) if server == "postgres" else NatsFaults(monkeypatch)
        made.append(inj)
        return inj

    yield make
    for inj in made:
        inj.close()


def at_step(n: int) -> Callable[[Step], bool]:
    """The ``n``-th step since armed."""
    return lambda s: s.n == n


def at_call(method: str, nth: int, writes_only: bool) -> Callable[[Step], bool]:
    """The first step (or the first write) of the ``nth`` call of ``method`` since armed."""
    return lambda s: (s.method, s.nth) == (method, nth) and (s.write or not writes_only)


def catalog_of(url: str, name: str) -> Catalog:
    """The catalog ``name`` of the store at ``url``, through a client of its own."""
    store = journal.store(url)
    assert isinstance(store, CatalogStore)
    return store.catalog(name)


def driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module, name in (("psycopg", "Error"), ("nats.errors", "Error")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ImportError:
            pass
    return tuple(found)


def assert_typed(exc: BaseException, catalog: str) -> None:
    """What the caller of a faulted call gets: the project's I/O error, saying what failed and
    what to do, with the driver's exception only as its cause."""
    assert not isinstance(exc, driver_errors()), f"the driver's exception reached the caller: {exc!r}"
    assert isinstance(exc, JournalIOError), f"not a JournalIOError: {type(exc).__module__}.{type(exc).__name__}: {exc}"
    text = str(exc)
    assert f"catalog {catalog!r}" in text, text
    assert "again" in text, text


def close_catalog(cat: Any) -> None:
    close = getattr(cat, "close", None)
    if close is not None:
        close()


# --- the servers ----------------------------------------------------------------------------------


@dataclass
class Place:
    """A store the tests of one server share, each with keys and sessions of its own."""

    server: Backend
    url: str  # what the faulted clients use
    fresh_url: str  # the same store, through a connection no faulted client uses
    opened: set[str] = field(default_factory=set)  # sessions seen to open (none is changed after)


def own_connection(server: Backend, url: str) -> str:
    """``url`` on a connection of its own: NATS clients of one process share a connection per
    list of servers, so the list is given in another order."""
    if server.name != "nats":
        return url  # every PostgreSQL catalog has its own connection
    head, _, query = url.partition("?")
    scheme, _, hosts = head.partition("://")
    return f"{scheme}://{','.join(reversed(hosts.split(',')))}?{query}"


class Servers:
    """The module's servers, each made once (tests choose theirs by name, with their kinds of
    fault: a fixture parametrized by pairs would be made again for every pair), with the store
    their tests share and a session store on it that no fault touches."""

    def __init__(self, root: pathlib.Path) -> None:
        self._root = root
        self._made: dict[str, tuple[Iterator[Backend], Backend, Place, cs.CatalogSessionStore]] = {}
        self._skipped: dict[str, BaseException] = {}

    def get(self, name: str) -> tuple[Backend, Place, cs.CatalogSessionStore]:
        if name in self._skipped:
            raise self._skipped[name]
        if name not in self._made:
            made = made_or_skipped(name, self._root / name)
            try:
                backend = next(made)
            except BaseException as exc:  # a skip (or a failure when services are required)
                self._skipped[name] = exc
                raise
            url = backend.store_location()
            sessions = S.open_store(url)
            assert isinstance(sessions, cs.CatalogSessionStore)
            self._made[name] = (made, backend, Place(backend, url, own_connection(backend, url)), sessions)
        _, backend, place, sessions = self._made[name]
        return backend, place, sessions

    def close(self) -> None:
        for made, _, _, sessions in self._made.values():
            sessions.close()
            cast(Generator[Backend, None, None], made).close()  # the backend's close (made_or_skipped)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    made = Servers(tmp_path_factory.mktemp("servers"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, servers: Servers) -> Backend:
    return servers.get(request.param)[0]


@pytest.fixture
def place(server: Backend, servers: Servers) -> Place:
    return servers.get(server.name)[1]


@pytest.fixture
def sessions(server: Backend, servers: Servers) -> cs.CatalogSessionStore:
    """The store as a process without faults sees it: what each test sets up is made with it."""
    return servers.get(server.name)[2]


# --- each step of each catalog call -----------------------------------------------------------------

OLD: Final = {"a": 0, "b": 0, "keep": "x"}
OTHER: Final = {"o": 1}
FIELDS: Final = {"a": 1, "b": 1}
WRITES: Final = ("put", "update", "delete")
STEPS_FLOOR: Final = {
    "postgres": {"get": 1, "put": 1, "update": 4, "delete": 1, "items": 1},  # update: BEGIN, SELECT, UPDATE, COMMIT
    "nats": {"get": 1, "put": 1, "update": 2, "delete": 1, "items": 3},  # items: the subjects, then a read each
}


def call(cat: Any, op: str) -> object:
    if op == "get":
        return cat.get("k")
    if op == "put":
        cat.put("k", dict(FIELDS))
        return None
    if op == "update":
        return cat.update("k", dict(FIELDS))
    if op == "delete":
        cat.delete("k")
        return None
    return cat.items()


def value_after(op: str) -> dict[str, Any] | None:
    """The value of "k" once ``op`` is done, over OLD."""
    if op == "put":
        return dict(FIELDS)
    if op == "update":
        return {**OLD, **FIELDS}
    return None if op == "delete" else dict(OLD)


def answer_of(op: str) -> object:
    """What ``op`` returns over OLD (or over what it wrote itself: each write is idempotent)."""
    return {"get": OLD, "update": True, "items": [("k", OLD), ("other", OTHER)]}.get(op)


def counted_call(server: Backend, place: Place, inject: Callable[[str], Injector], name: str,
                 op: str) -> tuple[Any, Any, Injector, Callable[[], None], int]:
    """The catalog ``name`` under test, a checker on another connection, the injector aimed at
    it, the reset that puts the keys back before each faulted call, and how many steps one
    unfaulted call of ``op`` takes (counted once, after a reset)."""
    cat = catalog_of(place.url, name)
    checker = catalog_of(place.fresh_url, name)
    faults = inject(server.name)
    faults.aim(cat)

    def reset() -> None:
        checker.put("k", dict(OLD))
        checker.put("other", dict(OTHER))
        cat.get("warm")  # connected, its table or stream made: the steps counted are the call's own

    reset()
    faults.count()
    call(cat, op)
    faults.disarm()
    return cat, checker, faults, reset, len(faults.steps)


@pytest.mark.parametrize("op", CATALOG_METHODS)
@pytest.mark.parametrize(("server", "kind"), CASES, indirect=["server"])
def test_a_fault_at_each_step_of_a_catalog_call(server: Backend, place: Place, inject: Callable[[str], Injector],
                                                kind: str, op: str) -> None:
    """Every step of the call, faulted in turn: a typed error, the old value or the new one seen
    from another connection (the old one when the step never reached the server), the other
    keys untouched, and the next call on the same client succeeds."""
    name = f"c-{op}-{kind}"
    cat, checker, faults, reset, sites = counted_call(server, place, inject, name, op)
    assert sites >= STEPS_FLOOR[server.name][op], faults.steps
    seen: set[str] = set()
    for at in range(1, sites + 1):
        reset()
        faults.arm(kind, at_step(at))
        with pytest.raises(Exception) as got:
            call(cat, op)
        faults.disarm()
        assert faults.fired and faults.fired[0].n == at, (at, faults.steps)
        assert_typed(got.value, name)
        other = catalog_of(place.fresh_url, name)
        try:
            value = other.get("k")
            assert value in (OLD, value_after(op)), f"{op} faulted at {faults.fired[0]} left {value!r}"
            if kind not in REACHES_SERVER:
                assert value == OLD, f"{op} faulted before {faults.fired[0]} reached the server left {value!r}"
            seen.add("old" if value == OLD else "new")
            if value != OLD:  # the change was stored: the error must not have said it was not
                assert "nothing was changed" not in str(got.value).lower(), got.value
            assert other.get("other") == OTHER
            assert other.items() == ([("k", value)] if value is not None else []) + [("other", OTHER)]
        finally:
            close_catalog(other)
        assert call(cat, op) == answer_of(op)  # the same client goes on
        assert checker.get("k") == value_after(op)
    if op in WRITES and kind in REACHES_SERVER:
        assert "new" in seen, "no fault landed after the server stored the value"
    close_catalog(cat)
    close_catalog(checker)
    _count("each step of each catalog call", sites)


ENSURE_CASES: Final = [("postgres", k) for k in PG_KINDS] + [("nats", k) for k in ("closed", "no-answer")]


@pytest.mark.parametrize(("server", "kind"), ENSURE_CASES, indirect=["server"])
def test_a_fault_while_a_catalog_is_first_made(server: Backend, inject: Callable[[str], Injector],
                                               kind: str) -> None:
    """The first call on a new store makes the catalog's table (PostgreSQL: schema and table, in
    one transaction) or stream (JetStream) before its own step; each step of the making faulted
    in turn, on a new store each time: a typed error, no value written (looked at without making
    anything), and the next call on the same client makes the catalog and writes. Only then does
    a client of its own look (its first call would make the catalog itself)."""
    backend: Any = server
    prefix = f"cf{uuid.uuid4().hex[:8]}"
    made: list[str] = []

    def new_store() -> Any:
        made.append(f"{prefix}{len(made)}")
        return journal.store(backend.store_template().replace("{store}", made[-1]))

    faults = inject(server.name)
    try:
        cat = new_store().catalog("c")
        faults.aim(cat)
        faults.count()
        cat.put("k", dict(FIELDS))
        faults.disarm()
        close_catalog(cat)
        sites = len(faults.steps) - 1  # the last is the put's own (swept above)
        assert sites >= {"postgres": 5, "nats": 2}[server.name], faults.steps  # PG: BEGIN, lock, 2 CREATEs, COMMIT
        for at in range(1, sites + 1):
            store = new_store()
            cat = store.catalog("c")
            faults.aim(cat)
            faults.arm(kind, at_step(at))
            with pytest.raises(Exception) as got:
                cat.put("k", dict(FIELDS))
            faults.disarm()
            assert faults.fired and faults.fired[0].n == at, (at, faults.steps)
            assert_typed(got.value, "c")
            if kind in REACHES_SERVER and any(".CREATE." in f.what for f in faults.fired):
                _wait_until_served(server, f"KV_{made[-1]}_CATALOG")
            assert _raw_value(server, made[-1], "c", "k") is None  # the put's own step never ran
            try:
                cat.put("k", {"again": 1})  # the same client goes on
            finally:
                close_catalog(cat)
            other = catalog_of(own_connection(server, store.location), "c")
            try:
                assert other.get("k") == {"again": 1} and other.items() == [("k", {"again": 1})]
            finally:
                close_catalog(other)
    finally:
        faults.disarm()
        _drop_stores(server, prefix, made)
    _count("making the catalog", sites)


def _raw_value(server: Backend, store: str, catalog: str, key: str) -> Any:
    """The value of ``key`` in the catalog of the store named ``store``, read past the catalog
    class, which would make the table or stream it reads (None: no value, or no catalog)."""
    backend: Any = server
    if server.name == "postgres":
        from psycopg import sql

        from tests.backend_postgres import connect

        with connect() as conn:
            row = conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, 'catalog'))", (store,)).fetchone()
            if row is None or row[0] is None:
                return None
            got = conn.execute(sql.SQL("SELECT value FROM {} WHERE catalog = %s AND key = %s").format(
                sql.Identifier(store, "catalog")), (catalog, key)).fetchone()
            return None if got is None else json.loads(got[0])

    async def look() -> Any:
        import nats

        from journal.remote.jetstream import subject_token

        nc = await nats.connect(servers=backend.servers())
        try:
            subject = f"$KV.{store}_CATALOG.{subject_token(catalog)}.{subject_token(key)}"
            msg = await nc.request(f"$JS.API.STREAM.MSG.GET.KV_{store}_CATALOG",
                                   json.dumps({"last_by_subj": subject}).encode(), timeout=WAIT_S)
            resp = json.loads(msg.data)
            if "error" in resp:  # no stream, or no message on the subject
                return None
            return json.loads(base64.b64decode(resp["message"]["data"]))
        finally:
            await nc.close()

    return asyncio.run(look())


def _wait_until_served(server: Backend, stream: str) -> None:
    """Until the stream a CREATE whose answer was lost made has a leader. While it has none,
    nats-server drops the requests sent to it, unanswered (seen on 2.9), so a call then waits
    out its whole ack_timeout_s: a condition polled, not an interleaving forced."""
    backend: Any = server

    async def poll() -> None:
        import nats

        nc = await nats.connect(servers=backend.servers())
        try:
            for _ in range(int(WAIT_S / 0.01)):
                msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=WAIT_S)
                if (json.loads(msg.data).get("cluster") or {}).get("leader"):
                    return
                await asyncio.sleep(0.01)
            pytest.fail(f"stream {stream} has no leader after {WAIT_S:g} s")
        finally:
            await nc.close()

    asyncio.run(poll())


def _drop_stores(server: Backend, prefix: str, names: list[str]) -> None:
    backend: Any = server
    if server.name == "postgres":
        backend.drop_stores(prefix)
        return

    async def drop() -> None:  # only their catalogs' streams were made
        import nats

        nc = await nats.connect(servers=backend.servers())
        try:
            for name in names:  # a store whose catalog was never made answers "not found"
                await nc.request(f"$JS.API.STREAM.DELETE.KV_{name}_CATALOG", b"", timeout=WAIT_S)
        finally:
            await nc.close()

    asyncio.run(drop())


ONCE_KINDS: Final = ("closed", "no-answer")


@pytest.mark.parametrize("op", CATALOG_METHODS)
@pytest.mark.parametrize("kind", ONCE_KINDS)
@pytest.mark.parametrize("server", ["nats"], indirect=True)
def test_a_fault_that_passes_is_retried_within_the_call(server: Backend, place: Place,
                                                        inject: Callable[[str], Injector], kind: str, op: str) -> None:
    """JetStream's calls try again while the server does not serve them: a fault at any one step
    that does not last is not seen by the caller, and the value is the one the call writes
    (written twice when the first answer was lost: the same value)."""
    cat, checker, faults, reset, sites = counted_call(server, place, inject, f"o-{op}-{kind}", op)
    assert sites >= STEPS_FLOOR[server.name][op]
    for at in range(1, sites + 1):
        reset()
        faults.arm(kind, at_step(at), once=True)
        got = call(cat, op)
        faults.disarm()
        assert len(faults.fired) == 1 and len(faults.steps) > sites, faults.steps  # faulted, then tried again
        assert got == answer_of(op)
        assert checker.get("k") == value_after(op) and checker.get("other") == OTHER
    _count("a passing fault, retried", sites)


@pytest.mark.parametrize("how", ["cancel", "terminate"])
@pytest.mark.parametrize("op", WRITES)
@pytest.mark.parametrize("server", ["postgres"], indirect=True)
def test_a_write_waiting_for_the_row_lock_is_cancelled_or_cut(server: Backend, place: Place,
                                                              inject: Callable[[str], Injector], op: str,
                                                              how: str) -> None:
    """A write that waits for its key's row, which another transaction holds, is cancelled there
    (the server's error: its connection stays) or its connection is cut: a typed error, the
    value as it was, and the next call on the same client succeeds."""
    import psycopg
    from psycopg import sql

    from tests.backend_postgres import PG_URL

    name = f"lock-{op}-{how}"
    cat = catalog_of(place.url, name)
    checker = catalog_of(place.fresh_url, name)
    faults = inject(server.name)
    assert isinstance(faults, PostgresFaults)
    faults.aim(cat)
    checker.put("k", dict(OLD))
    cat.get("warm")
    pid = faults.backend_pid()
    errors: list[BaseException] = []
    returned = threading.Event()

    def write() -> None:
        try:
            call(cat, op)
        except BaseException as exc:
            errors.append(exc)
        finally:
            returned.set()

    table = sql.Identifier(server.schema, "catalog")  # type: ignore[attr-defined]
    with psycopg.connect(PG_URL) as holder:  # a transaction of its own, holding the row
        holder.execute(sql.SQL("SELECT value FROM {} WHERE catalog = %s AND key = 'k' FOR UPDATE").format(table),
                       (name,))
        holder_pid = int(holder.info.backend_pid)
        t = threading.Thread(target=write)
        t.start()
        while not faults.waits_for(pid, holder_pid):
            assert not returned.is_set(), f"the {op} did not wait for the row: {errors}"
            faults.pause()
        if how == "cancel":
            faults.cancel(pid)
        else:
            faults.terminate(pid)
        assert returned.wait(WAIT_S)
        t.join(WAIT_S)
        holder.rollback()
    assert len(errors) == 1, errors
    assert_typed(errors[0], name)
    if how == "cancel":
        assert "cancel" in str(errors[0]), errors[0]
    assert checker.get("k") == OLD  # a write that waited did nothing
    assert call(cat, op) == answer_of(op)  # the same client goes on
    assert checker.get("k") == value_after(op)
    if how == "cancel":
        assert faults.backend_pid() == pid  # on the same connection: a server error does not lose it
    close_catalog(cat)
    close_catalog(checker)
    _count("a write waiting for its row", 1)


# --- each catalog call of each session store call -------------------------------------------------


@dataclass
class Scenario:
    ids: list[str]  # the sessions it is about
    act: Callable[[cs.CatalogSessionStore], object]  # the session store's call
    again: Callable[[cs.CatalogSessionStore], object]  # what the caller does next (the call again, mostly)
    writer: bool = False  # the call opens a writer on them (none may be left behind)
    rebuilds: bool = False  # ``again`` is rebuild_index: the entries are checked after it


def new_id(tag: str) -> str:
    return f"s-{tag}-{uuid.uuid4().hex[:10]}"


def made_session(st: cs.CatalogSessionStore, turns: int = 1, path: str = "/repo") -> str:
    with st.create(workspace={"path": path}) as s:
        add_turns(s, random.Random(len(path) + turns), turns, 0)
        return s.session_id


def behind_the_index(st: cs.CatalogSessionStore, sid: str, path: str) -> None:
    """A session journal with no entry: what a create cut short after its header leaves."""
    with S.Session.attach(st.backing.open(sid, create=True), create=True, session_id=sid,
                          workspace={"path": path}) as s:
        s.append("user.message", {"text": "hi"})


def clean_point(st: cs.CatalogSessionStore, sid: str) -> int:
    with st.backing.open(sid, readonly=True) as j:
        points = forking.scan_points(j, S.Registry())
    return points[len(points) // 2].seq


def scenario_create(st0: cs.CatalogSessionStore) -> Scenario:
    sid = new_id("create")

    def act(st: cs.CatalogSessionStore) -> None:
        with st.create(session_id=sid, workspace={"path": "/create"}) as s:
            s.append("user.message", {"text": "hello"})

    def again(st: cs.CatalogSessionStore) -> None:
        try:
            act(st)
        except SessionExistsError:  # its header was written before the fault: it is a session, it opens
            with st.open(sid) as s:
                s.append("user.message", {"text": "hello again"})

    return Scenario([sid], act, again, writer=True)


def scenario_open(st0: cs.CatalogSessionStore) -> Scenario:
    sid = made_session(st0)

    def act(st: cs.CatalogSessionStore) -> None:
        with st.open(sid) as s:  # the entry's update at open, and at close
            s.append("user.message", {"text": "more"})

    return Scenario([sid], act, act, writer=True)


def scenario_fork(st0: cs.CatalogSessionStore) -> Scenario:
    parent = made_session(st0, turns=4)
    at = clean_point(st0, parent)
    child = new_id("fork")

    def act(st: cs.CatalogSessionStore) -> None:
        st.fork(parent, at_seq=at, session_id=child)

    def again(st: cs.CatalogSessionStore) -> None:
        try:
            act(st)
        except SessionExistsError:  # copied before the fault: listed, from its journal
            assert st.info(child).fork_seq == at

    return Scenario([parent, child], act, again, writer=True)  # a copy takes the child's writer claim


def scenario_archive(st0: cs.CatalogSessionStore) -> Scenario:
    sid = made_session(st0)

    def act(st: cs.CatalogSessionStore) -> None:
        assert st.archive(sid).status == "archived"

    return Scenario([sid], act, act, writer=True)  # archive holds the writer lock while it marks


def scenario_list(st0: cs.CatalogSessionStore) -> Scenario:
    """A listing that enters a journal the catalog missed and drops an entry whose journal went."""
    path = f"/list-{uuid.uuid4().hex[:6]}"
    kept = made_session(st0, path=path)
    missed = new_id("missed")
    behind_the_index(st0, missed, path)
    gone = made_session(st0, path=path)
    st0.backing.delete(gone)

    def act(st: cs.CatalogSessionStore) -> None:
        assert {i.session_id for i in st.list(workspace=path)} == {kept, missed}

    return Scenario([kept, missed, gone], act, act)


def scenario_info(st0: cs.CatalogSessionStore) -> Scenario:
    """info of a session the catalog missed: it lists, which enters it."""
    missed = new_id("info")
    behind_the_index(st0, missed, "/info")

    def act(st: cs.CatalogSessionStore) -> None:
        assert st.info(missed).workspace == {"path": "/info"}

    return Scenario([missed], act, act)


def written_behind_the_index(st0: cs.CatalogSessionStore) -> str:
    """A session whose entry is behind its journal (last_seq): appended to by a writer that did
    not go through the store."""
    sid = made_session(st0)
    with S.Session.attach(st0.backing.open(sid), session_id=sid) as s:
        s.append("user.message", {"text": "behind the index"})
    return sid


def scenario_refresh(st0: cs.CatalogSessionStore) -> Scenario:
    sid = written_behind_the_index(st0)

    def act(st: cs.CatalogSessionStore) -> None:
        with st.backing.open(sid, readonly=True) as j:
            assert st.refresh(sid).last_seq == j.last_seq

    return Scenario([sid], act, act)


def scenario_rebuild(st0: cs.CatalogSessionStore) -> Scenario:
    """A journal the catalog missed, an entry whose journal went, an entry behind its journal."""
    missed = new_id("rebuild")
    behind_the_index(st0, missed, "/rebuild")
    gone = made_session(st0)
    st0.backing.delete(gone)
    stale = written_behind_the_index(st0)

    def act(st: cs.CatalogSessionStore) -> int:
        return st.rebuild_index()

    return Scenario([missed, gone, stale], act, act, rebuilds=True)


SCENARIOS: Final[dict[str, Callable[[cs.CatalogSessionStore], Scenario]]] = {
    "create": scenario_create,  # get, put; at close: update
    "open": scenario_open,  # get, get (under the lock), update; at close: update
    "fork": scenario_fork,  # get, put
    "archive": scenario_archive,  # get, update, get (info)
    "list": scenario_list,  # items, delete, put (latest is a list too)
    "info": scenario_info,  # get, then a list: items, put
    "refresh": scenario_refresh,  # get, put
    "rebuild_index": scenario_rebuild,  # items, put each, delete, items
}


@dataclass
class Faulted:
    """The catalog call the fault landed in: its key, the value before, the value it writes."""

    method: str = ""
    key: str | None = None
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None


def targets(faults: Injector) -> list[tuple[str, int, bool]]:
    """(method, nth, writes) of the calls to fault: the first of each method, and the last call
    (by rank within its method: the store grows from one run to the next, so the number of
    calls of some methods does too)."""
    calls: dict[int, tuple[str, int, bool]] = {}
    for s in faults.steps:
        method, nth, writes = calls.get(s.call, (s.method, s.nth, False))
        calls[s.call] = (method, nth, writes or s.write)
    chosen = {c for c in calls.values() if c[1] == 1} | {calls[max(calls)]}
    return sorted(chosen)


@pytest.mark.parametrize("what", list(SCENARIOS))
def test_a_fault_in_each_catalog_call_of_a_session_store_call(server: Backend, place: Place,
                                                              sessions: cs.CatalogSessionStore,
                                                              inject: Callable[[str], Injector], what: str) -> None:
    """The session store's call, with its catalog's connection lost at a call of the catalog
    (the first of each method, and the last), or that call's write done and its answer lost."""
    if what != "rebuild_index":
        sweep_session_call(server, place, sessions, inject(server.name), SCENARIOS[what])
        return
    # It reads every journal of its store: a store of its own keeps it small.
    backend: Any = server
    prefix = f"cr{uuid.uuid4().hex[:8]}"
    url = backend.store_template().replace("{store}", f"{prefix}0")
    small = Place(server, url, own_connection(server, url))
    try:
        with cs.CatalogSessionStore(url) as st0:
            sweep_session_call(server, small, st0, inject(server.name), SCENARIOS[what])
    finally:
        backend.drop_stores(prefix)


def sweep_session_call(server: Backend, place: Place, st0: cs.CatalogSessionStore, faults: Injector,
                       make: Callable[[cs.CatalogSessionStore], Scenario]) -> None:
    st = cs.CatalogSessionStore(place.url)
    peek = catalog_of(place.fresh_url, cs.CATALOG_NAME)
    faults.aim(st.catalog)
    try:
        dry = make(st0)
        st.catalog.get("s-warm")
        faults.count()
        dry.act(st)
        faults.disarm()
        chosen = targets(faults)
        cases = [(m, nth, DOWN[server.name]) for m, nth, _ in chosen]
        cases += [(m, nth, ANSWER_LOST[server.name]) for m, nth, writes in chosen if writes]
        assert len(cases) >= 2, faults.steps
        for method, nth, kind in cases:
            sc = make(st0)
            st.catalog.get("s-warm")
            faulted = Faulted()

            def capture(m: str, k: int, args: tuple[Any, ...], method: str = method, nth: int = nth,
                        faulted: Faulted = faulted) -> None:
                if (m, k) != (method, nth) or m == "items":
                    return
                faulted.method, faulted.key = m, args[0]
                faulted.old = peek.get(args[0])
                if m == "put":
                    faulted.new = args[1]
                elif m == "update":
                    faulted.new = None if faulted.old is None else {**faulted.old, **args[1]}
                elif m == "get":
                    faulted.new = faulted.old

            faults.arm(kind, at_call(method, nth, writes_only=kind == ANSWER_LOST[server.name]))
            faults.before_call = capture
            with pytest.raises(Exception) as got:
                sc.act(st)
            faults.disarm()
            assert faults.fired and (faults.fired[0].method, faults.fired[0].nth) == (method, nth), faults.steps
            assert_typed(got.value, cs.CATALOG_NAME)
            listed = check_index(place, sc, faulted, kind)
            count = sc.again(st)  # the same store goes on
            if sc.rebuilds:
                assert count == len(listed)
                check_entries(place, sc)
        _count("each catalog call of a session store call", len(cases))
    finally:
        faults.disarm()
        close_catalog(peek)
        st.close()


def check_index(place: Place, sc: Scenario, faulted: Faulted, kind: str) -> set[str]:
    """What a store of its own sees after the fault; the sessions it lists."""
    with cs.CatalogSessionStore(place.fresh_url) as other:
        if faulted.key is not None:  # read before the listing enters or drops anything
            value = other.catalog.get(faulted.key)
            assert value in (faulted.old, faulted.new), f"{faulted.method} {faulted.key}: {value!r} ({faulted})"
            if kind not in REACHES_SERVER:
                assert value == faulted.old, f"{faulted.method} {faulted.key}: {value!r} ({faulted})"
        names = set(other.backing.names())
        status = {i.session_id: i.status for i in other.list()}
        listed = set(status)
        assert listed <= names, f"listed without a journal: {sorted(listed - names)}"
        for sid in sorted((listed - place.opened) | set(sc.ids)):  # every listed session opens
            if sid not in names:
                assert sid not in listed
                continue
            with other.backing.open(sid, readonly=True) as j:
                has_header = j.last_seq > 0
            assert (sid in listed) == has_header, f"{sid}: listed {sid in listed}, header {has_header}"
            if not has_header:
                continue
            place.opened.add(sid)
            if sc.writer and sid in sc.ids and status[sid] == "active":  # no writer was left behind
                with other.open(sid, lock_timeout_s=0.0):
                    pass
    if not sc.rebuilds:  # refresh brings each entry in line with its journal
        check_entries(place, sc, refresh=True)
    return listed


def check_entries(place: Place, sc: Scenario, refresh: bool = False) -> None:
    """The entries of the scenario's sessions, as its journals say (after ``refresh`` of each,
    or after a rebuild_index, which also clears their ``open``)."""
    with cs.CatalogSessionStore(place.fresh_url) as other:
        names = set(other.backing.names())
        for sid in sc.ids:
            if sid not in names:
                assert other.catalog.get(sid) is None, sid  # its journal is gone, and its entry
                continue
            with other.backing.open(sid, readonly=True) as j:
                if j.last_seq == 0:
                    continue
                truth = info_from_journal(j, sid, "active")
            got = dataclasses.asdict(other.refresh(sid)) if refresh else other.catalog.get(sid)
            entry = other.catalog.get(sid)
            assert got is not None and entry is not None, sid
            for f in ("last_seq", "workspace", "parent", "fork_seq", "created"):
                assert got[f] == getattr(truth, f) == entry[f], (sid, f, got, truth, entry)
            if not refresh:
                assert entry["open"] is False, (sid, entry)
