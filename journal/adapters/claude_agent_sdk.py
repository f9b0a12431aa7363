"""The Claude Agent SDK's ``SessionStore`` on journals: ``JournalSessionStore(path_or_url)``.

    from claude_agent_sdk import ClaudeAgentOptions, query
    from journal.adapters.claude_agent_sdk import JournalSessionStore
    async with JournalSessionStore("transcripts/") as store:   # or "postgresql://...", "nats://..."
        async for message in query(prompt="hi", options=ClaudeAgentOptions(session_store=store)): ...

All six methods of ``claude_agent_sdk.types.SessionStore``: ``append``, ``load``,
``list_sessions``, ``list_session_summaries``, ``delete``, ``list_subkeys``. The journals live in
a ``journal.api.Store`` (``journal.store``): a directory, a PostgreSQL schema or a JetStream
stream, the same code on each. Two kinds of journal, named by escaping (``journal_name``):

    ct.<project>.<session>[.<subpath>]   one per SessionKey: the transcript, one record per append
    ci.<project>                         one per project: the index that listing reads

Each part is escaped byte by byte (every byte outside ``[A-Za-z0-9_-]`` becomes ``%XX``), so the
``.`` between parts is never part of one and the mapping is 1:1; a name over the store's 200
bytes becomes ``ct.%%<sha256>`` (the key is in the journal's first record, and in the index).

A transcript's records are the session vocabulary of ``journal.session`` (an imported Claude Code
transcript's layout), so ``journal export`` writes a transcript back as the JSONL file Claude Code
writes, and a transcript made by ``journal import claude`` is read by ``load``:

    {"type": "session.started", "data": {"importedFrom": {"format": "claude", ...},
        "import": {"line": 1, "batch": [entries]}, "claudeAgentSdk": {"v", "key", "mtime", "summary"}}}
    {"type": "import.record", "ignorable": true, "data": {"import": {"line": N, "batch": [...]},
        "claudeAgentSdk": {"v", "mtime", "summary"}}}                  every later append call

Why each rule (docs/ADAPTERS.md):

- One record per ``append`` call, at "sync": a record is written whole or not at all (checksums,
  recovery), one server transaction or message, so a call's entries are all stored or none are,
  whatever cuts the process. Order is seq order. ``journal export`` writes a batch's entries as
  the lines they are (compact JSON, one per line, as Claude Code writes them).
- Idempotent by ``uuid``: an entry whose ``uuid`` the transcript holds is not stored again (a batch
  re-sent after a lost acknowledgement stores only what did not land); entries without one are
  always appended, as the Protocol asks. The set of stored uuids is read from the journal when
  the transcript is first used, and again after any write whose outcome is unknown.
- The summary is the SDK's ``fold_session_summary`` of the stored entries, kept verbatim and
  stamped with the write's time (epoch ms, strictly increasing per store): it rides in the
  transcript's record (so it is exactly as new as the entries) and in the index.
- The index is a cache of the transcripts: its record of an append is written after the batch
  is synced and before the call returns, at "flush" (a process kill keeps it; a power loss may
  leave the index behind the transcripts, never ahead). An index entry newer than its
  transcript therefore means acknowledged data was lost: ``TranscriptDamagedError``.
- Listing reads the project's index journal (folded in memory once, then kept up to date), and
  the store's list of names to find journals the index lacks (a crash between a transcript's
  write and its index record) or that are gone (a crash inside ``delete``); it never reads a
  transcript, but a stray one the index lacks, once, to enter it. The index is snapshotted and its
  older records dropped (``journal.api.Retention``) once it holds INDEX_LOG_SHARE times as many
  records as entries, so a listing reads the entries, not the project's history of appends.
- A journal whose records are not of this layout raises ``TranscriptFormatError`` (a
  ``ForeignRecordError``), corruption of committed data the engine's ``CorruptionError``: nothing
  damaged is served. A torn tail (a write cut by a crash, never acknowledged) is cut by recovery
  when the journal opens, and kept in ``recovery_reports``.
- Every journal call runs on one worker thread of the store, in call order (the SDK's batches of
  one process must keep it), so the event loop never waits on I/O. A caller cancelled while its
  call runs (the SDK's send timeout) waits for the call's end, then gets its ``CancelledError``.
  Anything but Committed raises ``WriteNotCommittedError`` (nothing stored: retry) or
  ``OutcomeUnknownError`` (the journal is closed; the next call reads the disk, and a retry of
  the same entries stores only what is missing, by uuid).

It uses ``journal``, ``journal.api`` and ``journal.fs`` (the ``fs`` option's type); of the
session layer's importer it shares the layout's names, not its code.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from hashlib import sha256
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from journal.errors import MissingExtraError

try:  # the framework comes with the claude-agent-sdk extra; without it, say so
    from claude_agent_sdk import fold_session_summary
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStore,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )
except ImportError as exc:
    raise MissingExtraError(__name__, "the Claude Agent SDK 0.1.66 or later (claude-agent-sdk)", "claude-agent-sdk",
                            exc) from exc

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
    RecoveryReport,
    Retention,
    Store,
)
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
# The index is a cache of the transcripts (which are synced first): its records survive a process
# kill ("flush"), and a power loss can leave it behind the transcripts, never ahead of them; a
# listing then enters the transcripts it lacks and the next append of a key (or rebuild_index)
# brings a lagging entry up to date. One fdatasync per append instead of two.
INDEX_DURABILITY: Final = "flush"
# The names of the importer's layout (journal/session/importers/base.py; tests hold them equal):
# its format name for Claude Code transcripts, its kept-line and end-of-import event types.
SOURCE_FORMAT: Final = "claude"
RECORD_TYPE: Final = "import.record"
FINISHED_TYPE: Final = "import.finished"
BLOCK: Final = "claudeAgentSdk"  # this adapter's own fields in a record's data
TRANSCRIPT_PREFIX: Final = "ct."
INDEX_PREFIX: Final = "ci."
# journal.api.Store's limit on a name; a longer escaped key is stored under a digest.
NAME_BYTES_MAX: Final = 200
# The engine's default cap on one record (stored JSON): one append call is one record.
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# Transcripts kept open between calls (each holds a writer lock and, on a server, a claim);
# the least recently used one past this is closed and reopened (its history read) when used.
OPEN_TRANSCRIPTS_MAX: Final = 64
_SAFE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_INDEX_OPS: Final = frozenset({"put", "del", "snap"})
# The index holds a record per append; once it holds more than INDEX_LOG_SHARE times as many
# records since its last snapshot as it has entries (and at least INDEX_COMPACT_RECORDS_MIN), a
# snapshot of every entry is appended and the records before it dropped (journal.api.Retention),
# so reading an index costs its entries, not the project's history of appends.
INDEX_COMPACT_RECORDS_MIN: Final = 256
INDEX_LOG_SHARE: Final = 4

_T = TypeVar("_T")
_Key = tuple[str, str, str | None]  # (project_key, session_id, subpath)


class JournalSessionStoreError(JournalError):
    """Base class of this adapter's errors."""


