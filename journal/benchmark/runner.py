"""Run every workload against journal and the peers, alternating, and report medians and ratios.

Each workload runs ``repeats`` rounds; in every round each store runs once, in an order that
rotates from round to round, so that a noisy moment on a shared machine falls on different
stores. A ratio (journal over a peer) is computed inside each round from that round's two
figures, and the median of those per-round ratios is reported next to the median figures.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import journal
from journal.benchmark import session_open as so
from journal.benchmark import sessions as sess
from journal.benchmark import stores as st
from journal.benchmark.events import DEFAULT_MIX, MIXES, Event, file_events, make_mix, session_files, size_summary
from journal.benchmark.stores import JournalStore, Store
from journal.engine import native
from journal.errors import install_line

THREADS = 16
ONE_WRITER_BASELINE = "JSONL write+fdatasync, one writer (baseline)"
FLOOR = st.GroupCommitFloor.name
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


SESSION_COUNTS = (64, 1000)  # the many-sessions workload (journal/benchmark/sessions.py), full mode
FORK_CHAIN_DEPTH = 10_000  # the chain: the 10,000th fork against the first (--fork-chain)
FORK_CHAIN_SCRIPT = os.path.join("bench", "bench_fork_chain.py")
FORK_CHAIN_TIMEOUT_S = 3 * 3600
# The importer of each folder of the real session files (../shared/corpus); another folder's
# .jsonl files are imported as plain event logs.
CORPUS_FORMATS = {"claude-code": "claude", "codex-rollout": "codex", "pi-session": "pi"}
BYTES_TARGET_MAX = 0.30
BYTES_GOAL = 0.25
DICTIONARY_TRY_BYTES_MIN = 1024  # the smallest store dictionary the real-files split tries to train


@dataclass(frozen=True)
class Plan:
    """How much work each workload does; --quick shrinks everything to finish within a minute."""

    repeats: int
    sync_events: int
    thread_events: int
    bulk_events: int
    random_reads: int
    recover_sizes: tuple[int, ...]
    recover_repeats: int
    session_counts: tuple[int, ...] = SESSION_COUNTS
    session_events: int = 4000  # appends in all, per count and side
    mixes: tuple[str, ...] = (DEFAULT_MIX,)  # the event mixes the write and read workloads run on
    open_sizes: tuple[int, int] = (so.SMALL_EVENTS, so.BIG_EVENTS)  # the session-open workload
    fork_chain_depth: int = 0  # 0: the chain is not built (minutes); its target says "not measured"

    @staticmethod
    def full() -> Plan:
        # Three rounds, as issue 33 asks: every target shows the median and the spread of three.
        return Plan(3, 2000, 4000, 20000, 2000, (1 * MiB, 1 * GiB), 7)

    @staticmethod
    def quick() -> Plan:
        return Plan(3, 150, 480, 2000, 200, (1 * MiB,), 3, (64,), 256)


def workload_name(base: str, mix: str) -> str:
    """The name of a workload run on ``mix``: the default mix's names are the plain ones."""
    return base if mix == DEFAULT_MIX else f"{base}, {mix} mix"


def base_workload(name: str) -> str:
    """The workload a (possibly mix-suffixed) name is a run of."""
    for mix in MIXES:
        tail = f", {mix} mix"
        if mix != DEFAULT_MIX and name.endswith(tail):
            return name[: -len(tail)]
    return name


@dataclass(frozen=True)
class Target:
    text: str
    need: str
    value: float | None  # the median of the per-round ratios; None: not measured
    spread: tuple[float, float] | None  # the lowest and highest per-round ratio
    ok: bool | None


@dataclass
class Row:
    workload: str
    store: str
    unit: str  # "events/s", "MB/s", "ms", "bytes/event"
    values: list[float] = field(default_factory=list)
    durable: bool | None = None
    note: str = ""
    higher_is_better: bool = True

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


@dataclass
class Report:
    plan: Plan
    quick: bool
    machine: dict[str, str]
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    event_sizes: dict[str, dict[str, int]] = field(default_factory=dict)  # per mix
    checks: dict[str, bool] = field(default_factory=dict)  # conditions a target holds under

    def row(self, workload: str, store: str) -> Row | None:
        return next((r for r in self.rows if r.workload == workload and r.store == store), None)

    def ratios(self, workload: str, a: str, b: str) -> list[float]:
        """a's figure divided by b's, round by round (each pair from the same round)."""
        ra, rb = self.row(workload, a), self.row(workload, b)
        if ra is None or rb is None:
            return []
        return [x / y for x, y in zip(ra.values, rb.values, strict=False) if y > 0]

    def ratio(self, workload: str, a: str, b: str) -> float | None:
        """Median over rounds of a's figure divided by b's, each pair from the same round."""
        got = self.ratios(workload, a, b)
        return statistics.median(got) if got else None

    def advantage(self, workload: str, a: str, b: str) -> float | None:
        """How many times better ``a`` is than ``b`` (> 1: ``a`` is better), whatever the unit."""
        raw = self.ratio(workload, a, b)
        row = self.row(workload, a)
        if raw is None or row is None:
            return None
        return raw if row.higher_is_better else (1 / raw if raw else None)


def _fs_type(path: str) -> str:
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(base: str) -> dict[str, str]:
    peers = []
    for mod in ("lmdb", "rocksdict"):
        try:
            peers.append(f"{mod} {importlib.metadata.version(mod)}")
        except importlib.metadata.PackageNotFoundError:
            peers.append(f"{mod} missing")
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpu": f"{_cpu_model()}, {os.cpu_count()} cores",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "path": native.native_status(),
        "frame path": "native" if journal.native_available() else "pure Python",
        "os": platform.platform(),
        "disk": f"{base} ({_fs_type(os.path.realpath(base))})",
        "peers": f"sqlite {sqlite3.sqlite_version}, " + ", ".join(peers),
        "load at start": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


class Timed:
    """Wall time and CPU time (user + system, every thread of the process) of one timed section
    of ``ops`` operations: the rate is what the tables show, the CPU per operation is what bounds
    a Python store under the GIL once the disk stops being the limit."""

    def __init__(self, ops: float) -> None:
        self.ops = ops
        self.wall_s = self.cpu_s = 0.0

    def __enter__(self) -> Timed:
        self._t0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = time.process_time() - self._c0

    @property
    def rate(self) -> float:
        return self.ops / self.wall_s

    @property
    def cpu_ms_per_op(self) -> float:
        return self.cpu_s / self.ops * 1e3


def cpu_row(workload: str, store: str) -> Row:
    return Row(f"CPU per event, {workload}", store, "ms/event", higher_is_better=False)


