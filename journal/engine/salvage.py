"""Salvage: copy every record that can still be proven genuine from a damaged journal into a new one.

Recovery refuses to go past damage in committed data, on purpose: it must never guess. Salvage
is the explicit, separate step an operator takes after that refusal. It never writes to the
source. For each segment it scans frames with the same scanner as the reader; where a frame
fails, it resynchronises on the next genuine frame (found by the frame marker, proven by the
salted 64-bit checksum, so a false match is not a practical concern) and goes on. Every stretch
it had to skip becomes a ``Loss`` naming the segment, the offset, the bytes and the range of
seqs that are gone, when the seqs around the damage say it.

The new journal keeps the source's sequence numbers by default: a seq that was lost is filled
with a synthetic placeholder record (``{"type": "journal.lost", ...}``, marked ignorable so the
session layer's readers skip it), so references between records by seq (causationId, AckLost
resolution) still point where they did. ``renumber=True`` packs the records instead.

``walk_journal`` is the read-only analysis; ``journal verify`` classifies its result.
"""

from __future__ import annotations

import bisect
import heapq
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from journal.api import LOCK_FILE
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.dictionary import DictionaryCache, for_segment
from journal.engine.options import RECORD_SIZE_BYTES_MAX_LIMIT
from journal.engine.reader import DROPPED, THERE, Record, decode_block, decode_payload, why_missing
from journal.engine.recovery import QUARANTINE_DIR
from journal.engine.segment import TMP_SUFFIX, read_start
from journal.errors import (
    CorruptionError,
    JournalError,
    JournalIOError,
    JournalNotFoundError,
    NewerFormatError,
    NotAJournalError,
    RecordTooLargeError,
    WriteFailedError,
    present,
)
from journal.fs import File, FileSystem, OsFileSystem, discard_dir, pread_upto, publish_dir, temp_dir_beside

LOST_TYPE = "journal.lost"
SALVAGE_BATCH_RECORDS = 1024
SALVAGE_BATCH_BYTES = 4 * 1024 * 1024  # of payload a batch of the new journal holds (a record over it goes alone)
COPY_CHUNK_BYTES = 1024 * 1024  # what one read of a source segment takes when copying (a larger frame: its size)
# Placeholders one salvage writes at most (each ~150 bytes): lost seqs beyond that are refused,
# since keeping seqs cannot skip one, and renumbering writes none.
PLACEHOLDERS_MAX = 1_000_000

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Loss:
    """A stretch of a segment that could not be copied, and the seqs it took with it."""

    segment: str
    offset: int
    length_bytes: int
    reason: str
    seq_first: int | None = None  # None when the seqs around the damage do not say
    seq_last: int | None = None
    durable_after: bool = False  # a commit-marked, seal or after-sync frame follows in the same segment
    newer: bool = False  # written by a newer format: not damage; this version cannot read it

    def seqs(self) -> str:
        if self.seq_first is None:
            return "seqs unknown"
        if self.seq_last is None:
            return f"seq {self.seq_first} and any after it in this segment"
        if self.seq_last < self.seq_first:
            return "no seq lost"
        if self.seq_first == self.seq_last:
            return f"seq {self.seq_first}"
        return f"seqs {self.seq_first}-{self.seq_last}"

    def describe(self) -> str:
        return f"{self.segment} offset {self.offset} ({self.length_bytes} bytes): {self.reason}; {self.seqs()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "segment": self.segment,
            "offset": self.offset,
            "lengthBytes": self.length_bytes,
            "reason": self.reason,
            "seqFirst": self.seq_first,
            "seqLast": self.seq_last,
            "durableAfter": self.durable_after,
            "newerFormat": self.newer,
        }


@dataclass(slots=True)
class Run:
    """Records ``seq_first``..``seq_last`` of one segment, one after another in its genuine frames
    from the frame at ``offset`` on (padding frames between them aside; the first frame may be a
    block whose records before ``seq_first`` are not part of it). What a walk keeps of a segment
    instead of its records, and what salvage reads again to copy them: one run for a sound
    segment, one more for each place of damage."""

    segment: str
    offset: int
    seq_first: int
    seq_last: int
    misplaced: bool = False  # a genuine frame found out of sequence

    @property
    def records(self) -> int:
        return self.seq_last - self.seq_first + 1

    def part(self, seq_first: int, seq_last: int) -> Run:
        """The records ``seq_first``..``seq_last`` of this run, as a run of their own."""
        return Run(self.segment, self.offset, seq_first, seq_last, self.misplaced)


