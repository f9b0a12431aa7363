"""Random point reads (``j.get(seq).event``) against JSONL with a line-offset index, as the
"random reads by seq" workload of ``journal bench`` measures them, on two data sets.

    .venv/bin/python bench/bench_point_reads.py                      # 3 runs, the bench's events
    .venv/bin/python bench/bench_point_reads.py --corpus ../shared/corpus --runs 3
    .venv/bin/python bench/bench_point_reads.py --block-bytes 8192 --dictionary
    .venv/bin/python bench/bench_point_reads.py --callgrind          # instructions per point read
    .venv/bin/python bench/bench_point_reads.py --checkout /tmp/before   # another checkout's journal

For each data set (journal/benchmark/events.py's 20,000 events, and with ``--corpus`` the real
session files there) three files are written: JSONL, a journal of buffered appends (records
written together share block frames of ``--block-bytes``) and a journal of the same records a
frame each (``block_bytes=0``, as records appended one at a time are stored). Each run opens
each file afresh, reads 2,000 random seqs once untimed (JSONL's offset index, journal's dense
index, the page cache) and then the same seqs timed (wall clock, as the bench does); the sides
take turns (``--cpu``: the process's CPU time instead, for a loaded machine). The figure is
journal's reads/s over JSONL's in the same run: median and spread of
``--runs`` runs.

``--callgrind`` counts instructions instead (valgrind, one hash seed): a child process does the
untimed pass, then the 2,000 reads again through ``sys.call_tracing``, the one function
callgrind counts (``--toggle-collect``, as bench/callgrind.py does); Ir / 2,000 is what one
point read costs, free of the machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# ``--checkout DIR`` reads with the journal of another checkout (an A/B of two versions).
_CHECKOUT = sys.argv[sys.argv.index("--checkout") + 1] if "--checkout" in sys.argv[:-1] else None
sys.path.insert(
    0, os.path.abspath(_CHECKOUT) if _CHECKOUT else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)

import journal  # noqa: E402
from journal.benchmark.events import make_events, real_session_events  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # callgrind_ir

EVENTS = 20_000
READS = 2_000


def _seqs(count: int, reads: int) -> list[int]:
    rng = random.Random(11)  # the bench's generator and seed
    return [rng.randrange(1, count + 1) for _ in range(reads)]


def _write_jsonl(path: str, events: list[Any]) -> None:
    with open(path, "wb") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")


def _write_journal(path: str, events: list[Any], block_bytes: int, dictionary: bytes | None) -> None:
    opts: dict[str, Any] = {"create": True, "block_bytes": block_bytes}
    if dictionary is not None:
        from journal.engine.dictionary import Dictionary  # format version 4

        opts["dictionary"] = Dictionary(1, dictionary)
    with journal.open(path, **opts) as j:
        for e in events:
            j.append(e, durability="buffered")
        j.sync()


def _train(events: list[Any]) -> bytes:
    import zstandard

    samples: list[bytes | bytearray | memoryview] = [
        json.dumps(e, separators=(",", ":")).encode() for e in events[: len(events) // 2]
    ]
    return zstandard.train_dictionary(16 * 1024, samples).as_bytes()


def _jsonl_reader(path: str) -> Callable[[int], Any]:
    offsets = [0]
    with open(path, "rb") as f:
        for line in f:
            offsets.append(offsets[-1] + len(line))
    fd = os.open(path, os.O_RDONLY)

    def get(seq: int) -> Any:
        start = offsets[seq - 1]
        return json.loads(os.pread(fd, offsets[seq] - start, start))

    return get


def _journal_reader(path: str) -> Callable[[int], Any]:
    j = journal.open(path, readonly=True)  # a journal's dictionaries are files of its own

    def get(seq: int) -> Any:
        rec = j.get(seq)
        assert rec is not None
        return rec.event

    return get


def _timed(get: Callable[[int], Any], seqs: list[int], cpu: bool) -> float:
    """Reads/s of ``seqs`` after an untimed pass of them: wall clock, or with ``cpu`` the
    process's CPU time (steadier than the wall on a machine other work shares)."""
    clock = time.process_time if cpu else time.perf_counter
    for q in seqs:  # untimed: indexes, page cache
        get(q)
    t0 = clock()
    for q in seqs:
        get(q)
    return len(seqs) / (clock() - t0)


