"""Journals on PostgreSQL (docs/REMOTE.md, "PostgreSQL"): the journal.api protocol on two tables.

    j = journal.open("postgresql://user@host:5432/db?journal=s-42", create=True)

Tables, in the URL's ``schema`` (default ``journal``), made on first use under a transaction-level
advisory lock so concurrent first uses do not race:

* ``journals(name text primary key, id bytea, first_seq bigint, created_at timestamptz)``: the
  journal's random 16-byte id seeds the checksums of its frames (journal/remote/records.py);
* ``records(journal text, seq bigint, key text, frame bytea, primary key (journal, seq))``, with a
  unique index on ``(journal, key)`` where ``key`` is not null. ``frame`` is the file engine's
  frame of the record; every read verifies it (CorruptionError names the journal and the seq).

Writers and fencing. An exclusive writer holds a session-level advisory lock (a 64-bit hash of
schema and name) on the one connection it writes through, for the life of the handle; the
server releases it when that connection ends, so a writer whose connection was lost can never
write again (nothing it sends reaches the table), and the ``(journal, seq)`` key refuses a row
at a seq that exists. ``writer="shared"``: each handle holds the same lock in share mode (so
shared writers exclude an exclusive one and the reverse), and every transaction takes a second,
transaction-level advisory lock and computes the next seq from the table inside it: seqs stay
contiguous and idempotency keys hold across processes; there is no buffered level there (a
buffered append is written at once, at "flush", as the file engine's shared writers do).

A store's journals share a writer. The journals a PostgresStore opens for writing (exclusive
writers; journal/remote/postgres_store.py) share one writer connection and one group commit
(``_Writer``, made through ``StoreWriter``): a batch holds records of many journals, planned
journal by journal (each its own seqs, idempotency-key look-ups, buffered records, outcomes and
fail-stop), written by one multi-row INSERT and one COMMIT, so one WAL flush for many sessions.
Each journal's writer lock is a session-level advisory lock on that connection (many on one
connection), let go of with ``pg_advisory_unlock`` when the journal closes; the connection ends
with the last journal on it. Losing it fail-stops every journal on it: their locks went with it.
A statement refused in one journal's part with the connection alive (a constraint violation)
rolls the batch back, and the parts are then written one transaction each, so only that
journal's records are NotCommitted (and it fail-stops, as a lone journal would). ``journal.open``
of one journal keeps a connection of its own, as read-only and ``writer="shared"`` handles do.

Life of an append. The caller's thread encodes the event (journal.engine.encoding) and submits
it to the group commit (journal/remote/group.py). The leader takes every queued caller's
records into one transaction on the writer's connection: ``BEGIN`` and ``SET LOCAL
synchronous_commit`` (``on`` for "sync", ``off`` for "flush"), one look-up of the batch's
idempotency keys in the table (with the records this handle still buffers), then one
multi-row ``INSERT`` (unnest of arrays) carrying ``pg_notify`` for followers, then ``COMMIT``.
A buffered batch is kept in the client (seqs handed out) until a flush, a sync, a read from
this handle, close, or BUFFER_BYTES_MAX / BUFFER_RECORDS_MAX.

Outcomes. Anything that fails before ``COMMIT`` is sent: ROLLBACK, NotCommitted, and the next
append reuses the seqs; the handle fail-stops when the connection is gone (its lock went with
it), when acknowledged buffered records went down with the transaction, or when the table
holds a row this writer did not know of. Anything that fails while ``COMMIT`` is on its way or
its answer awaited: AckLost for every record of the batch, and the handle fail-stops
(JournalFailStoppedError) until it is opened again; ``resolve()`` on the new handle answers
from the table, by seq and digest or by idempotency key.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, urlsplit

if sys.version_info >= (3, 11):
    from typing import LiteralString
else:  # Python 3.10's typing has none; it is the type checker's word (mypy reads this as 3.11)
    LiteralString = str

import xxhash

from journal.errors import MissingExtraError

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise MissingExtraError(__name__, "psycopg 3.1.18 or later", "postgres", exc) from exc

from journal.api import PrefixDrop, RecoveryReport, Retention
from journal.engine import format as fmt
from journal.engine.encoding import Encoded, check_durability, encode_event, repeated_keys, same_event, with_repeats
from journal.engine.options import Options
from journal.errors import (
    CorruptionError,
    DurabilityError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvariantError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    ReadOnlyError,
    SequenceError,
)
from journal.outcomes import AckLost, Committed, Durability, NotCommitted, Outcome
from journal.record import Record
from journal.remote import records
from journal.remote.group import BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, GroupCommit
from journal.remote.url import RemoteURL

if TYPE_CHECKING:
    from journal.api import Journal

SCHEMA_DEFAULT: Final = "journal"
SCHEMA_NAME_BYTES_MAX: Final = 63  # PostgreSQL's identifier limit (NAMEDATALEN - 1)
CONNECT_TIMEOUT_S_DEFAULT: Final = 10.0
CONNECT_TIMEOUT_S_MAX: Final = 3600.0
LOCK_TIMEOUT_S_MAX: Final = 24 * 3600.0
# A shared writer's transaction waits this long for the append lock, then its records are
# NotCommitted (nothing written, safe to retry) and the handle goes on.
SHARED_LOCK_TIMEOUT_S_DEFAULT: Final = 30.0
READ_PAGE_RECORDS: Final = 512  # rows per query of read() and follow(): memory stays bounded
# Buffered records kept in the client before they are written (at "flush") without being asked.
BUFFER_BYTES_MAX: Final = 1024 * 1024
BUFFER_RECORDS_MAX: Final = 4096
BATCH_RECORDS_MAX: Final = BATCH_RECORDS_MAX_DEFAULT  # one transaction; an unkeyed append_many is cut to fit
BATCH_BYTES_MAX: Final = BATCH_BYTES_MAX_DEFAULT
FOLLOW_POLL_INTERVAL_S: Final = 0.02
# How long resolve() waits for the server's WAL flush to pass a record it found, to report "sync".
RESOLVE_FLUSH_WAIT_S: Final = 2.0
# A dead server or network is noticed by TCP, not only when the OS gives up (libpq settings).
KEEPALIVES_IDLE_S: Final = 10
KEEPALIVES_INTERVAL_S: Final = 5
KEEPALIVES_COUNT: Final = 3
TCP_USER_TIMEOUT_MS: Final = 30_000

OPTIONS: Final = frozenset({"record_size_bytes_max", "compress", "shared_lock_timeout_s", "first_seq"})
WRITER_MODES: Final = ("exclusive", "shared")
_APP_NAME_PID = re.compile(r"^journal pid (\d+)")

_BEGIN: Final[dict[str, LiteralString]] = {
    "on": "BEGIN; SET LOCAL synchronous_commit TO on",
    "remote_apply": "BEGIN; SET LOCAL synchronous_commit TO remote_apply",
    "off": "BEGIN; SET LOCAL synchronous_commit TO off",
}

_SET_COMMIT: Final[dict[str, LiteralString]] = {
    "on": "SET LOCAL synchronous_commit TO on",
    "remote_apply": "SET LOCAL synchronous_commit TO remote_apply",
    "off": "SET LOCAL synchronous_commit TO off",
}

Conn = psycopg.Connection[tuple[Any, ...]]
Query = LiteralString | sql.SQL | sql.Composed


# --- errors with this backend's words --------------------------------------------------------


@dataclass(frozen=True)
class LockHolder:
    """A session holding a journal's writer lock, as pg_locks and pg_stat_activity show it."""

    backend_pid: int
    client_addr: str | None
    client_port: int | None
    application_name: str | None
    mode: str

    @property
    def client_pid(self) -> int | None:
        """The writer's process id, when it set the application name this module sets."""
        m = _APP_NAME_PID.match(self.application_name or "")
        return int(m.group(1)) if m else None

    def describe(self) -> str:
        addr = "a local socket" if self.client_addr is None else f"{self.client_addr}:{self.client_port}"
        who = f"client process {self.client_pid}, " if self.client_pid is not None else ""
        return f"{who}server backend pid {self.backend_pid}, connected from {addr} ({self.mode})"


