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
               commit-marked frame followed by a higher seq proves its fdatasync returned
               (format.find_durable_point), so the damage is in committed data: refuse.
* ``zeros``    only zero bytes follow the last frame: a writer's reserved space, or space a
               file system extended; nothing was written there.
* ``torn``     anything else: damage with nothing durable after it. Recovery cuts it (keeping
               the bytes in quarantine/); a lock-free reader reads it as "not yet written",
               since a live writer may be in the middle of that very write.
"""

from __future__ import annotations

from dataclasses import dataclass

from journal.engine import format as fmt
from journal.errors import CorruptionError, ForeignSegmentError, JournalError, NewerFormatError, SequenceError

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


def classify(
    res: fmt.ScanResult,
    rest: bytes,
    header: fmt.SegmentHeader,
    segment: str,
    path: str,
    journal_id: bytes | None = None,
    last_seq: int | None = None,
) -> Tail:
    """Classify a segment's tail. Pure.

    ``res`` is a scan of the segment (or of a part of it that started on a frame boundary),
    ``rest`` the segment's bytes from ``res.stop_offset`` to the end of the file as read now,
    ``journal_id`` the id of the journal the segment must belong to (None: not checked),
    ``last_seq`` the seq of the last data frame before the stop when the scan did not start at
    the first frame (default: from ``res.frames``, else the header's base seq - 1).
    """
    stop = res.stop_offset
    if last_seq is None:
        last_seq = last_data_seq(res, header)
    if journal_id is not None and header.journal_id != journal_id:
        return Tail(FOREIGN, stop, last_seq, ForeignSegmentError(segment, path))
    if res.stop == fmt.Stop.END and not rest:
        return Tail(CLEAN, stop, last_seq)
    if res.stop == fmt.Stop.SEALED:
        if rest:
            error = CorruptionError(segment, stop, last_seq, "bytes after the seal footer")
            return Tail(CORRUPT, stop, last_seq, error)
        return Tail(SEALED, stop, last_seq)
    refused = stop_error(res, segment, path, last_seq)
    if refused is not None:
        return Tail(GAP if res.stop == fmt.Stop.SEQ else NEWER, stop, last_seq, refused)
    if fmt.zeros_from(rest):
        return Tail(ZEROS, stop, last_seq)
    durable = fmt.find_durable_point(rest, 0, header.salt, last_seq)
    if durable is not None:
        # END with bytes left (a scan that stopped at frames_max) lands here only if the
        # caller passed a partial scan; the stop name then reads "end".
        reason = f"{res.stop.name.lower()} frame before a durable (commit-marked) frame at offset {stop + durable}"
        return Tail(CORRUPT, stop, last_seq, CorruptionError(segment, stop, last_seq + 1, reason))
    return Tail(TORN, stop, last_seq)
