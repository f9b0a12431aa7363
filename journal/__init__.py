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

import os as _os
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from journal import api
from journal.api import PrefixCopier, PrefixCopy, RecoveryReport
from journal.engine.block_cache import BLOCK_CACHE_BYTES_DEFAULT, set_block_cache_bytes
from journal.engine.core import Journal, Options
from journal.engine.core import open as _open_file

# The dictionary API, for the session layer's store dictionaries (journal/session/dictionaries.py),
# which reaches the engine only through this package.
from journal.engine.dictionary import (
    DICTIONARY_BYTES_MAX,
    DICTIONARY_BYTES_MIN,
    DICTIONARY_ID_MAX,
    Dictionary,
    dictionary_file_name,
    encode_dictionary_file,
    parse_dictionary_file_name,
    read_dictionary_file,
)
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
    PrefixDroppedError,
    ReadOnlyError,
    RecordTooLargeError,
    SequenceError,
    UnexpectedFileError,
    UnexpectedLinkError,
    WriteFailedError,
)
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome
from journal.record import Record


def open(  # noqa: A001 - the public contract is journal.open
    target: str | _os.PathLike[str], create: bool = False, readonly: bool = False, **options: _Any
) -> api.Journal:
    """Open the journal at ``target``: a directory (the file engine, ``Journal.open`` lists its
    options) or a server URL, ``postgresql://...?journal=NAME`` or ``nats://...?journal=NAME``
    (``journal.remote``, docs/REMOTE.md)."""
    from journal.remote.url import SCHEMES

    if isinstance(target, str) and "://" in target and target.split("://", 1)[0].lower() in SCHEMES:
        from journal.remote import open_url

        return open_url(target, create=create, readonly=readonly, **options)
    return _open_file(target, create=create, readonly=readonly, **options)


def store(target: str | _os.PathLike[str], **options: _Any) -> api.Store:
    """The store of journals at ``target``: a directory (``journal.engine.store.DirectoryStore``)
    or a server URL without ``journal=`` (docs/REMOTE.md)."""
    from journal.remote.url import SCHEMES

    if isinstance(target, str) and "://" in target and target.split("://", 1)[0].lower() in SCHEMES:
        from journal.remote import open_store

        return open_store(target, **options)
    from journal.engine.store import DirectoryStore

    return DirectoryStore(target, **options)


if _TYPE_CHECKING:  # mypy holds the file engine to the protocols of journal.api here
    from journal.engine.store import DirectoryStore


    def _file_engine_conforms(j: Journal) -> tuple[api.Journal, PrefixCopier, api.Retention]:
        return j, j, j

    def _directory_store_conforms(s: "DirectoryStore") -> api.Store:
        return s


__version__ = "0.1.0"

__all__ = [
    "BLOCK_CACHE_BYTES_DEFAULT",
    "DICTIONARY_BYTES_MAX",
    "DICTIONARY_BYTES_MIN",
    "DICTIONARY_ID_MAX",
    "AckLost",
    "Committed",
    "CorruptionError",
    "Dictionary",
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
    "PrefixDroppedError",
    "ReadOnlyError",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "SequenceError",
    "UnexpectedFileError",
    "UnexpectedLinkError",
    "WriteFailedError",
    "dictionary_file_name",
    "encode_dictionary_file",
    "native_available",
    "open",
    "parse_dictionary_file_name",
    "read_dictionary_file",
    "set_block_cache_bytes",
]