class Bench:
    def __init__(
        self, plan: Plan, base: str, quick: bool, log: Callable[[str], None], corpus: str | None = None
    ) -> None:
        self.plan = plan
        self.corpus_root = corpus  # the real session files: the corpus mix, and the bytes workload
        self.base = base
        self.log = log
        self.report = Report(plan, quick, machine_info(base))
        self._n = 0
        self.mix = ""
        self.events: list[Event] = []
        self._events: dict[str, list[Event]] = {}
        self.use_mix(plan.mixes[0])

    def use_mix(self, mix: str) -> None:
        """Run the next workloads on the event mix ``mix`` (events.MIXES)."""
        p = self.plan
        self.mix = mix
        if mix not in self._events:
            count = max(p.sync_events, p.thread_events, p.bulk_events, p.session_events)
            self._events[mix] = make_mix(mix, count, self.corpus_root)
        self.events = self._events[mix]
        sizes = [len(st.dumps(e)) for e in self.events[: p.bulk_events]]
        self.report.event_sizes[mix] = {
            **size_summary(sizes),
            "kinds": len({str(e.get("type")) for e in self.events[: p.bulk_events]}),
        }

    def w(self, base: str) -> str:
        """The name of workload ``base`` on the current mix."""
        return workload_name(base, self.mix)

    def path(self, tag: str) -> str:
        self._n += 1
        return os.path.join(self.base, f"{self._n:04d}-{tag.replace(' ', '_').replace('=', '')}")

    def usable(self, stores: list[Store]) -> list[Store]:
        out = []
        for s in stores:
            if s.available():
                out.append(s)
            else:
                self.report.skipped[s.name] = f"package {s.package!r} not installed ({install_line('bench')})"
        return out

    def rounds(
        self, workload: str, stores: list[Store], measure: Callable[[Store, str], Timed], unit: str, cpu: bool = False
    ) -> None:
        """``repeats`` rounds of ``measure`` over every store, in an order that rotates; with
        ``cpu``, each store's CPU per operation is kept too (a row "CPU per event, <workload>")."""
        rows = {s.name: Row(workload, s.name, unit, durable=s.durable) for s in stores}
        cpu_rows = {s.name: cpu_row(workload, s.name) for s in stores} if cpu else {}
        self.report.rows.extend([*rows.values(), *cpu_rows.values()])
        for rep in range(self.plan.repeats):
            k = rep % len(stores)
            for s in stores[k:] + stores[:k]:
                path = self.path(s.name)
                try:
                    got = measure(s, path)
                    rows[s.name].values.append(got.rate)
                    if cpu:
                        cpu_rows[s.name].values.append(got.cpu_ms_per_op)
                finally:
                    s.close()
                    st.remove(path)
        self.log(f"  {workload}: " + ", ".join(f"{n} {r.median:,.0f}" for n, r in rows.items()))

    # --- write workloads ----------------------------------------------------------------------

    def sessions(self) -> None:
        """N sessions in one process, each durable per event: a journal each against a JSONL
        file each (journal/benchmark/sessions.py), sides alternating, with CPU per event."""
        for n in self.plan.session_counts:
            workload = self.w(f"{n} sessions in one process, durable per event")
            rate = {name: Row(workload, name, "events/s", durable=True) for name in (sess.JOURNAL, sess.JSONL)}
            cpu = {name: cpu_row(workload, name) for name in (sess.JOURNAL, sess.JSONL)}
            self.report.rows.extend([*rate.values(), *cpu.values()])
            for rep in range(self.plan.repeats):
                order = [sess.JOURNAL, sess.JSONL] if rep % 2 == 0 else [sess.JSONL, sess.JOURNAL]
                for name in order:
                    got = sess.run_side(name, self.base, n, self.plan.session_events, self.events)
                    rate[name].values.append(got.events_per_s)
                    cpu[name].values.append(got.cpu_s_per_event * 1e3)
            self.log(f"  {workload}: " + ", ".join(f"{k} {r.median:,.0f}" for k, r in rate.items()))

    def one_writer(self) -> None:
        events = self.events[: self.plan.sync_events]

        def measure(s: Store, path: str) -> Timed:
            s.open(path)
            for e in events[:10]:  # the first appends create files; not the steady state
                s.append(e)
            with Timed(len(events)) as t:
                for e in events:
                    s.append(e)
            return t

        stores = st.all_stores()
        stores.insert(1, JournalStore("sync", compress=False))
        self.rounds(self.w("1 writer, durable per event"), self.usable(stores), measure, "events/s", cpu=True)

    def threads(self) -> None:
        events = self.events[: self.plan.thread_events]

        def measure(s: Store, path: str) -> Timed:
            s.open(path)
            chunks = list(st.iter_chunks(events, 1 if s.name == ONE_WRITER_BASELINE else THREADS))
            barrier = threading.Barrier(len(chunks) + 1)
            errors: list[BaseException] = []

            def worker(chunk: list[Event]) -> None:
                barrier.wait()
                try:
                    for e in chunk:
                        s.append(e)
                except BaseException as exc:  # reported after the join
                    errors.append(exc)

            ts = [threading.Thread(target=worker, args=(c,)) for c in chunks]
            for t in ts:
                t.start()
            barrier.wait()
            with Timed(len(events)) as timed:
                for t in ts:
                    t.join()
            if errors:
                raise errors[0]
            return timed

        # In the same rounds: the single JSONL writer the core engine's target is set against,
        # and the least a Python group commit can do (what the GIL allows here).
        baseline = st.JsonlStore(sync=True)
        baseline.name = ONE_WRITER_BASELINE
        stores = [*st.all_stores(), baseline, st.GroupCommitFloor()]
        self.rounds(self.w(f"{THREADS} threads, durable per event"), self.usable(stores), measure, "events/s")

    def bulk(self) -> None:
        events = self.events[: self.plan.bulk_events]

        class JournalMany(JournalStore):
            def __init__(self) -> None:
                super().__init__("buffered")
                self.name = "journal append_many"

        bulk_stores: list[Store] = [
            JournalStore("buffered"),
            JournalMany(),
            JournalStore("buffered", compress=False),
            st.JsonlStore(sync=False),
            st.SqliteStore("FULL"),
            st.LmdbStore(),
            st.RocksStore(sync=False),
        ]
        names = {
            "journal buffered": "journal append(buffered) + sync()",
            "journal append_many": "journal append_many(buffered) + sync()",
            "journal buffered, compress=False": "journal append(buffered) + sync(), compress=False",
            "JSONL buffered": "JSONL buffered + fdatasync",
            "SQLite WAL synchronous=FULL": "SQLite one transaction (FULL)",
            "LMDB sync": "LMDB one transaction (sync)",
            "RocksDB sync=False": "RocksDB sync=False + flush_wal(sync)",
        }
        for s in bulk_stores:
            s.name = names[s.name]
            s.durable = True

        def measure(s: Store, path: str) -> Timed:
            s.open(path)
            with Timed(len(events)) as t:
                if isinstance(s, JournalMany):
                    s.append_many(events)
                else:
                    for e in events:
                        s.append_buffered(e)
                s.sync()
            return t

        self.rounds(self.w("bulk append, one sync at the end"), self.usable(bulk_stores), measure, "events/s", cpu=True)

    # --- read workloads over one data set per store ---------------------------------------------

    def reads(self) -> None:
        events = self.events[: self.plan.bulk_events]
        read_stores: list[Store] = [
            JournalStore("sync"),
            JournalStore("sync", compress=False),
            # The same records a frame each, as records appended one at a time are stored: what
            # block frames (the bulk-written data of the default store) change for each read.
            JournalStore("sync", block_bytes=0),
            # The default store's records read with the cache of decoded blocks off: what a read
            # of a block not read before costs (the first read of each, or a data set larger
            # than journal.BLOCK_CACHE_BYTES_DEFAULT).
            JournalStore("sync", block_cache=False),
            st.JsonlStore(sync=False),
            st.SqliteStore("FULL"),
            st.LmdbStore(),
            st.RocksStore(sync=False),
            st.JsonlOrjsonStore(),
        ]
        usable = self.usable(read_stores)
        paths: dict[str, str] = {}
        for s in usable:
            p = self.path(s.name + "-data")
            paths[s.name] = p
            s.open(p)
            for e in events:
                s.append_buffered(e)
            s.sync()
            s.close()
            if s.decode_only:
                continue  # the same file as another store's: no row of its own
            size = s.files(p)  # at rest: journal's reserved space is cut off, SQLite's WAL checkpointed
            self.report.rows.append(
                Row(
                    self.w("bytes on disk per event"),
                    s.name,
                    "bytes/event",
                    [size / len(events)],
                    higher_is_better=False,
                )
            )
        rng = random.Random(11)
        seqs = [rng.randrange(1, len(events) + 1) for _ in range(self.plan.random_reads)]

        def scan(s: Store, path: str) -> Timed:
            s.open_read(path)
            with Timed(0) as t:
                t.ops = s.scan_bytes() / 1e6  # MB/s
            return t

        def decode(s: Store, path: str) -> Timed:
            s.open_read(path)
            with Timed(0) as t:
                t.ops = s.scan_decode()
            assert t.ops == len(events), (s.name, t.ops)
            return t

        def get(s: Store, path: str) -> Timed:
            s.open_read(path)
            # Steady state on both sides: one untimed pass of the same reads builds JSONL's line
            # offset index and journal's dense offset index (which a handle builds once its point
            # reads into a segment have cost one scan of it) and warms the page cache.
            for q in seqs:
                s.get(q)
            with Timed(len(seqs)) as t:
                for q in seqs:
                    s.get(q)
            return t

        try:
            for workload, fn, unit in (
                (self.w("full scan, checksums verified where the store has them"), scan, "MB/s"),
                (self.w("decode scan (every record to a dict)"), decode, "events/s"),
                (self.w("random reads by seq"), get, "reads/s"),
            ):
                these = [s for s in usable if fn is decode or not s.decode_only]
                rows = {s.name: Row(workload, s.name, unit) for s in these}
                cpu_rows = {s.name: cpu_row(workload, s.name) for s in these} if fn is not scan else {}
                self.report.rows.extend([*rows.values(), *cpu_rows.values()])
                for rep in range(self.plan.repeats):
                    k = rep % len(these)
                    for s in these[k:] + these[:k]:
                        try:
                            got = fn(s, paths[s.name])
                            rows[s.name].values.append(got.rate)
                            if s.name in cpu_rows:
                                cpu_rows[s.name].values.append(got.cpu_ms_per_op)
                        finally:
                            s.close()
                self.log(f"  {workload}: " + ", ".join(f"{n} {r.median:,.0f}" for n, r in rows.items()))
        finally:
            for p in paths.values():
                st.remove(p)

    # --- open and recover -------------------------------------------------------------------------

    def corpus(self, root: str) -> None:
        """Bytes on disk of the real session files (read in place, never copied): each file's
        events in a journal of its own against the same events as compact JSONL, a file each,
        every file counted once however many names it has (dir_bytes). Every event must read back
        JSON-equal, and every file imported with ``journal import`` must export byte for byte:
        the bytes target holds only with both (Report.checks)."""
        files = session_files(root)
        if not files:
            self.report.notes.append(f"no session files under {root}: the real-file size rows were skipped")
            return
        w = "bytes on disk per event, real session files"
        per_file = [file_events(f) for f in files]
        count = sum(len(e) for e in per_file)
        made: list[str] = []
        try:
            stores: list[Store] = [JournalStore("sync"), JournalStore("sync", block_bytes=0), st.JsonlStore(sync=False)]
            for s in stores:
                where = self.path(s.name + "-corpus")
                made.append(where)
                os.makedirs(where)
                paths = [os.path.join(where, f"f{k}") for k in range(len(files))]
                for path, events in zip(paths, per_file, strict=True):
                    s.open(path)
                    for e in events:
                        s.append_buffered(e)
                    s.sync()
                    s.close()
                if isinstance(s, JournalStore):
                    self.report.checks[f"{s.name}: every event of the real files reads back JSON-equal"] = all(
                        _reads_back(path, events) for path, events in zip(paths, per_file, strict=True)
                    )
                size = st.dir_bytes(*paths)  # at rest: journal's reserved space is cut off at close
                note = f"{count} events in {len(files)} files"
                self.report.rows.append(
                    Row(w, s.name, "bytes/event", [size / count], higher_is_better=False, note=note)
                )
            self._imported(files, made)
            self._dictionary_split(files, made)
        finally:
            for p in made:
                st.remove(p)
        self.log(f"  {w}: journal/JSONL {self.report.ratio(w, 'journal sync', 'JSONL buffered'):.2f}")

    def _imported(self, files: list[str], made: list[str]) -> None:
        """Each real file through ``journal import`` (its format by folder, CORPUS_FORMATS; a
        damaged line kept verbatim, as --skip-bad does) and back through ``journal export``: its
        bytes on disk against the file's, and whether every exported file is the source byte
        for byte."""
        from journal.session.importers import export_journal, import_file, write_export

        where = self.path("corpus-import")
        made.append(where)
        os.makedirs(where)
        dests, exact = [], True
        for k, src in enumerate(files):
            dest = os.path.join(where, f"f{k}")
            import_file(CORPUS_FORMATS.get(os.path.basename(os.path.dirname(src)), "jsonl"), src, dest, skip_bad=True)
            lines, final_newline, _ = export_journal(dest)
            out = os.path.join(where, f"f{k}.exported")
            write_export(out, lines, final_newline)
            with open(src, "rb") as a, open(out, "rb") as b:
                exact = exact and a.read() == b.read()
            os.unlink(out)
            dests.append(dest)
        self.report.checks["journal import of every real file exports it byte for byte"] = exact
        w = "bytes on disk, real session files imported with journal import"
        size, source = st.dir_bytes(*dests), st.dir_bytes(*files)
        self.report.rows.append(Row(w, "journal import", "bytes", [size], higher_is_better=False))
        self.report.rows.append(Row(w, "the source files", "bytes", [source], higher_is_better=False))

    def _dictionary_split(self, files: list[str], made: list[str]) -> None:
        """With a store-wide dictionary (journal.session.dictionaries, when this build has it):
        trained on the sessions of one half of the real files, in a session store, and measured
        on the other half's journals opened with the store's dictionary; then the halves swapped.
        Both are reported. Without it, the split is said and nothing is measured."""
        halves = corpus_halves(files)
        train = dictionary_trainer()
        names = [", ".join(os.path.relpath(f, os.path.dirname(os.path.dirname(f))) for f in h) for h in halves]
        said = f"half A = {names[0]}; half B = {names[1]} (a file that is a byte prefix of another stays with it)"
        if train is None:
            self.report.notes.append(
                "Bytes with a store-wide dictionary: not measured, this build has no "
                f"journal.session.dictionaries.train_store_dictionary. The split it would use: {said}."
            )
            return
        w = "bytes on disk per event, real session files, store dictionary"
        trained: list[str] = []
        for label, (fit, measure) in (
            ("trained on A, measured on B", halves),
            ("trained on B, measured on A", halves[::-1]),
        ):
            store_root = self.path("corpus-dict")
            made.append(store_root)
            try:
                got = train(store_root, [file_events(f) for f in fit])
            except Exception as exc:  # a store that cannot train on this half: said, never a crash
                self.report.notes.append(f"Store dictionary {label}: {exc}; not measured")
                continue
            # What the store does: a store that declined a dictionary writes the measured half
            # without one, and the row holds those bytes.
            d, why = got if isinstance(got, tuple) else (got, "")
            if d is None:
                self.report.notes.append(
                    f"Store dictionary {label}: the training stored none"
                    + (f" ({why})" if why else "")
                    + "; the row's bytes are the store's without a dictionary"
                )
            paths, plain, count, jsonl = [], [], 0, 0
            for k, src in enumerate(measure):
                events = file_events(src)
                paths.append(os.path.join(store_root, "measured", f"f{k}"))
                _journal_of(paths[-1], events, d)
                plain.append(os.path.join(store_root, "plain", f"f{k}"))
                _journal_of(plain[-1], events)
                count += len(events)
                jsonl += sum(len(st.dumps(e)) + 1 for e in events)
            if count == 0:
                continue  # a half of no events (every file went to the other): no row
            # Each journal holds the dictionary as a hard link to the store's file: counted once.
            for store, size in (
                (f"journal, {label}", st.dir_bytes(*paths)),
                (f"journal without a dictionary, {label.split(', ')[1]}", st.dir_bytes(*plain)),
                (f"JSONL, {label.split(', ')[1]}", jsonl),
            ):
                self.report.rows.append(Row(w, store, "bytes/event", [size / count], higher_is_better=False))
            trained.append(label)
        if trained:
            self.report.notes.append(f"Store dictionary split: {said}.")

    # --- opening a session, and a chain of forks ---------------------------------------------------

    def session_open(self) -> None:
        """Opening a session of ``open_sizes[0]`` events against one of ``open_sizes[1]``, read-write
        and read-only (and the journal's own opens under them), built and opened as
        bench/bench_session_open.py does (journal/benchmark/session_open.py). Each round's figure
        of an open is the median of OPENS_PER_FIGURE opens; the sizes alternate in order."""
        small, big = self.plan.open_sizes
        w = f"open a session, {small:,} vs {big:,} events"
        paths = {n: self.path(f"open-{n}") for n in (small, big)}
        try:
            for n, p in paths.items():
                so.build(p, n)
            rows = {
                (name, n): Row(w, f"{name}, {n:,} events", "ms", higher_is_better=False)
                for name in so.OPENS
                for n in paths
            }
            self.report.rows.extend(rows.values())
            for rep in range(self.plan.repeats):
                for name, fn in so.OPENS.items():
                    for n in (small, big) if rep % 2 == 0 else (big, small):
                        rows[(name, n)].values.append(so.timed(lambda fn=fn, p=paths[n]: fn(p)) * 1000)  # type: ignore[misc]
        finally:
            for p in paths.values():
                st.remove(p)
        self.log(f"  {w}: " + ", ".join(f"{r.store} {r.median:.2f} ms" for r in rows.values()))

    def fork_chain(self, depth: int) -> None:
        """bench/bench_fork_chain.py (a checkout's), run as it is with ``--depth depth --runs
        repeats``; its medians and spreads of the last fork over the first are kept as rows."""
        script = os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), FORK_CHAIN_SCRIPT
        )
        if not os.path.exists(script):
            self.report.notes.append(f"--fork-chain needs a checkout of journal ({FORK_CHAIN_SCRIPT} is not here)")
            return
        cmd = [sys.executable, script, "--depth", str(depth), "--runs", str(self.plan.repeats), "--dir", self.base]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FORK_CHAIN_TIMEOUT_S)
        if proc.returncode not in (0, 1):  # 1: a ratio over its target, which the table says too
            raise RuntimeError(f"{FORK_CHAIN_SCRIPT} failed: {proc.stderr[-2000:]}")
        w = f"fork chain of {depth:,}: the last fork over the first"
        for key, store in FORK_CHAIN_FIGURES.items():
            values = parse_fork_chain(proc.stdout, key)
            self.report.rows.append(Row(w, store, "x", values, higher_is_better=False, note=f"{len(values)} runs"))
        self.log(f"  {w}: {time.perf_counter() - t0:.0f} s")

    def _history(self, path: str, total: int, live: int) -> None:
        """A journal of ``total`` bytes whose live segment holds ``live`` bytes.

        Written fast: big append_many batches at "flush", compression on as always. Recovery
        reads the live segment only, so the live segment is held at the same size across
        history sizes and the difference measured is what history itself costs.
        """
        big, small = self.events[:2000], self.events[:100]

        def segments() -> list[str]:
            return sorted(n for n in os.listdir(path) if n.endswith(".seg"))

        # No reserved space: the loops below size the files while the journal is open.
        with journal.open(path, create=True, reserve_bytes=0) as j:
            while st.dir_bytes(path) < total - live - 4 * MiB:
                j.append_many(big, durability="flush")
            if total > live:
                count = len(segments())
                while len(segments()) == count:  # fill the segment until it rolls over
                    j.append_many(small, durability="flush")
            while os.path.getsize(os.path.join(path, segments()[-1])) < live:
                j.append_many(small if live < 8 * MiB else big, durability="flush")

    def recover(self) -> None:
        cases = [(size, MiB) for size in self.plan.recover_sizes]
        if not self.report.quick:
            cases.append((63 * MiB, 63 * MiB))  # the fullest live segment at the default segment size
        made: list[tuple[str, Row]] = []
        try:
            for total, live in cases:
                path = self.path(f"recover-{total}")
                label = f"{total // GiB} GiB" if total >= GiB else f"{total // MiB} MiB"
                t_gen = time.perf_counter()
                self._history(path, total, live)
                gen_s = time.perf_counter() - t_gen
                segs = sum(1 for n in os.listdir(path) if n.endswith(".seg"))
                row = Row(
                    "open + recover a torn tail",
                    f"journal, {label} of history, live segment {live // MiB} MiB",
                    "ms",
                    higher_is_better=False,
                    note=f"{st.dir_bytes(path) / MiB:,.1f} MiB in {segs} segments, written in {gen_s:.1f} s",
                )
                self.report.rows.append(row)
                made.append((path, row))
            # The journals take turns, round after round, like the stores of the other workloads.
            for rep in range(self.plan.recover_repeats):
                k = rep % len(made)
                for path, row in made[k:] + made[:k]:
                    row.values.append(self._open_torn(path))
        finally:
            for path, _row in made:
                st.remove(path)
        for _path, row in made:
            self.log(f"  open + recover, {row.store}: {row.median:.2f} ms ({row.note})")

    def _open_torn(self, path: str) -> float:
        """Tear the last frame of the live segment, then time opening (and so recovering) it, in ms."""
        live_path = os.path.join(path, max(n for n in os.listdir(path) if n.endswith(".seg")))
        with journal.open(path) as j:
            before = os.path.getsize(live_path)
            j.append(self.events[3], durability="flush")
        after = os.path.getsize(live_path)  # after close: the reserved space is cut off again
        # A torn write: the last frame reached the disk only halfway.
        os.truncate(live_path, before + (after - before) // 2)
        t0 = time.perf_counter()
        j = journal.open(path)
        dt = time.perf_counter() - t0
        torn = j.recovery.tail
        j.close()
        if torn != "torn":
            raise RuntimeError(f"recovery saw a {torn} tail, not the torn one made for it")
        return dt * 1000


# --- the real files' helpers, and the fork chain's output ------------------------------------------


def _journal_of(path: str, events: list[Event], dictionary: Any = None) -> None:
    """A journal at ``path`` holding ``events``, written as the bytes workload writes (buffered),
    compressed with ``dictionary`` (a store's, journal.engine.dictionary.Dictionary) if one."""
    options: dict[str, Any] = {} if dictionary is None else {"dictionary": dictionary}
    with journal.open(path, create=True, **options) as j:
        for e in events:
            j.append(e, durability="buffered")
        j.sync()


def _reads_back(path: str, events: list[Event]) -> bool:
    """Whether the journal at ``path`` holds exactly ``events``, each JSON-equal, in order."""
    with journal.open(path, readonly=True) as j:
        got = [rec.event for rec in j.read()]
    return len(got) == len(events) and all(
        json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) for a, b in zip(got, events, strict=True)
    )


