"""Recovery on open: find the last complete record of the live segment and decide what it means.

What the live segment's tail means is decided by journal/engine/tail.py (``decide`` asks it
and refuses what it refuses: a foreign segment, a seq gap or duplicate, a newer format, damage
before a durable point). What recovery then does, through the file layer: a torn tail (damage
with nothing durable after it) is copied to ``quarantine/`` (synced), then the segment is
truncated and synced, before any new append can land. A tail of zero bytes only (the space a
writer reserves ahead of its records, left by one that did not close) is truncated without a
copy: it holds nothing.

The live segment is read through ``tail.SegmentBytes`` a window at a time (journal/engine/tail.py),
so recovery needs memory for a window and one frame, not for the file: a segment may be up to
1 TiB, and one left sparse (reserved or extended, never written) is mostly holes, skipped unread.
Cut bytes are copied aside the same way, holes kept as holes.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import xxhash

from journal.api import RecoveryReport as RecoveryReport  # explicit re-export: it moved to the api
from journal.engine import format as fmt
from journal.engine import tail
from journal.errors import JournalError
from journal.fs import FileSystem, UnexpectedEOFError, ensure_dir, refuse_link, write_all, write_atomic

QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True)
class TailDecision:
    frames: list[fmt.Frame]
    valid_end: int  # offset just after the last valid frame (or the seal)
    sealed: bool
    cut: bool  # whether [valid_end, len) must be quarantined and truncated
    tail: str  # a journal/engine/tail.py kind
    error: JournalError | None = None  # set when the tail is refused (only with refuse=False)
    size: int = 0  # where the segment's bytes ended when they were read: the cut is [valid_end, size)

    def raise_if_refused(self) -> None:
        if self.error is not None:
            raise self.error


def decide(
    data: bytes | bytearray | memoryview | tail.SegmentBytes,
    header: fmt.SegmentHeader,
    segment: str,
    path: str,
    journal_id: bytes | None = None,
    refuse: bool = True,
    visit: Callable[[tail.Window], None] | None = None,
) -> TailDecision:
    """Classify a live segment's bytes (or a ``tail.SegmentBytes``: a file, read a window at a
    time) with the tail classifier (journal/engine/tail.py). Raises for anything that must not
    be cut, unless ``refuse`` is False (the error is then returned). ``visit`` sees each window of
    frames while its bytes are at hand (``tail.scan_segment``)."""
    src = tail.InMemory(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    res = tail.scan_segment(src, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq, visit)
    verdict = tail.classify(res, tail.Span(src, res.stop_offset), header, segment, path, journal_id)
    decision = TailDecision(
        res.frames, res.stop_offset, verdict.kind == tail.SEALED, verdict.cut, verdict.kind, verdict.error,
        max(src.size, res.stop_offset),
    )
    if refuse:
        decision.raise_if_refused()
    return decision


def quarantine_name(segment: str, offset: int, cut: bytes) -> str:
    return _name(segment, offset, xxhash.xxh64_hexdigest(cut))


def _name(segment: str, offset: int, digest_hex: str) -> str:
    # Deterministic: a recovery that crashes and runs again writes the same file, not a second.
    return f"{segment}.{offset:020d}.{digest_hex}.torn"


def quarantine(fs: FileSystem, dirpath: str, segment: str, offset: int, cut: bytes) -> str:
    """Keep cut bytes aside, durably, before they are removed from the segment."""
    qdir = os.path.join(dirpath, QUARANTINE_DIR)
    ensure_dir(fs, qdir)  # a link there is refused: the cut bytes would be written elsewhere
    # Synced every time, not only when made here: a recovery that crashed (or failed) after
    # the mkdir or the rename left a name that exists but may not be durable yet, and the
    # segment is about to be truncated on the strength of it.
    fs.fsync_dir(dirpath)
    name = quarantine_name(segment, offset, cut)
    final = refuse_link(fs, os.path.join(qdir, name))  # a link is no copy kept aside
    if fs.exists(final):
        fs.fsync_dir(qdir)
    else:
        write_atomic(fs, final, cut)
    return os.path.join(QUARANTINE_DIR, name)


def quarantine_span(fs: FileSystem, dirpath: str, segment: str, src: tail.SegmentBytes, offset: int, end: int) -> str:
    """``quarantine`` of the bytes [offset, end) of ``src`` (a segment file), a window at a time:
    the same file, name and bytes as ``quarantine(..., cut)`` of those bytes, without them in one
    buffer. A hole, or a window of zeros, is left a hole in the copy (it reads back as the same
    zeros). UnexpectedEOFError if ``src`` ends before ``end``."""
    length = end - offset
    if length <= tail.WINDOW_BYTES:
        return quarantine(fs, dirpath, segment, offset, _read_exact(src, offset, length))
    digest = xxhash.xxh64()
    zeros = bytes(tail.WINDOW_BYTES)
    for _, piece, n in _pieces(src, offset, end):
        if piece is not None:
            digest.update(piece)
            continue
        while n > 0:
            digest.update(memoryview(zeros)[: min(n, len(zeros))])
            n -= len(zeros)
    qdir = os.path.join(dirpath, QUARANTINE_DIR)
    ensure_dir(fs, qdir)  # a link there is refused: the cut bytes would be written elsewhere
    fs.fsync_dir(dirpath)  # as quarantine() says why
    name = _name(segment, offset, digest.hexdigest())
    final = refuse_link(fs, os.path.join(qdir, name))  # a link is no copy kept aside
    if fs.exists(final):
        fs.fsync_dir(qdir)
        return os.path.join(QUARANTINE_DIR, name)
    tmp = final + ".tmp"  # write_atomic's: a leftover of a crash is replaced, never trusted
    if fs.exists(tmp):
        fs.unlink(tmp)
    out = fs.open_write(tmp, create=True)
    try:
        written = 0
        for at, piece, n in _pieces(src, offset, end):
            if piece is not None:
                write_all(out, piece, at - offset)
                written = at - offset + n
        if written < length:
            out.truncate(length)  # zeros at the end: a hole up to the cut's length
        out.fsync()
    finally:
        out.close()
    fs.rename(tmp, final)
    fs.fsync_dir(qdir)
    return os.path.join(QUARANTINE_DIR, name)


def _read_exact(src: tail.SegmentBytes, offset: int, size: int) -> bytes:
    data = src.read(offset, size)
    if len(data) != size:
        path = getattr(getattr(src, "file", None), "path", None)
        raise UnexpectedEOFError(
            errno.EIO, f"the segment ends at offset {offset + len(data)}, inside the bytes recovery cuts "
            f"({offset}-{offset + size}): it changed while the writer lock was held", path,
        )
    return data


def _pieces(src: tail.SegmentBytes, start: int, end: int) -> Iterator[tuple[int, bytes | None, int]]:
    """(offset, bytes, length) of [start, end) a window at a time; bytes None for a hole or a
    window of zeros only."""
    pos = start
    while pos < end:
        data_at = min(src.data_from(pos), end)
        if data_at > pos:
            yield pos, None, data_at - pos
            pos = data_at
            continue
        n = min(tail.WINDOW_BYTES, end - pos)
        buf = _read_exact(src, pos, n)
        yield pos, (None if buf.count(0) == n else buf), n
        pos += n
