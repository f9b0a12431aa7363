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

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from journal.api import LOCK_FILE
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.options import RECORD_SIZE_BYTES_MAX_LIMIT
from journal.engine.reader import Record, decode_block, decode_payload
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
from journal.fs import FileSystem, OsFileSystem, discard_dir, publish_dir, read_file, temp_dir_beside

LOST_TYPE = "journal.lost"
SALVAGE_BATCH_RECORDS = 1024

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
    durable_after: bool = False  # a commit-marked frame or a seal follows in the same segment
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


@dataclass
class SegmentWalk:
    """What one segment holds, read with resynchronisation after damage."""

    name: str
    size_bytes: int
    header: fmt.SegmentHeader | None
    header_trusted: bool = True
    records: list[Record] = field(default_factory=list)
    seal: fmt.SealInfo | None = None
    seal_offset: int | None = None
    losses: list[Loss] = field(default_factory=list)
    # The live segment's last loss when nothing genuine follows it: a torn tail, which recovery
    # cuts (it was never acknowledged as durable unless durable_after says otherwise).
    tail: Loss | None = None
    frames: list[fmt.Frame] = field(default_factory=list)  # every genuine data or block frame, in file order
    spans: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) of each record's frame (a block's)
    misplaced: set[int] = field(default_factory=set)  # offsets of genuine frames found out of sequence

    def add(self, frame: fmt.Frame, data: bytes, record_size_bytes_max: int) -> None:
        self.frames.append(frame)
        try:
            if frame.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK:
                recs = decode_block(frame, data, 0, self.name, record_size_bytes_max)
            else:
                recs = [decode_payload(frame, data, 0, self.name, record_size_bytes_max)]
        except (CorruptionError, RecordTooLargeError) as exc:
            length = frame.end - frame.offset
            self.losses.append(Loss(self.name, frame.offset, length, str(exc), frame.first_seq, frame.seq))
            return
        self.records.extend(recs)
        self.spans.extend([(frame.offset, frame.end - frame.offset)] * len(recs))

    @property
    def last_seq(self) -> int | None:
        return self.records[-1].seq if self.records else None


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


def _durable_after(data: bytes, offset: int, salt: int) -> bool:
    """Whether a genuine commit-marked or seal frame follows ``offset`` in the same segment."""
    # Every commit-marked or seal frame carries a seq of at least 1 (seqs start there).
    return fmt.find_later_commit(data, offset, salt, 0) is not None


