"""The on-disk format of a journal: every constant and every byte layout, in one place.

docs/FORMAT.md is the specification of the bytes and of what each kind of damage means; this
module is the code of that specification, and tests/vectors/format_v1.json pins the bytes.
Everything here is a pure function of bytes (no I/O), so the writer, the readers,
recovery, the crash simulator and the C helper all agree by construction.

A journal is a directory of segment files named ``<base_seq:020d>.seg``. A segment is:

    segment header (64 bytes)
    frame*                       each: frame header (32 bytes) + stored payload
    [seal frame]                 only in a sealed segment; its payload ends with its own offset

A data frame holds one record; a block frame (format version 2) holds several records that
were appended together, compressed as one (their table, in the clear, says where each ends).

All integers are little-endian and fixed-width. The frame checksum is XXH64, seeded with the
segment's salt, over the frame header from byte 8 on and the stored payload. The salt
makes a frame left over from another segment (a recycled or copied file) fail its checksum
instead of reading as a valid record.
"""

from __future__ import annotations

import enum
import struct
from array import array
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import xxhash

from journal.engine import native as _native
from journal.errors import InvariantError, invariant, present

# What this version writes in a new segment's header, and the newest it reads. Version 2 added
# block frames (KIND_BLOCK); a version 1 segment never holds one, and software of version 1
# refuses a version 2 segment by its header (NewerFormatError) instead of meeting a kind it does
# not know. A writer appending to a version 1 live segment keeps writing version 1 frames in it.
# Version 3 added FLAG_AFTER_SYNC (below): only a version 3 segment holds a frame carrying it, so
# software of version 2 refuses such a segment by its header, not by meeting an unknown flag.
# Version 4 added trained zstd dictionaries: a zstd data or block frame of a version 4 segment
# may name one by its u16 dictionary id (journal/engine/dictionary.py holds the files).
FORMAT_VERSION = 4
FORMAT_VERSION_MIN = 1  # the oldest this version reads
BLOCK_FORMAT_VERSION_MIN = 2  # the first segment version that may hold block frames
AFTER_SYNC_FORMAT_VERSION_MIN = 3  # the first segment version that may hold FLAG_AFTER_SYNC frames
DICT_FORMAT_VERSION_MIN = 4  # the first segment version that may hold frames naming a dictionary
# The start marker's layout has not changed since version 1, so it is still written as version 1.
START_VERSION = 1

SEGMENT_SUFFIX = ".seg"
SEGMENT_NAME_DIGITS = 20  # a u64 base seq in decimal fits in 20 digits, so name order is seq order

# --- segment header -------------------------------------------------------------------------

SEGMENT_MAGIC = b"JRNLSEG\x00"
# magic, format version, header size, header flags (reserved, 0), journal id, segment number,
# base seq, salt. Then the XXH64 (seed 0) of those 56 bytes.
_SEGMENT_HEADER_BODY = struct.Struct("<8sHHI16sQQQ")
SEGMENT_HEADER_SIZE_BYTES = _SEGMENT_HEADER_BODY.size + 8
invariant(SEGMENT_HEADER_SIZE_BYTES == 64, "the segment header is 64 bytes")

# --- named offsets and sizes ----------------------------------------------------------------
#
# Every offset and size the engine uses outside a struct, named once here (and compared with the
# C helper's #defines by tests/test_constants.py).
#
# Where each field of the segment header lies. Only code that reads a header whose checksum
# failed needs these (salvage tries its salt, which proves itself frame by frame); everything
# else goes through decode_segment_header. They are the struct's own offsets, asserted below.
SEGMENT_MAGIC_OFFSET = 0
SEGMENT_MAGIC_SIZE_BYTES = 8
SEGMENT_VERSION_OFFSET = 8  # u16 format version
SEGMENT_HEADER_SIZE_OFFSET = 10  # u16, the header's own size
SEGMENT_HEADER_FLAGS_OFFSET = 12  # u32, reserved (0)
SEGMENT_JOURNAL_ID_OFFSET = 16
SEGMENT_JOURNAL_ID_SIZE_BYTES = 16
SEGMENT_NUMBER_OFFSET = 32  # u64
SEGMENT_BASE_SEQ_OFFSET = 40  # u64
SEGMENT_SALT_OFFSET = 48  # u64
SEGMENT_SALT_SIZE_BYTES = 8
SEGMENT_HEADER_CHECKSUM_OFFSET = 56  # u64, XXH64 (seed 0) of the bytes before it
SEGMENT_HEADER_CHECKSUM_SIZE_BYTES = 8
_SEGMENT_HEADER_FIELDS = ("8s", "H", "H", "I", "16s", "Q", "Q", "Q")  # _SEGMENT_HEADER_BODY, field by field
invariant("<" + "".join(_SEGMENT_HEADER_FIELDS) == _SEGMENT_HEADER_BODY.format, "header fields match the struct")
invariant(
    [struct.calcsize("<" + "".join(_SEGMENT_HEADER_FIELDS[:i])) for i in range(len(_SEGMENT_HEADER_FIELDS) + 1)]
    == [
        SEGMENT_MAGIC_OFFSET,
        SEGMENT_VERSION_OFFSET,
        SEGMENT_HEADER_SIZE_OFFSET,
        SEGMENT_HEADER_FLAGS_OFFSET,
        SEGMENT_JOURNAL_ID_OFFSET,
        SEGMENT_NUMBER_OFFSET,
        SEGMENT_BASE_SEQ_OFFSET,
        SEGMENT_SALT_OFFSET,
        SEGMENT_HEADER_CHECKSUM_OFFSET,
    ],
    "segment header field offsets are the struct's",
)
invariant(SEGMENT_MAGIC_SIZE_BYTES == len(SEGMENT_MAGIC) == SEGMENT_VERSION_OFFSET - SEGMENT_MAGIC_OFFSET, "magic size")
invariant(SEGMENT_JOURNAL_ID_SIZE_BYTES == SEGMENT_NUMBER_OFFSET - SEGMENT_JOURNAL_ID_OFFSET, "journal id size")
invariant(SEGMENT_SALT_SIZE_BYTES == SEGMENT_HEADER_CHECKSUM_OFFSET - SEGMENT_SALT_OFFSET, "salt size")
invariant(
    SEGMENT_HEADER_CHECKSUM_OFFSET + SEGMENT_HEADER_CHECKSUM_SIZE_BYTES == SEGMENT_HEADER_SIZE_BYTES,
    "the header checksum ends the header",
)

