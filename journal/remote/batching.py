"""Cutting records into batches and planning a group write: what every server backend does the same way.

A call's events and their keys are paired first (``events_and_keys``: one key, or None, per
event). A call's records reach the server in runs: an unkeyed append_many is cut into runs that fit one
transaction or one message (``runs``) and written one run after another, and once the journal
has fail-stopped the runs not yet sent are NotCommitted without being tried (``write_runs``). A
key repeated inside one call is written once, its repeats answered as duplicates of the first
(``keyed_once``).

A group write (many callers' records in one batch) is planned before it is sent
(``plan_group``): a record whose idempotency key the journal already holds (a retry) or that an
earlier record of the batch carries is a duplicate of that record when it holds the same event,
and refuses its whole call when it holds another (IdempotencyConflictError, nothing of the call
written); every other record gets the next seq. ``outcomes_of`` turns the plan and the write's
fate ("ok", "not": nothing written, "lost": the answer never came) into one outcome per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from journal.engine.encoding import Encoded, repeated_keys, same_event, with_repeats
from journal.errors import InvalidArgumentError, InvariantError
from journal.outcomes import Committed, Durability, NotCommitted, Outcome
from journal.remote.resolution import ack_lost

T = TypeVar("T")

NEW: Final = "new"  # written at the seq the step names
DUP: Final = "dup"  # a record the journal (or the batch) holds under its key, the same event: not written
REFUSED: Final = "refused"  # its call carries a key held by another event: nothing of the call is written
BARRIER: Final = "barrier"  # no record (a flush or sync marker): nothing to write, nothing to answer

Fate = Literal["ok", "not", "lost"]


def events_and_keys(
    events: Iterable[Any], idempotency_keys: Iterable[str | None] | None
) -> tuple[list[Any], list[str | None]]:
    """An append_many's events and one idempotency key (or None) per event; InvalidArgumentError,
    before anything is encoded or written, when the counts differ."""
    listed = list(events)
    keys: list[str | None] = list(idempotency_keys) if idempotency_keys is not None else [None] * len(listed)
    if len(keys) != len(listed):
        raise InvalidArgumentError(
            f"idempotency_keys must have one entry per event ({len(keys)} keys for {len(listed)} events); "
            "nothing was written"
        )
    return listed, keys


def runs(
    items: Iterable[T], size_of: Callable[[T], int], bytes_max: int, records_max: int | None = None
) -> Iterator[list[T]]:
    """``items`` in order, in runs of at most ``records_max`` items (no limit if None) whose
    ``size_of`` add up to at most ``bytes_max`` bytes. A run holds at least one item: one larger
    than ``bytes_max`` alone is a run of its own (the server refuses it, never this cut)."""
    run: list[T] = []
    size = 0
    for it in items:
        n = size_of(it)
        if run and ((records_max is not None and len(run) >= records_max) or size + n > bytes_max):
            yield run
            run, size = [], 0
        run.append(it)
        size += n
    if run:
        yield run


def write_runs(
    chunks: Iterable[list[T]], submit: Callable[[list[T]], list[Outcome]], failed: Callable[[], str | None]
) -> list[Outcome]:
    """Each run submitted in turn; its outcomes, in order. Once ``failed`` (the journal's
    fail-stop reason) is set after a run, the runs left are NotCommitted without being sent."""
    outcomes: list[Outcome] = []
    for chunk in chunks:
        why = failed() if outcomes else None
        if why is not None:
            reason = f"journal fail-stopped before this record was written: {why}"
            outcomes.extend([NotCommitted(reason)] * len(chunk))
            continue
        outcomes.extend(submit(chunk))
    return outcomes


def keyed_once(encoded: list[Encoded], write: Callable[[list[Encoded]], list[Outcome]]) -> list[Outcome]:
    """``write`` the call's records with each idempotency key once; a repeat of a key in the call
    gets the first one's outcome (as a duplicate when it was committed)."""
    repeats = repeated_keys(encoded) if any(it.key is not None for it in encoded) else {}
    if not repeats:
        return write(encoded)
    unique = [it for i, it in enumerate(encoded) if i not in repeats]
    return with_repeats(write(unique), repeats, len(encoded))


