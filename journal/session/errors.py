"""Typed errors of the session layer. Every message says what happened and what to do next."""

from __future__ import annotations

from journal.errors import JournalError


class SessionError(JournalError):
    """Base class of every error the session layer raises on purpose."""


class UnknownEventTypeError(SessionError):
    """A stored event has a type this reader does not know and the writer did not mark ignorable."""

    def __init__(self, event_type: str, seq: int) -> None:
        super().__init__(
            f"event at seq {seq} has type {event_type!r}, which this reader does not know and which "
            "is not marked ignorable; refusing to replay rather than rebuild a wrong state. Register "
            "the type (journal.session.Registry.register) or upgrade the runtime that reads this session"
        )
        self.event_type = event_type
        self.seq = seq


class NewerSchemaError(SessionError):
    def __init__(self, found: int, supported: int, seq: int) -> None:
        super().__init__(
            f"event at seq {seq} has schemaVersion {found}; this reader understands up to {supported}. "
            "Upgrade the journal package to read this session; nothing was changed"
        )
        self.found = found
        self.supported = supported
        self.seq = seq


class EnvelopeError(SessionError):
    """A stored record is not a session event envelope, or an event to append is malformed."""

    def __init__(self, why: str, seq: int | None = None) -> None:
        where = f"event at seq {seq}" if seq is not None else "event"
        super().__init__(f"{where} is not a valid session envelope: {why}")
        self.why = why
        self.seq = seq


class NotASessionError(SessionError):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"journal {path!r} is not an agent session ({why}); open it with journal.open for raw "
            "records, or pass create=True to journal.session.open on an empty directory"
        )
        self.path = path


class SequenceGapError(SessionError):
    """Events handed to replay are not contiguous: replay stops instead of skipping the gap."""

    def __init__(self, expected: int, found: int) -> None:
        super().__init__(
            f"replay expected seq {expected} and got seq {found}; a gap or reordering is never skipped. "
            "Read the tail again from the journal, or replay from seq 1"
        )
        self.expected = expected
        self.found = found


class DuplicateSeqError(SessionError):
    def __init__(self, seq: int) -> None:
        super().__init__(
            f"two different events carry seq {seq}; refusing to guess which one happened. "
            "Replay from the journal itself, which never holds duplicates"
        )
        self.seq = seq


class ProtocolError(SessionError):
    """An append would break the session's structure (the forbidden actions of the recovery table)."""

    def __init__(self, what: str, todo: str) -> None:
        super().__init__(f"{what}; {todo}")
        self.what = what


class RepairIncompleteError(SessionError):
    def __init__(self, done: int, planned: int, why: str) -> None:
        super().__init__(
            f"repair wrote {done} of {planned} closers and stopped: {why}. Nothing is lost: reopen the "
            "session (recovery runs) and repair again; closers are deterministic and the result is the same"
        )
        self.done = done
        self.planned = planned


class StoreError(SessionError):
    """Base class of the session store's errors (journal.session.store)."""


class InvalidSessionIdError(StoreError, ValueError):
    """A session id that the store's rule refuses (also what journal.session.open refuses)."""

    def __init__(self, session_id: object) -> None:
        super().__init__(
            f"session id {session_id!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' (ids become directory names); or pass no "
            "id and one is made (time-sortable). Nothing was created"
        )
        self.session_id = session_id
