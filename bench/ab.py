"""A/B of two checkouts of journal on one workload, rounds alternating, one process per run.

    git worktree add /tmp/before HEAD~1           # the commit to compare against
    .venv/bin/python bench/ab.py /tmp/before . one-writer --rounds 8
    .venv/bin/python bench/ab.py /tmp/before . threads --rounds 8
    .venv/bin/python bench/ab.py /tmp/before . sessions --rounds 8
    .venv/bin/python bench/ab.py /tmp/before . new-sessions --rounds 8
    .venv/bin/python bench/ab.py /tmp/before . decode --rounds 8

Each run imports journal from its checkout in a fresh subprocess (so each side runs its own
code, and its own C helper if built there; a checkout without one runs the pure path and the
report says so), appends the benchmark's event mix to a journal in a scratch directory at sync
durability, and prints events/s. The order of A and B flips every round, so a noisy moment lands
on both sides; the result is the median of each side and the ratio B/A of the medians.

Workloads: ``one-writer`` (3,000 sync appends from one thread), ``threads`` (16,000 sync
appends from 16 threads to one journal), ``sessions`` (6,400 sync appends from 64 threads, each
to a journal of its own: many sessions in one process), ``new-sessions`` (4 sync appends to
each of 1,000 journals just created, from 64 threads, the first append of each timed: the
many-sessions workload of ``journal bench``), ``first-append`` (the first sync append of
each of 200 journals just created, from one thread), ``bulk`` (20,000 buffered appends,
one sync at the end), ``decode`` (records/s of a scan that decodes every record of a journal of
20,000 buffered appends, after one warm scan) and ``random`` (reads/s of 20,000 gets by random
seq on the same journal, each record decoded, after one warm pass; ``random-frames``: the same
gets on a journal of 20,000 appends made one at a time at "flush", a frame each, as a runtime's
durable events are stored). ``--dir`` puts the scratch journals on the disk to measure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

# Self-contained on purpose: it runs against any checkout, including ones older than today's
# journal/benchmark/runner.py (whose threads workload it mirrors), so it imports only the
# public API and the event mix.
RUN = r"""
import os, sys, tempfile, threading, time
sys.path.insert(0, sys.argv[1])
import journal
from journal.benchmark.events import make_events
workload, scratch = sys.argv[2], sys.argv[3]


def timed(ts, barrier, n, handles):
    # Start the threads ts (each waits on barrier), time them from the barrier to the last
    # join, close handles, print the rate of n appends and the frame path, and exit.
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    rate = n / (time.perf_counter() - t0)
    for h in handles:
        h.close()
    print(rate, "native" if journal.native_available() else "pure")
    sys.exit(0)


if workload in ("decode", "random", "random-frames"):  # reads of a journal of 20,000 appends
    import random
    events = make_events(20000)
    path = os.path.join(tempfile.mkdtemp(dir=scratch), "j")
    # Buffered appends share block frames (since format version 2); an append alone at "flush"
    # has a frame of its own in every version.
    durability = "flush" if workload == "random-frames" else "buffered"
    with journal.open(path, create=True) as j:
        for e in events:
            j.append(e, durability=durability)
    rng = random.Random(11)  # one generator: a new one per seq would give the same seq every time
    seqs = [rng.randrange(1, len(events) + 1) for _ in range(len(events))]
    with journal.open(path, readonly=True) as j:
        def reads():
            if workload == "decode":  # the decode scan: every record to its event
                for r in j.read():
                    r.event
            else:  # random reads by seq, each record to its event
                for q in seqs:
                    j.get(q).event
        reads()  # warm: the page cache, the reader's objects, the dense index of point reads
        t0 = time.perf_counter()
        reads()
        rate = len(events) / (time.perf_counter() - t0)
    print(rate, "native" if journal.native_available() else "pure")
    sys.exit(0)
threads, count = {"one-writer": (1, 3000), "threads": (16, 16000), "sessions": (64, 6400), "bulk": (1, 20000),
                  "new-sessions": (64, 4000), "first-append": (1, 200)}[workload]