def corpus_halves(files: list[str]) -> tuple[list[str], list[str]]:
    """The real files in two halves of as many files each as can be, for a dictionary trained
    on one and measured on the other. A file that is a byte prefix of another (the same live
    session read twice) goes with it, or the half measured would hold text the dictionary was
    trained on. The groups, largest first, go to the half holding fewer files (fewer bytes on a
    tie), so that each half holds big and small sessions."""
    data: dict[str, bytes] = {}
    for f in files:
        with open(f, "rb") as fh:
            data[f] = fh.read()
    groups: list[list[str]] = []
    for f in sorted(files, key=lambda x: len(data[x])):
        home = next((g for g in groups if data[g[0]].startswith(data[f]) or data[f].startswith(data[g[0]])), None)
        if home is None:
            groups.append([f])
        else:
            home.append(f)
    halves: tuple[list[str], list[str]] = ([], [])
    for g in sorted(groups, key=lambda g: (-sum(len(data[f]) for f in g), g)):
        home_half = min(halves, key=lambda h: (len(h), sum(len(data[f]) for f in h)))
        home_half.extend(g)
    return sorted(halves[0]), sorted(halves[1])


def dictionary_trainer() -> Callable[[str, list[list[Event]]], Any] | None:
    """A function that makes a session store at a root, writes each list of events into a
    session of it, trains the store's dictionary with
    ``journal.session.dictionaries.train_store_dictionary`` and returns (the store's current
    dictionary, None if the training stored none; why the training stored it or not); None when
    this build has no such module."""
    try:
        mod = importlib.import_module("journal.session.dictionaries")
    except ModuleNotFoundError:
        return None
    fn = getattr(mod, "train_store_dictionary", None)
    if not callable(fn):
        return None

    def train(root: str, sessions: list[list[Event]]) -> Any:
        from journal.session.store import SessionStore

        store = SessionStore(root)
        for events in sessions:
            s = store.create()
            path = store.journal_path(s.session_id)
            s.close()
            with journal.open(path) as j:  # the file's own events, as the bytes workload stores them
                for e in events:
                    j.append(e, durability="buffered")
                j.sync()
        # The store's default size, or the largest a half this small can train (a training's
        # sample must be some times its dictionary): halved while the store says the records
        # are too few.
        size = getattr(mod, "DICTIONARY_SIZE_BYTES_DEFAULT", 32 * KiB)
        too_few = getattr(mod, "NotEnoughRecordsError", None)
        while True:
            try:
                rep = fn(store, size_bytes=size)
                break
            except Exception as exc:
                if too_few is None or not isinstance(exc, too_few) or size <= DICTIONARY_TRY_BYTES_MIN:
                    raise
                size //= 2
        return store.current_dictionary(), str(getattr(rep, "reason", ""))

    return train


