"""Writers racing on a replicated JetStream stream, where nats-server 2.9 does not serialize the
expected last subject sequence of publishes in flight (two racers that read the same state can
both be stored: shown on the 3-node cluster by the first test). What the backend must hold all
the same: one writer wins each race for each place in the chain of messages, and every record a writer
was told is committed is there with its bytes, at its seq, once.

And readers behind the leader: a consumer on a replica that lags the stream's leader is handed
messages from before the start it asked for (shown on the server by the third test); readers
drop them, and never take them for a race lost or for corruption."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import uuid
from typing import Any

import pytest

import journal
from tests.backends import require_services
from tests.nats_cluster import cluster, skip_reason
from tests.test_remote_nats_shared import OPTS, _close, _CountingOutbox, hold_bursts, stream, url  # noqa: F401

ROUNDS = 12
RACERS = 4


@pytest.fixture(scope="module")
def servers() -> list[str]:
    why = skip_reason()
    if why is not None:
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {why}")
        pytest.skip(why)
    return [f"nats://127.0.0.1:{p}" for p in cluster().client_ports]


def test_the_server_stores_two_racers_on_one_expected_subject_sequence(servers: list[str]) -> None:
    """The fault the backend must live with, shown on the server itself: publishes in flight
    with one expected last subject sequence are often all stored; with one message id, one is.
    The first count is printed, not asserted (it is the server's timing); the second is the
    property the backend relies on (jetstream.chain_id)."""
    import nats as nats_client

    async def run() -> tuple[int, int]:
        nc = await nats_client.connect(servers=servers)
        js = nc.jetstream()
        name = "RACE" + uuid.uuid4().hex[:8].upper()
        await js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=3)
        try:
            await js.publish(f"{name}.a", b"0")
            doubled = deduped_doubled = 0
            for _ in range(ROUNDS):
                last = (await js.get_last_msg(name, f"{name}.a")).seq

                async def one(i: int, with_id: bool, last: int = last) -> bool:
                    h = {"Nats-Expected-Last-Subject-Sequence": str(last)}
                    if with_id:
                        h["Nats-Msg-Id"] = f"a@{last}"
                    msg = await nc.request(f"{name}.a", str(i).encode(), timeout=10, headers=h)
                    ack = json.loads(msg.data)
                    return "error" not in ack and not ack.get("duplicate")

                got = await asyncio.gather(*(one(i, False) for i in range(RACERS)))
                doubled += sum(got) > 1
                last = (await js.get_last_msg(name, f"{name}.a")).seq
                got = await asyncio.gather(*(one(i, True) for i in range(RACERS)))
                deduped_doubled += sum(got) > 1
            return doubled, deduped_doubled
        finally:
            await js.delete_stream(name)
            await nc.close()

    doubled, deduped_doubled = asyncio.run(run())
    assert deduped_doubled == 0
    print(f"rounds where more than one racer was stored: {doubled} of {ROUNDS} (message id: 0)")


def test_a_writer_whose_claim_lapsed_and_the_next_writer_race_and_one_loses(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 - the fixture imported above
    """The fencing case the server's race reaches: writer A still appends while writer B holds
    the journal (A's claim lapsed without A knowing; here B's claim check is skipped, the state
    that race leaves), both chained on the same last message, both publishes leaving in one
    burst. At most one may be stored and reported Committed; the other handle gets NotCommitted
    and fail-stops, and every Committed record reads back at its seq with its bytes."""
    from journal.remote import jetstream

    a: Any = journal.open(url, create=True, **OPTS)
    assert a.append({"a": 0}, durability="sync") == journal.Committed(1, "sync")
    monkeypatch.setattr(jetstream.JetStreamJournal, "_take_claim", lambda self, *args, **kwargs: True)
    b: Any = journal.open(url, **OPTS)
    monkeypatch.undo()
    assert a._conn is b._conn and a._last_sseq == b._last_sseq  # one connection, one last message
    conn = a._conn
    outcomes: dict[str, journal.Outcome] = {}
    hold_bursts(monkeypatch)
    conn._outbox = _CountingOutbox(2)
    gate = threading.Barrier(2, timeout=30)

    def one(h: Any, name: str) -> None:
        gate.wait()
        outcomes[name] = h.append({"w": name}, durability="sync")

    threads = [threading.Thread(target=one, args=(h, n)) for h, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    monkeypatch.undo()
    _close(a, b)
    won = [n for n, o in outcomes.items() if isinstance(o, journal.Committed)]
    assert len(won) == 1, outcomes
    lost = "b" if won == ["a"] else "a"
    assert isinstance(outcomes[lost], journal.NotCommitted), outcomes
    with journal.open(url, readonly=True, **OPTS) as r:
        assert [x.event for x in r.read()] == [{"a": 0}, {"w": won[0]}]


# --- readers handed messages from before their start ---------------------------------------------


def test_a_consumer_asked_to_start_past_its_servers_last_message_starts_after_it(servers: list[str]) -> None:
    """The fault readers must live with, shown on the server itself: a consumer asked to start at
    a stream sequence past the last message its server has is handed the messages from the one
    after that (nats-server 2.9 moves the start back). The journal's ordered consumers are
    ephemeral, one replica each, placed on any server of the stream; on a replica that lags the
    leader (whose acks and STREAM.MSG.GET told the reader what it knows) the start the reader asks
    for can be past what that replica has, and it is handed messages from before it."""
    import nats as nats_client
    from nats.js import api as js_api

    async def run() -> tuple[int, int, list[int]]:
        nc = await nats_client.connect(servers=servers)
        js = nc.jetstream()
        name = "START" + uuid.uuid4().hex[:8].upper()
        await js.add_stream(name=name, subjects=[f"{name}.>"], num_replicas=3)
        try:
            last = 0
            for i in range(3):
                last = (await js.publish(f"{name}.a", str(i).encode())).seq
            ask = last + 5
            config = js_api.ConsumerConfig(deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=ask)
            sub = await js.subscribe(f"{name}.a", stream=name, ordered_consumer=True, config=config)
            for _ in range(6):
                await js.publish(f"{name}.a", b"after")
            got = [int((await sub.next_msg(timeout=10)).metadata.sequence.stream) for _ in range(6)]
            await sub.unsubscribe()
            return last, ask, got
        finally:
            await js.delete_stream(name)
            await nc.close()

    last, ask, got = asyncio.run(run())
    assert got[0] <= last + 1 < ask, (last, ask, got)  # handed messages from before the start asked for
    assert got == list(range(got[0], got[0] + 6)), got


CONSUMER_LAG = 4  # stream messages that every consumer's server is behind, in the test below


def test_readers_handed_messages_from_before_their_start_drop_them(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 - the fixture imported above
    """What the fault above does to the journal, forced: every ordered consumer the journal makes
    starts CONSUMER_LAG stream messages before the start it asks for, as on a replica that far
    behind the leader. A shared writer more than CATCH_UP_GETS_MAX messages behind (its catch-up
    reads the rest through a consumer), a read and a follow past what a reader knows: each is
    handed messages it already knows, drops them, and reads on. Before, the first of them was
    skipped as a message that lost a race, and the next, chained on it, read as corruption ("seq N
    is held twice"): the shared writer fail-stopped with NotCommitted, the reader raised."""
    from journal.remote import jetstream
    from tests.test_remote_nats_shared import Ledger, check

    ledger = Ledger()
    a: Any = journal.open(url, create=True, writer="shared", **OPTS)
    b: Any = journal.open(url, writer="shared", **OPTS)  # knows the journal as it is now: empty
    r: Any = journal.open(url, readonly=True, **OPTS)
    try:
        for n in range(2):
            ledger.add(f"a{n}", {"a": n}, a.append({"a": n}, durability="sync", idempotency_key=f"a{n}"))
        assert [x.seq for x in r.read()] == [1, 2] and r.get(2) is not None  # r knows seqs 1 and 2 now
        for n in range(2, 2 + jetstream.CATCH_UP_GETS_MAX + 4):
            ledger.add(f"a{n}", {"a": n}, a.append({"a": n}, durability="sync", idempotency_key=f"a{n}"))
        top = len(ledger.entries)
        asked: list[int] = []
        real_start = jetstream._OrderedReader.start

        async def lagging_start(self: Any) -> None:
            asked.append(self._start)
            self._start = max(1, self._start - CONSUMER_LAG)
            await real_start(self)

        monkeypatch.setattr(jetstream._OrderedReader, "start", lagging_start)
        out = b.append({"b": 0}, durability="sync", idempotency_key="b0")
        assert asked, "the catch-up took no consumer"
        assert out == journal.Committed(top + 1, "sync"), out
        ledger.add("b0", {"b": 0}, out)
        assert [x.seq for x in r.read(after_seq=2)] == list(range(3, top + 2))
        assert [x.seq for x in itertools.islice(r.follow(after_seq=2), top - 1)] == list(range(3, top + 2))
        out = b.append({"b": 1}, durability="sync", idempotency_key="b1")  # b goes on
        assert out == journal.Committed(top + 2, "sync"), out
        ledger.add("b1", {"b": 1}, out)
        assert len(asked) >= 3
        monkeypatch.undo()
    finally:
        _close(a, b, r)
    assert check(url, ledger)["records"] == top + 2
