"""journal: a crash-safe, append-only storage engine with repair, for agent session event logs.

    import journal
    with journal.open(path, create=True) as j:
        out = j.append({"type": "user_message", "text": "hi"}, durability="sync")
        for rec in j.read(after_seq=0):
            print(rec.seq, rec.event)

See docs/GUARANTEES.md for what each durability level and each outcome promise.

``journal.Journal`` is the file engine's class (``Journal.open``); ``journal.api.Journal`` is the
protocol every backend implements, which code that takes a journal from its caller annotates.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from journal import api
from journal.api import PrefixCopier, PrefixCopy, RecoveryReport
from journal.engine.core import Journal, Options, open  # noqa: A004 - the public contract is journal.open
from journal.engine.native import native_available
from journal.errors import (
    CorruptionError,
    DurabilityError,
    EventNotSerializableError,
    IdempotencyConflictError,
    InvalidArgumentError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NewerFormatError,
    NonStringKeyError,
    NotAJournalError,
    ReadOnlyError,
    RecordTooLargeError,
    SequenceError,
    WriteFailedError,
)
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome
from journal.record import Record

if _TYPE_CHECKING:  # mypy holds the file engine to the protocols of journal.api here

    def _file_engine_conforms(j: Journal) -> tuple[api.Journal, PrefixCopier]:
        return j, j


__version__ = "0.1.0"

__all__ = [
    "AckLost",
    "Committed",
    "CorruptionError",
    "DurabilityError",
    "EventNotSerializableError",
    "IdempotencyConflictError",
    "InvalidArgumentError",
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
    "Options",
    "Outcome",
    "PrefixCopier",
    "PrefixCopy",
    "ReadOnlyError",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "SequenceError",
    "WriteFailedError",
    "native_available",
    "open",
]
