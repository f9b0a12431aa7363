"""Verify: a read-only check of every frame and every structure of a journal, with a verdict.

The verdict is one of three, and it is the same one the writer's recovery would reach:

* ``clean``: every segment reads to its end; sealed segments have footers that agree with
  their frames (count, first and last seq, every index entry on a frame with that seq); seqs are
  contiguous across segments; every segment carries the same journal id.
* ``torn``: the only damage is a torn tail of the live segment with nothing proven durable after
  it (and perhaps an unfinished ``.seg.tmp``): opening the journal for writing, or
  ``journal repair``, cuts it into ``quarantine/``. Nothing acknowledged as durable is lost.
* ``corrupt``: anything else: damage in a sealed segment or before a durable point, a seq gap or
  duplicate, a missing segment, a footer that disagrees. Recovery refuses such a journal;
  ``journal salvage`` copies what is recoverable into a new one.

The live segment's verdict comes from ``recovery.decide`` itself, so verify and open can never
disagree; the rest comes from ``salvage.walk_journal``, which also says where each loss is.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.core import LOCK_FILE
from journal.engine.dictionary import DictionaryCache
from journal.engine.recovery import TailDecision, decide
from journal.engine.salvage import (
    JournalWalk,
    Loss,
    Progress,
    SegmentCheck,
    SegmentWalk,
    quarantine_files,
    reading,
    walk_journal,
    walk_segment,
)
from journal.engine.segment import read_seal
from journal.errors import CorruptionError, InvariantError, NewerFormatError
from journal.fs import FileSystem, OsFileSystem, flock_holder

CLEAN = "clean"
TORN = "torn"
CORRUPT = "corrupt"
NEWER = "newer-format"


@dataclass
class VerifyReport:
    path: str
    verdict: str = CLEAN
    segments: int = 0
    records: int = 0
    size_bytes: int = 0
    last_seq: int = 0
    first_seq: int = 1  # later than 1 once a prefix was dropped (Journal.drop_prefix)
    problems: list[Loss] = field(default_factory=list)  # what makes it corrupt
    torn_tail: Loss | None = None
    temp_files: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"{self.path}: {self.verdict.upper()}",
            f"segments: {self.segments}, records: {self.records}, bytes: {self.size_bytes}, last seq: {self.last_seq}",
        ]
        if self.first_seq != 1:
            lines.append(f"first seq: {self.first_seq} (the records before it were dropped by drop_prefix)")
        if self.torn_tail is not None and self.torn_tail.reason == "zeros tail":
            lines.append(f"zero-filled tail: {self.torn_tail.describe()}")
            lines.append(
                "  space a writer reserves after its last record: a writer has the journal open, or one did not"
                " close; it holds nothing, and any writer's open (or `journal repair`) truncates it"
            )
        elif self.torn_tail is not None:
            lines.append(f"torn tail: {self.torn_tail.describe()}")
            lines.append("  `journal repair` (or any writer's open) cuts it and keeps the bytes in quarantine/")
        lines.extend(f"unfinished segment file: {t} (removed by recovery)" for t in self.temp_files)
        for p in self.problems:
            lines.append(f"problem: {p.describe()}")
        if self.verdict == NEWER:
            lines.append("  written by a newer journal format: upgrade the journal package, then verify it again; "
                         "nothing was changed")
        elif self.problems:
            lines.append("  recovery refuses this journal; `journal salvage SRC DEST` copies what is recoverable")
        if self.quarantined:
            lines.append(f"quarantine/ holds {len(self.quarantined)} file(s) of bytes cut by earlier recoveries")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "verdict": self.verdict,
            "segments": self.segments,
            "records": self.records,
            "sizeBytes": self.size_bytes,
            "lastSeq": self.last_seq,
            "firstSeq": self.first_seq,
            "tornTail": self.torn_tail.to_json() if self.torn_tail else None,
            "problems": [p.to_json() for p in self.problems],
            "tempFiles": self.temp_files,
            "quarantined": self.quarantined,
            "notes": self.notes,
        }


def _check_seal(fs: FileSystem, path: str, seg: SegmentWalk, problems: list[Loss]) -> None:
    """A sealed segment's footer must be findable from the end and agree with the frames."""
    if not (seg.header is not None):
        raise InvariantError('seg.header is not None')
    f = fs.open_read(os.path.join(path, seg.name))
    try:
        try:
            seal = read_seal(f, seg.header, seg.name, seg.size_bytes)
        except CorruptionError as exc:
            problems.append(Loss(seg.name, exc.offset, 0, exc.reason, exc.seq, exc.seq))
            return
    finally:
        f.close()
    if seal is None:
        problems.append(Loss(seg.name, seg.size_bytes, 0, "segment before the live one has no valid seal footer"))
        return
    frames = seg.frames
    first = frames[0].first_seq if frames else None
    last = frames[-1].seq if frames else None
    count = sum(fr.records for fr in frames)
    if (seal.record_count, seal.first_seq, seal.last_seq) != (count, first, last):
        problems.append(Loss(seg.name, seal.seal_offset, 0,
                             f"seal footer says {seal.record_count} records, seqs {seal.first_seq}-{seal.last_seq}; "
                             f"the segment holds {count}, seqs {first}-{last}"))
    at = {fr.offset: fr.first_seq for fr in frames}  # an index entry names a frame's first record
    bad = [(s, o) for s, o in seal.entries if at.get(o) != s]
    if bad:
        s, o = bad[0]
        problems.append(Loss(seg.name, o, 0, f"seal index entry (seq {s}, offset {o}) is not on that frame "
                             f"({len(bad)} bad entries)", s, s))
    # A writer reopened after this segment takes a retry under a key in the footer's table for a
    # duplicate of the record it names, without reading that record: a table that names a seq
    # whose record has another key (or none) would acknowledge an append that is never written.
    # A table may name fewer keys than the records hold: the writer remembers at most
    # KEYS_REMEMBERED_MAX keys and writes those it still remembers; a key left out is a retry
    # written again, never an append acknowledged and lost.
    table = {seq: key.decode("utf-8", "surrogateescape") for seq, key in seal.keys}
    wrong = sorted(s for s in table if table[s] != seg.keys.get(s))
    if wrong:
        s = wrong[0]
        problems.append(Loss(seg.name, seal.seal_offset, 0,
                             f"seal footer's key table disagrees with the records at {len(wrong)} seqs (first: seq "
                             f"{s}, footer {table.get(s)!r}, record {seg.keys.get(s)!r})", s, s))


