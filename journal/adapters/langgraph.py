"""LangGraph's checkpoint saver on journals: ``JournalSaver(path)`` (docs/ADAPTERS.md, "LangGraph").

    from journal.adapters.langgraph import JournalSaver
    graph = builder.compile(checkpointer=JournalSaver("checkpoints"))
    graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

A ``langgraph.checkpoint.base.BaseCheckpointSaver`` with every sync method and its async twin.

Storage. One journal per LangGraph thread, in ``<path>/threads/<name>``, where ``<name>`` is
``t`` followed by the thread id's UTF-8 bytes in lowercase base32 without padding: a thread id is
never used as a path component itself (``../x``, ``a/b``, ``.`` and ids differing only in case
all get distinct, harmless names, and decoding a name gives the id back). Each record is one of
two kinds (shown as the dict ``record_event`` gives back):

* ``{"k": "cp", "ns", "id", "parent", "cp": [type, data], "md": [type, data], "blobs": [[channel,
  version, type, data], ...]}``: one ``put``. ``cp`` is the checkpoint without its channel values;
  ``blobs`` holds a value only for the channels in ``new_versions`` (a reader rebuilds
  ``channel_values`` from the blob stored at each channel's version in ``channel_versions``), so
  a step stores what changed, never the whole state again. The checkpoint and its blobs are one
  record: they land together or not at all.
* ``{"k": "w", "ns", "cp", "task", "path", "w": [[idx, channel, type, data], ...]}``: one
  ``put_writes``, only the writes it actually adds (an ordinary write whose (task, idx) is
  already stored is dropped: the first one wins; the special channels of ``WRITES_IDX_MAP``
  overwrite, and the last record wins on read).

Values are the saver's serde (``dumps_typed``: type and data). Record format v2 (written now):
a bytes event, one version byte (2) and one codec byte (0 raw, 1 zstd), then the dict above in
msgpack with each value's data as raw bytes; the saver compresses a record of 1 KiB or more
(zstd level 1) and the engine's own compression is off for its journals. Format v1 (written by
earlier versions, still read): a JSON event, each data in base64. A record is bounded by
``record_size_bytes_max`` (16 MiB by default) before compression: a larger checkpoint step or
write batch is refused with ``CheckpointTooLargeError`` and nothing of it is written.

A thread's journal is made in a dot-named directory beside its place and renamed in once whole
(the rename fsync'd), so a crash never leaves a half-made journal under a thread's name.

Index. The first use of a thread opens its journal and reads it once into an in-memory index
(checkpoint id -> seq, parent and metadata as stored, decoded on each use; (ns, channel,
version) -> seq of its blob; pending writes -> seq), so reads fetch records by seq
(``Journal.get``) and never rescan. Opening decodes no value, only the records' envelopes.

Durability. Every record is appended at "sync" (fdatasync'd before the call returns), so the
pending writes of a finished task are durable before ``put_writes`` returns, hence before any
later checkpoint can be put or observed: a crash between ``put_writes`` and ``put`` never makes
a finished task run again. An outcome other than Committed raises ``CheckpointNotSavedError``;
after an AckLost the thread's journal is closed and reopened on next use, so the index is rebuilt
from what is really on disk.

Concurrency. LangGraph calls ``put_writes`` of parallel tasks from a thread pool: each thread's
index is guarded by its own lock, held across the first-one-wins check and the append. A thread's
journal is locked for writing by this process (the journal's writer lock): one saver per
directory at a time. The async methods run the same code off the event loop
(``asyncio.to_thread``); writes are shielded, so a cancelled caller never cuts a started write.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import os
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from journal.errors import MissingExtraError

try:  # the framework comes with the langgraph extra; without it, say so (not a bare ModuleNotFoundError)
    import ormsgpack
    import zstandard
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde import _msgpack as _lg_msgpack
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import (
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_DELTA_SNAPSHOT,
        EXT_METHOD_SINGLE_ARG,
        EXT_NUMPY_ARRAY,
        EXT_PYDANTIC_V1,
        EXT_PYDANTIC_V2,
        JsonPlusSerializer,
    )
except ImportError as exc:
    raise MissingExtraError(__name__, "LangGraph 1.1 and langgraph-checkpoint 4.3 or later", "langgraph", exc) from exc

import journal
from journal.api import (
    Committed,
    EventNotSerializableError,
    InvalidArgumentError,
    InvariantError,
    Journal,
    JournalError,
    Record,
    RecordTooLargeError,
    Retention,
    Store,
)
from journal.errors import ForeignRecordError, ForeignValueError

THREADS_DIR = "threads"  # on files, the directory of thread journals under the saver's path
LEGACY_TRASH_DIR = "trash"  # where earlier versions renamed deleted threads: emptied on open
_NAME_PREFIX = "t"
# A directory name must fit NAME_MAX (255 bytes): base32 turns 5 bytes into 8 characters.
THREAD_ID_BYTES_MAX = 150
DURABILITY = "sync"
# Threads whose journals stay open at once (each holds two descriptors at most: its live
# segment and its lock); the least recently used idle one is closed past this, and reopened
# (its index rebuilt by one read) on its next use. A server with many threads stays within its
# descriptor limit.
THREADS_OPEN_MAX_DEFAULT = 256
PRUNE_STRATEGIES = ("keep_latest", "delete")
RECORD_SIZE_BYTES_MAX_DEFAULT = 16 * 1024 * 1024  # the engine's default: a record's bytes before compression
# The record format (module doc): v1 records (earlier versions) are JSON events, values in base64;
# v2 records are bytes events, a version byte and a codec byte, then the same event in msgpack,
# values as raw bytes, zstd-compressed when it is at least COMPRESS_MIN_BYTES. Both are read.
RECORD_VERSION = 2
CODEC_RAW, CODEC_ZSTD = 0, 1
# The saver compresses, not the engine (its journals are opened with compress=False): zstd's
# fixed cost per frame (its entropy tables) made the engine's compression of every record of
# 256 bytes or more ~140k instructions of a LangGraph step's ~500k, and a small record gains
# little (bench/bench_langgraph_cpu.py; bench/README.md).
COMPRESS_MIN_BYTES = 1024
ZSTD_LEVEL = 1
_RAW_HEAD = bytes([RECORD_VERSION, CODEC_RAW])
_ZSTD_HEAD = bytes([RECORD_VERSION, CODEC_ZSTD])
_local = threading.local()  # a zstd context per thread: they are not thread-safe


class CheckpointNotSavedError(JournalError):
    """A checkpoint or a batch of writes did not reach the journal (or may not have)."""


class CheckpointTooLargeError(JournalError, ValueError):
    """One put or put_writes would make a record over the journal's record_size_bytes_max."""


