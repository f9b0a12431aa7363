"""Faults of the PostgreSQL backend on the real server: each run is checked by one checker.

What ``check_journal`` holds every run to, whatever the fault:

* every Committed record is in the table at its seq, with exactly the bytes its event encodes to;
* every AckLost was resolved (after a reopen) to one answer, and that answer matches the table
  (Committed: the record is at that seq; NotCommitted: it was not there when resolve answered);
* seqs are contiguous from 1, and no event is in the table twice (nor an idempotency key);
* nothing is in the table that an attempt answered NotCommitted for (a duplicate answer to a
  retry needs an earlier attempt that may have written it).

The faults: the writer's connection terminated (pg_terminate_backend) at moments driven by the
appenders' progress, at least 100 times; the server restarted mid-stream (fast and immediate);
writers of other processes racing for the lock; fencing of a writer whose connection was taken;
a client SIGKILLed mid-transaction; rows edited by hand.

The children of the process tests run this module: ``python -m tests.test_remote_postgres MODE ...``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import journal
from journal.engine.encoding import encode_event
from journal.engine.options import Options
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome
from tests.backend_postgres import PostgresBackend, connect, unreachable
from tests.backends import require_services
from tests.conftest import report_count

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_CLUSTER = ("15", "main")
WAIT_S = 60.0  # how long anything here may take before the test fails instead of hanging

_why = unreachable() if __name__ != "__main__" else None
if _why is not None:
    if require_services():
        raise RuntimeError(f"JOURNAL_REQUIRE_SERVICES=1 but {_why}")
    pytestmark = pytest.mark.skip(reason=_why)


# --- the ledger and the checker --------------------------------------------------------------


@dataclass
class Attempt:
    eid: str
    outcome: Outcome | None  # None: the call raised (error says what)
    error: str | None = None
    resolved: Outcome | None = None
    last_seq_at_resolve: int = 0


@dataclass
class Ledger:
    """Every append attempt and its outcome, in the order the outcomes came back."""

    events: dict[str, Any] = field(default_factory=dict)  # eid -> event (the key is the eid)
    attempts: list[Attempt] = field(default_factory=list)
    mu: threading.Lock = field(default_factory=threading.Lock)

    def add(self, eid: str, event: Any, outcome: Outcome | None, error: str | None = None) -> Attempt:
        a = Attempt(eid, outcome, error)
        with self.mu:
            self.events[eid] = event
            self.attempts.append(a)
        return a

    def resolve_all(self, j: Any) -> int:
        """Resolve every AckLost not yet resolved, on ``j`` (a handle opened after the failure)."""
        n = 0
        for a in self.attempts:
            if isinstance(a.outcome, AckLost) and a.resolved is None:
                a.resolved = j.resolve(a.outcome)
                assert isinstance(a.resolved, (Committed, NotCommitted)), a.resolved
                a.last_seq_at_resolve = j.last_seq
                n += 1
        return n


def check_journal(pg: PostgresBackend, target: str, ledger: Ledger) -> Counter[str]:
    """The invariants of the module docstring; returns what it saw, by kind."""
    from journal.remote import records

    rows = pg.rows(target)
    with connect() as conn:
        from psycopg import sql

        got = conn.execute(
            sql.SQL("SELECT id FROM {} WHERE name = %s").format(sql.Identifier(pg.schema, "journals")),
            (pg._where(target)[1],),
        ).fetchone()
    assert got is not None, "the journal's row is gone"
    salt = records.salt_of(bytes(got[0]))
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "seqs are not contiguous from 1"
    at: dict[str, int] = {}
    for seq, key, frame in rows:
        rec = records.record_of(frame, seq, salt, target, 1 << 24)
        assert key is not None and rec.key == key, f"seq {seq}: key column {key!r}, frame {rec.key!r}"
        assert key not in at, f"event {key} is in the table twice (seqs {at[key]} and {seq})"
        assert key in ledger.events, f"seq {seq} holds {key}, which nobody appended"
        want = records.frame_of(encode_event(ledger.events[key], key, False, Options()), seq, salt)
        assert frame == want, f"seq {seq}: the stored bytes are not those of event {key}"
        at[key] = seq
    seen: Counter[str] = Counter()
    by_eid: dict[str, list[Attempt]] = defaultdict(list)
    for a in ledger.attempts:
        by_eid[a.eid].append(a)
    for eid, attempts in by_eid.items():
        # A duplicate answer needs an attempt that may have written the record (in any order:
        # two threads' outcomes for one key can come back either way round).
        may_be_written = any(
            (isinstance(a.outcome, Committed) and not a.outcome.duplicate) or isinstance(a.outcome, AckLost)
            for a in attempts
        )
        accounted = False  # an attempt says the record is there
        for a in attempts:
            out = a.outcome
            if isinstance(out, Committed):
                seen["committed_duplicate" if out.duplicate else "committed"] += 1
                assert at.get(eid) == out.seq, f"{eid}: Committed at {out.seq}, the table has it at {at.get(eid)}"
                if out.duplicate:
                    assert may_be_written, f"{eid}: a duplicate, yet every other attempt was NotCommitted"
                accounted = True
            elif isinstance(out, AckLost):
                seen["acklost"] += 1
                assert a.resolved is not None, f"{eid}: AckLost never resolved"
                if isinstance(a.resolved, Committed):
                    seen["acklost_resolved_committed"] += 1
                    assert at.get(eid) == a.resolved.seq, f"{eid}: resolved at {a.resolved.seq}, table {at.get(eid)}"
                    accounted = True
                else:
                    seen["acklost_resolved_not_committed"] += 1
                    assert eid not in at or at[eid] > a.last_seq_at_resolve, (
                        f"{eid}: resolved NotCommitted, but it is at seq {at.get(eid)} "
                        f"(the journal ended at {a.last_seq_at_resolve} then)"
                    )
            elif isinstance(out, NotCommitted):
                seen["not_committed"] += 1
            else:
                seen["raised"] += 1
        if eid in at:
            assert accounted, f"{eid} is at seq {at[eid]}, but no attempt was told it is there"
    seen["rows"] = len(rows)
    return seen


# --- a stream of appends from many threads, interrupted by a fault --------------------------


class Stream:
    """``threads`` appenders, each with its own endless run of keyed events (eid = key); an event
    not known to be in the journal is tried again, under its key, in the next round."""

    def __init__(self, threads: int, seed: int) -> None:
        self.threads = threads
        self.rng = random.Random(seed)
        self.next_i = [0] * threads
        self.retry: list[deque[str]] = [deque() for _ in range(threads)]
        self.ledger = Ledger()

    def event(self, t: int) -> tuple[str, Any]:
        if self.retry[t]:
            eid = self.retry[t][0]
            return eid, self.ledger.events[eid]
        i = self.next_i[t]
        eid = f"t{t}-{i}"
        size = (i * 37 + t * 101) % 600  # some small, some compressed
        return eid, {"t": t, "i": i, "text": "w" * size}

    def round(self, j: Any, acks_before_fault: int, fault: Callable[[], None], durability: str = "sync") -> None:
        """Append from every thread until the handle stops taking appends; ``fault`` runs once
        ``acks_before_fault`` appends were acknowledged in this round."""
        acked = [0]
        mu = threading.Lock()
        enough = threading.Event()
        done = threading.Event()

        def worker(t: int) -> None:
            try:
                while True:
                    eid, ev = self.event(t)
                    try:
                        out = j.append(ev, durability=durability, idempotency_key=eid)
                    except journal.JournalFailStoppedError:
                        return
                    self.ledger.add(eid, ev, out)
                    if self.retry[t] and self.retry[t][0] == eid:
                        self.retry[t].popleft()
                    elif eid == f"t{t}-{self.next_i[t]}":
                        self.next_i[t] += 1
                    if not isinstance(out, Committed):
                        self.retry[t].appendleft(eid)  # its fate is for resolve(); the retry is safe by its key
                        return
                    with mu:
                        acked[0] += 1
                        if acked[0] >= acks_before_fault:
                            enough.set()
            finally:
                with mu:
                    alive[0] -= 1
                    if alive[0] == 0:
                        done.set()
                        enough.set()

        alive = [self.threads]
        workers = [threading.Thread(target=worker, args=(t,)) for t in range(self.threads)]
        for w in workers:
            w.start()
        assert enough.wait(WAIT_S), "the appenders made no progress"
        fault()
        assert done.wait(WAIT_S), "the appenders did not stop after the fault"
        for w in workers:
            w.join(WAIT_S)


def terminate(pid: int | None) -> bool:
    assert pid is not None
    with connect() as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
    return bool(row and row[0])


def test_writer_connection_terminated_at_random_moments(pg: PostgresBackend) -> None:
    target = pg.target()
    stream = Stream(threads=8, seed=1234)
    rng = random.Random(99)
    terminations = 0
    kinds: Counter[str] = Counter()
    j = journal.open(target, create=True)
    started = time.monotonic()
    try:
        while terminations < 100:
            pid = j.backend_pid
            killed: list[bool] = []
            before = len(stream.ledger.attempts)
            stream.round(j, rng.randint(1, 24), lambda pid=pid, killed=killed: killed.append(terminate(pid)))
            assert killed == [True], "pg_terminate_backend did not find the writer's session"
            terminations += 1
            # The handle fail-stopped: every later append is refused, until it is opened again.
            with pytest.raises(journal.JournalFailStoppedError):
                j.append({"probe": 1}, durability="sync", idempotency_key="probe")
            for a in stream.ledger.attempts[before:]:
                if not isinstance(a.outcome, Committed):
                    kinds[type(a.outcome).__name__] += 1
            j.close()
            j = journal.open(target, lock_timeout_s=WAIT_S)
            stream.ledger.resolve_all(j)
        # And the journal goes on: one more round without a fault, to the end.
        for t in range(stream.threads):
            while stream.retry[t]:
                eid = stream.retry[t].popleft()
                out = j.append(stream.ledger.events[eid], durability="sync", idempotency_key=eid)
                stream.ledger.add(eid, stream.ledger.events[eid], out)
                assert isinstance(out, Committed), out
    finally:
        j.close()
    seen = check_journal(pg, target, stream.ledger)
    report_count("postgres: writer connections terminated mid-stream", terminations)
    report_count("postgres: outcomes around terminations (NotCommitted / AckLost)",
                 f"{kinds['NotCommitted']} / {kinds['AckLost']}")
    report_count("postgres: termination run, checked", dict(seen) | {"s": round(time.monotonic() - started, 1)})
    assert terminations >= 100
    assert seen["acklost"] > 0 and seen["not_committed"] > 0, seen  # both kinds of answer were exercised


# --- the server restarted mid-stream ---------------------------------------------------------


def pg_ready() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-t", "1"],
                          capture_output=True).returncode == 0


def wait_ready() -> None:
    deadline = time.monotonic() + WAIT_S
    while not pg_ready():
        assert time.monotonic() < deadline, "the server did not come back"


def restart_server(mode: str) -> None:
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", *PG_CLUSTER, "restart", "-m", mode],
        check=True, capture_output=True, timeout=WAIT_S,
    )
    wait_ready()


def test_server_restarted_mid_stream_fast_and_immediate(pg: PostgresBackend) -> None:
    target = pg.target()
    stream = Stream(threads=8, seed=77)
    started = time.monotonic()
    try:
        j = journal.open(target, create=True)
        try:
            for mode in ("fast", "immediate"):
                stream.round(j, 150, lambda mode=mode: restart_server(mode))
                with pytest.raises(journal.JournalFailStoppedError):
                    j.append({"probe": 1}, durability="sync", idempotency_key="probe")
                j.close()
                j = journal.open(target, lock_timeout_s=WAIT_S)
                assert stream.ledger.resolve_all(j) >= 0
            for t in range(stream.threads):  # the retries, then the journal is whole again
                while stream.retry[t]:
                    eid = stream.retry[t].popleft()
                    out = j.append(stream.ledger.events[eid], durability="sync", idempotency_key=eid)
                    stream.ledger.add(eid, stream.ledger.events[eid], out)
                    assert isinstance(out, Committed), out
        finally:
            j.close()
        seen = check_journal(pg, target, stream.ledger)
        report_count("postgres: restart run (fast, immediate), checked",
                     dict(seen) | {"s": round(time.monotonic() - started, 1)})
        assert seen["committed"] >= 300
    finally:
        if not pg_ready():
            subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *PG_CLUSTER, "start"], capture_output=True)
            wait_ready()


# --- other processes: racing writers, a client killed mid-transaction ------------------------


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.test_remote_postgres", *args],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )


def line(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    got = p.stdout.readline().strip()
    assert got, f"child {p.pid} ended without answering (exit {p.poll()})"
    return got


def tell(p: subprocess.Popen[str], what: str = "go") -> None:
    assert p.stdin is not None
    p.stdin.write(what + "\n")
    p.stdin.flush()


def child_event(tag: str, i: int) -> dict[str, Any]:
    return {"by": tag, "i": i, "pad": "p" * (i * 13 % 400)}


def test_writers_of_other_processes_race_for_the_lock(pg: PostgresBackend) -> None:
    target = pg.target()  # not made yet: the racers create schema and journal at once
    racers = [child("race", target, f"r{n}") for n in range(3)]
    try:
        for p in racers:
            assert line(p) == "ready"
        for p in racers:
            tell(p)
        answers = {p.pid: line(p) for p in racers}
        winners = [pid for pid, a in answers.items() if a == "won"]
        assert len(winners) == 1, answers  # exactly one holds the lock
        losers = [a for a in answers.values() if a != "won"]
        assert all(a == f"lost {winners[0]}" for a in losers), answers  # and the losers are told who
        winner = next(p for p in racers if p.pid == winners[0])
        acked = [line(winner) for _ in range(5)]  # "ack SEQ KEY" per record of its first batches
        waiter = child("wait", target, "w")
        # The waiter asks for the lock; it is granted only when the winner lets go.
        deadline = time.monotonic() + WAIT_S
        with connect() as conn:
            while not conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                                   ).fetchone()[0]:
                assert time.monotonic() < deadline and waiter.poll() is None, "the waiter never waited"
        tell(winner, "close")
        acked += [line(winner) for _ in range(5)]
        assert line(winner) == "closed"
        assert line(waiter) == "locked"
        acked += [line(waiter) for _ in range(10)]
        assert line(waiter) == "closed"
    finally:
        for p in racers:
            p.kill()
            p.wait()
    ledger = Ledger()
    for a in acked:
        _, seq, key = a.split()
        tag, i = key.split("-")
        ledger.add(key, child_event(tag, int(i)), Committed(int(seq), "sync"))
    seen = check_journal(pg, target, ledger)
    assert seen["rows"] == 20 and seen["committed"] == 20, seen


def test_a_fenced_writer_never_writes_again(pg: PostgresBackend) -> None:
    target = pg.target()
    old = journal.open(target, create=True)
    ledger = Ledger()
    for i in range(5):
        ev = {"old": i}
        ledger.add(f"old-{i}", ev, old.append(ev, durability="sync", idempotency_key=f"old-{i}"))
    assert terminate(old.backend_pid)
    new = journal.open(target, lock_timeout_s=WAIT_S)  # the lock went with the old connection
    for i in range(5):
        ev = {"new": i}
        ledger.add(f"new-{i}", ev, new.append(ev, durability="sync", idempotency_key=f"new-{i}"))
    before = pg.rows(target)
    tries: Counter[str] = Counter()
    for n, level in enumerate(["sync", "flush", "buffered", "sync", "flush"] * 4):
        try:
            got = old.append_many([{"stale": n}, {"stale": n, "k": 1}], durability=level,
                                  idempotency_keys=[f"stale-{n}", None])
        except journal.JournalFailStoppedError:
            tries["refused"] += 1
            continue
        assert all(isinstance(o, (NotCommitted, AckLost)) for o in got), got
        tries[type(got[0]).__name__] += 1
    for call in (old.flush, old.sync):
        with pytest.raises(journal.JournalFailStoppedError):
            call()
    old.close()
    assert pg.rows(target) == before  # nothing of the old writer's reached the table
    assert new.append({"new": 5}, durability="sync", idempotency_key="new-5") == Committed(11, "sync")
    ledger.add("new-5", {"new": 5}, Committed(11, "sync"))
    new.close()
    check_journal(pg, target, ledger)
    assert tries["refused"] >= 19, tries


def test_a_client_killed_mid_transaction_leaves_a_prefix(pg: PostgresBackend) -> None:
    """The client appends batches of 7 (one transaction each) and is killed after its k-th
    acknowledgement, once r more records are in the table (r < 7: with one transaction per
    batch the table grows 7 at a time) and its session is in a transaction again."""
    from psycopg import sql

    target = pg.target()
    batch = 7
    rng = random.Random(5)
    ledger = Ledger()
    in_flight = 0
    count = sql.SQL("SELECT count(*) FROM {} WHERE journal = %s").format(sql.Identifier(pg.schema, "records"))
    in_txn = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s AND xact_start IS NOT NULL"
    for k in (3, 11, 26):
        p = child("stream", target, str(batch))
        tried: list[int] = []
        try:
            acks = 0
            while acks < k:  # "try FIRST" before each append_many, "ack FIRST LAST" once it returned
                word, *nums = line(p).split()
                if word == "try":
                    tried.append(int(nums[0]))
                    continue
                acks += 1
                for seq in range(int(nums[0]), int(nums[1]) + 1):
                    ledger.add(f"k{seq}", child_event("s", seq), Committed(seq, "sync"))
            grown = len(ledger.attempts) + rng.randint(1, batch - 1)
            deadline = time.monotonic() + WAIT_S
            with connect() as conn:
                while conn.execute(count, (pg._where(target)[1],)).fetchone()[0] < grown:
                    assert time.monotonic() < deadline and p.poll() is None, "the client stopped appending"
                # ... and its session is inside a transaction again (pg_stat_activity says so).
                while not conn.execute(in_txn, (f"journal pid {p.pid} %",)).fetchone()[0]:
                    assert time.monotonic() < deadline and p.poll() is None, "the client stopped appending"
            p.send_signal(signal.SIGKILL)
            p.wait()
            assert p.stdout is not None
            for x in p.stdout.read().splitlines():  # what it said before it died
                word, *nums = x.split()
                if word == "try":
                    tried.append(int(nums[0]))
                else:
                    for seq in range(int(nums[0]), int(nums[1]) + 1):
                        ledger.add(f"k{seq}", child_event("s", seq), Committed(seq, "sync"))
            acked_last = len(ledger.attempts)
        finally:
            p.kill()
            p.wait()
        with journal.open(target, lock_timeout_s=WAIT_S) as j:  # the dead client's session has ended
            n = j.last_seq
        assert n == len(pg.rows(target)) and n % batch == 0, f"{n} rows: a transaction of {batch} records was cut"
        in_flight += tried[-1] > acked_last  # killed with a batch on its way (there or not: both are a prefix)
        for seq in range(len(ledger.attempts) + 1, n + 1):  # committed, not yet acknowledged: a prefix too
            ledger.add(f"k{seq}", child_event("s", seq), Committed(seq, "sync"))
        check_journal(pg, target, ledger)
    report_count("postgres: clients SIGKILLed with a batch in flight (of 3)", in_flight)
    # The kill follows the child's progress (the table grown part-way into a batch), but the
    # batch may commit between that look and the signal: at least one kill must land in flight.
    assert in_flight >= 1, in_flight


def test_rows_edited_by_hand_are_refused_naming_journal_and_seq(pg: PostgresBackend) -> None:
    from psycopg import sql

    target = pg.target()
    other = pg.target()
    for t in (target, other):
        with journal.open(t, create=True) as j:
            j.append_many([{"n": i, "text": "words " * (i * 10)} for i in range(1, 21)], durability="sync")
    name = pg._where(target)[1]
    recs = sql.Identifier(pg.schema, "records")

    def refused(seq: int, why: str) -> None:
        with journal.open(target, readonly=True) as j:
            with pytest.raises(journal.CorruptionError) as err:
                list(j.read())
            assert err.value.seq == seq and name in err.value.segment and why in err.value.reason, err.value
            with pytest.raises(journal.CorruptionError) as err:
                j.get(seq)
            assert err.value.seq == seq and name in str(err.value)

    pg.tamper(target, 7)  # one bit of the frame
    refused(7, "checksum")
    with journal.open(target, readonly=True) as j:  # around it, everything is served
        assert [r.seq for r in j.read(after_seq=7)] == list(range(8, 21))
        assert j.get(6) is not None and j.get(6).event == {"n": 6, "text": "words " * 60}  # type: ignore[union-attr]
    with connect() as conn:  # a frame moved to another seq
        conn.execute(
            sql.SQL("UPDATE {t} SET frame = (SELECT frame FROM {t} WHERE journal = %s AND seq = 4) "
                    "WHERE journal = %s AND seq = 3").format(t=recs), (name, name))
    refused(3, "carries seq 4")
    with connect() as conn:
        conn.execute(sql.SQL("UPDATE {t} SET frame = (SELECT frame FROM {t} WHERE journal = %s AND seq = 3) "
                             "WHERE journal = %s AND seq = 3").format(t=recs), (pg._where(other)[1], name))
    refused(3, "checksum")  # another journal's record 3: the right seq, the wrong journal
    with connect() as conn:
        conn.execute(sql.SQL("DELETE FROM {} WHERE journal = %s AND seq < 10").format(recs), (name,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE journal = %s AND seq = 15").format(recs), (name,))
    with journal.open(target, readonly=True) as j:
        with pytest.raises(journal.SequenceError) as gap:
            list(j.read(after_seq=9))
        assert gap.value.seq == 15 and name in gap.value.segment
        with pytest.raises(journal.SequenceError):
            list(j.read())  # records 1-9 are gone: refused, never skipped


# --- the rest of the backend's own behaviour -------------------------------------------------


def test_shared_writers_keep_seqs_contiguous_and_keys_across_handles(pg: PostgresBackend) -> None:
    target = pg.target()
    with journal.open(target, create=True, writer="shared") as a, journal.open(target, writer="shared") as b:
        with pytest.raises(journal.JournalLockedError):
            journal.open(target)  # an exclusive writer is refused while shared ones are there
        ledger = Ledger()
        barrier = threading.Barrier(4)

        def worker(j: Any, t: int) -> None:
            barrier.wait()
            for i in range(30):
                eid = f"e{i % 20}-{t % 2}"  # threads 0/2 and 1/3 share their keys: one record each
                ev = {"i": i % 20, "g": t % 2}
                ledger.add(eid, ev, j.append(ev, durability="buffered" if i % 5 == 0 else "sync",
                                             idempotency_key=eid))

        threads = [threading.Thread(target=worker, args=(j, t)) for t, j in enumerate((a, b, a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(x.outcome, Committed) for x in ledger.attempts)
        assert {x.outcome.durability for x in ledger.attempts} <= {"flush", "sync"}  # type: ignore[union-attr]
        with pytest.raises(journal.IdempotencyConflictError):
            b.append({"other": 1}, durability="sync", idempotency_key="e1-0")
    seen = check_journal(pg, target, ledger)
    assert seen["rows"] == 40, seen


def test_buffered_records_are_written_by_flush_read_and_close(pg: PostgresBackend) -> None:
    target = pg.target()
    with journal.open(target, create=True) as j:
        outs = [j.append({"n": i}, durability="buffered") for i in range(1, 4)]
        assert outs == [Committed(i, "buffered") for i in range(1, 4)] and j.last_seq == 3
        assert pg.rows(target) == []  # held in the client
        assert [r.seq for r in j.read()] == [1, 2, 3]  # a read of this handle writes them first
        j.append({"n": 4}, durability="buffered", idempotency_key="four")
        assert j.append({"n": 4}, durability="buffered", idempotency_key="four") == Committed(
            4, "buffered", True, "idempotency key matched an existing record")
        big = j.append_many([{"n": i, "x": os.urandom(600).hex()} for i in range(5, 2005)], durability="buffered")
        assert {o.durability for o in big if isinstance(o, Committed)} >= {"flush"}  # the bounded buffer filled
        j.sync()
        assert len(pg.rows(target)) == 2004
        j.append({"n": 2005}, durability="buffered")
    assert len(pg.rows(target)) == 2005  # close wrote it
    with journal.open(target, readonly=True) as j:
        assert sum(1 for _ in j.read()) == 2005  # in pages


def test_the_writer_lock_is_let_go_when_close_returns(pg: PostgresBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends a closed connection's session, and with it the session's advisory locks,
    after the client's close has returned: a writer opening in between must not find the lock
    held. That moment is held open here: every connection closed during the test stays open
    (its server session alive) until the test ends."""
    import psycopg

    target = pg.target()
    lingering: list[psycopg.Connection[Any]] = []
    real_close = psycopg.Connection.close
    monkeypatch.setattr(psycopg.Connection, "close", lambda self: lingering.append(self))
    try:
        with journal.open(target, create=True) as first:
            first.append({"n": 1}, durability="flush")
            pid = first.backend_pid
        assert pid in {c.info.backend_pid for c in lingering}  # its server session lives on
        with journal.open(target) as second:
            assert second.append({"n": 2}, durability="flush") == Committed(2, "flush")
        # A shared writer's lock too (writer="shared" holds it in shared mode).
        with journal.open(target, writer="shared") as third:
            third.append({"n": 3}, durability="flush")
        with journal.open(target) as fourth:
            assert fourth.last_seq == 3
    finally:
        monkeypatch.undo()
        for c in lingering:
            real_close(c)


