"""What the size of a block frame changes: bytes, decode scan, point reads and bulk appends.

    .venv/bin/python bench/bench_blocks.py                         # block_bytes 0, 8, 16, 32, 64 KiB
    .venv/bin/python bench/bench_blocks.py --corpus ../shared/corpus --sizes 0,16384,32768
    .venv/bin/python bench/bench_blocks.py --dir /tmp/w --rounds 7
    .venv/bin/python bench/bench_blocks.py --sizes 4096,8192,16384,32768 --dictionary --corpus ../shared/corpus
    .venv/bin/python bench/bench_blocks.py --sizes 32768 --corpus ../shared/corpus --level 3 --mix tools --dictionary

For each ``block_bytes`` (0: a frame per record, as format version 1 wrote every record), the
benchmark's event mix (journal/benchmark/events.py, 20,000 events; ``--mix`` picks another) is
appended buffered with one sync at the end, as ``journal bench`` writes its read data set, and
measured in CPU time (user + system of the process; best of ``--rounds``):

- bulk append: CPU per event of the appends and the sync, and against SQLite's ``executemany``
  of the same JSON in one transaction (WAL, synchronous=FULL, one commit), the bulk target's
  peer (1x), in CPU time too (the process's, every thread's: the wall clock of one fdatasync
  per round swings with the machine's load far more than the work does);
- bytes: the journal's files against the same events as compact JSONL;
- decode scan: CPU per record of ``for rec in j.read(): rec.event``, against JSONL read with
  ``json.loads`` in the same run (the target of the speed issue is 1.2x);
- point reads: CPU per ``j.get(seq).event`` over 2,000 random seqs, after one untimed pass of
  the same seqs (steady state, as ``journal bench`` measures them), against JSONL with an
  offset index.

With ``--corpus DIR`` the real session files there (``*.jsonl``, read in place) are written the
same way too: their bytes against their JSONL (the target is 0.35x), their decode scan against
their JSONL read with ``json.loads``, and point reads of them against their JSONL with an offset
index. With ``--dictionary`` every journal is written with a
zstd dictionary (format version 4) trained on the first half of its records (each data set its
own, 16 KiB), as an application would train one on earlier sessions. With ``--level N`` block
frames (and only they: a record framed alone keeps the engine's ZSTD_LEVEL) are compressed at
zstd level N instead of the engine's BLOCK_ZSTD_LEVEL, to weigh a block level's bytes against its
CPU (the level is not in the format: a reader decodes any). It sets that constant, so the blocks
take the engine's own paths at level N: the GIL-held compressor (native/zstd_held.c) up to its
input limit, the zstandard package above it, a dictionary's CDicts made at N. A journal's bytes
count every file in it, its dictionary's (~16 KiB) too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import journal
from journal.benchmark.events import DEFAULT_MIX, MIXES, make_mix, real_session_events

EVENTS = 20_000
READS = 2_000


def _best_cpu(fn: Callable[[], int], rounds: int) -> float:
    """CPU seconds per op of the best round (fn returns how many ops it did)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        n = fn()
        best = min(best, (time.process_time() - t0) / n)
    return best


