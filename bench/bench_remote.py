"""journal on its servers against what a user would otherwise write on the same server, in one run.

    .venv/bin/python bench/bench_remote.py                          # full: 3 rounds, ~3-4 minutes
    .venv/bin/python bench/bench_remote.py --rounds 5 --out bench/results/remote.md
    .venv/bin/python bench/bench_remote.py --quick                  # small sizes: a smoke test
    .venv/bin/python bench/bench_remote.py --only PostgreSQL        # some workloads only

Servers: PostgreSQL at $JOURNAL_TEST_PG_URL (default postgresql://postgres@127.0.0.1:5432/test;
every run works in scratch schemas it drops at the end), and a 3-node nats-server cluster that
this script starts (tests/nats_cluster.py) and stops. A workload whose server or package is
missing is listed under "Skipped".

Workloads (64 sessions at once, a thread per session, each appending durable events one at a
time; events are agent-session events of ~200 bytes from journal/benchmark/events.py):

- PostgreSQL. Ours: 64 journals of one ``journal.store("postgresql://...?schema=S")``, each
  thread appending to its own at durability "sync" (the store's journals share one writer
  connection: one transaction, one COMMIT for many sessions' events). Theirs, a plain app: per
  session its own connection and its own table in a scratch schema, per event one
  ``INSERT (seq, event jsonb)`` in autocommit (its own transaction and COMMIT, one round trip),
  ``synchronous_commit`` on (read back from the server).
- LangGraph on PostgreSQL. The graph of bench/bench_adapters.py (one node looping on itself,
  50 steps, ``durability="sync"``): ours ``JournalSaver("postgresql://...?schema=S")`` against
  LangGraph's ``PostgresSaver`` (langgraph-checkpoint-postgres, its tables made by ``setup()``).
  Two shapes: ``--lg-runs`` runs one after another, and ``--lg-threads`` threads each running
  the graph on its own thread id at once (PostgresSaver on a psycopg_pool ConnectionPool of as
  many connections, ours on one saver).
- JetStream. Ours: 64 journals on the cluster, stream replicas=3, durability "sync". Theirs, a
  plain nats-py app: one connection, 64 coroutines each publishing its session's events to its
  own subject and awaiting the ack of each before the next, on a stream of the same config
  (file storage, R3).

Method (bench/README.md): every round runs both sides of a workload, in an order that alternates
from round to round; a ratio (ours/s over theirs/s, >1 means journal is faster) is computed
inside each round; the table gives the median of the per-round ratios and their min-max, and
events/s and per-event latency p50/p99 (each append's or publish's own wall time) as medians
over the rounds. What bounds a side is measured, not guessed: COMMITs and WAL syncs per event
(pg_stat_wal, pg_stat_database), and client CPU per event (this process's user+system time).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

PG_URL = os.environ.get("JOURNAL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass
class Sizes:
    sessions: int = 64
    per_session: int = 150  # events each session appends, one at a time
    lg_steps: int = 50
    lg_runs: int = 4
    lg_threads: int = 64
    lg_thread_steps: int = 10
    js_per_session: int = 60


QUICK = Sizes(sessions=8, per_session=5, lg_steps=6, lg_runs=2, lg_threads=4, lg_thread_steps=3, js_per_session=4)


@dataclass
class Run:
    events: int
    seconds: float
    latencies: list[float] = field(default_factory=list)  # seconds, one per event
    stored: dict[str, Any] = field(default_factory=dict)  # what the side holds afterwards
    measured: dict[str, float] = field(default_factory=dict)  # per event: commits, WAL syncs, CPU

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        s = sorted(self.latencies)
        return s[min(len(s) - 1, int(q * len(s)))]


def session_events(sessions: int, per: int) -> list[list[dict[str, Any]]]:
    """Per session, ``per`` agent events of 150-300 bytes of JSON from the benchmark's mix."""
    from journal.benchmark.events import make_events

    small = [e for e in make_events(max(2000, 8 * sessions * per)) if 150 <= len(json.dumps(e)) <= 300]
    while len(small) < sessions * per:
        small = small + small
    return [[dict(small[k * per + i], session=k, i=i) for i in range(per)] for k in range(sessions)]


