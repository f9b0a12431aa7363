"""A shared writer's batches: published chained on what this handle knows, and when another
writer appended first, caught up, answered where another writer holds a key, and published again.
"""

from __future__ import annotations

import errno
import time

from journal.engine.encoding import Encoded
from journal.errors import (
    IdempotencyConflictError,
    JournalError,
)
from journal.outcomes import Committed, Durability, NotCommitted, Outcome
from journal.remote.batching import Held, runs
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.errors import _Lost, _Refused
from journal.remote.jetstream.headers import frame_size
from journal.remote.jetstream.limits import CLAIM_POLL_S
from journal.remote.jetstream.state import _State


class _SharedWriter(_State):
    """Group commit's writer for writer="shared"."""

    def _shared_write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """GroupCommit's writer for a shared writer. Each message of the batch takes its seqs from
        what this handle knows of the journal and is chained on the last message it knows. When
        the server refuses it because another writer appended first, the handle catches up (the
        others' records, their keys and digests), answers records whose key another writer now
        holds (a duplicate of that record, or NotCommitted if it holds another event), gives the
        rest the next seqs and publishes again, for up to shared_lock_timeout_s: then what is
        left is NotCommitted (errno EBUSY) and the handle goes on."""
        reported = self._reported(level)
        out: list[Outcome | None] = [None] * len(items)
        why, code = "", None
        with self._wmu:
            pending = list(range(len(items)))
            deadline = time.monotonic() + self._shared_lock_timeout_s
            refusals = 0
            while pending:
                if self._claim_lost:
                    self._fail("this shared writer's claim lapsed (it could not refresh it within claim_ttl_s) and "
                               "the other writers dropped it, or an exclusive writer has the journal now; reopen it")
                if self._fenced_out:
                    self._fail(f"an exclusive writer took the journal (its fence is stream message "
                               f"{self._fenced_out}) after this shared writer's claim lapsed; reopen it")
                if self._failed is not None or self._closed:
                    why = f"not written: {self._failed or 'the journal was closed'}"
                    break
                pending = self._shared_plan(items, pending, reported, out)
                if not pending:
                    break
                run = self._run_of(items, pending)
                first = self._stored_seq + 1
                got = self._publish_run([(first + k, items[i]) for k, i in enumerate(run)], reported)
                if got is not None:
                    for i, o in zip(run, got, strict=True):
                        out[i] = o
                    pending = pending[len(run) :]
                    continue
                refusals += 1
                if time.monotonic() >= deadline:
                    why = (
                        f"not written: another writer appended first every time; the batch was refused {refusals} "
                        f"times within {self._shared_lock_timeout_s:g} s (shared_lock_timeout_s) and none of these "
                        "records was stored: append them again, raise shared_lock_timeout_s, or have the writers "
                        "append fewer, larger batches"
                    )
                    code = errno.EBUSY
                    break
                before = self._last_sseq
                try:
                    self._catch_up_shared()
                except (_Lost, _Refused, nats.errors.Error, OSError) as exc:
                    why = (f"not written: reading what the journal's other writers appended failed ({exc}); none "
                           "of these records was stored")
                    break
                except JournalError as exc:  # committed data that fails verification: nothing more here
                    self._fail(f"catching up with the journal's other writers found: {exc}")
                    continue
                if self._last_sseq == before:
                    # Refused, yet nothing newer to read: a stream leader changing hands (its
                    # successor serves what the old one acknowledged). Look again shortly.
                    time.sleep(CLAIM_POLL_S)
        return [o if o is not None else NotCommitted(why, code) for o in out]

    def _shared_plan(self, items: list[Encoded], pending: list[int], reported: Durability,
                     out: list[Outcome | None]) -> list[int]:
        """The outcome, now, of each pending record whose idempotency key the journal holds (a
        catch-up found another writer's record under it): a duplicate of that record, or, if it
        holds another event, NotCommitted (a caller's bug, as IdempotencyConflictError says).
        The records still to write."""
        rest: list[int] = []
        for i in pending:
            it = items[i]
            known = self._keys.get(it.key) if it.key is not None else None
            if it.key is None or known is None:
                rest.append(i)
                continue
            seq, digest = known
            if not Held(seq, digest=digest).holds(it):  # the same event in another key order, or another event
                try:
                    rec = self._peek(seq)
                except JournalError as exc:
                    out[i] = NotCommitted(f"not written: the record holding idempotency key {it.key!r} (seq {seq}) "
                                          f"could not be read to compare ({exc})")
                    continue
                if rec is None or rec.key != it.key or not Held(seq, rec.payload, rec.is_bytes).holds(it):
                    out[i] = NotCommitted(f"not written: {IdempotencyConflictError(it.key, seq)}")
                    continue
            out[i] = Committed(seq, reported, True, "idempotency key matched a record another writer wrote")
        return rest

    def _run_of(self, items: list[Encoded], pending: list[int]) -> list[int]:
        """The first of ``pending`` (not empty) whose frames fit one message (at least one)."""
        return next(runs(pending, lambda i: frame_size(items[i]), self._payload_max))
