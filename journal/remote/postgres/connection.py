"""The connection to the PostgreSQL server: how one is made, when one can be used again, the statements.

A connection is made with TCP keepalives and a user timeout, so a dead server or network is
noticed by TCP and not only when the OS gives up, and with an application name that carries
the client's pid (what LockHolder shows of a writer). Every connection runs in autocommit; a
transaction is an explicit BEGIN ... COMMIT (``BEGIN_AT``: with the durability it commits at).
The statements (``Queries``) quote the schema's identifiers once. Writer lock keys are 64-bit
hashes of schema and name (advisory locks: claim.py).
"""

from __future__ import annotations

import hashlib
import math
import os
import select
import socket
import sys
import time
from typing import Any, Final

if sys.version_info >= (3, 11):
    from typing import LiteralString
else:  # Python 3.10's typing has none; it is the type checker's word (mypy reads this as 3.11)
    LiteralString = str

from journal.remote.postgres.client import psycopg, sql
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError, _words

# How long a writer's close waits for the server to answer pg_advisory_unlock_all before it
# closes the connection anyway: a server (or a path to it) that stopped answering must not hang
# close, and the lock then goes when the server ends the session, as it did before close let go.
UNLOCK_WAIT_S: Final = 2.0
# A dead server or network is noticed by TCP, not only when the OS gives up (libpq settings).
KEEPALIVES_IDLE_S: Final = 10
KEEPALIVES_INTERVAL_S: Final = 5
KEEPALIVES_COUNT: Final = 3
TCP_USER_TIMEOUT_MS: Final = 30_000

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


def connect(server: str, connect_timeout_s: float, app_name_given: bool, path: str) -> Conn:
    """A new autocommit connection to ``server`` (a libpq URL); ServerIOError names ``path``."""
    params: dict[str, Any] = {
        "connect_timeout": max(2, math.ceil(connect_timeout_s)),
        "keepalives": 1,
        "keepalives_idle": KEEPALIVES_IDLE_S,
        "keepalives_interval": KEEPALIVES_INTERVAL_S,
        "keepalives_count": KEEPALIVES_COUNT,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
    }
    if not app_name_given:
        params["application_name"] = f"journal pid {os.getpid()} on {socket.gethostname()}"[:63]
    try:
        return psycopg.connect(server, autocommit=True, **params)
    except psycopg.Error as exc:
        raise ServerIOError(path, "connecting to", exc, CONNECT_ADVICE) from exc


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


def _unusable(conn: Conn, exc: BaseException) -> str:
    """Why a writer whose connection is not reusable after ``exc`` cannot go on."""
    if conn.closed:
        return f"the connection to the server was lost, and this writer's lock with it ({_words(exc)})"
    return (f"the connection was left inside a transaction or a command ({_words(exc)}): nothing more can be "
            "committed on it")


def unlock_all(conn: Conn) -> bool:
    """Send ``pg_advisory_unlock_all()`` on ``conn`` and wait at most UNLOCK_WAIT_S for its answer
    (libpq's asynchronous calls: a blocking execute would wait for a server that no longer
    answers as long as the socket lives). True when the server answered. For a connection about
    to be closed (a writer's close): psycopg does not see these calls, so nothing else may run
    on it after them."""
    pg = conn.pgconn
    deadline = time.monotonic() + UNLOCK_WAIT_S
    pg.send_query(b"SELECT pg_advisory_unlock_all()")
    while pg.flush() != 0:  # the query is still in the client's buffer
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [pg.socket], [], left)[1]:
            return False
    while True:
        pg.consume_input()
        if not pg.is_busy():
            break
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pg.socket], [], [], left)[0]:
            return False
    while pg.get_result() is not None:  # the answer, then the end of it
        pass
    return True
