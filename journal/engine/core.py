"""The Journal: open and recover, append with group commit and three outcomes, read, follow.

Life of an append (the writer and recovery are mirror images; see docs/GUARANTEES.md):

1. The caller's thread encodes the event (JSON, key; zstd too, unless the record may share a
   block with others written in the same batch: then the leader compresses it with them)
   outside any lock.
2. Under the journal mutex it gets the next seq and joins the queue. A buffered append returns
   Committed(buffered) here: its bytes sit in memory until a later write carries them.
3. If no thread is writing, this one becomes the leader: it takes a bounded batch from the
   front of the queue, frames it with the live segment's salt (one buffer), writes it (one
   pwrite; a batch of several frames writes its first header last, so a reader never sees a
   part of it), and, if any member asked for "sync", fdatasyncs once, marking the last frame
   with the commit flag. Followers park on their own lock; the leader wakes each with its
   outcome, and wakes one of those still queued as the next leader. No timer delays a batch:
   whatever queued while the previous leader was in the kernel forms the next batch. A lone
   append skips the queue (_append_alone) and consecutive buffered appends share one queued
   request (_append_buffered).
4. A failed write is truncated back to the last good length and that truncation is synced;
   only then do the batch's members get NotCommitted. A failed fdatasync (or a failed rollback)
   fail-stops the journal: members get AckLost, later appends raise JournalFailStoppedError.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import xxhash

from journal.api import LOCK_FILE as LOCK_FILE  # explicit re-export: verify imports it from here
from journal.api import PrefixCopy, PrefixDrop
from journal.engine import copy as prefix_copy
from journal.engine import format as fmt
from journal.engine import live_hint, shared, tail
from journal.engine.dictionary import (
    Dictionary,
    DictionaryCache,
    DictionaryUse,
    checked_tables,
    for_segment,
    install_dictionary,
    parse_dictionary_file_name,
)
from journal.engine.encoding import (
    Encoded,
    check_durability,
    encode_event,
    pack,
    repeated_keys,
    same_event,
    with_repeats,
)
from journal.engine.options import Options
from journal.engine.reader import (
    DROPPED,
    LOOKS_MAX,
    MISSING,
    Cursor,
    Record,
    SegmentCache,
    read_point,
    segment_named,
    why_missing,
)
from journal.engine.recovery import QUARANTINE_DIR, RecoveryReport, TailDecision, decide, quarantine_span
from journal.engine.segment import (
    SegmentName,
    check_start_header,
    drop_victims,
    list_segments,
    list_temp_files,
    read_header,
    read_seal,
    read_start,
    split_front,
)
from journal.engine.writer import BATCH_BYTES_MAX, KeyDigestUnknown, Request, Writer, chunks
from journal.errors import (
    CorruptionError,
    ForeignSegmentError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvariantError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NotAJournalError,
    PrefixDroppedError,
    ReadOnlyError,
    present,
)
from journal.fs import File, FileSystem, Lock, OsFileSystem, take_lock, write_atomic
from journal.outcomes import AckLost, Committed, Durability, NotCommitted, Outcome

FOLLOW_POLL_INTERVAL_S = 0.02
LIVE_READS_MAX = 3  # reads of a live segment by a read-only open before damage in it is believed


def _only_header(src: tail.SegmentBytes) -> bool:
    """Whether a segment file holds a header (and its sector padding) and nothing else."""
    try:
        header = fmt.decode_segment_header(src.read(0, fmt.SEGMENT_HEADER_SIZE_BYTES))
    except fmt.HeaderError:
        return src.size == 0
    res = tail.scan_segment(src, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    return res.stop == fmt.Stop.END and all(f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_PADDING for f in res.frames)


def _data_start(sector_bytes: int) -> int:
    """Where a new segment's first record goes: after its header (and, with sector_bytes, the
    padding that ends its first sector)."""
    return fmt.SEGMENT_HEADER_SIZE_BYTES + len(fmt.padding_frame(fmt.SEGMENT_HEADER_SIZE_BYTES, sector_bytes, 0, 0))



def _keys_in(win: tail.Window, out: list[tuple[str, int]]) -> None:
    """(idempotency key, seq) of each keyed record in a window of a scan, appended to ``out``."""
    for fr in win.res.frames:
        if fr.flags & fmt.FLAG_KEYED and fr.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA and fr.stored_len:
            at, end = fr.payload_offset - win.offset, fr.end - win.offset  # a keyed record is never in a block
            key_len = win.buf[at]
            if key_len == 0 or at + 1 + key_len > end:
                # No key the writer writes (1 to 255 bytes, inside the payload): the frame names
                # none, so no append is taken for its duplicate; reading it reports the frame.
                continue
            out.append((bytes(win.buf[at + 1 : at + 1 + key_len]).decode("utf-8", "surrogateescape"), fr.seq))


def _base_seq(seg: SegmentName) -> int:
    return seg.base_seq


class Journal(Writer):
    """A segmented, checksummed, append-only journal in one directory. See journal.open()."""

    def __init__(self, path: str, fs: FileSystem, options: Options, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.shared = False  # set by open(): shared-writer mode
        self.shared_lock_timeout_s = shared.SHARED_LOCK_TIMEOUT_S_DEFAULT
        self.options = options
        self._stored_max = min(  # the largest stored payload a frame of this journal may hold
            fmt.FRAME_STORED_BYTES_LIMIT, options.record_size_bytes_max + fmt.RECORD_STORED_OVERHEAD_BYTES_MAX
        )
        self.recovery = RecoveryReport()
        self._fs = fs
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._cv_waiting = 0
        self._queue: deque[Request] = deque()
        self._leader = False
        self._failed: str | None = None
        self._closed = False
        self._lock: Lock | None = None
        self._journal_id = b""
        self._segment_number = 0
        self._start: fmt.StartMarker | None = None  # the start marker, once a prefix was dropped
        self._drop_mu = threading.Lock()
        self._first_seq = 1  # the journal's first seq (docs/FORMAT.md, "Start marker")
        self._active: File | None = None
        self._active_header: fmt.SegmentHeader | None = None
        self._active_size = 0
        self._reserved_end = 0
        self._reserve_refused = False
        self._active_count = 0
        self._index: list[tuple[int, int]] = []
        self._next_index_at = 0
        self._last_seq = 0  # highest seq written to the OS (or, read-only, found at open)
        self._next_seq = 1  # next seq to hand out (counts buffered and queued records)
        self._buffered_bytes = 0
        self._unsynced = False  # bytes written since the last fdatasync
        self._get_mu = threading.Lock()
        self._segments = SegmentCache(fs, path)  # open segments kept for get()
        self._dicts = DictionaryCache(fs, path)  # the dictionaries frames name, loaded once each
        self._keys: dict[str, int] = {}  # idempotency key -> seq, of records written (or buffered)
        self._pending_keys: dict[str, tuple[Request, int]] = {}  # keys of records on their way
        self._key_digests: dict[str, tuple[int, int]] = {}  # key -> (seq, digest), of keys appended here
        # The most one request (an append_many chunk, or buffered appends merged) carries: a batch,
        # and never more than a new segment holds, so no segment grows past its size limit.
        self._segment_room_bytes = options.segment_size_bytes - _data_start(options.sector_bytes)
        self._request_bytes_max = min(BATCH_BYTES_MAX, self._segment_room_bytes)
        # (the live segment's file, an offset every byte before which this handle knows durable):
        # what its open's recovery fdatasync'd. LIVE.hint names a frame no later than this, or
        # than _synced_at.
        self._open_durable: tuple[File, int] | None = None
        # The last seq when this writer last found its dictionary's file in the directory (at
        # open, at a roll-over): a close with records written since checks it again, one
        # without does not (a store's build is closed after its directory was renamed).
        self._dict_checked_seq = 0
        self._dict_file_mu = threading.Lock()  # one check (and rewrite) of the file at a time
        # (that file, the offset and seq of its last record frame) as the open found them: a close
        # with nothing written since finds LIVE.hint naming them, and leaves it as it is.
        self._open_last: tuple[File, int, int] | None = None
        # How a read-only open used LIVE.hint ("used", or why it scanned the whole live segment).
        self.live_hint_note = ""

    # --- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        create: bool = False,
        readonly: bool = False,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
        segment_size_bytes: int = fmt.SEGMENT_SIZE_BYTES_DEFAULT,
        record_size_bytes_max: int = fmt.RECORD_SIZE_BYTES_MAX_DEFAULT,
        index_interval_bytes: int = fmt.INDEX_INTERVAL_BYTES_DEFAULT,
        compress: bool = True,
        sector_bytes: int = 0,
        reserve_bytes: int = fmt.RESERVE_BYTES_DEFAULT,
        block_bytes: int = fmt.BLOCK_BYTES_DEFAULT,
        writer: str = "exclusive",
        shared_lock_timeout_s: float = shared.SHARED_LOCK_TIMEOUT_S_DEFAULT,
        first_seq: int = 1,
        dictionary: Dictionary | None = None,
    ) -> Journal:
        """Open (and, for writing, lock and recover) the journal in directory ``path``.

        ``first_seq``: the seq of the first record of a journal this call creates (salvage of a
        journal whose prefix was dropped keeps its seqs); ignored when the journal exists.

        ``block_bytes``: records appended together (append_many, a run of buffered appends, sync
        appends that meet in one group commit) may share block frames of up to this many bytes
        of payload, compressed together (0: a frame per record); docs/FORMAT.md, "Block frames".

        ``writer="shared"`` lets several processes append to the journal: the lock is taken
        per batch, not for the life of the handle (journal/engine/shared.py). A shared batch
        waits up to ``shared_lock_timeout_s`` for the lock, then its records are NotCommitted.

        ``dictionary``: a trained zstd dictionary (journal.engine.dictionary.Dictionary) a
        writable handle installs in the journal directory at open and compresses data frames and
        blocks with, from the first append that meets a live segment of format version 4 on
        (docs/FORMAT.md, "Dictionaries"). Reading needs only the files of the directory: a
        read-only handle ignores it. Not with ``writer="shared"``.
        """
        if create and readonly:
            raise ValueError("create=True needs a writable journal; drop readonly=True")
        if writer not in shared.WRITER_MODES:
            raise ValueError(f"writer must be one of {shared.WRITER_MODES}, not {writer!r}")
        if isinstance(first_seq, bool) or not isinstance(first_seq, int) or not 1 <= first_seq < 10**19:
            raise InvalidArgumentError(f"first_seq must be an int from 1 to 10**19 - 1, not {first_seq!r}")
        if dictionary is not None and not isinstance(dictionary, Dictionary):
            raise InvalidArgumentError(f"dictionary must be a Dictionary or None, not {type(dictionary).__name__}")
        if dictionary is not None and writer == "shared" and not readonly:
            # Another process's batches would be read back (their keys) without it in view.
            raise InvalidArgumentError("a dictionary is not supported with writer='shared'; open without one")
        if dictionary is not None and not readonly:
            checked_tables(dictionary)  # one zstd cannot load is refused before anything is written
        if not 0 <= shared_lock_timeout_s <= shared.SHARED_LOCK_TIMEOUT_S_MAX:
            raise ValueError(f"shared_lock_timeout_s must be between 0 and {shared.SHARED_LOCK_TIMEOUT_S_MAX}")
        options = Options(
            segment_size_bytes, record_size_bytes_max, index_interval_bytes, compress, sector_bytes, reserve_bytes,
            block_bytes,
        )
        options.check()
        j = cls(os.fspath(path), fs or OsFileSystem(), options, readonly)
        j.shared = writer == "shared" and not readonly
        j.shared_lock_timeout_s = shared_lock_timeout_s
        j._first_seq = first_seq  # until open finds the journal's own
        try:
            if readonly:
                j._open_readonly()
            else:
                j._open_writer(create, lock_timeout_s)
                if dictionary is not None:
                    # Durable (directory fsync'd) before any frame naming its id is written.
                    dict_id = install_dictionary(j._fs, j.path, dictionary)
                    j.options = dataclasses.replace(j.options, dictionary=DictionaryUse(dict_id, dictionary))
                    j._dict_checked_seq = j._last_seq
                if j.shared:
                    # Recovered and synced with the lock held; from now on it is taken per batch.
                    lock = present(j._lock, "a writer's open holds the lock")
                    lock.write_note(shared.note(shared.NOTE_CLEAN))
                    lock.release()
                    j._lock = None
        except OSError as exc:
            j._release()
            if isinstance(exc, JournalError):
                raise
            raise JournalIOError(j.path, exc) from exc
        except BaseException:
            j._release()
            raise
        return j

    def _check_dir(self, create: bool) -> list[Any]:
        fs, path = self._fs, self.path
        if fs.exists(path) and not fs.is_dir(path):
            raise NotAJournalError(path, "it is a file, not a directory")
        if not fs.exists(path):
            if not create:
                raise JournalNotFoundError(path)
            # Like mkdir -p, each new directory made durable in its parent.
            missing = []
            d = os.path.abspath(path)
            while not fs.exists(d):
                missing.append(d)
                d = os.path.dirname(d)
            if not fs.is_dir(d):
                raise NotAJournalError(path, f"{d} is a file, not a directory")
            for d in reversed(missing):
                try:
                    fs.mkdir(d)
                except FileExistsError:
                    if not fs.is_dir(d):
                        raise
                    # Another process made it at the same moment (shared writers starting
                    # together); it is synced below all the same.
                fs.fsync_dir(os.path.dirname(d))
        # One listing for both questions: a writer creating the journal at this moment (shared
        # writers starting together) renames its first segment into place between two listings.
        names = fs.listdir(path)
        segments = list_segments(fs, path, names)
        if not segments:
            # A start marker alone: a journal created to begin at a later seq, cut short by a crash.
            known = (LOCK_FILE, QUARANTINE_DIR, fmt.START_FILE, live_hint.HINT_FILE)
            foreign = [
                n for n in names if n not in known and not n.endswith(".tmp") and parse_dictionary_file_name(n) is None
            ]
            if foreign:
                raise NotAJournalError(path, f"it holds other files ({', '.join(foreign[:3])}) and no segment")
            if not create:
                raise NotAJournalError(path, "it holds no segment")
        return segments

    def _open_readonly(self) -> None:
        """What a writer's open would find, without changing a byte: the same history checks
        and the same tail classifier, whose refusals are raised here too; a tail the writer
        would cut (torn, zeros) is reported, and readers read it as "not yet written".

        It takes no lock, so the writer goes on meanwhile: a segment it listed may be dropped
        before it is read, and a listing may miss a segment just made (reader.why_missing). The
        segments are looked at again (up to LOOKS_MAX looks in all) whenever one it listed is gone
        or its checks of them fail; only what a fresh look finds too is reported."""
        for look in range(LOOKS_MAX):
            try:
                segments, journal_id = self._readonly_look()
                break
            except (FileNotFoundError, CorruptionError):
                if look == LOOKS_MAX - 1:
                    raise
        last = segments[-1]
        hint = self._load_hint()
        for attempt in range(LIVE_READS_MAX):
            f = self._fs.open_read(os.path.join(self.path, last.name))
            try:
                header = read_header(f, last.name)
                decision, used = self._live_decision(tail.FileBytes(f), header, last.name, f.path, journal_id, hint)
            finally:
                f.close()
            # Damage before a durable point may be a long read racing a live writer (its pages
            # are copied one by one while frames land): believe it only if a fresh read agrees.
            if decision.tail != tail.CORRUPT or attempt == LIVE_READS_MAX - 1:
                break
        decision.raise_if_refused()
        data_frames = fmt.record_frames(decision.frames)
        self._journal_id = header.journal_id
        self._active_header = header  # read-only: the live segment, for get()'s index hints
        # The index points _note_frame would take, found by bisection: a long live segment has
        # thousands of frames and a few index points, and a call per frame was a share of the open.
        # With a hint, its points cover the prefix it let the scan skip (taken by the same rule).
        offsets = [fr.offset for fr in data_frames]
        at, i, interval = fmt.SEGMENT_HEADER_SIZE_BYTES, 0, self.options.index_interval_bytes
        if used is not None and used.points:
            self._index.extend(used.points)
            at = used.points[-1][1] + interval
        while (i := bisect.bisect_left(offsets, at, i)) < len(offsets):
            self._index.append((data_frames[i].first_seq, offsets[i]))
            at = offsets[i] + interval
        self._next_index_at = at
        if data_frames:
            self._last_seq = data_frames[-1].seq
        else:
            self._last_seq = used.frame_seq if used is not None else header.base_seq - 1
        self._next_seq = self._last_seq + 1
        self.recovery = RecoveryReport(
            segments=len(segments),
            last_seq=self._last_seq,
            live_segment=last.name,
            live_records=self._last_seq - (header.base_seq - 1),  # the scan took seqs without a gap
            tail=decision.tail,
        )

    def _load_hint(self) -> live_hint.LiveHint | None:
        """The directory's LIVE.hint, or None (the reason kept in ``live_hint_note``): a hint
        that is missing, a link, too large or damaged only means the full scan."""
        try:
            return live_hint.read_hint(self._fs, self.path)
        except FileNotFoundError:
            self.live_hint_note = "no hint"
        except (OSError, live_hint.HintError) as exc:  # UnexpectedLinkError is an OSError
            self.live_hint_note = f"hint not read: {exc}"
        return None

    def _live_decision(
        self,
        src: tail.FileBytes,
        header: fmt.SegmentHeader,
        name: str,
        path: str,
        journal_id: bytes | None,
        hint: live_hint.LiveHint | None,
    ) -> tuple[TailDecision, live_hint.LiveHint | None]:
        """The read-only open's decision on the live segment, and the hint it used (or None).
        With a hint that holds (live_hint.mismatch), the scan starts after the frame it names,
        with the seq after that frame's, and the tail is classified knowing that seq: what is
        read is what was written since the writer's close. Otherwise the full scan."""
        if hint is not None:
            why = live_hint.mismatch(hint, header, name, src, self.options.index_interval_bytes)
            if why is None:
                start = hint.frame_offset + fmt.FRAME_HEADER_SIZE_BYTES
                start += fmt.read_frame_header(src.read(hint.frame_offset, fmt.FRAME_HEADER_SIZE_BYTES), 0)[1]
                res = tail.scan_segment(src, start, header.salt, hint.frame_seq + 1)
                records = fmt.record_frames(res.frames)
                last_seq = records[-1].seq if records else hint.frame_seq
                verdict = tail.classify(
                    res, tail.Span(src, res.stop_offset), header, name, path, journal_id, last_seq=last_seq
                )
                self.live_hint_note = "used"
                decision = TailDecision(
                    res.frames,
                    res.stop_offset,
                    verdict.kind == tail.SEALED,
                    verdict.cut,
                    verdict.kind,
                    verdict.error,
                    max(src.size, res.stop_offset),
                )
                return decision, hint
            self.live_hint_note = f"hint not used: {why}"
        return decide(src, header, name, path, journal_id, refuse=False), None

    def _readonly_look(self) -> tuple[list[SegmentName], bytes | None]:
        """One look at the segments for a read-only open: (segments, the journal's id), their
        history checked as a writer's open checks it."""
        segments, _dropped = self._front(self._check_dir(create=False))
        live = self._header_of(segments[-1])
        journal_id, prev_seal, segments = self._previous_segment(segments, live)
        self._check_history(segments, prev_seal, live)
        return segments, journal_id

    def _header_of(self, seg: SegmentName) -> fmt.SegmentHeader:
        f = self._fs.open_read(os.path.join(self.path, seg.name))
        try:
            return read_header(f, seg.name)
        finally:
            f.close()

    def _open_writer(self, create: bool, lock_timeout_s: float) -> None:
        fs = self._fs
        segments = self._check_dir(create)
        lock_path = os.path.join(self.path, LOCK_FILE)
        if self.shared:  # other processes hold the lock for a batch at a time: wait them out
            self._lock = shared.take_lock(fs, self.path, max(lock_timeout_s, self.shared_lock_timeout_s))
        else:
            self._lock = take_lock(fs, lock_path, lock_timeout_s)
        if self._lock is None:
            raise JournalLockedError(self.path, fs.read_lock_owner(lock_path))
        report = RecoveryReport()
        self.recovery = report
        for tmp in list_temp_files(fs, self.path):
            # A segment that never got its name holds a header and no record.
            tmp_path = os.path.join(self.path, tmp)
            f = fs.open_read(tmp_path)
            try:
                src = tail.FileBytes(f)
                size = src.size
                if not _only_header(src):
                    report.quarantined.append(quarantine_span(fs, self.path, tmp, src, 0, size))
            finally:
                f.close()
            fs.unlink(tmp_path)
            fs.fsync_dir(self.path)
            report.actions.append(f"removed unfinished segment {tmp} ({size} bytes)")
        start_tmp = os.path.join(self.path, fmt.START_FILE + ".tmp")
        if fs.exists(start_tmp):  # a drop_prefix cut short before its marker's rename: not in effect
            fs.unlink(start_tmp)
            fs.fsync_dir(self.path)
            report.actions.append(f"removed unfinished {fmt.START_FILE}.tmp")
        segments = list_segments(fs, self.path)
        if not segments:
            self._create(report)
            return
        segments, dropped = self._front(segments)
        for seg in dropped:
            # A drop_prefix whose marker is durable but that a crash stopped before it unlinked
            # these: they were dropped by the caller's request, and finishing it is all that is left.
            fs.unlink(os.path.join(self.path, seg.name))
            report.actions.append(f"removed segment {seg.name}, dropped before seq {self._first_seq} by drop_prefix")
        if dropped:
            fs.fsync_dir(self.path)
        self._adopt_live(segments, report)

    def _create(self, report: RecoveryReport) -> None:
        """Make a new journal: its first segment, number 0, begins at ``first_seq`` (1 unless a
        caller asked otherwise); a later first seq is named by a start marker, durable first."""
        self._journal_id = secrets.token_bytes(16)
        first = self._first_seq
        start_path = os.path.join(self.path, fmt.START_FILE)
        if first != 1:
            self._start = fmt.StartMarker(self._journal_id, 0, first)
            write_atomic(self._fs, start_path, fmt.encode_start(self._start))
        elif self._fs.exists(start_path):
            # Left by a creation at a later first seq that a crash cut short before its first
            # segment: it names no segment of this journal, and must not outlive its creation.
            self._fs.unlink(start_path)
            self._fs.fsync_dir(self.path)
            report.actions.append(f"removed the {fmt.START_FILE} marker of an unfinished creation")
        self._segment_number = -1  # the first segment is number 0
        self._start_segment(first)
        self._last_seq = first - 1
        self._next_seq = first
        report.actions.append("created journal")
        report.segments = 1
        report.live_segment = fmt.segment_name(first)
        report.tail = "empty"
        report.last_seq = first - 1

    def _front(self, segments: list[SegmentName]) -> tuple[list[SegmentName], list[SegmentName]]:
        """(the journal's segments, segments a cut-short drop_prefix left): reads the start
        marker, and refuses a journal whose first segment is missing (docs/FORMAT.md)."""
        start = read_start(self._fs, self.path)
        if start is not None and all(s.base_seq != start.first_seq for s in segments):
            # The marker was read after the listing: the segment it names may be one the writer
            # made while the listing was taken (a prune seals, appends, then drops up to it).
            cause = why_missing(self._fs, self.path, start.first_seq)
            if cause != MISSING:  # there (the listing missed it), or dropped since: a fresh look
                segments = sorted([*segments, segment_named(start.first_seq)], key=_base_seq)
        kept, dropped = split_front(segments, start)
        # With a marker, the first segment must be the one it names, and a segment before it (a
        # drop's leftover, which the writer removes) must be this journal's: both are checked
        # here, before anything is removed. Without one, its name (seq 1) is enough: an open
        # reads no segment but the first one's header and the last two, however long the history.
        if start is not None:
            for seg in [kept[0], *dropped]:
                try:
                    f = self._fs.open_read(os.path.join(self.path, seg.name))
                except FileNotFoundError:
                    if seg is kept[0]:
                        raise  # dropped by a later drop_prefix meanwhile: a reader looks again
                    continue  # a drop's leftover, removed meanwhile: nothing left to check
                try:
                    header = read_header(f, seg.name)
                finally:
                    f.close()
                if seg is kept[0]:
                    check_start_header(start, header, seg.name)
                elif header.journal_id != start.journal_id:
                    raise ForeignSegmentError(seg.name, os.path.join(self.path, seg.name))
        self._start = start
        self._first_seq = kept[0].base_seq
        return kept, dropped

    def _adopt_live(self, segments: list[SegmentName], report: RecoveryReport) -> None:
        """Recover the last segment and make it this writer's live segment (open, and a shared
        writer whose live segment another process sealed). Refuses before it cuts anything."""
        fs = self._fs
        last = segments[-1]
        f = fs.open_write(os.path.join(self.path, last.name), create=False)
        self._active = f
        header = read_header(f, last.name)
        self._active_header = header
        self._journal_id = header.journal_id
        self._segment_number = header.segment_number
        journal_id, prev_seal, segments = self._previous_segment(segments, header)
        src = tail.FileBytes(f)
        live_keys: list[tuple[str, int]] = []
        # Refuses before any cut; reads a window at a time, taking each keyed record's key while
        # its bytes are at hand.
        decision = decide(src, header, last.name, f.path, journal_id, visit=lambda win: _keys_in(win, live_keys))
        self._check_history(segments, prev_seal, header)
        if prev_seal is not None:
            # Retries after a reopen dedupe against the sealed segment too, without reading it.
            for seq, key in prev_seal.keys:
                self._keys[key.decode("utf-8", "surrogateescape")] = seq
        data_frames = fmt.record_frames(decision.frames)
        live_records = sum(fr.records for fr in data_frames)
        self._last_seq = data_frames[-1].seq if data_frames else header.base_seq - 1
        self._next_seq = self._last_seq + 1
        report.segments = len(segments)
        report.live_segment = last.name
        report.live_records = live_records
        report.tail = decision.tail
        if decision.cut:
            cut_bytes = decision.size - decision.valid_end
            if decision.tail != "zeros":
                # Kept whole, reserved zeros after a torn frame included: where the torn frame
                # ends cannot be told from its bytes, and zeros inside it are its bytes too.
                report.quarantined.append(
                    quarantine_span(fs, self.path, last.name, src, decision.valid_end, decision.size)
                )
            # else: zero bytes only (a writer's reserved space, left by one that did not close).
            # They hold nothing; the report's offset and length describe them exactly.
            f.truncate(decision.valid_end)
            f.fdatasync()
            report.truncated_at = decision.valid_end
            report.truncated_bytes = cut_bytes
            report.actions.append(
                f"cut {decision.tail} tail of {cut_bytes} bytes at {last.name} offset {decision.valid_end}"
            )
        else:
            # What a killed writer left in the page cache becomes durable before anything new
            # is appended: every record found here may then be reported at "sync" (duplicates,
            # resolve()), and a commit frame followed by a higher seq keeps meaning that its
            # fdatasync returned, across writers (recovery's durable-point rule relies on it).
            f.fdatasync()
        self._open_durable = (f, decision.valid_end)  # synced by either branch above
        if data_frames:
            self._open_last = (f, data_frames[-1].offset, data_frames[-1].seq)
        self._active_size = decision.valid_end
        self._reserved_end = decision.valid_end  # the file ends here now (cut, or clean)
        self._active_count = live_records
        self._index = []
        self._next_index_at = fmt.SEGMENT_HEADER_SIZE_BYTES
        for fr in data_frames:
            self._note_frame(fr.first_seq, fr.offset)
        for live_key, seq in live_keys:
            self._keys[live_key] = seq
        if decision.sealed:
            f.close()
            self._active = None
            self._active_header = None
        report.last_seq = self._last_seq

    def _previous_segment(
        self, segments: list[SegmentName], live: fmt.SegmentHeader
    ) -> tuple[bytes | None, fmt.SealInfo | None, list[SegmentName]]:
        """(the journal's id, the seal footer of the segment before the live one, the segments);
        (None, None, segments) for a lone segment.

        The segment before the live one is the one that ends just before it begins: where the
        listing shows a gap there, the files are asked (reader.why_missing), and a segment the
        listing missed (made by a live writer while it was taken) takes its place. One dropped
        since raises FileNotFoundError: the listing is stale, a reader looks again.

        The journal's id comes from its start marker (_front checks the first segment against
        it), or else from its first segment, unless the segment before the live one and the live
        one both carry another (two against one). The one of these three segments that carries
        another id is refused by name (ForeignSegmentError): whichever file was copied in, not
        the segment after it. One more header read (the first's): an open stays O(live segment).
        """
        if len(segments) < 2:
            return None, None, segments
        while True:
            prev = segments[-2]
            f = self._fs.open_read(os.path.join(self.path, prev.name))
            try:
                prev_header = read_header(f, prev.name)
                seal = read_seal(f, prev_header, prev.name, f.size())
            finally:
                f.close()
            missed = seal.last_seq + 1 if seal is not None else None
            if missed is None or not prev.base_seq < missed < segments[-1].base_seq:
                break
            cause = why_missing(self._fs, self.path, missed)
            if cause == MISSING:
                break  # _check_history reports the gap
            if cause == DROPPED:
                raise FileNotFoundError(errno.ENOENT, "dropped by drop_prefix since it was listed",
                                        os.path.join(self.path, prev.name))
            segments = [*segments[:-1], segment_named(missed), segments[-1]]
        self._check_identity(segments, prev_header, live)
        return prev_header.journal_id, seal, segments

    def _check_identity(
        self, segments: list[SegmentName], prev: fmt.SegmentHeader, live: fmt.SegmentHeader
    ) -> None:
        """Refuse by name the segment, of the first, the one before the live one and the live
        one, whose journal id is not the journal's (see _previous_segment)."""
        first = segments[0]
        if self._start is not None:
            journal_id = self._start.journal_id
            first_id = journal_id  # _front checked the first segment against the marker
        else:
            first_id = prev.journal_id if len(segments) == 2 else self._header_of(first).journal_id
            journal_id = prev.journal_id if prev.journal_id == live.journal_id != first_id else first_id
        for seg, seg_id in ((first, first_id), (segments[-2], prev.journal_id), (segments[-1], live.journal_id)):
            if seg_id != journal_id:
                raise ForeignSegmentError(seg.name, os.path.join(self.path, seg.name))

    def _check_history(self, segments: list[SegmentName], seal: fmt.SealInfo | None, header: fmt.SegmentHeader) -> None:
        """The segment before the live one is sealed and ends just before the live one begins
        (and a lone segment is the one the start marker names)."""
        if len(segments) < 2:
            if segments and self._start is not None:
                check_start_header(self._start, header, segments[0].name)
            return
        prev = segments[-2]
        if seal is None:
            raise CorruptionError(prev.name, 0, None, "segment before the live one has no valid seal footer")
        if seal.last_seq + 1 != header.base_seq:
            raise CorruptionError(
                prev.name,
                seal.seal_offset,
                seal.last_seq,
                f"sequence gap: next segment starts at seq {header.base_seq}",
            )

    # --- public API ---------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The highest seq handed out (first_seq - 1 for an empty journal: 0 for a new one);
        includes buffered records."""
        return self._next_seq - 1

    @property
    def first_seq(self) -> int:
        """The seq of the journal's first record: 1 until drop_prefix drops a prefix."""
        return self._first_seq

    def seal(self) -> None:
        """End the live segment now (fdatasync'd with its footer); the next record starts a new one.

        Every record appended before the call is in the sealed segment, every later one in the
        next: what a caller appends after ``seal()`` can outlive a ``drop_prefix`` of everything
        before it. Nothing happens if the live segment holds no record. A failure fail-stops.
        """
        if self.readonly:
            raise ReadOnlyError("seal")
        with self._mu:
            self._check_open()
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            req = Request([], self._next_seq, "sync")
            req.seal = True
            leading = self._enqueue(req)
        self._await_turn(req, leading)
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        """Delete the records before ``before_seq``, whole sealed segments at a time (retention).

        Every sealed segment whose records all come before ``before_seq`` is deleted; the live
        segment never is, nor a segment that holds ``before_seq`` or a later record (call
        ``seal()`` before appending what must stay, and it lands in a segment of its own). The
        journal then begins at the first seq of the first segment kept (``first_seq``, in the
        result): a start marker naming it is made durable before any segment is unlinked, so a
        crash part way leaves segments the next writer's open finishes removing, and verify
        tells the dropped prefix from a lost segment. Seqs go on from ``last_seq``; a reader
        never again sees a record below ``first_seq``; idempotency keys of dropped records are
        forgotten (a retry of one is written anew). Exclusive writers only.
        """
        if isinstance(before_seq, bool) or not isinstance(before_seq, int) or before_seq < 1:
            raise InvalidArgumentError(f"before_seq must be an int >= 1, not {before_seq!r}")
        if self.readonly:
            raise ReadOnlyError("drop_prefix")
        if self.shared:
            raise InvalidArgumentError("drop_prefix needs the journal opened with writer='exclusive'")
        self._check_open()
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        try:
            with self._drop_mu:  # one drop at a time: each lists, writes START.tmp and unlinks
                return self._drop_segments(before_seq)
        except OSError as exc:
            if isinstance(exc, JournalError):
                raise
            raise JournalIOError(self.path, exc) from exc

    def _drop_segments(self, before_seq: int) -> PrefixDrop:
        fs = self._fs
        segments = list_segments(fs, self.path)
        victims = drop_victims(segments, before_seq)
        if not victims:
            return PrefixDrop(self._first_seq)
        first = segments[len(victims)]
        f = fs.open_read(os.path.join(self.path, first.name))
        try:
            header = read_header(f, first.name)
        finally:
            f.close()
        if header.journal_id != self._journal_id:
            raise ForeignSegmentError(first.name, os.path.join(self.path, first.name))
        start = fmt.StartMarker(self._journal_id, header.segment_number, first.base_seq)
        dropped_bytes = 0
        for seg in victims:
            g = fs.open_read(os.path.join(self.path, seg.name))
            try:
                dropped_bytes += g.size()
            finally:
                g.close()
        write_atomic(fs, os.path.join(self.path, fmt.START_FILE), fmt.encode_start(start))
        # From here the drop is in effect: readers start at the new first seq.
        with self._mu:
            self._start, self._first_seq = start, first.base_seq
            for key in [k for k, seq in self._keys.items() if seq < first.base_seq]:
                del self._keys[key]
                self._key_digests.pop(key, None)
        with self._get_mu:
            self._segments.close()  # cached descriptors of the segments about to go
        for seg in victims:
            fs.unlink(os.path.join(self.path, seg.name))
        fs.fsync_dir(self.path)
        return PrefixDrop(first.base_seq, [seg.name for seg in victims], dropped_bytes)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        """Append one event (a JSON-serializable dict, or bytes); returns its outcome."""
        level = check_durability(durability)
        # Records written together may share a block, so their compression waits for the
        # batch: a buffered record is written with the ones appended after it, and a sync or
        # flush one that arrives while a group commit is under way is written in the next batch
        # with the others that queue meanwhile. A sync record's compression waits too: written
        # alone, the C call that writes and syncs it compresses it with the GIL released
        # (writer._append_alone). (Read without the mutex, a hint: a record deferred and then
        # written alone is compressed alone by _append_alone, and a flush one compressed at
        # once that meets others keeps a frame of its own.)
        together = level != "flush" or self._leader or bool(self._queue)
        if self.options.dictionary is not None:
            self._dictionary_ready()
        enc = encode_event(event, idempotency_key, synthetic, self.options, together)
        if idempotency_key is None:
            out = self._append_buffered(enc) if level == "buffered" else self._append_alone(enc, level)
            if out is not None:
                return out
            return self._submit([enc], level)[0]
        return self._submit_keyed([enc], level)[0]

    def _dictionary_ready(self) -> None:
        """Compress with the dictionary from now on if the live segment may hold frames naming
        one (format version 4): a live segment of an older version is continued without it until
        it rolls. Read without the mutex: a live segment is only ever followed by a newer one, so
        a record compressed with it always lands in a segment of version 4 or later."""
        use = self.options.dictionary
        if use is None or use.active:
            return
        header = self._active_header
        if header is None or header.version >= fmt.DICT_FORMAT_VERSION_MIN:
            use.active = True

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        """Append events in order with one write and (at "sync") one fdatasync per batch."""
        level = check_durability(durability)
        events = list(events)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(events)
        if len(keys) != len(events):
            raise InvalidArgumentError(
                f"idempotency_keys must have one entry per event ({len(keys)} keys for {len(events)} events); "
                "nothing was written"
            )
        together = len(events) > 1  # written together: they may share block frames
        if self.options.dictionary is not None:
            self._dictionary_ready()
        encoded = [encode_event(e, k, synthetic, self.options, together) for e, k in zip(events, keys, strict=True)]
        if together:
            # Framed here, in the caller's thread (an append_many knows its records), so the requests
            # below are cut where the segment really fills. Read without the mutex: a live
            # segment of version 1 is only ever followed by one of version 2.
            header = self._active_header
            pack(encoded, self.options, header is None or header.version >= fmt.BLOCK_FORMAT_VERSION_MIN)
        keyed = any(k is not None for k in keys)
        # Every key is checked before the first chunk is queued, so a conflict anywhere in the
        # call writes nothing; a key used twice in the call is written once.
        repeats = repeated_keys(encoded) if keyed else {}
        unique = [it for i, it in enumerate(encoded) if i not in repeats] if repeats else encoded
        vouched = self._check_keys(unique) if keyed else None
        outcomes: list[Outcome] = []
        room, fresh = self._segment_room()
        for chunk in chunks(unique, room, fresh):
            if outcomes and self._failed is not None:
                # An earlier chunk fail-stopped the journal: its outcomes (AckLost, to resolve
                # later) are kept; the rest were never written.
                reason = f"journal fail-stopped before this record was written: {self._failed}"
                outcomes.extend([NotCommitted(reason)] * len(chunk))
                continue
            outcomes.extend(self._submit_keyed(chunk, level, vouched) if keyed else self._submit(chunk, level))
        if repeats:
            outcomes = with_repeats(outcomes, repeats, len(encoded))
        if not (len(outcomes) == len(encoded)):
            raise InvariantError('len(outcomes) == len(encoded)')
        return outcomes

    def _segment_room(self) -> tuple[int, int]:
        """(bytes the live segment still takes before the leader rolls over, bytes a new one
        takes), for splitting an append_many where the roll-overs will fall. Read without the
        mutex: a hint. A wrong one only moves a roll-over earlier; no request is ever larger
        than a new segment holds."""
        fresh = self._segment_room_bytes
        if self._active is None:
            return fresh, fresh
        return self.options.segment_size_bytes - self._active_size - self._buffered_bytes, fresh

    def _submit_keyed(
        self, items: list[Encoded], level: Durability, vouched: frozenset[tuple[str, int]] | None = None
    ) -> list[Outcome]:
        """_submit for records with idempotency keys. A key already in the journal with another
        event raises IdempotencyConflictError; where the writer does not know the digest of the
        record a key points at, that record is read first (by _check_keys, outside the mutex)."""
        if vouched is None:
            vouched = self._check_keys(items)
        while True:
            try:
                return self._submit(items, level, vouched)
            except KeyDigestUnknown:
                vouched = self._check_keys(items)  # the journal changed meanwhile (a renumbering)

    def _check_keys(self, items: list[Encoded]) -> frozenset[tuple[str, int]]:
        """Compare each remembered key with the event now given for it, before anything is queued.

        Digests of records appended through this handle are known; the record of any other
        remembered key (found at open in the live segment or a seal footer, or renumbered after
        a rollback) is read with get(), which flushes through the writer and so must run
        without the mutex. Raises IdempotencyConflictError; returns the (key, seq) pairs read
        and found to hold the same event.
        """
        todo: list[tuple[Encoded, str, int]] = []
        with self._mu:
            for it in items:
                if it.key is None:
                    continue
                seq = self._keys.get(it.key)
                if seq is None:
                    continue
                known = self._key_digests.get(it.key)
                if known is None or known[0] != seq or known[1] != it.digest:
                    todo.append((it, it.key, seq))
        vouched: set[tuple[str, int]] = set()
        for it, key, seq in todo:
            rec = self.get(seq)
            if rec is None and seq < self._first_seq:
                vouched.add((key, seq))  # dropped with a prefix: nothing to compare with, taken as a retry
                continue
            if rec is None or rec.key != key:
                # Only a lying seal footer's key table names such a seq (verify reports it): taken
                # as a retry, this append would be acknowledged and never written.
                found = "no record" if rec is None else f"a record with key {rec.key!r}"
                raise CorruptionError(self.path, 0, seq, f"the journal's key index names seq {seq} for idempotency "
                                      f"key {key!r}, but seq {seq} is {found}; nothing was written. Run "
                                      "`journal verify` on it")
            if not same_event(rec.payload, rec.is_bytes, it):
                raise IdempotencyConflictError(key, seq)
            with self._mu:
                if self._keys.get(key) == seq:
                    self._note_digest(key, seq, xxhash.xxh64_intdigest(rec.payload))
            vouched.add((key, seq))
        return frozenset(vouched)

    def flush(self) -> None:
        """Write buffered records to the OS. Raises JournalFailStoppedError if that failed."""
        self._submit([], "flush")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def sync(self) -> None:
        """Write buffered records and fdatasync: everything appended so far is durable.

        Raises JournalFailStoppedError if the write or the fdatasync failed.
        """
        self._submit([], "sync")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def read(self, after_seq: int = 0) -> Iterator[Record]:
        """Records with seq > after_seq, in seq order, as they are on disk now."""
        self._check_open()
        if not self.readonly:
            self.flush()  # a reader of this handle sees its own buffered appends
        after_seq = max(after_seq, self._first_seq - 1)  # a dropped prefix is not read again
        # Seeking into the live segment starts from the in-memory index, not from its header.
        hint = self._index_hint(after_seq + 1)
        size_max = self.options.record_size_bytes_max
        cursor = Cursor(self._fs, self.path, after_seq, size_max, hint, journal_id=self._journal_id, dicts=self._dicts)
        try:
            yield from cursor.read()
        except JournalError:
            raise
        except OSError as exc:  # the file system under a read: typed, with the path and what to do
            raise JournalIOError(self.path, exc, "reading") from exc
        finally:
            cursor.close()

    def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Record]:
        """Yield records as they are committed, forever (or until ``stop`` is set or idle)."""
        self._check_open()
        after_seq = max(after_seq, self._first_seq - 1)
        cursor = Cursor(
            self._fs, self.path, after_seq, self.options.record_size_bytes_max, journal_id=self._journal_id,
            dicts=self._dicts,
        )
        idle_since = time.monotonic()
        try:
            while not (stop is not None and stop.is_set()):
                got = False
                try:
                    for rec in cursor.read():
                        got = True
                        yield rec
                except JournalError:
                    raise
                except OSError as exc:  # as read() says it
                    raise JournalIOError(self.path, exc, "reading") from exc
                now = time.monotonic()
                if got:
                    idle_since = now
                elif idle_timeout_s is not None and now - idle_since >= idle_timeout_s:
                    return
                if not got:
                    if stop is not None:
                        stop.wait(poll_interval_s)
                    else:
                        time.sleep(poll_interval_s)
        finally:
            cursor.close()

    def get(self, seq: int) -> Record | None:
        """The record at ``seq``, or None if the journal does not hold it.

        Sealed segments are entered through their footer's sparse index, the live segment
        through the one kept in memory, and only a small chunk around the record is read; a
        segment read often enough that this has cost one scan of it is indexed record by
        record, and a read is then one read of the record's frame (docs/GUARANTEES.md).
        """
        if seq < self._first_seq:
            return None
        if not self.readonly:
            self._check_open()
            self.flush()
        return self._peek(seq, check_open=True)  # checks the handle is open (again), under the lock

    def _peek(self, seq: int, check_open: bool = False) -> Record | None:
        """The record at ``seq`` as the file holds it now, without writing this handle's queue
        first (get() flushes; a leader in the middle of a batch must not, nor may it refuse
        because a close is waiting for it)."""
        with self._get_mu:  # one point read at a time: they share the open-segment cache
            if check_open:
                self._check_open()
            for attempt in (1, 2):
                try:
                    rec = self._dense_get(seq)  # the common read, a call shorter
                    return rec if rec is not None else self._point_read(seq)
                except JournalError:
                    raise
                except FileNotFoundError as exc:
                    # A segment the cached listing names is gone: another handle dropped a prefix.
                    self._segments.close()
                    if attempt == 2:
                        raise JournalIOError(self.path, exc) from exc
                except OSError as exc:
                    # The file layer failed the read (EIO from the device, say): typed, with the
                    # path and what to do, as opening and reading say it. Nothing was changed.
                    raise JournalIOError(self.path, exc, "reading") from exc
        return None

    def _point_read(self, seq: int) -> Record | None:
        """The record at ``seq`` read by a cursor: where the dense index has no answer."""
        hint = self._index_hint(seq)
        cursor = Cursor(
            self._fs, self.path, seq - 1, self.options.record_size_bytes_max, hint, self._segments, self._journal_id,
            self._dicts,
        )
        try:
            for rec in cursor.read(limit=1):
                return rec if rec.seq == seq else None
        except PrefixDroppedError:
            return None  # dropped since this handle was opened: the journal no longer holds it
        finally:
            cursor.close()
        return None

    def _dense_get(self, seq: int) -> Record | None:
        """The record at ``seq`` through the segment's dense offset index: one read of exactly
        its frame, verified again (checksum, seq, kind), so a stale offset (a rolled-back write
        rewritten since) is a miss, never a wrong record. None on any miss: the cursor decides."""
        segments = self._segments.listed or self._segments.listing()
        if segments and seq >= segments[-1].base_seq:
            i = len(segments) - 1  # the live segment: most reads of a session's journal
        else:
            i = bisect.bisect_right(segments, seq, key=_base_seq) - 1
            if i < 0:
                return None
        opened = self._segments.open(segments[i])
        if self._journal_id and opened.header.journal_id != self._journal_id:
            return None  # the cursor names the foreign segment
        dicts = for_segment(self._dicts, opened.header.version)  # a version 3 segment names none
        return read_point(opened, seq, self._stored_max, self.options.record_size_bytes_max, dicts)

    def _index_hint(self, seq: int) -> tuple[int, int, int] | None:
        """(live segment base seq, seq, offset) of the last index point at or before ``seq``.

        Read without the mutex while a leader may be rolling segments over: the reader checks
        the frame at the hinted offset before trusting it, so a stale pair only costs a scan.
        """
        header, index = self._active_header, self._index
        if header is None or not index or seq < header.base_seq:
            return None
        i = bisect.bisect_right(index, (seq, 1 << 64)) - 1
        if i < 0:
            return None
        hint_seq, offset = index[i]
        return (header.base_seq, hint_seq, offset)

    def resolve(self, outcome: Outcome) -> Outcome:
        """Turn an AckLost into Committed or NotCommitted by reading the journal.

        Only meaningful on a journal opened after the failure (recovery has run, so a record
        that is not there now never will be). An outcome whose seq a drop_prefix has dropped
        since stays an AckLost: what it was can no longer be read.
        """
        if not isinstance(outcome, AckLost):
            return outcome
        self._check_open()
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        if outcome.key is not None and outcome.key in self._keys:
            return Committed(self._keys[outcome.key], "sync", duplicate=True, reason="resolved by idempotency key")
        rec = self.get(outcome.seq)
        if rec is not None and xxhash.xxh64_intdigest(rec.payload) == outcome.digest and rec.key == outcome.key:
            return Committed(outcome.seq, "sync", reason="resolved: the record is in the journal")
        if rec is None and outcome.seq < self._first_seq:
            # Dropped since (drop_prefix): whether it was written cannot be told from here.
            return outcome
        if rec is None:
            return NotCommitted("resolved: the journal ends before this record's seq")
        return NotCommitted("resolved: another record holds this record's seq")

    def copy_prefix(self, dst: str | os.PathLike[str], at_seq: int, link: bool = True) -> PrefixCopy:
        """Fill the existing empty directory ``dst`` with records first_seq..``at_seq`` (journal.api.PrefixCopier).

        Sealed segments are hard-linked (``link``, where the file system allows) or copied whole;
        the segment holding ``at_seq`` is cut. See journal/engine/copy.py.
        """
        self._check_open()
        if not self.readonly:
            self.flush()  # records still buffered in this handle are part of its prefix
            # The copy carries the dictionary files it finds: the one this writer's frames name
            # is put back first if its name was removed (Writer._keep_dictionary_file).
            self._keep_dictionary_file()
        return prefix_copy.copy_prefix(self._fs, self.path, os.fspath(dst), at_seq, link=link)

    def close(self) -> None:
        """Write buffered records (flush level) and release the lock. Idempotent."""
        if self._closed:
            return
        failed_before = self._failed
        dictionary_lost: OSError | JournalError | None = None
        try:
            if not self.readonly and self._failed is None:
                self._submit([], "flush")
        finally:
            with self._mu:
                self._closed = True
                while self._leader:  # a batch in flight keeps its file open until it is done
                    self._cv_wait()
            if self._active is not None and not self.readonly and self._failed is None:
                try:
                    self._close_cut()
                except (OSError, JournalError):
                    pass  # the reserved zeros stay; the next writer's open cuts them (nothing lost)
            if not self.readonly and self._failed is None and self._last_seq > self._dict_checked_seq:
                # Records written since the last check (in the live segment, or in one a seal
                # closed) may name a dictionary the directory no longer holds as written: the
                # caller must know, as for a failed final flush.
                try:
                    self._keep_dictionary_file()
                except (OSError, JournalError) as exc:
                    dictionary_lost = exc
            if self._active is not None and not self.readonly and self._failed is None:
                try:
                    self._write_live_hint()
                except (OSError, JournalError, live_hint.HintError):
                    pass  # no hint, or the old one: a read-only open scans more, nothing else
            self._release()
        if self._failed is not None and failed_before is None:
            # The final flush of buffered records failed: they are lost, and the caller must know.
            raise JournalFailStoppedError(self._failed)
        if dictionary_lost is not None:
            if isinstance(dictionary_lost, JournalError):
                raise dictionary_lost
            raise JournalIOError(self.path, dictionary_lost) from dictionary_lost

    def _write_live_hint(self) -> None:
        """Write LIVE.hint (journal/engine/live_hint.py) naming the last record frame of the live
        segment that ends at or before the durable end this handle knows. Not by a shared writer
        (other processes append and sync the same file). Not fsync'd: see live_hint."""
        active, header = self._active, self._active_header
        if active is None or header is None or self.shared:
            return
        if self._unchanged_hint(active, header):
            return
        ends = [known[1] for known in (self._synced_at, self._open_durable) if known is not None and known[0] is active]
        durable_end = min(max(ends, default=0), self._active_size)
        points = [p for p in self._index if p[1] < durable_end]
        if not points:
            return
        # From the last index point before the durable end: at most an interval and a frame read.
        src = tail.FileBytes(active, size=durable_end)
        res = tail.scan_segment(src, points[-1][1], header.salt, points[-1][0])
        records = fmt.record_frames(res.frames)
        if not records:
            return
        last = records[-1]
        got = tail.frame_at(src, last.offset, header.salt)
        if got is None:
            return
        hint = live_hint.LiveHint(
            journal_id=header.journal_id,
            segment=fmt.segment_name(header.base_seq),
            base_seq=header.base_seq,
            salt=header.salt,
            frame_offset=last.offset,
            frame_seq=last.seq,
            frame_checksum=fmt.read_frame_header(got[1], 0)[0],
            records=last.seq - header.base_seq + 1,
            index_interval_bytes=self.options.index_interval_bytes,
            points=tuple(p for p in points if p[1] <= last.offset),
        )
        live_hint.write_hint(self._fs, self.path, hint)

    def _unchanged_hint(self, active: File, header: fmt.SegmentHeader) -> bool:
        """Whether this handle wrote nothing since its open and LIVE.hint names the last record
        frame that open found: the hint it would write (a close after a look costs no scan)."""
        opened, durable = self._open_last, self._open_durable
        if opened is None or durable is None or opened[0] is not active or durable[1] != self._active_size:
            return False
        try:
            old = live_hint.read_hint(self._fs, self.path)
        except (OSError, live_hint.HintError):
            return False
        want = (header.journal_id, fmt.segment_name(header.base_seq), header.salt, opened[1], opened[2])
        return (old.journal_id, old.segment, old.salt, old.frame_offset, old.frame_seq) == want and (
            old.index_interval_bytes == self.options.index_interval_bytes
        )

    def _close_cut(self) -> None:
        """Cut the reserved zeros off the live segment at close. A shared writer does it under
        the lock, after catching up: other processes may have appended past its last frame."""
        if not self.shared:
            self._unreserve()
            return
        lock = shared.take_lock(self._fs, self.path, self.shared_lock_timeout_s)
        if lock is None:
            return  # the zeros stay; whoever writes next reuses them, any writer's open cuts them
        try:
            shared.catch_up(self, shared.note_state(lock.note_before) != shared.NOTE_CLEAN)
            if self._active is not None:
                self._unreserve()
                lock.write_note(shared.note(shared.NOTE_CLEAN))
        finally:
            lock.release()

    def _release(self) -> None:
        with self._get_mu:
            self._segments.close()
        if self._active is not None:
            self._active.close()
            self._active = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None



def open(  # noqa: A001 - the public contract is journal.open
    path: str | os.PathLike[str], create: bool = False, readonly: bool = False, **kwargs: Any
) -> Journal:
    """Open the journal in directory ``path``; see Journal.open for the options."""
    return Journal.open(path, create=create, readonly=readonly, **kwargs)


__all__ = ["Journal", "JournalError", "Options", "open"]