# The writer rounds the live segment's reserved size (reserve_bytes) up to a multiple of this: a
# page of the page cache and a block of the common file systems, so a reservation never ends
# inside one and the zeros past the last record are whole blocks.
RESERVE_ROUND_BYTES = 4096
# The smallest sector_bytes accepted: the smallest logical sector a block device has. Padding a
# synced batch to a smaller unit could leave a later write sharing a sector with synced data.
SECTOR_BYTES_MIN = 512
# What a frame's stored payload may hold beyond its record: the idempotency key prefix (u8 length
# and up to IDEMPOTENCY_KEY_BYTES_MAX bytes; the body is compressed only when that makes it
# smaller), with room to spare. record_size_bytes_max stays this far below
# FRAME_STORED_BYTES_LIMIT, and a reader trusts a stored length of at most its record size limit
# plus this before it reads a frame.
RECORD_STORED_OVERHEAD_BYTES_MAX = 512
# The densest seal index: at most one entry per 512 segment bytes, so that an index (16 bytes an
# entry) stays within 1/32 of its segment.
INDEX_INTERVAL_BYTES_MIN = 512
# The bounds of segment_size_bytes (4 KiB to 1 TiB) and of reserve_bytes, the options' sanity
# limits: a segment holds at least its header, a frame and a seal footer.
SEGMENT_SIZE_BYTES_MIN = 4096
SEGMENT_SIZE_BYTES_MAX = 1 << 40
RESERVE_BYTES_MAX = 1 << 30  # reserve_bytes beyond this only wastes space (0 turns reserving off)

# --- frame header ---------------------------------------------------------------------------

# checksum, stored length, raw length, seq, flags, dictionary id, marker
_FRAME_HEADER = struct.Struct("<QIIQHHI")
_FRAME_TAIL = struct.Struct("<IIQHHI")  # the header after its checksum
FRAME_HEADER_SIZE_BYTES = _FRAME_HEADER.size
if not (FRAME_HEADER_SIZE_BYTES == 32):
    raise InvariantError('FRAME_HEADER_SIZE_BYTES == 32')
FRAME_CHECKSUMMED_FROM = 8  # the checksum covers header bytes [8, 32) and the stored payload
FRAME_MARKER = 0x3146524A  # b"JRF1" little-endian: lets a resync find candidate frames quickly
FRAME_MARKER_BYTES = struct.pack("<I", FRAME_MARKER)
FRAME_MARKER_OFFSET = 28

# Flags (u16). Bits not named here must be zero; a valid frame with other bits set was written
# by a newer format and is refused rather than misread.
FLAG_CODEC_MASK = 0x0003
CODEC_RAW = 0x0000
CODEC_ZSTD = 0x0001
FLAG_KIND_MASK = 0x000C
KIND_DATA = 0x0000
KIND_SEAL = 0x0004
KIND_PADDING = 0x0008
KIND_BLOCK = 0x000C  # several records (format version 2): see "block frames" below
FLAG_COMMIT = 0x0010  # last frame of a batch that was fdatasync'd: marks a durable point
FLAG_KEYED = 0x0020  # stored payload starts with u8 key length + idempotency key (not compressed)
FLAG_BYTES = 0x0040  # payload is opaque bytes; otherwise it is UTF-8 JSON
FLAG_SYNTHETIC = 0x0080  # written by a repair, not by the application
# Written after a sync (format version 3): every byte before this frame in its segment had been
# fdatasync'd (the fdatasync had returned) before this frame was written. So a genuine frame
# carrying it anywhere after damage proves the damage is in synced data, not a torn write. The
# writer sets it on the first frame of a write when it knows the claim holds, and only then: a
# frame without it claims nothing (find_durable_point).
FLAG_AFTER_SYNC = 0x0100
FLAGS_KNOWN = (
    FLAG_CODEC_MASK | FLAG_KIND_MASK | FLAG_COMMIT | FLAG_KEYED | FLAG_BYTES | FLAG_SYNTHETIC | FLAG_AFTER_SYNC
)
CODECS_KNOWN = (CODEC_RAW, CODEC_ZSTD)
KINDS_KNOWN = (KIND_DATA, KIND_SEAL, KIND_PADDING, KIND_BLOCK)
# A record's own flags, which a block frame keeps per record (in its table) rather than in the
# frame header: whether it is bytes, whether a repair wrote it. A keyed record is never in a
# block (its key must be readable without decompressing anything: the writer loads the live
# segment's keys at open, and the seal footer's key table lists them).
BLOCK_RECORD_FLAGS = FLAG_BYTES | FLAG_SYNTHETIC
# Flags a block frame's header must not carry: they belong to its records.
BLOCK_FRAME_FLAGS_REFUSED = FLAG_KEYED | FLAG_BYTES | FLAG_SYNTHETIC

# --- limits ---------------------------------------------------------------------------------

# A hard cap the scanner applies before it trusts a length: no frame payload is ever larger,
# whatever a journal was configured with. The configured record_size_bytes_max is lower.
FRAME_STORED_BYTES_LIMIT = 256 * 1024 * 1024
RECORD_SIZE_BYTES_MAX_DEFAULT = 16 * 1024 * 1024
IDEMPOTENCY_KEY_BYTES_MAX = 255
SEGMENT_SIZE_BYTES_DEFAULT = 64 * 1024 * 1024
INDEX_INTERVAL_BYTES_DEFAULT = 64 * 1024  # one sparse index entry per this many segment bytes
# How far past its last record the writer sets the live segment's size ahead of time. The
# space reads as zeros until written (a Stop.ZEROS at a frame boundary: nothing written yet).
RESERVE_BYTES_DEFAULT = 1024 * 1024

