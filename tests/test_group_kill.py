"""kill -9 of a process whose journals append through one commit group.

A child process opens a group under a store root and three journals in it, and appends "sync"
and "flush" records from one thread per journal, reporting on its stdout (lines below PIPE_BUF,
so each arrives whole): ``R`` once open, ``A id`` before each append, ``O id kind seq level``
after it returns. Its file system stops it at a chosen point -- inside the log's fdatasync,
right after one returned (before the appends it acknowledged are reported), in a segment's
fdatasync while a log is retired -- by writing ``K`` and waiting for ever; the parent SIGKILLs
it when it reads ``K`` (or after a number of acknowledgements). No sleeps: the kill point is
where the child says it is.

Then the parent opens each journal (the first open recovers the dead group) and checks: every
record acknowledged Committed (a kill keeps "flush" as well as "sync") is there at its seq, seqs
are 1..n, every record there was announced, at the seq its outcome named if one was reported;
the dead group's directory is gone; a new group opens and its journals append on.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

import journal
from journal.engine import group_log as glog
from journal.fs import File, OsFileSystem

NAMES = ("a", "b", "c/d")
ROTATE_BYTES = 8192  # the child's logs rotate every few dozen records
APPENDS_PER_THREAD_MAX = 5000  # the child is killed long before
REPORT_WAIT_S = 120.0  # a child that says nothing for this long is broken: the test fails, never hangs
REPO = pathlib.Path(__file__).resolve().parent.parent


# --- the child ------------------------------------------------------------------------------


class _Stop:
    """Where the child stops: the ``at``-th call of ``site`` (0-based), counted once armed."""

    def __init__(self, site: str, at: int, say: Any) -> None:
        self.site, self.at, self.say = site, at, say
        self.armed = False
        self.calls = 0
        self.mu = threading.Lock()

    def reached(self, site: str) -> bool:
        with self.mu:
            if not self.armed or site != self.site:
                return False
            n, self.calls = self.calls, self.calls + 1
            return n == self.at

    def halt(self) -> None:
        self.say("K")
        threading.Event().wait()  # the parent kills the process now


class _StoppingFile:
    def __init__(self, inner: File, kind: str, stop: _Stop) -> None:
        self._inner, self._kind, self._stop = inner, kind, stop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def fdatasync(self) -> None:
        if self._stop.reached(f"in-{self._kind}-fdatasync"):
            self._stop.halt()
        self._inner.fdatasync()
        if self._stop.reached(f"after-{self._kind}-fdatasync"):
            self._stop.halt()


class _StoppingFs(OsFileSystem):
    def __init__(self, stop: _Stop) -> None:
        self._stop = stop

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        kind = "log" if path.endswith(glog.LOG_SUFFIX) else "segment" if path.endswith(".seg") else ""
        return _StoppingFile(f, kind, self._stop) if kind else f


def child(root: str, site: str, at: int) -> None:
    """The writer process (run by the parent as ``python -c``)."""
    out_mu = threading.Lock()

    def say(line: str) -> None:
        with out_mu:
            os.write(1, (line + "\n").encode())

    stop = _Stop(site, at, say)
    glog.LOG_ROTATE_BYTES = ROTATE_BYTES  # the group reads it at each commit
    fs = _StoppingFs(stop)
    g = journal.open_group(root, fs=fs)
    js = [journal.open(os.path.join(root, name), create=True, fs=fs, group=g) for name in NAMES]
    stop.armed = True
    say("R")

    def writer(t: int) -> None:
        j = js[t]
        for i in range(APPENDS_PER_THREAD_MAX):
            rid = f"{NAMES[t]}-{i}"
            level = "sync" if i % 3 else "flush"
            say(f"A {rid}")
            if i % 5 == 4:
                ids = [rid, f"{rid}-2"]
                outs = j.append_many([{"id": x, "pad": "p" * (i % 7) * 50} for x in ids], durability=level)
            else:
                ids = [rid]
                outs = [j.append({"id": rid, "pad": "p" * (i % 7) * 50}, durability=level)]
            for x, o in zip(ids, outs, strict=True):
                kind = "C" if isinstance(o, journal.Committed) else "A" if isinstance(o, journal.AckLost) else "N"
                say(f"O {x} {kind} {getattr(o, 'seq', 0)} {level}")

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(len(NAMES))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    say("E the writers finished before the kill")


# --- the parent -----------------------------------------------------------------------------


def _run_and_kill(root: pathlib.Path, site: str, at: int, acks_before_kill: int) -> list[str]:
    code = f"from tests.test_group_kill import child; child({str(root)!r}, {site!r}, {at})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    lines: list[str] = []
    acks = 0
    buf = b""
    try:
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], REPORT_WAIT_S)
            assert ready, f"the child said nothing for {REPORT_WAIT_S} s; its last lines: {lines[-5:]}"
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"the child exited before the kill: {proc.wait()} {proc.stderr.read()!r}"  # type: ignore[union-attr]
            buf += chunk
            *whole, buf = buf.split(b"\n")
            lines.extend(x.decode() for x in whole)
            acks += sum(x.startswith(b"O ") for x in whole)
            assert not any(x.startswith(b"E ") for x in whole), lines[-5:]
            if "K" in lines or (acks_before_kill and acks >= acks_before_kill):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # What the pipe still holds was reported before the kill: records announced after the
        # last read may be in the journals, so every line counts.
        buf += proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()  # type: ignore[union-attr]
    return lines + [x.decode() for x in buf.split(b"\n") if x]


def _check(root: pathlib.Path, lines: list[str]) -> dict[str, int]:
    announced: set[str] = set()
    outcomes: dict[str, tuple[str, int]] = {}
    for line in lines:
        if line.startswith("A "):
            rid = line.split()[1]
            announced.update({rid, f"{rid}-2"})
        elif line.startswith("O "):
            _o, rid, kind, seq, _level = line.split()
            outcomes[rid] = (kind, int(seq))
    found: dict[str, int] = {}
    for name in NAMES:
        with journal.open(root / name) as j:
            recs = list(j.read())
        seqs = [r.seq for r in recs]
        assert seqs == list(range(1, len(seqs) + 1)), f"{name}: seqs {seqs[:20]}"
        for r in recs:
            rid = str(json.loads(r.payload)["id"])
            assert rid in announced, f"{name}: seq {r.seq} holds {rid}, never appended"
            kind, acked_seq = outcomes.get(rid, ("?", 0))
            assert kind != "N", f"{name}: {rid} was NotCommitted and is there"
            if kind in ("C", "A"):
                assert acked_seq == r.seq, f"{name}: {rid} acknowledged at seq {acked_seq}, read at {r.seq}"
            found[rid] = r.seq
    lost = [rid for rid, (kind, _seq) in outcomes.items() if kind == "C" and rid not in found]
    assert not lost, f"acknowledged and missing after the kill: {lost[:10]}"
    assert not any(kind == "N" for kind, _seq in outcomes.values())
    return {"acked": sum(kind == "C" for kind, _seq in outcomes.values()), "read": len(found)}


@pytest.mark.parametrize(
    ("site", "at", "acks_before_kill"),
    [
        ("none", 0, 60),  # killed between appends, some in flight
        ("in-log-fdatasync", 12, 0),  # a group commit written, its fdatasync under way
        ("after-log-fdatasync", 12, 0),  # durable, its appends not yet told
        ("in-segment-fdatasync", 0, 0),  # a log being retired: its segments being synced
    ],
)
def test_kill_through_a_commit_group(tmp_path: pathlib.Path, site: str, at: int, acks_before_kill: int) -> None:
    root = tmp_path / "store"
    (root / "c").mkdir(parents=True)
    lines = _run_and_kill(root, site, at, acks_before_kill)
    assert "R" in lines
    assert site == "none" or "K" in lines
    got = _check(root, lines)
    assert got["acked"] >= 12, got
    # The first open recovered the dead group and removed it.
    assert not [p for p in (root / ".journal-group").iterdir() if p.name.startswith("g-")]
    # The store goes on: a new group, its journals appending after what was there.
    with journal.open_group(root) as g:
        for name in NAMES:
            with journal.open(root / name, group=g) as j:
                n = j.last_seq
                assert j.append({"id": f"{name}-after"}) == journal.Committed(n + 1, "sync")
