"""The reducer framework and the built-in reducer for the agent vocabulary.

A reducer folds events into a state and does nothing else: no tool runs, no model is called,
no clock is read. ``version`` names the folding rules; a snapshot made by another version is
never trusted (seed 004, 14.3.2 point 4). Reducers fold by role (registry.Role) first, so a
runtime's registered types with a role count without touching this file.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from journal.api import InvariantError
from journal.session.envelope import Event
from journal.session.registry import EventType, Role
from journal.session.state import (
    RESULT_STATUSES,
    Approval,
    Attempt,
    Compaction,
    Entry,
    Job,
    SessionState,
    Span,
    ToolCall,
)

S = TypeVar("S")


class Reducer(Protocol, Generic[S]):
    """Register your own: any object with these members works with ``replay``."""

    name: str
    version: int

    def initial(self) -> S: ...

    def apply(self, state: S, event: Event, spec: EventType) -> S: ...

    def dump(self, state: S) -> dict[str, Any]: ...

    def load(self, data: dict[str, Any]) -> S: ...


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class SessionReducer:
    """Turn and step status, tools, approvals, attempts, compactions, jobs, goal and budget, messages."""

    name = "journal.session"
    version = 3  # 2: a fork's header replaces the session id, lineage and workspace; 3: state as rows

    def initial(self) -> SessionState:
        return SessionState()

    def dump(self, state: SessionState) -> dict[str, Any]:
        return state.dump()

    def load(self, data: dict[str, Any]) -> SessionState:
        return SessionState.load(data)

    def apply(self, state: SessionState, event: Event, spec: EventType) -> SessionState:
        state.last_seq = event.seq
        data = event.data
        role = spec.role
        seq = event.seq
        if role is Role.HEADER:
            lin = data.get("lineage")
            # The first header names the session; a fork's own header (right after its fork
            # point) gives the child its new identity, lineage and workspace.
            forked_here = isinstance(lin, dict) and lin.get("forkSeq") == seq - 1
            if state.session_id is None or forked_here:
                state.session_id = event.session_id
                ws = data.get("workspace")
                state.workspace = dict(ws) if isinstance(ws, dict) else {}
                state.lineage = dict(lin) if isinstance(lin, dict) else {}
        elif role is Role.TURN_OPEN and event.turn_id:
            if state.lookup("turns", event.turn_id) is None:
                state.insert("turns", event.turn_id, Span(seq, turn_id=event.turn_id))
        elif role is Role.TURN_CLOSE and event.turn_id:
            _close(state, "turns", event.turn_id, event, "completed")
        elif role is Role.STEP_OPEN and event.step_id:
            if state.lookup("steps", event.step_id) is None:
                state.insert("steps", event.step_id, Span(seq, turn_id=event.turn_id))
        elif role is Role.STEP_CLOSE and event.step_id:
            _close(state, "steps", event.step_id, event, "completed")
        elif role is Role.TOOL_REQUEST and event.tool_call_id:
            self._request(state, event)
        elif role is Role.TOOL_START and event.tool_call_id:
            call = self._request(state, event)
            if call.started_seq is None and not call.has_result:
                call.started_seq = seq
                call.status = "started"
        elif role is Role.TOOL_RESULT and event.tool_call_id:
            call = self._request(state, event)
            if call.has_result:
                state.duplicate_results += 1
            else:
                status = _str(data.get("status")) or "ok"
                call.status = status if status in RESULT_STATUSES else "error"
                call.result_seq = seq
                call.result_synthetic = event.synthetic
                call.output = data.get("output")
        elif role is Role.TOOL_RECONCILE and event.tool_call_id:
            checked = state.lookup("tools", event.tool_call_id)
            if checked is not None:
                checked.reconciled = _str(data.get("outcome")) or "checked"
        elif role is Role.APPROVAL_OPEN and event.approval_id:
            if state.lookup("approvals", event.approval_id) is None:
                state.insert("approvals", event.approval_id, Approval(event.approval_id, seq, event.tool_call_id))
            call_ = state.lookup("tools", event.tool_call_id) if event.tool_call_id else None
            if call_ is not None:
                call_.approval_id = event.approval_id
        elif role is Role.APPROVAL_CLOSE and event.approval_id:
            approval = state.lookup("approvals", event.approval_id)
            if approval is not None and approval.status == "pending":
                decision = _str(data.get("decision")) or "denied"
                approval.status = decision if decision in ("allowed", "denied", "expired") else "denied"
                approval.decided_seq = seq
        elif role is Role.ATTEMPT_DELTA and event.attempt_id:
            att = _attempt(state, event.attempt_id, seq)
            att.deltas += 1
        elif role is Role.ATTEMPT_CLOSE:
            if event.attempt_id:
                att = _attempt(state, event.attempt_id, seq)
                att.status = "interrupted" if event.synthetic or event.type == "attempt.interrupted" else "complete"
            if spec.model_visible:
                state.add_entry(Entry(seq, "assistant", _str(data.get("text"))))
        elif role is Role.COMPACTION_OPEN:
            cid = _str(data.get("compactionId"))
            if cid:
                state.compactions.setdefault(cid, Compaction(cid, seq))
        elif role is Role.COMPACTION_CLOSE:
            cid = _str(data.get("compactionId"))
            comp = state.compactions.get(cid) if cid else None
            if comp is not None and comp.status == "open":
                comp.status = "applied"
                comp.replaced_from_seq = _int(data.get("replacedFromSeq"))
                comp.replaced_to_seq = _int(data.get("replacedToSeq"))
                comp.summary = _str(data.get("summary"))
                comp.summary_ref = _str(data.get("summaryRef"))
        elif role is Role.COMPACTION_ROLLBACK:
            cid = _str(data.get("compactionId"))
            comp = state.compactions.get(cid) if cid else None
            if comp is not None and comp.status == "open":
                comp.status = "rolled_back"
        elif role is Role.JOB_OPEN:
            jid = _str(data.get("jobId"))
            if jid:
                restart = {k: data[k] for k in ("command", "cwd", "pid") if k in data}
                state.jobs.setdefault(jid, Job(jid, seq, restart=restart))
        elif role is Role.JOB_CLOSE:
            jid = _str(data.get("jobId"))
            job = state.jobs.get(jid) if jid else None
            if job is not None and job.status == "running":
                job.status = _str(data.get("status")) or "exited"
        elif event.type == "user.message":
            state.add_entry(Entry(seq, "user", _str(data.get("text"))))
        elif event.type == "goal.updated":
            goal = data.get("goal")
            if isinstance(goal, dict):
                state.goal = dict(goal)
            budget = data.get("budget")
            if isinstance(budget, dict):
                state.budget = dict(budget)
            state.goal_revision += 1
        elif event.type == "session.resumed":
            state.resumed_seqs.append(seq)
        return state

    def _request(self, state: SessionState, event: Event) -> ToolCall:
        if event.tool_call_id is None:
            raise InvariantError("a tool event carries a toolCallId")
        data = event.data
        call: ToolCall | None = state.lookup("tools", event.tool_call_id)
        if call is None:
            call = ToolCall(
                tool_call_id=event.tool_call_id,
                tool=_str(data.get("tool")),
                args=data.get("args"),
                side_effect=_str(data.get("sideEffect")) or "unknown",
                idempotency=_str(data.get("idempotency")) or "unsafe",
                request_seq=event.seq,
                turn_id=event.turn_id,
                approval_id=event.approval_id,
            )
            state.insert("tools", event.tool_call_id, call)
            state.add_entry(Entry(event.seq, "tool_call", tool_call_id=event.tool_call_id))
        return call


def _attempt(state: SessionState, attempt_id: str, seq: int) -> Attempt:
    att: Attempt | None = state.lookup("attempts", attempt_id)
    if att is None:
        att = state.insert("attempts", attempt_id, Attempt(attempt_id, seq))
    return att


def _close(state: SessionState, name: str, key: str, event: Event, default: str) -> None:
    span: Span | None = state.lookup(name, key)
    if span is None:
        span = state.insert(name, key, Span(event.seq, turn_id=event.turn_id))
    if span.status == "running":
        span.status = _str(event.data.get("reason")) or default
        span.closed_seq = event.seq
        span.synthetic_close = event.synthetic