def walk_segment(name: str, data: bytes, record_size_bytes_max: int = fmt.FRAME_STORED_BYTES_LIMIT) -> SegmentWalk:
    """Read every genuine record of one segment's bytes, resynchronising after damage. Pure."""
    walk = SegmentWalk(name, len(data), None)
    base_from_name = fmt.parse_segment_name(name) or 1
    try:
        header = fmt.decode_segment_header(data)
    except fmt.HeaderError as exc:
        if exc.version > fmt.FORMAT_VERSION or len(data) < fmt.SEGMENT_HEADER_SIZE_BYTES:
            walk.losses.append(Loss(name, 0, len(data), f"segment header: {exc.reason}", base_from_name, None,
                                    newer=exc.version > fmt.FORMAT_VERSION))
            return walk
        # The header's checksum failed, but its salt may still be intact: frames are verified
        # with it one by one, so trying it costs nothing and a wrong salt matches no frame.
        salt_at, id_at = fmt.SEGMENT_SALT_OFFSET, fmt.SEGMENT_JOURNAL_ID_OFFSET
        salt = int.from_bytes(data[salt_at : salt_at + fmt.SEGMENT_SALT_SIZE_BYTES], "little")
        journal_id = data[id_at : id_at + fmt.SEGMENT_JOURNAL_ID_SIZE_BYTES]
        header = fmt.SegmentHeader(fmt.FORMAT_VERSION, journal_id, -1, base_from_name, salt)
        walk.header_trusted = False
        walk.losses.append(Loss(name, 0, fmt.SEGMENT_HEADER_SIZE_BYTES, f"segment header: {exc.reason}", None, None))
    walk.header = header
    if header.base_seq != base_from_name and walk.header_trusted:
        walk.losses.append(
            Loss(name, 0, 0, f"header base seq {header.base_seq} does not match the file name", None, None)
        )
    salt = header.salt
    pos = fmt.SEGMENT_HEADER_SIZE_BYTES
    expected = header.base_seq
    size = len(data)
    while True:
        res = fmt.scan(data, pos, salt, expected)
        for fr in res.frames:
            kind = fr.flags & fmt.FLAG_KIND_MASK
            if kind in fmt.RECORD_KINDS:
                walk.add(fr, data, record_size_bytes_max)
                expected = fr.seq + 1
            elif kind == fmt.KIND_SEAL:
                walk.seal_offset = fr.offset
                try:
                    walk.seal = fmt.decode_seal_payload(data[fr.payload_offset : fr.end])
                except ValueError as exc:
                    walk.losses.append(Loss(name, fr.offset, fr.end - fr.offset, f"seal footer: {exc}"))
        if res.stop == fmt.Stop.END:
            return walk
        if res.stop == fmt.Stop.SEALED:
            if res.stop_offset != size:
                walk.losses.append(Loss(name, res.stop_offset, size - res.stop_offset, "bytes after the seal footer"))
            return walk
        at = res.stop_offset
        if res.stop in (fmt.Stop.SEQ, fmt.Stop.FLAGS):
            got = present(fmt.verify_frame(data, at, salt), "a scan stopped at SEQ or FLAGS on a genuine frame")
            seq, flags, end = got.seq, got.flags, got.end
            kind = flags & fmt.FLAG_KIND_MASK
            pos = end
            count = _records_in(got, data)
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
                walk.add(fr, data, record_size_bytes_max)
                walk.misplaced.add(at)
                expected = seq + 1
            else:
                # A seal or padding frame carries the last data seq before it.
                walk.losses.append(Loss(name, at, 0, f"{_kind(kind)} frame carries seq {seq} where seq "
                                        f"{expected - 1} was expected"))
                if kind == fmt.KIND_SEAL:
                    walk.seal_offset = at
                    try:
                        walk.seal = fmt.decode_seal_payload(data[at + fmt.FRAME_HEADER_SIZE_BYTES : end])
                    except ValueError as exc:
                        walk.losses.append(Loss(name, at, end - at, f"seal footer: {exc}"))
                    if end != size:
                        walk.losses.append(Loss(name, end, size - end, "bytes after the seal footer"))
                    return walk
            follow = fmt.verify_frame(data, pos, salt)
            if follow is not None and follow.kind in fmt.RECORD_KINDS and _records_in(follow, data):
                # Re-anchor on the frame that follows, whatever it carries.
                expected = follow.seq + 1 - _records_in(follow, data)
            continue
        # TRUNCATED, ZEROS or CHECKSUM: skip to the next frame that proves itself genuine.
        reason = fmt.STOP_DAMAGE[res.stop]
        found = fmt.next_genuine_frame(data, at + 1, salt)
        if found is None:
            loss = Loss(name, at, size - at, reason, expected, None, False)
            walk.losses.append(loss)
            # Nothing genuine after it: what the bytes are is the tail classifier's to say (torn
            # or zeros, which recovery cuts; never a durable point, with no genuine frame).
            verdict = tail.classify(res, data[at:], header, name, name, last_seq=expected - 1)
            walk.tail = loss if verdict.cut else None
            return walk
        nxt, seq, flags = found.offset, found.seq, found.flags
        kind = flags & fmt.FLAG_KIND_MASK
        count = _records_in(found, data)
        holds = kind in fmt.RECORD_KINDS and count > 0
        first = seq + 1 - count if holds else seq + 1  # the seq the found frame's records start at
        walk.losses.append(Loss(name, at, nxt - at, reason, expected, first - 1, _durable_after(data, at, salt)))
        if first >= expected:
            expected = first
        pos = nxt


def _records_in(frame: fmt.GenuineFrame, data: bytes) -> int:
    """How many records a genuine frame found in ``data`` holds: 1 for a data frame, a block's
    count (0 if its table cannot be read), 0 for padding and seal frames."""
    if frame.kind == fmt.KIND_DATA:
        return 1
    if frame.kind == fmt.KIND_BLOCK:
        return fmt.block_count(data, frame.offset + fmt.FRAME_HEADER_SIZE_BYTES, frame.stored_len)
    return 0


