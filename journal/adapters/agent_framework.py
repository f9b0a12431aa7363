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

Layout of the code: this module holds the history provider; ``agent_framework_checkpoints``
the checkpoint storage (re-exported here); ``agent_framework_store`` what both share.

Errors. A journal's record this adapter did not write is ``HistoryFormatError`` /
``CheckpointFormatError``; corruption of committed data is the engine's ``CorruptionError``;
an outcome other than Committed is ``WriteNotCommittedError`` (nothing stored: retry) or
``OutcomeUnknownError`` (reopen the journal: the next call does, and shows whether it took).
A write runs in a worker thread and is waited for even when the caller is cancelled.
"""


from __future__ import annotations

import asyncio
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from journal.errors import MissingExtraError

try:  # the framework comes with the agent-framework extra; without it, say so
    from agent_framework import HistoryProvider, Message

    # The framework's dedupe rule (its in-memory and file providers use it); not re-exported at the top.
    from agent_framework._sessions import filter_new_messages
except ImportError as exc:
    raise MissingExtraError(__name__, "Agent Framework 1.26 or later (agent-framework-core)", "agent-framework",
                            exc) from exc

from journal.adapters.agent_framework_checkpoints import JournalCheckpointStorage
from journal.adapters.agent_framework_store import (
    DEFAULT_SESSION,
    FORMAT_VERSION,
    HISTORY_PREFIX,
    RECORD_SIZE_BYTES_MAX_DEFAULT,
    SESSIONS_OPEN_MAX,
    AgentFrameworkStoreError,
    CheckpointFormatError,
    HistoryFormatError,
    Journaled,
    NotSerializableError,
    OutcomeUnknownError,
    StoreClosedError,
    WriteNotCommittedError,
    WriteTooLargeError,
    escaped_name,
    json_text,
    run_to_outcome,
    short,
)
from journal.api import Journal as JournalHandle
from journal.api import JournalError, JournalIOError, present
from journal.fs import FileSystem


def _read_back(item: dict[str, Any]) -> tuple[Message | None, str | None]:
    """The message a stored dict stands for, if it is one this adapter stores: what
    ``Message.from_dict`` builds from it must give back the same dict (every save checks this of
    what it writes, so a dict failing it was written by someone else). Else (None, why)."""
    try:  # the framework's own model, from JSON: it builds its declared classes only
        message = Message.from_dict(item)
        again = json.loads(json_text(message.to_dict(), "a stored message"))
    except Exception as exc:  # from_dict raises whatever a field's type raises
        return None, f"the framework cannot read it: {short(exc)}"
    if again != item:
        return None, "the framework reads it as another message"
    return message, None


@dataclass
class _Session:
    session_id: str
    name: str
    journal: JournalHandle
    texts: list[str] = field(default_factory=list)  # each stored message as JSON, in order
    messages: list[Message] = field(default_factory=list)  # the same, as the dedupe rule reads them
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class JournalHistoryProvider(HistoryProvider, Journaled):
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
        Journaled.__init__(self, path, record_size_bytes_max, lock_timeout_s, fs)
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
        texts = [json_text(d, what) for d in dicts]
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

        await run_to_outcome(write)

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