def _files(scratch: str, name: str, events: list[Any], block_bytes: int, dictionary: bool) -> dict[str, Any]:
    d = _train(events) if dictionary else None
    paths = {k: os.path.join(scratch, f"{name}-{k}") for k in ("jsonl", "blocks", "frames")}
    _write_jsonl(paths["jsonl"], events)
    _write_journal(paths["blocks"], events, block_bytes, d)
    _write_journal(paths["frames"], events, 0, d)
    return {"paths": paths, "count": len(events), "dict": d}


def _child(args: argparse.Namespace) -> int:
    """--callgrind's child: the untimed pass, then ``--child-reads`` reads of one file, run
    through sys.call_tracing, the one function callgrind counts (``--toggle-collect``)."""
    get = _jsonl_reader(args.child) if args.child.endswith("-jsonl") else _journal_reader(args.child)
    seqs = _seqs(args.child_count, args.child_reads)
    for q in seqs:
        get(q)

    def reads() -> None:
        for q in seqs:
            get(q)

    sys.call_tracing(reads, ())
    return 0


def _ir(path: str, count: int, reads: int, out: str) -> int:
    """Instructions of ``reads`` point reads of ``path`` (interpreter start, imports, the open
    and the untimed pass not counted)."""
    from callgrind_ir import callgrind_ir

    args = ["--child", path, "--child-count", str(count), "--child-reads", str(reads)]
    if _CHECKOUT:
        args += ["--checkout", _CHECKOUT]
    toggle = ["--collect-atstart=no", "--toggle-collect=_PyEval_CallTracing"]
    return callgrind_ir(__file__, args, out, toggle)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--block-bytes", type=int, default=None, help="the blocks journal's block_bytes (default: the engine's)"
    )
    ap.add_argument("--dictionary", action="store_true", help="train a zstd dictionary on half the records")
    ap.add_argument("--corpus", default=None, help="a folder of real session files (*.jsonl)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--cpu", action="store_true", help="CPU time of the process instead of the wall clock")
    ap.add_argument("--callgrind", action="store_true", help="instructions per point read instead of times")
    ap.add_argument("--checkout", default=None, help="import journal from this checkout (default: this one)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-reads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args)
    from journal.engine import format as fmt

    block_bytes = fmt.BLOCK_BYTES_DEFAULT if args.block_bytes is None else args.block_bytes
    scratch = tempfile.mkdtemp(prefix="bench-point-reads-", dir=args.dir)
    try:
        sets = {"events": _files(scratch, "events", make_events(EVENTS), block_bytes, args.dictionary)}
        if args.corpus:
            sets["corpus"] = _files(scratch, "corpus", real_session_events(args.corpus), block_bytes, args.dictionary)
        print(f"journal from {os.path.dirname(os.path.dirname(journal.__file__))}")
        print(f"block_bytes {block_bytes:,}, dictionary {'yes' if args.dictionary else 'no'}, {READS:,} random reads")
        for name, s in sets.items():
            paths, count = s["paths"], s["count"]
            if args.callgrind:
                irs: dict[str, float] = {}
                for kind in ("jsonl", "blocks", "frames"):
                    out = os.path.join(scratch, f"{name}-{kind}.cg")
                    ir = _ir(paths[kind], count, READS, out) / READS
                    irs[kind] = ir
                    print(f"{name} {kind}: {ir:,.0f} Ir per point read", flush=True)
                print(
                    f"{name}: blocks {irs['jsonl'] / irs['blocks']:.3f}x, frames {irs['jsonl'] / irs['frames']:.3f}x "
                    "JSONL's instructions",
                    flush=True,
                )
                continue
            ratios: dict[str, list[float]] = {"blocks": [], "frames": []}
            for r in range(args.runs):
                order = ["jsonl", "blocks", "frames"]
                order = order[r % 3 :] + order[: r % 3]
                rates = {}
                for kind in order:
                    get = _jsonl_reader(paths[kind]) if kind == "jsonl" else _journal_reader(paths[kind])
                    rates[kind] = _timed(get, _seqs(count, READS), args.cpu)
                for kind in ratios:
                    ratios[kind].append(rates[kind] / rates["jsonl"])
                print(
                    f"  {name} run {r + 1}: JSONL {rates['jsonl']:,.0f}/s, blocks {rates['blocks']:,.0f}/s, "
                    f"frames {rates['frames']:,.0f}/s",
                    flush=True,
                )
            for kind, v in ratios.items():
                shown = ", ".join(f"{x:.3f}" for x in v)
                print(
                    f"{name} {kind} vs JSONL+offset index: median {statistics.median(v):.3f}x "
                    f"(min {min(v):.3f}, max {max(v):.3f}) [{shown}]",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