class StoreClosedError(JournalSessionStoreError, RuntimeError):
    def __init__(self, where: str) -> None:
        super().__init__(f"JournalSessionStore({where!r}) is closed; make a new one to go on")


class InvalidSessionKeyError(JournalSessionStoreError, ValueError):
    def __init__(self, why: str) -> None:
        super().__init__(f"not a SessionKey: {why}; pass {{'project_key': str, 'session_id': str}} and, for a "
                         "subagent transcript, a non-empty 'subpath'")


class EntriesNotStorableError(JournalSessionStoreError, ValueError):
    """The batch cannot be one record: not JSON objects, or over the record size limit."""

    def __init__(self, key: _Key, why: str) -> None:
        super().__init__(f"the batch for {_show(key)} was not stored: {why}. Nothing was written")
        self.key = key


class WriteNotCommittedError(JournalSessionStoreError):
    """The journal answered NotCommitted: nothing of the write is stored, and never will be."""

    def __init__(self, what: str, reason: str, outcome: NotCommitted | None = None) -> None:
        super().__init__(f"{what} was not stored ({reason}); the call may be retried (entries it stored already, "
                         "by uuid, are not stored again)")
        self.outcome = outcome


class OutcomeUnknownError(JournalSessionStoreError):
    """The journal answered AckLost: the write may or may not be stored."""

    def __init__(self, what: str, outcome: AckLost | None, reason: str = "") -> None:
        super().__init__(
            f"the outcome of {what} is unknown ({outcome.reason if outcome is not None else reason}); the journal "
            "was closed, and the next call reopens it (recovery runs) and reads what is on disk: load() shows "
            "whether the batch took, and sending the same entries again stores only those whose uuid is missing"
        )
        self.outcome = outcome


