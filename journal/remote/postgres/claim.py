"""The writer's claim on a PostgreSQL journal: its advisory lock, who holds it, letting go of it.

An exclusive writer holds a session-level advisory lock (a 64-bit hash of schema and name,
connection.writer_lock_key) on the one connection it writes through, for the life of the
handle, and lets go of it before it closes that connection (commit.py, ``_Writer.close``: the
server ends a closed session only after the client's close returned); the server releases it
when that connection ends, so a writer whose connection was lost can never write again
(nothing it sends reaches the table), and the ``(journal, seq)`` key refuses a row at a seq
that exists. ``writer="shared"``: each handle holds the same lock in
share mode (so shared writers exclude an exclusive one and the reverse), and every transaction
takes a second, transaction-level advisory lock (commit.py, ``_Writer._begin``).

A store's journals hold their locks on the store's one writer connection (many on one
connection), taken and let go of in the leader's turn of its group commit (``_Op``), and let go
of with ``pg_advisory_unlock`` when the journal closes. Who holds a lock is read from pg_locks
and pg_stat_activity (LockHolder) for the error a writer that cannot have it raises.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from journal.errors import JournalError, JournalLockedError
from journal.remote.postgres.client import psycopg, sql
from journal.remote.postgres.commit import _Op, _Writer
from journal.remote.postgres.connection import Conn
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError
from journal.remote.postgres.state import JournalState

if TYPE_CHECKING:  # the type checker's word only (Python 3.10's typing has none)
    from typing import LiteralString

_APP_NAME_PID = re.compile(r"^journal pid (\d+)")


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



class ClaimPart(JournalState):
    """Taking and letting go of the writer lock (PostgresJournal's part)."""

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
