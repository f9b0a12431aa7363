"""Point reads with the cache of decoded blocks off, by block size, with and without a dictionary.

    .venv/bin/python bench/bench_cold_reads.py                          # the agent mix, 20,000 events
    .venv/bin/python bench/bench_cold_reads.py --corpus ../shared/corpus  # the real session files
    .venv/bin/python bench/bench_cold_reads.py --sizes 0,4096,131072 --events 2000 --dir /tmp/w

What bounds `journal bench`'s row "random reads, records written together, the block cache off"
(bench/README.md, "What bounds the targets not met"): each read then decodes the block that holds
its record, so the figure follows the block's size, and the bytes on disk follow it the other way.
For each ``block_bytes`` (0: a frame per record), without and with a zstd dictionary (16 KiB,
trained on the first half of the events, as bench/bench_blocks.py trains its own), the events
are appended buffered with one sync at the end (as ``journal bench`` writes its read data set)
and measured against the same events as compact JSONL:

- bytes: the journal's files (its dictionary's included) over the JSONL file's;
- a cold point read: CPU per ``j.get(seq).event`` over ``--reads`` random seqs (seed 11) with
  ``journal.set_block_cache_bytes(0)``, best of ``--rounds``, against a JSONL line read with
  ``os.pread`` at its offset (an index made ahead) and ``json.loads``; the ratio is JSONL's time
  over the journal's (the target is 0.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # bench_blocks, beside this script

import bench_blocks  # noqa: E402

import journal  # noqa: E402
from journal.benchmark.events import make_events, real_session_events  # noqa: E402

READ_SEED = 11


def best_cpu_per_read(read: Callable[[], None], reads: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        read()
        best = min(best, (time.process_time() - t0) / reads)
    return best


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,2048,4096,8192,16384,131072", help="block_bytes values, comma-separated")
    ap.add_argument("--corpus", default=None, help="read the real session files (*.jsonl) here instead of the mix")
    ap.add_argument("--events", type=int, default=20000, help="events of the mix (default 20,000)")
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    events: list[Any] = real_session_events(args.corpus) if args.corpus else make_events(args.events)
    if len(events) < 2 or args.reads < 1 or args.rounds < 1:
        ap.error("need two events or more, --reads >= 1 and --rounds >= 1")
    base = tempfile.mkdtemp(prefix="cold-reads-", dir=args.dir)
    try:
        jsonl = os.path.join(base, "events.jsonl")
        jsonl_bytes = bench_blocks._jsonl(jsonl, events)
        offsets = bench_blocks._offsets(jsonl)
        rnd = random.Random(READ_SEED)
        seqs = [rnd.randrange(1, len(events) + 1) for _ in range(args.reads)]
        with open(jsonl, "rb") as f:
            fd = f.fileno()

            def jsonl_reads() -> None:
                for s in seqs:
                    json.loads(os.pread(fd, offsets[s] - offsets[s - 1], offsets[s - 1]))

            peer = best_cpu_per_read(jsonl_reads, len(seqs), args.rounds)
        print(f"{'the real files' if args.corpus else 'the agent mix'}: {len(events):,} events, "
              f"JSONL {jsonl_bytes:,} B, a line read at its offset + json.loads {peer * 1e6:.1f} µs", flush=True)
        trained = bench_blocks._train(events)
        before = journal.set_block_cache_bytes(0)
        try:
            for dictionary in (None, trained):
                for size in sizes:
                    path = os.path.join(base, f"j-{size}-{'dict' if dictionary else 'plain'}")
                    stored = bench_blocks._journal(path, events, size, dictionary)
                    with journal.open(path, readonly=True) as j:

                        def journal_reads(j: journal.Journal = j) -> None:
                            for s in seqs:
                                rec = j.get(s)
                                if rec is None:
                                    raise RuntimeError(f"seq {s} not found")
                                _ = rec.event

                        t = best_cpu_per_read(journal_reads, len(seqs), args.rounds)
                    print(f"  {'a dictionary' if dictionary else 'no dictionary'}, block_bytes {size:>7,}: "
                          f"bytes {stored / jsonl_bytes:.3f} of JSONL's, cold point read {t * 1e6:6.1f} µs, "
                          f"{peer / t:.2f}x JSONL", flush=True)
        finally:
            journal.set_block_cache_bytes(before)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
