"""Typed errors. Every message says what happened and what the caller should do next."""

from __future__ import annotations

import errno
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
            f"segment {path} belongs to a different journal (its journal id is not the one the rest of the "
            "journal carries): it was copied in from elsewhere. Nothing was read from it or changed; "
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


class ForeignRecordError(JournalError):
    """A genuine record (its checksums hold) whose content is not what the reader, an adapter,
    writes: a field of another type, a shape or a format it does not know. Another program, a
    newer version, or someone who crafted or altered the journal wrote it (a journal copied,
    imported or restored is data from elsewhere). Nothing of it was used and nothing was changed.

    ``path`` names the journal; ``seq`` the record (None when the reader does not know it yet)."""

    def __init__(self, path: str, seq: int | None, why: str) -> None:
        super().__init__(
            f"journal {_where(path, seq)} holds a record this reader did not write: {why}. Nothing of it "
            "was used and nothing was changed; read the journal with the program (or the version) that "
            "wrote it, or restore it from a backup you trust"
        )
        self.path = path
        self.seq = seq
        self.why = why


class ForeignValueError(ForeignRecordError):
    """A stored value names a type the reader does not decode: decoding it would import and call
    what the stored bytes name (code run from a journal's bytes). Nothing was imported, called or
    changed. ``type_name`` is the type; ``allow`` says how to let the reader decode it, for a
    journal the user trusts and a type of their own."""

    def __init__(self, path: str, seq: int | None, type_name: str, allow: str) -> None:
        JournalError.__init__(
            self,
            f"journal {_where(path, seq)} holds a value of type {type_name}, which this reader does not "
            "decode: decoding it would construct what the stored bytes name. Nothing was imported, called or "
            f"changed. If you trust this journal and {type_name} is a type of yours, allow it: {allow}",
        )
        self.path = path
        self.seq = seq
        self.why = f"a value of type {type_name}"
        self.type_name = type_name
        self.allow = allow


def _where(path: str, seq: int | None) -> str:
    return f"{path} at seq {seq}" if seq is not None else path


class EventNotSerializableError(JournalError):
    def __init__(self, why: str) -> None:
        super().__init__(
            f"event cannot be stored: {why}. Pass a dict of JSON types (str, int, float, "
            "bool, None, list, dict with str keys) or bytes; nothing was written"
        )


class NonStringKeyError(EventNotSerializableError):
    """A dict in the event has a key that is not a string. JSON would store it as a string (1 as
    "1", True as "true", None as "null"), so reading the event back would give different data."""

    def __init__(self, where: str, key: object) -> None:
        JournalError.__init__(
            self,
            f"event cannot be stored: key {key!r} ({type(key).__name__}) at {where} is not a string, and "
            f"JSON would store it as the string {_json_key(key)!r}, so the event read back would differ. "
            "Convert the keys to strings yourself (str(key)) before appending; nothing was written",
        )
        self.where = where
        self.key = key


def _json_key(key: object) -> str:
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    return repr(key) if isinstance(key, float) else str(key)


class InvalidArgumentError(JournalError, ValueError):
    """An argument is out of its range or not one of its choices (also a ValueError). Nothing
    was done."""


class DurabilityError(InvalidArgumentError):
    def __init__(self, durability: object, levels: tuple[str, ...]) -> None:
        super().__init__(
            f"durability must be one of {', '.join(map(repr, levels))}, not {durability!r}; "
            "nothing was written (docs/GUARANTEES.md says what each level survives)"
        )
        self.durability = durability


