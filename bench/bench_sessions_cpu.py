"""Many sessions in one process: journal (with and without compression) against a JSONL file
per session, per round, with CPU per event, and the floor of the journal's file layout.

    .venv/bin/python bench/bench_sessions_cpu.py                  # 64 sessions, 6,400 events, 3 rounds
    .venv/bin/python bench/bench_sessions_cpu.py --sessions 1000 --events 4000 --rounds 4
    .venv/bin/python bench/bench_sessions_cpu.py --sessions 1000 --events 4000 --shared-syncs --dir /tmp/w
    .venv/bin/python bench/bench_sessions_cpu.py --dir /dev/shm   # syncs free: CPU alone
    .venv/bin/python bench/bench_sessions_cpu.py --callgrind --events 2000   # Ir per event, each side

Each round runs the five sides of ``journal.benchmark.sessions.run_side`` (the workload of
``journal bench``: ``min(N, 64)`` threads, each appending to its share of the sessions in turn,
every append durable before the next) in an order that rotates, and prints each side's events/s,
its CPU per event (user + system of the process over the events, and each of the two), the bytes
its files hold per event at the end, and journal's ratio to JSONL in that round. With many
threads on two cores the run is bound by the GIL and the kernel's fdatasync, so the ratio follows
the CPU per event; ``compress=False`` shows what compression costs on top (bench/README.md,
"Compression with the GIL held"), a trained dictionary (DICT_BYTES, one for every session,
trained on other events of the mix) what it saves of that and of the bytes, and the reserved
file per session (``pwrite`` into space set aside ahead, then ``fdatasync``, nothing else) what
the kernel costs the journal's file layout before any of the journal's own work. With
``--shared-syncs``, a sixth: the same files synced together (one ``syncfs`` for the events
written meanwhile), what sharing the syncs of a store's sessions would leave of that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import zstandard

import journal
from journal.benchmark import sessions as sess
from journal.benchmark.events import make_events
from journal.engine.dictionary import read_dictionary_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # callgrind_ir, beside this script

UNCOMPRESSED = "journal, compress=False"
DICTIONARY = "journal, a trained dictionary"
DICT_BYTES = 64 * 1024  # bench/bench_dictionary.py's default
DICT_TRAIN_BYTES = 512 * 1024
DICT_TRAIN_SEED = 8  # other events than the ones appended (make_events' default seed is 7)


def trained_dictionary(base: str) -> journal.Dictionary:
    """A dictionary trained on DICT_TRAIN_BYTES of the mix's events as the engine stores them,
    drawn with another seed than the events appended: what a store trains on its first sessions
    and gives every later one. Kept as a file in ``base``, so each session's journal hard-links
    it (one copy on disk, as in a store) instead of writing its own."""
    from journal.engine import encoding
    from journal.engine.options import Options
    from journal.fs import OsFileSystem

    opts = Options(compress=False)
    samples: list[bytes | bytearray | memoryview] = []
    seen = 0
    for e in make_events(20000, seed=DICT_TRAIN_SEED):
        raw = encoding.encode_event(e, None, False, opts).raw
        samples.append(raw)
        seen += len(raw)
        if seen >= DICT_TRAIN_BYTES:
            break
    data = zstandard.train_dictionary(DICT_BYTES, samples, level=encoding.ZSTD_LEVEL).as_bytes()
    path = os.path.join(base, journal.dictionary_file_name(1))
    with open(path, "wb") as f:
        f.write(journal.encode_dictionary_file(journal.Dictionary(1, data)))
    return read_dictionary_file(OsFileSystem(), path)


# --callgrind: each side's appends in one thread, under callgrind with none and with --events of
# them; the difference per event is the side's instructions (set-up, imports and the dictionary's
# training cancel out). The package side is the dictionary compressed through the zstandard
# package, as before native/zstd_held.c's compress_with.
IR_PACKAGE = "journal, a trained dictionary, zstandard package"
IR_SIDES = [sess.JOURNAL, UNCOMPRESSED, DICTIONARY, IR_PACKAGE, sess.JSONL]
IR_EVENTS = 2000


def ir_run(side: str, sessions: int, ops: int, where: str | None, dict_file: str) -> int:
    """The set-up of ``side`` (its sessions open, with the dictionary of ``dict_file``) and
    ``ops`` appends round the sessions, each durable, in this thread."""
    from journal.engine import encoding
    from journal.fs import OsFileSystem

    if side == IR_PACKAGE:
        encoding._HELD_COMPRESS_WITH = None
    events = make_events(IR_EVENTS)  # fewer than the timed runs': made under callgrind too
    base = tempfile.mkdtemp(prefix="sessions-ir-", dir=where)
    try:
        store: sess._Journals | sess._JsonlFiles
        if side == sess.JSONL:
            store = sess._JsonlFiles(base, sessions)
        else:
            use = read_dictionary_file(OsFileSystem(), dict_file) if side in (DICTIONARY, IR_PACKAGE) else None
            store = sess._Journals(base, sessions, side != UNCOMPRESSED, use)
        for k in range(ops):
            store.append(k % sessions, events[k % len(events)])
        store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def ir_report(sessions: int, count: int, where: str | None) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from callgrind_ir import callgrind_ir

    where = where or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    here = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        dictionary = trained_dictionary(tmp)  # trained once, outside callgrind

        def ir(side: str, ops: int) -> int:
            args = [f"--sessions={sessions}", f"--side={side}", f"--dict-file={dictionary.path}", f"--ops={ops}"]
            args += [f"--dir={where}"] if where else []
            return callgrind_ir(here, args, os.path.join(tmp, f"{IR_SIDES.index(side)}.{ops}.out"))

        # Every run at once: counts do not depend on what else runs, and the machine's cores do.
        with ThreadPoolExecutor(max_workers=2 * len(IR_SIDES)) as pool:
            runs = {(side, ops): pool.submit(ir, side, ops) for side in IR_SIDES for ops in (0, count)}
        per = {side: (runs[side, count].result() - runs[side, 0].result()) / count for side in IR_SIDES}
    for side in IR_SIDES:
        print(
            f"{side:50s} {per[side]:10,.0f} Ir/event ({per[side] / per[sess.JSONL]:.2f}x JSONL's; {count} durable "
            f"appends over {sessions} sessions, one thread)",
            flush=True,
        )
    return 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=64, help="sessions (journals or files) in the process")
    ap.add_argument("--events", type=int, default=6400, help="appends in all, per side and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the scratch sessions go (default: a temp dir)")
    ap.add_argument("--callgrind", action="store_true", help="instructions per event of each side instead")
    ap.add_argument(
        "--shared-syncs",
        action="store_true",
        help="add the floor with the sessions' syncs shared (syncfs: it flushes the whole file system "
        "the scratch directory is on, so run it on a machine otherwise idle)",
    )
    ap.add_argument("--side", choices=IR_SIDES, default=None, help=argparse.SUPPRESS)  # one run under callgrind
    ap.add_argument("--ops", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--dict-file", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.sessions < 1 or args.events < args.sessions or args.rounds < 1:
        ap.error("need --sessions >= 1, --events >= --sessions and --rounds >= 1")
    if args.side is not None:
        return ir_run(args.side, args.sessions, args.ops, args.dir, args.dict_file)
    if args.callgrind:
        return ir_report(args.sessions, args.events, args.dir)
    events = make_events(20000)
    ratios: dict[str, list[float]] = {sess.JOURNAL: [], UNCOMPRESSED: [], DICTIONARY: [], sess.RESERVED: []}
    if args.shared_syncs:
        ratios[sess.RESERVED_TOGETHER] = []
    stored: dict[str, list[float]] = {sess.JOURNAL: [], UNCOMPRESSED: [], DICTIONARY: [], sess.JSONL: []}
    base = tempfile.mkdtemp(prefix="sessions-cpu-", dir=args.dir)
    try:
        dictionary = trained_dictionary(base)
        sides = [sess.JOURNAL, UNCOMPRESSED, DICTIONARY, sess.RESERVED, sess.JSONL]
        if args.shared_syncs:
            sides.insert(-1, sess.RESERVED_TOGETHER)
        for r in range(args.rounds):
            got: dict[str, sess.Side] = {}
            for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
                kind = sess.JOURNAL if side in (UNCOMPRESSED, DICTIONARY) else side
                got[side] = sess.run_side(
                    kind,
                    base,
                    args.sessions,
                    args.events,
                    events,
                    compress=side != UNCOMPRESSED,
                    dictionary=dictionary if side == DICTIONARY else None,
                )
            for side in sides:
                ratio = ""
                if side != sess.JSONL:
                    ratios[side].append(got[side].events_per_s / got[sess.JSONL].events_per_s)
                    ratio = f"  ÷ JSONL {ratios[side][-1]:.2f}x"
                size = ""
                if side in stored:
                    stored[side].append(got[side].bytes_per_event)
                    size = f", {got[side].bytes_per_event:,.0f} B/event on disk"
                print(
                    f"round {r + 1}: {side:47s} {got[side].events_per_s:8,.0f} events/s, "
                    f"CPU {got[side].cpu_s_per_event * 1e3:.4f} ms/event "
                    f"(user {got[side].user_s_per_event * 1e6:.1f} µs, "
                    f"system {got[side].system_s_per_event * 1e6:.1f} µs){size}"
                    f"{ratio}",
                    flush=True,
                )
        for side, rs in ratios.items():
            print(
                f"{side}: median ÷ JSONL {statistics.median(rs):.2f}x (min {min(rs):.2f}, max {max(rs):.2f}) "
                f"over {len(rs)} rounds ({args.sessions} sessions, "
                f"{'native' if journal.native_available() else 'pure'} path)"
            )
        for side, bs in stored.items():
            print(
                f"{side}: {statistics.median(bs):,.0f} B/event on disk "
                f"({statistics.median(bs) / statistics.median(stored[sess.JSONL]):.2f} of JSONL's; "
                f"the dictionary file, {len(dictionary.data):,} B, linked by every session, not counted)"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
