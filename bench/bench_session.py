"""Session benchmarks: fork cost against copying the sealed history, snapshot resume against full replay.

    .venv/bin/python bench/bench_session.py            # 1 GiB sealed history, 1,000,000 events
    .venv/bin/python bench/bench_session.py --quick    # 64 MiB, 100,000 events (a smoke run)

Targets (issue 6): forking at its end a session whose sealed history is 1 GiB costs at most
0.05x copying that history; resuming a 1,000,000-event session from a snapshot costs at most
0.1x a full replay. Writes the figures and the command to bench/results/session.md.
"""

from __future__ import annotations

import argparse
import base64
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import journal
from journal.session import fork as forking
from journal.session import snapshot
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry

SID = "s-bench"
TIME = "2026-01-01T00:00:00.000Z"
MiB = 1024 * 1024


def ev(type_: str, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    out: dict[str, Any] = {"schemaVersion": 1, "sessionId": SID, "type": type_, "time": TIME}
    keys = {"turn_id": "turnId", "step_id": "stepId", "tool_call_id": "toolCallId", "attempt_id": "attemptId"}
    out.update({keys[k]: v for k, v in ids.items()})
    out["data"] = data or {}
    return out


def turns(rng: random.Random, output_bytes: int) -> Iterator[list[dict[str, Any]]]:
    """One turn of a coding session per item: 16 events, a tool output of ``output_bytes``."""
    yield [ev("session.started", {"workspace": {"path": "/repo"}, "lineage": {"depth": 0}})]
    t = 0
    while True:
        tid, sid, call = f"t{t}", f"t{t}.1", f"c{t}"
        out = base64.b64encode(rng.randbytes(output_bytes * 3 // 4)).decode() if output_bytes else "ok"
        yield [
            ev("user.message", {"text": f"request {t}: make the auth tests pass"}),
            ev("turn.started", turn_id=tid),
            ev("step.started", turn_id=tid, step_id=sid),
            ev("model.requested", turn_id=tid, step_id=sid),
            *[
                ev("assistant.delta", {"text": f"chunk {k}"}, turn_id=tid, step_id=sid, attempt_id=f"{sid}.a")
                for k in range(3)
            ],
            ev("assistant.message", {"text": "running the tests"}, turn_id=tid, step_id=sid, attempt_id=f"{sid}.a"),
            ev(
                "tool.requested",
                {"tool": "bash", "args": {"cmd": "pnpm test"}, "sideEffect": "process", "idempotency": "safe"},
                turn_id=tid,
                step_id=sid,
                tool_call_id=call,
            ),
            ev("tool.started", turn_id=tid, step_id=sid, tool_call_id=call),
            ev("tool.output", {"chunk": "..."}, turn_id=tid, tool_call_id=call),
            ev("tool.result", {"status": "ok", "output": out}, turn_id=tid, step_id=sid, tool_call_id=call),
            ev("assistant.message", {"text": f"done {t}"}, turn_id=tid, step_id=sid, attempt_id=f"{sid}.b"),
            ev("step.ended", {"reason": "completed"}, turn_id=tid, step_id=sid),
            ev("turn.ended", {"reason": "completed"}, turn_id=tid),
        ]
        t += 1


def sealed_bytes(path: str) -> tuple[list[str], int]:
    segs = sorted(n for n in os.listdir(path) if n.endswith(".seg"))
    sealed = segs[:-1]
    return sealed, sum(os.path.getsize(os.path.join(path, n)) for n in sealed)


def write_until(path: str, stop: Any, output_bytes: int, segment_size_bytes: int) -> int:
    rng = random.Random(1)
    with journal.open(path, create=True, segment_size_bytes=segment_size_bytes) as j:
        batch: list[dict[str, Any]] = []
        for events in turns(rng, output_bytes):
            batch.extend(events)
            if len(batch) >= 2048:
                j.append_many(batch, durability="flush")
                batch = []
                if stop(j):
                    break
        j.append_many(batch, durability="flush")
        j.sync()
        return j.last_seq


def copy_history(path: str, names: list[str], dst: str) -> float:
    os.mkdir(dst)
    t0 = time.perf_counter()
    for n in names:
        shutil.copyfile(os.path.join(path, n), os.path.join(dst, n))
        fd = os.open(os.path.join(dst, n), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    dfd = os.open(dst, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    return time.perf_counter() - t0


def bench_fork(tmp: str, history_bytes: int, segment_size_bytes: int) -> dict[str, Any]:
    parent = os.path.join(tmp, "parent")
    t0 = time.perf_counter()
    # Stop right after a roll-over has sealed enough history: the live segment is then small.
    last = write_until(parent, lambda j: sealed_bytes(parent)[1] >= history_bytes, 6000, segment_size_bytes)
    write_s = time.perf_counter() - t0
    names, sealed = sealed_bytes(parent)
    live = os.path.getsize(os.path.join(parent, sorted(n for n in os.listdir(parent) if n.endswith(".seg"))[-1]))
    snap = os.path.join(tmp, "snaps", "journal.fork.snap")
    t0 = time.perf_counter()
    with journal.open(parent, readonly=True) as j:
        snapshot.take(j, Registry(), forking.ForkReducer(), snap)
    snap_s = time.perf_counter() - t0
    copies = [copy_history(parent, names, os.path.join(tmp, f"copy{k}")) for k in range(3)]
    for k in range(3):
        shutil.rmtree(os.path.join(tmp, f"copy{k}"))
    forks = []
    for k in range(5):
        t0 = time.perf_counter()
        got = forking.fork(parent, os.path.join(tmp, f"child{k}"), last, snapshot=snap)
        forks.append(time.perf_counter() - t0)
        assert got.checked_from_seq == last and got.storage.segments_linked
    t0 = time.perf_counter()
    forking.fork(parent, os.path.join(tmp, "child-nosnap"), last)
    nosnap_s = time.perf_counter() - t0
    copy_s, fork_s = min(copies), min(forks)
    return {
        "records": last,
        "sealed_bytes": sealed,
        "segments": len(names),
        "live_bytes": live,
        "write_s": write_s,
        "snapshot_s": snap_s,
        "copy_s": copy_s,
        "fork_s": fork_s,
        "ratio": fork_s / copy_s,
        "fork_nosnap_s": nosnap_s,
        "linked": len(got.storage.segments_linked),
        "copied_bytes": got.storage.bytes_copied,
    }


def bench_resume(tmp: str, events: int) -> dict[str, Any]:
    path = os.path.join(tmp, "long")
    t0 = time.perf_counter()
    write_until(path, lambda j: j.last_seq >= events, 1024, 64 * MiB)
    write_s = time.perf_counter() - t0
    reg, red = Registry(), SessionReducer()
    snap = os.path.join(tmp, "snaps", "journal.session.snap")
    with journal.open(path, readonly=True) as j:
        t0 = time.perf_counter()
        full = snapshot.resume(j, reg, red, None)
        full_s = time.perf_counter() - t0
        snapshot.save(j, full.replayed, red, snap)
    # The session goes on after the snapshot: 100 more turns.
    with journal.open(path) as j:
        rng = random.Random(9)
        gen = turns(rng, 1024)
        next(gen)
        for _ in range(100):
            j.append_many(next(gen), durability="flush")
        total = j.last_seq
    times = []
    for _ in range(3):
        with journal.open(path, readonly=True) as j:
            t0 = time.perf_counter()
            got = snapshot.resume(j, reg, red, snap)
            times.append(time.perf_counter() - t0)
            assert got.from_snapshot, got.rebuild_reason
    with journal.open(path, readonly=True) as j:
        again = snapshot.resume(j, reg, red, None)
    assert red.dump(again.state) == red.dump(got.state)
    snap_s = min(times)
    return {
        "events": total,
        "write_s": write_s,
        "full_s": full_s,
        "snapshot_resume_s": snap_s,
        "ratio": snap_s / full_s,
        "snapshot_bytes": os.path.getsize(snap),
        "tail": total - full.replayed.last_seq,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB and 100,000 events")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "session.md"))
    args = ap.parse_args()
    history = (64 if args.quick else 1024) * MiB
    events = 100_000 if args.quick else 1_000_000
    tmp = tempfile.mkdtemp(prefix="bench-session-", dir=args.dir)
    try:
        f = bench_fork(tmp, history, 64 * MiB if not args.quick else 8 * MiB)
        print(f"fork: {f}", flush=True)
        r = bench_resume(tmp, events)
        print(f"resume: {r}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cmd = "python bench/bench_session.py" + (" --quick" if args.quick else "")
    lines = [
        f"# Session benchmarks{' (quick)' if args.quick else ''}",
        "",
        f"Command: `{cmd}` (native helper: {journal.native_available()}; {platform.platform()}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs)",
        "",
        "| what | figure | target |",
        "|---|---|---|",
        f"| fork at the end, sealed history {f['sealed_bytes'] / MiB:.0f} MiB in {f['segments']} segments "
        f"({f['records']} records) | {f['fork_s'] * 1000:.1f} ms vs {f['copy_s'] * 1000:.0f} ms to copy the history: "
        f"**{f['ratio']:.4f}x** | <= 0.05x |",
        f"| the same fork with no snapshot (cleanliness checked by a full read) | {f['fork_nosnap_s']:.2f} s | - |",
        f"| fork I/O | {f['linked']} segments linked, {f['copied_bytes']} bytes copied | - |",
        f"| resume {r['events']} events from a snapshot ({r['tail']} events after it) | "
        f"{r['snapshot_resume_s']:.2f} s vs {r['full_s']:.2f} s full replay: **{r['ratio']:.3f}x** | <= 0.1x |",
        f"| snapshot size (built-in reducer) | {r['snapshot_bytes'] / MiB:.1f} MiB | - |",
        "",
        "Fork time is the best of 5 (the copy's the best of 3, each file and the directory fsync'd, as",
        "fork fsyncs what it writes); the cleanliness check starts from a `journal.fork` reducer snapshot.",
        "Resume time is the best of 3 and includes verifying the snapshot (checksum, reducer, record digest).",
        "",
    ]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
