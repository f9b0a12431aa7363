"""The Journal protocol: what every backend implements and what every user of a journal relies on.

    from journal.api import Committed, Journal, JournalError, Record, RecoveryReport

The file engine (``journal.engine``, opened with ``journal.open``) is one backend; others (a
journal on PostgreSQL or NATS JetStream, for sessions that outlive one machine) implement the
same protocol. The session layer, the adapters and the command are written against this module,
never against a backend: they take a ``Journal`` and get one from ``journal.open``.

What is here, and only this:

* ``Journal``: append (one or many, with the three outcomes of ``journal.outcomes``), read in
  seq order, follow, point reads, resolving an ``AckLost``, flush and sync, close;
* ``Retention``: dropping the oldest records of a journal durably (``PrefixDrop`` says what
  went);
* ``Store``: a namespace of journals by name (open, list, delete, copy), what the adapters keep
  their journals in;
* ``Catalog`` and ``CatalogStore``: small JSON objects by key beside a server's journals, the
  session store's index there;
* ``PrefixCopier``: what a fork needs of its parent, a copy of its first records into a new
  directory that shares (links) the history that can no longer change;
* the values they speak in: ``Record`` (from ``journal.record``, see there why it is a module of
  its own), ``RecoveryReport``, ``PrefixCopy``, and the outcomes and typed errors, re-exported so
  that a user of a journal imports from one place;
* ``LOCK_FILE``, the name of the writer lock in a journal directory: the session store tries it
  to tell whether a session is open for writing elsewhere.

The layers below this module are ``journal.record``, ``journal.outcomes``, ``journal.errors`` and
``journal.fs``; nothing here imports a backend (the import contracts in pyproject.toml hold it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from journal.errors import (
    CorruptionError,
    DurabilityError,
    EventNotSerializableError,
    ForeignSegmentError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvariantError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NewerFormatError,
    NonStringKeyError,
    NotAJournalError,
    PrefixDroppedError,
    ReadOnlyError,
    RecordTooLargeError,
    SequenceError,
    UnexpectedFileError,
    UnexpectedLinkError,
    WriteFailedError,
    invariant,
    present,
)
from journal.outcomes import DURABILITY_LEVELS, AckLost, Committed, Durability, NotCommitted, Outcome
from journal.record import Record

# The writer lock of a journal directory (a file in it; the file engine holds an flock on it).
LOCK_FILE = "LOCK"


@dataclass
class RecoveryReport:
    """What opening the journal found and did. ``actions`` lists every change made to disk."""

    segments: int = 0
    last_seq: int = 0
    live_segment: str | None = None
    live_records: int = 0
    tail: str = "clean"  # a journal/engine/tail.py kind (clean, sealed, torn, zeros), or empty
    truncated_at: int | None = None
    truncated_bytes: int = 0
    quarantined: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"segments: {self.segments}, last seq: {self.last_seq}, live segment: {self.live_segment}"
            f" ({self.live_records} records), tail: {self.tail}",
        ]
        if self.truncated_at is not None and self.tail == "zeros":
            lines.append(
                f"zero-filled tail: cut {self.truncated_bytes} zero bytes at offset {self.truncated_at} "
                "(space reserved by a writer that did not close; nothing to keep)"
            )
        elif self.truncated_at is not None:
            lines.append(
                f"torn tail: cut {self.truncated_bytes} bytes at offset {self.truncated_at}; "
                f"kept in {', '.join(self.quarantined)}"
            )
        lines.extend(f"action: {a}" for a in self.actions)
        return "\n".join(lines)


@dataclass
class PrefixCopy:
    """What copying a prefix did; the byte counts are what a fork cost in I/O."""

    segments_linked: list[str] = field(default_factory=list)
    segments_copied: list[str] = field(default_factory=list)  # whole sealed segments, where links failed
    cut_segment: str | None = None  # the segment whose first records became the new live segment
    bytes_copied: int = 0
    # runs of small sealed segments written as one (names in seq order), so a copy of a copy of
    # ... keeps a bounded number of files; their bytes are in bytes_copied
    segments_merged: list[list[str]] = field(default_factory=list)


@runtime_checkable
class Journal(Protocol):
    """An append-only journal of records numbered 1, 2, 3, ... (``journal.open`` returns one).

    ``durability`` is "buffered", "flush" or "sync" (``journal.outcomes.DURABILITY_LEVELS``);
    any other value raises ValueError. docs/GUARANTEES.md says what each level and each outcome
    promise. Errors are subclasses of ``JournalError``.
    """

    @property
    def path(self) -> str:
        """Where the journal is (a directory for the file engine)."""
        ...

    @property
    def readonly(self) -> bool:
        """Whether this handle was opened read-only (appends raise ReadOnlyError)."""
        ...

    @property
    def recovery(self) -> RecoveryReport:
        """What opening the journal found and did."""
        ...

    @property
    def last_seq(self) -> int:
        """The highest seq handed out (0 for an empty journal); includes buffered records."""
        ...

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        """Append one event (a JSON-serializable dict, or bytes); returns its outcome.

        With ``idempotency_key``, a record already holding that key is not written again: the
        outcome is Committed(duplicate=True) with that record's seq.
        """
        ...

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        """Append events in order; one outcome per event, in the same order."""
        ...

    def read(self, after_seq: int = 0) -> Iterator[Record]:
        """Records with seq > ``after_seq``, in seq order, as the journal holds them now."""
        ...

    def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = ...,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Record]:
        """Yield records as they are committed, until ``stop`` is set or ``idle_timeout_s`` passes."""
        ...

    def get(self, seq: int) -> Record | None:
        """The record at ``seq``, or None if the journal does not hold it."""
        ...

    def resolve(self, outcome: Outcome) -> Outcome:
        """Turn an AckLost into Committed or NotCommitted by reading the journal (after a reopen)."""
        ...

    def flush(self) -> None:
        """Write buffered records to the OS (or the server). Raises JournalFailStoppedError."""
        ...

    def sync(self) -> None:
        """Make everything appended so far durable. Raises JournalFailStoppedError."""
        ...

    def close(self) -> None:
        """Write buffered records (flush level) and release the journal. Idempotent."""
        ...

    def __enter__(self) -> Journal: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass
class PrefixDrop:
    """What ``drop_prefix`` did: the journal now begins at ``first_seq``."""

    first_seq: int
    segments_dropped: list[str] = field(default_factory=list)
    bytes_dropped: int = 0


@runtime_checkable
class Retention(Protocol):
    """Dropping a journal's oldest records durably (LangGraph's prune, a session's compaction).

    The journal keeps numbering on from where it was; it just no longer begins at seq 1. What
    remains verifies as before, and a reader never sees a record below ``first_seq``.
    """

    @property
    def first_seq(self) -> int:
        """The seq of the journal's first record (1 until a prefix is dropped)."""
        ...

    def seal(self) -> None:
        """End the live segment: the next record starts a new one (so a drop can reach it)."""
        ...

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        """Delete the records before ``before_seq``, whole sealed segments at a time."""
        ...


