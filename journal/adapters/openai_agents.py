"""The OpenAI Agents SDK's ``Session`` on journals: ``JournalSession(session_id, path)``.

    from journal.adapters.openai_agents import JournalSession
    async with JournalSession("user-42", "sessions/") as session:
        result = await Runner.run(agent, "hi", session=session)

One journal per session, at ``<path>/<encoded session id>/``. The journal is the only truth;
the session's items are a fold of its records, all JSON objects:

    {"op": "session", "v": 1, "session_id": ID}   seq 1: whose journal this is, and the format
    {"op": "add", "items": [...]}                  one add_items call, all its items
    {"op": "pop", "seq": N, "index": I}            pop_item: item I of the add at seq N is gone
    {"op": "clear"}                                clear_session
    {"op": "replace", "items": [...]}              a clear and an add as one record (compaction)

Why each rule (docs/ADAPTERS.md):

- One record per ``add_items`` call, appended at "sync": a record is written whole or not at
  all (the engine's checksums and recovery), so the call's items are all there or none are.
- Order is seq order, the only order the journal has; no timestamp is stored or read.
- Nothing is ever deleted: a pop, a clear and a compaction are records appended after the
  history they hide, so a failure halfway leaves the history as it was (no clear-then-re-add).
  A pop names the item it removes, so replaying it cannot remove another one.
- Writes run in a worker thread, one at a time per session, and a caller cancelled while its
  write is running waits for the write's outcome before ``CancelledError`` is raised to it: when
  it sees the cancellation, the write has finished and ``get_items()`` shows whether it took.
  A write that failed meanwhile is chained as the ``CancelledError``'s ``__cause__``.
- The fold is kept in memory per open session (the items as compact JSON text), rebuilt by
  reading the journal once on open, so ``get_items`` reads no file. Opening a long session
  costs one read of its history; a snapshot of the fold is a later step.

It uses only ``journal`` (for ``journal.open``) and ``journal.api``; the session store of
``journal.session`` is not used because its ids are its own (time-sortable) while the SDK's are
any string, and its envelope is the agent vocabulary, not the SDK's items.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

from journal.errors import MissingExtraError

try:  # the framework comes with the openai-agents extra; without it, say so (not a bare ModuleNotFoundError)
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:
    raise MissingExtraError(__name__, "the Agents SDK 0.24 or later (openai-agents)", "openai-agents", exc) from exc

import journal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    JournalError,
    NotCommitted,
    Outcome,
    RecordTooLargeError,
)
from journal.api import Journal as JournalHandle
from journal.errors import ForeignRecordError

if TYPE_CHECKING:
    from agents.memory.session import Session

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
# The engine's default cap on one record. One add_items call is one record, so this also bounds
# one call's items (as encoded JSON, before compression).
ADD_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# A session id longer than this is stored under a digest of it (file names stop at 255 bytes).
NAME_BYTES_MAX: Final = 160
_SAFE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_OPS: Final = frozenset({"add", "pop", "clear", "replace"})

_T = TypeVar("_T")


class JournalSessionError(JournalError):
    """Base class of this adapter's errors."""


class SessionClosedError(JournalSessionError, RuntimeError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"JournalSession {session_id!r} is closed; open it again with JournalSession(session_id, path)"
        )


class ItemsNotSerializableError(JournalSessionError, TypeError):
    """An item is not JSON the journal can store as it is; nothing was written."""

    def __init__(self, why: str) -> None:
        super().__init__(f"items cannot be stored: {why}; nothing was written (items are JSON objects)")


