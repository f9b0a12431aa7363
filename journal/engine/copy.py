"""Build a journal directory that holds the first records of another one, up to a seq.

This is the storage half of a fork; it knows segments and frames, nothing about agents.

A sealed segment never changes again, so a prefix that covers it whole shares it: a hard link
where the file system allows one, a copy otherwise. Only the segment that holds the last wanted
record is cut: its header and its frames up to that record are copied byte for byte into a new,
unsealed segment, which becomes the new journal's live segment. The bytes keep the segment's
header (journal id, segment number, base seq, salt), so every copied frame still passes its
salted checksum and the result is exactly what the writer would have left had it stopped at
that record. The cost is one segment at most, whatever the length of the sealed history.

A block frame (records appended together) cannot be cut inside its bytes: when the last wanted
record is not a block's last, the frames before the block are copied byte for byte and the
block's records up to that one are framed anew, with the same salt, as the writer frames
records appended together (one frame for one record, a block for several), so the copy is
still what a writer could have left.

Every segment of the new journal carries the source's journal id, because linked segments
cannot be rewritten and the core checks that consecutive segments share it. A journal's
identity as a session is its events (see journal/session/fork.py), not that id.
"""

from __future__ import annotations

import errno
import os

from journal.api import PrefixCopy as PrefixCopy  # explicit re-export: it moved to the api
from journal.engine import format as fmt
from journal.engine.encoding import Encoded, frame_specs
from journal.engine.options import Options
from journal.engine.reader import Record, decode_block, raise_for_stop
from journal.engine.segment import list_segments, read_header, read_seal, read_start
from journal.errors import CorruptionError, InvariantError
from journal.fs import File, FileSystem, write_all, write_atomic, write_new

COPY_CHUNK_BYTES = 8 * 1024 * 1024
# errnos that mean "no hard link here": another device, a file system without links, a limit.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS})


def copy_prefix(fs: FileSystem, src: str, dst: str, at_seq: int, link: bool = True) -> PrefixCopy:
    """Fill the existing empty directory ``dst`` with the records 1..at_seq of journal ``src``.

    Files are fsync'd and so is ``dst``; ``src`` is only read (and linked to). Raises
    CorruptionError if a segment that is needed is damaged, ValueError if ``src`` ends before
    ``at_seq``.
    """
    if not (at_seq >= 1):
        raise InvariantError('at_seq >= 1')
    out = PrefixCopy()
    segments = list_segments(fs, src)
    if not segments:
        raise ValueError(f"{src!r} holds no segment")
    start = read_start(fs, src)
    if start is not None:
        # A journal whose prefix was dropped: the copy begins where it does, and says so.
        if at_seq < start.first_seq:
            raise ValueError(f"journal {src!r} begins at seq {start.first_seq} (a prefix was dropped), after {at_seq}")
        segments = [seg for seg in segments if seg.base_seq >= start.first_seq]
        write_atomic(fs, os.path.join(dst, fmt.START_FILE), fmt.encode_start(start))
    for i, seg in enumerate(segments):
        if seg.base_seq > at_seq:
            break
        path = os.path.join(src, seg.name)
        f = fs.open_read(path)
        try:
            header = read_header(f, seg.name)
            size = f.size()
            seal = read_seal(f, header, seg.name, size)
            if seal is None and i < len(segments) - 1:
                raise CorruptionError(seg.name, 0, None, "segment before the live one has no valid seal footer")
            if seal is not None and seal.last_seq <= at_seq:
                if link and _try_link(fs, path, os.path.join(dst, seg.name)):
                    out.segments_linked.append(seg.name)
                else:
                    _copy_file(fs, f, size, os.path.join(dst, seg.name))
                    out.segments_copied.append(seg.name)
                    out.bytes_copied += size
                if seal.last_seq == at_seq:
                    break
                continue
            # The wanted record is inside this segment: copy its header and frames up to it.
            limit = size if seal is None else seal.seal_offset
            if seal is not None:
                # The sparse index bounds how much must be read: the first entry past at_seq.
                limit = min([off for s, off in seal.entries if s > at_seq] + [limit])
            data = f.pread(limit, 0)
        finally:
            f.close()
        cut = _cut(data, header, seg.name, src, at_seq, sealed=seal is not None)
        write_new(fs, os.path.join(dst, seg.name), cut)
        out.cut_segment = seg.name
        out.bytes_copied += len(cut)
        break
    if not (out.segments_linked or out.segments_copied or out.cut_segment):
        raise ValueError(f"journal {src!r} holds no record at seq {at_seq}")
    fs.fsync_dir(dst)
    return out


def _cut(data: bytes, header: fmt.SegmentHeader, segment: str, src: str, at_seq: int, sealed: bool) -> memoryview:
    """The segment ``data`` (from offset 0) cut just after the record ``at_seq``: its bytes up to
    the end of that record's frame, or, inside a block, up to the block and the block's records
    up to ``at_seq`` framed anew."""
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    for frame in fmt.record_frames(res.frames):
        if frame.seq == at_seq:
            return memoryview(data)[: frame.end]
        if frame.first_seq <= at_seq < frame.seq:
            kept = decode_block(frame, data, 0, segment, fmt.FRAME_STORED_BYTES_LIMIT)[: at_seq - frame.first_seq + 1]
            items = [
                Encoded(fmt.FrameSpec(_record_flags(r), len(r.payload), r.payload), r.payload, None, deferred=True)
                for r in kept
            ]
            # The block's own codec decides: a journal written with compression off stays so.
            options = Options(block_bytes=fmt.BLOCK_BYTES_LIMIT, compress=frame.flags & fmt.FLAG_CODEC_MASK != 0)
            specs = frame_specs(items, options, blocks=True)
            return memoryview(data[: frame.offset] + fmt.encode_batch(frame.first_seq, specs, header.salt, False))
    last = res.frames[-1].seq if res.frames else header.base_seq - 1
    if sealed or res.stop in (fmt.Stop.SEQ, fmt.Stop.FLAGS):
        raise_for_stop(res, segment, src, last)
        raise CorruptionError(segment, res.stop_offset, last, f"segment ends before seq {at_seq}")
    raise ValueError(f"journal {src!r} ends at seq {last}, before seq {at_seq}")


def _record_flags(rec: Record) -> int:
    return (fmt.FLAG_BYTES if rec.is_bytes else 0) | (fmt.FLAG_SYNTHETIC if rec.synthetic else 0)


def _try_link(fs: FileSystem, src: str, dst: str) -> bool:
    """Link ``src`` as ``dst`` through the file layer; False where links cannot be had here."""
    try:
        fs.link(src, dst)
    except OSError as exc:
        if exc.errno in _NO_LINK:
            return False  # copied instead: the same bytes, at the cost of writing them
        raise
    return True


def _copy_file(fs: FileSystem, f: File, size: int, dst: str) -> None:
    out = fs.open_write(dst, create=True)
    try:
        offset = 0
        while offset < size:
            chunk = f.pread(min(COPY_CHUNK_BYTES, size - offset), offset)
            if not chunk:
                raise OSError(errno.EIO, f"{f.path} shrank while it was copied")
            write_all(out, chunk, offset)
            offset += len(chunk)
        out.fsync()
    finally:
        out.close()