# The fork chain's figures (bench/bench_fork_chain.py): its name in a run's line -> the row's store.
FORK_CHAIN_FIGURES = {
    "time x": "time of the last fork over the first (made alternately)",
    "fork B x": "new bytes of the last fork over the first",
    "bytes x": "mean new bytes, last window over the first (merges counted)",
}
_FORK_CHAIN_RUN = {
    "time x": re.compile(r"interleaved: time ([0-9.]+)x"),
    "fork B x": re.compile(r"interleaved: time [0-9.]+x, bytes ([0-9.]+)x"),
    "bytes x": re.compile(r"new bytes [0-9,]+ -> [0-9,]+ \(([0-9.]+)x\)"),
}


def parse_fork_chain(stdout: str, key: str) -> list[float]:
    """The figure ``key`` of every run of bench/bench_fork_chain.py's output, in run order."""
    pattern = _FORK_CHAIN_RUN[key]
    out = []
    for line in stdout.splitlines():
        if line.startswith("run "):
            m = pattern.search(line)
            if m is not None:
                out.append(float(m.group(1)))
    return out


def run(plan: Plan, quick: bool, base: str | None, log: Callable[[str], None], corpus: str | None = None) -> Report:
    owned = base is None
    root = base or tempfile.mkdtemp(prefix="journal-bench-")
    os.makedirs(root, exist_ok=True)
    bench = Bench(plan, root, quick, log, corpus)
    log("machine: " + "; ".join(f"{k}: {v}" for k, v in bench.report.machine.items()))
    try:
        for mix in plan.mixes:
            bench.use_mix(mix)
            if len(plan.mixes) > 1:
                log(f"event mix {mix}:")
            for step in (bench.one_writer, bench.threads, bench.sessions, bench.bulk, bench.reads):
                step()
        bench.use_mix(plan.mixes[0])
        bench.recover()
        bench.session_open()
        if corpus is not None:
            bench.corpus(corpus)
        if plan.fork_chain_depth:
            bench.fork_chain(plan.fork_chain_depth)
    finally:
        if owned:
            st.remove(root)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    bench.report.machine["load at end"] = f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    evaluate(bench.report)
    return bench.report