class MissingRecordError(JournalError):
    """A record the index names is not in the thread's journal (someone changed its files)."""


class ThreadIdError(JournalError, ValueError):
    """A thread id this saver cannot store (empty, not a str, or too long for a directory name)."""


class ThreadExistsError(JournalError, ValueError):
    """copy_thread's target thread already holds checkpoints; nothing was copied."""


def thread_dir_name(thread_id: str) -> str:
    """The directory name of a thread: unambiguous, reversible, safe as one path component."""
    if not isinstance(thread_id, str) or not thread_id:
        raise ThreadIdError(f"thread_id must be a non-empty str, not {thread_id!r}")
    raw = thread_id.encode("utf-8", "surrogatepass")
    if len(raw) > THREAD_ID_BYTES_MAX:
        raise ThreadIdError(f"thread_id is {len(raw)} bytes in UTF-8; at most {THREAD_ID_BYTES_MAX} can be stored")
    return _NAME_PREFIX + base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def thread_id_of(name: str) -> str | None:
    """The thread id a directory name encodes, or None if it is not one of ours."""
    if not name.startswith(_NAME_PREFIX):
        return None
    body = name[len(_NAME_PREFIX) :].upper()
    try:
        raw = base64.b32decode(body + "=" * (-len(body) % 8))
        thread_id = raw.decode("utf-8", "surrogatepass")
    except (ValueError, UnicodeDecodeError):
        return None
    return thread_id if thread_dir_name(thread_id) == name else None


def _compressor() -> zstandard.ZstdCompressor:
    c: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if c is None:  # the content size is written: a reader decompresses in one call
        c = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False, write_dict_id=False)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _pack(event: dict[str, Any], size_max: int) -> bytes:
    """A record (v2) as stored: version and codec bytes, then the event in msgpack, compressed if
    it pays. Raises RecordTooLargeError (nothing written) over ``size_max`` bytes before compression."""
    try:
        body = ormsgpack.packb(event)
    except ormsgpack.MsgpackEncodeError as e:  # a str msgpack cannot hold (a lone surrogate)
        raise EventNotSerializableError(str(e)) from None
    if len(body) > size_max:
        raise RecordTooLargeError(len(body), size_max)
    if len(body) >= COMPRESS_MIN_BYTES:
        packed = _compressor().compress(body)
        if len(packed) < len(body):
            return _ZSTD_HEAD + packed
    return _RAW_HEAD + body


def record_event(
    rec: Record, *, path: str = "a thread journal", size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT
) -> dict[str, Any]:
    """A record's event, in the v2 shape whichever version it was written in.

    Every field is checked to be of the shape the saver writes (``_shape_error``): a record of
    another shape, or bytes that are not a record of ours, raise ``ForeignRecordError`` naming
    ``path`` and the seq, never a KeyError or a TypeError further on. A compressed record whose
    content is over ``size_bytes_max`` (the saver's ``record_size_bytes_max``) is refused before
    anything is allocated for it. No value is decoded here (values are the serde's, on use)."""
    try:
        event = _from_v1(rec.event) if not rec.is_bytes else _unpack(rec.payload, size_bytes_max)
    except (ValueError, TypeError, KeyError, IndexError, zstandard.ZstdError) as e:
        raise ForeignRecordError(path, rec.seq, f"a LangGraph record that cannot be read ({e})") from None
    why = _shape_error(event)
    if why is not None:
        raise ForeignRecordError(path, rec.seq, f"a LangGraph record with {why}")
    return event


def _unpack(payload: bytes, size_bytes_max: int) -> Any:
    """A v2 record's event (module doc): version and codec bytes, then msgpack, maybe in zstd."""
    head = payload[:2]
    body = memoryview(payload)[2:]
    if head == _RAW_HEAD:
        return ormsgpack.unpackb(body)
    if head == _ZSTD_HEAD:
        # zstandard allocates a frame's declared content size whatever max_output_size says:
        # the declaration is checked first (an undeclared size is bounded by max_output_size).
        declared = zstandard.frame_content_size(body)
        if declared > size_bytes_max:
            raise ValueError(f"its compressed content declares {declared} bytes, over record_size_bytes_max="
                             f"{size_bytes_max}")
        return ormsgpack.unpackb(_decompressor().decompress(body, max_output_size=size_bytes_max))
    raise ValueError(f"it is of an unknown format (it starts {bytes(head)!r}); a newer version of this adapter "
                     "may have written it")


