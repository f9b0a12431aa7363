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
import struct
from dataclasses import dataclass

import xxhash

from journal.api import PrefixCopy as PrefixCopy  # explicit re-export: it moved to the api
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.dictionary import (
    DictionaryCache,
    dictionary_file_name,
    dictionary_ids,
    encode_dictionary_file,
    for_segment,
    load_dictionary,
)
from journal.engine.encoding import Encoded, frame_specs
from journal.engine.options import Options
from journal.engine.reader import DROPPED, THERE, Record, decode_block, raise_for_stop, segment_named, why_missing
from journal.engine.segment import TMP_SUFFIX, SegmentName, list_segments, read_header, read_seal, read_start
from journal.errors import CorruptionError, ForeignSegmentError, InvariantError, SequenceError, UnexpectedLinkError
from journal.fs import File, FileSystem, pread_exact, write_all, write_atomic

COPY_CHUNK_BYTES = 8 * 1024 * 1024
# Merging small sealed segments (see plan_merges). A chain of forks seals one small segment per
# fork (journal/session/fork.py seals each child's cut); linked as they are, a child at depth
# 10,000 would hold 10,000 files, and every later fork would link and open each one. Sealed
# segments are grouped into size tiers a factor MERGE_FANIN apart, from MERGE_UNIT_BYTES up;
# MERGE_FANIN segments of one tier at the end of the history are merged into one segment of
# the next, so a tier holds fewer than MERGE_FANIN segments and a record is rewritten once per
# tier it climbs (amortized bytes per fork: its own bytes times the tiers, at most
# log_FANIN(MERGE_SEGMENT_BYTES_MAX / MERGE_UNIT_BYTES) + 1). Segments from
# MERGE_SEGMENT_BYTES_MAX up are never merged: past that a file count grows with the history's
# bytes only, as a writer's own roll-overs do.
# A copy links up to this many small segments as they are, so a fork of an ordinary journal
# (one written with a small segment size included) shares its whole sealed history; only past
# it does a copy merge, which keeps a child's small segments at most this many plus one tier.
SMALL_SEGMENTS_LINKED_MAX = 32
MERGE_FANIN = 8
MERGE_UNIT_BYTES = 4 * 1024
MERGE_SEGMENT_BYTES_MAX = 4 * 1024 * 1024
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
    _copy_dictionaries(fs, src, dst)
    whole: list[_Whole] = []  # sealed segments wholly before at_seq: linked, copied or merged
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
                whole.append(_Whole(seg.name, path, size, header, seal))
                if seal.last_seq == at_seq:
                    break
                _next_by_name(fs, src, segments, i, seal.last_seq)
                continue
            # The wanted record is inside this segment: copy its header and frames up to it.
            limit = size if seal is None else seal.seal_offset
            if seal is not None:
                # The sparse index bounds how much must be read: the first entry past at_seq.
                limit = min([off for s, off in seal.entries if s > at_seq] + [limit])
            copied = _copy_cut(fs, f, limit, header, seg.name, src, at_seq, seal is not None, dst)
        finally:
            f.close()
        out.cut_segment = seg.name
        out.bytes_copied += copied
        break
    for group in plan_merges([w.size for w in whole], [w.header.version for w in whole]):
        members = whole[group[0] : group[-1] + 1]
        if len(members) > 1:
            out.bytes_copied += _merge(fs, members, dst)
            out.segments_merged.append([w.name for w in members])
            continue
        w = members[0]
        if link and _try_link(fs, w.path, os.path.join(dst, w.name)):
            out.segments_linked.append(w.name)
            continue
        f = fs.open_read(w.path)
        try:
            _copy_file(fs, f, w.size, os.path.join(dst, w.name))
        finally:
            f.close()
        out.segments_copied.append(w.name)
        out.bytes_copied += w.size
    if not (out.segments_linked or out.segments_copied or out.segments_merged or out.cut_segment):
        raise ValueError(f"journal {src!r} holds no record at seq {at_seq}")
    fs.fsync_dir(dst)
    return out


