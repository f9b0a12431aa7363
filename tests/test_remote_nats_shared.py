"""Shared writers on NATS JetStream (``writer="shared"``), on a real 3-node nats-server 2.9 cluster.

Several handles, in several processes, append to one journal. After every test one checker
(``check``) holds: seqs contiguous from 1, no idempotency key held twice, every Committed
outcome at its seq with its exact bytes and key, and no record that no outcome accounts for
(except, where a child was SIGKILLed, the batch it had in flight).

- processes opening (and making) one journal at once and appending at once;
- a handle that is behind: refused, caught up, published again at the next seqs;
- two publishes chained on one message, in one burst: one comes second (refused, or stored
  after the other, which nats-server 2.9 lets through on a replicated stream), catches up and
  publishes again; a message stored second is skipped by every reader;
- the same event at the same seq from two handles: two records (the second is answered as a
  duplicate of the first's place in the chain, catches up and is published again);
- a key another handle wrote: a duplicate of that record (or a conflict for another event);
- shared writers exclude an exclusive writer and the reverse, and the last one out releases;
- a shared writer SIGKILLed mid-burst: the others go on, and its claim lapses;
- AckLost: fail-stop until reopened, resolve() answers from the stream, and its NotCommitted
  is final (the message that was on its way can no longer land);
- a batch that keeps losing the race: NotCommitted after shared_lock_timeout_s, the handle goes on;
- an exclusive writer that took a lapsed claim: the shared writer sees its fence and stops.

Interleavings are forced with pipes to child processes and hooks between steps, never sleeps.

    python -m tests.test_remote_nats_shared child URL NAME ITERATIONS   # the processes' child
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import journal
from journal.engine.encoding import encode_event
from journal.engine.options import Options
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome
from tests.conftest import report_count
from tests.nats_cluster import Cluster

CLAIM_TTL_S = 4.0  # the lock bucket's max_age in this module's stream: how long a dead writer's claim lasts
OPTS: dict[str, Any] = {"claim_ttl_s": CLAIM_TTL_S, "connect_timeout_s": 60.0}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def stream(nats: Cluster) -> Iterator[str]:
    """This module's R3 stream (made by its first open, with a lock bucket of CLAIM_TTL_S)."""
    from tests.backend_nats import drop_streams

    name = f"SHARED{uuid.uuid4().hex[:8].upper()}"
    with journal.open(nats.url(f"journal=first&stream={name}&replicas=3"), create=True, **OPTS):
        pass  # the stream and its lock bucket made now, not by processes racing in a test
    yield name
    asyncio.run(drop_streams(_servers(nats), lambda n: n == name))


@pytest.fixture
def url(nats: Cluster, stream: str) -> str:
    return nats.url(f"journal=sh-{uuid.uuid4().hex[:10]}&stream={stream}&replicas=3")


def _servers(c: Cluster) -> list[str]:
    return [f"nats://127.0.0.1:{p}" for p in c.client_ports]


def _raw(event: Any, key: str | None) -> bytes:
    return encode_event(event, key, False, Options()).raw


def _close(*handles: journal.api.Journal) -> None:
    for h in handles:
        try:
            h.close()
        except journal.JournalFailStoppedError:
            pass


# --- the checker ---------------------------------------------------------------------------


@dataclass
class Ledger:
    """What appends were answered: (key, event, outcome), from any handle or process."""

    entries: list[tuple[str, Any, Outcome]] = field(default_factory=list)
    mu: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, event: Any, outcome: Outcome) -> None:
        with self.mu:
            self.entries.append((key, event, outcome))


def check(url: str, ledger: Ledger, may_hold: frozenset[str] = frozenset()) -> dict[str, int]:
    """The one checker (module doc); ``may_hold``: keys a killed child had in flight, which the
    journal may hold without an outcome. What it counted."""
    counts = {"records": 0, "committed": 0, "duplicates": 0}
    with journal.open(url, readonly=True, **OPTS) as r:
        recs = list(r.read())
    seqs = [x.seq for x in recs]
    assert seqs == list(range(1, len(recs) + 1)), f"seqs not contiguous from 1: {seqs[:8]}..{seqs[-8:]}"
    keys = [x.key for x in recs if x.key is not None]
    held_twice = sorted({k for k in keys if keys.count(k) > 1})
    assert not held_twice, f"idempotency keys held twice: {held_twice[:5]}"
    by_seq = {x.seq: x for x in recs}
    vouched: set[str] = set()
    for key, event, out in ledger.entries:
        if not isinstance(out, Committed):
            continue
        rec = by_seq.get(out.seq)
        assert rec is not None, f"Committed {key} at seq {out.seq} is not in the journal"
        assert rec.key == key and rec.payload == _raw(event, key), f"seq {out.seq} holds other bytes than {key}"
        vouched.add(key)
        counts["committed"] += 1
        counts["duplicates"] += out.duplicate
    stray = sorted(k for k in keys if k not in vouched and k not in may_hold)
    assert not stray, f"records no outcome accounts for: {stray[:5]}"
    counts["records"] = len(recs)
    return counts


