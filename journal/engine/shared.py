"""Shared-writer mode: several processes appending to one journal, one batch at a time.

``journal.open(path, writer="shared")`` for runtimes with two processes on one session (a UI and
a background resume). The exclusive mode (the default) holds the writer lock for the life of the
handle; a shared writer holds it only for a batch:

1. take the lock (the OS lock on ``LOCK``; waiting up to ``shared_lock_timeout_s``, with short
   back-off, since a holder keeps it for one write and at most one fdatasync);
2. catch up: read what other processes appended since this handle last held the lock (the
   frames after its last known offset, or the new live segment if another process rolled
   over), so seqs stay contiguous and idempotency keys written by the others are known. The
   tail after those frames goes through the tail classifier like at open: a process killed
   mid-write left a torn tail, which is quarantined and cut here (the lock is held, so no
   writer is in the middle of it);
3. give the batch its seqs (assigned now, not when the caller queued: another process may
   have taken the ones this handle would have guessed), turn records whose idempotency key
   another process already wrote into duplicates, write and sync as asked;
4. release.

The lock file's note says whether its last holder finished its batch ("clean") or may have died
inside it ("writing"). After a death, the next holder fdatasyncs the live segment before it
appends: recovery's durable-point rule (a commit-marked frame followed by a higher seq proves
the commit's fdatasync returned) holds across processes only if nobody writes after a commit
frame whose fdatasync may not have completed, which is the rule a writer's open keeps too.

A failed fdatasync is fail-stop for every writer, not only the one it failed for: its holder
leaves the note "failed", and every other shared writer then refuses to append (NotCommitted,
then JournalFailStoppedError) until it reopens the journal; a writer's open recovers it and
clears the note.

There is no "buffered" level in shared mode: a record other processes cannot see does not have
its seq yet. Buffered appends are written at once, as "flush" (the outcome says so).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import xxhash

from journal.api import LOCK_FILE, RecoveryReport
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.reader import decode_payload
from journal.engine.recovery import quarantine_span
from journal.engine.segment import SegmentName, list_segments, read_header, read_seal, read_start
from journal.errors import CorruptionError, JournalError, present
from journal.fs import FileSystem, Lock, pread_upto

if TYPE_CHECKING:
    from journal.engine.core import Journal

WRITER_MODES = ("exclusive", "shared")
SHARED_LOCK_TIMEOUT_S_DEFAULT = 30.0  # how long a shared batch waits for the lock before NotCommitted
SHARED_LOCK_TIMEOUT_S_MAX = 3600.0
LOCK_WAIT_MIN_S = 0.00005  # back-off between tries for the lock: from 50 us ...
LOCK_WAIT_MAX_S = 0.002  # ... doubling up to 2 ms (a holder keeps it for one write + fdatasync)
NOTE_WRITING = "writing"
NOTE_CLEAN = "clean"
NOTE_FAILED = "failed"  # a holder's fdatasync or rollback failed: fail-stop until a writer's open
FAILED_REASON = (
    "another writer's fdatasync failed on this journal (the kernel may have dropped what it wrote): "
    "nothing more is appended until the journal is reopened, which recovers it"
)


def note(state: str) -> bytes:
    """This process's note for the lock file in shared mode."""
    return f"{os.getpid()} shared {state}\n".encode()


def note_state(note: bytes) -> str | None:
    """The state word of a lock file's note ("<pid> shared <state>"), or None if it has none."""
    fields = note.split()
    return fields[2].decode("ascii", "replace") if len(fields) >= 3 and fields[1] == b"shared" else None


def take_lock(fs: FileSystem, dirpath: str, timeout_s: float) -> Lock | None:
    """The writer lock, waited for with back-off up to ``timeout_s``; None if not had by then."""
    path = os.path.join(dirpath, LOCK_FILE)
    deadline = time.monotonic() + timeout_s
    wait = LOCK_WAIT_MIN_S
    while True:
        lock = fs.try_lock(path)
        if lock is not None:
            return lock
        if time.monotonic() >= deadline:
            return None
        time.sleep(wait)
        wait = min(wait * 2, LOCK_WAIT_MAX_S)


def sealed_keys(fs: FileSystem, dirpath: str, seg: SegmentName) -> list[tuple[int, str]]:
    """(seq, idempotency key) of every keyed record of a sealed segment, from its footer."""
    f = fs.open_read(os.path.join(dirpath, seg.name))
    try:
        header = read_header(f, seg.name)
        seal = read_seal(f, header, seg.name, f.size())
    finally:
        f.close()
    if seal is None:
        raise CorruptionError(seg.name, 0, None, "segment before the live one has no valid seal footer")
    return [(seq, key.decode("utf-8", "surrogateescape")) for seq, key in seal.keys]


