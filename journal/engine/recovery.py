"""Recovery on open: find the last complete record of the live segment and decide what it means.

The decision is a pure function of the segment's bytes (``decide``); ``apply`` carries it out
through the file layer. The rules, in the order they are checked:

* a valid frame with a seq out of order is a gap or duplicate: refuse (SequenceError);
* a valid frame with unknown flags was written by a newer version: refuse (NewerFormatError);
* damage (bad checksum, torn frame, zeros) followed somewhere later by a genuine commit-marked
  frame sits before a durable point: that is corruption of committed data, refuse, cut nothing;
* damage with nothing durable after it is a torn tail: the bytes from the last complete frame
  on are copied to ``quarantine/`` (synced), then the segment is truncated and synced, before
  any new append can land. A tail of zero bytes only (the space a writer reserves ahead of its
  records, left by one that did not close) is truncated without a copy: it holds nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import xxhash

from journal.engine import format as fmt
from journal.engine.reader import raise_for_stop
from journal.errors import CorruptionError
from journal.fs import FileSystem, write_atomic

QUARANTINE_DIR = "quarantine"


@dataclass
class RecoveryReport:
    """What opening the journal found and did. ``actions`` lists every change made to disk."""

    segments: int = 0
    last_seq: int = 0
    live_segment: str | None = None
    live_records: int = 0
    tail: str = "clean"  # clean | sealed | torn | zeros | empty
    truncated_at: int | None = None
    truncated_bytes: int = 0
    quarantined: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"segments: {self.segments}, last seq: {self.last_seq}, live segment: {self.live_segment}"
            f" ({self.live_records} records), tail: {self.tail}",
        ]
        if self.truncated_at is not None and self.tail == "zeros":
            lines.append(
                f"zero-filled tail: cut {self.truncated_bytes} zero bytes at offset {self.truncated_at} "
                "(space reserved by a writer that did not close; nothing to keep)"
            )
        elif self.truncated_at is not None:
            lines.append(
                f"torn tail: cut {self.truncated_bytes} bytes at offset {self.truncated_at}; "
                f"kept in {', '.join(self.quarantined)}"
            )
        lines.extend(f"action: {a}" for a in self.actions)
        return "\n".join(lines)


@dataclass(frozen=True)
class TailDecision:
    frames: list[fmt.Frame]
    valid_end: int  # offset just after the last valid frame (or the seal)
    sealed: bool
    cut: bool  # whether [valid_end, len) must be quarantined and truncated
    tail: str


def decide(data: bytes, header: fmt.SegmentHeader, segment: str, path: str) -> TailDecision:
    """Classify a live segment's bytes. Raises for anything that must not be cut."""
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    last_seq = res.frames[-1].seq if res.frames else header.base_seq - 1
    if res.stop == fmt.Stop.END:
        return TailDecision(res.frames, res.stop_offset, False, False, "clean")
    if res.stop == fmt.Stop.SEALED:
        if res.stop_offset != len(data):
            raise CorruptionError(segment, res.stop_offset, last_seq, "bytes after the seal footer")
        return TailDecision(res.frames, res.stop_offset, True, False, "sealed")
    raise_for_stop(res, segment, path, last_seq)
    later = fmt.find_durable_point(data, res.stop_offset, header.salt, last_seq)
    if later is not None:
        raise CorruptionError(
            segment,
            res.stop_offset,
            last_seq + 1,
            f"{res.stop.name.lower()} frame before a durable (commit-marked) frame at offset {later}",
        )
    tail = "zeros" if fmt.zeros_from(data, res.stop_offset) else "torn"
    return TailDecision(res.frames, res.stop_offset, False, True, tail)


def quarantine_name(segment: str, offset: int, cut: bytes) -> str:
    # Deterministic: a recovery that crashes and runs again writes the same file, not a second.
    return f"{segment}.{offset:020d}.{xxhash.xxh64_hexdigest(cut)}.torn"


def quarantine(fs: FileSystem, dirpath: str, segment: str, offset: int, cut: bytes) -> str:
    """Keep cut bytes aside, durably, before they are removed from the segment."""
    qdir = os.path.join(dirpath, QUARANTINE_DIR)
    if not fs.is_dir(qdir):
        fs.mkdir(qdir)
    # Synced every time, not only when made here: a recovery that crashed (or failed) after
    # the mkdir or the rename left a name that exists but may not be durable yet, and the
    # segment is about to be truncated on the strength of it.
    fs.fsync_dir(dirpath)
    name = quarantine_name(segment, offset, cut)
    final = os.path.join(qdir, name)
    if fs.exists(final):
        fs.fsync_dir(qdir)
    else:
        write_atomic(fs, final, cut)
    return os.path.join(QUARANTINE_DIR, name)
