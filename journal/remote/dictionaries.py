"""Trained zstd dictionaries of a server journal: what both backends do the same way.

A writer opened with ``dictionary=`` (journal.engine.dictionary.Dictionary) stores it on the
server before any frame naming its id is committed, then compresses its records with it through
the engine's own encoding (``options_with``: the engine's DictionaryUse, always active, since a
server journal has no segment of an older format). Each backend keeps the dictionary's body
where its journal lives (PostgreSQL: a row of the schema's ``dictionaries`` table; JetStream: a
message on a subject of the journal's own) and gives this module three functions: the ids it
holds, the body of one id, and storing a body under a new id. The body is the engine's
dictionary file (``encode_dictionary_file``: magic, id, length, digest, data, XXH64), so a
changed byte is caught the way a changed ``dict-<id>.zdict`` is.

Which id (``install``): the engine's rule. A stored dictionary with the same digest is reused
(its id); else the dictionary's own id when the journal has none under it; else the lowest free
id. A stored one that does not verify is never reused, and its id stays taken.

Readers (``ServerDictionaries``) resolve a frame's dictionary id through a per-handle cache that
loads and verifies the server's copy once; a missing or damaged one is CorruptionError naming the
journal, the id, the seq and what to do.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping

import zstandard

from journal.engine.dictionary import (
    DICTIONARY_FILE_BYTES_MAX,
    DICTIONARY_ID_MAX,
    DICTIONARY_ID_MIN,
    DecodingTables,
    Dictionary,
    DictionaryCache,
    DictionaryUse,
    decode_dictionary_file,
    decoding_tables,
    dictionary_file_name,
    encode_dictionary_file,
    thread_decompressor,
)
from journal.engine.options import Options
from journal.errors import CorruptionError, InvalidArgumentError

# A stored body longer than this is refused unread: it cannot be a dictionary file.
STORED_DICTIONARY_BYTES_MAX = DICTIONARY_FILE_BYTES_MAX


def checked(dictionary: object, readonly: bool, shared: bool) -> Dictionary | None:
    """The ``dictionary=`` an open takes: None for a read-only handle (reading needs only what
    the server holds), InvalidArgumentError for anything but a Dictionary, or with a shared
    writer (the engine refuses it too: other writers' records would be planned without it)."""
    if dictionary is None:
        return None
    if not isinstance(dictionary, Dictionary):
        raise InvalidArgumentError(f"dictionary must be a Dictionary or None, not {type(dictionary).__name__}")
    if readonly:
        return None
    if shared:
        raise InvalidArgumentError("a dictionary is not supported with writer='shared'; open without one")
    return dictionary


def body_of(d: Dictionary, dict_id: int) -> bytes:
    """What the server stores for ``d`` under ``dict_id``: the engine's dictionary file bytes."""
    return encode_dictionary_file(Dictionary(dict_id, d.data))


def too_large(dict_id: int, nbytes: int) -> CorruptionError:
    """What a loader raises for a stored body too long to be a dictionary (left unread)."""
    return CorruptionError(
        dictionary_file_name(dict_id),
        0,
        None,
        f"{nbytes} bytes stored, more than a dictionary file holds ({STORED_DICTIONARY_BYTES_MAX})",
    )


def decoded(body: bytes, dict_id: int) -> Dictionary:
    """The dictionary a stored body holds, verified to be ``dict_id``'s; CorruptionError (its
    ``reason`` says what is wrong) otherwise."""
    if len(body) > STORED_DICTIONARY_BYTES_MAX:
        raise too_large(dict_id, len(body))
    return decode_dictionary_file(body, dictionary_file_name(dict_id))


def choose_id(stored: Mapping[int, Dictionary | None], d: Dictionary) -> tuple[int, bool]:
    """(the id ``d``'s frames carry, whether it must be stored): the id of a stored dictionary
    with ``d``'s digest; else ``d.id`` if the journal holds nothing under it; else the lowest
    free id. ``stored``: every id the journal holds, None for one that does not verify."""
    for i in sorted(stored):
        got = stored[i]
        if got is not None and got.digest == d.digest:
            return i, False
    if d.id not in stored:
        return d.id, True
    for i in range(DICTIONARY_ID_MIN, DICTIONARY_ID_MAX + 1):
        if i not in stored:
            return i, True
    raise InvalidArgumentError(f"the journal already holds {len(stored)} dictionaries, every id; open without one")


def install(
    d: Dictionary,
    ids: Callable[[], list[int]],
    load: Callable[[int], bytes | None],
    store: Callable[[int, bytes], None],
) -> int:
    """Store ``d`` among the journal's dictionaries (unless it holds it already) and return the
    id its frames carry. ``store(id, body)`` returns once the server has it durably (committed,
    acknowledged): the caller writes no frame naming the id before. The caller holds the
    journal's writer claim, so no one else adds a dictionary meanwhile."""
    stored: dict[int, Dictionary | None] = {}
    for i in ids():
        try:
            body = load(i)
            stored[i] = None if body is None else decoded(body, i)
        except CorruptionError:
            stored[i] = None  # never reused; its id stays taken
    dict_id, new = choose_id(stored, d)
    if new:
        store(dict_id, body_of(d, dict_id))
    return dict_id


def verified(ids: list[int], load: Callable[[int], bytes | None]) -> list[Dictionary]:
    """The journal's dictionaries that verify, by id (one that does not is left out: a reader
    of a record naming it says so)."""
    out: list[Dictionary] = []
    for i in ids:
        try:
            body = load(i)
            if body is not None:
                out.append(decoded(body, i))
        except CorruptionError:
            continue
    return out


def options_with(options: Options, dict_id: int, d: Dictionary) -> Options:
    """``options`` whose encoding compresses with ``d`` under ``dict_id`` (the engine's
    encode_event does the work): active at once, every server frame may name a dictionary."""
    use = DictionaryUse(dict_id, Dictionary(dict_id, d.data))
    use.active = True
    return dataclasses.replace(options, dictionary=use)


class ServerDictionaries(DictionaryCache):
    """A server journal's dictionaries for its readers: each loaded from the server and verified
    once (thread-safe), a decompressor per dictionary per thread. ``where``: the journal's URL
    without a password; ``place(id)``: where the server keeps dictionary ``id`` (for errors);
    ``load(id)``: its stored body, None when the server holds none under that id (``too_large``
    when it is too long to be one)."""

    def __init__(self, where: str, place: Callable[[int], str], load: Callable[[int], bytes | None]) -> None:
        # The engine's cache reads a directory; this one asks the server. Only ``decompressor``,
        # what the engine's decoder calls, is taken over; zstd's tables and each thread's
        # decompressors are the process's, shared with every other handle (engine dictionary.py).
        self._where = where
        self._place = place
        self._load_body = load
        self._server_mu = threading.Lock()
        self._server_tables: dict[int, DecodingTables] = {}

    def decompressor(self, dict_id: int, segment: str, offset: int, seq: int) -> zstandard.ZstdDecompressor:
        tables = self._server_tables.get(dict_id)
        if tables is None:
            tables = self._tables(dict_id, seq)
        return thread_decompressor(tables)

    def _tables(self, dict_id: int, seq: int) -> DecodingTables:
        with self._server_mu:
            got = self._server_tables.get(dict_id)
            if got is not None:
                return got
            if not DICTIONARY_ID_MIN <= dict_id <= DICTIONARY_ID_MAX:
                raise self._error(dict_id, seq, "no such id")
            try:
                body = self._load_body(dict_id)
                d = None if body is None else decoded(body, dict_id)
            except CorruptionError as exc:
                raise self._error(dict_id, seq, exc.reason) from None
            if d is None:
                raise self._error(dict_id, seq, "the server holds no such dictionary")
            try:  # a body that verifies may still hold bytes zstd refuses (crafted): found here, once
                got = decoding_tables(d.data, d.digest)
            except ValueError as exc:
                raise self._error(dict_id, seq, str(exc)) from None
            self._server_tables[dict_id] = got
            return got

    def _error(self, dict_id: int, seq: int, why: str) -> CorruptionError:
        return CorruptionError(
            self._where,
            0,
            seq,
            f"the record needs dictionary {dict_id} of the journal, which cannot be used ({why}; "
            f"kept in {self._place(dict_id)}): restore it from a backup of the server (docs/REMOTE.md, "
            "'Dictionaries'); the records that do not name it read as before",
        )
