"""kill -9 of real writer processes: what a process crash (not a power loss) must never lose.

Each round forks a child that opens the journal in a real directory (recovering whatever the
previous round's kill left) and appends from several threads with mixed durability through the
public API. It reports on a pipe: ``R`` once the journal is open, ``A id ...`` before each
call, ``O id kind seq level`` after the call returns, and ``E where error`` for any exception
(in the child's main code or in any of its threads, through ``threading.excepthook``). Lines
are shorter than PIPE_BUF, so each one arrives whole or not at all. The parent SIGKILLs the
child after a random delay -- during recovery, between appends, inside a group-commit write --
then reopens the journal itself and checks:

* the child neither reported an error nor exited on its own with a non-zero status: an engine
  exception in a writer thread is a failed round, not a quiet one;
* every record reported Committed at "flush" or "sync" is there, byte-exact, at its seq
  (a process kill keeps what reached the OS; only "buffered" records may be lost);
* every record there was announced, at the seq its outcome named (if one was reported);
* seqs are 1..n with no gap or duplicate, and the journal opens without an error.

Each round is counted by the phase the kill hit: during open (no ``R`` yet), or with a call in
flight (a record announced whose outcome never came), and by how many records it acknowledged.
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
ERROR_TEXT_MAX = 400  # bytes of an error line's message: a line stays below PIPE_BUF


def default_child(path: str, seed: int, report: Report, options: dict[str, Any]) -> None:
    """The writer: threads appending mixed durability, single records and batches."""
    j = Journal.open(path, create=True, **options)
    report("R")

    def writer(t: int) -> None:
        # An exception here ends the thread and reaches threading.excepthook, which reports it
        # (run_kill_rounds installs it): the round fails instead of the other threads carrying on.
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
    killed_before_ready: int = 0  # rounds whose kill came before the child's open returned
    killed_in_flight: int = 0  # rounds whose kill came while an append call was in flight
    acked_per_round: list[int] = field(default_factory=list)  # flush/sync acks each round got
    child_errors: int = 0  # rounds in which the child reported an error or exited on its own, failing
    records_checked: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def acked(self) -> int:
        """Records acknowledged Committed at "flush" or "sync", each counted in its own round."""
        return sum(self.acked_per_round)


@dataclass
class _Round:
    lines: list[str]
    ready: bool  # the child reported "R": its open had returned
    in_flight: int  # records announced whose outcome never came: calls the kill interrupted
    exit_note: str | None  # how the child ended, if not by our SIGKILL (a crash, an exception)


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
        got = _one_round(path, seed * 100_003 + r, child, options, rng.uniform(0, delay_s_max))
        stats.rounds += 1
        stats.killed_before_ready += not got.ready
        stats.killed_in_flight += got.ready and got.in_flight > 0
        acked = 0
        problems: list[str] = []
        for line in got.lines:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "A":
                known.announced.update(parts[1:])
            elif parts[0] == "O":
                known.outcome[parts[1]] = (parts[2], int(parts[3]), parts[4])
                acked += parts[2] == "C" and parts[4] in ("flush", "sync")
            elif parts[0] == "E":
                problems.append(f"the child reported an error: {line[2:]}")
        if got.exit_note is not None:
            problems.append(got.exit_note)
        stats.child_errors += bool(problems)
        stats.acked_per_round.append(acked)
        problems.extend(_check(path, known, stats, options))
        stats.violations.extend(f"round {r} (seed {seed}): {v}" for v in problems)
        if progress is not None:
            progress(r + 1, rounds)
    stats.seconds = time.monotonic() - t0
    return stats


def _error_line(where: str, exc: BaseException | None) -> str:
    text = f"{type(exc).__name__}: {exc}" if exc is not None else "?"
    return f"E {where} " + " ".join(text.split())[:ERROR_TEXT_MAX]


def _one_round(
    path: str, seed: int, child: Callable[[str, int, Report, dict[str, Any]], None], options: dict[str, Any],
    delay_s: float,
) -> _Round:
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

            def thread_died(args: threading.ExceptHookArgs) -> None:
                name = args.thread.name if args.thread is not None else "thread"
                report(_error_line(name, args.exc_value))

            threading.excepthook = thread_died
            child(path, seed, report, options)
        except BaseException as exc:
            code = 1
            try:
                report(_error_line("main", exc))
            except BaseException:
                pass  # the pipe is gone: the exit status still tells
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
    os.kill(pid, signal.SIGKILL)  # a child that already ended is a zombie until waited for: no error
    _, status = os.waitpid(pid, 0)
    while True:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
    os.close(rfd)
    text = buf.decode()
    lines = text.split("\n")[:-1]  # a line without its newline never fully arrived
    exit_note = None
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
        exit_note = f"the child died of signal {os.WTERMSIG(status)} before it was killed"
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        exit_note = f"the child exited with status {os.WEXITSTATUS(status)} before it was killed"
    announced: set[str] = set()
    answered: set[str] = set()
    for line in lines:
        if line.startswith("A "):
            announced.update(line.split()[1:])
        elif line.startswith("O "):
            answered.add(line.split()[1])
    return _Round(lines, "R" in lines, len(announced - answered), exit_note)


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
            if by_id.get(rid) != seq:
                out.append(f"record {rid} acknowledged Committed({level}, seq {seq}) is lost after kill -9")
    # Only the surviving records count as history for the next round: a lost buffered record
    # leaves its seq to be reused.
    for rid in list(known.outcome):
        if rid not in by_id:
            del known.outcome[rid]
    return out


__all__ = ["KillStats", "default_child", "run_kill_rounds"]