@dataclass
class SegmentWalk:
    """What one segment holds, read with resynchronisation after damage.

    Its records are decoded one frame at a time and not kept (``runs`` says where they are):
    a walk holds one segment's frames and one record, never the journal's history."""

    name: str
    size_bytes: int
    header: fmt.SegmentHeader | None
    header_trusted: bool = True
    seal: fmt.SealInfo | None = None
    seal_offset: int | None = None
    losses: list[Loss] = field(default_factory=list)
    # The live segment's last loss when nothing genuine follows it: a torn tail, which recovery
    # cuts (it was never acknowledged as durable unless durable_after says otherwise).
    tail: Loss | None = None
    # Every genuine data or block frame, in file order: for the seal check; walk_journal drops
    # them once the segment is checked.
    frames: list[fmt.Frame] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)  # the records that decode, in file order
    # The idempotency key of each keyed record, by seq: for the seal check of the footer's key
    # table (retries after a reopen are taken as duplicates of what it names); dropped with frames.
    keys: dict[int, str] = field(default_factory=dict)
    # Records held, and the highest seq among them: every record that decodes, until
    # walk_journal leaves out second copies of a seq and the records of a foreign segment.
    count: int = 0
    last_seq: int | None = None
    seal_problems: list[Loss] = field(default_factory=list)  # verify's check of the footer (walk_journal)
    # Where the last genuine frame seen ends, and whether the last run's last record is the
    # record right before a frame that starts there: only then does that frame continue it.
    end: int = field(default=0, repr=False)
    joins: bool = field(default=False, repr=False)
    # The journal's dictionaries, for frames that name one (format version 4): a frame whose
    # dictionary file is missing or damaged is a loss like any record that does not decode.
    dicts: DictionaryCache | None = field(default=None, repr=False, compare=False)

    def add(
        self,
        frame: fmt.Frame,
        data: bytes | memoryview,
        record_size_bytes_max: int,
        misplaced: bool = False,
        data_offset: int = 0,
    ) -> None:
        """Decode a genuine data or block frame's records (``data`` holds its bytes; it starts at
        segment offset ``data_offset``): each that decodes (its payload what its flags say,
        ``Record.event``) extends the runs; each that does not is a loss."""
        self.frames.append(frame)
        joins = self.joins and frame.offset == self.end and not misplaced
        self.end = frame.end
        self.joins = False
        try:
            if frame.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK:
                recs = decode_block(frame, data, data_offset, self.name, record_size_bytes_max, self.dicts)
            else:
                recs = [decode_payload(frame, data, data_offset, self.name, record_size_bytes_max, self.dicts)]
        except (CorruptionError, RecordTooLargeError) as exc:
            length = frame.end - frame.offset
            self.losses.append(Loss(self.name, frame.offset, length, str(exc), frame.first_seq, frame.seq))
            return
        runs = self.runs
        for rec in recs:
            seq = rec.seq
            if not rec.is_bytes:
                try:
                    rec.event  # noqa: B018 - decoding it is the check
                except CorruptionError as exc:
                    length = frame.end - frame.offset
                    self.losses.append(Loss(self.name, frame.offset, length, exc.reason, seq, seq))
                    joins = False
                    continue
            if joins and runs[-1].seq_last + 1 == seq:  # joins: a run holds the record before it
                runs[-1].seq_last = seq
            else:
                runs.append(Run(self.name, frame.offset, seq, seq, misplaced))
            joins = True  # the next record of this frame follows this one
            if rec.key is not None:
                self.keys[seq] = rec.key
            self.count += 1
            if self.last_seq is None or seq > self.last_seq:
                self.last_seq = seq
        self.joins = joins and not misplaced


@dataclass
class JournalWalk:
    path: str
    segments: list[SegmentWalk]
    between: list[Loss]  # gaps and overlaps between segments (a missing segment, a stale copy)
    temp_files: list[str]
    journal_id: bytes | None
    # The start marker (a dropped prefix): the journal begins at its first seq, and segments
    # wholly before it (a drop_prefix cut short by a crash) are not part of the journal.
    start: fmt.StartMarker | None = None
    dropped: list[str] = field(default_factory=list)
    # The records kept, in seq order: one copy of each seq (the first in its place), none of a
    # foreign segment. Stretches of runs; salvage reads them again to copy them.
    kept: list[Run] = field(default_factory=list)
    duplicates: int = 0  # second copies of a seq, left out of ``kept``

    @property
    def first_seq(self) -> int:
        return self.start.first_seq if self.start is not None else 1

    def losses(self) -> list[Loss]:
        out: list[Loss] = []
        for seg in self.segments:
            out.extend(seg.losses)
        out.extend(self.between)
        return out


@contextmanager
def reading(path: str) -> Iterator[None]:
    """An OSError of the file layer while reading the journal at ``path`` becomes JournalIOError,
    as it does for every other command: a typed error that says what to do, never a traceback."""
    try:
        yield
    except JournalError:
        raise
    except OSError as exc:
        raise JournalIOError(path, exc, "reading") from exc


def _durable_after(frames: tail.GenuineFrames, offset: int) -> bool:
    """Whether a genuine commit-marked, seal or FLAG_AFTER_SYNC frame follows ``offset`` in the
    same segment (the last says outright that the bytes before it were synced)."""
    pos = offset
    while True:
        got = frames.next(pos)
        if got is None:
            return False
        # Every commit-marked or seal frame carries a seq of at least 1 (seqs start there).
        if got.seq > 0 and (got.flags & (fmt.FLAG_COMMIT | fmt.FLAG_AFTER_SYNC) or got.kind == fmt.KIND_SEAL):
            return True
        pos = got.offset + 1


