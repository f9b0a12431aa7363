"""What the server backends share (journal/remote/batching.py, journal/remote/resolution.py), without a server.

The backends' own tests (tests/test_remote_postgres.py, tests/test_remote_nats*.py, the contract)
drive these through real writes; here each rule is pinned on its own, so a change to the shared
code that one backend's tests would not reach still fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from journal.engine.encoding import Encoded, encode_event
from journal.engine.options import Options
from journal.errors import InvalidArgumentError, InvariantError
from journal.outcomes import AckLost, Committed, NotCommitted, Outcome
from journal.record import Record
from journal.remote.batching import (
    BARRIER,
    DUP,
    NEW,
    REFUSED,
    Held,
    Step,
    events_and_keys,
    keyed_once,
    outcomes_of,
    plan_group,
    runs,
    write_runs,
)
from journal.remote.resolution import ack_lost, resolve_from

OPTS = Options(compress=False)


def enc(event: Any, key: str | None = None) -> Encoded:
    return encode_event(event, key, False, OPTS)


def test_runs_cut_by_bytes_and_by_records_and_keep_an_oversized_item_alone() -> None:
    sizes = [3, 3, 3, 10, 1, 1, 1]
    got = list(runs(range(len(sizes)), lambda i: sizes[i], bytes_max=6))
    assert got == [[0, 1], [2], [3], [4, 5, 6]]
    got = list(runs(range(len(sizes)), lambda i: sizes[i], bytes_max=100, records_max=3))
    assert got == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(runs([], len, bytes_max=1)) == []


def test_write_runs_stops_sending_once_the_journal_fail_stopped() -> None:
    failed: list[str | None] = [None]
    sent: list[list[int]] = []

    def submit(chunk: list[int]) -> list[Outcome]:
        sent.append(chunk)
        failed[0] = "the connection was lost"  # the first run's write fail-stops the journal
        return [Committed(i + 1, "flush") for i in chunk]

    out = write_runs([[0, 1], [2], [3, 4]], submit, lambda: failed[0])
    assert sent == [[0, 1]]
    assert out[:2] == [Committed(1, "flush"), Committed(2, "flush")]
    assert all(isinstance(o, NotCommitted) and "the connection was lost" in o.reason for o in out[2:])
    assert len(out) == 5


def test_keyed_once_writes_a_repeated_key_once_and_answers_the_repeat_as_its_duplicate() -> None:
    items = [enc({"a": 1}, "k"), enc({"b": 2}), enc({"a": 1}, "k")]
    written: list[list[Encoded]] = []

    def write(unique: list[Encoded]) -> list[Outcome]:
        written.append(unique)
        return [Committed(i + 1, "sync") for i in range(len(unique))]

    out = keyed_once(items, write)
    assert written == [items[:2]]
    assert out[0] == Committed(1, "sync") and out[1] == Committed(2, "sync")
    assert isinstance(out[2], Committed) and out[2].seq == 1 and out[2].duplicate


def test_plan_group_duplicates_retries_refuses_whole_calls_and_numbers_the_rest() -> None:
    stored = enc({"x": 1}, "held")
    calls = [
        (1, enc({"n": 1})),
        (1, enc({"x": 1}, "held")),  # a retry of what the journal holds: a duplicate
        (2, enc({"n": 2}, "mine")),
        (3, enc({"n": 3})),
        (3, enc({"other": True}, "held")),  # the key holds another event: call 3 is refused
        (4, enc({"n": 2}, "mine")),  # the batch's own call 2 wrote it: a duplicate of that record
        (4, enc({"x": 1}, "held")),
    ]
    items = [it for _, it in calls]
    call_of = {id(it): call for call, it in calls}
    known = {"held": Held(7, stored.raw, stored.is_bytes)}
    steps, rows = plan_group(items, known, 10, lambda _i, it: call_of[id(it)])
    assert [(s.kind, s.seq) for s in steps] == [
        (NEW, 10), (DUP, 7), (NEW, 11), (REFUSED, 7), (REFUSED, 7), (DUP, 11), (DUP, 7),
    ]
    assert rows == [(10, items[0]), (11, items[2])]


def test_plan_group_same_json_in_another_key_order_is_a_duplicate_and_barriers_take_no_seq() -> None:
    first = enc({"a": 1, "b": 2}, "k")
    again = enc({"b": 2, "a": 1}, "k")
    barrier = enc({"marker": True})
    steps, rows = plan_group([barrier, again], {"k": Held(3, first.raw, first.is_bytes)}, 5,
                             lambda i, _it: i, lambda it: it is barrier)
    assert [(s.kind, s.seq) for s in steps] == [(BARRIER, 0), (DUP, 3)]
    assert rows == []


def test_a_held_key_known_by_digest_tells_only_an_equal_digest() -> None:
    it = enc({"a": 1, "b": 2}, "k")
    assert Held(4, digest=it.digest).holds(it) is True
    assert Held(4, digest=it.digest + 1).holds(it) is None
    with pytest.raises(InvariantError, match="digest only"):
        plan_group([it], {"k": Held(4, digest=it.digest + 1)}, 5, lambda i, _it: i)


def test_outcomes_of_each_fate() -> None:
    new, dup, refused = enc({"n": 1}), enc({"n": 2}, "k"), enc({"n": 3}, "r")
    items = [new, dup, refused]
    steps = [Step(NEW, 5), Step(DUP, 2, "k"), Step(REFUSED, 1, "r")]

    def conflict(st: Step) -> Outcome:
        return NotCommitted(f"conflict {st.key} at {st.seq}")

    ok = outcomes_of(items, steps, "ok", "sync", "", conflict)
    assert ok == [Committed(5, "sync"), Committed(2, "sync", True, "idempotency key matched an existing record"),
                  NotCommitted("conflict r at 1")]
    nope = outcomes_of(items, steps, "not", "sync", "rolled back", conflict)
    assert nope[0] == NotCommitted("rolled back")
    assert nope[1] == AckLost(2, "rolled back", dup.digest, "k")  # the record it duplicates may be the batch's own
    lost = outcomes_of(items, steps, "lost", "sync", "no answer", conflict)
    assert lost[:2] == [AckLost(5, "no answer", new.digest, None), AckLost(2, "no answer", dup.digest, "k")]


def _record(seq: int, e: Encoded) -> Record:
    return Record(seq, e.raw, e.is_bytes, e.key, False)


def test_resolve_from_by_key_by_seq_and_digest_or_not_committed() -> None:
    it = enc({"n": 1}, "k")
    lost = ack_lost(4, it, "no answer")
    assert lost == AckLost(4, "no answer", it.digest, "k")
    levels: list[str] = []

    def level() -> Any:
        levels.append("asked")
        return "sync"

    def nothing(_seq: int) -> Record | None:
        return None

    by_key = resolve_from(lost, lambda key: 9 if key == "k" else None, nothing, level)
    assert by_key == Committed(9, "sync", duplicate=True, reason="resolved by idempotency key")
    there = resolve_from(lost, lambda _k: None, lambda seq: _record(seq, it), level)
    assert there == Committed(4, "sync", reason="resolved: the record is in the journal")
    other = resolve_from(lost, lambda _k: None, lambda seq: _record(seq, enc({"n": 2}, "k")), level)
    assert other == NotCommitted("resolved: another record holds this record's seq")
    unkeyed = ack_lost(4, enc({"n": 1}), "no answer")
    same_bytes_other_key = resolve_from(unkeyed, lambda _k: None, lambda seq: _record(seq, it), level)
    assert same_bytes_other_key == NotCommitted("resolved: another record holds this record's seq")
    assert resolve_from(lost, lambda _k: None, nothing, level) == NotCommitted(
        "resolved: the journal ends before this record's seq"
    )
    assert levels == ["asked", "asked"]  # the durability is asked only of what was found


def test_events_and_keys_pairs_them_or_refuses_a_count_that_differs() -> None:
    assert events_and_keys(iter([{"a": 1}, {"b": 2}]), None) == ([{"a": 1}, {"b": 2}], [None, None])
    assert events_and_keys([{"a": 1}], iter(["k"])) == ([{"a": 1}], ["k"])
    with pytest.raises(InvalidArgumentError, match=r"one entry per event \(1 keys for 2 events\); nothing was written"):
        events_and_keys([{"a": 1}, {"b": 2}], ["k"])