def _copy_cut(
    fs: FileSystem,
    f: File,
    limit: int,
    header: fmt.SegmentHeader,
    segment: str,
    src: str,
    at_seq: int,
    sealed: bool,
    dst_dir: str,
) -> int:
    """Create ``segment`` in ``dst_dir`` with the segment ``f`` cut just after the record ``at_seq``: its header and
    frames up to the end of that record's frame, or, inside a block, up to the block and the
    block's records up to ``at_seq`` framed anew; fsync'd. Returns the bytes written.

    The frames are read a window at a time (a live segment can be a TiB) and written as they
    were scanned, from the same read: a live writer's rollback cannot change them between the
    two. Nothing is left there if the segment ends before ``at_seq``."""
    dst = os.path.join(dst_dir, segment)
    out = fs.open_write(dst, create=True)
    try:
        write_all(out, pread_exact(f, fmt.SEGMENT_HEADER_SIZE_BYTES, 0), 0)
        dicts = DictionaryCache(fs, src)  # for a block cut in two that names one
        written = _write_cut(out, tail.FileBytes(f, limit), header, segment, src, at_seq, sealed, dicts)
        if out.size() < written:
            out.truncate(written)  # it ends in zeros left a hole: they are its last bytes all the same
        out.fsync()
    except BaseException:
        out.close()
        try:
            fs.unlink(dst)
        except OSError:
            pass  # the error below says the copy failed; its caller removes what it built
        raise
    out.close()
    return written


def _write_cut(
    out: File,
    data: tail.SegmentBytes,
    header: fmt.SegmentHeader,
    segment: str,
    src: str,
    at_seq: int,
    sealed: bool,
    dicts: DictionaryCache | None = None,
) -> int:
    """``_copy_cut``'s frames: written to ``out`` window by window; the end of what was written."""
    last = header.base_seq - 1
    for win in tail.scan_windows(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq):
        for frame in fmt.record_frames(win.res.frames):
            if frame.seq == at_seq:
                _put(out, win.buf, frame.end - win.offset, win.offset)
                return frame.end
            if frame.first_seq <= at_seq < frame.seq:
                size_max = fmt.FRAME_STORED_BYTES_LIMIT
                block = decode_block(frame, win.buf, win.offset, segment, size_max, for_segment(dicts, header.version))
                kept = block[: at_seq - frame.first_seq + 1]
                items = [
                    Encoded(fmt.FrameSpec(_record_flags(r), len(r.payload), r.payload), r.payload, None, deferred=True)
                    for r in kept
                ]
                # The block's own codec decides: a journal written with compression off stays so.
                options = Options(block_bytes=fmt.BLOCK_BYTES_LIMIT, compress=frame.flags & fmt.FLAG_CODEC_MASK != 0)
                specs = frame_specs(items, options, blocks=True)
                reframed = fmt.encode_batch(frame.first_seq, specs, header.salt, False)
                _put(out, win.buf, frame.offset - win.offset, win.offset)
                write_all(out, reframed, frame.offset)
                return frame.offset + len(reframed)
            last = frame.seq
        res = win.res
        _put(out, win.buf, res.stop_offset - win.offset, win.offset)
    if sealed or res.stop in (fmt.Stop.SEQ, fmt.Stop.FLAGS):
        raise_for_stop(res, segment, src, last)
        raise CorruptionError(segment, res.stop_offset, last, f"segment ends before seq {at_seq}")
    raise ValueError(f"journal {src!r} ends at seq {last}, before seq {at_seq}")


_U64 = struct.Struct("<Q")  # a frame's checksum, its first 8 bytes
HOLE_PIECE_BYTES = 64 * 1024  # a run of zeros this long, aligned so, is left a hole in a copy


def _put(out: File, buf: bytes | memoryview, end: int, at: int) -> None:
    """Write ``buf[:end]`` at ``at``, leaving pieces of zeros only unwritten: holes, which read
    back as those zeros once a later write (or the copy's truncate) sets the file's end. A
    source left sparse (padding that is mostly a hole) stays sparse in the copy; the bytes
    between holes go down in one write each."""
    view = memoryview(buf)
    pos = run = 0  # [run, pos): bytes to write, not yet written
    while pos < end:
        n = min(HOLE_PIECE_BYTES, end - pos)
        if bytes(view[pos : pos + n]).count(0) == n:  # a copy of a piece: bytes.count runs in C
            if run < pos:
                write_all(out, view[run:pos], at + run)
            run = pos + n
        pos += n
    if run < end:
        write_all(out, view[run:end], at + run)


def _record_flags(rec: Record) -> int:
    return (fmt.FLAG_BYTES if rec.is_bytes else 0) | (fmt.FLAG_SYNTHETIC if rec.synthetic else 0)