class ServerJournalLockedError(JournalLockedError):
    """Another session holds the journal's writer lock (``holders`` says which)."""

    def __init__(self, path: str, holders: list[LockHolder], waited_s: float) -> None:
        if holders:
            held = "; ".join(h.describe() for h in holders)
        else:
            held = "a session that has just let go or cannot be seen (pg_locks)"
        waited = f" (waited {waited_s:g} s)" if waited_s > 0 else ""
        JournalError.__init__(
            self,
            f"journal {path!r} is locked for writing{waited} by {held}; only one writer is allowed. "
            "Open it with readonly=True to read, pass lock_timeout_s to wait for the lock, or end "
            "that session (pg_terminate_backend(backend pid)) if its writer is gone",
        )
        self.path = path
        first = holders[0] if holders else None
        self.pid = (first.client_pid or first.backend_pid) if first is not None else None
        self.holders = holders


class SyncNotDurableError(DurabilityError):
    """"sync" was asked of a server running with fsync = off."""

    def __init__(self, path: str) -> None:
        InvalidArgumentError.__init__(
            self,
            f"durability 'sync' is refused on {path}: the server runs with fsync = off, so no commit "
            "survives a crash of the server or its machine, and 'sync' would be a lie. Turn fsync on "
            "(postgresql.conf, then reload) or append at 'flush'; nothing was written",
        )
        self.durability = "sync"


class ServerIOError(JournalIOError):
    """The server could not be reached or refused us (not an append's outcome)."""

    def __init__(self, path: str, doing: str, cause: BaseException, advice: str) -> None:
        OSError.__init__(self, f"{doing} journal {path} failed: {str(cause).strip()}. {advice}")
        self.path = path


CONNECT_ADVICE: Final = (
    "Check that the server is running and reachable from here (host, port, firewall, pg_hba.conf) and "
    "that the user, password and database in the URL are right; nothing was written"
)


# --- the items the group commit carries --------------------------------------------------------


class _Item(Encoded):
    """An encoded record with the call it came from (a conflict refuses a whole call) and the
    journal it goes to (a store's journals share one writer: journal/remote/postgres.py, _Writer)."""

    __slots__ = ("call", "owner")

    def __init__(self, enc: Encoded, call: int, owner: PostgresJournal) -> None:
        super().__init__(enc.spec, enc.raw, enc.key)
        self.call = call
        self.owner = owner


class _Barrier(Encoded):
    """No record: flush() and sync() queue one to have the buffer written (and synced)."""

    __slots__ = ("call", "owner")

    def __init__(self, call: int, owner: PostgresJournal) -> None:
        super().__init__(fmt.FrameSpec(0, 0, b""), b"", None)
        self.call = call
        self.owner = owner


class _Op(_Barrier):
    """A barrier that runs ``fn`` on the writer's connection in the leader's turn, so nothing
    else uses the connection meanwhile: ``before`` the batch's transaction (a journal of a
    store taking its writer lock), or after it (drop_prefix, a store journal's unlock at
    close). ``result`` or ``error`` is set once the batch is done."""

    __slots__ = ("before", "error", "fn", "result")

    def __init__(self, call: int, owner: PostgresJournal, fn: Callable[[Conn], Any], before: bool = False) -> None:
        super().__init__(call, owner)
        self.fn = fn
        self.before = before
        self.result: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(frozen=True)
class _Conflict(NotCommitted):
    """The leader found the call's key held by a different event: the caller raises."""

    key: str = ""
    holder: int | None = None


@dataclass(frozen=True)
class _Raised(NotCommitted):
    """The leader could not plan this journal's part of a batch (a stored row failed its
    check): nothing of it was written, and its callers raise ``error``; the other journals of
    the batch go on."""

    error: BaseException | None = None


_NEW, _DUP, _REFUSED, _BARRIER = "new", "dup", "refused", "barrier"


@dataclass
class _Step:
    kind: str
    seq: int = 0
    key: str | None = None


def reusable(conn: Conn) -> bool:
    """Whether a kept connection can take the next statement: open, and between transactions.

    Not only a closed or broken one is done with: after an error libpq can still be inside a
    command (asyncStatus busy, the transaction status ACTIVE) on a connection it calls OK. It was
    seen once on a server session ended as a statement was on its way, and every later
    statement on it then fails with "another command is already in progress". A connection
    that can be made again (a catalog's, a reader's) is replaced when this says no; a writer's,
    which holds the writer lock, is not replaceable and fails its journal instead."""
    return not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def writer_lock_key(schema: str, name: str) -> int:
    """The advisory lock key a journal's writers hold (and a store's delete takes)."""
    return _hash64("journal-writer", schema, name)


def _hash64(*parts: str) -> int:
    """A signed 64-bit hash (an advisory lock key)."""
    digest = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _check_key(key: str | None) -> None:
    if key is None:
        return
    if "\x00" in key:
        raise InvalidArgumentError("an idempotency key on PostgreSQL holds no NUL character; nothing was written")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgumentError(
            f"an idempotency key on PostgreSQL must be valid UTF-8 text (no lone surrogates): {key!r}; "
            "nothing was written"
        ) from None



def _chunks(items: list[_Item]) -> Iterator[list[_Item]]:
    chunk: list[_Item] = []
    size = 0
    for it in items:
        n = len(it.spec.stored)
        if chunk and (len(chunk) >= BATCH_RECORDS_MAX or size + n > BATCH_BYTES_MAX):
            yield chunk
            chunk, size = [], 0
        chunk.append(it)
        size += n
    if chunk:
        yield chunk



class _Queries:
    """The statements, with the schema's identifiers quoted once."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema)
        journals = sql.Identifier(schema, "journals")
        recs = sql.Identifier(schema, "records")
        self.create: list[sql.Composed] = [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, id bytea NOT NULL, "
                "first_seq bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
            ).format(journals),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (journal text NOT NULL, seq bigint NOT NULL, key text NULL, "
                "frame bytea NOT NULL, PRIMARY KEY (journal, seq))"
            ).format(recs),
            sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} (journal, key) WHERE key IS NOT NULL").format(
                sql.Identifier("records_journal_key"), recs
            ),
        ]
        self.journal = sql.SQL("SELECT id, first_seq FROM {} WHERE name = %s").format(journals)
        self.new_journal = sql.SQL(
            "INSERT INTO {} (name, id, first_seq) VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING"
        ).format(journals)
        self.last = sql.SQL("SELECT max(seq) FROM {} WHERE journal = %s").format(recs)
        self.keys = sql.SQL("SELECT key, seq, frame FROM {} WHERE journal = %s AND key = ANY(%s::text[])").format(
            recs
        )
        # One statement for a batch, whatever journals its rows go to; a notification per journal.
        self.insert = sql.SQL(
            "WITH ins AS (INSERT INTO {} (journal, seq, key, frame) "
            "SELECT j, s, k, f FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::bytea[]) AS t(j, s, k, f)) "
            "SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)"
        ).format(recs)
        # The stored keys of a batch's records, of every journal in it.
        self.keys_of = sql.SQL(
            "SELECT r.journal, r.key, r.seq, r.frame FROM {} r "
            "JOIN unnest(%s::text[], %s::text[]) AS q(j, k) ON r.journal = q.j AND r.key = q.k"
        ).format(recs)
        self.page = sql.SQL(
            "SELECT seq, frame FROM {} WHERE journal = %s AND seq > %s ORDER BY seq LIMIT %s"
        ).format(recs)
        self.one = sql.SQL("SELECT frame FROM {} WHERE journal = %s AND seq = %s").format(recs)
        self.drop = sql.SQL(
            "WITH d AS (DELETE FROM {} WHERE journal = %s AND seq < %s RETURNING length(frame) AS n) "
            "SELECT sum(n) FROM d"
        ).format(recs)
        self.move_first = sql.SQL("UPDATE {} SET first_seq = %s WHERE name = %s").format(journals)


@dataclass
class _Part:
    """One journal's records in a batch (positions in the batch, the plan for them)."""

    j: PostgresJournal
    at: list[int]
    items: list[Encoded]
    base: int = 0
    level: Durability = "flush"
    steps: list[_Step] = field(default_factory=list)
    rows: list[tuple[int, Encoded]] = field(default_factory=list)
    new_rows: list[tuple[int, Encoded]] = field(default_factory=list)
    carried: bool = False  # acknowledged buffered records are among rows

    def dup(self) -> bool:
        return any(s.kind == _DUP for s in self.steps)


