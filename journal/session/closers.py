"""The synthetic closers repair appends: a pure function of the log, so repair is deterministic.

No closer reads a clock, a random source or the process: its ids come from the event it closes,
its time is the time of the last fact the runtime wrote before it stopped, and the order of the
closers is a fixed total order over the open structures (kind, then the seq that opened them).
Each closer depends only on its own structure, so after a repair that crashed halfway the plan
for what is still open is exactly the rest of the original plan, and the bytes come out the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from journal.session.dangling import Dangling, OpenTool, data_id
from journal.session.envelope import Event

REPAIR_VERSION = 1
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"
TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
INTERRUPTED = "interrupted"
EXPIRED = "expired"
ORPHANED = "orphaned"


class ApprovalPolicy(enum.Enum):
    EXPIRE = "expire"  # a pending approval is expired and counts as denied (never as allowed)
    KEEP = "keep"  # the same approvalId stays pending and is shown again, once, on resume


class JobPolicy(enum.Enum):
    ORPHAN = "orphan"  # nobody supervises a job once its runtime is gone: mark it orphaned
    KEEP = "keep"  # the runtime reattaches jobs itself (they outlive it by design)


@dataclass(frozen=True)
class RepairPolicy:
    approvals: ApprovalPolicy = ApprovalPolicy.EXPIRE
    jobs: JobPolicy = JobPolicy.ORPHAN


@dataclass(frozen=True)
class Closer:
    event: Event  # seq 0 until appended
    key: str  # idempotency key: repair:<kind>:<seq of the opener>
    closes: Event  # the event that opened what this closes
    kind: str


def _closes(opener: Event) -> dict[str, Any]:
    return {"type": opener.type, "seq": opener.seq}


def _base(d: Dangling) -> dict[str, Any]:
    last = d.last_fact
    return {"reason": INTERRUPTED, "lastFactSeq": last.seq if last else 0, "repairVersion": REPAIR_VERSION}


def _time(d: Dangling) -> str | None:
    return d.last_fact.time if d.last_fact is not None else None


def _tool_closer(d: Dangling, call_id: str, tool: OpenTool) -> Closer:
    req = tool.request
    started = tool.started
    status = TOOL_OUTCOME_UNKNOWN if started is not None else TOOL_NOT_STARTED
    data: dict[str, Any] = {**_base(d), "status": status, "closes": _closes(started or req)}
    for k in ("tool", "sideEffect", "idempotency"):
        if k in req.data:
            data[k] = req.data[k]
    if status == TOOL_OUTCOME_UNKNOWN:
        data["mustCheck"] = "the tool may have changed the world: check its target or ask the user; never retry blindly"
    else:
        data["mustCheck"] = "the tool never ran: reschedule it only if the goal still needs it"
    ev = Event(
        type="tool.result", session_id=req.session_id, time=_time(d), turn_id=req.turn_id, step_id=req.step_id,
        tool_call_id=call_id, approval_id=req.approval_id, causation_id=(started or req).seq,
        correlation_id=req.correlation_id, data=data, synthetic=True,
    )
    return Closer(ev, f"repair:tool:{req.seq}", started or req, "tool")


def plan_closers(d: Dangling, policy: RepairPolicy) -> list[Closer]:
    """Every closer repair would append, in the one order repair appends them."""
    out: list[Closer] = []
    kept_approval_tools: set[str] = set()
    for approval_id, opener in sorted(d.approvals.items(), key=lambda kv: kv[1].seq):
        if policy.approvals is ApprovalPolicy.KEEP:
            if opener.tool_call_id:
                kept_approval_tools.add(opener.tool_call_id)
            continue
        ev = Event(
            type="approval.decided", session_id=opener.session_id, time=_time(d), turn_id=opener.turn_id,
            step_id=opener.step_id, tool_call_id=opener.tool_call_id, approval_id=approval_id,
            causation_id=opener.seq, correlation_id=opener.correlation_id,
            data={**_base(d), "decision": EXPIRED, "allowed": False, "closes": _closes(opener)}, synthetic=True,
        )
        out.append(Closer(ev, f"repair:approval:{opener.seq}", opener, "approval"))
    for call_id, tool in sorted(d.tools.items(), key=lambda kv: kv[1].request.seq):
        if call_id in kept_approval_tools and tool.started is None:
            continue  # it waits for the approval that is kept; it has not failed
        out.append(_tool_closer(d, call_id, tool))
    for attempt_id, first in sorted(d.attempts.items(), key=lambda kv: kv[1].seq):
        ev = Event(
            type="attempt.interrupted", session_id=first.session_id, time=_time(d), turn_id=first.turn_id,
            step_id=first.step_id, attempt_id=attempt_id, causation_id=first.seq,
            data={**_base(d), "deltas": d.attempt_deltas.get(attempt_id, 0), "closes": _closes(first)},
            synthetic=True,
        )
        out.append(Closer(ev, f"repair:attempt:{first.seq}", first, "attempt"))
    for compaction_id, opener in sorted(d.compactions.items(), key=lambda kv: kv[1].seq):
        ev = Event(
            type="compaction.rolled_back", session_id=opener.session_id, time=_time(d), turn_id=opener.turn_id,
            causation_id=opener.seq,
            data={**_base(d), "compactionId": compaction_id, "closes": _closes(opener),
                  "effect": "history unchanged: the unfinished summary is not applied"},
            synthetic=True,
        )
        out.append(Closer(ev, f"repair:compaction:{opener.seq}", opener, "compaction"))
    if policy.jobs is JobPolicy.ORPHAN:
        for job_id, opener in sorted(d.jobs.items(), key=lambda kv: kv[1].seq):
            restart = {k: opener.data[k] for k in ("command", "cwd", "pid") if k in opener.data}
            ev = Event(
                type="job.ended", session_id=opener.session_id, time=_time(d), turn_id=opener.turn_id,
                causation_id=opener.seq,
                data={**_base(d), "jobId": job_id, "status": ORPHANED, "restart": restart, "closes": _closes(opener)},
                synthetic=True,
            )
            out.append(Closer(ev, f"repair:job:{opener.seq}", opener, "job"))
    for step_id, opener in sorted(d.steps.items(), key=lambda kv: kv[1].seq):
        ev = Event(
            type="step.ended", session_id=opener.session_id, time=_time(d), turn_id=opener.turn_id, step_id=step_id,
            causation_id=opener.seq, data={**_base(d), "closes": _closes(opener)}, synthetic=True,
        )
        out.append(Closer(ev, f"repair:step:{opener.seq}", opener, "step"))
    for turn_id, opener in sorted(d.turns.items(), key=lambda kv: kv[1].seq):
        ev = Event(
            type="turn.ended", session_id=opener.session_id, time=_time(d), turn_id=turn_id,
            causation_id=opener.seq, data={**_base(d), "closes": _closes(opener)}, synthetic=True,
        )
        out.append(Closer(ev, f"repair:turn:{opener.seq}", opener, "turn"))
    return out


__all__ = [
    "EXPIRED",
    "INTERRUPTED",
    "ORPHANED",
    "REPAIR_VERSION",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "ApprovalPolicy",
    "Closer",
    "JobPolicy",
    "RepairPolicy",
    "data_id",
    "plan_closers",
]
