"""The event-type registry: for every type, who may ignore it, how durable it must be, what it opens or closes.

A reader meets three kinds of types: ones its registry knows (replayed), unknown ones whose writer
marked them ignorable in the envelope (skipped and counted), and unknown required ones (refused
with UnknownEventTypeError). Ignorable types may only carry display or statistics: a type that
opens or closes structure, or changes what the model sees, can never be ignorable.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass

import xxhash

from journal.outcomes import Durability


class DurabilityClass(enum.Enum):
    """How durable an event must be before ``append`` returns."""

    TRANSIENT = "transient"  # deltas, progress: buffered, lost on a process kill, batched into later writes
    ORDINARY = "ordinary"  # facts that a later boundary will sync: flushed to the OS
    BOUNDARY = "boundary"  # what an irreversible step depends on: fdatasync'd before append returns

    @property
    def level(self) -> Durability:
        return _LEVEL[self]


_LEVEL: dict[DurabilityClass, Durability] = {
    DurabilityClass.TRANSIENT: "buffered",
    DurabilityClass.ORDINARY: "flush",
    DurabilityClass.BOUNDARY: "sync",
}


class Role(enum.Enum):
    """What an event does to the session's structure; repair and the reducer key on this, never on names."""

    NONE = "none"
    HEADER = "header"  # session start: sessionId, workspace, lineage
    TURN_OPEN = "turn.open"  # keyed by turnId
    TURN_CLOSE = "turn.close"
    STEP_OPEN = "step.open"  # keyed by stepId
    STEP_CLOSE = "step.close"
    TOOL_REQUEST = "tool.request"  # keyed by toolCallId: the intent
    TOOL_START = "tool.start"
    TOOL_RESULT = "tool.result"
    TOOL_RECONCILE = "tool.reconcile"  # the runtime checked the world for an unknown outcome
    APPROVAL_OPEN = "approval.open"  # keyed by approvalId
    APPROVAL_CLOSE = "approval.close"
    ATTEMPT_DELTA = "attempt.delta"  # keyed by attemptId: partial model output
    ATTEMPT_CLOSE = "attempt.close"  # the complete message, or the interrupted closer
    COMPACTION_OPEN = "compaction.open"  # keyed by data.compactionId
    COMPACTION_CLOSE = "compaction.close"
    COMPACTION_ROLLBACK = "compaction.rollback"
    JOB_OPEN = "job.open"  # keyed by data.jobId
    JOB_CLOSE = "job.close"


TYPE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
TYPE_NAME_BYTES_MAX = 64


@dataclass(frozen=True)
class EventType:
    name: str
    durability: DurabilityClass
    role: Role = Role.NONE
    ignorable: bool = False
    model_visible: bool = False  # the message projection reads it
    doc: str = ""

    def check(self) -> None:
        if not TYPE_NAME_RE.match(self.name) or len(self.name) > TYPE_NAME_BYTES_MAX:
            raise ValueError(
                f"event type name {self.name!r} must be dotted lowercase words (like 'myrt.cache_hit'), "
                f"at most {TYPE_NAME_BYTES_MAX} bytes"
            )
        if self.ignorable and (self.role is not Role.NONE or self.model_visible):
            raise ValueError(
                f"event type {self.name!r} cannot be ignorable: it has role {self.role.value} or is model "
                "visible, and a reader that skipped it would rebuild a wrong state. Make it required"
            )


B = DurabilityClass.BOUNDARY
ORD = DurabilityClass.ORDINARY
T = DurabilityClass.TRANSIENT

