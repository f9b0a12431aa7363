"""Retention on PostgreSQL (journal.api.Retention): first_seq, seal, drop_prefix.

drop_prefix deletes a journal's first rows and moves its first seq in one transaction,
committed at "sync", run by the group commit's leader after its batch (an ``_Op``), so nothing
else uses the writer's connection meanwhile. There is nothing to seal: every record is a row
that can be dropped on its own.
"""

from __future__ import annotations

from journal.api import PrefixDrop
from journal.errors import InvalidArgumentError, JournalFailStoppedError
from journal.remote.postgres.client import psycopg
from journal.remote.postgres.commit import _Op
from journal.remote.postgres.connection import _BEGIN, Conn
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError, _words
from journal.remote.postgres.writer import WriterPart


class RetentionPart(WriterPart):
    """first_seq, seal and drop_prefix (PostgresJournal's part; a drop writes what its handle
    buffers first, hence a WriterPart)."""

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
