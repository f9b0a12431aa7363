"""Durable appends per second: journal vs plain JSONL write+fdatasync, side by side in one run.

    .venv/bin/python bench/bench_core.py [--events N] [--repeats R] [--dir DIR]

Prints a markdown table and writes it to bench/results/core.md. Figures are medians over
repeats; the ratio is computed within each repeat (same machine, same moment), then the median
ratio is reported, so a noisy neighbour slows both sides of a ratio alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import journal

THREADS = 16


def make_events(n: int) -> list[dict[str, object]]:
    """A small agent-session mix: messages, tool intents, tool results with larger outputs."""
    out: list[dict[str, object]] = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append({"type": "user_message", "seq_hint": i, "text": "please fix the failing test in foo.py " * 2})
        elif kind == 1:
            out.append(
                {
                    "type": "tool_requested",
                    "toolCallId": f"call_{i}",
                    "tool": "bash",
                    "args": {"cmd": f"pytest -x tests/test_{i}.py"},
                }
            )
        elif kind == 2:
            out.append(
                {
                    "type": "tool_result",
                    "toolCallId": f"call_{i - 1}",
                    "status": "ok",
                    "output": "\n".join(f"tests/test_{i}.py::test_{k} PASSED" for k in range(30)),
                }
            )
        else:
            out.append({"type": "assistant_message", "text": "The test passes now; the bug was an off-by-one. " * 3})
    return out


def jsonl_sync(path: str, events: list[dict[str, object]]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    t0 = time.perf_counter()
    for e in events:
        os.write(fd, json.dumps(e, separators=(",", ":")).encode() + b"\n")
        os.fdatasync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    return len(events) / dt


def journal_sync(path: str, events: list[dict[str, object]]) -> float:
    with journal.open(path, create=True) as j:
        t0 = time.perf_counter()
        for e in events:
            j.append(e, durability="sync")
        dt = time.perf_counter() - t0
    return len(events) / dt


def threaded(append: Callable[[dict[str, object]], object], events: list[dict[str, object]]) -> float:
    chunks = [events[i::THREADS] for i in range(THREADS)]
    barrier = threading.Barrier(THREADS + 1)

    def worker(chunk: list[dict[str, object]]) -> None:
        barrier.wait()
        for e in chunk:
            append(e)

    threads = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return len(events) / (time.perf_counter() - t0)


def journal_sync_threads(path: str, events: list[dict[str, object]]) -> float:
    with journal.open(path, create=True) as j:
        return threaded(lambda e: j.append(e, durability="sync"), events)


def jsonl_sync_threads(path: str, events: list[dict[str, object]]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    lock = threading.Lock()

    def append(e: dict[str, object]) -> None:
        line = json.dumps(e, separators=(",", ":")).encode() + b"\n"
        with lock:  # one writer at a time, or lines interleave
            os.write(fd, line)
            os.fdatasync(fd)

    try:
        return threaded(append, events)
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir on the same disk)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "core.md"))
    args = ap.parse_args()
    events = make_events(args.events)
    cases: dict[str, Callable[[str, list[dict[str, object]]], float]] = {
        "jsonl write+fdatasync, 1 writer": jsonl_sync,
        "journal sync, 1 writer": journal_sync,
        "jsonl write+fdatasync, 16 threads (locked)": jsonl_sync_threads,
        "journal sync, 16 threads (group commit)": journal_sync_threads,
    }
    rates: dict[str, list[float]] = {k: [] for k in cases}
    base = args.dir or tempfile.mkdtemp(prefix="journal-bench-")
    for rep in range(args.repeats):
        for name, fn in cases.items():
            target = os.path.join(base, f"r{rep}-{len(rates[name])}-{abs(hash(name))}")
            rates[name].append(fn(target if "journal" in name else target + ".jsonl", events))
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target + ".jsonl"):
                os.unlink(target + ".jsonl")
    if not args.dir:
        shutil.rmtree(base)
    floor = rates["jsonl write+fdatasync, 1 writer"]

    def ratio(name: str) -> float:
        return statistics.median(a / b for a, b in zip(rates[name], floor, strict=False))

    native = getattr(journal, "native_available", lambda: False)()
    lines = [
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{'native' if native else 'pure-Python'} frame path; {args.events} events x {args.repeats} repeats.",
        "",
        "| case | appends/s (median) | ratio to jsonl write+fdatasync (1 writer) | target |",
        "|---|---:|---:|---|",
    ]
    targets = {"journal sync, 1 writer": 0.9, "journal sync, 16 threads (group commit)": 5.0}
    for name in cases:
        r = ratio(name)
        t = targets.get(name)
        verdict = "" if t is None else (f">= {t}x: met" if r >= t else f">= {t}x: NOT met")
        lines.append(f"| {name} | {statistics.median(rates[name]):,.0f} | {r:.2f}x | {verdict} |")
    lines += ["", f"Command: `.venv/bin/python bench/bench_core.py --events {args.events} --repeats {args.repeats}`"]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
