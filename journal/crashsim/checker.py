"""The invariants: recover a crash image and say what, if anything, the engine got wrong.

What a crash at point k must leave (docs/CRASH-TESTING.md has the reasons):

1. durable -- every record acknowledged Committed at "sync" before k is read back, byte-exact,
   at the seq it was given;
2. genuine -- every record read back was appended (its payload names an append that started
   before k) at exactly the seq its outcome names, and was never NotCommitted;
3. contiguous -- seqs read back are f, f+1, ..., n, where f is 1, or where a drop_prefix that
   started before k made the journal begin (and no earlier than one that returned before k);
4. no refusal -- recovery does not raise, unless the crash damaged synced bytes (possible only
   without power-safe overwrite), and then only CorruptionError: damage is reported, never
   silently dropped;
5. stable -- recovering the recovered image again gives the same records and the same files;
6. writable -- appends after recovery continue at n+1 and survive the next power loss;
7. recovery is crash-safe -- a second power loss anywhere inside recovery still satisfies 1-4;

and the workload's own ``check``, given the records read back and the ledger as it stood at the
crash, returns no violation.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from journal.crashsim.memfs import Image, MemFileSystem
from journal.crashsim.model import Replay, crash_points, exhaustive, sample
from journal.crashsim.workloads.core import JOURNAL_PATH, Ledger, Workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.errors import CorruptionError
from journal.outcomes import Committed, NotCommitted


@dataclass
class Expect:
    """What the ledger says about a crash at one point, in the form the checker needs."""

    required: dict[int, bytes]  # seq -> payload of records acknowledged at "sync" before the crash
    allowed: dict[bytes, int | None]  # payload -> seq of every record that may be read back
    forbidden: set[bytes]  # payloads whose outcome was NotCommitted: never readable
    created: bool  # journal creation had returned before the crash
    # Where the journal may begin: 1, or the first seq of a drop_prefix that started before the
    # crash; and at least that of the last one that returned before it.
    firsts: frozenset[int] = frozenset({1})
    first_min: int = 1

    @classmethod
    def at(cls, ledger: Ledger, point: int) -> Expect:
        required: dict[int, bytes] = {}
        allowed: dict[bytes, int | None] = {}
        forbidden: set[bytes] = set()
        firsts, first_min = {1}, 1
        for d in ledger.drops:
            if d.start < point:
                firsts.add(d.first_seq)
            if 0 <= d.end <= point:
                first_min = max(first_min, d.first_seq)
        for a in ledger.attempts:
            if isinstance(a.outcome, NotCommitted):
                forbidden.add(a.payload)
                continue
            if a.start < point or a.start == 0:
                allowed[a.payload] = a.seq
            o = a.outcome
            if isinstance(o, Committed) and o.durability == "sync" and 0 <= a.end <= point and not o.duplicate:
                required[o.seq] = a.payload
        return cls(required, allowed, forbidden, 0 <= ledger.created_at <= point, frozenset(firsts), first_min)

    def to_json(self) -> dict[str, Any]:
        return {
            "required": {str(s): p.hex() for s, p in self.required.items()},
            "allowed": [[p.hex(), s] for p, s in self.allowed.items()],
            "forbidden": [p.hex() for p in self.forbidden],
            "created": self.created,
            "firsts": sorted(self.firsts),
            "firstMin": self.first_min,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Expect:
        return cls(
            {int(s): bytes.fromhex(p) for s, p in d["required"].items()},
            {bytes.fromhex(p): s for p, s in d["allowed"]},
            {bytes.fromhex(p) for p in d["forbidden"]},
            bool(d["created"]),
            frozenset(d.get("firsts", [1])),
            int(d.get("firstMin", 1)),
        )


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    records: list[tuple[int, bytes]] = field(default_factory=list)
    detected_damage: bool = False  # recovery refused with CorruptionError and the model allowed it
    image_after: Image | None = None


def _recover_records(wl: Workload, image: Image, create: bool) -> tuple[list[Record], MemFileSystem]:
    fs = MemFileSystem.from_image(image)
    fs.record_reads = False
    return wl.recover(fs, JOURNAL_PATH, wl.options, create), fs


def _recover(wl: Workload, image: Image, create: bool) -> tuple[list[tuple[int, bytes]], MemFileSystem]:
    recs, fs = _recover_records(wl, image, create)
    return [(r.seq, r.payload) for r in recs], fs


def workload_check(wl: Workload, records: list[Record], ledger: Ledger | None) -> list[str]:
    """The workload's own ``check`` on the records read back (nothing without one, or without
    the ledger); a check that raises is a violation too."""
    if wl.check is None or ledger is None:
        return []
    try:
        found = wl.check(records, ledger)
    except Exception as exc:
        return [f"the workload's check raised {type(exc).__name__}: {exc}"]
    return [f"workload check: {v}" for v in found]


def check_records(recs: list[tuple[int, bytes]], exp: Expect) -> list[str]:
    out: list[str] = []
    seqs = [s for s, _ in recs]
    # No record read back: the journal may begin where the latest drop that started put it, and
    # every acknowledged record before that may be gone with the drop (the ones after it not).
    first = seqs[0] if seqs else max(exp.firsts)
    if first not in exp.firsts or first < exp.first_min:
        out.append(f"the journal begins at seq {first}; only {sorted(exp.firsts)} (at least {exp.first_min}) may be")
        first = 1
    if seqs != list(range(first, first + len(seqs))):
        out.append(f"seqs not contiguous from {first}: {seqs[:20]}")
    got = dict(recs)
    for seq, payload in sorted(exp.required.items()):
        if seq < first:
            continue  # dropped by a drop_prefix (the check above says whether it may have been)
        if seq not in got:
            out.append(f"record seq {seq} acknowledged Committed(sync) before the crash is missing")
        elif got[seq] != payload:
            out.append(f"record seq {seq} acknowledged Committed(sync) reads back different bytes")
    for seq, payload in recs:
        if payload in exp.forbidden:
            out.append(f"record seq {seq} was reported NotCommitted but is in the journal")
        elif payload not in exp.allowed:
            out.append(f"record seq {seq} was never appended before the crash ({payload[:40]!r})")
        elif exp.allowed[payload] is not None and exp.allowed[payload] != seq:
            out.append(f"record seq {seq} was acknowledged with seq {exp.allowed[payload]}")
    return out


def check_image(
    wl: Workload,
    image: Image,
    exp: Expect,
    damaged_synced: bool,
    rng: random.Random,
    deep: bool = False,
    second_crash_states: int = 0,
    padded: bool = False,
    ledger: Ledger | None = None,
) -> Verdict:
    """Recover ``image`` and check invariants 1-5 (and 6-7 when ``deep`` / asked), and the
    workload's own ``check`` with ``ledger`` (the ledger as it stood at the crash).

    ``padded``: the engine runs with its sector padding option, so no unsynced write may share a
    sector with synced bytes; damage to synced bytes is then the engine's fault, and refusing
    to open is a violation, not an allowed report.
    """
    v = Verdict()
    try:
        records, fs1 = _recover_records(wl, image, create=not exp.created)
    except CorruptionError as exc:
        if damaged_synced and not padded:
            v.detected_damage = True
        elif damaged_synced:
            v.violations.append(f"with sector padding on, an unsynced write shared a sector with synced bytes: {exc}")
        else:
            v.violations.append(f"recovery refused an image a power loss can leave: {exc}")
        return v
    except Exception as exc:
        v.violations.append(f"recovery raised {type(exc).__name__}: {exc}")
        return v
    recs = [(r.seq, r.payload) for r in records]
    v.records = recs
    v.violations.extend(check_records(recs, exp))
    v.violations.extend(workload_check(wl, records, ledger))
    if damaged_synced and v.violations:
        why = "despite sector padding" if padded else "(no power-safe overwrite)"
        v.violations.insert(0, f"synced bytes were damaged {why} and the loss went unreported")
    after = fs1.snapshot()
    v.image_after = after
    try:
        recs2, fs2 = _recover(wl, after, create=False)
    except Exception as exc:
        v.violations.append(f"second recovery of the recovered image raised {type(exc).__name__}: {exc}")
        return v
    if recs2 != recs:
        v.violations.append(f"recovering twice gives different records ({len(recs)} then {len(recs2)})")
    if fs2.snapshot()[0] != after[0]:
        v.violations.append("recovering twice gives different files")
    if v.violations:
        return v
    if deep:
        v.violations.extend(_check_appends_after(wl, after, recs, exp, rng))
    if second_crash_states:
        v.violations.extend(_check_crash_in_recovery(wl, image, exp, rng, second_crash_states))
    return v


def _check_appends_after(
    wl: Workload, image: Image, recs: list[tuple[int, bytes]], exp: Expect, rng: random.Random
) -> list[str]:
    """Invariant 6: appends continue at the next seq and survive the next power loss."""
    fs = MemFileSystem.from_image(image)
    fs.record_reads = False
    j = Journal.open(JOURNAL_PATH, fs=fs, **wl.options)
    # The last seq read; a journal whose prefix was dropped begins later than 1, maybe empty.
    first = recs[0][0] if recs else j.first_seq
    n = recs[-1][0] if recs else j.first_seq - 1
    events = [b"after-recovery-%d-%d" % (n, i) for i in range(3)]
    try:
        if j.last_seq != n:
            return [f"after recovery last_seq is {j.last_seq}, records were read up to seq {n}"]
        outs = [j.append(events[0], durability="sync"), *j.append_many(events[1:], durability="sync")]
    finally:
        j.close()
    out: list[str] = []
    for i, o in enumerate(outs):
        if not (isinstance(o, Committed) and o.seq == n + 1 + i):
            out.append(f"append after recovery gave {o}, expected Committed(seq={n + 1 + i})")
    if out:
        return out
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while replay.point < len(fs.log):
        replay.advance()
    exp2 = Expect(
        {**dict(recs), **{n + 1 + i: e for i, e in enumerate(events)}},
        {**{p: s for s, p in recs}, **{e: n + 1 + i for i, e in enumerate(events)}},
        set(),
        True,
        frozenset({first}),
        first,
    )
    for state in (sample(replay, "psow", rng), sample(replay, "psow", rng)):
        built = replay.build(state)
        try:
            recs3, _ = _recover(wl, built.image, create=False)
        except Exception as exc:
            return [f"recovery after post-recovery appends raised {type(exc).__name__}: {exc}"]
        out.extend(f"after post-recovery appends and a crash: {m}" for m in check_records(recs3, exp2))
    return out


def _check_crash_in_recovery(
    wl: Workload, image: Image, exp: Expect, rng: random.Random, states: int
) -> list[str]:
    """Invariant 7: record recovery's own trace and crash it."""
    fs = MemFileSystem.from_image(image)
    fs.record_reads = False
    try:
        wl.recover(fs, JOURNAL_PATH, wl.options, not exp.created)
    except Exception:
        return []  # the first recovery already reported this
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    points = set(crash_points(fs.log))
    candidates = []
    while True:
        if replay.point in points:
            candidates.extend(list(exhaustive(replay, "psow", rng))[:: max(1, len(fs.log) // 8)])
        if replay.point >= len(fs.log):
            break
        replay.advance()
    # Rebuild the chosen states in order (a Replay only moves forward).
    chosen = sorted(rng.sample(candidates, min(states, len(candidates))), key=lambda s: s.point)
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    out: list[str] = []
    for state in chosen:
        while replay.point < state.point:
            replay.advance()
        built = replay.build(state)
        try:
            recs, _ = _recover(wl, built.image, create=not exp.created)
        except Exception as exc:
            out.append(f"crash inside recovery ({state.label} at op {state.point}): reopen raised {exc}")
            break
        out.extend(f"crash inside recovery at op {state.point}: {m}" for m in check_records(recs, exp))
        if out:
            break
    return out
