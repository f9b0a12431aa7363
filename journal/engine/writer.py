"""The write path: group commit, the three outcomes, rollback and fail-stop, segment roll-over.

The Journal (journal/engine/core.py) is a Writer: this class holds the methods that put bytes into
the live segment, and the Journal the ones that open, recover and read. Life of an append is
told at the top of journal/engine/core.py; docs/GUARANTEES.md says what each outcome promises.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence

from journal.api import LOCK_FILE
from journal.engine import format as fmt
from journal.engine import shared
from journal.engine.dictionary import keep_dictionary_file
from journal.engine.encoding import (
    FRAME_WRITE_SYNC,
    Encoded,
    FrameWriteSync,
    LoneCompression,
    alone_spec,
    frame_specs,
    lone_compression,
)
from journal.engine.options import Options
from journal.engine.segment import create_segment, header_padding, new_header
from journal.errors import (
    CorruptionError,
    IdempotencyConflictError,
    InvariantError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    ReadOnlyError,
    present,
)
from journal.fs import (
    File,
    FileSystem,
    OsFile,
    SyncError,
    plain_os_file,
    raise_for_write_sync,
    write_all,
    write_all_synced,
)
from journal.outcomes import AckLost, Committed, Durability, NotCommitted, Outcome

BATCH_BYTES_MAX = 4 * 1024 * 1024  # one group-commit write never carries more than this
BATCH_RECORDS_MAX = 4096
BUFFER_BYTES_MAX = 1024 * 1024  # buffered appends are written once this much is waiting
KEYS_REMEMBERED_MAX = 1_000_000  # idempotency keys kept in memory (live segment and recent)

# (status, reason, errno) of a write: "ok", "rolled_back" (nothing of it is in the file),
# "not_written" (a roll-over failed before it) or "failed" (fail-stop: unknown what is durable).
Results = tuple[str, str, "int | None"]
WRITTEN: Results = ("ok", "", None)


class KeyDigestUnknown(Exception):
    """_submit found a remembered key whose record's digest it does not know: its caller reads
    the record and retries. A signal between the two, never raised out of the journal."""


class Request:
    """One caller's records in the queue; ``wake`` parks the caller until it is done or leads."""

    __slots__ = (
        "abandoned", "acked", "conflicts", "durability", "first_seq", "full", "items", "late", "nbytes", "outcomes",
        "seal", "wake",
    )

    def __init__(self, items: list[Encoded], first_seq: int, durability: Durability) -> None:
        self.items = items
        self.first_seq = first_seq
        self.durability = durability
        self.nbytes = items[0].nbytes if len(items) == 1 else sum(it.nbytes for it in items)
        self.outcomes: list[Outcome] | None = None
        self.acked = durability == "buffered"  # the caller already holds Committed(buffered)
        self.wake: threading.Lock | None = None
        self.abandoned = False  # its caller was interrupted while waiting
        # Shared mode: records whose key another process wrote first (position in ``full`` ->
        # that record's seq); ``items`` then holds only the others until the outcomes are set.
        self.late: dict[int, int] | None = None
        self.full: list[Encoded] | None = None
        self.conflicts: dict[int, str] | None = None  # of those, the ones that hold another event
        self.seal = False  # Journal.seal(): no records; the leader seals the live segment, alone


def chunks(
    items: list[Encoded], room_bytes: int = BATCH_BYTES_MAX, segment_room_bytes: int = BATCH_BYTES_MAX
) -> Iterator[list[Encoded]]:
    """Split an append_many into requests of at most BATCH_RECORDS_MAX records and, unless one
    record alone is larger, BATCH_BYTES_MAX bytes, so that no write exceeds the batch bound.

    A request also ends where the segment it goes into is full: ``room_bytes`` is what the live
    segment still takes, ``segment_room_bytes`` what a new one takes. The leader rolls over
    before a request that does not fit (_write_batch), so the first request fills the live
    segment up to its size limit and each later one a new segment: roll-overs fall at the limit,
    and no segment grows past it (a record larger than a whole segment gets one to itself).
    """
    room = room_bytes
    chunk: list[Encoded] = []
    size = 0
    i, n = 0, len(items)
    while i < n:
        # A unit: one record, or every record of a block frame (never split between requests).
        block = items[i].block
        j = i + (block.spec.records if block is not None else 1)
        nbytes = items[i].nbytes  # a block's first record carries the whole frame's bytes
        if chunk and (size + nbytes > min(BATCH_BYTES_MAX, room) or len(chunk) + j - i > BATCH_RECORDS_MAX):
            yield chunk
            room -= size  # what this request takes of the segment it goes into
            chunk, size = [], 0
        if not chunk and nbytes > room:
            room = segment_room_bytes  # the leader rolls over before this request
        chunk.extend(items[i:j])
        size += nbytes
        i = j
    if chunk:
        yield chunk


