"""What the bytes after a segment's last valid frame mean: the one tail classifier.

Every reader of a segment asks the same question when a scan stops before the end of the
file: recovery on open (which acts on the answer), the read-only open (which reports it), the
lock-free cursor (which waits or refuses), a shared writer catching up with other processes
(which cuts a torn batch), verify (which reports it, through recovery.decide) and salvage (what
follows a segment's last genuine frame, after it has resynchronised past earlier damage). They
all ask ``classify``, a pure function of (the scan result, the bytes from where it stopped to the
end of the file, the segment's header, the journal's id), so they cannot disagree.

The answers, checked in this order:

* ``foreign``  the segment carries another journal's id (a file copied in from elsewhere):
               refuse, naming that file; nothing of it is served or cut.
* ``clean``    the scan ended exactly at the end of the bytes.
* ``sealed``   a valid seal frame ends the segment (bytes after it are corruption).
* ``gap``      a genuine frame with a seq out of order (a gap or a duplicate): refuse.
* ``newer``    a genuine frame with flags this version does not know: refuse.
* ``corrupt``  damage (bad checksum, torn frame, zeros) with a durable point after it: a
               genuine frame carrying FLAG_AFTER_SYNC (written only once every byte before it
               had been fdatasync'd), or a commit-marked frame followed by a higher seq (its
               fdatasync returned); format.find_durable_point. The damage is in synced data:
               refuse.
* ``zeros``    only zero bytes follow the last frame: a writer's reserved space, or space a
               file system extended; nothing was written there.
* ``torn``     anything else: damage with nothing durable after it. Recovery cuts it (keeping
               the bytes in quarantine/); a lock-free reader reads it as "not yet written",
               since a live writer may be in the middle of that very write.

A segment may be as large as 1 TiB, and a live one may be mostly a hole (space reserved or
extended, never written). So nothing here needs the segment in one buffer: the bytes come
through a ``SegmentBytes`` (``InMemory`` for bytes a caller holds, ``FileBytes`` for a file,
read through journal/fs.py), a window of ``WINDOW_BYTES`` at a time, or one frame's bytes when a
frame is larger; ``scan_windows`` walks the frames and ``classify`` reads what follows them, and
every reader goes through these two. What they hold at once is a window and one frame, whatever
the size of the file, and the holes of a sparse file are skipped, not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from journal.engine import format as fmt
from journal.errors import CorruptionError, ForeignSegmentError, JournalError, NewerFormatError, SequenceError
from journal.fs import File, data_from, hole_from, pread_into, pread_upto

CLEAN = "clean"
SEALED = "sealed"
ZEROS = "zeros"
TORN = "torn"
FOREIGN = "foreign"
GAP = "gap"
NEWER = "newer"
CORRUPT = "corrupt"
REFUSED = frozenset({FOREIGN, GAP, NEWER, CORRUPT})
NOT_YET_WRITTEN = frozenset({ZEROS, TORN})  # what a lock-free reader of a live segment waits on
# What one read of a segment holds (a frame larger than this is read whole, up to the format's
# FRAME_STORED_BYTES_LIMIT): the memory a scan, a tail's classification or a copy of cut bytes
# needs, whatever the file's size.
WINDOW_BYTES = 8 * 1024 * 1024
_HEADER = fmt.FRAME_HEADER_SIZE_BYTES


@dataclass(frozen=True)
class Tail:
    """The classifier's answer. ``error`` is set exactly when the tail is refused."""

    kind: str
    stop_offset: int  # segment offset where the last valid frame ends (the scan's stop)
    last_seq: int  # seq of the last valid data frame (base seq - 1 if none)
    error: JournalError | None = None

    @property
    def refused(self) -> bool:
        return self.kind in REFUSED

    @property
    def cut(self) -> bool:
        """Whether a writer's recovery truncates the segment at ``stop_offset``."""
        return self.kind in NOT_YET_WRITTEN

    def raise_if_refused(self) -> None:
        if self.error is not None:
            raise self.error


def last_data_seq(res: fmt.ScanResult, header: fmt.SegmentHeader) -> int:
    """The seq of the last record the scan found (a block's last), else the header's base - 1."""
    for frame in reversed(res.frames):
        if frame.flags & fmt.FLAG_KIND_MASK in fmt.RECORD_KINDS:
            return frame.seq
    return header.base_seq - 1


