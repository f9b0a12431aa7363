"""Instructions per operation of named engine workloads, under callgrind, for one or two checkouts.

    .venv/bin/python bench/callgrind.py                        # this checkout, every workload
    .venv/bin/python bench/callgrind.py /tmp/before .          # A and B, with B/A
    .venv/bin/python bench/callgrind.py /tmp/before . --workload append-sync,decode-scan --json

Each checkout runs in subprocesses of its own that import journal from it (``sys.path`` first,
as bench/ab.py does; a checkout without its C helper built runs the pure path, and the table
says so). A workload first prepares its data natively (the journals to read, the sessions to
open, the chain to fork), then runs under ``valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=_PyEval_CallTracing``: its set-up (interpreter start, imports, the events
made, the journal opened, a warm pass) is not counted, and its work is run through
``sys.call_tracing``, whose C function is the one counted, so only the work's instructions
are (bench/callgrind_ir.py reads the total). Python functions have no symbol callgrind could
toggle on; that one has, and nothing else of the engine calls it. Instruction counts do not
move with the machine's load (a fixed hash seed keeps dict and set layouts the same), so a
lever's B/A is read at a glance where times need rounds. Callgrind counts user-space
instructions only: an fdatasync costs its system call, not the disk; and only the thread that
runs the work is counted (none of these workloads has another).

Workloads (N: ``--count``, else the default in brackets; events from
journal/benchmark/events.py ``make_events``, seed 7; random seqs from seed 11):

- ``append-sync`` [500]: N ``append(event, durability="sync")`` from one writer, on a journal
  that has had its first appends (files created) in the set-up, after the same N appends to
  another journal (every path they take run once before it is counted).
- ``append-sync-nocompress`` [500]: the same with ``compress=False``.
- ``jsonl-append-sync`` [500]: the peer of the two above, as journal bench's JSONL side writes
  a durable event (journal/benchmark/stores.py ``dumps``, ``os.write`` of the line to a file
  opened with O_APPEND, ``os.fdatasync``); the same events. Not the engine: the baseline its
  durable append is read against.
- ``bulk`` [5000]: ``append_many`` of N events at "buffered", then one ``sync``.
- ``decode-scan`` [5000]: ``for r in j.read(): r.event`` over a journal of N events written by
  ``append_many``, after one warm scan.
- ``point-read-blocks`` [2000]: N ``get(seq).event`` at random seqs on a journal of N events
  written by ``append_many`` (records share block frames), after a warm pass over every seq.
- ``point-read-frames`` [2000]: the same on N events appended one at a time at "flush" (a frame
  each, as a runtime's durable events are stored).
- ``session-open-rw`` and ``session-open-ro`` [10]: N ``session.open(path).close()`` (or
  ``readonly=True``) of a session of 500 events and, in another run, of one of 50,000 (turns
  of three tool calls, as bench/bench_session_open.py's; the first open, which saves the
  snapshot, in the preparation); the table gives both and the ratio of the big to the small.
- ``fork`` [10]: N forks (``journal.session.fork.fork``) of the last child of a chain of 10
  forks with 4 user messages between two (as bench/bench_fork_chain.py's), at its last seq,
  each into a new directory.

The figure is Ir per operation: the counted instructions / N. With two checkouts, B/A is the
ratio of B's figure to A's: below 1 the change runs fewer instructions. ``--dir`` is where the
scratch data goes (default /dev/shm when there is one: Ir counts CPU, not the disk).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # callgrind_ir, beside this script

from callgrind_ir import callgrind_ir  # noqa: E402

# The C function sys.call_tracing runs its callable in: the only function counted.
TOGGLE_FUNCTION = "_PyEval_CallTracing"
DEFAULT_COUNTS = {
    "append-sync": 500,
    "append-sync-nocompress": 500,
    "jsonl-append-sync": 500,
    "bulk": 5000,
    "decode-scan": 5000,
    "point-read-blocks": 2000,
    "point-read-frames": 2000,
    "session-open-rw": 10,
    "session-open-ro": 10,
    "fork": 10,
}
WORKLOADS = tuple(DEFAULT_COUNTS)
SESSION_SMALL_EVENTS = 500
SESSION_BIG_EVENTS = 50_000
FORK_CHAIN_DEPTH = 10  # "a short chain"
FORK_EVENTS_BETWEEN = 4  # user messages appended between two forks of the chain
TIME = "2026-01-01T00:00:00.000Z"
EVENTS_SEED = 7
READS_SEED = 11
WARM_APPENDS = 10  # the first appends create the files: not the steady state
APPEND_EVENTS_DRAWN = 500  # an append workload's events are the first N of this many (or of N)


def data_key(workload: str) -> str:
    """The prepared data a workload reads: the two session-open workloads share theirs."""
    return "sessions" if workload.startswith("session-open-") else workload


# --- the child: runs in a subprocess whose journal is the checkout's --------------------------


def child_prepare(workload: str, count: int, data: str) -> None:
    """Write what ``workload`` reads into ``data`` (natively, before callgrind)."""
    import journal
    from journal.benchmark.events import make_events

    path = os.path.join(data, "j")
    if workload in ("decode-scan", "point-read-blocks"):
        with journal.open(path, create=True) as j:
            j.append_many(make_events(count, EVENTS_SEED), durability="buffered")
    elif workload == "point-read-frames":
        with journal.open(path, create=True) as j:
            for e in make_events(count, EVENTS_SEED):
                j.append(e, durability="flush")
    elif workload.startswith("session-open-"):
        from journal import session

        for n in (SESSION_SMALL_EVENTS, SESSION_BIG_EVENTS):
            where = os.path.join(data, f"s{n}")
            evs = list(session_events(n))
            with journal.open(where, create=True) as j:
                for k in range(0, n, 1000):
                    j.append_many(evs[k : k + 1000], durability="flush")
                j.sync()
            with session.open(where):  # the first open replays everything and saves the snapshot at close
                pass
    elif workload == "fork":
        from journal import session
        from journal.session import fork as forking

        parent, sid = os.path.join(data, "c0"), "s-root"
        session.open(parent, create=True, session_id=sid).close()  # its header, seq 1
        for d in range(1, FORK_CHAIN_DEPTH + 2):
            last = append_messages(journal, parent, sid, FORK_EVENTS_BETWEEN, f"c{d - 1}")
            if d > FORK_CHAIN_DEPTH:
                break  # the chain's last child, with its fork point: what is measured forks it
            child = os.path.join(data, f"c{d}")
            sid = forking.fork(parent, child, last, origin="bench", time=TIME).session_id
            parent = child
        with open(os.path.join(data, "fork.json"), "w") as f:
            json.dump({"parent": parent, "at_seq": last}, f)


def session_events(total: int) -> Iterator[dict[str, Any]]:
    """A session of ``total`` events (turns of three tool calls): journal bench's, from
    journal/benchmark/session_open.py of this script's own tree, loaded by its path, so both
    checkouts of an A/B open the same sessions whatever each one's benchmark helpers hold."""
    where = os.path.join(HERE, os.pardir, "journal", "benchmark", "session_open.py")
    spec = importlib.util.spec_from_file_location("_bench_session_open", where)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load the session events from {where}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    events: Iterator[dict[str, Any]] = module.events(total)
    return events


