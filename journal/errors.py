"""Typed errors. Every message says what happened and what the caller should do next."""

from __future__ import annotations

from typing import TypeVar

_T = TypeVar("_T")


class JournalError(Exception):
    """Base class of every error this package raises on purpose."""


class JournalNotFoundError(JournalError):
    def __init__(self, path: str) -> None:
        super().__init__(f"no journal at {path!r}: check the path, or create one (journal.open(path, create=True))")
        self.path = path


class NotAJournalError(JournalError):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"{path!r} is not a journal ({why}); point journal.open at a journal directory "
            "or at a new or empty directory with create=True"
        )
        self.path = path
        self.why = why


class JournalLockedError(JournalError):
    def __init__(self, path: str, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process (pid not yet recorded)"
        super().__init__(
            f"journal {path!r} is locked for writing by {holder}; only one writer is allowed. "
            "Open it with readonly=True to read, or pass lock_timeout_s to wait for the lock"
        )
        self.path = path
        self.pid = pid


class CorruptionError(JournalError):
    """Committed data failed verification. Nothing was truncated or skipped."""

    def __init__(self, segment: str, offset: int, seq: int | None, reason: str) -> None:
        where = f"{segment} at offset {offset}" + (f" (seq {seq})" if seq is not None else "")
        super().__init__(
            f"corruption of committed data in {where}: {reason}. Nothing was changed; "
            "restore the segment from a backup, or run `journal salvage` to copy what is "
            "recoverable into a new journal"
        )
        self.segment = segment
        self.offset = offset
        self.seq = seq
        self.reason = reason


class SequenceError(CorruptionError):
    """A gap or a duplicate in sequence numbers: recovery stops rather than guessing."""


class ForeignSegmentError(CorruptionError):
    """A segment of another journal (its journal id differs) sits in this journal's directory."""

    def __init__(self, segment: str, path: str) -> None:
        JournalError.__init__(
            self,
            f"segment {path} belongs to a different journal (its journal id is not the one of the "
            "segments before it): it was copied in from elsewhere. Nothing was read from it or changed; "
            "move that file out of the journal directory (or restore this journal's own segment from a backup)",
        )
        self.segment = segment
        self.path = path
        self.offset = 0
        self.seq = None
        self.reason = "segment belongs to a different journal (journal id differs)"


class NewerFormatError(JournalError):
    def __init__(self, path: str, found: str, supported: int) -> None:
        super().__init__(
            f"{path!r} was written by a newer journal format ({found}); this version reads "
            f"format {supported}. Upgrade the journal package to read it"
        )
        self.path = path


class EventNotSerializableError(JournalError):
    def __init__(self, why: str) -> None:
        super().__init__(
            f"event cannot be stored: {why}. Pass a dict of JSON types (str, int, float, "
            "bool, None, list, dict with str keys) or bytes; nothing was written"
        )


class RecordTooLargeError(JournalError):
    def __init__(self, size_bytes: int, limit_bytes: int, reading: bool = False) -> None:
        if reading:
            advice = (
                f"a stored record is {size_bytes} bytes, over this handle's record_size_bytes_max="
                f"{limit_bytes}; open the journal with record_size_bytes_max >= {size_bytes} to read it"
            )
        else:
            advice = (
                f"record is {size_bytes} bytes, over record_size_bytes_max={limit_bytes}; store "
                "large outputs elsewhere and reference them, or open the journal with a larger "
                "record_size_bytes_max; nothing was written"
            )
        super().__init__(advice)
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class JournalFailStoppedError(JournalError):
    """A sync or a rollback failed; the on-disk state is unknown until the journal is reopened."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"journal is fail-stopped after: {cause}. Appends are refused because the kernel "
            "may have dropped unsynced pages; close it, reopen it (recovery runs) and resolve "
            "any AckLost outcomes with journal.resolve() before retrying"
        )
        self.cause = cause


class JournalClosedError(JournalError):
    def __init__(self) -> None:
        super().__init__("journal is closed; open it again with journal.open(path)")


class ReadOnlyError(JournalError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs a writable journal; open it without readonly=True")


class JournalIOError(JournalError, OSError):
    """Opening, recovering or reading a journal failed in the file system (also an OSError: errno kept)."""

    def __init__(self, path: str, exc: OSError, doing: str = "opening") -> None:
        # A read-only tool (verify, salvage's read of its source) changed nothing and has no
        # recovery to resume: it says so, and to run it again.
        after = (
            "Nothing acknowledged was changed; fix the cause (permissions, free space, the device) "
            "and open it again: recovery picks up where it stopped"
            if doing == "opening"
            else "Nothing was changed; fix the cause (permissions, the device) and run it again"
        )
        OSError.__init__(
            self,
            exc.errno,
            f"{doing} journal {path!r} failed: {exc.strerror or exc}"
            + (f" ({exc.filename})" if exc.filename else "")
            + ". "
            + after,
        )
        self.path = path


class InvariantError(JournalError, AssertionError):
    """An invariant of the engine broke: a bug in journal, not a problem with the caller's data.

    Raised by ``invariant`` (never by ``assert``, which ``python -O`` removes); it is an
    AssertionError too, so code that treated a failed assert as a bug still does.
    """

    def __init__(self, what: str) -> None:
        super().__init__(f"internal invariant broken: {what}. This is a bug in journal; please report it")
        self.what = what


def invariant(condition: bool, what: str) -> None:
    """Raise InvariantError(what) unless ``condition`` holds. Checked under ``python -O`` too."""
    if not condition:
        raise InvariantError(what)


def present(value: _T | None, what: str) -> _T:
    """``value``, which an invariant says is there; InvariantError(what) if it is None."""
    if value is None:
        raise InvariantError(what)
    return value
