"""Journals on PostgreSQL (docs/REMOTE.md, "PostgreSQL"): the journal.api protocol on two tables.

    j = journal.open("postgresql://user@host:5432/db?journal=s-42", create=True)

The backend's files, each with one job (CONTRIBUTING.md maps them):

* ``journal.py``: PostgresJournal, the parts composed; open_journal and the URL's settings; the tables.
* ``reader.py``: read, get, follow, resolve; every row's frame verified before it is served.
* ``writer.py``: append, append_many, flush, sync: the write paths into the group commit.
* ``retention.py``: first_seq, seal, drop_prefix.
* ``dictionaries.py``: the writer's trained zstd dictionary stored at open, and loaded for readers.
* ``claim.py``: the writer lock (advisory locks), who holds it (LockHolder), letting go.
* ``state.py``: the journal's state, declared once for the parts above.
* ``commit.py``: the writer connection's group commit, one transaction per batch, of one journal
  or of every journal a store opens for writing (StoreWriter).
* ``connection.py``: making a connection, whether one can be used again, the statements.
* ``errors.py``: the typed errors in this backend's words.

Writers and fencing. An exclusive writer holds a session-level advisory lock on the one
connection it writes through; the server releases it when that connection ends, so a writer
whose connection was lost can never write again. ``writer="shared"``: each handle holds the same
lock in share mode, and every transaction takes a second, transaction-level advisory lock and
computes the next seq from the table inside it: seqs stay contiguous and idempotency keys hold
across processes; there is no buffered level there (a buffered append is written at once, at
"flush", as the file engine's shared writers do).

A store's journals share a writer. The journals a PostgresStore opens for writing (exclusive
writers; journal/remote/postgres_store.py) share one writer connection and one group commit: a
batch holds records of many journals, planned journal by journal, written by one multi-row
INSERT and one COMMIT, so one WAL flush for many sessions. Losing that connection fail-stops
every journal on it: their locks went with it. A statement refused in one journal's part with
the connection alive (a constraint violation) rolls the batch back, and the parts are then
written one transaction each, so only that journal's records are NotCommitted (and it
fail-stops, as a lone journal would). ``journal.open`` of one journal keeps a connection of its
own, as read-only and ``writer="shared"`` handles do.

Importing this package imports psycopg (the extra ``journal-engine[postgres]``); without it the
import fails with MissingExtraError and the install line.
"""

from __future__ import annotations

from journal.remote.postgres.claim import LockHolder, ServerJournalLockedError
from journal.remote.postgres.commit import (
    BATCH_BYTES_MAX,
    BATCH_RECORDS_MAX,
    BUFFER_BYTES_MAX,
    BUFFER_RECORDS_MAX,
    StoreWriter,
    _Barrier,
    _Item,
    _Op,
    _Writer,
)
from journal.remote.postgres.connection import (
    KEEPALIVES_COUNT,
    KEEPALIVES_IDLE_S,
    KEEPALIVES_INTERVAL_S,
    TCP_USER_TIMEOUT_MS,
    Conn,
    Query,
    reusable,
    writer_lock_key,
)
from journal.remote.postgres.dictionaries import TABLE as DICTIONARY_TABLE
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError, SyncNotDurableError
from journal.remote.postgres.journal import (
    CONNECT_TIMEOUT_S_DEFAULT,
    CONNECT_TIMEOUT_S_MAX,
    LOCK_TIMEOUT_S_MAX,
    OPTIONS,
    SCHEMA_DEFAULT,
    SCHEMA_NAME_BYTES_MAX,
    SHARED_LOCK_TIMEOUT_S_DEFAULT,
    WRITER_MODES,
    PostgresJournal,
    open_journal,
)
from journal.remote.postgres.reader import FOLLOW_POLL_INTERVAL_S, READ_PAGE_RECORDS, RESOLVE_FLUSH_WAIT_S

__all__ = [
    "BATCH_BYTES_MAX",
    "BATCH_RECORDS_MAX",
    "BUFFER_BYTES_MAX",
    "BUFFER_RECORDS_MAX",
    "CONNECT_ADVICE",
    "CONNECT_TIMEOUT_S_DEFAULT",
    "CONNECT_TIMEOUT_S_MAX",
    "DICTIONARY_TABLE",
    "FOLLOW_POLL_INTERVAL_S",
    "KEEPALIVES_COUNT",
    "KEEPALIVES_IDLE_S",
    "KEEPALIVES_INTERVAL_S",
    "LOCK_TIMEOUT_S_MAX",
    "OPTIONS",
    "READ_PAGE_RECORDS",
    "RESOLVE_FLUSH_WAIT_S",
    "SCHEMA_DEFAULT",
    "SCHEMA_NAME_BYTES_MAX",
    "SHARED_LOCK_TIMEOUT_S_DEFAULT",
    "TCP_USER_TIMEOUT_MS",
    "WRITER_MODES",
    "Conn",
    "LockHolder",
    "PostgresJournal",
    "Query",
    "ServerIOError",
    "ServerJournalLockedError",
    "StoreWriter",
    "SyncNotDurableError",
    "_Barrier",
    "_Item",
    "_Op",
    "_Writer",
    "open_journal",
    "reusable",
    "writer_lock_key",
]
