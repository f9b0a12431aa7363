"""Reading records: a cursor over segments that seeks with sealed footers and verifies every frame.

Readers take no lock. In the live (last, unsealed) segment an incomplete or damaged frame with
nothing durable after it is "not yet written": the cursor stops there and a later call picks up
from the same place. Damage with a commit-marked frame after it, anything wrong inside a sealed
segment, and any gap or duplicate in seqs are errors that name the segment, offset and seq.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator

import xxhash
import zstandard

from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.block_cache import CACHE as _BLOCKS
from journal.engine.block_cache import PointBlock, new_owner
from journal.engine.dictionary import DictionaryCache, for_segment, undecodable_hint
from journal.engine.segment import SegmentName, list_segments, read_header, read_seal, read_start
from journal.errors import (
    CorruptionError,
    ForeignSegmentError,
    InvariantError,
    JournalIOError,
    PrefixDroppedError,
    RecordTooLargeError,
    SequenceError,
    present,
)
from journal.fs import File, FileSystem, pread_upto
from journal.record import ZSTD_MAGIC_FIRST_BYTE, ZSTD_SIZE_DECLARED_BITS, zstd_decompress_bounded
from journal.record import Record as Record  # explicit re-export: engine modules import it from here

READ_CHUNK_BYTES = 1024 * 1024
_KIND_MASK, _KIND_DATA, _KIND_BLOCK = fmt.FLAG_KIND_MASK, fmt.KIND_DATA, fmt.KIND_BLOCK
_HEADER = fmt.FRAME_HEADER_SIZE_BYTES
_CODEC_MASK, _ZSTD, _BYTES, _SYNTHETIC = fmt.FLAG_CODEC_MASK, fmt.CODEC_ZSTD, fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC
_ZSTD_MAGIC_FIRST, _ZSTD_SIZE_BITS = ZSTD_MAGIC_FIRST_BYTE, ZSTD_SIZE_DECLARED_BITS
_SLOW_FLAGS = fmt.FLAG_KEYED | (fmt.FLAG_CODEC_MASK & ~fmt.CODEC_ZSTD)  # keyed, or a codec decoded elsewhere
FEW_RECORDS = 64  # a read of at most this many records starts with a small chunk
FEW_RECORDS_CHUNK_BYTES = 128 * 1024  # two sparse-index intervals: the record is usually inside
DENSE_CHUNK_BYTES = 256 * 1024  # what one step of a point-read index scan reads
# What one point read costs without the index (about one sparse-index interval of the footer,
# 64 KiB by default): once the misses of a segment add up to its size, it is indexed.
DENSE_BUILD_BYTES_PER_MISS = 64 * 1024
_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    d: zstandard.ZstdDecompressor | None = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


_DICT_ID_OFFSET = 26  # of the u16 dictionary id in a frame header (format._FRAME_HEADER)


def frame_dict_id(buf: bytes | memoryview, at: int) -> int:
    """The dictionary id of the frame whose header starts at ``at`` of ``buf`` (0: none). A
    scan's Frame does not carry it; only a zstd frame's is ever looked at."""
    if at < 0:
        raise InvariantError("a frame's header is in the buffer it is decoded from")
    mv = memoryview(buf)
    return int(mv[at + _DICT_ID_OFFSET]) | int(mv[at + _DICT_ID_OFFSET + 1]) << 8


def _decompressor_for(
    dict_id: int, dicts: DictionaryCache | None, segment: str, offset: int, seq: int
) -> zstandard.ZstdDecompressor:
    """The decompressor of a frame: the plain one, or one with the dictionary it names, loaded
    from the journal directory (CorruptionError naming the file when it is missing or damaged)."""
    if not dict_id:
        return _decompressor()
    if dicts is None:
        raise CorruptionError(
            segment, offset, seq, f"the frame names dictionary {dict_id}, and this reader has no journal directory "
            "to load it from"
        )
    return dicts.decompressor(dict_id, segment, offset, seq)


def decode_payload(
    frame: fmt.Frame,
    buf: bytes | memoryview,
    buf_offset: int,
    segment: str,
    record_size_bytes_max: int,
    dicts: DictionaryCache | None = None,
) -> Record:
    """Turn a verified data frame into a Record (decompress, split the key). ``dicts``: the
    journal's dictionaries, for a frame that names one."""
    start = frame.payload_offset - buf_offset
    stored = memoryview(buf)[start : start + frame.stored_len]
    dict_id = frame_dict_id(buf, frame.offset - buf_offset) if frame.flags & _CODEC_MASK == _ZSTD else 0
    return decode_stored(
        frame.seq, frame.flags, frame.raw_len, stored, segment, frame.offset, record_size_bytes_max, dict_id, dicts
    )


