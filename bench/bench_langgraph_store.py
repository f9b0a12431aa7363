"""JournalStore (LangGraph's long-term store on journals) against the durable stores LangGraph ships.

    .venv/bin/python bench/bench_langgraph_store.py                  # 3 rounds
    .venv/bin/python bench/bench_langgraph_store.py --rounds 5 --turns 300 --dir /some/disk
    .venv/bin/python bench/bench_langgraph_store.py --quick          # a smoke run

InMemoryStore keeps nothing, so it is no peer for a durable store. The peers are SqliteStore
(langgraph-checkpoint-sqlite, in the bench-adapters extra) on a file, and PostgresStore
(langgraph-checkpoint-postgres) on the PostgreSQL at $JOURNAL_BENCH_PG_URL (default
postgresql://postgres@127.0.0.1:5432/test, in a schema of its own, dropped after); JournalStore runs
on files against SqliteStore and on that same server (its PostgreSQL backend) against
PostgresStore. A peer that cannot run here is listed as skipped.

The workload, one agent's long-term memory in a conversation: ``--users`` users one after
another, each ``--turns`` turns, a turn being a ``put`` of one small memory in
("memories", user), a ``get`` of it and a ``search`` of the user's namespace with a filter and
limit 5 (the memory tools' pattern: recall, then remember). Rates are turns per second of wall
time; no TTLs, so reads write nothing in any store. Every store ends holding every memory (checked
after the clock stops).

Equal durability. JournalStore appends each batch at "sync" (fdatasync'd before the call
returns). SqliteStore runs twice per round: with ``PRAGMA synchronous=FULL`` on its connection
(every commit synced, in any journal mode) and as shipped (its code untouched; the durability
column reads ``journal_mode`` and ``synchronous`` back from its connection). PostgresStore commits
each batch with the server's ``synchronous_commit`` (read back and printed).

Method (as bench/README.md): each round runs every store once, in an order that rotates per
round, each in a fresh directory or schema; a ratio (ours/s over theirs/s, >1 means journal is
faster) is computed within each round, and the table gives the median of the per-round ratios
and their min-max.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PG_URL = os.environ.get("JOURNAL_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@dataclass
class Run:
    turns: int
    seconds: float
    durability: str


def turns(store: Any, users: int, per_user: int) -> float:
    """The workload on ``store``; its wall time in seconds."""
    t0 = time.perf_counter()
    for u in range(users):
        ns = ("memories", f"user{u}")
        for t in range(per_user):
            store.put(ns, f"m{t}", {"text": f"user {u} said thing {t}", "kind": "fact" if t % 3 else "pref",
                                    "turn": t})
            got = store.get(ns, f"m{t}")
            assert got is not None
            store.search(ns, filter={"kind": "fact"}, limit=5)
    return time.perf_counter() - t0


def check(store: Any, users: int, per_user: int) -> None:
    for u in range(users):
        held = store.search(("memories", f"user{u}"), limit=per_user + 1)
        assert len(held) == per_user, (u, len(held))


def sqlite_durability(conn: sqlite3.Connection, how: str) -> str:
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
    level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    syncs = level >= 2 if mode == "wal" else level >= 1
    return (f"{mode.upper()}, synchronous={SYNC_NAMES.get(level, level)} ({how}): "
            + ("syncs every commit" if syncs else "**does not sync per commit**"))


def run_store(name: str, where: str, users: int, per_user: int) -> Run:
    if name == "JournalStore (files)":
        from journal.adapters.langgraph_store import JournalStore

        with JournalStore(where) as store:
            secs = turns(store, users, per_user)
            check(store, users, per_user)
        return Run(users * per_user, secs, 'one record per batch at "sync" (fdatasync)')
    if name.startswith("SqliteStore"):
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(os.path.join(where, "store.db")) as store:
            store.setup()
            how = "as shipped"
            if "FULL" in name:
                store.conn.execute("PRAGMA synchronous=FULL")
                how = "set FULL here"
            durability = sqlite_durability(store.conn, how)
            secs = turns(store, users, per_user)
            check(store, users, per_user)
        return Run(users * per_user, secs, durability)
    schema = f"bench_lgs_{uuid.uuid4().hex[:8]}"
    if name == "JournalStore (PostgreSQL)":
        from journal.adapters.langgraph_store import JournalStore

        try:
            with JournalStore(f"{PG_URL}?schema={schema}") as store:
                secs = turns(store, users, per_user)
                check(store, users, per_user)
        finally:
            _drop_schema(schema)
        return Run(users * per_user, secs, f"one record per batch, committed ({_pg_sync()})")
    if name == "PostgresStore":
        import psycopg
        from langgraph.store.postgres import PostgresStore

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            with PostgresStore.from_conn_string(f"{PG_URL}?options=-csearch_path%3D{schema}") as store:
                store.setup()
                secs = turns(store, users, per_user)
                check(store, users, per_user)
        finally:
            _drop_schema(schema)
        return Run(users * per_user, secs, f"a transaction per batch ({_pg_sync()})")
    raise ValueError(name)


def _pg_sync() -> str:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
    return f"synchronous_commit={row[0] if row else '?'}"


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def available(name: str) -> str | None:
    """Why ``name`` cannot run here, or None."""
    import importlib.util

    need = {"SqliteStore": "langgraph.store.sqlite", "PostgresStore": "langgraph.store.postgres"}
    for prefix, module in need.items():
        if name.startswith(prefix):
            try:
                if importlib.util.find_spec(module) is None:
                    return f"{module} is not installed (pip install -e '.[bench-adapters]')"
            except ModuleNotFoundError:
                return f"{module} is not installed (pip install -e '.[bench-adapters]')"
    if "PostgreSQL" in name or name == "PostgresStore":
        try:
            import psycopg

            with psycopg.connect(PG_URL, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # the server or the client library is missing: skipped, said why
            return f"PostgreSQL at {PG_URL} is not reachable ({type(exc).__name__}: {exc})"
    return None


PAIRS = [  # (ours, theirs)
    ("JournalStore (files)", "SqliteStore, synchronous=FULL"),
    ("JournalStore (files)", "SqliteStore, as shipped"),
    ("JournalStore (PostgreSQL)", "PostgresStore"),
]


@contextlib.contextmanager
def scratch(base: str | None) -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="journal-lgstore-bench-", dir=base)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--users", type=int, default=4)
    p.add_argument("--turns", type=int, default=150, help="turns per user")
    p.add_argument("--dir", default=None, help="where the file stores live (a temporary directory by default)")
    p.add_argument("--quick", action="store_true", help="1 round, 2 users x 20 turns")
    args = p.parse_args(argv)
    rounds, users, per_user = (1, 2, 20) if args.quick else (args.rounds, args.users, args.turns)
    stores = sorted({s for pair in PAIRS for s in pair})
    skipped = {s: why for s in stores if (why := available(s)) is not None}
    runnable = [s for s in stores if s not in skipped]
    rates: dict[str, list[float]] = {s: [] for s in runnable}
    durability: dict[str, str] = {}
    for r in range(rounds):
        order = runnable[r % len(runnable):] + runnable[: r % len(runnable)]
        for name in order:
            with scratch(args.dir) as where:
                run = run_store(name, where, users, per_user)
            rates[name].append(run.turns / run.seconds)
            durability[name] = run.durability
            log(f"round {r + 1}: {name}: {run.turns / run.seconds:,.0f} turns/s")
    log("")
    log(f"workload: {users} users x {per_user} turns (put + get + filtered search), {rounds} rounds, "
        f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    log("")
    log("| store | turns/s (median) | durability |")
    log("|---|---|---|")
    for name in runnable:
        log(f"| {name} | {statistics.median(rates[name]):,.0f} | {durability[name]} |")
    log("")
    log("| ours / theirs | ratio (median of rounds) | min-max |")
    log("|---|---|---|")
    ratios: dict[str, tuple[float, float, float]] = {}
    for ours, theirs in PAIRS:
        if ours in skipped or theirs in skipped:
            continue
        per_round = [a / b for a, b in zip(rates[ours], rates[theirs], strict=True)]
        ratios[f"{ours} / {theirs}"] = (statistics.median(per_round), min(per_round), max(per_round))
        med, lo, hi = ratios[f"{ours} / {theirs}"]
        log(f"| {ours} / {theirs} | {med:.2f} | {lo:.2f}-{hi:.2f} |")
    for name, why in skipped.items():
        log(f"skipped: {name}: {why}")
    return {"rates": rates, "ratios": ratios, "skipped": skipped}


if __name__ == "__main__":
    main()
