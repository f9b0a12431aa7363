"""What the Agent Framework adapter's two stores share (journal/adapters/agent_framework.py says
what they store and why): the store of journals they live in, the one write path with its typed
outcomes, the typed errors, the one-to-one escaping of ids into journal names, and the wait for a
write's outcome through a caller's cancellation. It needs nothing of the framework.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from hashlib import sha256
from typing import Any, ClassVar, Final, TypeVar

import journal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    JournalError,
    JournalFailStoppedError,
    NotCommitted,
    Outcome,
    RecordTooLargeError,
    Store,
)
from journal.api import Journal as JournalHandle
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
# The engine's default cap on one record: one save_messages call, or one checkpoint, is one record.
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# Room for the envelope around the messages or the checkpoint within one record.
ENVELOPE_BYTES: Final = 4096
NAME_BYTES_MAX: Final = 160  # an escaped id longer than this is stored under its digest
# Sessions a history provider keeps open (each an open journal and its messages in memory): past
# it the least recently used idle one is closed, and read again when next used.
SESSIONS_OPEN_MAX: Final = 256
DEFAULT_SESSION: Final = "default"  # the session of session_id None or "" (FileHistoryProvider's)
HISTORY_PREFIX: Final = "af-history-"
CHECKPOINTS_PREFIX: Final = "af-checkpoints-"
_SAFE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")

_T = TypeVar("_T")


class AgentFrameworkStoreError(JournalError):
    """Base class of this adapter's errors."""


class StoreClosedError(AgentFrameworkStoreError, RuntimeError):
    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is closed; make a new one to go on")


class WriteTooLargeError(AgentFrameworkStoreError, ValueError):
    def __init__(self, what: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"{what} is {size_bytes} bytes as stored JSON, over the {limit_bytes}-byte limit of one record (one "
            "call is one record, so that it is stored whole or not at all); nothing was written. Keep large "
            "payloads elsewhere and reference them, or raise record_size_bytes_max")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class NotSerializableError(AgentFrameworkStoreError, TypeError):
    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} cannot be stored as JSON ({why}); nothing was written")


