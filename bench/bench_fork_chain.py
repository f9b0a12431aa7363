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

Time is then compared where the machine's load cannot tilt it: the first fork of the chain (of the
root) and the last (of the deepest child) are made again ``--pairs`` times each, alternately, and
the verdict takes the ratio of their median times ("time x") and of their new bytes ("fork B x").
Bytes are also compared over the chain as it was built: the mean new bytes of a window of
``--window`` forks at its end over one at its start ("bytes x": a mean, so a fork that merges
segments counts with the forks its merge serves). The build's median fork times per window are
shown ("window x") but are at the mercy of the load of the seconds they ran in. Target: each
ratio at most 1.5x; the table gives the median and the spread (min-max) of ``--runs`` runs.
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


def chain(base: str, depth: int, events: int) -> tuple[list[Step], list[tuple[str, str]]]:
    prev = os.path.join(base, "c0")
    session.open(prev, create=True, session_id="s-root").close()  # its header, seq 1
    sid = "s-root"
    last = append_messages(prev, sid, ROOT_EVENTS, "root")
    out: list[Step] = []
    sids = [(prev, sid)]
    for d in range(1, depth + 1):
        if d > 1:
            last = append_messages(prev, sid, events, f"c{d - 1}")
        child = os.path.join(base, f"c{d}")
        t0 = time.perf_counter()
        sid = forking.fork(prev, child, last, origin="bench", time=TIME).session_id
        dt = time.perf_counter() - t0
        new, files = child_cost(child)
        out.append(Step(dt, new, files))
        sids.append((child, sid))
        prev = child
    return out, sids


def paired(base: str, early: tuple[str, str], deep: tuple[str, str], events: int, reps: int) -> tuple[float, float]:
    """The first fork of the chain and the last, made again ``reps`` times each, alternately, in
    the same seconds (the machine's load drifts; a ratio of interleaved medians does not): the
    ratio of their median times, and of their new bytes (the same every time)."""
    lasts = [append_messages(p, sid, events, "paired") for p, sid in (early, deep)]
    times: list[list[float]] = [[], []]
    sizes = [0, 0]
    for r in range(reps):
        for k, (parent, _sid) in enumerate((early, deep)):
            target = os.path.join(base, f"paired-{k}-{r}")
            t0 = time.perf_counter()
            forking.fork(parent, target, lasts[k], origin="bench", time=TIME)
            times[k].append(time.perf_counter() - t0)
            sizes[k] = child_cost(target)[0]
            shutil.rmtree(target)
    return statistics.median(times[1]) / statistics.median(times[0]), sizes[1] / sizes[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=2000)
    ap.add_argument("--events", type=int, default=4, help="user messages appended between two forks")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=int, default=0, help="forks in each window (default: depth/20, >= 5)")
    ap.add_argument("--pairs", type=int, default=15, help="interleaved forks of the root and of the last child")
    ap.add_argument("--dir", default=None, help="where the chains are built (default: a temp dir)")
    args = ap.parse_args()
    window = args.window or max(5, args.depth // 20)
    if args.depth < 2 * window:
        ap.error("--depth must be at least twice --window")
    rows: dict[str, list[float]] = {k: [] for k in ("first ms", "last ms", "window x", "first B", "last B",
                                                  "bytes x", "files max", "total MB", "seconds", "time x",
                                                  "fork B x")}
    for run in range(args.runs):
        base = tempfile.mkdtemp(prefix="fork-chain-", dir=args.dir)
        try:
            t0 = time.perf_counter()
            steps, sids = chain(base, args.depth, args.events)
            total = time.perf_counter() - t0
            tx, bx = paired(base, sids[0], sids[-1], args.events, args.pairs)
            first, last = steps[:window], steps[-window:]
            ft = statistics.median(s.seconds for s in first) * 1000
            lt = statistics.median(s.seconds for s in last) * 1000
            # Bytes: the mean over the window, so a fork that merges segments is counted with
            # the forks whose merging it saves (a median would hide it).
            fb = statistics.fmean(s.new_bytes for s in first)
            lb = statistics.fmean(s.new_bytes for s in last)
            disk = sum(s.new_bytes for s in steps)
            for k, v in (("first ms", ft), ("last ms", lt), ("window x", lt / ft), ("first B", fb), ("last B", lb),
                         ("bytes x", lb / fb), ("files max", max(s.files for s in steps)),
                         ("total MB", disk / 1e6), ("seconds", total), ("time x", tx), ("fork B x", bx)):
                rows[k].append(v)
            print(f"run {run + 1}: depth {args.depth}, fork {ft:.2f} -> {lt:.2f} ms ({lt / ft:.2f}x), "
                  f"new bytes {fb:,.0f} -> {lb:,.0f} ({lb / fb:.2f}x), files <= {max(s.files for s in steps)}, "
                  f"disk {disk / 1e6:.1f} MB, {total:.1f} s; fork of the last child / of the root, "
                  f"interleaved: time {tx:.2f}x, bytes {bx:.2f}x", flush=True)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{'figure':<10} {'median':>12} {'spread':>24}")
    for k, vs in rows.items():
        print(f"{k:<10} {statistics.median(vs):>12,.2f} {min(vs):>11,.2f} - {max(vs):<11,.2f}")
    ok = all(statistics.median(rows[k]) <= TARGET_RATIO_MAX for k in ("time x", "bytes x", "fork B x"))
    print(f"\nthe last fork / the first <= {TARGET_RATIO_MAX}x in time (interleaved), in bytes (that fork, and "
          f"the windows' means): {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
