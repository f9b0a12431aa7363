"""The framework adapters against the stores the frameworks ship, in one run, at equal durability.

    .venv/bin/python bench/bench_adapters.py                          # full: 3 rounds
    .venv/bin/python bench/bench_adapters.py --rounds 5 --out bench/results/adapters.md
    .venv/bin/python bench/bench_adapters.py --quick                  # small sizes: a smoke test
    .venv/bin/python bench/bench_adapters.py --dir /some/disk         # where the stores live
    .venv/bin/python bench/bench_adapters.py --only "LangGraph sync"  # some workloads only

Needs the extras of the adapters (langgraph, openai-agents, google-adk) and the peers' stores:
``langgraph-checkpoint-sqlite`` (SqliteSaver, AsyncSqliteSaver; it brings ``aiosqlite``). A
workload whose peer or adapter is missing is listed under "Skipped" and takes part in no ratio.

Workloads (ours = journal's adapter, every write appended at durability "sync": fdatasync'd
before the call returns):

- LangGraph, sync: a compiled ``StateGraph`` of one plain Python node looping on itself (no
  model): the state has a list channel that grows by one small message per step and a counter;
  ``graph.invoke(..., durability="sync")`` of a ``--steps``-step run on a fresh thread, ``--runs``
  times. JournalSaver against SqliteSaver (one sqlite3 connection, the saver's lock).
- LangGraph, async: ``asyncio.gather`` of ``--async-threads`` ``graph.ainvoke`` runs of
  ``--async-steps`` steps, each on its own fresh thread. JournalSaver against AsyncSqliteSaver.
- OpenAI Agents SDK, sequential: ``add_items`` of one small item per call (a chat turn),
  ``--items`` times on one session. JournalSession against SQLiteSession on a file.
- OpenAI Agents SDK, concurrent: ``--sessions`` sessions at once (``asyncio.gather``), each
  adding ``--session-items`` items one per call. Sessions are opened before the clock starts.
- Google ADK (if ``journal/adapters/adk.py`` is there): ``create_session``, then ``append_event``
  of small text events, sequential and ``--sessions`` sessions at once. JournalSessionService
  against SqliteSessionService on a file.
- Tool calls (LangGraph, Agents SDK, ADK): a scripted run, no model and no network, whose tool
  (side effect declared "external-write": it appends (scope, n) to a list in this process) is
  called ``--tool-calls`` times, one call a step or model turn; ``--tool-runs`` runs one after
  another, each on a fresh thread or session. Ours = journal's adapter with the framework's guard
  on (LangGraph ``@guarded`` node, Agents SDK ``guarded_tool``, ADK ``GuardPlugin``): every call's
  intent is synced before the tool runs, its result appended after, on top of the adapter's
  writes. The peer = the framework's own SQLite store with no guard (it has none). A fourth store,
  ours without the guard, runs too, and its row is the guard's own cost. Rates are tool calls per
  second; the check is that every call's side effect ran exactly once, in order, that the store
  holds every call's result, and that the guard's journals hold every call's intent.

Equal durability. Each peer runs twice in every round: with ``PRAGMA synchronous=FULL`` set on
every connection it uses (WAL mode: the WAL is synced at every commit; rollback mode: the journal
and the database are synced at every commit), and as shipped (its code untouched). The
durability column is read at run time from the peer's own connection (``PRAGMA journal_mode`` and
``PRAGMA synchronous``), never assumed: none of the peers sets ``synchronous`` (see the comments
at each peer), so as shipped it is the SQLite build's default, which this script prints.

A peer's call that fails with SQLite's "database is locked" (SqliteSessionService with many
sessions at once) is retried, counted, and reported in the durability column; its failed tries
stay on the peer's clock. journal's calls are never retried.

Method (as bench/README.md): every round runs every store once per workload, in an order that
rotates from round to round, each in a fresh directory; a ratio (ours/s over theirs/s, >1 means
journal is faster) is computed inside each round, and the table gives the median of the per-round
ratios and their min-max. Rates are operations per second of wall time (LangGraph: graph steps,
i.e. node executions, each a put_writes and a put; sessions: add_items or append_event calls).
Bytes on disk are the sizes of every file the store left, after it was closed (SQLite's WAL is
checkpointed away at the last close; journal's reserved space is cut off at close).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import operator
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

OURS_DURABILITY = 'fdatasync per write (durability="sync")'
SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}

FULL = "full"  # a peer with PRAGMA synchronous=FULL set on its connections
SHIPPED = "shipped"  # a peer as shipped: its code and settings untouched
STORES = ["ours", FULL, SHIPPED]


@dataclass
class Sizes:
    steps: int = 50  # LangGraph sync: steps per run
    runs: int = 40  # LangGraph sync: runs per round, each on a fresh thread
    async_threads: int = 200  # LangGraph async: concurrent runs
    async_steps: int = 50  # LangGraph async: steps per run
    items: int = 2000  # Agents SDK sequential: add_items calls
    sessions: int = 200  # concurrent sessions (Agents SDK, ADK)
    session_items: int = 10  # add_items per concurrent session (Agents SDK)
    events: int = 500  # ADK sequential: append_event calls
    session_events: int = 5  # append_event per concurrent session (ADK)
    tool_calls: int = 20  # tool calls: calls per run (one run = one thread or session)
    tool_runs: int = 20  # tool calls: runs per round, one after another, each on a fresh thread or session


QUICK = Sizes(steps=6, runs=2, async_threads=8, async_steps=3, items=20, sessions=8, session_items=3, events=15,
              session_events=3, tool_calls=3, tool_runs=2)


@dataclass
class Run:
    """One store's run of one workload: what it did, how long it took, what it left and holds."""

    ops: int
    seconds: float
    bytes: int
    durability: str  # as read from the store's connection
    stored: dict[str, Any] = field(default_factory=dict)  # read back after the clock stopped
    retried: int = 0  # calls that failed with "database is locked" and were retried (peers only)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds


def dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def sqlite_durability(mode: str, level: int, how: str) -> str:
    """A peer's durability as read from its connection: journal mode, synchronous, syncs per commit."""
    mode = str(mode).lower()
    # WAL: FULL and EXTRA sync the WAL at each commit, NORMAL only at checkpoints. Rollback
    # journal: NORMAL and above sync at each commit (NORMAL skips one of the syncs), OFF never.
    syncs = level >= 2 if mode == "wal" else level >= 1
    name = SYNC_NAMES.get(int(level), str(level))
    verdict = "syncs every commit" if syncs else "**does not sync per commit**"
    return f"{mode.upper()}, synchronous={name} ({how}): {verdict}"


def sqlite_build_defaults() -> str:
    with sqlite3.connect(":memory:") as c:
        opts = [r[0] for r in c.execute("PRAGMA compile_options")]
    picked = [o for o in opts if o.startswith(("DEFAULT_SYNCHRONOUS", "DEFAULT_WAL_SYNCHRONOUS"))]
    return f"SQLite {sqlite3.sqlite_version}, built with {', '.join(picked) or 'the default synchronous settings'}"