def decode_stored(
    seq: int,
    flags: int,
    raw_len: int,
    stored: memoryview,
    segment: str,
    offset: int,
    record_size_bytes_max: int,
    dict_id: int = 0,
    dicts: DictionaryCache | None = None,
) -> Record:
    """The Record of a verified data frame's stored payload ``stored`` (the frame at ``offset``
    of ``segment``, for errors): decode_payload's work, for a caller that has the frame's fields
    but no Frame (a point read: building one cost a tenth of it)."""
    key: str | None = None
    if flags & fmt.FLAG_KEYED:
        try:
            raw_key, stored = fmt.split_keyed(stored)
        except ValueError as exc:
            raise CorruptionError(segment, offset, seq, str(exc)) from None
        key = raw_key.decode("utf-8", "surrogateescape")
    if raw_len > record_size_bytes_max:
        raise RecordTooLargeError(raw_len, record_size_bytes_max, reading=True)
    if flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD:
        # Bounded by the record's own length (raw_len, itself at most the size limit): a zstd
        # header that declares more is refused before anything of that size is allocated.
        try:
            payload = zstd_decompress_bounded(_decompressor_for(dict_id, dicts, segment, offset, seq), stored, raw_len)
        except ValueError as exc:
            raise CorruptionError(segment, offset, seq, f"{exc}{undecodable_hint(dict_id)}") from None
    else:
        payload = bytes(stored)
    if len(payload) != raw_len:
        raise CorruptionError(segment, offset, seq, "payload length differs from its header")
    return Record(seq, payload, bool(flags & fmt.FLAG_BYTES), key, bool(flags & fmt.FLAG_SYNTHETIC), segment, offset)


def decode_block(
    frame: fmt.Frame,
    buf: bytes | memoryview,
    buf_offset: int,
    segment: str,
    record_size_bytes_max: int,
    dicts: DictionaryCache | None = None,
) -> list[Record]:
    """The records of a verified block frame, in seq order (decompress the body once, cut it
    by the table). A table or body that disagrees with the frame is CorruptionError: the frame's
    checksum held, so its writer wrote it so, and nothing in it can be trusted to be a record."""
    payload, head = block_body(frame, buf, buf_offset, segment, record_size_bytes_max, dicts)
    return _block_records(payload, head.lengths, head.flags, frame.first_seq, segment, frame.offset)


def block_body(
    frame: fmt.Frame,
    buf: bytes | memoryview,
    buf_offset: int,
    segment: str,
    record_size_bytes_max: int,
    dicts: DictionaryCache | None = None,
) -> tuple[bytes, fmt.BlockHead]:
    """(decoded body, table) of a verified block frame; CorruptionError as decode_block says."""
    start = frame.payload_offset - buf_offset
    stored = memoryview(buf)[start : start + frame.stored_len]
    first = frame.first_seq
    try:
        head = fmt.decode_block_head(stored, frame.raw_len)
    except ValueError as exc:
        raise CorruptionError(segment, frame.offset, first, f"block frame: {exc}") from None
    if frame.raw_len > fmt.BLOCK_BYTES_LIMIT:
        raise CorruptionError(
            segment, frame.offset, first, f"block frame of {frame.raw_len} bytes, over {fmt.BLOCK_BYTES_LIMIT}"
        )
    longest = max(head.lengths)
    if longest > record_size_bytes_max:
        raise RecordTooLargeError(longest, record_size_bytes_max, reading=True)
    body = stored[head.body_offset :]
    if frame.flags & _CODEC_MASK == _ZSTD:
        dict_id = frame_dict_id(buf, frame.offset - buf_offset)
        try:  # bounded by the block's length, itself at most BLOCK_BYTES_LIMIT (decode_stored)
            dctx = _decompressor_for(dict_id, dicts, segment, frame.offset, first)
            payload = zstd_decompress_bounded(dctx, body, frame.raw_len)
        except ValueError as exc:
            raise CorruptionError(
                segment, frame.offset, first, f"zstd block: {exc}{undecodable_hint(dict_id)}"
            ) from None
    else:
        payload = bytes(body)
    if len(payload) != frame.raw_len:
        raise CorruptionError(segment, frame.offset, first, "block body length differs from its header")
    return payload, head


def _block_records(
    payload: bytes, lengths: tuple[int, ...], flags: bytes, first_seq: int, segment: str, offset: int
) -> list[Record]:
    """Cut a block's decoded body into its records (of the frame at ``offset`` of ``segment``).
    Most blocks hold JSON records written by the application only (every flags byte 0): one loop
    without per-record flag tests."""
    out: list[Record] = []
    pos = 0
    seq = first_seq
    if not any(flags):
        for n in lengths:
            end = pos + n
            out.append(Record(seq, payload[pos:end], False, None, False, segment, offset))
            pos = end
            seq += 1
        return out
    for n, f in zip(lengths, flags, strict=True):
        end = pos + n
        out.append(Record(seq, payload[pos:end], bool(f & _BYTES), None, bool(f & _SYNTHETIC), segment, offset))
        pos = end
        seq += 1
    return out


def raise_for_stop(res: fmt.ScanResult, segment: str, path: str, last_seq: int) -> None:
    """Errors that no position in a file can excuse: seq gaps/duplicates and newer formats."""
    error = tail.stop_error(res, segment, path, last_seq)
    if error is not None:
        raise error


# --- point reads (Journal.get through a segment's dense index) ----------------------------------
#
# A point read is one frame read whole and one record of it decoded. Besides zstd, most of its
# cost was call layers: verify_frame's named tuple, a Frame, block_body's BlockHead, the bounded
# decompress's header checks, every record's start cut for a block (a fifth of a read of a 4 KiB
# block, a tenth of a read of a frame, in instructions). read_point does the common case in one
# function and hands anything unusual to decode_stored and block_body, which decide it (and raise
# the same errors) as before.