def evaluate(r: Report) -> None:
    """The issues' targets, each with the median of its per-round ratios, their spread and a
    verdict (None: not measured). The first issue's targets are checked on the first mix; the
    speed issue's and issue 33's on every mix run, then those that use no mix."""

    def add(
        text: str,
        got: list[float] | float | None,
        need: float,
        unit: str = "x",
        lower: bool = False,
        goal: str = "",
        holds: bool = True,
    ) -> None:
        values = [got] if isinstance(got, float) else (got or [])
        value = statistics.median(values) if values else None
        spread = (min(values), max(values)) if values else None
        ok = None if value is None else (value <= need if lower else value >= need) and holds
        r.targets.append(Target(text, f"{'<=' if lower else '>='} {need:g}{unit}{goal}", value, spread, ok))

    first = r.plan.mixes[0]
    jb = "journal append(buffered) + sync()"
    ws, wd, wdisk = (
        "full scan, checksums verified where the store has them",
        "decode scan (every record to a dict)",
        "bytes on disk per event",
    )
    w1, w16, wb = (
        workload_name("1 writer, durable per event", first),
        workload_name(f"{THREADS} threads, durable per event", first),
        workload_name("bulk append, one sync at the end", first),
    )
    add("1 writer sync per event vs JSONL write+fdatasync", r.ratios(w1, "journal sync", "JSONL write+fdatasync"), 0.9)
    add(
        "1 writer sync per event vs SQLite WAL FULL (ahead)",
        r.ratios(w1, "journal sync", "SQLite WAL synchronous=FULL"),
        1.0,
    )
    add(
        f"{THREADS} threads sync vs SQLite WAL FULL, {THREADS} threads",
        r.ratios(w16, "journal sync", "SQLite WAL synchronous=FULL"),
        10,
    )
    add("bulk append vs SQLite one transaction", r.ratios(wb, jb, "SQLite one transaction (FULL)"), 2)
    add("bulk append vs RocksDB sync=False", r.ratios(wb, jb, "RocksDB sync=False + flush_wal(sync)"), 1.5)
    scan_row = r.row(workload_name(ws, first), "journal sync")
    gbps = [v / 1000 for v in scan_row.values] if scan_row is not None and scan_row.values else None
    if not journal.native_available():
        gbps = None  # the target is for the C path; the pure figure is in the table
        r.notes.append("the verified-scan target is for the C helper; this run used the pure-Python path")
    add("verified scan, GB/s of stored bytes (C path)", gbps, 1.0, " GB/s")
    recovers = [x for x in r.rows if x.workload == "open + recover a torn tail"]
    small = next((x for x in recovers if x.store.startswith("journal, 1 MiB")), None)
    big = next((x for x in recovers if x.store.startswith("journal, 1 GiB")), None)
    add(
        "open+recover: 1 GiB of history within 2x of 1 MiB (time ratio, live segment 1 MiB in both)",
        r.ratios("open + recover a torn tail", big.store, small.store)
        if big is not None and small is not None
        else None,
        2,
        lower=True,
    )
    add(
        f"{THREADS} threads sync vs JSONL write+fdatasync with one writer",
        r.ratios(w16, "journal sync", ONE_WRITER_BASELINE),
        5,
    )
    add(
        "bytes on disk per event vs JSONL",
        r.ratios(workload_name(wdisk, first), "journal sync", "JSONL buffered"),
        0.6,
        lower=True,
    )
    framed = JournalStore("sync", block_bytes=0).name
    cold = JournalStore("sync", block_cache=False).name
    for mix in r.plan.mixes:
        on = "" if len(r.plan.mixes) == 1 else f", {mix} mix"
        w1, w16, wb = (
            workload_name("1 writer, durable per event", mix),
            workload_name(f"{THREADS} threads, durable per event", mix),
            workload_name("bulk append, one sync at the end", mix),
        )
        wr, wdm = workload_name("random reads by seq", mix), workload_name(wd, mix)
        # The targets of the speed issue (bench/README.md says which are met and what bounds the rest).
        add(
            f"speed: 1 writer sync per event vs JSONL write+fdatasync{on}",
            r.ratios(w1, "journal sync", "JSONL write+fdatasync"),
            1.1,
        )
        kept = r.ratios(w16, "journal sync", FLOOR)
        add(f"speed: {THREADS} threads sync vs the minimal Python group commit{on}", kept, 0.9)
        add(
            f"speed: bulk append vs SQLite one transaction executemany{on}",
            r.ratios(wb, jb, "SQLite one transaction (FULL)"),
            1,
        )
        add(f"speed: decode scan vs JSONL read + json.loads{on}", r.ratios(wdm, "journal sync", "JSONL buffered"), 1.2)
        for n in r.plan.session_counts:
            wn = workload_name(f"{n} sessions in one process, durable per event", mix)
            add(
                f"speed: {n:,} sessions durable per event vs a JSONL file each{on}",
                r.ratios(wn, sess.JOURNAL, sess.JSONL),
                1,
            )
        add(
            f"speed: random reads by seq vs JSONL + offset index, records written together (blocks){on}",
            r.ratios(wr, "journal sync", "JSONL buffered"),
            0.5,
        )
        # The same reads with the block cache off: each decodes its block, as the first read of
        # a block does, and every read of a data set several times the cache.
        add(
            f"speed: random reads by seq vs JSONL + offset index, records written together, block cache off{on}",
            r.ratios(wr, cold, "JSONL buffered"),
            0.5,
        )
        add(
            f"speed: random reads by seq vs JSONL + offset index, records written one at a time (a frame each){on}",
            r.ratios(wr, framed, "JSONL buffered"),
            0.5,
        )
        floor = r.ratio(w16, FLOOR, ONE_WRITER_BASELINE)
        if floor is not None and kept:
            r.notes.append(
                f"With {THREADS} threads{on}, the minimal Python group commit (one lock, one pwrite and one fdatasync "
                f"per batch, nothing else) reaches {floor:.2f}x the single JSONL writer: the most any design "
                f"on Python threads reached on this machine in this run. journal keeps "
                f"{statistics.median(kept):.2f}x of it."
            )
        vs_orjson = r.ratio(wdm, "journal sync", st.JsonlOrjsonStore().name)
        if vs_orjson is not None:
            r.notes.append(
                f"Decode scan{on}, against JSONL read with orjson.loads (the fastest reading of JSONL a user could "
                f"pick): journal is {vs_orjson:.2f}x it; against json.loads, as in the target, "
                f"{r.ratio(wdm, 'journal sync', 'JSONL buffered') or float('nan'):.2f}x."
            )
    # Issue 33's targets that use no mix.
    wreal = "bytes on disk per event, real session files"
    checks = r.checks
    add(
        "speed: bytes on disk, real session files, vs plain JSONL (every event read back JSON-equal, imported "
        "lines exported byte-exact)",
        r.ratios(wreal, "journal sync", "JSONL buffered"),
        BYTES_TARGET_MAX,
        lower=True,
        goal=f" (goal {BYTES_GOAL:g}x)",
        holds=all(checks.values()),
    )
    wdict = "bytes on disk per event, real session files, store dictionary"
    for label in ("trained on A, measured on B", "trained on B, measured on A"):
        if r.row(wdict, f"journal, {label}") is not None:
            add(
                f"speed: bytes on disk, real session files, vs plain JSONL, store dictionary {label}",
                r.ratios(wdict, f"journal, {label}", f"JSONL, {label.split(', ')[1]}"),
                BYTES_TARGET_MAX,
                lower=True,
                goal=f" (goal {BYTES_GOAL:g}x)",
                holds=all(checks.values()),
            )
    for what, held in checks.items():
        if not held:
            r.notes.append(f"NOT held: {what}; the bytes target is NOT met whatever its ratio")
    if r.row(wreal, "journal sync") is None:
        r.notes.append("Bytes on the real session files: not measured in this run (`journal bench --corpus DIR`).")
    small_n, big_n = r.plan.open_sizes
    wo = f"open a session, {small_n:,} vs {big_n:,} events"
    for name, label in (("session rw", "read-write"), ("session ro", "read-only")):
        add(
            f"open a {big_n:,}-event session {label} vs a {small_n:,}-event one",
            r.ratios(wo, f"{name}, {big_n:,} events", f"{name}, {small_n:,} events"),
            so.TARGET_RATIO_MAX,
            lower=True,
        )
    depth = r.plan.fork_chain_depth or FORK_CHAIN_DEPTH
    wf = f"fork chain of {depth:,}: the last fork over the first"
    for key, what in (("time x", "time"), ("fork B x", "bytes"), ("bytes x", "mean bytes of the last forks")):
        row = r.row(wf, FORK_CHAIN_FIGURES[key])
        add(f"the {depth:,}th fork of a chain vs the first, {what}", row.values if row else None, 1.5, lower=True)
    if not r.plan.fork_chain_depth:
        r.notes.append(
            f"The fork chain (minutes) is not in this run: `journal bench --fork-chain {FORK_CHAIN_DEPTH}` builds it "
            f"with {FORK_CHAIN_SCRIPT} (a checkout's); its last figures are in bench/README.md."
        )
    framed_row = r.row(workload_name("random reads by seq", first), framed)
    if framed_row is not None:
        nan = float("nan")
        wr, wdm = workload_name("random reads by seq", first), workload_name(wd, first)
        r.notes.append(
            f"The read data set is written buffered, so its records share block frames: random reads are "
            f"{r.ratio(wr, 'journal sync', 'JSONL buffered') or nan:.2f}x JSONL with an "
            f"offset index once the process's cache of decoded blocks holds what they read (journal."
            f"BLOCK_CACHE_BYTES_DEFAULT, {journal.BLOCK_CACHE_BYTES_DEFAULT // MiB} MiB; the data set is "
            f"{r.plan.bulk_events:,} events of {r.event_sizes.get(first, {}).get('mean', 0):,} bytes of JSON "
            f"on average), and "
            f"{r.ratio(wr, cold, 'JSONL buffered') or nan:.2f}x with it off ({cold}: each read decodes "
            f"its whole block, as the first read of a block does). The same records a frame each "
            f"({framed}, how records appended one at a time are stored): "
            f"{r.ratio(wr, framed, 'JSONL buffered') or nan:.2f}x; their decode scan "
            f"{r.ratio(wdm, framed, 'JSONL buffered') or nan:.2f}x, their bytes "
            f"{r.ratio(workload_name(wdisk, first), framed, 'JSONL buffered') or nan:.2f}x."
        )


