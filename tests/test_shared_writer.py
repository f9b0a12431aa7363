"""Shared-writer mode: several handles and processes appending to one journal, one batch at a time.

The invariants after any interleaving and any kill -9: every record whole (the journal recovers
and verifies clean), seqs contiguous, every Committed outcome present at its seq with its key,
and no idempotency key written twice, whichever process tried it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import journal
from journal.engine import verify as V
from tests.conftest import report_count

CHILD = r"""
import json, os, sys
import journal
path, name, logpath = sys.argv[1], sys.argv[2], sys.argv[3]
log = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
os.write(log, b"opening\n")
j = journal.open(path, create=True, writer="shared", segment_size_bytes=16384)
os.write(log, b"open\n")
sys.stdout.write("open\n"); sys.stdout.flush()
i = 0
while True:
    # Keys of their own, and keys every child tries with the same event near the same place in
    # the journal (a key is known to every writer within the live segment and the one before
    # it, as after a reopen): only one write may win each, the others are duplicates.
    if i % 4 == 0:
        key = f"shared-{j.last_seq // 40}"
        event = {"key": key}
    else:
        key = f"{name}-{i}"
        event = {"w": name, "i": i, "key": key, "pad": "p" * (i * 13 % 200)}
    if i % 7 == 0:
        outs = j.append_many([event, {**event, "second": True}], durability="sync",
                             idempotency_keys=[key, f"{name}-{i}-b"])
        pairs = [(outs[0], key), (outs[1], f"{name}-{i}-b")]
    else:
        pairs = [(j.append(event, durability="sync" if i % 3 else "flush", idempotency_key=key), key)]
    for out, k in pairs:
        if not isinstance(out, journal.Committed):
            raise SystemExit(f"child {name}: {out}")
        os.write(log, (json.dumps([out.seq, k, out.duplicate]) + "\n").encode())
        sys.stdout.write("ack\n"); sys.stdout.flush()  # the parent kills after a number of these
    i += 1