def _threads(n: int, body: Callable[[int, list[float]], None]) -> tuple[float, list[float]]:
    """Run ``body(k, latencies)`` on ``n`` threads released at once; the wall time, all latencies."""
    start = threading.Barrier(n + 1)
    lats: list[list[float]] = [[] for _ in range(n)]
    errors: list[BaseException] = []

    def run(k: int) -> None:
        start.wait()
        try:
            body(k, lats[k])
        except BaseException as exc:  # reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return seconds, [x for per in lats for x in per]


# --- PostgreSQL --------------------------------------------------------------------------------


def _pg(autocommit: bool = True) -> Any:
    import psycopg

    return psycopg.connect(PG_URL, autocommit=autocommit, connect_timeout=5)


def pg_reason() -> str | None:
    try:
        with _pg() as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_URL} is not reachable: {str(exc).strip()}"
    return None


def _drop_schema(schema: str) -> None:
    from psycopg import sql

    with _pg() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _server_counts() -> dict[str, float]:
    """WAL syncs and COMMITs the server counted so far (pg_stat_wal, pg_stat_database)."""
    with _pg() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        wal = conn.execute("SELECT wal_sync, wal_write FROM pg_stat_wal").fetchone()
        xact = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    return {"wal_sync": float(wal[0]), "xact_commit": float(xact[0])}


def _settled_counts(before: dict[str, float], events: int) -> dict[str, float]:
    """Per event, what the server counted since ``before`` (the backends that ended flushed their
    stats as they exited; a look a moment later sees them: polled for up to a second)."""
    deadline = time.monotonic() + 1.0
    last: dict[str, float] = {}
    while True:
        now = _server_counts()
        if now == last or time.monotonic() > deadline:
            break
        last = now
        time.sleep(0.05)  # stats settle: a measurement's wait, not a synchronization
    return {"wal_sync_per_event": (now["wal_sync"] - before["wal_sync"]) / events}


def sync_commit_ms() -> float:
    """What one durable COMMIT costs this server alone: 200 autocommit INSERTs (each a WAL flush)
    on one idle connection, ms each. When it is small, group commit has little WAL to save."""
    with _pg() as conn:
        conn.execute("CREATE TEMP TABLE probe (x int)")
        t = time.perf_counter()
        for _ in range(200):
            conn.execute("INSERT INTO probe VALUES (1)")
        return 1000 * (time.perf_counter() - t) / 200


def _cpu() -> float:
    return time.process_time()  # this process: user + system