# ---------------------------------------------------------------------------------------------
# LangGraph

# The peers' defaults, read from langgraph-checkpoint-sqlite 3.1.2 in .venv:
# - SqliteSaver: langgraph/checkpoint/sqlite/__init__.py:126 opens `sqlite3.connect(conn_string,
#   check_same_thread=False)` with no pragma; setup() runs `PRAGMA journal_mode=WAL` (line 146)
#   and never sets synchronous; cursor() commits every put and put_writes (line 207).
# - AsyncSqliteSaver: langgraph/checkpoint/sqlite/aio.py:149 `aiosqlite.connect(conn_string)`,
#   setup() runs `PRAGMA journal_mode=WAL` (line 323), no synchronous; aput commits at line 567,
#   aput_writes at line 616.
# So synchronous is SQLite's build default for WAL mode (SQLITE_DEFAULT_WAL_SYNCHRONOUS); the
# run reads it back from the saver's connection. FULL is set here through the saver's `conn`
# before its first use (the pragma holds for the connection's life; setup() does not touch it).


class _State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    count: int


def build_graph(steps: int, checkpointer: Any) -> Any:
    """One plain Python node looping on itself ``steps`` times: a message and +1 per step."""
    from langgraph.graph import END, START, StateGraph

    def step(state: _State) -> dict[str, Any]:
        n = state["count"] + 1
        return {"messages": [{"role": "assistant", "content": f"step {n}: " + "x" * 48}], "count": n}

    def route(state: _State) -> str:
        return "step" if state["count"] < steps else END

    builder = StateGraph(_State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", route, ["step", END])
    return builder.compile(checkpointer=checkpointer)


def _lg_config(thread_id: str, steps: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}


def _lg_stored(saver: Any, thread_ids: list[str]) -> dict[str, Any]:
    """What the saver holds for each thread: the final count and messages of its latest checkpoint."""
    out = {}
    for tid in thread_ids:
        tup = saver.get_tuple({"configurable": {"thread_id": tid}})
        values = tup.checkpoint["channel_values"] if tup else {}
        out[tid] = {"count": values.get("count"), "messages": len(values.get("messages", [])),
                    "last": (values.get("messages") or [{}])[-1].get("content")}
    return {"threads": out}


def _lg_check(result: dict[str, Any], steps: int) -> None:
    if result["count"] != steps or len(result["messages"]) != steps:
        raise AssertionError(f"a {steps}-step run ended with count {result['count']}, "
                             f"{len(result['messages'])} messages")


def lg_sync(store: str, where: str, steps: int, runs: int) -> Run:
    """``runs`` sequential ``graph.invoke`` of ``steps`` steps, each on a fresh thread."""
    thread_ids = [f"run-{i}" for i in range(runs)]
    if store == "ours":
        from journal.adapters.langgraph import JournalSaver

        saver: Any = JournalSaver(os.path.join(where, "ckpt"))
        durability = OURS_DURABILITY
        closing: Callable[[], None] = saver.close
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(os.path.join(where, "ckpt.sqlite"), check_same_thread=False)  # as from_conn_string
        if store == FULL:
            conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        durability = ""
        closing = conn.close
    graph = build_graph(steps, saver)
    t0 = time.perf_counter()
    for tid in thread_ids:
        _lg_check(graph.invoke({"messages": [], "count": 0}, _lg_config(tid, steps), durability="sync"), steps)
    seconds = time.perf_counter() - t0
    stored = _lg_stored(saver, thread_ids)
    if store != "ours":
        mode = saver.conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = saver.conn.execute("PRAGMA synchronous").fetchone()[0]
        durability = sqlite_durability(mode, level, _how(store, "saver.conn"))
    closing()
    return Run(steps * runs, seconds, dir_bytes(where), durability, stored)


def lg_async(store: str, where: str, steps: int, threads: int) -> Run:
    return asyncio.run(_lg_async(store, where, steps, threads))


async def _lg_async(store: str, where: str, steps: int, threads: int) -> Run:
    thread_ids = [f"task-{i}" for i in range(threads)]
    if store == "ours":
        from journal.adapters.langgraph import JournalSaver

        saver: Any = JournalSaver(os.path.join(where, "ckpt"))
        durability = OURS_DURABILITY
    else:
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        conn = await aiosqlite.connect(os.path.join(where, "ckpt.sqlite"))  # as from_conn_string
        if store == FULL:
            await conn.execute("PRAGMA synchronous=FULL")
        saver = AsyncSqliteSaver(conn)
        durability = ""
    graph = build_graph(steps, saver)

    async def one(tid: str) -> None:
        _lg_check(await graph.ainvoke({"messages": [], "count": 0}, _lg_config(tid, steps), durability="sync"), steps)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(tid) for tid in thread_ids))
    seconds = time.perf_counter() - t0
    if store == "ours":
        stored = await asyncio.to_thread(_lg_stored, saver, thread_ids)
        await asyncio.to_thread(saver.close)
    else:
        out = {}
        for tid in thread_ids:
            tup = await saver.aget_tuple({"configurable": {"thread_id": tid}})
            values = tup.checkpoint["channel_values"] if tup else {}
            out[tid] = {"count": values.get("count"), "messages": len(values.get("messages", [])),
                        "last": (values.get("messages") or [{}])[-1].get("content")}
        stored = {"threads": out}
        async with conn.execute("PRAGMA journal_mode") as cur:
            row = await cur.fetchone()
            assert row is not None  # a PRAGMA that reads a setting always returns its row
            mode = row[0]
        async with conn.execute("PRAGMA synchronous") as cur:
            row = await cur.fetchone()
            assert row is not None
            level = row[0]
        durability = sqlite_durability(mode, level, _how(store, "saver.conn"))
        await conn.close()
    return Run(steps * threads, seconds, dir_bytes(where), durability, stored)


def _how(store: str, hook: str) -> str:
    return f"set by this benchmark through {hook}" if store == FULL else "as shipped: not set by the peer"


# ---------------------------------------------------------------------------------------------
# OpenAI Agents SDK

# SQLiteSession's defaults, read from openai-agents 0.24.0 in .venv: agents/memory/sqlite_session.py
# opens a connection per worker thread (line 180, `sqlite3.connect(str(self.db_path),
# check_same_thread=False)`), each configured by _configure_connection, which runs only
# `PRAGMA journal_mode=WAL` (line 217) and never sets synchronous; add_items commits once per
# call (line 462). All sessions on one file share one process-wide lock (_acquire_file_lock,
# line 96). FULL is set here by a subclass whose _configure_connection also runs
# `PRAGMA synchronous=FULL`, so every per-thread connection gets it.


def _sdk_session_class(store: str) -> Any:
    from agents.memory.sqlite_session import SQLiteSession

    if store != FULL:
        return SQLiteSession

    class SQLiteSessionFull(SQLiteSession):
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=FULL")

    return SQLiteSessionFull


def _sdk_item(session: int, i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"session {session} turn {i}: what about the next step of the plan?"}