class Writer:
    """The write half of a Journal. Its state is set up by Journal.__init__; the mutex guards
    the queue, the seqs and the flags, and only the leader touches the live segment's file."""

    path: str
    readonly: bool
    shared: bool  # shared-writer mode (journal/engine/shared.py)
    shared_lock_timeout_s: float
    options: Options
    _fs: FileSystem
    _mu: threading.Lock
    _cv: threading.Condition
    _cv_waiting: int  # callers in _cv_wait now (under the mutex)
    _queue: deque[Request]
    _leader: bool
    _failed: str | None
    _closed: bool
    _journal_id: bytes
    _segment_number: int
    _active: File | None
    _active_header: fmt.SegmentHeader | None
    _active_size: int  # where the next frame goes: the end of the last record, seal or padding
    _reserved_end: int  # the live segment's file size: _active_size plus zeros set aside ahead
    _reserve_refused: bool  # the file system refused to grow the live segment: stop trying
    _active_count: int
    _index: list[tuple[int, int]]
    _next_index_at: int
    _last_seq: int
    _next_seq: int
    _buffered_bytes: int
    _unsynced: bool
    # (the live segment's file, an offset): every byte of that file before the offset had been
    # fdatasync'd (by this handle, the call returned) and nothing was written since at or after
    # it. A frame written there may carry FLAG_AFTER_SYNC. None when that is not known (at open,
    # after a failed fdatasync, after a seal): a frame then goes without the flag, which claims
    # nothing (a missing flag only keeps recovery from proving an earlier batch durable).
    _synced_at: tuple[File, int] | None = None
    _keys: dict[str, int]
    _segment_room_bytes: int  # a new segment's room for frames (its size less header and padding)
    _pending_keys: dict[str, tuple[Request, int]]
    _key_digests: dict[str, tuple[int, int]]  # key -> (seq, payload digest) where known here
    _request_bytes_max: int  # what one request carries at most: a batch, and no more than a new segment holds
    _dict_checked_seq: int  # the last seq when the dictionary's file was last found whole (Journal.__init__)
    _dict_file_mu: threading.Lock  # one check (and rewrite) of that file at a time

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _after_sync_flag(self, active: File, start: int) -> int:
        """FLAG_AFTER_SYNC if a frame written at ``start`` of ``active`` may carry it, else 0.

        Only when this handle itself fdatasync'd every byte before ``start`` and wrote nothing
        since (``_synced_at``), in a segment of a format version that holds the flag. A shared
        writer never sets it: other processes write and sync the same file between its batches.
        """
        synced = self._synced_at
        header = self._active_header
        if (
            synced is None
            or synced[0] is not active
            or synced[1] != start
            or self.shared
            or header is None
            or header.version < fmt.AFTER_SYNC_FORMAT_VERSION_MIN
        ):
            return 0
        return fmt.FLAG_AFTER_SYNC

    def _note_frame(self, seq: int, offset: int) -> None:
        if offset >= self._next_index_at:
            self._index.append((seq, offset))
            self._next_index_at = offset + self.options.index_interval_bytes

    def _reserve(self, end: int) -> None:
        """Set the live segment's size past ``end`` before a write that would grow it.

        The data's own fdatasync makes the new size durable with it; until then a crash leaves
        the old size or zeros, both of which recovery already reads as "nothing written here".
        If the file system refuses (a full disk), the write grows the file itself as it would
        without a reservation, and reservation stops for this segment.
        """
        if not (self._active is not None and end > self._reserved_end):
            raise InvariantError('self._active is not None and end > self._reserved_end')
        step = self.options.reserve_bytes
        if not step or self._reserve_refused:
            return
        want = max(end, self._active_size + step)
        want += -want % fmt.RESERVE_ROUND_BYTES
        want = max(end, min(want, self.options.segment_size_bytes))  # never past a full segment
        try:
            self._active.truncate(want)
        except OSError:
            # Whatever size the failed call left is cut at seal and close, which look at the
            # file's real size rather than at _reserved_end.
            self._reserve_refused = True
            return
        self._reserved_end = want

    def _unreserve(self) -> bool:
        """Cut whatever follows the last frame off the live segment (seal and close): a segment at
        rest ends at its last frame. Not synced here. True if it cut something."""
        if not (self._active is not None):
            raise InvariantError('self._active is not None')
        cut = self._active.size() > self._active_size  # the file's size, not what we believe it is
        if cut:
            self._active.truncate(self._active_size)
        self._reserved_end = self._active_size
        return cut

    def _append_buffered(self, enc: Encoded) -> Outcome | None:
        """A buffered append: a seq and a place at the end of the queue, nothing more.

        Consecutive buffered appends share one queued request, so a bulk load costs a list
        append per record. None when the general path must run (closed, failed, buffer full).
        """
        nbytes = enc.nbytes
        with self._mu:
            if self._closed or self._failed is not None or self.readonly or self.shared:
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
                and tail.nbytes + nbytes <= self._request_bytes_max  # a batch, and at most a new segment
            ):
                if not (tail.first_seq + len(tail.items) == seq):
                    raise InvariantError('tail.first_seq + len(tail.items) == seq')
                tail.items.append(enc)
                tail.nbytes += nbytes
            else:
                self._queue.append(Request([enc], seq, "buffered"))
            self._buffered_bytes += nbytes
            return Committed(seq, "buffered")

    def _append_alone(self, enc: Encoded, level: Durability) -> Outcome | None:
        """One unkeyed record at "flush" or "sync", with one hold of the mutex; None when the
        general path must run (closed, failed, read-only, sector padding or roll-over due).

        Contended, it joins the queue, its record (if Journal.append deferred it) compressed
        with the others' by the batch it is written in (a block frame). Uncontended, it leads at
        once and writes one frame with as little Python as possible: after an fdatasync the
        CPU's caches are cold, and every instruction on this path then costs several times what
        it does in a warm loop.
        Failures go through the group-commit settle step, so their outcomes are exactly those
        of a one-record batch.
        """
        spec = enc.spec
        queued: Request | None = None
        with self._mu:
            if self._failed is not None or self._closed or self.readonly or self.shared:
                return None  # _submit raises the right error (or, shared, takes the lock per batch)
            active = self._active
            if self._leader or self._queue:
                # Contended, or buffered records wait: join the queue under this same hold of
                # the mutex (with many threads a second acquisition costs more than the rest
                # of the call), and lead if nobody does.
                queued = Request([enc], self._next_seq, level)
                self._next_seq += 1
                leading = self._enqueue(queued)
            elif (
                self.options.sector_bytes
                or active is None
                or (
                    self._active_count
                    and self._active_size + fmt.FRAME_HEADER_SIZE_BYTES + len(spec.stored)
                    > self.options.segment_size_bytes
                )
            ):
                return None
            else:
                self._leader = True
                seq = self._next_seq
                self._next_seq = seq + 1
        if queued is not None:
            return self._await_turn(queued, leading)[0]
        active = present(active, "a lone append leads with a live segment")
        header = present(self._active_header, "a live segment has a header")
        sync = level == "sync"
        start = self._active_size
        # Until the write begins nothing is in the file: a failure or an interrupt before it
        # (while the record is compressed, say) gives the seq back and ends the leader's role.
        results: Results = ("rolled_back", "compressing or framing the record failed before its write", None)
        outcome: Outcome | None = None
        try:
            lone = None
            call = FRAME_WRITE_SYNC
            if enc.deferred and sync and call is not None and plain_os_file(active):
                lone = lone_compression(len(enc.raw), self.options)
                if lone is not None:
                    # Compressed and framed by the C call, in the release of the GIL its write
                    # and fdatasync make anyway (native/zstd_held.c, frame_write_sync): the
                    # frame below, made while other threads run Python.
                    flags = spec.flags | self._after_sync_flag(active, start) | fmt.FLAG_COMMIT
                    results = ("failed", "interrupted before the write finished", None)
                    results, end = self._write_lone_synced(call, active, enc.raw, seq, flags, header.salt, start, lone)
            if lone is None:
                if enc.deferred:
                    # Alone after all: compressed now, as the leader. Callers that come meanwhile
                    # queue, and the next batch compresses their records together.
                    spec = enc.spec = alone_spec(enc, self.options)
                    enc.deferred = False
                flags = spec.flags | self._after_sync_flag(active, start)
                flags = flags | fmt.FLAG_COMMIT if sync else flags
                data = fmt.encode_frame(seq, flags, spec.raw_len, spec.stored, header.salt, spec.dict_id)
                results = ("failed", "interrupted before the write finished", None)
                results = self._write_frames(active, data, start, sync, header_last=False)
                end = start + len(data)
            if results is WRITTEN:
                self._advance(seq, (spec,), 1, start, end)
                outcome = Committed(seq, level)
        finally:
            with self._mu:
                if outcome is None:
                    req = Request([enc], seq, level)
                    self._settle([req], results)
                    if self._failed is not None:
                        self._fail_queue()
                    outcome = present(req.outcomes, "a settled request has outcomes")[0]
                if self._queue:
                    self._hand_off()
                else:
                    self._leader = False
                    if self._cv_waiting:  # close(), or a keyed retry: nobody else waits on _cv
                        self._cv.notify_all()
        return outcome

    def _submit(
        self, items: list[Encoded], durability: Durability, vouched: frozenset[tuple[str, int]] | None = None
    ) -> list[Outcome]:
        """Queue ``items`` (or answer them as duplicates) and wait for their outcomes.

        A key remembered with another payload raises IdempotencyConflictError before anything
        is queued. ``vouched``: the (key, seq) pairs whose record the caller read and found to
        hold the same event (Journal._check_keys, outside the mutex); with it, a key whose
        record's digest is not known here raises KeyDigestUnknown so the caller reads it first.
        """
        if self.readonly:
            raise ReadOnlyError("append")
        if self.shared and durability == "buffered":
            durability = "flush"  # shared mode: a record gets its seq only when it is written
        with self._mu:
            keyed = any(it.key is not None for it in items)
            # A retry of a record that is still on its way waits for its outcome: answering
            # "duplicate" now could acknowledge a record that is then rolled back.
            while keyed and any(it.key in self._pending_keys for it in items if it.key is not None):
                self._cv_wait()
            self._check_open()
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            dupes: dict[int, Committed] = {}
            fresh = items
            if keyed:
                fresh = []
                for i, item in enumerate(items):
                    if item.key is not None and item.key in self._keys:
                        self._check_same(item, self._keys[item.key], vouched)
                        dupes[i] = Committed(self._keys[item.key], durability, True, "idempotency key matched")
                    else:
                        fresh.append(item)
            req = Request(fresh, self._next_seq, durability)
            self._next_seq += len(fresh)
            for k, item in enumerate(fresh):
                if item.key is not None:
                    self._note_digest(item.key, req.first_seq + k, item.digest)
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
                req = Request([], self._next_seq, "flush")
            elif not fresh and not self._queue and not self._leader and (durability == "flush" or not self._unsynced):
                return self._merge(items, [], dupes)  # nothing to write or sync, nothing in flight
            else:
                carried = None
            leading = self._enqueue(req)
        self._await_turn(req, leading)
        if not (req.outcomes is not None):
            raise InvariantError('req.outcomes is not None')
        answers: dict[int, Outcome] = dict(dupes)
        if dupes and self._failed is not None:
            # The write this call waited on failed: what the duplicates point at is unknown too.
            failed = self._failed
            answers = {i: AckLost(d.seq, failed, items[i].digest, items[i].key) for i, d in dupes.items()}
        return self._merge(items, carried if carried is not None else req.outcomes, answers)

    def _enqueue(self, req: Request) -> bool:
        """Queue ``req`` under the mutex; True if its caller leads, else it gets a lock to park on."""
        self._queue.append(req)
        if not self._leader:
            self._leader = True
            return True
        req.wake = threading.Lock()
        req.wake.acquire()
        return False

    def _await_turn(self, req: Request, leading: bool) -> list[Outcome]:
        """Park a queued caller until its outcome is set or it is made leader; lead if so."""
        if not leading:
            if not (req.wake is not None):
                raise InvariantError('req.wake is not None')
            try:
                req.wake.acquire()  # released when our outcome is set, or when we are made leader
            except BaseException:
                self._abandon(req)
                raise
        if req.outcomes is None:
            self._lead(req)
        if not (req.outcomes is not None and len(req.outcomes) == len(req.items)):
            raise InvariantError('req.outcomes is not None and len(req.outcomes) == len(req.items)')
        return req.outcomes

    def _check_same(self, item: Encoded, seq: int, vouched: frozenset[tuple[str, int]] | None) -> None:
        """Under the mutex: ``item``'s key is remembered at ``seq``; refuse it if that record holds
        a different payload. Digests are known for keys appended through this handle (noted at
        submit, with the seq they were given); keys found at open, or whose record was renumbered
        after a rollback, are checked by the caller reading the record (``vouched``)."""
        key = present(item.key, "a keyed item has a key")
        if vouched is not None and (key, seq) in vouched:
            return
        known = self._key_digests.get(key)
        if known is not None and known[0] == seq:
            if known[1] != item.digest:
                raise IdempotencyConflictError(key, seq)
            return
        if vouched is not None:
            raise KeyDigestUnknown(key)
        # No caller that reads records: the key is taken as a retry (a duplicate), as before.

    def _note_digest(self, key: str, seq: int, digest: int) -> None:
        self._key_digests.pop(key, None)  # re-inserted last: the oldest are forgotten first
        self._key_digests[key] = (seq, digest)
        if len(self._key_digests) > KEYS_REMEMBERED_MAX:
            del self._key_digests[next(iter(self._key_digests))]

    def _remember_key(self, key: str, seq: int) -> None:
        self._keys[key] = seq
        if len(self._keys) > KEYS_REMEMBERED_MAX:
            del self._keys[next(iter(self._keys))]  # forget the oldest

    def _abandon(self, req: Request) -> None:
        """A waiting caller was interrupted (Ctrl-C): never make it the leader again.

        Its records stay queued and may still be written by the next leader: to its caller the
        outcome is unknown, as after any interrupted call. If it had just been made leader,
        leadership passes on so that the writer never waits for a thread that left.
        """
        with self._mu:
            req.abandoned = True
            if not (req.wake is not None):
                raise InvariantError('req.wake is not None')
            woken = req.wake.acquire(blocking=False)
            if woken and req.outcomes is None:
                self._hand_off()

    @staticmethod
    def _merge(items: list[Encoded], fresh_outcomes: list[Outcome], dupes: Mapping[int, Outcome]) -> list[Outcome]:
        if not dupes:
            if not (len(fresh_outcomes) == len(items)):
                raise InvariantError('len(fresh_outcomes) == len(items)')
            return fresh_outcomes
        it = iter(fresh_outcomes)
        merged = [dupes[i] if i in dupes else next(it) for i in range(len(items))]
        if not (len(merged) == len(items)):
            raise InvariantError('len(merged) == len(items)')
        return merged

    def _lead(self, req: Request) -> None:
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
            results: Results = ("failed", "interrupted before the write finished", None)
            try:
                results = self._shared_write(batch) if self.shared else self._write_batch(batch)
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

    def _cv_wait(self) -> None:
        """Wait on _cv (the mutex held), counted in _cv_waiting: a lone append that leaves the
        writer idle notifies only when someone waits (Condition.notify_all costs a lone durable
        append's Python more than anything else it does after its write)."""
        self._cv_waiting += 1
        try:
            self._cv.wait()
        finally:
            self._cv_waiting -= 1

    def _hand_off(self) -> None:
        """Give up leadership: wake the first queued caller that waits, as the next leader."""
        nxt = next((q for q in self._queue if q.wake is not None and not q.abandoned), None)
        if nxt is None:
            self._leader = False
            self._cv.notify_all()  # close() waits for the writer to be idle
        else:
            if not (nxt.wake is not None):
                raise InvariantError('nxt.wake is not None')
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

    def _take_batch(self) -> list[Request]:
        """The front of the queue, bounded by the batch limits and by the room left in the live
        segment (a batch that does not fit starts a new one, and then fills that one at most)."""
        batch: list[Request] = []
        size = records = 0
        if self._active is not None and self._active_count:
            room = self.options.segment_size_bytes - self._active_size
        else:
            room = self._segment_room_bytes
        while self._queue:
            nxt = self._queue[0]
            if nxt.seal or (batch and batch[0].seal):
                # A seal goes alone: every record queued before it lands in the segment it ends,
                # every record after it in the next one.
                if not batch:
                    batch.append(self._queue.popleft())
                break
            if not batch and nxt.nbytes > room:
                room = self._segment_room_bytes  # it rolls over first: a new segment's room
            limit = min(BATCH_BYTES_MAX, room)
            if batch and (size + nxt.nbytes > limit or records + len(nxt.items) > BATCH_RECORDS_MAX):
                break
            batch.append(self._queue.popleft())
            size += nxt.nbytes
            records += len(nxt.items)
        return batch

    def _settle(self, batch: list[Request], results: Results) -> None:
        """Hand out outcomes for a written (or failed) batch; called under the mutex."""
        self._settle_batch(batch, results)
        for r in batch:
            if r.late is not None and r.full is not None:
                # Shared mode: put back the records another process had written under their key.
                # They are as durable as this batch got: if its write or fdatasync failed, what
                # they reached is unknown too (as for a duplicate in exclusive mode).
                fresh = iter(present(r.outcomes, "a settled request has outcomes"))
                r.outcomes = [
                    self._late_outcome(r, i, r.late[i], results) if i in r.late else next(fresh)
                    for i in range(len(r.full))
                ]
                r.items, r.full, r.late, r.conflicts = r.full, None, None, None

    @staticmethod
    def _late_outcome(r: Request, i: int, seq: int, results: Results) -> Outcome:
        """The outcome of record ``i`` of ``r``, which another process had written at ``seq``."""
        status, reason, errno_ = results
        item = present(r.full, "a request with late records keeps them all")[i]
        if r.conflicts and i in r.conflicts:
            return NotCommitted(r.conflicts[i])
        if status != "ok":
            return AckLost(seq, reason, item.digest, item.key, errno_)
        return Committed(seq, r.durability, True, "idempotency key matched (written by another process)")

    def _settle_batch(self, batch: list[Request], results: Results) -> None:
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
            if status == "busy":
                r.outcomes = [NotCommitted(reason, errno_)] * len(r.items)
            elif status in ("rolled_back", "not_written"):
                r.outcomes = [NotCommitted(f"write failed and was rolled back: {reason}", errno_)] * len(r.items)
            else:
                r.outcomes = [
                    AckLost(r.first_seq + k, reason, it.digest, it.key, errno_) for k, it in enumerate(r.items)
                ]
        if status in ("rolled_back", "busy") and not lost_buffered:
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

    def _write_batch(self, batch: list[Request]) -> Results:
        """The leader's I/O for a batch, outside the mutex. Returns (status, reason, errno)."""
        if batch[0].seal:
            return self._seal_now()
        # Records appended together may share block frames: those an append_many packed, and runs
        # of buffered records and of the records of callers queued for this group commit, which
        # meet here (one write, so one fate, even across requests).
        # Only a live segment of format version 2 takes them (one of version 1 keeps its
        # version's frames until it rolls over).
        header = self._active_header
        blocks = header is None or header.version >= fmt.BLOCK_FORMAT_VERSION_MIN
        if len(batch) == 1:
            items = batch[0].items
            want_sync = batch[0].durability == "sync"
        else:
            items = [it for r in batch for it in r.items]
            want_sync = any(r.durability == "sync" for r in batch)
        # Callers parked until this write returns (sync or flush appends, not yet acknowledged):
        # the blocks made of their records here are on their path, and compressed faster.
        waited = any(not r.acked and r.items for r in batch)
        try:
            specs = frame_specs(items, self.options, blocks, waited) if items else []
        except InvariantError:
            raise
        except Exception as exc:
            # The deferred records' compression failed (MemoryError, a zstd error) before
            # anything was written: the batch is rolled back, and the journal fail-stops only
            # if acknowledged buffered records were in it (_settle_batch).
            return ("rolled_back", f"compressing the batch failed before its write: {exc!r}", None)
        if not specs:
            if want_sync and self._active is not None and self._unsynced:
                # sync() with nothing new: pad (with sector_bytes) and fdatasync. A failure here
                # leaves earlier records of unknown durability: fail-stop, never a rollback.
                pad = self._padding(self._active_size)
                results = self._write_frames(self._active, pad, self._active_size, True, header_last=False)
                if results is not WRITTEN:
                    return ("failed", f"sync failed: {results[1]}", results[2])
                self._active_size += len(pad)
            return WRITTEN
        first_seq = batch[0].first_seq if batch[0].items else next(r.first_seq for r in batch if r.items)
        if first_seq != self._last_seq + 1:
            raise InvariantError(f"batch starts at seq {first_seq}, after seq {self._last_seq}")
        records = sum(spec.records for spec in specs)
        if records != len(items):
            raise InvariantError(f"a batch of {len(items)} records was framed as {records}")
        # The frames' own size (compressed late, records that waited for a block are smaller
        # than the request's estimate): the roll-over falls where the bytes do.
        nbytes = sum(len(spec.stored) for spec in specs) + fmt.FRAME_HEADER_SIZE_BYTES * len(specs)
        try:
            if (
                self._active is not None
                and self._active_count > 0
                and (self._active_size + nbytes > self.options.segment_size_bytes)
            ):
                self._seal_active()
            if self._active is None:
                self._keep_dictionary_file()
                self._start_segment(first_seq)
        except OSError as exc:
            # Nothing of this batch was written, but a seal or a new segment may be half done:
            # stop until recovery has looked at the files.
            return ("not_written", f"segment roll-over failed: {exc}", exc.errno)
        except CorruptionError as exc:  # the dictionary file the frames name was replaced
            return ("not_written", f"segment roll-over refused: {exc}", None)
        active = present(self._active, "a segment is live after roll-over")
        salt = present(self._active_header, "a live segment has a header").salt
        start = self._active_size
        # The batch's first frame says so if every byte before it is synced (FLAG_AFTER_SYNC);
        # its later frames do not: they are written with it, before any fdatasync of it.
        after_sync = self._after_sync_flag(active, start)
        if len(specs) == 1:
            # One frame: a struct pack and a hash beat the setup of a batch call into C.
            spec = specs[0]
            flags = spec.flags | after_sync
            flags = flags | fmt.FLAG_COMMIT if want_sync else flags
            data = fmt.encode_frame(first_seq + spec.records - 1, flags, spec.raw_len, spec.stored, salt, spec.dict_id)
        else:
            framed = [specs[0]._replace(flags=specs[0].flags | after_sync), *specs[1:]] if after_sync else specs
            data = fmt.encode_batch(first_seq, framed, salt, commit_last=want_sync)
        data_end = start + len(data)
        if want_sync and self.options.sector_bytes:
            data += self._padding(data_end, first_seq + records - 1)
        # Several frames (padding counts): the first frame's header goes last. A lock-free
        # reader then sees none of the batch until all of it is there, so a write that fails
        # part way and is rolled back never showed it a record that will not exist.
        header_last = len(data) > data_end - start or len(specs) > 1
        results = self._write_frames(active, data, start, want_sync, header_last)
        if results is WRITTEN:
            self._advance(first_seq, specs, records, start, start + len(data))
        return results

    def _shared_write(self, batch: list[Request]) -> Results:
        """A batch in shared-writer mode: take the lock, catch up with the other processes, give
        the batch its seqs, write it, release (journal/engine/shared.py tells the protocol)."""
        lock = shared.take_lock(self._fs, self.path, self.shared_lock_timeout_s)
        if lock is None:
            return ("busy", shared.lock_busy_reason(self.shared_lock_timeout_s, self._lock_owner()), None)
        finished = failed = False
        try:
            state = shared.note_state(lock.note_before)
            if state == shared.NOTE_FAILED:
                # Another writer's fdatasync (or rollback) failed on this journal: the kernel may
                # have dropped pages of records it wrote, so nobody appends after them until a
                # writer's open has recovered the journal (PostgreSQL's rule, for all writers).
                return ("not_written", shared.FAILED_REASON, None)
            dirty = state != shared.NOTE_CLEAN
            lock.write_note(shared.note(shared.NOTE_WRITING))
            try:
                shared.catch_up(self, dirty)  # type: ignore[arg-type]  # self is a Journal
                # Keys another process wrote whose digest this handle does not know (found in a
                # footer or at open): read those records, so a different event is a conflict.
                keys = [it.key for r in batch for it in r.items if it.key is not None]
                shared.learn_digests(self, keys)  # type: ignore[arg-type]
            except (OSError, JournalError) as exc:
                return ("not_written", f"catching up with the journal's other writers failed: {exc}", None)
            with self._mu:
                self._shared_number(batch)
            results = self._write_batch(batch)
            finished = results[0] in ("ok", "rolled_back")  # rolled back: truncated and synced
            failed = results[0] == "failed"  # a failed fdatasync or rollback: fail-stop for all
            return results
        finally:
            if finished or failed:
                try:
                    lock.write_note(shared.note(shared.NOTE_CLEAN if finished else shared.NOTE_FAILED))
                except OSError:
                    pass  # the note stays "writing": the next holder syncs first (and, failed, it
                    # may append after this one's records: the risk a dead holder leaves too)
            lock.release()

    def _shared_number(self, batch: list[Request]) -> None:
        """Under the mutex, after a catch-up: records whose key another process wrote become
        duplicates; the rest get their seqs now, and so does everything still queued."""
        first = self._last_seq + 1
        for r in batch:
            keys = self._keys
            late = {k: keys[it.key] for k, it in enumerate(r.items) if it.key is not None and it.key in keys}
            for k, seq in late.items():
                key = r.items[k].key
                known = self._key_digests.get(key) if key is not None else None
                if known is not None and known[0] == seq and known[1] != r.items[k].digest:
                    # Another process wrote another event under this key: a caller's bug, and
                    # nothing of this record is written (the conflict is its outcome's reason).
                    r.conflicts = {**(r.conflicts or {}), k: f"{IdempotencyConflictError(key or '', seq)}"}
            if late:
                for k in late:
                    key = r.items[k].key
                    if key is not None and self._pending_keys.get(key, (None, 0))[0] is r:
                        del self._pending_keys[key]
                r.full, r.late = r.items, late
                r.items = [it for k, it in enumerate(r.items) if k not in late]
                r.nbytes = sum(it.nbytes for it in r.items)
            r.first_seq = first
            first += len(r.items)
        for q in self._queue:
            q.first_seq = first  # pending keys point at (request, index): no fix-up
            first += len(q.items)
        self._next_seq = first

    def _lock_owner(self) -> int | None:
        return self._fs.read_lock_owner(os.path.join(self.path, LOCK_FILE))

    def _write_lone_synced(
        self,
        call: FrameWriteSync,
        active: OsFile,
        raw: bytes,
        seq: int,
        flags: int,
        salt: int,
        start: int,
        lone: LoneCompression,
    ) -> tuple[Results, int]:
        """A lone record's durable write through ``call``, the C call that compresses and frames
        it (encoding.lone_compression's ``lone``: what to compress with) with the GIL released:
        _write_frames' durable write for a frame made there, with the same outcomes. Space is
        reserved for the frame at its largest (the record stored raw). The results, and where
        the frame ends (``start`` if it was not written)."""
        largest = start + fmt.FRAME_HEADER_SIZE_BYTES + len(raw)
        if largest > self._reserved_end:
            self._reserve(largest)
        compress_min, cdict, dict_id = lone
        was_unsynced = self._begin_synced_write()
        try:
            rc, size = call(active.fileno(), raw, start, seq, flags, salt, compress_min, cdict, dict_id)
            if rc:
                raise_for_write_sync(rc, active)
        except OSError as exc:
            return self._failed_synced_write(start, was_unsynced, exc), start
        except (ValueError, TypeError, OverflowError) as exc:
            # Refused before anything was written (the call checks its arguments first): nothing
            # to sync or roll back. Anything else raised (MemoryError, an interrupt once it
            # returned) leaves the write's fate unknown, and the caller's results say "failed".
            self._unsynced = was_unsynced
            return ("rolled_back", f"the record was refused before its write: {exc}", None), start
        return self._end_synced_write(active, start + size), start + size

    def _begin_synced_write(self) -> bool:
        """Before a durable write: its bytes' sync is unknown until the fdatasync returns,
        whatever stops the call. Whether bytes were unsynced before it."""
        was_unsynced = self._unsynced
        self._unsynced = True
        self._synced_at = None
        return was_unsynced

    def _failed_synced_write(self, start: int, was_unsynced: bool, exc: OSError) -> Results:
        """A durable write's failure: a failed fdatasync is fail-stop (the kernel may have
        dropped the pages, and retrying could report success for data never on disk); a failed
        write left nothing to sync and is rolled back to ``start``."""
        if isinstance(exc, SyncError):
            return ("failed", f"fdatasync failed: {exc}", exc.errno)
        self._unsynced = was_unsynced
        return self._roll_back(start, f"write failed: {exc}", exc.errno)

    def _end_synced_write(self, active: File, end: int) -> Results:
        """A durable write that went through: every byte of ``active`` before ``end`` is synced."""
        self._unsynced = False
        self._synced_at = (active, end)
        return WRITTEN

    def _write_frames(self, active: File, data: bytes, start: int, sync: bool, header_last: bool) -> Results:
        """The one write path, for one record and for a batch: reserve space, write the frames
        (the first header last if asked), fdatasync if asked. A failed write is truncated back
        to ``start`` and that is synced (NotCommitted); a failed fdatasync, or a failed
        rollback, is fail-stop (AckLost): the kernel may have dropped the pages, and retrying
        the fdatasync could report success for data that never reached the disk."""
        if start + len(data) > self._reserved_end:
            self._reserve(start + len(data))
        first_last = fmt.FRAME_HEADER_SIZE_BYTES if header_last else 0
        if sync and data:
            # A durable write: its calls at once (one release of the GIL on a plain file;
            # fs.write_all_synced), with the same outcomes as the calls one by one below.
            was_unsynced = self._begin_synced_write()
            try:
                write_all_synced(active, data, start, first_last)
            except OSError as exc:
                return self._failed_synced_write(start, was_unsynced, exc)
            return self._end_synced_write(active, start + len(data))
        if data:
            self._synced_at = None  # bytes written and not synced: the next frame claims nothing
        try:
            if data:
                write_all(active, data, start, first_last)
        except OSError as exc:
            return self._roll_back(start, f"write failed: {exc}", exc.errno)
        self._unsynced = True
        if sync:
            try:
                active.fdatasync()
            except OSError as exc:
                return ("failed", f"fdatasync failed: {exc}", exc.errno)
            self._unsynced = False
            self._synced_at = (active, start + len(data))
        return WRITTEN

    def _advance(self, first_seq: int, specs: Sequence[fmt.FrameSpec], records: int, start: int, end: int) -> None:
        """Account for ``records`` records in frames written at [start, end): index points (a
        frame's first seq and its offset), sizes, the last seq."""
        if end >= self._next_index_at:
            offset = start
            seq = first_seq
            for spec in specs:
                self._note_frame(seq, offset)
                offset += fmt.FRAME_HEADER_SIZE_BYTES + len(spec.stored)
                seq += spec.records
        self._active_size = end
        self._active_count += records
        self._last_seq = first_seq + records - 1

    def _padding(self, end: int, seq: int | None = None) -> bytes:
        """A padding frame that makes ``end`` a multiple of sector_bytes (b"" if it is one)."""
        header = present(self._active_header, "padding needs a live segment")
        return fmt.padding_frame(end, self.options.sector_bytes, self._last_seq if seq is None else seq, header.salt)

    def _roll_back(self, start: int, reason: str, errno_: int | None) -> Results:
        if not (self._active is not None):
            raise InvariantError('self._active is not None')
        self._synced_at = None
        try:
            self._active.truncate(start)
            self._reserved_end = start
            self._active.fdatasync()
        except OSError as exc:
            return ("failed", f"{reason}; rollback failed too: {exc}", errno_)
        # The fdatasync synced every byte the file still holds, all of them before ``start``.
        self._synced_at = (self._active, start)
        return ("rolled_back", reason, errno_)

    def _seal_now(self) -> Results:
        """Journal.seal(): seal the live segment if it holds a record; the next batch starts one.
        A failure part way leaves the seal's durability unknown: fail-stop, as for a roll-over."""
        if self._active is None or self._active_count == 0:
            return WRITTEN
        try:
            self._seal_active()
        except OSError as exc:
            return ("failed", f"sealing the live segment failed: {exc}", exc.errno)
        return WRITTEN

    def _seal_active(self) -> None:
        if not (self._active is not None and self._active_header is not None and self._active_count > 0):
            raise InvariantError("only a live segment with records is sealed")
        base = self._active_header.base_seq
        # The keys are copied under the mutex: callers add keys and drop_prefix removes them
        # while the leader, which does not hold it, writes the footer.
        with self._mu:
            keys = list(self._keys.items())
        payload = fmt.encode_seal_payload(
            self._active_count,
            base,
            self._last_seq,
            self.options.index_interval_bytes,
            self._index,
            self._active_size,
            sorted(
                (seq, key.encode("utf-8", "surrogateescape"))
                for key, seq in keys
                if base <= seq <= self._last_seq
            ),
        )
        frame = fmt.encode_frame(self._last_seq, fmt.KIND_SEAL, len(payload), payload, self._active_header.salt)
        self._synced_at = None  # the segment closes; a seal frame goes without FLAG_AFTER_SYNC
        if self._unreserve():
            # The footer must end the file (readers find it from the end), and a crash must
            # not keep the footer but lose the cut: the cut is made durable first.
            self._active.fdatasync()
        write_all(self._active, frame, self._active_size)
        self._active.fdatasync()
        self._unsynced = False
        self._active.close()
        self._active = None
        self._active_header = None

    def _keep_dictionary_file(self) -> None:
        """Before a new segment takes frames naming this writer's dictionary, before a copy and at
        close: the journal's directory still holds that dictionary's file
        (dictionary.keep_dictionary_file: written again if its name was removed; CorruptionError
        if other bytes are there)."""
        use = self.options.dictionary
        if use is not None:
            # A copy (copy_prefix) checks from the caller's thread while the leader may roll
            # over: two rewrites would share the temp file's name.
            with self._dict_file_mu:
                keep_dictionary_file(self._fs, self.path, use.dict_id, use.dictionary)
                self._dict_checked_seq = self._last_seq

    def _start_segment(self, base_seq: int) -> None:
        self._segment_number += 1
        header = new_header(self._journal_id, self._segment_number, base_seq)
        self._active = create_segment(self._fs, self.path, header, self.options.sector_bytes)
        self._active_header = header
        self._active_size = fmt.SEGMENT_HEADER_SIZE_BYTES + len(header_padding(header, self.options.sector_bytes))
        self._reserved_end = self._active_size
        # create_segment fsynced the header (and its padding) before the file got its name.
        self._synced_at = (self._active, self._active_size)
        self._reserve_refused = False
        self._active_count = 0
        self._index = []
        self._next_index_at = self._active_size
