"""Recovery on open: find the last complete record of the live segment and decide what it means.

What the live segment's tail means is decided by journal/engine/tail.py (``decide`` asks it
and refuses what it refuses: a foreign segment, a seq gap or duplicate, a newer format, damage
before a durable point). What recovery then does, through the file layer: a torn tail (damage
with nothing durable after it) is copied to ``quarantine/`` (synced), then the segment is
truncated and synced, before any new append can land. A tail of zero bytes only (the space a
writer reserves ahead of its records, left by one that did not close) is truncated without a
copy: it holds nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import xxhash

from journal.api import RecoveryReport as RecoveryReport  # explicit re-export: it moved to the api
from journal.engine import format as fmt
from journal.engine import tail
from journal.errors import JournalError
from journal.fs import FileSystem, write_atomic

QUARANTINE_DIR = "quarantine"


@dataclass(frozen=True)
class TailDecision:
    frames: list[fmt.Frame]
    valid_end: int  # offset just after the last valid frame (or the seal)
    sealed: bool
    cut: bool  # whether [valid_end, len) must be quarantined and truncated
    tail: str  # a journal/engine/tail.py kind
    error: JournalError | None = None  # set when the tail is refused (only with refuse=False)

    def raise_if_refused(self) -> None:
        if self.error is not None:
            raise self.error


def decide(
    data: bytes,
    header: fmt.SegmentHeader,
    segment: str,
    path: str,
    journal_id: bytes | None = None,
    refuse: bool = True,
) -> TailDecision:
    """Classify a live segment's bytes with the tail classifier (journal/engine/tail.py). Raises
    for anything that must not be cut, unless ``refuse`` is False (the error is then returned)."""
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    verdict = tail.classify(res, data[res.stop_offset :], header, segment, path, journal_id)
    decision = TailDecision(
        res.frames, res.stop_offset, verdict.kind == tail.SEALED, verdict.cut, verdict.kind, verdict.error
    )
    if refuse:
        decision.raise_if_refused()
    return decision


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
