"""journal bench: throughput against the stores a user would otherwise pick, side by side.

Runs every workload against journal and the peers (JSONL, SQLite, and LMDB and RocksDB when
``pip install 'journal-engine[bench]'`` installed them), alternating stores within each round, and
writes a markdown table, a PNG chart and the raw figures as JSON into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys

from journal.benchmark.events import CORPUS_MIX, DEFAULT_MIX, MIXES
from journal.cli.common import int_at_least

FORK_CHAIN_DEPTH = 10_000  # runner.FORK_CHAIN_DEPTH, the chain (the runner is imported late)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="small runs that finish within a minute (CI)")
    parser.add_argument("--out", default=os.path.join("bench", "results"), help="where the table and chart go")
    parser.add_argument("--dir", default=None, help="scratch directory for the stores (default: a temp dir)")
    parser.add_argument(
        "--repeats", type=int_at_least(1), default=None, help="rounds per workload (default 3)"
    )
    parser.add_argument("--no-recover-gib", action="store_true", help="skip the 1 GiB open+recover history")
    parser.add_argument(
        "--corpus",
        default=None,
        help="a folder of real session .jsonl files: adds their bytes on disk, journal vs JSONL (read in place)",
    )
    parser.add_argument(
        "--mix",
        choices=[*MIXES, "all"],
        default=None,
        help="the event mix of the write and read workloads: "
        + ", ".join(f"{name} ({why})" for name, (_kinds, why) in MIXES.items())
        + f"; 'all' runs each in turn, the corpus one with --corpus (default {DEFAULT_MIX})",
    )
    parser.add_argument(
        "--fork-chain",
        type=int_at_least(10),  # the chain script needs two windows of five forks
        nargs="?",
        const=FORK_CHAIN_DEPTH,
        default=None,
        metavar="DEPTH",
        help=f"also build a chain of DEPTH forks (default {FORK_CHAIN_DEPTH:,}; minutes) with a checkout's "
        "bench/bench_fork_chain.py, for the last fork's target; left out of the default run",
    )
    parser.add_argument("--name", default=None, help="file name stem for the outputs (default bench or quick)")


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (scratch and output folders left out)."""
    parts = ["journal bench"]
    if args.quick:
        parts.append("--quick")
    if args.repeats is not None:
        parts.append(f"--repeats {args.repeats}")
    if args.no_recover_gib:
        parts.append("--no-recover-gib")
    if args.mix:
        parts.append(f"--mix {args.mix}")
    if args.corpus:
        parts.append(f"--corpus {args.corpus}")
    if args.fork_chain:
        parts.append(f"--fork-chain {args.fork_chain}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from journal.benchmark import runner

    plan = runner.Plan.quick() if args.quick else runner.Plan.full()
    if args.repeats is not None:
        plan = dataclasses.replace(plan, repeats=max(1, args.repeats))
    if args.no_recover_gib:
        plan = dataclasses.replace(plan, recover_sizes=tuple(s for s in plan.recover_sizes if s < runner.GiB))
    if args.mix is not None:
        if args.mix == CORPUS_MIX and not args.corpus:
            sys.stderr.write("journal bench: --mix corpus runs on the real session files: give --corpus DIR too\n")
            return 2
        every = tuple(m for m in MIXES if m != CORPUS_MIX or args.corpus)
        plan = dataclasses.replace(plan, mixes=every if args.mix == "all" else (args.mix,))
    if args.fork_chain:
        plan = dataclasses.replace(plan, fork_chain_depth=args.fork_chain)

    def log(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    report = runner.run(plan, args.quick, args.dir, log, args.corpus)
    stem = args.name or ("quick" if args.quick else "bench")
    os.makedirs(args.out, exist_ok=True)
    text = runner.markdown(report, _command(args))
    md_path = os.path.join(args.out, f"{stem}.md")
    with open(md_path, "w") as f:
        f.write(text)
    with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
        json.dump(runner.to_json(report), f, indent=1)
    png = os.path.join(args.out, f"{stem}.png")
    drew = runner.chart(report, png)
    sys.stdout.write(text)
    log(f"wrote {md_path}" + (f" and {png}" if drew else " (no chart: matplotlib is not installed)"))
    return 0
