"""PostgresJournal: the parts composed into one journal.api.Journal, opened from a postgresql:// URL.

    j = journal.open("postgresql://user@host:5432/db?journal=s-42", create=True)

open_journal checks the URL's settings and the options, and opens: the tables are made on
first use (``create``) under a transaction-level advisory lock so concurrent first uses do not
race, the writer lock is taken (claim.py), the journal's row is read (or made) and the server's
``fsync`` and ``synchronous_commit`` settings are read. Tables, in the URL's ``schema``
(default ``journal``):

* ``journals(name text primary key, id bytea, first_seq bigint, created_at timestamptz)``: the
  journal's random 16-byte id seeds the checksums of its frames (journal/remote/records.py);
* ``records(journal text, seq bigint, key text, frame bytea, primary key (journal, seq))``, with a
  unique index on ``(journal, key)`` where ``key`` is not null. ``frame`` is the file engine's
  frame of the record; every read verifies it (CorruptionError names the journal and the seq).
* ``dictionaries(journal text, id integer, body bytea, primary key (journal, id))``, made on the
  first dictionary a writer stores (dictionaries.py).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Final

from journal.api import RecoveryReport
from journal.engine import format as fmt
from journal.engine.dictionary import Dictionary
from journal.engine.encoding import Encoded
from journal.engine.options import Options
from journal.errors import InvalidArgumentError, JournalFailStoppedError, JournalNotFoundError
from journal.remote import dictionaries, records
from journal.remote.postgres.claim import ClaimPart
from journal.remote.postgres.client import psycopg
from journal.remote.postgres.commit import StoreWriter, _Barrier, _Op, _Writer
from journal.remote.postgres.connection import Conn
from journal.remote.postgres.dictionaries import DictionaryPart
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError
from journal.remote.postgres.retention import RetentionPart
from journal.remote.url import RemoteURL

if TYPE_CHECKING:
    from journal.api import Journal, Retention

SCHEMA_DEFAULT: Final = "journal"
SCHEMA_NAME_BYTES_MAX: Final = 63  # PostgreSQL's identifier limit (NAMEDATALEN - 1)
CONNECT_TIMEOUT_S_DEFAULT: Final = 10.0
CONNECT_TIMEOUT_S_MAX: Final = 3600.0
LOCK_TIMEOUT_S_MAX: Final = 24 * 3600.0
# A shared writer's transaction waits this long for the append lock, then its records are
# NotCommitted (nothing written, safe to retry) and the handle goes on.
SHARED_LOCK_TIMEOUT_S_DEFAULT: Final = 30.0

OPTIONS: Final = frozenset({"record_size_bytes_max", "compress", "shared_lock_timeout_s", "first_seq", "dictionary"})
WRITER_MODES: Final = ("exclusive", "shared")


class PostgresJournal(DictionaryPart, RetentionPart, ClaimPart):
    """A journal in a PostgreSQL table (journal.api.Journal). Made by ``open_journal``."""

    # --- the protocol's properties -------------------------------------------------------

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

    # --- opening -------------------------------------------------------------------------

    def _open(self, create: bool, lock_timeout_s: float, first_seq: int, dictionary: Dictionary | None) -> None:
        self._dicts = self._dictionary_cache()
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
            if dictionary is not None:
                # Committed before this connection (or the store's writer) writes any frame.
                dict_id = self._install_dictionary(conn, dictionary)
                self.options = dictionaries.options_with(self.options, dict_id, dictionary)
                actions.append(f"compresses with dictionary {dict_id}")
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

    # --- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Write buffered records (at "flush"), let go of the writer lock, end the connections.
        Idempotent. Raises JournalFailStoppedError if the final write failed."""
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

    def __repr__(self) -> str:
        return f"PostgresJournal({self.path!r}, {self.writer_mode}{', readonly' if self._readonly else ''})"



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
    append lock per transaction), ``first_seq`` (the first seq of a journal this call creates),
    ``dictionary`` (a trained zstd dictionary a writer stores at open and compresses with:
    dictionaries.py; a read-only handle ignores it, a shared writer refuses it).
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
    dictionary = dictionaries.checked(options.get("dictionary"), readonly, shared)
    j = PostgresJournal(
        parsed, schema, readonly, shared, opts, connect_timeout_s, shared_lock_timeout_s,
        None if readonly or shared else store_writer,
    )
    j._open(create, lock_timeout_s, first_seq, dictionary)
    return j


if TYPE_CHECKING:  # mypy holds this backend to journal.api's protocol

    def _conforms(j: PostgresJournal) -> tuple[Journal, Retention]:
        return j, j
