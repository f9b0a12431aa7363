"""Real processes: the writer lock, a reader following a live writer, reopen after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import journal
from journal.fs import Lock, OsFileSystem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.child_writer", *args],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def test_second_writer_gets_the_holders_pid(jpath: str) -> None:
    holder = child(jpath, "hold")
    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("locked")
        with pytest.raises(journal.JournalLockedError) as exc:
            journal.open(jpath)
        assert exc.value.pid == holder.pid and str(holder.pid) in str(exc.value)
        with journal.open(jpath, readonly=True) as r:  # readers take no lock
            assert r.last_seq == 0
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock when the holder died.
    with journal.open(jpath) as j:
        assert j.append({"a": 1}) == journal.Committed(1, "sync")


def test_the_holder_is_the_flocks_holder_not_a_stale_note(jpath: str) -> None:
    """A holder has taken the flock but not yet written its pid over the last holder's note (the
    window two racing writers can meet): a second writer is told the kernel's holder, not the
    pid the note still names."""
    import fcntl

    with journal.open(jpath, create=True):
        pass
    lock_path = os.path.join(jpath, "LOCK")
    with open(lock_path, "r+b") as f:
        f.write(b"999999\n".ljust(32))  # a previous holder's note, left as it was
        f.flush()
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # held, no note written yet
        assert OsFileSystem().read_lock_owner(lock_path) == os.getpid()
        with pytest.raises(journal.JournalLockedError) as got:
            journal.open(jpath)
        assert got.value.pid == os.getpid(), got.value


def test_waiting_for_the_lock_with_a_timeout(jpath: str) -> None:
    """The opener is turned away at least once, and only then does the holder let go: the open
    succeeds because it waited, never because the holder was already gone."""
    holder = child(jpath, "hold")
    refused = threading.Event()

    class ReleaseWhenRefused(OsFileSystem):
        def try_lock(self, path: str) -> Lock | None:
            lock = super().try_lock(path)
            if lock is None and not refused.is_set():
                refused.set()
                tell(holder, "release")
            return lock

    try:
        assert holder.stdout is not None and holder.stdout.readline().startswith("locked")
        with journal.open(jpath, lock_timeout_s=60, fs=ReleaseWhenRefused()) as j:
            assert j.last_seq == 0
        assert refused.is_set(), "the lock was free at the first try: the wait was never tested"
    finally:
        holder.kill()
        holder.wait()


def test_two_processes_race_for_the_lock(jpath: str) -> None:
    """Both racers try at the same moment and the winner holds the lock until both have said
    how they fared, so the loser always finds it held."""
    with journal.open(jpath, create=True):
        pass
    racers = [child(jpath, "race") for _ in range(2)]
    try:
        for r in racers:
            assert r.stdout is not None and r.stdout.readline().strip() == "ready"
        for r in racers:
            tell(r, "go")
        lines = []
        for r in racers:
            assert r.stdout is not None
            lines.append(r.stdout.readline().strip())
        for r in racers:
            r.communicate(input="release\n", timeout=60)
    finally:
        for r in racers:
            r.kill()
            r.wait()
    assert sorted(line.split()[0] for line in lines) == ["lost", "won"]
    winner = racers[[line.split()[0] for line in lines].index("won")]
    loser_line = next(line for line in lines if line.startswith("lost"))
    assert loser_line.split()[1] in (str(winner.pid), "None")


def test_reader_follows_a_live_writer_across_segments(jpath: str) -> None:
    with journal.open(jpath, create=True):
        pass
    writer = child(jpath, "append", "flush", "7", "8192")
    seen: list[int] = []
    try:
        with journal.open(jpath, readonly=True) as r:
            for rec in r.follow(after_seq=0, poll_interval_s=0.005, idle_timeout_s=30):
                assert rec.event["i"] == rec.seq - 1
                seen.append(rec.seq)
                if len(seen) >= 3000:
                    break
    finally:
        writer.kill()
        writer.wait()
    assert seen == list(range(1, 3001))
    assert len([n for n in os.listdir(jpath) if n.endswith(".seg")]) > 3


@pytest.mark.parametrize("durability", ["sync", "flush"])
def test_reopen_after_sigkill_mid_batch(jpath: str, durability: str) -> None:
    for round_ in range(3):
        proc = child(jpath, "append", durability, "25", "65536")
        acked = 0
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        target = 200 + round_ * 137
        while acked < target and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked = int(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert acked >= target
        with journal.open(jpath) as j:
            recs = list(j.read())
            # Everything acknowledged survived the kill; seqs are contiguous; nothing invented.
            assert len(recs) >= acked
            assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
            assert all(r.event["i"] == r.seq - 1 for r in recs)
