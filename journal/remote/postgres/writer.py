"""Appending to a PostgreSQL journal: the write paths, keyed and unkeyed, flush and sync.

append_many encodes the events in the caller's thread and hands them to the writer
connection's group commit (commit.py), which plans and writes them with whatever else is
queued. A call with idempotency keys is one item list (one transaction: a conflict anywhere in
it writes nothing, IdempotencyConflictError); one without is cut into transactions of at most
BATCH_RECORDS_MAX records and BATCH_BYTES_MAX bytes. A key repeated inside one call is written
once and its repeats answered as duplicates of the first. flush() and sync() queue a barrier,
which has the buffer written (and, for sync, the WAL flushed).

Outcomes. Anything that fails before ``COMMIT`` is sent: ROLLBACK, NotCommitted, and the next
append reuses the seqs; the handle fail-stops when the connection is gone (its lock went with
it), when acknowledged buffered records went down with the transaction, or when the table
holds a row this writer did not know of. Anything that fails while ``COMMIT`` is on its way or
its answer awaited: AckLost for every record of the batch, and the handle fail-stops
(JournalFailStoppedError) until it is opened again; ``resolve()`` on the new handle answers
from the table (reader.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from journal.engine.encoding import Encoded, check_durability, encode_event
from journal.errors import (
    IdempotencyConflictError,
    InvalidArgumentError,
    JournalClosedError,
    JournalFailStoppedError,
)
from journal.outcomes import Durability, Outcome
from journal.remote.batching import events_and_keys, keyed_once, runs, write_runs
from journal.remote.postgres.commit import (
    BATCH_BYTES_MAX,
    BATCH_RECORDS_MAX,
    _Barrier,
    _Conflict,
    _Item,
    _raise_planned,
)
from journal.remote.postgres.errors import SyncNotDurableError
from journal.remote.postgres.state import JournalState


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


def _stored_bytes(it: Encoded) -> int:
    """What a record adds to a transaction's size (BATCH_BYTES_MAX counts stored payloads)."""
    return len(it.spec.stored)


def _raised(outcomes: list[Outcome]) -> list[Outcome]:
    """``outcomes``, once a journal's part the leader could not plan has raised its error."""
    _raise_planned(outcomes)
    return outcomes


class WriterPart(JournalState):
    """append, append_many, flush and sync (PostgresJournal's part)."""

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
        events, keys = events_and_keys(events, idempotency_keys)
        for k in keys:
            _check_key(k)
        encoded = [encode_event(e, k, synthetic, self.options) for e, k in zip(events, keys, strict=True)]
        if level == "sync" and not self._fsync_on:
            raise SyncNotDurableError(self.path)
        if not encoded:
            return []
        keyed = any(k is not None for k in keys)

        def write(unique: list[Encoded]) -> list[Outcome]:
            call = next(self._calls)
            items = [_Item(enc, call, self) for enc in unique]
            gc = self._gc()
            if not keyed:
                return write_runs(runs(items, _stored_bytes, BATCH_BYTES_MAX, BATCH_RECORDS_MAX),
                                  lambda chunk: _raised(gc.submit(list(chunk), level)), lambda: self._failed)
            outcomes = _raised(gc.submit(list(items), level))
            for out in outcomes:
                if isinstance(out, _Conflict):
                    raise IdempotencyConflictError(out.key, out.holder)
            return outcomes

        return keyed_once(encoded, write)

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
