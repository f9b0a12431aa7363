"""Agent Framework's workflow ``CheckpointStorage`` on one journal: ``JournalCheckpointStorage``
(journal/adapters/agent_framework.py says what is stored and why; docs/ADAPTERS.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from journal.errors import MissingExtraError

try:  # the framework comes with the agent-framework extra; without it, say so
    from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

    # The framework's checkpoint codec, with its restricted unpickler: the same bytes its storages write.
    from agent_framework._workflows._checkpoint_encoding import decode_checkpoint_value, encode_checkpoint_value
except ImportError as exc:
    raise MissingExtraError(__name__, "Agent Framework 1.26 or later (agent-framework-core)", "agent-framework",
                            exc) from exc

from journal.adapters.agent_framework_store import (
    CHECKPOINTS_PREFIX,
    FORMAT_VERSION,
    RECORD_SIZE_BYTES_MAX_DEFAULT,
    CheckpointFormatError,
    Journaled,
    OutcomeUnknownError,
    StoreClosedError,
    WriteNotCommittedError,
    escaped_name,
    json_text,
    run_to_outcome,
    short,
)
from journal.api import Journal as JournalHandle
from journal.api import JournalError, JournalIOError
from journal.fs import FileSystem

logger = logging.getLogger(__name__)

@dataclass
class _Entry:
    seq: int  # the record holding the checkpoint as it stands
    workflow: str
    timestamp: str
    previous: str | None


def _parse_time(value: str) -> datetime:
    dt = datetime.fromisoformat(value)
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=timezone.utc)


class JournalCheckpointStorage(Journaled):
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
                                        f"a checkpoint the framework cannot decode ({short(exc)})") from None
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
        text = json_text(encoded, what)
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
                if entry is not None and json_text(self._read(j, entry.seq), what) == text \
                        and (entry.workflow, entry.timestamp, entry.previous) == (record["workflow"], stamp, previous):
                    return cid  # this very checkpoint is stored: a save sent again
                try:
                    seq = self._append(j, record, what, len(text.encode()) + 256)
                except (OutcomeUnknownError, WriteNotCommittedError):
                    self._drop_journal()
                    raise
                self._fold(self._index, seq, record)
                return cid

        return await run_to_outcome(write)

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

        return await run_to_outcome(write)

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


__all__ = ["JournalCheckpointStorage"]
