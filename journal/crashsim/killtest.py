"""kill -9 of real writer processes: what a process crash (not a power loss) must never lose.

Each round forks a child that opens the journal in a real directory (recovering whatever the
previous round's kill left) and appends from several threads with mixed durability through the
public API. Before each call it announces the records on a pipe (``A id``); after the call
returns it reports the outcome (``O id kind seq level``). Lines are shorter than PIPE_BUF, so
each one arrives whole or not at all. The parent SIGKILLs the child after a random delay --
during recovery, between appends, inside a group-commit write -- then reopens the journal
itself and checks:

* every record reported Committed at "flush" or "sync" is there, byte-exact, at its seq
  (a process kill keeps what reached the OS; only "buffered" records may be lost);
* every record there was announced, at the seq its outcome named (if one was reported);
* seqs are 1..n with no gap or duplicate, and the journal opens without an error.

The journal lives on across rounds, so every round also checks recovery of the last one.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from journal.engine.core import Journal
from journal.outcomes import AckLost, Committed, Outcome

KILL_DELAY_S_MAX = 0.04
CHILD_THREADS = 3
ROUNDS_PER_JOURNAL = 40  # a fresh journal every so often keeps each reopen cheap

Report = Callable[[str], None]


def default_child(path: str, seed: int, report: Report, options: dict[str, Any]) -> None:
    """The writer: threads appending mixed durability, single records and batches."""
    j = Journal.open(path, create=True, **options)
    report("R")

    def writer(t: int) -> None:
        rng = random.Random(seed * 31 + t)
        for i in range(10_000):
            n = 1 if rng.random() < 0.7 else rng.randint(2, 5)
            ids = [f"s{seed}-t{t}-{i}-{k}" for k in range(n)]
            events: list[Any] = [
                {"id": x, "pad": "p" * rng.choice((0, 50, 400, 2000))} if rng.random() < 0.6 else
                (x + "|").encode() + rng.randbytes(rng.choice((10, 300, 1500)))
                for x in ids
            ]
            level = rng.choice(("sync", "sync", "flush", "buffered"))
            report("A " + " ".join(ids))
            outs = [j.append(events[0], durability=level)] if n == 1 else j.append_many(events, durability=level)
            for x, o in zip(ids, outs, strict=True):
                report(f"O {x} {_kind(o)} {getattr(o, 'seq', 0)} {getattr(o, 'durability', '-')}")

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(CHILD_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _kind(o: Outcome) -> str:
    return "C" if isinstance(o, Committed) else "A" if isinstance(o, AckLost) else "N"


@dataclass
class KillStats:
    rounds: int = 0
    killed_before_ready: int = 0
    acked: int = 0  # flush/sync acknowledgements checked across all rounds
    records_checked: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Known:
    announced: set[str] = field(default_factory=set)
    outcome: dict[str, tuple[str, int, str]] = field(default_factory=dict)


def _record_id(payload: bytes) -> str:
    if payload.startswith(b"{"):
        return str(json.loads(payload)["id"])
    return payload.split(b"|", 1)[0].decode()


def _payload_ok(rid: str, payload: bytes) -> bool:
    # Child payloads are deterministic only through its rng; the id inside is what ties them.
    return _record_id(payload) == rid


def run_kill_rounds(
    rounds: int,
    seed: int,
    workdir: str,
    child: Callable[[str, int, Report, dict[str, Any]], None] = default_child,
    options: dict[str, Any] | None = None,
    delay_s_max: float = KILL_DELAY_S_MAX,
    progress: Callable[[int, int], None] | None = None,
) -> KillStats:
    """Fork, let the child write, SIGKILL it, reopen and check; ``rounds`` times."""
    options = {"segment_size_bytes": 16 * 1024} if options is None else options
    stats = KillStats()
    rng = random.Random(seed)
    t0 = time.monotonic()
    known = _Known()
    path = ""
    for r in range(rounds):
        if r % ROUNDS_PER_JOURNAL == 0:
            path = os.path.join(workdir, f"j{seed}-{r}")
            known = _Known()
        lines, ready = _one_round(path, seed * 100_003 + r, child, options, rng.uniform(0, delay_s_max))
        stats.rounds += 1
        stats.killed_before_ready += not ready
        for line in lines:
            parts = line.split()
            if parts[0] == "A":
                known.announced.update(parts[1:])
            elif parts[0] == "O":
                known.outcome[parts[1]] = (parts[2], int(parts[3]), parts[4])
        stats.violations.extend(f"round {r} (seed {seed}): {v}" for v in _check(path, known, stats, options))
        if progress is not None:
            progress(r + 1, rounds)
    stats.seconds = time.monotonic() - t0
    return stats


def _one_round(
    path: str, seed: int, child: Callable[[str, int, Report, dict[str, Any]], None], options: dict[str, Any],
    delay_s: float,
) -> tuple[list[str], bool]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write, report, never return into the parent's code
        code = 0
        try:
            os.close(rfd)
            lock = threading.Lock()

            def report(line: str) -> None:
                with lock:
                    os.write(wfd, (line + "\n").encode())

            child(path, seed, report, options)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(wfd)
    buf = bytearray()
    deadline = time.monotonic() + delay_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([rfd], [], [], left)
        if ready:
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
    os.close(rfd)
    text = buf.decode()
    lines = text.split("\n")[:-1]  # a line without its newline never fully arrived
    return lines, "R" in lines


def _check(path: str, known: _Known, stats: KillStats, options: dict[str, Any]) -> list[str]:
    if not os.path.exists(path):
        return [] if not known.outcome else ["journal directory vanished"]
    try:
        j = Journal.open(path, create=True, **options)
    except Exception as exc:
        return [f"reopen after kill raised {type(exc).__name__}: {exc}"]
    out: list[str] = []
    try:
        recs = list(j.read())
    except Exception as exc:
        return [f"read after kill raised {type(exc).__name__}: {exc}"]
    finally:
        j.close()
    seqs = [r.seq for r in recs]
    if seqs != list(range(1, len(seqs) + 1)):
        out.append(f"seqs not contiguous: {seqs[:10]}...")
    by_id: dict[str, int] = {}
    for r in recs:
        try:
            rid = _record_id(r.payload)
        except Exception:
            out.append(f"record seq {r.seq} is not a payload the child wrote")
            continue
        if rid in by_id:
            out.append(f"record {rid} appears twice (seqs {by_id[rid]} and {r.seq})")
        by_id[rid] = r.seq
        if rid not in known.announced:
            out.append(f"record seq {r.seq} ({rid}) was never announced")
        o = known.outcome.get(rid)
        if o is not None and o[0] in "CA" and o[1] != r.seq:
            out.append(f"record {rid} is at seq {r.seq}, its outcome said {o[1]}")
        if o is not None and o[0] == "N":
            out.append(f"record {rid} was NotCommitted but is at seq {r.seq}")
    stats.records_checked += len(recs)
    for rid, (kind, seq, level) in known.outcome.items():
        if kind == "C" and level in ("flush", "sync"):
            stats.acked += 1
            if by_id.get(rid) != seq:
                out.append(f"record {rid} acknowledged Committed({level}, seq {seq}) is lost after kill -9")
    # Only the surviving records count as history for the next round: a lost buffered record
    # leaves its seq to be reused.
    for rid in list(known.outcome):
        if rid not in by_id:
            del known.outcome[rid]
    return out


__all__ = ["KillStats", "default_child", "run_kill_rounds"]
