"""The built-in reducer's state: what the agent vocabulary folds into, and the model-visible projection.

Everything here is derived from the log and can be thrown away and rebuilt. ``messages()`` is
the projection a model would be sent: assistant text only from complete messages (never from
deltas, so two attempts are never glued into one reply), a tool call only together with its
result (a result written by repair says TOOL_NOT_STARTED or TOOL_OUTCOME_UNKNOWN in words the
model can act on), and a compaction's summary only once the compaction ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

SIDE_EFFECT_FREE = frozenset({"none", "read", "pure"})
RESULT_STATUSES = frozenset({"ok", "error", "timeout", "cancelled", "TOOL_NOT_STARTED", "TOOL_OUTCOME_UNKNOWN"})


@dataclass
class Span:
    """A turn or a step: opened at a seq, closed (or not) with a reason."""

    opened_seq: int
    status: str = "running"  # running | completed | cancelled | failed | interrupted | <runtime reason>
    closed_seq: int | None = None
    turn_id: str | None = None
    synthetic_close: bool = False


@dataclass
class ToolCall:
    tool_call_id: str
    tool: str | None
    args: Any
    side_effect: str  # none | read | workspace-write | external-write | network | process
    idempotency: str  # safe | conditional | unsafe
    request_seq: int
    turn_id: str | None = None
    status: str = "requested"  # requested | started | a RESULT_STATUSES member
    started_seq: int | None = None
    result_seq: int | None = None
    result_synthetic: bool = False
    output: Any = None
    reconciled: str | None = None  # applied | not_applied, after the runtime checked the world
    approval_id: str | None = None

    @property
    def has_result(self) -> bool:
        return self.result_seq is not None

    @property
    def outcome_unknown(self) -> bool:
        return self.status == "TOOL_OUTCOME_UNKNOWN" and self.reconciled is None

    @property
    def has_side_effect(self) -> bool:
        return self.side_effect not in SIDE_EFFECT_FREE


@dataclass
class Approval:
    approval_id: str
    requested_seq: int
    tool_call_id: str | None = None
    status: str = "pending"  # pending | allowed | denied | expired
    decided_seq: int | None = None


@dataclass
class Attempt:
    attempt_id: str
    first_seq: int
    deltas: int = 0
    status: str = "streaming"  # streaming | complete | interrupted


@dataclass
class Compaction:
    compaction_id: str
    started_seq: int
    status: str = "open"  # open | applied | rolled_back
    replaced_from_seq: int | None = None
    replaced_to_seq: int | None = None
    summary: str | None = None
    summary_ref: str | None = None


@dataclass
class Job:
    job_id: str
    started_seq: int
    status: str = "running"  # running | exited | killed | orphaned | <runtime status>
    restart: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    """One transcript item in log order; messages() turns these into the model's view."""

    seq: int
    kind: str  # user | assistant | tool_call
    text: str | None = None
    tool_call_id: str | None = None