def walk_segment(
    name: str,
    data: bytes | bytearray | memoryview | tail.SegmentBytes,
    record_size_bytes_max: int = fmt.FRAME_STORED_BYTES_LIMIT,
    dicts: DictionaryCache | None = None,
) -> SegmentWalk:
    """Read every genuine record of one segment's bytes, resynchronising after damage. Pure: it
    reads only ``data``, bytes or a ``tail.SegmentBytes`` (a file), a window at a time (a
    segment may be up to 1 TiB, a live one mostly a hole), so it holds a window and one frame."""
    src = tail.InMemory(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    size = src.size
    walk = SegmentWalk(name, size, None, dicts=dicts)
    base_from_name = fmt.parse_segment_name(name) or 1
    head = src.read(0, fmt.SEGMENT_HEADER_SIZE_BYTES)
    try:
        header = fmt.decode_segment_header(head)
    except fmt.HeaderError as exc:
        if exc.version > fmt.FORMAT_VERSION or len(head) < fmt.SEGMENT_HEADER_SIZE_BYTES:
            walk.losses.append(Loss(name, 0, size, f"segment header: {exc.reason}", base_from_name, None,
                                    newer=exc.version > fmt.FORMAT_VERSION))
            return walk
        # The header's checksum failed, but its salt may still be intact: frames are verified
        # with it one by one, so trying it costs nothing and a wrong salt matches no frame.
        salt_at, id_at = fmt.SEGMENT_SALT_OFFSET, fmt.SEGMENT_JOURNAL_ID_OFFSET
        salt = int.from_bytes(head[salt_at : salt_at + fmt.SEGMENT_SALT_SIZE_BYTES], "little")
        journal_id = head[id_at : id_at + fmt.SEGMENT_JOURNAL_ID_SIZE_BYTES]
        header = fmt.SegmentHeader(fmt.FORMAT_VERSION, journal_id, -1, base_from_name, salt)
        walk.header_trusted = False
        walk.losses.append(Loss(name, 0, fmt.SEGMENT_HEADER_SIZE_BYTES, f"segment header: {exc.reason}", None, None))
    walk.header = header
    walk.dicts = for_segment(dicts, header.version)  # a version 3 segment names no dictionary
    if header.base_seq != base_from_name and walk.header_trusted:
        walk.losses.append(
            Loss(name, 0, 0, f"header base seq {header.base_seq} does not match the file name", None, None)
        )
    salt = header.salt
    pos = fmt.SEGMENT_HEADER_SIZE_BYTES
    expected = header.base_seq
    genuine = tail.GenuineFrames(src, salt)  # the search for genuine frames past damage
    while True:
        for win in tail.scan_windows(src, pos, salt, expected):
            for fr in win.res.frames:
                kind = fr.flags & fmt.FLAG_KIND_MASK
                if kind in fmt.RECORD_KINDS:
                    walk.add(fr, win.buf, record_size_bytes_max, data_offset=win.offset)
                    expected = fr.seq + 1
                elif kind == fmt.KIND_PADDING:
                    walk.end = fr.end  # the frame after it still continues the run before it
                elif kind == fmt.KIND_SEAL:
                    walk.seal_offset = fr.offset
                    try:
                        body = fr.payload_offset - win.offset
                        walk.seal = fmt.decode_seal_payload(win.buf[body : body + fr.stored_len])
                    except ValueError as exc:
                        walk.losses.append(Loss(name, fr.offset, fr.end - fr.offset, f"seal footer: {exc}"))
            res = win.res
        if res.stop == fmt.Stop.END:
            return walk
        if res.stop == fmt.Stop.SEALED:
            if res.stop_offset != size:
                walk.losses.append(Loss(name, res.stop_offset, size - res.stop_offset, "bytes after the seal footer"))
            return walk
        at = res.stop_offset
        if res.stop in (fmt.Stop.SEQ, fmt.Stop.FLAGS):
            stopped_at = present(tail.frame_at(src, at, salt), "a scan stopped at SEQ or FLAGS on a genuine frame")
            got, frame_bytes = stopped_at
            seq, flags, end = got.seq, got.flags, got.end
            kind = flags & fmt.FLAG_KIND_MASK
            pos = end
            count = _records_in(got, frame_bytes, at)
            if res.stop == fmt.Stop.FLAGS:
                first = seq + 1 - count if count else seq
                walk.losses.append(Loss(name, at, end - at, "frame written by a newer format", first, seq, newer=True))
            elif kind in fmt.RECORD_KINDS:
                # Genuine but out of order: keep it under its own seqs (walk_journal drops a second
                # copy of a seq and reports the seqs nobody holds) and follow the frames after it.
                first = seq + 1 - count
                walk.losses.append(Loss(name, at, 0, f"frame out of sequence: seq {first} where seq {expected} "
                                        "was expected", first, first - 1))
                fr = fmt.Frame(at, seq, flags, got.raw_len, got.stored_len, count)
                walk.add(fr, frame_bytes, record_size_bytes_max, misplaced=True, data_offset=at)
                expected = seq + 1
            else:
                # A seal or padding frame carries the last data seq before it.
                walk.losses.append(Loss(name, at, 0, f"{_kind(kind)} frame carries seq {seq} where seq "
                                        f"{expected - 1} was expected"))
                if kind == fmt.KIND_SEAL:
                    walk.seal_offset = at
                    try:
                        walk.seal = fmt.decode_seal_payload(frame_bytes[fmt.FRAME_HEADER_SIZE_BYTES :])
                    except ValueError as exc:
                        walk.losses.append(Loss(name, at, end - at, f"seal footer: {exc}"))
                    if end != size:
                        walk.losses.append(Loss(name, end, size - end, "bytes after the seal footer"))
                    return walk
            following = tail.frame_at(src, pos, salt)
            if following is not None:
                follow, follow_bytes = following
                if follow.kind in fmt.RECORD_KINDS and _records_in(follow, follow_bytes, pos):
                    # Re-anchor on the frame that follows, whatever it carries.
                    expected = follow.seq + 1 - _records_in(follow, follow_bytes, pos)
            continue
        # TRUNCATED, ZEROS or CHECKSUM: skip to the next frame that proves itself genuine.
        reason = fmt.STOP_DAMAGE[res.stop]
        found = genuine.next(at + 1)
        if found is None:
            loss = Loss(name, at, size - at, reason, expected, None, False)
            walk.losses.append(loss)
            # Nothing genuine after it: what the bytes are is the tail classifier's to say (torn
            # or zeros, which recovery cuts; never a durable point, with no genuine frame).
            verdict = tail.classify(res, tail.Span(src, at), header, name, name, last_seq=expected - 1)
            walk.tail = loss if verdict.cut else None
            return walk
        nxt, seq, flags = found.offset, found.seq, found.flags
        kind = flags & fmt.FLAG_KIND_MASK
        count = _records_in(found, _table_of(src, found), found.offset)
        holds = kind in fmt.RECORD_KINDS and count > 0
        first = seq + 1 - count if holds else seq + 1  # the seq the found frame's records start at
        walk.losses.append(Loss(name, at, nxt - at, reason, expected, first - 1, _durable_after(genuine, at)))
        if first >= expected:
            expected = first
        pos = nxt


def _records_in(frame: fmt.GenuineFrame, data: bytes, data_offset: int = 0) -> int:
    """How many records a genuine frame found in ``data`` (which starts at offset ``data_offset``
    of the frame's offsets) holds: 1 for a data frame, a block's count (0 if its table cannot be
    read), 0 for padding and seal frames."""
    if frame.kind == fmt.KIND_DATA:
        return 1
    if frame.kind == fmt.KIND_BLOCK:
        return fmt.block_count(data, frame.offset - data_offset + fmt.FRAME_HEADER_SIZE_BYTES, frame.stored_len)
    return 0


def _table_of(src: tail.SegmentBytes, frame: fmt.GenuineFrame) -> bytes:
    """A genuine frame's header and the start of its block table (what ``_records_in`` reads)."""
    return src.read(frame.offset, fmt.FRAME_HEADER_SIZE_BYTES + min(frame.stored_len, fmt.BLOCK_COUNT_SIZE_BYTES))


def _kind(kind: int) -> str:
    return {fmt.KIND_SEAL: "seal", fmt.KIND_PADDING: "padding"}.get(kind, "data")


def _size_if_there(fs: FileSystem, path: str) -> int:
    """The file's size, or 0 if it is gone (a drop_prefix racing the walk: see walk_journal)."""
    try:
        f = fs.open_read(path)
    except FileNotFoundError:
        return 0
    try:
        return f.size()
    finally:
        f.close()


SegmentCheck = Callable[[SegmentWalk, bool], None]


def walk_journal(path: str, progress: Progress | None = None,
                 record_size_bytes_max: int = fmt.FRAME_STORED_BYTES_LIMIT,
                 fs: FileSystem | None = None, check: SegmentCheck | None = None) -> JournalWalk:
    """Read every segment of the journal at ``path`` through ``fs``; changes nothing.

    One segment at a time: its bytes and frames are let go once it is walked (``check``, given
    each segment and whether it is the last, sees them first), so what a walk holds is one
    segment's frames and one record, plus a few runs per segment and the losses it found.

    Raises JournalNotFoundError, NotAJournalError, or JournalIOError when the file layer fails.
    """
    fs = fs or OsFileSystem()
    dicts = DictionaryCache(fs, path)  # loaded once each, when a frame first names one
    with reading(path):
        if not fs.exists(path):
            raise JournalNotFoundError(path)
        if not fs.is_dir(path):
            raise NotAJournalError(path, "it is a file, not a directory")
        names = fs.listdir(path)
        segs = sorted(
            (n for n in names if fmt.parse_segment_name(n) is not None), key=lambda n: fmt.parse_segment_name(n) or 0
        )
        temps = sorted(n for n in names if n.endswith(fmt.SEGMENT_SUFFIX + TMP_SUFFIX))
        if not segs:
            raise NotAJournalError(path, "it holds no segment")
        start_loss: Loss | None = None
        try:
            start = read_start(fs, path)
        except (CorruptionError, NewerFormatError) as exc:
            start = None  # where the journal begins is unknown: the records before it count as missing
            start_loss = Loss(fmt.START_FILE, 0, 0, f"start marker cannot be read: {exc}", None, None,
                              newer=isinstance(exc, NewerFormatError))
        first_seq = start.first_seq if start is not None else 1
        dropped = [n for n in segs if (fmt.parse_segment_name(n) or 0) < first_seq]
        segs = segs[len(dropped):]
        sizes = [_size_if_there(fs, os.path.join(path, n)) for n in segs]
    total = sum(sizes) or 1
    done = 0
    walks: list[SegmentWalk] = []
    vanished: list[str] = []  # listed, then gone: removed by a drop_prefix the walk raced

    def walk_one(name: str, last: bool) -> SegmentWalk | None:
        with reading(path):
            try:
                f = fs.open_read(os.path.join(path, name))
            except FileNotFoundError:
                # A writer may drop a prefix while the walk runs (it makes the start marker
                # durable before it unlinks a segment): one gone since the listing was dropped
                # if the marker now begins after it, and is missing (a loss) otherwise.
                if why_missing(fs, path, fmt.parse_segment_name(name) or 0) == DROPPED:
                    vanished.append(name)
                return None
            try:
                walked = walk_segment(name, tail.FileBytes(f), record_size_bytes_max, dicts)
            finally:
                f.close()
            if check is not None:
                check(walked, last)
        walked.frames = []
        walked.keys = {}
        return walked

    for i, (name, size) in enumerate(zip(segs, sizes, strict=True)):
        walked = walk_one(name, i == len(segs) - 1)
        if walked is not None:
            walks.append(walked)
        done += size
        if progress is not None:
            progress(done, total)
    # A listing taken while the writer renamed new segments in can miss one and show the next
    # (docs/GUARANTEES.md, "A listing of the directory"): where the seqs jump between two
    # segments, the segment that would begin there is asked for by its name before anything is
    # called missing. One look per gap: a found segment is walked and its own end looked past.
    listed = set(segs)
    k = 0
    while k < len(walks) - 1:
        after = walks[k].last_seq
        named = after is not None and after + 1 < 10**fmt.SEGMENT_NAME_DIGITS  # else no segment's name holds it
        name = fmt.segment_name(after + 1) if named and after is not None else ""
        if named and after is not None and name not in listed and (
                fmt.parse_segment_name(walks[k + 1].name) or 0) > after + 1:
            listed.add(name)
            if why_missing(fs, path, after + 1) == THERE:
                found = walk_one(name, False)
                if found is not None:
                    walks.insert(k + 1, found)
        k += 1
    if vanished:
        # The journal now begins where that drop put its start: the segments walked before it
        # that end before that seq were dropped too (their bytes were read, not lost).
        with reading(path):
            start = read_start(fs, path)
        first_seq = start.first_seq if start is not None else first_seq
        gone = [w for w in walks if w.last_seq is not None and w.last_seq < first_seq]
        walks = [w for w in walks if w not in gone]
        dropped = dropped + [w.name for w in gone] + vanished
    ids = [w.header.journal_id for w in walks if w.header is not None and w.header_trusted]
    # The journal's id is the one most segments carry; on a tie, the earliest segment's (sealed
    # history never changes, so a later segment with another id is the one copied in), which is
    # what the writer and the readers conclude too.
    counts = Counter(ids)
    firsts = {jid: -n for n, jid in reversed(list(enumerate(ids)))}
    journal_id = max(counts, key=lambda jid: (counts[jid], firsts[jid])) if ids else None
    between: list[Loss] = []
    for w in walks:
        if w.header is not None and w.header_trusted and journal_id is not None and w.header.journal_id != journal_id:
            between.append(Loss(w.name, 0, w.size_bytes, "segment belongs to a different journal: not copied",
                                w.header.base_seq, w.last_seq))
            w.runs, w.count, w.last_seq = [], 0, None
    if start_loss is not None:
        between.append(start_loss)
    if start is not None and not walks:
        between.append(Loss(fmt.START_FILE, 0, 0, f"the journal begins at seq {start.first_seq} ({fmt.START_FILE}), "
                            "but no segment is left", None, None))
    first = walks[0] if walks else None
    if start is not None and first is not None and first.header is not None and first.header_trusted and (
        first.header.journal_id != start.journal_id or first.header.segment_number != start.segment_number
    ):
        between.append(Loss(first.name, 0, 0, f"{fmt.START_FILE} names segment number {start.segment_number} of "
                            f"another first segment (this one is number {first.header.segment_number})", None, None))
    seq_losses, kept, duplicates = _seq_losses(walks, first_seq)
    between.extend(seq_losses)
    return JournalWalk(path, walks, between, temps, journal_id, start, dropped, kept, duplicates)


def _seq_losses(walks: list[SegmentWalk], first_seq: int = 1) -> tuple[list[Loss], list[Run], int]:
    """Second copies of a seq (dropped) and seqs no segment holds that no damage accounts for;
    the runs of records kept (``JournalWalk.kept``) and how many copies were dropped. Sets each
    segment's ``count`` and ``last_seq`` to what is kept of it.

    It works on runs and ranges of seqs, never on one seq at a time: its time and memory go with
    the runs and losses (a few per segment, and one more for each place of damage), however many
    records the journal holds and however wide a gap between two seqs is."""
    out: list[Loss] = []
    kept = _Kept()
    duplicates = 0
    # Frames in their place first: of two copies of a seq, the one out of sequence is the stray.
    for misplaced in (False, True):
        for w in walks:
            for run in w.runs:
                if run.misplaced != misplaced:
                    continue
                for lo, hi, holder in kept.add(run):
                    duplicates += hi - lo + 1
                    seqs = f"seq {lo}" if lo == hi else f"seqs {lo}-{hi}"
                    out.append(Loss(w.name, run.offset, 0, f"second copy of {seqs} (the one kept is in "
                                    f"{holder.segment} at offset {holder.offset}): dropped", lo, lo - 1))
    by_name = {w.name: w for w in walks}
    for w in walks:
        w.count, w.last_seq = 0, None
    for piece in kept.pieces:
        w = by_name[piece.segment]
        w.count += piece.records
        w.last_seq = piece.seq_last if w.last_seq is None else max(w.last_seq, piece.seq_last)
    covered = _Ranges(
        (loss.seq_first, loss.seq_last if loss.seq_last is not None else 1 << 62)
        for w in walks for loss in w.losses if loss.seq_first is not None
    )
    prev = first_seq - 1  # seqs before a dropped prefix's end were dropped, not lost
    prev_segment: str | None = None
    for piece in kept.pieces:
        if piece.seq_first > prev + 1:
            missing = covered.uncovered(prev + 1, piece.seq_first - 1)
            if missing is not None:
                reason = ("missing segment or sequence gap between segments"
                          if prev < first_seq or prev_segment != piece.segment else "sequence gap")
                out.append(Loss(piece.segment, piece.offset, 0, reason, *missing))
        prev, prev_segment = piece.seq_last, piece.segment
    return out, kept.pieces, duplicates


class _Kept:
    """The records kept, as disjoint runs in seq order: of two copies of a seq, the first added."""

    def __init__(self) -> None:
        self.pieces: list[Run] = []
        self._firsts: list[int] = []  # each piece's seq_first, for bisect

    def add(self, run: Run) -> list[tuple[int, int, Run]]:
        """Keep what ``run`` holds that no piece holds yet; the (first, last, holder) of each
        stretch of seqs a piece holds already (second copies, not kept)."""
        lo, hi = run.seq_first, run.seq_last
        i = bisect.bisect_right(self._firsts, lo) - 1
        if i < 0 or self.pieces[i].seq_last < lo:
            i += 1
        overlaps: list[tuple[int, int, Run]] = []
        fresh: list[Run] = []
        at = lo
        while i < len(self.pieces) and self.pieces[i].seq_first <= hi:
            held = self.pieces[i]
            if held.seq_first > at:
                fresh.append(run.part(at, held.seq_first - 1))
            overlaps.append((max(at, held.seq_first), min(hi, held.seq_last), held))
            at = held.seq_last + 1
            i += 1
        if at <= hi:
            fresh.append(run.part(at, hi))
        for piece in fresh:
            j = bisect.bisect_left(self._firsts, piece.seq_first)
            self.pieces.insert(j, piece)
            self._firsts.insert(j, piece.seq_first)
        return overlaps


class _Ranges:
    """Ranges of seqs (first, last), merged: which seqs of a gap no loss accounts for."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        for first, last in sorted(r for r in ranges if r[0] <= r[1]):
            if self._lasts and first <= self._lasts[-1] + 1:
                self._lasts[-1] = max(self._lasts[-1], last)
            else:
                self._firsts.append(first)
                self._lasts.append(last)

    def uncovered(self, lo: int, hi: int) -> tuple[int, int] | None:
        """The first and the last seq of ``lo``..``hi`` outside every range; None if there is none."""
        i = bisect.bisect_right(self._firsts, lo) - 1
        if i >= 0 and self._lasts[i] >= lo:
            lo = self._lasts[i] + 1  # merged ranges never touch: the seq after one is outside all
        if lo > hi:
            return None
        i = bisect.bisect_right(self._firsts, hi) - 1
        if i >= 0 and self._lasts[i] >= hi:
            hi = self._firsts[i] - 1
        return lo, hi


# --- salvage --------------------------------------------------------------------------------


@dataclass
class SalvageReport:
    source: str
    dest: str
    copied: int = 0
    placeholders: int = 0
    duplicates_dropped: int = 0
    last_seq: int = 0
    renumbered: bool = False
    losses: list[Loss] = field(default_factory=list)

    @property
    def lost_anything(self) -> bool:
        return bool(self.losses)

    def summary(self) -> str:
        lines = [
            f"salvaged {self.copied} records from {self.source} into {self.dest} (last seq {self.last_seq})",
        ]
        if self.placeholders:
            lines.append(f"{self.placeholders} lost seqs filled with {LOST_TYPE} placeholders (seqs kept)")
        if self.renumbered:
            lines.append("records were renumbered from seq 1 (--renumber)")
        if self.duplicates_dropped:
            lines.append(f"{self.duplicates_dropped} duplicate records dropped")
        if not self.losses:
            lines.append("nothing was lost")
        else:
            lines.append(f"lost ({len(self.losses)} places):")
            lines.extend(f"  {loss.describe()}" for loss in self.losses)
        lines.append("the source was not modified")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "dest": self.dest,
            "copied": self.copied,
            "placeholders": self.placeholders,
            "duplicatesDropped": self.duplicates_dropped,
            "lastSeq": self.last_seq,
            "renumbered": self.renumbered,
            "losses": [loss.to_json() for loss in self.losses],
        }


def _placeholder(seq: int, where: Loss | None, near: Record | None) -> dict[str, Any]:
    event: dict[str, Any] = {}
    # A session reader needs these to recognise the placeholder as an ignorable event.
    if near is not None and not near.is_bytes:
        ev = near.event
        if isinstance(ev, dict):
            for key in ("schemaVersion", "sessionId"):
                if key in ev:
                    event[key] = ev[key]
    event["type"] = LOST_TYPE
    event["ignorable"] = True
    event["data"] = {
        "lostSeq": seq,
        "segment": where.segment if where else None,
        "offset": where.offset if where else None,
        "reason": where.reason if where else "missing",
    }
    return event


class _LossAt:
    """The first loss of a list (in its order) whose seqs hold ``seq``, for seqs asked in
    increasing order (the placeholders of one salvage): a sweep, not a search of the list per seq."""

    def __init__(self, losses: list[Loss]) -> None:
        ranged = [(loss.seq_first, i) for i, loss in enumerate(losses) if loss.seq_first is not None]
        self._losses = losses
        self._todo = sorted(ranged)
        self._next = 0
        self._active: list[tuple[int, int]] = []  # a heap of (place in the list, last seq held)

    def at(self, seq: int) -> Loss | None:
        while self._next < len(self._todo) and self._todo[self._next][0] <= seq:
            i = self._todo[self._next][1]
            last = self._losses[i].seq_last
            heapq.heappush(self._active, (i, last if last is not None else 1 << 64))
            self._next += 1
        while self._active and self._active[0][1] < seq:
            heapq.heappop(self._active)  # ends before seq, so before every later seq too
        return self._losses[self._active[0][0]] if self._active else None


def placeholders_needed(walk: JournalWalk) -> tuple[int, tuple[int, int, Run] | None]:
    """How many lost seqs a salvage that keeps seqs fills with placeholders, and the widest gap:
    its first and last seq and the kept run right after it (None if there is no gap)."""
    total = 0
    widest: tuple[int, int, Run] | None = None
    next_seq = walk.first_seq
    for piece in walk.kept:
        if piece.seq_last < next_seq:
            continue
        if piece.seq_first > next_seq:
            total += piece.seq_first - next_seq
            if widest is None or piece.seq_first - next_seq > widest[1] - widest[0] + 1:
                widest = (next_seq, piece.seq_first - 1, piece)
        next_seq = piece.seq_last + 1
    return total, widest


def salvage(
    source: str,
    dest: str,
    renumber: bool = False,
    progress: Progress | None = None,
    write_progress: Progress | None = None,
    fs: FileSystem | None = None,
) -> SalvageReport:
    """Copy what is recoverable from ``source`` into a new journal at ``dest``. Never writes ``source``.

    Both are reached through ``fs``; a failure of the file layer reading ``source`` raises
    JournalIOError. The new journal is built in a temporary directory beside ``dest`` and renamed
    into place once it is whole and synced: a failure while writing it (a full disk) leaves
    nothing at ``dest`` and raises WriteFailedError, so running it again starts afresh.

    The source is read twice, a segment at a time: once to find what can be proven genuine
    (``walk_journal``), once to copy it, so memory holds one segment's frames and one record.
    Keeping seqs fills each lost seq with a placeholder: more than PLACEHOLDERS_MAX of them (a
    gap no journal could have filled, such as a crafted seq of 2^62) is refused before anything
    is written, with the advice to renumber.
    """
    fs = fs or OsFileSystem()
    source = os.fspath(source)
    dest = os.fspath(dest)
    if os.path.abspath(source) == os.path.abspath(dest):
        raise ValueError("salvage writes a new journal: the destination must differ from the source")
    with reading(dest):
        if fs.exists(dest) and (not fs.is_dir(dest) or fs.listdir(dest)):
            raise JournalError(f"destination {dest!r} exists and is not empty; salvage only writes a new journal")
    walk = walk_journal(source, progress=progress, fs=fs)
    newer = next((loss for loss in walk.losses() if loss.newer), None)
    if newer is not None:
        # Not damage: bytes this version cannot read. A copy without them would lose records
        # the journal still holds; the newer version reads (and salvages) them.
        raise NewerFormatError(os.path.join(source, newer.segment), newer.reason, fmt.FORMAT_VERSION)
    report = SalvageReport(source, dest, renumbered=renumber, losses=walk.losses(), duplicates_dropped=walk.duplicates)
    copies = sum(piece.records for piece in walk.kept)
    if not renumber:
        needed, widest = placeholders_needed(walk)
        if needed > PLACEHOLDERS_MAX and widest is not None:
            lo, hi, after = widest
            raise JournalError(
                f"salvage keeps the source's seqs and fills each lost seq with a {LOST_TYPE} placeholder: this "
                f"journal would need {needed} placeholders, over the {PLACEHOLDERS_MAX} salvage writes (the widest "
                f"gap is seqs {lo}-{hi}, before seq {after.seq_first} in {after.segment} at offset {after.offset}; "
                "`journal verify` lists them all). Nothing was written; run `journal salvage --renumber` "
                f"(renumber=True) to copy its {copies} records from seq 1 without placeholders"
            )
    tmp: str | None = None
    try:
        tmp = temp_dir_beside(fs, dest, "salvage", LOCK_FILE)
        _write(fs, tmp, walk, renumber, report, write_progress, 1 if renumber else walk.first_seq)
        publish_dir(fs, tmp, os.path.abspath(dest))
    except BaseException as exc:
        leftover = discard_dir(fs, tmp) if tmp is not None else None
        if isinstance(exc, (OSError, JournalError)):
            raise WriteFailedError("salvage", dest, exc, leftover) from exc
        raise
    if write_progress is not None:
        write_progress(copies or 1, copies or 1)
    return report


def _write(
    fs: FileSystem,
    path: str,
    walk: JournalWalk,
    renumber: bool,
    report: SalvageReport,
    write_progress: Progress | None,
    first_seq: int = 1,
) -> None:
    """Write the records ``walk`` kept (and placeholders) into the new journal at ``path``, which
    begins at ``first_seq`` (where the source begins, unless renumbering), reading them again
    from the source in seq order (``_Copier``)."""
    from journal.engine.core import Journal
    from journal.outcomes import Committed

    total = sum(piece.records for piece in walk.kept) or 1
    # The new journal takes any record a writer could have stored (the source's writer may
    # have raised its limit, as the API allows: the journal does not record it).
    limit = RECORD_SIZE_BYTES_MAX_LIMIT
    with Journal.open(path, create=True, fs=fs, first_seq=first_seq, record_size_bytes_max=limit) as out:
        batch: list[Any] = []
        keys: list[str | None] = []
        batch_bytes = 0
        synthetic: bool | None = None
        next_seq = first_seq

        def flush() -> None:
            nonlocal batch, keys, batch_bytes
            if batch:
                outs = out.append_many(batch, durability="flush", idempotency_keys=keys, synthetic=bool(synthetic))
                failed = [o for o in outs if not isinstance(o, Committed)]
                if failed:
                    errno = getattr(failed[0], "errno", None)
                    if errno is None:  # not the file system's refusal: no errno to blame (free space ...)
                        raise JournalError(f"a batch was not written: {failed[0].reason}")
                    raise OSError(errno, f"a batch was not written: {failed[0].reason}")
            batch, keys, batch_bytes = [], [], 0

        def add(event: Any, key: str | None, synth: bool, size: int) -> None:
            nonlocal synthetic, batch_bytes
            if (synthetic is not None and synth != synthetic) or len(batch) >= SALVAGE_BATCH_RECORDS or (
                batch and batch_bytes + size > SALVAGE_BATCH_BYTES
            ):
                flush()
            synthetic = synth
            batch.append(event)
            keys.append(key)
            batch_bytes += size

        lost = _LossAt(report.losses)
        prev: Record | None = None
        done = 0
        copier = _Copier(fs, walk.path, walk)
        try:
            for piece in walk.kept:
                for rec in copier.records(piece):
                    if not renumber:
                        if rec.seq < next_seq:  # before the journal's first seq: it cannot keep its seq
                            why = f"seq {rec.seq} is before the journal's first seq {first_seq}: not copied"
                            report.losses.append(Loss(piece.segment, piece.offset, 0, why, rec.seq, rec.seq))
                            continue
                        while next_seq < rec.seq:
                            add(_placeholder(next_seq, lost.at(next_seq), prev or rec), None, True, 0)
                            report.placeholders += 1
                            next_seq += 1
                    add(rec.stored(), rec.key, rec.synthetic, len(rec.payload))  # byte for byte: see StoredPayload
                    report.copied += 1
                    next_seq += 1
                    prev = rec
                    if write_progress is not None and done % 256 == 0:
                        write_progress(done, total)
                    done += 1
        finally:
            copier.close()
        flush()
        out.sync()
        report.last_seq = out.last_seq


class _Copier:
    """Reads the records a walk kept again from the source's segments, a piece at a time: a run's
    frames one after another from its offset, a chunk of the file at a time. Where a piece of a
    run ends, the next piece of that run goes on from there (a run is read once, however it was
    cut). It holds one chunk, or one frame when a frame is larger, and one record."""

    def __init__(self, fs: FileSystem, path: str, walk: JournalWalk) -> None:
        self._fs = fs
        self._path = path
        self._salts = {w.name: w.header.salt for w in walk.segments if w.header is not None}
        self._file: File | None = None
        self._name = ""
        self._buf = b""
        self._buf_at = 0
        self._resume: dict[tuple[str, int], int] = {}  # (segment, run offset) -> the frame to read next
        self._dicts = DictionaryCache(fs, path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def records(self, piece: Run) -> Iterator[Record]:
        """The records of ``piece``, in seq order; CorruptionError if the source changed since
        it was walked (a frame is not where the walk found it, or no longer genuine)."""
        key = (piece.segment, piece.offset)
        name = piece.segment
        seq = piece.seq_first
        size_max = fmt.FRAME_STORED_BYTES_LIMIT  # as walk_segment decoded them
        frames = [self._frame(name, self._resume.pop(key, piece.offset), seq)]  # its seq is not known yet
        while True:
            for frame in frames:
                kind = frame.flags & fmt.FLAG_KIND_MASK
                if kind not in fmt.RECORD_KINDS:
                    if kind != fmt.KIND_PADDING:  # a run never reaches past its segment's seal
                        raise _changed(name, frame.offset, seq)
                    continue
                if frame.seq < seq:
                    continue  # every record of it comes before the piece (another piece took them)
                if kind == fmt.KIND_BLOCK:
                    recs = decode_block(frame, self._buf, self._buf_at, name, size_max, self._dicts)
                else:
                    recs = [decode_payload(frame, self._buf, self._buf_at, name, size_max, self._dicts)]
                for n, rec in enumerate(recs):
                    if rec.seq < seq:
                        continue
                    if rec.seq != seq:
                        raise _changed(name, frame.offset, seq)
                    yield rec
                    seq += 1
                    if seq > piece.seq_last:
                        self._resume[key] = frame.offset if n + 1 < len(recs) else frame.end
                        return
            last = frames[-1]
            frames = self._frames(name, last.end, last.seq + 1)

    def _frames(self, name: str, pos: int, expected: int) -> list[fmt.Frame]:
        """The genuine frames in sequence from ``pos`` that the buffer holds (one scan, in C where
        it is built), or the one frame there, read whole."""
        if self._holds(pos, fmt.FRAME_HEADER_SIZE_BYTES):
            res = fmt.scan(self._buf, pos - self._buf_at, self._salts[name], expected, base_offset=self._buf_at)
            if res.frames:
                return res.frames
        return [self._frame(name, pos, expected)]

    def _frame(self, name: str, pos: int, seq: int) -> fmt.Frame:
        """The genuine frame at ``pos`` of segment ``name``, with its bytes in the buffer."""
        if self._file is None or self._name != name:
            self.close()
            self._file = self._fs.open_read(os.path.join(self._path, name))
            self._name, self._buf, self._buf_at = name, b"", 0
        header = fmt.FRAME_HEADER_SIZE_BYTES
        if not self._holds(pos, header):
            self._read(pos, COPY_CHUNK_BYTES)
        stored_len = fmt.read_frame_header(self._buf, pos - self._buf_at)[1] if self._holds(pos, header) else 0
        if stored_len > fmt.FRAME_STORED_BYTES_LIMIT:
            raise _changed(name, pos, seq)
        if not self._holds(pos, header + stored_len):
            self._read(pos, max(COPY_CHUNK_BYTES, header + stored_len))
        got = fmt.verify_frame(self._buf, pos - self._buf_at, self._salts[name])
        if got is None or not got.supported:
            raise _changed(name, pos, seq)
        count = _records_in(got, self._buf) if got.kind in fmt.RECORD_KINDS else 0
        return fmt.Frame(pos, got.seq, got.flags, got.raw_len, got.stored_len, count)

    def _holds(self, pos: int, size: int) -> bool:
        return self._buf_at <= pos and pos + size <= self._buf_at + len(self._buf)

    def _read(self, pos: int, size: int) -> None:
        self._buf = b""  # let the old chunk go before the new one is read
        self._buf = pread_upto(present(self._file, "a segment is open"), size, pos)
        self._buf_at = pos


def _changed(segment: str, offset: int, seq: int) -> CorruptionError:
    return CorruptionError(segment, offset, seq, "the frame salvage found there on its first read is not there "
                           "any more: the source changed while salvage read it (salvage a journal no writer has open)")


def quarantine_files(path: str, fs: FileSystem | None = None) -> list[str]:
    fs = fs or OsFileSystem()
    qdir = os.path.join(path, QUARANTINE_DIR)
    return sorted(fs.listdir(qdir)) if fs.is_dir(qdir) else []
