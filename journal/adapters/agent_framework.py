"""Microsoft Agent Framework's history and checkpoint storage on journals (docs/ADAPTERS.md).

    from journal.adapters.agent_framework import JournalCheckpointStorage, JournalHistoryProvider
    agent = Agent(client=..., context_providers=[JournalHistoryProvider("store/")])
    workflow = WorkflowBuilder(..., checkpoint_storage=JournalCheckpointStorage("store/"))

``path`` is a directory of journals or a server URL (``journal.store``: files, PostgreSQL and
JetStream alike). Every record is a JSON object appended at "sync", so a call is acknowledged
only once it is durable (the framework's ``FileCheckpointStorage`` renames a temporary file
without an fsync: a power loss can lose a checkpoint it acknowledged, or leave an empty one).

History, ``JournalHistoryProvider``: one journal per session, named ``af-history-`` + the
escaped session id (``None`` and ``""`` are the session ``default``, as for the framework's
``FileHistoryProvider``):

    {"op": "af-history", "v": 1, "session_id": S}     seq 1: whose journal this is, the format
    {"op": "save", "messages": [M, ...]}                one save_messages call: its new messages

``M`` is ``Message.to_dict()``. One call is one record, so its messages are stored all or none,
in call order; order is seq order. A message the session already holds is not stored again: the
framework's own rule (``filter_new_messages``: by message id when the message has one, else by
role and contents, over the overlap of the stored tail and the incoming head), so a save
re-sent after a lost acknowledgement stores nothing twice and the history equals what the
framework's own stores give. An open session's messages are kept in memory as their JSON text;
``get_messages`` reads no file.

Checkpoints, ``JournalCheckpointStorage``: one journal per storage (``name``), named
``af-checkpoints-`` + the escaped name, since ``load`` and ``delete`` name a checkpoint by id
alone and one record is the only atomic unit:

    {"op": "af-checkpoints", "v": 1, "name": N}       seq 1
    {"op": "save", "id", "workflow", "timestamp", "previous", "checkpoint": C}
    {"op": "delete", "id"}

``C`` is the checkpoint encoded as the framework's own storages encode it, checked to decode
under ``allowed_checkpoint_types`` before it is written (a checkpoint ``load`` would refuse is
refused by ``save``). Opening reads the journal once into an index (id -> seq, workflow,
timestamp, previous); ``list_checkpoint_ids`` and ``get_latest``'s choice read only the index,
``load`` and ``list_checkpoints`` read the records the index names by seq. A save of an id that
holds the same checkpoint writes nothing; a save of an id that holds another overwrites it, and
keeps its place in listings (the framework's in-memory storage's order: first save, ties
impossible). ``get_latest`` applies the framework's rule: the newest timestamp, then a
checkpoint no other of that timestamp names as previous, then the greatest id.

Errors. A journal's record this adapter did not write is ``HistoryFormatError`` /
``CheckpointFormatError``; corruption of committed data is the engine's ``CorruptionError``;
an outcome other than Committed is ``WriteNotCommittedError`` (nothing stored: retry) or
``OutcomeUnknownError`` (reopen the journal: the next call does, and shows whether it took).
A write runs in a worker thread and is waited for even when the caller is cancelled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from hashlib import sha256
from typing import Any, ClassVar, Final, TypeVar

from journal.errors import MissingExtraError

try:  # the framework comes with the agent-framework extra; without it, say so
    from agent_framework import HistoryProvider, Message, WorkflowCheckpoint, WorkflowCheckpointException

    # The framework's dedupe rule (its in-memory and file providers use it); not re-exported at the top.
    from agent_framework._sessions import filter_new_messages

    # The framework's checkpoint codec, with its restricted unpickler: the same bytes its storages write.
    from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value, encode_checkpoint_value
except ImportError as exc:
    raise MissingExtraError(__name__, "Agent Framework 1.26 or later (agent-framework-core)", "agent-framework",
                            exc) from exc

import journal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    NotCommitted,
    Outcome,
    RecordTooLargeError,
    Store,
    present,
)
from journal.api import Journal as JournalHandle
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

logger = logging.getLogger(__name__)

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


def _json_text(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise NotSerializableError(what, str(exc)) from exc


def _read_back(item: dict[str, Any]) -> tuple[Message | None, str | None]:
    """The message a stored dict stands for, if it is one this adapter stores: what
    ``Message.from_dict`` builds from it must give back the same dict (every save checks this of
    what it writes, so a dict failing it was written by someone else). Else (None, why)."""
    try:  # the framework's own model, from JSON: it builds its declared classes only
        message = Message.from_dict(item)
        again = json.loads(_json_text(message.to_dict(), "a stored message"))
    except Exception as exc:  # from_dict raises whatever a field's type raises
        return None, f"the framework cannot read it: {_short(exc)}"
    if again != item:
        return None, "the framework reads it as another message"
    return message, None


def _short(exc: BaseException, chars_max: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


class _Journaled:
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


# -- history ---------------------------------------------------------------------------------


@dataclass
class _Session:
    session_id: str
    name: str
    journal: JournalHandle
    texts: list[str] = field(default_factory=list)  # each stored message as JSON, in order
    messages: list[Message] = field(default_factory=list)  # the same, as the dedupe rule reads them
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class JournalHistoryProvider(HistoryProvider, _Journaled):
    """A ``HistoryProvider`` keeping each session's messages in a journal (see the module doc).

    A session's journal is opened (recovery runs, and it is locked against other writers) at its
    first use and kept open, up to SESSIONS_OPEN_MAX, until ``close()``. Usable from any event
    loop and any thread: the work runs in worker threads under a lock per session.
    """

    DEFAULT_SOURCE_ID: ClassVar[str] = "journal_history"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        source_id: str = DEFAULT_SOURCE_ID,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        sessions_open_max: int = SESSIONS_OPEN_MAX,
        fs: FileSystem | None = None,
    ) -> None:
        HistoryProvider.__init__(self, source_id, load_messages=load_messages, store_inputs=store_inputs,
                                 store_context_messages=store_context_messages,
                                 store_context_from=store_context_from, store_outputs=store_outputs)
        _Journaled.__init__(self, path, record_size_bytes_max, lock_timeout_s, fs)
        if sessions_open_max < 1:
            raise ValueError("sessions_open_max must be at least 1")
        self.skip_excluded = skip_excluded
        self.sessions_open_max = sessions_open_max
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._lock = threading.Lock()  # the map of open sessions
        self._opening: dict[str, threading.Lock] = {}  # a lock per session id being opened
        self._closed = False

    @staticmethod
    def journal_name(session_id: str | None) -> str:
        return HISTORY_PREFIX + escaped_name(session_id or DEFAULT_SESSION)

    # -- sessions ----------------------------------------------------------------------------

    def _session(self, session_id: str | None, create: bool = True) -> _Session | None:
        """The open session, opened and read if it is not (in a worker thread); its lock is held.
        None, with no lock held, for a session never written to when ``create`` is False: a read
        makes no journal.

        One opener per session id at a time (``_opening``): two first uses at once would both open
        the journal, and the second would find it locked by the first."""
        sid = session_id or DEFAULT_SESSION
        while True:
            with self._lock:
                if self._closed:
                    raise StoreClosedError(repr(self))
                s = self._sessions.get(sid)
                if s is not None:
                    self._sessions.move_to_end(sid)
                opening = self._opening.setdefault(sid, threading.Lock()) if s is None else None
            if opening is not None:
                with opening:
                    with self._lock:
                        s = self._sessions.get(sid)
                    if s is None and not create and not self._store.exists(self.journal_name(sid)):
                        with self._lock:
                            self._opening.pop(sid, None)  # kept only while an opener holds it
                        return None
                    if s is None:
                        try:
                            s = self._open_session(sid)
                        finally:
                            with self._lock:
                                self._opening.pop(sid, None)
                        with self._lock:
                            if self._closed:
                                s.journal.close()
                                raise StoreClosedError(repr(self))
                            self._sessions[sid] = s
                            self._evict()
            if s is None:  # pragma: no cover - set on every path above
                continue
            s.lock.acquire()
            if not s.closed:
                return s
            s.lock.release()

    def _evict(self) -> None:
        """Close least recently used idle sessions past the bound. Under self._lock."""
        for sid in list(self._sessions)[: max(0, len(self._sessions) - self.sessions_open_max)]:
            s = self._sessions[sid]
            if s.lock.acquire(blocking=False):
                try:
                    s.closed = True
                    del self._sessions[sid]
                    s.journal.close()
                finally:
                    s.lock.release()

    def _forget(self, s: _Session) -> None:
        """Close a session whose last write's outcome is unknown: the next use reads the journal again."""
        s.closed = True
        with self._lock:
            if self._sessions.get(s.session_id) is s:
                del self._sessions[s.session_id]
        try:
            s.journal.close()
        except JournalError:
            pass  # the journal's failure is what the caller is told about

    def _open_session(self, sid: str) -> _Session:
        name = self.journal_name(sid)
        j = self._open(name)
        s = _Session(sid, name, j)
        try:
            if j.last_seq == 0:
                self._append(j, {"op": "af-history", "v": FORMAT_VERSION, "session_id": sid},
                             f"the header of session {sid!r}", 0)
                return s
            try:
                for rec in j.read(0):
                    self._fold(s, rec.seq, rec.event)
            except JournalError:
                raise
            except OSError as exc:  # a read's failure reaching here untyped: give it the journal's type
                raise JournalIOError(self.where(name), exc, doing="reading") from exc
            return s
        except BaseException:
            j.close()
            raise

    def _fold(self, s: _Session, seq: int, ev: Any) -> None:
        where = self.where(s.name)
        if not isinstance(ev, dict):
            raise HistoryFormatError(where, seq, "a record that is not a JSON object")
        if seq == 1:
            if ev.get("op") != "af-history":
                raise HistoryFormatError(where, 1, "not an Agent Framework history journal (no af-history header)")
            if not isinstance(ev.get("v"), int) or ev["v"] > FORMAT_VERSION:
                raise HistoryFormatError(where, 1, f"format version {ev.get('v')!r} is newer than {FORMAT_VERSION}; "
                                                   "upgrade journal to read it")
            if ev.get("session_id") != s.session_id:
                raise HistoryFormatError(where, 1, f"the journal is session {ev.get('session_id')!r}, "
                                                   f"not {s.session_id!r}")
            return
        if ev.get("op") != "save":
            raise HistoryFormatError(where, seq, f"unknown op {ev.get('op')!r}")
        stored = ev.get("messages")
        if not isinstance(stored, list):
            raise HistoryFormatError(where, seq, "a save whose messages are not a list")
        for item in stored:
            if not isinstance(item, dict):
                raise HistoryFormatError(where, seq, "a message that is not a JSON object")
            message, why = _read_back(item)
            if message is None:
                raise HistoryFormatError(where, seq, f"a message this adapter would not have stored ({why})")
            s.messages.append(message)
            s.texts.append(json.dumps(item, ensure_ascii=False, separators=(",", ":")))

    # -- the HistoryProvider contract -------------------------------------------------------------

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's stored messages, oldest first (new objects on every call)."""

        def read() -> list[str]:
            s = self._session(session_id, create=False)
            if s is None:
                return []
            try:
                return list(s.texts)
            finally:
                s.lock.release()

        texts = await asyncio.to_thread(read)
        messages = [Message.from_dict(json.loads(t)) for t in texts]
        if self.skip_excluded:
            messages = [m for m in messages if not m.additional_properties.get("_excluded", False)]
        return messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Store the messages the session does not hold yet, as one record at "sync"."""
        if not messages:
            return
        incoming = list(messages)
        sid = session_id or DEFAULT_SESSION
        what = f"save_messages of {len(incoming)} messages to session {sid!r}"
        dicts = [m.to_dict() for m in incoming]
        texts = [_json_text(d, what) for d in dicts]
        for text in texts:  # what a reopen would refuse is refused before it is written
            _, why = _read_back(json.loads(text))
            if why is not None:
                raise NotSerializableError(what, f"a message the framework does not read back as it is ({why})")

        def write() -> None:
            s = present(self._session(session_id), "a session opened with create=True")
            try:
                new = filter_new_messages(s.messages, incoming)
                if not new:
                    return  # all of them are stored already (a save sent again)
                first = len(incoming) - len(new)  # the rule keeps a suffix of the incoming messages
                keep = list(range(first, len(incoming)))
                record = {"op": "save", "messages": [dicts[i] for i in keep]}
                size = sum(len(texts[i].encode()) + 1 for i in keep)
                try:
                    self._append(s.journal, record, what, size)
                except (OutcomeUnknownError, WriteNotCommittedError):
                    self._forget(s)
                    raise
                s.messages.extend(Message.from_dict(json.loads(texts[i])) for i in keep)
                s.texts.extend(texts[i] for i in keep)
            finally:
                s.lock.release()

        await _run_to_outcome(write)

    # -- beyond the contract --------------------------------------------------------------------

    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def close(self) -> None:
        """Close every open session's journal (waiting for a write in flight). Idempotent."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            with s.lock:
                if not s.closed:
                    s.closed = True
                    s.journal.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> JournalHistoryProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"JournalHistoryProvider({self.path!r})"