# --- the child process -----------------------------------------------------------------------


def plan(name: str, i: int) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Iteration ``i`` of child ``name``: (key, event) pairs for one call, and its durability.
    Every third iteration is a key every child tries with the same event (one record each, the
    others duplicates); some are append_many of two."""
    durability = ("sync", "flush", "buffered")[i % 3]
    if i % 3 == 0:
        return [(f"shared-{i}", {"shared": i})], durability
    own = (f"{name}-{i}", {"w": name, "i": i, "pad": "p" * (i * 13 % 200)})
    if i % 5 == 1:
        return [own, (f"{name}-{i}-b", {"w": name, "i": i, "second": True})], durability
    return [own], durability


def _child(url: str, name: str, iterations: int) -> int:
    """Say "ready"; on "open", open the journal as a shared writer (making it if need be); say
    "open"; on "go", append plan(name, 0), plan(name, 1), ... (``iterations``, or until "stop"
    comes), printing each outcome once its call returned; then close and say "closed"."""
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "open":
        return 2
    j = journal.open(url, create=True, writer="shared", **OPTS)
    print("open", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    stop = threading.Event()

    def wait_stop() -> None:
        sys.stdin.readline()  # "stop", or the parent's end
        stop.set()

    threading.Thread(target=wait_stop, daemon=True).start()
    i = 0
    while not stop.is_set() and i != iterations:
        pairs, durability = plan(name, i)
        if len(pairs) == 1:
            outs = [j.append(pairs[0][1], durability=durability, idempotency_key=pairs[0][0])]
        else:
            outs = j.append_many([e for _, e in pairs], durability=durability, idempotency_keys=[k for k, _ in pairs])
        for k, out in enumerate(outs):
            if not isinstance(out, Committed):
                print(json.dumps(["bad", repr(out)]), flush=True)
                return 3
            print(json.dumps([i, k, out.seq, out.duplicate, out.durability]), flush=True)
        i += 1
    j.close()
    print(f"closed {j._refusals} {j._lost_races}", flush=True)  # type: ignore[attr-defined]
    return 0


class Child:
    """A child process and a thread that reads its lines as they come."""

    def __init__(self, url: str, name: str, iterations: int) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_remote_nats_shared", "child", url, name, str(iterations)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        self.lines: list[str] = []
        self.cv = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.strip())
                self.cv.notify_all()
        with self.cv:
            self.lines.append("<eof>")
            self.cv.notify_all()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, pred: Any, what: str, timeout_s: float = 120.0) -> None:
        """Until ``pred(lines)``; a child that stopped (or said "bad") instead fails the test."""
        with self.cv:
            ok = self.cv.wait_for(lambda: pred(self.lines) or self._ended(), timeout_s)
            if not ok or not pred(self.lines):
                raise AssertionError(f"child {self.name} never got to {what}: {self.lines[-5:]}")

    def _ended(self) -> bool:
        return bool(self.lines) and (self.lines[-1] == "<eof>" or self.lines[-1].startswith('["bad"'))

    def acks(self) -> list[list[Any]]:
        with self.cv:
            return [json.loads(x) for x in self.lines if x.startswith("[") and not x.startswith('["bad"')]

    def ack_count(self) -> int:
        return len(self.acks())

    def entries(self, ledger: Ledger) -> None:
        for i, k, seq, dup, durability in self.acks():
            key, event = plan(self.name, i)[0][k]
            ledger.add(key, event, Committed(seq, durability, dup))

    def end(self) -> None:
        """Wait for a child that said "closed" to exit; kill any other."""
        with self.cv:
            closed = any(x.startswith("closed") for x in self.lines)
        if closed:
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass


def _closed(lines: list[str]) -> bool:
    return any(x.startswith("closed") for x in lines)


def _races(children: list[Child]) -> tuple[int, int]:
    """(publishes refused, publishes that lost a race) over the children that closed."""
    got = [x.split()[1:] for ch in children for x in ch.lines if x.startswith("closed ")]
    return sum(int(a) for a, _ in got), sum(int(b) for _, b in got)


def _start(children: list[Child]) -> None:
    """Every child ready, then all told to open at once (they make the journal together), then,
    once every one has its handle, all told to go at once."""
    for ch in children:
        ch.wait_for(lambda lines: "ready" in lines, "ready")
    for ch in children:
        ch.send("open")
    for ch in children:
        ch.wait_for(lambda lines: "open" in lines, "open")
    for ch in children:
        ch.send("go")


# --- processes ------------------------------------------------------------------------------------


def test_processes_appending_at_once_keep_seqs_contiguous_and_each_key_once(url: str) -> None:
    children = [Child(url, f"c{n}", 36) for n in range(4)]
    try:
        _start(children)
        for ch in children:
            ch.wait_for(_closed, "the end of its appends")
    finally:
        for ch in children:
            ch.end()
    assert all(ch.proc.returncode == 0 for ch in children)
    ledger = Ledger()
    for ch in children:
        ch.entries(ledger)
    assert {o.durability for _, _, o in ledger.entries} <= {"flush", "sync"}  # no buffered level
    got = check(url, ledger)
    # Each shared key is one record; every child's retry of one written by another is a duplicate.
    shared_keys = {k for k, _, _ in ledger.entries if k.startswith("shared-")}
    assert got["duplicates"] == 3 * len(shared_keys)
    assert got["records"] == len({k for k, _, _ in ledger.entries})
    # And a handle of this process that retries the keys the children wrote gets their records.
    with journal.open(url, writer="shared", **OPTS) as j:
        seq_of = {k: o.seq for k, _, o in ledger.entries if isinstance(o, Committed)}
        for key, event, _ in ledger.entries[::7]:
            again = j.append(event, durability="sync", idempotency_key=key)
            assert again == Committed(seq_of[key], "sync", True, again.reason)  # type: ignore[union-attr]
        assert j.last_seq == got["records"]
    refused, lost = _races(children)
    report_count("nats shared: 4 processes x 36 iterations: records / committed outcomes / duplicates / "
                 "publishes refused (caught up) / publishes second in a race (deduplicated, or stored and skipped)",
                 f"{got['records']} / {got['committed']} / {got['duplicates']} / {refused} / {lost}")


def test_a_shared_writer_killed_mid_burst_and_the_others_go_on(url: str) -> None:
    children = [Child(url, f"k{n}", -1) for n in range(3)]
    victim, survivors = children[0], children[1:]
    try:
        _start(children)
        victim.wait_for(lambda lines: len([x for x in lines if x.startswith("[")]) >= 12, "12 acks")
        os.kill(victim.proc.pid, signal.SIGKILL)  # in the middle of its appends: a batch on its way
        victim.proc.wait(30)
        at_kill = [ch.ack_count() for ch in survivors]
        for ch, n in zip(survivors, at_kill, strict=True):
            ch.wait_for(lambda lines, n=n: len([x for x in lines if x.startswith("[")]) >= n + 20,
                        "20 acks after the kill")
        with pytest.raises(journal.JournalLockedError, match="shared writer"):
            journal.open(url, **OPTS)  # an exclusive writer, while shared ones (in other processes) write
        for ch in survivors:
            ch.send("stop")
        for ch in survivors:
            ch.wait_for(_closed, "closed")
    finally:
        for ch in children:
            ch.end()
    assert victim.proc.returncode == -signal.SIGKILL
    assert all(ch.proc.returncode == 0 for ch in survivors)
    ledger = Ledger()
    for ch in children:
        ch.entries(ledger)
    # What the victim had on its way may have landed: its next iterations' own keys.
    last_i = max((a[0] for a in victim.acks()), default=-1)
    in_flight = frozenset(k for i in range(last_i, last_i + 3) for k, _ in plan(victim.name, i)[0])
    got = check(url, ledger, may_hold=in_flight)
    # The victim never left: its claim lapses (claim_ttl_s after its last refresh, or once the
    # others see its presence gone), and then an exclusive writer has the journal, fenced.
    with journal.open(url, lock_timeout_s=120, **OPTS) as e:
        assert any("fenced" in a for a in e.recovery.actions), e.recovery.actions
        assert e.append({"after": 1}, durability="sync") == Committed(got["records"] + 1, "sync")
    refused, lost = _races(survivors)
    report_count("nats shared: a writer SIGKILLed among 3: records / committed outcomes / survivors' publishes "
                 "refused / lost a race", f"{got['records']} / {got['committed']} / {refused} / {lost}")


# --- one process, several handles --------------------------------------------------------------------


def test_a_handle_that_is_behind_catches_up_and_takes_the_next_seqs(url: str) -> None:
    ledger = Ledger()
    a = journal.open(url, create=True, writer="shared", **OPTS)
    b = journal.open(url, writer="shared", **OPTS)  # knows the journal as it was now: empty
    try:
        for n in range(3):
            ledger.add(f"a{n}", {"a": n}, a.append({"a": n}, durability="sync", idempotency_key=f"a{n}"))
        # b's publish is chained on an empty journal: refused, b catches up, and its batch goes at 4.
        outs = b.append_many([{"b": 0}, {"b": 1}], durability="sync", idempotency_keys=["b0", "b1"])
        assert outs == [Committed(4, "sync"), Committed(5, "sync")]
        ledger.add("b0", {"b": 0}, outs[0])
        ledger.add("b1", {"b": 1}, outs[1])
        assert b.last_seq == 5 and a.last_seq == 3  # what each has seen
        out = a.append({"a": 3}, durability="flush", idempotency_key="a3")
        assert out == Committed(6, "flush")
        ledger.add("a3", {"a": 3}, out)
        assert b.get(6) is not None and b.last_seq == 6  # a point read catches up too
    finally:
        _close(a, b)
    assert check(url, ledger)["records"] == 6


def hold_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection whose outbox is a _CountingOutbox sends nothing until it holds ``want``
    publishes, and then sends them in one burst (on the loop)."""
    from journal.remote import jetstream

    send_outbox = jetstream._Conn._send_outbox

    def held_send(self: Any) -> None:
        outbox = self._outbox
        if isinstance(outbox, _CountingOutbox) and not outbox.full.wait(30):
            raise AssertionError("the publishes never all reached the outbox")
        send_outbox(self)

    monkeypatch.setattr(jetstream._Conn, "_send_outbox", held_send)


