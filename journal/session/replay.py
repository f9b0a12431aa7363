"""Replay: fold the log into state with a reducer, optionally starting from a verified snapshot.

Replay reads; it never appends, runs a tool or calls a model. Events must arrive contiguous in
seq: a gap is an error (never skipped), the same event twice is dropped, two different events
with one seq are an error. ``time`` is never looked at. A snapshot is only a cache: it is used
when its reducer name and version, its checksum and the digest of the record at its lastSeq all
match the journal; otherwise the state is rebuilt from seq 1 and the reason is reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import xxhash

from journal.api import Journal
from journal.session.envelope import Event, decode
from journal.session.errors import DuplicateSeqError, SequenceGapError
from journal.session.reducer import Reducer
from journal.session.registry import EventType, Registry

S = TypeVar("S")


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Snapshot:
    """Derived state at ``last_seq``, with what it takes to tell whether it still matches the log."""

    last_seq: int
    last_digest: int  # xxh64 of the stored payload of the record at last_seq (0 when last_seq is 0)
    reducer: str
    reducer_version: int
    checksum: int  # xxh64 of the canonical JSON of ``state``
    state: dict[str, Any]
    # Registry.fingerprint of the registry the state was folded with (make_snapshot's
    # ``registry``): replay then uses the snapshot only with a registry of the same fingerprint.
    # None: not recorded, not checked.
    registry: str | None = None

    def to_json(self) -> str:
        return json.dumps({"lastSeq": self.last_seq, "lastDigest": self.last_digest, "reducer": self.reducer,
                           "reducerVersion": self.reducer_version, "checksum": self.checksum, "state": self.state,
                           "registry": self.registry})

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        d = json.loads(text)
        return cls(d["lastSeq"], d["lastDigest"], d["reducer"], d["reducerVersion"], d["checksum"], d["state"],
                   d.get("registry"))


@dataclass
class Replayed(Generic[S]):
    state: S
    last_seq: int
    replayed: int  # events folded in this run
    skipped: int  # unknown types marked ignorable
    duplicates: int  # the same seq delivered twice, dropped
    reducer: str
    reducer_version: int
    from_snapshot: bool = False
    rebuild_reason: str | None = None  # why a given snapshot was not used

    def snapshot(self, reducer: Reducer[S], last_digest: int, registry: Registry | None = None) -> Snapshot:
        dumped = json.loads(_canonical(reducer.dump(self.state)))
        return Snapshot(self.last_seq, last_digest, reducer.name, reducer.version,
                        xxhash.xxh64_intdigest(_canonical(dumped)), dumped,
                        None if registry is None else registry.fingerprint())


def fold(
    items: Iterable[tuple[int, tuple[Event, EventType] | None]],
    reducer: Reducer[S],
    state: S,
    after_seq: int = 0,
) -> Replayed[S]:
    """Fold (seq, decoded-or-None) pairs in order into ``state``. Pure: no I/O."""
    expected = after_seq + 1
    replayed = skipped = duplicates = 0
    last: Event | None = None
    for seq, item in items:
        if seq == expected - 1 and last is not None and item is not None and seq == last.seq:
            if item[0].to_stored() == last.to_stored():
                duplicates += 1
                continue
            raise DuplicateSeqError(seq)
        if seq != expected:
            raise SequenceGapError(expected, seq)
        expected += 1
        if item is None:
            skipped += 1
            continue
        event, spec = item
        state = reducer.apply(state, event, spec)
        last = event
        replayed += 1
    return Replayed(state, expected - 1, replayed, skipped, duplicates, reducer.name, reducer.version)


def replay_events(events: Iterable[tuple[Event, EventType]], reducer: Reducer[S]) -> Replayed[S]:
    """Replay already-decoded events (tests, importers). Checks contiguity like the journal path."""
    return fold(((e.seq, (e, s)) for e, s in events), reducer, reducer.initial())


def _decoded(j: Journal, registry: Registry, after_seq: int) -> Iterator[tuple[int, tuple[Event, EventType] | None]]:
    for rec in j.read(after_seq=after_seq):
        yield rec.seq, decode(rec, registry)


def record_digest(j: Journal, seq: int) -> int | None:
    if seq == 0:
        return 0
    rec = j.get(seq)
    return None if rec is None else xxhash.xxh64_intdigest(rec.payload)


def check_snapshot(j: Journal, snap: Snapshot, reducer: Reducer[Any], registry: Registry) -> str | None:
    """None when the snapshot can be trusted for ``j``; otherwise why not."""
    if snap.reducer != reducer.name or snap.reducer_version != reducer.version:
        return (f"snapshot made by reducer {snap.reducer} v{snap.reducer_version}, "
                f"replaying with {reducer.name} v{reducer.version}")
    if snap.registry is not None and snap.registry != registry.fingerprint():
        return (f"snapshot folded with another event-type registry (fingerprint {snap.registry}, this one's "
                f"{registry.fingerprint()}): a type was registered, or defined otherwise, since")
    if xxhash.xxh64_intdigest(_canonical(snap.state)) != snap.checksum:
        return "snapshot checksum does not match its state"
    if snap.last_seq > j.last_seq:
        return f"snapshot is at seq {snap.last_seq}, beyond the journal's last seq {j.last_seq}"
    digest = record_digest(j, snap.last_seq)
    if digest != snap.last_digest:
        return f"the record at seq {snap.last_seq} is not the one the snapshot was made after"
    return None


def replay(j: Journal, registry: Registry, reducer: Reducer[S], snapshot: Snapshot | None = None) -> Replayed[S]:
    """Replay the session in ``j``: from ``snapshot`` when it matches the log, else from seq 1."""
    reason = None
    if snapshot is not None:
        reason = check_snapshot(j, snapshot, reducer, registry)
        if reason is None:
            try:
                state = reducer.load(snapshot.state)
            except (KeyError, TypeError, ValueError) as exc:
                reason = f"snapshot state does not load: {exc}"
            else:
                out = fold(_decoded(j, registry, snapshot.last_seq), reducer, state, snapshot.last_seq)
                out.from_snapshot = True
                return out
    out = fold(_decoded(j, registry, 0), reducer, reducer.initial())
    out.rebuild_reason = reason
    return out


def make_snapshot(j: Journal, result: Replayed[S], reducer: Reducer[S], registry: Registry | None = None) -> Snapshot:
    """An in-memory snapshot of ``result`` (folded by ``reducer`` from ``j``); with ``registry``,
    the one it was folded with, which replay then checks (Registry.fingerprint)."""
    digest = record_digest(j, result.last_seq)
    if digest is None:
        raise ValueError(f"the journal holds no record at seq {result.last_seq}; replay it again")
    return result.snapshot(reducer, digest, registry)
