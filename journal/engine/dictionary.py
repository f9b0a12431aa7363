"""Trained zstd dictionaries of a journal (format version 4): the file codec, sans I/O, and the
few functions that load, list and install them through a FileSystem.

A journal directory holds each dictionary its frames name in ``dict-<id:05d>.zdict``; a frame's
u16 dictionary id is that id (docs/FORMAT.md, "Dictionaries"). The file is written whole and its
directory fsync'd before any frame naming it is written, and never changed afterwards, so a
reader loads and verifies it once (DictionaryCache). Its layout:

    magic b"JRNLDIC\\0", u16 file version (1), u16 id, u32 data length, 16-byte digest (blake2b-128
    of the data), the data, u64 XXH64 (seed 0) of everything before it.

The digest is the dictionary's identity across journals and stores: installing one whose digest
a file of the journal already holds reuses that file (and its id).
"""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import re
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import xxhash
import zstandard

from journal.engine import native
from journal.errors import CorruptionError, InvalidArgumentError, UnexpectedFileError, UnexpectedLinkError
from journal.fs import FileSystem, pread_upto, write_atomic

DICTIONARY_BYTES_MIN = 256  # zstd needs some content to be a dictionary at all
DICTIONARY_BYTES_MAX = 1024 * 1024  # bounds what a reader loads and keeps per dictionary
DICTIONARY_ID_MIN = 1  # 0 in a frame means "no dictionary"
DICTIONARY_ID_MAX = 0xFFFF  # the frame header's field is a u16
DICTIONARY_DIGEST_BYTES = 16
DICTIONARY_FILE_MAGIC = b"JRNLDIC\x00"
DICTIONARY_FILE_VERSION = 1
# magic, file version, id, data length, digest; then the data, then u64 XXH64 (seed 0).
_HEAD = struct.Struct("<8sHHI16s")
DICTIONARY_FILE_HEAD_BYTES = _HEAD.size
_TAIL = struct.Struct("<Q")
DICTIONARY_FILE_TAIL_BYTES = _TAIL.size
# The largest file a reader takes: anything longer is refused before it is read whole.
DICTIONARY_FILE_BYTES_MAX = DICTIONARY_FILE_HEAD_BYTES + DICTIONARY_BYTES_MAX + DICTIONARY_FILE_TAIL_BYTES
_NAME = re.compile(r"dict-(\d{5})\.zdict")
ZSTD_LEVEL = 1  # encoding.ZSTD_LEVEL, repeated to keep this module a leaf
BLOCK_ZSTD_LEVEL = 3  # encoding.BLOCK_ZSTD_LEVEL, the same way (tests compare them)
_Context = TypeVar("_Context", zstandard.ZstdCompressor, zstandard.ZstdDecompressor)
# Tables' and contexts' key: (to compress, the dictionary's digest, the level; 0 to decompress).
_Key = tuple[bool, bytes, int]


def dictionary_file_name(dict_id: int) -> str:
    _check_id(dict_id)
    return f"dict-{dict_id:05d}.zdict"