def _next_by_name(fs: FileSystem, src: str, segments: list[SegmentName], i: int, last_seq: int) -> None:
    """Make ``segments[i + 1]`` the segment after the sealed ``segments[i]``, which ends at
    ``last_seq``: a listing of a live journal can miss the one that begins at ``last_seq + 1``
    (reader.why_missing), and a copy that went on past it would lack its records."""
    nxt = last_seq + 1
    if i + 1 < len(segments) and segments[i + 1].base_seq == nxt:
        return
    cause = why_missing(fs, src, nxt)
    if cause == THERE:
        segments.insert(i + 1, segment_named(nxt))
    elif cause == DROPPED:
        raise ValueError(f"journal {src!r}: drop_prefix removed the records after seq {last_seq} while they "
                         "were copied")
    elif i + 1 < len(segments):
        later = segments[i + 1]
        raise SequenceError(later.name, 0, later.base_seq,
                            f"sequence gap between segments: {segments[i].name} ends at seq {last_seq}")
    # else: nothing after it yet (the writer seals a segment before it makes the next)


def _copy_dictionaries(fs: FileSystem, src: str, dst: str) -> None:
    """Carry the dictionary files of ``src`` (format version 4) into ``dst``, durably (the
    directory fsync'd) before any segment whose frames name them: linked where links can be had,
    else written whole. Every one the source holds, a superset of those the copy's frames name
    (which would take reading every frame). A damaged one is left behind: the records that need
    it are as unreadable in the copy as in the source (verify and salvage name them)."""
    ids = dictionary_ids(fs, src)
    if not ids:
        return
    for dict_id in ids:
        name = dictionary_file_name(dict_id)
        try:
            got = load_dictionary(fs, src, dict_id)
        except (CorruptionError, UnexpectedLinkError, FileNotFoundError):
            continue
        if not _try_link(fs, os.path.join(src, name), os.path.join(dst, name)):
            write_atomic(fs, os.path.join(dst, name), encode_dictionary_file(got))
    fs.fsync_dir(dst)


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
            chunk = pread_exact(f, min(COPY_CHUNK_BYTES, size - offset), offset)
            write_all(out, chunk, offset)
            offset += len(chunk)
        out.fsync()
    finally:
        out.close()


@dataclass(frozen=True)
class _Whole:
    """A sealed segment of the source that the prefix holds whole."""

    name: str
    path: str
    size: int
    header: fmt.SegmentHeader
    seal: fmt.SealInfo


def _tier(size: int) -> int:
    """The size tier of a segment of ``size`` bytes: 0 below MERGE_UNIT_BYTES * MERGE_FANIN, and so on."""
    tier, bound = 0, MERGE_UNIT_BYTES * MERGE_FANIN
    while size >= bound:
        tier, bound = tier + 1, bound * MERGE_FANIN
    return tier


def plan_merges(sizes: list[int], versions: list[int]) -> list[list[int]]:
    """Which of the sealed segments of ``sizes`` (in seq order) a copy links or copies alone and
    which it merges: groups of their indices, in order; a group of one is taken as it is.

    Like a counter's carries: walking the segments in order, whenever the last MERGE_FANIN
    groups are small (below MERGE_SEGMENT_BYTES_MAX), of the same format version, and of a tier
    no higher than the newest one's, they become one group. A history that was itself copied so
    has fewer than MERGE_FANIN segments per tier, so a copy merges only what its newest segments
    complete: the files of a copy stay bounded by the tiers, whatever the number of forks."""
    if sum(1 for size in sizes if size < MERGE_SEGMENT_BYTES_MAX) <= SMALL_SEGMENTS_LINKED_MAX:
        return [[i] for i in range(len(sizes))]
    groups: list[tuple[list[int], int]] = []  # (indices, bytes)
    for i, size in enumerate(sizes):
        groups.append(([i], size))
        while len(groups) >= MERGE_FANIN:
            tail = groups[-MERGE_FANIN:]
            top = _tier(tail[-1][1])
            first = tail[0][0][0]
            if not all(b < MERGE_SEGMENT_BYTES_MAX and _tier(b) <= top for _, b in tail):
                break
            if any(versions[k] != versions[first] for idx, _ in tail for k in idx):
                break
            merged = [k for idx, _ in tail for k in idx]
            del groups[-MERGE_FANIN:]
            groups.append((merged, sum(b for _, b in tail)))
    return [idx for idx, _ in groups]


