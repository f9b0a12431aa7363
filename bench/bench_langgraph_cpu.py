"""CPU per step of a checkpoint saver on the "LangGraph sync" workload, in instructions.

    .venv/bin/python bench/bench_langgraph_cpu.py --callgrind          # Ir per step, JournalSaver
    .venv/bin/python bench/bench_langgraph_cpu.py --callgrind --saver sqlite
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/bench_langgraph_cpu.py --replays 20  # one raw run

What it runs. The graph of bench/bench_adapters.py ("LangGraph sync": one plain node looping on
itself, a message and +1 per step) is invoked once for ``--steps`` steps on an InMemorySaver
whose get_tuple, put and put_writes record deep copies of their arguments (so the recording
does not depend on the saver measured). That call sequence is then replayed ``--replays``
times against the saver measured, each replay on a fresh thread id (as the workload runs each
invoke on a fresh thread), in a directory on tmpfs (/dev/shm when there is one): fdatasync
costs nothing there, and callgrind counts user-space instructions only, so the count is the
saver's CPU, fsync excluded.

``--callgrind`` runs the script under callgrind twice, with 0 replays and with ``--replays``,
and reports (Ir(replays) - Ir(0)) / (replays x steps): imports, the recording and interpreter
start-up cancel out. One raw run's total Ir / steps (as in the third line above) includes them.
Instruction counts are what changes are decided with: on shared machines timings vary ~20%
from run to run, these counts by well under 1%.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import sqlite3
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from callgrind_ir import callgrind_ir  # noqa: E402


def record(steps: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The saver calls of one ``steps``-step invoke of the workload's graph, arguments deep-copied."""
    from bench_adapters import _lg_config, build_graph
    from langgraph.checkpoint.memory import InMemorySaver

    calls: list[tuple[str, tuple[Any, ...]]] = []

    class Recording(InMemorySaver):
        def get_tuple(self, config: Any) -> Any:
            calls.append(("get_tuple", copy.deepcopy((config,))))
            return super().get_tuple(config)

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            calls.append(("put_writes", copy.deepcopy((config, writes, task_id, task_path))))
            super().put_writes(config, writes, task_id, task_path)

    graph = build_graph(steps, Recording())
    out = graph.invoke({"messages": [], "count": 0}, _lg_config("rec", steps), durability="sync")
    assert out["count"] == steps, out
    return calls


def _retarget(config: dict[str, Any], thread_id: str) -> dict[str, Any]:
    return {**config, "configurable": {**config["configurable"], "thread_id": thread_id}}


def plan(calls: list[tuple[str, tuple[Any, ...]]], thread_id: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The calls again with their configs naming ``thread_id`` (the other arguments shared: the
    savers copy what they keep and change nothing they are given)."""
    return [(name, (_retarget(args[0], thread_id), *args[1:])) for name, args in calls]


def make_saver(kind: str, where: str) -> tuple[Any, Any]:
    if kind == "journal":
        from journal.adapters.langgraph import JournalSaver

        saver = JournalSaver(os.path.join(where, "ckpt"))
        return saver, saver.close
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.path.join(where, "ckpt.sqlite"), check_same_thread=False)
    conn.execute("PRAGMA synchronous=FULL")
    return SqliteSaver(conn), conn.close


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def run(steps: int, replays: int, kind: str, base: str | None) -> tuple[int, int]:
    """Record, then replay ``replays`` times; (steps replayed, bytes the saver left)."""
    calls = record(steps)
    plans = [plan(calls, f"replay-{r}") for r in range(replays)]  # built before the saver works
    where = tempfile.mkdtemp(prefix="journal-lg-cpu-", dir=base)
    try:
        saver, closing = make_saver(kind, where)
        for p in plans:
            for name, args in p:
                getattr(saver, name)(*args)
        if replays:
            got = saver.get_tuple({"configurable": {"thread_id": f"replay-{replays - 1}"}})
            assert got is not None and got.checkpoint["channel_values"]["count"] == steps, got
        closing()
        return steps * replays, dir_bytes(where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=50, help="steps of the recorded invoke (default 50)")
    ap.add_argument("--replays", type=int, default=20, help="replays of it, each on a fresh thread (default 20)")
    ap.add_argument("--saver", choices=["journal", "sqlite"], default="journal",
                    help="JournalSaver, or SqliteSaver at synchronous=FULL")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the saver's files go (default /dev/shm: tmpfs)")
    ap.add_argument("--callgrind", action="store_true",
                    help="run under callgrind with 0 and --replays replays; print Ir per step")
    args = ap.parse_args(argv)
    if args.callgrind:
        common = ["--steps", str(args.steps), "--saver", args.saver] + (["--dir", args.dir] if args.dir else [])
        outdir = tempfile.mkdtemp(prefix="journal-lg-callgrind-")
        try:
            base = callgrind_ir(__file__, [*common, "--replays", "0"], os.path.join(outdir, "base.out"))
            full = callgrind_ir(__file__, [*common, "--replays", str(args.replays)], os.path.join(outdir, "full.out"))
        finally:
            shutil.rmtree(outdir, ignore_errors=True)
        n = args.steps * args.replays
        print(f"{args.saver}: {(full - base) / n:,.0f} Ir per step ({full:,} - {base:,} Ir over {n} steps; "
              f"total Ir / steps {full / n:,.0f})")
        return 0
    n, size = run(args.steps, args.replays, args.saver, args.dir)
    print(f"{args.saver}: {n} steps replayed, {size:,} bytes on disk ({size / max(n, 1):,.0f} per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
