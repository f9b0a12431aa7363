"""What per-record and multi-record zstd make of the real session files' bytes (../shared/corpus).

    .venv/bin/python bench/bench_corpus_bytes.py [CORPUS_DIR]

Every JSON object line of every .jsonl file, compact JSON, against the plain JSONL's bytes: each
record compressed alone (level 1, as the engine does, 32 bytes of frame header each), with a
dictionary trained on the first records (its bytes counted), with one trained on all of them
(a ceiling), in batches of N records, and the whole file at once. Nothing is written to disk.
"""

from __future__ import annotations

import json
import os
import sys

import zstandard

from journal.benchmark.events import real_session_events

HEADER_BYTES = 32
COMPRESS_MIN_BYTES = 256


def load(root: str) -> list[bytes]:
    return [json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() for obj in real_session_events(root)]


def per_record(c: zstandard.ZstdCompressor, raws: list[bytes]) -> int:
    total = 0
    for r in raws:
        stored = min(len(c.compress(r)), len(r)) if len(r) >= COMPRESS_MIN_BYTES else len(r)
        total += HEADER_BYTES + stored
    return total


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "corpus")
    raws = load(root)
    if not raws:
        print(f"no session files under {root}")
        return 1
    jsonl = sum(len(r) + 1 for r in raws)
    plain = zstandard.ZstdCompressor(level=1, write_content_size=False, write_checksum=False, write_dict_id=False)
    print(f"{len(raws)} events, {jsonl} bytes of JSONL; sizes as a share of that:")
    print(f"  per record, level 1 (the engine today): {per_record(plain, raws) / jsonl:.3f}")
    for train_kib, dict_kib in ((512, 16), (512, 32)):
        samples, seen = [], 0
        for r in raws:
            if seen >= train_kib * 1024:
                break
            samples.append(r)
            seen += len(r)
        d = zstandard.train_dictionary(dict_kib * 1024, samples, level=1)
        cd = zstandard.ZstdCompressor(level=1, dict_data=d, write_content_size=False, write_checksum=False,
                                      write_dict_id=False)
        n = len(samples)
        total = per_record(plain, raws[:n]) + per_record(cd, raws[n:]) + len(d.as_bytes())
        print(f"  per record, a {dict_kib} KiB dictionary trained on the first {train_kib} KiB: {total / jsonl:.3f}")
    for dict_kib in (16, 64):
        d = zstandard.train_dictionary(dict_kib * 1024, raws, level=3)
        cd = zstandard.ZstdCompressor(level=3, dict_data=d, write_content_size=False, write_checksum=False,
                                      write_dict_id=False)
        total = per_record(cd, raws) + len(d.as_bytes())
        print(f"  per record, a {dict_kib} KiB dictionary trained on every record (a ceiling): {total / jsonl:.3f}")
    for batch in (4, 16, 64):
        total = 0
        for i in range(0, len(raws), batch):
            chunk = raws[i : i + batch]
            total += HEADER_BYTES * len(chunk) + len(plain.compress(b"\n".join(chunk)))
        print(f"  batches of {batch} records, level 1: {total / jsonl:.3f}")
    whole = zstandard.ZstdCompressor(level=3).compress(b"\n".join(raws))
    print(f"  the whole file at once, level 3: {len(whole) / jsonl:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
