"""Shared-writer mode against exclusive mode, in one run: durable appends per second.

    .venv/bin/python bench/bench_shared.py [--events 2000] [--rounds 5] [--dir DIR]

Rounds alternate the three workloads so that a noisy moment on a shared machine falls on
different ones; each figure is the median of its rounds and each ratio the median of the
per-round ratios against exclusive mode:

- exclusive, 1 process: the default mode, lock held for the life of the handle;
- shared, 1 process: the same appends, the lock taken and the journal caught up per batch;
- shared, 4 processes: four processes appending to one journal at once, events/s in all.

Every append is durability="sync" and an event of ~200 bytes; the journal is fresh each round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, time
import journal
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with journal.open(path, create=True, writer=mode) as j:
    sys.stdout.write("ready\n"); sys.stdout.flush()
    sys.stdin.readline()  # start together
    t = time.perf_counter()
    for i in range(n):
        out = j.append({"type": "tool_result", "i": i, "text": "x" * 180}, durability="sync")
        if not isinstance(out, journal.Committed):
            raise SystemExit(str(out))
    sys.stdout.write(f"{time.perf_counter() - t}\n")
"""


def run(path: str, mode: str, processes: int, events: int) -> float:
    """Events per second, all processes together, from the first start to the last finish."""
    with journal_dir(path):
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, path, mode, str(events)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(processes)
        ]
        for ch in children:
            assert ch.stdout is not None and ch.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        for ch in children:
            assert ch.stdin is not None
            ch.stdin.write("go\n")
            ch.stdin.flush()
        for ch in children:
            ch.wait()
            if ch.returncode != 0:
                raise SystemExit(f"a child failed with exit {ch.returncode}")
        elapsed = time.perf_counter() - start
    return processes * events / elapsed


class journal_dir:
    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2000, help="appends per process per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--dir", default=None, help="where the journals go (default: a temp dir)")
    args = ap.parse_args()
    if args.events < 1 or args.rounds < 1:
        ap.error("--events and --rounds must be at least 1")
    base = tempfile.mkdtemp(prefix="bench-shared-", dir=args.dir)
    workloads = [("exclusive, 1 process", "exclusive", 1), ("shared, 1 process", "shared", 1),
                 ("shared, 4 processes", "shared", 4)]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in workloads}
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in workloads}
    try:
        for rnd in range(args.rounds):
            order = workloads[rnd % len(workloads) :] + workloads[: rnd % len(workloads)]
            got = {name: run(os.path.join(base, "j"), mode, n, args.events) for name, mode, n in order}
            for name in got:
                rates[name].append(got[name])
                ratios[name].append(got[name] / got["exclusive, 1 process"])
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {v:,.0f}/s" for k, v in got.items()), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print()
    title = f"workload ({args.events} sync appends per process, {args.rounds} rounds)"
    print(f"| {title} | appends/s (median) | vs exclusive |")
    print("|---|---:|---:|")
    for name, _, _ in workloads:
        print(f"| {name} | {statistics.median(rates[name]):,.0f} | {statistics.median(ratios[name]):.2f}x |")


if __name__ == "__main__":
    main()
