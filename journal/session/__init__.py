"""The agent-session layer: envelope, event registry, durability policy, repair, replay, resume gate.

It uses only the core's public API (journal.open, append, read). See docs/SESSIONS.md.
"""

from .closers import (
    EXPIRED,
    INTERRUPTED,
    ORPHANED,
    REPAIR_VERSION,
    TOOL_NOT_STARTED,
    TOOL_OUTCOME_UNKNOWN,
    ApprovalPolicy,
    JobPolicy,
    RepairPolicy,
)
from .envelope import SCHEMA_VERSION, Event
from .errors import (
    DuplicateSeqError,
    EnvelopeError,
    NewerSchemaError,
    NotASessionError,
    ProtocolError,
    RepairIncompleteError,
    SequenceGapError,
    SessionError,
    UnknownEventTypeError,
)
from .gate import GateDecision, Reason, ResumeChecks, evaluate
from .reducer import Reducer, SessionReducer
from .registry import BUILTIN_TYPES, DurabilityClass, EventType, Registry, Role
from .repair import RepairReport, repair
from .replay import Replayed, Snapshot, make_snapshot, replay, replay_events
from .session import Appended, Session, open  # noqa: A004 - mirrors journal.open
from .state import SessionState

__all__ = [
    "BUILTIN_TYPES",
    "EXPIRED",
    "INTERRUPTED",
    "ORPHANED",
    "REPAIR_VERSION",
    "SCHEMA_VERSION",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "Appended",
    "ApprovalPolicy",
    "DuplicateSeqError",
    "DurabilityClass",
    "EnvelopeError",
    "Event",
    "EventType",
    "GateDecision",
    "JobPolicy",
    "NewerSchemaError",
    "NotASessionError",
    "ProtocolError",
    "Reason",
    "Reducer",
    "Registry",
    "RepairIncompleteError",
    "RepairPolicy",
    "RepairReport",
    "Replayed",
    "ResumeChecks",
    "Role",
    "SequenceGapError",
    "Session",
    "SessionError",
    "SessionReducer",
    "SessionState",
    "Snapshot",
    "UnknownEventTypeError",
    "evaluate",
    "make_snapshot",
    "open",
    "repair",
    "replay",
    "replay_events",
]
