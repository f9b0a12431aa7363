"""Opening a session: 500 events against 50,000, read-write and read-only (issue 33).

    .venv/bin/python bench/bench_session_open.py              # 495 vs 49,999 events, three runs
    .venv/bin/python bench/bench_session_open.py --runs 5 --big 100000
    .venv/bin/python bench/bench_session_open.py --append 50000 --runs 5   # the append path's cost of saves
    .venv/bin/python bench/bench_session_open.py --append 50000 --deltas   # ... on the cheapest appends

Each session is a run of whole turns with three tool calls each (13 events a turn; the sizes
are rounded down to whole turns, so both sessions end alike), written with ``append_many``
under the journal, then opened once read-write as a runtime would after an
upgrade (that open replays the whole history and, at close, saves the session snapshot). Then
each open is timed: ``session.open`` read-write and read-only, ``journal.open`` under it for
reference, and a full replay (the snapshot removed) for comparison. A run's figure is the median
of OPENS_PER_FIGURE opens (one full replay), the table's the median of ``--runs`` runs; the
verdict is the ratio big/small of the same kind of open in the same run (target: at most 2x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from journal import session
from journal.benchmark.session_open import (
    EVENTS_PER_TURN,
    OPENS,
    OPENS_PER_FIGURE,
    SID,
    TARGET_RATIO_MAX,
    TIME,
    build,
    ev,
    events,
    timed,
)
from journal.session.session import SESSION_SNAPSHOT_NAME, Session


def whole_turns(total: int) -> int:
    """The largest count of events up to ``total`` that ends a turn (at least one turn)."""
    return 1 + EVENTS_PER_TURN * max(1, (total - 1) // EVENTS_PER_TURN)


def one_run(paths: dict[int, str]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}

    def full(p: str) -> None:
        snap = os.path.join(p, SESSION_SNAPSHOT_NAME)
        kept = snap + ".bench"
        os.rename(snap, kept)
        try:
            session.open(p, readonly=True).close()
        finally:
            os.rename(kept, snap)

    for name, fn in (*OPENS.items(), ("session ro, full replay", full)):
        repeat = 1 if name.endswith("full replay") else OPENS_PER_FIGURE
        out[name] = {n: timed(lambda p=p, fn=fn: fn(p), repeat) for n, p in paths.items()}  # type: ignore[misc]
    return out


def deltas(total: int) -> Iterator[dict[str, Any]]:
    """The cheapest appends there are: streamed deltas (buffered), an assistant message (flushed)
    closing each attempt of 20. The worst case for what a snapshot save adds per event."""
    yield ev("session.started", {"workspace": {"path": "/repo"}, "lineage": {"depth": 0}})
    for n in range(1, total):
        att = f"a{n // 21}"
        if n % 21 == 20:
            yield ev("assistant.message", {"text": f"reply {att}"}, attempt_id=att)
        else:
            yield ev("assistant.delta", {"text": "chunk "}, attempt_id=att)


def append_run(root: str, total: int, use_snapshot: bool, tag: str, cheap: bool) -> float:
    """Seconds to append ``total`` events through Session.append (each type at its own
    durability: tool starts and results are synced), the snapshot saves included, and close."""
    path = os.path.join(root, tag)
    evs = list(deltas(total) if cheap else events(total))
    keys = {"turnId": "turn_id", "toolCallId": "tool_call_id", "attemptId": "attempt_id"}
    t0 = time.perf_counter()
    s = session.open(path, create=True, snapshot=use_snapshot, session_id=SID, clock=lambda: TIME)
    for e in evs[1:]:
        s.append(e["type"], e["data"], **{keys[k]: v for k, v in e.items() if k in keys})
    s.close()
    took = time.perf_counter() - t0
    shutil.rmtree(path)
    return took


def append_cost(root: str, total: int, runs: int, cheap: bool) -> None:
    """The append path with snapshot saves (every SNAPSHOT_EVERY_EVENTS) against without, runs
    interleaved so the machine's drift falls on both."""
    from journal.session.session import SNAPSHOT_EVERY_EVENTS

    with_s, without = [], []
    saving: list[float] = []
    real = Session.save_snapshot

    def timed_save(self: Session) -> bool:
        t0 = time.perf_counter()
        done = real(self)
        if done:
            saving.append(time.perf_counter() - t0)
        return done

    Session.save_snapshot = timed_save  # type: ignore[method-assign]
    for r in range(runs):
        without.append(append_run(root, total, False, f"a-off-{r}", cheap))
        with_s.append(append_run(root, total, True, f"a-on-{r}", cheap))
    ratios = [a / b for a, b in zip(with_s, without, strict=True)]
    kind = "streamed deltas" if cheap else "turns of three tool calls"
    print(
        f"\nappending {total} events ({kind}) through Session.append, snapshot every {SNAPSHOT_EVERY_EVENTS} events "
        f"(median of {runs} runs, interleaved)"
    )
    print("| appends | seconds | us/event |")
    print("|---|---:|---:|")
    for name, xs in (("without snapshots", without), ("with snapshots", with_s)):
        m = statistics.median(xs)
        print(f"| {name} | {m:.3f} | {m / total * 1e6:.1f} |")
    Session.save_snapshot = real  # type: ignore[method-assign]
    print(f"with/without: {statistics.median(ratios):.3f}x ({', '.join(f'{x:.3f}' for x in ratios)})")
    share = sum(saving) / sum(with_s)
    print(
        f"snapshot saves: {len(saving)} in {runs} runs, {sum(saving) / len(saving) * 1000:.1f} ms each on "
        f"average, {share:.2%} of the time of the runs with snapshots "
        f"({sum(saving) / (total * runs) * 1e6:.2f} us per appended event)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=500, help="events in the small session")
    ap.add_argument("--big", type=int, default=50_000, help="events in the big session")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument(
        "--append",
        type=int,
        default=0,
        metavar="N",
        help="instead: the append path's cost of snapshot saves, over N events",
    )
    ap.add_argument("--deltas", action="store_true", help="with --append: streamed deltas, the cheapest appends")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-session-open-", dir=args.dir)
    try:
        if args.append:
            append_cost(root, args.append, args.runs, args.deltas)
            return 0
        # Whole turns only, so both sessions end alike: a session cut inside a turn gets that turn
        # ended by the first open's repair (one record in a frame of its own, the snapshot's
        # last), one cut after a turn's first event does not (its last record sits in a block):
        # the snapshot's point read then read one frame for 500 events and decoded a whole block
        # for 50,000, work that has nothing to do with the size.
        args.small, args.big = whole_turns(args.small), whole_turns(args.big)
        paths = {n: os.path.join(root, f"s{n}") for n in (args.small, args.big)}
        for n, p in paths.items():
            build(p, n)
        runs = [one_run(paths) for _ in range(args.runs)]
        for r in runs:  # what the session layer adds to the journal's own open
            for mode in ("rw", "ro"):
                r[f"session {mode} minus journal {mode}"] = {
                    n: max(r[f"session {mode}"][n] - r[f"journal {mode}"][n], 1e-9) for n in paths
                }
        print(f"opening a session: {args.small} vs {args.big} events, median of {args.runs} runs (ms)")
        print(f"| open | {args.small} events | {args.big} events | ratio (runs) |")
        print("|---|---:|---:|---|")
        ok = True
        for name in runs[0]:
            small = statistics.median(r[name][args.small] for r in runs)
            big = statistics.median(r[name][args.big] for r in runs)
            ratios = [r[name][args.big] / r[name][args.small] for r in runs]
            spread = ", ".join(f"{x:.2f}" for x in ratios)
            print(f"| {name} | {small * 1000:.1f} | {big * 1000:.1f} | {statistics.median(ratios):.2f}x ({spread}) |")
            if name in ("session rw", "session ro"):
                ok = ok and statistics.median(ratios) <= TARGET_RATIO_MAX
        print(f"target: session rw and ro big/small <= {TARGET_RATIO_MAX}x: {'met' if ok else 'NOT met'}")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