def stop_error(res: fmt.ScanResult, segment: str, path: str, last_seq: int) -> JournalError | None:
    """The error for a scan that stopped at a genuine frame that no position in a file can
    excuse: a seq out of order (gap or duplicate), or flags of a newer format. Else None."""
    if res.stop == fmt.Stop.SEQ:
        kind = "duplicate" if res.stop_seq <= last_seq else "gap"
        reason = f"sequence {kind}: found seq {res.stop_seq} where seq {last_seq + 1} was expected"
        return SequenceError(segment, res.stop_offset, res.stop_seq, reason)
    if res.stop == fmt.Stop.FLAGS:
        return NewerFormatError(path, f"frame at offset {res.stop_offset} uses unknown flags", fmt.FORMAT_VERSION)
    return None


class SegmentBytes(Protocol):
    """A segment's bytes as every reader of them sees them: a window at a time, never whole."""

    @property
    def size(self) -> int:
        """Where the bytes end: the file's size when it was looked at (less once a read found
        the file shorter: a writer cut its reserved space off meanwhile)."""
        ...

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes from ``offset``, fewer only where the bytes end."""
        ...

    def data_from(self, offset: int) -> int:
        """The first offset at or after ``offset`` that may hold a byte other than zero (past a
        hole); ``size`` or more if none does."""
        ...

    def hole_from(self, offset: int) -> int:
        """The first offset after ``offset`` (data there) where a hole begins, or ``size``: the end
        of the data that starts at ``offset``."""
        ...


class InMemory:
    """Bytes a caller already holds, as SegmentBytes."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._data = data
        self.size = len(data)

    def read(self, offset: int, size: int) -> bytes:
        if offset == 0 and size >= self.size and isinstance(self._data, bytes):
            return self._data
        return bytes(self._data[offset : offset + size])

    def data_from(self, offset: int) -> int:
        return offset

    def hole_from(self, offset: int) -> int:
        return self.size


class FileBytes:
    """An open segment file as SegmentBytes, up to ``size`` (its size now, unless given). Every
    read is bounded and looped (journal.fs.pread_upto); holes are found with the file layer's
    ``seek_data`` where it has one (journal.fs.data_from)."""

    def __init__(self, f: File, size: int | None = None) -> None:
        self.file = f
        self.size = f.size() if size is None else size

    def read(self, offset: int, size: int) -> bytes:
        want = max(0, min(size, self.size - offset))
        data = pread_upto(self.file, want, offset)
        if len(data) < want:
            self.size = offset + len(data)  # cut since its size was taken: it ends here now
        return data

    def read_into(self, offset: int, buf: memoryview) -> int:
        """``read`` into ``buf`` (at most its length); the count read."""
        want = max(0, min(len(buf), self.size - offset))
        got = pread_into(self.file, buf[:want], offset)
        if got < want:
            self.size = offset + got  # cut since its size was taken: it ends here now
        return got

    def data_from(self, offset: int) -> int:
        return data_from(self.file, offset)

    def hole_from(self, offset: int) -> int:
        found = hole_from(self.file, offset)
        return self.size if found is None else min(found, self.size)


class Window(NamedTuple):
    """One read of a segment and the frames wholly in it (segment offsets)."""

    # The segment's bytes from ``offset``: valid until the scan goes on (a file's windows are
    # read into one buffer, reused), so what is kept of them is copied out.
    buf: bytes | memoryview
    offset: int
    res: fmt.ScanResult  # the frames in ``buf``; its stop is the scan's only if ``last``
    last: bool


def scan_windows(
    src: SegmentBytes, start: int, salt: int, expected_seq: int, window_bytes: int | None = None
) -> Iterator[Window]:
    """``fmt.scan`` of ``src`` from ``start`` to its end, a window at a time: the windows' frames,
    in order, are the frames a scan of all the bytes at once finds, and the last window's stop is
    that scan's stop (reason, offset, seq). A window that ends inside a frame is read on from that
    frame, and a frame larger than a window is read whole (its length is checked against the
    format's limit by ``fmt.scan`` before it sizes a read). A caller may stop early."""
    window_bytes = window_bytes or WINDOW_BYTES  # read when called: tests make windows small
    pos = start
    want = window_bytes
    into = getattr(src, "read_into", None)  # a file: its windows are read into one buffer
    arena = bytearray()
    buf: bytes | memoryview
    while True:
        n = max(0, min(want, src.size - pos))
        if into is None or (not arena and pos + n >= src.size):
            # One read to the end (a live segment short of a window, the common case): bytes
            # straight from the file, not a buffer zeroed first only to be overwritten.
            buf = src.read(pos, n)
        else:
            if len(arena) < n:
                buf, arena = b"", bytearray()  # the old one goes before the larger one is made
                arena = bytearray(n)
            buf = memoryview(arena)[:n]
            buf = buf[: into(pos, buf)]
        end = pos + len(buf)
        res = fmt.scan(buf, 0, salt, expected_seq, base_offset=pos)
        if end >= src.size or not _cut_by_window(res, end):
            yield Window(buf, pos, res, True)
            return
        if res.frames:
            yield Window(buf, pos, res, False)
            expected_seq = res.frames[-1].seq + 1  # padding carries the seq before it: the same
            pos = res.stop_offset
            want = window_bytes
        else:
            # One frame larger than the window: read it whole (stored_len <= the limit: scan
            # stops with CHECKSUM on a larger one).
            need = _HEADER + fmt.read_frame_header(buf, 0)[1] if len(buf) >= _HEADER else _HEADER
            if need <= len(buf):  # pragma: no cover - the frame was in the window after all
                yield Window(buf, pos, res, True)
                return
            want = need