def _jsonl(path: str, events: list[Any]) -> int:
    with open(path, "wb") as f:
        for e in events:
            f.write(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return os.path.getsize(path)


def _train(events: list[Any]) -> Any:
    """A dictionary trained on the first half of ``events`` (journal.engine.dictionary's)."""
    import zstandard

    from journal.engine.dictionary import Dictionary

    samples: list[bytes | bytearray | memoryview] = [
        json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode() for e in events[: len(events) // 2]
    ]
    return Dictionary(1, zstandard.train_dictionary(16 * 1024, samples).as_bytes())


def _sqlite_many(path: str, events: list[Any]) -> None:
    """The bulk target's peer: the same JSON, one executemany in one transaction, one commit."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO events (seq, body) VALUES (?, ?)",
            [(i, json.dumps(e, separators=(",", ":")).encode()) for i, e in enumerate(events, 1)],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _block_level(level: int) -> None:
    """Compress block frames at zstd ``level`` from now on: the engine's BLOCK_ZSTD_LEVEL, and the
    copy the dictionary module keeps (read when a dictionary's tables are made, after this)."""
    from journal.engine import dictionary, encoding

    encoding.BLOCK_ZSTD_LEVEL = level
    dictionary.BLOCK_ZSTD_LEVEL = level


def _journal(path: str, events: list[Any], block_bytes: int, dictionary: Any = None) -> int:
    extra = {} if dictionary is None else {"dictionary": dictionary}
    with journal.open(path, create=True, block_bytes=block_bytes, **extra) as j:
        for e in events:
            j.append(e, durability="buffered")
        j.sync()
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


def _offsets(path: str) -> list[int]:
    with open(path, "rb") as f:
        offsets = [0]
        for line in f:
            offsets.append(offsets[-1] + len(line))
    return offsets


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,8192,16384,32768,65536", help="block_bytes values, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--corpus", default=None, help="a folder of real session files (*.jsonl) for their bytes")
    ap.add_argument("--events", type=int, default=EVENTS, help=f"events of the mix (default {EVENTS:,})")
    ap.add_argument("--dictionary", action="store_true", help="write with a dictionary trained on half the records")
    ap.add_argument("--level", type=int, default=None, help="zstd level of block frames (default: the engine's)")
    ap.add_argument("--mix", default=DEFAULT_MIX, choices=list(MIXES), help="event mix (journal/benchmark/events.py)")
    args = ap.parse_args(argv)
    if args.events < 1 or args.rounds < 1:
        ap.error("need --events >= 1 and --rounds >= 1")
    count: int = args.events
    sizes = [int(x) for x in args.sizes.split(",")]
    scratch = tempfile.mkdtemp(prefix="bench-blocks-", dir=args.dir)
    try:
        if args.level is not None:
            _block_level(args.level)
        events = make_mix(args.mix, count, args.corpus)
        jsonl_path = os.path.join(scratch, "events.jsonl")
        jsonl_bytes = _jsonl(jsonl_path, events)
        offsets = _offsets(jsonl_path)
        rng = random.Random(11)
        seqs = [rng.randrange(1, count + 1) for _ in range(READS)]

        def jsonl_decode() -> int:
            n = 0
            with open(jsonl_path, "rb") as f:
                for line in f:
                    json.loads(line)
                    n += 1
            return n

        def jsonl_get(path: str = jsonl_path, offsets: list[int] = offsets, seqs: list[int] = seqs) -> int:
            fd = os.open(path, os.O_RDONLY)
            try:
                for q in seqs:
                    json.loads(os.pread(fd, offsets[q] - offsets[q - 1], offsets[q - 1]))
            finally:
                os.close(fd)
            return len(seqs)

        def sqlite_many() -> int:
            db = os.path.join(scratch, "many.sqlite")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(db + suffix):
                    os.remove(db + suffix)
            _sqlite_many(db, events)
            return count

        jsonl_decode_s = _best_cpu(jsonl_decode, args.rounds)
        jsonl_get_s = _best_cpu(jsonl_get, args.rounds)
        sqlite_s = _best_cpu(sqlite_many, args.rounds)
        corpus = real_session_events(args.corpus) if args.corpus else []
        corpus_path = os.path.join(scratch, "corpus.jsonl")
        corpus_jsonl = _jsonl(corpus_path, corpus) if corpus else 0
        corpus_get_s = corpus_decode_s = 0.0
        corpus_seqs: list[int] = []
        if corpus:
            corpus_offsets = _offsets(corpus_path)
            crng = random.Random(11)
            corpus_seqs = [crng.randrange(1, len(corpus) + 1) for _ in range(READS)]

            def corpus_jsonl_get() -> int:
                return jsonl_get(corpus_path, corpus_offsets, corpus_seqs)

            def corpus_jsonl_decode() -> int:
                n = 0
                with open(corpus_path, "rb") as f:
                    for line in f:
                        json.loads(line)
                        n += 1
                return n

            corpus_get_s = _best_cpu(corpus_jsonl_get, args.rounds)
            corpus_decode_s = _best_cpu(corpus_jsonl_decode, args.rounds)
        from journal.engine import encoding

        engine_level = f"{encoding.BLOCK_ZSTD_LEVEL} (the engine's BLOCK_ZSTD_LEVEL)"
        events_dict = _train(events) if args.dictionary else None
        corpus_dict = _train(corpus) if args.dictionary and corpus else None
        print(
            f"{count:,} events of the bench mix ({jsonl_bytes / count:.0f} B each as JSONL); CPU, best of "
            f"{args.rounds}; JSONL + json.loads {jsonl_decode_s * 1e6:.2f} us a record, JSONL get by offset "
            f"{jsonl_get_s * 1e6:.2f} us; SQLite executemany, one transaction {sqlite_s * 1e6:.2f} us a "
            f"record{'; dictionaries trained on half the records' if args.dictionary else ''}; mix {args.mix}; "
            f"block level {engine_level}"
        )
        head = "| block_bytes | bulk append, us/event | bytes vs JSONL | decode, us/record | decode vs JSONL |"
        head += " get, us | get vs JSONL | bulk vs SQLite executemany |"
        head += (
            " real files, bytes vs JSONL | real files, decode vs JSONL | real files, get vs JSONL |" if corpus else ""
        )
        print(head)
        print("|" + "---:|" * (head.count("|") - 1))
        for size in sizes:
            path = os.path.join(scratch, f"j{size}")

            def write(size: int = size, path: str = path) -> int:
                shutil.rmtree(path, ignore_errors=True)
                _journal(path, events, size, events_dict)
                return count

            append_s = _best_cpu(write, args.rounds)
            nbytes = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
            with journal.open(path, readonly=True) as r:

                def decode(r: Any = r) -> int:
                    return sum(1 for rec in r.read() if rec.event is not None)

                def get(r: Any = r, seqs: list[int] = seqs) -> int:
                    for q in seqs:
                        rec = r.get(q)
                        assert rec is not None and rec.event is not None
                    return len(seqs)

                get()  # the untimed pass: the point-read index, the page cache
                decode_s = _best_cpu(decode, args.rounds)
                get_s = _best_cpu(get, args.rounds)
            row = (
                f"| {size:,} | {append_s * 1e6:.2f} | {nbytes / jsonl_bytes:.3f} | {decode_s * 1e6:.2f} | "
                f"{jsonl_decode_s / decode_s:.2f}x | {get_s * 1e6:.1f} | {jsonl_get_s / get_s:.2f}x | "
                f"{sqlite_s / append_s:.2f}x |"
            )
            if corpus:
                cpath = os.path.join(scratch, f"c{size}")
                row += f" {_journal(cpath, corpus, size, corpus_dict) / corpus_jsonl:.3f} |"
                with journal.open(cpath, readonly=True) as r:
                    assert [rec.event for rec in r.read()] == corpus  # every event reads back equal

                    def cdecode(r: Any = r) -> int:
                        return decode(r)

                    def cget(r: Any = r) -> int:
                        return get(r, corpus_seqs)

                    row += f" {corpus_decode_s / _best_cpu(cdecode, args.rounds):.2f}x |"

                    cget()
                    row += f" {corpus_get_s / _best_cpu(cget, args.rounds):.2f}x |"
                shutil.rmtree(cpath, ignore_errors=True)
            print(row, flush=True)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
