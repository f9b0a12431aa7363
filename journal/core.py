"""The Journal: open and recover, append with group commit and three outcomes, read, follow.

Life of an append (the writer and recovery are mirror images; see docs/GUARANTEES.md):

1. The caller's thread encodes the event (JSON, zstd, key) outside any lock.
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
import json
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import xxhash
import zstandard

from . import format as fmt
from .errors import (
    CorruptionError,
    EventNotSerializableError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NotAJournalError,
    ReadOnlyError,
    RecordTooLargeError,
)
from .fs import File, FileSystem, Lock, OsFileSystem, take_lock, write_all
from .outcomes import DURABILITY_LEVELS, AckLost, Committed, Durability, NotCommitted, Outcome
from .reader import Cursor, Record, SegmentCache
from .recovery import QUARANTINE_DIR, RecoveryReport, decide, quarantine
from .segment import create_segment, header_padding, list_segments, list_temp_files, new_header, read_header, read_seal

LOCK_FILE = "LOCK"
COMPRESS_MIN_BYTES = 256  # smaller events gain little (2% of bytes on real logs) and zstd costs ~10 µs each
ZSTD_LEVEL = 1  # on real session events within 2% of level 3's size, and faster
BATCH_BYTES_MAX = 4 * 1024 * 1024  # one group-commit write never carries more than this
BATCH_RECORDS_MAX = 4096
BUFFER_BYTES_MAX = 1024 * 1024  # buffered appends are written once this much is waiting
FOLLOW_POLL_INTERVAL_S = 0.02
KEYS_REMEMBERED_MAX = 1_000_000  # idempotency keys kept in memory (live segment and recent)

_local = threading.local()
# One encoder for every event: json.dumps with options builds a new encoder on each call.
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _compressor() -> zstandard.ZstdCompressor:
    c: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if c is None:
        # No content size, checksum or dict id in the zstd frame: the journal frame has them.
        c = _local.cctx = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_content_size=False, write_checksum=False, write_dict_id=False
        )
    return c


@dataclass(frozen=True)
class Options:
    segment_size_bytes: int = fmt.SEGMENT_SIZE_BYTES_DEFAULT
    record_size_bytes_max: int = fmt.RECORD_SIZE_BYTES_MAX_DEFAULT
    index_interval_bytes: int = fmt.INDEX_INTERVAL_BYTES_DEFAULT
    compress: bool = True
    # 0 assumes powersafe overwrite (an unsynced write never damages synced bytes of the same
    # sector). On storage without it, set the sector size: every synced batch is then padded to
    # a sector boundary, so no later write shares a sector with synced data (SQLite's answer).
    sector_bytes: int = 0

    def check(self) -> None:
        if self.sector_bytes and (self.sector_bytes < 512 or self.sector_bytes & (self.sector_bytes - 1)):
            raise ValueError("sector_bytes must be 0 or a power of two of at least 512")
        if not 4096 <= self.segment_size_bytes <= 1 << 40:
            raise ValueError("segment_size_bytes must be between 4 KiB and 1 TiB")
        if not 1 <= self.record_size_bytes_max <= fmt.FRAME_STORED_BYTES_LIMIT - 512:
            raise ValueError(f"record_size_bytes_max must be between 1 and {fmt.FRAME_STORED_BYTES_LIMIT - 512}")
        if self.index_interval_bytes < 512:
            raise ValueError("index_interval_bytes must be at least 512")


class _Encoded:
    """An event ready to frame: everything but its seq (assigned in order under the mutex)."""

    __slots__ = ("key", "raw", "spec")

    def __init__(self, spec: fmt.FrameSpec, raw: bytes, key: str | None) -> None:
        self.spec = spec
        self.raw = raw  # kept (not copied) so that an AckLost can carry the payload's digest
        self.key = key

    @property
    def digest(self) -> int:
        return xxhash.xxh64_intdigest(self.raw)


class _Request:
    """One caller's records in the queue; ``wake`` parks the caller until it is done or leads."""

    __slots__ = ("abandoned", "acked", "durability", "first_seq", "items", "nbytes", "outcomes", "wake")

    def __init__(self, items: list[_Encoded], first_seq: int, durability: Durability) -> None:
        self.items = items
        self.first_seq = first_seq
        self.durability = durability
        if len(items) == 1:
            self.nbytes = len(items[0].spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES
        else:
            self.nbytes = sum(len(it.spec.stored) for it in items) + fmt.FRAME_HEADER_SIZE_BYTES * len(items)
        self.outcomes: list[Outcome] | None = None
        self.acked = durability == "buffered"  # the caller already holds Committed(buffered)
        self.wake: threading.Lock | None = None
        self.abandoned = False  # its caller was interrupted while waiting


def _only_header(data: bytes) -> bool:
    """Whether a segment file holds a header (and its sector padding) and nothing else."""
    try:
        header = fmt.decode_segment_header(data)
    except fmt.HeaderError:
        return len(data) == 0
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
    return res.stop == fmt.Stop.END and all(f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_PADDING for f in res.frames)


def _chunks(items: list[_Encoded]) -> Iterator[list[_Encoded]]:
    """Split an append_many into requests of at most BATCH_RECORDS_MAX records and, unless one
    record alone is larger, BATCH_BYTES_MAX bytes, so that no write exceeds the batch bound."""
    chunk: list[_Encoded] = []
    size = 0
    for it in items:
        nbytes = len(it.spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES
        if chunk and (size + nbytes > BATCH_BYTES_MAX or len(chunk) == BATCH_RECORDS_MAX):
            yield chunk
            chunk, size = [], 0
        chunk.append(it)
        size += nbytes
    if chunk:
        yield chunk


def _check_durability(durability: str) -> Durability:
    if durability not in DURABILITY_LEVELS:
        raise ValueError(f"durability must be one of {DURABILITY_LEVELS}, not {durability!r}")
    return durability


def encode_event(event: Any, key: str | None, synthetic: bool, options: Options) -> _Encoded:
    """JSON (or bytes) -> stored payload. Raises typed errors; nothing is written."""
    if type(event) is dict or isinstance(event, dict):
        try:
            raw = _JSON_ENCODE(event).encode("utf-8")
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
            raise EventNotSerializableError(str(exc)) from None
        flags = 0
    elif isinstance(event, (bytes, bytearray, memoryview)):
        raw = bytes(event)
        flags = fmt.FLAG_BYTES
    else:
        raise EventNotSerializableError(f"events are dicts or bytes, not {type(event).__name__}")
    if len(raw) > options.record_size_bytes_max:
        raise RecordTooLargeError(len(raw), options.record_size_bytes_max)
    body = raw
    if options.compress and len(raw) >= COMPRESS_MIN_BYTES:
        packed = _compressor().compress(raw)
        if len(packed) < len(raw):
            body = packed
            flags |= fmt.CODEC_ZSTD
    if synthetic:
        flags |= fmt.FLAG_SYNTHETIC
    if key is not None:
        key_bytes = key.encode("utf-8", "surrogateescape")
        if not 1 <= len(key_bytes) <= fmt.IDEMPOTENCY_KEY_BYTES_MAX:
            raise ValueError(f"idempotency key must be 1..{fmt.IDEMPOTENCY_KEY_BYTES_MAX} bytes of UTF-8")
        body = bytes([len(key_bytes)]) + key_bytes + body
        flags |= fmt.FLAG_KEYED
    return _Encoded(fmt.FrameSpec(flags, len(raw), body), raw, key)


class Journal:
    """A segmented, checksummed, append-only journal in one directory. See journal.open()."""

    def __init__(self, path: str, fs: FileSystem, options: Options, readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.options = options
        self.recovery = RecoveryReport()
        self._fs = fs
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._queue: deque[_Request] = deque()
        self._leader = False
        self._failed: str | None = None
        self._closed = False
        self._lock: Lock | None = None
        self._journal_id = b""
        self._segment_number = 0
        self._active: File | None = None
        self._active_header: fmt.SegmentHeader | None = None
        self._active_size = 0
        self._active_count = 0
        self._index: list[tuple[int, int]] = []
        self._next_index_at = 0
        self._last_seq = 0  # highest seq written to the OS (or, read-only, found at open)
        self._next_seq = 1  # next seq to hand out (counts buffered and queued records)
        self._buffered_bytes = 0
        self._unsynced = False  # bytes written since the last fdatasync
        self._get_mu = threading.Lock()
        self._segments = SegmentCache(fs, path)  # open segments kept for get()
        self._keys: dict[str, int] = {}  # idempotency key -> seq, of records written (or buffered)
        self._pending_keys: dict[str, tuple[_Request, int]] = {}  # keys of records on their way

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
    ) -> Journal:
        """Open (and, for writing, lock and recover) the journal in directory ``path``."""
        if create and readonly:
            raise ValueError("create=True needs a writable journal; drop readonly=True")
        options = Options(segment_size_bytes, record_size_bytes_max, index_interval_bytes, compress, sector_bytes)
        options.check()
        j = cls(os.fspath(path), fs or OsFileSystem(), options, readonly)
        try:
            if readonly:
                j._open_readonly()
            else:
                j._open_writer(create, lock_timeout_s)
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
                fs.mkdir(d)
                fs.fsync_dir(os.path.dirname(d))
        segments = list_segments(fs, path)
        if not segments:
            foreign = [n for n in fs.listdir(path) if n not in (LOCK_FILE, QUARANTINE_DIR) and not n.endswith(".tmp")]
            if foreign:
                raise NotAJournalError(path, f"it holds other files ({', '.join(foreign[:3])}) and no segment")
            if not create:
                raise NotAJournalError(path, "it holds no segment")
        return segments

    def _open_readonly(self) -> None:
        segments = self._check_dir(create=False)
        last = segments[-1]
        f = self._fs.open_read(os.path.join(self.path, last.name))
        try:
            header = read_header(f, last.name)
            size = f.size()
            data = f.pread(size, 0)
        finally:
            f.close()
        res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        data_frames = [fr for fr in res.frames if fr.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA]
        self._active_header = header  # read-only: the live segment, for get()'s index hints
        self._next_index_at = fmt.SEGMENT_HEADER_SIZE_BYTES
        for fr in data_frames:
            self._note_frame(fr.seq, fr.offset)
        self._last_seq = data_frames[-1].seq if data_frames else header.base_seq - 1
        self._next_seq = self._last_seq + 1
        self.recovery = RecoveryReport(
            segments=len(segments),
            last_seq=self._last_seq,
            live_segment=last.name,
            live_records=len(data_frames),
            tail="sealed" if res.stop == fmt.Stop.SEALED else ("clean" if res.stop == fmt.Stop.END else "torn"),
        )

    def _open_writer(self, create: bool, lock_timeout_s: float) -> None:
        fs = self._fs
        segments = self._check_dir(create)
        lock_path = os.path.join(self.path, LOCK_FILE)
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
                size = f.size()
                data = f.pread(size, 0)
            finally:
                f.close()
            if not _only_header(data):
                report.quarantined.append(quarantine(fs, self.path, tmp, 0, data))
            fs.unlink(tmp_path)
            fs.fsync_dir(self.path)
            report.actions.append(f"removed unfinished segment {tmp} ({size} bytes)")
        segments = list_segments(fs, self.path)
        if not segments:
            self._journal_id = secrets.token_bytes(16)
            header = new_header(self._journal_id, 0, 1)
            self._active = create_segment(fs, self.path, header, self.options.sector_bytes)
            self._active_header = read_header(self._active, fmt.segment_name(1))
            self._active_size = fmt.SEGMENT_HEADER_SIZE_BYTES + len(header_padding(header, self.options.sector_bytes))
            self._next_index_at = self._active_size
            report.actions.append("created journal")
            report.segments = 1
            report.live_segment = fmt.segment_name(1)
            report.tail = "empty"
            report.last_seq = 0
            return
        last = segments[-1]
        f = fs.open_write(os.path.join(self.path, last.name), create=False)
        self._active = f
        header = read_header(f, last.name)
        self._active_header = header
        self._journal_id = header.journal_id
        self._segment_number = header.segment_number
        if len(segments) > 1:
            self._check_previous(segments[-2], header)
        size = f.size()
        data = f.pread(size, 0)
        decision = decide(data, header, last.name, f.path)
        data_frames = [fr for fr in decision.frames if fr.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA]
        self._last_seq = data_frames[-1].seq if data_frames else header.base_seq - 1
        self._next_seq = self._last_seq + 1
        report.segments = len(segments)
        report.live_segment = last.name
        report.live_records = len(data_frames)
        report.tail = decision.tail
        if decision.cut:
            cut = data[decision.valid_end :]
            report.quarantined.append(quarantine(fs, self.path, last.name, decision.valid_end, cut))
            f.truncate(decision.valid_end)
            f.fdatasync()
            report.truncated_at = decision.valid_end
            report.truncated_bytes = len(cut)
            report.actions.append(
                f"cut {decision.tail} tail of {len(cut)} bytes at {last.name} offset {decision.valid_end}"
            )
        else:
            # What a killed writer left in the page cache becomes durable before anything new
            # is appended: every record found here may then be reported at "sync" (duplicates,
            # resolve()), and a commit frame followed by a higher seq keeps meaning that its
            # fdatasync returned, across writers (recovery's durable-point rule relies on it).
            f.fdatasync()
        self._active_size = decision.valid_end
        self._active_count = len(data_frames)
        for fr in data_frames:
            self._note_frame(fr.seq, fr.offset)
            if fr.flags & fmt.FLAG_KEYED:
                key_len = data[fr.payload_offset]
                raw_key = data[fr.payload_offset + 1 : fr.payload_offset + 1 + key_len]
                self._keys[raw_key.decode("utf-8", "surrogateescape")] = fr.seq
        if decision.sealed:
            f.close()
            self._active = None
            self._active_header = None
        report.last_seq = self._last_seq

    def _check_previous(self, prev: Any, header: fmt.SegmentHeader) -> None:
        f = self._fs.open_read(os.path.join(self.path, prev.name))
        try:
            prev_header = read_header(f, prev.name)
            seal = read_seal(f, prev_header, prev.name, f.size())
        finally:
            f.close()
        if prev_header.journal_id != header.journal_id:
            raise CorruptionError(prev.name, 0, None, "segment belongs to a different journal (journal id differs)")
        if seal is None:
            raise CorruptionError(prev.name, 0, None, "segment before the live one has no valid seal footer")
        if seal.last_seq + 1 != header.base_seq:
            raise CorruptionError(
                prev.name,
                seal.seal_offset,
                seal.last_seq,
                f"sequence gap: next segment starts at seq {header.base_seq}",
            )
        # Retries after a reopen dedupe against the sealed segment too, without reading it.
        for seq, key in seal.keys:
            self._keys[key.decode("utf-8", "surrogateescape")] = seq

    def _note_frame(self, seq: int, offset: int) -> None:
        if offset >= self._next_index_at:
            self._index.append((seq, offset))
            self._next_index_at = offset + self.options.index_interval_bytes

    # --- public API ---------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The highest seq handed out (0 for an empty journal); includes buffered records."""
        return self._next_seq - 1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        """Append one event (a JSON-serializable dict, or bytes); returns its outcome."""
        level = _check_durability(durability)
        enc = encode_event(event, idempotency_key, synthetic, self.options)
        if idempotency_key is None:
            out = self._append_buffered(enc) if level == "buffered" else self._append_alone(enc, level)
            if out is not None:
                return out
        return self._submit([enc], level)[0]

    def _append_buffered(self, enc: _Encoded) -> Outcome | None:
        """A buffered append: a seq and a place at the end of the queue, nothing more.

        Consecutive buffered appends share one queued request, so a bulk load costs a list
        append per record. None when the general path must run (closed, failed, buffer full).
        """
        nbytes = len(enc.spec.stored) + fmt.FRAME_HEADER_SIZE_BYTES
        with self._mu:
            if self._closed or self._failed is not None or self.readonly:
                return None
            if self._buffered_bytes + nbytes >= BUFFER_BYTES_MAX:
                return None  # the general path writes the buffer out
            seq = self._next_seq
            self._next_seq = seq + 1
            tail = self._queue[-1] if self._queue else None
            # The last queued request is not in any leader's batch (taking one pops it), so a
            # buffered one there can still grow; its seqs stay contiguous with the new one.
            if (
                tail is not None
                and tail.acked
                and len(tail.items) < BATCH_RECORDS_MAX
                and tail.nbytes + nbytes <= BATCH_BYTES_MAX
            ):
                assert tail.first_seq + len(tail.items) == seq
                tail.items.append(enc)
                tail.nbytes += nbytes
            else:
                self._queue.append(_Request([enc], seq, "buffered"))
            self._buffered_bytes += nbytes
            return Committed(seq, "buffered")

    def _append_alone(self, enc: _Encoded, level: Durability) -> Outcome | None:
        """The uncontended case: no leader, nothing queued, no roll-over due. None otherwise.

        It leads at once and writes one frame with as little Python as possible: after an
        fdatasync the CPU's caches are cold, and every instruction on this path then costs
        several times what it does in a warm loop. Failures go through the group-commit
        settle step, so their outcomes are exactly those of a one-record batch.
        """
        spec = enc.spec
        with self._mu:
            active = self._active
            if (
                self._leader
                or self._queue
                or self._failed is not None
                or self._closed
                or self.options.sector_bytes
                or active is None
                or (
                    self._active_count
                    and self._active_size + fmt.FRAME_HEADER_SIZE_BYTES + len(spec.stored)
                    > self.options.segment_size_bytes
                )
            ):
                return None
            self._leader = True
            seq = self._next_seq
            self._next_seq = seq + 1
        assert self._active_header is not None
        sync = level == "sync"
        start = self._active_size
        results: tuple[str, str, int | None] = ("failed", "interrupted before the write finished", None)
        outcome: Outcome | None = None
        try:
            data = fmt.encode_frame(
                seq,
                spec.flags | fmt.FLAG_COMMIT if sync else spec.flags,
                spec.raw_len,
                spec.stored,
                self._active_header.salt,
            )
            try:
                write_all(active, data, start)
            except OSError as exc:
                results = self._roll_back(start, f"write failed: {exc}", exc.errno)
            else:
                self._unsynced = True
                try:
                    if sync:
                        active.fdatasync()
                        self._unsynced = False
                except OSError as exc:
                    results = ("failed", f"fdatasync failed: {exc}", exc.errno)
                else:
                    if start >= self._next_index_at:
                        self._note_frame(seq, start)
                    self._active_size = start + len(data)
                    self._active_count += 1
                    self._last_seq = seq
                    outcome = Committed(seq, level)
        finally:
            with self._mu:
                if outcome is None:
                    req = _Request([enc], seq, level)
                    self._settle([req], results)
                    if self._failed is not None:
                        self._fail_queue()
                    assert req.outcomes is not None
                    outcome = req.outcomes[0]
                if self._queue:
                    self._hand_off()
                else:
                    self._leader = False
                    self._cv.notify_all()
        return outcome

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        """Append events in order with one write and (at "sync") one fdatasync per batch."""
        level = _check_durability(durability)
        events = list(events)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(events)
        if len(keys) != len(events):
            raise ValueError("idempotency_keys must have one entry per event")
        encoded = [encode_event(e, k, synthetic, self.options) for e, k in zip(events, keys, strict=True)]
        outcomes: list[Outcome] = []
        for chunk in _chunks(encoded):
            if outcomes and self._failed is not None:
                # An earlier chunk fail-stopped the journal: its outcomes (AckLost, to resolve
                # later) are kept; the rest were never written.
                reason = f"journal fail-stopped before this record was written: {self._failed}"
                outcomes.extend([NotCommitted(reason)] * len(chunk))
                continue
            outcomes.extend(self._submit(chunk, level))
        assert len(outcomes) == len(encoded)
        return outcomes

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
        # Seeking into the live segment starts from the in-memory index, not from its header.
        hint = self._index_hint(after_seq + 1)
        cursor = Cursor(self._fs, self.path, after_seq, self.options.record_size_bytes_max, hint)
        try:
            yield from cursor.read()
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
        cursor = Cursor(self._fs, self.path, after_seq, self.options.record_size_bytes_max)
        idle_since = time.monotonic()
        try:
            while not (stop is not None and stop.is_set()):
                got = False
                for rec in cursor.read():
                    got = True
                    yield rec
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
        through the one kept in memory, and only a small chunk around the record is read.
        """
        if seq < 1:
            return None
        self._check_open()
        if not self.readonly:
            self.flush()
        with self._get_mu:  # one point read at a time: they share the open-segment cache
            self._check_open()
            hint = self._index_hint(seq)
            cursor = Cursor(self._fs, self.path, seq - 1, self.options.record_size_bytes_max, hint, self._segments)
            try:
                for rec in cursor.read(limit=1):
                    return rec if rec.seq == seq else None
            finally:
                cursor.close()
        return None

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
        that is not there now never will be).
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
        if rec is None:
            return NotCommitted("resolved: the journal ends before this record's seq")
        return NotCommitted("resolved: another record holds this record's seq")

    def close(self) -> None:
        """Write buffered records (flush level) and release the lock. Idempotent."""
        if self._closed:
            return
        failed_before = self._failed
        try:
            if not self.readonly and self._failed is None:
                self._submit([], "flush")
        finally:
            with self._mu:
                self._closed = True
                while self._leader:  # a batch in flight keeps its file open until it is done
                    self._cv.wait()
            self._release()
        if self._failed is not None and failed_before is None:
            # The final flush of buffered records failed: they are lost, and the caller must know.
            raise JournalFailStoppedError(self._failed)

    def _release(self) -> None:
        with self._get_mu:
            self._segments.close()
        if self._active is not None:
            self._active.close()
            self._active = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    # --- group commit -------------------------------------------------------------------

    def _submit(self, items: list[_Encoded], durability: Durability) -> list[Outcome]:
        if self.readonly:
            raise ReadOnlyError("append")
        with self._mu:
            keyed = any(it.key is not None for it in items)
            # A retry of a record that is still on its way waits for its outcome: answering
            # "duplicate" now could acknowledge a record that is then rolled back.
            while keyed and any(it.key in self._pending_keys for it in items if it.key is not None):
                self._cv.wait()
            self._check_open()
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            dupes: dict[int, Committed] = {}
            fresh = items
            if keyed:
                fresh = []
                for i, item in enumerate(items):
                    if item.key is not None and item.key in self._keys:
                        dupes[i] = Committed(self._keys[item.key], durability, True, "idempotency key matched")
                    else:
                        fresh.append(item)
            req = _Request(fresh, self._next_seq, durability)
            self._next_seq += len(fresh)
            for k, item in enumerate(fresh):
                if item.key is not None:
                    if durability == "buffered":
                        self._remember_key(item.key, req.first_seq + k)  # acknowledged below, seq final
                    else:
                        self._pending_keys[item.key] = (req, k)
            if durability == "buffered":
                if fresh:
                    self._queue.append(req)
                    self._buffered_bytes += req.nbytes
                req.outcomes = [Committed(req.first_seq + k, "buffered") for k in range(len(fresh))]
                if self._buffered_bytes < BUFFER_BYTES_MAX:
                    return self._merge(items, req.outcomes, dupes)
                # Too much waiting in memory: carry it to the OS now, as a flush.
                carried: list[Outcome] | None = req.outcomes
                req = _Request([], self._next_seq, "flush")
            elif not fresh and not self._queue and not self._leader and (durability == "flush" or not self._unsynced):
                return self._merge(items, [], dupes)  # nothing to write or sync, nothing in flight
            else:
                carried = None
            self._queue.append(req)
            leading = not self._leader
            if leading:
                self._leader = True
            else:
                req.wake = threading.Lock()
                req.wake.acquire()
        if not leading:
            assert req.wake is not None
            try:
                req.wake.acquire()  # released when our outcome is set, or when we are made leader
            except BaseException:
                self._abandon(req)
                raise
        if req.outcomes is None:
            self._lead(req)
        assert req.outcomes is not None
        answers: dict[int, Outcome] = dict(dupes)
        if dupes and self._failed is not None:
            # The write this call waited on failed: what the duplicates point at is unknown too.
            failed = self._failed
            answers = {i: AckLost(d.seq, failed, items[i].digest, items[i].key) for i, d in dupes.items()}
        return self._merge(items, carried if carried is not None else req.outcomes, answers)

    def _remember_key(self, key: str, seq: int) -> None:
        self._keys[key] = seq
        if len(self._keys) > KEYS_REMEMBERED_MAX:
            del self._keys[next(iter(self._keys))]  # forget the oldest

    def _abandon(self, req: _Request) -> None:
        """A waiting caller was interrupted (Ctrl-C): never make it the leader again.

        Its records stay queued and may still be written by the next leader: to its caller the
        outcome is unknown, as after any interrupted call. If it had just been made leader,
        leadership passes on so that the writer never waits for a thread that left.
        """
        with self._mu:
            req.abandoned = True
            assert req.wake is not None
            woken = req.wake.acquire(blocking=False)
            if woken and req.outcomes is None:
                self._hand_off()

    @staticmethod
    def _merge(items: list[_Encoded], fresh_outcomes: list[Outcome], dupes: Mapping[int, Outcome]) -> list[Outcome]:
        if not dupes:
            assert len(fresh_outcomes) == len(items)
            return fresh_outcomes
        it = iter(fresh_outcomes)
        merged = [dupes[i] if i in dupes else next(it) for i in range(len(items))]
        assert len(merged) == len(items)
        return merged

    def _lead(self, req: _Request) -> None:
        """Write batches until ``req`` is done, then hand leadership to a waiting caller.

        Only one thread leads at a time; it does the I/O without holding the mutex, so callers
        keep queueing meanwhile and the next batch carries all of them (RocksDB's group commit:
        no timer, the previous write's duration is the batching window).
        """
        while True:
            with self._mu:
                if self._failed is not None:
                    self._fail_queue()
                    self._leader = False
                    self._cv.notify_all()
                    return
                batch = self._take_batch()
            results: tuple[str, str, int | None] = ("failed", "interrupted before the write finished", None)
            try:
                results = self._write_batch(batch)
            finally:
                with self._mu:
                    self._settle(batch, results)
                    for r in batch:
                        if r is not req and r.wake is not None:
                            r.wake.release()
                    if self._failed is not None:
                        self._fail_queue()
                    done = req.outcomes is not None
                    if done:
                        self._hand_off()
            if done:
                return

    def _hand_off(self) -> None:
        """Give up leadership: wake the first queued caller that waits, as the next leader."""
        nxt = next((q for q in self._queue if q.wake is not None and not q.abandoned), None)
        if nxt is None:
            self._leader = False
            self._cv.notify_all()  # close() waits for the writer to be idle
        else:
            assert nxt.wake is not None
            nxt.wake.release()

    def _fail_queue(self) -> None:
        """After a fail-stop: callers still queued were never written; tell them so."""
        reason = f"journal fail-stopped before this record was written: {self._failed}"
        while self._queue:
            q = self._queue.popleft()
            if q.acked:
                continue  # buffered records already acknowledged: lost, as documented
            q.outcomes = [NotCommitted(reason)] * len(q.items)
            for it in q.items:
                if it.key is not None and self._pending_keys.get(it.key, (None, 0))[0] is q:
                    del self._pending_keys[it.key]
            if q.wake is not None:
                q.wake.release()
        self._cv.notify_all()

    def _take_batch(self) -> list[_Request]:
        batch: list[_Request] = []
        size = records = 0
        while self._queue:
            nxt = self._queue[0]
            if batch and (size + nxt.nbytes > BATCH_BYTES_MAX or records + len(nxt.items) > BATCH_RECORDS_MAX):
                break
            batch.append(self._queue.popleft())
            size += nxt.nbytes
            records += len(nxt.items)
        return batch

    def _settle(self, batch: list[_Request], results: tuple[str, str, int | None]) -> None:
        """Hand out outcomes for a written (or failed) batch; called under the mutex."""
        status, reason, errno_ = results
        for r in batch:
            if r.acked:
                continue
            for k, it in enumerate(r.items):
                if it.key is not None and self._pending_keys.get(it.key, (None, 0))[0] is r:
                    del self._pending_keys[it.key]
                    if status == "ok":
                        self._remember_key(it.key, r.first_seq + k)
        self._cv.notify_all()  # retries waiting on these keys, and close()
        if status == "ok":
            if len(batch) == 1:
                level: Durability = "sync" if batch[0].durability == "sync" else "flush"
            else:
                level = "sync" if any(r.durability == "sync" for r in batch) else "flush"
            for r in batch:
                if r.acked:
                    self._buffered_bytes -= r.nbytes
                else:
                    r.outcomes = [Committed(r.first_seq + k, level) for k in range(len(r.items))]
            return
        # Acknowledged buffered records, in this batch or queued behind it, hold seqs their
        # callers were told: they cannot be renumbered, so such a failure fail-stops.
        lost_buffered = any(r.acked and r.items for r in batch) or any(q.acked and q.items for q in self._queue)
        for r in batch:
            if r.acked:
                continue
            if status in ("rolled_back", "not_written"):
                r.outcomes = [NotCommitted(f"write failed and was rolled back: {reason}", errno_)] * len(r.items)
            else:
                r.outcomes = [
                    AckLost(r.first_seq + k, reason, it.digest, it.key, errno_) for k, it in enumerate(r.items)
                ]
        if status == "rolled_back" and not lost_buffered:
            # Nothing acknowledged was lost: renumber what is still queued and carry on.
            self._next_seq = self._last_seq + 1
            for q in self._queue:
                q.first_seq = self._next_seq  # pending keys point at (request, index): no fix-up
                self._next_seq += len(q.items)
            return
        if self._failed is None:
            if status == "rolled_back":
                reason = f"a write failed after buffered records were acknowledged ({reason}); they are lost"
            self._failed = reason

    def _write_batch(self, batch: list[_Request]) -> tuple[str, str, int | None]:
        """The leader's I/O, outside the mutex. Returns (status, reason, errno)."""
        if len(batch) == 1:
            specs = [it.spec for it in batch[0].items]
            want_sync = batch[0].durability == "sync"
        else:
            specs = [it.spec for r in batch for it in r.items]
            want_sync = any(r.durability == "sync" for r in batch)
        if not specs:
            if want_sync and self._active is not None and self._unsynced:
                assert self._active_header is not None
                pad = self._padding(self._active_size)
                try:
                    if pad:
                        write_all(self._active, pad, self._active_size)
                    self._active.fdatasync()
                except OSError as exc:
                    return ("failed", f"sync failed: {exc}", exc.errno)
                self._active_size += len(pad)
                self._unsynced = False
            return ("ok", "", None)
        first_seq = batch[0].first_seq if batch[0].items else next(r.first_seq for r in batch if r.items)
        assert first_seq == self._last_seq + 1, (first_seq, self._last_seq)
        nbytes = sum(r.nbytes for r in batch)
        try:
            if (
                self._active is not None
                and self._active_count > 0
                and (self._active_size + nbytes > self.options.segment_size_bytes)
            ):
                self._seal_active()
            if self._active is None:
                self._start_segment(first_seq)
        except OSError as exc:
            # Nothing of this batch was written, but a seal or a new segment may be half done:
            # stop until recovery has looked at the files.
            return ("not_written", f"segment roll-over failed: {exc}", exc.errno)
        assert self._active is not None and self._active_header is not None
        if len(specs) == 1:
            # One frame: a struct pack and a hash beat the setup of a batch call into C.
            spec = specs[0]
            flags = spec.flags | fmt.FLAG_COMMIT if want_sync else spec.flags
            data = fmt.encode_frame(first_seq, flags, spec.raw_len, spec.stored, self._active_header.salt)
        else:
            data = fmt.encode_batch(first_seq, specs, self._active_header.salt, commit_last=want_sync)
        start = self._active_size
        data_end = start + len(data)
        if want_sync and self.options.sector_bytes:
            data += self._padding(data_end, first_seq + len(specs) - 1)
        try:
            if len(data) > data_end - start or len(specs) > 1:
                # Several frames: the first frame's header goes last. A lock-free reader then
                # sees none of the batch until all of it is there, so a write that fails part
                # way and is rolled back never showed it a record that will not exist.
                view = memoryview(data)
                write_all(self._active, view[fmt.FRAME_HEADER_SIZE_BYTES :], start + fmt.FRAME_HEADER_SIZE_BYTES)
                write_all(self._active, view[: fmt.FRAME_HEADER_SIZE_BYTES], start)
            else:
                write_all(self._active, data, start)
        except OSError as exc:
            return self._roll_back(start, f"write failed: {exc}", exc.errno)
        self._unsynced = True
        if want_sync:
            try:
                self._active.fdatasync()
            except OSError as exc:
                return ("failed", f"fdatasync failed: {exc}", exc.errno)
            self._unsynced = False
        end = start + len(data)
        if data_end >= self._next_index_at:
            offset = start
            for i, spec in enumerate(specs):
                self._note_frame(first_seq + i, offset)
                offset += fmt.FRAME_HEADER_SIZE_BYTES + len(spec.stored)
        self._active_size = end
        self._active_count += len(specs)
        self._last_seq = first_seq + len(specs) - 1
        return ("ok", "", None)

    def _padding(self, end: int, seq: int | None = None) -> bytes:
        """A padding frame that makes ``end`` a multiple of sector_bytes (b"" if it is one)."""
        sector = self.options.sector_bytes
        if not sector or end % sector == 0:
            return b""
        assert self._active_header is not None
        gap = -end % sector
        if gap < fmt.FRAME_HEADER_SIZE_BYTES:
            gap += sector
        pad_len = gap - fmt.FRAME_HEADER_SIZE_BYTES
        frame = fmt.encode_frame(
            self._last_seq if seq is None else seq,
            fmt.KIND_PADDING,
            pad_len,
            bytes(pad_len),
            self._active_header.salt,
        )
        assert (end + len(frame)) % sector == 0
        return frame

    def _roll_back(self, start: int, reason: str, errno_: int | None) -> tuple[str, str, int | None]:
        assert self._active is not None
        try:
            self._active.truncate(start)
            self._active.fdatasync()
        except OSError as exc:
            return ("failed", f"{reason}; rollback failed too: {exc}", errno_)
        return ("rolled_back", reason, errno_)

    def _seal_active(self) -> None:
        assert self._active is not None and self._active_header is not None and self._active_count > 0
        base = self._active_header.base_seq
        payload = fmt.encode_seal_payload(
            self._active_count,
            base,
            self._last_seq,
            self.options.index_interval_bytes,
            self._index,
            self._active_size,
            sorted(
                (seq, key.encode("utf-8", "surrogateescape"))
                for key, seq in self._keys.items()
                if base <= seq <= self._last_seq
            ),
        )
        frame = fmt.encode_frame(self._last_seq, fmt.KIND_SEAL, len(payload), payload, self._active_header.salt)
        write_all(self._active, frame, self._active_size)
        self._active.fdatasync()
        self._unsynced = False
        self._active.close()
        self._active = None
        self._active_header = None

    def _start_segment(self, base_seq: int) -> None:
        self._segment_number += 1
        header = new_header(self._journal_id, self._segment_number, base_seq)
        self._active = create_segment(self._fs, self.path, header, self.options.sector_bytes)
        self._active_header = header
        self._active_size = fmt.SEGMENT_HEADER_SIZE_BYTES + len(header_padding(header, self.options.sector_bytes))
        self._active_count = 0
        self._index = []
        self._next_index_at = self._active_size


def open(  # noqa: A001 - the public contract is journal.open
    path: str | os.PathLike[str], create: bool = False, readonly: bool = False, **kwargs: Any
) -> Journal:
    """Open the journal in directory ``path``; see Journal.open for the options."""
    return Journal.open(path, create=create, readonly=readonly, **kwargs)


__all__ = ["Journal", "JournalError", "Options", "open"]
