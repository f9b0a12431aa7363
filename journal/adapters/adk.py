"""Google ADK's session service on journals: ``JournalSessionService(path)`` (docs/ADAPTERS.md).

    from journal.adapters.adk import JournalSessionService
    async with JournalSessionService("sessions/") as service:
        runner = Runner(agent=agent, app_name="my_app", session_service=service)

A ``google.adk.sessions.BaseSessionService``: ``create_session``, ``get_session`` (with
``GetSessionConfig``), ``list_sessions``, ``delete_session``, ``append_event``,
``get_user_state``. ``register()`` adds the ``journal://`` scheme to ADK's service registry, so
``adk web --session_service_uri journal:///abs/path`` (or ``journal://relative/path``, relative
to the working directory) uses it; ADK imports ``services.py`` from the agents directory, so a
``services.py`` holding ``from journal.adapters.adk import register; register()`` is all
``adk web`` and ``adk run`` need.

One journal per ADK app, at ``<path>/apps/<escaped app name>/``, never one per session: ADK's
``app:`` state is shared by every session of the app and its ``user:`` state by every session of
a user, and an event that changes them must change them atomically with its own storage. One
record of one journal is the only atomic unit the engine gives, so the event, its session's
state delta and the app and user deltas are one record, of the one journal that holds all three.
Each record is a JSON object, appended at "sync"; nothing is ever rewritten:

    {"op": "adk", "v": 1, "app_name": A}                   seq 1: whose journal this is, the format
    {"op": "create", "user_id", "session_id",
     "state": {"session", "app", "user"}, "time": T}        create_session: the initial state, split
    {"op": "event", "user_id", "session_id", "event": E,
     "delta": {"session", "app", "user"}, "time": T}        append_event: the event and what it changes
    {"op": "delete", "user_id", "session_id"}               delete_session: the session is gone

``E`` is ``event.model_dump(mode="json", exclude_none=True)`` with the ``temp:`` keys taken out
of its state delta (the form ADK's own DatabaseSessionService stores; ``Event.model_validate``
gives back an equal event), and ``delta`` is that same delta split by prefix, so replay never
parses an event. ``T`` is the session's new ``last_update_time`` (the create time, or the
event's timestamp).

The fold. The first use of an app opens its journal (recovery runs) and replays it once into
memory: the app state, each user's state, and per session its own state, the seqs and
timestamps of its events and its ``last_update_time``. ``get_session`` reads the events it
returns by seq (``AsyncJournal.get``) and never rescans; the same ``fold`` function that replays
a journal applies every live write once it is committed, in seq order, so what a running service
shows is what a reopen rebuilds.

ADK's rules, as its services apply them (InMemorySessionService is the reference the tests run
against): ``temp:`` keys go to the caller's session object and never to storage; a partial event
is returned untouched and not stored; ``append_event`` refuses an unknown session
(``SessionNotFoundError``) and a stale session object (``StaleSessionError``: the session was
changed in storage since the object was read; checked as DatabaseSessionService does, by the
storage revision marker on the objects this service returns, and else by ``last_update_time``
and the last event id); an equal re-delivery of a stored event is a no-op, as in
InMemorySessionService; a duplicate session id is ``AlreadyExistsError``; ids are stripped and
generated as InMemorySessionService does. State values are stored as JSON, so a value comes back
as its JSON form (a tuple as a list, a datetime as a string), as in DatabaseSessionService.

Concurrency and durability. Appends go through ``journal.aio``: appends of many coroutines to
one app share one write and one fdatasync (group commit), and the event loop never waits on a
file. Calls on one session are serialized (check, append, fold); calls on different sessions run
together. A call's write runs in a task of its own, so cancelling the caller never cuts it: the
caller keeps waiting until the outcome is known, then gets its ``CancelledError``. An outcome
other than Committed raises ``WriteNotCommittedError`` (nothing stored, nothing changed: retry)
or ``OutcomeUnknownError`` (AckLost: the app's journal is closed, and the next call on the app
reopens it and rebuilds the fold from what is on disk, which shows whether the write took).

It uses only ``journal``, ``journal.aio``, ``journal.api`` and ``journal.fs`` (for the type of
the ``fs`` option); the session layer is not used: ADK's ids and its event model are its own.
"""

from __future__ import annotations

import asyncio
import copy
import math
import os
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from hashlib import sha256
from types import TracebackType
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlparse

from journal.errors import MissingExtraError

