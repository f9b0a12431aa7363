"""The write paths of an exclusive writer: keyed and unkeyed appends, the buffered level, and
group commit's batches published as messages chained on the last one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from journal.engine.encoding import Encoded, check_durability, encode_event, same_event
from journal.errors import (
    IdempotencyConflictError,
    InvariantError,
    JournalFailStoppedError,
    ReadOnlyError,
    RecordTooLargeError,
)
from journal.outcomes import Committed, Durability, NotCommitted, Outcome
from journal.remote import records
from journal.remote.batching import events_and_keys, keyed_once, runs, write_runs
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.connection import _T
from journal.remote.jetstream.errors import SyncNeedsReplicasError, _Lost, _Refused
from journal.remote.jetstream.headers import (
    ERR_WRONG_LAST_SEQ,
    H_COUNT,
    H_EXPECT_STREAM,
    H_MSG_ID,
    H_SEQ,
    chain_headers,
    chain_id,
    frame_size,
    message_digest,
)
from journal.remote.jetstream.state import _State
from journal.remote.resolution import ack_lost


def present(value: _T | None) -> _T:
    if value is None:
        raise InvariantError("a keyed record has a key")
    return value


class _Writer(_State):
    """Appends, and the batches group commit hands to the wire."""

    def _check_append(self, level: Durability) -> None:
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("append")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        if level == "sync" and not self._sync_ok():
            raise SyncNeedsReplicasError(self._stream, self._replicas)

    def _encode(self, event: Any, key: str | None, synthetic: bool) -> Encoded:
        enc = encode_event(event, key, synthetic, self._options)
        size = frame_size(enc)
        if size > self._payload_max:
            raise RecordTooLargeError(size, self._payload_max)
        return enc

    def _reported(self, level: Durability) -> Durability:
        return "flush" if level == "buffered" else level

    def _level(self, durability: str) -> Durability:
        """The level an append is written at: a shared writer has no buffered level (a record
        other writers cannot see has no seq yet), so it writes those at once, as "flush"."""
        level = check_durability(durability)
        return "flush" if self._shared and level == "buffered" else level

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        level = self._level(durability)
        self._check_append(level)
        enc = self._encode(event, idempotency_key, synthetic)
        if idempotency_key is None:
            return self._write_unkeyed([enc], level)[0]
        return self._write_keyed([enc], level)[0]

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        level = self._level(durability)
        self._check_append(level)
        listed, keys = events_and_keys(events, idempotency_keys)
        encoded = [self._encode(e, k, synthetic) for e, k in zip(listed, keys, strict=True)]
        if not any(k is not None for k in keys):
            return self._write_unkeyed(encoded, level)
        return keyed_once(encoded, lambda unique: self._write_keyed(unique, level))

    def _write_unkeyed(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        if level == "buffered":
            return self._buffer_items(items)
        # In runs whose frames fit one message.
        return write_runs(runs(items, frame_size, self._payload_max), lambda chunk: self._group.submit(chunk, level),
                          lambda: self._failed)

    def _buffer_items(self, items: list[Encoded]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        full = False
        with self._mu:
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            for it in items:
                seq = self._next_seq
                self._next_seq += 1
                self._buffer.append((seq, it))
                self._buffer_bytes += frame_size(it)
                if it.key is not None:
                    self._keys[it.key] = (seq, it.digest)
                outcomes.append(Committed(seq, "buffered"))
            full = self._buffer_bytes >= self._payload_max
        if full:
            try:
                self.flush()
            except JournalFailStoppedError:
                pass  # reported by the next call, as the file engine does
        return outcomes

    def _write_keyed(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """Records with idempotency keys (each key once): a key the journal holds with the same
        event is a duplicate, with another event a conflict (raised before anything is written);
        a key on its way is waited for."""
        dups: dict[int, tuple[int, int]] = {}
        mine: list[str] = []
        while True:
            waits: list[threading.Event] = []
            reads: list[tuple[Encoded, int]] = []
            dups = {}
            with self._mu:
                if self._failed is not None:
                    raise JournalFailStoppedError(self._failed)
                for i, it in enumerate(items):
                    if it.key is None:
                        continue
                    ev = self._inflight.get(it.key)
                    if ev is not None:
                        waits.append(ev)
                        continue
                    known = self._keys.get(it.key)
                    if known is None:
                        continue
                    if known[1] == it.digest:
                        dups[i] = known
                    else:
                        reads.append((it, known[0]))
                if not waits and not reads:
                    mine = [it.key for i, it in enumerate(items) if it.key is not None and i not in dups]
                    for key in mine:
                        self._inflight[key] = threading.Event()
                    break
            for ev in waits:
                ev.wait()
            for it, seq in reads:
                rec = self.get(seq)
                key = present(it.key)
                if rec is None or rec.key != key:
                    raise InvariantError(f"idempotency key {key!r} points at seq {seq}, which does not hold it")
                if not same_event(rec.payload, rec.is_bytes, it):
                    raise IdempotencyConflictError(key, seq)
                with self._mu:
                    if self._keys.get(key, (0, 0))[0] == seq:
                        self._keys[key] = (seq, it.digest)
        fresh = [it for i, it in enumerate(items) if i not in dups]
        try:
            written = self._write_unkeyed(fresh, level) if fresh else []
        finally:
            with self._mu:
                for key in mine:
                    ev = self._inflight.pop(key, None)
                    if ev is not None:
                        ev.set()
        with self._mu:
            for it, out in zip(fresh, written, strict=True):
                if it.key is not None and isinstance(out, Committed):
                    self._keys[it.key] = (out.seq, it.digest)
        if dups and level != "buffered" and any(seq > self._stored_seq for seq, _ in dups.values()):
            try:
                self.flush()  # a retry of a buffered record is made as durable as it asks
            except JournalFailStoppedError:
                pass
        outcomes: list[Outcome] = []
        fresh_out = iter(written)
        for i, it in enumerate(items):
            if i not in dups:
                outcomes.append(next(fresh_out))
                continue
            seq = dups[i][0]
            if level != "buffered" and seq > self._stored_seq:
                outcomes.append(ack_lost(seq, it, f"the record this key names was not written: {self._failed}"))
            else:
                outcomes.append(Committed(seq, level, True, "idempotency key matched an existing record"))
        return outcomes

    def _group_write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """GroupCommit's writer: this batch (behind whatever buffered records wait) as messages."""
        if self._shared:
            return self._shared_write(items, level)
        with self._wmu:
            with self._mu:
                if self._failed is not None or self._closed:
                    why = self._failed or "the journal was closed"
                    return [NotCommitted(f"not written: {why}")] * len(items)
                held = self._take_buffer()
                first = self._next_seq
                self._next_seq += len(items)
            batch = held + [(first + i, it) for i, it in enumerate(items)]
            outcomes = self._write_records(batch, level)
        return outcomes[len(held) :]

    def _take_buffer(self) -> list[tuple[int, Encoded]]:
        held, self._buffer, self._buffer_bytes = self._buffer, [], 0
        return held

    def _write_records(self, batch: list[tuple[int, Encoded]], level: Durability) -> list[Outcome]:
        """Publish ``batch`` (contiguous seqs) as messages, each chained on the last; one outcome
        per record. Called with _wmu held. A refusal is NotCommitted, a lost ack AckLost; both
        fail-stop the handle."""
        outcomes: list[Outcome] = []
        reported = self._reported(level)
        for run in runs(batch, lambda row: frame_size(row[1]), self._payload_max):
            if self._failed is not None:
                outcomes.extend(NotCommitted(f"not written: {self._failed}") for _ in run)
                continue
            if self._claim_lost:
                self._fail("the writer claim was taken by another writer (this handle's claim expired)")
                outcomes.extend(NotCommitted(f"not written: {self._failed}") for _ in run)
                continue
            got = self._publish_run(run, reported)
            if got is None:
                raise InvariantError("only a shared writer's publish is tried again")
            outcomes.extend(got)
        return outcomes

    def _publish_run(self, run: list[tuple[int, Encoded]], reported: Durability) -> list[Outcome] | None:
        """Publish one message of records chained on the last message known; their outcomes, or
        (shared writers only) None when the server refused it because another writer appended
        first: nothing was stored, and the caller catches up and tries again."""
        body = b"".join(records.frame_of(enc, seq, self._salt) for seq, enc in run)
        first = run[0][0]
        headers = {
            H_SEQ: str(first),
            H_COUNT: str(len(run)),
            H_MSG_ID: chain_id(self._journal_id, self._last_sseq),
            H_EXPECT_STREAM: self._stream,
            **chain_headers(self._last_sseq, self._last_digest),
        }
        try:
            ack = self._c().publish_sync(self._subject, body, headers, self._ack_timeout_s)
        except _Refused as exc:
            if self._shared and exc.err_code in ERR_WRONG_LAST_SEQ:
                self._refusals += 1
                return None
            why = f"the server refused the publish ({exc.reason})"
            if exc.err_code in ERR_WRONG_LAST_SEQ:
                why = (f"the server refused the publish: another writer appended to the journal since this one "
                       f"last did ({exc.reason}); this handle can no longer append")
            self._fail(why)
            return [NotCommitted(why) for _ in run]
        except (_Lost, nats.errors.Error, OSError) as exc:
            why = f"the publish's ack was lost ({exc}); the server may or may not hold these records"
            self._fail(why)
            return [ack_lost(seq, enc, why) for seq, enc in run]
        if ack.get("duplicate"):
            # Another writer's message is chained where this one would go (chain_id): this one
            # was not stored. The journal never publishes one message twice, so it is not ours.
            if self._shared:
                self._lost_races += 1
                return None
            why = ("another writer's message is already chained where this one would go (a writer whose claim "
                   "lapsed, or a second writer); this handle can no longer append")
            self._fail(why)
            return [NotCommitted(why) for _ in run]
        sseq = int(ack["seq"])
        if ack.get("stream") != self._stream or sseq <= self._last_sseq:
            why = f"the publish was acknowledged by stream {ack.get('stream')!r} at {sseq}, not as expected"
            self._fail(why)
            return [ack_lost(seq, enc, why) for seq, enc in run]
        if self._shared:
            # Other writers publish at the same moment, and the server may store two messages
            # chained on one (_lost_race): this one is the journal's only if it came first.
            try:
                won = self._won(sseq, self._last_sseq)
            except (_Lost, _Refused, nats.errors.Error, OSError) as exc:
                why = (f"the publish was acknowledged, but whether it came before another writer's could not be "
                       f"read ({exc}); the journal may or may not hold these records")
                self._fail(why)
                return [ack_lost(seq, enc, why) for seq, enc in run]
            if not won:
                self._lost_races += 1
                return None  # stored, but not part of the journal: every reader skips it
        with self._mu:
            self._idx_first.append(first)
            self._idx_sseq.append(sseq)
            self._last_sseq, self._last_digest = sseq, message_digest(headers, body)
            self._stored_seq = run[-1][0]
            self._next_seq = max(self._next_seq, self._stored_seq + 1)
            if self._shared:
                for seq, enc in run:
                    if enc.key is not None:
                        self._keys[enc.key] = (seq, enc.digest)
        return [Committed(seq, reported) for seq, _ in run]

    def flush(self) -> None:
        self._check_open()
        if self._readonly:
            return
        self._drain("flush")

    def sync(self) -> None:
        self._check_open()
        if self._readonly:
            return
        if not self._sync_ok():
            raise SyncNeedsReplicasError(self._stream, self._replicas)
        self._drain("sync")

    def _drain(self, level: Durability) -> None:
        with self._wmu:
            with self._mu:
                held = self._take_buffer()
            if held:
                self._write_records(held, level)
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