class _CountingOutbox(deque):  # type: ignore[type-arg]
    """A connection's outbox that says when ``want`` publishes wait in it."""

    def __init__(self, want: int) -> None:
        super().__init__()
        self.want = want
        self.full = threading.Event()

    def append(self, x: Any) -> None:
        super().append(x)
        if len(self) >= self.want:
            self.full.set()


RACE_ROUNDS = 8


def test_two_publishes_chained_on_one_message_in_one_burst(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two handles of one process share a connection: held until both have queued their batch,
    chained on the same message, the two publishes leave in one burst. The server refuses one,
    or (nats-server 2.9 on a replicated stream) stores both; either way one handle learns that
    it came second, catches up and publishes again, and each gets its own seqs."""

    ledger = Ledger()
    a: Any = journal.open(url, create=True, writer="shared", **OPTS)
    b: Any = journal.open(url, writer="shared", **OPTS)
    assert a._conn is b._conn
    conn = a._conn
    try:
        hold_bursts(monkeypatch)
        for rnd in range(RACE_ROUNDS):
            for h in (a, b):
                h.get(h.last_seq + 1)  # a point read catches up: both know the same last message
            assert a._last_sseq == b._last_sseq
            conn._outbox = _CountingOutbox(2)
            barrier = threading.Barrier(2)

            def one(h: Any, name: str, rnd: int = rnd, barrier: threading.Barrier = barrier) -> None:
                barrier.wait(30)
                key, ev = f"{name}{rnd}", {"w": name, "r": rnd}
                ledger.add(key, ev, h.append(ev, durability="sync", idempotency_key=key))

            threads = [threading.Thread(target=one, args=(h, n)) for h, n in ((a, "a"), (b, "b"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    finally:
        monkeypatch.undo()
        _close(a, b)
    assert all(isinstance(o, Committed) for _, _, o in ledger.entries), ledger.entries
    assert check(url, ledger)["records"] == 2 * RACE_ROUNDS
    refused, lost = a._refusals + b._refusals, a._lost_races + b._lost_races
    assert refused + lost >= RACE_ROUNDS  # in every round one of the two came second
    report_count("nats shared: two publishes chained on one message in one burst: rounds / refused / "
                 "second in the race (deduplicated, or stored and skipped)", f"{RACE_ROUNDS} / {refused} / {lost}")


def test_the_same_event_at_the_same_seq_from_two_handles_is_two_records(url: str) -> None:
    """Two handles publishing the same bytes at the same seq: the server must not take the
    second for a repeat of the first (a duplicate answer is never taken as a write of its own)."""
    a = journal.open(url, create=True, writer="shared", **OPTS)
    b = journal.open(url, writer="shared", **OPTS)
    try:
        assert a.append({"same": 1}, durability="flush") == Committed(1, "flush")
        assert b.append({"same": 1}, durability="flush") == Committed(2, "flush")
    finally:
        _close(a, b)
    with journal.open(url, readonly=True, **OPTS) as r:
        assert [(x.seq, x.event) for x in r.read()] == [(1, {"same": 1}), (2, {"same": 1})]


def test_a_message_that_lost_a_race_is_skipped_and_what_follows_it_is_read(url: str) -> None:
    """nats-server 2.9 may store two messages chained on one (journal/remote/jetstream.py,
    ``_lost_race``): the first is the journal's, the later one is skipped, and a message chained
    on it is read on. Here the journal's stored messages with such a loser put after the second
    one, as the server stores it, go through the verification every reader uses."""
    from journal.remote import jetstream, records

    a: Any = journal.open(url, create=True, writer="shared", **OPTS)
    try:
        for n in range(2):
            assert a.append({"n": n}, durability="flush") == Committed(n + 1, "flush")
        m1, m2 = list(a._messages(1))
        assert int(m2.headers[jetstream.H_EXPECT_SUBJECT_SEQ]) == m1.sseq
        loser = jetstream._StoredMsg(m2.sseq + 1, m2.subject, dict(m2.headers), m2.data)  # chained on m1 too

        def message(sseq: int, seq: int, chained: int) -> Any:
            body = records.frame_of(encode_event({"n": seq - 1}, None, False, Options()), seq, a._salt)
            headers = {jetstream.H_SEQ: str(seq), jetstream.H_COUNT: "1", jetstream.H_EXPECT_SUBJECT_SEQ: str(chained)}
            return jetstream._StoredMsg(sseq, m2.subject, headers, body)

        m3 = message(loser.sseq + 1, 3, loser.sseq)
        got = [(m.sseq, [r.seq for r in recs]) for m, recs in a._verified([m1, m2, loser, m3], 1)]
        assert got == [(m1.sseq, [1]), (m2.sseq, [2]), (loser.sseq, []), (m3.sseq, [3])]
        assert [(m.sseq, [r.seq for r in recs]) for m, recs in a._verified([loser, m3], 3, m2.sseq)] == [
            (loser.sseq, []), (m3.sseq, [3])]  # a catch-up that begins with one
        # Chained on a message that is gone (deleted) is not a lost race: the gap is refused.
        gone = message(m3.sseq + 5, 5, m3.sseq + 3)
        with pytest.raises(journal.SequenceError):
            list(a._verified([m1, m2, loser, m3, gone], 1))
    finally:
        _close(a)


def test_a_key_another_handle_wrote_is_a_duplicate_and_another_event_under_it_a_conflict(url: str) -> None:
    ledger = Ledger()
    a = journal.open(url, create=True, writer="shared", **OPTS)
    b = journal.open(url, writer="shared", **OPTS)
    c = journal.open(url, writer="shared", **OPTS)
    try:
        for key, ev in (("K", {"n": 1}), ("L", {"x": 1, "y": 2})):
            out = a.append(ev, durability="sync", idempotency_key=key)
            ledger.add(key, ev, out)
        # b has not seen K: its publish is refused, the catch-up finds K, and b's record is a
        # duplicate of a's (nothing written), as is the same event in another key order under L.
        out = b.append({"n": 1}, durability="sync", idempotency_key="K")
        assert isinstance(out, Committed) and out.duplicate and out.seq == 1, out
        ledger.add("K", {"n": 1}, out)
        outs = b.append_many([{"y": 2, "x": 1}, {"n": 3}], durability="sync", idempotency_keys=["L", "M"])
        assert isinstance(outs[0], Committed) and outs[0].duplicate and outs[0].seq == 2, outs
        assert outs[1] == Committed(3, "sync")
        ledger.add("M", {"n": 3}, outs[1])
        # c has not seen K either, and holds another event under it: that record is not written.
        outs = c.append_many([{"n": 99}, {"n": 4}], durability="sync", idempotency_keys=["K", "N"])
        assert isinstance(outs[0], NotCommitted) and "different event" in outs[0].reason, outs
        assert outs[1] == Committed(4, "sync")
        ledger.add("N", {"n": 4}, outs[1])
        with pytest.raises(journal.IdempotencyConflictError):
            c.append({"n": 99}, durability="sync", idempotency_key="K")  # known now: refused at once
        assert a.append({"n": 3}, durability="sync", idempotency_key="M") == Committed(
            3, "sync", True, "idempotency key matched a record another writer wrote")
    finally:
        _close(a, b, c)
    assert check(url, ledger)["records"] == 4


def test_threads_on_two_handles_share_keys_and_seqs(url: str) -> None:
    ledger = Ledger()
    a = journal.open(url, create=True, writer="shared", **OPTS)
    b = journal.open(url, writer="shared", **OPTS)
    try:
        barrier = threading.Barrier(4)

        def worker(j: journal.api.Journal, t: int) -> None:
            barrier.wait()
            for i in range(30):
                key = f"e{i % 20}-{t % 2}"  # threads 0/2 (on a, b) and 1/3 share keys: one record each
                ev = {"i": i % 20, "g": t % 2}
                ledger.add(key, ev, j.append(ev, durability="buffered" if i % 5 == 0 else "sync",
                                             idempotency_key=key))

        threads = [threading.Thread(target=worker, args=(j, t)) for t, j in enumerate((a, b, a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(o, Committed) for _, _, o in ledger.entries)
        assert {o.durability for _, _, o in ledger.entries} <= {"flush", "sync"}  # type: ignore[union-attr]
        # Another event under a key: refused at once if b has seen the key, else NotCommitted
        # once the catch-up of its batch finds it; refused at once from then on.
        try:
            out = b.append({"other": 1}, durability="sync", idempotency_key="e1-0")
            assert isinstance(out, NotCommitted) and "different event" in out.reason, out
        except journal.IdempotencyConflictError:
            pass
        with pytest.raises(journal.IdempotencyConflictError):
            b.append({"other": 1}, durability="sync", idempotency_key="e1-0")
    finally:
        _close(a, b)
    assert check(url, ledger)["records"] == 40


def test_buffered_appends_are_written_at_once_and_reported_as_flush(url: str) -> None:
    with journal.open(url, create=True, writer="shared", **OPTS) as a:
        assert a.append({"n": 1}, durability="buffered") == Committed(1, "flush")
        with journal.open(url, readonly=True, **OPTS) as r:  # written: another handle reads it now
            got = r.get(1)
            assert got is not None and got.event == {"n": 1}
        outs = a.append_many([{"n": 2}, {"n": 3}], durability="buffered")
        assert outs == [Committed(2, "flush"), Committed(3, "flush")]


# --- exclusion ---------------------------------------------------------------------------------------


def test_shared_writers_and_an_exclusive_writer_exclude_each_other(url: str, nats: Cluster, stream: str) -> None:
    s1 = journal.open(url, create=True, writer="shared", **OPTS)
    s2 = journal.open(url, writer="shared", **OPTS)
    try:
        s1.append({"s": 1}, durability="flush")
        with pytest.raises(journal.JournalLockedError, match="2 shared writer"):
            journal.open(url, **OPTS)
        name = url.split("journal=", 1)[1].split("&", 1)[0]
        store = journal.store(nats.url(f"stream={stream}&replicas=3"))
        with pytest.raises(journal.JournalLockedError):
            store.delete(name)  # a delete takes the exclusive claim too
        s1.close()
        # One shared writer is still there: still refused (the last one out releases).
        with pytest.raises(journal.JournalLockedError, match="1 shared writer"):
            journal.open(url, **OPTS)
        got: list[Outcome] = []
        trying = threading.Event()

        def exclusive() -> None:
            trying.set()
            with journal.open(url, lock_timeout_s=60, **OPTS) as e:  # waits for the last shared writer
                assert not e.recovery.actions, e.recovery.actions  # they all left cleanly: no fence
                got.append(e.append({"e": 1}, durability="flush"))

        t = threading.Thread(target=exclusive)
        t.start()
        assert trying.wait(30)
        assert s2.append({"s": 2}, durability="flush") == Committed(2, "flush")
        s2.close()
        t.join(90)
        assert got == [Committed(3, "flush")]
    finally:
        _close(s1, s2)
    # The reverse: an exclusive writer refuses shared ones, which may wait for it.
    e = journal.open(url, **OPTS)
    try:
        with pytest.raises(journal.JournalLockedError, match="shared writers wait"):
            journal.open(url, writer="shared", **OPTS)
        shared_out: list[Outcome] = []
        trying = threading.Event()

        def shared() -> None:
            trying.set()
            with journal.open(url, writer="shared", lock_timeout_s=60, **OPTS) as s:
                shared_out.append(s.append({"s": 3}, durability="flush"))

        t = threading.Thread(target=shared)
        t.start()
        assert trying.wait(30)
        assert e.append({"e": 2}, durability="flush") == Committed(4, "flush")
        e.close()
        t.join(90)
        assert shared_out == [Committed(5, "flush")]
    finally:
        _close(e)
    with journal.open(url, readonly=True, **OPTS) as r:
        assert [x.event for x in r.read()] == [{"s": 1}, {"s": 2}, {"e": 1}, {"e": 2}, {"s": 3}]


CLAIM_RACE_ROUNDS = 3


@pytest.mark.parametrize("modes", [("exclusive", "exclusive"), ("shared", "exclusive"), ("shared", "shared")])
def test_two_opens_at_once_take_the_claim_one_at_a_time(url: str, monkeypatch: pytest.MonkeyPatch,
                                                        modes: tuple[str, str]) -> None:
    """Two opens that both found the claim free (or shared) write it at the same moment (held
    until both are about to): never two writers that exclude each other, while shared ones both
    get in. A claim write is chained on the bucket's stream sequence too, which nats-server 2.9
    checks against what it is replicating (its per-subject check lets both through)."""
    from journal.remote import jetstream

    with journal.open(url, create=True, **OPTS):
        pass
    real = jetstream.JetStreamJournal._claim_write
    for _ in range(CLAIM_RACE_ROUNDS):
        arrived: list[Any] = []
        gate: list[asyncio.Event] = []

        async def gated(self: Any, conn: Any, value: bytes, chained: int, arrived: list[Any] = arrived,
                        gate: list[asyncio.Event] = gate) -> int:
            if len(arrived) < 2:  # on the loop: the first two claim writes wait for each other
                if not gate:
                    gate.append(asyncio.Event())
                arrived.append(self)
                if len(arrived) == 2:
                    gate[0].set()
                await asyncio.wait_for(gate[0].wait(), 30)
            got: int = await real(self, conn, value, chained)
            return got

        monkeypatch.setattr(jetstream.JetStreamJournal, "_claim_write", gated)
        got: list[Any] = [None, None]
        barrier = threading.Barrier(2)

        def opener(k: int, barrier: threading.Barrier = barrier, got: list[Any] = got) -> None:
            barrier.wait(30)
            try:
                got[k] = journal.open(url, writer=modes[k], **OPTS)
            except journal.JournalLockedError as exc:
                got[k] = exc

        threads = [threading.Thread(target=opener, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        monkeypatch.undo()
        handles = [h for h in got if not isinstance(h, journal.JournalLockedError)]
        try:
            assert len(arrived) == 2, "the two claim writes did not meet"
            if modes == ("shared", "shared"):
                assert len(handles) == 2, got
            else:
                assert len(handles) == 1, f"{modes}: both opens got the journal"
        finally:
            _close(*handles)


def test_an_exclusive_writer_that_took_a_lapsed_claim_stops_the_shared_one(url: str, nats: Cluster,
                                                                          stream: str) -> None:
    from journal.remote.jetstream import subject_token

    s = journal.open(url, create=True, writer="shared", **OPTS)
    try:
        assert s.append({"s": 1}, durability="sync") == Committed(1, "sync")
        # The shared writer stops refreshing (as if it hung), and its claim is gone (as if expired);
        # its own refresh would notice in time, so only the fence may tell it here.
        task = s._claim_task  # type: ignore[attr-defined]
        task.cancel()
        name = url.split("journal=", 1)[1].split("&", 1)[0]
        asyncio.run(_purge_claim(nats, f"$KV.{stream}_LOCKS.{subject_token(name)}"))
        with journal.open(url, **OPTS) as e:
            assert any("fenced" in a for a in e.recovery.actions), e.recovery.actions
            assert e.append({"e": 1}, durability="sync") == Committed(2, "sync")
            out = s.append({"s": 2}, durability="sync")
            assert isinstance(out, NotCommitted) and "exclusive writer took the journal" in out.reason, out
            with pytest.raises(journal.JournalFailStoppedError):
                s.append({"s": 3}, durability="sync")
            assert e.append({"e": 2}, durability="sync") == Committed(3, "sync")  # nothing came between
    finally:
        _close(s)
    with journal.open(url, readonly=True, **OPTS) as r:
        assert [x.event for x in r.read()] == [{"s": 1}, {"e": 1}, {"e": 2}]


async def _purge_claim(c: Cluster, subject: str) -> None:
    import nats as nats_py

    nc = await nats_py.connect(servers=_servers(c))
    try:
        resp = await nc.request(subject, b"", timeout=10, headers={"KV-Operation": "PURGE", "Nats-Rollup": "sub"})
        assert b"error" not in resp.data, resp.data
    finally:
        await nc.close()


# --- outcomes ------------------------------------------------------------------------------------------


def _lose_ack_of(monkeypatch: pytest.MonkeyPatch, j: Any, send: bool) -> list[tuple[str, bytes, dict[str, str]]]:
    """The next publish of handle ``j`` is reported lost: after it was sent (``send``), or
    instead of sending it (kept in the list returned: the message "still on its way")."""
    from journal.remote import jetstream

    conn = j._conn
    real = conn.publish_sync
    kept: list[tuple[str, bytes, dict[str, str]]] = []

    def publish_sync(subject: str, body: bytes, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
        # The handle's next publish of records: the test makes no other one meanwhile.
        if subject != j._subject or headers.get("Journal-Kind") or kept:
            return real(subject, body, headers, timeout_s)
        if send:
            ack = real(subject, body, headers, timeout_s)  # refused (the handle was behind): tried again
            if ack.get("duplicate"):
                return ack  # another writer's message is chained there (chain_id): tried again too
        kept.append((subject, body, dict(headers)))
        raise jetstream._Lost("the ack was lost (test)")

    monkeypatch.setattr(conn, "publish_sync", publish_sync)
    return kept


async def _publish_raw(c: Cluster, subject: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    import nats as nats_py

    nc = await nats_py.connect(servers=_servers(c))
    try:
        resp = await nc.request(subject, body, timeout=10, headers=headers)
        got: dict[str, Any] = json.loads(resp.data)
        return got
    finally:
        await nc.close()


def test_an_ack_lost_fail_stops_and_resolve_answers_from_the_stream(url: str, nats: Cluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger()
    other = journal.open(url, create=True, writer="shared", **OPTS)
    a = journal.open(url, writer="shared", **OPTS)
    try:
        ledger.add("o0", {"o": 0}, other.append({"o": 0}, durability="sync", idempotency_key="o0"))
        # Landed, but its ack lost: AckLost, and a fail-stop until the journal is reopened.
        _lose_ack_of(monkeypatch, a, send=True)
        lost = a.append({"a": 0}, durability="sync", idempotency_key="a0")
        assert isinstance(lost, AckLost) and lost.seq == 2, lost
        with pytest.raises(journal.JournalFailStoppedError):
            a.append({"a": 1}, durability="sync")
        _close(a)
        ledger.add("o1", {"o": 1}, other.append({"o": 1}, durability="sync", idempotency_key="o1"))
        with journal.open(url, writer="shared", **OPTS) as again:
            found = again.resolve(lost)
            assert isinstance(found, Committed) and found.seq == 2, found
            ledger.add("a0", {"a": 0}, found)
        # Never sent, and still "on its way" when a new handle resolves it: NotCommitted, and final:
        # the message, sent afterwards, can no longer land.
        monkeypatch.undo()
        b = journal.open(url, writer="shared", **OPTS)
        kept = _lose_ack_of(monkeypatch, b, send=False)
        lost = b.append({"b": 0}, durability="sync")
        assert isinstance(lost, AckLost) and lost.seq == 4, lost
        _close(b)
        monkeypatch.undo()
        with journal.open(url, writer="shared", **OPTS) as again:
            answer = again.resolve(lost)
            assert isinstance(answer, NotCommitted), answer
            subject, body, headers = kept[0]
            late = asyncio.run(_publish_raw(nats, subject, body, headers))
            # Refused (wrong last sequence), or answered as a duplicate of the fence chained on
            # the same message (chain_id): either way not stored.
            assert late.get("duplicate") or late.get("error", {}).get("err_code") == 10071, late
            ledger.add("o2", {"o": 2}, again.append({"o": 2}, durability="sync", idempotency_key="o2"))
            assert isinstance(again.resolve(lost), NotCommitted)  # still: another record holds seq 4 now
    finally:
        _close(other, a)
    assert check(url, ledger)["records"] == 4


def test_a_batch_that_keeps_losing_the_race_is_not_committed_and_the_handle_goes_on(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = Ledger()
    a = journal.open(url, create=True, writer="shared", **OPTS)
    b: Any = journal.open(url, writer="shared", shared_lock_timeout_s=0.3, **OPTS)
    try:
        # Before each of b's catch-ups, a appends: b is behind again at every publish.
        real = b._catch_up_shared
        n = iter(range(10**6))

        def catch_up_then_lose() -> int:
            came: int = real()
            k = next(n)
            ledger.add(f"a{k}", {"a": k}, a.append({"a": k}, durability="flush", idempotency_key=f"a{k}"))
            return came

        ledger.add("a-first", {"a": -1}, a.append({"a": -1}, durability="flush", idempotency_key="a-first"))
        monkeypatch.setattr(b, "_catch_up_shared", catch_up_then_lose)
        out = b.append({"b": 0}, durability="flush", idempotency_key="b0")
        assert isinstance(out, NotCommitted) and out.errno == errno.EBUSY, out
        assert "shared_lock_timeout_s" in out.reason
        monkeypatch.undo()
        out = b.append({"b": 0}, durability="flush", idempotency_key="b0")  # not fail-stopped: written now
        assert isinstance(out, Committed) and out.seq == len(ledger.entries) + 1, out
        ledger.add("b0", {"b": 0}, out)
    finally:
        _close(a, b)
    check(url, ledger)


def test_options_and_operations_of_the_shared_mode(url: str) -> None:
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(url, create=True, writer="both", **OPTS)
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(url, create=True, writer="shared", shared_lock_timeout_s=-1, **OPTS)
    with journal.open(url, create=True, writer="shared", **OPTS) as s:
        assert s.writer_mode == "shared"  # type: ignore[attr-defined]
        s.append({"n": 1}, durability="flush")
        with pytest.raises(journal.InvalidArgumentError, match="exclusive"):
            s.drop_prefix(2)  # type: ignore[attr-defined]
        s.seal()  # type: ignore[attr-defined]
    with journal.open(url, readonly=True, writer="shared", **OPTS) as r:  # a reader is a reader
        with pytest.raises(journal.ReadOnlyError):
            r.append({"n": 2})


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "child":
    sys.exit(_child(sys.argv[2], sys.argv[3], int(sys.argv[4])))
