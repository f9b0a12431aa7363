"""The event envelope: the common fields every session event carries, and how it is stored.

Stored form (one journal record, a JSON object), with camelCase keys as runtimes write them::

    {"schemaVersion": 1, "sessionId": "...", "type": "tool.started", "time": "2026-...Z",
     "turnId": "...", "stepId": "...", "attemptId": "...", "toolCallId": "...",
     "approvalId": "...", "causationId": 17, "correlationId": "...", "ignorable": true,
     "data": {...}}

``seq`` is not stored: the journal assigns it, and the reader fills it from the record's seq, so
the envelope's seq and the journal's can never disagree. ``time`` is for display and diagnosis
only; order is seq. ``causationId`` is the seq of the event that caused this one. Optional ids
are omitted when absent. ``ignorable`` is written only for types registered ignorable, so that a
reader that does not know the type can still tell whether it may skip it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from journal.api import Record
from journal.session.errors import EnvelopeError, InvalidSessionIdError, NewerSchemaError, UnknownEventTypeError
from journal.session.registry import EventType, Registry

SCHEMA_VERSION = 1

# envelope field -> stored key; the order here is the order in the stored JSON
_ID_FIELDS: tuple[tuple[str, str], ...] = (
    ("turn_id", "turnId"),
    ("step_id", "stepId"),
    ("attempt_id", "attemptId"),
    ("tool_call_id", "toolCallId"),
    ("approval_id", "approvalId"),
    ("correlation_id", "correlationId"),
)
_KNOWN_KEYS = frozenset(
    {"schemaVersion", "sessionId", "type", "time", "causationId", "ignorable", "data"} | {k for _, k in _ID_FIELDS}
)
ID_BYTES_MAX = 180  # ids also go into idempotency keys ("<type>:<id>"), which the core caps at 255 bytes
# The session store's rule for session ids (they become directory names), which every new
# session's id follows: the store's, journal.session.open's, a fork's.
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_session_id(session_id: object) -> str:
    """``session_id`` if the store's rule allows it; InvalidSessionIdError otherwise."""
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id) or ".." in session_id:
        raise InvalidSessionIdError(session_id)
    return session_id


@dataclass(frozen=True)
class Event:
    """One session event. ``seq`` is 0 until the journal has assigned it."""

    type: str
    session_id: str
    seq: int = 0
    time: str | None = None
    turn_id: str | None = None
    step_id: str | None = None
    attempt_id: str | None = None
    tool_call_id: str | None = None
    approval_id: str | None = None
    causation_id: int | None = None
    correlation_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    synthetic: bool = False
    schema_version: int = SCHEMA_VERSION
    ignorable: bool = False

    def with_seq(self, seq: int, synthetic: bool) -> Event:
        return replace(self, seq=seq, synthetic=synthetic)

    def to_stored(self) -> dict[str, Any]:
        """The dict appended to the journal (no seq: the journal owns it)."""
        out: dict[str, Any] = {"schemaVersion": self.schema_version, "sessionId": self.session_id, "type": self.type}
        if self.time is not None:
            out["time"] = self.time
        for attr, key in _ID_FIELDS:
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        if self.causation_id is not None:
            out["causationId"] = self.causation_id
        if self.ignorable:
            out["ignorable"] = True
        out["data"] = dict(self.data)
        return out

    def to_dict(self) -> dict[str, Any]:
        """For display and export: the stored form with ``seq`` (and ``synthetic``) filled in."""
        out = {"seq": self.seq, **self.to_stored()}
        if self.synthetic:
            out["synthetic"] = True
        return out


def check_id(name: str, value: object) -> None:
    if value is None:
        return
    try:
        size = len(value.encode("utf-8")) if isinstance(value, str) else 0
    except UnicodeEncodeError:
        raise EnvelopeError(f"{name} holds a lone UTF-16 surrogate (a string cut mid-character), which "
                            f"is not UTF-8: {value!r}") from None
    if not isinstance(value, str) or not value or size > ID_BYTES_MAX:
        raise EnvelopeError(f"{name} must be a non-empty string of at most {ID_BYTES_MAX} bytes, not {value!r}")


def check_for_append(event: Event, spec: EventType | None) -> None:
    """Assert the envelope before it is written (the other end of the boundary is ``decode``)."""
    if spec is None:
        raise EnvelopeError(
            f"type {event.type!r} is not registered; register it with Registry.register before appending"
        )
    check_id("sessionId", event.session_id)
    for attr, key in _ID_FIELDS:
        check_id(key, getattr(event, attr))
    if event.causation_id is not None and (not isinstance(event.causation_id, int) or event.causation_id < 1):
        raise EnvelopeError(f"causationId is the seq of the causing event (an int >= 1), not {event.causation_id!r}")
    if event.seq != 0:
        raise EnvelopeError("seq is assigned by the journal; leave it 0 when appending")


def decode(rec: Record, registry: Registry) -> tuple[Event, EventType] | None:
    """A record -> (event, its type), or None when the type is unknown and marked ignorable.

    Raises EnvelopeError, NewerSchemaError or UnknownEventTypeError; never guesses.
    """
    if rec.is_bytes:
        raise EnvelopeError("it is raw bytes, not a JSON event", rec.seq)
    raw = rec.event
    if not isinstance(raw, dict):
        raise EnvelopeError("it is not a JSON object", rec.seq)
    version = raw.get("schemaVersion")
    if not isinstance(version, int) or version < 1:
        raise EnvelopeError(f"schemaVersion is {version!r}", rec.seq)
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(version, SCHEMA_VERSION, rec.seq)
    type_name = raw.get("type")
    session_id = raw.get("sessionId")
    if not isinstance(type_name, str) or not isinstance(session_id, str):
        raise EnvelopeError("type and sessionId must be strings", rec.seq)
    if "seq" in raw:
        raise EnvelopeError("it stores a seq of its own; the journal's seq is the only one", rec.seq)
    spec = registry.get(type_name)
    ignorable = raw.get("ignorable") is True
    if spec is None:
        if ignorable:
            return None
        raise UnknownEventTypeError(type_name, rec.seq)
    data = raw.get("data", {})
    if not isinstance(data, dict):
        raise EnvelopeError("data must be a JSON object", rec.seq)
    ids: dict[str, Any] = {}
    for attr, key in _ID_FIELDS:
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise EnvelopeError(f"{key} must be a string", rec.seq)
        ids[attr] = value
    causation = raw.get("causationId")
    if causation is not None and not isinstance(causation, int):
        raise EnvelopeError("causationId must be an int seq", rec.seq)
    when = raw.get("time")
    event = Event(
        type=type_name,
        session_id=session_id,
        seq=rec.seq,
        time=when if isinstance(when, str) else None,
        causation_id=causation,
        data=data,
        synthetic=rec.synthetic,
        schema_version=version,
        ignorable=ignorable,
        **ids,
    )
    return event, spec