class _Writer:
    """A writer connection and its group commit, for one journal (``journal.open``) or for every
    journal a PostgresStore opens for writing (``shared``): a batch then holds records of many
    journals, planned journal by journal (seqs, idempotency keys, buffers, outcomes), written by
    one multi-row INSERT and one COMMIT (one WAL flush). Each journal's writer lock is held on
    this connection; a store journal lets go of it at close (pg_advisory_unlock).

    Failures. The connection lost (or left in a state it cannot be rolled back from): every
    journal on it fail-stops, since their locks went with it; reopening each tells (resolve()).
    A statement that fails before COMMIT with the connection alive (a constraint violation: a
    row a writer did not know of) is one journal's doing: the batch is rolled back and each
    journal's part is then written in a transaction of its own, so only the journal whose part
    is refused has NotCommitted (and fail-stops, as a lone journal would); the others commit.
    A key held by another event refuses only the call that carries it (IdempotencyConflictError),
    as for a lone journal; a stored row that fails its check refuses that journal's part.
    """

    def __init__(self, conn: Conn, schema: str, sync_setting: str, shared: bool, no_buffer: bool = False) -> None:
        self.conn = conn
        self.shared = shared
        self.no_buffer = no_buffer  # writer="shared": no buffered level
        self.sync_setting = sync_setting
        self.q = _Queries(schema)
        self.gc = GroupCommit(self._write, BATCH_RECORDS_MAX, BATCH_BYTES_MAX)
        self.mu = threading.Lock()
        self.members: set[PostgresJournal] = set()
        self.failed: str | None = None
        self.retired = False  # no journal is attached any more, or it failed: the store makes another
        # Writer lock keys held on this connection: advisory locks are re-entrant within one
        # server session, so a second handle of a journal would get its lock again without this.
        # Read and changed only by the ops the leader runs one at a time (_take_lock..., _unlock).
        self.held_keys: set[int] = set()
        self.commits = 0  # COMMITs sent (the tests and the benchmark count them)

    def lose(self, why: str) -> None:
        """The connection is gone (or unusable): every journal on it fail-stops."""
        with self.mu:
            if self.failed is None:
                self.failed = why
            members = list(self.members)
        for m in members:
            m._fail_stop(why)

    def close(self) -> None:
        self.gc.wait_idle()
        try:
            self.conn.close()
        except psycopg.Error:
            pass

    # --- the leader's side: one batch, one transaction (journal/remote/group.py calls this) --

    def _write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(items)
        after = [it for it in items if isinstance(it, _Op) and not it.before]
        try:
            self._batch(items, level, out)
        finally:
            self._run_after(after)
        return [o if o is not None else NotCommitted("not written") for o in out]

    def _batch(self, items: list[Encoded], level: Durability, out: list[Outcome | None]) -> None:
        conn = self.conn
        if self.failed is not None or conn.closed:
            why = self.failed or "the journal was closed before this record was written"
            for i in range(len(items)):
                out[i] = NotCommitted(f"journal fail-stopped before this record was written: {why}")
            return
        eff: Durability = "flush" if self.no_buffer and level == "buffered" else level
        for i, it in enumerate(items):
            if isinstance(it, _Op) and it.before:
                try:
                    it.result = it.fn(conn)
                except BaseException as exc:
                    it.error = exc
                    if not reusable(conn):
                        self.lose(_unusable(conn, exc))
                    if not isinstance(exc, Exception):
                        raise
                out[i] = Committed(0, eff)
        groups: dict[int, tuple[PostgresJournal, list[int]]] = {}
        for i, it in enumerate(items):
            if out[i] is None:
                if not isinstance(it, (_Item, _Barrier)):
                    raise InvariantError("a PostgreSQL batch holds this module's items only")
                groups.setdefault(id(it.owner), (it.owner, []))[1].append(i)
        parts: list[_Part] = []
        for j, at in groups.values():
            if j._failed is not None:
                for i in at:
                    out[i] = NotCommitted(f"journal fail-stopped before this record was written: {j._failed}")
            elif j._detached:
                for i in at:
                    out[i] = NotCommitted("the journal was closed before this record was written")
            else:
                p = _Part(j, at, [items[i] for i in at])
                if all(isinstance(it, _Barrier) for it in p.items) and not j._buffer and (
                    eff != "sync" or not j._unsynced
                ):
                    for i in at:
                        out[i] = Committed(0, eff)  # nothing to write, nothing to wait for
                else:
                    parts.append(p)
        if not parts:
            return
        begun = False
        try:
            # A batch without keys (on an exclusive writer) has nothing to look up: its BEGIN goes
            # out with the INSERT, in one round trip (_commit).
            if eff != "buffered" and (self.no_buffer or any(it.key is not None for p in parts for it in p.items)):
                self._begin(conn, eff)
                begun = True
            for p in parts:
                p.base = p.j._table_last(conn) if p.j._shared else p.j._committed
            found = self._lookup(conn, parts)
        except BaseException as exc:
            reason = self._failed_before_commit(conn, exc, begun, parts)
            for p in parts:
                self._settle(p, "not", reason, out)
            if not isinstance(exc, Exception):
                raise
            return
        planned: list[_Part] = []
        for p in parts:
            try:
                got = p.j._verify_found(found.get(p.j._name, []))
            except JournalError as exc:
                for i in p.at:
                    out[i] = _Raised(f"journal {p.j.path}: {exc}", error=exc)
                continue
            p.steps, p.new_rows = p.j._plan(p.items, got, p.base)
            p.level = eff
            if eff == "buffered" and p.j._buffer_new(p.new_rows):
                self._settle(p, "ok", "", out, kept=True)
                continue
            if eff == "buffered":
                p.level = "flush"  # the buffer is full: written now, and the outcomes say so
            p.rows = list(p.j._buffer) + p.new_rows
            p.carried = bool(p.j._buffer)
            planned.append(p)
        tx: Durability = "sync" if eff == "sync" else "flush"
        force_xid = tx == "sync" and not any(p.rows for p in planned) and any(
            p.j._unsynced or p.dup() for p in planned
        )
        if not begun and not force_xid and not any(p.rows for p in planned):
            for p in planned:
                self._settle(p, "ok", "", out)
            return
        status, why, err = self._commit(conn, planned, tx, begun, force_xid)
        if status == "not" and err is not None:
            why = self._failed_before_commit(conn, err, True, planned)
            if (len(planned) > 1 and isinstance(err, Exception) and self.failed is None
                    and not conn.broken and not conn.closed):
                self._one_by_one(conn, planned, tx, out)
                return
        for p in planned:
            self._settle(p, status, why, out)
        if err is not None and not isinstance(err, Exception):
            raise err

    def _one_by_one(self, conn: Conn, parts: list[_Part], tx: Durability, out: list[Outcome | None]) -> None:
        """The batch's transaction failed with the connection alive: each journal's part in a
        transaction of its own, so that one journal's refused part leaves the others committed."""
        for p in parts:
            if self.failed is not None:
                self._settle(p, "not", f"the connection to the server was lost before COMMIT ({self.failed}); "
                             "nothing was written", out)
                continue
            force_xid = tx == "sync" and not p.rows and (p.j._unsynced or p.dup())
            if not p.rows and not force_xid:
                self._settle(p, "ok", "", out)
                continue
            status, why, exc = self._commit(conn, [p], tx, False, force_xid)
            if status == "not" and exc is not None:
                why = self._failed_before_commit(conn, exc, True, [p])
            self._settle(p, status, why, out)
            if exc is not None and not isinstance(exc, Exception):
                raise exc

    def _settle(self, p: _Part, status: str, why: str, out: list[Outcome | None], kept: bool = False) -> None:
        """The part's outcomes, and the journal's state after its transaction."""
        j = p.j
        if status == "ok" and not kept:
            with j._mu:
                if p.rows:
                    j._committed = max(j._committed, p.rows[-1][0])
                elif j._shared:
                    j._committed = max(j._committed, p.base)
                j._buffer.clear()
                j._buffer_bytes = 0
                j._unsynced = p.level != "sync" and (j._unsynced or bool(p.rows))
        elif status == "lost":
            j._fail_stop(why + "; whether the batch is in the journal is known only to the server")
        level: Durability = "buffered" if kept else p.level
        if not p.steps:
            p.steps = [_Step(_BARRIER) if isinstance(it, _Barrier) else _Step(_NEW, 0, it.key) for it in p.items]
        for i, o in zip(p.at, j._outcomes(p.items, p.steps, status, level, why), strict=True):
            out[i] = o

    def _begin(self, conn: Conn, level: Durability) -> None:
        conn.execute(_BEGIN[self.sync_setting if level == "sync" else "off"])
        if self.no_buffer:  # writer="shared": one journal, the append lock in every transaction
            j = next(iter(self.members))
            ms = max(1, int(j._shared_lock_timeout_s * 1000))
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{ms}ms",))
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (j._append_key,))

    def _lookup(self, conn: Conn, parts: list[_Part]) -> dict[str, list[tuple[str, int, bytes]]]:
        """The stored rows holding the batch's keys, by journal: one query for every journal."""
        names: list[str] = []
        keys: list[str] = []
        for p in parts:
            for key in sorted({it.key for it in p.items if it.key is not None}):
                names.append(p.j._name)
                keys.append(key)
        found: dict[str, list[tuple[str, int, bytes]]] = {}
        if not keys:
            return found
        for name, key, seq, frame in conn.execute(self.q.keys_of, (names, keys)).fetchall():
            found.setdefault(str(name), []).append((str(key), int(seq), bytes(frame)))
        return found

    def _commit(
        self, conn: Conn, parts: list[_Part], level: Durability, begun: bool, force_xid: bool
    ) -> tuple[str, str, BaseException | None]:
        """Write the parts' rows in the transaction (begun here unless ``begun``) and COMMIT it:
        ("ok", ""), ("not", why): nothing written, or ("lost", why): the answer to COMMIT never came."""
        committing = False
        try:
            names: list[str] = []
            seqs: list[int] = []
            keys: list[str | None] = []
            frames: list[bytes] = []
            channels: list[str] = []
            lasts: list[str] = []
            for p in parts:
                for seq, enc in p.rows:
                    names.append(p.j._name)
                    seqs.append(seq)
                    keys.append(enc.key)
                    frames.append(records.frame_of(enc, seq, p.j._salt))
                if p.rows:
                    channels.append(p.j._channel)
                    lasts.append(str(p.rows[-1][0]))
            if not begun and not self.no_buffer and seqs:
                begun = True
                with conn.pipeline():  # BEGIN, the durability and the INSERT: one round trip
                    conn.execute("BEGIN")
                    conn.execute(_SET_COMMIT[self.sync_setting if level == "sync" else "off"])
                    conn.execute(self.q.insert, (names, seqs, keys, frames, channels, lasts))
                seqs = []
            if not begun:
                self._begin(conn, level)
                begun = True
            if seqs:
                conn.execute(self.q.insert, (names, seqs, keys, frames, channels, lasts))
            elif force_xid:
                conn.execute("SELECT txid_current()")  # a commit record: the COMMIT waits for the WAL flush
            committing = True
            self.commits += 1
            conn.execute("COMMIT")
            return "ok", "", None
        except BaseException as exc:
            if committing:
                why = f"the connection failed while COMMIT was on its way ({_words(exc)})"
                # Not idle (reusable) is lost too: still inside the transaction, the next batch's
                # COMMIT on this connection would commit this one's rows, reported AckLost.
                if not reusable(conn):
                    self.lose(_unusable(conn, exc))
                return "lost", why, exc
            return "not", "", exc

    def _failed_before_commit(self, conn: Conn, exc: BaseException, begun: bool, parts: list[_Part]) -> str:
        """Roll back after a failure before COMMIT; fail-stop where a journal cannot go on."""
        why = f"the transaction failed before COMMIT and was rolled back ({_words(exc)})"
        if conn.broken or conn.closed:
            self.lose(_unusable(conn, exc))
            return f"the connection to the server was lost before COMMIT ({_words(exc)}); nothing was written"
        rolled_back = True
        if begun:
            try:
                conn.execute("ROLLBACK")
            except BaseException:
                rolled_back = False
        if not rolled_back or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.lose(f"a transaction could not be rolled back cleanly ({_words(exc)})")
        elif not isinstance(exc, Exception):
            for p in parts:
                p.j._fail_stop(f"interrupted while writing ({type(exc).__name__})")
        elif len(parts) == 1 and isinstance(exc, psycopg.errors.IntegrityError):
            parts[0].j._fail_stop(
                f"the table holds a record this writer did not know of ({_words(exc)}): another writer "
                "bypassed the lock, or the journal was changed by hand"
            )
        elif len(parts) == 1 and parts[0].carried:
            parts[0].j._fail_stop(f"buffered records were lost with a failed transaction ({_words(exc)})")
        return why

    def _run_after(self, ops: list[_Op]) -> None:
        for op in ops:
            conn = self.conn
            if self.failed is not None or conn.closed or conn.broken:
                op.error = JournalFailStoppedError(self.failed or "the writer's connection is closed")
                continue
            try:
                op.result = op.fn(conn)
            except BaseException as exc:
                op.error = exc
                if not reusable(conn):
                    self.lose(_unusable(conn, exc))