def _kind(kind: int) -> str:
    return {fmt.KIND_SEAL: "seal", fmt.KIND_PADDING: "padding"}.get(kind, "data")


def _size(fs: FileSystem, path: str) -> int:
    f = fs.open_read(path)
    try:
        return f.size()
    finally:
        f.close()


def walk_journal(path: str, progress: Progress | None = None,
                 record_size_bytes_max: int = fmt.FRAME_STORED_BYTES_LIMIT,
                 fs: FileSystem | None = None) -> JournalWalk:
    """Read every segment of the journal at ``path`` through ``fs``; changes nothing.

    Raises JournalNotFoundError, NotAJournalError, or JournalIOError when the file layer fails.
    """
    fs = fs or OsFileSystem()
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
        sizes = [_size(fs, os.path.join(path, n)) for n in segs]
    total = sum(sizes) or 1
    done = 0
    walks: list[SegmentWalk] = []
    for name, size in zip(segs, sizes, strict=True):
        with reading(path):
            data = read_file(fs, os.path.join(path, name))
        walks.append(walk_segment(name, data, record_size_bytes_max))
        done += size
        if progress is not None:
            progress(done, total)
    ids = [w.header.journal_id for w in walks if w.header is not None and w.header_trusted]
    # The journal's id is the one most segments carry; on a tie, the earliest segment's (sealed
    # history never changes, so a later segment with another id is the one copied in), which is
    # what the writer and the readers conclude too.
    journal_id = max(ids, key=lambda i: (ids.count(i), -ids.index(i))) if ids else None
    between: list[Loss] = []
    for w in walks:
        if w.header is not None and w.header_trusted and journal_id is not None and w.header.journal_id != journal_id:
            between.append(Loss(w.name, 0, w.size_bytes, "segment belongs to a different journal: not copied",
                                w.header.base_seq, w.last_seq))
            w.records, w.spans = [], []
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
    between.extend(_seq_losses(walks, first_seq))
    return JournalWalk(path, walks, between, temps, journal_id, start, dropped)


def _seq_losses(walks: list[SegmentWalk], first_seq: int = 1) -> list[Loss]:
    """Second copies of a seq (dropped) and seqs no segment holds that no damage accounts for."""
    out: list[Loss] = []
    first_at: dict[int, tuple[str, int]] = {}
    offsets: dict[int, int] = {}
    # Frames in their place first: of two copies of a seq, the one out of sequence is the stray.
    chosen: dict[int, tuple[int, int]] = {}  # seq -> (walk index, record index)
    for in_place in (True, False):
        for wi, w in enumerate(walks):
            for ri, (rec, (offset, length)) in enumerate(zip(w.records, w.spans, strict=True)):
                if (offset not in w.misplaced) != in_place:
                    continue
                if rec.seq in first_at:
                    seg0, off0 = first_at[rec.seq]
                    out.append(Loss(w.name, offset, length, f"second copy of seq {rec.seq} (the one kept is in "
                                    f"{seg0} at offset {off0}): dropped", rec.seq, rec.seq - 1))
                    continue
                first_at[rec.seq] = (w.name, offset)
                offsets[rec.seq] = offset
                chosen[rec.seq] = (wi, ri)
    for wi, w in enumerate(walks):
        keep = sorted(ri for (i, ri) in chosen.values() if i == wi)
        w.records = [w.records[ri] for ri in keep]
        w.spans = [w.spans[ri] for ri in keep]
    covered: list[tuple[int, int]] = []
    for w in walks:
        for loss in w.losses:
            if loss.seq_first is not None:
                covered.append((loss.seq_first, loss.seq_last if loss.seq_last is not None else 1 << 62))
    held = sorted(first_at)
    if not held:
        return out
    prev = first_seq - 1  # seqs before a dropped prefix's end were dropped, not lost
    where = {seq: seg for seq, (seg, _) in first_at.items()}
    for seq in held:
        if seq > prev + 1:
            lo, hi = prev + 1, seq - 1
            missing = [n for n in range(lo, hi + 1) if not any(a <= n <= b for a, b in covered)]
            if missing:
                seg = where[seq]
                reason = ("missing segment or sequence gap between segments" if prev < first_seq or where[prev] != seg
                          else "sequence gap")
                out.append(Loss(seg, offsets[seq], 0, reason, missing[0], missing[-1]))
        prev = seq
    return out


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