@runtime_checkable
class Store(Protocol):
    """A namespace of journals by name: a directory of journal directories (the file engine),
    a schema (PostgreSQL), a stream (JetStream). ``journal.store(path_or_url)`` gives one.

    The adapters keep their journals in one, so the same adapter code runs on every backend.
    Names are 1 to 200 bytes of UTF-8 from ``[A-Za-z0-9._%-]``, not starting with ".": what the
    adapters' own escapings produce, and safe as a file name, a row key and a subject token.
    """

    @property
    def location(self) -> str:
        """Where the store is (a directory, or a URL without password)."""
        ...

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
        """The journal called ``name``; ``create`` makes it, whole or not at all (never half-made
        under its name, whatever a crash cuts short). JournalNotFoundError if absent."""
        ...

    def exists(self, name: str) -> bool: ...

    def names(self) -> list[str]:
        """The names of the journals in the store, sorted."""
        ...

    def delete(self, name: str) -> None:
        """Delete the journal durably: after a crash it is whole or gone. A missing one is a no-op.
        The caller must hold no open handle on it."""
        ...

    def copy(
        self, source: str, target: str, *, upto_seq: int | None = None, append: Sequence[Any] = ()
    ) -> None:
        """Make ``target`` a copy of the records of ``source`` (a fork), whole or not at all.

        With ``upto_seq``, only records ``first_seq..upto_seq`` are copied; ``append`` then adds
        events after them (a fork's own header), as part of the same copy: a crash leaves no
        target, or one with every copied and appended record. The file engine shares the sealed
        history (hard links); servers copy server-side. FileExistsError if ``target`` exists;
        JournalNotFoundError if ``source`` does not; ValueError if ``source`` does not hold
        ``upto_seq`` (it ends before it, or it was dropped).
        """
        ...