class TranscriptDamagedError(JournalSessionStoreError):
    """A transcript ends before a batch this store acknowledged (its index says so): recovery
    found damage where that batch was and cut it (the bytes are kept in the journal's
    quarantine). Never served short: every call on the key raises this until it is dealt with."""

    def __init__(self, path: str, have_mtime: int, acked_mtime: int, recovery: RecoveryReport | None) -> None:
        kept = f"; the bytes cut are in {', '.join(recovery.quarantined)}" if recovery and recovery.quarantined else ""
        super().__init__(
            f"transcript {path} ends at the batch written at {have_mtime} ms, but the store acknowledged a batch "
            f"written at {acked_mtime} ms: committed data was damaged and cut when the journal opened{kept}. "
            "Restore the transcript from a backup, or accept the loss with rebuild_index(project_key)"
        )
        self.path = path
        self.recovery = recovery


class TranscriptFormatError(JournalSessionStoreError, ForeignRecordError):
    """A journal under one of this adapter's names holds a record of another layout (another
    program's, a newer version's, or one crafted); nothing of it was used or changed."""

    def __init__(self, path: str, seq: int | None, why: str) -> None:
        ForeignRecordError.__init__(self, path, seq, why)


# --- names ----------------------------------------------------------------------------------


def _escape(part: str) -> str:
    """``part`` with every byte outside [A-Za-z0-9_-] as %XX ('%' alone for the empty string)."""
    out = "".join(ch if ch in _SAFE_CHARS else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
                  for ch in part)
    return out or "%"


def _unescape(part: str) -> str:
    if part == "%":
        return ""
    raw = bytearray()
    i = 0
    while i < len(part):
        if part[i] == "%":
            raw += bytes.fromhex(part[i + 1 : i + 3])
            i += 3
        else:
            raw += part[i].encode()
            i += 1
    return raw.decode("utf-8", "surrogatepass")


def journal_name(key: SessionKey) -> str:
    """The name of a SessionKey's transcript journal in the store (``journal import claude`` a
    transcript to ``<dir>/<this name>`` to make it loadable by a store on ``<dir>``)."""
    return _transcript_name(_key_of(key))


def _transcript_name(key: _Key) -> str:
    project, session, sub = key
    name = TRANSCRIPT_PREFIX + ".".join(_escape(p) for p in (project, session, *(() if sub is None else (sub,))))
    if len(name) > NAME_BYTES_MAX:
        # the digest of the escaped name, which is 1:1: parts joined by a byte they may hold were not
        return TRANSCRIPT_PREFIX + "%%" + sha256(name.encode("ascii")).hexdigest()
    return name


def _index_name(project: str) -> str:
    name = INDEX_PREFIX + _escape(project)
    if len(name) > NAME_BYTES_MAX:
        return INDEX_PREFIX + "%%" + sha256(project.encode("utf-8", "surrogatepass")).hexdigest()
    return name


def _key_from_name(name: str) -> _Key | None:
    """The key an escaped (not digest) transcript name stands for, or None."""
    if not name.startswith(TRANSCRIPT_PREFIX) or name.startswith(TRANSCRIPT_PREFIX + "%%"):
        return None
    parts = name[len(TRANSCRIPT_PREFIX) :].split(".")
    if len(parts) not in (2, 3):
        return None
    try:
        values = [_unescape(p) for p in parts]
    except (ValueError, UnicodeDecodeError):
        return None
    key: _Key = (values[0], values[1], values[2] if len(values) == 3 else None)
    return key if _transcript_name(key) == name else None


def _key_of(key: Any) -> _Key:
    if not isinstance(key, dict):
        raise InvalidSessionKeyError(f"a {type(key).__name__}, not a dict")
    project, session, sub = key.get("project_key"), key.get("session_id"), key.get("subpath")
    if not isinstance(project, str) or not isinstance(session, str):
        raise InvalidSessionKeyError("project_key and session_id must be str")
    if sub is not None and (not isinstance(sub, str) or not sub):
        raise InvalidSessionKeyError("subpath, when given, must be a non-empty str")
    return (project, session, sub)


def _show(key: _Key) -> str:
    return "/".join(p for p in key if p is not None)