# --- reporting ------------------------------------------------------------------------------------

_PEERS_OF = {
    "1 writer, durable per event": "journal sync",
    f"{THREADS} threads, durable per event": "journal sync",
    "bulk append, one sync at the end": "journal append(buffered) + sync()",
    "full scan, checksums verified where the store has them": "journal sync",
    "decode scan (every record to a dict)": "journal sync",
    "random reads by seq": "journal sync",
    "bytes on disk per event": "journal sync",
    "bytes on disk per event, real session files": "journal sync",
    "bytes on disk, real session files imported with journal import": "journal import",
    **{f"{n} sessions in one process, durable per event": sess.JOURNAL for n in SESSION_COUNTS},
}


# The JSONL peer each CPU-per-event row is set against: the file a JSONL user writes and reads.
_JSONL_PEER_OF = {
    "1 writer, durable per event": "JSONL write+fdatasync",
    "bulk append, one sync at the end": "JSONL buffered + fdatasync",
    "decode scan (every record to a dict)": "JSONL buffered",
    "random reads by seq": "JSONL buffered",
}


def cpu_table(r: Report) -> list[str]:
    """CPU per event (user + system seconds of the process over the events), journal against
    JSONL, per workload: under the GIL this, not the disk, bounds the workloads journal trails."""
    pairs = []
    for mix in r.plan.mixes:
        pairs += [(workload_name(w, mix), _PEERS_OF[w], peer) for w, peer in _JSONL_PEER_OF.items()]
        for n in r.plan.session_counts:
            pairs.append(
                (workload_name(f"{n} sessions in one process, durable per event", mix), sess.JOURNAL, sess.JSONL)
            )
    lines = [
        "",
        "CPU per event, ms (user + system time of the process over the events; lower is better):",
        "",
        "| workload | journal | JSONL | journal ÷ JSONL (CPU) |",
        "|---|---:|---:|---:|",
    ]
    shown = False
    for w, mine, peer in pairs:
        a, b = r.row(f"CPU per event, {w}", mine), r.row(f"CPU per event, {w}", peer)
        if a is None or b is None or not a.values or not b.values:
            continue
        ratio = r.ratio(f"CPU per event, {w}", mine, peer)
        lines.append(f"| {w} | {a.median:.4f} | {b.median:.4f} | {'' if ratio is None else f'{ratio:.2f}x'} |")
        shown = True
    return lines if shown else []