def check_seals(fs: FileSystem, path: str) -> SegmentCheck:
    """walk_journal's check of each segment before the live one, while it holds its frames: its
    footer against them (``seal_problems``), for ``classify``."""

    def check(seg: SegmentWalk, last: bool) -> None:
        if not last and seg.header is not None and seg.header_trusted and not seg.losses:
            _check_seal(fs, path, seg, seg.seal_problems)

    return check


def classify(walk: JournalWalk, fs: FileSystem | None = None) -> VerifyReport:
    """The verdict for a walked journal (walked with ``check_seals``; reads the live segment again
    through ``fs``; writes nothing). An OSError of the file layer propagates: ``verify`` makes it a
    JournalIOError."""
    fs = fs or OsFileSystem()
    path = walk.path
    rep = VerifyReport(path, segments=len(walk.segments), temp_files=list(walk.temp_files))
    rep.quarantined = quarantine_files(path, fs)
    rep.problems.extend(walk.between)
    rep.first_seq = walk.first_seq
    rep.notes.extend(f"segment {name} was dropped by a drop_prefix a crash cut short; the next writer's open "
                     "removes it" for name in walk.dropped)
    if not walk.segments:
        rep.verdict = CORRUPT
        return rep
    live = walk.segments[-1]
    for seg in walk.segments[:-1]:
        rep.problems.extend(seg.losses)
        rep.problems.extend(seg.seal_problems)  # found while the walk held its frames (check_seals)
    # The live segment: exactly what the writer's recovery would decide. It is looked at again
    # here and everything said of it comes from that one look (one open file, up to the size it
    # had; read a window at a time): a writer appending, closing or rolling over since the walk
    # read it changes its bytes (the reserved space is cut at both).
    look = _read(fs, os.path.join(path, live.name))
    decision: TailDecision | None = None
    failure: CorruptionError | NewerFormatError | None = None
    if live.header is not None and live.header_trusted:
        # The journal's id is the walk's (most segments', as the writer's open decides it): a
        # live segment is foreign only if it carries another, never because the one before it does.
        decision, failure, live = _decide_live(
            fs, look, live.header, live.name, os.path.join(path, live.name), walk.journal_id
        )
        walk.segments[-1] = live
    else:
        _close(look)
    size = live.size_bytes
    for seg in walk.segments:
        rep.size_bytes += seg.size_bytes
        rep.records += seg.count
        if seg.last_seq is not None:
            rep.last_seq = max(rep.last_seq, seg.last_seq)
    if live.header is None or not live.header_trusted:
        rep.problems.extend(live.losses)
    elif isinstance(failure, NewerFormatError):
        rep.verdict = NEWER
        rep.notes.append(str(failure))
        rep.problems.extend(live.losses)
    elif isinstance(failure, CorruptionError):
        exc = failure
        # The walk went on past the damage to the next genuine frame, as salvage does: where it
        # found one, the bytes and seqs lost are that stretch's (salvage reports the same), not
        # all the rest of the segment.
        walked = next((loss for loss in live.losses if loss.offset == exc.offset), None)
        if walked is not None:
            rep.problems.append(Loss(live.name, exc.offset, walked.length_bytes, exc.reason, walked.seq_first,
                                     walked.seq_last, True))
        else:
            rep.problems.append(Loss(live.name, exc.offset, size - exc.offset, exc.reason, exc.seq, None, True))
        rep.problems.extend(loss for loss in live.losses if loss.offset != exc.offset)
    else:
        if not (decision is not None):
            raise InvariantError('decision is not None')
        holder = flock_holder(os.path.join(path, LOCK_FILE)) if decision.tail == "zeros" else None
        if holder is not None:
            # Zeros after the last frame while a writer holds the lock: its reserved space.
            rep.notes.append(
                f"{size - decision.valid_end} bytes of zeros after the last record of {live.name}: "
                f"space reserved by the writer that has the journal open (pid {holder}), not damage"
            )
        elif decision.cut:
            data_frames = fmt.record_frames(decision.frames)
            tail_first = data_frames[-1].seq + 1 if data_frames else live.header.base_seq
            rep.torn_tail = Loss(live.name, decision.valid_end, size - decision.valid_end,
                                 f"{decision.tail} tail", tail_first, None)
            # Records past a torn tail were never acknowledged as durable; recovery cuts them.
            rep.records = sum(s.count for s in walk.segments[:-1]) + sum(fr.records for fr in data_frames)
            before_tail = [min(run.seq_last, tail_first - 1) for run in live.runs if run.seq_first < tail_first]
            rep.last_seq = max([s.last_seq or 0 for s in walk.segments[:-1]] + before_tail, default=0)
            # A genuine frame before the tail whose record does not decode is damage all the same:
            # cutting the tail leaves it there.
            rep.problems.extend(loss for loss in live.losses if loss.offset < decision.valid_end)
        else:
            rep.problems.extend(live.losses)
        if decision.sealed:
            _check_seal(fs, path, live, rep.problems)
    newer = [p for p in rep.problems if p.newer]
    if newer:
        # Bytes of a newer format are not damage: this version cannot judge them (nor salvage them).
        rep.verdict = NEWER
        rep.problems = [p for p in rep.problems if not p.newer]
        rep.notes.extend(f"{p.describe()}: written by a newer journal format; upgrade the journal package to read it"
                         for p in newer)
    if rep.verdict != NEWER:
        if rep.problems:
            rep.verdict = CORRUPT
        elif rep.torn_tail is not None or rep.temp_files:
            rep.verdict = TORN
    return rep


