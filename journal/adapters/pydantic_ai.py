"""Pydantic AI's ``ConversationStore`` on a journal: ``JournalConversationStore(path)``.

    from journal.adapters.pydantic_ai import JournalConversationStore
    async with JournalConversationStore("conversations/") as store:
        await store.save(await agent.run("hi", conversation=await store.load(cid) or Conversation(conversation_id=cid)))

The backend implements the framework's five primitives (``read_record``, ``read_records``,
``write_record``, ``delete_record``, ``read_entry``) and overrides ``read_history``; ``load``,
``save``, ``branch``, ``fork``, ``list_conversations`` and ``delete`` are the framework's own,
built on them. The journal is the only truth; its records, all JSON objects:

    {"op": "pydantic-ai", "v": 1}                            seq 1: what this journal is, and the format
    {"op": "write", "record": {...}, "entries": [{...}]}     one write_record: the record, its new entries
    {"op": "delete", "conversation_id": ID, "revision": R}   one delete_record

Why each rule (docs/ADAPTERS.md):

- One journal for the whole store, not one per conversation. Entries are immutable and addressed
  by id across conversations: a fork points into the entries of the conversation it forked, a
  branch keeps the entries it left, ``read_entry(entry_id)`` names no conversation, and
  ``read_records`` lists every conversation newest-updated first. And a ``write_record``'s record
  and its new entries must land together. One record of one journal is the engine's atomic unit
  (checksummed, cut whole by recovery), so one ``write_record`` is one record: its record and
  entries are all stored or none are, and no cross-journal commit protocol is needed.
- Serialization is the framework's: messages through ``ModelMessagesTypeAdapter`` (JSON, bytes as
  base64), the record through a ``TypeAdapter`` of ``ConversationRecord`` with the same bytes
  encoding. A datetime keeps its instant and its UTC offset (read back with a fixed-offset
  ``datetime.timezone``; UTC as ``timezone.utc``, what the framework's ``now_utc`` makes).
- Compare-and-swap exactly as ``InMemoryConversationStore`` does it: the stored record's revision
  (None when there is none) must equal ``expected_revision``, and a record's ``head_id`` must name
  a stored entry or one of the write's own, else the framework's ``ConversationConflict``. The
  check is made in memory, then the record is appended at "sync", then memory is changed once
  the outcome is Committed. Revisions are the caller's (``save``, ``branch`` and ``fork`` mint
  them): stored as given.
- Group commit: the check and the append's queueing run under the store's one asyncio lock, the
  wait for the fdatasync does not, so concurrent writes to different conversations share one
  fdatasync. What keeps the checks true meanwhile: a conversation with a write in flight takes
  no other write until that one's outcome is applied, and a delete (whose clean-up of entries
  reads every conversation) waits until nothing is in flight and holds off new writes while it
  runs. Writes in flight together therefore commute, and memory equals the replay of the journal
  whatever order their outcomes come back in (ties in ``read_records`` are broken by the seq that
  created the record, the order ``InMemoryConversationStore``'s dict keeps).
- Memory holds an index, built by reading the journal once on first use: each record (decoded,
  small) with the seq that created it, and for each entry id its seq, its position in that
  record and its parent. Message bodies are not kept: ``read_entry`` and ``read_history`` fetch
  the records that hold them by seq (``AsyncJournal.get``) and decode only those entries.
- Deleting drops the record and, as ``InMemoryConversationStore`` does, every entry no remaining
  record's head or branches reaches: ``read_entry`` no longer finds it. The journal is
  append-only, so the entry's bytes stay on disk: ``delete`` does not erase messages.
- The event loop never waits on I/O: opening, recovery, reads and the fdatasync run on
  ``journal.aio``'s worker threads. A caller cancelled while its write is in flight waits for
  the outcome (through repeated cancellations) before its ``CancelledError`` is raised, so memory
  and the journal agree when it sees it.
- Anything but Committed raises a typed error: ``WriteNotCommittedError`` (nothing stored, never
  will be; retry) or ``OutcomeUnknownError`` (AckLost: the journal fail-stopped; it is closed,
  and the next call reopens it, running recovery, and rebuilds the index from disk, so
  ``read_record`` then says whether the write took).

It uses only ``journal.aio`` (the asyncio face of ``journal.open``) and ``journal.api``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from copy import deepcopy
from datetime import datetime, timezone
from typing import Any, Final, NamedTuple, TypeVar

from journal.errors import MissingExtraError

try:  # the framework comes with the pydantic-ai extra; without it, say so (not a bare ModuleNotFoundError)
    import pydantic
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import ModelMessagesTypeAdapter
except ImportError as exc:
    raise MissingExtraError(__name__, "Pydantic AI 2.66 or later (pydantic-ai-slim)", "pydantic-ai", exc) from exc

import journal.aio
from journal.api import (
    AckLost,
    Committed,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    NotCommitted,
    Outcome,
    Record,
    RecordTooLargeError,
)
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

FORMAT_OP: Final = "pydantic-ai"
FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
# The engine's default cap on one record (stored JSON, before compression). One write_record is
# one record, so this bounds one write's record and new entries together.
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024

_T = TypeVar("_T")

# The record with the bytes encoding of ModelMessagesTypeAdapter (a TypeAdapter takes no config
# for a dataclass itself; a list of them takes it, as the framework's own adapter does).
_RECORDS: Final = pydantic.TypeAdapter(
    list[ConversationRecord],
    config=pydantic.ConfigDict(defer_build=True, ser_json_bytes="base64", val_json_bytes="base64"),
)


class JournalConversationStoreError(JournalError):
    """Base class of this adapter's errors."""