try:  # the framework comes with the adk extra; without it, say so (not a bare ModuleNotFoundError)
    import pydantic
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.platform import time as platform_time
    from google.adk.platform import uuid as platform_uuid
    from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
    from pydantic_core import PydanticSerializationError, to_jsonable_python
    from typing_extensions import override
except ImportError as exc:
    raise MissingExtraError(__name__, "Google ADK 2.11 or later (google-adk)", "adk", exc) from exc

import journal.aio
from journal.aio import AsyncJournal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    JournalError,
    JournalFailStoppedError,
    NotCommitted,
    RecordTooLargeError,
    Store,
    invariant,
    present,
)
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
APPS_DIR: Final = "apps"
# The engine's default cap on one record (journal.open's record_size_bytes_max): one event,
# with its state deltas, is one record, so this bounds the bytes of one event as stored JSON.
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# An app name longer than this once escaped is stored under a digest (names stop at 255 bytes).
NAME_BYTES_MAX: Final = 160
_SAFE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_OPS: Final = frozenset({"create", "event", "delete"})
_SCOPES: Final = ("session", "app", "user")
# State nested deeper than this (lists and maps) is refused when written and when read: the
# service copies state (copy.deepcopy) on every read, as ADK's own services do, and that
# recursion stops near 300 levels (Python's recursion limit).
STATE_DEPTH_MAX: Final = 100
# DatabaseSessionService's words, so a caller sees the same message from either store.
_STALE_MESSAGE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)

_T = TypeVar("_T")
_Key = tuple[str, str]  # (user_id, session_id)


class JournalSessionServiceError(JournalError):
    """Base class of this adapter's errors."""


class ServiceClosedError(JournalSessionServiceError, RuntimeError):
    def __init__(self, path: str) -> None:
        super().__init__(f"JournalSessionService({path!r}) is closed; make a new one to go on")