class ItemsTooLargeError(JournalSessionError, ValueError):
    """One add_items call is one record; this one is over the record size limit."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"these items are {size_bytes} bytes as JSON, over the {limit_bytes}-byte limit of one "
            "add_items call (it is one record, so that its items are all stored or none); nothing was "
            "written. Store large payloads elsewhere and reference them, split the items into "
            "several calls (each atomic on its own), or open the session with a larger add_bytes_max"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class WriteNotCommittedError(JournalSessionError):
    """The journal answered NotCommitted: nothing of the write is stored, and never will be."""

    def __init__(self, op: str, outcome: NotCommitted) -> None:
        super().__init__(
            f"{op} was not stored ({outcome.reason}); the session is unchanged and the call may be retried"
        )
        self.op = op
        self.outcome = outcome


class OutcomeUnknownError(JournalSessionError):
    """The journal answered AckLost: the write may or may not be stored."""

    def __init__(self, op: str, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of {op} is unknown ({outcome.reason}); do not retry yet: close the session, "
            "open it again (recovery runs) and call `await session.resolve(err.outcome)`, which answers "
            "Committed (it is stored; get_items shows it) or NotCommitted (it is not; retry if wanted)"
        )
        self.op = op
        self.outcome = outcome


class SessionFormatError(JournalSessionError, ForeignRecordError):
    """The journal holds a record this adapter did not write (another program's, a newer
    version's, or one crafted); nothing of it was used and nothing was changed."""

    def __init__(self, path: str, seq: int, why: str) -> None:
        JournalError.__init__(
            self,
            f"session journal {path} at seq {seq}: {why}; the journal was left as it is. Open it with the "
            "program (or the version) that wrote it, or restore it from a backup you trust",
        )
        self.path = path
        self.seq = seq
        self.why = why


def journal_dir_name(session_id: str) -> str:
    """The directory name of a session's journal: the id, escaped so that the mapping is 1:1.

    Every byte outside [A-Za-z0-9_-] becomes %XX (so '.' and '/' never reach the file system
    as themselves); an escaped name over NAME_BYTES_MAX becomes '%%' + sha256 of the id, which
    no escaped name can start with.
    """
    escaped = "".join(ch if ch in _SAFE_CHARS else "".join(f"%{b:02X}" for b in ch.encode()) for ch in session_id)
    if not escaped:
        escaped = "%"  # the empty id: '%' alone is no escape of anything else
    if len(escaped) > NAME_BYTES_MAX:
        return "%%" + sha256(session_id.encode()).hexdigest()
    return escaped


class JournalSession:
    """A ``Session`` of the OpenAI Agents SDK whose items are records of a journal.

    ``path`` is a directory holding one journal per session (made if missing). Opening replays
    the journal into memory (recovery runs first); the journal stays open, and locked against
    other writers, until ``close()`` or the end of ``async with``. Two open JournalSessions of
    one session id, in one process or two, are refused with ``journal.JournalLockedError``.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        path: str | os.PathLike[str],
        session_settings: SessionSettings | dict[str, Any] | None = None,
        *,
        add_bytes_max: int = ADD_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if not 1 <= add_bytes_max <= ADD_BYTES_MAX_DEFAULT:
            raise ValueError(f"add_bytes_max must be between 1 and {ADD_BYTES_MAX_DEFAULT}")
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.add_bytes_max = add_bytes_max
        name = journal_dir_name(session_id)
        remote = isinstance(path, str) and "://" in path
        self.path = f"{path}#{name}" if remote else os.fspath(Path(path) / name)
        # Writes are serialized per session (append, then fold) so the fold's order is seq order;
        # the fold has its own short lock so that get_items never waits for an fdatasync.
        self._write_lock = threading.Lock()
        self._fold_lock = threading.Lock()
        self._items: list[tuple[int, int, str]] = []  # (seq of the add, index in it, item as JSON)
        self._closed = False
        # One journal per session in the store at ``path`` (a directory, or a server URL: the
        # store makes a new journal whole before it has the session's name). The engine's
        # record cap leaves room for the envelope around the items.
        self._journal: JournalHandle = journal.store(path).open(
            name, create=True, lock_timeout_s=lock_timeout_s, record_size_bytes_max=ADD_BYTES_MAX_DEFAULT + 4096
        )
        try:
            self._load()
        except BaseException:
            self._journal.close()
            raise

    @classmethod
    async def open(
        cls,
        session_id: str,
        path: str | os.PathLike[str],
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> JournalSession:
        """The constructor, run in a worker thread: opening reads the session's whole journal."""
        return await asyncio.to_thread(cls, session_id, path, session_settings, **kwargs)

    # -- opening ---------------------------------------------------------------------------

    def _load(self) -> None:
        j = self._journal
        if j.last_seq == 0:
            self._check(j.append({"op": "session", "v": FORMAT_VERSION, "session_id": self.session_id}, DURABILITY),
                        "creating the session")
            return
        items: list[tuple[int, int, str]] = []
        for rec in j.read(0):
            ev = rec.event
            if not isinstance(ev, dict):
                raise SessionFormatError(self.path, rec.seq, "a record that is not a JSON object")
            if rec.seq == 1:
                self._check_header(ev)
                continue
            op = ev.get("op")
            if not isinstance(op, str) or op not in _OPS:
                raise SessionFormatError(self.path, rec.seq, f"unknown op {op!r}")
            if op == "add":
                items.extend(self._stored_items(rec.seq, ev))
            elif op == "pop":
                seq, index = ev.get("seq"), ev.get("index")
                if not items or items[-1][:2] != (seq, index):
                    raise SessionFormatError(self.path, rec.seq, f"a pop of item {index!r} of seq {seq!r}, "
                                                                 "which is not the newest item")
                items.pop()
            elif op == "clear":
                items = []
            else:  # replace
                items = self._stored_items(rec.seq, ev)
        self._items = items

    def _stored_items(self, seq: int, ev: dict[str, Any]) -> list[tuple[int, int, str]]:
        """The items of an add or a replace record, as the fold keeps them; checked to be what
        add_items stores (a list of JSON objects), else SessionFormatError."""
        items = ev.get("items")
        if not isinstance(items, list):
            raise SessionFormatError(self.path, seq, f"an {ev['op']} whose items are not a list")
        try:
            return [(seq, i, _encode(item)) for i, item in enumerate(items)]
        except ItemsNotSerializableError as exc:
            raise SessionFormatError(self.path, seq, f"an {ev['op']} of items add_items would not store "
                                                     f"({exc})") from None

    def _check_header(self, ev: dict[str, Any]) -> None:
        if ev.get("op") != "session":
            raise SessionFormatError(self.path, 1, "not an Agents SDK session journal (no session header)")
        if not isinstance(ev.get("v"), int) or ev["v"] > FORMAT_VERSION:
            raise SessionFormatError(self.path, 1, f"format version {ev.get('v')!r} is newer than {FORMAT_VERSION}; "
                                                   "upgrade journal to read it")
        if ev.get("session_id") != self.session_id:
            raise SessionFormatError(self.path, 1, f"the journal is session {ev.get('session_id')!r}, "
                                                   f"not {self.session_id!r}")

    # -- the Session protocol --------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (``session_settings.limit`` if None; all if both are None), oldest first."""
        self._check_open()
        n = resolve_session_limit(limit, self.session_settings)
        with self._fold_lock:
            if n is None:
                chosen = [text for _, _, text in self._items]
            elif n > 0:
                chosen = [text for _, _, text in self._items[-n:]]
            else:
                chosen = []
        decoded: list[TResponseInputItem] = [json.loads(text) for text in chosen]
        return decoded

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store ``items`` as one record at "sync": all of them or none.

        Returns once they are durable. Raises ItemsNotSerializableError or ItemsTooLargeError
        before anything is written, WriteNotCommittedError (nothing stored; retry) or
        OutcomeUnknownError (reopen and resolve). See the module doc for cancellation.
        """
        self._check_open()
        if not items:
            return
        texts = [_encode(item) for item in items]
        size_bytes = sum(len(t.encode()) for t in texts) + len(texts)
        if size_bytes > self.add_bytes_max:
            raise ItemsTooLargeError(size_bytes, self.add_bytes_max)
        record = {"op": "add", "items": list(items)}

        def write() -> None:
            with self._write_lock:
                self._check_open()
                seq = self._append(record, "add_items")
                with self._fold_lock:
                    self._items.extend((seq, i, text) for i, text in enumerate(texts))

        await _run_to_outcome(write)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (None if there is none), once the removal is durable."""
        self._check_open()

        def write() -> str | None:
            with self._write_lock:
                self._check_open()
                with self._fold_lock:
                    if not self._items:
                        return None
                    seq, index, text = self._items[-1]
                self._append({"op": "pop", "seq": seq, "index": index}, "pop_item")
                with self._fold_lock:
                    self._items.pop()
                return text

        text = await _run_to_outcome(write)
        if text is None:
            return None
        item: TResponseInputItem = json.loads(text)
        return item

    async def clear_session(self) -> None:
        """Hide every item with one appended record; the history stays in the journal."""
        self._check_open()

        def write() -> None:
            with self._write_lock:
                self._check_open()
                self._append({"op": "clear"}, "clear_session")
                with self._fold_lock:
                    self._items = []

        await _run_to_outcome(write)

    # -- beyond the protocol -----------------------------------------------------------------

    async def replace_items(self, items: list[TResponseInputItem]) -> None:
        """Replace the whole history with ``items`` in one record: a clear and an add that cannot part."""
        self._check_open()
        texts = [_encode(item) for item in items]
        size_bytes = sum(len(t.encode()) for t in texts) + len(texts)
        if size_bytes > self.add_bytes_max:
            raise ItemsTooLargeError(size_bytes, self.add_bytes_max)
        record = {"op": "replace", "items": list(items)}

        def write() -> None:
            with self._write_lock:
                self._check_open()
                seq = self._append(record, "replace_items")
                with self._fold_lock:
                    self._items = [(seq, i, text) for i, text in enumerate(texts)]

        await _run_to_outcome(write)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        # The hook OpenAIResponsesCompactionSession looks for on its underlying session's type:
        # with it, compaction replaces the history in one record instead of clear, then add.
        await self.replace_items(items)
        return True

    async def resolve(self, outcome: Outcome) -> Outcome:
        """Answer an OutcomeUnknownError's ``outcome`` on a session opened after it."""
        self._check_open()
        return await asyncio.to_thread(self._journal.resolve, outcome)

    @property
    def last_seq(self) -> int:
        """The seq of the journal's last record (the session header is seq 1)."""
        return self._journal.last_seq

    def close(self) -> None:
        """Close the journal (waiting for a write in flight). Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            self._journal.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> JournalSession:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __enter__(self) -> JournalSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JournalSession({self.session_id!r}, path={self.path!r}, items={len(self._items)})"

    # -- helpers ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(self.session_id)

    def _append(self, record: dict[str, Any], op: str) -> int:
        try:
            out = self._journal.append(record, DURABILITY)
        except EventNotSerializableError as exc:
            raise ItemsNotSerializableError(str(exc)) from exc
        except RecordTooLargeError as exc:
            raise ItemsTooLargeError(exc.size_bytes, exc.limit_bytes) from exc
        return self._check(out, op)

    def _check(self, out: Outcome, op: str) -> int:
        if isinstance(out, Committed):
            return out.seq
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(op, out)
        raise OutcomeUnknownError(op, out)


def _encode(item: Any) -> str:
    if not isinstance(item, dict):
        raise ItemsNotSerializableError(f"an item is a {type(item).__name__}, not a JSON object")
    try:
        return json.dumps(item, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ItemsNotSerializableError(str(exc)) from exc


async def _run_to_outcome(write: Callable[[], _T]) -> _T:
    """Run ``write`` in a worker thread and wait for its outcome whatever happens to the caller.

    The worker's future is shielded, so cancelling the caller never cancels the write; the
    caller keeps waiting (through repeated cancellations) until the write has finished, then
    raises its CancelledError, chained to the write's error if the write failed. A caller that
    sees CancelledError therefore knows the write is over: get_items() shows whether it took.
    """
    future = asyncio.get_running_loop().run_in_executor(None, write)
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
        except BaseException:
            pass  # the write's own error: raised below, from the future
    if cancelled is not None:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise cancelled from error
        raise cancelled
    return future.result()


if TYPE_CHECKING:  # mypy holds JournalSession to the SDK's Session protocol

    def _conforms(s: JournalSession) -> Session:
        return s


__all__ = [
    "ItemsNotSerializableError",
    "ItemsTooLargeError",
    "JournalSession",
    "JournalSessionError",
    "OutcomeUnknownError",
    "SessionClosedError",
    "SessionFormatError",
    "WriteNotCommittedError",
    "journal_dir_name",
]