"""


def _records(path: Path) -> list[journal.Record]:
    with journal.open(path) as j:  # a writer's open: recovery cuts what a killed child tore
        recs = list(j.read())
    return recs


def _check(path: Path, logs: list[Path]) -> dict[str, int]:
    recs = _records(path)
    seqs = [r.seq for r in recs]
    assert seqs == list(range(1, len(seqs) + 1)), "seqs are not contiguous"
    keys = [r.key for r in recs]
    dup = {k: [r.seq for r in recs if r.key == k] for k in keys if keys.count(k) > 1}
    assert not dup, f"idempotency keys written twice: {dict(list(dup.items())[:5])}"
    at = {r.seq: r for r in recs}
    acked = dups = 0
    for log in logs:
        for line in log.read_text().splitlines():
            if not line.startswith("["):
                continue
            seq, key, duplicate = json.loads(line)
            assert seq in at and at[seq].key == key, f"acknowledged seq {seq} ({key}) is not in the journal"
            acked += 1
            dups += bool(duplicate)
    rep = V.verify(str(path))
    assert rep.verdict == V.CLEAN, rep.summary()
    return {"records": len(recs), "acked": acked, "duplicates": dups}


def test_two_handles_interleave_with_contiguous_seqs_and_keys_known_to_both(tmp_path: Path) -> None:
    path = tmp_path / "j"
    a = journal.open(path, create=True, writer="shared", segment_size_bytes=8192)
    b = journal.open(path, writer="shared", segment_size_bytes=8192)
    outs: dict[str, list[journal.Outcome]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def run(h: journal.Journal, name: str) -> None:
        start.wait()
        for i in range(200):
            level = "sync" if i % 3 else ("flush" if i % 2 else "buffered")
            outs[name].append(h.append({"w": name, "i": i, "pad": "z" * 40}, durability=level))

    threads = [threading.Thread(target=run, args=(h, n)) for h, n in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = a.append({"k": 1}, idempotency_key="K")
    again = b.append({"k": 1}, idempotency_key="K")
    assert isinstance(first, journal.Committed) and isinstance(again, journal.Committed)
    assert again.duplicate and again.seq == first.seq
    # A buffered append in shared mode is written at once (its seq is only known then).
    assert {o.durability for o in outs["a"] if isinstance(o, journal.Committed)} <= {"sync", "flush"}
    a.close()
    b.close()
    with journal.open(path, readonly=True) as r:
        recs = list(r.read())
        assert r.recovery.segments > 2  # rolled over, by both handles
    assert [x.seq for x in recs] == list(range(1, 402))
    by = {(x.event.get("w"), x.event.get("i")): x.seq for x in recs}
    for name, lst in outs.items():
        for i, out in enumerate(lst):
            assert isinstance(out, journal.Committed) and by[(name, i)] == out.seq


def test_a_shared_batch_waits_for_the_lock_then_is_not_committed(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True):
        pass
    s = journal.open(path, writer="shared", shared_lock_timeout_s=0.05)
    try:
        with journal.open(path) as exclusive:  # holds the lock for its whole life
            out = s.append({"x": 1})
            assert isinstance(out, journal.NotCommitted) and str(os.getpid()) in out.reason
            exclusive.append({"y": 1})
        out = s.append({"x": 2})  # the exclusive writer is gone: caught up, next seq
        assert isinstance(out, journal.Committed) and out.seq == 2
    finally:
        s.close()
    assert [r.event for r in _records(path)] == [{"y": 1}, {"x": 2}]


def test_an_exclusive_open_waits_out_shared_writers_or_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "j"
    s = journal.open(path, create=True, writer="shared")
    s.append({"x": 1})
    with journal.open(path) as e:  # no shared batch in flight: the lock is free
        e.append({"x": 2})
        with pytest.raises(journal.JournalLockedError):
            journal.open(path)
    s.append({"x": 3})
    s.close()
    assert [r.seq for r in _records(path)] == [1, 2, 3]


ROUNDS = int(os.environ.get("JOURNAL_SHARED_ROUNDS", "12"))


def _expect_line(ch: subprocess.Popen[str], want: str) -> None:
    """The child's next line; a child that stopped instead hit an error (it raises on any
    outcome but Committed), and its stderr says which."""
    line = ch.stdout.readline() if ch.stdout else ""
    if line.strip() != want:
        ch.wait()
        err = ch.stderr.read() if ch.stderr else ""
        raise AssertionError(f"a child stopped by itself (exit {ch.returncode}): {err[-2000:]}")


def test_four_processes_appending_in_shared_mode_killed_at_random(tmp_path: Path) -> None:
    rng = random.Random(20261201)
    totals = {"records": 0, "acked": 0, "duplicates": 0, "torn_tails": 0, "killed_holding_lock": 0}
    for rnd in range(ROUNDS):
        path = tmp_path / f"j{rnd}"
        logs = [tmp_path / f"r{rnd}-c{c}.log" for c in range(4)]
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, str(path), f"c{c}", str(logs[c])],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for c in range(4)
        ]
        try:
            # Wait until every child has its handle open, then kill them one by one, each after
            # a random number of its acknowledgements (so at a random point of its next batch)
            # while the others keep appending.
            for ch in children:
                _expect_line(ch, "open")
            for ch in rng.sample(children, len(children)):
                for _ in range(rng.randint(1, 150)):
                    _expect_line(ch, "ack")
                ch.send_signal(signal.SIGKILL)
                ch.wait()
        finally:
            for ch in children:
                if ch.poll() is None:
                    ch.kill()
                    ch.wait()
                for stream in (ch.stdout, ch.stderr):
                    if stream:
                        stream.close()
        assert all(ch.returncode == -signal.SIGKILL for ch in children)
        note = (path / "LOCK").read_bytes()
        totals["killed_holding_lock"] += b"writing" in note
        got = _check(path, logs)
        # Batches a kill tore, cut (and kept) by a survivor's catch-up or by the final open.
        quarantined = path / "quarantine"
        totals["torn_tails"] += len(os.listdir(quarantined)) if quarantined.is_dir() else 0
        assert got["acked"] > 0
        for k, v in got.items():
            totals[k] += v
    report_count(f"shared writers, {ROUNDS} rounds of 4 processes killed at random (tests/test_shared_writer.py)",
                 totals)
    assert totals["duplicates"] > 0  # keys every child tried were refused as duplicates


def test_a_batch_torn_by_a_killed_writer_is_cut_by_the_next_one_to_take_the_lock(tmp_path: Path) -> None:
    from journal.engine import format as fmt

    path = tmp_path / "j"
    a = journal.open(path, create=True, writer="shared")
    b = journal.open(path, writer="shared")  # opened before the damage: it meets it in a catch-up
    for i in range(3):
        assert isinstance(a.append({"a": i}), journal.Committed)
    # What a writer killed in the middle of its batch leaves: the batch's first bytes after the
    # last frame (in the space reserved past it), and its note in the lock file.
    live = sorted(path.glob("*.seg"))[-1]
    data = live.read_bytes()
    salt = fmt.decode_segment_header(data).salt
    end = fmt.py_scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, salt, 1).stop_offset
    frame = fmt.encode_frame(4, fmt.FLAG_COMMIT, 9, b"from a ghost", salt)
    with open(live, "r+b") as f:
        f.seek(end)
        f.write(frame[: len(frame) // 2])
    (path / "LOCK").write_bytes(b"999999 shared writing\n".ljust(64))
    out = b.append({"b": 1})
    assert isinstance(out, journal.Committed) and out.seq == 4
    quarantined = list((path / "quarantine").iterdir())
    assert len(quarantined) == 1 and quarantined[0].read_bytes().startswith(frame[: len(frame) // 2])
    assert isinstance(a.append({"a": 3}), journal.Committed)
    a.close()
    b.close()
    assert [r.event for r in _records(path)] == [{"a": 0}, {"a": 1}, {"a": 2}, {"b": 1}, {"a": 3}]
    assert V.verify(str(path)).verdict == V.CLEAN


def test_a_key_another_process_wrote_with_another_event_is_a_conflict_not_a_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "j"
    a = journal.open(path, create=True, writer="shared")
    b = journal.open(path, writer="shared")
    try:
        assert isinstance(a.append({"n": 1}, idempotency_key="K"), journal.Committed)
        # b learns of K in the catch-up of this very batch: that record is not written.
        outs = b.append_many([{"n": 2}, {"other": True}], idempotency_keys=["K", "L"])
        assert isinstance(outs[0], journal.NotCommitted) and "K" in outs[0].reason
        assert "IdempotencyConflict" in outs[0].reason or "different" in outs[0].reason
        assert isinstance(outs[1], journal.Committed) and outs[1].seq == 2
        # Now b knows K and its digest: the same mistake is refused before anything is queued.
        with pytest.raises(journal.IdempotencyConflictError):
            b.append({"n": 3}, idempotency_key="K")
        same = b.append({"n": 1}, idempotency_key="K")
        assert isinstance(same, journal.Committed) and same.duplicate and same.seq == 1
    finally:
        a.close()
        b.close()
    assert [r.key for r in _records(path)] == ["K", "L"]


def test_a_key_another_writer_wrote_is_only_as_durable_as_the_batch_that_found_it(tmp_path: Path) -> None:
    from journal.crashsim.faults import FaultyFileSystem
    from journal.fs import OsFileSystem

    fs = FaultyFileSystem(OsFileSystem())
    a = journal.open(tmp_path / "j", create=True, writer="shared", fs=fs)
    b = journal.open(tmp_path / "j", writer="shared")
    assert isinstance(b.append({"v": 1}, durability="flush", idempotency_key="K"), journal.Committed)
    fs.fail("fdatasync", after=fs.calls["fdatasync"], times=-1)
    outs = a.append_many([{"v": 1}, {"v": 2}], durability="sync", idempotency_keys=["K", None])
    # The fdatasync that would have covered K failed: its outcome is unknown, not "sync".
    assert [type(o) for o in outs] == [journal.AckLost, journal.AckLost]
    assert outs[0].seq == 1
    b.close()


def test_a_different_event_under_a_key_from_a_footer_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "j"
    a = journal.open(path, create=True, writer="shared", segment_size_bytes=65536)
    b = journal.open(path, writer="shared", segment_size_bytes=65536)
    try:
        assert isinstance(b.append({"event": "X"}, idempotency_key="K"), journal.Committed)
        for _ in range(40):  # two roll-overs: a learns K from a footer, with no digest
            b.append(os.urandom(4000), durability="flush")
        out = a.append({"event": "Y"}, idempotency_key="K")
        assert isinstance(out, journal.NotCommitted) and "different event" in out.reason
        with pytest.raises(journal.IdempotencyConflictError):
            a.append({"event": "Y"}, idempotency_key="K")  # known now: refused before queueing
        same = a.append({"event": "X"}, idempotency_key="K")
        assert isinstance(same, journal.Committed) and same.duplicate and same.seq == 1
    finally:
        a.close()
        b.close()
    assert _records(path)[0].event == {"event": "X"}


def test_a_failed_fdatasync_stops_every_shared_writer_until_a_reopen(tmp_path: Path) -> None:
    from journal.crashsim.faults import FaultyFileSystem
    from journal.fs import OsFileSystem

    fs = FaultyFileSystem(OsFileSystem())
    a = journal.open(tmp_path / "j", create=True, writer="shared", fs=fs)
    b = journal.open(tmp_path / "j", writer="shared")
    assert isinstance(b.append({"b": 0}), journal.Committed)
    fs.fail("fdatasync", after=fs.calls["fdatasync"], times=1)
    assert isinstance(a.append({"a": 1}), journal.AckLost)
    # b must not append after records whose pages the kernel may have dropped.
    out = b.append({"b": 1})
    assert isinstance(out, journal.NotCommitted) and "fdatasync failed" in out.reason
    with pytest.raises(journal.JournalFailStoppedError):
        b.append({"b": 2})
    a.close()
    b.close()
    with journal.open(tmp_path / "j", writer="shared") as c:  # the open recovers and clears it
        assert isinstance(c.append({"c": 1}), journal.Committed)
