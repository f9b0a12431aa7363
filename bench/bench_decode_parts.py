"""Where a decoded record's time goes: the decode scan taken apart, per record, in CPU time.

    .venv/bin/python bench/bench_decode_parts.py            # 20,000 events of the bench mix
    .venv/bin/python bench/bench_decode_parts.py --events 50000 --dir /dev/shm

Writes the benchmark's event mix (journal/benchmark/events.py) to a journal (buffered, one
sync) and to a JSONL file, then times, each as the best of 3 passes of CPU time over every
record: JSONL read + json.loads and + orjson.loads (the peers of the decode scan), journal's
read alone and read + ``rec.event`` (the decode scan), and the parts of the latter on their own:
the frame scan over the segment bytes, zstd decompression of the compressed payloads, and
``orjson.loads`` and ``json.loads`` of the payloads. bench/README.md, "What bounds the targets
not met", reads the decode-scan target off these parts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import orjson
import zstandard

import journal
from journal.benchmark.events import make_events
from journal.benchmark.stores import dumps
from journal.engine import format as fmt


def each(fn: Callable[[bytes], object], items: list[bytes]) -> None:
    """``fn`` over every item, keeping no result (a growing list of dicts would time the GC)."""
    for x in items:
        fn(x)


def best_us(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args(argv)
    events = make_events(args.events)
    root = tempfile.mkdtemp(prefix="decode-parts-", dir=args.dir)
    try:
        path, jsonl = os.path.join(root, "j"), os.path.join(root, "x.jsonl")
        with journal.open(path, create=True) as j:
            j.append_many(events, durability="buffered")
        with open(jsonl, "wb") as out:
            out.writelines(dumps(e) + b"\n" for e in events)
        segments = []
        for name in sorted(os.listdir(path)):
            if name.endswith(fmt.SEGMENT_SUFFIX):
                with open(os.path.join(path, name), "rb") as f:
                    segments.append(f.read())
        stored: list[tuple[bytes, bool, int]] = []
        for data in segments:
            h = fmt.decode_segment_header(data)
            for fr in fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, h.salt, h.base_seq).frames:
                if fr.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA:
                    start = fr.offset + fmt.FRAME_HEADER_SIZE_BYTES
                    zstd = fr.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD
                    stored.append((data[start : start + fr.stored_len], zstd, fr.raw_len))
        dctx = zstandard.ZstdDecompressor()
        payloads = [dctx.decompress(s, max_output_size=n) if z else s for s, z, n in stored]
        n = len(events)

        def jsonl_json() -> None:
            with open(jsonl, "rb") as f:
                for line in f:
                    json.loads(line)

        def jsonl_orjson() -> None:
            with open(jsonl, "rb") as f:
                for line in f:
                    orjson.loads(line)

        def read() -> None:
            with journal.open(path, readonly=True) as r:
                for _ in r.read():
                    pass

        def read_event() -> None:
            with journal.open(path, readonly=True) as r:
                for rec in r.read():
                    rec.event  # noqa: B018 - decoding is what is measured

        def scan() -> None:
            for data in segments:
                h = fmt.decode_segment_header(data)
                fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, h.salt, h.base_seq)

        def decompress() -> None:
            for s, z, size in stored:
                if z:
                    dctx.decompress(s, max_output_size=size)

        rows = [
            ("JSONL read + json.loads", best_us(jsonl_json, n)),
            ("JSONL read + orjson.loads", best_us(jsonl_orjson, n)),
            ("journal read (no decoding)", best_us(read, n)),
            ("journal read + rec.event (the decode scan)", best_us(read_event, n)),
            ("  the frame scan alone", best_us(scan, n)),
            ("  zstd decompression alone", best_us(decompress, n)),
            ("  orjson.loads of the payloads", best_us(lambda: each(orjson.loads, payloads), n)),
            ("  json.loads of the payloads", best_us(lambda: each(json.loads, payloads), n)),
        ]
        compressed = sum(1 for _s, z, _n in stored if z)
        print(f"{n} events, {compressed / n:.0%} compressed, {'native' if journal.native_available() else 'pure'} path;"
              " CPU µs per record, best of 3:")
        for name, us in rows:
            print(f"  {name:45s} {us:6.2f}")
        print(f"decode scan against JSONL + json.loads: {rows[0][1] / rows[3][1]:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