def _fmt(v: float) -> str:
    if v != v:  # nan
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) < 1:
        return f"{v:.3g}"  # CPU per event in ms: 0.0569, not 0.06
    return f"{v:.2f}"


def markdown(r: Report, command: str) -> str:
    m = r.machine
    lines = [
        f"# journal bench{' --quick' if r.quick else ''}",
        "",
        f"Command: `{command}`  ",
        f"Machine: {m['cpu']}; {m['python']}; frame path: {m['frame path']}  ",
        f"Disk: {m['disk']}; {m['peers']}  ",
        f"Load average at start {m['load at start']}, at end {m.get('load at end', '?')}; {m['date']}  ",
        f"Figures are medians of {r.plan.repeats} rounds (open+recover: {r.plan.recover_repeats}); "
        "stores alternate within each round and every ratio is the median of per-round ratios.  ",
        *(
            f"Event mix {mix!r} ({MIXES[mix][1]}): {z.get('kinds')} kinds, serialized sizes mean "
            f"{z.get('mean')} B, p50 {z.get('p50')} B, p95 {z.get('p95')} B, p99 {z.get('p99')} B, "
            f"max {z.get('max')} B (journal/benchmark/events.py).  "
            for mix, z in r.event_sizes.items()
        ),
        "",
        "## Targets",
        "",
        f"Measured: the median of the {r.plan.repeats} per-round ratios; spread: the lowest and the highest of them.",
        "",
        "| target | needs | measured | spread | verdict |",
        "|---|---|---:|---|---|",
    ]
    for t in r.targets:
        verdict = "not measured" if t.ok is None else ("met" if t.ok else "**NOT met**")
        shown = "-" if t.value is None else f"{t.value:.2f}"
        spread = "" if t.spread is None else f"{t.spread[0]:.2f}-{t.spread[1]:.2f}"
        lines.append(f"| {t.text} | {t.need} | {shown} | {spread} | {verdict} |")
    lines += cpu_table(r)
    lines += ["", "## All figures", ""]
    workloads: list[str] = []
    for row in r.rows:
        if row.workload not in workloads:
            workloads.append(row.workload)
    for w in workloads:
        rows = [x for x in r.rows if x.workload == w]
        ref = _PEERS_OF.get(base_workload(w))
        unit = rows[0].unit
        better = "higher" if rows[0].higher_is_better else "lower"
        lines += [
            f"### {w}",
            "",
            f"| store | durable | {unit} ({better} is better) | journal ÷ store |",
            "|---|---|---:|---:|",
        ]
        for row in rows:
            ratio = r.ratio(w, ref, row.store) if ref is not None and row.store != ref else None
            durable = "" if row.durable is None else ("yes" if row.durable else "no")
            shown = "" if ratio is None else f"{ratio:.2f}x"
            note = f" ({row.note})" if row.note else ""
            lines.append(f"| {row.store}{note} | {durable} | {_fmt(row.median)} | {shown} |")
        lines.append("")
    if r.skipped:
        lines += ["## Skipped (never counted as a win)", ""]
        lines += [f"- {name}: {why}" for name, why in r.skipped.items()]
        lines.append("")
    if r.notes:
        lines += ["## Notes", ""]
        lines += [f"- {n}" for n in r.notes]
    return "\n".join(lines).rstrip() + "\n"