_FRAME_HEAD = struct.Struct("<QIIQHHI")  # format._FRAME_HEADER (tests/test_point_read.py holds them equal)
_U32 = struct.Struct("<I")
_MARKER, _CHECKED_FROM = fmt.FRAME_MARKER, fmt.FRAME_CHECKSUMMED_FROM
_BLOCK_MAX, _BLOCK_COUNT_MAX = fmt.BLOCK_BYTES_LIMIT, fmt.BLOCK_RECORDS_MAX
_RECORD_FLAG_VALUES = bytes(sorted({0, fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC, fmt.BLOCK_RECORD_FLAGS}))
_xxh64 = xxhash.xxh64_intdigest


def read_point(
    cur: _OpenSegment, seq: int, stored_bytes_max: int, size_max: int, dicts: DictionaryCache | None
) -> Record | None:
    """Record ``seq`` through the dense index of segment ``cur``: one read of exactly its frame,
    verified again (checksum with the segment's salt, seq, kind), so a stale offset is a miss,
    never a wrong record. None on any miss: the caller's cursor decides. ``dicts``: the
    dictionaries of ``cur``'s frames (dictionary.for_segment)."""
    i = seq - cur.header.base_seq
    offsets = cur.offsets
    if 0 <= i < len(offsets):  # indexed already: locate's answer, without its call
        offset = offsets[i]
        length = cur.ends[i] - offset
        # The records of a block share its offset, and a block holds two at least: a record
        # whose neighbours are elsewhere has a frame of its own, never in the block cache.
        in_block = (i > 0 and offsets[i - 1] == offset) or (i + 1 < len(offsets) and offsets[i + 1] == offset)
    else:
        where = cur.locate(seq, stored_bytes_max)
        if where is None:
            return None
        offset, length = where
        in_block = True
    name = cur.seg.name
    if in_block:
        block = _BLOCKS.get(cur.owner, offset)
        if (
            block is not None
            and block.first_seq <= seq <= block.last_seq
            and cur.file.pread(_HEADER, offset) == block.head
        ):
            # Decoded before, and the frame there is the one decoded (its header, checksum and
            # all, read again): a slice of it, no decompression.
            return block.record(seq, name, _BYTES, _SYNTHETIC)
    buf = cur.file.pread(length, offset)
    if len(buf) < _HEADER:
        return None
    checksum, stored_len, raw_len, last, flags, dict_id, marker = _FRAME_HEAD.unpack_from(buf)
    end = _HEADER + stored_len
    if marker != _MARKER or end > len(buf):
        return None
    mv = memoryview(buf)
    if _xxh64(mv[_CHECKED_FROM:end], cur.header.salt) != checksum or not fmt.flags_supported(flags, dict_id):
        return None
    kind = flags & _KIND_MASK
    if kind == _KIND_DATA:
        if last != seq:
            return None
        if flags & _CODEC_MASK == _ZSTD and not flags & _SLOW_FLAGS and raw_len <= size_max:
            # record.zstd_declares_no_size inline (as Cursor._read_span has it): a header that may
            # declare a content size is decode_stored's to check against raw_len.
            if stored_len >= 5 and buf[_HEADER] == _ZSTD_MAGIC_FIRST and not buf[_HEADER + 4] & _ZSTD_SIZE_BITS:
                dctx = _decompressor() if not dict_id else _decompressor_for(dict_id, dicts, name, offset, seq)
                try:
                    raw: bytes | None = dctx.decompress(mv[_HEADER:end], max_output_size=raw_len)
                except zstandard.ZstdError:
                    raw = None
                if raw is not None and len(raw) == raw_len:
                    return Record(seq, raw, bool(flags & _BYTES), None, bool(flags & _SYNTHETIC), name, offset)
        # Keyed, raw, too large, or refused: decode_stored decides (and raises what it refuses).
        return decode_stored(seq, flags, raw_len, mv[_HEADER:end], name, offset, size_max, dict_id, dicts)
    if kind != _KIND_BLOCK or stored_len < 4:
        return None
    # fmt.block_count, decode_block_head and block_body's checks, in their order, for the
    # common block; anything they would refuse goes to block_body, which raises it.
    (count,) = _U32.unpack_from(buf, _HEADER)
    at = _HEADER + 4 + 4 * count
    if not 2 <= count <= _BLOCK_COUNT_MAX or at + count > end:
        return None
    first = last + 1 - count
    if not first <= seq <= last:
        return None
    lengths: tuple[int, ...] = struct.unpack_from(f"<{count}I", buf, _HEADER + 4)
    rflags = buf[at : at + count]
    body = mv[at + count : end]
    payload: bytes | None = None
    if (
        sum(lengths) == raw_len
        and not rflags.translate(None, _RECORD_FLAG_VALUES)
        and raw_len <= _BLOCK_MAX
        and max(lengths) <= size_max
        and flags & _CODEC_MASK == _ZSTD
        and len(body) >= 5
        and body[0] == _ZSTD_MAGIC_FIRST
        and not body[4] & _ZSTD_SIZE_BITS
    ):
        dctx = _decompressor() if not dict_id else _decompressor_for(dict_id, dicts, name, offset, first)
        try:
            payload = dctx.decompress(body, max_output_size=raw_len)
        except zstandard.ZstdError:
            payload = None
    if payload is None or len(payload) != raw_len:
        # A raw block, or one the checks above refuse: block_body decides (and raises what it refuses).
        frame = fmt.Frame(offset, last, flags, raw_len, stored_len, count)
        payload, _head = block_body(frame, buf, offset, name, size_max, dicts)
    block = PointBlock(offset, first, payload, lengths, rflags, bytes(buf[:_HEADER]))
    _BLOCKS.put(cur.owner, block)
    return block.record(seq, name, _BYTES, _SYNTHETIC)


