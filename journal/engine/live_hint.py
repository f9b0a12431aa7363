"""LIVE.hint: where a read-only open may start its scan of the live segment (docs/FORMAT.md).

A writable handle, at close, names the last record frame of the live segment whose end it knew
to be durable (every byte before it fdatasync'd), with that frame's stored checksum, the live
segment's sparse index points up to it and the record count up to it. A read-only open that
finds the hint whole, naming the live segment it verified (journal id, name, base seq, salt),
and the same genuine frame at the same offset (same seq, same stored checksum, verified with the
segment's salt), scans on from that frame's end instead of from the header: its cost is what was
written since that close, not the whole live segment.

The hint is never part of a journal's data. It is written without any fsync: a hint lost, stale,
torn or crafted is found out at use (its checksum, then every field against the segment) and
the open falls back to the full scan, with no error. A writer's open, verify and salvage never
read it; they scan everything.

The codec here is pure (bytes in, bytes out); ``read_hint`` and ``write_hint`` go through the
file layer (journal/fs.py).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import xxhash

from journal.engine import format as fmt
from journal.engine import tail
from journal.fs import FileSystem, pread_upto, refuse_link, write_all

HINT_FILE = "LIVE.hint"
HINT_TMP_FILE = HINT_FILE + ".tmp"
HINT_MAGIC = b"JRNLHNT\x00"
HINT_VERSION = 1
# The most a hint file may hold, checked against the file's size before it is read whole (a
# crafted length never sizes a read). 64 KiB of index points is 4096 of them: a 64 MiB segment at
# the default 64 KiB interval needs 1024. A writer whose index needs more writes no hint.
HINT_BYTES_MAX = 64 * 1024
# magic, version, reserved, point count, journal id, name length, reserved, base seq, salt,
# frame offset, frame seq, frame's stored checksum, records up to the frame, index interval.
_HEAD = struct.Struct("<8sHHI16sHHIQQQQQQQ")
_POINT = struct.Struct("<QQ")
_CHECKSUM = struct.Struct("<Q")
SEGMENT_NAME_BYTES_MAX = 64  # a segment's name is 24 bytes; anything longer is not one


class LiveHint(NamedTuple):
    journal_id: bytes
    segment: str  # the live segment's file name
    base_seq: int
    salt: int
    frame_offset: int  # the last record frame whose end the writer knew durable
    frame_seq: int  # its seq (a block's last record)
    frame_checksum: int  # the u64 checksum stored in its header
    records: int  # records in the segment up to and including that frame
    index_interval_bytes: int  # the interval the index points were taken at
    points: tuple[tuple[int, int], ...]  # (seq, offset) sparse index points, offset <= frame_offset


class HintError(ValueError):
    """A hint that does not decode (never raised to a caller: the open falls back)."""


def encode(hint: LiveHint) -> bytes:
    name = hint.segment.encode("ascii")
    if len(name) > SEGMENT_NAME_BYTES_MAX:
        raise HintError(f"segment name of {len(name)} bytes")
    head = _HEAD.pack(
        HINT_MAGIC,
        HINT_VERSION,
        0,
        len(hint.points),
        hint.journal_id,
        len(name),
        0,
        0,
        hint.base_seq,
        hint.salt,
        hint.frame_offset,
        hint.frame_seq,
        hint.frame_checksum,
        hint.records,
        hint.index_interval_bytes,
    )
    body = b"".join([head, name, *(_POINT.pack(seq, off) for seq, off in hint.points)])
    if len(body) + _CHECKSUM.size > HINT_BYTES_MAX:
        raise HintError(f"a hint of {len(body) + _CHECKSUM.size} bytes is over HINT_BYTES_MAX")
    return body + _CHECKSUM.pack(xxhash.xxh64_intdigest(body))


def decode(data: bytes | memoryview) -> LiveHint:
    """The hint in ``data``, or HintError. Every length is checked against ``data``'s own size
    before it is used; the checksum is checked before any field is trusted."""
    mv = memoryview(data)
    if not _HEAD.size + _CHECKSUM.size <= len(mv) <= HINT_BYTES_MAX:
        raise HintError(f"{len(mv)} bytes")
    body = mv[: len(mv) - _CHECKSUM.size]
    if xxhash.xxh64_intdigest(body) != _CHECKSUM.unpack_from(mv, len(body))[0]:
        raise HintError("checksum mismatch")
    (
        magic,
        version,
        _r1,
        count,
        journal_id,
        name_len,
        _r2,
        _r3,
        base_seq,
        salt,
        frame_offset,
        frame_seq,
        frame_checksum,
        records,
        interval,
    ) = _HEAD.unpack_from(mv, 0)
    if magic != HINT_MAGIC:
        raise HintError("bad magic")
    if version != HINT_VERSION:
        raise HintError(f"version {version}")
    if len(body) != _HEAD.size + name_len + count * _POINT.size:
        raise HintError("lengths do not add up")
    try:
        segment = bytes(mv[_HEAD.size : _HEAD.size + name_len]).decode("ascii")
    except UnicodeDecodeError as exc:
        raise HintError("segment name is not ASCII") from exc
    at = _HEAD.size + name_len
    points = tuple(_POINT.iter_unpack(body[at:]))
    return LiveHint(
        journal_id, segment, base_seq, salt, frame_offset, frame_seq, frame_checksum, records, interval, points
    )


def mismatch(
    hint: LiveHint, header: fmt.SegmentHeader, segment: str, src: tail.SegmentBytes, index_interval_bytes: int
) -> str | None:
    """Why ``hint`` may not be used for the live segment ``segment`` (``header`` verified, its
    bytes ``src``), or None: it names this very segment and salt, its fields agree with each other,
    and the frame at its offset is genuine with its seq and its stored checksum. The frame's
    length is read from its header and bounded by the format's limit before it sizes a read."""
    if (hint.journal_id, hint.segment, hint.base_seq, hint.salt) != (
        header.journal_id,
        segment,
        header.base_seq,
        header.salt,
    ):
        return "the hint names another journal, segment or salt"
    if hint.index_interval_bytes != index_interval_bytes:
        return "the hint's index points were taken at another interval"
    if not fmt.SEGMENT_HEADER_SIZE_BYTES <= hint.frame_offset <= src.size - fmt.FRAME_HEADER_SIZE_BYTES:
        return "the hint's frame is past the end of the live segment"
    if hint.frame_seq < header.base_seq or hint.records != hint.frame_seq - header.base_seq + 1:
        return "the hint's record count does not fit its seq"
    prev_seq, prev_off = header.base_seq - 1, fmt.SEGMENT_HEADER_SIZE_BYTES - 1
    for seq, off in hint.points:
        if not (prev_seq < seq <= hint.frame_seq and prev_off < off <= hint.frame_offset):
            return "the hint's index points are out of order"
        prev_seq, prev_off = seq, off
    got = tail.frame_at(src, hint.frame_offset, header.salt)
    if got is None:
        return "no genuine frame at the hint's offset"
    frame, data = got
    if frame.kind not in fmt.RECORD_KINDS or frame.seq != hint.frame_seq or not frame.supported:
        return "the frame at the hint's offset is not the record frame it names"
    if fmt.read_frame_header(data, 0)[0] != hint.frame_checksum:
        return "the frame at the hint's offset has another checksum"
    return None


