"""A chain of forks: each fork of the previous child, a few events appended between (issue 33).

    .venv/bin/python bench/bench_fork_chain.py                 # depth 2,000, three runs
    .venv/bin/python bench/bench_fork_chain.py --depth 10000 --runs 3
    .venv/bin/python bench/bench_fork_chain.py --depth 60 --runs 1   # CI's quick look

A root session gets ``ROOT_EVENTS`` user messages; then, ``--depth`` times, the newest child is
opened, ``--events`` user messages are appended (so its last seq is a clean fork point) and it is
forked into the next child at that seq, with the child's fork-reducer snapshot when one was saved.
Each fork is timed (``fork`` alone, the appends not included) and its disk cost is counted: the
bytes of the files the new child does not share by hard link with an earlier one (``st_nlink == 1``
when the child is made: the bytes it added to the disk) plus its directory entries.

A run's figure is the median over a window of ``--window`` forks at the start of the chain and at
its end; the verdict is end/start of the same run (target: at most 1.5x, time and bytes), and the
table gives the median and the spread (min-max) of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import journal
from journal import session
from journal.session import fork as forking

ROOT_EVENTS = 40
TIME = "2026-01-01T00:00:00.000Z"
TARGET_RATIO_MAX = 1.5  # the acceptance: the last forks at most this over the first


@dataclass
class Step:
    seconds: float
    new_bytes: int  # bytes of the child's files not shared with an earlier child
    files: int  # entries of the child's directory (segments, snapshots, markers)


def child_cost(path: str) -> tuple[int, int]:
    new = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            st = os.lstat(os.path.join(root, name))
            files += 1
            if st.st_nlink == 1:
                new += st.st_blocks * 512 if st.st_blocks else st.st_size
    return new, files


def append_messages(path: str, session_id: str, n: int, tag: str) -> int:
    """Append ``n`` user messages to the session journal at ``path`` through the journal (one synced
    batch): what a runtime writes between two forks, without a session open (whose cost is
    bench/bench_session_open.py's subject, not this one's). Returns the last seq."""
    events = [{"schemaVersion": 1, "sessionId": session_id, "type": "user.message", "time": TIME,
               "data": {"text": f"{tag}: step {k}, please go on with the refactor of module {k}"}} for k in range(n)]
    with journal.open(path) as j:
        out = j.append_many(events, durability="sync")
        return j.last_seq if out else 0


def chain(base: str, depth: int, events: int) -> list[Step]:
    prev = os.path.join(base, "c0")
    session.open(prev, create=True, session_id="s-root").close()  # its header, seq 1
    sid = "s-root"
    last = append_messages(prev, sid, ROOT_EVENTS, "root")
    out: list[Step] = []
    for d in range(1, depth + 1):
        if d > 1:
            last = append_messages(prev, sid, events, f"c{d - 1}")
        child = os.path.join(base, f"c{d}")
        t0 = time.perf_counter()
        sid = forking.fork(prev, child, last, origin="bench", time=TIME).session_id
        dt = time.perf_counter() - t0
        new, files = child_cost(child)
        out.append(Step(dt, new, files))
        prev = child
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=2000)
    ap.add_argument("--events", type=int, default=4, help="user messages appended between two forks")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=0, help="forks in each window (default: depth/20, >= 5)")
    ap.add_argument("--dir", default=None, help="where the chains are built (default: a temp dir)")
    args = ap.parse_args()
    window = args.window or max(5, args.depth // 20)
    if args.depth < 2 * window:
        ap.error("--depth must be at least twice --window")
    rows: dict[str, list[float]] = {k: [] for k in ("first ms", "last ms", "time x", "first B", "last B",
                                                  "bytes x", "files max", "total MB", "seconds")}
    for run in range(args.runs):
        base = tempfile.mkdtemp(prefix="fork-chain-", dir=args.dir)
        try:
            t0 = time.perf_counter()
            steps = chain(base, args.depth, args.events)
            total = time.perf_counter() - t0
            first, last = steps[:window], steps[-window:]
            ft = statistics.median(s.seconds for s in first) * 1000
            lt = statistics.median(s.seconds for s in last) * 1000
            # Bytes: the mean over the window, so a fork that merges segments is counted with
            # the forks whose merging it saves (a median would hide it).
            fb = statistics.fmean(s.new_bytes for s in first)
            lb = statistics.fmean(s.new_bytes for s in last)
            disk = sum(s.new_bytes for s in steps)
            for k, v in (("first ms", ft), ("last ms", lt), ("time x", lt / ft), ("first B", fb), ("last B", lb),
                         ("bytes x", lb / fb), ("files max", max(s.files for s in steps)),
                         ("total MB", disk / 1e6), ("seconds", total)):
                rows[k].append(v)
            print(f"run {run + 1}: depth {args.depth}, fork {ft:.2f} -> {lt:.2f} ms ({lt / ft:.2f}x), "
                  f"new bytes {fb:,.0f} -> {lb:,.0f} ({lb / fb:.2f}x), files <= {max(s.files for s in steps)}, "
                  f"disk {disk / 1e6:.1f} MB, {total:.1f} s", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{'figure':<10} {'median':>12} {'spread':>24}")
    for k, vs in rows.items():
        print(f"{k:<10} {statistics.median(vs):>12,.2f} {min(vs):>11,.2f} - {max(vs):<11,.2f}")
    ok = all(statistics.median(rows[k]) <= TARGET_RATIO_MAX for k in ("time x", "bytes x"))
    print(f"\nlast/first window <= {TARGET_RATIO_MAX}x in time and bytes: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
