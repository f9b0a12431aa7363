"""What refusing non-string keys costs an append: 100,000 small buffered appends with the check on
and off, in alternating rounds of one process.

    .venv/bin/python bench/bench_key_check.py              # 9 rounds of each
    .venv/bin/python bench/bench_key_check.py --rounds 3   # a smoke run

The check (journal/engine/encoding.py) is one regular-expression search of the encoded bytes for
what a coerced key looks like (``"1":``, ``"true":`` ...); only a hit walks the event. "Off"
replaces that search with one that finds nothing, so the two differ by exactly the check. The
events are session-shaped (an envelope with a nested ``data``), about 160 bytes of JSON, at
"buffered": the cheapest append, where the check weighs the most. The journal lives in /dev/shm
(or --dir) so that the figure is CPU, not disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import journal
from journal.engine import encoding

N = 100_000


def events() -> list[dict[str, Any]]:
    return [
        {"schemaVersion": 1, "sessionId": "s0191a2b3c4d5e6f7", "type": "user.message",
         "time": "2026-01-01T00:00:00.000Z", "data": {"text": f"event {i} lorem ipsum", "n": i}}
        for i in range(N)
    ]


def one_round(evs: list[dict[str, Any]], where: str) -> float:
    d = tempfile.mkdtemp(dir=where)
    try:
        with journal.open(os.path.join(d, "j"), create=True) as j:
            t0 = time.perf_counter()
            for ev in evs:
                j.append(ev, durability="buffered")
            elapsed = time.perf_counter() - t0
        return elapsed
    finally:
        shutil.rmtree(d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9, help="rounds with the check on, and as many off")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None, help="scratch directory")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    evs = events()
    check = encoding._MAYBE_COERCED_KEY
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.rounds):
        for mode in ("on", "off"):
            encoding._MAYBE_COERCED_KEY = check if mode == "on" else (lambda raw: None)  # type: ignore[assignment]
            try:
                times[mode].append(one_round(evs, args.dir))
            finally:
                encoding._MAYBE_COERCED_KEY = check
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    for mode, xs in times.items():
        m = statistics.median(xs)
        print(f"check {mode:<3}: {m:.3f} s for {N:,} buffered appends, {m / N * 1e6:.2f} us each "
              f"(rounds: {', '.join(f'{x:.3f}' for x in xs)})")
    print(f"cost of the check: {(on - off) / N * 1e9:.0f} ns per append, {on / off:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
