"""The agent-session layer: envelope, event registry, durability policy, repair, replay, resume gate.

It uses only the core's public API (journal.open, append, read). See docs/SESSIONS.md.
"""

from journal.session.catalog_store import CatalogSessionStore, open_store
from journal.session.closers import (
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
from journal.session.envelope import SCHEMA_VERSION, Event
from journal.session.errors import (
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
from journal.session.gate import GateDecision, Reason, ResumeChecks, evaluate
from journal.session.reducer import Reducer, SessionReducer
from journal.session.registry import BUILTIN_TYPES, DurabilityClass, EventType, Registry, Role
from journal.session.repair import RepairReport, repair
from journal.session.replay import Replayed, Snapshot, make_snapshot, replay, replay_events
from journal.session.session import Appended, Session, open  # noqa: A004 - mirrors journal.open
from journal.session.state import SessionState

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
    "CatalogSessionStore",
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
    "open_store",
    "repair",
    "replay",
    "replay_events",
]