class StoreClosedError(JournalConversationStoreError, RuntimeError):
    def __init__(self, path: str) -> None:
        super().__init__(
            f"JournalConversationStore({path!r}) is closed; make a new one with JournalConversationStore(path)"
        )


class StoreFormatError(JournalConversationStoreError, ForeignRecordError):
    """The journal holds a record this adapter did not write (another program's, a newer
    version's, or one crafted); nothing of it was used and nothing was changed."""

    def __init__(self, path: str, seq: int, why: str) -> None:
        JournalError.__init__(
            self,
            f"conversation journal {path} at seq {seq}: {why}; the journal was left as it is. Open it with "
            "the program (or the version) that wrote it, or restore it from a backup you trust",
        )
        self.path = path
        self.seq = seq
        self.why = why


class EntryNotFoundError(JournalConversationStoreError, KeyError):
    """No stored entry has this id (a ``KeyError``, what ``InMemoryConversationStore`` raises)."""

    def __init__(self, entry_id: str) -> None:
        super().__init__(
            f"no entry {entry_id!r} in the store: it was never stored, or the delete of the last "
            "conversation reaching it released it; read the conversation's record again for its current head"
        )
        self.entry_id = entry_id

    def __str__(self) -> str:  # KeyError's str() is the repr of its argument
        return str(self.args[0])


class ConversationTooLargeError(JournalConversationStoreError, ValueError):
    """One write_record is one record; this one is over the journal's record_size_bytes_max."""

    def __init__(self, conversation_id: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"this write of conversation {conversation_id!r} is {size_bytes} bytes as JSON, over the "
            f"{limit_bytes}-byte limit of one write_record (one record, so that the record and its new "
            "entries are stored together or not at all); nothing was written. Store large payloads "
            "(files, tool outputs) elsewhere and reference them, save after fewer new messages, or open "
            "the store with a larger record_size_bytes_max"
        )
        self.conversation_id = conversation_id
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class WriteNotCommittedError(JournalConversationStoreError):
    """The journal answered NotCommitted: nothing of the write is stored, and never will be."""

    def __init__(self, what: str, reason: str, outcome: NotCommitted | None = None) -> None:
        super().__init__(f"{what} was not stored ({reason}); the store is unchanged and the call may be retried")
        self.what = what
        self.outcome = outcome


class OutcomeUnknownError(JournalConversationStoreError):
    """The journal answered AckLost: the write may or may not be stored."""

    def __init__(self, what: str, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of {what} is unknown ({outcome.reason}); do not retry blindly: the journal was "
            "closed, and the next call reopens it (recovery runs) and rebuilds the store from disk, so "
            "read_record then shows whether the write took (its revision) and the conversation can be "
            "loaded and saved again"
        )
        self.what = what
        self.outcome = outcome


class _Stored(NamedTuple):
    record: ConversationRecord  # decoded from what was written, so equal to what a reopen reads
    created_seq: int  # the write that made the conversation exist: read_records' tie-break


class _EntryRef(NamedTuple):
    seq: int  # the write record holding the entry
    position: int  # its index in that record's entries
    parent_id: str | None