@dataclass
class SessionState:
    session_id: str | None = None
    workspace: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    turns: dict[str, Span] = field(default_factory=dict)
    steps: dict[str, Span] = field(default_factory=dict)
    tools: dict[str, ToolCall] = field(default_factory=dict)
    approvals: dict[str, Approval] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    compactions: dict[str, Compaction] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    goal: dict[str, Any] | None = None
    goal_revision: int = 0
    budget: dict[str, Any] | None = None
    entries: list[Entry] = field(default_factory=list)
    last_seq: int = 0
    duplicate_results: int = 0  # a second result for a call already closed: kept in the log, not applied
    resumed_seqs: list[int] = field(default_factory=list)

    # --- derived views -------------------------------------------------------------------

    def pending_tools(self) -> list[ToolCall]:
        """Requested or started and still without a result (only a kept approval leaves these after repair)."""
        return [t for t in self.tools.values() if not t.has_result]

    def unknown_outcomes(self) -> list[ToolCall]:
        return [t for t in self.tools.values() if t.outcome_unknown]

    def not_started(self) -> list[ToolCall]:
        return [t for t in self.tools.values() if t.status == "TOOL_NOT_STARTED"]

    def pending_approvals(self) -> list[Approval]:
        return [a for a in self.approvals.values() if a.status == "pending"]

    def open_turns(self) -> list[str]:
        return [k for k, s in self.turns.items() if s.status == "running"]

    def open_steps(self) -> list[str]:
        return [k for k, s in self.steps.items() if s.status == "running"]

    def interrupted_attempts(self) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.status == "interrupted"]

    def running_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.status == "running"]

    def orphaned_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.status == "orphaned"]

    def had_side_effects(self) -> bool:
        return any(
            t.has_side_effect and t.status != "TOOL_NOT_STARTED" and t.status != "requested"
            for t in self.tools.values()
        )

    def applied_compactions(self) -> list[Compaction]:
        return [c for c in self.compactions.values() if c.status == "applied"]

    def messages(self) -> list[dict[str, Any]]:
        """What a model would be sent, rebuilt from the log; never the source of truth."""
        replaced: list[tuple[int, int, Compaction]] = []
        for c in self.applied_compactions():
            if c.replaced_from_seq is not None and c.replaced_to_seq is not None:
                replaced.append((c.replaced_from_seq, c.replaced_to_seq, c))
        replaced.sort(key=lambda r: (r[0], r[1], r[2].started_seq))
        out: list[dict[str, Any]] = []
        emitted: set[str] = set()
        for entry in self.entries:
            cover = next((r for r in replaced if r[0] <= entry.seq <= r[1]), None)
            if cover is not None:
                comp = cover[2]
                if comp.compaction_id not in emitted:
                    emitted.add(comp.compaction_id)
                    out.append(
                        {
                            "role": "system",
                            "content": f"[summary of seq {cover[0]}..{cover[1]}] "
                            + (comp.summary or f"see {comp.summary_ref}"),
                        }
                    )
                continue
            if entry.kind == "user":
                out.append({"role": "user", "content": entry.text or ""})
            elif entry.kind == "assistant":
                out.append({"role": "assistant", "content": entry.text or ""})
            elif entry.kind == "tool_call" and entry.tool_call_id is not None:
                call = self.tools.get(entry.tool_call_id)
                if call is None or not call.has_result:
                    continue  # a call without its result is never shown to the model
                out.append(
                    {"role": "assistant", "toolCall": {"id": call.tool_call_id, "name": call.tool, "args": call.args}}
                )
                out.append({"role": "tool", "toolCallId": call.tool_call_id, "content": _result_text(call)})
        return out

    # --- snapshots -----------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """A JSON-ready dict. Records are stored as rows (lists in field order, the layout kept
        under ``rows``): a snapshot of a long session parses and loads several times faster
        than with one dict per record. The dict shares values with the state: serialize it,
        do not mutate it."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, kind in _MAPS.items():
            names = _ROW_FIELDS[kind]
            d[key] = {k: [getattr(v, n) for n in names] for k, v in d[key].items()}
        names = _ROW_FIELDS[Entry]
        d["entries"] = [[getattr(e, n) for n in names] for e in self.entries]
        d["rows"] = {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}
        return d

    @classmethod
    def load(cls, data: dict[str, Any]) -> SessionState:
        """The inverse of dump(); raises (KeyError, TypeError, ValueError) on any mismatch."""
        d = dict(data)
        layout = d.pop("rows")
        if layout != {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}:
            raise ValueError("snapshot rows have another layout than this reducer's state")
        for key, kind in _MAPS.items():
            d[key] = {k: kind(*row) for k, row in d[key].items()}
        d["entries"] = [Entry(*row) for row in d["entries"]]
        return cls(**d)


_MAPS: dict[str, type] = {
    "turns": Span,
    "steps": Span,
    "tools": ToolCall,
    "approvals": Approval,
    "attempts": Attempt,
    "compactions": Compaction,
    "jobs": Job,
}
_ROW_FIELDS: dict[type, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(kind)) for kind in (Span, ToolCall, Approval, Attempt, Compaction, Job, Entry)
}


def _result_text(call: ToolCall) -> str:
    if call.status == "TOOL_NOT_STARTED":
        return "TOOL_NOT_STARTED: the session was interrupted before this tool ran; nothing was executed."
    if call.status == "TOOL_OUTCOME_UNKNOWN":
        if call.reconciled is not None:
            return f"TOOL_OUTCOME_UNKNOWN, then checked by the runtime: {call.reconciled}."
        return (
            "TOOL_OUTCOME_UNKNOWN: the session was interrupted after this tool started; it may or may not "
            "have taken effect. Check the current state before relying on it; do not repeat it blindly."
        )
    if isinstance(call.output, str):
        return f"{call.status}: {call.output}"
    return call.status
