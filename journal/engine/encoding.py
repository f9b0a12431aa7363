"""Events to stored payloads: JSON or bytes, zstd when it pays, the idempotency key in front.

Runs in the caller's thread, outside every lock, so concurrent appenders encode in parallel
with the leader's I/O; the zstd of a record that may share a block with others written in the
same batch waits for the batch (pack, frame_specs). Nothing here touches a file.

The JSON of an event is the standard library's ``json`` encoding (compact, UTF-8, no NaN): that
is what payloads have held since the first format, and what decides which events are accepted
and with which error the others are refused. orjson writes the same JSON several times faster,
but for a narrower set of values, so it writes an event only when every value in it, at any
depth, is a ``str``, ``int``, ``bool``, ``None``, finite ``float``, ``dict``, ``list`` or ``tuple``
of exactly that type. Everything else goes down the json path, unchanged, which writes it or
raises the error it always raised: what orjson refuses on its own (integers beyond 64 bits, keys
that are not exactly ``str``, subclasses, dataclasses, datetimes, strings that are not UTF-8,
nesting deeper than 254) and what it would write where json refuses (``_json_like``: NaN and the
infinities, which orjson writes as null; UUIDs, enums, fragments). Its bytes are json's but for
one spelling: a float of magnitude in [1e-9, 1e-4) is written 0.000015 or 1.5e-6 where json wrote
1.5e-05 or 1.5e-06, the same float read back by either. So payloads written before and after
differ only there, reading gives the same events, and ``same_event`` (which compares values when
the bytes differ) takes a retry of a record written before as the same event.
tests/test_json_codec.py holds the two paths to that.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import xxhash
import zstandard

try:
    import orjson
except ImportError:  # no build of it for this interpreter: every event takes the json path
    orjson = None  # type: ignore[assignment]

from journal.engine import format as fmt
from journal.engine import native
from journal.engine.options import Options
from journal.errors import (
    DurabilityError,
    EventNotSerializableError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvariantError,
    NonStringKeyError,
    RecordTooLargeError,
)
from journal.outcomes import DURABILITY_LEVELS, Committed, Durability, Outcome
from journal.record import JSON_LIKE_IN_C, StoredPayload

COMPRESS_MIN_BYTES = 256  # smaller events gain little (2% of bytes on real logs) and zstd costs ~10 µs each
# With a trained dictionary even a short record shrinks (its keys and common values are in the
# dictionary), so the bar is lower.
DICT_COMPRESS_MIN_BYTES = 64
ZSTD_LEVEL = 1  # on real session events within 2% of level 3's size, and faster
# The level of a block frame's zstd: a block holds up to options.block_bytes of records compressed
# as one, where a slower search finds more of what the records repeat of each other than it does in
# one record; and a block costs one zstd call for all its records, so a higher level costs less per
# event than it would for records framed alone (which stay at ZSTD_LEVEL). On every path: the
# zstandard package, the GIL-held compressor (which takes a level) and a dictionary's CDict (which
# fixes one: dictionary.py makes one at this level too, and repeats it). Except where a caller
# waits: a block that a group commit's leader makes of records whose callers are parked until
# the write returns (sync or flush appends that met in the queue) is compressed at ZSTD_LEVEL, so
# the leader's zstd call, on every one of those callers' path, is no longer than before
# (frame_specs, ``waited``). Level 3 against 1, in blocks of 128 KiB (bench/README.md, "Block
# frames"): the real session files 0.283x of their JSONL against 0.298x, bulk appends of
# buffered records as fast; on a group commit's block 6-11 µs more for 2% fewer bytes.
BLOCK_ZSTD_LEVEL = 3
# Payloads up to this size are compressed with the GIL held (native/zstd_held.c, where the system
# has libzstd): a few microseconds of work, where giving the GIL up and waiting to get it back
# behind the other appending threads cost several times that. Larger ones take long enough that
# other threads should run meanwhile, so the zstandard package (which releases it) does them.
HELD_COMPRESS_BYTES_MAX = 16 * 1024
_HELD_COMPRESS = native.held_compress
_HELD_COMPRESS_AT = native.held_compress_at  # (data, level): a block frame's, at BLOCK_ZSTD_LEVEL
_HELD_COMPRESS_WITH = native.held_compress_with  # with a dictionary (DictionaryUse.held)
BLOCK_SEGMENT_SHARE = 4  # a block frame holds at most 1/4 of a segment's bytes of records

_local = threading.local()
# One encoder for every event: json.dumps with options builds a new encoder on each call.
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# The encoder turns an int, float, bool or None key into a string ({1: "a"} is stored as
# {"1": "a"}), so the event read back would not be the one appended. Such a key comes out as
# '"' + a number, true, false or null + '":', and nothing else in compact JSON looks like that
# except a string key spelled the same ("1"): one C-speed search of the encoded bytes clears a
# valid event, and only a hit pays for the walk that tells the two apart (_non_string_key).
# The run of a number is possessive (`*+`) where Python has it (3.11+): a run not followed by
# '":' fails at once instead of giving back a byte at a time. The class holds no '"', so the
# plain greedy run of Python 3.10 matches exactly the same keys, only more slowly on a miss.
_NUMBER_RUN = b"*+" if sys.version_info >= (3, 11) else b"*"
_MAYBE_COERCED_KEY = re.compile(rb'"(?:[-0-9][0-9.eE+-]' + _NUMBER_RUN + rb'|true|false|null)":').search

# Subclasses (of str, int, dict, list), dataclasses and datetimes are handed to ``default``, and
# there is none: orjson raises, and json writes them (or refuses them) as it always has.
_ORJSON_DUMPS = None if orjson is None else orjson.dumps
_ORJSON_OPTIONS = (
    0 if orjson is None
    else orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)
JSON_CODEC = "json" if orjson is None else f"orjson {orjson.__version__}, json where it would differ"


def _compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor at ``level`` (ZSTD_LEVEL or BLOCK_ZSTD_LEVEL)."""
    by_level: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "cctx", None)
    if by_level is None:
        by_level = _local.cctx = {}
    c = by_level.get(level)
    if c is None:
        # No content size, checksum or dict id in the zstd frame: the journal frame has them.
        c = by_level[level] = zstandard.ZstdCompressor(
            level=level, write_content_size=False, write_checksum=False, write_dict_id=False
        )
    return c


