"""A replica that serves a message its stream leader does not hold (journal/remote/jetstream.py,
``_LeaderCheck``), on the real 3-node cluster of tests/nats_cluster.py.

nats-server 2.9 can leave a replica, after its leader is killed, with the killed leader's last
message at a stream sequence where the new leader holds another one: an ordered consumer placed
on that replica delivers it. That cannot be arranged on demand, so these tests put it in the
consumer's delivery: ``_OrderedReader.next_chunk`` hands out a *ghost* in place of a message the
leader holds, made the way a killed writer makes one (the same headers and chain, frames of
other events under the same seqs, or of more records). Every reader and a writer's open must
return what the leader holds, and say that a replica served something else.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import journal
from journal.engine.encoding import encode_event
from journal.engine.options import Options
from journal.remote import jetstream, records
from journal.remote.jetstream import H_COUNT, H_SEQ, JetStreamJournal, _OrderedReader, _StoredMsg
from tests.nats_cluster import Cluster

BATCHES = 6  # messages of the journal, each of BATCH records
BATCH = 3


def _event(batch: int, i: int, ghost: bool = False) -> dict[str, Any]:
    return {"batch": batch, "i": i, "text": ("never acknowledged " if ghost else "acknowledged ") * 8}


def _write(url: str) -> tuple[list[dict[str, Any]], list[int], int]:
    """BATCHES messages of BATCH records; (the events, each message's stream sequence, the salt)."""
    events: list[dict[str, Any]] = []
    with journal.open(url, create=True) as j:
        assert isinstance(j, JetStreamJournal)
        for b in range(BATCHES):
            batch = [_event(b, i) for i in range(BATCH)]
            for out in j.append_many(batch, durability="sync"):
                assert isinstance(out, journal.Committed)
            events += batch
        sseqs = list(j._idx_sseq)
        salt = j._salt
    assert len(sseqs) == BATCHES
    return events, sseqs, salt


def _ghost_of(m: _StoredMsg, salt: int, extra: int) -> _StoredMsg:
    """What a killed writer's message at ``m``'s place looks like: the same headers and chain,
    frames of other events under the same seqs (and ``extra`` more records)."""
    first, count = int(m.headers[H_SEQ]), int(m.headers[H_COUNT]) + extra
    body = b"".join(
        records.frame_of(encode_event(_event(-1, k, ghost=True), None, False, Options()), first + k, salt)
        for k in range(count)
    )
    return _StoredMsg(m.sseq, m.subject, {**m.headers, H_COUNT: str(count)}, body)


class Replica:
    """The consumer's server: it serves ``ghosts`` ({stream sequence: (salt, extra records)}) in
    place of the leader's messages there, leaves out the ``missing`` ones, and counts how many
    times it did either."""

    def __init__(self) -> None:
        self.ghosts: dict[int, tuple[int, int]] = {}
        self.missing: set[int] = set()  # stream sequences it does not hold at all
        self.served = 0


@pytest.fixture
def replica(monkeypatch: pytest.MonkeyPatch) -> Iterator[Replica]:
    rep = Replica()
    real = _OrderedReader.next_chunk

    async def next_chunk(self: _OrderedReader, *args: Any, **kwargs: Any) -> list[_StoredMsg]:
        out = []
        for m in await real(self, *args, **kwargs):
            if m.sseq in rep.missing:
                rep.served += 1
                continue
            if m.sseq in rep.ghosts:
                m = _ghost_of(m, *rep.ghosts[m.sseq])
                rep.served += 1
            out.append(m)
        return out

    monkeypatch.setattr(_OrderedReader, "next_chunk", next_chunk)
    yield rep
    assert rep.served > 0, "no ghost was served, no message left out: the test did not test anything"


def _said(j: journal.api.Journal) -> list[str]:
    return [a for a in j.recovery.actions if "a replica served" in a]


@pytest.mark.parametrize("where", ["middle", "last"])
@pytest.mark.parametrize("extra", [0, 2], ids=["same-seqs", "more-records"])
def test_readers_and_a_writers_open_take_the_leaders_message(
    nats: Cluster, replica: Replica, where: str, extra: int
) -> None:
    url = nats.url(f"journal=ghost-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, sseqs, salt = _write(url)
    ghost_sseq = sseqs[BATCHES // 2] if where == "middle" else sseqs[-1]
    replica.ghosts[ghost_sseq] = (salt, extra)
    with journal.open(url, readonly=True) as r:
        assert len(_said(r)) == 1, r.recovery.actions  # the open reads the whole journal
        served = replica.served
        assert [rec.event for rec in r.read()] == events
        assert [rec.event for rec in r.read(after_seq=BATCH)] == events[BATCH:]
        assert [rec.event for rec in r.follow(idle_timeout_s=0.5)] == events
        assert replica.served == served + 3  # each read met the ghost, and said so once
        assert any("followed on from the stream leader" in a for a in _said(r)), r.recovery.actions
    with journal.open(url) as w:  # a writer's open reads the whole journal through a consumer too
        assert _said(w), w.recovery.actions
        assert w.last_seq == len(events)
        out = w.append({"after": "the ghost"}, durability="sync")
        assert isinstance(out, journal.Committed) and out.seq == len(events) + 1
    served = replica.served
    replica.ghosts.clear()
    with journal.open(url, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [*events, {"after": "the ghost"}]
        assert _said(r) == []
    assert replica.served == served


def test_a_follower_takes_the_leaders_copy_of_the_newest_message(nats: Cluster, replica: Replica) -> None:
    """follow() holds the last message it has until the next one vouches for it or, when none
    comes for a poll, the leader's copy does: a ghost there is read from the leader."""
    url = nats.url(f"journal=ghostf-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, _, salt = _write(url)
    with journal.open(url) as w:
        assert isinstance(w, JetStreamJournal)
        w.append_many([_event(BATCHES, i) for i in range(BATCH)], durability="sync")
        replica.ghosts[w._last_sseq] = (salt, 1)  # the newest message, served as a ghost
        events += [_event(BATCHES, i) for i in range(BATCH)]
        with journal.open(url, readonly=True) as r:
            seen = []
            for rec in r.follow(idle_timeout_s=0.5):
                seen.append(rec.event)
            assert seen == events
            assert _said(r), r.recovery.actions


def test_without_the_check_the_ghost_is_read(nats: Cluster, replica: Replica,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault the check is for, shown: a reader that hands on what the consumer delivers
    returns events nobody acknowledged (or stops on an overlap that is not there)."""
    url = nats.url(f"journal=ghostn-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, sseqs, salt = _write(url)
    replica.ghosts[sseqs[1]] = (salt, 0)

    class NoCheck(jetstream._LeaderCheck):
        def take(self, m: _StoredMsg) -> list[_StoredMsg]:
            return [m]

    monkeypatch.setattr(jetstream.catch_up, "_LeaderCheck", NoCheck)
    with journal.open(url, readonly=True) as r:
        got = [rec.event for rec in r.read()]
    assert got != events and any("never acknowledged" in e["text"] for e in got)


def test_messages_written_before_the_digest_header_are_read_unchecked(
    nats: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal whose messages carry no Journal-Prev (an older writer's) reads as before, and a
    writer of this version appends to it: its first message names the old last one's digest."""
    url = nats.url(f"journal=ghosto-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")

    def old_chain(chained_sseq: int, chained_digest: str) -> dict[str, str]:
        return {jetstream.H_EXPECT_SUBJECT_SEQ: str(chained_sseq)}

    with monkeypatch.context() as m:
        m.setattr(jetstream.writer, "chain_headers", old_chain)
        events, _, _ = _write(url)
    with journal.open(url) as w:
        w.append({"new": 1}, durability="sync")
        w.append({"new": 2}, durability="sync")
    with journal.open(url, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [*events, {"new": 1}, {"new": 2}]
        assert _said(r) == []


def test_a_message_the_next_one_disowns_is_not_the_journals(nats: Cluster) -> None:
    """The leader itself may hold, at a stream sequence, another message than the one a writer
    was acknowledged there: after a leader kill, 2.9 was seen to lose a writer's acknowledged
    fence and keep the killed writer's last, unacknowledged message in its place, and the
    writer, chained on its fence, wrote the same seq again (the leader-kill test, CI of e8b8e09:
    "seq N is held twice"). Made here on the server as it was: message A holds seq L+1, chained
    on the last message; B holds seq L+1 again, chained on A's stream sequence but naming a
    fence's digest. Readers take B, skip A and say so; a writer appends after B."""
    url = nats.url(f"journal=ghostd-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, _, salt = _write(url)
    last = len(events)
    lost, acked = {"never": "acknowledged"}, {"acknowledged": "after a fence the server lost"}
    with journal.open(url) as w:
        assert isinstance(w, JetStreamJournal)

        def publish(event: dict[str, Any], chained: int, prev_digest: str) -> int:
            body = records.frame_of(encode_event(event, None, False, Options()), last + 1, salt)
            headers = {H_SEQ: str(last + 1), H_COUNT: "1", jetstream.H_EXPECT_STREAM: w._stream,
                       jetstream.H_MSG_ID: jetstream.chain_id(w._journal_id, chained),
                       **jetstream.chain_headers(chained, prev_digest)}
            ack = w._call(w._c().publish(w._subject, body, headers, w._ack_timeout_s), w._ack_timeout_s)
            return int(ack["seq"])

        fence = {jetstream.H_KIND: jetstream.KIND_FENCE, H_SEQ: str(last),
                 **jetstream.chain_headers(w._last_sseq, w._last_digest)}
        a = publish(lost, w._last_sseq, w._last_digest)
        publish(acked, a, jetstream.message_digest(fence, b""))
    for readonly in (True, False):
        with journal.open(url, readonly=readonly) as r:
            assert [rec.event for rec in r.read()] == [*events, acked]
            skipped = [x for x in r.recovery.actions if "skipped it" in x]
            assert skipped and f"at {a}; skipped it" in skipped[0], r.recovery.actions
            assert r.last_seq == last + 1
            if not readonly:
                out = r.append({"after": "B"}, durability="sync")
                assert isinstance(out, journal.Committed) and out.seq == last + 2
    with journal.open(url, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [*events, acked, {"after": "B"}]
        assert [rec.event for rec in r.follow(idle_timeout_s=0.5)] == [*events, acked, {"after": "B"}]


def test_a_shared_writer_catching_up_skips_a_disowned_message(nats: Cluster) -> None:
    """A shared writer whose publish is refused catches up with STREAM.MSG.GET from the leader
    (``_catch_up_shared``): it drops a message the next one disowns, as readers do, and appends
    after the successor. Taken in, the disowned message's seq met its successor's as "held
    twice", and the writer failed."""
    url = nats.url(f"journal=ghosts-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, _, salt = _write(url)
    last = len(events)
    lost, acked = {"never": "acknowledged"}, {"acknowledged": "then lost by the server"}
    with journal.open(url, writer="shared") as w, journal.open(url, writer="shared") as other:
        assert isinstance(w, JetStreamJournal) and isinstance(other, JetStreamJournal)

        def publish(event: dict[str, Any], chained: int, prev_digest: str) -> int:
            body = records.frame_of(encode_event(event, None, False, Options()), last + 1, salt)
            headers = {H_SEQ: str(last + 1), H_COUNT: "1", jetstream.H_EXPECT_STREAM: other._stream,
                       jetstream.H_MSG_ID: jetstream.chain_id(other._journal_id, chained),
                       jetstream.H_WRITER: jetstream.WRITER_SHARED,
                       **jetstream.chain_headers(chained, prev_digest)}
            ack = other._call(other._c().publish(other._subject, body, headers, other._ack_timeout_s),
                              other._ack_timeout_s)
            return int(ack["seq"])

        # The message the server lost: acknowledged to its writer, its digest named by the next.
        gone = {H_SEQ: str(last + 1), H_COUNT: "1", jetstream.H_WRITER: jetstream.WRITER_SHARED,
                **jetstream.chain_headers(other._last_sseq, other._last_digest)}
        a = publish(lost, other._last_sseq, other._last_digest)
        publish(acked, a, jetstream.message_digest(gone, b"lost"))
        out = w.append({"after": "B"}, durability="sync")  # refused (behind): it catches up first
        assert isinstance(out, journal.Committed) and out.seq == last + 2, out
        skipped = [x for x in w.recovery.actions if "skipped it" in x]
        assert skipped and f"at {a}; skipped it" in skipped[0], w.recovery.actions
    with journal.open(url, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [*events, acked, {"after": "B"}]


@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_replica_without_a_message_does_not_hide_it(nats: Cluster, replica: Replica,
                                                      monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A consumer that does not deliver a message the leader holds: the next message is chained
    on one it did not deliver (middle), or the read's last one never comes (last, after the read
    timeout): either way the rest is read from the leader, nothing is skipped."""
    url = nats.url(f"journal=ghostm-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, sseqs, _ = _write(url)
    replica.missing.add(sseqs[BATCHES // 2] if where == "middle" else sseqs[-1])
    with journal.open(url, readonly=True, ack_timeout_s=1.0) as r:
        assert [rec.event for rec in r.read()] == events
        assert [rec.event for rec in r.read(after_seq=BATCH)] == events[BATCH:]
        assert _said(r), r.recovery.actions


class LeaderDown:
    """STREAM.MSG.GET of one stream sequence (the leader check's) failing as in an election:
    the first ``fails`` calls raise _Lost (all of them when None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fails: int | None) -> None:
        self.fails = fails
        self.calls = 0
        real = JetStreamJournal._leader_copy

        def leader_copy(j: JetStreamJournal, sseq: int) -> _StoredMsg | None:
            self.calls += 1
            if self.fails is None or self.calls <= self.fails:
                raise jetstream._Lost("no answer from the server (injected: an election)")
            return real(j, sseq)

        monkeypatch.setattr(JetStreamJournal, "_leader_copy", leader_copy)


def test_a_leader_check_that_gets_no_answer_is_asked_again_or_fails_the_follow(
    nats: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader check's own I/O. A read vouches for its last message with the leader's last
    message, which it reads anyway to know where to stop: no other call. follow() asks for the
    leader's copy when it goes idle: it tries again at its next poll, and at its idle timeout it
    raises JournalIOError rather than end quietly short of the message it holds."""
    url = nats.url(f"journal=ghostl-{uuid.uuid4().hex[:8]}&stream=GHOST&replicas=3")
    events, _, _ = _write(url)
    with journal.open(url, readonly=True) as r:
        down = LeaderDown(monkeypatch, None)
        assert [rec.event for rec in r.read()] == events
        assert down.calls == 0
        with pytest.raises(journal.JournalIOError, match="following the journal failed"):
            list(r.follow(idle_timeout_s=0.3))
        down.fails, down.calls = 2, 0
        assert [rec.event for rec in r.follow(idle_timeout_s=0.5)] == events
        assert down.calls > 2  # it was asked again after the failures
        down.fails, down.calls = 0, 0
        assert [rec.event for rec in r.read()] == events