async def _sdk_open(store: str, where: str, n: int) -> list[Any]:
    if store == "ours":
        from journal.adapters.openai_agents import JournalSession

        return [await JournalSession.open(f"s{k}", os.path.join(where, "sessions")) for k in range(n)]
    cls = _sdk_session_class(store)
    db = os.path.join(where, "sessions.sqlite")
    return [cls(f"s{k}", db) for k in range(n)]


async def _sdk_durability(store: str, session: Any) -> str:
    if store == "ours":
        return OURS_DURABILITY

    def probe() -> str:
        with session._locked_connection() as conn:  # a connection made as every other one is
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            level = conn.execute("PRAGMA synchronous").fetchone()[0]
        return sqlite_durability(mode, level, _how(store, "a subclass's _configure_connection"))

    return await asyncio.to_thread(probe)


async def _sdk_close(sessions: list[Any]) -> None:
    for s in sessions:
        if hasattr(s, "aclose"):
            await s.aclose()
        else:
            s.close()


def sdk_sequential(store: str, where: str, items: int) -> Run:
    async def go() -> Run:
        (session,) = await _sdk_open(store, where, 1)
        t0 = time.perf_counter()
        for i in range(items):
            await session.add_items([_sdk_item(0, i)])
        seconds = time.perf_counter() - t0
        got = await session.get_items()
        stored = {"items": {session.session_id: [it["content"] for it in got]}}
        durability = await _sdk_durability(store, session)
        await _sdk_close([session])
        return Run(items, seconds, dir_bytes(where), durability, stored)

    return asyncio.run(go())


def sdk_concurrent(store: str, where: str, sessions: int, per_session: int) -> Run:
    async def go() -> Run:
        opened = await _sdk_open(store, where, sessions)

        async def one(k: int, s: Any) -> None:
            for i in range(per_session):
                await s.add_items([_sdk_item(k, i)])

        t0 = time.perf_counter()
        await asyncio.gather(*(one(k, s) for k, s in enumerate(opened)))
        seconds = time.perf_counter() - t0
        stored = {"items": {s.session_id: [it["content"] for it in await s.get_items()] for s in opened}}
        durability = await _sdk_durability(store, opened[0])
        await _sdk_close(opened)
        return Run(sessions * per_session, seconds, dir_bytes(where), durability, stored)

    return asyncio.run(go())


# ---------------------------------------------------------------------------------------------
# Google ADK

# SqliteSessionService's defaults, read from google-adk 2.13.0 in .venv:
# google/adk/sessions/sqlite_session_service.py opens a new aiosqlite connection for every call
# (_get_db_connection, line 592, `aiosqlite.connect(self._db_connect_path, uri=...)`) and runs
# only `PRAGMA foreign_keys = ON` on it (line 596; the constant at line 50): no journal_mode
# (so SQLite's rollback journal, DELETE) and no synchronous (the build's DEFAULT_SYNCHRONOUS).
# append_event commits once per event (line 550). FULL is set here by a subclass whose
# _get_db_connection runs `PRAGMA synchronous=FULL` on each connection before yielding it.

ADK_APP = "bench"
ADK_USER = "user"


def adk_ours_available() -> bool:
    return importlib.util.find_spec("journal.adapters.adk") is not None


def _adk_service(store: str, where: str) -> Any:
    if store == "ours":
        from journal.adapters.adk import JournalSessionService  # type: ignore[import-not-found,unused-ignore]

        return JournalSessionService(os.path.join(where, "adk"))
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    db = os.path.join(where, "adk.sqlite")
    if store != FULL:
        return SqliteSessionService(db)

    class SqliteSessionServiceFull(SqliteSessionService):
        @contextlib.asynccontextmanager
        async def _get_db_connection(self) -> Any:
            async with super()._get_db_connection() as conn:
                await conn.execute("PRAGMA synchronous=FULL")
                yield conn

    return SqliteSessionServiceFull(db)


def _adk_event(k: int, i: int) -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(invocation_id=f"inv-{k}-{i}", author="user",
                 content=types.Content(role="user", parts=[types.Part(text=f"session {k} turn {i}: go on")]))


async def _adk_finish(store: str, svc: Any, session_ids: list[str]) -> tuple[dict[str, Any], str]:
    stored = {}
    for sid in session_ids:
        s = await svc.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=sid)
        stored[sid] = [e.content.parts[0].text for e in s.events] if s else None
    durability = await _adk_durability(store, svc)
    await _adk_close(svc)
    return {"events": stored}, durability


async def _adk_durability(store: str, svc: Any) -> str:
    if store == "ours":
        return OURS_DURABILITY
    async with svc._get_db_connection() as conn:
        async with conn.execute("PRAGMA journal_mode") as cur:
            mode = (await cur.fetchone())[0]
        async with conn.execute("PRAGMA synchronous") as cur:
            level = (await cur.fetchone())[0]
    return sqlite_durability(mode, level, _how(store, "a subclass's _get_db_connection"))


async def _adk_close(svc: Any) -> None:
    for closer in ("aclose", "close"):
        fn = getattr(svc, closer, None)
        if fn is not None:
            out = fn()
            if asyncio.iscoroutine(out):
                await out
            break


class _Retry:
    """A peer's call that fails with SQLite's "database is locked" is retried, and counted.

    SqliteSessionService opens a connection per call in rollback-journal mode, and with many
    sessions at once a writer can wait past sqlite3's busy timeout (5 s) and fail. The failed
    call's transaction is rolled back when its connection closes, so it stored nothing and a
    retry is what a caller would do; the time of the failed tries stays on the peer's clock, and
    the run's checks show every event stored exactly once. journal's calls are never retried.
    """

    def __init__(self, store: str) -> None:
        self.store = store
        self.count = 0

    async def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        while True:
            try:
                return await fn(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if self.store == "ours" or "locked" not in str(exc):
                    raise
                self.count += 1


def adk_sequential(store: str, where: str, events: int) -> Run:
    async def go() -> Run:
        svc = _adk_service(store, where)
        call = _Retry(store)
        t0 = time.perf_counter()
        session = await call(svc.create_session, app_name=ADK_APP, user_id=ADK_USER, session_id="s0")
        for i in range(events):
            await call(svc.append_event, session, _adk_event(0, i))
        seconds = time.perf_counter() - t0
        stored, durability = await _adk_finish(store, svc, ["s0"])
        # every call counts, the create too
        return Run(1 + events, seconds, dir_bytes(where), durability, stored, call.count)

    return asyncio.run(go())


def adk_concurrent(store: str, where: str, sessions: int, per_session: int) -> Run:
    async def go() -> Run:
        svc = _adk_service(store, where)
        call = _Retry(store)
        ids = [f"s{k}" for k in range(sessions)]

        async def one(k: int) -> None:
            session = await call(svc.create_session, app_name=ADK_APP, user_id=ADK_USER, session_id=ids[k])
            for i in range(per_session):
                await call(svc.append_event, session, _adk_event(k, i))

        t0 = time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(sessions)))
        seconds = time.perf_counter() - t0
        stored, durability = await _adk_finish(store, svc, ids)
        return Run(sessions * (1 + per_session), seconds, dir_bytes(where), durability, stored, call.count)

    return asyncio.run(go())