BUILTIN_TYPES: tuple[EventType, ...] = (
    EventType("session.started", B, Role.HEADER, doc="header: workspace, lineage (parentSessionId, forkSeq, depth)"),
    EventType("session.forked", B, doc="this session was forked into a child (childSessionId, forkSeq)"),
    EventType("session.resumed", B, doc="the runtime passed the resume gate and continues (a new decision)"),
    EventType("branch.switched", B, doc="the branch tree's leaf moved (leafId, fromLeafId); nothing is rewritten"),
    EventType("user.message", ORD, model_visible=True, doc="a user message (text)"),
    EventType("turn.started", ORD, Role.TURN_OPEN, doc="a turn begins (turnId)"),
    EventType("turn.ended", B, Role.TURN_CLOSE, doc="a turn ends (reason: completed, cancelled, failed, interrupted)"),
    EventType("step.started", ORD, Role.STEP_OPEN, doc="a step (one model round trip and its tools) begins"),
    EventType("step.ended", ORD, Role.STEP_CLOSE, doc="a step ends with reason"),
    EventType("model.requested", B, doc="about to call the model: everything before it is synced first"),
    EventType("assistant.delta", T, Role.ATTEMPT_DELTA, doc="a chunk of streamed model output (attemptId)"),
    EventType("assistant.message", ORD, Role.ATTEMPT_CLOSE, model_visible=True, doc="the complete model reply"),
    EventType("attempt.interrupted", B, Role.ATTEMPT_CLOSE, doc="closer: an attempt that only has deltas"),
    EventType("tool.requested", B, Role.TOOL_REQUEST, model_visible=True, doc="intent: tool, args, sideEffect"),
    EventType("approval.requested", B, Role.APPROVAL_OPEN, doc="a permission is asked (approvalId, toolCallId)"),
    EventType("approval.decided", B, Role.APPROVAL_CLOSE, doc="decision: allowed | denied | expired"),
    EventType("tool.started", B, Role.TOOL_START, doc="the tool is about to touch the world"),
    EventType("tool.output", T, ignorable=True, doc="a live chunk of tool output (display only)"),
    EventType("tool.result", B, Role.TOOL_RESULT, model_visible=True, doc="status ok/error/timeout/cancelled"),
    EventType("tool.reconciled", B, Role.TOOL_RECONCILE, model_visible=True, doc="checked: applied/not_applied"),
    EventType("compaction.started", ORD, Role.COMPACTION_OPEN, doc="compaction begins (compactionId, replaced range)"),
    EventType("compaction.ended", B, Role.COMPACTION_CLOSE, model_visible=True, doc="summary replaces a seq range"),
    EventType("compaction.rolled_back", B, Role.COMPACTION_ROLLBACK, doc="closer: compaction discarded"),
    EventType("goal.updated", B, doc="goal, acceptance, phase, budget (revision)"),
    EventType("job.started", B, Role.JOB_OPEN, doc="a background job is running (jobId, command, cwd)"),
    EventType("job.ended", ORD, Role.JOB_CLOSE, doc="the job ended: exited | killed | orphaned"),
    EventType("ui.progress", T, ignorable=True, doc="spinner and progress: display only"),
)


class Registry:
    """Event types known to one reader or writer: the built-ins plus what a runtime registers."""

    def __init__(self, types: tuple[EventType, ...] = BUILTIN_TYPES) -> None:
        self._types: dict[str, EventType] = {}
        for t in types:
            self.register(t)

    def register(self, event_type: EventType) -> EventType:
        """Add a type. Re-registering the same definition is a no-op; a different one is refused."""
        event_type.check()
        old = self._types.get(event_type.name)
        if old is not None and old != event_type:
            raise ValueError(
                f"event type {event_type.name!r} is already registered with a different definition; "
                "pick a new name (types are part of the stored format and never change meaning)"
            )
        self._types[event_type.name] = event_type
        return event_type

    def get(self, name: str) -> EventType | None:
        return self._types.get(name)

    def names(self) -> list[str]:
        return sorted(self._types)

    def copy(self) -> Registry:
        return Registry(tuple(self._types.values()))

    def fingerprint(self) -> str:
        """16 hex digits that change when what a replay does with the log changes: a type
        registered, or a type's durability, role, ignorability or model visibility (its doc
        does not count). A snapshot records it, and is used only by a registry with the same
        one: a type a reader skipped as unknown when the snapshot was saved is folded by a
        reader that registered it since, so the saved state is not the one a replay makes."""
        rows = [
            [t.name, t.durability.value, t.role.value, t.ignorable, t.model_visible]
            for t in sorted(self._types.values(), key=lambda t: t.name)
        ]
        return f"{xxhash.xxh64_intdigest(json.dumps(rows, separators=(',', ':')).encode('utf-8')):016x}"


def default_registry() -> Registry:
    return Registry()


_builtin_fingerprint: list[str] = []


def builtin_fingerprint() -> str:
    """Registry().fingerprint(): the registry of the built-in types alone, made once."""
    if not _builtin_fingerprint:
        _builtin_fingerprint.append(Registry().fingerprint())
    return _builtin_fingerprint[0]