LIVE_READS_MAX = 3  # reads of a live segment before damage in it is believed
LIVE_REREAD_WAIT_S = 0.02  # before reading a live writer's torn-looking tail again (then twice that)


def _decide_live(
    fs: FileSystem, look: tail.SegmentBytes, header: fmt.SegmentHeader, name: str, path: str,
    journal_id: bytes | None = None,
) -> tuple[TailDecision | None, CorruptionError | NewerFormatError | None, SegmentWalk]:
    """recovery.decide on the live segment, looked at again while it looks damaged.

    Returns the decision (or the error) and the walk of the look it was made on (``look``, or
    a fresh one; each is closed). A writer may be appending while verify reads: a long read is
    copied page by page, so its first pages can show the zeros before a frame landed and its
    later pages the batches written after it, which looks like damage before a durable frame;
    and a batch is written body first and its first header last, so between the two writes a
    live writer's tail looks torn. Damage that is still there in a fresh look is real; a torn
    tail is only looked at again while a writer holds the lock.
    """
    lock = os.path.join(os.path.dirname(path), LOCK_FILE)
    dicts = DictionaryCache(fs, os.path.dirname(path))  # for records that name a dictionary
    for attempt in range(LIVE_READS_MAX):
        last = attempt == LIVE_READS_MAX - 1
        try:
            try:
                decision = decide(look, header, name, path, journal_id)
            except NewerFormatError as exc:
                return None, exc, _walk(name, look, dicts)
            except CorruptionError as exc:
                if last:
                    return None, exc, _walk(name, look, dicts)
            else:
                if decision.tail != "torn" or last or flock_holder(lock) is None:
                    return decision, None, _walk(name, look, dicts)
                time.sleep(LIVE_REREAD_WAIT_S * (attempt + 1))  # give the batch's header time to land
        finally:
            _close(look)
        look = _read(fs, path)
    raise AssertionError("unreachable")


def _read(fs: FileSystem, path: str) -> tail.SegmentBytes:
    """A look at the live segment: the file, open, and its size now, read a window at a time
    (the caller closes it, ``_close``)."""
    f = fs.open_read(path)
    try:
        return tail.FileBytes(f)
    except BaseException:
        f.close()
        raise


def _walk(name: str, look: tail.SegmentBytes, dicts: DictionaryCache) -> SegmentWalk:
    """The walk of the bytes a decision was made on: the same file, up to the same size."""
    src = tail.FileBytes(look.file, look.size) if isinstance(look, tail.FileBytes) else look
    return walk_segment(name, src, fmt.FRAME_STORED_BYTES_LIMIT, dicts)


def _close(look: tail.SegmentBytes) -> None:
    if isinstance(look, tail.FileBytes):
        look.file.close()


def verify(path: str, progress: Progress | None = None, fs: FileSystem | None = None) -> VerifyReport:
    """Check the journal at ``path`` without changing a byte; see the module doc for the verdicts.

    Every read goes through ``fs`` (the real file system by default); a failure of the file layer
    (permissions, the device) raises JournalIOError, like every other way of opening a journal.
    """
    path = os.fspath(path)
    fs = fs or OsFileSystem()
    walk = walk_journal(path, progress=progress, fs=fs, check=check_seals(fs, path))
    with reading(path):
        return classify(walk, fs)