class Catalog(Protocol):
    """Small JSON objects by key, kept by a store beside its journals, each change durable when
    the call returns: the session store's index on a server (list and latest without reading a
    log). Keys are store names (``Store``'s rule); values are JSON objects of at most
    ``CATALOG_VALUE_BYTES_MAX`` bytes encoded, read back equal (not necessarily in key order).
    """

    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Create or replace the value of ``key``."""
        ...

    def update(self, key: str, fields: dict[str, Any]) -> bool:
        """Set ``fields`` in the value of ``key`` atomically (other writers' fields are kept);
        False, and nothing written, when ``key`` has no value."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` (a missing one is a no-op)."""
        ...

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        """Every key and value, sorted by key."""
        ...


@runtime_checkable
class CatalogStore(Protocol):
    """A store that keeps catalogs (the servers' stores); ``name`` is a store name."""

    def catalog(self, name: str) -> Catalog: ...


CATALOG_VALUE_BYTES_MAX: Final = 256 * 1024  # an index entry, not a document store


@runtime_checkable
class PrefixCopier(Protocol):
    """What a fork or a copy needs of its source journal: its first records, as a new journal."""

    def copy_prefix(self, dst: str | os.PathLike[str], at_seq: int, link: bool = True) -> PrefixCopy:
        """Fill the existing empty directory ``dst`` with records 1..``at_seq`` of this journal.

        History that can no longer change (the file engine's sealed segments) is shared with a
        hard link when ``link`` and the file system allow one, and copied otherwise; only the
        part holding ``at_seq`` is cut and copied. Everything written to ``dst`` is made durable
        (files and the directory synced); the source is only read. Raises ValueError if the
        journal ends before ``at_seq``, CorruptionError if a part that is needed is damaged.
        """
        ...


__all__ = [
    "CATALOG_VALUE_BYTES_MAX",
    "DURABILITY_LEVELS",
    "LOCK_FILE",
    "AckLost",
    "Catalog",
    "CatalogStore",
    "Committed",
    "CorruptionError",
    "Durability",
    "DurabilityError",
    "EventNotSerializableError",
    "ForeignSegmentError",
    "IdempotencyConflictError",
    "InvalidArgumentError",
    "InvariantError",
    "Journal",
    "JournalClosedError",
    "JournalError",
    "JournalFailStoppedError",
    "JournalIOError",
    "JournalLockedError",
    "JournalNotFoundError",
    "NewerFormatError",
    "NonStringKeyError",
    "NotAJournalError",
    "NotCommitted",
    "Outcome",
    "PrefixCopier",
    "PrefixCopy",
    "PrefixDrop",
    "PrefixDroppedError",
    "ReadOnlyError",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "Retention",
    "SequenceError",
    "Store",
    "UnexpectedFileError",
    "UnexpectedLinkError",
    "WriteFailedError",
    "invariant",
    "present",
]