def _server_cpu(comm: str, pids: list[int] | None = None) -> float:
    """CPU seconds the live processes named ``comm`` (or ``pids``) ran so far, from the scheduler's
    nanosecond count (/proc/PID/schedstat; the tick-sampled utime of stat misses short-lived work
    spread over 64 backends)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (pids is not None and int(entry) not in pids):
            continue
        try:
            if pids is None:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() != comm:
                        continue
            for task in os.listdir(f"/proc/{entry}/task"):  # every thread (nats-server has many)
                with open(f"/proc/{entry}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return total


def pg_ours(sz: Sizes, events: list[list[dict[str, Any]]]) -> Run:
    import journal

    schema = f"bench_remote_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    store = journal.store(f"{PG_URL}?schema={schema}")
    n, per = sz.sessions, sz.per_session
    handles = [store.open(f"s{k}", create=True) for k in range(n)]
    try:
        commits0, counts0, cpu0 = store.commits, _server_counts(), _cpu()  # type: ignore[attr-defined]
        srv0 = _server_cpu("postgres")

        def session(k: int, lat: list[float]) -> None:
            j = handles[k]
            for ev in events[k][:per]:
                t = time.perf_counter()
                out = j.append(ev, durability="sync")
                lat.append(time.perf_counter() - t)
                if not isinstance(out, journal.Committed) or out.durability != "sync":
                    raise AssertionError(f"session {k}: {out}")

        seconds, lats = _threads(n, session)
        cpu = _cpu() - cpu0
        srv = _server_cpu("postgres") - srv0
        commits = store.commits - commits0  # type: ignore[attr-defined]
    finally:
        for j in handles:
            j.close()
    try:
        measured = _settled_counts(counts0, n * per)
        measured |= {"our_commits_per_event": commits / (n * per), "client_cpu_ms_per_event": 1000 * cpu / (n * per),
                     "server_cpu_ms_per_event": 1000 * srv / (n * per)}
        stored: dict[str, Any] = {}
        for k in range(n):
            with store.open(f"s{k}", readonly=True) as j:
                recs = list(j.read())
            stored[f"s{k}"] = {"count": len(recs), "contiguous": [r.seq for r in recs] == list(range(1, len(recs) + 1)),
                               "same": [r.event for r in recs] == events[k][:per]}
    finally:
        _drop_schema(schema)
    return Run(n * per, seconds, lats, stored, measured)


def pg_plain(sz: Sizes, events: list[list[dict[str, Any]]]) -> Run:
    """The plain app: per session a connection and a table; per event one INSERT in autocommit
    (one statement, one transaction, one COMMIT), synchronous_commit as the server has it (on)."""
    from psycopg import sql
    from psycopg.types.json import Jsonb

    schema = f"bench_plain_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    n, per = sz.sessions, sz.per_session
    with _pg() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for k in range(n):
            conn.execute(sql.SQL("CREATE TABLE {} (seq bigint PRIMARY KEY, event jsonb NOT NULL)").format(
                sql.Identifier(schema, f"s{k}")))
    conns = [_pg() for _ in range(n)]
    try:
        setting = conns[0].execute("SHOW synchronous_commit").fetchone()[0]
        if setting not in ("on", "remote_apply", "remote_write", "local"):
            raise AssertionError(f"synchronous_commit is {setting}: the plain app would not be durable")
        inserts = [sql.SQL("INSERT INTO {} (seq, event) VALUES (%s, %s)").format(sql.Identifier(schema, f"s{k}"))
                   for k in range(n)]
        counts0, cpu0, srv0 = _server_counts(), _cpu(), _server_cpu("postgres")

        def session(k: int, lat: list[float]) -> None:
            c, ins = conns[k], inserts[k]
            for i, ev in enumerate(events[k][:per], start=1):
                t = time.perf_counter()
                c.execute(ins, (i, Jsonb(ev)))
                lat.append(time.perf_counter() - t)

        seconds, lats = _threads(n, session)
        cpu = _cpu() - cpu0
        srv = _server_cpu("postgres") - srv0
    finally:
        for c in conns:
            c.close()
    try:
        measured = _settled_counts(counts0, n * per) | {"client_cpu_ms_per_event": 1000 * cpu / (n * per),
                                                        "server_cpu_ms_per_event": 1000 * srv / (n * per)}
        stored = {}
        with _pg() as conn:
            for k in range(n):
                rows = conn.execute(sql.SQL("SELECT seq, event FROM {} ORDER BY seq").format(
                    sql.Identifier(schema, f"s{k}"))).fetchall()
                seqs = [r[0] for r in rows]
                stored[f"s{k}"] = {"count": len(rows), "contiguous": seqs == list(range(1, len(rows) + 1)),
                                   "same": [r[1] for r in rows] == events[k][:per]}
    finally:
        _drop_schema(schema)
    return Run(n * per, seconds, lats, stored, measured)


# --- LangGraph on PostgreSQL -------------------------------------------------------------------


def _bench_adapters() -> Any:
    name = "bench_adapters_for_remote"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bench", "bench_adapters.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


def lg_reason() -> str | None:
    why = pg_reason()
    if why:
        return why
    for module in ("langgraph", "langgraph.checkpoint.postgres", "psycopg_pool"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} is not installed ({exc}): pip install langgraph-checkpoint-postgres"
    return None


@contextlib.contextmanager
def _saver(side: str, pool_size: int) -> Iterator[Any]:
    """Ours (JournalSaver on a scratch schema) or PostgresSaver (its tables in a scratch schema,
    its connections' search_path set to it; a pool when more than one thread uses it)."""
    schema = f"bench_lg_{side}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        if side == "ours":
            from journal.adapters.langgraph import JournalSaver

            saver = JournalSaver(f"{PG_URL}?schema={schema}")
            try:
                yield saver
            finally:
                saver.close()
            return
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import sql
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        with _pg() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                  "options": f"-c search_path={schema}"}  # as PostgresSaver.from_conn_string, in the schema
        with ConnectionPool(PG_URL, min_size=pool_size, max_size=pool_size, kwargs=kwargs, open=True) as pool:
            saver = PostgresSaver(pool)  # type: ignore[arg-type]
            saver.setup()
            with pool.connection() as c:
                setting = c.execute("SHOW synchronous_commit").fetchone()
                if (setting or {}).get("synchronous_commit") not in ("on", "remote_apply", "remote_write", "local"):
                    raise AssertionError(f"PostgresSaver's connections run with synchronous_commit {setting}")
            yield saver
    finally:
        _drop_schema(schema)