class StoreWriter:
    """The writer a PostgresStore's journals share (journal/remote/postgres_store.py): made by the
    first journal opened for writing, ended when the last one closes; one that failed is
    replaced for the journals opened after."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._writer: _Writer | None = None

    def attach(self, j: PostgresJournal) -> _Writer:
        with self._mu:
            w = self._writer
            if w is None or w.failed is not None or w.retired:
                conn = j._connect()
                try:
                    row = conn.execute("SHOW synchronous_commit").fetchone()
                except psycopg.Error as exc:
                    conn.close()
                    raise ServerIOError(j.path, "opening", exc, CONNECT_ADVICE) from exc
                setting = "remote_apply" if row is not None and row[0] == "remote_apply" else "on"
                w = self._writer = _Writer(conn, j._schema, setting, shared=True)
            with w.mu:
                w.members.add(j)
            return w

    def detach(self, j: PostgresJournal, w: _Writer) -> None:
        with self._mu:
            with w.mu:
                w.members.discard(j)
                last = not w.members
                if last:
                    w.retired = True
            if last and self._writer is w:
                self._writer = None
        if last:
            w.close()

    @property
    def writer(self) -> _Writer | None:
        """The live writer (None before the first journal or after the last closed)."""
        return self._writer


class PostgresJournal:
    """A journal in a PostgreSQL table (journal.api.Journal). Made by ``open_journal``."""

    def __init__(
        self,
        parsed: RemoteURL,
        schema: str,
        readonly: bool,
        shared: bool,
        options: Options,
        connect_timeout_s: float,
        shared_lock_timeout_s: float,
        store_writer: StoreWriter | None = None,
    ) -> None:
        if parsed.journal is None:
            raise InvalidArgumentError("a journal URL names its journal (?journal=NAME)")
        self._url = parsed
        self._name: str = parsed.journal
        self._schema = schema
        self._path = parsed.display()  # its schema among its parameters
        self._readonly = readonly
        self._shared = shared
        self.options = options
        self._connect_timeout_s = connect_timeout_s
        self._shared_lock_timeout_s = shared_lock_timeout_s
        self._q = _Queries(schema)
        self._lock_key = writer_lock_key(schema, self._name)
        self._append_key = _hash64("journal-append", schema, self._name)
        self._schema_key = _hash64("journal-schema", schema)
        self._channel = "journal_" + hashlib.blake2b(f"{schema}\x00{self._name}".encode(), digest_size=8).hexdigest()
        query = dict(parse_qsl(urlsplit(parsed.server).query))
        self._app_name_given = "application_name" in query
        self._mu = threading.Lock()
        # The writer's connection and group commit (every write, and the writer lock): this
        # handle's own, or the one its store's journals share (``store_writer``).
        self._writer: _Writer | None = None
        self._store_writer = store_writer
        self._detached = False  # a store journal that let go of its lock: nothing more is written
        self._reader: Conn | None = None  # reads, point reads, resolve
        self._reader_mu = threading.Lock()
        self._calls = itertools.count(1)
        self._journal_id = b""
        self._salt = 0
        self._first_seq = 1
        self._committed = 0  # the last seq in the table as this handle knows it
        self._buffer: list[tuple[int, Encoded]] = []  # buffered records, in seq order
        self._buffer_bytes = 0
        self._unsynced = True  # commits at "flush" (here, or by the writer before) may await the WAL flush
        self._failed: str | None = None
        self._holds_lock = False  # a store journal: its lock on the shared writer connection
        self._closed = False
        self._fsync_on = True
        self._sync_setting = "on"
        self._recovery = RecoveryReport(tail="clean")

    # --- the protocol's properties -------------------------------------------------------

    @property
    def path(self) -> str:
        """The journal's URL, without a password."""
        return self._path

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery

    @property
    def last_seq(self) -> int:
        """The highest seq handed out (buffered records of this handle included); a shared
        writer's or a reader's: the highest it has seen."""
        with self._mu:
            return self._committed + len(self._buffer)

    @property
    def backend_pid(self) -> int | None:
        """The server backend pid of the writer's connection (None for a read-only handle): the
        session an operator would end with pg_terminate_backend to take the journal away."""
        w = self._writer
        return None if w is None or w.conn.closed else int(w.conn.info.backend_pid)

    @property
    def writer_mode(self) -> str:
        return "shared" if self._shared else "exclusive"

    # --- opening -------------------------------------------------------------------------

    def _connect(self) -> Conn:
        params: dict[str, Any] = {
            "connect_timeout": max(2, math.ceil(self._connect_timeout_s)),
            "keepalives": 1,
            "keepalives_idle": KEEPALIVES_IDLE_S,
            "keepalives_interval": KEEPALIVES_INTERVAL_S,
            "keepalives_count": KEEPALIVES_COUNT,
            "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
        }
        if not self._app_name_given:
            params["application_name"] = f"journal pid {os.getpid()} on {socket.gethostname()}"[:63]
        try:
            return psycopg.connect(self._url.server, autocommit=True, **params)
        except psycopg.Error as exc:
            raise ServerIOError(self.path, "connecting to", exc, CONNECT_ADVICE) from exc

    def _open(self, create: bool, lock_timeout_s: float, first_seq: int) -> None:
        conn = self._connect()
        actions: list[str] = []
        try:
            if create:
                actions.extend(self._ensure_schema(conn))
            elif not self._schema_exists(conn):
                raise JournalNotFoundError(self.path)
            if not self._readonly:
                if self._store_writer is None:
                    self._take_lock(conn, lock_timeout_s)
                else:
                    self._take_lock_on_store_writer(conn, lock_timeout_s)
            row = conn.execute(self._q.journal, (self._name,)).fetchone()
            if row is None:
                if not create:
                    raise JournalNotFoundError(self.path)
                conn.execute(self._q.new_journal, (self._name, records.new_journal_id(), first_seq))
                row = conn.execute(self._q.journal, (self._name,)).fetchone()
                if row is None:
                    raise JournalNotFoundError(self.path)  # dropped at this very moment
                actions.append(f"created journal {self._name!r} in schema {self._schema!r}")
            self._journal_id = bytes(row[0])
            self._salt = records.salt_of(self._journal_id)
            self._first_seq = int(row[1])
            last = conn.execute(self._q.last, (self._name,)).fetchone()
            self._committed = int(last[0]) if last is not None and last[0] is not None else self._first_seq - 1
            fsync = conn.execute("SHOW fsync").fetchone()
            self._fsync_on = fsync is not None and str(fsync[0]).lower() == "on"
            commit = conn.execute("SHOW synchronous_commit").fetchone()
            self._sync_setting = "remote_apply" if commit is not None and commit[0] == "remote_apply" else "on"
            if self._failed is not None:  # the store's writer connection was lost meanwhile
                raise ServerIOError(self.path, "opening", RuntimeError(self._failed), CONNECT_ADVICE)
        except psycopg.Error as exc:
            conn.close()
            self._let_go()
            raise ServerIOError(self.path, "opening", exc, CONNECT_ADVICE) from exc
        except BaseException:
            conn.close()
            self._let_go()
            raise
        if not self._fsync_on:
            actions.append("the server runs with fsync = off: durability 'sync' is refused")
        if self._readonly:
            self._reader = conn
        elif self._store_writer is None:
            self._writer = _Writer(conn, self._schema, self._sync_setting, shared=False, no_buffer=self._shared)
            self._writer.members.add(self)
        else:
            conn.close()  # the records go through the store's writer; reads open their own
        self._recovery = RecoveryReport(segments=0, last_seq=self._committed, tail="clean", actions=actions)

    def _schema_exists(self, conn: Conn) -> bool:
        row = conn.execute(
            "SELECT to_regclass(format('%%I.%%I', %s::text, 'journals')) IS NOT NULL "
            "AND to_regclass(format('%%I.%%I', %s::text, 'records')) IS NOT NULL",
            (self._schema, self._schema),
        ).fetchone()
        return bool(row and row[0])

    def _ensure_schema(self, conn: Conn) -> list[str]:
        if self._schema_exists(conn):
            return []
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._schema_key,))
            row = conn.execute("SELECT to_regnamespace(%s::text) IS NOT NULL", (self._schema,)).fetchone()
            # CREATE SCHEMA needs the CREATE privilege on the database even when the schema
            # exists, so it is only sent when it does not.
            for stmt in self._q.create[1:] if row and row[0] else self._q.create:
                conn.execute(stmt)
            conn.execute("COMMIT")
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
            raise
        return [f"created the tables in schema {self._schema!r}"]

    def _take_lock(self, conn: Conn, lock_timeout_s: float) -> None:
        shared = self._shared
        if lock_timeout_s <= 0:
            fn: LiteralString = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
            row = conn.execute(sql.SQL("SELECT {}(%s)").format(sql.Identifier(fn)), (self._lock_key,)).fetchone()
            got = bool(row and row[0])
        else:
            fn = "pg_advisory_lock_shared" if shared else "pg_advisory_lock"
            ms = max(1, int(lock_timeout_s * 1000))
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{ms}ms",))
            try:
                conn.execute(sql.SQL("SELECT {}(%s)").format(sql.Identifier(fn)), (self._lock_key,))
                got = True
            except psycopg.errors.LockNotAvailable:
                got = False
            finally:
                conn.execute("RESET lock_timeout")
        if not got:
            raise ServerJournalLockedError(self.path, self._holders(conn), lock_timeout_s)

    def _take_lock_on_store_writer(self, conn: Conn, lock_timeout_s: float) -> None:
        """The writer lock, held on the store's shared writer connection (taken in the leader's
        turn, so no batch is in flight on it meanwhile). Waiting (``lock_timeout_s``) happens on
        ``conn``, this open's own connection, so the shared one never blocks: wait there until
        the holder lets go, let go at once, and try again on the shared one."""
        assert self._store_writer is not None
        w = self._store_writer.attach(self)
        self._writer = w
        key = self._lock_key
        deadline = time.monotonic() + lock_timeout_s

        def try_lock(c: Conn) -> bool:
            if key in w.held_keys:
                return False  # another handle of this store holds it on this connection
            row = c.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if row and row[0]:
                w.held_keys.add(key)
                return True
            return False

        while True:
            op = _Op(next(self._calls), self, try_lock, before=True)
            w.gc.submit([op], "buffered")
            if op.error is not None:
                if isinstance(op.error, psycopg.Error):
                    raise op.error
                raise ServerIOError(self.path, "opening", op.error, CONNECT_ADVICE)
            if op.result:
                self._holds_lock = True
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerJournalLockedError(self.path, self._holders(conn), lock_timeout_s)
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, int(left * 1000))}ms",))
            try:
                conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            except psycopg.errors.LockNotAvailable:
                raise ServerJournalLockedError(self.path, self._holders(conn), lock_timeout_s) from None
            finally:
                conn.execute("RESET lock_timeout")
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def _let_go(self) -> None:
        """A store journal whose open failed: release its lock and its place on the writer."""
        w, sw = self._writer, self._store_writer
        if w is None or sw is None:
            return
        self._writer = None
        try:
            if self._holds_lock:
                w.gc.submit([_Op(next(self._calls), self, functools.partial(self._unlock, w=w))], "buffered")
        finally:
            sw.detach(self, w)

    def _unlock(self, conn: Conn, w: _Writer) -> None:
        """Let go of the writer lock on the shared connection (the leader runs it after the
        batch, so none of this journal's records is written after it)."""
        self._detached = True
        if self._holds_lock:
            self._holds_lock = False
            w.held_keys.discard(self._lock_key)
            conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key,))

    def _holders(self, conn: Conn) -> list[LockHolder]:
        u = self._lock_key & 0xFFFF_FFFF_FFFF_FFFF
        rows = conn.execute(
            "SELECT l.pid, host(a.client_addr), a.client_port, a.application_name, l.mode "
            "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid ORDER BY l.pid",
            (u >> 32, u & 0xFFFF_FFFF),
        ).fetchall()
        return [
            LockHolder(int(r[0]), r[1], None if r[2] is None else int(r[2]), r[3], str(r[4])) for r in rows
        ]

    # --- appending -----------------------------------------------------------------------

    def _check_writable(self, what: str = "append") -> None:
        if self._closed:
            raise JournalClosedError()
        if self._readonly:
            raise ReadOnlyError(what)
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        """Append one event; its outcome (docs/GUARANTEES.md)."""
        return self.append_many([event], durability, [idempotency_key], synthetic)[0]

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        """Append events in order; one outcome per event. A call with idempotency keys is one
        transaction (a conflict anywhere in it writes nothing); one without is cut into
        transactions of at most BATCH_RECORDS_MAX records and BATCH_BYTES_MAX bytes."""
        level = check_durability(durability)
        self._check_writable()
        events = list(events)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(events)
        if len(keys) != len(events):
            raise InvalidArgumentError(
                f"idempotency_keys must have one entry per event ({len(keys)} keys for {len(events)} events); "
                "nothing was written"
            )
        for k in keys:
            _check_key(k)
        encoded = [encode_event(e, k, synthetic, self.options) for e, k in zip(events, keys, strict=True)]
        if level == "sync" and not self._fsync_on:
            raise SyncNotDurableError(self.path)
        if not encoded:
            return []
        keyed = any(k is not None for k in keys)
        repeats = repeated_keys(encoded) if keyed else {}
        unique = [it for i, it in enumerate(encoded) if i not in repeats] if repeats else encoded
        call = next(self._calls)
        items = [_Item(enc, call, self) for enc in unique]
        outcomes: list[Outcome] = []
        gc = self._gc()
        if keyed:
            outcomes = gc.submit(list(items), level)
            _raise_planned(outcomes)
            for out in outcomes:
                if isinstance(out, _Conflict):
                    raise IdempotencyConflictError(out.key, out.holder)
        else:
            for chunk in _chunks(items):
                if outcomes and self._failed is not None:
                    reason = f"journal fail-stopped before this record was written: {self._failed}"
                    outcomes.extend([NotCommitted(reason)] * len(chunk))
                    continue
                got = gc.submit(list(chunk), level)
                _raise_planned(got)
                outcomes.extend(got)
        if repeats:
            outcomes = with_repeats(outcomes, repeats, len(encoded))
        return outcomes

    def flush(self) -> None:
        """Write the records this handle buffers. Raises JournalFailStoppedError."""
        self._barrier("flush")

    def sync(self) -> None:
        """Make everything appended so far durable (a commit with synchronous_commit on).
        Raises JournalFailStoppedError, or DurabilityError on a server with fsync = off."""
        if not self._readonly and not self._fsync_on:
            raise SyncNotDurableError(self.path)
        self._barrier("sync")

    def _barrier(self, level: Durability) -> None:
        if self._closed:
            raise JournalClosedError()
        if self._readonly:
            return
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        _raise_planned(self._gc().submit([_Barrier(next(self._calls), self)], level))
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def _lose_writer(self, exc: BaseException) -> None:
        why = f"the connection to the server was lost, and this writer's lock with it ({_words(exc)})"
        if self._writer is not None:
            self._writer.lose(why)
        else:
            self._fail_stop(why)

    def _gc(self) -> GroupCommit:
        w = self._writer
        if w is None:
            raise JournalClosedError()
        return w.gc

    def _fail_stop(self, why: str) -> None:
        with self._mu:
            if self._failed is None:
                self._failed = why

    # The leader's side (_Writer._write): this journal's part of a batch.

    def _buffer_new(self, new_rows: list[tuple[int, Encoded]]) -> bool:
        """Keep a buffered part's records in the client; False if the buffer is full."""
        added = sum(len(enc.spec.stored) for _, enc in new_rows)
        with self._mu:
            if (len(self._buffer) + len(new_rows) > BUFFER_RECORDS_MAX
                    or self._buffer_bytes + added > BUFFER_BYTES_MAX):
                return False
            self._buffer.extend(new_rows)
            self._buffer_bytes += added
        return True

    def _table_last(self, conn: Conn) -> int:
        row = conn.execute(self._q.last, (self._name,)).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else self._first_seq - 1

    def _verify_found(self, rows: list[tuple[str, int, bytes]]) -> dict[str, Record]:
        """The stored records holding a batch's keys (_Writer._lookup), verified."""
        found: dict[str, Record] = {}
        for key, seq, frame in rows:
            rec = records.record_of(frame, seq, self._salt, self.path, self.options.record_size_bytes_max)
            if rec.key != key:
                why = f"the row's key column says {key!r}, its frame {rec.key!r}"
                raise CorruptionError(self.path, 0, seq, why)
            found[key] = rec
        return found

    def _plan(
        self, items: list[Encoded], found: dict[str, Record], base: int
    ) -> tuple[list[_Step], list[tuple[int, Encoded]]]:
        """Seqs for the new records; duplicates and refused calls (a key held by another event)."""
        with self._mu:
            buffered = list(self._buffer)
        next_seq = base + len(buffered) + 1
        known: dict[str, tuple[int, bytes, bool]] = {}
        for seq, enc in buffered:
            if enc.key is not None:
                known[enc.key] = (seq, enc.raw, enc.is_bytes)
        for key, rec in found.items():
            known.setdefault(key, (rec.seq, rec.payload, rec.is_bytes))
        steps: list[_Step] = []
        rows: list[tuple[int, Encoded]] = []
        i = 0
        while i < len(items):
            call = getattr(items[i], "call", -i - 1)
            j = i
            while j < len(items) and getattr(items[j], "call", -j - 1) == call:
                j += 1
            mine: dict[str, tuple[int, bytes, bool]] = {}
            these: list[_Step] = []
            conflict: tuple[str, int] | None = None
            seq = next_seq
            for it in items[i:j]:
                if isinstance(it, _Barrier):
                    these.append(_Step(_BARRIER))
                    continue
                if it.key is not None:
                    hit = mine.get(it.key) or known.get(it.key)
                    if hit is not None:
                        if same_event(hit[1], hit[2], it):
                            these.append(_Step(_DUP, hit[0], it.key))
                            continue
                        conflict = (it.key, hit[0])
                        break
                    mine[it.key] = (seq, it.raw, it.is_bytes)
                these.append(_Step(_NEW, seq, it.key))
                seq += 1
            if conflict is not None:
                steps.extend(_Step(_REFUSED, conflict[1], conflict[0]) for _ in range(j - i))
            else:
                steps.extend(these)
                rows.extend((st.seq, it) for st, it in zip(these, items[i:j], strict=True) if st.kind == _NEW)
                known.update(mine)
                next_seq = seq
            i = j
        return steps, rows

    def _outcomes(self, items: list[Encoded], steps: list[_Step], status: str, level: Durability, why: str) -> list[
        Outcome
    ]:
        out: list[Outcome] = []
        for it, st in zip(items, steps, strict=True):
            if st.kind == _REFUSED:
                out.append(_Conflict(f"idempotency key {st.key!r} holds another event", key=st.key or "",
                                     holder=st.seq))
            elif status == "ok":
                if st.kind == _DUP:
                    out.append(Committed(st.seq, level, True, "idempotency key matched an existing record"))
                else:
                    out.append(Committed(st.seq, level))
            elif status == "not" and st.kind != _DUP:
                out.append(NotCommitted(why))
            else:
                out.append(AckLost(st.seq, why, records.digest_of(it), it.key))
        return out

    # --- reading -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _flush_own(self) -> None:
        """A reader of this handle sees its own buffered appends."""
        if not self._readonly and self._buffer and self._failed is None:
            self.flush()

    def _query(self, query: Query, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """A read on the reader's connection (made on first use; made again once if it was lost)."""
        with self._reader_mu:
            for attempt in (1, 2):
                if self._reader is not None and not reusable(self._reader):
                    self._reader.close()
                    self._reader = None
                if self._reader is None:
                    self._reader = self._connect()
                try:
                    return self._reader.execute(query, params).fetchall()
                except psycopg.Error as exc:
                    if not reusable(self._reader):  # a read is asked again on a new connection, once
                        self._reader.close()
                        self._reader = None
                        if attempt == 1:
                            continue
                    raise ServerIOError(self.path, "reading", exc, CONNECT_ADVICE.replace("; nothing was written",
                                                                                           "")) from exc
        raise ServerIOError(self.path, "reading", RuntimeError("no connection"), CONNECT_ADVICE)

    def _records(self, rows: list[tuple[Any, ...]], expect: int) -> list[Record]:
        out: list[Record] = []
        limit = self.options.record_size_bytes_max
        for seq, frame in rows:
            if int(seq) != expect:
                raise SequenceError(self.path, 0, expect, f"record {expect} is missing: the next row holds seq {seq}")
            out.append(records.record_of(bytes(frame), expect, self._salt, self.path, limit))
            expect += 1
        if out:
            self._saw(out[-1].seq)
        return out

    def _saw(self, seq: int) -> None:
        if self._readonly or self._shared:
            with self._mu:
                self._committed = max(self._committed, seq)

    def read(self, after_seq: int = 0) -> Iterator[Record]:
        """Records with seq > after_seq, in seq order, READ_PAGE_RECORDS rows per query."""
        self._check_open()
        self._flush_own()
        last = max(after_seq, self._first_seq - 1)
        while True:
            rows = self._query(self._q.page, (self._name, last, READ_PAGE_RECORDS))
            if rows and int(rows[0][0]) != last + 1 and last + 1 < int(rows[0][0]) == self._refresh_first():
                last = self._first_seq - 1  # a drop_prefix (another handle's) moved the journal's start
            recs = self._records(rows, last + 1)
            yield from recs
            if len(rows) < READ_PAGE_RECORDS:
                return
            last = recs[-1].seq

    def _refresh_first(self) -> int:
        """The journal's first seq as the server has it now (a drop_prefix may have moved it)."""
        rows = self._query(self._q.journal, (self._name,))
        if rows:
            with self._mu:
                self._first_seq = max(self._first_seq, int(rows[0][1]))
        return self._first_seq

    # --- retention (journal.api.Retention) -------------------------------------------------

    @property
    def first_seq(self) -> int:
        """The seq of the journal's first record: 1 until drop_prefix drops a prefix."""
        return self._first_seq

    def seal(self) -> None:
        """Nothing to seal on a server: every record can be dropped on its own. Checks only that
        the handle can write (the file engine's seal() ends a segment)."""
        self._check_writable("seal")

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        """Delete the records before ``before_seq`` (never past the last one), in one transaction
        committed at "sync" with the journal's new first seq; what remains verifies as before.

        Runs on the writer's connection while no batch is in flight. A failure before the
        commit changes nothing (ServerIOError); one while the commit's answer is awaited leaves
        it unknown: the handle fail-stops, and reopening tells (``first_seq``). Exclusive
        writers only.
        """
        if isinstance(before_seq, bool) or not isinstance(before_seq, int) or before_seq < 1:
            raise InvalidArgumentError(f"before_seq must be an int >= 1, not {before_seq!r}")
        if self._shared:
            raise InvalidArgumentError("drop_prefix needs the journal opened with writer='exclusive'")
        self._check_writable("drop_prefix")
        self.flush()
        op = _Op(next(self._calls), self, lambda conn: self._drop(conn, before_seq))
        self._gc().submit([op], "flush")  # run by the leader after its batch: nothing else on the connection
        drop: PrefixDrop = op.outcome()
        return drop

    def _drop(self, conn: Conn, before_seq: int) -> PrefixDrop:
        if conn.closed or self._failed is not None or self._detached:
            raise JournalFailStoppedError(self._failed or "the writer's connection is closed")
        first = min(before_seq, self._committed + 1)
        if first <= self._first_seq:
            return PrefixDrop(self._first_seq)
        committing = False
        try:
            conn.execute(_BEGIN[self._sync_setting])
            row = conn.execute(self._q.drop, (self._name, first)).fetchone()
            conn.execute(self._q.move_first, (first, self._name))
            committing = True
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            if committing:
                self._fail_stop(f"the commit of a drop_prefix was lost: {_words(exc)}")
                if conn.broken or conn.closed:
                    self._lose_writer(exc)
                raise ServerIOError(self.path, "committing a drop_prefix (its outcome is unknown: reopen the journal "
                                    "and read first_seq) of", exc, CONNECT_ADVICE) from exc
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
            else:
                self._lose_writer(exc)
            raise ServerIOError(self.path, "dropping a prefix (nothing was dropped) of", exc, CONNECT_ADVICE) from exc
        with self._mu:
            self._first_seq = first
        dropped = int(row[0]) if row is not None and row[0] is not None else 0
        return PrefixDrop(first, [], dropped)

    def get(self, seq: int) -> Record | None:
        """The record at ``seq``, or None if the journal does not hold it."""
        self._check_open()
        if seq < self._first_seq:
            return None
        self._flush_own()
        rows = self._query(self._q.one, (self._name, seq))
        if not rows:
            return None
        rec = records.record_of(bytes(rows[0][0]), seq, self._salt, self.path, self.options.record_size_bytes_max)
        self._saw(seq)
        return rec

    def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Record]:
        """Records as they are committed: LISTEN on the journal's channel (every committing
        transaction notifies), and a read every ``poll_interval_s`` whatever comes, so a lost
        notification never stalls. Until ``stop`` is set or nothing came for ``idle_timeout_s``."""
        self._check_open()
        last = max(after_seq, self._first_seq - 1)
        idle_since = time.monotonic()
        conn: Conn | None = None
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))
        try:
            while not (stop is not None and stop.is_set()) and not self._closed:
                if conn is None:
                    conn = self._connect()
                    conn.execute(listen)
                got = False
                try:
                    while True:
                        rows = conn.execute(self._q.page, (self._name, last, READ_PAGE_RECORDS)).fetchall()
                        recs = self._records(rows, last + 1)
                        for rec in recs:
                            got = True
                            last = rec.seq
                            yield rec
                        if len(rows) < READ_PAGE_RECORDS:
                            break
                except psycopg.OperationalError:
                    conn.close()
                    conn = None  # the server went away: connect again on the next round
                now = time.monotonic()
                if got:
                    idle_since = now
                    continue
                if idle_timeout_s is not None and now - idle_since >= idle_timeout_s:
                    return
                wait_s = poll_interval_s
                if idle_timeout_s is not None:
                    wait_s = max(0.0, min(wait_s, idle_since + idle_timeout_s - now))
                if conn is None:
                    if stop is not None:
                        stop.wait(wait_s)
                    else:
                        time.sleep(wait_s)
                    continue
                try:
                    for _ in conn.notifies(timeout=wait_s, stop_after=1):
                        pass
                except psycopg.OperationalError:
                    conn.close()
                    conn = None
        finally:
            if conn is not None:
                conn.close()

    def resolve(self, outcome: Outcome) -> Outcome:
        """Turn an AckLost into Committed or NotCommitted from what the table holds.

        Meaningful on a handle opened for writing after the failure: holding the writer lock
        proves the failed writer's connection is gone, so a record that is not there now never
        will be. A Committed answer is at "sync" once the server's WAL flush has passed it.
        """
        if not isinstance(outcome, AckLost):
            return outcome
        self._check_open()
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        self._flush_own()
        if outcome.key is not None:
            rows = self._query(self._q.keys, (self._name, [outcome.key]))
            if rows:
                seq = int(rows[0][1])
                records.record_of(bytes(rows[0][2]), seq, self._salt, self.path, self.options.record_size_bytes_max)
                return Committed(seq, self._durable_now(), duplicate=True, reason="resolved by idempotency key")
        rec = self.get(outcome.seq)
        if rec is not None and xxhash.xxh64_intdigest(rec.payload) == outcome.digest and rec.key == outcome.key:
            return Committed(outcome.seq, self._durable_now(), reason="resolved: the record is in the journal")
        if rec is None:
            return NotCommitted("resolved: the journal ends before this record's seq")
        return NotCommitted("resolved: another record holds this record's seq")

    def _durable_now(self) -> Durability:
        """"sync" once the server's WAL is flushed past what was just read, else "flush"."""
        if not self._fsync_on:
            return "flush"
        try:
            at = self._query("SELECT pg_current_wal_insert_lsn()::text", ())
            deadline = time.monotonic() + RESOLVE_FLUSH_WAIT_S
            check: Query = "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn"
            while True:
                done = self._query(check, (at[0][0],))
                if done and done[0][0]:
                    return "sync"
                if time.monotonic() >= deadline:
                    return "flush"
                time.sleep(0.01)
        except JournalIOError:
            return "flush"

    # --- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Write buffered records (at "flush"), end the connections (the writer lock goes with
        the writer's). Idempotent. Raises JournalFailStoppedError if the final write failed."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
        failed_before = self._failed
        w, sw = self._writer, self._store_writer
        try:
            if w is not None and sw is None:
                if self._failed is None:
                    w.gc.submit([_Barrier(next(self._calls), self)], "flush")
                w.close()
            elif w is not None and sw is not None:
                # Write what this journal buffers, then let go of its lock on the shared
                # connection, in one turn of the leader (even when this journal fail-stopped and
                # the connection lives on: the lock must not outlive the handle).
                ops: list[Encoded] = [] if self._failed is not None else [_Barrier(next(self._calls), self)]
                try:
                    w.gc.submit([*ops, _Op(next(self._calls), self, functools.partial(self._unlock, w=w))], "flush")
                finally:
                    self._detached = True
                    sw.detach(self, w)
        finally:
            if self._reader is not None:
                try:
                    self._reader.close()
                except psycopg.Error:
                    pass
        if self._failed is not None and failed_before is None:
            raise JournalFailStoppedError(self._failed)

    def __enter__(self) -> PostgresJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresJournal({self.path!r}, {self.writer_mode}{', readonly' if self._readonly else ''})"


