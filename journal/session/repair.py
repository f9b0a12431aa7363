"""Structural repair: after the core's byte-level recovery, close every dangling structure.

The core has already cut a torn tail (journal.open does that); what is left is a prefix of
complete events that may stop inside a tool call, a step, a turn, an attempt, a compaction, an
approval or a job. Repair keeps every complete event and appends the closers of closers.py,
flagged synthetic, in one synced batch with idempotency keys. Nothing is deleted or hidden. A dry
run computes the same plan and writes nothing (it also works on a journal opened readonly).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from journal.api import Committed, Journal, RecoveryReport
from journal.session.closers import Closer, RepairPolicy, plan_closers
from journal.session.dangling import Dangling, find_dangling
from journal.session.envelope import Event, decode
from journal.session.errors import RepairIncompleteError
from journal.session.registry import EventType, Registry


@dataclass
class Loaded:
    events: list[tuple[Event, EventType]]
    skipped: int  # unknown types their writer marked ignorable


def iter_events(j: Journal, registry: Registry, after_seq: int = 0) -> Iterator[tuple[Event, EventType] | None]:
    """Decoded events in seq order; None stands for an unknown-but-ignorable event."""
    for rec in j.read(after_seq=after_seq):
        yield decode(rec, registry)


def load(j: Journal, registry: Registry) -> Loaded:
    events: list[tuple[Event, EventType]] = []
    skipped = 0
    for item in iter_events(j, registry):
        if item is None:
            skipped += 1
        else:
            events.append(item)
    return Loaded(events, skipped)


@dataclass
class RepairReport:
    """What repair found and did. ``closers`` carry their seqs once appended (0 in a dry run)."""

    recovery: RecoveryReport
    dry_run: bool
    closers: list[Event] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # open structures left open on purpose (policy)
    events_scanned: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.closers) and not self.dry_run

    def summary(self) -> str:
        lines = [f"byte-level: {line}" for line in self.recovery.summary().splitlines()]
        verb = "would append" if self.dry_run else "appended"
        lines.append(f"structure: scanned {self.events_scanned} events; {verb} {len(self.closers)} synthetic closers")
        for ev in self.closers:
            closes = ev.data.get("closes", {})
            what = ev.data.get("status") or ev.data.get("decision") or ev.data.get("reason")
            seq = f"seq {ev.seq}" if ev.seq else "seq -"
            lines.append(f"  {seq}: {ev.type} [{what}] closes {closes.get('type')} at seq {closes.get('seq')}"
                         + (f" (toolCallId {ev.tool_call_id})" if ev.tool_call_id else ""))
        lines.extend(f"  kept open: {k}" for k in self.kept)
        return "\n".join(lines)


def _kept(d: Dangling, policy: RepairPolicy, planned: list[Closer]) -> list[str]:
    closed = {c.closes.seq for c in planned}
    kept = [
        f"approval {a} (seq {e.seq}) pending, policy keeps it" for a, e in d.approvals.items() if e.seq not in closed
    ]
    kept += [f"job {jid} (seq {e.seq}) running, policy keeps it" for jid, e in d.jobs.items() if e.seq not in closed]
    kept += [
        f"tool call {cid} (seq {t.request.seq}) waits for its kept approval"
        for cid, t in d.tools.items()
        if (t.started or t.request).seq not in closed
    ]
    return kept


def plan(j: Journal, registry: Registry, policy: RepairPolicy) -> tuple[list[Closer], Dangling]:
    loaded = load(j, registry)
    d = find_dangling(loaded.events)
    return plan_closers(d, policy), d


def repair(j: Journal, registry: Registry, policy: RepairPolicy | None = None, dry_run: bool = False) -> RepairReport:
    """Close every dangling structure of the session in ``j`` (or, with dry_run, only say how)."""
    return repair_dangling(j, find_dangling(load(j, registry).events), policy, dry_run)


def repair_dangling(j: Journal, d: Dangling, policy: RepairPolicy | None = None, dry_run: bool = False) -> RepairReport:
    """``repair`` with the open structures already found: ``d`` is what find_dangling gives for
    every event of ``j`` (Session.open carries it in its snapshot and folds only the tail)."""
    policy = policy or RepairPolicy()
    closers = plan_closers(d, policy)
    report = RepairReport(j.recovery, dry_run or j.readonly, events_scanned=d.events, kept=_kept(d, policy, closers))
    if not closers:
        return report
    if report.dry_run:
        report.closers = [c.event for c in closers]
        return report
    outs = j.append_many(
        [c.event.to_stored() for c in closers],
        durability="sync",
        idempotency_keys=[c.key for c in closers],
        synthetic=True,
    )
    done: list[Event] = []
    for c, out in zip(closers, outs, strict=True):
        if not isinstance(out, Committed):
            raise RepairIncompleteError(len(done), len(closers), out.reason)
        done.append(c.event.with_seq(out.seq, synthetic=True))
    report.closers = done
    return report