def _cut_by_window(res: fmt.ScanResult, window_end: int) -> bool:
    """Whether a scan stopped only because the window ended (the file goes on)."""
    if res.stop in (fmt.Stop.END, fmt.Stop.TRUNCATED):
        return True
    return res.stop == fmt.Stop.ZEROS and res.stop_offset + _HEADER > window_end  # a zero header cut short


def scan_segment(
    src: SegmentBytes, start: int, salt: int, expected_seq: int, visit: Callable[[Window], None] | None = None
) -> fmt.ScanResult:
    """``scan_windows`` as one ScanResult (every frame, the scan's stop). ``visit`` sees each
    window while its bytes are at hand (to read payloads: a record's key, its digest)."""
    frames: list[fmt.Frame] = []
    for win in scan_windows(src, start, salt, expected_seq):
        frames.extend(win.res.frames)
        if visit is not None:
            visit(win)
        if win.last:
            return fmt.ScanResult(frames, win.res.stop, win.res.stop_offset, win.res.stop_seq)
    raise AssertionError("scan_windows ends with its last window")  # pragma: no cover


@dataclass(frozen=True)
class Span:
    """The bytes of ``src`` from ``start`` to its end: what follows a scan's stop."""

    src: SegmentBytes
    start: int

    @property
    def empty(self) -> bool:
        return self.start >= self.src.size


def all_zeros(span: Span) -> bool:
    """Whether every byte of ``span`` is zero (``fmt.zeros_from``, a window at a time; holes
    are skipped unread)."""
    src, pos = span.src, span.start
    while True:
        pos = src.data_from(pos)
        if pos >= src.size:
            return True
        data_end = src.hole_from(pos)  # read the data there, not the hole after it
        buf = src.read(pos, min(WINDOW_BYTES, (data_end if data_end > pos else src.size) - pos))
        if not buf:
            return True  # the file ends here now
        if buf.count(0) != len(buf):
            return False
        pos += len(buf)


class GenuineFrames:
    """``fmt.next_genuine_frame`` over SegmentBytes: the frame marker is searched a window at a
    time (holes skipped: a marker is not zero), and a candidate whose frame runs past the window
    is read whole from its header, so a search holds a window or one frame, never the file."""

    def __init__(self, src: SegmentBytes, salt: int) -> None:
        self._src = src
        self._salt = salt
        self._buf = b""
        self._at = 0  # the segment offset of _buf[0]

    def next(self, start: int) -> fmt.GenuineFrame | None:
        """The first genuine frame that starts at or after ``start`` (segment offsets)."""
        src, marker_at = self._src, fmt.FRAME_MARKER_OFFSET
        pos = max(start, 0)
        while pos + _HEADER <= src.size:
            if not self._at <= pos or pos + _HEADER > self._at + len(self._buf):
                pos = max(pos, src.data_from(pos + marker_at) - marker_at)
                if pos + _HEADER > src.size:
                    return None
                self._at, self._buf = pos, src.read(pos, min(WINDOW_BYTES, src.size - pos))
                if len(self._buf) < _HEADER:
                    return None  # the file ends here now
            j = self._buf.find(fmt.FRAME_MARKER_BYTES, pos - self._at + marker_at)
            if j < 0:
                # Every header whose marker lies wholly in the window was tried.
                pos = self._at + len(self._buf) - _HEADER + 1
                continue
            h = self._at + j - marker_at  # the marker ends the header: the header is in the window
            stored_len = fmt.read_frame_header(self._buf, h - self._at)[1]
            end = h + _HEADER + stored_len
            if stored_len <= fmt.FRAME_STORED_BYTES_LIMIT and self._at + len(self._buf) < end <= src.size:
                self._at, self._buf = h, src.read(h, max(WINDOW_BYTES, _HEADER + stored_len))
            got = fmt.verify_frame(self._buf, h - self._at, self._salt)
            if got is not None:
                return got._replace(offset=h)
            pos = h + 1
        return None