def _raise_planned(outcomes: list[Outcome]) -> None:
    for out in outcomes:
        if isinstance(out, _Raised) and out.error is not None:
            raise out.error


def _unusable(conn: Conn, exc: BaseException) -> str:
    """Why a writer whose connection is not reusable after ``exc`` cannot go on."""
    if conn.closed:
        return f"the connection to the server was lost, and this writer's lock with it ({_words(exc)})"
    return (f"the connection was left inside a transaction or a command ({_words(exc)}): nothing more can be "
            "committed on it")


def _words(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _number(name: str, value: Any, low: float, high: float) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a number of seconds, not {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(x) or not low <= x <= high:
        raise InvalidArgumentError(f"{name} must be between {low:g} and {high:g} seconds, not {value!r}")
    return x


def open_journal(
    parsed: RemoteURL,
    create: bool,
    readonly: bool,
    lock_timeout_s: float = 0.0,
    writer: str = "exclusive",
    store_writer: StoreWriter | None = None,
    **options: Any,
) -> PostgresJournal:
    """Open (``create``: make) the journal a postgresql:// URL names (docs/REMOTE.md).

    Options besides the common ones: ``record_size_bytes_max`` and ``compress`` (the encoding's,
    as the file engine takes them), ``shared_lock_timeout_s`` (a shared writer's wait for the
    append lock per transaction), ``first_seq`` (the first seq of a journal this call creates).
    ``store_writer``: the writer a PostgresStore's journals share (an exclusive writer only; a
    read-only or ``writer="shared"`` handle keeps its own connection).
    """
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(unknown)} for a PostgreSQL journal; it takes create, readonly, "
            f"lock_timeout_s, writer and {', '.join(sorted(OPTIONS))} (the file engine's storage options, "
            "such as segment_size_bytes, do not apply)"
        )
    if parsed.journal is None:
        raise InvalidArgumentError(f"{parsed.display()} names no journal: add ?journal=NAME")
    if create and readonly:
        raise InvalidArgumentError("create=True needs a writable journal; drop readonly=True")
    if writer not in WRITER_MODES:
        raise InvalidArgumentError(f"writer must be one of {WRITER_MODES}, not {writer!r}")
    schema = parsed.options.get("schema", SCHEMA_DEFAULT)
    if not schema or "\x00" in schema or len(schema.encode("utf-8", "surrogatepass")) > SCHEMA_NAME_BYTES_MAX:
        raise InvalidArgumentError(f"schema must be 1 to {SCHEMA_NAME_BYTES_MAX} bytes without NUL, not {schema!r}")
    connect_timeout_s = _number(
        "connect_timeout_s", parsed.options.get("connect_timeout_s", CONNECT_TIMEOUT_S_DEFAULT), 0.001,
        CONNECT_TIMEOUT_S_MAX,
    )
    lock_timeout_s = _number("lock_timeout_s", lock_timeout_s, 0.0, LOCK_TIMEOUT_S_MAX)
    shared_lock_timeout_s = _number(
        "shared_lock_timeout_s", options.get("shared_lock_timeout_s", SHARED_LOCK_TIMEOUT_S_DEFAULT), 0.001,
        LOCK_TIMEOUT_S_MAX,
    )
    first_seq = options.get("first_seq", 1)
    if isinstance(first_seq, bool) or not isinstance(first_seq, int) or not 1 <= first_seq < 2**63:
        raise InvalidArgumentError(f"first_seq must be an int from 1 to 2**63 - 1, not {first_seq!r}")
    try:
        opts = Options(
            record_size_bytes_max=options.get("record_size_bytes_max", fmt.RECORD_SIZE_BYTES_MAX_DEFAULT),
            compress=bool(options.get("compress", True)),
        )
        opts.check()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    shared = writer == "shared" and not readonly
    j = PostgresJournal(
        parsed, schema, readonly, shared, opts, connect_timeout_s, shared_lock_timeout_s,
        None if readonly or shared else store_writer,
    )
    j._open(create, lock_timeout_s, first_seq)
    return j


if TYPE_CHECKING:  # mypy holds this backend to journal.api's protocol

    def _conforms(j: PostgresJournal) -> tuple[Journal, Retention]:
        return j, j


__all__ = [
    "BUFFER_BYTES_MAX",
    "READ_PAGE_RECORDS",
    "LockHolder",
    "PostgresJournal",
    "ServerIOError",
    "ServerJournalLockedError",
    "StoreWriter",
    "SyncNotDurableError",
    "open_journal",
]
