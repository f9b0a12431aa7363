"""A schema of journals on PostgreSQL: the ``journal.api.Store`` of ``postgresql://...`` URLs.

    store = journal.store("postgresql://127.0.0.1:5432/test?schema=agents")
    with store.open("t-42", create=True) as j: ...

The journals are the rows of ``<schema>.journals``; each operation on the set of journals is
one transaction, so it is whole or absent after a crash, as on files:

- ``delete``: the journal's records and its row go in one transaction, which first takes the
  journal's writer lock (``pg_try_advisory_xact_lock`` on the key its writers hold): a journal
  open for writing anywhere is not deleted under its writer (``JournalLockedError``);
- ``copy``: server-side, one ``INSERT ... SELECT`` of the source's rows (up to ``upto_seq``)
  under the target's name in one transaction, the target given the source's journal id so that
  every copied frame verifies as it is (the file engine's forks share their segments' id the
  same way); the records to ``append`` (a fork's header) are framed for that id and inserted in
  the same transaction. The copy is the source's committed records at the statement's snapshot.

``catalog(name)`` (``PostgresCatalog``): small JSON values by key in ``<schema>.catalog``, the
session store's index on this server.

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

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from journal.errors import MissingExtraError

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # the extra is not installed
    raise MissingExtraError(__name__, "psycopg 3.1.18 or later", "postgres", exc) from exc

from journal.api import Journal, JournalLockedError, JournalNotFoundError
from journal.engine.encoding import Encoded, encode_event
from journal.engine.options import Options
from journal.engine.store import check_store_name, check_upto
from journal.remote import catalog_value, postgres, records
from journal.remote.url import RemoteURL

_T = TypeVar("_T")


class PostgresStore:
    def __init__(self, parsed: RemoteURL, **options: Any) -> None:
        self._url = parsed
        self._options = options
        self._schema = parsed.options.get("schema", postgres.SCHEMA_DEFAULT)
        self._journals = sql.Identifier(self._schema, "journals")
        self._records = sql.Identifier(self._schema, "records")
        self._dictionaries = sql.Identifier(self._schema, postgres.DICTIONARY_TABLE)
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
                if self._has_dictionaries(conn):
                    conn.execute(sql.SQL("DELETE FROM {} WHERE journal = %s").format(self._dictionaries), (name,))
                conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(self._journals), (name,))

    def copy(
        self, source: str, target: str, *, upto_seq: int | None = None, append: Sequence[Any] = ()
    ) -> None:
        check_store_name(source)
        check_store_name(target)
        opts = Options(compress=bool(self._options.get("compress", True)))
        encoded = [encode_event(e, None, False, opts) for e in append]  # refused before anything is sent
        with self._connect() as conn:
            if not self._tables(conn):
                raise JournalNotFoundError(self._where(source))
            try:
                with conn.transaction():
                    self._copy_in(conn, source, target, upto_seq, encoded)
            except psycopg.Error as exc:
                raise postgres.ServerIOError(self._where(target), "copying onto", exc,
                                             "nothing was copied (one transaction); try again") from exc

    def _copy_in(self, conn: postgres.Conn, source: str, target: str, upto_seq: int | None,
                 encoded: list[Encoded]) -> None:
        """The copy's one transaction: the target's row, the source's rows up to ``upto_seq``
        under the target's name, then the appended records framed for the source's id."""
        # The target's writer key: nobody opens the target while it is being made.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._writer_key(target),))
        exists = sql.SQL("SELECT id, first_seq FROM {} WHERE name = %s").format(self._journals)
        if conn.execute(exists, (target,)).fetchone() is not None:
            raise FileExistsError(f"journal {target!r} exists in {self.location}; delete it before copying")
        src = conn.execute(exists, (source,)).fetchone()
        if src is None:
            raise JournalNotFoundError(self._where(source))
        journal_id, first_seq = bytes(src[0]), int(src[1])
        row = conn.execute(sql.SQL("SELECT max(seq) FROM {} WHERE journal = %s").format(self._records),
                           (source,)).fetchone()
        last_seq = int(row[0]) if row and row[0] is not None else first_seq - 1
        upto = check_upto(self._where(source), first_seq, last_seq, upto_seq)
        conn.execute(
            sql.SQL("INSERT INTO {} (name, id, first_seq) VALUES (%s, %s, %s)").format(self._journals),
            (target, journal_id, first_seq),
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (journal, seq, key, frame) "
                "SELECT %s, seq, key, frame FROM {} WHERE journal = %s AND seq <= %s"
            ).format(self._records, self._records),
            (target, source, upto),
        )
        if self._has_dictionaries(conn):  # the frames copied name them: in the same transaction
            conn.execute(sql.SQL("DELETE FROM {} WHERE journal = %s").format(self._dictionaries), (target,))
            conn.execute(
                sql.SQL("INSERT INTO {} (journal, id, body) SELECT %s, id, body FROM {} WHERE journal = %s").format(
                    self._dictionaries, self._dictionaries
                ),
                (target, source),
            )
        if encoded:
            salt = records.salt_of(journal_id)
            conn.cursor().executemany(
                sql.SQL("INSERT INTO {} (journal, seq, key, frame) VALUES (%s, %s, NULL, %s)").format(self._records),
                [(target, upto + i, records.frame_of(enc, upto + i, salt)) for i, enc in enumerate(encoded, 1)],
            )

    def catalog(self, name: str) -> PostgresCatalog:
        return PostgresCatalog(self, check_store_name(name))

    # --- helpers ---------------------------------------------------------------------------

    def _has_dictionaries(self, conn: postgres.Conn) -> bool:
        """Whether the schema has its dictionaries table (made by the first dictionary stored)."""
        row = conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL",
                           (self._schema, postgres.DICTIONARY_TABLE)).fetchone()
        return bool(row and row[0])

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


class PostgresCatalog:
    """A ``journal.api.Catalog`` in ``<schema>.catalog``: a row per key, its value JSON text.

    Each call is one statement or one transaction on a connection of its own (kept, made again
    once lost or left inside a command), committed before it returns, so at the server's
    ``synchronous_commit``. An update reads the value under a row lock and writes it back in one
    transaction, so two updaters of one key never lose each other's fields.
    """

    def __init__(self, store: PostgresStore, name: str) -> None:
        self._store = store
        self._name = name
        self._table = sql.Identifier(store._schema, "catalog")
        self._mu = threading.Lock()
        self._conn: postgres.Conn | None = None
        self._made = False

    def get(self, key: str) -> dict[str, Any] | None:
        def run(conn: postgres.Conn) -> dict[str, Any] | None:
            row = conn.execute(sql.SQL("SELECT value FROM {} WHERE catalog = %s AND key = %s").format(self._table),
                               (self._name, key)).fetchone()
            return None if row is None else catalog_value.decode(row[0])

        return self._run(run, check_store_name(key), "reading")

    def put(self, key: str, value: dict[str, Any]) -> None:
        text = catalog_value.encode(value).decode("utf-8")

        def run(conn: postgres.Conn) -> None:
            conn.execute(sql.SQL("INSERT INTO {} (catalog, key, value) VALUES (%s, %s, %s) ON CONFLICT (catalog, key) "
                                 "DO UPDATE SET value = EXCLUDED.value").format(self._table), (self._name, key, text))

        self._run(run, check_store_name(key), "writing")

    def update(self, key: str, fields: dict[str, Any]) -> bool:
        catalog_value.encode(fields)  # refused before anything is sent

        def run(conn: postgres.Conn) -> bool:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL("SELECT value FROM {} WHERE catalog = %s AND key = %s FOR UPDATE").format(self._table),
                    (self._name, key),
                ).fetchone()
                if row is None:
                    return False
                merged = catalog_value.encode({**catalog_value.decode(row[0]), **fields}).decode("utf-8")
                conn.execute(sql.SQL("UPDATE {} SET value = %s WHERE catalog = %s AND key = %s").format(self._table),
                             (merged, self._name, key))
                return True

        return self._run(run, check_store_name(key), "updating")

    def delete(self, key: str) -> None:
        def run(conn: postgres.Conn) -> None:
            conn.execute(sql.SQL("DELETE FROM {} WHERE catalog = %s AND key = %s").format(self._table),
                         (self._name, key))

        self._run(run, check_store_name(key), "deleting from")

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        def run(conn: postgres.Conn) -> list[tuple[str, dict[str, Any]]]:
            rows = conn.execute(sql.SQL("SELECT key, value FROM {} WHERE catalog = %s ORDER BY key").format(
                self._table), (self._name,)).fetchall()
            return [(str(k), catalog_value.decode(v)) for k, v in rows]

        return self._run(run, None, "listing")

    def close(self) -> None:
        with self._mu:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self, fn: Callable[[postgres.Conn], _T], key: str | None, doing: str) -> _T:
        where = f"{self._store.location} (catalog {self._name!r}{f', key {key!r}' if key else ''})"
        with self._mu:
            try:
                self._drop_unless_reusable()
                if self._conn is None:
                    self._conn = self._store._connect()
                    self._made = False
                conn = self._conn
                if not self._made:
                    self._ensure_table(conn)
                    self._made = True
                return fn(conn)
            except psycopg.Error as exc:
                self._drop_unless_reusable()
                raise postgres.ServerIOError(where, doing, exc, "the catalog is as it was before this call, or holds "
                                             "its change if the commit reached the server; try again") from exc

    def _drop_unless_reusable(self) -> None:
        """Closes the kept connection unless it can take the next call (postgres.reusable); the
        next call connects again. The server ends that session: a transaction it was inside of
        is rolled back, though a statement it had already received (a COMMIT on its way) may
        still complete, which is why the caller's error says the change may be held."""
        if self._conn is not None and not postgres.reusable(self._conn):
            conn, self._conn = self._conn, None
            conn.close()

    def _ensure_table(self, conn: postgres.Conn) -> None:
        with conn.transaction():
            # One maker at a time: CREATE ... IF NOT EXISTS races with itself on a new schema.
            key = postgres.writer_lock_key(self._store._schema, "\x00catalog")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._store._schema)))
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (catalog text NOT NULL, key text NOT NULL, "
                                 "value text NOT NULL, PRIMARY KEY (catalog, key))").format(self._table))


def open_store(parsed: RemoteURL, **options: Any) -> PostgresStore:
    return PostgresStore(parsed, **options)
