"""Strands Agents' session repository on journals: ``JournalSessionManager(session_id, path)``
(docs/ADAPTERS.md).

    from strands import Agent
    from journal.adapters.strands import JournalSessionManager
    agent = Agent(session_manager=JournalSessionManager("user-42", "sessions/"))

``JournalSessionRepository(path)`` is a ``strands.session.session_repository.SessionRepository``
(sessions, agents, messages, multi-agent state); ``JournalSessionManager`` is Strands'
``RepositorySessionManager`` on it, made the way ``FileSessionManager`` is made (and, like it,
the repository too). ``path`` is a directory, or a server URL (``postgresql://...``,
``nats://...``): the same code runs on files, PostgreSQL and JetStream through
``journal.store``.

One journal per Strands session, named by the session id escaped (``session_journal_name``),
in the store at ``<path>/sessions/`` (or the server's store). Every call that writes is one
record, appended at "sync", so a call is stored whole or not at all; nothing is rewritten:

    {"op": "strands", "v": 1, "session_id": S, "session": {...}}    seq 1, create_session
    {"op": "agent", "agent": {...}}                                 create_agent, update_agent
    {"op": "message", "agent_id": A, "message": {...}}              create_message, update_message
    {"op": "multi_agent", "id": M, "state": {...}}                  create/update_multi_agent

The dicts are Strands' own ``to_dict()`` forms (bytes as its base64 objects), read back with
its ``from_dict``. The latest record of an agent, a message (agent id, message id) or a
multi-agent state is the current one.

The index. Opening a session reads its journal once into an index held in memory: per agent
the seq of its latest record, per message id the seq of its latest record, the message ids in
order. ``read_*`` and ``list_messages`` read the records the index names by seq and nothing
else (``Journal.get``); listing never lists a directory and never reads a message it does not
return. Messages are ordered by their id, the framework's index in the conversation (ids are
unique per agent: a later record of an id replaces the earlier, so no two share a place).

The rules, as ``FileSessionManager`` applies them (the differential test holds the two to the
same answers): a second create of a session is refused; a create of an existing agent, message
or multi-agent state replaces it (an equal one is a no-op: a call retried after a lost answer
is stored once); an update of one that does not exist is refused, and keeps the stored
``created_at``, written into the caller's object as the file store does; ``list_messages`` of an
agent that was never created is refused; ids with a path separator and message ids that are not
ints are ``ValueError``. Where the file store makes directories silently (an agent or a message
in a session never created), this one refuses with ``NotFoundError``: such a write is lost to
``read_session``, and the file store cannot list it either.

Errors. Every refusal of Strands' rules, and every error of this module, is a
``SessionException`` (what Strands' callers catch) and a ``journal.JournalError``: a record this
module did not write is ``SessionFormatError`` (a ``ForeignRecordError``); NotCommitted is
``WriteNotCommittedError`` (nothing stored: retry); AckLost is ``OutcomeUnknownError`` (the
session's journal is closed; the next call reopens it, recovery runs, and the reads show
whether the write took). A torn tail is cut by recovery (it was never acknowledged); damage to
committed records is the engine's ``CorruptionError``, never served.

Sharing. A session's journal is opened (and locked against other processes' writers) at its
first use and shared by every repository of this process on the same store, so two managers of
one session in one process (a new agent restored beside the old) see each other's writes. It is
closed when the last repository using it is closed (``close()``, ``with``, or garbage
collection). A second process gets ``journal.JournalLockedError`` after ``lock_timeout_s``.

It uses only ``journal``, ``journal.api`` and ``journal.fs``; the session layer's envelope is
not used: Strands' messages and ids are its own.
"""

from __future__ import annotations

import os
import threading
import weakref
from bisect import insort
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import sha256
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from journal.errors import MissingExtraError

try:  # the framework comes with the strands extra; without it, say so (not a bare ModuleNotFoundError)
    from strands.session.repository_session_manager import RepositorySessionManager
    from strands.session.session_repository import SessionRepository
    from strands.types.exceptions import SessionException
    from strands.types.session import Session, SessionAgent, SessionMessage
except ImportError as exc:
    raise MissingExtraError(__name__, "Strands Agents 1.62 or later (strands-agents)", "strands", exc) from exc

