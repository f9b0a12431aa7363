"""The resume gate: continuing a session is a new decision, taken by the runtime, never by replay.

``evaluate`` looks at the replayed state and at checks the caller made of the world now
(workspace fingerprint, policy, budget, artifacts) and returns continue or paused with every
reason and the recovery options, following the recovery table of seed 004 14.4. Unknown tool
outcomes and pending approvals pause unless the caller says otherwise; a session whose tools had
side effects resumes paused until the caller passes ``authorized=True`` (the explicit grant).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from journal.session.state import SessionState

Severity = Literal["pause", "info"]


@dataclass(frozen=True)
class ResumeChecks:
    """What the runtime checked just now. None means "not checked"."""

    workspace_fingerprint: str | None = None  # compared with the header's workspace.fingerprint
    policy_version: str | None = None  # compared with the header's or goal's policyVersion
    budget_remaining: float | None = None  # <= 0 pauses
    artifacts_missing: tuple[str, ...] = ()
    authorized: bool = False  # an explicit grant to execute again (user or policy), taken now
    pause_on_unknown_outcomes: bool = True
    pause_on_pending_approvals: bool = True
    side_effect_sessions_paused: bool = True


@dataclass(frozen=True)
class Reason:
    code: str
    severity: Severity
    message: str
    subject: str | None = None  # toolCallId, approvalId, jobId, turnId ...
    options: tuple[str, ...] = ()


@dataclass
class GateDecision:
    decision: Literal["continue", "paused"]
    reasons: list[Reason] = field(default_factory=list)

    @property
    def paused(self) -> bool:
        return self.decision == "paused"

    def codes(self) -> list[str]:
        return [r.code for r in self.reasons]

    def options(self) -> list[str]:
        seen: list[str] = []
        for r in self.reasons:
            for o in r.options:
                if o not in seen:
                    seen.append(o)
        return seen

    def explain(self) -> str:
        lines = [f"resume gate: {self.decision.upper()}"]
        for r in self.reasons:
            subject = f" [{r.subject}]" if r.subject else ""
            lines.append(f"  {r.severity:5} {r.code}{subject}: {r.message}")
            lines.extend(f"          option: {o}" for o in r.options)
        return "\n".join(lines)


def evaluate(state: SessionState, checks: ResumeChecks | None = None) -> GateDecision:
    checks = checks or ResumeChecks()
    reasons: list[Reason] = []
    for call in state.unknown_outcomes():
        reasons.append(Reason(
            "TOOL_OUTCOME_UNKNOWN", "pause" if checks.pause_on_unknown_outcomes else "info",
            f"{call.tool or 'tool'} (sideEffect {call.side_effect}, idempotency {call.idempotency}) started at seq "
            f"{call.started_seq} and has no result: it may have changed the world",
            call.tool_call_id,
            (f"inspect the target of {call.tool or 'the tool'} (file, API, database) and record tool.reconciled",
             "ask the user whether it took effect",
             "retry only if the tool is idempotent" if call.idempotency == "safe"
             else "do not retry: the tool is not idempotent"),
        ))
    for approval in state.pending_approvals():
        reasons.append(Reason(
            "APPROVAL_PENDING", "pause" if checks.pause_on_pending_approvals else "info",
            f"approval {approval.approval_id} (seq {approval.requested_seq}) was never decided; it is not granted",
            approval.approval_id,
            (f"show the same approvalId {approval.approval_id} again, once", "expire it (counts as denied)"),
        ))
    for job in state.orphaned_jobs():
        reasons.append(Reason(
            "JOB_ORPHANED", "pause",
            f"job {job.job_id} was running when the runtime stopped; nobody supervises it now",
            job.job_id,
            ("check whether its process still runs and what it left behind",
             f"restart it from its entry: {job.restart}" if job.restart else "restart it"),
        ))
    for call in state.pending_tools():
        if call.tool_call_id not in {a.tool_call_id for a in state.pending_approvals()}:
            reasons.append(Reason("TOOL_PENDING", "pause", f"{call.tool} has no result yet", call.tool_call_id,
                                  ("run the approval flow again",)))
    ws = state.workspace.get("fingerprint")
    if checks.workspace_fingerprint is not None and ws is not None and ws != checks.workspace_fingerprint:
        reasons.append(Reason(
            "WORKSPACE_CHANGED", "pause",
            f"the workspace fingerprint is {checks.workspace_fingerprint}, the session recorded {ws}",
            state.workspace.get("path") if isinstance(state.workspace.get("path"), str) else None,
            ("re-read files before editing them", "confirm the workspace with the user"),
        ))
    recorded_policy = (state.goal or {}).get("policyVersion") or state.workspace.get("policyVersion")
    if checks.policy_version is not None and recorded_policy is not None and recorded_policy != checks.policy_version:
        reasons.append(Reason("POLICY_CHANGED", "pause",
                              f"permissions policy is {checks.policy_version}, the session ran under {recorded_policy}",
                              None, ("re-authorize pending work under the current policy",)))
    budget = state.budget or {}
    used, limit = budget.get("used"), budget.get("limit")
    exhausted = isinstance(used, (int, float)) and isinstance(limit, (int, float)) and used >= limit
    if exhausted or (checks.budget_remaining is not None and checks.budget_remaining <= 0):
        reasons.append(Reason("BUDGET_EXHAUSTED", "pause", f"budget used {used} of {limit}", None,
                              ("ask the user for more budget", "compact the context before continuing")))
    status = (state.goal or {}).get("status")
    if isinstance(status, str) and status not in ("active", "running"):
        reasons.append(Reason("GOAL_NOT_ACTIVE", "pause", f"the goal is {status}", None,
                              ("reactivate the goal explicitly",)))
    if checks.artifacts_missing:
        reasons.append(Reason("ARTIFACTS_MISSING", "pause", f"{len(checks.artifacts_missing)} referenced artifacts "
                              "are missing or fail their hash", ", ".join(checks.artifacts_missing),
                              ("regenerate the evidence", "continue without it after telling the model")))
    for call in state.not_started():
        reasons.append(Reason("TOOL_NOT_STARTED", "info", f"{call.tool} was requested and never ran",
                              call.tool_call_id, ("reschedule it with a new toolCallId if the goal still needs it",)))
    for att in state.interrupted_attempts():
        reasons.append(Reason("ATTEMPT_INTERRUPTED", "info", f"attempt {att.attempt_id} streamed {att.deltas} "
                              "deltas and never completed; its text is not part of any reply", att.attempt_id,
                              ("start a new attempt with a new attemptId",)))
    for comp in state.compactions.values():
        if comp.status == "rolled_back":
            reasons.append(Reason("COMPACTION_ROLLED_BACK", "info", "an unfinished compaction was discarded; the "
                                  "history it would have replaced is intact", comp.compaction_id,
                                  ("compact again if the context is too long",)))
    for turn_id, span in state.interrupted_turns():
        if not any(s > span.closed_seq for s in state.resumed_seqs
                                                    if span.closed_seq is not None):
            reasons.append(Reason("TURN_INTERRUPTED", "info", f"turn {turn_id} was interrupted", turn_id,
                                  ("start a new turn; the interrupted one stays in the log",)))
    if checks.side_effect_sessions_paused and state.had_side_effects() and not checks.authorized:
        reasons.append(Reason("SIDE_EFFECTS_NEED_AUTHORIZATION", "pause",
                              "this session ran tools with side effects; it resumes paused until the runtime takes "
                              "the right to execute again", None,
                              ("check the workspace, then evaluate again with authorized=True",)))
    paused = any(r.severity == "pause" for r in reasons)
    return GateDecision("paused" if paused else "continue", reasons)
