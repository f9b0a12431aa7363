"""Session store benchmark: create, close, list and latest as the store grows.

    .venv/bin/python bench/bench_store.py                      # 100, 1,000 and 10,000 sessions
    .venv/bin/python bench/bench_store.py --sizes 100 1000     # fewer
    .venv/bin/python bench/bench_store.py --dir /some/disk     # where the store lives (default: a temp dir)

Target (issue 13): creating and closing a session cost the same however many sessions the store
holds (the index is a snapshot plus a log of updates, journal/session/store.py); listing reads
the index only, so it grows with the number of entries and never opens a session's journal.

Each size is built through the store's own API with fsync turned off (it is only set-up), then
measured with the real file layer, fsyncs included, round-robin over the sizes (so that a slow
moment of the disk hits every size alike): in each of ``--rounds`` rounds a new session is
created and closed in each store, then each store is listed and asked for its latest session.
Medians, and for create and close the mean too (it carries the compactions: one O(n) snapshot
per n updates). Writes a markdown table to stdout (and to ``--out`` if given).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from journal.fs import File, OsFileSystem
from journal.session.store import SessionStore


class NoSyncFS(OsFileSystem):
    """The real file layer without fsyncs: builds a big store quickly (set-up only, never timed)."""

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        f.fsync = f.fdatasync = lambda: None  # type: ignore[method-assign]
        return f

    def fsync_dir(self, path: str) -> None:
        pass


def grow(root: str, n: int) -> None:
    store = SessionStore(root, fs=NoSyncFS())
    have = len(store.list())
    for k in range(have, n):
        with store.create({"path": f"/w{k % 20}"}) as s:
            s.append("user.message", {"text": f"session {k}"})


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:.2f}"


def measure(roots: dict[int, str], rounds: int) -> dict[int, dict[str, list[float]]]:
    """Round-robin over the stores, so that a slow moment of the disk hits every size alike."""
    stores = {n: SessionStore(root) for n, root in roots.items()}  # the real file layer, fsyncs and all
    got: dict[int, dict[str, list[float]]] = {n: {"create": [], "close": [], "list": [], "latest": []} for n in roots}
    for _ in range(rounds):
        for n, store in stores.items():
            t0 = time.perf_counter()
            s = store.create({"path": "/bench"})
            t1 = time.perf_counter()
            s.close()
            t2 = time.perf_counter()
            got[n]["create"].append(t1 - t0)
            got[n]["close"].append(t2 - t1)
        for n, store in stores.items():
            t0 = time.perf_counter()
            store.list()
            t1 = time.perf_counter()
            store.latest(workspace="/w3")
            t2 = time.perf_counter()
            got[n]["list"].append(t1 - t0)
            got[n]["latest"].append(t2 - t1)
    for n, store in stores.items():
        compact = getattr(store, "_compact", None)  # what an update pays once per n/4 updates
        if compact is not None:
            for _ in range(3):
                with store._locked():
                    t0 = time.perf_counter()
                    compact([])
                    got[n].setdefault("compact", []).append(time.perf_counter() - t0)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], help="store sizes to measure at")
    ap.add_argument("--rounds", type=int, default=30, help="creates+closes and listings timed at each size")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--stores", default=None,
                    help="keep the stores in this directory (store-N), and reuse those already there: an A/B "
                         "measures an older checkout on stores built by this one")
    ap.add_argument("--build-only", action="store_true", help="build the stores (with --stores) and stop")
    args = ap.parse_args()
    if min(args.sizes) < 1 or args.rounds < 1:
        ap.error("--sizes and --rounds must be at least 1")
    if args.build_only and not args.stores:
        ap.error("--build-only needs --stores")
    scratch = args.stores or tempfile.mkdtemp(prefix="journal-store-bench-", dir=args.dir)
    try:
        roots = {}
        for n in sorted(args.sizes):
            roots[n] = os.path.join(scratch, f"store-{n}")
            os.makedirs(roots[n], exist_ok=True)
            t0 = time.perf_counter()
            grow(roots[n], n)
            sys.stderr.write(f"a store of {n} sessions ready in {time.perf_counter() - t0:.1f} s\n")
        if args.build_only:
            return 0
        got = measure(roots, args.rounds)
    finally:
        if not args.stores:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = sorted(got.items())
    from journal.session import store as st

    share = getattr(st, "INDEX_LOG_SHARE", None)
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"store on {args.dir or tempfile.gettempdir()}; {args.rounds} rounds per size; times in ms.",
        "",
        "| sessions | create (median) | create (mean) | close (median) | close (mean) | list (median) "
        "| latest (median) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, res in rows:
        lines.append(
            f"| {n:,} | {ms(res['create'])} | {statistics.mean(res['create']) * 1e3:.2f} | {ms(res['close'])} | "
            f"{statistics.mean(res['close']) * 1e3:.2f} | {ms(res['list'])} | {ms(res['latest'])} |"
        )
    if share is not None and all("compact" in res for _, res in rows):
        lines.append("")
        lines.append("Compaction (folding the log into a new snapshot), paid by one update every "
                     f"max({st.INDEX_COMPACT_RECORDS_MIN}, n/{share}) updates:")
        lines.append("")
        lines.append("| sessions | one compaction (median) | per update, amortized |")
        lines.append("|---:|---:|---:|")
        for n, res in rows:
            every = max(st.INDEX_COMPACT_RECORDS_MIN, n // share)
            lines.append(f"| {n:,} | {ms(res['compact'])} | {statistics.median(res['compact']) / every * 1e3:.3f} |")
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