def _is_typed(value: Any) -> bool:
    """Whether ``value`` is a serde output as stored: [type, data]."""
    return (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], (bytes, bytearray)))


def _is_row(value: Any, first: type) -> bool:
    """Whether ``value`` is a blob ([channel, version, type, data]: ``first`` str) or a write
    ([idx, channel, type, data]: ``first`` int) as stored."""
    return (isinstance(value, (list, tuple)) and len(value) == 4 and isinstance(value[0], first)
            and isinstance(value[1], str) and _is_typed(value[2:]))


def _shape_error(event: Any) -> str | None:
    """What in ``event`` is not of the shape the saver writes (module doc), or None."""
    if not isinstance(event, dict):
        return f"a {type(event).__name__} where a map is written"
    kind = event.get("k")
    if not isinstance(event.get("ns"), str):
        return "no str namespace (ns)"
    if kind == "cp":
        if not isinstance(event.get("id"), str):
            return "no str checkpoint id"
        if event.get("parent") is not None and not isinstance(event["parent"], str):
            return "a parent that is not a str"
        if not (_is_typed(event.get("cp")) and _is_typed(event.get("md"))):
            return "a checkpoint or metadata that is not [type, data]"
        blobs = event.get("blobs")
        if not isinstance(blobs, list) or not all(_is_row(b, str) for b in blobs):
            return "blobs that are not [channel, version, type, data] each"
        return None
    if kind == "w":
        if not all(isinstance(event.get(f), str) for f in ("cp", "task", "path")):
            return "no str checkpoint id, task or task path"
        writes = event.get("w")
        if not isinstance(writes, list) or not all(_is_row(w, int) for w in writes):
            return "writes that are not [idx, channel, type, data] each"
        return None
    return f"an unknown kind {kind!r}"


def _typed(value: Sequence[Any]) -> tuple[str, bytes]:
    """A stored [type, data] as the serde's loads_typed takes it."""
    return value[0], value[1]


def _from_v1(event: dict[str, Any]) -> dict[str, Any]:
    """A v1 record (JSON, values in base64) in the v2 shape (values as bytes)."""
    b64 = base64.b64decode
    out = dict(event)
    if event["k"] == "cp":
        out["cp"] = [event["cp"][0], b64(event["cp"][1])]
        out["md"] = [event["md"][0], b64(event["md"][1])]
        out["blobs"] = [[channel, version, kind, b64(text)] for channel, version, kind, text in event["blobs"]]
    elif event["k"] == "w":
        out["w"] = [[idx, channel, kind, b64(text)] for idx, channel, kind, text in event["w"]]
    return out


# ---- what the saver decodes (docs/ADAPTERS.md, "What each adapter decodes")

# The serde types JsonPlusSerializer writes (without pickle_fallback); "empty" is the saver's own.
DECODED_SERDE_TYPES = frozenset({"null", "bytes", "bytearray", "msgpack"})
# The msgpack extensions that name a type (module, name) LangGraph imports and calls on decode.
_EXT_NAMING_A_TYPE = frozenset({
    EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_POS_ARGS, EXT_CONSTRUCTOR_KW_ARGS, EXT_PYDANTIC_V1, EXT_PYDANTIC_V2,
})
_NUMPY_ARRAY = ("numpy", "ndarray")
_A_VALUE = "(a stored value)"  # the place a serializer names: the saver puts the journal and seq instead
_OWN_SERDE = "JournalSaver(path, serde=<a serializer that reads it>)"


def _allow(key: tuple[str, str]) -> str:
    return f"JournalSaver(path, allowed_types=[{key[1]}]) (the class, or the pair {key!r})"


def type_key(t: type | Sequence[str]) -> tuple[str, str]:
    """A type as LangGraph's msgpack names it: (module, name), from a class or such a pair."""
    if isinstance(t, type):
        return (t.__module__, t.__name__)
    if isinstance(t, (tuple, list)) and len(t) == 2 and all(isinstance(x, str) for x in t):
        return (t[0], t[1])
    raise InvalidArgumentError(f"an allowed type is a class or a (module, name) pair of str, not {t!r}")


class StrictSerializer(JsonPlusSerializer):
    """The saver's default serializer: LangGraph's ``JsonPlusSerializer``, writing what it
    writes, but reading back only what it could have written for this application.

    LangGraph's own default imports and calls any (module, name) a stored value names. This one
    decodes only the serde types in ``DECODED_SERDE_TYPES``, and msgpack values whose every
    extension names a type in LangGraph's safe list (``SAFE_MSGPACK_TYPES``: datetime, UUID,
    Decimal, set, deque, paths, langchain_core's messages and Document, ``Send``, ``Interrupt``,
    ``Command``, ...) or in ``allowed_types`` (the application's own pydantic models, dataclasses,
    enums, named tuples; numpy arrays as ``numpy.ndarray``). Anything else raises
    ``ForeignValueError`` naming the type and the line that allows it; nothing is imported or
    called. The check reads the value once without constructing anything, then LangGraph's
    decoder, in its strict mode with the same allow-list, constructs it.
    """

    def __init__(self, *, allowed_types: Iterable[type | Sequence[str]] = ()) -> None:
        keys = frozenset(type_key(t) for t in allowed_types)
        # LangGraph's strict mode (its safe list and these), never its "allow everything".
        super().__init__(allowed_msgpack_modules=sorted(keys) or None)
        self.allowed_types = keys

    def with_msgpack_allowlist(self, extra_allowlist: Iterable[tuple[str, ...] | type]) -> StrictSerializer:
        """A serializer allowing ``extra_allowlist`` too (LangGraph's way to widen one)."""
        extra = frozenset(type_key(t) for t in extra_allowlist)
        return self if extra <= self.allowed_types else StrictSerializer(allowed_types=self.allowed_types | extra)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, raw = data
        if kind not in DECODED_SERDE_TYPES:
            raise ForeignValueError(_A_VALUE, None, f"(serde type {kind!r})", _OWN_SERDE)
        if kind == "msgpack":
            _check_msgpack(raw, self.allowed_types)
        try:
            return super().loads_typed(data)
        except ValueError as e:  # the check read it whole: not expected, but never untyped
            raise ForeignRecordError(_A_VALUE, None, f"a value LangGraph cannot decode ({e})") from None