def append_messages(journal: Any, path: str, session_id: str, n: int, tag: str) -> int:
    """Append ``n`` user messages to the session at ``path`` through its journal (one synced
    batch), as bench/bench_fork_chain.py's chain does between forks; the last seq."""
    events = [
        {
            "schemaVersion": 1,
            "sessionId": session_id,
            "type": "user.message",
            "time": TIME,
            "data": {"text": f"{tag}: step {k}, please go on with the refactor of module {k}"},
        }
        for k in range(n)
    ]
    with journal.open(path) as j:
        j.append_many(events, durability="sync")
        return int(j.last_seq)


class _Closing:
    """A peer's file descriptor, closed where a workload's journal is."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


def append_events(count: int) -> list[dict[str, Any]]:
    """The events of an append workload: WARM_APPENDS, then ``count`` to count. Always a prefix of
    one sequence (make_events draws its mix for the number asked), so that N and 2N appends count
    the same first N events."""
    from journal.benchmark.events import make_events

    total = WARM_APPENDS + max(count, APPEND_EVENTS_DRAWN)
    return make_events(total, EVENTS_SEED)[: WARM_APPENDS + count]


def child_work(workload: str, count: int, data: str, variant: str, scratch: str) -> tuple[Callable[[], None], Any]:
    """The set-up of ``workload`` (not counted) and its work: a callable, and what to close after."""
    import journal

    path = os.path.join(data, "j")
    if workload in ("append-sync", "append-sync-nocompress", "bulk"):
        events = append_events(count)
        compress = workload != "append-sync-nocompress"
        j = journal.open(os.path.join(scratch, "j"), create=True, compress=compress)
        for e in events[:WARM_APPENDS]:
            j.append(e, durability="sync")
        todo = events[WARM_APPENDS:]
        if workload != "bulk":
            # The counted appends once before, on a journal of their own: a record over the C
            # call's size goes the Python way, and the first time a path runs (its symbols bound,
            # its bytecode specialized) is not the steady state either.
            with journal.open(os.path.join(scratch, "warm"), create=True, compress=compress) as warm:
                for e in todo:
                    warm.append(e, durability="sync")
        if workload == "bulk":

            def work() -> None:
                j.append_many(todo, durability="buffered")
                j.sync()

        else:

            def work() -> None:
                for e in todo:
                    j.append(e, durability="sync")

        return work, j
    if workload == "jsonl-append-sync":
        from journal.benchmark.stores import dumps

        events = append_events(count)
        fd = os.open(os.path.join(scratch, "j.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for e in events[:WARM_APPENDS]:
            os.write(fd, dumps(e) + b"\n")
            os.fdatasync(fd)
        todo = events[WARM_APPENDS:]

        def work() -> None:
            for e in todo:
                os.write(fd, dumps(e) + b"\n")
                os.fdatasync(fd)

        return work, _Closing(fd)
    if workload == "decode-scan":
        j = journal.open(path, readonly=True)

        def work() -> None:
            for r in j.read():
                r.event  # noqa: B018 - decoding is what is measured

        work()  # warm: the reader's objects
        return work, j
    if workload in ("point-read-blocks", "point-read-frames"):
        j = journal.open(path, readonly=True)
        last = j.last_seq
        rng = random.Random(READS_SEED)  # one generator: a new one per seq would give the same seq each time
        seqs = [rng.randrange(1, last + 1) for _ in range(count)]
        for q in range(1, last + 1):  # warm: the dense index of point reads, the reader's objects
            j.get(q).event  # type: ignore[union-attr]  # noqa: B018 - every seq exists

        def work() -> None:
            for q in seqs:
                j.get(q).event  # type: ignore[union-attr]  # noqa: B018 - decoding is what is measured

        return work, j
    if workload.startswith("session-open-"):
        from journal import session

        where = os.path.join(data, f"s{variant}")
        readonly = workload == "session-open-ro"
        session.open(where, readonly=readonly).close()  # warm: imports done, the files in the cache

        def work() -> None:
            for _ in range(count):
                session.open(where, readonly=readonly).close()

        return work, None
    if workload == "fork":
        from journal.session import fork as forking

        with open(os.path.join(data, "fork.json")) as f:
            spec = json.load(f)
        forking.fork(spec["parent"], os.path.join(scratch, "warm"), spec["at_seq"], origin="bench", time=TIME)

        def work() -> None:
            for k in range(count):
                forking.fork(spec["parent"], os.path.join(scratch, f"c{k}"), spec["at_seq"], origin="bench", time=TIME)

        return work, None
    raise SystemExit(f"unknown workload {workload!r}")


def child(argv: list[str]) -> int:
    """``--child prepare|measure CHECKOUT WORKLOAD COUNT DATA VARIANT SCRATCH``."""
    phase, checkout, workload, count_s, data, variant, scratch = argv
    sys.path.insert(0, checkout)  # this checkout's journal, before anything imports one
    import journal

    count = int(count_s)
    if phase == "prepare":
        child_prepare(workload, count, data)
    else:
        work, handle = child_work(workload, count, data, variant, scratch)
        sys.call_tracing(work, ())  # the counted part: callgrind toggles collection on its C function
        if handle is not None:
            handle.close()
    with open(os.path.join(scratch, "child.json"), "w") as f:
        json.dump({"path": "native" if journal.native_available() else "pure", "journal": journal.__file__}, f)
    return 0


# --- the parent -------------------------------------------------------------------------------


def describe(checkout: str) -> str:
    """The checkout's commit (and ``+changes`` when its tree differs), or its path alone."""
    try:
        head = subprocess.run(
            ["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return checkout
    return f"{checkout} ({head}{' +changes' if dirty else ''})"


def prepare(checkout: str, workload: str, count: int, data: str) -> None:
    """Write the data ``workload`` reads with ``checkout``'s journal, natively (callgrind is ~50x slower)."""
    args = ["--child", "prepare", checkout, workload, str(count), data, "", data]
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if proc.returncode != 0:
        raise SystemExit(f"preparing {workload} with {checkout} failed:\n{proc.stderr[-3000:]}")


def measure(checkout: str, workload: str, count: int, data: str, variant: str, base: str) -> tuple[int, str]:
    """Instructions counted for one run of ``workload`` with ``checkout``, and its frame path."""
    scratch = tempfile.mkdtemp(prefix="run-", dir=base)
    try:
        args = ["--child", "measure", checkout, workload, str(count), data, variant, scratch]
        try:
            ir = callgrind_ir(
                __file__,
                args,
                os.path.join(scratch, "callgrind.out"),
                ["--collect-atstart=no", f"--toggle-collect={TOGGLE_FUNCTION}"],
            )
        except subprocess.CalledProcessError as e:
            raise SystemExit(
                f"{workload} with {checkout} failed under callgrind; to see why, run:\n"
                f"  {sys.executable} {os.path.abspath(__file__)} {' '.join(args)}"
            ) from e
        with open(os.path.join(scratch, "child.json")) as f:
            path = str(json.load(f)["path"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if ir <= 0:
        raise SystemExit(
            f"callgrind counted nothing within {TOGGLE_FUNCTION}: this Python has no symbol for it "
            "(a stripped build?); run with a Python built with its symbols"
        )
    return ir, path


def rows_for(workload: str, count: int) -> list[tuple[str, str]]:
    """(row label, variant) of the runs a workload makes."""
    if workload.startswith("session-open-"):
        return [(f"{workload} {n:,} events", str(n)) for n in (SESSION_SMALL_EVENTS, SESSION_BIG_EVENTS)]
    return [(workload, "")]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "checkouts",
        nargs="*",
        metavar="CHECKOUT",
        help="A (the baseline) and B (the change); none: this one; one: that one alone",
    )
    ap.add_argument(
        "--workload",
        action="append",
        default=None,
        metavar="LIST",
        help=f"workloads, comma-separated (repeatable; default all: {', '.join(WORKLOADS)})",
    )
    ap.add_argument(
        "--count",
        type=int,
        default=None,
        metavar="N",
        help="operations of each workload (default: each its own, --help lists them)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--dir", default=None, help="scratch directory (default: /dev/shm if there is one)")
    args = ap.parse_args(argv)
    checkouts = [os.path.abspath(c) for c in args.checkouts] or [os.path.dirname(HERE)]
    if len(checkouts) > 2:
        ap.error("at most two checkouts: A and B")
    for c in checkouts:
        if not os.path.isdir(os.path.join(c, "journal")):
            ap.error(f"{c} is not a checkout of journal (no journal/ in it)")
    names = [w.strip() for item in (args.workload or [",".join(WORKLOADS)]) for w in item.split(",") if w.strip()]
    for w in names:
        if w not in DEFAULT_COUNTS:
            ap.error(f"unknown workload {w!r}; workloads: {', '.join(WORKLOADS)}")
    if args.count is not None and args.count < 1:
        ap.error("--count must be at least 1")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    base_dir = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    sides = ["A", "B"][: len(checkouts)]
    paths: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="journal-callgrind-", dir=base_dir) as base:
        prepared: set[tuple[str, str]] = set()
        for w in names:
            count = args.count or DEFAULT_COUNTS[w]
            per_side: dict[str, dict[str, float]] = {}
            labels = rows_for(w, count)
            for side, checkout in zip(sides, checkouts, strict=True):
                data = os.path.join(base, side, data_key(w))
                if (side, data_key(w)) not in prepared and w not in ("append-sync", "append-sync-nocompress", "bulk"):
                    os.makedirs(data)
                    prepare(checkout, w, count, data)
                    prepared.add((side, data_key(w)))
                os.makedirs(data, exist_ok=True)
                for label, variant in labels:
                    ir, paths[side] = measure(checkout, w, count, data, variant, base)
                    per_side.setdefault(label, {})[side] = ir / count
                    print(f"{label} ({side}): {ir / count:,.0f} Ir/op", file=sys.stderr, flush=True)
            for label, _variant in labels:
                results.append({"workload": label, "n": count, **{s: per_side[label][s] for s in sides}})
            if len(labels) == 2:  # session opens: the big session's over the small one's
                small, big = (per_side[label] for label, _ in labels)
                results.append(
                    {
                        "workload": f"{w} {SESSION_BIG_EVENTS:,}/{SESSION_SMALL_EVENTS:,}",
                        "n": count,
                        "ratio_row": True,
                        **{s: big[s] / small[s] for s in sides},
                    }
                )
    for r in results:
        if len(sides) == 2:
            r["B/A"] = r["B"] / r["A"]
    report = {
        "checkouts": {s: {"checkout": describe(c), "path": paths[s]} for s, c in zip(sides, checkouts, strict=True)},
        "unit": "Ir per operation (rows ending N/M: the ratio of the two rows above)",
        "results": results,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(table(report))
    return 0


def table(report: dict[str, Any]) -> str:
    """The report as text: the checkouts, then a Markdown table."""
    sides = list(report["checkouts"])
    lines = [f"{s}: {report['checkouts'][s]['checkout']}, {report['checkouts'][s]['path']} path" for s in sides]
    lines.append("")
    lines.append(
        "| workload | N | " + " | ".join(f"{s} Ir/op" for s in sides) + (" | B/A |" if len(sides) == 2 else " |")
    )
    lines.append("|---|---:|" + "---:|" * (len(sides) + (len(sides) == 2)))
    for r in report["results"]:
        if r.get("ratio_row"):
            cells = [f"{r[s]:.3f}x" for s in sides]
        else:
            cells = [f"{r[s]:,.0f}" for s in sides]
        if len(sides) == 2:
            cells.append(f"{r['B/A']:.3f}")
        lines.append(f"| {r['workload']} | {r['n']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