# ---------------------------------------------------------------------------------------------
# Tool calls: the guarded adapter against the framework's own store with no guard
#
# A scripted run (no model, no network) calls one tool ``calls`` times; the tool's side effect
# (declared "external-write") appends (scope, n) to a list in this process, which is what the
# check reads: every call ran exactly once, in order. Stores:
#   "ours"    journal's adapter with the framework's guard on: each call's intent is synced before
#             the tool runs and its result after (journal/session/toolguard.py), on top of the
#             adapter's own writes;
#   FULL, SHIPPED  the framework's own SQLite store, no guard (nothing of the kind exists there);
#   UNGUARDED journal's adapter with no guard: what the guard itself costs.

UNGUARDED = "ours, no guard"
GUARD_DURABILITY = (OURS_DURABILITY + "; guard on: each call's intent synced before the tool runs, its result "
                    "appended after (flushed, ToolGuard's default result_durability)")


def _guard_requested(scope: Any) -> int:
    """Tool calls whose intent the guard's journal holds (read outside the clock): the guard was on."""
    return sum(1 for ev in scope.history() if ev.get("type") == "tool.requested")


def _tool_result(n: int) -> str:
    return f"deployed build {n}: " + "y" * 32


def _effects_by_scope(effects: list[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for scope, n in effects:
        out.setdefault(scope, []).append(n)
    return out


def build_tool_graph(calls: int, checkpointer: Any, effects: list[tuple[str, int]], guard: Any) -> Any:
    """A ``tool`` node looping on itself ``calls`` times: one tool call (its side effect) a step."""
    from langgraph.config import get_config
    from langgraph.graph import END, START, StateGraph

    def tool(state: _State) -> dict[str, Any]:
        n = state["count"] + 1
        effects.append((str(get_config()["configurable"]["thread_id"]), n))  # the side effect
        return {"messages": [{"role": "tool", "content": _tool_result(n)}], "count": n}

    if guard is not None:
        from journal.adapters.langgraph_guard import guarded

        tool = guarded(guard, side_effect="external-write", name="deploy")(tool)

    def route(state: _State) -> str:
        return "tool" if state["count"] < calls else END

    builder = StateGraph(_State)
    builder.add_node("tool", tool)
    builder.add_edge(START, "tool")
    builder.add_conditional_edges("tool", route, ["tool", END])
    return builder.compile(checkpointer=checkpointer)


def lg_tools(store: str, where: str, calls: int, runs: int) -> Run:
    """``runs`` sequential ``graph.invoke`` of ``calls`` tool calls, each on a fresh thread."""
    thread_ids = [f"tools-{i}" for i in range(runs)]
    effects: list[tuple[str, int]] = []
    guard: Any = None
    if store in ("ours", UNGUARDED):
        from journal.adapters.langgraph import JournalSaver

        saver: Any = JournalSaver(os.path.join(where, "ckpt"))
        if store == "ours":
            from journal.adapters.langgraph_guard import guard_for

            guard = guard_for(saver)
        durability = GUARD_DURABILITY if guard is not None else OURS_DURABILITY
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(os.path.join(where, "ckpt.sqlite"), check_same_thread=False)  # as from_conn_string
        if store == FULL:
            conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
    graph = build_tool_graph(calls, saver, effects, guard)
    t0 = time.perf_counter()
    for tid in thread_ids:
        graph.invoke({"messages": [], "count": 0}, _lg_config(tid, calls), durability="sync")
    seconds = time.perf_counter() - t0
    results = {}
    for tid in thread_ids:
        tup = saver.get_tuple({"configurable": {"thread_id": tid}})
        results[tid] = [m["content"] for m in (tup.checkpoint["channel_values"].get("messages", []) if tup else [])]
    stored: dict[str, Any] = {"results": results, "effects": _effects_by_scope(effects)}
    if guard is not None:
        stored["guarded"] = {tid: _guard_requested(guard.scope(tid)) for tid in thread_ids}
        guard.close()
    if store in ("ours", UNGUARDED):
        saver.close()
    else:
        mode = saver.conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = saver.conn.execute("PRAGMA synchronous").fetchone()[0]
        durability = sqlite_durability(mode, level, _how(store, "saver.conn"))
        conn.close()
    return Run(calls * runs, seconds, dir_bytes(where), durability, stored)


def sdk_tools(store: str, where: str, calls: int, runs: int) -> Run:
    """``runs`` sessions one after another, each one ``Runner.run`` whose scripted model calls the
    tool ``calls`` times (one call a turn), then answers. Sessions (and guards) open before the clock."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    effects: list[tuple[str, int]] = []
    current = [""]  # the session whose run is going: runs are sequential

    def deploy(n: int) -> str:
        """Deploy build n."""
        effects.append((current[0], n))  # the side effect
        return _tool_result(n)

    def respond(call: Any) -> Any:
        items = call.input if isinstance(call.input, list) else []
        done = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output")
        if done < calls:
            return [function_call("deploy", {"n": done + 1}, call_id=f"call_{current[0]}_{done}")]
        return [assistant_message("done")]

    async def go() -> Run:
        from agents.tool import FunctionTool

        sessions = await _sdk_open("ours" if store == UNGUARDED else store, where, runs)
        plain: FunctionTool = function_tool(deploy)
        guards: list[Any] = []
        if store == "ours":
            from journal.adapters.openai_agents_guard import guard_for, guarded_tool

            guards = [guard_for(s) for s in sessions]
        config = RunConfig(tracing_disabled=True)
        t0 = time.perf_counter()
        for k, session in enumerate(sessions):
            current[0] = session.session_id
            tool = guarded_tool(guards[k], plain, side_effect="external-write") if guards else plain
            model = ScriptedModel([ModelStep.respond(respond) for _ in range(calls + 1)])
            agent: Agent[Any] = Agent(name="ops", instructions="deploy", model=model, tools=[tool])
            result = await Runner.run(agent, "deploy the builds", session=session, run_config=config,
                                      max_turns=calls + TURNS_SPARE)
            if result.final_output != "done":
                raise AssertionError(f"Agents SDK: session {session.session_id} ended with {result.final_output!r}")
        seconds = time.perf_counter() - t0
        results = {}
        for s in sessions:
            got = await s.get_items()
            results[s.session_id] = [i["output"] for i in got if i.get("type") == "function_call_output"]
        durability = GUARD_DURABILITY if guards else await _sdk_durability(
            "ours" if store == UNGUARDED else store, sessions[0])
        stored: dict[str, Any] = {"results": results, "effects": _effects_by_scope(effects)}
        if guards:
            stored["guarded"] = {g.session_id: _guard_requested(g.scope) for g in guards}
        for g in guards:
            g.close()
        await _sdk_close(sessions)
        return Run(calls * runs, seconds, dir_bytes(where), durability, stored)

    return asyncio.run(go())


TURNS_SPARE = 5  # model turns a tool-calling run may take beyond its tool calls (the final answer)


def _adk_scripted_model(calls: int) -> Any:
    """A stand-in for a model: calls deploy(n) while the request holds fewer than ``calls`` of its
    responses, then says it is done (ADK's BaseLlm, built here so the module imports without ADK)."""
    from collections.abc import AsyncGenerator

    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class Scripted(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request: LlmRequest,
                                         stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            done = sum(1 for c in llm_request.contents for p in c.parts or []
                       if p.function_response is not None and p.function_response.name == "deploy")
            if done < calls:
                part = types.Part(function_call=types.FunctionCall(name="deploy", args={"n": done + 1}))
            else:
                part = types.Part(text="done")
            # a real model reports its tokens; without them ADK's telemetry logs a warning a call
            usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1, candidates_token_count=1,
                                                               total_token_count=2)
            yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)

    return Scripted()


def adk_tools(store: str, where: str, calls: int, runs: int) -> Run:
    """``runs`` sessions one after another: ``create_session``, then one ``run_async`` whose scripted
    model calls the tool ``calls`` times (one call a model turn), then answers."""
    from google.adk.agents.llm_agent import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.genai import types

    effects: list[tuple[str, int]] = []
    current = [""]  # the session whose run is going: runs are sequential

    def deploy(n: int) -> dict[str, Any]:
        """Deploys build n."""
        effects.append((current[0], n))  # the side effect
        return {"result": _tool_result(n)}

    async def go() -> Run:
        svc = _adk_service("ours" if store == UNGUARDED else store, where)
        plugins: list[Any] = []
        guard: Any = None
        if store == "ours":
            from journal.adapters.adk_guard import GuardPlugin, guard_for

            guard = guard_for(svc)
            plugins = [GuardPlugin(guard)]
        agent = LlmAgent(name="deployer", model=_adk_scripted_model(calls), tools=[deploy])
        runner = Runner(app=App(name=ADK_APP, root_agent=agent, plugins=plugins), session_service=svc)
        ids = [f"t{k}" for k in range(runs)]
        message = types.Content(role="user", parts=[types.Part(text="deploy the builds")])
        t0 = time.perf_counter()
        for sid in ids:
            current[0] = sid
            await svc.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=sid)
            async for _event in runner.run_async(user_id=ADK_USER, session_id=sid, new_message=message):
                pass
        seconds = time.perf_counter() - t0
        results = {}
        for sid in ids:
            s = await svc.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=sid)
            results[sid] = [(p.function_response.response or {}).get("result") for e in (s.events if s else [])
                            for p in ((e.content.parts or []) if e.content else [])
                            if p.function_response is not None and p.function_response.name == "deploy"]
        durability = GUARD_DURABILITY if guard is not None else await _adk_durability(
            "ours" if store == UNGUARDED else store, svc)
        stored: dict[str, Any] = {"results": results, "effects": _effects_by_scope(effects)}
        if guard is not None:
            from journal.adapters.adk_guard import scope_id

            stored["guarded"] = {sid: _guard_requested(guard.scope(scope_id(ADK_APP, ADK_USER, sid))) for sid in ids}
            guard.close()
        await _adk_close(svc)
        return Run(calls * runs, seconds, dir_bytes(where), durability, stored)

    return asyncio.run(go())