# --- block frames (format version 2) --------------------------------------------------------
#
# A block frame's stored payload:
#
#     u32 record count N            2 <= N <= BLOCK_RECORDS_MAX
#     u32 raw length x N            of each record's payload
#     u8  record flags x N          FLAG_BYTES | FLAG_SYNTHETIC of each record; other bits 0
#     body                          the N payloads one after the other, in the frame's codec
#
# The frame header's seq is the seq of the block's LAST record (as a padding or seal frame
# carries the seq of the record before it), its raw length the body's decompressed length (the
# sum of the records' raw lengths), its flags the kind, the body's codec and the commit flag.
# The table is in the clear so that a scan counts records without decompressing anything.
BLOCK_RECORDS_MAX = 4096  # a table of at most 20 KiB; the writer's batch bound is the same
_BLOCK_COUNT = struct.Struct("<I")
BLOCK_COUNT_SIZE_BYTES = _BLOCK_COUNT.size
BLOCK_ENTRY_SIZE_BYTES = 5  # u32 raw length + u8 flags per record
# How many bytes of records one block holds at most, on write (the writer's block_bytes option
# is at most this) and on read (a body that would decompress to more is refused before it is
# decompressed): it bounds the memory one block takes, and what a point read decodes.
BLOCK_BYTES_LIMIT = 1024 * 1024
# What the writer puts in one block by default: records appended together (an append_many, a
# run of buffered appends, the records of one group commit) share a zstd frame up to this many
# bytes of JSON. bench/README.md, "Block frames", has the measurements behind the figure:
# smaller blocks compress worse and cost more zstd calls per record (the real session files take
# 0.318x of their JSONL in blocks of 32 KiB, 0.283x in blocks of 128 KiB, at level 3); larger
# ones make the first point read of a block decode more (~120 µs for 128 KiB, ~30 µs for 32
# KiB), which the process's cache of decoded blocks (block_cache.py) pays once a block.
BLOCK_BYTES_DEFAULT = 128 * 1024

# --- seal footer ----------------------------------------------------------------------------

# The seal frame's payload: record count, first seq, last seq, index interval in bytes, number
# of index entries, number of idempotency keys; then index entries of (seq, offset); then key
# entries of (seq, key length, key); then the seal frame's own offset as the last 8 bytes of
# the file, so a reader finds the footer from the end without scanning. The keys let a writer
# reopening the journal dedupe retries against the sealed segment without reading it.
_SEAL_HEAD = struct.Struct("<QQQIII")
_SEAL_ENTRY = struct.Struct("<QQ")
_U64 = struct.Struct("<Q")
_SEAL_KEY = struct.Struct("<QB")  # seq, key length; then the key bytes
_SALT_INPUT = struct.Struct("<QQ")
SEAL_TAIL_SIZE_BYTES = 8


class SegmentHeader(NamedTuple):
    version: int
    journal_id: bytes
    segment_number: int
    base_seq: int
    salt: int