@dataclass(frozen=True)
class Held:
    """A record the journal holds under an idempotency key, as a plan needs it: its seq and its
    payload (``raw``, ``is_bytes``), or only the payload's digest where a backend keeps digests
    of the keys it has seen (it reads the payload when a digest differs: ``holds`` says None)."""

    seq: int
    raw: bytes | None = None
    is_bytes: bool = False
    digest: int | None = None

    def holds(self, item: Encoded) -> bool | None:
        """Whether this record is ``item``'s event (the same bytes, or for JSON the same value
        with its keys in another order); None when only a digest is known and it differs."""
        if self.raw is not None:
            return same_event(self.raw, self.is_bytes, item)
        if self.digest is not None and self.digest == item.digest:
            return True
        return None


@dataclass
class Step:
    """What the plan does with one record: its kind (NEW, DUP, REFUSED, BARRIER), the seq it is
    written at (NEW), the seq of the record it duplicates (DUP) or that holds its key (REFUSED)."""

    kind: str
    seq: int = 0
    key: str | None = None


def plan_group(
    items: Sequence[Encoded],
    known: Mapping[str, Held],
    next_seq: int,
    call_of: Callable[[int, Encoded], int],
    is_barrier: Callable[[Encoded], bool] = lambda _it: False,
) -> tuple[list[Step], list[tuple[int, Encoded]]]:
    """The plan of a batch: a Step per item, and the rows to write (seq, record) from ``next_seq``.

    ``known``: the keys the journal holds (the stored records a look-up found, and records the
    handle has written or buffers). ``call_of(position, item)``: the caller's call an item came
    in; consecutive items of one call are refused together. A key a call repeats from an
    earlier call of the batch is that record's duplicate. Raises InvariantError where a Held
    cannot tell (a digest only, and it differs): give it the payload first.
    """
    seen: dict[str, Held] = dict(known)
    steps: list[Step] = []
    rows: list[tuple[int, Encoded]] = []
    i = 0
    while i < len(items):
        call = call_of(i, items[i])
        end = i
        while end < len(items) and call_of(end, items[end]) == call:
            end += 1
        mine: dict[str, Held] = {}
        these: list[Step] = []
        conflict: tuple[str, int] | None = None
        seq = next_seq
        for it in items[i:end]:
            if is_barrier(it):
                these.append(Step(BARRIER))
                continue
            if it.key is not None:
                hit = mine.get(it.key) or seen.get(it.key)
                if hit is not None:
                    same = hit.holds(it)
                    if same is None:
                        raise InvariantError(f"the record holding idempotency key {it.key!r} (seq {hit.seq}) is "
                                             "known by its digest only: a plan needs its payload")
                    if same:
                        these.append(Step(DUP, hit.seq, it.key))
                        continue
                    conflict = (it.key, hit.seq)
                    break
                mine[it.key] = Held(seq, it.raw, it.is_bytes)
            these.append(Step(NEW, seq, it.key))
            seq += 1
        if conflict is not None:
            steps.extend(Step(REFUSED, conflict[1], conflict[0]) for _ in range(end - i))
        else:
            steps.extend(these)
            rows.extend((st.seq, it) for st, it in zip(these, items[i:end], strict=True) if st.kind == NEW)
            seen.update(mine)
            next_seq = seq
        i = end
    return steps, rows


def outcomes_of(
    items: Sequence[Encoded],
    steps: Sequence[Step],
    fate: Fate,
    level: Durability,
    why: str,
    refused: Callable[[Step], Outcome],
) -> list[Outcome]:
    """One outcome per item of a planned batch whose write ended as ``fate``: "ok" (committed at
    ``level``), "not" (nothing written: ``why``) or "lost" (AckLost: the answer never came). A
    duplicate is Committed when the write went through, and AckLost otherwise (the record it
    duplicates may be the batch's own). ``refused`` makes a REFUSED step's outcome."""
    out: list[Outcome] = []
    for it, st in zip(items, steps, strict=True):
        if st.kind == REFUSED:
            out.append(refused(st))
        elif fate == "ok":
            if st.kind == DUP:
                out.append(Committed(st.seq, level, True, "idempotency key matched an existing record"))
            else:
                out.append(Committed(st.seq, level))
        elif fate == "not" and st.kind != DUP:
            out.append(NotCommitted(why))
        else:
            out.append(ack_lost(st.seq, it, why))
    return out