def learn_digests(w: Journal, keys: list[str]) -> None:
    """With the lock held: the payload digest of every record that already holds one of
    ``keys``, read from the journal. Read even where ``w`` has a digest noted: a footer or an
    open gives keys and seqs only, and a digest noted when this handle queued its own record
    under the key carries a seq guessed before the catch-up, which another process's record
    may hold. Only retries pay for it (a key already in the journal)."""
    for key in keys:
        seq = w._keys.get(key)
        if seq is None:
            continue
        rec = w._peek(seq)
        if rec is not None and rec.key == key:
            w._note_digest(key, seq, xxhash.xxh64_intdigest(rec.payload))


def catch_up(w: Journal, dirty: bool) -> None:
    """With the lock held: take in what other processes appended since handle ``w`` last held
    it. ``dirty``: the last holder may have died inside its batch."""
    segments = list_segments(w._fs, w.path)
    if not segments:
        raise JournalError(f"journal {w.path!r} lost its segments while shared writers had it open")
    if segments[0].base_seq > w._first_seq:
        # An exclusive writer dropped a prefix between this handle's batches: begin where its
        # start marker says, and forget the keys of the records it dropped (a retry of one is
        # a new record, as on the handle that dropped them).
        marker = read_start(w._fs, w.path)
        if marker is not None and marker.first_seq > w._first_seq:
            with w._mu:
                w._start, w._first_seq = marker, marker.first_seq
                for key in [k for k, seq in w._keys.items() if seq < marker.first_seq]:
                    del w._keys[key]
                    w._key_digests.pop(key, None)
            with w._get_mu:
                w._segments.close()
    last = segments[-1]
    header = w._active_header
    if header is None or last.base_seq != header.base_seq:
        if header is None and last.base_seq <= w._last_seq:
            return  # still the sealed segment this handle knows; its next batch rolls over
        # The live segment was sealed (by another process) and perhaps new ones were made.
        # The key tables of every segment sealed since this handle last looked make retries
        # dedupe as in one process; then the last segment is taken as at open (at most one
        # segment of bytes).
        if w._active is not None:
            w._active.close()
            w._active = None
        since = header.base_seq if header is not None else w._last_seq + 1
        for seg in segments[:-1]:
            if seg.base_seq >= since:
                for seq, key in sealed_keys(w._fs, w.path, seg):
                    w._keys[key] = seq
        w._adopt_live(segments, RecoveryReport())  # fdatasyncs what it found
        w._unsynced = False
        return
    f = present(w._active, "a live header comes with its open file")
    start = w._active_size
    src = tail.FileBytes(f)
    size = src.size
    if not dirty and (size == start or not any(pread_upto(f, fmt.FRAME_HEADER_SIZE_BYTES, start))):
        # Its last holder finished its batch (or rolled it back), and nothing starts where this
        # handle's frames end: zeros reserved ahead, nothing written since.
        w._reserved_end = size
        return
    # What the others wrote, a window at a time (a batch can be as large as the segment): each
    # keyed record's key and digest (a retry under its key with another event is a conflict)
    # are taken while its window is at hand, and kept only once the tail is not refused.
    keyed: list[tuple[str, int, int]] = []

    def visit(win: tail.Window) -> None:
        for frame in win.res.frames:
            if frame.flags & fmt.FLAG_KEYED and frame.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA:
                rec = decode_payload(frame, win.buf, win.offset, last.name, fmt.FRAME_STORED_BYTES_LIMIT, w._dicts)
                key = present(rec.key, "a keyed frame has a key")
                keyed.append((key, frame.seq, xxhash.xxh64_intdigest(rec.payload)))

    res = tail.scan_segment(src, start, header.salt, w._last_seq + 1, visit)
    data_frames = fmt.record_frames(res.frames)
    last_seq = data_frames[-1].seq if data_frames else w._last_seq
    found = tail.classify(res, tail.Span(src, res.stop_offset), header, last.name, f.path, last_seq=last_seq)
    found.raise_if_refused()
    for frame in data_frames:
        w._note_frame(frame.first_seq, frame.offset)
    for key, seq, digest in keyed:
        w._keys[key] = seq
        w._note_digest(key, seq, digest)
    w._active_count += sum(fr.records for fr in data_frames)
    w._last_seq = last_seq
    w._active_size = res.stop_offset
    w._reserved_end = size
    if res.frames:
        w._unsynced = True  # bytes this handle has not seen synced
    if found.kind == tail.SEALED:
        # Sealed by a process that died before it made the next segment: roll over here.
        f.close()
        w._active = None
        w._active_header = None
        return
    if found.kind == tail.TORN:
        # A process died in the middle of a write (the lock is ours: nobody else is in it).
        quarantine_span(w._fs, w.path, last.name, src, res.stop_offset, max(src.size, res.stop_offset))
        f.truncate(res.stop_offset)
        w._reserved_end = res.stop_offset
        dirty = True
    if dirty:
        f.fdatasync()
        w._unsynced = False


def lock_busy_reason(timeout_s: float, owner: int | None) -> str:
    holder = f"process {owner}" if owner is not None else "another process"
    return (
        f"the journal's writer lock was held by {holder} for more than {timeout_s} s "
        "(shared_lock_timeout_s); nothing was written: retry, or find the process that holds it"
    )