class _Index:
    """What the journal holds, folded: one per opening of the journal."""

    def __init__(self) -> None:
        self.records: dict[str, _Stored] = {}
        self.entries: dict[str, _EntryRef] = {}
        self.busy: set[str] = set()  # conversations with a write in flight
        self.in_flight = 0
        self.deleting = False

    def apply_write(self, seq: int, record: ConversationRecord, entries: Sequence[tuple[str, str | None]]) -> None:
        for position, (entry_id, parent_id) in enumerate(entries):
            old = self.entries.get(entry_id)
            if old is None or old.seq < seq:  # the later write wins, whatever order outcomes came in
                self.entries[entry_id] = _EntryRef(seq, position, parent_id)
        old_record = self.records.get(record.conversation_id)
        created_seq = old_record.created_seq if old_record is not None else seq
        self.records[record.conversation_id] = _Stored(record, created_seq)

    def apply_delete(self, conversation_id: str) -> None:
        del self.records[conversation_id]
        # InMemoryConversationStore's clean-up: keep the entries a remaining head or branch reaches.
        reachable: set[str] = set()
        for stored in self.records.values():
            for entry_id in [stored.record.head_id, *stored.record.branches]:
                while entry_id is not None and entry_id not in reachable:
                    ref = self.entries.get(entry_id)
                    if ref is None:
                        break
                    reachable.add(entry_id)
                    entry_id = ref.parent_id
        self.entries = {entry_id: ref for entry_id, ref in self.entries.items() if entry_id in reachable}

    def may_start(self, conversation_id: str, delete: bool, deletes_waiting: int) -> bool:
        if delete:
            return self.in_flight == 0
        return not self.deleting and deletes_waiting == 0 and conversation_id not in self.busy

    def reserve(self, conversation_id: str, delete: bool) -> None:
        self.busy.add(conversation_id)
        self.in_flight += 1
        self.deleting = delete

    def release(self, conversation_id: str, delete: bool) -> None:
        self.busy.discard(conversation_id)
        self.in_flight -= 1
        if delete:
            self.deleting = False