class _OpenSegment:
    def __init__(self, fs: FileSystem, dirpath: str, seg: SegmentName) -> None:
        self.seg = seg
        self.file: File = fs.open_read(os.path.join(dirpath, seg.name))
        try:
            self.header = read_header(self.file, seg.name)
        except BaseException:
            self.file.close()
            raise
        self.seal: fmt.SealInfo | None = None
        # Point reads' dense index (Journal.get): the offset of every data frame from the
        # segment's first seq on, as far as a scan has found genuine frames in sequence, and
        # where that scan stopped. Built on the first point read, extended when a read goes
        # past it (the live segment grows). Every use verifies the frame at its offset again.
        self.offsets = array("Q")  # of the frame holding each record (a block's, for each of its records)
        self.ends = array("Q")  # where that frame ends
        self.scanned_to = 0
        self.misses = 0  # point reads answered without the index, before it was worth building
        # Its entries in the process's cache of decoded blocks (block_cache.CACHE): a read of a
        # record in a block read before costs no decompression.
        self.owner = new_owner()

    def close(self) -> None:
        """Close the file and drop this segment's decoded blocks (no read can reach them now)."""
        _BLOCKS.forget(self.owner)
        self.file.close()

    def locate(self, seq: int, stored_bytes_max: int) -> tuple[int, int] | None:
        """(offset, bytes to read) of record ``seq``'s frame, from the dense index, or None if
        the scan did not reach it (damage, or not yet written) or the index is not built yet:
        the caller reads another way.

        The index of a segment is built only once the point reads into it have cost, the
        cursor's way (a sparse-index interval each), as much as one scan of the segment would:
        a short-lived handle or a lone get (resolve) never scans a whole segment for one record.
        """
        i = seq - self.header.base_seq
        if i < 0:
            return None
        if not self.offsets:
            self.misses += 1
            if self.misses * DENSE_BUILD_BYTES_PER_MISS < self.file.size():
                return None
        if i >= len(self.offsets):
            self._extend(i + 1, stored_bytes_max)
            if i >= len(self.offsets):
                return None
        start = self.offsets[i]
        return start, self.ends[i] - start

    def _extend(self, frames_wanted: int, stored_bytes_max: int) -> None:
        """Scan on from where the last scan stopped, a chunk at a time, until ``frames_wanted``
        data frames are indexed or the genuine frames in sequence end (the live segment's tail,
        damage, the seal). A chunk that ends inside a frame is read again from that frame."""
        # A sealed segment's footer is checked as the cursor checks it before it serves a record:
        # a footer that disagrees with its segment raises CorruptionError here too.
        size = self.refresh_seal()
        chunk_bytes = DENSE_CHUNK_BYTES
        while len(self.offsets) < frames_wanted:
            start = self.scanned_to or fmt.SEGMENT_HEADER_SIZE_BYTES
            if start >= size:
                return
            data = pread_upto(self.file, min(chunk_bytes, size - start), start)
            expected = self.header.base_seq + len(self.offsets)
            res = fmt.scan(data, 0, self.header.salt, expected, base_offset=start)
            for fr in res.frames:
                if fr.stored_len > stored_bytes_max:
                    return
                if fr.records:  # a data frame, or a block: each of its records is in this frame
                    self.offsets.extend([fr.offset] * fr.records)
                    self.ends.extend([fr.end] * fr.records)
                self.scanned_to = fr.end
            if res.stop != fmt.Stop.TRUNCATED or start + len(data) >= size:
                return  # the frames stop here for a reason other than the chunk's end
            if not res.frames:
                chunk_bytes *= 2  # one frame larger than the chunk: read more of it at once

    def refresh_seal(self) -> int:
        size = self.file.size()
        if self.seal is None:
            self.seal = read_seal(self.file, self.header, self.seg.name, size)
        return size


# --- what a listing of the directory can be trusted with ----------------------------------------
#
# A directory listing is not a snapshot of the directory: readdir is many calls, and a name
# renamed in or unlinked while they run may be in the result or not. On ext4 a listing taken
# while the writer rolls segments over can miss a new segment and show the one made after it,
# and one taken across a drop_prefix names segments that are gone when the reader opens them.
# So no reader believes a listing that says a segment is missing: it asks the files (why_missing),
# the one place that decides it for every reader (the cursor, a read-only open, the writer's open).