def lg_sequential(side: str, sz: Sizes) -> Run:
    ba = _bench_adapters()
    steps, runs = sz.lg_steps, sz.lg_runs
    tids = [f"run-{i}" for i in range(runs)]
    with _saver(side, 1) as saver:
        graph = ba.build_graph(steps, saver)
        lats: list[float] = []
        cpu0 = _cpu()
        t0 = time.perf_counter()
        for tid in tids:
            t = time.perf_counter()
            out = graph.invoke({"messages": [], "count": 0}, ba._lg_config(tid, steps), durability="sync")
            ba._lg_check(out, steps)
            lats.append((time.perf_counter() - t) / steps)
        seconds = time.perf_counter() - t0
        cpu = _cpu() - cpu0
        stored = ba._lg_stored(saver, tids)
    return Run(steps * runs, seconds, lats, stored, {"client_cpu_ms_per_event": 1000 * cpu / (steps * runs)})


def lg_concurrent(side: str, sz: Sizes) -> Run:
    ba = _bench_adapters()
    steps, n = sz.lg_thread_steps, sz.lg_threads
    tids = [f"thread-{k}" for k in range(n)]
    with _saver(side, n) as saver:
        graph = ba.build_graph(steps, saver)

        def one(k: int, lat: list[float]) -> None:
            t = time.perf_counter()
            ba._lg_check(graph.invoke({"messages": [], "count": 0}, ba._lg_config(tids[k], steps),
                                      durability="sync"), steps)
            lat.append((time.perf_counter() - t) / steps)

        cpu0 = _cpu()
        seconds, lats = _threads(n, one)
        cpu = _cpu() - cpu0
        stored = ba._lg_stored(saver, tids)
    return Run(steps * n, seconds, lats, stored, {"client_cpu_ms_per_event": 1000 * cpu / (steps * n)})


# --- JetStream ---------------------------------------------------------------------------------


def js_reason() -> str | None:
    try:
        sys.path.insert(0, ROOT)
        from tests.nats_cluster import skip_reason
    except ImportError as exc:
        return f"tests/nats_cluster.py cannot be imported ({exc})"
    return skip_reason()


_CLUSTER: list[Any] = []


def js_cluster() -> Any:
    if not _CLUSTER:
        from tests.nats_cluster import Cluster, server_binary

        binary = server_binary()
        assert binary is not None
        c = Cluster(binary)
        c.start()
        c.wait_ready()
        _CLUSTER.append(c)
    return _CLUSTER[0]


def js_stop() -> None:
    while _CLUSTER:
        _CLUSTER.pop().stop()


def _pids(c: Any) -> list[int]:
    return [p.pid for p in c.procs if p is not None and p.poll() is None]


def js_ours(sz: Sizes, events: list[list[dict[str, Any]]]) -> Run:
    import journal

    c = js_cluster()
    stream = f"BR{uuid.uuid4().hex[:8].upper()}"
    n, per = sz.sessions, sz.js_per_session
    handles = [journal.open(c.url(f"journal=s{k}&stream={stream}&replicas=3"), create=True) for k in range(n)]
    try:
        cpu0, srv0 = _cpu(), _server_cpu("", _pids(c))

        def session(k: int, lat: list[float]) -> None:
            j = handles[k]
            for ev in events[k][:per]:
                t = time.perf_counter()
                out = j.append(ev, durability="sync")
                lat.append(time.perf_counter() - t)
                if not isinstance(out, journal.Committed) or out.durability != "sync":
                    raise AssertionError(f"session {k}: {out}")

        seconds, lats = _threads(n, session)
        cpu, srv = _cpu() - cpu0, _server_cpu("", _pids(c)) - srv0
        stored: dict[str, Any] = {}
        for k, j in enumerate(handles):
            recs = list(j.read())
            stored[f"s{k}"] = {"count": len(recs), "contiguous": [r.seq for r in recs] == list(range(1, len(recs) + 1)),
                               "same": [r.event for r in recs] == events[k][:per]}
    finally:
        for j in handles:
            j.close()
        asyncio.run(_js_delete(c.servers(), [stream, f"{stream}_LOCKS", f"KV_{stream}_LOCKS"]))
    return Run(n * per, seconds, lats, stored, {"client_cpu_ms_per_event": 1000 * cpu / (n * per),
                                                "server_cpu_ms_per_event": 1000 * srv / (n * per)})


