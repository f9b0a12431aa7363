"""The Agent Framework adapter against the stores Agent Framework ships, in bench_adapters' method.

    .venv/bin/python bench/bench_agent_framework.py              # 3 rounds
    .venv/bin/python bench/bench_agent_framework.py --quick      # small sizes: a smoke test

Workloads (ours = journal.adapters.agent_framework, every call one record at durability "sync"):

- Checkpoints: ``save`` of ``--checkpoints`` workflow checkpoints of one workflow, one after the
  other, each a small state (a counter and a message list growing by one message) chained to
  the one before, then ``get_latest`` once. JournalCheckpointStorage against
  FileCheckpointStorage (one JSON file per checkpoint, written to a temporary file and renamed).
- History: ``save_messages`` of one message per call (a chat turn), ``--messages`` times on one
  session, then ``get_messages``. JournalHistoryProvider against FileHistoryProvider (one JSON
  Lines file per session, appended; every save reads the whole file first to drop messages it
  holds already).

Equal durability. The framework's file stores never fsync. Each peer runs twice a round: as
shipped, and with an fsync of the file it wrote and of its directory after every call (added
by this benchmark around the peer's own call: the cost of making the peer's acknowledgement
mean what ours means). The rest of the method (rounds, rotation, per-round ratios, bytes on
disk) is bench/bench_adapters.py's, whose ``Run``, ``Workload`` and ``table`` this reuses;
``workloads(sizes)`` is what bench_adapters.py's own list takes in.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# the sibling script, found through the path set above
import bench_adapters as ba

WORKFLOW = "bench-workflow"
SESSION = "bench-session"
PEER_FULL = "fsync of the file and its directory after every call (added by this benchmark): syncs every call"
PEER_SHIPPED = "as shipped: no fsync (the file is renamed or appended in the page cache): does not sync"


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _checkpoint(n: int, previous: str | None) -> Any:
    from agent_framework import WorkflowCheckpoint

    return WorkflowCheckpoint(workflow_name=WORKFLOW, graph_signature_hash="bench", previous_checkpoint_id=previous,
                              state={"count": n, "messages": [f"message {i}" for i in range(n % 20)]},
                              iteration_count=n)


async def _checkpoints(store: str, where: str, n: int) -> ba.Run:
    from agent_framework import FileCheckpointStorage

    from journal.adapters.agent_framework import JournalCheckpointStorage

    storage: Any = JournalCheckpointStorage(where) if store == "ours" else FileCheckpointStorage(where)
    durability = ba.OURS_DURABILITY if store == "ours" else \
        f"FileCheckpointStorage {PEER_FULL if store == ba.FULL else PEER_SHIPPED}"
    previous: str | None = None
    t0 = time.perf_counter()
    for i in range(n):
        cp = _checkpoint(i, previous)
        previous = await storage.save(cp)
        if store == ba.FULL:
            _fsync(os.path.join(where, f"{previous}.json"))
            _fsync(where)
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    seconds = time.perf_counter() - t0
    stored = {"latest": latest.state["count"] if latest is not None else None,
              "ids": len(await storage.list_checkpoint_ids(workflow_name=WORKFLOW))}
    if store == "ours":
        storage.close()
    return ba.Run(n, seconds, ba.dir_bytes(where), durability, stored)


def af_checkpoints(store: str, where: str, n: int) -> ba.Run:
    return asyncio.run(_checkpoints(store, where, n))


async def _history(store: str, where: str, n: int) -> ba.Run:
    import warnings

    from agent_framework import FileHistoryProvider, Message

    from journal.adapters.agent_framework import JournalHistoryProvider

    if store == "ours":
        provider: Any = JournalHistoryProvider(where)
        durability = ba.OURS_DURABILITY
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # it says it is experimental
            provider = FileHistoryProvider(where)
        durability = f"FileHistoryProvider {PEER_FULL if store == ba.FULL else PEER_SHIPPED}"
    t0 = time.perf_counter()
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        await provider.save_messages(SESSION, [Message(role=role, contents=[f"turn {i}: a short chat message"],
                                                       message_id=f"m{i}")])
        if store == ba.FULL:
            _fsync(str(provider._session_file_path(SESSION)))
            _fsync(where)
    got = await provider.get_messages(SESSION)
    seconds = time.perf_counter() - t0
    if store == "ours":
        provider.close()
    return ba.Run(n, seconds, ba.dir_bytes(where), durability, {"messages": [m.message_id for m in got]})


def af_history(store: str, where: str, n: int) -> ba.Run:
    return asyncio.run(_history(store, where, n))


def check_checkpoints(run: ba.Run, n: int) -> None:
    if run.stored != {"latest": n - 1, "ids": n}:
        raise AssertionError(f"the checkpoint storage holds {run.stored}, not {n} checkpoints ending at {n - 1}")


def check_history(run: ba.Run, n: int) -> None:
    if run.stored.get("messages") != [f"m{i}" for i in range(n)]:
        raise AssertionError(f"the history holds {len(run.stored.get('messages', []))} messages, not the {n} saved")


def workloads(sz: ba.Sizes, checkpoints: int, messages: int) -> list[ba.Workload]:
    needs = ["agent_framework", "journal.adapters.agent_framework"]
    return [
        ba.Workload(f"Agent Framework: save of {checkpoints} checkpoints, one workflow, then get_latest",
                    "saves/s", "JournalCheckpointStorage", "FileCheckpointStorage",
                    lambda s, d: af_checkpoints(s, d, checkpoints), lambda r: check_checkpoints(r, checkpoints),
                    needs),
        ba.Workload(f"Agent Framework: save_messages of 1 message x {messages}, one session", "save_messages/s",
                    "JournalHistoryProvider", "FileHistoryProvider", lambda s, d: af_history(s, d, messages),
                    lambda r: check_history(r, messages), needs),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--checkpoints", type=int, default=500)
    ap.add_argument("--messages", type=int, default=1000)
    args = ap.parse_args(argv)
    if args.quick:
        args.checkpoints, args.messages = 10, 20
    todo = workloads(ba.Sizes(), args.checkpoints, args.messages)
    runs: dict[str, dict[str, list[ba.Run]]] = {w.name: {s: [] for s in w.stores} for w in todo}
    load0 = ba.loadavg()
    t0 = time.perf_counter()
    for w in workloads(ba.Sizes(), 5, 5):  # imports and first-use costs, on no store's clock
        for store in w.stores:
            with ba.scratch(args.dir) as d:
                w.check(w.fn(store, d))
    for r in range(args.rounds):
        for w in todo:
            order = w.stores[r % len(w.stores):] + w.stores[: r % len(w.stores)]
            for store in order:
                with ba.scratch(args.dir) as d:
                    got = w.fn(store, d)
                w.check(got)
                runs[w.name][store].append(got)
                sys.stderr.write(f"round {r + 1}/{args.rounds} {w.name} [{store}]: {got.rate:,.0f} {w.unit}\n")
    result = {"workloads": todo, "runs": runs, "skipped": {}}
    sys.stdout.write(ba.table(result, args.rounds, args.dir, time.perf_counter() - t0, (load0, ba.loadavg())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