class WriteNotCommittedError(AgentFrameworkStoreError):
    """NotCommitted (or a journal failed before the write): nothing of it is stored, ever."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what} was not stored ({reason}); nothing changed, and the call may be retried")
        self.what = what


class OutcomeUnknownError(AgentFrameworkStoreError):
    """AckLost: the write may or may not be stored."""

    def __init__(self, what: str, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of {what} is unknown ({outcome.reason}); do not retry blindly: the journal was closed, "
            "and the next call opens it again (recovery runs) and reads what is stored, which shows whether the "
            "write took (a save retried after it is stored once: saves are idempotent by id)")
        self.what = what
        self.outcome = outcome


class _FormatError(AgentFrameworkStoreError, ForeignRecordError):
    kind: ClassVar[str] = "journal"

    def __init__(self, path: str, seq: int, why: str) -> None:
        JournalError.__init__(
            self, f"Agent Framework {self.kind} journal {path} at seq {seq}: {why}; the journal was left as it is. "
                  "Open it with the program (or the version) that wrote it, or restore it from a backup you trust")
        self.path = path
        self.seq = seq
        self.why = why


class HistoryFormatError(_FormatError):
    """A history journal holds a record this adapter did not write; nothing of it was used."""

    kind = "history"


class CheckpointFormatError(_FormatError):
    """A checkpoint journal holds a record this adapter did not write; nothing of it was used."""

    kind = "checkpoint"


def escaped_name(value: str) -> str:
    """``value`` escaped 1:1 for a journal name: bytes outside [A-Za-z0-9_-] as %XX (no '.', no
    '/'), an escaped name over NAME_BYTES_MAX as '%%' + sha256 (no escaped name starts so)."""
    escaped = "".join(ch if ch in _SAFE_CHARS else "".join(f"%{b:02X}" for b in ch.encode()) for ch in value)
    if not escaped:
        escaped = "%"
    if len(escaped) > NAME_BYTES_MAX:
        return "%%" + sha256(value.encode()).hexdigest()
    return escaped


def json_text(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotSerializableError(what, str(exc)) from exc


def short(exc: BaseException, chars_max: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


class Journaled:
    """What both stores share: a store of journals, one write path and its typed outcomes."""

    def __init__(self, path: str | os.PathLike[str], record_size_bytes_max: int, lock_timeout_s: float,
                 fs: FileSystem | None = None) -> None:
        if not 1 <= record_size_bytes_max <= RECORD_SIZE_BYTES_MAX_DEFAULT:
            raise ValueError(f"record_size_bytes_max must be between 1 and {RECORD_SIZE_BYTES_MAX_DEFAULT} bytes")
        self.record_size_bytes_max = record_size_bytes_max
        remote = isinstance(path, str) and "://" in path
        self.path = path if remote else os.path.abspath(os.fspath(path))
        if remote and fs is not None:
            raise ValueError("fs= is for a directory of journals, not a server URL")
        self._store: Store = journal.store(self.path, **({"fs": fs} if fs is not None else {}))
        self._options: dict[str, Any] = {"lock_timeout_s": lock_timeout_s,
                                         "record_size_bytes_max": record_size_bytes_max + ENVELOPE_BYTES}

    @property
    def store(self) -> Store:
        """The store of journals the data lives in (the tool guard's journals go beside them)."""
        return self._store

    def where(self, name: str) -> str:
        return f"{self.path}#{name}" if "://" in str(self.path) else os.path.join(str(self.path), name)

    def _open(self, name: str) -> JournalHandle:
        return self._store.open(name, create=True, **self._options)

    def _append(self, j: JournalHandle, record: dict[str, Any], what: str, size_bytes: int) -> int:
        """Append ``record`` at "sync"; its seq, or this module's typed error."""
        if size_bytes > self.record_size_bytes_max:
            raise WriteTooLargeError(what, size_bytes, self.record_size_bytes_max)
        try:
            out: Outcome = j.append(record, DURABILITY)
        except RecordTooLargeError as exc:
            raise WriteTooLargeError(what, exc.size_bytes, exc.limit_bytes) from exc
        except EventNotSerializableError as exc:
            raise NotSerializableError(what, str(exc)) from exc
        except JournalFailStoppedError as exc:
            raise WriteNotCommittedError(what, str(exc)) from exc
        if isinstance(out, Committed):
            return out.seq
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason)
        raise OutcomeUnknownError(what, out)


async def run_to_outcome(write: Callable[[], _T]) -> _T:
    """Run ``write`` in a worker thread and wait for its outcome whatever happens to the caller: a
    cancelled caller keeps waiting until the write is over, then gets its CancelledError (chained
    to the write's error, if any), so a caller that sees it knows the write has finished."""
    future = asyncio.get_running_loop().run_in_executor(None, write)
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
        except BaseException:
            pass  # the write's own error: raised below
    if cancelled is not None:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise cancelled from error
        raise cancelled
    return future.result()


__all__ = [
    "CHECKPOINTS_PREFIX",
    "DEFAULT_SESSION",
    "DURABILITY",
    "ENVELOPE_BYTES",
    "FORMAT_VERSION",
    "HISTORY_PREFIX",
    "NAME_BYTES_MAX",
    "RECORD_SIZE_BYTES_MAX_DEFAULT",
    "SESSIONS_OPEN_MAX",
    "AgentFrameworkStoreError",
    "CheckpointFormatError",
    "HistoryFormatError",
    "Journaled",
    "NotSerializableError",
    "OutcomeUnknownError",
    "StoreClosedError",
    "WriteNotCommittedError",
    "WriteTooLargeError",
    "escaped_name",
    "json_text",
    "run_to_outcome",
    "short",
]
