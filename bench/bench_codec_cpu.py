"""CPU per record of the JSON codec (events to payloads and back), in instructions.

    .venv/bin/python bench/bench_codec_cpu.py --callgrind             # Ir per op, every op
    .venv/bin/python bench/bench_codec_cpu.py --callgrind --op read   # one op
    .venv/bin/python bench/bench_codec_cpu.py --callgrind --checkout /tmp/before   # another checkout
    .venv/bin/python bench/bench_codec_cpu.py --callgrind --corpus ../shared/corpus  # real sessions
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \\
        .venv/bin/python bench/bench_codec_cpu.py --op read --count 2000  # one raw run

The ops, each over the first ``--count`` events of the benchmark's mix
(journal/benchmark/events.py, the mix ``journal bench`` appends), or with ``--corpus DIR`` over
the dict lines of the real session files (``*.jsonl``) under DIR, repeated up to ``--count``:

- ``read``: ``for rec in j.read(): rec.event`` over a journal holding them (zstd where it pays,
  as the engine writes by default): the decode scan of ``journal bench``.
- ``event``: ``rec.event`` alone, on records already read (decompressed) and not yet decoded.
- ``append-buffered``: ``j.append(event, durability="buffered")``, the journal closed at the end.
- ``append-sync``: ``j.append(event, durability="sync")``, an fdatasync per append.
- ``append-sync-raw``: the same with ``compress=False``: what zstd costs a durable append.
- ``jsonl-sync``: JSON (the encoder of ``journal bench``'s peers: ``json``, compact, UTF-8 as is),
  ``write`` and ``fdatasync`` of each event to a JSONL file, the peer of ``journal bench``'s
  many-sessions workload.
- ``encode``: ``encode_event`` alone (JSON, the key check, zstd), nothing written.
- ``compress``: the compression a durable append written alone does, on each event's JSON (made
  in the set-up): zstd at level 1 on records of 256 bytes or more, the stored body the smaller
  of the two. With ``--zstd-level L`` the same records go through the zstandard package at level
  L instead (negative levels are zstd's fast ones): what a cheaper setting would save, against
  the bytes it gives up (each run prints the stored share of those records' bytes).
- ``sessions-sync``, ``sessions-sync-raw`` and ``sessions-jsonl``: the many-sessions workload of
  ``journal bench`` (``journal.benchmark.sessions``): 64 threads, each appending durably to a
  journal of its own (compressed, or ``compress=False``) or to a JSONL file of its own with
  that JSON, ``os.write`` and ``fdatasync``; four appends to each in the set-up. Callgrind
  runs the threads one at a time, so the count includes what handing the GIL over costs in
  instructions, not what it costs in cache misses and waiting.
- ``get``, ``get-frames`` and ``jsonl-get``: point reads at random seqs (a fixed seed), each
  decoded: ``j.get(seq).event`` over a journal written buffered (its records share block frames,
  as the read data set of ``journal bench``), the same with ``block_bytes=0`` (a frame per
  record), and JSONL with a line-offset index (``pread`` of the line, ``json.loads``). The set-up
  reads every seq once first, which builds journal's dense index and JSONL's, and warms both.
- ``threads-sync``: THREADS threads appending durably to one journal (the group commit of
  ``journal bench``'s 16-thread workload); callgrind runs them one at a time, switching at a
  blocking call, so callers still queue while the leader's fdatasync runs.

Every run does the same set-up (the events made; for ``read``, ``event`` and the reads by seq
the journal or file written and, for ``event`` and the reads by seq, every record read) and then
the op on ``--ops`` of them. ``--callgrind`` runs each op under callgrind twice, with ``--ops 0``
and ``--ops COUNT``, and reports (Ir(COUNT) - Ir(0)) / COUNT: start-up, imports and set-up cancel
out. The journal lives on tmpfs (/dev/shm when there is one), and callgrind counts user-space
instructions only, so an fdatasync costs its system call and nothing of the disk. Instruction
counts are what codec changes are decided with: timings on this shared machine vary ~20% from
run to run, these counts by well under 1%.

``--checkout`` imports journal (and its event mix) from another checkout: the figure for the code
before a change, from a ``git worktree`` of it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # callgrind_ir, beside this script

from callgrind_ir import callgrind_ir  # noqa: E402

OPS = ("read", "event", "append-buffered", "append-sync", "append-sync-raw", "jsonl-sync", "encode", "compress",
       "sessions-sync", "sessions-sync-raw", "sessions-jsonl", "get", "get-frames", "jsonl-get", "threads-sync")
SESSIONS = 64  # the sessions-* ops' threads, each with a journal (or JSONL file) of its own
THREADS = 16  # the threads-sync op's threads, on one journal


def corpus_events(root: str, count: int) -> list[dict[str, Any]]:
    """The dict lines of the ``*.jsonl`` files under ``root``, in name order, repeated to ``count``."""
    found: list[dict[str, Any]] = []
    for dirpath, _dirs, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".jsonl"):
                with open(os.path.join(dirpath, name), "rb") as f:
                    for line in f:
                        try:
                            obj = json.loads(line)
                        except ValueError:
                            continue  # a damaged line in a real file: not an event
                        if isinstance(obj, dict):
                            found.append(obj)
    if not found:
        raise SystemExit(f"no session files under {root}")
    return (found * (count // len(found) + 1))[:count]


def run(
    op: str, count: int, ops: int, base: str | None, checkout: str, corpus: str | None, zstd_level: int | None = None
) -> str:
    """The set-up for ``op`` over ``count`` events, then ``op`` on ``ops`` of them; what to print
    after it: the JSON codec used, or for ``compress`` the stored share of the bytes."""
    sys.path.insert(0, checkout)
    import journal
    from journal.benchmark.events import make_events
    from journal.benchmark.stores import dumps
    from journal.engine import encoding

    events = make_events(count) if corpus is None else corpus_events(corpus, count)
    where = tempfile.mkdtemp(prefix="journal-codec-cpu-", dir=base)
    try:
        path = os.path.join(where, "j")
        if op in ("read", "event"):
            with journal.open(path, create=True) as j:
                j.append_many(events, durability="buffered")
            with journal.open(path, readonly=True) as j:
                if op == "read":
                    n = 0
                    for rec in j.read():
                        if n == ops:
                            break
                        rec.event  # noqa: B018 - decoding is what is measured
                        n += 1
                else:
                    recs = list(j.read())
                    for rec in recs[:ops]:
                        rec.event  # noqa: B018 - decoding is what is measured
        elif op in ("get", "get-frames", "jsonl-get"):
            point_reads(op, events, ops, path, journal, dumps)
        elif op == "encode":
            options = journal.Options()
            for e in events[:ops]:
                encoding.encode_event(e, None, False, options)
        elif op == "compress":
            return compress_lone(events, ops, encoding, journal.Options(), zstd_level)
        elif op == "jsonl-sync":  # the peer of many sessions: JSON, write and fdatasync per event
            with open(path + ".jsonl", "ab") as f:
                for e in events[:ops]:
                    f.write(dumps(e) + b"\n")
                    f.flush()
                    os.fdatasync(f.fileno())
        elif op.startswith("sessions-"):
            sessions(op, events, ops, where, journal, dumps)
        elif op == "threads-sync":
            with journal.open(path, create=True) as j:
                j.append_many(events[:4])  # created, reserved, warm: not the steady state
                start = threading.Barrier(THREADS)

                def worker(t: int) -> None:
                    start.wait()
                    for e in events[t:ops:THREADS]:
                        j.append(e, durability="sync")

                threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
        else:
            durability = "buffered" if op == "append-buffered" else "sync"
            with journal.open(path, create=True, compress=op != "append-sync-raw") as j:
                for e in events[:ops]:
                    j.append(e, durability=durability)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return f"codec {getattr(encoding, 'JSON_CODEC', 'json')}"


def compress_lone(events: list[dict[str, Any]], ops: int, encoding: Any, options: Any, level: int | None) -> str:
    """Compress the JSON of ``ops`` events as a durable append written alone does (the engine's
    own call, or the zstandard package at ``level``); say what share of the bytes of the records
    it compresses is stored."""
    import zstandard

    raws = [encoding.encode_event(e, None, False, options, True).raw for e in events]  # JSON only
    least = encoding.COMPRESS_MIN_BYTES
    if level is None:
        # The engine's own choice (raw where zstd does not pay) is measured. Its call takes the
        # handle's options since format version 4 (a dictionary's), a flag before: either checkout.
        engine_compress = encoding._compressed
        takes_options = "options" in inspect.signature(engine_compress).parameters

        def compress(raw: bytes, _: bool) -> tuple[bytes, int]:
            got = engine_compress(raw, options if takes_options else True)
            return got[0], got[1]

        label = f"the engine's (level {encoding.ZSTD_LEVEL})"
    else:
        cctx = zstandard.ZstdCompressor(level=level, write_content_size=False, write_checksum=False,
                                        write_dict_id=False)

        def compress(raw: bytes, _: bool) -> tuple[bytes, int]:
            packed = cctx.compress(raw) if len(raw) >= least else raw
            return (packed, 1) if len(packed) < len(raw) else (raw, 0)

        label = f"zstandard level {level}"
    raw_bytes = stored_bytes = 0
    for raw in raws[:ops]:
        body, _codec = compress(raw, True)
        if len(raw) >= least:
            raw_bytes += len(raw)
            stored_bytes += len(body)
    share = stored_bytes / raw_bytes if raw_bytes else 1.0
    return f"zstd {label}: records of {least} bytes or more stored at {share:.3f} of their bytes"


def point_reads(
    op: str, events: list[dict[str, Any]], ops: int, path: str, journal: Any, dumps: Callable[[Any], bytes]
) -> None:
    """``ops`` reads by random seq, each decoded, after one untimed read of every seq; a read
    that misses or returns another event stops the run (the op would measure nothing)."""
    seqs = random.Random(7).sample(range(1, len(events) + 1), len(events))
    if op == "jsonl-get":
        with open(path + ".jsonl", "wb") as f:
            for e in events:
                f.write(dumps(e) + b"\n")
        fd = os.open(path + ".jsonl", os.O_RDONLY)
        try:
            spans: list[tuple[int, int]] = []
            offset = 0
            with open(path + ".jsonl", "rb") as f:
                for line in f:
                    spans.append((offset, len(line)))
                    offset += len(line)

            def get(seq: int) -> Any:
                at, size = spans[seq - 1]
                return json.loads(os.pread(fd, size, at))

            for seq in seqs:
                get(seq)
            for seq in seqs[:ops]:
                if get(seq) != events[seq - 1]:
                    raise SystemExit(f"line {seq} does not read back as its event")
        finally:
            os.close(fd)
        return
    block_bytes = 0 if op == "get-frames" else journal.Options().block_bytes
    with journal.open(path, create=True, block_bytes=block_bytes) as j:
        for e in events:
            j.append(e, durability="buffered")
    with journal.open(path, readonly=True, block_bytes=block_bytes) as j:
        for seq in seqs:
            j.get(seq)
        for seq in seqs[:ops]:
            rec = j.get(seq)
            if rec is None or rec.event != events[seq - 1]:
                raise SystemExit(f"seq {seq} does not read back as its event")


def sessions(
    op: str, events: list[dict[str, Any]], ops: int, where: str, journal: Any, dumps: Callable[[Any], bytes]
) -> None:
    """``ops`` durable appends from SESSIONS threads, each to a journal or JSONL file of its own."""
    handles: list[Any] = []
    fds: list[int] = []
    for i in range(SESSIONS):
        if op == "sessions-jsonl":
            fds.append(os.open(os.path.join(where, f"s{i}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        else:
            handles.append(journal.open(os.path.join(where, f"s{i}"), create=True, compress=op == "sessions-sync"))

    def append(i: int, event: dict[str, Any]) -> None:
        if fds:
            os.write(fds[i], dumps(event) + b"\n")
            os.fdatasync(fds[i])
        else:
            handles[i].append(event, durability="sync")

    for i in range(SESSIONS):  # a journal's first appends allocate and reserve: not the steady state
        for e in events[:4]:
            append(i, e)
    start = threading.Barrier(SESSIONS)

    def worker(i: int) -> None:
        start.wait()
        for e in events[i:ops:SESSIONS]:
            append(i, e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for h in handles:
        h.close()
    for fd in fds:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=[*OPS, "all"], default="all", help="what is measured (default: every op)")
    ap.add_argument("--count", type=int, default=2000, help="events of the mix (default 2000)")
    ap.add_argument("--ops", type=int, default=None, help="of which the op runs on this many (default all)")
    ap.add_argument("--checkout", default=os.path.join(HERE, ".."), help="the checkout of journal to measure")
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the journal goes (default /dev/shm: tmpfs)")
    ap.add_argument("--corpus", default=None, help="a folder of real session .jsonl files: their events instead")
    ap.add_argument("--zstd-level", type=int, default=None,
                    help="the compress op with the zstandard package at this level (default: the engine's call)")
    ap.add_argument("--callgrind", action="store_true",
                    help="run under callgrind with 0 and --count ops; print Ir per op")
    args = ap.parse_args(argv)
    checkout = os.path.abspath(args.checkout)
    if not os.path.isfile(os.path.join(checkout, "journal", "engine", "encoding.py")):
        print(f"{checkout} is not a checkout of journal", file=sys.stderr)
        return 2
    ops = [*OPS] if args.op == "all" else [args.op]
    if not args.callgrind:
        for op in ops:
            n = args.count if args.ops is None else args.ops
            codec = run(op, args.count, n, args.dir, checkout, args.corpus, args.zstd_level)
            print(f"{op}: {n} of {args.count} events; {codec}")
        return 0
    common = ["--count", str(args.count), "--checkout", checkout] + (["--dir", args.dir] if args.dir else [])
    if args.corpus:
        common += ["--corpus", os.path.abspath(args.corpus)]
    if args.zstd_level is not None:
        common += ["--zstd-level", str(args.zstd_level)]
    outdir = tempfile.mkdtemp(prefix="journal-codec-callgrind-")
    try:
        for op in ops:
            base = callgrind_ir(__file__, [*common, "--op", op, "--ops", "0"], os.path.join(outdir, f"{op}-0.out"))
            full = callgrind_ir(__file__, [*common, "--op", op], os.path.join(outdir, f"{op}-n.out"))
            n = args.count
            print(f"{op}: {(full - base) / n:,.0f} Ir per op ({full:,} - {base:,} Ir over {n} ops)", flush=True)
            if op == "compress":  # the bytes it gives up, from one run outside callgrind
                print(f"  {run(op, args.count, n, args.dir, checkout, args.corpus, args.zstd_level)}", flush=True)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