def _check_msgpack(raw: bytes, allowed: frozenset[tuple[str, str]]) -> None:
    """Raise ForeignValueError unless every msgpack extension in ``raw`` is one LangGraph writes
    and names a type the saver decodes; ForeignRecordError if ``raw`` is not msgpack. Constructs
    nothing: each extension's payload is read (and its own extensions checked), then dropped."""
    refused: list[tuple[str, str]] = []  # (the type, how to allow it): the innermost first

    def hook(code: int, data: bytes) -> None:
        inner = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code == EXT_DELTA_SNAPSHOT:
            return None
        if code == EXT_NUMPY_ARRAY:
            if _NUMPY_ARRAY in allowed:
                return None
            refused.append(("numpy.ndarray", _allow(_NUMPY_ARRAY)))
        elif code in _EXT_NAMING_A_TYPE or code == EXT_METHOD_SINGLE_ARG:
            if not (isinstance(inner, list) and len(inner) >= 3 and isinstance(inner[0], str)
                    and isinstance(inner[1], str)):
                refused.append((f"(malformed msgpack extension {code})", _OWN_SERDE))
            elif code == EXT_METHOD_SINGLE_ARG:  # LangGraph calls only the methods of its own list
                method = inner[3] if len(inner) > 3 else None
                if (inner[0], inner[1], method) in _lg_msgpack.SAFE_MSGPACK_METHODS:
                    return None
                refused.append((f"{inner[0]}.{inner[1]}.{method}", _OWN_SERDE))
            else:
                key = (inner[0], inner[1])
                if key in _lg_msgpack.SAFE_MSGPACK_TYPES or key in allowed:
                    return None
                refused.append((f"{key[0]}.{key[1]}", _allow(key)))
        else:
            refused.append((f"(msgpack extension {code}, which LangGraph does not write)", _OWN_SERDE))
        # ormsgpack drops an ext_hook's exception for a ValueError of its own: what was refused
        # is in ``refused``.
        raise ValueError(refused[-1][0])

    try:
        ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    except ValueError as e:
        if refused:
            raise ForeignValueError(_A_VALUE, None, *refused[0]) from None
        raise ForeignRecordError(_A_VALUE, None, f"a value that is not msgpack ({e})") from None


@dataclass(slots=True)
class _CheckpointEntry:
    seq: int
    parent: str | None
    md: Sequence[Any]  # the metadata as stored, [type, data]: decoded on each use (a fresh copy)


@dataclass(slots=True)
class _WriteEntry:
    seq: int
    pos: int  # index in the record's "w" list
    task_path: str
    channel: str


@dataclass
class _Thread:
    """One open thread: its journal and the index of what it holds."""

    journal: Journal
    size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT  # the saver's record_size_bytes_max
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False  # closed by the saver (evicted, deleted, forgotten): open it again
    # ns -> checkpoint id -> entry
    checkpoints: dict[str, dict[str, _CheckpointEntry]] = field(default_factory=dict)
    # (ns, channel, version) -> (seq, index in the record's "blobs")
    blobs: dict[tuple[str, str, str], tuple[int, int]] = field(default_factory=dict)
    # (ns, checkpoint id) -> (task id, idx) -> entry
    writes: dict[tuple[str, str], dict[tuple[str, int], _WriteEntry]] = field(default_factory=dict)

    def reindex(self, serde: SerializerProtocol | None = None) -> None:
        """Rebuild the index from one read of the journal (open, and after a compaction). The
        index decodes no value: ``serde`` is not used (kept for callers that pass it)."""
        self.checkpoints, self.blobs, self.writes = {}, {}, {}
        for rec in self.journal.read():
            self.index(rec.seq, self.event(rec))

    def event(self, rec: Record) -> dict[str, Any]:
        """A record's event, checked (``record_event``)."""
        return record_event(rec, path=self.journal.path, size_bytes_max=self.size_bytes_max)

    def index(self, seq: int, event: dict[str, Any]) -> None:
        ns, kind = event["ns"], event["k"]
        if kind == "cp":
            self.checkpoints.setdefault(ns, {})[event["id"]] = _CheckpointEntry(seq, event["parent"], event["md"])
            blobs = self.blobs
            for pos, (channel, version, _kind, _data) in enumerate(event["blobs"]):
                blobs[(ns, channel, version)] = (seq, pos)  # stored as str(version)
        elif kind == "w":
            stored = self.writes.setdefault((ns, event["cp"]), {})
            task_id, task_path = event["task"], event["path"]
            for pos, (idx, channel, _kind, _data) in enumerate(event["w"]):
                stored[(task_id, idx)] = _WriteEntry(seq, pos, task_path, channel)