def read_hint(fs: FileSystem, dirpath: str) -> LiveHint:
    """The hint in ``dirpath``: HintError for one that is not there whole, a link (refused, never
    followed), too large (its size checked before it is read) or that does not decode; OSError
    from the file layer."""
    path = refuse_link(fs, os.path.join(dirpath, HINT_FILE))
    f = fs.open_read(path)
    try:
        size = f.size()
        if size > HINT_BYTES_MAX:
            raise HintError(f"{size} bytes, over HINT_BYTES_MAX")
        data = pread_upto(f, size, 0)
    finally:
        f.close()
    return decode(data)


def write_hint(fs: FileSystem, dirpath: str, hint: LiveHint) -> None:
    """Temp name, write, rename; no fsync (see the module's docstring: a hint is checked at use,
    and one lost or torn by a crash only costs a reader the full scan)."""
    data = encode(hint)
    final = os.path.join(dirpath, HINT_FILE)
    try:
        if read_hint(fs, dirpath) == hint:
            return  # a handle that wrote nothing since the last close: nothing to change
        there = True
    except FileNotFoundError:
        there = False
    except (OSError, HintError):
        there = fs.is_link(final) or fs.exists(final)
    tmp = os.path.join(dirpath, HINT_TMP_FILE)
    if fs.is_link(tmp) or fs.exists(tmp):
        fs.unlink(tmp)  # a leftover of a close cut short: replaced, never trusted
    f = fs.open_write(tmp, create=True)
    try:
        write_all(f, data, 0)
    finally:
        f.close()
    if there:
        # Removed first: ext4 starts writing back a file renamed over another (its replace-by-
        # rename heuristic), which made a close twice as slow; a reader that looks in between
        # finds no hint and scans the whole segment.
        fs.unlink(final)
    fs.rename(tmp, final)


__all__ = [
    "HINT_BYTES_MAX",
    "HINT_FILE",
    "HINT_TMP_FILE",
    "HintError",
    "LiveHint",
    "decode",
    "encode",
    "mismatch",
    "read_hint",
    "write_hint",
]