class Block:
    """A block frame made of consecutive records of one append_many (``pack``): each of them
    points at it, and the writer frames it once, at the first of them."""

    __slots__ = ("spec",)

    def __init__(self, spec: fmt.FrameSpec) -> None:
        self.spec = spec


class Encoded:
    """An event ready to frame: everything but its seq (assigned in order under the mutex)."""

    __slots__ = ("block", "deferred", "key", "nbytes", "raw", "spec")

    def __init__(self, spec: fmt.FrameSpec, raw: bytes, key: str | None, deferred: bool = False) -> None:
        self.spec = spec
        self.raw = raw  # kept (not copied) so that an AckLost can carry the payload's digest
        self.key = key
        # Not compressed yet: it will most likely share a block with the records appended with
        # it, which pack or frame_specs compresses together; alone, it is compressed then.
        self.deferred = deferred
        self.block: Block | None = None  # the block frame it is in, once pack has made one
        # The bytes it adds to a segment: its frame's, or, in a block, the block frame's for the
        # block's first record and 0 for the others (until compressed, an upper bound).
        self.nbytes = len(spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES

    @property
    def digest(self) -> int:
        return xxhash.xxh64_intdigest(self.raw)

    @property
    def is_bytes(self) -> bool:
        return bool(self.spec.flags & fmt.FLAG_BYTES)


_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def same_event(raw: bytes, is_bytes: bool, enc: Encoded) -> bool:
    """Whether the stored payload ``raw`` holds the event ``enc`` encodes: the same bytes, or for
    JSON the same value with its keys in another order (1 and 1.0, or true and 1, differ)."""
    if raw == enc.raw:
        return True
    if is_bytes or enc.is_bytes:
        return False
    try:
        return bool(_CANONICAL(json.loads(raw)) == _CANONICAL(json.loads(enc.raw)))
    except (ValueError, RecursionError):  # a stored payload that is no JSON (or too deep) is no event
        return False


def repeated_keys(items: list[Encoded]) -> dict[int, int]:
    """{position: position of the first item with the same key} for keys used twice in one call.

    The later ones are duplicates of the first (one record is written); the same key with two
    different events raises IdempotencyConflictError, before anything is written.
    """
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    for i, it in enumerate(items):
        if it.key is None:
            continue
        j = first.setdefault(it.key, i)
        if j != i:
            if not same_event(items[j].raw, items[j].is_bytes, it):
                raise IdempotencyConflictError(it.key, None)
            repeats[i] = j
    return repeats


def encode_event(event: Any, key: str | None, synthetic: bool, options: Options, together: bool = False) -> Encoded:
    """JSON (or bytes) -> stored payload. Raises typed errors; nothing is written.

    ``together``: the event may be written with others (an append_many, a buffered append, or
    a sync or flush append that may meet others in the group-commit queue) and share a block
    frame with them, so its compression waits for pack, frame_specs or, written alone,
    alone_spec (an unkeyed event of at most ``options.block_bytes``; a keyed one is never in a
    block)."""
    if type(event) is dict or isinstance(event, dict):
        raw = _encode_json(event, options.record_size_bytes_max)
        flags = 0
    elif isinstance(event, (bytes, bytearray, memoryview)):
        raw = bytes(event)
        flags = fmt.FLAG_BYTES
    elif type(event) is StoredPayload:  # a record copied as it was stored (copy, salvage)
        raw = event.payload
        flags = fmt.FLAG_BYTES if event.is_bytes else 0
    else:
        raise EventNotSerializableError(f"events are dicts or bytes (or a Record.stored()), not {type(event).__name__}")
    if len(raw) > options.record_size_bytes_max:
        raise RecordTooLargeError(len(raw), options.record_size_bytes_max)
    if synthetic:
        flags |= fmt.FLAG_SYNTHETIC
    if together and key is None and options.block_bytes and len(raw) <= options.block_bytes:
        return Encoded(fmt.FrameSpec(flags, len(raw), raw), raw, None, deferred=True)
    body, codec, dict_id = _compressed(raw, options)
    flags |= codec
    if key is not None:
        key_bytes = key.encode("utf-8", "surrogateescape")
        if not 1 <= len(key_bytes) <= fmt.IDEMPOTENCY_KEY_BYTES_MAX:
            raise InvalidArgumentError(
                f"idempotency key must be 1..{fmt.IDEMPOTENCY_KEY_BYTES_MAX} bytes of UTF-8, not {len(key_bytes)}; "
                "nothing was written"
            )
        body = bytes([len(key_bytes)]) + key_bytes + body
        flags |= fmt.FLAG_KEYED
    return Encoded(fmt.FrameSpec(flags, len(raw), body, 1, dict_id), raw, key)


def _compressed(raw: bytes, options: Options, block: bool = False) -> tuple[bytes, int, int]:
    """(stored body, codec flag, dictionary id): zstd where it is asked for and makes the bytes
    smaller, with the handle's dictionary once its live segment may hold frames naming one; at
    BLOCK_ZSTD_LEVEL for a block frame's records (``block``), at ZSTD_LEVEL for a record's."""
    if not options.compress:
        return raw, fmt.CODEC_RAW, 0
    use = options.dictionary
    small = len(raw) <= HELD_COMPRESS_BYTES_MAX
    if use is not None and use.active:
        if len(raw) >= DICT_COMPRESS_MIN_BYTES:
            held = use.held_block if block else use.held
            if held is not None and _HELD_COMPRESS_WITH is not None and small:
                packed = _HELD_COMPRESS_WITH(held, raw)
            else:
                packed = use.compressor(block).compress(raw)
            if len(packed) < len(raw):
                return packed, fmt.CODEC_ZSTD, use.dict_id
        return raw, fmt.CODEC_RAW, 0
    if len(raw) >= COMPRESS_MIN_BYTES:
        if block:
            if _HELD_COMPRESS_AT is not None and small:
                packed = _HELD_COMPRESS_AT(raw, BLOCK_ZSTD_LEVEL)
            else:
                packed = _compressor(BLOCK_ZSTD_LEVEL).compress(raw)
        elif _HELD_COMPRESS is not None and small:
            packed = _HELD_COMPRESS(raw)
        else:
            packed = _compressor(ZSTD_LEVEL).compress(raw)
        if len(packed) < len(raw):
            return packed, fmt.CODEC_ZSTD, 0
    return raw, fmt.CODEC_RAW, 0


# A lone durable record compressed, framed, written and synced in one C call, under the
# release of the GIL its write makes anyway (native/zstd_held.c, frame_write_sync; the writer's
# _append_alone). None where the module is missing or predates it.
FrameWriteSync = Callable[[int, bytes, int, int, int, int, int, "object | None", int], tuple[int, int]]
FRAME_WRITE_SYNC: FrameWriteSync | None = native.held_frame_write_sync
_NEVER = 1 << 62  # a compress_min no record reaches: the record is stored as it is
LoneCompression = tuple[int, object | None, int]  # (compress_min, held CDict or None, dict_id)


def lone_compression(raw_len: int, options: Options) -> LoneCompression | None:
    """What the C call is told to do with a lone record of ``raw_len`` bytes, the same decision
    as _compressed's (whose bytes it makes, tests/test_frame_write_sync.py): (the least length
    compressed, the dictionary's held CDict or None, its id). None where _compressed must do it
    (a record longer than the held compressor takes, or a dictionary without a held CDict)."""
    if raw_len > HELD_COMPRESS_BYTES_MAX:
        return None
    if not options.compress:
        return _NEVER, None, 0
    use = options.dictionary
    if use is not None and use.active:
        if use.held is None:
            return None
        return DICT_COMPRESS_MIN_BYTES, use.held, use.dict_id
    return COMPRESS_MIN_BYTES, None, 0


def pack(items: list[Encoded], options: Options, blocks: bool) -> None:
    """Frame records appended together now, in the caller's thread: runs of records that waited
    for it (``deferred``) become block frames (``blocks``: the journal's live segment takes them)
    of up to ``options.block_bytes`` of payload and BLOCK_RECORDS_MAX records, compressed as one,
    which costs one zstd call instead of one a record and finds what records repeat of each
    other (keys, ids, text); a record left alone is compressed alone, as it would have been at
    once. Each record's ``nbytes`` is then exact, so an append_many is cut into requests where
    the segment really fills (writer.chunks). Nothing else changes: seqs are given later."""
    for run in _runs(items, options, blocks):
        if len(run) == 1:
            it = run[0]
            it.spec = alone_spec(it, options)
            it.deferred = False
            it.nbytes = len(it.spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES
            continue
        block = Block(_block_spec(run, options))
        for it in run:
            it.block, it.deferred, it.nbytes = block, False, 0
        run[0].nbytes = len(block.spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES


def frame_specs(items: list[Encoded], options: Options, blocks: bool, waited: bool = False) -> list[fmt.FrameSpec]:
    """The frames of a batch's records, in order: blocks ``pack`` made, framed once each; runs
    of records still deferred (buffered appends, and sync or flush appends whose callers
    queued for this group commit: they meet their neighbours only in the queue) packed now, the
    same way, at BLOCK_ZSTD_LEVEL, or at ZSTD_LEVEL if callers wait for the write (``waited``);
    every other record's own frame."""
    if len(items) == 1 and items[0].block is None and not items[0].deferred:
        return [items[0].spec]
    out: list[fmt.FrameSpec] = []
    i, n = 0, len(items)
    while i < n:
        it = items[i]
        block = it.block
        if block is not None:
            count = block.spec.records
            if not blocks or not all(x.block is block for x in items[i : i + count]) or i + count > n:
                # Never met: pack asks the same question of the live segment first, a live segment
                # is only ever followed by a newer one, and writer.chunks never splits a block.
                raise InvariantError("a block frame met a live segment that cannot take it, or was split")
            out.append(block.spec)
            i += count
            continue
        if not it.deferred:
            out.append(it.spec)
            i += 1
            continue
        j = i
        while j < n and items[j].deferred:
            j += 1
        for run in _runs(items[i:j], options, blocks):
            out.append(alone_spec(run[0], options) if len(run) == 1 else _block_spec(run, options, not waited))
        i = j
    return out


def _runs(items: list[Encoded], options: Options, blocks: bool) -> Iterator[list[Encoded]]:
    """The records still deferred, grouped into the runs that share a block (runs of one where
    blocks are not taken); records that are not deferred end a run and are left out."""
    run: list[Encoded] = []
    run_bytes = 0
    # A block takes at most a quarter of a segment: a roll-over comes before the first frame that
    # does not fit, so a segment still ends close to its size limit (a concern of small segments
    # only: the default block is 128 KiB, the default segment 64 MiB).
    cap = min(options.block_bytes, options.segment_size_bytes // BLOCK_SEGMENT_SHARE)
    for it in items:
        if not it.deferred:
            if run:
                yield run
            run, run_bytes = [], 0
            continue
        n = len(it.raw)
        if run and (not blocks or run_bytes + n > cap or len(run) == fmt.BLOCK_RECORDS_MAX):
            yield run
            run, run_bytes = [], 0
        run.append(it)
        run_bytes += n
    if run:
        yield run


def alone_spec(it: Encoded, options: Options) -> fmt.FrameSpec:
    """The frame of a deferred record that is written alone: compressed alone, where that pays."""
    body, codec, dict_id = _compressed(it.raw, options)
    return fmt.FrameSpec(it.spec.flags | codec, len(it.raw), body, 1, dict_id)


def _block_spec(run: list[Encoded], options: Options, block_level: bool = True) -> fmt.FrameSpec:
    """The block frame of ``run``, compressed at BLOCK_ZSTD_LEVEL (``block_level``) or ZSTD_LEVEL."""
    raw = b"".join([it.raw for it in run])
    body, codec, dict_id = _compressed(raw, options, block=block_level)
    head = fmt.encode_block_head([len(it.raw) for it in run], [it.spec.flags for it in run])
    return fmt.FrameSpec(fmt.KIND_BLOCK | codec, len(raw), head + body, len(run), dict_id)


def _encode_json(event: dict[Any, Any], size_bytes_max: int) -> bytes:
    """The compact UTF-8 JSON of ``event``; typed errors for what json refuses.

    The size limit (``size_bytes_max``, checked by the caller) must refuse what it refused when
    json wrote every event, and orjson's spelling of small floats is longer (0.000015 for
    1.5e-05) or one byte shorter (1.5e-6 for 1.5e-06), so json decides near the limit. One byte
    per float of at least five (four and a separator) makes json's length at most 6/5 of
    orjson's: below 5/6 of the limit both fit."""
    if _ORJSON_DUMPS is not None:
        try:
            raw: bytes = _ORJSON_DUMPS(event, option=_ORJSON_OPTIONS)
        except Exception:  # whatever orjson refuses, json decides (below)
            pass
        else:
            try:
                if len(raw) * 6 <= size_bytes_max * 5 and _JSON_LIKE(event):
                    return raw
            except RecursionError:  # the caller's stack is deep already: json decides
                pass
    try:
        raw = _JSON_ENCODE(event).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise EventNotSerializableError(str(exc)) from None
    if _MAYBE_COERCED_KEY(raw) is not None:
        _refuse_non_string_keys(event)
    return raw


def _json_like(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> bool:
    """Whether orjson writes ``value`` (a container orjson accepted) as json does: every value in
    it, at any depth, a str, int, bool or None, a finite float, or an exact dict, list or tuple.
    (A plain loop: on CPython 3.11 collecting the types in C, ``list(map(type, ...))`` and the
    like, costs more than looking at each value.)"""
    for x in value.values() if type(value) is dict else value:
        kind = type(x)
        if kind is str or kind is int or kind is bool or x is None:
            continue
        if kind is float:
            if x - x != 0.0:  # NaN for NaN and the infinities, which orjson writes as null
                return False
        elif kind is dict or kind is list or kind is tuple:
            if not _json_like(x):
                return False
        else:
            return False
    return True


# The walk _encode_json uses: in C where it was built (native/json_floats.c, json_like; about a
# tenth of a lone durable append's Python otherwise), else _json_like, its twin.
_JSON_LIKE = JSON_LIKE_IN_C or _json_like


def _refuse_non_string_keys(event: dict[Any, Any]) -> None:
    """Raise NonStringKeyError naming the first key, at any depth, that is not a string."""
    try:
        found = _non_string_key(event, "event")
    except RecursionError:
        raise EventNotSerializableError("it is nested too deeply") from None
    if found is not None:
        raise NonStringKeyError(*found)


def _non_string_key(value: Any, where: str) -> tuple[str, object] | None:
    """(where, key) of the first non-string key in ``value``, depth first; None if there is none."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return where, k
            if isinstance(v, (dict, list, tuple)):
                found = _non_string_key(v, f"{where}[{k!r}]")
                if found is not None:
                    return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if isinstance(v, (dict, list, tuple)):
                found = _non_string_key(v, f"{where}[{i}]")
                if found is not None:
                    return found
    return None


def check_durability(durability: str) -> Durability:
    """The durability level asked for, or DurabilityError: every backend's one check."""
    if durability not in DURABILITY_LEVELS:
        raise DurabilityError(durability, DURABILITY_LEVELS)
    return durability


def with_repeats(outcomes: list[Outcome], repeats: dict[int, int], total: int) -> list[Outcome]:
    """The outcomes of an append_many whose repeated keys (``repeated_keys``) were written once:
    each repeat gets the first one's outcome, as a duplicate when it was committed. Every
    backend answers repeats this way."""
    fresh = iter(outcomes)
    out: list[Outcome] = []
    for i in range(total):
        if i not in repeats:
            out.append(next(fresh))
            continue
        first = out[repeats[i]]
        if isinstance(first, Committed):
            first = Committed(first.seq, first.durability, True, "idempotency key repeated in this call")
        out.append(first)
    return out