events = make_events(count)
path = tempfile.mkdtemp(dir=scratch)
if workload == "first-append":  # the first sync append of each of 200 journals just created, one thread
    handles = [journal.open(os.path.join(path, f"j{i}"), create=True) for i in range(200)]
    t0 = time.perf_counter()
    for h, e in zip(handles, events):
        out = h.append(e)
        assert isinstance(out, journal.Committed), out
    rate = len(handles) / (time.perf_counter() - t0)
    for h in handles:
        h.close()
    print(rate, "native" if journal.native_available() else "pure")
    sys.exit(0)
if workload == "new-sessions":  # 1,000 journals just created, 4 sync appends each, the first timed
    handles = [journal.open(os.path.join(path, f"j{i}"), create=True) for i in range(1000)]
    barrier = threading.Barrier(threads + 1)

    def work_sessions(t):
        barrier.wait()
        mine = handles[t::threads]
        for k in range(4):
            for n, h in enumerate(mine):
                out = h.append(events[(t + threads * (n + k * len(mine))) % count])
                assert isinstance(out, journal.Committed), out

    timed([threading.Thread(target=work_sessions, args=(t,)) for t in range(threads)], barrier, 4 * len(handles),
          handles)
# "sessions": a journal per thread (64 sessions in one process); the others share one journal.
n_journals = threads if workload == "sessions" else 1
handles = [journal.open(os.path.join(path, f"j{i}"), create=True) for i in range(n_journals)]
for h in handles:
    for e in events[:10]:  # the first appends create files: not the steady state
        h.append(e)
j = handles[0]
chunks = [events[i::threads] for i in range(threads)]
barrier = threading.Barrier(threads + 1)

def work(chunk, h):
    barrier.wait()
    if workload == "bulk":
        for e in chunk:
            h.append(e, durability="buffered")
        h.sync()
        return
    for e in chunk:
        out = h.append(e)
        assert isinstance(out, journal.Committed), out

timed([threading.Thread(target=work, args=(c, handles[i % len(handles)])) for i, c in enumerate(chunks)], barrier,
      count, handles)
"""

WORKLOADS = ("one-writer", "threads", "sessions", "new-sessions", "first-append", "bulk", "decode", "random",
             "random-frames")


def run_once(python: str, checkout: str, workload: str, scratch: str) -> tuple[float, str]:
    proc = subprocess.run(
        [python, "-c", RUN, os.path.abspath(checkout), workload, scratch],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the run from {checkout} failed:\n{proc.stderr[-3000:]}")
    rate, path = proc.stdout.split()[-2:]
    return float(rate), path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="checkout A (the baseline)")
    ap.add_argument("b", help="checkout B (the change)")
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--rounds", type=int, default=8, help="rounds of A and B (default 8)")
    ap.add_argument("--dir", default=None, help="where the scratch journals go (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    for c in (args.a, args.b):
        if not os.path.isdir(os.path.join(c, "journal")):
            ap.error(f"{c} is not a checkout of journal (no journal/ in it)")
    rates: dict[str, list[float]] = {"A": [], "B": []}
    paths: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for r in range(args.rounds):
            order = [("A", args.a), ("B", args.b)] if r % 2 == 0 else [("B", args.b), ("A", args.a)]
            for side, checkout in order:
                rate, paths[side] = run_once(sys.executable, checkout, args.workload, scratch)
                rates[side].append(rate)
            print(f"round {r + 1}/{args.rounds}: A {rates['A'][-1]:,.0f}/s, B {rates['B'][-1]:,.0f}/s", flush=True)
    med = {side: statistics.median(v) for side, v in rates.items()}
    for side, checkout in (("A", args.a), ("B", args.b)):
        shown = ", ".join(f"{v:,.0f}" for v in rates[side])
        print(f"{side} {checkout} ({paths[side]} path): median {med[side]:,.0f} events/s [{shown}]")
    print(f"B/A {med['B'] / med['A']:.3f} ({args.workload}, {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
