"""The session-repair workload for the crash harness (journal.crashsim): a power loss inside repair.

Importing this module registers the workload "session-repair". Its starting image is a session
cut in the middle of a turn (a tool started, another requested, an approval pending, deltas of
an unfinished attempt, an open compaction and a running job); the recorded run is one open of
that session, that is, one repair. The harness crashes it at every point it can and recovers
each image with ``recover_and_check``, which holds the core invariants (it reads through the
core alone, so nothing it does adds records) and the session's own: the closers that survived
are a prefix of the plan for the pre-repair events, and repairing the image (on a copy) ends
with exactly the events an uncrashed repair writes -- the same payloads, keys and order.
"""

from __future__ import annotations

import json
from typing import Any, cast

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, Ledger, workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.fs import FileSystem
from journal.session.closers import RepairPolicy, plan_closers
from journal.session.dangling import find_dangling
from journal.session.envelope import decode
from journal.session.registry import Registry
from journal.session.session import Session

SESSION_ID = "s-crash"
FIXED_TIME = "2026-01-01T00:00:00Z"


class SessionRepairViolation(AssertionError):
    """A session-level invariant failed on a recovered crash image."""


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    s = Session.attach(cast(Journal, ctx.open()), create=True, session_id=SESSION_ID, clock=lambda: FIXED_TIME,
                       workspace={"path": "/repo"})
    rng = ctx.rng
    s.append("turn.started", turn_id="t1")
    s.append("step.started", turn_id="t1", step_id="s1")
    s.append("tool.requested", {"tool": "edit", "sideEffect": "workspace-write", "n": seed}, turn_id="t1",
             step_id="s1", tool_call_id="c1")
    s.append("tool.started", turn_id="t1", step_id="s1", tool_call_id="c1")
    if rng.random() < 0.7:
        s.append("tool.requested", {"tool": "bash"}, turn_id="t1", step_id="s1", tool_call_id="c2")
    if rng.random() < 0.5:
        s.append("tool.requested", {"tool": "rm"}, turn_id="t1", step_id="s1", tool_call_id="c3", approval_id="a3")
        s.append("approval.requested", {}, turn_id="t1", tool_call_id="c3", approval_id="a3")
    if rng.random() < 0.5:
        s.append("assistant.delta", {"text": "par"}, turn_id="t1", step_id="s1", attempt_id="a1")
    if rng.random() < 0.4:
        s.append("compaction.started", {"compactionId": "k1"}, turn_id="t1")
    if rng.random() < 0.4:
        s.append("job.started", {"jobId": "j1", "command": "serve"}, turn_id="t1")
    s.journal.sync()
    s.journal.close()  # the lock goes; the session was never closed properly (no turn end)
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


def _records(fs: FileSystem, options: dict[str, Any], create: bool) -> list[Record]:
    j = Journal.open(JOURNAL_PATH, create=create, fs=fs, **options)
    try:
        return list(j.read())
    finally:
        j.close()


def _shape(recs: list[Record]) -> list[tuple[bytes, str | None, bool]]:
    return [(r.payload, r.key, r.synthetic) for r in recs]


def check_session(recs: list[Record], fs: FileSystem, options: dict[str, Any]) -> list[str]:
    """The session invariants of a recovered image (violations as strings)."""
    registry = Registry()
    facts = [r for r in recs if not r.synthetic]
    if [r.seq for r in facts] != list(range(1, len(facts) + 1)):
        return ["a synthetic closer sits between the session's own events"]
    decoded = [d for d in (decode(r, registry) for r in facts) if d is not None]
    plan = plan_closers(find_dangling(decoded), RepairPolicy())
    expected = [(json.dumps(c.event.to_stored(), ensure_ascii=False, separators=(",", ":")).encode(), c.key, True)
                for c in plan]
    got = _shape(recs[len(facts):])
    out: list[str] = []
    if got != expected[: len(got)]:
        out.append(f"the {len(got)} closers on disk are not a prefix of the {len(expected)} planned")
    if not isinstance(fs, MemFileSystem):
        return out
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    s = Session.attach(Journal.open(JOURNAL_PATH, fs=clone, **options))
    try:
        final = list(s.journal.read())
        state = s.replay().state
    finally:
        s.close()
    if _shape(final) != _shape(facts) + expected:
        out.append("repairing the crashed repair does not give the events of an uncrashed repair")
    if state.pending_tools() or state.open_turns() or state.open_steps() or state.pending_approvals():
        out.append("the repaired session still has an open tool call, turn, step or approval")
    return out


def _is_session_event(r: Record) -> bool:
    return not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Core recovery, then the session checks -- unless the harness appended its own records after
    recovery (invariant 6), which are not session events: those images get the core checks only."""
    recs = _records(fs, options, create)
    ours = bool(recs) and all(_is_session_event(r) for r in recs)
    problems = check_session(recs, fs, options) if ours else []
    if problems:
        raise SessionRepairViolation("; ".join(problems))
    return recs


@workload(
    "session-repair",
    recover=recover_and_check,
    prepare=_first_life,
    reserve_bytes=CRASH_RESERVE_BYTES,
)
def session_repair(ctx: Ctx) -> None:
    """Open the cut session once: repair appends its closers in one synced batch."""
    s = Session.attach(cast(Journal, ctx.open(create=False)))
    s.close()
