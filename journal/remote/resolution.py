"""An AckLost made and resolved: what every server backend does the same way when a write's answer is lost.

A write whose answer never came (the COMMIT's, the publish's ack) is AckLost for each of its
records, carrying the seq it was given, the digest of its payload and its idempotency key
(``ack_lost``). resolve() on a handle that can see what the failed writer wrote (one that holds
the writer's claim now, or that has caught up with the journal) answers it from what the server
holds (``resolve_from``): the key held by a record is Committed, as a duplicate, at that record's
seq; else the record at the seq is Committed if its payload's digest and its key are the ones
the AckLost carries; else it is NotCommitted (the journal ends before the seq, or another record
holds it). The backend says how durable what it found is (``level``), and how to look the key
and the seq up.
"""

from __future__ import annotations

from collections.abc import Callable

import xxhash

from journal.engine.encoding import Encoded
from journal.outcomes import AckLost, Committed, Durability, NotCommitted, Outcome
from journal.record import Record


def ack_lost(seq: int, enc: Encoded, why: str) -> AckLost:
    """The outcome of record ``enc``, given ``seq``, whose write's answer was lost: what
    resolve_from compares with what the journal holds."""
    return AckLost(seq, why, enc.digest, enc.key)


def is_record_of(rec: Record, outcome: AckLost) -> bool:
    """Whether ``rec`` is the record ``outcome`` was about: the same payload digest and key."""
    return xxhash.xxh64_intdigest(rec.payload) == outcome.digest and rec.key == outcome.key


def resolve_from(
    outcome: AckLost,
    by_key: Callable[[str], int | None],
    get: Callable[[int], Record | None],
    level: Callable[[], Durability],
) -> Outcome:
    """Committed or NotCommitted for ``outcome``, from what the journal holds.

    ``by_key(key)``: the seq of the record the journal holds under the key (verified), or None.
    ``get(seq)``: the record at seq (verified), or None if the journal does not hold it.
    ``level()``: the durability of what was found (asked only once something is found).
    """
    if outcome.key is not None:
        seq = by_key(outcome.key)
        if seq is not None:
            return Committed(seq, level(), duplicate=True, reason="resolved by idempotency key")
    rec = get(outcome.seq)
    if rec is not None and is_record_of(rec, outcome):
        return Committed(outcome.seq, level(), reason="resolved: the record is in the journal")
    if rec is None:
        return NotCommitted("resolved: the journal ends before this record's seq")
    return NotCommitted("resolved: another record holds this record's seq")
