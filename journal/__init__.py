"""journal: a crash-safe, append-only storage engine with repair, for agent session event logs.

    import journal
    with journal.open(path, create=True) as j:
        out = j.append({"type": "user_message", "text": "hi"}, durability="sync")
        for rec in j.read(after_seq=0):
            print(rec.seq, rec.event)

See docs/GUARANTEES.md for what each durability level and each outcome promise.
"""

from journal.engine.core import Journal, Options, open  # noqa: A004 - the public contract is journal.open
from journal.engine.native import native_available
from journal.engine.reader import Record
from journal.engine.recovery import RecoveryReport
from journal.errors import (
    CorruptionError,
    EventNotSerializableError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NewerFormatError,
    NotAJournalError,
    ReadOnlyError,
    RecordTooLargeError,
    SequenceError,
)
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome

__version__ = "0.1.0"

__all__ = [
    "AckLost",
    "Committed",
    "CorruptionError",
    "EventNotSerializableError",
    "Journal",
    "JournalClosedError",
    "JournalError",
    "JournalFailStoppedError",
    "JournalIOError",
    "JournalLockedError",
    "JournalNotFoundError",
    "NewerFormatError",
    "NotAJournalError",
    "NotCommitted",
    "Options",
    "Outcome",
    "ReadOnlyError",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "SequenceError",
    "native_available",
    "open",
]
