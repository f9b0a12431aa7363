"""A schema of journals on PostgreSQL: the ``journal.api.Store`` of ``postgresql://...`` URLs.

    store = journal.store("postgresql://127.0.0.1:5432/test?schema=agents")
    with store.open("t-42", create=True) as j: ...

The journals are the rows of ``<schema>.journals``; each operation on the set of journals is
one transaction, so it is whole or absent after a crash, as on files:

- ``delete``: the journal's records and its row go in one transaction, which first takes the
  journal's writer lock (``pg_try_advisory_xact_lock`` on the key its writers hold): a journal
  open for writing anywhere is not deleted under its writer (``JournalLockedError``);
- ``copy``: server-side, one ``INSERT ... SELECT`` of the source's rows under the target's name
  in one transaction, the target given the source's journal id so that every copied frame
  verifies as it is (the file engine's forks share their segments' id the same way). The copy
  is the source's committed records at the statement's snapshot.

Group commit across journals. The journals a store opens for writing (exclusive writers) share
one writer connection and one group commit (``postgres.StoreWriter``): appends of many
journals from many threads go into one transaction, one multi-row ``INSERT`` and one
``COMMIT``, so one WAL flush, while each journal keeps its own seqs, idempotency keys,
buffer, outcomes and fail-stop. Each journal's writer lock is a session-level advisory lock on
that connection, let go of (``pg_advisory_unlock``) when the journal closes; the connection
ends with the last of them. Its loss fail-stops every journal on it (their locks went with it):
each is opened again and resolve() answers for its AckLost. A statement refused in one
journal's part (a constraint: a row its writer did not know of) rolls the batch back and the
parts are written again one transaction each, so the other journals' records commit and only
that journal gets NotCommitted (and fail-stops). Read-only and ``writer="shared"`` handles keep
their own connection, as ``journal.open`` gives every journal.

Names are checked as on files (``journal.engine.store.check_store_name``), so an adapter's
names are valid on every backend.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from journal.api import Journal, JournalLockedError, JournalNotFoundError
from journal.engine.store import check_store_name
from journal.remote import postgres
from journal.remote.url import RemoteURL


class PostgresStore:
    def __init__(self, parsed: RemoteURL, **options: Any) -> None:
        self._url = parsed
        self._options = options
        self._schema = parsed.options.get("schema", postgres.SCHEMA_DEFAULT)
        self._journals = sql.Identifier(self._schema, "journals")
        self._records = sql.Identifier(self._schema, "records")
        self._writer = postgres.StoreWriter()

    @property
    def location(self) -> str:
        return self._url.display()

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
        target = self._url.with_journal(check_store_name(name))
        return postgres.open_journal(
            target, create=create, readonly=readonly, store_writer=self._writer, **{**self._options, **options}
        )

    @property
    def commits(self) -> int:
        """COMMITs the shared writer connection sent so far (0 when no journal is open to write)."""
        w = self._writer.writer
        return 0 if w is None else w.commits

    @property
    def backend_pid(self) -> int | None:
        """The server backend pid of the shared writer connection (None when no journal is open
        to write): the session pg_terminate_backend would end, fail-stopping every journal on it."""
        w = self._writer.writer
        return None if w is None or w.conn.closed else int(w.conn.info.backend_pid)

    def exists(self, name: str) -> bool:
        check_store_name(name)
        with self._connect() as conn:
            if not self._tables(conn):
                return False
            row = conn.execute(sql.SQL("SELECT 1 FROM {} WHERE name = %s").format(self._journals), (name,)).fetchone()
            return row is not None

    def names(self) -> list[str]:
        with self._connect() as conn:
            if not self._tables(conn):
                return []
            rows = conn.execute(sql.SQL("SELECT name FROM {} ORDER BY name").format(self._journals)).fetchall()
            return [str(r[0]) for r in rows]

    def delete(self, name: str) -> None:
        check_store_name(name)
        with self._connect() as conn:
            if not self._tables(conn):
                return
            with conn.transaction():
                got = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (self._writer_key(name),)).fetchone()
                if not (got and got[0]):
                    raise JournalLockedError(self._where(name), None)
                conn.execute(sql.SQL("DELETE FROM {} WHERE journal = %s").format(self._records), (name,))
                conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(self._journals), (name,))

    def copy(self, source: str, target: str) -> None:
        check_store_name(source)
        check_store_name(target)
        with self._connect() as conn:
            if not self._tables(conn):
                raise JournalNotFoundError(self._where(source))
            with conn.transaction():
                # The target's writer key: nobody opens the target while it is being made.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._writer_key(target),))
                exists = sql.SQL("SELECT id, first_seq FROM {} WHERE name = %s").format(self._journals)
                if conn.execute(exists, (target,)).fetchone() is not None:
                    raise FileExistsError(f"journal {target!r} exists in {self.location}; delete it before copying")
                src = conn.execute(exists, (source,)).fetchone()
                if src is None:
                    raise JournalNotFoundError(self._where(source))
                conn.execute(
                    sql.SQL("INSERT INTO {} (name, id, first_seq) VALUES (%s, %s, %s)").format(self._journals),
                    (target, src[0], src[1]),
                )
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (journal, seq, key, frame) "
                        "SELECT %s, seq, key, frame FROM {} WHERE journal = %s"
                    ).format(self._records, self._records),
                    (target, source),
                )

    # --- helpers ---------------------------------------------------------------------------

    def _connect(self) -> postgres.Conn:
        try:
            return psycopg.connect(self._url.server, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise postgres.ServerIOError(self.location, "connecting to", exc, postgres.CONNECT_ADVICE) from exc

    def _tables(self, conn: postgres.Conn) -> bool:
        row = conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, 'journals')) IS NOT NULL",
                           (self._schema,)).fetchone()
        return bool(row and row[0])

    def _writer_key(self, name: str) -> int:
        return postgres.writer_lock_key(self._schema, name)

    def _where(self, name: str) -> str:
        return self._url.with_journal(name).display()


def open_store(parsed: RemoteURL, **options: Any) -> PostgresStore:
    return PostgresStore(parsed, **options)