def frame_at(src: SegmentBytes, offset: int, salt: int) -> tuple[fmt.GenuineFrame, bytes] | None:
    """The genuine frame at ``offset`` of ``src`` with its bytes (from its header), or None. Its
    header is read first: a length from disk sizes no read past the format's frame limit."""
    head = src.read(offset, _HEADER)
    if len(head) < _HEADER:
        return None
    stored_len = fmt.read_frame_header(head, 0)[1]
    if stored_len > fmt.FRAME_STORED_BYTES_LIMIT:
        return None
    data = src.read(offset, _HEADER + stored_len)
    got = fmt.verify_frame(data, 0, salt)
    return None if got is None else (got._replace(offset=offset), data)


def durable_point(span: Span, salt: int, after_seq: int) -> int | None:
    """``fmt.find_durable_point`` over ``span`` (segment offsets): the offset of the first proof
    that the bytes before it were fdatasync'd, or None if there is none. A proof is a genuine
    FLAG_AFTER_SYNC frame above ``after_seq`` (its writer wrote it only after an fdatasync of
    every byte before it had returned), or a genuine commit-marked or seal frame above
    ``after_seq`` with a genuine frame of a higher seq after it."""
    after = _after_sync(span, salt, after_seq)
    frames = GenuineFrames(span.src, salt)
    pos = span.start
    while True:
        commit = frames.next(pos)
        if commit is None or (after is not None and commit.offset > after):
            return after
        if commit.seq > after_seq and (commit.flags & fmt.FLAG_COMMIT or commit.kind == fmt.KIND_SEAL):
            break
        pos = commit.offset + 1
    pos = commit.end
    while True:
        later = frames.next(pos)
        if later is None:
            return after
        if later.seq > commit.seq:
            return commit.offset
        pos = later.offset + 1


def _after_sync(span: Span, salt: int, after_seq: int) -> int | None:
    """``fmt.find_after_sync`` over ``span`` (segment offsets)."""
    frames = GenuineFrames(span.src, salt)
    pos = span.start
    while True:
        got = frames.next(pos)
        if got is None:
            return None
        if got.seq > after_seq and got.flags & fmt.FLAG_AFTER_SYNC:
            return got.offset
        pos = got.offset + 1


def classify(
    res: fmt.ScanResult,
    rest: bytes | memoryview | Span,
    header: fmt.SegmentHeader,
    segment: str,
    path: str,
    journal_id: bytes | None = None,
    last_seq: int | None = None,
) -> Tail:
    """Classify a segment's tail. Pure: it reads only what ``rest`` gives it.

    ``res`` is a scan of the segment (or of a part of it that started on a frame boundary),
    ``rest`` what follows its stop to the end of the file as read now: those bytes, or a Span of
    a SegmentBytes from ``res.stop_offset`` (read a window at a time; a file of any size),
    ``journal_id`` the id of the journal the segment must belong to (None: not checked),
    ``last_seq`` the seq of the last data frame before the stop when the scan did not start at
    the first frame (default: from ``res.frames``, else the header's base seq - 1).
    """
    stop = res.stop_offset
    span = rest if isinstance(rest, Span) else Span(InMemory(rest), 0)
    if last_seq is None:
        last_seq = last_data_seq(res, header)
    if journal_id is not None and header.journal_id != journal_id:
        return Tail(FOREIGN, stop, last_seq, ForeignSegmentError(segment, path))
    if res.stop == fmt.Stop.END and span.empty:
        return Tail(CLEAN, stop, last_seq)
    if res.stop == fmt.Stop.SEALED:
        if not span.empty:
            error = CorruptionError(segment, stop, last_seq, "bytes after the seal footer")
            return Tail(CORRUPT, stop, last_seq, error)
        return Tail(SEALED, stop, last_seq)
    refused = stop_error(res, segment, path, last_seq)
    if refused is not None:
        return Tail(GAP if res.stop == fmt.Stop.SEQ else NEWER, stop, last_seq, refused)
    if all_zeros(span):
        return Tail(ZEROS, stop, last_seq)
    durable = durable_point(span, header.salt, last_seq)
    if durable is not None:
        # END with bytes left (a scan that stopped at frames_max) lands here only if the
        # caller passed a partial scan; the stop name then reads "end".
        at = stop + durable - span.start  # rest's offsets start at the stop, a Span's are the segment's
        found = fmt.STOP_DAMAGE.get(res.stop, f"{res.stop.name.lower()} frame")
        reason = (
            f"{found} before a durable frame at offset {at} (written after a sync, or commit-marked with a"
            " later frame): the damage is in synced data"
        )
        return Tail(CORRUPT, stop, last_seq, CorruptionError(segment, stop, last_seq + 1, reason))
    return Tail(TORN, stop, last_seq)