def parse_dictionary_file_name(name: str) -> int | None:
    """The id a dictionary file name encodes, or None if the name is not a dictionary file's."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    dict_id = int(m.group(1))
    return dict_id if DICTIONARY_ID_MIN <= dict_id <= DICTIONARY_ID_MAX else None


def _check_id(dict_id: int) -> None:
    if isinstance(dict_id, bool) or not DICTIONARY_ID_MIN <= dict_id <= DICTIONARY_ID_MAX:
        raise ValueError(f"a dictionary id is {DICTIONARY_ID_MIN} to {DICTIONARY_ID_MAX}, not {dict_id!r}")


def digest_of(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DICTIONARY_DIGEST_BYTES).digest()


@dataclass(frozen=True)
class Dictionary:
    """A trained zstd dictionary: ``id`` is its preferred id (a journal that already uses that id
    for another dictionary gives it the next free one), ``path`` the file it was loaded from, if
    any (installing it in a journal on the same file system hard-links that file)."""

    id: int
    data: bytes
    path: str | None = None
    digest: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_id(self.id)
        if not isinstance(self.data, bytes):
            raise ValueError("a dictionary's data is bytes")
        if not DICTIONARY_BYTES_MIN <= len(self.data) <= DICTIONARY_BYTES_MAX:
            raise ValueError(
                f"a dictionary is {DICTIONARY_BYTES_MIN} to {DICTIONARY_BYTES_MAX} bytes, not {len(self.data)}"
            )
        object.__setattr__(self, "digest", digest_of(self.data))


def encode_dictionary_file(d: Dictionary) -> bytes:
    return _file_bytes(d.id, d.data, d.digest)


def _file_bytes(dict_id: int, data: bytes, digest: bytes) -> bytes:
    """The file of dictionary ``data`` (its ``digest`` given: computing it hashes the data) as ``dict_id``."""
    body = _HEAD.pack(DICTIONARY_FILE_MAGIC, DICTIONARY_FILE_VERSION, dict_id, len(data), digest) + data
    return body + _TAIL.pack(xxhash.xxh64_intdigest(body, seed=0))


def _corrupt(name: str, reason: str) -> CorruptionError:
    return CorruptionError(name, 0, None, f"dictionary file {name}: {reason}")


def decode_dictionary_file(data: bytes | memoryview, name: str) -> Dictionary:
    """The dictionary in the bytes of the file called ``name`` (its id must be the one the name
    says); CorruptionError naming the file and what is wrong."""
    mv = memoryview(data)
    if mv.nbytes < DICTIONARY_FILE_HEAD_BYTES + DICTIONARY_FILE_TAIL_BYTES:
        raise _corrupt(name, f"{mv.nbytes} bytes, shorter than a header and checksum")
    magic, version, dict_id, length, digest = _HEAD.unpack_from(mv, 0)
    if magic != DICTIONARY_FILE_MAGIC:
        raise _corrupt(name, "bad magic: not a dictionary file")
    # The length is checked against the bytes there are before it is used for anything.
    if length != mv.nbytes - DICTIONARY_FILE_HEAD_BYTES - DICTIONARY_FILE_TAIL_BYTES:
        raise _corrupt(name, f"length field says {length} bytes of data, the file holds {mv.nbytes} bytes in all")
    end = DICTIONARY_FILE_HEAD_BYTES + length
    (checksum,) = _TAIL.unpack_from(mv, end)
    if checksum != xxhash.xxh64_intdigest(mv[:end], seed=0):
        raise _corrupt(name, "checksum mismatch")
    if version != DICTIONARY_FILE_VERSION:
        raise _corrupt(name, f"file version {version}, this version reads {DICTIONARY_FILE_VERSION}")
    if not DICTIONARY_BYTES_MIN <= length <= DICTIONARY_BYTES_MAX:
        raise _corrupt(name, f"{length} bytes of data, outside {DICTIONARY_BYTES_MIN}..{DICTIONARY_BYTES_MAX}")
    body = bytes(mv[DICTIONARY_FILE_HEAD_BYTES:end])
    if digest_of(body) != digest:
        raise _corrupt(name, "digest mismatch")
    named = parse_dictionary_file_name(os.path.basename(name))
    if named != dict_id:
        raise _corrupt(name, f"holds dictionary id {dict_id}, its name says {named}")
    try:  # a file that verifies may still hold bytes zstd refuses (crafted): found here, once
        decoding_tables(body, digest)
    except ValueError as exc:
        raise _corrupt(name, str(exc)) from None
    return Dictionary(dict_id, body)


def read_dictionary_file(fs: FileSystem, path: str) -> Dictionary:
    """Load and verify the dictionary file at ``path`` (never through a symbolic link: the file
    layer's open refuses one; never reading more than a dictionary file can be). Anything but a
    regular file there (a directory, a FIFO, a device) is CorruptionError naming it, as a file
    that does not verify is: each reader then loses only the frames that need it."""
    try:
        f = fs.open_read(path)
    except UnexpectedLinkError:
        raise
    except IsADirectoryError:
        raise _corrupt(path, "a directory, not a dictionary file") from None
    except UnexpectedFileError as exc:
        raise _corrupt(path, f"{exc.kind}, not a dictionary file") from None
    try:
        size = f.size()
        if size > DICTIONARY_FILE_BYTES_MAX:
            raise _corrupt(path, f"{size} bytes, more than a dictionary file holds ({DICTIONARY_FILE_BYTES_MAX})")
        data = pread_upto(f, DICTIONARY_FILE_BYTES_MAX + 1, 0)
    finally:
        f.close()
    if len(data) > DICTIONARY_FILE_BYTES_MAX:  # grew since the size was taken
        raise _corrupt(path, f"more than a dictionary file holds ({DICTIONARY_FILE_BYTES_MAX} bytes)")
    got = decode_dictionary_file(data, path)
    return Dictionary(got.id, got.data, path)


def load_dictionary(fs: FileSystem, journal_dir: str, dict_id: int) -> Dictionary:
    """The dictionary ``dict_id`` of the journal in ``journal_dir``: FileNotFoundError when it has
    no such file, CorruptionError when the file does not verify, UnexpectedLinkError for a link."""
    return read_dictionary_file(fs, os.path.join(journal_dir, dictionary_file_name(dict_id)))


def dictionary_ids(fs: FileSystem, journal_dir: str) -> list[int]:
    """The ids of the dictionary files in ``journal_dir``, ascending (their contents unread)."""
    ids = [parse_dictionary_file_name(n) for n in fs.listdir(journal_dir)]
    return sorted(i for i in ids if i is not None)


def install_dictionary(fs: FileSystem, journal_dir: str, d: Dictionary) -> int:
    """Make ``d`` a dictionary of the journal in ``journal_dir`` and return the id its frames
    carry: that of a file already holding the same digest; else ``d.id`` if free (hard-linked
    from ``d.path`` when that file holds the same bytes and the link can be made, else written);
    else the lowest free id. The file is durable (directory fsync'd) when this returns, before
    any frame naming it is written. The caller holds the journal's writer lock."""
    ids = dictionary_ids(fs, journal_dir)
    for i in ids:
        try:
            existing = load_dictionary(fs, journal_dir, i)
        except (CorruptionError, UnexpectedLinkError, FileNotFoundError):
            continue  # a damaged file is never reused; its id stays taken (verify reports it)
        if existing.digest == d.digest:
            return i
    taken = set(ids)
    target = d.id
    if target in taken:
        free = [i for i in range(DICTIONARY_ID_MIN, DICTIONARY_ID_MAX + 1) if i not in taken]
        if not free:
            raise InvalidArgumentError(
                f"the journal in {journal_dir} already holds {len(taken)} dictionary files, every id "
                f"{DICTIONARY_ID_MIN} to {DICTIONARY_ID_MAX}: open it with one of those dictionaries (the same bytes "
                "reuse its id) or without one; nothing was written"
            )
        target = free[0]
    path = os.path.join(journal_dir, dictionary_file_name(target))
    if target == d.id and d.path is not None and _links(fs, d, path):
        fs.fsync_dir(journal_dir)
        return target
    write_atomic(fs, path, _file_bytes(target, d.data, d.digest))
    return target


def keep_dictionary_file(fs: FileSystem, journal_dir: str, dict_id: int, d: Dictionary) -> bool:
    """Make sure the file of dictionary ``dict_id`` in the journal in ``journal_dir`` holds ``d``,
    the dictionary a writer's frames name with that id: a file removed since the writer
    installed it (by hand, by a clean-up) is written again from ``d``, durable when this returns
    (True). A file there that is not ``d`` raises CorruptionError (other bytes, damaged) or
    UnexpectedLinkError (a link): frames written on would name a dictionary no reader can use.
    A writer calls it before a new segment takes frames, before a copy and at close, so that
    the journal's directory holds every dictionary its frames name (it reads back on its own)."""
    path = os.path.join(journal_dir, dictionary_file_name(dict_id))
    # What the file holds when it is ``d``: compared byte for byte, a read and a memcmp (a full
    # verify hashes the data twice and loads it into zstd: ~0.2 ms for 64 KiB, at every close).
    want = _file_bytes(dict_id, d.data, d.digest)
    try:
        f = fs.open_read(path)  # never through a link, never a FIFO (the file layer's open)
    except FileNotFoundError:
        write_atomic(fs, path, want)
        return True
    except OSError:
        f = None  # a link, a directory, ...: the full read below says which, as a reader would
    if f is not None:
        try:
            got = pread_upto(f, len(want) + 1, 0)
        finally:
            f.close()
        if got == want:
            return False
    found = read_dictionary_file(fs, path)  # raises for anything that is not a dictionary file
    if found.digest != d.digest:
        raise _corrupt(
            path,
            "holds another dictionary than the one this writer's frames name with its id (replaced since the "
            "journal was opened); the writer stops: put the dictionary back (a store keeps it in its "
            "dictionaries/ folder) and reopen the journal",
        )
    return False  # the same dictionary, written otherwise (not by this engine): it reads the same


def _links(fs: FileSystem, d: Dictionary, path: str) -> bool:
    """Hard-link ``d.path`` to ``path`` if that file holds ``d`` (same id and bytes): True if
    linked. Another file system (EXDEV), a file system without links, or a file that changed or
    is gone: False, and the caller writes a copy."""
    src = d.path
    if src is None:
        return False
    try:
        got = read_dictionary_file(fs, src)
    except (CorruptionError, UnexpectedLinkError, OSError):
        return False
    if got.id != d.id or got.data != d.data:
        return False
    try:
        fs.link(src, path)
    except UnexpectedLinkError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    # What was linked is what the name held then: a file put there since the check above (the
    # store's file replaced by another of the same id) would have frames compressed with ``d``
    # name other bytes. The link is checked as readers will read it, and replaced by a copy.
    try:
        linked = read_dictionary_file(fs, path)
    except (CorruptionError, UnexpectedLinkError, OSError):
        linked = None
    if linked is None or linked.data != d.data:
        fs.unlink(path)
        return False
    return True


# --- zstd's tables of a dictionary, one set per process -----------------------------------------
#
# zstd digests a dictionary into tables (a DDict to decompress, a CDict per level to compress)
# that weigh a few times its bytes, and every context that uses one (a ZstdDecompressor, a
# ZstdCompressor) weighs ~100 KiB more. Made per open handle, 1,000 sessions open with one 32 KiB
# dictionary took ~100 KiB each read-only and ~250 KiB each writable (20 and 50 times a handle
# without one; ~1 MiB and more each with a 1 MiB dictionary). The tables are therefore shared by
# digest across the handles of the process (kept while a handle uses them, and the few made last
# kept a while longer for the next open), and the contexts are kept per thread by digest, a few
# at most: the memory a process spends on dictionaries follows the dictionaries it uses, not the
# handles it has open. A writable dictionary has CDicts at two levels (ZSTD_LEVEL for records
# framed alone, BLOCK_ZSTD_LEVEL for blocks): at level 3 they take ~0.3 MiB each beside ~0.1 MiB
# at level 1, once per dictionary in the process.

TABLES_RECENT_MAX = 8  # tables kept after their last handle closed (for the next open's reuse)
# (De)compressors one thread keeps: a dictionary takes up to three (a compressor at each of the
# two levels, a decompressor), so a thread writing with four dictionaries keeps all of them.
CONTEXTS_PER_THREAD_MAX = 12
_EMPTY_FRAME = zstandard.ZstdCompressor(write_content_size=True).compress(b"")


class DecodingTables:
    """The DDict of one dictionary, made once (never lazily in a reader's thread)."""

    __slots__ = ("__weakref__", "digest", "key", "zdict")

    def __init__(self, data: bytes, digest: bytes) -> None:
        self.digest = digest
        self.key: _Key = (False, digest, 0)  # of its decompressor in a thread's contexts
        self.zdict = zstandard.ZstdCompressionDict(data)
        try:
            # zstd makes the DDict on the first decompression: here, once, under _tables_mu.
            zstandard.ZstdDecompressor(dict_data=self.zdict).decompress(_EMPTY_FRAME)
        except zstandard.ZstdError as exc:
            raise ValueError(f"zstd cannot load it as a dictionary ({exc})") from None


def _package_cdict(data: bytes, level: int) -> zstandard.ZstdCompressionDict:
    cdict = zstandard.ZstdCompressionDict(data)
    try:
        cdict.precompute_compress(level=level)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd cannot load it as a dictionary ({exc})") from None
    return cdict


def _held_cdict(data: bytes, level: int) -> object | None:
    """The GIL-held compressor's CDict at ``level``; None where it is not built (or, for another
    level than its own, was built before it took one: the package then compresses)."""
    if native.held_compress_with is None:
        return None
    try:
        if level == ZSTD_LEVEL:  # the module's own LEVEL (tests compare them)
            make = native.held_make_cdict
            return None if make is None else make(data)
        make_at = native.held_make_cdict_at
        return None if make_at is None else make_at(data, level)
    except MemoryError:
        raise ValueError("zstd cannot load it as a dictionary (the held compressor's tables)") from None


class _Encoding:
    """The CDicts of one dictionary at ZSTD_LEVEL, for records, and at BLOCK_ZSTD_LEVEL, for
    block frames (a CDict fixes the level of every frame compressed with it; the same ones where
    the two levels are one): the zstandard package's and the GIL-held compressor's
    (native/zstd_held.c; None where it is not built)."""

    __slots__ = ("__weakref__", "block_cdict", "block_key", "cdict", "digest", "held", "held_block", "key")

    def __init__(self, data: bytes, digest: bytes) -> None:
        self.digest = digest
        # Of its compressors in a thread's contexts (the level tells the block one apart).
        self.key: _Key = (True, digest, ZSTD_LEVEL)
        self.block_key: _Key = (True, digest, BLOCK_ZSTD_LEVEL)
        self.cdict = _package_cdict(data, ZSTD_LEVEL)
        self.held = _held_cdict(data, ZSTD_LEVEL)
        if BLOCK_ZSTD_LEVEL == ZSTD_LEVEL:
            self.block_cdict, self.held_block = self.cdict, self.held
        else:
            self.block_cdict = _package_cdict(data, BLOCK_ZSTD_LEVEL)
            self.held_block = _held_cdict(data, BLOCK_ZSTD_LEVEL)


_tables_mu = threading.Lock()
_decodings: weakref.WeakValueDictionary[bytes, DecodingTables] = weakref.WeakValueDictionary()
_encodings: weakref.WeakValueDictionary[bytes, _Encoding] = weakref.WeakValueDictionary()
_recent: collections.OrderedDict[_Key, DecodingTables | _Encoding] = collections.OrderedDict()
_contexts = threading.local()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held the lock as one forked: the child has no such
    # thread to release it, and its first dictionary would wait forever.
    global _tables_mu
    _tables_mu = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _keep_recent(key: _Key, tables: DecodingTables | _Encoding) -> None:
    _recent[key] = tables
    _recent.move_to_end(key)
    while len(_recent) > TABLES_RECENT_MAX:
        _recent.popitem(last=False)


def decoding_tables(data: bytes, digest: bytes) -> DecodingTables:
    """The process's DDict of the dictionary ``data`` (of ``digest``): ValueError when zstd
    cannot load it."""
    with _tables_mu:
        got = _decodings.get(digest)
        if got is None:
            got = _decodings[digest] = DecodingTables(data, digest)
        _keep_recent(got.key, got)
        return got


def encoding_tables(data: bytes, digest: bytes) -> _Encoding:
    """The process's CDicts of the dictionary ``data`` (of ``digest``): ValueError when zstd
    cannot load it to compress or to decompress (a writer never writes a frame no reader reads)."""
    decoding_tables(data, digest)
    with _tables_mu:
        got = _encodings.get(digest)
        if got is None:
            got = _encodings[digest] = _Encoding(data, digest)
        _keep_recent(got.key, got)
        return got


def checked_tables(dictionary: Dictionary) -> _Encoding:
    """The process's tables to compress with ``dictionary``: InvalidArgumentError when zstd
    cannot load it (a writer's open asks before it writes anything)."""
    try:
        return encoding_tables(dictionary.data, dictionary.digest)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"dictionary {dictionary.id} cannot be used: {exc}; give one trained by zstd (zstandard.train_dictionary)"
        ) from None


def _thread_context(key: _Key, make: Callable[[], _Context]) -> _Context:
    """This thread's (de)compressor for ``key``, made by ``make`` the first time; the thread
    keeps CONTEXTS_PER_THREAD_MAX, the oldest made leaving first."""
    per_thread: dict[_Key, _Context] | None = getattr(_contexts, "by_digest", None)
    if per_thread is None:
        per_thread = _contexts.by_digest = {}
    got = per_thread.get(key)
    if got is None:
        if len(per_thread) >= CONTEXTS_PER_THREAD_MAX:
            del per_thread[next(iter(per_thread))]
        got = per_thread[key] = make()
    return got


class DictionaryUse:
    """The dictionary a writable handle compresses with: the id its frames carry in this journal
    and the process's tables for it. ``active`` turns on once the live segment is of a version
    that may hold dictionary frames (a live segment is only ever followed by a newer one).
    InvalidArgumentError for a dictionary zstd cannot load."""

    __slots__ = ("_tables", "active", "dict_id", "dictionary", "held", "held_block")

    def __init__(self, dict_id: int, dictionary: Dictionary) -> None:
        self.dict_id = dict_id
        self.dictionary = dictionary
        self.active = False
        self._tables = checked_tables(dictionary)
        # The GIL-held compressor's tables (None where it is not built): encoding._compressed
        # uses them up to its input limit, the block ones for a block frame.
        self.held: object | None = self._tables.held
        self.held_block: object | None = self._tables.held_block

    def compressor(self, block: bool = False) -> zstandard.ZstdCompressor:
        """This thread's compressor with the dictionary, for a block frame's records
        (``block``: at BLOCK_ZSTD_LEVEL) or a record's (at ZSTD_LEVEL)."""
        tables = self._tables
        key, cdict = (tables.block_key, tables.block_cdict) if block else (tables.key, tables.cdict)
        # No content size or dict id in the zstd frame: the journal frame has them. zstd's
        # content checksum (of the raw bytes) is what tells a dictionary file other than the one
        # the frame was compressed with (docs/FORMAT.md, "Dictionaries"). The level is the
        # CDict's (the key's), which zstd would use whatever this one said.
        return _thread_context(
            key,
            lambda: zstandard.ZstdCompressor(
                dict_data=cdict,
                level=key[2],
                write_content_size=False,
                write_checksum=True,
                write_dict_id=False,
            ),
        )


# --- readers ----------------------------------------------------------------------------------


def thread_decompressor(tables: DecodingTables) -> zstandard.ZstdDecompressor:
    """This thread's decompressor over the process's ``tables`` (decoding_tables): what every
    reader of a dictionary frame, on files or on a server, decompresses with."""
    per_thread = getattr(_contexts, "by_digest", None)  # the common case first: no call
    got = None if per_thread is None else per_thread.get(tables.key)
    if got is None:
        zdict = tables.zdict
        got = _thread_context(tables.key, lambda: zstandard.ZstdDecompressor(dict_data=zdict))
    return got


class DictionaryCache:
    """The dictionaries of one journal directory, each loaded and verified once (thread-safe);
    their tables and decompressors are the process's (above)."""

    def __init__(self, fs: FileSystem, journal_dir: str) -> None:
        self._fs = fs
        self._dir = journal_dir
        self._mu = threading.Lock()
        self._dicts: dict[int, DecodingTables] = {}

    def decompressor(self, dict_id: int, segment: str, offset: int, seq: int) -> zstandard.ZstdDecompressor:
        """A decompressor for frames naming ``dict_id``; CorruptionError naming the dictionary
        file and the frame (``segment``, ``offset``, ``seq``) when the file is missing or damaged."""
        tables = self._dicts.get(dict_id)
        if tables is None:
            tables = self._load(dict_id, segment, offset, seq)
        return thread_decompressor(tables)

    def _load(self, dict_id: int, segment: str, offset: int, seq: int) -> DecodingTables:
        with self._mu:
            got = self._dicts.get(dict_id)
            if got is not None:
                return got
            try:
                _check_id(dict_id)
                name = dictionary_file_name(dict_id)
                d = load_dictionary(self._fs, self._dir, dict_id)
            except ValueError:
                raise dictionary_error(segment, offset, seq, f"dictionary id {dict_id}", "no such id") from None
            except FileNotFoundError:
                raise dictionary_error(segment, offset, seq, name, "the file is missing") from None
            except (CorruptionError, UnexpectedLinkError) as exc:
                why = exc.reason if isinstance(exc, CorruptionError) else str(exc)
                raise dictionary_error(segment, offset, seq, name, why) from None
            got = self._dicts[dict_id] = decoding_tables(d.data, d.digest)  # verified loadable by decode
            return got


def undecodable_hint(dict_id: int) -> str:
    """What a frame naming dictionary ``dict_id`` that does not decode may mean besides damage to
    its segment: its dictionary file verifies but is another one (zstd's content checksum fails,
    docs/FORMAT.md "Dictionaries"); salvaging first would drop records that the right file reads."""
    if not dict_id:
        return ""
    return (
        f" (the frame names dictionary {dictionary_file_name(dict_id)}: if that file was replaced or copied in from "
        "elsewhere, put the journal's own back first; it decodes them again)"
    )


def dictionary_error(segment: str, offset: int, seq: int, name: str, why: str) -> CorruptionError:
    return CorruptionError(
        segment,
        offset,
        seq,
        f"the frame needs dictionary {name} of the journal directory, which cannot be used ({why}); restore that "
        "file from a copy of the journal (`journal salvage` keeps every record that does not need it)",
    )


class _NoDictionaries(DictionaryCache):
    """What a segment of a format version before 4 resolves a dictionary id with: such a segment
    never holds a frame naming one (a writer continuing it writes without), so a genuine frame
    that does is corruption, not a newer format (its segment's header says which version wrote it)."""

    def __init__(self) -> None:
        pass

    def decompressor(self, dict_id: int, segment: str, offset: int, seq: int) -> zstandard.ZstdDecompressor:
        raise CorruptionError(
            segment,
            offset,
            seq,
            f"the frame names dictionary {dict_id} in a segment of a format version before "
            f"{DICT_FORMAT_VERSION_MIN}, which never holds one",
        )


NO_DICTIONARIES: DictionaryCache = _NoDictionaries()
DICT_FORMAT_VERSION_MIN = 4  # format.DICT_FORMAT_VERSION_MIN (tests/test_dictionary.py holds them equal)


def for_segment(dicts: DictionaryCache | None, version: int) -> DictionaryCache | None:
    """``dicts`` for the frames of a segment of format ``version``: NO_DICTIONARIES before 4."""
    return dicts if version >= DICT_FORMAT_VERSION_MIN else NO_DICTIONARIES