def _what(what: str, checkpoint_id: str) -> str:
    """A record's description for a message ("checkpoint <id>", "writes of task <t> on checkpoint <id>")."""
    return f"{what} {checkpoint_id}" if what == "checkpoint" else f"{what} on checkpoint {checkpoint_id}"


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing each thread in a journal under ``path`` (see the module doc).

    What it decodes: by default a ``StrictSerializer``, which reads back only the types LangGraph
    writes for a graph (its safe list: messages, ``Send``, ``Interrupt``, ``Command``, datetimes,
    ...) and ``allowed_types``, the application's own (pydantic models, dataclasses, enums, named
    tuples of its state); a stored value of any other type raises ``ForeignValueError`` and
    nothing is imported or called. ``serde=`` replaces it with the caller's serializer, decoding
    as that one does (LangGraph's plain ``JsonPlusSerializer()`` imports and calls whatever the
    stored bytes name: give it only journals you trust).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Iterable[type | Sequence[str]] = (),
        record_size_bytes_max: int | None = None,
        segment_size_bytes: int | None = None,
        threads_open_max: int = THREADS_OPEN_MAX_DEFAULT,
    ) -> None:
        allowed = list(allowed_types)
        if serde is not None and allowed:
            raise InvalidArgumentError("allowed_types widens the saver's own serializer; with serde=, give your "
                                       "serializer its allow-list instead (nothing was opened)")
        super().__init__(serde=serde if serde is not None else StrictSerializer(allowed_types=allowed))
        if isinstance(threads_open_max, bool) or not isinstance(threads_open_max, int) or threads_open_max < 1:
            raise ValueError(f"threads_open_max must be an int >= 1, not {threads_open_max!r}")
        self.threads_open_max = threads_open_max
        # The saver compresses what pays itself (see COMPRESS_MIN_BYTES), so the engine does not.
        self._options: dict[str, Any] = {"compress": False}
        self._record_size_max = RECORD_SIZE_BYTES_MAX_DEFAULT
        if record_size_bytes_max is not None:
            self._options["record_size_bytes_max"] = record_size_bytes_max
            self._record_size_max = record_size_bytes_max
        if segment_size_bytes is not None:  # what prune frees is whole segments: smaller ones free sooner
            self._options["segment_size_bytes"] = segment_size_bytes
        self._lock = threading.Lock()  # guards self._threads and changes to the set of threads
        self._threads: OrderedDict[str, _Thread] = OrderedDict()  # least recently used first
        self._closed = False
        if isinstance(path, str) and "://" in path:  # a server: its store is the saver's own
            self.path = path
            self._store: Store = journal.store(path)
        else:
            self.path = os.path.abspath(os.fspath(path))
            self._store = journal.store(os.path.join(self.path, THREADS_DIR))
            _empty_legacy_trash(self.path)

    @property
    def store(self) -> Store:
        """The journal store its threads' journals live in (the tool guard's go beside them:
        journal.adapters.langgraph_guard.guard_for)."""
        return self._store

    # ---- life of the saver and its threads

    def close(self) -> None:
        """Close every open thread's journal. Idempotent."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, OrderedDict()
        for t in threads.values():
            with t.lock:
                t.closed = True
                t.journal.close()

    def __enter__(self) -> JournalSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


    def _thread(self, thread_id: str, create: bool) -> _Thread | None:
        """The open thread, opening its journal and building its index on first use."""
        with self._lock:
            if self._closed:
                raise journal.JournalClosedError()
            t = self._threads.get(thread_id)
            if t is not None and not t.closed:
                self._threads.move_to_end(thread_id)
                return t
            if t is not None:  # forgotten after an unknown outcome: read from disk again
                del self._threads[thread_id]
            name = thread_dir_name(thread_id)
            if not create and not self._store.exists(name):
                return None
            self._evict()
            # The store makes a new thread's journal whole before it has the thread's name, so a
            # crash never leaves a half-made journal there (journal/engine/store.py).
            j = self._store.open(name, create=create, **self._options)
            t = _Thread(j, self._record_size_max)
            try:
                t.reindex(self.serde)
            except BaseException:
                j.close()
                raise
            self._threads[thread_id] = t
            return t

    def _evict(self, room: int = 1) -> None:
        """Close least recently used idle threads until ``room`` more fit (under self._lock).

        A thread in use (its lock held) is skipped, so while more threads than the bound are in
        use at once, that many stay open; each is closed when its use ends if still over. One
        taken by a caller that has not locked it yet is closed all the same, and that caller
        sees ``closed`` and opens it again."""
        for thread_id in list(self._threads):
            if len(self._threads) + room <= self.threads_open_max:
                return
            t = self._threads[thread_id]
            if not t.lock.acquire(blocking=False):
                continue
            try:
                del self._threads[thread_id]
                t.closed = True
                t.journal.close()
            finally:
                t.lock.release()

    def _acquire(self, thread_id: str, create: bool) -> _Thread | None:
        """The thread with its lock acquired (None if it does not exist and ``create`` is false);
        the caller hands it back with ``_release``."""
        while True:
            t = self._thread(thread_id, create)
            if t is None:
                return None
            t.lock.acquire()
            if not t.closed:
                return t
            t.lock.release()  # evicted or forgotten between the lookup and the lock: open again

    def _release(self, t: _Thread) -> None:
        t.lock.release()
        if len(self._threads) > self.threads_open_max:
            with self._lock:  # threads in use were skipped by the eviction: close them now
                self._evict(room=0)

    def _writable(self, thread_id: str) -> _Thread:
        """The thread, created if need be, with its lock acquired (``_release`` it)."""
        t = self._acquire(thread_id, create=True)
        if t is None:  # create=True opens or raises; a None here is this module's bug
            raise InvariantError(f"thread {thread_id!r} was not opened for writing")
        return t

    @contextmanager
    def _using(self, thread_id: str, create: bool) -> Iterator[_Thread | None]:
        """The thread with its lock held (None if it does not exist and ``create`` is false)."""
        t = self._acquire(thread_id, create)
        if t is None:
            yield None
            return
        try:
            yield t
        finally:
            self._release(t)

    @staticmethod
    def _forget(t: _Thread) -> None:
        """Close a thread whose last write's outcome is unknown (its lock held): the next use
        opens it again and reads the disk. Marked, not removed, so that no lock is taken while
        its lock is held (delete_thread takes them the other way round)."""
        t.closed = True
        t.journal.close()

    def _pack(self, thread_id: str, event: dict[str, Any], what: str, checkpoint_id: str) -> bytes:
        try:
            return _pack(event, self._record_size_max)
        except RecordTooLargeError as e:
            raise CheckpointTooLargeError(f"{_what(what, checkpoint_id)} of thread {thread_id!r} is too large "
                                          f"to store: {e}") from e

    def _append(self, thread_id: str, t: _Thread, payload: bytes, what: str, checkpoint_id: str) -> int:
        """Append one record at DURABILITY (its thread's lock held); its seq once durable."""
        try:
            out = t.journal.append(payload, durability=DURABILITY)
        except RecordTooLargeError as e:
            raise CheckpointTooLargeError(f"{_what(what, checkpoint_id)} of thread {thread_id!r} is too large "
                                          f"to store: {e}") from e
        if type(out) is Committed or isinstance(out, Committed):
            return out.seq
        if not isinstance(out, journal.NotCommitted):
            self._forget(t)
        raise CheckpointNotSavedError(f"{_what(what, checkpoint_id)} of thread {thread_id!r} was not saved "
                                      f"({out!r}); retry it")

    def _thread_ids(self) -> builtins.list[str]:
        return [tid for tid in (thread_id_of(name) for name in self._store.names()) if tid is not None]

    # ---- reading

    def _load_tuple(self, thread_id: str, t: _Thread, ns: str, checkpoint_id: str) -> CheckpointTuple:
        entry = t.checkpoints[ns][checkpoint_id]
        event = self._event(t, entry.seq)
        checkpoint = self._checkpoint(t, entry.seq, event)
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            where = t.blobs.get((ns, channel, str(version)))
            if where is None:
                continue
            blob_seq, pos = where
            blob_event = event if blob_seq == entry.seq else self._event(t, blob_seq)
            _, _, kind, data = blob_event["blobs"][pos]
            if kind == "empty":
                continue
            values[channel] = self._loads(t, blob_seq, (kind, data))
        stored = t.writes.get((ns, checkpoint_id), {})
        ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1].task_path, kv[0][0], kv[0][1]))
        pending: builtins.list[PendingWrite] = []
        for (task_id, _idx), w in ordered:
            _, channel, kind, data = self._event(t, w.seq)["w"][w.pos]
            pending.append((task_id, channel, self._loads(t, w.seq, (kind, data))))
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._metadata(t, entry),
            parent_config=_config(thread_id, ns, entry.parent) if entry.parent else None,
            pending_writes=pending,
        )

    def _loads(self, t: _Thread, seq: int, typed: tuple[str, bytes]) -> Any:
        """One stored value of record ``seq``, decoded by the serde. What the serde refuses, or
        fails to read, raises ForeignRecordError (ForeignValueError for a type it does not
        decode) naming the thread's journal and the seq."""
        try:
            return self.serde.loads_typed(typed)
        except ForeignValueError as e:
            raise ForeignValueError(t.journal.path, seq, e.type_name, e.allow) from None
        except ForeignRecordError as e:
            raise ForeignRecordError(t.journal.path, seq, e.why) from None
        except (ValueError, TypeError, NotImplementedError) as e:  # a serializer of the caller's
            raise ForeignRecordError(t.journal.path, seq, f"a value the serializer cannot read ({e!r})") from e

    def _checkpoint(self, t: _Thread, seq: int, event: dict[str, Any]) -> Checkpoint:
        """The checkpoint of a "cp" record, checked to be what ``put`` stores: a map whose id is
        the record's and whose channel versions map str channels to versions."""
        checkpoint = self._loads(t, seq, _typed(event["cp"]))
        versions = checkpoint.get("channel_versions") if isinstance(checkpoint, dict) else None
        if (not isinstance(versions, dict) or checkpoint.get("id") != event["id"]
                or not all(isinstance(c, str) and isinstance(v, (str, int, float)) for c, v in versions.items())):
            raise ForeignRecordError(t.journal.path, seq, "a checkpoint that is not a map of this record's id and "
                                                          "its channel versions")
        out: Checkpoint = checkpoint
        return out

    def _metadata(self, t: _Thread, entry: _CheckpointEntry) -> CheckpointMetadata:
        metadata = self._loads(t, entry.seq, _typed(entry.md))
        if not isinstance(metadata, dict):
            raise ForeignRecordError(t.journal.path, entry.seq, f"checkpoint metadata that is a "
                                                                f"{type(metadata).__name__}, not a map")
        return cast(CheckpointMetadata, metadata)

    @staticmethod
    def _event(t: _Thread, seq: int) -> dict[str, Any]:
        rec = t.journal.get(seq)
        if rec is None:  # the index names only records this handle committed or read
            raise MissingRecordError(f"record {seq} of {t.journal.path} is missing")
        return t.event(rec)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> JournalSaver:
        """LangGraph's hook to widen what the saver decodes (a graph compiled under
        ``LANGGRAPH_STRICT_MSGPACK=true`` passes its state's types): the saver's own serializer
        is widened in place and the saver itself returned, so the graph and its owner keep one
        saver (one lock per thread journal, one ``close``). A caller's ``serde=`` is LangGraph's
        business: its clone, as for any saver."""
        if isinstance(self.serde, StrictSerializer):
            self.serde = self.serde.with_msgpack_allowlist(extra_allowlist)
            return self
        clone = super().with_allowlist(extra_allowlist)
        if not isinstance(clone, JournalSaver):  # BaseCheckpointSaver's clone is a copy of self
            raise InvariantError("BaseCheckpointSaver.with_allowlist gave back another class")
        return clone

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        ns: str = configurable.get("checkpoint_ns", "")
        with self._using(thread_id, create=False) as t:
            if t is None:
                return None
            in_ns = t.checkpoints.get(ns)
            if not in_ns:
                return None
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id is None:
                checkpoint_id = max(in_ns)
            elif checkpoint_id not in in_ns:
                return None
            return self._load_tuple(thread_id, t, ns, checkpoint_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(self._list(config, filter=filter, before=before, limit=limit))

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None,  # noqa: A002
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        # Collected whole under each thread's lock, so a concurrent put never shows half an index.
        thread_ids = [config["configurable"]["thread_id"]] if config else self._thread_ids()
        want_ns = config["configurable"].get("checkpoint_ns") if config else None
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        out: builtins.list[CheckpointTuple] = []
        for thread_id in thread_ids:
            with self._using(thread_id, create=False) as t:
                if t is None:
                    continue
                for ns in sorted(t.checkpoints):
                    if want_ns is not None and ns != want_ns:
                        continue
                    for checkpoint_id in sorted(t.checkpoints[ns], reverse=True):
                        if limit is not None and len(out) >= limit:
                            return out
                        if want_id and checkpoint_id != want_id:
                            continue
                        if before_id and checkpoint_id >= before_id:
                            continue
                        if filter:
                            md = self._metadata(t, t.checkpoints[ns][checkpoint_id])
                            if not all(md.get(k) == v for k, v in filter.items()):
                                continue
                        out.append(self._load_tuple(thread_id, t, ns, checkpoint_id))
        return out

    # ---- writing

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        ns: str = configurable.get("checkpoint_ns", "")
        parent = configurable.get("checkpoint_id")
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", {})
        blobs = []
        dumps = self.serde.dumps_typed
        for channel, version in new_versions.items():
            typed = dumps(values[channel]) if channel in values else ("empty", b"")
            blobs.append([channel, str(version), *typed])
        event = {
            "k": "cp",
            "ns": ns,
            "id": checkpoint["id"],
            "parent": parent,
            "cp": self.serde.dumps_typed(c),  # a (type, data) tuple: msgpack stores it as an array
            "md": self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            "blobs": blobs,
        }
        what = "checkpoint"
        payload = self._pack(thread_id, event, what, checkpoint["id"])  # outside the lock
        t = self._writable(thread_id)
        try:
            t.index(self._append(thread_id, t, payload, what, checkpoint["id"]), event)
        finally:
            self._release(t)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        thread_id: str = configurable["thread_id"]
        ns: str = configurable.get("checkpoint_ns", "")
        checkpoint_id: str = configurable["checkpoint_id"]
        t = self._writable(thread_id)
        try:
            stored = t.writes.get((ns, checkpoint_id), {})
            batch = []
            dumps = self.serde.dumps_typed
            for i, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, i)
                if idx >= 0 and (task_id, idx) in stored:
                    continue  # an ordinary write is stored once: a retried task's first writes stand
                batch.append([idx, channel, *dumps(value)])
            if not batch:
                return
            event = {"k": "w", "ns": ns, "cp": checkpoint_id, "task": task_id, "path": task_path, "w": batch}
            what = f"writes of task {task_id}"
            payload = self._pack(thread_id, event, what, checkpoint_id)
            t.index(self._append(thread_id, t, payload, what, checkpoint_id), event)
        finally:
            self._release(t)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's journal, durably: after a crash the thread is whole or gone (the
        store's delete: on files a rename into ``threads/.trash/``, then removal)."""
        name = thread_dir_name(thread_id)
        with self._lock:
            t = self._threads.pop(thread_id, None)
            if t is not None:
                with t.lock:
                    t.closed = True
                    t.journal.close()
            self._store.delete(name)

    # ---- the extended methods: copy_thread, delete_for_runs, prune

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Make ``target_thread_id`` a copy of the source thread, checkpoints and writes.

        A fork by the store (``Store.copy``): on files the target journal is made beside its
        place, its sealed segments hard-linked (shared, not copied) and only the live one's
        records copied, then renamed in whole. A missing source copies nothing. A target that
        already exists raises ThreadExistsError (delete it first).
        """
        target = thread_dir_name(target_thread_id)
        with self._using(source_thread_id, create=False) as src:
            if src is None:
                return
            with self._lock:
                if self._store.exists(target):
                    raise ThreadExistsError(f"thread {target_thread_id!r} exists; delete it before copying onto it")
                src.journal.flush()  # what this saver buffered is part of the copy (it buffers nothing)
                self._store.copy(thread_dir_name(source_thread_id), target)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete every checkpoint whose metadata ``run_id`` is one of ``run_ids``, with its writes.

        Each thread that holds one is compacted (see ``_compact``): what it keeps is appended
        again after a seal, then the prefix before it is dropped, so a crash midway leaves the
        thread as it was or as it is meant to be, never a mix. A thread left with no checkpoint
        is deleted. Every thread's journal is read (its index) to find them.
        """
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_id in self._thread_ids():
            with self._using(thread_id, create=False) as t:
                if t is None:
                    continue
                keep = {
                    (ns, cid)
                    for ns, by_id in t.checkpoints.items()
                    for cid, entry in by_id.items()
                    if self._metadata(t, entry).get("run_id") not in wanted
                }
                if sum(len(by_id) for by_id in t.checkpoints.values()) == len(keep):
                    continue
                if keep:
                    self._compact(thread_id, t, keep)
                    continue
            self.delete_thread(thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint (and its writes), whole,
        and drop the rest of the thread's journal; ``delete``: delete the threads."""
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"strategy must be one of {PRUNE_STRATEGIES}, not {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            with self._using(thread_id, create=False) as t:
                if t is None:
                    continue
                keep = {(ns, max(by_id)) for ns, by_id in t.checkpoints.items() if by_id}
                self._compact(thread_id, t, keep)

    def _compact(self, thread_id: str, t: _Thread, keep: set[tuple[str, str]]) -> None:
        """Leave only the checkpoints in ``keep`` (and their writes) in the thread's journal.

        Seal the live segment; append each kept checkpoint again, carrying every blob its
        channel versions name (a blob may have been stored by a checkpoint that goes), and its
        pending writes as they stand; then drop every segment before the first of those
        records. Until the drop the old records are all still there, and the copies repeat
        what they say, so a crash before it changes nothing a reader sees; the drop is one
        durable step (journal.api.Retention). Called with the thread's lock held.
        """
        j = t.journal
        if not isinstance(j, Retention):
            raise JournalError(f"the journal of thread {thread_id!r} cannot drop records: prune needs a backend "
                               "with retention")
        events: builtins.list[dict[str, Any]] = []
        emitted: set[tuple[str, str, str]] = set()
        ordered = sorted(keep, key=lambda k: t.checkpoints[k[0]][k[1]].seq)
        for ns, cid in ordered:
            cp_seq = t.checkpoints[ns][cid].seq
            cp_event = dict(self._event(t, cp_seq))
            checkpoint = self._checkpoint(t, cp_seq, cp_event)
            blobs = []
            for channel, version in checkpoint["channel_versions"].items():
                where = (ns, channel, str(version))
                if where in emitted or where not in t.blobs:
                    continue
                blob_seq, pos = t.blobs[where]
                blobs.append(self._event(t, blob_seq)["blobs"][pos])
                emitted.add(where)
            cp_event["blobs"] = blobs
            events.append(cp_event)
            by_task: dict[str, tuple[str, builtins.list[Any]]] = {}
            for (task_id, _idx), w in sorted(t.writes.get((ns, cid), {}).items(), key=lambda kv: kv[1].seq):
                entry = self._event(t, w.seq)["w"][w.pos]
                by_task.setdefault(task_id, (w.task_path, []))[1].append(entry)
            for task_id, (task_path, entries) in by_task.items():
                events.append({"k": "w", "ns": ns, "cp": cid, "task": task_id, "path": task_path, "w": entries})
        # Packed before the seal: a copy too large (a kept checkpoint gathers blobs stored by
        # several records) is refused before anything changed.
        payloads = [_pack(e, self._record_size_max) for e in events]
        try:
            j.seal()
            outs = j.append_many(payloads, durability=DURABILITY) if payloads else []
            if any(not isinstance(o, Committed) for o in outs):
                raise CheckpointNotSavedError(f"pruning thread {thread_id!r}: its checkpoints were not copied "
                                              f"({next(o for o in outs if not isinstance(o, Committed))!r}); "
                                              "nothing was dropped, retry")
            first = outs[0].seq if outs and isinstance(outs[0], Committed) else j.last_seq + 1
            j.drop_prefix(first)
            t.reindex(self.serde)
        except BaseException:
            self._forget(t)  # what the journal holds now is read again on next use
            raise

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A zero-padded counter and a random fraction, as LangGraph's shipped savers make them."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ---- the async twins: the same code off the event loop; writes shielded from cancellation

    @staticmethod
    async def _shielded(fn: Any, *args: Any) -> Any:
        return await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(fn, *args)))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(self._list, config, filter=filter, before=before, limit=limit)
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        out: RunnableConfig = await self._shielded(self.put, config, checkpoint, metadata, new_versions)
        return out

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._shielded(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._shielded(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._shielded(self.copy_thread, source_thread_id, target_thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._shielded(self.delete_for_runs, list(run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(self.prune, list(thread_ids), strategy=strategy)))


__all__ = [
    "CheckpointNotSavedError",
    "CheckpointTooLargeError",
    "JournalSaver",
    "MissingRecordError",
    "ThreadExistsError",
    "ThreadIdError",
    "record_event",
    "thread_dir_name",
    "thread_id_of",
]


def _empty_legacy_trash(path: str) -> None:
    """Remove what an earlier version's delete_thread left in ``<path>/trash/`` (its threads
    were renamed there, durably, before removal: they are deleted already)."""
    import shutil

    trash = os.path.join(path, LEGACY_TRASH_DIR)
    if os.path.isdir(trash):
        for name in os.listdir(trash):
            shutil.rmtree(os.path.join(trash, name), ignore_errors=True)
