"""The journal.api contract, run on every backend: the file engine, PostgreSQL and JetStream.

What a caller of ``journal.open`` may rely on whatever is behind it: outcomes and contiguous
seqs, append_many, idempotency (duplicates and conflicts, across a reopen), reads and point
reads, follow, resolve, refusal of corrupted records, the writer lock, read-only handles, typed
errors on bad input with nothing written, and journal.aio on top. Faults that need a backend's
own means (a killed connection, a killed server, a full disk) are in each backend's own tests;
here every outcome a caller can see without them is checked.

A backend that cannot run here (no server) is skipped, unless JOURNAL_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import asyncio
import pathlib
import threading
from collections.abc import Iterator

import pytest

import journal
import journal.aio
from journal.api import Journal as JournalProtocol
from journal.engine.encoding import encode_event
from journal.engine.options import Options
from tests.backends import BACKENDS, Backend, made_or_skipped


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def _digest(event: dict[str, object]) -> int:
    return encode_event(event, None, False, Options()).digest


def test_appends_are_committed_at_contiguous_seqs(backend: Backend) -> None:
    target = backend.target()
    level = "sync" if backend.sync_durable else "flush"
    with journal.open(target, create=True) as j:
        assert isinstance(j, JournalProtocol)
        assert j.last_seq == 0
        outs = [j.append({"n": i}, durability=level) for i in range(1, 6)]
        assert [o.seq for o in outs if isinstance(o, journal.Committed)] == [1, 2, 3, 4, 5]
        assert all(isinstance(o, journal.Committed) and not o.duplicate for o in outs)
        many = j.append_many([{"n": i} for i in range(6, 11)], durability="flush")
        assert [o.seq for o in many if isinstance(o, journal.Committed)] == list(range(6, 11))
        assert j.last_seq == 10
    with journal.open(target) as j:
        assert j.last_seq == 10
        assert [(r.seq, r.event) for r in j.read()] == [(i, {"n": i}) for i in range(1, 11)]
        assert j.append({"n": 11}, durability=level) == journal.Committed(11, level)


def test_durability_levels_are_never_reported_above_what_was_given(backend: Backend) -> None:
    with journal.open(backend.target(), create=True) as j:
        for level in ("buffered", "flush", "sync"):
            if level == "sync" and not backend.sync_durable:
                with pytest.raises(journal.DurabilityError):
                    j.append({"level": level}, durability=level)
                continue
            out = j.append({"level": level}, durability=level)
            assert isinstance(out, journal.Committed)
            rank = ("buffered", "flush", "sync")
            assert rank.index(out.durability) >= rank.index(level)
        with pytest.raises(journal.DurabilityError):
            j.append({"x": 1}, durability="fsync")
        j.flush()


def test_reads_give_back_every_event_exactly_and_point_reads_by_seq(backend: Backend) -> None:
    target = backend.target()
    events: list[object] = [
        {"type": "user_message", "text": "héllo \u2603", "n": 1.5, "ok": True, "none": None},
        {"nested": {"list": [1, [2, {"x": "y"}]], "empty": {}}, "big": "z" * 5000},
        b"\x00\x01raw bytes\xff",
        {"unicode": "\U0001f600", "escape": "\"\\\n"},
    ]
    with journal.open(target, create=True) as j:
        for ev in events:
            j.append(ev, durability="flush")
        j.append({"synthetic": 1}, durability="flush", synthetic=True)
        j.sync() if backend.sync_durable else j.flush()
        assert j.get(2) is not None and j.get(2).event == events[1]  # type: ignore[union-attr]
    with journal.open(target, readonly=True) as j:
        got = list(j.read())
        assert [r.event if not r.is_bytes else r.payload for r in got[:4]] == events
        assert got[2].is_bytes and not got[0].is_bytes
        assert got[4].synthetic and not got[0].synthetic
        assert [r.seq for r in j.read(after_seq=3)] == [4, 5]
        assert j.get(0) is None and j.get(6) is None
        rec = j.get(3)
        assert rec is not None and rec.payload == events[2]


def test_an_idempotency_key_is_written_once_and_conflicts_are_refused(backend: Backend) -> None:
    target = backend.target()
    with journal.open(target, create=True) as j:
        first = j.append({"n": 1}, durability="flush", idempotency_key="k1")
        again = j.append({"n": 1}, durability="flush", idempotency_key="k1")
        assert isinstance(first, journal.Committed) and isinstance(again, journal.Committed)
        assert again.seq == first.seq and again.duplicate
        with pytest.raises(journal.IdempotencyConflictError):
            j.append({"n": 2}, durability="flush", idempotency_key="k1")
        outs = j.append_many([{"a": 1}, {"a": 1}], durability="flush", idempotency_keys=["k2", "k2"])
        assert [o.seq for o in outs if isinstance(o, journal.Committed)] == [2, 2]
        assert j.last_seq == 2
        j.flush()
    with journal.open(target) as j:  # the keys outlive the handle
        again = j.append({"n": 1}, durability="flush", idempotency_key="k1")
        assert isinstance(again, journal.Committed) and again.seq == 1 and again.duplicate
        assert j.last_seq == 2


def test_resolve_answers_from_what_the_journal_holds(backend: Backend) -> None:
    target = backend.target()
    with journal.open(target, create=True) as j:
        j.append({"n": 1}, durability="flush")
        j.append({"n": 2}, durability="flush", idempotency_key="two")
        j.flush()
    with journal.open(target) as j:
        here = journal.AckLost(1, "lost", _digest({"n": 1}))
        assert isinstance(j.resolve(here), journal.Committed)
        by_key = journal.AckLost(7, "lost", _digest({"n": 2}), "two")
        resolved = j.resolve(by_key)
        assert isinstance(resolved, journal.Committed) and resolved.seq == 2
        other = journal.AckLost(2, "lost", _digest({"n": 99}))
        assert isinstance(j.resolve(other), journal.NotCommitted)
        beyond = journal.AckLost(3, "lost", _digest({"n": 3}))
        assert isinstance(j.resolve(beyond), journal.NotCommitted)
        done = journal.Committed(1, "sync")
        assert j.resolve(done) is done


def test_follow_yields_records_as_they_are_committed(backend: Backend) -> None:
    target = backend.target()
    with journal.open(target, create=True) as writer:
        writer.append({"n": 1}, durability="flush")
        stop = threading.Event()
        seen: list[int] = []
        got_two = threading.Event()
        with journal.open(target, readonly=True) as reader:

            def follow() -> None:
                for rec in reader.follow(after_seq=0, poll_interval_s=0.01, stop=stop):
                    seen.append(rec.seq)
                    if rec.seq == 3:
                        got_two.set()
                        return

            t = threading.Thread(target=follow)
            t.start()
            writer.append_many([{"n": 2}, {"n": 3}], durability="flush")
            assert got_two.wait(30), seen
            stop.set()
            t.join(30)
        assert seen == [1, 2, 3]


def test_a_changed_record_is_refused_never_served(backend: Backend) -> None:
    target = backend.target()
    with journal.open(target, create=True) as j:
        # Acknowledged durable: on files, damage to records that were never synced may be a
        # torn write (cut, not refused: docs/GUARANTEES.md), so the records are synced first.
        for i in range(1, 6):
            j.append({"n": i, "text": "some words " * 20}, durability="sync" if backend.sync_durable else "flush")
    backend.tamper(target, 3)
    with pytest.raises(journal.CorruptionError) as err:
        with journal.open(target, readonly=True) as j:
            j.get(3)
            list(j.read())
    assert err.value.seq == 3 or "3" in str(err.value)


def test_one_writer_at_a_time(backend: Backend) -> None:
    target = backend.target()
    with journal.open(target, create=True) as first:
        first.append({"n": 1}, durability="flush")
        with pytest.raises(journal.JournalLockedError):
            journal.open(target)
        with journal.open(target, readonly=True) as ro:  # readers are never locked out
            assert ro.last_seq >= 0
    with journal.open(target) as second:  # released with the handle
        assert second.append({"n": 2}, durability="flush") == journal.Committed(2, "flush")


def test_a_waiting_writer_gets_the_journal_when_it_is_released(backend: Backend) -> None:
    target = backend.target()
    first = journal.open(target, create=True)
    first.append({"n": 1}, durability="flush")
    result: list[object] = []
    trying = threading.Event()

    def second() -> None:
        trying.set()
        with journal.open(target, lock_timeout_s=30) as j:
            result.append(j.append({"n": 2}, durability="flush"))

    t = threading.Thread(target=second)
    t.start()
    assert trying.wait(10)
    first.close()
    t.join(60)
    assert result == [journal.Committed(2, "flush")]


def test_bad_input_raises_typed_errors_and_writes_nothing(backend: Backend) -> None:
    with journal.open(backend.target(), create=True) as j:
        j.append({"n": 1}, durability="flush")
        with pytest.raises(journal.EventNotSerializableError):
            j.append({"bad": object()}, durability="flush")
        with pytest.raises(journal.NonStringKeyError):
            j.append({1: "int key"}, durability="flush")
        with pytest.raises(journal.EventNotSerializableError):
            j.append(["not", "a", "dict"], durability="flush")
        with pytest.raises(journal.RecordTooLargeError):
            j.append({"big": "x" * (17 * 1024 * 1024)}, durability="flush")
        with pytest.raises(journal.InvalidArgumentError):
            j.append({"n": 2}, durability="flush", idempotency_key="")
        assert j.last_seq == 1
        assert j.append({"n": 2}, durability="flush") == journal.Committed(2, "flush")


def test_read_only_and_closed_handles_refuse_writes(backend: Backend) -> None:
    target = backend.target()
    with pytest.raises(journal.JournalNotFoundError):
        journal.open(target)
    j = journal.open(target, create=True)
    j.append({"n": 1}, durability="flush")
    j.close()
    j.close()  # idempotent
    with pytest.raises(journal.JournalClosedError):
        j.append({"n": 2})
    with journal.open(target, readonly=True) as ro:
        with pytest.raises(journal.ReadOnlyError):
            ro.append({"n": 2})
        assert [r.seq for r in ro.read()] == [1]


def test_threads_appending_at_once_get_distinct_contiguous_seqs(backend: Backend) -> None:
    target = backend.target()
    level = "sync" if backend.sync_durable else "flush"
    with journal.open(target, create=True) as j:
        barrier = threading.Barrier(8)
        got: list[int] = []
        mu = threading.Lock()

        def writer(t: int) -> None:
            barrier.wait()
            for i in range(25):
                out = j.append({"t": t, "i": i}, durability=level)
                assert isinstance(out, journal.Committed)
                with mu:
                    got.append(out.seq)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == list(range(1, 201))
    with journal.open(target, readonly=True) as j:
        recs = list(j.read())
        assert [r.seq for r in recs] == list(range(1, 201))
        per_thread: dict[int, list[int]] = {}
        for r in recs:
            per_thread.setdefault(r.event["t"], []).append(r.event["i"])
        assert all(v == list(range(25)) for v in per_thread.values())  # each thread's order kept


def test_the_asyncio_face_runs_on_it(backend: Backend) -> None:
    target = backend.target()
    level = "sync" if backend.sync_durable else "flush"

    async def main() -> list[int]:
        async with await journal.aio.open(target, create=True) as j:
            outs = await asyncio.gather(*(j.append({"n": i}, durability=level) for i in range(50)))
            seqs = sorted(o.seq for o in outs if isinstance(o, journal.Committed))
            got = [rec.seq async for rec in j.read()]
            assert got == seqs
            return seqs

    assert asyncio.run(main()) == list(range(1, 51))
