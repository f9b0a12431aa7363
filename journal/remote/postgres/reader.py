"""Reading a PostgreSQL journal: read, get, follow, resolve, and the check of every row read.

Every row's ``frame`` is verified (journal/remote/records.py) against its seq and the journal's
salt before it is served: a changed frame is CorruptionError with the journal and the seq, and
a seq missing in a run is SequenceError. Reads go through a connection of their own (made on
first use, made again once if it was lost); a handle's reads first write what it buffers, so it
sees its own appends. follow() LISTENs on the journal's channel (every committing transaction
notifies) and reads every ``poll_interval_s`` whatever comes. resolve() answers an AckLost from
what the table holds, by idempotency key or by seq and digest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Final

from journal.errors import JournalFailStoppedError, JournalIOError, SequenceError
from journal.outcomes import AckLost, Durability, Outcome
from journal.record import Record
from journal.remote import records
from journal.remote.postgres.client import psycopg, sql
from journal.remote.postgres.connection import Conn, Query, reusable
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError
from journal.remote.postgres.writer import WriterPart
from journal.remote.resolution import resolve_from

READ_PAGE_RECORDS: Final = 512  # rows per query of read() and follow(): memory stays bounded
FOLLOW_POLL_INTERVAL_S: Final = 0.02
# How long resolve() waits for the server's WAL flush to pass a record it found, to report "sync".
RESOLVE_FLUSH_WAIT_S: Final = 2.0


class ReaderPart(WriterPart):
    """read, get, follow and resolve (PostgresJournal's part; a reader writes what its handle
    buffers first, hence a WriterPart)."""

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
            out.append(records.record_of(bytes(frame), expect, self._salt, self.path, limit, self._dicts))
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

    def get(self, seq: int) -> Record | None:
        """The record at ``seq``, or None if the journal does not hold it."""
        self._check_open()
        if seq < self._first_seq:
            return None
        self._flush_own()
        rows = self._query(self._q.one, (self._name, seq))
        if not rows:
            return None
        rec = records.record_of(
            bytes(rows[0][0]), seq, self._salt, self.path, self.options.record_size_bytes_max, self._dicts
        )
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

        def by_key(key: str) -> int | None:
            rows = self._query(self._q.keys, (self._name, [key]))
            if not rows:
                return None
            seq = int(rows[0][1])
            records.record_of(
                bytes(rows[0][2]), seq, self._salt, self.path, self.options.record_size_bytes_max, self._dicts
            )
            return seq

        return resolve_from(outcome, by_key, self.get, self._durable_now)

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
