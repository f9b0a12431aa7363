"""`journal demo`: write, kill a writer with SIGKILL mid-batch, recover, explain what is known.

Runs in a temporary directory (or --dir). Part one shows the storage core; part two, when the
session layer is installed, tells the agent story: a tool started, the process died before its
result, and the reopened session says exactly what is known and why it is paused.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from typing import TextIO

from journal.cli.common import int_at_least

CHILD_BATCH_EVENTS = 256
CHILD_EVENT_BYTES = 12 * 1024  # big, incompressible events make each batch one long write
CHILD_WAIT_S = 30.0
KILL_ROUNDS_MAX = 25  # kills are retried until one lands inside a write


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", help="work in this directory instead of a temporary one (kept afterwards)")
    parser.add_argument("--events", type=int_at_least(10), default=300,
                        help="events written before the child starts (at least 10; default 300)")
    parser.add_argument("--core-only", action="store_true", help="skip the agent-session story")
    parser.add_argument("--child", help=argparse.SUPPRESS)


def _event(i: int) -> dict[str, object]:
    kinds = ("user_message", "assistant_message", "tool_requested", "tool_result", "turn_end")
    return {"type": kinds[i % len(kinds)], "i": i, "text": f"event {i} " + "lorem ipsum " * (i % 12)}


def _child(path: str) -> int:
    """Append big flush-level batches forever; say when each starts and when it was acknowledged."""
    import journal

    filler = os.urandom(CHILD_EVENT_BYTES // 2).hex()
    with journal.open(path, compress=False) as j:
        while True:
            first = j.last_seq + 1
            batch = [{"type": "tool_output", "i": first + k - 1, "chunk": filler} for k in range(CHILD_BATCH_EVENTS)]
            print(f"writing {first}", flush=True)
            outs = j.append_many(batch, durability="flush")
            last = outs[-1]
            assert isinstance(last, journal.Committed)
            print(f"acked {last.seq}", flush=True)


def _kill_mid_batch(path: str, rng: random.Random) -> tuple[int, int]:
    """Start a child, kill it while a batch is in flight; (acked seq, seq of the batch in flight)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "journal.cli", "demo", "--child", path], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acked = in_flight = 0
    batches = rng.randint(1, 3)
    deadline = time.monotonic() + CHILD_WAIT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        word, seq = line.split()
        if word == "acked":
            acked = int(seq)
        elif batches == 0:
            in_flight = int(seq)
            time.sleep(rng.uniform(0.008, 0.030))  # encoding takes ~15 ms, then one long pwrite
            break
        else:
            batches -= 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return acked, in_flight


def run_core(out: TextIO, workdir: str, n_events: int) -> None:
    import journal

    path = os.path.join(workdir, "core-journal")
    say = out.write
    say(f"== 1. a journal at {path} ({'native' if _native() else 'pure-Python'} frame path)\n")
    with journal.open(path, create=True, segment_size_bytes=256 * 1024) as j:
        outs = j.append_many([_event(i) for i in range(n_events - 1)], durability="flush")
        last = j.append({"type": "turn_end", "i": n_events - 1, "reason": "completed"}, durability="sync")
        say(f"wrote {len(outs) + 1} events; the last one was synced: {last}\n")

    say(
        f"\n== 2. a child process appends batches of {CHILD_BATCH_EVENTS} events of "
        f"{CHILD_EVENT_BYTES // 1024} KiB; we SIGKILL it while a batch is being written\n"
    )
    rng = random.Random()
    rep = None
    for attempt in range(1, KILL_ROUNDS_MAX + 1):
        acked, in_flight = _kill_mid_batch(path, rng)
        with journal.open(path) as j:
            rep = j.recovery
            last_seq = j.last_seq
            assert last_seq >= acked, "an acknowledged record was lost"
            # A kill between writes leaves at most the writer's reserved zeros: go again.
            if rep.tail == "torn" or attempt == KILL_ROUNDS_MAX:
                break
        say(f"  kill {attempt}: landed between writes (nothing torn); the child's work is whole, again\n")
    assert rep is not None
    say(
        f"kill {attempt}: the last the child reported was seq {acked} acknowledged and a batch starting "
        f"at seq {in_flight}; it kept writing until the kill\n"
    )

    say("\n== 3. reopen: recovery finds the last complete frame byte by byte\n")
    with journal.open(path, readonly=True) as j:
        say(rep.summary() + "\n")
        say(
            f"records on disk: {j.last_seq} (acknowledged before the kill: {acked}; the "
            f"{j.last_seq - acked} after it reached the OS whole before the kill, the rest of that batch "
            "did not)\n"
        )
        say("last records:\n")
        for rec in j.read(after_seq=max(0, j.last_seq - 3)):
            ev = rec.event
            say(f"  seq {rec.seq}: type={ev['type']} i={ev['i']}\n")

    say("\n== 4. what the three outcomes would have told the caller\n")
    say(
        "  Committed(seq, level): the record is in the journal at that level. Every batch the child\n"
        f"    saw acknowledged (through seq {acked}) is on disk above; 'flush' survives a process kill.\n"
        "  NotCommitted(reason): nothing of the record is on disk and never will be (a failed write\n"
        "    is truncated back and that truncation is synced first): retry freely.\n"
        "  AckLost(seq, reason): the writer cannot know (a failed fdatasync, or a kill before the\n"
        "    caller saw the result, as for the batch in flight here). The journal fail-stops; reopen\n"
        "    it, then j.resolve(outcome) answers from the journal itself: the batch in flight here\n"
        "    "
        + (
            "partly reached the disk; its torn end was cut and kept in quarantine/.\n"
            if rep.tail == "torn"
            else "was whole or absent.\n"
        )
    )


def _native() -> bool:
    try:
        from journal.engine import native  # type: ignore[attr-defined, unused-ignore]

        return bool(native.native_available())
    except ImportError:
        return False


def run(args: argparse.Namespace) -> int:
    if args.child:
        return _child(args.child)
    out = sys.stdout
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
        workdir = args.dir
        _run_all(out, workdir, args)
        out.write(f"\nfiles kept in {workdir}\n")
        return 0
    with tempfile.TemporaryDirectory(prefix="journal-demo-") as workdir:
        _run_all(out, workdir, args)
    return 0


def _run_all(out: TextIO, workdir: str, args: argparse.Namespace) -> None:
    run_core(out, workdir, max(10, args.events))
    if args.core_only:
        return
    try:
        from journal.cli.demo_session import run_story  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return
    out.write("\n")
    run_story(out, workdir)
