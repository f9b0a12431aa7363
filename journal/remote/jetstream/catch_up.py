"""Taking in what the journal's subject holds: the whole subject at open, what others appended
since (catch-up), each message verified to continue the journal (seqs, frames, lost races),
and what the handle then knows (the index of messages, the keys with their digests).
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator

import xxhash

from journal.engine import format as fmt
from journal.errors import (
    CorruptionError,
    InvariantError,
    SequenceError,
)
from journal.record import Record
from journal.remote import records
from journal.remote.jetstream.connection import _Loop
from journal.remote.jetstream.consumer import _Diverged, _LeaderCheck, _OrderedReader
from journal.remote.jetstream.errors import _io_error, _Lost, _Refused
from journal.remote.jetstream.headers import (
    H_COUNT,
    H_KIND,
    H_SEQ,
    H_WRITER,
    KIND_FENCE,
    WRITER_SHARED,
    _lost_race,
    _span_of,
    _StoredMsg,
)
from journal.remote.jetstream.limits import CATCH_UP_GETS_MAX, SCAN_CHUNK_BYTES, SCAN_CHUNK_MSGS
from journal.remote.jetstream.state import _State


class _CatchUp(_State):
    """Reading the subject into what this handle knows, verified."""

    def _decode(self, m: _StoredMsg, expect: int) -> list[Record]:
        """The records of one message, verified to continue the journal at seq ``expect``
        (a fence yields none). CorruptionError (SequenceError for a gap or an overlap)."""
        where = self._where_msg(m.sseq)
        if m.subject != self._subject:
            raise CorruptionError(where, 0, expect, f"the message is on subject {m.subject!r}, not this journal's")
        try:
            first = int(m.headers[H_SEQ])
            count = 0 if m.headers.get(H_KIND) == KIND_FENCE else int(m.headers[H_COUNT])
        except (KeyError, ValueError):
            raise CorruptionError(where, 0, expect, f"the message has no valid {H_SEQ}/{H_COUNT} headers") from None
        if m.headers.get(H_KIND) == KIND_FENCE:
            if m.data or first != expect - 1:
                raise CorruptionError(where, 0, expect, "a fence message with a body or at another seq")
            return []
        if count < 1:
            raise CorruptionError(where, 0, expect, f"the message says it holds {count} records")
        if first != expect:
            what = "is missing" if first > expect else "is held twice"
            raise SequenceError(
                where, 0, expect,
                f"seq {expect} {what}: the message holds seqs {first}..{first + count - 1} (a message deleted, "
                "moved or written by a second writer)",
            )
        out: list[Record] = []
        pos = 0
        body = m.data
        size_max = self._options.record_size_bytes_max
        for i in range(count):
            got = fmt.verify_frame(body, pos, self._salt)
            if got is None:
                raise CorruptionError(where, pos, first + i, "the stored frame fails its checksum (changed bytes, "
                                                             "or a frame of another journal)")
            out.append(records.record_of(
                memoryview(body)[pos : got.end], first + i, self._salt, where, size_max, self._dicts
            ))
            pos = got.end
        if pos != len(body):
            raise CorruptionError(where, pos, first + count - 1, f"{len(body) - pos} bytes after the last frame")
        return out

    def _subject_last(self) -> _StoredMsg | None:
        return self._call(
            self._c().get_msg(self._stream, {"last_by_subj": self._subject}, self._ack_timeout_s), self._ack_timeout_s
        )

    def _messages(self, start_sseq: int, end_sseq: int | None = None) -> Iterator[_StoredMsg]:
        """This journal's messages from stream sequence ``start_sseq`` up to the last one now
        (or ``end_sseq``), in order, as the stream leader holds them: fetched in bounded chunks
        by an ordered consumer and checked against the leader (_LeaderCheck); from the first
        one a replica served differently on, read from the leader itself."""
        last: _StoredMsg | None = None
        if end_sseq is None:
            last = self._subject_last()
            if last is None:
                return
            end_sseq = last.sseq
        if end_sseq < start_sseq:
            return
        check = _LeaderCheck(self._leader_copy, start_sseq, *self._known_before(start_sseq), disowned=self._disowned)
        reader = _OrderedReader(self._c(), self._stream, self._subject, start_sseq, self._ack_timeout_s)
        self._call(reader.start(), self._ack_timeout_s)
        try:
            while True:
                try:
                    chunk = self._call(reader.next_chunk(end_sseq, SCAN_CHUNK_MSGS, SCAN_CHUNK_BYTES),
                                       self._ack_timeout_s)
                except _Lost as exc:  # the consumer's server lacks what the leader has: ask the leader
                    raise _Diverged(check.out_sseq + 1, f"consumer stopped short of {end_sseq} ({exc})") from exc
                for m in chunk:
                    yield from check.take(m)
                if not chunk or chunk[-1].sseq >= end_sseq:
                    yield from check.settle(last)
                    return
        except _Diverged as exc:
            diverged = exc
        finally:
            _Loop.stop_soon(reader)
        # The rest of this read from the leader: after a divergence the replica that served it
        # may serve this consumer's successor too.
        self._note(f"a replica served this journal's {diverged}; read on from the stream leader from message "
                   f"{diverged.resume_sseq}")
        yield from self._leader_messages(diverged.resume_sseq, end_sseq, check.out_sseq, check.out_digest)

    def _leader_messages(self, start_sseq: int, end_sseq: int, prev_sseq: int = 0,
                         prev_digest: str = "") -> Iterator[_StoredMsg]:
        """This journal's messages from ``start_sseq`` to ``end_sseq`` read one STREAM.MSG.GET each
        (answered by the stream's leader): slower than a consumer, never a replica's copy. A
        message the next one disowns is dropped (_LeaderCheck, ``leader``) and said in the
        recovery actions."""
        check = _LeaderCheck(self._leader_copy, start_sseq, prev_sseq, prev_digest, leader=True,
                             disowned=self._disowned)
        at = start_sseq
        try:
            while at <= end_sseq:
                m = self._call(self._c().get_msg(self._stream, {"seq": at, "next_by_subj": self._subject},
                                                 self._ack_timeout_s), self._ack_timeout_s)
                if m is None or m.sseq > end_sseq:
                    break
                yield from check.take(m)
                at = m.sseq + 1
            yield from check.settle()
        finally:
            for why in check.dropped:
                self._note(why)

    def _leader_copy(self, sseq: int) -> _StoredMsg | None:
        return self._call(self._c().get_msg(self._stream, {"seq": sseq}, self._ack_timeout_s), self._ack_timeout_s)

    def _known_before(self, start_sseq: int) -> tuple[int, str]:
        """(stream sequence, digest) of the message just before ``start_sseq`` if this handle knows
        it (a catch-up reads on from its last message), else (0, "")."""
        with self._mu:
            if self._last_sseq and start_sseq == self._last_sseq + 1:
                return self._last_sseq, self._last_digest
        return 0, ""

    def _scan_all(self) -> None:
        """Build the index and the key map from the whole subject (open), from the first message
        kept by the last drop_prefix."""
        self._idx_first = array("Q")
        self._idx_sseq = array("Q")
        self._keys = {}
        self._last_sseq = 0
        self._last_digest = ""
        self._stored_seq = self._first_seq - 1
        self._catch_up(int(self._meta.get("first_sseq", 0)))

    def _catch_up(self, start_sseq: int = 0) -> int:
        """Read what was appended after what this handle knows; how many records came."""
        return self._take_in(self._messages(max(self._last_sseq + 1, start_sseq)))

    def _catch_up_shared(self) -> int:
        """A shared writer's catch-up (with _wmu held): a refused publish is most often a message
        or two behind, read here one STREAM.MSG.GET each (a consumer costs more round trips);
        further behind, the rest comes through a consumer. How many records came.

        The GETs are answered by the leader and checked as a read from it is (_LeaderCheck,
        ``leader``): a message the next one disowns is dropped here too, so a shared writer
        takes in what readers return (taken in, the disowned message's seqs would meet its
        successor's as "held twice", and fail the writer)."""
        start = self._last_sseq + 1
        check = _LeaderCheck(self._leader_copy, start, *self._known_before(start), leader=True,
                             disowned=self._disowned)
        came, at = 0, start
        try:
            for _ in range(CATCH_UP_GETS_MAX):
                m = self._call(
                    self._c().get_msg(self._stream, {"seq": at, "next_by_subj": self._subject}, self._ack_timeout_s),
                    self._ack_timeout_s,
                )
                if m is None:
                    return came + self._take_in(check.settle())
                came += self._take_in(check.take(m))
                at = m.sseq + 1
        finally:
            for why in check.dropped:
                self._note(why)
        return came + self._catch_up()  # a message still held is read again from there

    def _catch_up_io(self) -> None:
        try:
            if self._shared:
                with self._wmu:  # a shared writer's batches catch up too: one at a time
                    self._catch_up_shared()
            else:
                self._catch_up()
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc

    def _take_in(self, msgs: Iterable[_StoredMsg]) -> int:
        """Add ``msgs`` (this journal's messages after the last one known) to what this handle
        knows: the index, the keys and their digests, the last seq; how many records came."""
        came = 0
        for m, recs in self._verified(msgs, self._stored_seq + 1, self._last_sseq or None):
            if (self._shared and self._opened and m.headers.get(H_KIND) == KIND_FENCE
                    and m.headers.get(H_WRITER) != WRITER_SHARED and not self._fenced_out):
                # An exclusive writer fenced the journal after this handle's open: it took the
                # claim, which it can only have done once this handle's presence had expired.
                self._fenced_out = m.sseq
            with self._mu:
                if recs:
                    self._idx_first.append(recs[0].seq)
                    self._idx_sseq.append(m.sseq)
                    for r in recs:
                        if r.key is not None:
                            self._keys[r.key] = (r.seq, xxhash.xxh64_intdigest(r.payload))
                    self._stored_seq = recs[-1].seq
                    came += len(recs)
                if m.sseq > self._last_sseq:
                    self._last_sseq, self._last_digest = m.sseq, m.digest()
                self._next_seq = max(self._next_seq, self._stored_seq + 1)
        return came

    def _verified(
        self, msgs: Iterable[_StoredMsg], expect: int, prev_sseq: int | None = None
    ) -> Iterator[tuple[_StoredMsg, list[Record]]]:
        """Each of ``msgs`` with its records, verified to continue the journal at seq ``expect``,
        none below the journal's first seq: a message whose records all lie below it (dropped by
        drop_prefix, or left by one cut short) yields none. A gap sends a read-only handle to
        the metadata once more (a drop of the writer may have moved the first seq since).

        ``prev_sseq``: the stream sequence of the message just before the first of ``msgs`` on
        the subject (None: the first of ``msgs`` is a message this handle knows to be part of the
        journal, or the first of the subject). A message chained on an older message than the one
        before it lost a race (``_lost_race``) and yields none."""
        try:
            yield from self._verify_each(msgs, expect, prev_sseq)
        finally:
            close = getattr(msgs, "close", None)
            if close is not None:
                close()  # now, on this thread: the reader of a generator of messages is stopped

    def _verify_each(
        self, msgs: Iterable[_StoredMsg], expect: int, prev_sseq: int | None
    ) -> Iterator[tuple[_StoredMsg, list[Record]]]:
        first_seq = self._first_seq
        expect = max(expect, first_seq)
        for m in msgs:
            prev, prev_sseq = prev_sseq, m.sseq
            if prev is not None and m.sseq <= prev:
                # Read in the wrong order (_OrderedReader drops these): taken for a message that
                # lost a race, or for a second copy of committed seqs, it would be reported as one.
                raise InvariantError(f"reading {self._where} (stream {self._stream}), message {m.sseq} came after "
                                     f"message {prev}")
            if prev is not None and _lost_race(m, prev):
                yield m, []
                continue
            span = _span_of(m)
            if span is None:
                self._decode(m, expect)  # raises: the headers are not valid
                continue
            lo, count = span
            if lo > expect:
                first_seq = self._first_seq_now()
                expect = max(expect, first_seq)
            if (lo + count <= first_seq) if count else (lo < first_seq):
                yield m, []
                continue
            if count and lo < first_seq < lo + count and expect == first_seq:
                recs = [r for r in self._decode(m, lo) if r.seq >= first_seq]  # straddles the first seq
            else:
                recs = self._decode(m, expect)
            if recs:
                expect = recs[-1].seq + 1
            yield m, recs

    def _first_seq_now(self) -> int:
        """The journal's first seq as the server has it now. A writer's own is current (only it
        drops); a read-only handle reads the metadata again."""
        if not self._readonly:
            return self._first_seq
        found = self._read_meta()
        if found is not None and found[0]["id"] == self._journal_id.hex():
            self._advance_first(int(found[0]["first_seq"]))
        return self._first_seq

    def _refresh_first_io(self) -> None:
        try:
            self._first_seq_now()
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's metadata failed", exc, doing="reading") from exc

    def _advance_first(self, first_seq: int) -> None:
        """The journal begins at ``first_seq`` now: forget what lies below (index, keys)."""
        with self._mu:
            if first_seq <= self._first_seq:
                return
            self._first_seq = first_seq
            i = bisect.bisect_right(self._idx_first, first_seq) - 1
            if i > 0:
                del self._idx_first[:i]
                del self._idx_sseq[:i]
            self._keys = {k: v for k, v in self._keys.items() if v[0] >= first_seq}
            self._stored_seq = max(self._stored_seq, first_seq - 1)
            self._next_seq = max(self._next_seq, self._stored_seq + 1)

    def _purge_dropped(self) -> None:
        """A writer's open: remove the messages a drop_prefix cut short left below the first seq."""
        if self._first_seq <= 1 or not self._idx_sseq:
            return
        keep_from = self._idx_sseq[0]
        lowest = self._call(
            self._c().get_msg(self._stream, {"seq": 1, "next_by_subj": self._subject}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        if lowest is not None and lowest.sseq < keep_from:
            n = self._purge(self._subject, before_sseq=keep_from)
            self._recovery.actions.append(f"removed {n} messages below first seq {self._first_seq} (a drop_prefix "
                                          "cut short)")

    def _won(self, sseq: int, chained: int) -> bool:
        """Whether this handle's message, stored at ``sseq`` and published chained on the message
        at ``chained``, is part of the journal: the first message on the subject after that one
        (``_lost_race``). _Lost or _Refused if that cannot be read."""
        if sseq == chained + 1:
            return True  # the stream stored nothing between the two
        first = self._call(
            self._c().get_msg(self._stream, {"seq": chained + 1, "next_by_subj": self._subject}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        return first is not None and first.sseq == sseq

    def _peek(self, seq: int) -> Record | None:
        """Record ``seq`` of what this handle knows, read from its message (no flush, no catch-up)."""
        with self._mu:
            if seq > self._stored_seq or not self._idx_first:
                return None
            i = bisect.bisect_right(self._idx_first, seq) - 1
            first, sseq = self._idx_first[i], self._idx_sseq[i]
        try:
            m = self._call(self._c().get_msg(self._stream, {"seq": sseq}, self._ack_timeout_s), self._ack_timeout_s)
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc
        if m is None:
            try:
                first_seq = self._first_seq_now()
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "reading the journal's metadata failed", exc, doing="reading") from exc
            if seq < first_seq:
                return None  # dropped by a drop_prefix since
            raise CorruptionError(self._where_msg(sseq), 0, seq, "the message that held this record is gone "
                                                                  "(deleted from the stream)")
        for rec in self._decode(m, first):
            if rec.seq == seq:
                return rec
        return None
