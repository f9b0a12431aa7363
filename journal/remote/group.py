"""Group commit for the remote backends: many callers' records, one transaction or one burst.

The file engine's rule (RocksDB's, without a timer): the first caller that finds no write in
flight leads. It takes everything queued, up to ``batch_records_max`` records and
``batch_bytes_max`` bytes, hands it to the backend's ``write`` as one batch (one transaction on
PostgreSQL, one pipelined burst of publishes on JetStream), gives every caller in it its own
outcomes, and leads again while callers wait; the others sleep on a lock of their own until
their outcomes are set or they are made leader. While one batch is on the wire the next one
gathers, so the batching window is the server's round trip.

A batch is written at the highest durability any of its records asked for: an outcome may
report more durability than its caller asked for, never less. The backend decides seqs (under
its own lock, inside ``write``), so they stay contiguous whatever order callers arrive in.

A caller interrupted while it waits (KeyboardInterrupt, a signal) whose batch was not taken yet
is taken out of the queue; once taken, its records are written or not as one unit with the
batch, and its outcome is what the journal holds (resolve() or its idempotency key tell).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from journal.engine.encoding import Encoded
from journal.errors import InvariantError
from journal.outcomes import DURABILITY_LEVELS, Durability, Outcome

BATCH_RECORDS_MAX_DEFAULT: Final = 1024
BATCH_BYTES_MAX_DEFAULT: Final = 8 * 1024 * 1024
_RANK: Final = {level: rank for rank, level in enumerate(DURABILITY_LEVELS)}


@dataclass
class Pending:
    """One caller's records on their way; ``outcomes`` is set by the leader."""

    items: list[Encoded]
    durability: Durability
    nbytes: int
    outcomes: list[Outcome] | None = None
    wake: threading.Lock | None = None
    abandoned: bool = False
    error: BaseException | None = field(default=None, repr=False)  # raised by write: re-raised to the caller


WriteBatch = Callable[[list[Encoded], Durability], list[Outcome]]


class GroupCommit:
    def __init__(
        self,
        write: WriteBatch,
        batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT,
        batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
    ) -> None:
        if batch_records_max < 1 or batch_bytes_max < 1:
            raise InvariantError("a batch holds at least one record and one byte")
        self._write = write
        self._records_max = batch_records_max
        self._bytes_max = batch_bytes_max
        self._mu = threading.Lock()
        self._idle = threading.Condition(self._mu)
        self._queue: deque[Pending] = deque()
        self._leader = False

    def submit(self, items: list[Encoded], durability: Durability) -> list[Outcome]:
        """Write ``items`` with whatever else is queued; their outcomes, in order."""
        nbytes = sum(len(it.spec.stored) for it in items)
        req = Pending(items, durability, nbytes)
        with self._mu:
            self._queue.append(req)
            leading = not self._leader
            if leading:
                self._leader = True
            else:
                req.wake = threading.Lock()
                req.wake.acquire()
        if not leading:
            try:
                req.wake.acquire()  # type: ignore[union-attr]  # set above for a waiter
            except BaseException:
                with self._mu:
                    if req in self._queue:
                        self._queue.remove(req)
                        req.abandoned = True
                raise
        if req.outcomes is None and req.error is None:
            self._lead(req)
        if req.error is not None:
            raise req.error
        if req.outcomes is None or len(req.outcomes) != len(items):
            raise InvariantError("a settled request has one outcome per record")
        return req.outcomes

    def wait_idle(self) -> None:
        """Return once no batch is in flight (close() waits for the writer this way)."""
        with self._mu:
            while self._leader:
                self._idle.wait()

    def _take(self) -> list[Pending]:
        batch: list[Pending] = []
        records = size = 0
        while self._queue:
            nxt = self._queue[0]
            if batch and (records + len(nxt.items) > self._records_max or size + nxt.nbytes > self._bytes_max):
                break
            batch.append(self._queue.popleft())
            records += len(nxt.items)
            size += nxt.nbytes
        return batch

    def _lead(self, req: Pending) -> None:
        while True:
            with self._mu:
                batch = self._take()
            if batch:
                self._write_one(batch)
            with self._mu:
                done = req.outcomes is not None or req.error is not None
                for r in batch:
                    if r is not req and r.wake is not None:
                        r.wake.release()
                if done or not self._queue:
                    nxt = next((q for q in self._queue if q.wake is not None), None)
                    if nxt is None:
                        self._leader = False
                        self._idle.notify_all()
                    elif nxt.wake is not None:
                        nxt.wake.release()  # it leads next
                    return

    def _write_one(self, batch: list[Pending]) -> None:
        items = [it for r in batch for it in r.items]
        level: Durability = max((r.durability for r in batch), key=lambda d: _RANK[d])
        try:
            outcomes = self._write(items, level) if items else []
            if len(outcomes) != len(items):
                raise InvariantError(f"a batch of {len(items)} records got {len(outcomes)} outcomes")
        except BaseException as exc:  # the backend's bug or an interrupt: every caller hears of it
            for r in batch:
                r.error = exc
            return
        at = 0
        for r in batch:
            r.outcomes = outcomes[at : at + len(r.items)]
            at += len(r.items)