def test_a_reader_connection_left_inside_a_command_is_made_again(pg: PostgresBackend,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq can be left inside a command after an error, on a connection it calls OK (seen once
    in CI, on a catalog's connection whose server session was ended). A reader's connection in
    that state is closed and made again, never sent a statement that would fail with "another
    command is already in progress"; a read that left it so is asked again, once, on the new one."""
    import psycopg

    target = pg.target()
    with journal.open(target, create=True) as j:
        j.append_many([{"n": i} for i in range(1, 6)], durability="flush")
    with journal.open(target, readonly=True) as r:
        assert [x.seq for x in r.read()] == [1, 2, 3, 4, 5]
        between = r._reader
        assert between is not None
        between.pgconn.send_query(b"SELECT 1")  # left inside a command between two reads
        assert between.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE and not between.closed
        real = psycopg.Connection.execute
        sent_on: list[Any] = []

        def recorded(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            sent_on.append(conn)
            return real(conn, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", recorded)
        assert [x.seq for x in r.read()] == [1, 2, 3, 4, 5]
        assert r._reader is not between and between.closed
        assert sent_on and between not in sent_on  # replaced before a statement was sent on it

        during = r._reader

        def leaves_it_inside(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            if conn is during:
                conn.pgconn.send_query(b"SELECT 1")
                raise psycopg.OperationalError("the connection left inside a command (injected)")
            return real(conn, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", leaves_it_inside)
        got = r.get(3)
        assert got is not None and got.event == {"n": 3}
        assert r._reader is not during and during is not None and during.closed


def test_sync_is_refused_when_the_server_does_not_fsync(pg: PostgresBackend) -> None:
    from journal.remote import postgres

    with journal.open(pg.target(), create=True) as j:
        assert isinstance(j, postgres.PostgresJournal)
        j._fsync_on = False  # what SHOW fsync answered "off" sets; the server's own setting is not ours to change
        with pytest.raises(journal.DurabilityError, match="fsync = off"):
            j.append({"n": 1}, durability="sync")
        assert j.append({"n": 1}, durability="flush") == Committed(1, "flush")
        assert j.last_seq == 1


def test_bad_urls_options_and_servers_are_typed_errors(pg: PostgresBackend) -> None:
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(pg.target(), create=True, segment_size_bytes=1 << 20)
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(pg.target() + "&bogus=1", create=True)
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(pg.target(), create=True, writer="many")
    with pytest.raises(journal.JournalNotFoundError):
        journal.open(pg.target(), readonly=True)
    with pytest.raises(journal.JournalIOError) as err:
        journal.open("postgresql://postgres:s3cret@127.0.0.1:1/test?journal=x&connect_timeout_s=2", create=True)
    assert "s3cret" not in str(err.value) and "127.0.0.1" in str(err.value)


# --- a store's journals share one writer connection and one group commit -------------------


def _store_writer(store: Any) -> Any:
    w = store._writer.writer
    assert w is not None, "no journal of the store is open for writing"
    return w


def test_store_journals_share_commits(pg: PostgresBackend) -> None:
    """64 sessions, each appending one durable event at a time: far fewer COMMITs than appends
    (one transaction carries many journals' records), every record there, contiguous per journal."""
    store = journal.store(pg.store_location())
    names = [f"s{n}" for n in range(64)]
    per = 20
    handles = [store.open(n, create=True) for n in names]
    ledgers = {n: Ledger() for n in names}
    commits_before = store.commits
    with connect() as conn:
        xact_before = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                                   ).fetchone()[0]
    start = threading.Barrier(len(names))

    def session(k: int) -> None:
        start.wait()
        for i in range(per):
            eid = f"{names[k]}-{i}"
            ev = {"session": names[k], "i": i, "text": "x" * (i * 17 % 300)}
            ledgers[names[k]].add(eid, ev, handles[k].append(ev, durability="sync", idempotency_key=eid))

    threads = [threading.Thread(target=session, args=(k,)) for k in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    commits = store.commits - commits_before
    pids = {h.backend_pid for h in handles}  # type: ignore[attr-defined]
    for h in handles:
        h.close()
    with connect() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        xact = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
                            ).fetchone()[0] - xact_before  # the whole server's database: other clients too
    appends = len(names) * per
    for n in names:
        assert all(isinstance(a.outcome, Committed) and a.outcome.durability == "sync"
                   for a in ledgers[n].attempts), n
        seen = check_journal(pg, pg.target(n), ledgers[n])
        assert seen["rows"] == per and seen["committed"] == per, (n, seen)
    report_count("postgres store: 64 sessions x 20 sync appends, COMMITs of the shared writer (pg_stat xact "
                 "delta, whole database)", f"{commits} ({xact}) for {appends} appends")
    assert len(pids) == 1, pids  # one writer connection for the store
    assert commits <= appends // 4, f"{commits} COMMITs for {appends} appends: the journals did not share them"


def test_a_writer_left_inside_its_transaction_by_a_failed_commit_is_lost(pg: PostgresBackend,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The store writer's COMMIT fails with its connection still inside the transaction (an
    error before the COMMIT was sent). The batch is AckLost, and the writer is lost with it:
    another journal's next COMMIT on that connection would have committed the batch's rows, so
    that the table came to hold a record the first journal's resolve had answered NotCommitted."""
    import psycopg

    store = journal.store(pg.store_location())
    a, b = store.open("a", create=True), store.open("b", create=True)
    assert isinstance(a.append({"n": 1}, durability="sync"), Committed)
    assert isinstance(b.append({"n": 1}, durability="sync"), Committed)
    writer = _store_writer(store)
    real = psycopg.Connection.execute
    fired: list[str] = []

    def commit_fails_unsent(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if conn is writer.conn and query == "COMMIT" and not fired:
            fired.append(str(conn.info.transaction_status))
            raise psycopg.OperationalError("COMMIT failed before it was sent (injected)")
        return real(conn, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", commit_fails_unsent)
    lost = a.append({"n": 2}, durability="sync")
    assert fired == [str(psycopg.pq.TransactionStatus.INTRANS)] and isinstance(lost, AckLost), (fired, lost)
    try:
        after = b.append({"n": 2}, durability="sync")
    except journal.JournalFailStoppedError:
        after = None
    assert not isinstance(after, Committed), after
    assert [seq for seq, _, _ in pg.rows(pg.target("a"))] == [1]  # the batch never committed
    assert [seq for seq, _, _ in pg.rows(pg.target("b"))] == [1]
    monkeypatch.setattr(psycopg.Connection, "execute", real)
    a.close()
    b.close()
    with store.open("a") as again:
        assert isinstance(again.resolve(lost), NotCommitted)
        assert again.append({"n": 2}, durability="sync") == Committed(2, "sync")
    assert [seq for seq, _, _ in pg.rows(pg.target("a"))] == [1, 2]


def _multi_round(streams: list[Stream], handles: list[Any], acks_before_fault: int,
                 fault: Callable[[], None]) -> None:
    """Stream.round over many journals at once (each its own stream and threads)."""
    acked = [0]
    mu = threading.Lock()
    enough = threading.Event()
    done = threading.Event()
    alive = [sum(s.threads for s in streams)]

    def worker(k: int, t: int) -> None:
        s, j = streams[k], handles[k]
        try:
            while True:
                eid, ev = s.event(t)
                try:
                    out = j.append(ev, durability="sync", idempotency_key=eid)
                except journal.JournalFailStoppedError:
                    return
                s.ledger.add(eid, ev, out)
                if s.retry[t] and s.retry[t][0] == eid:
                    s.retry[t].popleft()
                elif eid == f"t{t}-{s.next_i[t]}":
                    s.next_i[t] += 1
                if not isinstance(out, Committed):
                    s.retry[t].appendleft(eid)
                    return
                with mu:
                    acked[0] += 1
                    if acked[0] >= acks_before_fault:
                        enough.set()
        finally:
            with mu:
                alive[0] -= 1
                if alive[0] == 0:
                    done.set()
                    enough.set()

    workers = [threading.Thread(target=worker, args=(k, t)) for k, s in enumerate(streams) for t in range(s.threads)]
    for w in workers:
        w.start()
    assert enough.wait(WAIT_S), "the appenders made no progress"
    fault()
    assert done.wait(WAIT_S), "the appenders did not stop after the fault"
    for w in workers:
        w.join(WAIT_S)


def test_store_writer_connection_terminated_mid_stream(pg: PostgresBackend) -> None:
    """16 threads on 8 journals of one store; the shared writer connection terminated again and
    again: every journal on it fail-stops, and each one's checker passes after reopening."""
    store = journal.store(pg.store_location())
    names = [f"j{k}" for k in range(8)]
    streams = [Stream(threads=2, seed=500 + k) for k in range(8)]
    rng = random.Random(7)
    handles = [store.open(n, create=True) for n in names]
    terminations = 0
    started = time.monotonic()
    try:
        while terminations < 30:
            pid = store.backend_pid  # type: ignore[attr-defined]
            killed: list[bool] = []
            _multi_round(streams, handles, rng.randint(1, 48), lambda pid=pid, killed=killed: killed.append(
                terminate(pid)))
            assert killed == [True], "pg_terminate_backend did not find the shared writer's session"
            terminations += 1
            for h in handles:  # every journal on the connection fail-stopped: their locks went with it
                with pytest.raises(journal.JournalFailStoppedError):
                    h.append({"probe": 1}, durability="sync", idempotency_key="probe")
                h.close()
            handles = [store.open(n, lock_timeout_s=WAIT_S) for n in names]
            assert len({h.backend_pid for h in handles}) == 1  # type: ignore[attr-defined]
            for s, h in zip(streams, handles, strict=True):
                s.ledger.resolve_all(h)
        for s, h in zip(streams, handles, strict=True):
            for t in range(s.threads):
                while s.retry[t]:
                    eid = s.retry[t].popleft()
                    out = h.append(s.ledger.events[eid], durability="sync", idempotency_key=eid)
                    s.ledger.add(eid, s.ledger.events[eid], out)
                    assert isinstance(out, Committed), out
    finally:
        for h in handles:
            h.close()
    total: Counter[str] = Counter()
    for n, s in zip(names, streams, strict=True):
        total.update(check_journal(pg, pg.target(n), s.ledger))
    report_count("postgres store: shared writer connection terminated mid-stream (8 journals, 16 threads)",
                 terminations)
    report_count("postgres store: termination run, checked", dict(total) | {"s": round(time.monotonic() - started, 1)})
    assert terminations >= 30
    assert total["acklost"] > 0 and total["not_committed"] > 0, total


def _queued_together(store: Any, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` on threads so that they land in one batch of the store's shared writer: the
    leader is held inside a batch of its own until all of them wait in the queue."""
    from journal.remote import postgres

    w = _store_writer(store)
    held = threading.Event()
    release = threading.Event()
    some = next(iter(w.members))

    def hold(_conn: Any) -> None:
        held.set()
        assert release.wait(WAIT_S)

    holder = threading.Thread(target=lambda: w.gc.submit([postgres._Op(0, some, hold, before=True)], "buffered"))
    holder.start()
    assert held.wait(WAIT_S)
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT_S
    while len(w.gc._queue) < len(calls):  # every call waits behind the held leader
        assert time.monotonic() < deadline, "the calls did not queue"
    commits = store.commits
    release.set()
    holder.join(WAIT_S)
    for t in threads:
        t.join(WAIT_S)
    results.append(store.commits - commits)
    return results


def test_a_conflict_in_one_journal_leaves_the_others_of_the_batch_committed(pg: PostgresBackend) -> None:
    store = journal.store(pg.store_location())
    a, b, c = (store.open(n, create=True) for n in ("a", "b", "c"))
    try:
        assert a.append({"who": "first"}, durability="sync", idempotency_key="k") == Committed(1, "sync")
        got = _queued_together(store, [
            lambda: a.append({"who": "other"}, durability="sync", idempotency_key="k"),  # the key holds another event
            lambda: b.append({"b": 1}, durability="sync", idempotency_key="k"),  # the same key, another journal
            lambda: c.append({"c": 1}, durability="sync"),
            lambda: a.append({"a": 2}, durability="sync"),  # a's other call in the batch goes on
        ])
        assert isinstance(got[0], journal.IdempotencyConflictError), got
        assert got[1:5] == [Committed(1, "sync"), Committed(1, "sync"), Committed(2, "sync"), 1], got
        assert [r.event for r in a.read()] == [{"who": "first"}, {"a": 2}]
        assert [r.event for r in b.read()] == [{"b": 1}] and [r.event for r in c.read()] == [{"c": 1}]
        assert a.append({"a": 3}, durability="sync") == Committed(3, "sync")  # and a goes on
    finally:
        for j in (a, b, c):
            j.close()


def test_a_constraint_violation_in_one_journal_leaves_the_others_of_the_batch_committed(
    pg: PostgresBackend,
) -> None:
    """A row a journal's writer did not know of (put there by hand) refuses its part: the batch is
    rolled back and written again a journal at a time; only that journal is NotCommitted (and
    fail-stops), the others commit."""
    from psycopg import sql

    store = journal.store(pg.store_location())
    a, b, c = (store.open(n, create=True) for n in ("a", "b", "c"))
    try:
        for j in (a, b, c):
            assert j.append({"n": 1}, durability="sync") == Committed(1, "sync")
        with connect() as conn:  # seq 2 of journal a, behind its writer's back
            conn.execute(sql.SQL("INSERT INTO {} (journal, seq, key, frame) "
                                 "SELECT journal, 2, NULL, frame FROM {} WHERE journal = 'a' AND seq = 1").format(
                sql.Identifier(pg.schema, "records"), sql.Identifier(pg.schema, "records")))
        got = _queued_together(store, [
            lambda: b.append({"n": 2}, durability="sync"),
            lambda: a.append({"n": 2}, durability="sync"),
            lambda: c.append({"n": 2}, durability="sync", idempotency_key="c2"),
        ])
        assert got[0] == Committed(2, "sync") and got[2] == Committed(2, "sync"), got
        assert isinstance(got[1], NotCommitted) and "UniqueViolation" in got[1].reason, got
        assert got[3] == 2, got  # the shared INSERT refused (no COMMIT sent); then b's and c's own, a's refused again
        with pytest.raises(journal.JournalFailStoppedError):
            a.append({"n": 3}, durability="sync")
        assert b.append({"n": 3}, durability="sync") == Committed(3, "sync")
        assert [r.event for r in c.read()] == [{"n": 1}, {"n": 2}]
    finally:
        for j in (a, b, c):
            j.close()
    with store.open("a", lock_timeout_s=WAIT_S) as again:  # its close let go of the lock on the shared connection
        assert again.last_seq == 2


# --- the children ----------------------------------------------------------------------------


def _main(argv: list[str]) -> int:
    mode, target = argv[0], argv[1]
    if mode == "race":  # "ready", wait for "go", try the lock once
        tag = argv[2]
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            j = journal.open(target, create=True)
        except journal.JournalLockedError as exc:
            print(f"lost {exc.pid}", flush=True)
            return 0
        print("won", flush=True)
        _append(j, tag, 0, 5)
        sys.stdin.readline()  # "close": the rest, then let go
        _append(j, tag, 5, 10)
        j.close()
        print("closed", flush=True)
        return 0
    if mode == "wait":
        tag = argv[2]
        with journal.open(target, lock_timeout_s=WAIT_S) as j:
            print("locked", flush=True)
            _append(j, tag, 0, 10)
        print("closed", flush=True)
        return 0
    if mode == "stream":  # append batches forever; "ack FIRST LAST" after each
        batch = int(argv[2])
        with journal.open(target, create=True) as j:
            while True:
                first = j.last_seq + 1
                seqs = range(first, first + batch)
                print(f"try {first}", flush=True)
                outs = j.append_many([child_event("s", s) for s in seqs], "sync", [f"k{s}" for s in seqs])
                assert [o.seq for o in outs if isinstance(o, Committed)] == list(seqs), outs
                print(f"ack {first} {first + batch - 1}", flush=True)
    raise SystemExit(f"unknown mode {mode}")


def _append(j: Any, tag: str, start: int, end: int) -> None:
    for i in range(start, end):
        out = j.append(child_event(tag, i), durability="sync", idempotency_key=f"{tag}-{i}")
        assert isinstance(out, Committed), out
        print(f"ack {out.seq} {tag}-{i}", flush=True)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
