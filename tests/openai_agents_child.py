"""The child of the JournalSession kill test: a fork server, and the workload its children run.

    python -m tests.openai_agents_child

Importing the Agents SDK takes over a second, so one server process imports it once and forks a
child per round (the server is single-threaded when it forks). It reads ``run PATH SEED`` lines
on stdin; each child writes ``pid N``, then ``begin K`` before and ``ack K`` after each operation
of ``plan(SEED)`` on session ``SESSION_ID`` under PATH, and ``end`` if it finishes; the server
writes ``reaped N`` once the child is gone. Lines go straight to fd 1 (os.write), so an ``ack``
read by the parent was written after the operation returned.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from typing import Any

from journal.adapters.openai_agents import JournalSession

SESSION_ID = "kill/test session"
OPS_PER_ROUND = 60


def plan(seed: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """The operations of one round: mostly adds of 1-4 items of assorted sizes, some pops,
    a few clears and whole-history replacements."""
    rng = random.Random(seed)
    ops: list[tuple[str, list[dict[str, Any]]]] = []
    for k in range(OPS_PER_ROUND):
        items = [
            {"role": "user", "content": f"{seed}-{k}-{j}", "pad": "x" * rng.choice((0, 50, 3000, 40000))}
            for j in range(rng.randint(1, 4))
        ]
        r = rng.random()
        op = "pop" if r < 0.15 else "clear" if r < 0.18 else "replace" if r < 0.21 else "add"
        ops.append((op, items if op in ("add", "replace") else []))
    return ops


def apply(model: list[dict[str, Any]], op: str, items: list[dict[str, Any]]) -> None:
    """What one operation does to the list of items (the parent's model of the session)."""
    if op == "add":
        model.extend(items)
    elif op == "pop":
        if model:
            model.pop()
    elif op == "clear":
        model.clear()
    else:
        model[:] = items


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


async def _work(path: str, seed: int) -> None:
    session = JournalSession(SESSION_ID, path)
    for k, (op, items) in enumerate(plan(seed)):
        _say(f"begin {k}")
        if op == "add":
            await session.add_items(items)  # type: ignore[arg-type]
        elif op == "pop":
            await session.pop_item()
        elif op == "clear":
            await session.clear_session()
        else:
            await session.replace_items(items)  # type: ignore[arg-type]
        _say(f"ack {k}")
    session.close()


def main() -> None:
    for line in sys.stdin:
        _, path, seed = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                _say(f"pid {os.getpid()}")
                asyncio.run(_work(path, int(seed)))
                _say("end")
            except BaseException as exc:
                _say(f"error {exc!r}")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        _say(f"reaped {pid}")


if __name__ == "__main__":
    main()