# Pydantic AI ships one ConversationStore, InMemoryConversationStore (pydantic_ai/conversation_store.py in
# .venv, pydantic-ai-slim 2.68.0): nothing reaches the disk. It is still the framework's own store, so
# it is the peer, run as shipped only (there is no synchronous to set); the row against our adapter
# without the guard is the comparison at equal durability.
MEMORY_DURABILITY = ("in memory (the only ConversationStore Pydantic AI ships): **does not sync per commit** "
                     "(nothing reaches the disk)")


def pai_tools(store: str, where: str, calls: int, runs: int) -> Run:
    """``runs`` conversations one after another, each one ``agent.run`` whose scripted model (a
    FunctionModel) calls the tool ``calls`` times, one call a model request, then answers; the app
    saves the run's conversation after it, as Pydantic AI's ConversationStore is meant to be used."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    effects: list[tuple[str, int]] = []
    current = [""]  # the conversation whose run is going: runs are sequential

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == "deploy")
        if done < calls:
            return ModelResponse(parts=[ToolCallPart("deploy", {"n": done + 1})])
        return ModelResponse(parts=[TextPart("done")])

    async def go() -> Run:
        from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore

        conversations: ConversationStore
        if store == SHIPPED:
            conversations = InMemoryConversationStore()
        else:
            from journal.adapters.pydantic_ai import JournalConversationStore

            conversations = await JournalConversationStore(os.path.join(where, "conversations")).open()
        guard: Any = None
        capabilities: list[Any] = []
        if store == "ours":
            from journal.adapters.pydantic_ai_guard import CrashSafeTools, guard_for

            guard = guard_for(conversations)
            capabilities = [CrashSafeTools(guard)]
        agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                                        capabilities=capabilities)

        @agent.tool_plain
        def deploy(n: int) -> str:
            effects.append((current[0], n))  # the side effect
            return _tool_result(n)

        ids = [f"c{k}" for k in range(runs)]
        t0 = time.perf_counter()
        for cid in ids:
            current[0] = cid
            result = await agent.run("deploy the builds", conversation=Conversation(conversation_id=cid))
            if result.output != "done":
                raise AssertionError(f"Pydantic AI: conversation {cid} ended with {result.output!r}")
            await conversations.save(result)
        seconds = time.perf_counter() - t0
        results = {}
        for cid in ids:
            conv = await conversations.load(cid)
            results[cid] = [p.content for m in (conv.messages if conv else []) for p in m.parts
                            if isinstance(p, ToolReturnPart) and p.tool_name == "deploy"]
        stored: dict[str, Any] = {"results": results, "effects": _effects_by_scope(effects)}
        if guard is not None:
            stored["guarded"] = {cid: _guard_requested(guard.scope(cid)) for cid in ids}
            guard.close()
        close = getattr(conversations, "close", None)
        if close is not None:
            await close()
        durability = (GUARD_DURABILITY if guard is not None else
                      MEMORY_DURABILITY if store == SHIPPED else OURS_DURABILITY)
        return Run(calls * runs, seconds, dir_bytes(where), durability, stored)

    return asyncio.run(go())


def check_tools(run: Run, scopes: list[str], calls: int) -> None:
    """Every call's side effect ran exactly once, in order, and the store holds every call's result."""
    want = list(range(1, calls + 1))
    effects = run.stored["effects"]
    wrong = {s: effects.get(s) for s in scopes if effects.get(s) != want}
    extra = sorted(set(effects) - set(scopes))
    if wrong or extra:
        raise AssertionError(f"tool calls: side effects not run exactly once per call: {dict(list(wrong.items())[:3])}"
                             f" ({len(wrong)} of {len(scopes)} scopes wrong), unexpected scopes {extra[:3]}")
    results = run.stored["results"]
    want_results = [_tool_result(n) for n in want]
    bad = [s for s in scopes if results.get(s) != want_results]
    if bad or len(results) != len(scopes):
        raise AssertionError(f"tool calls: stored results wrong for {bad[:3]} ({len(bad)} of {len(scopes)})")
    if run.durability == GUARD_DURABILITY:  # a run that claims the guard: its journal holds every intent
        guarded = run.stored.get("guarded")
        if guarded != {s: calls for s in scopes}:
            raise AssertionError(f"tool calls: the guard's journals hold {guarded} intents, not {calls} a scope")


# ---------------------------------------------------------------------------------------------
# The run


# ---- what each workload must have stored (checked after every run, outside the clock)


def check_langgraph(run: Run, threads: int, steps: int) -> None:
    got = run.stored["threads"]
    want = {"count": steps, "messages": steps, "last": f"step {steps}: " + "x" * 48}
    bad = {tid: v for tid, v in got.items() if v != want}
    if len(got) != threads or bad:
        raise AssertionError(f"LangGraph: {len(got)} threads of {threads}, wrong final states: {bad}")


def check_sdk(run: Run, sessions: int, per_session: int) -> None:
    got = run.stored["items"]
    want = {f"s{k}": [_sdk_item(k, i)["content"] for i in range(per_session)] for k in range(sessions)}
    if got != want:
        wrong = [k for k in want if got.get(k) != want[k]]
        raise AssertionError(f"Agents SDK: sessions with wrong items: {wrong[:5]} ({len(wrong)} of {sessions})")


def check_adk(run: Run, sessions: int, per_session: int) -> None:
    got = run.stored["events"]
    want = {f"s{k}": [f"session {k} turn {i}: go on" for i in range(per_session)] for k in range(sessions)}
    if got != want:
        wrong = [k for k in want if got.get(k) != want[k]]
        raise AssertionError(f"ADK: sessions with wrong events: {wrong[:5]} ({len(wrong)} of {sessions})")


@dataclass
class Workload:
    name: str
    unit: str
    ours: str  # our adapter's name
    peer: str  # the peer's name
    fn: Callable[[str, str], Run]  # (store, directory) -> Run
    check: Callable[[Run], None]  # raises if the run did not store what it claims
    needs: list[str]  # modules that must import, else the workload is skipped
    stores: list[str] = field(default_factory=lambda: list(STORES))  # who runs it, every round
    unguarded: str = ""  # with UNGUARDED in stores: our adapter's name without the guard


def workloads(sz: Sizes) -> list[Workload]:
    lg = ["langgraph", "langgraph.checkpoint.sqlite"]
    adk = ["google.adk", "aiosqlite", "journal.adapters.adk"]
    tool_stores = [*STORES, UNGUARDED]
    return [
        Workload(f"LangGraph sync: invoke of {sz.steps} steps x {sz.runs} fresh threads", "steps/s",
                 "JournalSaver", "SqliteSaver", lambda s, d: lg_sync(s, d, sz.steps, sz.runs),
                 lambda r: check_langgraph(r, sz.runs, sz.steps), lg),
        Workload(f"LangGraph async: gather of {sz.async_threads} ainvoke of {sz.async_steps} steps", "steps/s",
                 "JournalSaver", "AsyncSqliteSaver", lambda s, d: lg_async(s, d, sz.async_steps, sz.async_threads),
                 lambda r: check_langgraph(r, sz.async_threads, sz.async_steps), [*lg, "aiosqlite"]),
        Workload(f"Agents SDK: add_items of 1 item x {sz.items}, one session", "add_items/s",
                 "JournalSession", "SQLiteSession (file)", lambda s, d: sdk_sequential(s, d, sz.items),
                 lambda r: check_sdk(r, 1, sz.items), ["agents"]),
        Workload(f"Agents SDK: {sz.sessions} sessions at once x {sz.session_items} add_items", "add_items/s",
                 "JournalSession", "SQLiteSession (file)",
                 lambda s, d: sdk_concurrent(s, d, sz.sessions, sz.session_items),
                 lambda r: check_sdk(r, sz.sessions, sz.session_items), ["agents"]),
        Workload(f"ADK: create_session + {sz.events} append_event, one session", "calls/s",
                 "JournalSessionService", "SqliteSessionService", lambda s, d: adk_sequential(s, d, sz.events),
                 lambda r: check_adk(r, 1, sz.events), adk),
        Workload(f"ADK: {sz.sessions} sessions at once, create_session + {sz.session_events} append_event",
                 "calls/s", "JournalSessionService", "SqliteSessionService",
                 lambda s, d: adk_concurrent(s, d, sz.sessions, sz.session_events),
                 lambda r: check_adk(r, sz.sessions, sz.session_events), adk),
        Workload(f"LangGraph tool calls: {sz.tool_runs} fresh threads x {sz.tool_calls} guarded node calls",
                 "tool calls/s", "JournalSaver + @guarded", "SqliteSaver, no guard",
                 lambda s, d: lg_tools(s, d, sz.tool_calls, sz.tool_runs),
                 lambda r: check_tools(r, [f"tools-{i}" for i in range(sz.tool_runs)], sz.tool_calls), lg,
                 tool_stores, "JournalSaver, no guard"),
        Workload(f"Agents SDK tool calls: {sz.tool_runs} sessions x Runner.run of {sz.tool_calls} function tool "
                 "calls", "tool calls/s", "JournalSession + guarded_tool", "SQLiteSession (file), no guard",
                 lambda s, d: sdk_tools(s, d, sz.tool_calls, sz.tool_runs),
                 lambda r: check_tools(r, [f"s{k}" for k in range(sz.tool_runs)], sz.tool_calls), ["agents"],
                 tool_stores, "JournalSession, no guard"),
        Workload(f"ADK tool calls: {sz.tool_runs} sessions x run_async of {sz.tool_calls} tool calls", "tool calls/s",
                 "JournalSessionService + GuardPlugin", "SqliteSessionService, no guard",
                 lambda s, d: adk_tools(s, d, sz.tool_calls, sz.tool_runs),
                 lambda r: check_tools(r, [f"t{k}" for k in range(sz.tool_runs)], sz.tool_calls), adk,
                 tool_stores, "JournalSessionService, no guard"),
        Workload(f"Pydantic AI tool calls: {sz.tool_runs} conversations x agent.run of {sz.tool_calls} tool calls",
                 "tool calls/s", "JournalConversationStore + CrashSafeTools",
                 "InMemoryConversationStore (no durability), no guard",
                 lambda s, d: pai_tools(s, d, sz.tool_calls, sz.tool_runs),
                 lambda r: check_tools(r, [f"c{k}" for k in range(sz.tool_runs)], sz.tool_calls),
                 ["pydantic_ai", "journal.adapters.pydantic_ai"], ["ours", SHIPPED, UNGUARDED],
                 "JournalConversationStore, no guard"),
        *claude_sdk_workloads(sz),
        *strands_workloads(sz),
    ]


def missing(w: Workload) -> list[str]:
    out = []
    for mod in w.needs:
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            out.append(mod)
    return out


@contextlib.contextmanager
def scratch(base: str | None) -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="journal-adapters-bench-", dir=base)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_all(sizes: Sizes, rounds: int, base: str | None, log: Callable[[str], None],
            warmup: bool = True, only: str | None = None) -> dict[str, Any]:
    todo = []
    skipped = {}
    for w in workloads(sizes):
        if only and only.lower() not in w.name.lower():
            continue
        gone = missing(w)
        if gone:
            skipped[w.name] = f"not installed or not written yet: {', '.join(gone)}"
        else:
            todo.append(w)
    runs: dict[str, dict[str, list[Run]]] = {w.name: {s: [] for s in w.stores} for w in todo}
    if warmup:  # imports and LangGraph's first-use caches are paid here, by no store's clock
        for w in workloads(QUICK):
            if not missing(w) and not (only and only.lower() not in w.name.lower()):
                for store in w.stores:
                    with scratch(base) as d:
                        w.check(w.fn(store, d))
    for r in range(rounds):
        for w in todo:
            order = w.stores[r % len(w.stores):] + w.stores[: r % len(w.stores)]
            for store in order:
                with scratch(base) as d:
                    got = w.fn(store, d)
                w.check(got)
                runs[w.name][store].append(got)
                log(f"round {r + 1}/{rounds} {w.name} [{store}]: {got.rate:,.0f} {w.unit}, {got.bytes:,} bytes"
                    + (f", {got.retried} calls retried ('database is locked')" if got.retried else ""))
    return {"workloads": todo, "runs": runs, "skipped": skipped}


def fmt_bytes(n: float) -> str:
    return f"{n:,.0f}"


def table(result: dict[str, Any], rounds: int, base: str | None, wall: float, load: tuple[str, str]) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}, "
        f"{sqlite_build_defaults()}; stores in {base or tempfile.gettempdir()}; {rounds} rounds, "
        f"{wall:.0f} s; load average (1 min) {load[0]} at the start, {load[1]} at the end.",
        "",
        "Ratio = journal's rate over the peer's, per round (>1: journal is faster); median and min-max "
        "of the rounds. Rates are medians of the rounds.",
        "",
        "| workload | ours/s | theirs/s | ratio median | ratio min-max | bytes ours | bytes theirs "
        "| peer durability setting |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for w in result["workloads"]:
        runs = result["runs"][w.name]
        ours = runs["ours"]
        for store in (FULL, SHIPPED):
            if store not in runs:  # a peer with no synchronous to set runs as shipped only
                continue
            theirs = runs[store]
            ratios = [a.rate / b.rate for a, b in zip(ours, theirs, strict=True)]
            label = (f"{w.name}, {w.unit}: {w.ours} vs {w.peer} "
                     f"{'at synchronous=FULL' if store == FULL else 'as shipped'}")
            settings = sorted({t.durability for t in theirs})
            retried = [t.retried for t in theirs]
            if any(retried):
                settings.append(f"calls failed with 'database is locked' and retried, per round: "
                                f"{', '.join(map(str, retried))}")
            lines.append(
                f"| {label} | {statistics.median(a.rate for a in ours):,.0f} "
                f"| {statistics.median(b.rate for b in theirs):,.0f} | {statistics.median(ratios):.2f}x "
                f"| {min(ratios):.2f}-{max(ratios):.2f}x | {fmt_bytes(statistics.median(a.bytes for a in ours))} "
                f"| {fmt_bytes(statistics.median(b.bytes for b in theirs))} | {'; '.join(settings)} |"
            )
        if UNGUARDED in runs:  # what the guard itself costs: our adapter with and without it
            bare = runs[UNGUARDED]
            ratios = [a.rate / b.rate for a, b in zip(ours, bare, strict=True)]
            lines.append(
                f"| {w.name}, {w.unit}: {w.ours} vs {w.unguarded} (the guard's own cost) "
                f"| {statistics.median(a.rate for a in ours):,.0f} | {statistics.median(b.rate for b in bare):,.0f} "
                f"| {statistics.median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x "
                f"| {fmt_bytes(statistics.median(a.bytes for a in ours))} "
                f"| {fmt_bytes(statistics.median(b.bytes for b in bare))} | {OURS_DURABILITY}, no guard |"
            )
    shipped: dict[str, set[str]] = {}
    for w in result["workloads"]:
        for t in result["runs"][w.name][SHIPPED]:
            shipped.setdefault(w.peer, set()).add(t.durability.split(" (")[0] + ": " + t.durability.split(": ")[-1])
    if shipped:
        lines += ["", "The peers as shipped (read from their own connections in this run):", ""]
        lines += [f"- {peer}: {'; '.join(sorted(v))}" for peer, v in shipped.items()]
        nosync = sorted(peer for peer, v in shipped.items() if any("does not sync" in x for x in v))
        lines += ["", "Peers that do not sync per commit as shipped: "
                  + (", ".join(nosync) if nosync else "none, with this SQLite build's defaults") + "."]
    if result["skipped"]:
        lines += ["", "Skipped:", ""]
        lines += [f"- {name}: {why}" for name, why in result["skipped"].items()]
    lines += ["", f"Ours: every adapter write is one journal record appended at {OURS_DURABILITY}."]
    return "\n".join(lines) + "\n"


def loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="rounds; every store runs every workload once a round")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--dir", default=None, help="where the scratch stores live (default: the temp dir)")
    ap.add_argument("--out", default=None, help="also write the markdown table to this file")
    ap.add_argument("--only", default=None, help="run only the workloads whose name holds this text "
                                                 "(e.g. 'LangGraph sync', 'Agents SDK', 'ADK')")
    d = Sizes()
    for name, help_ in [("steps", "LangGraph sync: steps per run"), ("runs", "LangGraph sync: runs per round"),
                        ("async-threads", "LangGraph async: concurrent runs"),
                        ("async-steps", "LangGraph async: steps per run"),
                        ("items", "Agents SDK sequential: add_items calls"),
                        ("sessions", "concurrent sessions (Agents SDK, ADK)"),
                        ("session-items", "Agents SDK: add_items per concurrent session"),
                        ("events", "ADK sequential: append_event calls"),
                        ("session-events", "ADK: append_event per concurrent session"),
                        ("tool-calls", "tool calls: calls per run"),
                        ("tool-runs", "tool calls: runs per round, each on a fresh thread or session")]:
        attr = name.replace("-", "_")
        ap.add_argument(f"--{name}", type=int, default=None, help=f"{help_} (default {getattr(d, attr)})")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    sizes = Sizes(**vars(QUICK)) if args.quick else Sizes()
    for attr in vars(sizes):
        v = getattr(args, attr)
        if v is not None:
            if v < 1:
                ap.error(f"--{attr.replace('_', '-')} must be at least 1")
            setattr(sizes, attr, v)
    load0 = loadavg()
    t0 = time.perf_counter()

    def log(line: str) -> None:
        sys.stderr.write(line + "\n")

    result = run_all(sizes, args.rounds, args.dir, log, only=args.only)
    text = table(result, args.rounds, args.dir, time.perf_counter() - t0, (load0, loadavg()))
    sys.stdout.write(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return 0


# ---------------------------------------------------------------------------------------------
# Claude Agent SDK: its reference stores are examples, not shipped; the peer is what the SDK's
# Claude Code writes without a store, its local transcript: each batch's entries appended to a
# .jsonl file as compact JSON lines (open, append, close, as Node's appendFile does), no fsync.

CAS_ENTRIES_PER_APPEND = 4  # entries in one append call (the SDK's mirror sends a turn's few lines at once)
CAS_JSONL_DURABILITY = "JSONL file: lines appended per batch, does not sync (Claude Code's own transcript write)"


def _cas_entry(i: int, k: int) -> dict[str, Any]:
    return {"type": "assistant" if k % 2 else "user", "uuid": f"e{i}-{k}", "parentUuid": f"e{i}-{k - 1}" if k else None,
            "sessionId": "bench", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/repo",
            "message": {"role": "assistant" if k % 2 else "user", "content": [{"type": "text", "text": "x" * 400}]}}


def cas_sequential(store: str, where: str, appends: int) -> Run:
    """``appends`` append calls of CAS_ENTRIES_PER_APPEND entries to one session, one after another."""
    import json

    batches: Any = [[_cas_entry(i, k) for k in range(CAS_ENTRIES_PER_APPEND)] for i in range(appends)]
    if store in (SHIPPED, FULL):
        # FULL: the same write made durable as ours is, an fdatasync of the file per batch.
        path = os.path.join(where, "bench.jsonl")
        t0 = time.perf_counter()
        for batch in batches:
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n" for e in batch))
                if store == FULL:
                    f.flush()
                    os.fdatasync(f.fileno())
        seconds = time.perf_counter() - t0
        with open(path, encoding="utf-8") as f:
            stored = [json.loads(line)["uuid"] for line in f]
        durability = CAS_JSONL_DURABILITY if store == SHIPPED else "JSONL, an fdatasync of the file per batch"
        return Run(appends, seconds, dir_bytes(where), durability, {"uuids": stored})

    from journal.adapters.claude_agent_sdk import JournalSessionStore

    key: Any = {"project_key": "bench", "session_id": "bench"}

    async def go() -> Run:
        async with JournalSessionStore(where) as cas:
            t0 = time.perf_counter()
            for batch in batches:
                await cas.append(key, batch)
            seconds = time.perf_counter() - t0
            got = await cas.load(key) or []
        return Run(appends, seconds, dir_bytes(where), OURS_DURABILITY + " for the transcript, the index's at flush",
                   {"uuids": [e["uuid"] for e in got]})

    return asyncio.run(go())


def check_cas(run: Run, appends: int) -> None:
    want = [f"e{i}-{k}" for i in range(appends) for k in range(CAS_ENTRIES_PER_APPEND)]
    if run.stored["uuids"] != want:
        raise AssertionError(f"Claude Agent SDK: {len(run.stored['uuids'])} entries stored, {len(want)} appended, "
                             "or not in order")


def claude_sdk_workloads(sz: Sizes) -> list[Workload]:
    appends = max(1, sz.items // 4)
    return [Workload(f"Claude Agent SDK: {appends} append calls of {CAS_ENTRIES_PER_APPEND} transcript entries, "
                     "one session", "appends/s", "JournalSessionStore", "JSONL transcript file",
                     lambda s, d: cas_sequential(s, d, appends), lambda r: check_cas(r, appends),
                     ["claude_agent_sdk", "journal.adapters.claude_agent_sdk"])]


# ---------------------------------------------------------------------------------------------
# Strands Agents: the peer is the store Strands ships, FileSessionManager: one JSON file per
# message (a temp file and os.replace, no fsync), listed by os.listdir. Both are driven through
# the SessionRepository interface the way RepositorySessionManager drives them.

STRANDS_FILE_DURABILITY = "one JSON file per message, temp file + os.replace, does not sync (FileSessionManager)"


def _strands_message(i: int) -> Any:
    from strands.types.session import SessionMessage

    role = "assistant" if i % 2 else "user"
    return SessionMessage({"role": role, "content": [{"text": "x" * 400}]}, i)


def _strands_repo(store: str, where: str) -> Any:
    if store == SHIPPED:
        from strands.session.file_session_manager import FileSessionManager

        return FileSessionManager("bench", storage_dir=os.path.join(where, "files"))
    from journal.adapters.strands import JournalSessionManager

    return JournalSessionManager("bench", os.path.join(where, "journals"))


def strands_messages(store: str, where: str, messages: int) -> Run:
    """create_message of ``messages`` messages to one agent of one session, one after another."""
    from strands.types.session import SessionAgent

    repo = _strands_repo(store, where)
    try:
        repo.create_agent("bench", SessionAgent("a", {}, {}))
        batch = [_strands_message(i) for i in range(messages)]
        t0 = time.perf_counter()
        for m in batch:
            repo.create_message("bench", "a", m)
        seconds = time.perf_counter() - t0
        ids = [m.message_id for m in repo.list_messages("bench", "a")]
    finally:
        if store != SHIPPED:
            repo.close()
    durability = STRANDS_FILE_DURABILITY if store == SHIPPED else OURS_DURABILITY
    return Run(messages, seconds, dir_bytes(where), durability, {"ids": ids})


def strands_restore(store: str, where: str, messages: int, restores: int) -> Run:
    """``restores`` times: a new repository lists the ``messages`` messages of the agent (what
    RepositorySessionManager.initialize does when an agent is restored in a new process)."""
    from strands.types.session import SessionAgent

    repo = _strands_repo(store, where)
    repo.create_agent("bench", SessionAgent("a", {}, {}))
    for i in range(messages):
        repo.create_message("bench", "a", _strands_message(i))
    if store != SHIPPED:
        repo.close()
    ids: list[int] = []
    t0 = time.perf_counter()
    for _ in range(restores):
        again = _strands_repo(store, where)
        ids = [m.message_id for m in again.list_messages("bench", "a")]
        if store != SHIPPED:
            again.close()
    seconds = time.perf_counter() - t0
    durability = STRANDS_FILE_DURABILITY if store == SHIPPED else OURS_DURABILITY
    return Run(restores * messages, seconds, dir_bytes(where), durability, {"ids": ids})


def check_strands(run: Run, messages: int) -> None:
    if run.stored["ids"] != list(range(messages)):
        raise AssertionError(f"Strands: {len(run.stored['ids'])} messages listed, {messages} written, or not in order")


def strands_workloads(sz: Sizes) -> list[Workload]:
    messages = max(1, sz.items // 4)
    restored = max(1, sz.events // 5)
    needs = ["strands", "journal.adapters.strands"]
    return [
        Workload(f"Strands: create_message x {messages}, one agent of one session", "messages/s",
                 "JournalSessionManager", "FileSessionManager", lambda s, d: strands_messages(s, d, messages),
                 lambda r: check_strands(r, messages), needs, ["ours", SHIPPED]),
        Workload(f"Strands: restore (a new repository's list_messages) of {restored} messages x 20", "messages/s",
                 "JournalSessionManager", "FileSessionManager", lambda s, d: strands_restore(s, d, restored, 20),
                 lambda r: check_strands(r, restored), needs, ["ours", SHIPPED]),
    ]


if __name__ == "__main__":
    sys.exit(main())
