"""Many sessions in one process: journal (with and without compression) against a JSONL file
per session, per round, with CPU per event, and the floor of the journal's file layout.

    .venv/bin/python bench/bench_sessions_cpu.py                  # 64 sessions, 6,400 events, 3 rounds
    .venv/bin/python bench/bench_sessions_cpu.py --sessions 1000 --events 4000 --rounds 4
    .venv/bin/python bench/bench_sessions_cpu.py --dir /dev/shm   # syncs free: CPU alone

Each round runs the four sides of ``journal.benchmark.sessions.run_side`` (the workload of
``journal bench``: ``min(N, 64)`` threads, each appending to its share of the sessions in turn,
every append durable before the next) in an order that rotates, and prints each side's events/s,
its CPU per event (user + system of the process over the events, and each of the two) and
journal's ratio to JSONL in that round. With many threads on two cores the run is CPU-bound
(most of it the kernel's fdatasync), so the ratio follows the CPU per event; ``compress=False``
shows what compression costs on top (bench/README.md, "Compression with the GIL held"), and the
reserved file per session (``pwrite`` into space set aside ahead, then ``fdatasync``, nothing
else) what the kernel costs the journal's file layout before any of the journal's own work.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile

import journal
from journal.benchmark import sessions as sess
from journal.benchmark.events import make_events

UNCOMPRESSED = "journal, compress=False"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=64, help="sessions (journals or files) in the process")
    ap.add_argument("--events", type=int, default=6400, help="appends in all, per side and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the scratch sessions go (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.sessions < 1 or args.events < args.sessions or args.rounds < 1:
        ap.error("need --sessions >= 1, --events >= --sessions and --rounds >= 1")
    events = make_events(20000)
    ratios: dict[str, list[float]] = {sess.JOURNAL: [], UNCOMPRESSED: [], sess.RESERVED: []}
    base = tempfile.mkdtemp(prefix="sessions-cpu-", dir=args.dir)
    try:
        sides = [sess.JOURNAL, UNCOMPRESSED, sess.RESERVED, sess.JSONL]
        for r in range(args.rounds):
            got: dict[str, sess.Side] = {}
            for side in sides[r % len(sides):] + sides[: r % len(sides)]:
                kind = sess.JOURNAL if side == UNCOMPRESSED else side
                got[side] = sess.run_side(kind, base, args.sessions, args.events, events, compress=side != UNCOMPRESSED)
            for side in sides:
                ratio = ""
                if side != sess.JSONL:
                    ratios[side].append(got[side].events_per_s / got[sess.JSONL].events_per_s)
                    ratio = f"  ÷ JSONL {ratios[side][-1]:.2f}x"
                print(f"round {r + 1}: {side:47s} {got[side].events_per_s:8,.0f} events/s, "
                      f"CPU {got[side].cpu_s_per_event * 1e3:.4f} ms/event "
                      f"(user {got[side].user_s_per_event * 1e6:.1f} µs, "
                      f"system {got[side].system_s_per_event * 1e6:.1f} µs)"
                      f"{ratio}", flush=True)
        for side, rs in ratios.items():
            print(f"{side}: median ÷ JSONL {statistics.median(rs):.2f}x over {len(rs)} rounds "
                  f"({args.sessions} sessions, {'native' if journal.native_available() else 'pure'} path)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