# -- checkpoints -----------------------------------------------------------------------------


@dataclass
class _Entry:
    seq: int  # the record holding the checkpoint as it stands
    workflow: str
    timestamp: str
    previous: str | None


def _parse_time(value: str) -> datetime:
    dt = datetime.fromisoformat(value)
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)


class JournalCheckpointStorage(_Journaled):
    """A workflow ``CheckpointStorage`` on one journal (see the module doc).

    The journal is opened (recovery runs, locked against other writers) and read into the index
    here, and stays open until ``close()``. Usable from any event loop and any thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = "checkpoints",
        allowed_checkpoint_types: list[str] | None = None,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
    ) -> None:
        super().__init__(path, record_size_bytes_max, lock_timeout_s, fs)
        self.name = name
        self._allowed_types: frozenset[str] = frozenset(allowed_checkpoint_types or [])
        self.journal_name = CHECKPOINTS_PREFIX + escaped_name(name)
        self._lock = threading.Lock()
        self._index: dict[str, _Entry] = {}  # in the order of each id's first save since its delete
        self._journal: JournalHandle | None = None
        self._closed = False
        with self._lock:
            self._reopen()

    def _reopen(self) -> JournalHandle:
        """The open journal; opened and read again after an unknown outcome. Under self._lock."""
        if self._closed:
            raise StoreClosedError(repr(self))
        if self._journal is not None:
            return self._journal
        j = self._open(self.journal_name)
        try:
            index: dict[str, _Entry] = {}
            if j.last_seq == 0:
                self._append(j, {"op": "af-checkpoints", "v": FORMAT_VERSION, "name": self.name},
                             f"the header of checkpoint storage {self.name!r}", 0)
            try:
                for rec in j.read(0):
                    self._fold(index, rec.seq, rec.event)
            except JournalError:
                raise
            except OSError as exc:  # a read's failure reaching here untyped: give it the journal's type
                raise JournalIOError(self.where(self.journal_name), exc, doing="reading") from exc
        except BaseException:
            j.close()
            raise
        self._index, self._journal = index, j
        return j

    def _fold(self, index: dict[str, _Entry], seq: int, ev: Any) -> None:
        where = self.where(self.journal_name)
        if not isinstance(ev, dict):
            raise CheckpointFormatError(where, seq, "a record that is not a JSON object")
        op = ev.get("op")
        if seq == 1:
            if op != "af-checkpoints":
                raise CheckpointFormatError(where, 1, "not an Agent Framework checkpoint journal (no header)")
            if not isinstance(ev.get("v"), int) or ev["v"] > FORMAT_VERSION:
                raise CheckpointFormatError(where, 1, f"format version {ev.get('v')!r} is newer than "
                                                      f"{FORMAT_VERSION}; upgrade journal to read it")
            if ev.get("name") != self.name:
                raise CheckpointFormatError(where, 1, f"the journal is storage {ev.get('name')!r}, not {self.name!r}")
            return
        cid = ev.get("id")
        if not isinstance(cid, str):
            raise CheckpointFormatError(where, seq, "a record whose id is not a str")
        if op == "delete":
            index.pop(cid, None)
            return
        if op != "save":
            raise CheckpointFormatError(where, seq, f"unknown op {op!r}")
        workflow, stamp, previous = ev.get("workflow"), ev.get("timestamp"), ev.get("previous")
        if not (isinstance(workflow, str) and isinstance(stamp, str) and (previous is None or isinstance(previous, str))
                and isinstance(ev.get("checkpoint"), dict)):
            raise CheckpointFormatError(where, seq, "a save whose workflow, timestamp, previous or checkpoint is "
                                                    "not of the shape this adapter writes")
        try:
            _parse_time(stamp)
        except ValueError:
            raise CheckpointFormatError(where, seq, f"a save whose timestamp {stamp[:64]!r} is not ISO 8601") from None
        entry = index.get(cid)
        if entry is None:
            index[cid] = _Entry(seq, workflow, stamp, previous)
        else:  # an overwrite keeps the id's place, as a dict assignment does
            entry.seq, entry.workflow, entry.timestamp, entry.previous = seq, workflow, stamp, previous

    def _encode(self, checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
        """The checkpoint as the framework's storages encode it, refused here if it would not load."""
        try:
            encoded: dict[str, Any] = encode_checkpoint_value(checkpoint.to_dict())
            decode_checkpoint_value(encoded, allowed_types=self._allowed_types)
        except WorkflowCheckpointException:
            raise
        except Exception as ex:
            raise WorkflowCheckpointException(
                f"Checkpoint {checkpoint.checkpoint_id} cannot be encoded or restored under this storage's allowed "
                "types; refusing to save.") from ex
        return encoded

    def _decode(self, seq: int, stored: Any) -> WorkflowCheckpoint:
        try:
            decoded = decode_checkpoint_value(stored, allowed_types=self._allowed_types)
        except WorkflowCheckpointException:
            raise
        except Exception as exc:
            raise CheckpointFormatError(self.where(self.journal_name), seq,
                                        f"a checkpoint the framework cannot decode ({_short(exc)})") from None
        if not isinstance(decoded, dict):
            raise CheckpointFormatError(self.where(self.journal_name), seq, "a checkpoint that is not a map")
        return WorkflowCheckpoint.from_dict(decoded)

    def _read(self, j: JournalHandle, seq: int) -> dict[str, Any]:
        try:
            rec = j.get(seq)
        except JournalError:
            raise
        except OSError as exc:  # a point read's failure reaches here untyped: give it the journal's type
            raise JournalIOError(self.where(self.journal_name), exc, doing="reading") from exc
        if rec is None or not isinstance(rec.event, dict) or not isinstance(rec.event.get("checkpoint"), dict):
            raise CheckpointFormatError(self.where(self.journal_name), seq, "a checkpoint record the index names is "
                                                                            "missing or not a save")
        stored: dict[str, Any] = rec.event["checkpoint"]
        return stored

    # -- the CheckpointStorage contract ---------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> str:
        """Store ``checkpoint`` durably (its id again: the same checkpoint is a no-op, another overwrites)."""
        cid = checkpoint.checkpoint_id
        if not isinstance(cid, str):
            raise WorkflowCheckpointException(f"Checkpoint id must be a str, not {type(cid).__name__}")
        encoded = self._encode(checkpoint)
        what = f"save of checkpoint {cid!r}"
        text = _json_text(encoded, what)
        stamp, previous = checkpoint.timestamp, checkpoint.previous_checkpoint_id
        if not isinstance(stamp, str):
            raise WorkflowCheckpointException(f"Checkpoint {cid} has a timestamp that is not an ISO 8601 string")
        try:
            _parse_time(stamp)
        except ValueError:
            raise WorkflowCheckpointException(f"Checkpoint {cid} has a timestamp that is not ISO 8601: "
                                              f"{stamp[:64]!r}") from None
        record = {"op": "save", "id": cid, "workflow": checkpoint.workflow_name, "timestamp": stamp,
                  "previous": previous, "checkpoint": encoded}

        def write() -> str:
            with self._lock:
                j = self._reopen()
                entry = self._index.get(cid)
                if entry is not None and _json_text(self._read(j, entry.seq), what) == text \
                        and (entry.workflow, entry.timestamp, entry.previous) == (record["workflow"], stamp, previous):
                    return cid  # this very checkpoint is stored: a save sent again
                try:
                    seq = self._append(j, record, what, len(text.encode()) + 256)
                except (OutcomeUnknownError, WriteNotCommittedError):
                    self._drop_journal()
                    raise
                self._fold(self._index, seq, record)
                return cid

        return await _run_to_outcome(write)

    async def load(self, checkpoint_id: str) -> WorkflowCheckpoint:
        def read() -> tuple[int, dict[str, Any]] | None:
            with self._lock:
                j = self._reopen()
                entry = self._index.get(checkpoint_id)
                return None if entry is None else (entry.seq, self._read(j, entry.seq))

        found = await asyncio.to_thread(read)
        if found is None:
            raise WorkflowCheckpointException(f"No checkpoint found with ID {checkpoint_id}")
        return self._decode(*found)

    def _stored_of(self, workflow_name: str) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            j = self._reopen()
            return [(e.seq, self._read(j, e.seq)) for e in self._index.values() if e.workflow == workflow_name]

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """The workflow's checkpoints in the order of their first save (only the index chooses them)."""
        stored = await asyncio.to_thread(self._stored_of, workflow_name)
        out = []
        for seq, value in stored:
            try:
                out.append(self._decode(seq, value))
            except WorkflowCheckpointException as exc:  # refused by the allowed types, as the file storage skips
                logger.warning("checkpoint at seq %d of %s not listed: %s", seq, self.journal_name, exc)
        return out

    async def delete(self, checkpoint_id: str) -> bool:
        def write() -> bool:
            with self._lock:
                j = self._reopen()
                if checkpoint_id not in self._index:
                    return False
                record = {"op": "delete", "id": checkpoint_id}
                try:
                    seq = self._append(j, record, f"delete of checkpoint {checkpoint_id!r}", 0)
                except (OutcomeUnknownError, WriteNotCommittedError):
                    self._drop_journal()
                    raise
                self._fold(self._index, seq, record)
                return True

        return await _run_to_outcome(write)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        def choose() -> tuple[int, dict[str, Any]] | None:
            with self._lock:
                j = self._reopen()
                entries = [(cid, e) for cid, e in self._index.items() if e.workflow == workflow_name]
                if not entries:
                    return None
                newest = max(_parse_time(e.timestamp) for _, e in entries)
                candidates = [(cid, e) for cid, e in entries if _parse_time(e.timestamp) == newest]
                superseded = {e.previous for _, e in candidates}
                leaves = [(cid, e) for cid, e in candidates if cid not in superseded]
                _, chosen = max(leaves or candidates, key=lambda ce: ce[0])
                return chosen.seq, self._read(j, chosen.seq)

        found = await asyncio.to_thread(choose)
        return None if found is None else self._decode(*found)

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[str]:
        def ids() -> list[str]:
            with self._lock:
                self._reopen()
                return [cid for cid, e in self._index.items() if e.workflow == workflow_name]

        return await asyncio.to_thread(ids)

    # -- beyond the contract --------------------------------------------------------------------

    def _drop_journal(self) -> None:
        """Close the journal after a write whose outcome is not Committed. Under self._lock."""
        j, self._journal = self._journal, None
        if j is not None:
            try:
                j.close()
            except JournalError:
                pass  # the write's failure is what the caller is told about

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop_journal()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> JournalCheckpointStorage:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"JournalCheckpointStorage({self.path!r}, name={self.name!r})"


async def _run_to_outcome(write: Callable[[], _T]) -> _T:
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
    "AgentFrameworkStoreError",
    "CheckpointFormatError",
    "HistoryFormatError",
    "JournalCheckpointStorage",
    "JournalHistoryProvider",
    "NotSerializableError",
    "OutcomeUnknownError",
    "StoreClosedError",
    "WriteNotCommittedError",
    "WriteTooLargeError",
    "escaped_name",
]