class IdempotencyConflictError(JournalError):
    """An idempotency key was used again with a different event: a caller bug, never a retry."""

    def __init__(self, key: str, seq: int | None) -> None:
        if seq is None:
            what = "appears more than once in this call with different events"
        else:
            what = f"is already used by the record at seq {seq}, which holds a different event"
        super().__init__(
            f"idempotency key {key!r} {what}. A retry must append the same event under the same "
            f"key (it then returns the existing record as a duplicate); give a different event its "
            "own key. Nothing was written"
        )
        self.key = key
        self.seq = seq


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

    def __init__(self, path: str, exc: OSError, doing: str = "opening", advice: str | None = None) -> None:
        # A read-only tool (verify, salvage's read of its source) changed nothing and has no
        # recovery to resume: it says so, and to run it again. ``advice`` replaces that where
        # the caller knows better (a server's write whose answer was lost may have been applied).
        after = advice or (
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


class PrefixDroppedError(JournalIOError):
    """Records a reader was reading on to were deleted by ``drop_prefix`` (retention) while it
    read: the reader was behind the journal's new first seq. Nothing is damaged. Also a
    JournalIOError (errno ENOENT: their segments are gone), as docs/GUARANTEES.md ("Retention")
    promises a reader positioned in a segment being dropped. ``next_seq`` is the record the
    reader needed, ``first_seq`` where the journal begins now."""

    def __init__(self, path: str, next_seq: int, first_seq: int) -> None:
        OSError.__init__(
            self,
            2,  # ENOENT
            f"reading journal {path!r}: records {next_seq} to {first_seq - 1} were deleted by drop_prefix "
            f"(retention) while this reader was behind them; the journal now begins at seq {first_seq}. Nothing "
            f"is damaged: read on from there (read(after_seq={first_seq - 1}) or follow(after_seq="
            f"{first_seq - 1})), or drop only what every reader has read",
        )
        self.path = path
        self.next_seq = next_seq
        self.first_seq = first_seq


class WriteFailedError(JournalIOError):
    """A command that makes a new journal (import, salvage) failed part way while writing it. Its
    partial output, built in a temporary directory beside the destination, was removed, so the
    destination is as it was. An OSError too, with the cause's errno (ENOSPC: a full disk)."""

    def __init__(self, what: str, dest: str, cause: BaseException, leftover: str | None = None) -> None:
        if leftover is None:
            left = f"nothing was left at {dest!r} (the partial copy was removed)"
        else:
            left = (f"nothing was left at {dest!r}; the partial copy in {leftover!r} could not be removed "
                    "(remove it, or let the next run do it)")
        root, reason = _what_failed(cause)
        OSError.__init__(
            self,
            getattr(root, "errno", None),
            f"{what} into {dest!r} failed part way: {reason}. {left}. Fix the cause (free space, "
            "permissions, the device) and run it again",
        )
        self.path = dest
        self.dest = dest
        self.leftover = leftover


def _what_failed(cause: BaseException) -> tuple[BaseException, str]:
    """The failure under ``cause`` and its words, without the advice of the errors wrapped around
    it (reopening and recovery, which concern a journal kept, not a copy that is thrown away)."""
    while isinstance(cause, JournalIOError) and isinstance(cause.__cause__, OSError):
        cause = cause.__cause__
    if isinstance(cause, JournalFailStoppedError):
        return cause, cause.cause
    if isinstance(cause, OSError) and not isinstance(cause, JournalError) and cause.strerror:
        return cause, cause.strerror + (f" ({cause.filename})" if cause.filename else "")
    return cause, str(cause)


class UnexpectedFileError(JournalError, OSError):
    """Something the engine did not make where it expects a file or directory of its own (a
    journal's LOCK, segments, START marker, quarantine/; a store's .trash, its journals, its index):
    a symbolic link, a FIFO, a socket or a device. It is never opened, written, truncated or
    descended into there, since that could reach a file elsewhere or block forever; where the
    engine removes such a name, the name alone is removed. Also an OSError (errno ELOOP for a
    link, ENXIO otherwise). A path the caller gave (a journal's directory, a store's root, a
    destination) is followed as the OS resolves it: docs/GUARANTEES.md, "Links"."""

    def __init__(self, path: str, kind: str, err: int) -> None:
        OSError.__init__(
            self,
            err,
            f"{path!r} is {kind}, where journal expects a file or directory it made itself; it opens, "
            "writes, cuts or removes nothing through it (that could reach a file elsewhere). Nothing was "
            "changed there; move it away (if it is what a journal file was, put that file back in its "
            "place) and run it again",
        )
        self.path = path
        self.kind = kind


class UnexpectedLinkError(UnexpectedFileError):
    """A symbolic link where the engine expects a file or directory of its own."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "a symbolic link", errno.ELOOP)


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


# The package's name on the package index. The import package and the command are `journal`,
# but "journal" on the index is an unrelated project: every install line a user reads says this.
DISTRIBUTION_NAME = "journal-engine"


def install_line(extra: str | None = None) -> str:
    """The command that installs the package, with one of its optional extras."""
    return f"pip install '{DISTRIBUTION_NAME}[{extra}]'" if extra else f"pip install {DISTRIBUTION_NAME}"


class MissingExtraError(JournalError, ImportError):
    """A module of journal needs an optional dependency that is not installed: the message names
    the extra that installs it. An ImportError too, so ``except ImportError`` still catches it."""

    def __init__(self, module: str, needs: str, extra: str, cause: ImportError) -> None:
        super().__init__(f"{module} needs {needs}, which is missing or too old ({cause}): {install_line(extra)}")
        self.module = module
        self.extra = extra