class JournalConversationStore(ConversationStore):
    """A Pydantic AI ``ConversationStore`` whose conversations are records of one journal at ``path``.

    ``path`` is the journal's directory (made if missing). The journal is opened on first use
    (or by ``await store.open()``, or ``async with``) and stays open, locked against every other
    writer, until ``await store.close()``: a second store on the same path, in this process or
    another, gets ``journal.JournalLockedError``. One store belongs to one event loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.record_size_bytes_max = record_size_bytes_max
        self._open_options: dict[str, Any] = {"record_size_bytes_max": record_size_bytes_max,
                                              "lock_timeout_s": lock_timeout_s}
        if fs is not None:
            self._open_options["fs"] = fs
        # One lock per store: held while opening, while a write is checked and queued, and while
        # its outcome is applied; never while a write waits for its fdatasync (see the module doc).
        self._cond = asyncio.Condition()
        self._journal: journal.aio.AsyncJournal | None = None
        self._index: _Index | None = None
        self._deletes_waiting = 0
        self._closed = False

    # -- opening and closing -----------------------------------------------------------------

    async def open(self) -> JournalConversationStore:
        """Open the journal and read it into the index now, rather than on first use."""
        await self._ready()
        return self

    async def _ready(self) -> tuple[_Index, journal.aio.AsyncJournal]:
        index, j = self._index, self._journal
        if index is not None and j is not None and not self._closed:
            return index, j
        async with self._cond:
            return await self._ready_locked()

    async def _ready_locked(self) -> tuple[_Index, journal.aio.AsyncJournal]:
        if self._closed:
            raise StoreClosedError(self.path)
        if self._index is not None and self._journal is not None:
            return self._index, self._journal
        j = await journal.aio.open(self.path, create=True, **self._open_options)
        try:
            index = await self._replay(j)
        except BaseException:
            await j.close()
            raise
        self._journal, self._index = j, index
        return index, j

    async def _replay(self, j: journal.aio.AsyncJournal) -> _Index:
        index = _Index()
        if j.last_seq == 0:
            out = await j.append({"op": FORMAT_OP, "v": FORMAT_VERSION}, DURABILITY)
            if isinstance(out, NotCommitted):
                raise WriteNotCommittedError("creating the store's journal", out.reason, out)
            if isinstance(out, AckLost):  # the handle is closed by our caller; the next use reopens
                raise OutcomeUnknownError("creating the store's journal", out)
            return index
        async for rec in j.read(0):
            ev = rec.event
            if not isinstance(ev, dict):
                raise StoreFormatError(self.path, rec.seq, "a record that is not a JSON object")
            if rec.seq == 1:
                if ev.get("op") != FORMAT_OP:
                    raise StoreFormatError(self.path, 1, "not a Pydantic AI conversation journal (no header)")
                if not isinstance(ev.get("v"), int) or ev["v"] > FORMAT_VERSION:
                    raise StoreFormatError(self.path, 1, f"format version {ev.get('v')!r} is newer than "
                                                         f"{FORMAT_VERSION}; upgrade journal to read it")
                continue
            op = ev.get("op")
            if op == "write":
                entries = ev.get("entries")
                if not isinstance(entries, list) or not all(_is_entry(e) for e in entries):
                    raise StoreFormatError(self.path, rec.seq, "a write whose entries are not maps of a str id, "
                                                               "a str or null parent_id, a str kind and a message")
                try:
                    record = _decode_record(ev.get("record"))
                except _UNREADABLE as exc:
                    raise StoreFormatError(self.path, rec.seq, f"a record Pydantic AI cannot read ({_short(exc)})") \
                        from None
                index.apply_write(rec.seq, record, [(e["id"], e["parent_id"]) for e in entries])
            elif op == "delete":
                conversation_id, revision = ev.get("conversation_id"), ev.get("revision")
                stored = index.records.get(conversation_id) if isinstance(conversation_id, str) else None
                if not isinstance(conversation_id, str) or stored is None or stored.record.revision != revision:
                    raise StoreFormatError(self.path, rec.seq, f"a delete of conversation {conversation_id!r} "
                                                               f"at revision {revision!r}, which is not stored")
                index.apply_delete(conversation_id)
            else:
                raise StoreFormatError(self.path, rec.seq, f"unknown op {op!r}")
        return index

    async def close(self) -> None:
        """Wait for the writes in flight, then close the journal. Idempotent."""
        async with self._cond:
            if self._closed:
                return
            self._closed = True
            index = self._index
            if index is not None:
                await self._cond.wait_for(lambda: index.in_flight == 0)
            j, self._journal, self._index = self._journal, None, None
            if j is not None:
                await j.close()

    async def __aenter__(self) -> JournalConversationStore:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def last_seq(self) -> int:
        """The seq of the journal's last record (the header is seq 1); 0 before the first use."""
        if self._closed:
            raise StoreClosedError(self.path)
        return self._journal.last_seq if self._journal is not None else 0

    def __repr__(self) -> str:
        n = len(self._index.records) if self._index is not None else "?"
        return f"JournalConversationStore({self.path!r}, conversations={n})"

    # -- the primitives: reads -----------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        index, _ = await self._ready()
        stored = index.records.get(conversation_id)
        return None if stored is None else _copy(stored.record)

    async def read_records(self, *, scope: str | None = None, limit: int | None = None) -> Sequence[ConversationRecord]:
        index, _ = await self._ready()
        chosen = sorted(
            (s for s in index.records.values() if scope is None or s.record.scope == scope),
            key=lambda s: s.created_seq,
        )
        # A stable sort, newest first, over creation order: InMemoryConversationStore's tie order.
        chosen.sort(key=lambda s: s.record.updated_at, reverse=True)
        return [_copy(s.record) for s in chosen[:limit]]

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        def one(index: _Index) -> list[str]:
            if entry_id not in index.entries:
                raise EntryNotFoundError(entry_id)
            return [entry_id]

        return (await self._read_entries(one))[0]

    async def read_history(self, head_id: str | None, *, limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to ``head_id`` (the last ``limit`` of them), as the base
        class walks them, but found in the index and fetched one journal record at a time."""

        def walk(index: _Index) -> list[str]:
            ids: list[str] = []
            seen: set[str] = set()
            entry_id = head_id
            while entry_id is not None and (limit is None or len(ids) < limit):
                ref = index.entries.get(entry_id)
                if ref is None:
                    raise EntryNotFoundError(entry_id)
                if entry_id in seen:  # entries are immutable and made after their parent: no write loops
                    raise StoreFormatError(self.path, ref.seq, f"entry {entry_id!r} is its own ancestor")
                seen.add(entry_id)
                ids.append(entry_id)
                entry_id = ref.parent_id
            ids.reverse()
            return ids

        return await self._read_entries(walk)

    async def _read_entries(self, choose: Callable[[_Index], list[str]]) -> list[ConversationEntry]:
        """Fetch the entries ``choose`` names from the index, each journal record once; once more
        if a lost outcome closed the journal under the read (the next try reopens it)."""
        attempts = 2
        while True:
            attempts -= 1
            index, j = await self._ready()
            refs = [index.entries[entry_id] for entry_id in choose(index)]
            events: dict[int, dict[str, Any]] = {}
            try:
                for ref in refs:
                    if ref.seq not in events:
                        events[ref.seq] = self._write_event(ref.seq, await j.get(ref.seq))
            except (JournalClosedError, RuntimeError):  # RuntimeError: the closed handle's worker pool
                if attempts > 0 and self._journal is not j and not self._closed:
                    continue
                raise
            return self._decoded_entries(refs, [events[ref.seq]["entries"][ref.position] for ref in refs])

    def _decoded_entries(self, refs: Sequence[_EntryRef], objs: Sequence[dict[str, Any]]) -> list[ConversationEntry]:
        """The entries ``objs`` (stored at ``refs``), decoded together; one Pydantic AI refuses
        raises StoreFormatError naming its record."""
        try:
            return _decode_entries(objs)
        except _UNREADABLE:
            for ref, obj in zip(refs, objs, strict=True):  # which one: each alone
                try:
                    _decode_entries([obj])
                except _UNREADABLE as exc:
                    raise StoreFormatError(self.path, ref.seq, f"entry {obj['id']!r} holds a message Pydantic AI "
                                                               f"cannot read ({_short(exc)})") from None
            raise

    def _write_event(self, seq: int, rec: Record | None) -> dict[str, Any]:
        if rec is None or not isinstance(rec.event, dict) or rec.event.get("op") != "write":
            raise StoreFormatError(self.path, seq, "the index names a write record the journal does not hold")
        event: dict[str, Any] = rec.event
        return event

    # -- the primitives: writes ----------------------------------------------------------------

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        conversation_id = record.conversation_id
        new_entries = list(new_entries)

        def check(index: _Index) -> None:
            stored = index.records.get(conversation_id)
            if (stored.record.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(conversation_id)
            head = record.head_id
            if head is not None and head not in index.entries and head not in {e.id for e in new_entries}:
                raise ConversationConflict(conversation_id)

        def build() -> tuple[dict[str, Any], Callable[[_Index, int], None]]:
            record_json = _dump_record(record)
            decoded = _decode_record(record_json)  # what a reopen will read: memory holds exactly it
            event = {"op": "write", "record": record_json, "entries": _dump_entries(new_entries)}
            refs = [(e.id, e.parent_id) for e in new_entries]
            return event, lambda index, seq: index.apply_write(seq, decoded, refs)

        await self._commit(conversation_id, check, build, delete=False, what=f"write_record of {conversation_id!r}")

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        def check(index: _Index) -> None:
            stored = index.records.get(conversation_id)
            if stored is None or stored.record.revision != expected_revision:
                raise ConversationConflict(conversation_id)

        def build() -> tuple[dict[str, Any], Callable[[_Index, int], None]]:
            event = {"op": "delete", "conversation_id": conversation_id, "revision": expected_revision}
            return event, lambda index, seq: index.apply_delete(conversation_id)

        await self._commit(conversation_id, check, build, delete=True, what=f"delete_record of {conversation_id!r}")

    async def _commit(
        self,
        conversation_id: str,
        check: Callable[[_Index], None],
        build: Callable[[], tuple[dict[str, Any], Callable[[_Index, int], None]]],
        *,
        delete: bool,
        what: str,
    ) -> None:
        """Check in memory and queue the append under the lock; apply the change on Committed."""
        async with self._cond:
            if delete:
                self._deletes_waiting += 1
            try:
                while True:
                    index, j = await self._ready_locked()
                    if index.may_start(conversation_id, delete, self._deletes_waiting):
                        break
                    await self._cond.wait()
            finally:
                if delete:
                    self._deletes_waiting -= 1
            check(index)
            event, apply = build()
            index.reserve(conversation_id, delete)
            # The task is made under the lock, so the record is queued before anyone else checks.
            task = asyncio.get_running_loop().create_task(
                self._append_and_apply(index, j, conversation_id, event, apply, delete, what)
            )
        await _to_outcome(task)

    async def _append_and_apply(
        self,
        index: _Index,
        j: journal.aio.AsyncJournal,
        conversation_id: str,
        event: dict[str, Any],
        apply: Callable[[_Index, int], None],
        delete: bool,
        what: str,
    ) -> None:
        out: Outcome | None = None
        fail_stopped = False
        try:
            try:
                out = await j.append(event, DURABILITY)
            except RecordTooLargeError as exc:
                raise ConversationTooLargeError(conversation_id, exc.size_bytes, exc.limit_bytes) from exc
            except JournalFailStoppedError as exc:  # refused before writing; reopen on next use
                fail_stopped = True
                raise WriteNotCommittedError(what, f"the journal had fail-stopped: {exc}") from exc
            except JournalClosedError as exc:  # closed by another write's lost outcome before this was queued
                raise WriteNotCommittedError(what, "the journal was closed after another write's outcome was lost") \
                    from exc
        finally:
            forget = fail_stopped or isinstance(out, AckLost)
            async with self._cond:
                if isinstance(out, Committed):
                    apply(index, out.seq)
                index.release(conversation_id, delete)
                if forget and self._journal is j:
                    # The journal fail-stopped: no write may start on it; the next call reopens it
                    # (recovery runs) and reads the disk again.
                    self._journal, self._index = None, None
                self._cond.notify_all()
            if forget:
                try:
                    await j.close()
                except JournalError:
                    pass  # a fail-stopped handle may refuse its last flush; recovery on reopen decides
        if isinstance(out, NotCommitted):
            raise WriteNotCommittedError(what, out.reason, out)
        if isinstance(out, AckLost):
            raise OutcomeUnknownError(what, out)


# What decoding a stored record or message raises when Pydantic AI refuses it: its validation,
# and json's when a value is nested past the recursion limit.
_UNREADABLE: Final = (pydantic.ValidationError, ValueError, TypeError, RecursionError)


def _is_entry(obj: Any) -> bool:
    """Whether ``obj`` is an entry as write_record stores it (``_dump_entries``)."""
    return (isinstance(obj, dict) and isinstance(obj.get("id"), str) and isinstance(obj.get("kind"), str)
            and (obj.get("parent_id") is None or isinstance(obj["parent_id"], str)) and "message" in obj
            and "parent_id" in obj)


def _short(exc: BaseException, chars_max: int = 300) -> str:
    """An error's words, cut to ``chars_max`` (a validation error lists every field)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


def _copy(record: ConversationRecord) -> ConversationRecord:
    """A copy the caller may change without changing the store (InMemoryConversationStore's deepcopy)."""
    return deepcopy(record)


def _dump_record(record: ConversationRecord) -> Any:
    dumped: list[Any] = json.loads(_RECORDS.dump_json([record]))
    return dumped[0]


def _decode_record(obj: Any) -> ConversationRecord:
    record = _RECORDS.validate_json(json.dumps([obj], ensure_ascii=False))[0]
    return dataclasses.replace(record, updated_at=_fixed_offset(record.updated_at))


def _fixed_offset(dt: datetime) -> datetime:
    """pydantic reads an offset as its own TzInfo; give it back as datetime.timezone (UTC as timezone.utc)."""
    offset = dt.utcoffset()
    return dt if offset is None else dt.replace(tzinfo=timezone(offset))


def _dump_entries(entries: Sequence[ConversationEntry]) -> list[dict[str, Any]]:
    messages: list[Any] = json.loads(ModelMessagesTypeAdapter.dump_json([e.message for e in entries]))
    return [
        {"id": e.id, "parent_id": e.parent_id, "kind": e.kind, "message": m}
        for e, m in zip(entries, messages, strict=True)
    ]


def _decode_entries(objs: Sequence[dict[str, Any]]) -> list[ConversationEntry]:
    messages = ModelMessagesTypeAdapter.validate_json(json.dumps([o["message"] for o in objs], ensure_ascii=False))
    return [
        ConversationEntry(id=o["id"], parent_id=o["parent_id"], kind=o["kind"], message=m)
        for o, m in zip(objs, messages, strict=True)
    ]


async def _to_outcome(task: asyncio.Task[_T]) -> _T:
    """Wait for ``task`` whatever happens to the caller: cancelled meanwhile, the caller keeps
    waiting until the write's outcome is applied, then raises its CancelledError (chained to the
    write's error, if any)."""
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
        except BaseException:
            pass  # the write's own error: raised below, from the task
    if cancelled is not None:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise cancelled from error
        raise cancelled
    return task.result()


__all__ = [
    "RECORD_SIZE_BYTES_MAX_DEFAULT",
    "ConversationTooLargeError",
    "EntryNotFoundError",
    "JournalConversationStore",
    "JournalConversationStoreError",
    "OutcomeUnknownError",
    "StoreClosedError",
    "StoreFormatError",
    "WriteNotCommittedError",
]