def _merge(fs: FileSystem, members: list[_Whole], dst_dir: str) -> int:
    """Write the records of the consecutive sealed ``members`` as one sealed segment in
    ``dst_dir``, named and numbered as the first one; returns the bytes written.

    Each record frame is kept byte for byte but for its checksum, which is salted with the
    merged segment's salt (the first member's: same journal id, segment number and base seq);
    every frame is checked against its own segment's salt first, so a frame that was not
    genuine there is refused, never re-salted into a genuine one. The footer is built as the
    writer builds one (sparse index, every member's idempotency keys). Written to a temp name,
    fsync'd, renamed: the caller fsyncs the directory (a fork renames the whole child later)."""
    first = members[0].header
    header = fmt.SegmentHeader(first.version, first.journal_id, first.segment_number, first.base_seq, first.salt)
    interval = members[0].seal.index_interval_bytes
    final = os.path.join(dst_dir, members[0].name)
    tmp = final + TMP_SUFFIX
    out = fs.open_write(tmp, create=True)
    try:
        write_all(out, fmt.encode_segment_header(header), 0)
        pos = fmt.SEGMENT_HEADER_SIZE_BYTES
        index: list[tuple[int, int]] = []
        next_index_at = pos
        keys: list[tuple[int, bytes]] = []
        last = header.base_seq - 1
        for m in members:
            if m.header.journal_id != first.journal_id:
                raise ForeignSegmentError(m.name, m.path)
            if m.header.base_seq != last + 1:
                raise SequenceError(m.name, 0, m.header.base_seq, f"sequence gap between segments: seq {last} before")
            f = fs.open_read(m.path)
            try:
                res = None
                for win in tail.scan_windows(tail.FileBytes(f, m.seal.seal_offset), fmt.SEGMENT_HEADER_SIZE_BYTES,
                                             m.header.salt, m.header.base_seq):
                    res = win.res
                    piece = bytearray()
                    for frame in fmt.record_frames(win.res.frames):
                        if frame.first_seq != last + 1:
                            raise SequenceError(m.name, frame.offset, frame.first_seq, f"expected seq {last + 1}")
                        at = pos + len(piece)
                        if at >= next_index_at:
                            index.append((frame.first_seq, at))
                            next_index_at = at + interval
                        body = win.buf[frame.offset - win.offset + 8 : frame.end - win.offset]
                        piece += _U64.pack(xxhash.xxh64_intdigest(body, seed=header.salt))
                        piece += body
                        last = frame.seq
                    write_all(out, bytes(piece), pos)
                    pos += len(piece)
            finally:
                f.close()
            if res is None or res.stop != fmt.Stop.END or last != m.seal.last_seq:
                if res is not None:
                    raise_for_stop(res, m.name, os.path.dirname(m.path), last)
                raise CorruptionError(m.name, m.seal.seal_offset, last,
                                      f"its frames end at seq {last}, its seal says {m.seal.last_seq}")
            for seq, key in m.seal.keys:
                # A seal's keys come from disk (its checksum can be made to match): one outside
                # the member's seqs or of no length is a damaged source, said so here, before
                # the merged seal's encoder takes it for a bug of its own.
                if not (m.header.base_seq <= seq <= m.seal.last_seq and 1 <= len(key) <= fmt.IDEMPOTENCY_KEY_BYTES_MAX):
                    raise CorruptionError(m.name, m.seal.seal_offset, seq,
                                          f"seal footer lists a {len(key)}-byte idempotency key at seq {seq}, "
                                          f"(its seqs are {m.header.base_seq}..{m.seal.last_seq}, a key 1 to "
                                          f"{fmt.IDEMPOTENCY_KEY_BYTES_MAX} bytes)")
                keys.append((seq, key))
        payload = fmt.encode_seal_payload(last - header.base_seq + 1, header.base_seq, last, interval, index, pos, keys)
        seal = fmt.encode_frame(last, fmt.KIND_SEAL, len(payload), payload, header.salt)
        write_all(out, seal, pos)
        out.fsync()
    except BaseException:
        out.close()
        try:
            fs.unlink(tmp)
        except OSError:
            pass  # the caller removes what it built
        raise
    out.close()
    fs.rename(tmp, final)
    return pos + len(seal)
