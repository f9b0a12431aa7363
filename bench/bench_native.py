"""The C helper against the pure-Python twin, in one run.

    .venv/bin/python bench/bench_native.py [--quick] [--write bench/results/native.md]

Measures (1) frame encoding throughput, (2) scan throughput (with Frame objects, as the
engine uses it, and verify-only, which builds no per-frame objects), both in MB/s of stored
bytes; (3) end-to-end appends/s through the public API (journal.open + append(...,
durability="buffered")), each path in its own subprocess (JOURNAL_PURE=1 for the pure one);
and (4) a profile of the pure path's buffered appends, which says how much of an append the
framing is, and so how much any framing accelerator can win (Amdahl's bound).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import random
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import journal  # noqa: E402
from journal.engine import format as fmt  # noqa: E402
from journal.engine import native  # noqa: E402

SALT = 0x1234_5678_9ABC_DEF0
MB = 1e6

AGENT_EVENT = {
    "schemaVersion": 1,
    "type": "tool_result",
    "sessionId": "s-01JDX7Q4ZC5N8W3Y2K1M0P9R6T",
    "turnId": "t-0017",
    "stepId": "st-0042",
    "toolCallId": "call_8f2a91",
    "output": "total 12\ndrwxr-xr-x 2 dev dev 4096 Nov 29 14:00 src\n"
    "-rw-r--r-- 1 dev dev  812 Nov 29 13:58 README.md\n",
    "exitCode": 0,
}
WORKLOADS = {
    # name: (description, event factory, open() options)
    "agent": ("agent event dict (~330 B JSON, zstd)", lambda i: {**AGENT_EVENT, "seq_hint": i}, {}),
    "bytes": ("256-byte bytes event, compress=False", lambda i: i.to_bytes(8, "little") * 32, {"compress": False}),
}


def best_rate(fn: Callable[[], object], units: float, min_time_s: float, repeats: int) -> float:
    """Best of ``repeats`` measurements, each running ``fn`` for at least ``min_time_s``."""
    best = 0.0
    for _ in range(repeats):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time_s:
                break
        best = max(best, n * units / dt)
    return best


def make_specs(count: int, stored_bytes: int) -> list[fmt.FrameSpec]:
    rng = random.Random(stored_bytes)
    return [fmt.FrameSpec(fmt.CODEC_ZSTD, stored_bytes * 3, rng.randbytes(stored_bytes)) for _ in range(count)]


def bench_codec(quick: bool) -> list[dict[str, Any]]:
    rows = []
    min_time, repeats = (0.1, 2) if quick else (0.4, 3)
    for stored in (256, 4096):
        specs = make_specs(1024, stored)
        batch = fmt.py_encode_batch(1, specs, SALT, True)
        assert fmt.c_encode_batch(1, specs, SALT, True) == batch
        enc_py = best_rate(partial(fmt.py_encode_batch, 1, specs, SALT, True), len(batch), min_time, repeats)
        enc_c = best_rate(partial(fmt.c_encode_batch, 1, specs, SALT, True), len(batch), min_time, repeats)
        # A 32 MB stretch of frames: what opening or reading a large live segment scans.
        reps = max(1, (32 * 1024 * 1024) // len(batch))
        seg = fmt.py_encode_batch(1, specs * reps, SALT, True)
        n_frames = len(specs) * reps
        assert fmt.verify_scan(seg, 0, SALT, 1).frame_count == n_frames
        scan_py = best_rate(partial(fmt.py_scan, seg, 0, SALT, 1), len(seg), min_time, 1 if quick else 2)
        scan_c = best_rate(partial(fmt.c_scan, seg, 0, SALT, 1), len(seg), min_time, repeats)
        verify_c = best_rate(partial(fmt.verify_scan, seg, 0, SALT, 1), len(seg), min_time, repeats)
        rows.append(
            {
                "stored_bytes": stored,
                "encode_py": enc_py / MB,
                "encode_c": enc_c / MB,
                "scan_py": scan_py / MB,
                "scan_c": scan_c / MB,
                "verify_c": verify_c / MB,
                "scan_mb": len(seg) / MB,
                "frames": n_frames,
            }
        )
    return rows


def framing_share(stats: pstats.Stats) -> float:
    """Fraction of the profiled time spent framing: format's encode_batch, plus encode_frame
    when the writer calls it directly (a batch of one)."""
    table: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in table.values())
    framing = 0.0
    for (path, _, name), (_, _, _, cum, callers) in table.items():
        if not path.endswith("format.py"):
            continue
        if name == "encode_batch":
            framing += cum
        elif name == "encode_frame":
            framing += sum(
                c[3] for (cp, _, cn), c in callers.items() if not (cp.endswith("format.py") and cn == "encode_batch")
            )
    return framing / total if total else 0.0


def e2e_child(workload: str, count: int, profile: bool) -> dict[str, Any]:
    """Runs in a subprocess: buffered appends through the public API, then close (flush)."""
    _, make, opts = WORKLOADS[workload]
    events = [make(i) for i in range(count)]
    with tempfile.TemporaryDirectory() as d:
        j = journal.open(os.path.join(d, "j"), create=True, **opts)
        prof = cProfile.Profile() if profile else None
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        for ev in events:
            j.append(ev, durability="buffered")
        j.close()
        if prof:
            prof.disable()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    out: dict[str, Any] = {
        "native": journal.native_available(),
        "appends_per_s": count / dt,
        "appends_per_cpu_s": count / cpu,
    }
    if prof:
        out["framing_share"] = framing_share(pstats.Stats(prof))
    return out


def run_child(pure: bool, workload: str, count: int, profile: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("JOURNAL_PURE", None)
    if pure:
        env["JOURNAL_PURE"] = "1"
    cmd = [sys.executable, __file__, "--e2e-child", workload, str(count)] + (["--profile"] if profile else [])
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    got: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["native"] is (not pure), got
    return got


def bench_e2e(quick: bool) -> list[dict[str, Any]]:
    count = 20_000 if quick else 50_000
    rounds = 2 if quick else 5
    rows = []
    for workload, (desc, _, _) in WORKLOADS.items():
        wall = {True: 0.0, False: 0.0}
        cpu = {True: 0.0, False: 0.0}
        for _ in range(rounds):  # alternate, so a burst of load on a shared machine hits both
            for pure in (True, False):
                got = run_child(pure, workload, count)
                wall[pure] = max(wall[pure], got["appends_per_s"])
                cpu[pure] = max(cpu[pure], got["appends_per_cpu_s"])
        share = run_child(True, workload, count, profile=True)["framing_share"]
        rows.append(
            {
                "workload": workload,
                "desc": desc,
                "pure": cpu[True],
                "c": cpu[False],
                "pure_wall": wall[True],
                "c_wall": wall[False],
                "framing_share": share,
            }
        )
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = f"{os.cpu_count()} cores (load {load:.1f} when the report was written)"
    return f"{cpu}, {cores}, Python {platform.python_version()}"


def report(codec: list[dict[str, Any]], e2e: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# The C helper against the pure-Python twin",
        "",
        f"Command: `{command}`  ",
        f"Machine: {machine()}  ",
        f"Path in this process: {native.native_status()}",
        "",
        "## Encode and scan (MB/s of stored frame bytes; best of repeats)",
        "",
        "| frame payload | encode pure | encode C | x "
        "| scan pure | scan C (Frame list) | x | verify C (no objects) | x |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in codec:
        lines.append(
            f"| {r['stored_bytes']} B ({r['frames']} frames, {r['scan_mb']:.0f} MB) "
            f"| {r['encode_py']:.0f} | {r['encode_c']:.0f} | {r['encode_c'] / r['encode_py']:.1f}x "
            f"| {r['scan_py']:.0f} | {r['scan_c']:.0f} | {r['scan_c'] / r['scan_py']:.1f}x "
            f"| {r['verify_c']:.0f} | {r['verify_c'] / r['scan_py']:.1f}x |"
        )
    lines += [
        "",
        '## End to end: one writer, `append(event, durability="buffered")`, then close',
        "",
        "Rates are appends per second of the writer process's CPU time (best of the runs), which a",
        "shared machine disturbs less than wall time; wall-clock rates follow in parentheses.",
        "",
        "| workload | pure appends/s | C appends/s | x | framing share of a pure append | Amdahl bound |",
        "|---|---|---|---|---|---|",
    ]
    for r in e2e:
        bound = 1 / (1 - r["framing_share"]) if r["framing_share"] < 1 else float("inf")
        lines.append(
            f"| {r['desc']} | {r['pure']:,.0f} ({r['pure_wall']:,.0f}) | {r['c']:,.0f} ({r['c_wall']:,.0f}) "
            f"| {r['c'] / r['pure']:.2f}x "
            f"| {r['framing_share'] * 100:.0f}% | {bound:.2f}x |"
        )
    lines += ["", "## Against the targets", ""]
    worst_verify = min(r["verify_c"] for r in codec)
    worst_scan = min(r["scan_c"] for r in codec)
    verdict = "met" if worst_verify >= 1000 else "MISSED"
    lines.append(
        f"- C scan verifies >= 1 GB/s of stored bytes: **{verdict}** (verify-only: {worst_verify:,.0f} MB/s at "
        f"the smallest frames). `scan()` as the engine calls it reaches {worst_scan:,.0f} MB/s there: it must "
        "build one `Frame` NamedTuple (five Python ints) per frame, which costs more than validating the frame."
    )
    best_ratio = max(r["c"] / r["pure"] for r in e2e)
    bound = max(1 / (1 - r["framing_share"]) for r in e2e)
    verdict = "met" if best_ratio >= 2 else "MISSED"
    lines.append(
        f"- Buffered appends with C >= 2x pure: **{verdict}** (best {best_ratio:.2f}x). The profile of the pure "
        f"path shows framing is {min(r['framing_share'] for r in e2e) * 100:.0f}-"
        f"{max(r['framing_share'] for r in e2e) * 100:.0f}% of a buffered append, so even free framing would "
        f"give about {bound:.2f}x (a profiler estimate; on a shared machine ratios move by about 10% between "
        "runs). The rest is per-append Python in the writer (JSON, zstd, the queue, outcome objects), which "
        "the C helper cannot reach."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (for a smoke test)")
    parser.add_argument("--write", metavar="PATH", help="also write the markdown report to PATH")
    parser.add_argument("--e2e-child", nargs=2, metavar=("WORKLOAD", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.e2e_child:
        print(json.dumps(e2e_child(args.e2e_child[0], int(args.e2e_child[1]), args.profile)))
        return 0
    if native.load() is None:
        print(f"the C helper is not built ({native.load_error()}); nothing to compare", file=sys.stderr)
        return 1
    print(f"path in use: {native.native_status()}", flush=True)
    codec = bench_codec(args.quick)
    e2e = bench_e2e(args.quick)
    command = " ".join(["python", "bench/bench_native.py", *map(shlex.quote, argv)])
    text = report(codec, e2e, command)
    print(text)
    if args.write:
        with open(args.write, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