import journal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    Journal,
    JournalError,
    JournalFailStoppedError,
    JournalNotFoundError,
    NotCommitted,
    RecordTooLargeError,
    Store,
    present,
)
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
SESSIONS_DIR: Final = "sessions"
# The engine's default cap on one record: one message (or agent, or multi-agent state) is one
# record, so this bounds one message as stored JSON.
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# A session id longer than this once escaped is stored under a digest (names stop at 200 bytes).
NAME_BYTES_MAX: Final = 160
_SAFE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_OPS: Final = frozenset({"agent", "message", "multi_agent"})

_T = TypeVar("_T")


class JournalSessionRepositoryError(JournalError, SessionException):
    """Base class of this adapter's errors: a ``SessionException`` for Strands' callers."""


class RepositoryClosedError(JournalSessionRepositoryError, RuntimeError):
    def __init__(self, path: str) -> None:
        super().__init__(f"JournalSessionRepository({path!r}) is closed; make a new one to go on")


class SessionExistsError(JournalSessionRepositoryError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session {session_id} already exists")


class NotFoundError(JournalSessionRepositoryError):
    """What a call names does not exist (the words of Strands' file store: "does not exist")."""


class WriteTooLargeError(JournalSessionRepositoryError, ValueError):
    def __init__(self, what: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"{what} is {size_bytes} bytes as stored JSON, over the {limit_bytes}-byte limit of one record "
            "(one call is one record, stored whole or not at all); nothing was written. Keep large payloads "
            "elsewhere and reference them, or make the repository with a larger record_size_bytes_max"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class NotSerializableError(JournalSessionRepositoryError, TypeError):
    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} cannot be stored as JSON ({why}); nothing was written. Store JSON values only")


class WriteNotCommittedError(JournalSessionRepositoryError):
    """The journal answered NotCommitted: nothing of the write is stored, and never will be."""

    def __init__(self, what: str, reason: str, outcome: NotCommitted | None = None) -> None:
        super().__init__(f"{what} was not stored ({reason}); the session is unchanged, and the call may be retried")
        self.what = what
        self.outcome = outcome


class OutcomeUnknownError(JournalSessionRepositoryError):
    """The journal answered AckLost: the write may or may not be stored."""

    def __init__(self, what: str, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of {what} is unknown ({outcome.reason}); do not retry blindly: the session's journal "
            "was closed, and the next call reopens it (recovery runs) and reads what is on disk, so read_message "
            "or read_agent shows whether the write took (a retry of the same call is stored once either way)"
        )
        self.what = what
        self.outcome = outcome


class ReadFailedError(JournalSessionRepositoryError, OSError):
    """Reading a session's journal failed with an OS error (the disk, the file system)."""

    def __init__(self, what: str, cause: OSError) -> None:
        JournalSessionRepositoryError.__init__(
            self, f"reading {what} failed ({cause}); nothing was changed: check the disk or the file system, then "
                  "call again")
        self.errno = cause.errno
        self.what = what


class SessionFormatError(JournalSessionRepositoryError, ForeignRecordError):
    """A session's journal holds a record this adapter did not write; nothing of it was used."""

    def __init__(self, path: str, seq: int | None, why: str) -> None:
        ForeignRecordError.__init__(self, path, seq, f"not a Strands session record of this adapter ({why})")
        self.why = why


def session_journal_name(session_id: str) -> str:
    """The journal name of a session: the id, escaped so that the mapping is 1:1.

    Every byte outside [A-Za-z0-9_-] becomes %XX (so '.' and '/' never reach a file system or a
    subject as themselves, and no name holds the "." of the tool guard's ``guard.`` journals); an
    escaped id over NAME_BYTES_MAX becomes '%%' + sha256 of the id, which no escaped id starts with.
    """
    escaped = "".join(ch if ch in _SAFE_CHARS else "".join(f"%{b:02X}" for b in ch.encode()) for ch in session_id)
    if not escaped:
        escaped = "%"  # the empty id: '%' alone is no escape of anything else
    if len(escaped) > NAME_BYTES_MAX:
        return "%%" + sha256(session_id.encode()).hexdigest()
    return escaped


def _check_id(value: Any, kind: str) -> str:
    """Strands' rule for session and agent ids (a path separator is a ValueError, in its words)."""
    if not isinstance(value, str):
        raise ValueError(f"{kind}_id={value!r} | id must be a string")
    if os.path.basename(value) != value:
        raise ValueError(f"{kind}_id={value} | id cannot contain path separators")
    return value


def _check_message_id(message_id: Any) -> int:
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        raise ValueError(f"message_id=<{message_id}> | message id must be an integer")
    return message_id


def _is_message(value: Any) -> bool:
    """Whether ``value`` has a Strands message's shape: a str role and a list of object blocks."""
    return (isinstance(value, dict) and isinstance(value.get("role"), str) and isinstance(value.get("content"), list)
            and all(isinstance(block, dict) for block in value["content"]))


@dataclass
class _Fold:
    """The index of one session's journal: seqs of the current records, never their bodies."""

    header_seq: int = 0  # 0: no session yet (a journal made, its header not yet written)
    agents: dict[str, int] = field(default_factory=dict)  # agent id -> seq
    messages: dict[str, dict[int, int]] = field(default_factory=dict)  # agent id -> message id -> seq
    order: dict[str, list[int]] = field(default_factory=dict)  # agent id -> message ids, sorted
    multi_agents: dict[str, int] = field(default_factory=dict)  # multi-agent id -> seq
    folded_seq: int = 0

    def apply(self, path: str, session_id: str, seq: int, ev: Any) -> None:
        """Index record ``seq``: the one function for replay and for live writes."""
        if not isinstance(ev, dict):
            raise SessionFormatError(path, seq, "a record that is not a JSON object")
        op = ev.get("op")
        if seq == 1 or op == "strands":
            if seq != 1 or self.header_seq:
                raise SessionFormatError(path, seq, "a session header that is not the first record")
            v = ev.get("v")
            if op != "strands" or type(v) is not int:
                raise SessionFormatError(path, seq, "the first record is not a Strands session header")
            if v > FORMAT_VERSION:
                raise SessionFormatError(path, seq, f"format version {v} is newer than {FORMAT_VERSION}; upgrade "
                                                    "journal to read it")
            if ev.get("session_id") != session_id or not isinstance(ev.get("session"), dict):
                raise SessionFormatError(path, seq, f"the header is of session {ev.get('session_id')!r}, "
                                                    f"not {session_id!r}")
            self.header_seq = seq
        elif not self.header_seq:
            raise SessionFormatError(path, seq, "a record before the session header")
        elif op == "agent":
            agent = ev.get("agent")
            if not isinstance(agent, dict) or not isinstance(agent.get("agent_id"), str) \
                    or not all(isinstance(agent.get(k, {}), dict) for k in ("state", "conversation_manager_state",
                                                                             "_internal_state")):
                raise SessionFormatError(path, seq, "an agent record without a str agent_id and object states")
            self.agents[agent["agent_id"]] = seq
        elif op == "message":
            agent_id, message = ev.get("agent_id"), ev.get("message")
            if not isinstance(agent_id, str) or agent_id not in self.agents:
                raise SessionFormatError(path, seq, "a message of an agent the journal never created")
            mid = message.get("message_id") if isinstance(message, dict) else None
            if type(mid) is not int or not isinstance(message, dict) or not _is_message(message.get("message")) \
                    or not (message.get("redact_message") is None or _is_message(message["redact_message"])):
                raise SessionFormatError(path, seq, "a message record without an int message_id and a message "
                                                    "(a role and a list of content blocks)")
            ids = self.messages.setdefault(agent_id, {})
            if mid not in ids:
                insort(self.order.setdefault(agent_id, []), mid)
            ids[mid] = seq
        elif op == "multi_agent":
            if not isinstance(ev.get("id"), str) or not isinstance(ev.get("state"), dict):
                raise SessionFormatError(path, seq, "a multi-agent record without a str id and a state object")
            self.multi_agents[ev["id"]] = seq
        else:
            raise SessionFormatError(path, seq, f"unknown op {op!r}")
        self.folded_seq = seq


class _Open:
    """One session's journal, open and indexed, shared by the repositories of this process."""

    def __init__(self, key: tuple[str, str, int], session_id: str, j: Journal) -> None:
        self.key = key
        self.session_id = session_id
        self.journal = j
        self.fold = _Fold()
        self.lock = threading.RLock()  # a call's check, append and fold are one step
        self.users = 0
        self.forgotten = False  # closed after an unknown outcome or a delete: reopen to go on


_REGISTRY_LOCK = threading.Lock()
_REGISTRY: dict[tuple[str, str, int], _Open] = {}
_OPENING: dict[tuple[str, str, int], threading.Lock] = {}  # a session's journal being opened


def _release(held: dict[tuple[str, str, int], _Open]) -> None:
    """Let go of the sessions a repository holds; the last user of a journal closes it."""
    closing: list[_Open] = []
    with _REGISTRY_LOCK:
        for key, entry in list(held.items()):
            del held[key]
            entry.users -= 1
            if entry.users <= 0 and not entry.forgotten:
                if _REGISTRY.get(key) is entry:
                    del _REGISTRY[key]
                closing.append(entry)
    for entry in closing:
        with entry.lock:
            entry.forgotten = True
            try:
                entry.journal.close()
            except JournalError:
                pass  # a journal that failed already said so to the call that saw it fail


class JournalSessionRepository(SessionRepository):
    """A Strands ``SessionRepository`` storing each session in a journal (see the module doc).

    Thread-safe: calls on one session are serialized; calls on different sessions run together.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
        **journal_options: Any,
    ) -> None:
        self.record_size_bytes_max = record_size_bytes_max
        # journal_options go to every journal opened (segment_size_bytes=, the server's options).
        self._options: dict[str, Any] = {**journal_options, "record_size_bytes_max": record_size_bytes_max,
                                         "lock_timeout_s": lock_timeout_s}
        if isinstance(path, str) and "://" in path:
            if fs is not None:
                raise ValueError("fs= is for a directory of journals, not a server URL")
            self.path = path
            self._store: Store = journal.store(path)
        else:
            self.path = os.path.abspath(os.fspath(path))
            self._store = journal.store(os.path.join(self.path, SESSIONS_DIR), **({"fs": fs} if fs is not None else {}))
        # Handles are shared per store and file layer: an injected fs (the fault tests) gets its own.
        self._fs_key = id(fs) if fs is not None else 0
        # The sessions this repository uses, each with the open journal it holds a use of.
        self._held: dict[tuple[str, str, int], _Open] = {}
        self._closed = False
        self._finalizer = weakref.finalize(self, _release, self._held)

    @property
    def store(self) -> Store:
        """The journal store its sessions live in (the tool guard's journals go beside them:
        journal.adapters.strands_guard.guard_for)."""
        return self._store

    def session_path(self, session_id: str) -> str:
        """Where a session's journal is: its directory, or its name in the server's store."""
        name = session_journal_name(session_id)
        if "://" in self.path:
            return f"{self.path}#{name}"
        return os.path.join(self.path, SESSIONS_DIR, name)

    # -- opening and sharing -----------------------------------------------------------------

    def _key(self, session_id: str) -> tuple[str, str, int]:
        return (self._store.location, session_journal_name(session_id), self._fs_key)

    def _session(self, session_id: str, create: bool = False) -> _Open | None:
        """The open session's journal (opened and indexed on first use), or None if it has no
        journal and ``create`` is False. Shared with this process's other repositories.

        A journal is opened (recovery, the index read, a wait for another process's lock) under a
        lock of its own session, never the registry's: other sessions go on meanwhile."""
        if self._closed:
            raise RepositoryClosedError(self.path)
        key = self._key(session_id)
        with _REGISTRY_LOCK:
            found = self._hold(key)
            if found is not None:
                return found
            opening = _OPENING.setdefault(key, threading.Lock())
        with opening:
            with _REGISTRY_LOCK:
                found = self._hold(key)  # opened by another caller while this one waited
                if found is not None:
                    return found
            try:
                entry = self._open(key, session_id, create)
            except OSError as exc:  # the engine's own I/O errors are typed already (JournalIOError)
                if isinstance(exc, JournalError):
                    raise
                raise ReadFailedError(f"the journal of session {session_id!r}", exc) from exc
            finally:
                with _REGISTRY_LOCK:
                    if _OPENING.get(key) is opening:
                        del _OPENING[key]  # a caller still waiting on it finds the registry's answer
            if entry is None:
                return None
            with _REGISTRY_LOCK:
                entry.users = 1
                _REGISTRY[key] = entry
                self._held[key] = entry
            return entry

    def _hold(self, key: tuple[str, str, int]) -> _Open | None:
        """The registry's open journal of ``key``, now held by this repository too; None if there
        is none (a forgotten one is dropped: the next open reads the disk). Under _REGISTRY_LOCK."""
        entry = _REGISTRY.get(key)
        if entry is not None and not entry.forgotten:
            if self._held.get(key) is not entry:
                stale = self._held.get(key)
                if stale is not None:
                    stale.users -= 1  # a journal forgotten (closed) since: this use of it ends
                entry.users += 1
                self._held[key] = entry
            return entry
        if entry is not None:
            del _REGISTRY[key]
        return None

    def _open(self, key: tuple[str, str, int], session_id: str, create: bool) -> _Open | None:
        """Open a session's journal and index it (None if absent and not ``create``)."""
        try:  # not exists() then open(): a name that is a symbolic link is refused by open, not absent
            j = self._store.open(key[1], create=create, **self._options)
        except JournalNotFoundError:
            if create:
                raise
            return None
        entry = _Open(key, session_id, j)
        try:
            for rec in j.read():
                entry.fold.apply(j.path, session_id, rec.seq, rec.event)
        except BaseException:
            j.close()
            raise
        return entry

    def _forget(self, entry: _Open) -> None:
        """Close a session whose last write's outcome is unknown: the next call reads the disk again."""
        entry.forgotten = True
        try:
            entry.journal.close()
        except JournalError:
            pass  # the failure is what the caller is being told about

    def _live(self, session_id: str) -> _Open:
        """The session, which must exist (its header written): else NotFoundError."""
        entry = self._session(session_id)
        if entry is None or not entry.fold.header_seq:
            raise NotFoundError(f"Session {session_id} does not exist")
        return entry

    def _write(self, entry: _Open, record: dict[str, Any], what: str) -> None:
        """Append ``record`` at "sync" and index it. Under ``entry.lock``."""
        if entry.forgotten:
            raise WriteNotCommittedError(what, "the session's journal was closed meanwhile; call again")
        try:
            out = entry.journal.append(record, DURABILITY)
        except RecordTooLargeError as exc:
            raise WriteTooLargeError(what, exc.size_bytes, exc.limit_bytes) from exc
        except EventNotSerializableError as exc:
            raise NotSerializableError(what, str(exc)) from exc
        except JournalFailStoppedError as exc:
            self._forget(entry)
            raise WriteNotCommittedError(what, str(exc)) from exc
        if isinstance(out, Committed):
            entry.fold.apply(entry.journal.path, entry.session_id, out.seq, record)
            return
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason, out)
        self._forget(entry)
        raise OutcomeUnknownError(what, out)

    def _read(self, entry: _Open, seq: int) -> dict[str, Any]:
        """The record the index names at ``seq``."""
        try:
            rec = entry.journal.get(seq)
        except OSError as exc:  # the engine's own I/O errors are typed already (JournalIOError)
            if isinstance(exc, JournalError):
                raise
            raise ReadFailedError(f"record {seq} of {entry.journal.path}", exc) from exc
        if rec is None or not isinstance(rec.event, dict):
            raise SessionFormatError(entry.journal.path, seq, "a record the index names is missing")
        return rec.event

    @staticmethod
    def _build(entry: _Open, seq: int, make: Callable[[dict[str, Any]], _T], body: Any) -> _T:
        """Strands' object from its stored dict; what its ``from_dict`` refuses is not ours."""
        try:
            if not isinstance(body, dict):
                raise TypeError("not an object")
            return make(body)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            raise SessionFormatError(entry.journal.path, seq, f"Strands cannot read it ({type(exc).__name__}: "
                                                              f"{str(exc)[:200]})") from None

    # -- sessions ----------------------------------------------------------------------------

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        sid = _check_id(session.session_id, "session")
        body = session.to_dict()
        entry = present(self._session(sid, create=True), "a session opened with create=True")
        with entry.lock:
            if entry.fold.header_seq:
                raise SessionExistsError(sid)
            record = {"op": "strands", "v": FORMAT_VERSION, "session_id": sid, "session": body}
            self._write(entry, record, f"create_session of session {sid!r}")
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        entry = self._session(_check_id(session_id, "session"))
        if entry is None:
            return None
        with entry.lock:
            seq = entry.fold.header_seq
            if not seq:
                return None
            ev = self._read(entry, seq)
        return self._build(entry, seq, Session.from_dict, ev.get("session"))

    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        """Delete the session's journal durably (whole or gone after a crash), as
        FileSessionManager.delete_session removes its directory."""
        sid = _check_id(session_id, "session")
        entry = self._session(sid)
        if entry is None or not entry.fold.header_seq:
            raise NotFoundError(f"Session {sid} does not exist")
        with entry.lock:
            self._forget(entry)
            with _REGISTRY_LOCK:
                if _REGISTRY.get(entry.key) is entry:
                    del _REGISTRY[entry.key]
            self._store.delete(entry.key[1])

    # -- agents ------------------------------------------------------------------------------

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = _check_id(session_id, "session")
        aid = _check_id(session_agent.agent_id, "agent")
        entry = self._live(sid)
        body = session_agent.to_dict()
        with entry.lock:
            seq = entry.fold.agents.get(aid)
            if seq is not None and self._read(entry, seq).get("agent") == body:
                return  # the same create again (a retry): stored once
            self._write(entry, {"op": "agent", "agent": body}, f"create_agent of agent {aid!r}")

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        entry = self._session(_check_id(session_id, "session"))
        aid = _check_id(agent_id, "agent")
        if entry is None:
            return None
        with entry.lock:
            seq = entry.fold.agents.get(aid)
            if seq is None:
                return None
            ev = self._read(entry, seq)
        return self._build(entry, seq, SessionAgent.from_dict, ev.get("agent"))

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        sid = _check_id(session_id, "session")
        aid = _check_id(session_agent.agent_id, "agent")
        entry = self._session(sid)
        if entry is None:
            raise NotFoundError(f"Agent {aid} in session {sid} does not exist")
        with entry.lock:
            previous = self.read_agent(sid, aid)
            if previous is None:
                raise NotFoundError(f"Agent {aid} in session {sid} does not exist")
            session_agent.created_at = previous.created_at  # the stored creation time stands
            self._write(entry, {"op": "agent", "agent": session_agent.to_dict()}, f"update_agent of agent {aid!r}")

    # -- messages ----------------------------------------------------------------------------

    def _agent_of(self, session_id: str, agent_id: str) -> _Open:
        entry = self._live(session_id)
        if agent_id not in entry.fold.agents:
            raise NotFoundError(f"Agent {agent_id} in session {session_id} does not exist; create it first")
        return entry

    def create_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = _check_id(session_id, "session")
        aid = _check_id(agent_id, "agent")
        mid = _check_message_id(session_message.message_id)
        entry = self._agent_of(sid, aid)
        body = session_message.to_dict()
        with entry.lock:
            seq = entry.fold.messages.get(aid, {}).get(mid)
            if seq is not None and self._read(entry, seq).get("message") == body:
                return  # the same message again under its id (a retry): stored once
            self._write(entry, {"op": "message", "agent_id": aid, "message": body},
                        f"create_message of message {mid} of agent {aid!r}")

    def read_message(self, session_id: str, agent_id: str, message_id: int, **kwargs: Any) -> SessionMessage | None:
        sid = _check_id(session_id, "session")
        aid = _check_id(agent_id, "agent")
        mid = _check_message_id(message_id)
        entry = self._session(sid)
        if entry is None:
            return None
        with entry.lock:
            seq = entry.fold.messages.get(aid, {}).get(mid)
            if seq is None:
                return None
            ev = self._read(entry, seq)
        return self._build(entry, seq, SessionMessage.from_dict, ev.get("message"))

    def update_message(self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any) -> None:
        sid = _check_id(session_id, "session")
        aid = _check_id(agent_id, "agent")
        mid = _check_message_id(session_message.message_id)
        entry = self._session(sid)
        if entry is None:
            raise NotFoundError(f"Message {mid} does not exist")
        with entry.lock:
            previous = self.read_message(sid, aid, mid)
            if previous is None:
                raise NotFoundError(f"Message {mid} does not exist")
            session_message.created_at = previous.created_at  # the stored creation time stands
            self._write(entry, {"op": "message", "agent_id": aid, "message": session_message.to_dict()},
                        f"update_message of message {mid} of agent {aid!r}")

    def list_messages(
        self, session_id: str, agent_id: str, limit: int | None = None, offset: int = 0, **kwargs: Any
    ) -> list[SessionMessage]:
        sid = _check_id(session_id, "session")
        aid = _check_id(agent_id, "agent")
        entry = self._session(sid)
        if entry is None or aid not in entry.fold.agents:
            raise NotFoundError(f"Messages of agent {aid} in session {sid} do not exist: the agent does not exist")
        with entry.lock:
            ids = entry.fold.order.get(aid, [])
            chosen = ids[offset : offset + limit] if limit is not None else ids[offset:]
            seqs = [entry.fold.messages[aid][mid] for mid in chosen]
            bodies = [(seq, self._read(entry, seq).get("message")) for seq in seqs]
        return [self._build(entry, seq, SessionMessage.from_dict, body) for seq, body in bodies]

    # -- multi-agent state -------------------------------------------------------------------

    def _write_multi(self, session_id: str, multi_agent: MultiAgentBase, *, update: bool) -> None:
        sid = _check_id(session_id, "session")
        mid = _check_id(multi_agent.id, "agent")
        state = multi_agent.serialize_state()
        entry = self._session(sid) if update else self._live(sid)
        if entry is None:
            raise NotFoundError(f"MultiAgent state {mid} in session {sid} does not exist")
        with entry.lock:
            seq = entry.fold.multi_agents.get(mid)
            if update and seq is None:
                raise NotFoundError(f"MultiAgent state {mid} in session {sid} does not exist")
            if seq is not None and self._read(entry, seq).get("state") == state:
                return  # the same state again: stored once
            self._write(entry, {"op": "multi_agent", "id": mid, "state": state},
                        f"{'update' if update else 'create'}_multi_agent of {mid!r}")

    def create_multi_agent(self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any) -> None:
        self._write_multi(session_id, multi_agent, update=False)

    def read_multi_agent(self, session_id: str, multi_agent_id: str, **kwargs: Any) -> dict[str, Any] | None:
        entry = self._session(_check_id(session_id, "session"))
        mid = _check_id(multi_agent_id, "agent")
        if entry is None:
            return None
        with entry.lock:
            seq = entry.fold.multi_agents.get(mid)
            if seq is None:
                return None
            state = self._read(entry, seq).get("state")
        if not isinstance(state, dict):
            raise SessionFormatError(entry.journal.path, seq, "a multi-agent state that is not an object")
        return state

    def update_multi_agent(self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any) -> None:
        self._write_multi(session_id, multi_agent, update=True)

    # -- life --------------------------------------------------------------------------------

    def close(self) -> None:
        """Let go of every session this repository used; the last user in the process closes a
        session's journal (writing what is queued). Idempotent."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> JournalSessionRepository:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"


class JournalSessionManager(RepositorySessionManager, JournalSessionRepository):
    """Strands' ``RepositorySessionManager`` on a ``JournalSessionRepository`` (the manager is the
    repository too, as ``FileSessionManager`` is): ``Agent(session_manager=JournalSessionManager(
    session_id, path))``. The session is created at once if it does not exist."""

    def __init__(
        self,
        session_id: str,
        path: str | os.PathLike[str],
        *,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
        **journal_options: Any,
    ) -> None:
        JournalSessionRepository.__init__(self, path, record_size_bytes_max=record_size_bytes_max,
                                          lock_timeout_s=lock_timeout_s, fs=fs, **journal_options)
        RepositorySessionManager.__init__(self, session_id=session_id, session_repository=self)


__all__ = [
    "JournalSessionManager",
    "JournalSessionRepository",
    "JournalSessionRepositoryError",
    "NotFoundError",
    "NotSerializableError",
    "OutcomeUnknownError",
    "ReadFailedError",
    "RepositoryClosedError",
    "SessionExistsError",
    "SessionFormatError",
    "WriteNotCommittedError",
    "WriteTooLargeError",
    "session_journal_name",
]