LOOKS_MAX = 3  # looks at the directory before a segment missing from it, or gone from under a reader, is believed
THERE = "there"  # the segment's file exists: the listing missed it
DROPPED = "dropped"  # a drop_prefix removed it: the start marker begins after it
MISSING = "missing"  # neither: it is lost


def segment_named(base_seq: int) -> SegmentName:
    """The segment that begins at ``base_seq``, by its name (whether or not it exists)."""
    return SegmentName(base_seq, fmt.segment_name(base_seq))


def first_seq_now(fs: FileSystem, dirpath: str) -> int:
    """Where the journal begins as its start marker says now (1 without one)."""
    start = read_start(fs, dirpath)
    return start.first_seq if start is not None else 1


def why_missing(fs: FileSystem, dirpath: str, base_seq: int) -> str:
    """Why the segment that begins at ``base_seq`` is not where a reader looked for it (a
    listing that shows a later segment, an open that found no file): THERE, DROPPED or MISSING.

    Asked after that look, of the files, in this order: the segment's own name, then the start
    marker. The writer makes a segment before any later one, and drop_prefix makes its marker
    durable before it unlinks anything; so once a later segment was seen, a segment that is not
    there now was dropped, and the marker read after the name was not found says so. Only a
    segment that is neither is reported missing.
    """
    if not 1 <= base_seq < 10**fmt.SEGMENT_NAME_DIGITS:
        return MISSING  # a seq from a crafted frame: no segment's name can begin there
    if fs.exists(os.path.join(dirpath, fmt.segment_name(base_seq))):
        return THERE
    if first_seq_now(fs, dirpath) > base_seq:
        return DROPPED
    return MISSING


class SegmentCache:
    """Open segments and the directory listing, kept between the point reads of one handle.

    A sealed segment never changes, so its handle, header and footer serve every later read;
    the live one is reopened only when the cache drops it (its seal is checked on every read
    anyway). One reader at a time (Journal.get holds a lock); a Cursor never closes a segment
    it got from here. At most ``open_max`` files stay open.
    """

    def __init__(self, fs: FileSystem, dirpath: str, open_max: int = 8) -> None:
        if not (open_max >= 1):
            raise InvariantError('open_max >= 1')
        self._fs = fs
        self._dir = dirpath
        self._open_max = open_max
        self._segments: OrderedDict[int, _OpenSegment] = OrderedDict()
        self.listed: list[SegmentName] = []

    def listing(self) -> list[SegmentName]:
        """The segments as last listed. A segment added since is found by the cursor when it
        reaches the sealed end of the last one it knows (it lists again then)."""
        if not self.listed:
            self.listed = list_segments(self._fs, self._dir)
        return self.listed

    def relist(self) -> list[SegmentName]:
        self.listed = list_segments(self._fs, self._dir)
        return self.listed

    def open(self, seg: SegmentName) -> _OpenSegment:
        got = self._segments.get(seg.base_seq)
        # ``is`` first: the listing's own SegmentName, where == is a call of the dataclass's __eq__
        if got is not None and (got.seg is seg or got.seg == seg):
            self._segments.move_to_end(seg.base_seq)
            return got
        got = _OpenSegment(self._fs, self._dir, seg)
        self._segments[seg.base_seq] = got
        while len(self._segments) > self._open_max:
            _, old = self._segments.popitem(last=False)
            old.close()
        return got

    def close(self) -> None:
        """Close every segment and forget the listing (a drop_prefix has just deleted some)."""
        self.listed = []
        while self._segments:
            _, old = self._segments.popitem()
            old.close()


