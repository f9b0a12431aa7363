"""Record: one record read back from a journal, the value every backend's readers yield.

It lives in a module of its own, below ``journal.api`` (which re-exports it), for two reasons:

* It is the one concrete class of the read path: every backend builds one per record, the file
  engine's reader in its innermost loop, so its construction and its lazy JSON decoding are
  performance code, kept here with the comments that say why they are written as they are.
  ``journal.api`` stays a contract a reader can take in at a glance: protocols, small reports.
* What a stored payload means (UTF-8 JSON of the appended dict, or the appended bytes) is one
  rule for every backend, so the decoding that turns a payload back into an event is written
  once, here, and not once per backend.

It imports nothing of the package but the typed errors (``journal.errors``, the layer below it:
a payload that is not what its flags say is CorruptionError, whoever reads it) and its own
compiled leaf, ``journal._json_floats`` (native/json_floats.c, optional), so the engine's reader
and any backend can use it freely.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from typing import Any

import zstandard

try:
    import orjson
except ImportError:  # no build of it for this interpreter: every payload takes the json path
    orjson = None  # type: ignore[assignment]

from journal.errors import CorruptionError, EventNotSerializableError

# Payloads of dict events are UTF-8 JSON from the writer's encoder (never a BOM, never another
# encoding): decoding the bytes once and handing a str to a prebuilt decoder skips json.loads'
# encoding detection and keyword handling, which cost a sixth of a decode.
_JSON_DECODE = json.JSONDecoder().decode
_ORJSON_LOADS = None if orjson is None else orjson.loads
# orjson reads an integer beyond 64 bits as the nearest float, where json reads the int; a float
# of at least this magnitude in orjson's value may be one, and the payload is read again by json.
_BIG_FLOAT = float(2**63)


def decode_json(payload: bytes) -> Any:
    """The value of a dict event's payload, exactly as json reads it; read by orjson, faster,
    where orjson reads the same.

    orjson reads JSON as json does (strings, escapes, ints, floats correctly rounded in every
    spelling, key order, the last of a repeated key), but for integers beyond 64 bits, which it
    reads as floats, and for what it refuses and json reads: NaN, Infinity, lone surrogates,
    nesting deeper than 1024. A payload with any of those is read by json, as every payload was
    before; the encoder writes the first kind only for such integers, and never the others.
    """
    if _ORJSON_LOADS is not None:
        try:
            value: Any = _ORJSON_LOADS(payload)
        except Exception:  # whatever orjson refuses, json decides (below)
            pass
        else:
            kind = type(value)
            try:
                if kind is dict or kind is list:
                    if _NO_BIG_FLOAT(value):
                        return value
                elif kind is not float or -_BIG_FLOAT < value < _BIG_FLOAT:
                    return value
            except RecursionError:  # the caller's stack is deep already: json decides
                pass
    return _JSON_DECODE(payload.decode("utf-8", "surrogatepass"))


def _no_big_float(value: dict[str, Any] | list[Any]) -> bool:
    """Whether no float in ``value`` (orjson's reading of a payload), at any depth, is as large
    as an integer beyond 64 bits read as a float. (A plain loop: on CPython 3.11 collecting the
    types in C, ``list(map(type, ...))`` and the like, costs more than looking at each value.)"""
    items: Any = value.values() if type(value) is dict else value
    for x in items:
        kind = type(x)
        if kind is str or kind is int:
            continue
        if kind is float:
            if not -_BIG_FLOAT < x < _BIG_FLOAT:
                return False
        elif kind is dict or kind is list:
            if not _no_big_float(x):
                return False
    return True


# The zstd frame magic's first byte (0xFD2FB528, little-endian). Legacy (0xFD2FB522..27) and
# skippable (0x184D2A5?) frames start otherwise, so a payload that starts with it and has none
# of the header descriptor's bits that bring a content size (Frame_Content_Size_flag, bits 7-6,
# and Single_Segment_flag, bit 5) declares no size: ``max_output_size`` bounds its decoding.
ZSTD_MAGIC_FIRST_BYTE = 0x28
ZSTD_SIZE_DECLARED_BITS = 0xE0


def zstd_declares_no_size(data: bytes | memoryview) -> bool:
    """Whether the zstd frame ``data`` surely declares no content size (the writer's frames never
    do): the test the reader's hot loop spells out inline. False means: ask ``zstd_declared_size``."""
    return len(data) > 4 and data[0] == ZSTD_MAGIC_FIRST_BYTE and not data[4] & ZSTD_SIZE_DECLARED_BITS


def zstd_declared_size(data: bytes | memoryview) -> int | None:
    """The content size the zstd frame ``data`` declares in its header, or None if it declares
    none. zstandard's ``decompress`` allocates a declared size whole, whatever
    ``max_output_size`` says: every caller compares it with what the bytes may hold first.
    Raises ValueError for a header zstd cannot read."""
    if zstd_declares_no_size(data):
        return None
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd frame header does not decode: {exc}") from None
    return None if size < 0 else size


def zstd_decompress_bounded(
    dctx: zstandard.ZstdDecompressor, data: bytes | memoryview, size_bytes_max: int
) -> bytes:
    """The first zstd frame of ``data``, decoded into at most ``size_bytes_max`` bytes (and never
    an allocation beyond that): ValueError for a frame that declares more, or does not decode,
    or decodes to more. Every zstd payload read from storage is decoded through this bound."""
    declared = zstd_declared_size(data)
    if declared is not None and declared > size_bytes_max:
        raise ValueError(f"zstd frame declares {declared} bytes of content, over the {size_bytes_max} it may hold")
    try:
        out: bytes = dctx.decompress(data, max_output_size=size_bytes_max)
    except zstandard.ZstdError as exc:
        raise ValueError(f"zstd payload does not decode: {exc}") from None
    return out


class StoredPayload:
    """A record's payload as a journal stored it, to be appended again byte for byte (``copy``,
    ``salvage``): ``Record.stored()`` makes one.

    Re-encoding the decoded event would not give the same bytes for every payload a journal may
    hold: one its writer never writes (NaN, an infinity, a number past a double's range, a lone
    surrogate, a repeated key: from a crafted file, or another writer) reads as an event, but
    the encoder refuses it or writes other bytes, so a copy would stop or differ from its source.
    Appended as it is, the copy holds what the source holds. A JSON payload is still checked to be
    the JSON of an object (the one rule every reader decodes by), so no append writes a record
    that reads as corrupt."""

    # Read-only: the check above holds only for the payload it checked.
    __slots__ = ("_is_bytes", "_payload")

    def __init__(self, payload: bytes, is_bytes: bool) -> None:
        payload = bytes(payload)
        if not is_bytes:
            try:
                value = decode_json(payload)
            except (ValueError, RecursionError) as exc:
                raise EventNotSerializableError(f"a stored JSON payload must decode ({_why(exc)})") from None
            if type(value) is not dict:
                raise EventNotSerializableError(
                    f"a stored JSON payload must be a JSON object, not a JSON {type(value).__name__}"
                )
        self._payload = payload
        self._is_bytes = bool(is_bytes)

    @property
    def payload(self) -> bytes:
        return self._payload

    @property
    def is_bytes(self) -> bool:
        return self._is_bytes

    @classmethod
    def _of(cls, payload: bytes, is_bytes: bool) -> StoredPayload:
        """One whose payload has been decoded already (by ``Record.event``)."""
        out = cls.__new__(cls)
        out._payload, out._is_bytes = payload, is_bytes
        return out

    def __repr__(self) -> str:
        return f"StoredPayload({len(self.payload)} bytes{', bytes' if self.is_bytes else ', JSON'})"


class Record:
    """One record read back: its seq and the event exactly as it was appended.

    ``segment`` and ``offset`` say where its frame is (a server backend: the journal's URL and
    0), for the CorruptionError of a payload that is not what its flags say."""

    __slots__ = ("_event", "_offset", "_segment", "is_bytes", "key", "payload", "seq", "synthetic")

    def __init__(
        self, seq: int, payload: bytes, is_bytes: bool, key: str | None, synthetic: bool,
        segment: str = "", offset: int = 0,
    ) -> None:
        self.seq = seq
        self.payload = payload  # the uncompressed stored bytes (UTF-8 JSON, or the raw bytes)
        self.is_bytes = is_bytes
        self.key = key
        self.synthetic = synthetic
        self._event: Any = None
        self._segment = segment
        self._offset = offset

    @property
    def event(self) -> Any:
        """The appended dict (decoded from JSON) or the appended bytes.

        Raises CorruptionError (segment, offset, seq, reason) for a payload that is not the UTF-8
        JSON of an object: its frame's checksum held, so it was written so, and it is no event.
        Every reader's records decode here, so each of them reports such a payload the same way."""
        if self.is_bytes:
            return self.payload
        if self._event is None:
            try:
                value = decode_json(self.payload)
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
                raise self.corrupt(f"the payload of a JSON record does not decode ({_why(exc)})") from None
            if type(value) is not dict:
                raise self.corrupt(f"the payload of a JSON record is a JSON {type(value).__name__}, not an object")
            self._event = value
        return self._event

    def stored(self) -> StoredPayload:
        """Its payload, to append again as it is (``StoredPayload``). Raises CorruptionError, as
        ``event`` does, for a payload that is not what its flags say."""
        if not self.is_bytes:
            self.event  # noqa: B018 - decoding it is the check
        return StoredPayload._of(self.payload, self.is_bytes)

    @property
    def segment(self) -> str:
        """The name of the segment file that holds its frame (a server backend: the journal's
        URL). Records of one block frame share it and ``offset``."""
        return self._segment

    @property
    def offset(self) -> int:
        """The byte offset of its frame in ``segment`` (a server backend: 0)."""
        return self._offset

    def corrupt(self, reason: str) -> CorruptionError:
        """The CorruptionError for this record, naming where its frame is."""
        return CorruptionError(self._segment, self._offset, self.seq, reason)

    def __repr__(self) -> str:
        return f"Record(seq={self.seq}, {len(self.payload)} bytes{', synthetic' if self.synthetic else ''})"


def _walk_in_c() -> Callable[[Any], bool] | None:
    """native/json_floats.c's twin of _no_big_float, where it was built. JOURNAL_PURE keeps the
    Python walk, read as journal/engine/native.py's forced_pure() reads it (that module is above
    this one; tests/test_native_build.py holds the two readings equal)."""
    if os.environ.get("JOURNAL_PURE", "") not in ("", "0"):
        return None
    try:
        # By name: the compiled leaf imports nothing, where ``from journal import`` would read as
        # an edge to the root package (above every layer) to the import contracts.
        mod = importlib.import_module("journal._json_floats")
    except ImportError:  # not built (no compiler): the Python walk
        return None
    walk: Callable[[Any], bool] = mod.no_big_float
    return walk


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested deeper than this interpreter's recursion limit"
    return f"{type(exc).__name__}: {exc}"[:200]


# The walk decode_json uses: in C where it was built (a tenth of a decode scan in Python).
_NO_BIG_FLOAT: Callable[[Any], bool] = _walk_in_c() or _no_big_float


def _json_like_in_c() -> Callable[[Any], bool] | None:
    """native/json_floats.c's json_like, the twin of journal/engine/encoding.py's _json_like,
    where it was built (and JOURNAL_PURE is not set), found as _walk_in_c finds its module: the
    encoder takes it from here, the one place that loads the compiled leaf."""
    if _NO_BIG_FLOAT is _no_big_float:
        return None
    like: Callable[[Any], bool] | None = getattr(importlib.import_module("journal._json_floats"), "json_like", None)
    return like


JSON_LIKE_IN_C = _json_like_in_c()