def chart(r: Report, path: str) -> bool:
    """A small PNG of journal's ratio to each peer per workload; False if matplotlib is missing."""
    mpl = st.optional_module("matplotlib")
    if mpl is None:
        return False
    mpl.use("Agg")
    plt = st.optional_module("matplotlib.pyplot")
    labels: list[str] = []
    values: list[float] = []
    for row in r.rows:
        w = row.workload
        ref = _PEERS_OF.get(base_workload(w))
        if ref is not None:
            if row.store.startswith("journal"):
                continue  # journal's own variants are in the table, not the chart
            ratio = r.advantage(w, ref, row.store)
            if ratio is None:
                continue
            short = w.split(",")[0].split(" (")[0] + (" (real files)" if "real session files" in w else "")
            if base_workload(w) != w:
                short += f" [{w.rsplit(', ', 1)[1]}]"
            labels.append(f"{short} | {row.store}")
            values.append(ratio)
    fig, ax = plt.subplots(figsize=(7, 0.16 * len(labels) + 1.0), dpi=64)
    colors = ["#2a7" if v >= 1 else "#c44" for v in values]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)))
    ax.set_yticklabels(labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("journal's advantage (x, log scale; > 1 = journal better)", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(f"journal vs peers ({r.machine['frame path']} path, medians of per-round ratios)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, pil_kwargs={"optimize": True})
    plt.close(fig)
    return True


def to_json(r: Report) -> dict[str, Any]:
    return {
        "machine": r.machine,
        "quick": r.quick,
        "rows": [
            {"workload": x.workload, "store": x.store, "unit": x.unit, "median": x.median, "values": x.values}
            for x in r.rows
        ],
        "targets": [
            {"target": t.text, "needs": t.need, "measured": t.value, "spread": t.spread, "met": t.ok} for t in r.targets
        ],
        "checks": r.checks,
        "mixes": list(r.plan.mixes),
        "skipped": r.skipped,
    }


def main_command() -> str:
    return " ".join(["journal bench", *sys.argv[2:]]) if len(sys.argv) > 1 else "journal bench"


__all__ = ["Plan", "Report", "chart", "markdown", "run", "to_json"]


def _dump(r: Report, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_json(r), f, indent=1)