class Cursor:
    """A resumable position in a journal: the next record to read is ``next_seq``."""

    def __init__(
        self,
        fs: FileSystem,
        dirpath: str,
        after_seq: int,
        record_size_bytes_max: int,
        hint: tuple[int, int, int] | None = None,
        cache: SegmentCache | None = None,
        journal_id: bytes | None = None,
        dicts: DictionaryCache | None = None,
    ) -> None:
        """``hint`` (segment base seq, seq, offset) says where a frame at or before ``after_seq + 1``
        should start, from the writer's sparse index of its live segment. It is only a hint: it
        is used once the frame there verifies (checksum with the segment's salt, and the seq)."""
        if not (after_seq >= 0):
            raise InvariantError('after_seq >= 0')
        self._hint = hint
        self._cache = cache
        self._few = 0  # records a small read wants (0: read on in big chunks)
        self._fs = fs
        self._dir = dirpath
        # The journal's dictionaries (the handle's, shared by its cursors; else this cursor's
        # own): each file is loaded and verified once, when a frame first names it.
        self._dicts = dicts if dicts is not None else DictionaryCache(fs, dirpath)
        self._max = record_size_bytes_max
        self.next_seq = after_seq + 1
        self._cur: _OpenSegment | None = None
        self._offset = 0  # of the next frame in the current segment
        self._expected = 0  # seq the next data frame must carry
        # Every segment read must carry the journal's id (the handle's, when it has one; else
        # the first segment's this cursor opens): a segment copied in from another journal is
        # refused by name, never served.
        self._journal_id: bytes | None = journal_id or None
        self._listed: list[SegmentName] = []  # the directory's segments when last listed
        # (segment base seq, offset, file size) where the last read found only zeros after the
        # last frame of the live segment: a writer's reserved space. While the size and the
        # zero header there stay the same, nothing was written (the next frame goes exactly
        # there, and a batch shows itself only when its first header lands), so a follower's
        # poll reads one header instead of the whole reserved space again.
        self._idle_at: tuple[int, int, int] | None = None

    def close(self) -> None:
        if self._cur is not None:
            if self._cache is None:
                self._cur.close()
            self._cur = None

    def _open(self, seg: SegmentName) -> _OpenSegment:
        opened = self._cache.open(seg) if self._cache is not None else _OpenSegment(self._fs, self._dir, seg)
        if self._journal_id is None:
            self._journal_id = opened.header.journal_id
        elif opened.header.journal_id != self._journal_id:
            if self._cache is None:
                opened.close()
            raise ForeignSegmentError(seg.name, opened.file.path)
        return opened

    def _seek(self, segments: list[SegmentName]) -> bool:
        """Position on the segment holding ``next_seq``; False if no segment does yet.

        Raises PrefixDroppedError if ``next_seq`` was dropped (drop_prefix) since the handle that
        made this cursor was opened (its first seq was then at most ``next_seq``)."""
        bases = [s.base_seq for s in segments]
        i = bisect.bisect_right(bases, self.next_seq) - 1
        if i < 0:
            if not segments:
                return False
            first = first_seq_now(self._fs, self._dir)
            if first > self.next_seq:
                raise PrefixDroppedError(self._dir, self.next_seq, first)
            i = 0
        self.close()
        self._cur = self._open(segments[i])
        self._cur.refresh_seal()
        self._offset = fmt.SEGMENT_HEADER_SIZE_BYTES
        self._expected = self._cur.header.base_seq
        seal = self._cur.seal
        if seal is not None and seal.entries:
            keys = [seq for seq, _ in seal.entries]
            j = bisect.bisect_right(keys, self.next_seq) - 1
            if j >= 0:
                seq, offset = seal.entries[j]
                # The footer's checksum holds, but an entry can still name a place that holds no
                # such frame (a crafted footer): starting there would skip records unseen.
                if not self._frame_at(offset, seq):
                    raise CorruptionError(self._cur.seg.name, offset, seq,
                                          f"seal index entry (seq {seq}, offset {offset}) is not on that frame")
                self._expected, self._offset = seq, offset
        hint, self._hint = self._hint, None
        if hint is not None and hint[0] == segments[i].base_seq and self._expected < hint[1] <= self.next_seq:
            if self._frame_at(hint[2], hint[1]):
                self._expected, self._offset = hint[1], hint[2]
        return True

    def _frame_at(self, offset: int, seq: int) -> bool:
        """True if a genuine frame whose first record is ``seq`` starts at ``offset`` of the
        current segment."""
        cur = present(self._cur, "a hint is checked in the segment the cursor is on")
        stored_max = min(fmt.FRAME_STORED_BYTES_LIMIT, self._max + fmt.RECORD_STORED_OVERHEAD_BYTES_MAX)
        got = _read_frame(cur, offset, stored_max)
        return got is not None and got[0].supported and _first_seq(*got) == seq

    def read(self, limit: int = 1 << 62) -> Iterator[Record]:
        """Yield records from ``next_seq`` on, up to what is written now; resumable."""
        self._few = limit if limit <= FEW_RECORDS else 0
        while limit > 0:
            if self._cur is None and not self._position():
                return
            cur = self._cur
            if not (cur is not None):
                raise InvariantError('cur is not None')
            size = cur.refresh_seal()
            sealed = cur.seal
            end = sealed.seal_offset if sealed is not None else size
            if (
                sealed is None
                and self._idle_at == (cur.seg.base_seq, self._offset, size)
                and not any(cur.file.pread(fmt.FRAME_HEADER_SIZE_BYTES, self._offset))
            ):
                return  # nothing written since the last look
            self._idle_at = None
            for rec in self._read_span(cur, end, sealed is not None):
                if rec.seq >= self.next_seq:
                    self.next_seq = rec.seq + 1
                    yield rec
                    limit -= 1
                    if limit == 0:
                        return
            if sealed is None:
                # The live segment ends here for now; move on only once it has been sealed.
                size = cur.refresh_seal()
                if cur.seal is None:
                    if any(s.base_seq > cur.seg.base_seq for s in self._listed):
                        # A later segment exists, so this one was sealed before it was made (the
                        # writer seals, syncs, then creates the next): its footer is damaged.
                        raise CorruptionError(
                            cur.seg.name, size, None, "segment before the live one has no valid seal footer"
                        )
                    return  # the rest is not yet written
                continue  # sealed since: read on up to its footer
            if self._offset < end:
                return
            nxt = self._next_segment(cur, sealed.last_seq)
            if nxt is None:
                if self._cur is None:
                    continue  # dropped behind this reader, what it needs still there: seek afresh
                return  # not made yet
            self.close()
            self._cur = nxt
            self._offset = fmt.SEGMENT_HEADER_SIZE_BYTES
            self._expected = nxt.header.base_seq

    def _relist(self) -> list[SegmentName]:
        return self._cache.relist() if self._cache is not None else list_segments(self._fs, self._dir)

    def _position(self) -> bool:
        """Seek to ``next_seq`` from a listing (the cache's, first); False if no segment holds it
        yet. A listed segment gone when it is opened was dropped meanwhile (drop_prefix): the
        reader looks again and reads the journal as it is now, as a read started a moment later
        would (up to LOOKS_MAX looks, then JournalIOError)."""
        for look in range(LOOKS_MAX):
            self._listed = self._cache.listing() if self._cache is not None and look == 0 else self._relist()
            try:
                return self._seek(self._listed)
            except FileNotFoundError as exc:
                if look == LOOKS_MAX - 1:
                    raise JournalIOError(self._dir, exc, "reading") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _next_segment(self, cur: _OpenSegment, last_seq: int) -> _OpenSegment | None:
        """The segment after ``cur``, which is sealed at ``last_seq``, opened; None if the writer
        has not made it yet.

        Found by its name (it begins at ``last_seq + 1``), not by a listing, which may have missed
        it (see why_missing): a listing is taken only when the file is not there, to tell "not
        made yet" (no later segment either) from "dropped" (PrefixDroppedError, or a fresh seek
        when the records this reader needs are still there) and "missing" (SequenceError, once
        LOOKS_MAX looks agree).
        """
        stray = [s for s in self._listed if cur.seg.base_seq < s.base_seq <= last_seq]
        if stray:  # a name in the middle of this segment's seqs: no race makes one, a copy does
            raise SequenceError(stray[0].name, 0, stray[0].base_seq,
                                f"sequence gap between segments: {cur.seg.name} ends at seq {last_seq}")
        want = segment_named(last_seq + 1)
        later: list[SegmentName] = []
        for _look in range(LOOKS_MAX):
            try:
                return self._open(want)
            except FileNotFoundError:
                pass
            self._listed = self._relist()
            later = [s for s in self._listed if s.base_seq > last_seq]
            if not later:
                return None  # not made yet: the writer seals a segment before it makes the next
            cause = why_missing(self._fs, self._dir, want.base_seq)
            if cause == DROPPED:
                first = first_seq_now(self._fs, self._dir)
                if first > self.next_seq:
                    raise PrefixDroppedError(self._dir, self.next_seq, first)
                self.close()  # what this reader needs is still there: seek to it afresh
                return None
            # THERE: the listing missed it; it is opened by name above. MISSING: look again.
        raise SequenceError(later[0].name, 0, later[0].base_seq,
                            f"sequence gap between segments: {cur.seg.name} ends at seq {last_seq}")

    def _read_span(self, cur: _OpenSegment, end: int, sealed: bool) -> Iterator[Record]:
        name = cur.seg.name
        # A read of a few records (get) reads a small chunk and frames only up to its records.
        want = FEW_RECORDS_CHUNK_BYTES if self._few else READ_CHUNK_BYTES
        while self._offset < end:
            offset = self._offset
            buf = pread_upto(cur.file, min(end - offset, want), offset)
            if not buf:
                # The file ends before ``end`` now: the writer cut its reserved space off (to
                # seal, or to close). The next read starts from the new size.
                return
            chunk_end = offset + len(buf)
            frames_max = max(1, self.next_seq - self._expected + self._few) if self._few else 1 << 62
            res = fmt.scan(buf, 0, cur.header.salt, self._expected, base_offset=offset, frames_max=frames_max)
            mv = memoryview(buf)
            next_seq, size_max, decompress = self.next_seq, self._max, _decompressor().decompress
            dicts = for_segment(self._dicts, cur.header.version)  # a version 3 segment names none
            for frame in res.frames:
                _off, seq, flags, raw_len, stored_len, _count = frame
                if seq < next_seq:
                    continue
                kind = flags & _KIND_MASK
                if kind != _KIND_DATA:
                    if kind == _KIND_BLOCK:
                        yield from decode_block(frame, mv, offset, name, size_max, dicts)
                    continue
                if flags & _SLOW_FLAGS or raw_len > size_max:
                    yield decode_payload(frame, mv, offset, name, size_max, dicts)
                    continue
                # The common frame, unkeyed zstd or raw, decoded here: the same checks as
                # decode_payload, without its per-record lookups (a tenth of a decode scan).
                start = _off - offset + _HEADER
                if flags & _CODEC_MASK == _ZSTD:
                    # record.zstd_declares_no_size, inline: a zstd header that may declare a
                    # content size (never the writer's) is checked against raw_len there.
                    # A frame naming a dictionary (its u16 id, the header's bytes 26-27) too.
                    if (
                        stored_len < 5
                        or mv[start] != _ZSTD_MAGIC_FIRST
                        or mv[start + 4] & _ZSTD_SIZE_BITS
                        or mv[start - 6]
                        or mv[start - 5]
                    ):
                        yield decode_payload(frame, mv, offset, name, size_max, dicts)
                        continue
                    try:
                        payload = decompress(mv[start : start + stored_len], max_output_size=raw_len)
                    except zstandard.ZstdError:
                        yield decode_payload(frame, mv, offset, name, size_max, dicts)  # raises the error
                        continue
                    if len(payload) != raw_len:
                        yield decode_payload(frame, mv, offset, name, size_max, dicts)  # raises the error
                        continue
                else:
                    payload = bytes(mv[start : start + stored_len])
                yield Record(seq, payload, bool(flags & _BYTES), None, bool(flags & _SYNTHETIC), name, _off)
            if res.frames:
                self._expected = res.frames[-1].seq + 1
            self._offset = res.stop_offset
            if res.stop == fmt.Stop.END:
                want = READ_CHUNK_BYTES
                continue
            whole_zero_header = res.stop == fmt.Stop.ZEROS and res.stop_offset + _HEADER <= chunk_end
            if res.stop in (fmt.Stop.TRUNCATED, fmt.Stop.ZEROS) and chunk_end < end and not whole_zero_header:
                # The chunk, not the file, ended inside a frame: read on, or read a frame
                # larger than a chunk whole (scan has already capped its length).
                if res.frames:
                    want = READ_CHUNK_BYTES
                    continue
                need = fmt.FRAME_HEADER_SIZE_BYTES
                if len(buf) >= fmt.FRAME_HEADER_SIZE_BYTES:
                    need += fmt.read_frame_header(buf, 0)[1]
                if need > want:
                    want = need
                    continue
            raise_for_stop(res, name, cur.file.path, self._expected - 1)
            if sealed:
                raise CorruptionError(
                    name,
                    res.stop_offset,
                    self._expected,
                    f"invalid frame inside a sealed segment ({res.stop.name.lower()})",
                )
            self._check_live_tail(cur, res.stop_offset)
            return

    def _check_live_tail(self, cur: _OpenSegment, stop_offset: int) -> None:
        """Where a scan of the live segment stopped, ask the tail classifier what the rest of the
        file means: a torn or zero-filled tail is "not yet written" (the writer may be in the
        middle of it); anything refused is raised, damage before a durable point only once a
        fresh read of the frame there confirms it."""
        src = tail.FileBytes(cur.file)  # read a window at a time: the rest may be a GiB-sized hole
        size = src.size
        if tail.all_zeros(tail.Span(src, stop_offset)):
            self._idle_at = (cur.seg.base_seq, stop_offset, size)  # reserved space, nothing else
            return
        res = next(tail.scan_windows(src, stop_offset, cur.header.salt, self._expected)).res
        if res.frames:
            # Frames are whole there now: the first read caught a write half done. Not damage;
            # the next read picks them up.
            return
        found = tail.classify(
            res, tail.Span(src, res.stop_offset), cur.header, cur.seg.name, cur.file.path, last_seq=self._expected - 1
        )
        if found.kind == tail.CORRUPT and self._frame_now_at(cur, stop_offset):
            return  # a long read raced the writer (see _frame_now_at)
        found.raise_if_refused()

    def _frame_now_at(self, cur: _OpenSegment, offset: int) -> bool:
        """Whether a whole frame starts at ``offset`` now, read afresh.

        A long pread is copied page by page while the writer appends: its first page can show
        the zeros before a frame landed and its later pages the batches written after it. Those
        batches were written only once that frame was whole, so if it is whole now the read
        raced the writer; if it still is not, the damage is real.
        """
        # Only the format's hard cap: a frame over this reader's record size limit is still a
        # whole frame (the next read raises RecordTooLargeError for it, not corruption).
        got = _read_frame(cur, offset, fmt.FRAME_STORED_BYTES_LIMIT)
        if got is None or not got[0].supported:
            return False
        # The frame the scan expected there: the next data or block frame, or padding after the
        # last one.
        if got[0].kind in fmt.RECORD_KINDS:
            return _first_seq(*got) == self._expected
        return got[0].seq == self._expected - 1