def _now_iso(mtime_ms: int) -> str:
    return datetime.fromtimestamp(mtime_ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


# --- the transcript's records ---------------------------------------------------------------


@dataclass
class _Transcript:
    """An open transcript and what its records say."""

    key: _Key
    name: str
    journal: Journal
    uuids: set[str] = field(default_factory=set)
    lines: int = 0  # entries stored: the next batch's first line is lines + 1
    mtime: int = 0  # the write time of the last batch (0 for one never written by this adapter)
    summary: dict[str, Any] | None = None  # the SDK's fold of the stored entries (main keys only)
    records: int = 0  # records read or written: 0 means the journal is empty (the first append makes the header)
    own: int = 0  # records of this adapter (with its block): the ones whose mtime the index can vouch for


def _record(t: _Transcript, entries: list[dict[str, Any]], mtime: int,
            summary: dict[str, Any] | None) -> dict[str, Any]:
    project, session, sub = t.key
    own: dict[str, Any] = {"v": FORMAT_VERSION, "mtime": mtime, "summary": summary}
    data: dict[str, Any] = {"import": {"line": t.lines + 1, "batch": entries}, BLOCK: own}
    ev: dict[str, Any] = {"schemaVersion": 1, "sessionId": session if 0 < len(session.encode("utf-8", "surrogatepass"))
                          <= 180 else "claude-agent-sdk", "time": _now_iso(mtime)}
    if t.records == 0:  # the header: what the importer writes first, with this batch in it
        own["key"] = {"project_key": project, "session_id": session, "subpath": sub}
        base = (sub.rsplit("/", 1)[-1] if sub is not None else session) + ".jsonl"
        data = {"workspace": {}, "lineage": {"depth": 0}, "importedFrom": {"format": SOURCE_FORMAT, "file": base},
                **data}
        return {**ev, "type": "session.started", "data": data}
    return {**ev, "type": RECORD_TYPE, "ignorable": True, "data": data}


def _read_record(t: _Transcript, seq: int, ev: Any, path: str) -> tuple[list[dict[str, Any]], bool]:
    """The entries record ``ev`` holds (a batch of this adapter, or one line of an import), and
    whether it is this adapter's (with its block), after checking it is of the layout; updates
    ``t``'s mtime and summary from the block."""
    if not isinstance(ev, dict) or not isinstance(ev.get("data"), dict):
        raise TranscriptFormatError(path, seq, "a record that is not a session event with data")
    data = ev["data"]
    first = t.records == 0
    t.records += 1
    if first:
        origin = data.get("importedFrom")
        if ev.get("type") != "session.started" or not isinstance(origin, dict) or origin.get("format") != SOURCE_FORMAT:
            raise TranscriptFormatError(path, seq, "its first record is not the header of a Claude Code transcript "
                                                   "(session.started imported from format 'claude')")
    own = data.get(BLOCK)
    if own is not None:
        if not isinstance(own, dict) or not isinstance(own.get("v"), int) or not isinstance(own.get("mtime"), int):
            raise TranscriptFormatError(path, seq, f"its {BLOCK} block is not a map with an int v and mtime")
        if own["v"] > FORMAT_VERSION:
            raise TranscriptFormatError(path, seq, f"format version {own['v']} is newer than {FORMAT_VERSION}; "
                                                   "upgrade journal to read it")
        if first and own.get("key") != {"project_key": t.key[0], "session_id": t.key[1], "subpath": t.key[2]}:
            raise TranscriptFormatError(path, seq, f"the transcript is of key {own.get('key')!r}, not {_show(t.key)!r}")
        if own.get("summary") is not None and not isinstance(own["summary"], dict):
            raise TranscriptFormatError(path, seq, "its summary is not a map")
        t.mtime = max(t.mtime, own["mtime"])
        t.summary = own.get("summary")
        t.own += 1
    block = data.get("import")
    if ev.get("type") == FINISHED_TYPE or not isinstance(block, dict) or block.get("derived"):
        return [], own is not None  # the end of an import, or an event the importer inferred: not a line
    if "batch" in block:
        batch = block["batch"]
        if not isinstance(batch, list) or not all(isinstance(e, dict) for e in batch):
            raise TranscriptFormatError(path, seq, "its batch is not a list of JSON objects")
        return cast("list[dict[str, Any]]", batch), own is not None
    if block.get("defect") is not None or "original" not in block:
        return [], own is not None  # a line an import kept verbatim, being no JSON object: no entry
    original = block["original"]
    if not isinstance(original, dict):
        raise TranscriptFormatError(path, seq, "its imported line is not a JSON object")
    return [original], own is not None


# --- the index ------------------------------------------------------------------------------


@dataclass
class _Entry:
    journal: str
    mtime: int
    summary: dict[str, Any] | None
    acked: bool  # mtime is of a batch the transcript holds (not the time an import was entered)


@dataclass
class _Index:
    project: str
    name: str
    journal: Journal | None  # None until the first write (a read of a project never written makes nothing)
    entries: dict[tuple[str, str | None], _Entry] = field(default_factory=dict)
    since_snap: int = 0  # records read or written after the last snapshot
    compact_after: int = 0  # INDEX_COMPACT_RECORDS_MIN, raised when a snapshot did not fit in a record

    def fold(self, seq: int, ev: Any) -> None:
        path = self.journal.path if self.journal is not None else self.name
        if not isinstance(ev, dict) or ev.get("op") not in _INDEX_OPS or ev.get("project") != self.project:
            raise TranscriptFormatError(path, seq, f"not an index record of project {self.project!r}")
        if ev["op"] == "snap":
            rows = ev.get("entries")
            if not isinstance(rows, list):
                raise TranscriptFormatError(path, seq, "a snapshot without a list of entries")
            self.entries, self.since_snap = {}, 0
            for row in rows:
                if not isinstance(row, dict):
                    raise TranscriptFormatError(path, seq, "a snapshot entry that is not a map")
                self._put(path, seq, row)
            return
        self.since_snap += 1
        session, sub = ev.get("session"), ev.get("subpath")
        if not isinstance(session, str) or not (sub is None or isinstance(sub, str)):
            raise TranscriptFormatError(path, seq, "its session or subpath is not a str")
        if ev["op"] == "del":
            if sub is None:
                for k in [k for k in self.entries if k[0] == session]:
                    del self.entries[k]
            else:
                self.entries.pop((session, sub), None)
            return
        self._put(path, seq, ev)

    def _put(self, path: str, seq: int, ev: dict[str, Any]) -> None:
        session, sub = ev.get("session"), ev.get("subpath")
        name, mtime, summary, acked = ev.get("journal"), ev.get("mtime"), ev.get("summary"), ev.get("acked")
        if not (isinstance(session, str) and (sub is None or isinstance(sub, str)) and isinstance(name, str)
                and isinstance(mtime, int) and (summary is None or isinstance(summary, dict))
                and isinstance(acked, bool)):
            raise TranscriptFormatError(path, seq, "a put without str session and subpath, a journal name, an int "
                                                   "mtime, a summary map and a bool acked")
        self.entries[(session, sub)] = _Entry(name, mtime, summary, acked)

    def snapshot(self) -> dict[str, Any]:
        rows = [{"session": s, "subpath": sub, "journal": e.journal, "mtime": e.mtime, "summary": e.summary,
                 "acked": e.acked} for (s, sub), e in self.entries.items()]
        return {"op": "snap", "project": self.project, "entries": rows}


# --- the store ------------------------------------------------------------------------------


class JournalSessionStore(SessionStore):
    """A ``claude_agent_sdk`` SessionStore on journals in ``target`` (a directory or a server URL).

    Journals are opened at their first use and kept open (locked against other writers, in this
    process or another) until ``close()`` / the end of ``async with``: one store per target at a
    time. Use it from one event loop.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | Store,
        *,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        fs: FileSystem | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if isinstance(target, (str, os.PathLike)):
            if fs is not None and isinstance(target, str) and "://" in target:
                raise ValueError("fs= is for a directory of journals, not a server URL")
            self._store: Store = journal.store(target, **({"fs": fs} if fs is not None else {}))
        else:
            self._store = target
        self.location = self._store.location
        self._options: dict[str, Any] = {"record_size_bytes_max": record_size_bytes_max}
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._last_mtime = 0
        self._transcripts: dict[str, _Transcript] = {}  # by name, least recently used first
        self._indexes: dict[str, _Index] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="claude-sdk-store")
        self._closed = False
        self.recovery_reports: list[tuple[str, RecoveryReport]] = []  # journals whose open cut a torn tail

    @property
    def store(self) -> Store:
        return self._store

    # -- the SDK's methods --------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        k = _key_of(key)
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise EntriesNotStorableError(k, "entries must be a list of JSON objects (dicts)")
        if not entries:
            return
        batch = copy.deepcopy(cast("list[dict[str, Any]]", entries))  # what is stored is what was given now
        await self._run(lambda: self._append(k, batch))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        k = _key_of(key)
        return await self._run(lambda: self._load(k))

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        def run() -> list[SessionStoreListEntry]:
            idx = self._index(project_key, reconcile=True)
            return [{"session_id": s, "mtime": e.mtime} for (s, sub), e in idx.entries.items() if sub is None]

        return await self._run(run)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        def run() -> list[SessionSummaryEntry]:
            idx = self._index(project_key, reconcile=True)
            return [cast("SessionSummaryEntry", copy.deepcopy(e.summary)) for (s, sub), e in idx.entries.items()
                    if sub is None and e.summary is not None]

        return await self._run(run)

    async def delete(self, key: SessionKey) -> None:
        k = _key_of(key)
        await self._run(lambda: self._delete(k))

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        project, session, _ = _key_of({"project_key": key.get("project_key"), "session_id": key.get("session_id")})

        def run() -> list[str]:
            idx = self._index(project, reconcile=True)
            return sorted(sub for (s, sub) in idx.entries if s == session and sub is not None)

        return await self._run(run)

    # -- beyond the Protocol ------------------------------------------------------------------

    async def rebuild_index(self, project_key: str) -> int:
        """Make the index of ``project_key`` say what its transcripts say (after a crash between
        a batch and its index record, the index lags until the key's next append): reads every
        transcript of the project. Returns how many entries were written."""
        return await self._run(lambda: self._rebuild(project_key))

    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._run(self._close_all)
        finally:
            self._closed = True
            self._worker.shutdown(wait=True)

    async def __aenter__(self) -> JournalSessionStore:
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # -- the worker ---------------------------------------------------------------------------

    async def _run(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the store's one worker thread, after every call made before it. A caller
        cancelled meanwhile waits for ``fn`` to end, then gets its CancelledError."""
        if self._closed:
            raise StoreClosedError(self.location)
        done: Future[_T] = self._worker.submit(fn)
        waiting = asyncio.wrap_future(done)
        cancelled: asyncio.CancelledError | None = None
        while not waiting.done():
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError as exc:
                cancelled = cancelled or exc
            except BaseException:
                pass  # fn's own error: raised below
        if cancelled is not None:
            error = None if waiting.cancelled() else waiting.exception()
            if error is not None:
                raise cancelled from error
            raise cancelled
        return waiting.result()

    # -- on the worker ------------------------------------------------------------------------

    def _next_mtime(self, after: int) -> int:
        now = max(self._clock_ms(), self._last_mtime + 1, after + 1)
        self._last_mtime = now
        return now

    def _open(self, name: str, create: bool) -> Journal | None:
        try:
            j = self._store.open(name, create=create, **self._options)
        except JournalNotFoundError:
            return None
        if j.recovery.truncated_bytes:
            self.recovery_reports.append((name, j.recovery))
        return j

    def _transcript(self, key: _Key, create: bool) -> _Transcript | None:
        name = _transcript_name(key)
        t = self._transcripts.pop(name, None)
        if t is not None:
            self._transcripts[name] = t  # most recently used last
            return t
        if not create and not self._store.exists(name):
            return None
        j = self._open(name, create)
        if j is None:
            return None
        t = _Transcript(key, name, j)
        try:
            self._read_all(t, None)
            self._check_whole(t)
        except BaseException:
            j.close()
            raise
        self._transcripts[name] = t
        while len(self._transcripts) > OPEN_TRANSCRIPTS_MAX:
            oldest = next(iter(self._transcripts))
            self._forget(self._transcripts[oldest])
        return t

    def _read_all(self, t: _Transcript, into: list[dict[str, Any]] | None) -> None:
        """Read ``t``'s records from the start: its uuids, lines, mtime and summary (and its
        entries into ``into``). Lines of an import carry no summary: they are folded here."""
        t.uuids, t.lines, t.records, t.own, t.mtime, t.summary = set(), 0, 0, 0, 0, None
        for rec in t.journal.read():
            if rec.is_bytes:
                raise TranscriptFormatError(t.journal.path, rec.seq, "a record of bytes, not a JSON event")
            got, own = _read_record(t, rec.seq, rec.event, t.journal.path)
            t.lines += len(got)
            t.uuids.update(e["uuid"] for e in got if isinstance(e.get("uuid"), str))
            if into is not None:
                into.extend(got)
            if not own and got and t.key[2] is None:
                t.summary = dict(fold_session_summary(cast("SessionSummaryEntry | None", t.summary), _sdk_key(t.key),
                                                      cast("list[SessionStoreEntry]", got)))

    def _check_whole(self, t: _Transcript) -> None:
        """Raise TranscriptDamagedError if ``t`` lacks a batch the index says was acknowledged
        (an append is acknowledged only once its index record is written)."""
        e = self._index(t.key[0], reconcile=False).entries.get((t.key[1], t.key[2]))
        if e is not None and e.acked and e.journal == t.name and e.mtime > t.mtime:
            raise TranscriptDamagedError(t.journal.path, t.mtime, e.mtime, t.journal.recovery)

    def _forget(self, t: _Transcript) -> None:
        """Close ``t`` (least recently used, deleted, or its last write's outcome unknown)."""
        self._transcripts.pop(t.name, None)
        try:
            t.journal.close()
        except JournalError:
            pass  # a fail-stopped journal's close: the failure is what the caller is told about

    def _append(self, key: _Key, entries: list[dict[str, Any]]) -> None:
        t = self._transcript(key, create=True)
        if t is None:
            raise JournalNotFoundError(_transcript_name(key))
        fresh: list[dict[str, Any]] = []
        seen: set[str] = set()
        for e in entries:
            u = e.get("uuid")
            if isinstance(u, str):
                if u in t.uuids or u in seen:
                    continue  # stored already (a re-send), or twice in this batch
                seen.add(u)
            fresh.append(e)
        if fresh:
            mtime = self._next_mtime(t.mtime)
            summary = None
            if key[2] is None:
                summary = dict(fold_session_summary(cast("SessionSummaryEntry | None", t.summary), _sdk_key(key),
                                                    cast("list[SessionStoreEntry]", fresh)))
                summary["mtime"] = mtime
            self._write(t, _record(t, fresh, mtime, summary), f"the batch of {len(fresh)} entries for {_show(key)}")
            t.records += 1
            t.own += 1
            t.lines += len(fresh)
            t.uuids |= seen
            t.mtime, t.summary = mtime, summary
        idx = self._index(key[0], reconcile=False)
        have = idx.entries.get((key[1], key[2]))
        if t.mtime and (have is None or have.mtime < t.mtime or have.journal != t.name):
            self._index_write(idx, {"op": "put", "project": key[0], "session": key[1], "subpath": key[2],
                                    "journal": t.name, "mtime": t.mtime, "summary": t.summary, "acked": t.own > 0})

    def _write(self, t: _Transcript, record: dict[str, Any], what: str) -> None:
        try:
            out = t.journal.append(record, durability=DURABILITY)
        except EventNotSerializableError as exc:
            raise EntriesNotStorableError(t.key, f"an entry has no JSON form ({exc})") from exc
        except RecordTooLargeError as exc:
            raise EntriesNotStorableError(
                t.key, f"the batch is {exc.size_bytes} bytes as stored JSON, over the {exc.limit_bytes}-byte limit of "
                "one record (a batch is one record, so that it is stored whole or not at all); make the store with a "
                "larger record_size_bytes_max") from exc
        except JournalFailStoppedError as exc:
            self._forget(t)
            raise OutcomeUnknownError(what, None, str(exc)) from exc
        if isinstance(out, Committed):
            return
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason, out)
        self._forget(t)
        raise OutcomeUnknownError(what, out)

    def _load(self, key: _Key) -> list[SessionStoreEntry] | None:
        t = self._transcript(key, create=False)
        if t is None:
            return None
        entries: list[dict[str, Any]] = []
        try:
            self._read_all(t, entries)
            self._check_whole(t)
        except BaseException:
            self._forget(t)
            raise
        return None if t.records == 0 else cast("list[SessionStoreEntry]", entries)

    def _index(self, project: str, reconcile: bool) -> _Index:
        idx = self._indexes.get(project)
        if idx is None:
            if not isinstance(project, str):
                raise InvalidSessionKeyError("project_key must be a str")
            name = _index_name(project)
            idx = _Index(project, name, self._open(name, create=False) if self._store.exists(name) else None,
                         compact_after=INDEX_COMPACT_RECORDS_MIN)
            try:
                if idx.journal is not None:
                    for rec in idx.journal.read():
                        if rec.is_bytes:
                            raise TranscriptFormatError(idx.journal.path, rec.seq, "a record of bytes")
                        idx.fold(rec.seq, rec.event)
            except BaseException:
                if idx.journal is not None:
                    idx.journal.close()
                raise
            self._indexes[project] = idx
        if reconcile:
            self._reconcile(idx)
        return idx

    def _reconcile(self, idx: _Index) -> None:
        """Enter the transcripts of the project the index lacks and drop entries whose journal is
        gone (a crash between a transcript's write or delete and its index record): one listing
        of the store's names, and a read of each stray transcript only."""
        names = set(self._store.names())
        prefix = TRANSCRIPT_PREFIX + _escape(idx.project) + "."
        known = {e.journal for e in idx.entries.values()}
        for (session, sub), e in list(idx.entries.items()):
            if e.journal not in names:
                self._index_write(idx, {"op": "del", "project": idx.project, "session": session, "subpath": sub})
        for name in sorted(names - known):
            key = _key_from_name(name) if name.startswith(prefix) else None
            if key is None or key[0] != idx.project:
                continue
            t = self._transcript(key, create=False)
            if t is not None and t.records:
                self._enter(idx, t)

    def _enter(self, idx: _Index, t: _Transcript) -> None:
        if not t.own:  # imported, never written by this adapter: its entry is stamped now
            t.mtime = self._next_mtime(0)
            if t.summary is not None:
                t.summary = {**t.summary, "mtime": t.mtime}
        self._index_write(idx, {"op": "put", "project": idx.project, "session": t.key[1], "subpath": t.key[2],
                                "journal": t.name, "mtime": t.mtime, "summary": t.summary, "acked": t.own > 0})

    def _index_write(self, idx: _Index, record: dict[str, Any]) -> None:
        if idx.journal is None:
            idx.journal = self._open(idx.name, create=True)
        j = idx.journal
        if j is None:
            raise JournalNotFoundError(idx.name)
        what = f"the index record of project {idx.project!r} (what it records is stored)"
        try:
            out = j.append(record, durability=INDEX_DURABILITY)
        except JournalFailStoppedError as exc:
            self._forget_index(idx)
            raise OutcomeUnknownError(what, None, str(exc)) from exc
        if isinstance(out, Committed):
            idx.fold(out.seq, record)
            if idx.since_snap > max(idx.compact_after, INDEX_LOG_SHARE * len(idx.entries)):
                self._compact(idx, j)
            return
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason, out)
        self._forget_index(idx)
        raise OutcomeUnknownError(what, out)

    def _compact(self, idx: _Index, j: Journal) -> None:
        """Seal, append a snapshot of every entry at "sync", drop what is before it. Until the
        drop the older records are all there and the snapshot repeats what they say, so a crash
        at any point changes nothing a reader folds. Housekeeping after the caller's write has
        taken: a failure of it closes the index (the next use reopens it and reads what is
        there, which raises if the disk still fails) instead of failing that call."""
        if not isinstance(j, Retention):
            idx.compact_after = idx.since_snap * 2  # a backend without retention: the index only grows
            return
        try:
            j.seal()
            out = j.append(idx.snapshot(), durability=DURABILITY)
            if isinstance(out, Committed):
                idx.since_snap = 0
                j.drop_prefix(out.seq)
            elif isinstance(out, AckLost):
                self._forget_index(idx)
        except RecordTooLargeError:
            idx.compact_after = idx.since_snap * 2  # over one record: try again when the log has doubled
        except JournalError:
            self._forget_index(idx)

    def _forget_index(self, idx: _Index) -> None:
        self._indexes.pop(idx.project, None)
        if idx.journal is not None:
            try:
                idx.journal.close()
            except JournalError:
                pass  # the failure is what the caller is told about

    def _delete(self, key: _Key) -> None:
        project, session, sub = key
        idx = self._index(project, reconcile=False)
        # Only the names the keys give: an index entry's own journal name may be crafted (another key's).
        if sub is None:
            names = {_transcript_name((project, s, u)) for (s, u) in idx.entries if s == session}
            mine = TRANSCRIPT_PREFIX + _escape(project) + "." + _escape(session)
            names |= {n for n in self._store.names() if n == mine or n.startswith(mine + ".")}
            names.add(_transcript_name(key))
            listed = any(s == session for (s, _) in idx.entries)
        else:
            names = {_transcript_name(key)}
            listed = (session, sub) in idx.entries
        # The journals first, then the index record: a crash between leaves entries whose journal
        # is gone, which the next listing drops (never a deleted transcript listed again).
        for name in sorted(names):
            t = self._transcripts.get(name)
            if t is not None:
                self._forget(t)
            self._store.delete(name)
        if listed:
            self._index_write(idx, {"op": "del", "project": project, "session": session, "subpath": sub})

    def _rebuild(self, project: str) -> int:
        idx = self._index(project, reconcile=True)
        written = 0
        for (session, sub), e in list(idx.entries.items()):
            key = (project, session, sub)
            t = self._transcripts.get(_transcript_name(key))
            if t is None:
                j = self._open(_transcript_name(key), create=False)
                if j is None:
                    continue
                t = _Transcript(key, _transcript_name(key), j)
                try:
                    self._read_all(t, None)  # no _check_whole: the index is made to say what this says
                except BaseException:
                    j.close()
                    raise
                self._transcripts[t.name] = t
            if t.records and (t.own == 0 or t.mtime != e.mtime or t.summary != e.summary):
                if t.own == 0 and not e.acked:
                    continue  # an imported transcript entered already
                self._enter(idx, t)
                written += 1
        return written

    def _close_all(self) -> None:
        errors: list[BaseException] = []
        for t in list(self._transcripts.values()):
            try:
                self._transcripts.pop(t.name, None)
                t.journal.close()
            except JournalError as exc:
                errors.append(exc)
        for idx in list(self._indexes.values()):
            if idx.journal is not None:
                try:
                    idx.journal.close()
                except JournalError as exc:
                    errors.append(exc)
        self._indexes.clear()
        if errors:
            raise errors[0]


def _sdk_key(key: _Key) -> SessionKey:
    out: SessionKey = {"project_key": key[0], "session_id": key[1]}
    if key[2] is not None:
        out["subpath"] = key[2]
    return out
