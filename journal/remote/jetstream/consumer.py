"""What a read gets from the stream: an ordered consumer on one subject (_OrderedReader), and
the check that each message it delivers is the stream leader's (_LeaderCheck).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from journal.record import Record
from journal.remote.jetstream.client import js_api, nats
from journal.remote.jetstream.connection import _Conn
from journal.remote.jetstream.errors import _Lost, _Refused
from journal.remote.jetstream.headers import H_PREV, _chained_on, _StoredMsg


class _Diverged(Exception):
    """A message a consumer delivered is not the stream leader's (_LeaderCheck): read again, from
    the leader, from stream sequence ``resume_sseq`` on (after the last message handed on)."""

    def __init__(self, resume_sseq: int, why: str) -> None:
        super().__init__(why)
        self.resume_sseq = resume_sseq


class _LeaderCheck:
    """Holds messages back until they are known to be the journal's as the stream leader has it.

    A consumer is served by whichever server holds it, from that server's copy of the stream;
    STREAM.MSG.GET is answered by the stream's leader. nats-server 2.9 can leave a replica with a
    message its leader does not have at that stream sequence (after a leader is killed, its last,
    unacknowledged message; seen on a 3-node cluster): taken in, it would be a record nobody
    acknowledged, or a gap or an overlap that is not there. So every message names the digest of
    the one it is chained on (Journal-Prev), and the message after it vouches for it: a message
    is handed on once the next one, chained on it, names its digest, or when nothing will (it is
    the last one read, or the next is not chained on it) once the leader's copy has its digest.
    From a consumer (``leader=False``), a digest that differs, or a message chained on one the
    consumer did not deliver, is _Diverged: the reader reads on from the leader.

    From the leader (``leader=True``) the same mismatch means the server kept, at that stream
    sequence, another message than the one the next writer was acknowledged there (2.9 was seen
    to lose a writer's acknowledged fence after a leader kill and keep the killed writer's last,
    unacknowledged message in its place; the next writer, chained on its fence, wrote the seqs
    again). That message is not part of the journal as its writers built it: it is dropped, and
    said in ``dropped``. A message already handed on is never taken back: one that the next
    names another digest for is handed on, and the seqs decide.

    Holding one message back is enough as long as the server keeps what it acknowledged (a
    writer publishes only once the message before is acknowledged, so nothing is chained on a
    message the leader lacks); when it does not, the chain tells which message was lost.
    Messages without Journal-Prev (written before it existed) are handed on unchecked."""

    def __init__(self, leader_copy: Callable[[int], _StoredMsg | None], start_sseq: int, prev_sseq: int,
                 prev_digest: str, leader: bool = False, disowned: set[int] | None = None) -> None:
        """Messages from stream sequence ``start_sseq`` on; ``prev_sseq`` and ``prev_digest``: the
        message just before it, if known (else 0 and ""). ``disowned``: stream sequences of
        messages a read from the leader dropped (the handle's, kept across reads, added to here),
        dropped from a consumer's read too, without going to the leader again."""
        self._leader_copy = leader_copy  # STREAM.MSG.GET of one stream sequence
        self._leader = leader
        self._disowned = disowned if disowned is not None else set()
        self._prev_sseq = prev_sseq  # the last message seen (handed on, or held) and its digest
        self._prev_digest = prev_digest
        self.out_sseq = max(prev_sseq, start_sseq - 1)  # the last message handed on (or before the start)
        self.out_digest = prev_digest
        self._held: _StoredMsg | None = None
        self.dropped: list[str] = []  # (leader) why each message dropped was dropped

    def take(self, m: _StoredMsg) -> list[_StoredMsg]:
        """The messages that can be handed on now that ``m`` came (in order); ``m`` is held if a
        later message can vouch for it."""
        out: list[_StoredMsg] = []
        named = m.headers.get(H_PREV)
        chained = _chained_on(m)
        known = self._prev_sseq > 0 and bool(self._prev_digest)
        vouches = named is not None and chained == self._prev_sseq and known
        if not self._leader and named is not None and chained is not None and known and chained > self._prev_sseq:
            raise _Diverged(self.out_sseq + 1, f"stream message {m.sseq} is chained on message {chained}, which "
                                               "the replica serving this read did not deliver")
        if vouches and named != self._prev_digest:
            why = (f"stream message {m.sseq} is chained on message {self._prev_sseq} with digest {named}, and the "
                   f"message there has digest {self._prev_digest}")
            held = self._held
            if not self._leader and (held is None or held.sseq not in self._disowned):
                raise _Diverged(self.out_sseq + 1, why)
            if held is not None:  # the server's, not the journal's: see the class doc
                self.dropped.append(f"{why}: the server holds another message than the one a writer was "
                                    f"acknowledged at {self._prev_sseq}; skipped it")
                self._disowned.add(held.sseq)
                self._held = None
            vouches = False
        if self._held is not None:
            if not vouches and not self._leader:
                self._check_with_leader(self._held)  # a lost race, or an older writer: nothing else will
            out.append(self._held)
            self._held = None
        self._prev_sseq, self._prev_digest = m.sseq, m.digest()
        if named is None:
            out.append(m)
        else:
            self._held = m
        if out:
            self.out_sseq = out[-1].sseq
            self.out_digest = out[-1].digest()
        return out

    @property
    def holding(self) -> bool:
        """Whether a message is held, waiting for the next one or the leader to vouch for it."""
        return self._held is not None

    def settle(self, leader: _StoredMsg | None = None, wait_absent: bool = False) -> list[_StoredMsg]:
        """The held message, handed on once the leader's copy (``leader`` if it is that one) has
        its digest: when no message is to come after it, or none for now (follow). With
        ``wait_absent`` (follow), a message the leader does not hold (yet) stays held."""
        held = self._held
        if held is None:
            return []
        if not self._leader:
            copy = leader if leader is not None and leader.sseq == held.sseq else self._leader_copy(held.sseq)
            if copy is None:
                if wait_absent:
                    return []
                raise _Diverged(self.out_sseq + 1, f"stream message {held.sseq} as a replica served it is not "
                                                   "on the stream leader")
            self._check_with_leader(held, copy)
        self._held = None
        self.out_sseq, self.out_digest = held.sseq, held.digest()
        return [held]

    def _check_with_leader(self, m: _StoredMsg, copy: _StoredMsg | None = None) -> None:
        if copy is None:
            copy = self._leader_copy(m.sseq)
        if copy is None or copy.subject != m.subject or (
            copy.digest() != m.digest()
        ):
            raise _Diverged(self.out_sseq + 1, f"stream message {m.sseq} as a replica served it is not the stream "
                                               "leader's (it holds another message there, or none)")


def _records_after(
    verified: list[tuple[_StoredMsg, list[Record]]], expect: int, after_seq: int
) -> Generator[Record, None, int]:
    """follow()'s records of ``verified`` past ``after_seq``; the seq expected after them."""
    for _m, recs in verified:
        for rec in recs:
            expect = rec.seq + 1
            if rec.seq > after_seq:
                yield rec
    return expect


class _OrderedReader:
    """An ordered push consumer on one subject from a stream sequence (nats-py's ordered mode:
    flow control, heartbeats, and a reset from the last sequence seen if delivery skips).

    It hands out the subject's messages from its start on, each once, in order, which the
    consumer alone does not promise. The consumer is ephemeral, of one replica, on any server of
    the stream, and nats-server 2.9 starts a consumer asked to begin past the last message its
    server has right after that message: on a replica behind the leader (whose acks and
    STREAM.MSG.GET told the reader where to start) it delivers messages from before the start
    (tests/test_remote_nats_race.py). nats-py's ordered mode, reset before its first message,
    starts again from stream sequence 1. A stream sequence names one message for good, so a
    message below the next one expected lies before the start or was handed out already: it is
    dropped here. Taken in, the first such message read as one that lost a race (``_lost_race``)
    and the next, chained on it, as a second copy of committed seqs (SequenceError)."""

    def __init__(self, conn: _Conn, stream: str, subject: str, start_sseq: int, timeout_s: float) -> None:
        self._conn = conn
        self._stream = stream
        self._subject = subject
        self._start = max(1, start_sseq)
        self._next = self._start  # the lowest stream sequence still to hand out
        self._timeout_s = timeout_s
        self._sub: Any = None

    async def start(self) -> None:
        js = self._conn.nc.jetstream(timeout=self._timeout_s)
        config = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._start,
        )
        try:
            self._sub = await js.subscribe(self._subject, stream=self._stream, ordered_consumer=True, config=config,
                                           pending_bytes_limit=64 * 1024 * 1024)
        except nats.errors.TimeoutError as exc:
            raise _Lost(f"creating a consumer timed out ({exc})") from exc
        except nats.js.errors.APIError as exc:
            raise _Refused(f"creating a consumer was refused ({exc})", exc.code or 0, exc.err_code or 0) from exc

    async def next_chunk(
        self, end_sseq: int | None, max_msgs: int, max_bytes: int, wait_s: float | None = None
    ) -> list[_StoredMsg]:
        """Up to ``max_msgs`` messages (``max_bytes``), up to ``end_sseq``. With ``end_sseq`` it waits
        for the first one up to the read timeout (_Lost after); without (follow) up to ``wait_s``."""
        out: list[_StoredMsg] = []
        size = 0
        first_wait = self._timeout_s if end_sseq is not None else (wait_s or 0.02)
        while len(out) < max_msgs and size < max_bytes:
            try:
                msg = await self._sub.next_msg(timeout=first_wait if not out else 0.0005)
            except nats.errors.TimeoutError:
                if not out and end_sseq is not None:
                    raise _Lost(f"no message within {first_wait:g} s while reading up to {end_sseq}") from None
                break
            sseq = int(msg.metadata.sequence.stream)
            if sseq < self._next:
                continue  # before the start, or handed out already (see the class doc)
            self._next = sseq + 1
            headers = {k: str(v) for k, v in (msg.headers or {}).items()}
            out.append(_StoredMsg(sseq, msg.subject, headers, bytes(msg.data)))
            size += len(msg.data)
            if end_sseq is not None and sseq >= end_sseq:
                break
        return out

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except (nats.errors.Error, OSError):
                pass
