"""Reading a journal: read, follow, get, and resolving an AckLost from what the stream holds.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator

from journal.errors import (
    JournalFailStoppedError,
)
from journal.outcomes import AckLost, Durability, NotCommitted, Outcome
from journal.record import Record
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.consumer import _Diverged, _LeaderCheck, _OrderedReader, _records_after
from journal.remote.jetstream.errors import _io_error, _Lost, _Refused
from journal.remote.jetstream.headers import _StoredMsg
from journal.remote.jetstream.limits import FOLLOW_POLL_INTERVAL_S, SCAN_CHUNK_BYTES, SCAN_CHUNK_MSGS
from journal.remote.jetstream.state import _State
from journal.remote.resolution import resolve_from


class _Reader(_State):
    """read, follow, get and resolve."""

    def _start_of(self, after_seq: int) -> tuple[int, int]:
        """(stream sequence to read from, seq its first message begins with) for records > after_seq."""
        start, expect, _prev = self._start_prev(after_seq)
        return start, expect

    def _start_prev(self, after_seq: int) -> tuple[int, int, int | None]:
        """``_start_of``, and the ``prev_sseq`` of ``_verified`` for a read from there: a message
        of the index is part of the journal; after the last one known, what follows is checked."""
        with self._mu:
            want = max(after_seq + 1, self._first_seq)
            i = bisect.bisect_right(self._idx_first, want) - 1
            if i < 0:
                return 1, self._first_seq, None
            if want > self._stored_seq:
                return self._last_sseq + 1, self._stored_seq + 1, self._last_sseq
            return self._idx_sseq[i], self._idx_first[i], None

    def read(self, after_seq: int = 0) -> Iterator[Record]:
        self._check_open()
        if not self._readonly:
            self.flush()
        else:
            self._refresh_first_io()
        start, expect, prev = self._start_prev(after_seq)
        try:
            for _m, recs in self._verified(self._messages(start), expect, prev):
                for rec in recs:
                    if rec.seq > after_seq:
                        yield rec
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc

    def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Record]:
        self._check_open()
        if self._readonly:
            self._refresh_first_io()
        start, expect, prev = self._start_prev(after_seq)
        idle_since = time.monotonic()
        wait_s = max(0.001, poll_interval_s)
        while True:  # once per consumer: a replica that served a message not the leader's ends one
            check = _LeaderCheck(self._leader_copy, start, *self._known_before(start), disowned=self._disowned)
            reader = _OrderedReader(self._c(), self._stream, self._subject, start, self._ack_timeout_s)
            diverged: _Diverged | None = None
            try:
                self._call(reader.start(), self._ack_timeout_s)
                while diverged is None and not (stop is not None and stop.is_set()):
                    if self._closed:
                        return
                    got = self._call(reader.next_chunk(None, SCAN_CHUNK_MSGS, SCAN_CHUNK_BYTES, wait_s), wait_s + 5)
                    now = time.monotonic()
                    ready: list[_StoredMsg] = []
                    try:
                        for m in got:
                            ready += check.take(m)
                        if not got:
                            # Nothing more for now: the leader vouches for the last one. Not there
                            # (yet), or the leader not answering (an election): it stays held.
                            try:
                                ready = check.settle(wait_absent=True)
                            except (_Lost, _Refused):
                                ready = []
                    except _Diverged as exc:
                        diverged = exc  # what was ready before it is handed on first
                    if got:
                        idle_since = now
                    elif not ready and diverged is None and idle_timeout_s is not None and (
                        now - idle_since >= idle_timeout_s
                    ):
                        if not check.holding:
                            return
                        # Going idle with a message held: the leader answers for it now, or the
                        # follow ends with the error, never quietly short of it.
                        try:
                            ready = check.settle(wait_absent=True)
                        except _Diverged as exc:
                            diverged = exc
                        if not ready and diverged is None:
                            return  # the leader holds nothing there: not the journal's
                        idle_since = now
                    if ready:
                        verified = list(self._verified(ready, expect, prev))
                        prev = ready[-1].sseq
                        expect = yield from _records_after(verified, expect, after_seq)
                if diverged is None:
                    return
                self._note(f"a replica served this journal's {diverged}; followed on from the stream leader "
                           f"from message {diverged.resume_sseq}")
                # The rest up to the leader's last message, from the leader; then a new consumer.
                last = self._subject_last()
                ready = list(self._leader_messages(diverged.resume_sseq, last.sseq, check.out_sseq,
                                                   check.out_digest)) if last is not None else []
                start = max(diverged.resume_sseq, last.sseq + 1 if last is not None else 0)
                verified = list(self._verified(ready, expect, prev))
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "following the journal failed", exc, doing="reading") from exc
            finally:
                try:
                    self._call(reader.stop(), 5.0)
                except (_Lost, _Refused, nats.errors.Error, OSError):
                    pass
            if ready:
                prev = ready[-1].sseq
            expect = yield from _records_after(verified, expect, after_seq)

    def get(self, seq: int) -> Record | None:
        self._check_open()
        if self._readonly:
            self._refresh_first_io()
        if seq < self._first_seq:
            return None
        if not self._readonly:
            self.flush()
        if seq > self._stored_seq and (self._readonly or self._shared):
            self._catch_up_io()
        return self._peek(seq)

    def resolve(self, outcome: Outcome) -> Outcome:
        if not isinstance(outcome, AckLost):
            return outcome
        self._check_open()
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        if self._readonly or self._shared:
            self._catch_up_io()
        answer = self._resolved(outcome)
        if self._shared and isinstance(answer, NotCommitted) and outcome.seq > self._stored_seq:
            # Other shared writers do not fence the journal for this handle: the message may still
            # be on its way. A fence chained on the last message read either lands first (the
            # message's expected sequence is then stale for good) or is refused because something
            # landed (read by the catch-up): what the stream holds after it is final.
            try:
                with self._wmu:
                    self._fence()
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "fencing the journal to resolve an outcome failed", exc,
                                doing="resolving an outcome of") from exc
            answer = self._resolved(outcome)
        return answer

    def _resolved(self, outcome: AckLost) -> Outcome:
        """What the journal, as this handle knows it, says of ``outcome``."""
        level: Durability = "sync" if self._sync_ok() else "flush"
        return resolve_from(outcome, self._seq_of_key, self.get, lambda: level)

    def _seq_of_key(self, key: str) -> int | None:
        """The seq of the record this handle knows to hold idempotency key ``key``, or None."""
        known = self._keys.get(key)
        return known[0] if known is not None else None