class HeaderError(ValueError):
    """A segment header that cannot be trusted; ``reason`` says why."""

    def __init__(self, reason: str, version: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.version = version


def segment_salt(journal_id: bytes, segment_number: int, base_seq: int) -> int:
    """The salt of a segment: distinct per journal (random id) and per segment, and derived,
    not drawn, so that writing the same records again (a repair redone after a crash, a
    roll-over retried) gives the same bytes. 63 bits keep it a positive C int64 as well."""
    if not (len(journal_id) == 16):
        raise InvariantError('len(journal_id) == 16')
    return xxhash.xxh64_intdigest(journal_id + _SALT_INPUT.pack(segment_number, base_seq), seed=0) & (2**63 - 1)


def segment_name(base_seq: int) -> str:
    if not (1 <= base_seq < 10**SEGMENT_NAME_DIGITS):
        raise InvariantError('1 <= base_seq < 10**SEGMENT_NAME_DIGITS')
    return f"{base_seq:0{SEGMENT_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base seq a segment file name encodes, or None if the name is not a segment's."""
    stem, dot, suffix = name.partition(".")
    if "." + suffix != SEGMENT_SUFFIX or not dot:
        return None
    if len(stem) != SEGMENT_NAME_DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    base_seq = int(stem)
    return base_seq if base_seq >= 1 else None


def encode_segment_header(header: SegmentHeader) -> bytes:
    if not (len(header.journal_id) == 16):
        raise InvariantError('len(header.journal_id) == 16')
    if not (header.base_seq >= 1 and header.segment_number >= 0):
        raise InvariantError('header.base_seq >= 1 and header.segment_number >= 0')
    body = _SEGMENT_HEADER_BODY.pack(
        SEGMENT_MAGIC,
        header.version,
        SEGMENT_HEADER_SIZE_BYTES,
        0,
        header.journal_id,
        header.segment_number,
        header.base_seq,
        header.salt,
    )
    out = body + _U64.pack(xxhash.xxh64_intdigest(body, seed=0))
    if not (len(out) == SEGMENT_HEADER_SIZE_BYTES):
        raise InvariantError('len(out) == SEGMENT_HEADER_SIZE_BYTES')
    return out


def decode_segment_header(data: bytes | memoryview) -> SegmentHeader:
    """Decode and verify a segment header; raises HeaderError saying what is wrong."""
    if len(data) < SEGMENT_HEADER_SIZE_BYTES:
        raise HeaderError(f"segment header is {len(data)} bytes, expected {SEGMENT_HEADER_SIZE_BYTES}")
    body = bytes(data[: _SEGMENT_HEADER_BODY.size])
    magic, version, header_size, header_flags, journal_id, number, base_seq, salt = _SEGMENT_HEADER_BODY.unpack(body)
    if magic != SEGMENT_MAGIC:
        raise HeaderError("bad segment magic: not a journal segment")
    (checksum,) = _U64.unpack_from(data, _SEGMENT_HEADER_BODY.size)
    if checksum != xxhash.xxh64_intdigest(body, seed=0):
        raise HeaderError("segment header checksum mismatch")
    if version > FORMAT_VERSION:
        raise HeaderError(f"segment written by format version {version}", version=version)
    if version < FORMAT_VERSION_MIN or header_size != SEGMENT_HEADER_SIZE_BYTES or header_flags != 0 or base_seq < 1:
        raise HeaderError("segment header fields out of range")
    return SegmentHeader(version, journal_id, number, base_seq, salt)


# --- the start marker: where a journal begins after its prefix was dropped --------------------

# A journal whose first records were dropped (Journal.drop_prefix), or that was made to begin at
# a later seq (salvage of such a journal), names its first segment in this file, so that a
# missing segment at the front is told from a dropped one: without it the first segment must
# start at seq 1. Written whole (temp file, fsync, rename, directory fsync) before any segment
# it drops is unlinked. Body: magic, version, size, flags (0), journal id, the first segment's
# number, the journal's first seq; then XXH64 (seed 0) of the body.
START_FILE = "START"
START_MAGIC = b"JRNLSTA\x00"
_START_BODY = struct.Struct("<8sHHI16sQQ")
START_SIZE_BYTES = _START_BODY.size + 8


class StartMarker(NamedTuple):
    journal_id: bytes
    segment_number: int
    first_seq: int


def encode_start(marker: StartMarker) -> bytes:
    if not (len(marker.journal_id) == 16 and marker.segment_number >= 0 and marker.first_seq >= 1):
        raise InvariantError("a start marker names a journal id, a segment number >= 0 and a first seq >= 1")
    body = _START_BODY.pack(
        START_MAGIC, START_VERSION, START_SIZE_BYTES, 0, marker.journal_id, marker.segment_number, marker.first_seq
    )
    return body + _U64.pack(xxhash.xxh64_intdigest(body, seed=0))


def decode_start(data: bytes | memoryview) -> StartMarker:
    """Decode and verify a start marker; raises HeaderError saying what is wrong."""
    if len(data) != START_SIZE_BYTES:
        raise HeaderError(f"start marker is {len(data)} bytes, expected {START_SIZE_BYTES}")
    body = bytes(data[: _START_BODY.size])
    magic, version, size, flags, journal_id, number, first_seq = _START_BODY.unpack(body)
    if magic != START_MAGIC:
        raise HeaderError("bad start marker magic")
    (checksum,) = _U64.unpack_from(data, _START_BODY.size)
    if checksum != xxhash.xxh64_intdigest(body, seed=0):
        raise HeaderError("start marker checksum mismatch")
    if version > START_VERSION:
        raise HeaderError(f"start marker written by format version {version}", version=version)
    if version < 1 or size != START_SIZE_BYTES or flags != 0 or first_seq < 1:
        raise HeaderError("start marker fields out of range")
    return StartMarker(journal_id, number, first_seq)


# --- frames ---------------------------------------------------------------------------------


def flags_supported(flags: int, dict_id: int) -> bool:
    """Whether this version can read a frame with these flags and dictionary id: a dictionary
    (format version 4) only on a zstd data or block frame; on any other frame it is a meaning
    this version does not know (a newer format)."""
    kind = flags & FLAG_KIND_MASK
    return (
        flags & ~FLAGS_KNOWN == 0
        and (flags & FLAG_CODEC_MASK) in CODECS_KNOWN
        and kind in KINDS_KNOWN
        and (dict_id == 0 or (flags & FLAG_CODEC_MASK == CODEC_ZSTD and kind in (KIND_DATA, KIND_BLOCK)))
        and (kind != KIND_BLOCK or flags & BLOCK_FRAME_FLAGS_REFUSED == 0)
    )


def block_count(buf: bytes | memoryview, payload_offset: int, stored_len: int) -> int:
    """The record count of the block frame whose stored payload is ``buf[payload_offset:
    payload_offset + stored_len]``, or 0 if its table does not fit that payload or its count is
    out of range (a frame this version cannot read). Trust it only for a genuine frame."""
    if stored_len < BLOCK_COUNT_SIZE_BYTES:
        return 0
    (count,) = _BLOCK_COUNT.unpack_from(buf, payload_offset)
    if not 2 <= count <= BLOCK_RECORDS_MAX:
        return 0
    if BLOCK_COUNT_SIZE_BYTES + count * BLOCK_ENTRY_SIZE_BYTES > stored_len:
        return 0
    return int(count)


def encode_block_head(lengths: list[int], record_flags: list[int]) -> bytes:
    """The table at the front of a block frame's stored payload; the body follows it."""
    count = len(lengths)
    if not (2 <= count <= BLOCK_RECORDS_MAX and len(record_flags) == count):
        raise InvariantError("a block holds 2 to BLOCK_RECORDS_MAX records, one flags byte each")
    if any(f & ~BLOCK_RECORD_FLAGS for f in record_flags) or not all(0 <= n <= 0xFFFFFFFF for n in lengths):
        raise InvariantError("a block record's flags are FLAG_BYTES | FLAG_SYNTHETIC and its length a u32")
    return _BLOCK_COUNT.pack(count) + struct.pack(f"<{count}I", *lengths) + bytes(record_flags)


class BlockHead(NamedTuple):
    lengths: tuple[int, ...]  # raw length of each record, in order
    flags: bytes  # each record's FLAG_BYTES | FLAG_SYNTHETIC
    body_offset: int  # where the body starts in the stored payload


def decode_block_head(stored: bytes | memoryview, raw_len: int) -> BlockHead:
    """The table of a genuine block frame's stored payload, checked against the frame's raw
    length; ValueError saying what is wrong (a frame this version's writer never writes)."""
    count = block_count(stored, 0, len(stored))
    if count == 0:
        raise ValueError("block table does not fit its frame, or its record count is out of range")
    lengths: tuple[int, ...] = struct.unpack_from(f"<{count}I", stored, BLOCK_COUNT_SIZE_BYTES)
    at = BLOCK_COUNT_SIZE_BYTES + 4 * count
    flags = bytes(stored[at : at + count])
    if sum(lengths) != raw_len:
        raise ValueError(f"block records add up to {sum(lengths)} bytes, the frame says {raw_len}")
    if flags.translate(None, _BLOCK_RECORD_FLAG_VALUES):  # a byte that is none of them, found in C
        raise ValueError("block record flags hold bits this version does not know")
    return BlockHead(lengths, flags, at + count)


# Every value a block record's flags byte may take: none, bytes, synthetic, both.
_BLOCK_RECORD_FLAG_VALUES = bytes(sorted({0, FLAG_BYTES, FLAG_SYNTHETIC, BLOCK_RECORD_FLAGS}))


def frame_checksum(header_tail: bytes | memoryview, payload: bytes | memoryview, salt: int) -> int:
    h = xxhash.xxh64(seed=salt)
    h.update(header_tail)
    h.update(payload)
    return h.intdigest()


def encode_frame(seq: int, flags: int, raw_len: int, stored: bytes, salt: int, dict_id: int = 0) -> bytes:
    """One frame: header + stored payload. ``stored`` is already compressed/keyed."""
    if not (flags & ~FLAGS_KNOWN == 0):
        raise InvariantError("unknown flag bits")
    if not (len(stored) <= FRAME_STORED_BYTES_LIMIT):
        raise InvariantError('len(stored) <= FRAME_STORED_BYTES_LIMIT')
    if not (seq >= 0 and 0 <= raw_len <= 0xFFFFFFFF and 0 <= dict_id <= 0xFFFF):
        raise InvariantError('seq >= 0 and 0 <= raw_len <= 0xFFFFFFFF and 0 <= dict_id <= 0xFFFF')
    tail = _FRAME_TAIL.pack(len(stored), raw_len, seq, flags, dict_id, FRAME_MARKER) + stored
    return _U64.pack(xxhash.xxh64_intdigest(tail, seed=salt)) + tail


class FrameSpec(NamedTuple):
    """What the writer hands the frame encoder: everything but the seq and the salt."""

    flags: int
    raw_len: int
    stored: bytes
    records: int = 1  # records in the frame: 1, or a block's N
    dict_id: int = 0  # the dictionary its zstd payload was compressed with (format version 4)


def encode_batch(first_seq: int, specs: list[FrameSpec], salt: int, commit_last: bool) -> bytes:
    """Frames for consecutive seqs from ``first_seq``; the last one carries FLAG_COMMIT if asked.
    Each frame carries its spec's flags as given (the writer puts FLAG_AFTER_SYNC in the first
    spec's flags when that frame may carry it).
    A block frame takes as many seqs as it holds records and carries the last of them.

    This is the hot append path that the C helper replaces (for frames of one record); the
    bytes must be identical.
    """
    parts: list[bytes] = []
    last = len(specs) - 1
    seq = first_seq - 1
    for i, spec in enumerate(specs):
        seq += spec.records
        flags = spec.flags | (FLAG_COMMIT if commit_last and i == last else 0)
        parts.append(encode_frame(seq, flags, spec.raw_len, spec.stored, salt, spec.dict_id))
    return b"".join(parts)


def zeros_from(data: bytes, start: int = 0) -> bool:
    """True if every byte of ``data`` from ``start`` on is zero (a reserved or zero-filled tail).

    bytes.count runs in C: ten times ``any()`` over a MiB of reserved space.
    """
    if not (0 <= start <= len(data)):
        raise InvariantError('0 <= start <= len(data)')
    return data.count(0, start) == len(data) - start


class Stop(enum.IntEnum):
    """Why a scan stopped. The numeric values are shared with the C helper."""

    END = 0  # the buffer ended exactly at a frame boundary
    TRUNCATED = 1  # a header or payload runs past the end of the buffer: not yet written, or torn
    ZEROS = 2  # the next header is all zero bytes: preallocated or size-extended space
    CHECKSUM = 3  # bad marker, impossible length, or checksum mismatch: torn or corrupt
    SEQ = 4  # a valid frame whose seq is not the next one: a gap or a duplicate
    FLAGS = 5  # a valid frame with unknown flag bits or codec: written by a newer format
    SEALED = 6  # a valid seal frame; the segment ends here


# What a scan that stopped at damage found there, in the words verify, salvage and recovery all
# report it with.
STOP_DAMAGE: dict[Stop, str] = {
    Stop.TRUNCATED: "frame runs past the end of the file",
    Stop.ZEROS: "zeroed bytes",
    Stop.CHECKSUM: "bad frame (marker, length or checksum)",
}


class Frame(NamedTuple):
    offset: int  # of the frame header within the segment
    seq: int  # a data frame's record; a block's last record; padding and seal: the record before
    flags: int
    raw_len: int
    stored_len: int
    records: int = 1  # records it holds: 1 (data), N (block), 0 (padding, seal)

    @property
    def payload_offset(self) -> int:
        return self.offset + FRAME_HEADER_SIZE_BYTES

    @property
    def end(self) -> int:
        return self.offset + FRAME_HEADER_SIZE_BYTES + self.stored_len

    @property
    def first_seq(self) -> int:
        """The seq of its first record (for a data or block frame)."""
        return self.seq - self.records + 1


@dataclass
class ScanResult:
    frames: list[Frame]
    stop: Stop
    stop_offset: int  # where the first frame that is not returned starts
    stop_seq: int  # the seq found in the offending frame (0 if it could not be read)

    @property
    def next_seq_hint(self) -> int:
        return self.frames[-1].seq + 1 if self.frames else 0

    @property
    def record_count(self) -> int:
        """Records in the frames found (a block counts its records; padding and seal none)."""
        return sum(f.records for f in self.frames)


def scan(
    buf: bytes | memoryview,
    start: int,
    salt: int,
    expected_seq: int,
    base_offset: int = 0,
    frames_max: int = 1 << 62,
) -> ScanResult:
    """Walk frames in ``buf`` from ``start`` and validate each; stop at the first that fails.

    ``base_offset`` is the segment offset of ``buf[0]`` (frame offsets are segment offsets).
    Bounds are checked before a length is used, and the checksum before any field is trusted.
    Data frames must carry ``expected_seq``, ``expected_seq + 1``, ...; padding and seal frames
    carry the seq of the record before them. This is the hot scan path the C helper replaces.
    """
    mv = memoryview(buf)
    size = len(mv)
    pos = start
    frames: list[Frame] = []
    unpack = _FRAME_HEADER.unpack_from
    while len(frames) < frames_max:
        if pos == size:
            return ScanResult(frames, Stop.END, pos + base_offset, 0)
        if size - pos < FRAME_HEADER_SIZE_BYTES:
            if not any(mv[pos:size]):
                return ScanResult(frames, Stop.ZEROS, pos + base_offset, 0)
            return ScanResult(frames, Stop.TRUNCATED, pos + base_offset, 0)
        checksum, stored_len, raw_len, seq, flags, dict_id, marker = unpack(mv, pos)
        if marker != FRAME_MARKER:
            if not any(mv[pos : pos + FRAME_HEADER_SIZE_BYTES]):
                return ScanResult(frames, Stop.ZEROS, pos + base_offset, 0)
            return ScanResult(frames, Stop.CHECKSUM, pos + base_offset, 0)
        if stored_len > FRAME_STORED_BYTES_LIMIT:
            return ScanResult(frames, Stop.CHECKSUM, pos + base_offset, 0)
        end = pos + FRAME_HEADER_SIZE_BYTES + stored_len
        if end > size:
            return ScanResult(frames, Stop.TRUNCATED, pos + base_offset, 0)
        h = xxhash.xxh64(mv[pos + FRAME_CHECKSUMMED_FROM : end], seed=salt)
        if h.intdigest() != checksum:
            return ScanResult(frames, Stop.CHECKSUM, pos + base_offset, 0)
        # The frame is genuine from here on: its fields can be trusted.
        kind = flags & FLAG_KIND_MASK
        if not flags_supported(flags, dict_id):
            return ScanResult(frames, Stop.FLAGS, pos + base_offset, seq)
        if kind == KIND_DATA:
            if seq != expected_seq:
                return ScanResult(frames, Stop.SEQ, pos + base_offset, seq)
            expected_seq += 1
            count = 1
        elif kind == KIND_BLOCK:
            count = block_count(mv, pos + FRAME_HEADER_SIZE_BYTES, stored_len)
            if count == 0:  # a table this version does not know how to read
                return ScanResult(frames, Stop.FLAGS, pos + base_offset, seq)
            if seq + 1 - count != expected_seq:  # reported by its first seq (or its last, if < 0)
                return ScanResult(frames, Stop.SEQ, pos + base_offset, seq + 1 - count if seq + 1 >= count else seq)
            expected_seq = seq + 1
        elif seq != expected_seq - 1:
            return ScanResult(frames, Stop.SEQ, pos + base_offset, seq)
        else:
            count = 0
        frames.append(Frame(pos + base_offset, seq, flags, raw_len, stored_len, count))
        pos = end
        if kind == KIND_SEAL:
            return ScanResult(frames, Stop.SEALED, pos + base_offset, seq)
    return ScanResult(frames, Stop.END, pos + base_offset, 0)


RECORD_KINDS = (KIND_DATA, KIND_BLOCK)  # the kinds of frame that hold records


def record_frames(frames: list[Frame]) -> list[Frame]:
    """The frames of a scan that hold records (data and block frames), in order."""
    return [fr for fr in frames if fr.flags & FLAG_KIND_MASK in RECORD_KINDS]


class GenuineFrame(NamedTuple):
    """A frame whose marker, length and salted checksum hold: its fields can be trusted. Whether
    this version can read it (``supported``) and whether its seq fits are other questions."""

    offset: int
    seq: int
    flags: int
    raw_len: int
    stored_len: int
    dict_id: int

    @property
    def end(self) -> int:
        return self.offset + FRAME_HEADER_SIZE_BYTES + self.stored_len

    @property
    def kind(self) -> int:
        return self.flags & FLAG_KIND_MASK

    @property
    def supported(self) -> bool:
        return flags_supported(self.flags, self.dict_id)


# A named tuple's own constructor is a Python function; tuple.__new__ builds the same value in C
# (a point read verifies one frame per call, and this was a tenth of it).
_new_genuine = partial(tuple.__new__, GenuineFrame)


def verify_frame(buf: bytes | memoryview, pos: int, salt: int) -> GenuineFrame | None:
    """The frame at ``pos`` if it is genuine (marker, a length within the limit and the buffer,
    the checksum seeded with ``salt``), else None. The one answer to "is this frame genuine";
    ``scan`` makes the same checks in the same order. This is the pure twin of the C helper's."""
    mv = memoryview(buf)
    if pos < 0 or mv.nbytes - pos < FRAME_HEADER_SIZE_BYTES:
        return None
    checksum, stored_len, raw_len, seq, flags, dict_id, marker = _FRAME_HEADER.unpack_from(mv, pos)
    if marker != FRAME_MARKER or stored_len > FRAME_STORED_BYTES_LIMIT:
        return None
    end = pos + FRAME_HEADER_SIZE_BYTES + stored_len
    if end > mv.nbytes or xxhash.xxh64_intdigest(mv[pos + FRAME_CHECKSUMMED_FROM : end], seed=salt) != checksum:
        return None
    return _new_genuine((pos, seq, flags, raw_len, stored_len, dict_id))


def next_genuine_frame(buf: bytes | memoryview, start: int, salt: int, pure: bool = False) -> GenuineFrame | None:
    """The first genuine frame that starts at or after ``start``: the marker narrows the
    candidates, the salted 64-bit checksum rules out false positives. ``pure`` keeps the pure
    twins pure (they must not depend on the C helper they are checked against)."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    verify = py_verify_frame if pure else verify_frame
    pos = max(start, 0) + FRAME_MARKER_OFFSET
    while True:
        pos = data.find(FRAME_MARKER_BYTES, pos)
        if pos < 0:
            return None
        got = verify(data, pos - FRAME_MARKER_OFFSET, salt)
        if got is not None:
            return got
        pos += 1


def find_later_commit(buf: bytes | memoryview, start: int, salt: int, after_seq: int) -> int | None:
    """Offset (in ``buf``) of the first genuine commit-marked or seal frame at or after ``start``
    whose seq is above ``after_seq``, if any.

    This is the search primitive; ``find_durable_point`` decides what a found frame proves.
    """
    pos = start
    while True:
        got = next_genuine_frame(buf, pos, salt, pure=True)
        if got is None:
            return None
        if got.seq > after_seq and (got.flags & FLAG_COMMIT or got.kind == KIND_SEAL):
            return got.offset
        pos = got.offset + 1


def find_after_sync(buf: bytes | memoryview, start: int, salt: int, after_seq: int) -> int | None:
    """Offset (in ``buf``) of the first genuine FLAG_AFTER_SYNC frame at or after ``start``
    whose seq is above ``after_seq``, if any: every byte before it was fdatasync'd before it was
    written (the flag's claim, which only a genuine frame can make)."""
    pos = start
    while True:
        got = next_genuine_frame(buf, pos, salt)
        if got is None:
            return None
        if got.seq > after_seq and got.flags & FLAG_AFTER_SYNC:
            return got.offset
        pos = got.offset + 1


def find_durable_point(buf: bytes | memoryview, start: int, salt: int, after_seq: int) -> int | None:
    """Offset of a frame at or after ``start`` that proves the bytes before it were fdatasync'd.

    Two things prove it, and nothing else does:

    * a genuine frame carrying FLAG_AFTER_SYNC (format version 3) with a seq above
      ``after_seq``: its writer set the flag only after an fdatasync of every byte before it had
      returned (the frame's offset is returned);
    * a commit-marked (or seal) frame followed by a genuine frame with a higher seq: the writer
      never writes a batch before the previous batch's fdatasync has returned, so the later
      frame proves the commit frame's fdatasync completed (the commit frame's offset).

    A commit-marked frame alone proves nothing: its batch may have been in flight when the power
    failed, with the commit frame on disk and earlier bytes of the same batch (or of unsynced
    batches before it) lost. Recovery uses this to tell a torn tail (nothing proven durable
    after the damage: cut it) from corruption of synced data (refuse it). When both proofs are
    present, the first in the bytes is returned.
    """
    after = find_after_sync(buf, start, salt, after_seq)
    commit_at = find_later_commit(buf, start, salt, after_seq)
    if commit_at is None or (after is not None and after < commit_at):
        return after
    commit = present(verify_frame(buf, commit_at, salt), "find_later_commit returned a frame that does not verify")
    # Usually the very next frame is the proof; search the rest only if it is not.
    nxt = verify_frame(buf, commit.end, salt)
    if nxt is not None and nxt.seq > commit.seq:
        return commit_at
    pos = commit.end
    while True:
        later = next_genuine_frame(buf, pos, salt)
        if later is None:
            return after
        if later.seq > commit.seq:
            return commit_at
        pos = later.offset + 1


def padding_frame(end: int, sector_bytes: int, seq: int, salt: int) -> bytes:
    """The padding frame that makes ``end`` a multiple of ``sector_bytes`` (b"" if it is one, or
    without sector_bytes). It carries the seq of the record before it. The only place padding
    is computed: after a new segment's header and after each synced batch."""
    if not sector_bytes or end % sector_bytes == 0:
        return b""
    gap = -end % sector_bytes
    if gap < FRAME_HEADER_SIZE_BYTES:
        gap += sector_bytes
    pad_len = gap - FRAME_HEADER_SIZE_BYTES
    frame = encode_frame(seq, KIND_PADDING, pad_len, bytes(pad_len), salt)
    invariant((end + len(frame)) % sector_bytes == 0, "padding frame does not end on a sector boundary")
    return frame


# --- seal footer ----------------------------------------------------------------------------


class SealInfo(NamedTuple):
    record_count: int
    first_seq: int
    last_seq: int
    index_interval_bytes: int
    entries: list[tuple[int, int]]  # sparse index (seq, offset), ascending
    seal_offset: int
    keys: list[tuple[int, bytes]]  # (seq, idempotency key) of every keyed record


def encode_seal_payload(
    record_count: int,
    first_seq: int,
    last_seq: int,
    index_interval_bytes: int,
    index: list[tuple[int, int]],
    seal_offset: int,
    keys: list[tuple[int, bytes]] | None = None,
) -> bytes:
    if not (record_count >= 1 and last_seq - first_seq + 1 == record_count):
        raise InvariantError('record_count >= 1 and last_seq - first_seq + 1 == record_count')
    keys = keys or []
    parts = [_SEAL_HEAD.pack(record_count, first_seq, last_seq, index_interval_bytes, len(index), len(keys))]
    parts.extend(_SEAL_ENTRY.pack(seq, off) for seq, off in index)
    for seq, key in keys:
        if not (first_seq <= seq <= last_seq and 1 <= len(key) <= IDEMPOTENCY_KEY_BYTES_MAX):
            raise InvariantError('first_seq <= seq <= last_seq and 1 <= len(key) <= IDEMPOTENCY_KEY_BYTES_MAX')
        parts.append(_SEAL_KEY.pack(seq, len(key)) + key)
    parts.append(_U64.pack(seal_offset))
    return b"".join(parts)


def decode_seal_payload(payload: bytes | memoryview) -> SealInfo:
    if len(payload) < _SEAL_HEAD.size + SEAL_TAIL_SIZE_BYTES:
        raise ValueError("seal payload too short")
    count, first, last, interval, n, n_keys = _SEAL_HEAD.unpack_from(payload, 0)
    pos = _SEAL_HEAD.size + n * _SEAL_ENTRY.size
    if pos + n_keys * _SEAL_KEY.size + SEAL_TAIL_SIZE_BYTES > len(payload) or count < 1 or last - first + 1 != count:
        raise ValueError("seal payload fields inconsistent")
    index = [_SEAL_ENTRY.unpack_from(payload, _SEAL_HEAD.size + i * _SEAL_ENTRY.size) for i in range(n)]
    keys: list[tuple[int, bytes]] = []
    for _ in range(n_keys):
        if pos + _SEAL_KEY.size > len(payload) - SEAL_TAIL_SIZE_BYTES:
            raise ValueError("seal key table runs past the footer")
        seq, key_len = _SEAL_KEY.unpack_from(payload, pos)
        pos += _SEAL_KEY.size
        keys.append((int(seq), bytes(payload[pos : pos + key_len])))
        pos += key_len
    if pos != len(payload) - SEAL_TAIL_SIZE_BYTES:
        raise ValueError("seal payload length disagrees with its tables")
    (seal_offset,) = _U64.unpack_from(payload, len(payload) - SEAL_TAIL_SIZE_BYTES)
    return SealInfo(count, first, last, interval, [(int(s), int(o)) for s, o in index], seal_offset, keys)


def seal_tail_offset(tail: bytes | memoryview) -> int:
    """The seal frame offset stored in a sealed segment's last 8 bytes (not yet verified)."""
    if not (len(tail) == SEAL_TAIL_SIZE_BYTES):
        raise InvariantError('len(tail) == SEAL_TAIL_SIZE_BYTES')
    (offset,) = _U64.unpack(bytes(tail))
    return int(offset)


def read_frame_header(buf: bytes | memoryview, pos: int) -> tuple[int, int, int, int, int, int, int]:
    """Unverified header fields: checksum, stored_len, raw_len, seq, flags, dict_id, marker."""
    fields: tuple[int, int, int, int, int, int, int] = _FRAME_HEADER.unpack_from(buf, pos)
    return fields


# --- idempotency keys in stored payloads ----------------------------------------------------


def split_keyed(stored: bytes | memoryview) -> tuple[bytes, memoryview]:
    """(key, body) of a FLAG_KEYED stored payload."""
    mv = memoryview(stored)
    if len(mv) < 1 or len(mv) < 1 + mv[0]:
        raise ValueError("keyed payload shorter than its key")
    key_len = mv[0]
    if key_len == 0:  # a key is 1 to 255 bytes: the writer never stores an empty one
        raise ValueError("keyed payload with an empty key")
    return bytes(mv[1 : 1 + key_len]), mv[1 + key_len :]


# --- the C helper ---------------------------------------------------------------------------
# The pure functions above stay reachable as py_*. When the C helper is built (and JOURNAL_PURE
# is not set) the hot ones are rebound to the c_* functions below, which check that the
# arguments fit the C types and hand anything else to the pure twin, so even the errors raised
# are the same. Callers use fmt.scan etc.: the rebinding is all the selection there is.
# journal/engine/native.py is a leaf that knows buffers and integers only; docs/NATIVE.md.
py_scan = scan
py_encode_batch = encode_batch
py_find_later_commit = find_later_commit
py_verify_frame = verify_frame

U64_MAX = (1 << 64) - 1
_new_frame = partial(tuple.__new__, Frame)  # a C row is already in Frame's field order
_spec_flags = itemgetter(0)
_spec_raw_len = itemgetter(1)
_spec_stored = itemgetter(2)


def _c_args_ok(mv: memoryview, start: int, salt: int, seq: int, base_offset: int) -> bool:
    return (
        mv.itemsize == 1
        and mv.c_contiguous
        and 0 <= start <= mv.nbytes
        and 0 <= salt <= U64_MAX
        and 0 <= seq <= U64_MAX
        and 0 <= base_offset <= U64_MAX - mv.nbytes
    )


def c_encode_batch(first_seq: int, specs: list[FrameSpec], salt: int, commit_last: bool) -> bytes:
    """encode_batch in C: the same bytes in one output buffer."""
    n = len(specs)
    if n == 0 or first_seq < 0 or first_seq + n - 1 > U64_MAX or not 0 <= salt <= U64_MAX:
        return py_encode_batch(first_seq, specs, salt, commit_last)
    if any(spec.records != 1 or spec.dict_id for spec in specs):
        # Block frames: a few frames of many records each, framed in Python (the C encoder
        # gives frame i seq first_seq + i, one record a frame); frames naming a dictionary
        # too (the C encoder writes dictionary id 0).
        return py_encode_batch(first_seq, specs, salt, commit_last)
    try:
        stored = list(map(_spec_stored, specs))
        lens = array("I", map(len, stored))
        flags = array("I", map(_spec_flags, specs))
        raw_lens = array("I", map(_spec_raw_len, specs))
        payload = b"".join(stored)
    except (OverflowError, TypeError, ValueError):
        return py_encode_batch(first_seq, specs, salt, commit_last)
    data = _native.encode_batch(payload, flags, raw_lens, lens, first_seq, salt, commit_last)
    if data is None:
        # Refused (unknown flags, a payload over the limit): the twin raises the same error.
        return py_encode_batch(first_seq, specs, salt, commit_last)
    return data


def c_scan(
    buf: bytes | memoryview,
    start: int,
    salt: int,
    expected_seq: int,
    base_offset: int = 0,
    frames_max: int = 1 << 62,
) -> ScanResult:
    """scan in C: the same frames, stop reason, stop offset and stop seq."""
    mv = memoryview(buf)
    if not _c_args_ok(mv, start, salt, expected_seq, base_offset):
        return py_scan(buf, start, salt, expected_seq, base_offset, frames_max)
    frames, stop, pos, stop_seq = _native.scan(mv, start, salt, expected_seq, base_offset, frames_max, _new_frame)
    if stop == _native.STOP_FULL:
        return ScanResult(frames, Stop.END, pos + base_offset, 0)
    return ScanResult(frames, Stop(stop), pos + base_offset, stop_seq)


class Verified(NamedTuple):
    """What a verify-only scan found: how many frames are valid and where and why it stopped."""

    frame_count: int
    stop: Stop
    stop_offset: int
    stop_seq: int
    next_seq: int  # the seq the next data frame would carry


def verify_scan(buf: bytes | memoryview, start: int, salt: int, expected_seq: int, base_offset: int = 0) -> Verified:
    """Validate every frame like scan() but build no per-frame objects (integrity checks,
    benchmarks). The pure scan when the C helper is not in use."""
    mv = memoryview(buf)
    if not _native.native_available() or not _c_args_ok(mv, start, salt, expected_seq, base_offset):
        res = py_scan(buf, start, salt, expected_seq, base_offset)
        return Verified(len(res.frames), res.stop, res.stop_offset, res.stop_seq, expected_seq + res.record_count)
    count, stop, pos, stop_seq, exhausted, next_seq = _native.count_frames(mv, start, salt, expected_seq, base_offset)
    return Verified(count, Stop(stop), pos + base_offset, stop_seq, U64_MAX + 1 if exhausted else next_seq)


def c_verify_frame(buf: bytes | memoryview, pos: int, salt: int) -> GenuineFrame | None:
    """verify_frame in C."""
    mv = memoryview(buf)
    if not _c_args_ok(mv, max(pos, 0), salt, 0, 0) or pos < 0:
        return py_verify_frame(buf, pos, salt)
    row = _native.verify_frame(mv, pos, salt)
    return None if row is None else GenuineFrame._make(row)


def c_find_later_commit(buf: bytes | memoryview, start: int, salt: int, after_seq: int) -> int | None:
    """find_later_commit in C."""
    mv = memoryview(buf)
    if not _c_args_ok(mv, start, salt, after_seq, 0):
        return py_find_later_commit(buf, start, salt, after_seq)
    at = _native.find_later_commit(mv, start, salt, after_seq)
    return None if at < 0 else at


if _native.native_available():
    scan = c_scan
    encode_batch = c_encode_batch
    find_later_commit = c_find_later_commit
    verify_frame = c_verify_frame