class WriteTooLargeError(JournalSessionServiceError, ValueError):
    """One event (or one session's initial state) is one record, over the record size limit."""

    def __init__(self, what: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"{what} is {size_bytes} bytes as stored JSON, over the {limit_bytes}-byte limit of one record "
            "(one event and its state changes are one record, so that they are stored together or not at "
            "all); nothing was written. Keep large payloads in an artifact service and reference them, or "
            "make the service with a larger record_size_bytes_max"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class StateNotSerializableError(JournalSessionServiceError, TypeError):
    """A state value or an event field has no JSON form; nothing was written."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what} cannot be stored as JSON ({why}); nothing was written. Store JSON values only")


class WriteNotCommittedError(JournalSessionServiceError):
    """The journal answered NotCommitted: nothing of the write is stored, and never will be."""

    def __init__(self, what: str, reason: str, outcome: NotCommitted | None = None) -> None:
        super().__init__(
            f"{what} was not stored ({reason}); the service and the session are unchanged, and the call "
            "may be retried"
        )
        self.what = what
        self.outcome = outcome


class OutcomeUnknownError(JournalSessionServiceError):
    """The journal answered AckLost: the write may or may not be stored."""

    def __init__(self, what: str, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of {what} is unknown ({outcome.reason}); do not retry blindly: the app's journal "
            "was closed, and the next call on the app reopens it (recovery runs) and reads what is on disk, "
            "so get_session shows whether the write took; then retry it if it did not"
        )
        self.what = what
        self.outcome = outcome


class AppFormatError(JournalSessionServiceError, ForeignRecordError):
    """An app's journal holds a record this adapter did not write (another program's, a newer
    version's, or one crafted); nothing of it was used and nothing was changed."""

    def __init__(self, path: str, seq: int, why: str) -> None:
        JournalError.__init__(
            self,
            f"ADK app journal {path} at seq {seq}: {why}; the journal was left as it is. Open it with the "
            "program (or the version) that wrote it, or restore it from a backup you trust",
        )
        self.path = path
        self.seq = seq
        self.why = why


def app_dir_name(app_name: str) -> str:
    """The directory name of an app's journal: the name, escaped so that the mapping is 1:1.

    Every byte outside [A-Za-z0-9_-] becomes %XX (so '.' and '/' never reach the file system as
    themselves); an escaped name over NAME_BYTES_MAX becomes '%%' + sha256 of the name, which no
    escaped name can start with (the rule of journal.adapters.openai_agents.journal_dir_name).
    """
    escaped = "".join(ch if ch in _SAFE_CHARS else "".join(f"%{b:02X}" for b in ch.encode()) for ch in app_name)
    if not escaped:
        escaped = "%"  # the empty name: '%' alone is no escape of anything else
    if len(escaped) > NAME_BYTES_MAX:
        return "%%" + sha256(app_name.encode()).hexdigest()
    return escaped


def split_state(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A state dict split by scope, as ADK splits it: ``app:`` and ``user:`` keys without their
    prefix, ``temp:`` keys dropped, the rest the session's own."""
    parts: dict[str, dict[str, Any]] = {scope: {} for scope in _SCOPES}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            parts["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            parts["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            parts["session"][key] = value
    return parts


def _record_error(op: str, ev: dict[str, Any]) -> str | None:
    """What in record ``ev`` (of ``op``) is not of the shape this service writes, or None."""
    if not (isinstance(ev.get("user_id"), str) and isinstance(ev.get("session_id"), str)):
        return "its user_id or session_id is not a str"
    if op == "delete":
        return None
    parts = ev.get("state" if op == "create" else "delta")
    if not isinstance(parts, dict) or not all(isinstance(parts.get(scope), dict) for scope in _SCOPES):
        return "its state is not a map of the session, app and user maps"
    why = _state_error(parts)
    if why is not None:
        return why
    if not _is_time(ev.get("time")):
        return "its time is not a finite number"
    if op == "event":
        event = ev.get("event")
        if not (isinstance(event, dict) and _is_time(event.get("timestamp")) and isinstance(event.get("id", ""), str)):
            return "its event is not a map with a finite timestamp and a str id"
    return None


def _state_error(parts: dict[str, dict[str, Any]]) -> str | None:
    """Why state split by scope cannot be stored and read back (too deep), or None."""
    if any(_deeper_than(parts[scope], STATE_DEPTH_MAX) for scope in _SCOPES):
        return f"a state value is nested more than {STATE_DEPTH_MAX} levels deep"
    return None


def _short(exc: BaseException, chars_max: int = 300) -> str:
    """An error's words, cut to ``chars_max`` (a validation error lists every field)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


def _is_time(value: Any) -> bool:
    """Whether ``value`` is a number (not a bool) a float holds, and finite."""
    if type(value) is not int and type(value) is not float:
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int beyond any float
        return False


def _deeper_than(value: Any, depth_max: int) -> bool:
    """Whether JSON ``value`` nests lists and maps more than ``depth_max`` levels (``value``
    itself being the first); a loop, so a value of any depth is measured."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v
        if depth > depth_max:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


@dataclass
class _Session:
    state: dict[str, Any]  # the session's own state, JSON as stored
    events: list[tuple[int, float, str]]  # (seq, timestamp, event id) in seq order
    last_update_time: float
    revision: int  # the seq of the last record that changed the session: its storage marker


class _KeyLocks:
    """One asyncio.Lock per session key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[_Key, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: _Key) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


@dataclass
class _App:
    """One open app: its journal and the fold of its records."""

    name: str
    path: str
    journal: AsyncJournal
    app_state: dict[str, Any] = field(default_factory=dict)
    user_state: dict[str, dict[str, Any]] = field(default_factory=dict)
    sessions: dict[_Key, _Session] = field(default_factory=dict)
    folded_seq: int = 0
    # Committed records waiting for an earlier seq to be folded first (group commit wakes their
    # writers in any order), each with the future its writer waits on.
    ready: dict[int, tuple[dict[str, Any], asyncio.Future[None]]] = field(default_factory=dict)
    locks: _KeyLocks = field(default_factory=_KeyLocks)
    forgotten: bool = False

    def fold(self, seq: int, ev: Any) -> None:
        """Apply record ``seq``: the one function for replay and for live writes. A record not
        of the shape this service writes (``_record_error``) raises AppFormatError."""
        if not isinstance(ev, dict):
            raise AppFormatError(self.path, seq, "a record that is not a JSON object")
        op = ev.get("op")
        if not isinstance(op, str) or op not in _OPS:
            raise AppFormatError(self.path, seq, f"unknown op {op!r}")
        why = _record_error(op, ev)
        if why is not None:
            raise AppFormatError(self.path, seq, f"a malformed {op} record: {why}")
        key = (ev["user_id"], ev["session_id"])
        if op == "delete":
            self.sessions.pop(key, None)
            return
        parts = ev["state"] if op == "create" else ev["delta"]
        if op == "create" and key in self.sessions:
            raise AppFormatError(self.path, seq, f"a second create of session {key!r}")
        if op == "event" and key not in self.sessions:
            raise AppFormatError(self.path, seq, f"an event of session {key!r}, which does not exist")
        if parts["app"]:
            self.app_state.update(parts["app"])
        if parts["user"]:
            self.user_state.setdefault(key[0], {}).update(parts["user"])
        if op == "create":
            self.sessions[key] = _Session(dict(parts["session"]), [], float(ev["time"]), seq)
        else:
            s = self.sessions[key]
            s.state.update(parts["session"])
            s.events.append((seq, float(ev["event"]["timestamp"]), ev["event"].get("id", "")))
            s.last_update_time = float(ev["time"])
            s.revision = seq

    def deliver(self, seq: int, record: dict[str, Any], done: asyncio.Future[None]) -> None:
        """Fold a committed record once every earlier one is folded; wake its writer then."""
        invariant(seq > self.folded_seq and seq not in self.ready, f"seq {seq} committed twice to {self.path}")
        self.ready[seq] = (record, done)
        while self.folded_seq + 1 in self.ready:
            nxt = self.folded_seq + 1
            rec, fut = self.ready.pop(nxt)
            self.folded_seq = nxt
            try:
                self.fold(nxt, rec)
            except JournalError as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(None)

    def merged(self, user_id: str, s: _Session) -> dict[str, Any]:
        """The session's state with the app's and the user's merged in, prefixed, as ADK does."""
        state = copy.deepcopy(s.state)
        for key, value in self.app_state.items():
            state[State.APP_PREFIX + key] = copy.deepcopy(value)
        for key, value in self.user_state.get(user_id, {}).items():
            state[State.USER_PREFIX + key] = copy.deepcopy(value)
        return state


class JournalSessionService(BaseSessionService):
    """An ADK session service storing each app in a journal under ``path`` (see the module doc).

    ``path`` and an app's journal are made at the app's first write (a read of an app never
    written to makes nothing and answers as for an empty app). An app's journal is opened (and
    locked against other writers, in this process or another) at its first use and stays open
    until ``close()`` or the end of ``async with``: one service per directory at a time; a
    second one using an app the first holds gets ``journal.JournalLockedError``. Use the service
    from one event loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
    ) -> None:
        self.record_size_bytes_max = record_size_bytes_max
        self._options: dict[str, Any] = {
            "record_size_bytes_max": record_size_bytes_max,
            "lock_timeout_s": lock_timeout_s,
        }
        # One journal per app in a store: <path>/apps/ on files, or the store a server URL names.
        if isinstance(path, str) and "://" in path:
            if fs is not None:
                raise ValueError("fs= is for a directory of journals, not a server URL")
            self.path = path
            self._store: Store = journal.store(path)
        else:
            self.path = os.path.abspath(os.fspath(path))
            self._store = journal.store(os.path.join(self.path, APPS_DIR), **({"fs": fs} if fs is not None else {}))
        self._apps: dict[str, _App] = {}
        self._opening: asyncio.Lock | None = None  # made in the loop that first uses the service
        self._closed = False

    @property
    def store(self) -> Store:
        """The journal store its apps' journals live in (the tool guard's go beside them:
        journal.adapters.adk_guard.guard_for)."""
        return self._store

    # -- apps ------------------------------------------------------------------------------

    def app_path(self, app_name: str) -> str:
        """Where an app's journal is: its directory, or its name in the server's store."""
        if "://" in self.path:
            return f"{self.path}#{app_dir_name(app_name)}"
        return os.path.join(self.path, APPS_DIR, app_dir_name(app_name))

    async def _app(self, app_name: str) -> _App:
        """The open app, its journal made if it has none yet (for writes)."""
        return present(await self._app_if_any(app_name, create=True), "an app opened with create=True")

    async def _app_if_any(self, app_name: str, create: bool = False) -> _App | None:
        """The open app, or None if it has no journal and ``create`` is False: a read of an app
        never written to makes no directory and writes nothing."""
        self._check_open()
        if not isinstance(app_name, str):
            raise TypeError(f"app_name must be a str, not {type(app_name).__name__}")
        app = self._apps.get(app_name)
        if app is not None:
            return app
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            self._check_open()
            app = self._apps.get(app_name)
            if app is None:
                if not create and not await asyncio.to_thread(self._store.exists, app_dir_name(app_name)):
                    return None
                app = await self._open_app(app_name)
                self._apps[app_name] = app
        return app

    async def _open_app(self, app_name: str) -> _App:
        path = self.app_path(app_name)
        aj = await journal.aio.open_in(self._store, app_dir_name(app_name), create=True, **self._options)
        app = _App(app_name, path, aj)
        try:
            if aj.last_seq == 0:
                header = {"op": "adk", "v": FORMAT_VERSION, "app_name": app_name}
                out = await aj.append(header, DURABILITY)
                if not isinstance(out, Committed):
                    raise WriteNotCommittedError(f"creating the journal of app {app_name!r}", out.reason)
                app.folded_seq = out.seq
                return app
            async for rec in aj.read():
                if rec.seq == 1:
                    self._check_header(path, app_name, rec.event)
                else:
                    app.fold(rec.seq, rec.event)
                app.folded_seq = rec.seq
            return app
        except BaseException:
            await aj.close()
            raise

    @staticmethod
    def _check_header(path: str, app_name: str, ev: Any) -> None:
        if not isinstance(ev, dict) or ev.get("op") != "adk":
            raise AppFormatError(path, 1, "not an ADK app journal (no adk header)")
        if not isinstance(ev.get("v"), int) or ev["v"] > FORMAT_VERSION:
            raise AppFormatError(path, 1, f"format version {ev.get('v')!r} is newer than {FORMAT_VERSION}; "
                                          "upgrade journal to read it")
        if ev.get("app_name") != app_name:
            raise AppFormatError(path, 1, f"the journal is app {ev.get('app_name')!r}, not {app_name!r}")

    async def _forget(self, app: _App) -> None:
        """Close an app whose last write's outcome is unknown: the next use reads the disk again."""
        app.forgotten = True
        if self._apps.get(app.name) is app:
            del self._apps[app.name]
        try:
            await app.journal.close()
        except JournalError:
            pass  # the journal's failure is what the caller is being told about

    @asynccontextmanager
    async def _session_lock(self, app_name: str, key: _Key) -> AsyncIterator[_App]:
        """The app, with the session key's lock held; an app forgotten meanwhile is reopened."""
        while True:
            app = await self._app(app_name)
            async with app.locks.hold(key):
                if not app.forgotten:
                    yield app
                    return

    async def _write(self, app: _App, record: dict[str, Any], what: str) -> int:
        """Append ``record`` at "sync" and fold it; its seq. Raises this module's typed errors."""
        try:
            out = await app.journal.append(record, DURABILITY)
        except RecordTooLargeError as exc:
            raise WriteTooLargeError(what, exc.size_bytes, exc.limit_bytes) from exc
        except EventNotSerializableError as exc:
            raise StateNotSerializableError(what, str(exc)) from exc
        except JournalFailStoppedError as exc:
            await self._forget(app)
            raise WriteNotCommittedError(what, str(exc)) from exc
        if isinstance(out, Committed):
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            app.deliver(out.seq, record, done)
            await done
            return out.seq
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason, out)
        await self._forget(app)
        raise OutcomeUnknownError(what, out)

    # -- the BaseSessionService contract -----------------------------------------------------

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = session_id.strip() if session_id else None
        now = platform_time.get_time()
        if not sid:  # None, or blank once stripped: a generated id, as InMemorySessionService does
            sid = platform_uuid.new_uuid()
        if not isinstance(user_id, str):
            raise TypeError(f"user_id must be a str, not {type(user_id).__name__}")
        try:
            parts = split_state(to_jsonable_python(state or {}))
        except PydanticSerializationError as exc:
            raise StateNotSerializableError(f"the initial state of session {sid!r}", str(exc)) from exc
        why = _state_error(parts)  # what the fold refuses is refused before it is written
        if why is not None:
            raise StateNotSerializableError(f"the initial state of session {sid!r}", why)
        record = {"op": "create", "user_id": user_id, "session_id": sid, "state": parts, "time": now}
        return await _run_to_outcome(self._create(app_name, user_id, sid, record))

    async def _create(self, app_name: str, user_id: str, sid: str, record: dict[str, Any]) -> Session:
        key = (user_id, sid)
        async with self._session_lock(app_name, key) as app:
            if key in app.sessions:
                raise AlreadyExistsError(f"Session with id {sid} already exists.")
            seq = await self._write(app, record, f"create_session of session {sid!r}")
            s = app.sessions[key]
            session = Session(id=sid, app_name=app_name, user_id=user_id, state=app.merged(user_id, s),
                              last_update_time=s.last_update_time)
            session._storage_update_marker = str(seq)
            return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        sid = session_id.strip() if session_id else session_id
        app = await self._app_if_any(app_name)
        s = app.sessions.get((user_id, sid)) if app is not None else None
        if app is None or s is None:
            return None
        # Everything read from the fold before the first await: a concurrent write cannot tear it.
        events = _select(s.events, config)
        state = app.merged(user_id, s)
        last_update_time, revision = s.last_update_time, s.revision
        loaded = [await self._load_event(app, seq) for seq, _, _ in events]
        session = Session(id=sid, app_name=app_name, user_id=user_id, state=state, events=loaded,
                          last_update_time=last_update_time)
        session._storage_update_marker = str(revision)
        return session

    async def _load_event(self, app: _App, seq: int) -> Event:
        rec = await app.journal.get(seq)
        if rec is None:  # the fold names only records this handle committed or read
            raise AppFormatError(app.path, seq, "an event record the index names is missing")
        # ADK's own model, from JSON: pydantic builds its declared classes only, never one a
        # stored name chooses. What it refuses is a record this service did not write.
        try:
            return Event.model_validate(rec.event["event"])
        except (pydantic.ValidationError, KeyError, TypeError, RecursionError) as exc:
            raise AppFormatError(app.path, seq, f"an event ADK cannot read ({_short(exc)})") from None

    @override
    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        app = await self._app_if_any(app_name)
        if app is None:
            return ListSessionsResponse()
        sessions = []
        for (uid, sid), s in app.sessions.items():
            if user_id is not None and uid != user_id:
                continue
            session = Session(id=sid, app_name=app_name, user_id=uid, state=app.merged(uid, s),
                              last_update_time=s.last_update_time)
            session._storage_update_marker = str(s.revision)
            sessions.append(session)
        sessions.sort(key=lambda x: (x.last_update_time, x.user_id, x.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        sid = session_id.strip() if session_id else session_id
        if await self._app_if_any(app_name) is None:
            return  # an app never written to has no session to delete
        await _run_to_outcome(self._delete(app_name, user_id, sid))

    async def _delete(self, app_name: str, user_id: str, sid: str) -> None:
        key = (user_id, sid)
        async with self._session_lock(app_name, key) as app:
            if key not in app.sessions:
                return
            record = {"op": "delete", "user_id": user_id, "session_id": sid}
            await self._write(app, record, f"delete_session of session {sid!r}")

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        app = await self._app_if_any(app_name)
        return copy.deepcopy(app.user_state.get(user_id, {})) if app is not None else {}

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply it to ``session`` as ADK's base service does, once durable.

        A partial event is returned untouched. The caller's ``session`` and ``event`` are changed
        (temp state applied, temp keys trimmed, the event appended) only once the record is
        committed: after any error both are as they were.
        """
        if event.partial:
            return event
        if await self._app_if_any(session.app_name) is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        return await _run_to_outcome(self._append_event(session, event))

    async def _append_event(self, session: Session, event: Event) -> Event:
        key = (session.user_id, session.id)
        async with self._session_lock(session.app_name, key) as app:
            s = app.sessions.get(key)
            if s is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            # An equal re-delivery of a stored event is a no-op (InMemorySessionService's rule).
            for seq, _, event_id in s.events:
                if event_id == event.id and await self._load_event(app, seq) == event:
                    return event
            if self._is_stale(session, s):
                raise StaleSessionError(_STALE_MESSAGE)
            what = f"append_event of event {event.id!r} to session {session.id!r}"
            try:
                stored = event.model_dump(mode="json", exclude_none=True)
            except PydanticSerializationError as exc:
                raise StateNotSerializableError(what, str(exc)) from exc
            actions = stored.get("actions")
            delta: dict[str, Any] = {}
            if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
                delta = {k: v for k, v in actions["state_delta"].items() if not k.startswith(State.TEMP_PREFIX)}
                actions["state_delta"] = delta
            parts = split_state(delta)
            why = _state_error(parts)  # what the fold refuses is refused before it is written
            if why is not None:
                raise StateNotSerializableError(what, why)
            record = {
                "op": "event",
                "user_id": session.user_id,
                "session_id": session.id,
                "event": stored,
                "delta": parts,
                "time": event.timestamp,
            }
            seq = await self._write(app, record, what)
            # Durable: now the caller's objects change, in the order ADK's base service uses.
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            self._commit_event_to_session(session, event)
            session.last_update_time = event.timestamp
            session._storage_update_marker = str(seq)
            return event

    @staticmethod
    def _is_stale(session: Session, s: _Session) -> bool:
        """Whether ``session`` was read before the session's last stored change.

        DatabaseSessionService's test: the exact storage marker when the object carries one (every
        session this service returns does: the seq of the session's last record), else, for a
        session object made elsewhere, a newer stored ``last_update_time`` whose last event is not
        the object's last event."""
        marker = session._storage_update_marker
        if marker is not None:
            return marker != str(s.revision)
        if s.last_update_time > session.last_update_time:
            stored_last = s.events[-1][2] if s.events else None
            return stored_last != (session.events[-1].id if session.events else None)
        return False

    # -- beyond the contract -------------------------------------------------------------------

    def last_seq(self, app_name: str) -> int:
        """The seq of the last record of an open app's journal (0 if the app is not open)."""
        app = self._apps.get(app_name)
        return app.journal.last_seq if app is not None else 0

    async def close(self) -> None:
        """Write what is queued and close every app's journal. Idempotent."""
        self._closed = True
        while self._apps:
            _, app = self._apps.popitem()
            app.forgotten = True
            await app.journal.close()

    async def __aenter__(self) -> JournalSessionService:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"JournalSessionService({self.path!r}, apps open={sorted(self._apps)})"

    def _check_open(self) -> None:
        if self._closed:
            raise ServiceClosedError(self.path)


def _select(events: list[tuple[int, float, str]], config: GetSessionConfig | None) -> list[tuple[int, float, str]]:
    """The events get_session returns, chosen exactly as InMemorySessionService chooses them:
    the last ``num_recent_events`` (none for 0), then of those the ones after the last event
    older than ``after_timestamp`` (so an event at exactly after_timestamp is kept)."""
    if config is None:
        return list(events)
    chosen = events
    if config.num_recent_events is not None:
        chosen = [] if config.num_recent_events == 0 else chosen[-config.num_recent_events :]
    if config.after_timestamp is not None:
        i = len(chosen) - 1
        while i >= 0 and chosen[i][1] >= config.after_timestamp:
            i -= 1
        if i >= 0:
            chosen = chosen[i + 1 :]
    return list(chosen)


async def _run_to_outcome(work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work`` in a task of its own and wait for its outcome whatever happens to the caller.

    The task is shielded, so cancelling the caller never cuts a write between its append and its
    fold; the caller keeps waiting (through repeated cancellations) until the work is over, then
    raises its CancelledError, chained to the work's error if it failed."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if cancelled is None and not task.done():
                cancelled = exc
        except BaseException:
            pass  # the work's own error: raised below, from the task
    if cancelled is not None:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise cancelled from error
        raise cancelled
    return task.result()


def session_service_from_uri(uri: str, **kwargs: Any) -> JournalSessionService:
    """ADK's service factory for ``journal:///abs/path`` and ``journal://relative/path``.

    ``agents_dir`` (which ADK passes to every factory) is ignored; a relative path is relative to
    the working directory, as for ADK's ``sqlite://``. Other keyword arguments go to
    JournalSessionService."""
    parsed = urlparse(uri)
    path = unquote(parsed.netloc + parsed.path)
    if not path:
        raise ValueError(f"{uri!r} names no directory; use journal:///abs/path or journal://relative/path")
    kwargs.pop("agents_dir", None)
    return JournalSessionService(path, **kwargs)


def register(scheme: str = "journal") -> None:
    """Register ``scheme://`` with ADK's service registry (``--session_service_uri``).

    ``adk web`` and ``adk run`` import ``services.py`` from the agents directory before they make
    their services: put ``from journal.adapters.adk import register; register()`` there."""
    from google.adk.cli.service_registry import get_service_registry

    get_service_registry().register_session_service(scheme, session_service_from_uri)


__all__ = [
    "AppFormatError",
    "JournalSessionService",
    "JournalSessionServiceError",
    "OutcomeUnknownError",
    "ServiceClosedError",
    "StateNotSerializableError",
    "WriteNotCommittedError",
    "WriteTooLargeError",
    "app_dir_name",
    "register",
    "session_service_from_uri",
    "split_state",
]