async def _js_delete(servers: str, streams: list[str]) -> None:
    import nats

    nc = await nats.connect(servers.split(","))
    try:
        js = nc.jetstream()
        for s in streams:
            with contextlib.suppress(Exception):
                await js.delete_stream(s)
    finally:
        await nc.close()


def js_plain(sz: Sizes, events: list[list[dict[str, Any]]]) -> Run:
    c = js_cluster()
    return asyncio.run(_js_plain(c.servers(), sz, events, _pids(c)))


async def _js_plain(servers: str, sz: Sizes, events: list[list[dict[str, Any]]], pids: list[int]) -> Run:
    import nats
    from nats.js import api

    n, per = sz.sessions, sz.js_per_session
    stream = f"BP{uuid.uuid4().hex[:8].upper()}"
    subj = stream.lower()
    nc = await nats.connect(servers.split(","))
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name=stream, subjects=[f"{subj}.>"], storage=api.StorageType.FILE,
                                             num_replicas=3, retention=api.RetentionPolicy.LIMITS))
        bodies = [[json.dumps(ev, separators=(",", ":")).encode() for ev in events[k][:per]] for k in range(n)]
        lats: list[float] = []

        async def session(k: int) -> None:
            for b in bodies[k]:
                t = time.perf_counter()
                ack = await js.publish(f"{subj}.s{k}", b, timeout=30)
                lats.append(time.perf_counter() - t)
                assert ack.stream == stream

        cpu0, srv0 = _cpu(), _server_cpu("", pids)
        t0 = time.perf_counter()
        await asyncio.gather(*(session(k) for k in range(n)))
        seconds = time.perf_counter() - t0
        cpu, srv = _cpu() - cpu0, _server_cpu("", pids) - srv0
        stored: dict[str, Any] = {}
        for k in range(n):
            sub = await js.subscribe(f"{subj}.s{k}", ordered_consumer=True)
            got = []
            for _ in range(per):
                msg = await sub.next_msg(timeout=10)
                got.append(json.loads(msg.data))
            await sub.unsubscribe()
            stored[f"s{k}"] = {"count": len(got), "contiguous": True, "same": got == events[k][:per]}
        info = await js.stream_info(stream)
        stored["replicas"] = 1 + len(info.cluster.replicas or []) if info.cluster else 1
        await js.delete_stream(stream)
    finally:
        await nc.close()
    return Run(n * per, seconds, lats, stored, {"client_cpu_ms_per_event": 1000 * cpu / (n * per),
                                                "server_cpu_ms_per_event": 1000 * srv / (n * per)})


# --- the workloads and the rounds --------------------------------------------------------------


@dataclass
class Workload:
    name: str
    ours: Callable[[], Run]
    theirs: Callable[[], Run]
    peer: str
    unit: str
    reason: Callable[[], str | None]
    target: float | None = None


def workloads(sz: Sizes) -> list[Workload]:
    ev = session_events(sz.sessions, max(sz.per_session, sz.js_per_session))
    return [
        Workload(f"PostgreSQL, {sz.sessions} sessions, sync per event", lambda: pg_ours(sz, ev),
                 lambda: pg_plain(sz, ev), "plain app: INSERT + COMMIT per event", "events/s", pg_reason, 2.0),
        Workload(f"LangGraph on PostgreSQL, {sz.lg_runs} runs of {sz.lg_steps} steps",
                 lambda: lg_sequential("ours", sz), lambda: lg_sequential("theirs", sz), "PostgresSaver", "steps/s",
                 lg_reason),
        Workload(f"LangGraph on PostgreSQL, {sz.lg_threads} threads x {sz.lg_thread_steps} steps",
                 lambda: lg_concurrent("ours", sz), lambda: lg_concurrent("theirs", sz),
                 f"PostgresSaver (pool of {sz.lg_threads})", "steps/s", lg_reason),
        Workload(f"JetStream R3, {sz.sessions} sessions, sync per event", lambda: js_ours(sz, ev),
                 lambda: js_plain(sz, ev), "plain nats-py: publish + await ack per event", "events/s", js_reason, 2.0),
    ]