def _placeholder(seq: int, losses: list[Loss], near: Record | None) -> dict[str, Any]:
    where = next((loss for loss in losses if loss.seq_first is not None and loss.seq_first <= seq
                  and (loss.seq_last is None or seq <= loss.seq_last)), None)
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
    report = SalvageReport(source, dest, renumbered=renumber, losses=walk.losses())
    by_seq: dict[int, Record] = {}
    for seg in walk.segments:
        for rec in seg.records:
            if rec.seq in by_seq:
                report.duplicates_dropped += 1
                continue
            by_seq[rec.seq] = rec
    seqs = sorted(by_seq)
    tmp: str | None = None
    try:
        tmp = temp_dir_beside(fs, dest, "salvage", LOCK_FILE)
        _write(fs, tmp, seqs, by_seq, renumber, report, write_progress, 1 if renumber else walk.first_seq)
        publish_dir(fs, tmp, os.path.abspath(dest))
    except BaseException as exc:
        leftover = discard_dir(fs, tmp) if tmp is not None else None
        if isinstance(exc, (OSError, JournalError)):
            raise WriteFailedError("salvage", dest, exc, leftover) from exc
        raise
    if write_progress is not None:
        write_progress(len(seqs) or 1, len(seqs) or 1)
    return report


def _write(
    fs: FileSystem,
    path: str,
    seqs: list[int],
    by_seq: dict[int, Record],
    renumber: bool,
    report: SalvageReport,
    write_progress: Progress | None,
    first_seq: int = 1,
) -> None:
    """Write the salvaged records (and placeholders) into the new journal at ``path``, which
    begins at ``first_seq`` (where the source begins, unless renumbering)."""
    from journal.engine.core import Journal
    from journal.outcomes import Committed

    total = len(seqs) or 1
    # The new journal takes any record a writer could have stored (the source's writer may
    # have raised its limit, as the API allows: the journal does not record it).
    limit = RECORD_SIZE_BYTES_MAX_LIMIT
    with Journal.open(path, create=True, fs=fs, first_seq=first_seq, record_size_bytes_max=limit) as out:
        batch: list[Any] = []
        keys: list[str | None] = []
        synthetic: bool | None = None
        next_seq = first_seq

        def flush() -> None:
            nonlocal batch, keys
            if batch:
                outs = out.append_many(batch, durability="flush", idempotency_keys=keys, synthetic=bool(synthetic))
                failed = [o for o in outs if not isinstance(o, Committed)]
                if failed:
                    errno = getattr(failed[0], "errno", None)
                    if errno is None:  # not the file system's refusal: no errno to blame (free space ...)
                        raise JournalError(f"a batch was not written: {failed[0].reason}")
                    raise OSError(errno, f"a batch was not written: {failed[0].reason}")
            batch, keys = [], []

        def add(event: Any, key: str | None, synth: bool) -> None:
            nonlocal synthetic
            if (synthetic is not None and synth != synthetic) or len(batch) >= SALVAGE_BATCH_RECORDS:
                flush()
            synthetic = synth
            batch.append(event)
            keys.append(key)

        prev: Record | None = None
        for i, seq in enumerate(seqs):
            rec = by_seq[seq]
            if not renumber:
                while next_seq < seq:
                    add(_placeholder(next_seq, report.losses, prev or rec), None, True)
                    report.placeholders += 1
                    next_seq += 1
            add(rec.payload if rec.is_bytes else rec.event, rec.key, rec.synthetic)
            report.copied += 1
            next_seq += 1
            prev = rec
            if write_progress is not None and i % 256 == 0:
                write_progress(i, total)
        flush()
        out.sync()
        report.last_seq = out.last_seq


def quarantine_files(path: str, fs: FileSystem | None = None) -> list[str]:
    fs = fs or OsFileSystem()
    qdir = os.path.join(path, QUARANTINE_DIR)
    return sorted(fs.listdir(qdir)) if fs.is_dir(qdir) else []