def _first_seq(frame: fmt.GenuineFrame, data: bytes) -> int | None:
    """The seq of the first record of a genuine frame read whole into ``data`` (from offset 0):
    None for a frame that holds no record, or a block whose table this version cannot read."""
    if frame.kind == fmt.KIND_DATA:
        return frame.seq
    if frame.kind == fmt.KIND_BLOCK:
        count = fmt.block_count(data, fmt.FRAME_HEADER_SIZE_BYTES, frame.stored_len)
        return frame.seq + 1 - count if count else None
    return None


def _read_frame(cur: _OpenSegment, offset: int, stored_bytes_max: int) -> tuple[fmt.GenuineFrame, bytes] | None:
    """The genuine frame at ``offset`` of a segment, read afresh (header first, so a damaged
    length is never used to size a read past ``stored_bytes_max``), with its bytes; or None."""
    head = pread_upto(cur.file, fmt.FRAME_HEADER_SIZE_BYTES, offset)
    if len(head) < fmt.FRAME_HEADER_SIZE_BYTES:
        return None
    stored_len = fmt.read_frame_header(head, 0)[1]
    if stored_len > stored_bytes_max:
        return None
    data = pread_upto(cur.file, fmt.FRAME_HEADER_SIZE_BYTES + stored_len, offset)
    got = fmt.verify_frame(data, 0, cur.header.salt)
    return None if got is None else (got._replace(offset=offset), data)