def run_all(sz: Sizes, rounds: int, only: str | None, log: Callable[[str], None]) -> dict[str, Any]:
    result: dict[str, Any] = {"workloads": {}, "skipped": {}}
    chosen = [w for w in workloads(sz) if only is None or only.lower() in w.name.lower()]
    if pg_reason() is None:
        result["sync_commit_ms"] = sync_commit_ms()
    try:
        for w in chosen:
            why = w.reason()
            if why:
                result["skipped"][w.name] = why
                log(f"skipped {w.name}: {why}")
                continue
            runs: dict[str, list[Run]] = {"ours": [], "theirs": []}
            for r in range(rounds):
                order = ["ours", "theirs"] if r % 2 == 0 else ["theirs", "ours"]
                for side in order:
                    run = (w.ours if side == "ours" else w.theirs)()
                    runs[side].append(run)
                    log(f"round {r + 1} {w.name} {side}: {run.rate:,.0f} {w.unit}, p50 {1000 * run.pct(0.5):.2f} ms, "
                        f"p99 {1000 * run.pct(0.99):.2f} ms {fmt_measured(run.measured)}")
            result["workloads"][w.name] = {"w": w, "runs": runs}
    finally:
        js_stop()
    return result


def fmt_measured(m: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in m.items())


def summary(entry: dict[str, Any]) -> dict[str, Any]:
    runs = entry["runs"]
    ratios = [o.rate / t.rate for o, t in zip(runs["ours"], runs["theirs"], strict=True) if t.rate > 0]
    out: dict[str, Any] = {"ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    for side in ("ours", "theirs"):
        rs = runs[side]
        keys = sorted({k for r in rs for k in r.measured})
        out[side] = {"rate": statistics.median(r.rate for r in rs), "p50": statistics.median(r.pct(0.5) for r in rs),
                     "p99": statistics.median(r.pct(0.99) for r in rs),
                     "measured": {k: statistics.median(r.measured.get(k, 0.0) for r in rs) for k in keys}}
    return out


def table(result: dict[str, Any], rounds: int, wall: float, load: tuple[str, str]) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}; "
        f"PostgreSQL and nats-server on the same machine. {rounds} rounds, run took {wall:.0f} s; "
        f"load average {load[0]} at the start, {load[1]} at the end.",
        "",
        "| workload | ours | theirs | peer | ours ÷ theirs (median, min-max) | target | ours p50 / p99 | "
        "theirs p50 / p99 |",
        "|---|---:|---:|---|---:|---|---:|---:|",
    ]
    notes = []
    for name, entry in result["workloads"].items():
        w: Workload = entry["w"]
        s = summary(entry)
        if w.target is None:
            verdict = "-"
        else:
            verdict = f">= {w.target:g}x: " + ("met" if s["ratio"] >= w.target else "**NOT met**")
        lines.append(
            f"| {name} | {s['ours']['rate']:,.0f} {w.unit} | {s['theirs']['rate']:,.0f} | {w.peer} | "
            f"{s['ratio']:.2f}x ({s['min']:.2f}-{s['max']:.2f}) | {verdict} | "
            f"{1000 * s['ours']['p50']:.1f} / {1000 * s['ours']['p99']:.1f} ms | "
            f"{1000 * s['theirs']['p50']:.1f} / {1000 * s['theirs']['p99']:.1f} ms |")
        for side in ("ours", "theirs"):
            m = s[side]["measured"]
            if m:
                notes.append(f"- {name}, {side}: " + fmt_measured(m))
    if "sync_commit_ms" in result:
        lines += ["", f"One durable COMMIT (an autocommit INSERT, one WAL flush) on an idle connection of this "
                  f"server: {result['sync_commit_ms']:.3f} ms."]
    lines += ["", "Latency: per event (LangGraph: per step, a run's wall time over its steps). Measured per event "
              "(medians over the rounds):", "", *notes]
    for name, why in result["skipped"].items():
        lines.append(f"- Skipped {name}: {why}")
    return "\n".join(lines) + "\n"


def loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--out", default=None, help="write the table to this file (markdown)")
    ap.add_argument("--only", default=None, help="run the workloads whose name contains this")
    args = ap.parse_args(argv)
    sz = QUICK if args.quick else Sizes()
    load0, t0 = loadavg(), time.monotonic()
    result = run_all(sz, args.rounds, args.only, lambda s: print(s, flush=True))
    text = table(result, args.rounds, time.monotonic() - t0, (load0, loadavg()))
    cmd = "bench/bench_remote.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = f"# journal on its servers vs plain apps\n\nCommand: `.venv/bin/python {cmd.strip()}`\n\n" + text
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
