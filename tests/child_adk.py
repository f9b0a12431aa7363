"""The op sequences of tests/test_adapter_adk.py's kill test, and its child process.

    python -m tests.child_adk      # a fork server: one JSON command a line on stdin

Ops are JSON (``make_ops(seed, n)`` makes the same list in the parent and in the child) and
``apply_op`` runs one against any ADK session service, with ADK's time and id providers set from
the op, so InMemorySessionService given the same ops stores the same sessions, times and ids.

Importing ADK costs a fraction of a second, so the child is a fork server: it imports once,
then for each command ``{"dir", "app", "seed", "n", "die_after_writes"}`` forks a grandchild that runs the ops on a
JournalSessionService over ``dir`` and writes ``{"ack": i, "result": ...}`` to stdout after op i
returned; with ``die_after_writes`` k, it SIGKILLs itself just after its k-th committed write,
before that op's acknowledgement. After its last op it writes ``{"end": true}`` and waits to be killed, so it is never
reaped before the parent's SIGKILL and its pid cannot be reused meanwhile. The server writes
``{"pid": pid}`` after each fork and ``{"reaped": pid}`` once that grandchild is dead.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session
from google.genai import types

from journal.adapters.adk import JournalSessionService

USERS = ("u1", "u2")
SESSION_IDS = ("s1", "s2", "s3", "s/4 é")
STATE_KEYS = ("k", "n", "app:shared", "app:count", "user:pref", "temp:scratch")


def _state(rnd: random.Random) -> dict[str, Any]:
    return {k: rnd.choice([rnd.randrange(100), f"v{rnd.randrange(10)}", [1, {"x": None}], None])
            for k in rnd.sample(STATE_KEYS, rnd.randrange(len(STATE_KEYS)))}


def make_ops(seed: int, n: int) -> list[dict[str, Any]]:
    """``n`` ops from ``seed``: creates (some of existing ids: duplicates), appends (some to
    sessions that do not exist) and deletes, each with the time and ids it will use."""
    rnd = random.Random(seed)
    ops: list[dict[str, Any]] = []
    for i in range(n):
        kind = rnd.choices(["create", "append", "delete"], [3, 6, 1])[0]
        user, sid = rnd.choice(USERS), rnd.choice(SESSION_IDS)
        t = 1_000.0 + seed * 100 + i  # distinct per op, so that a prefix is told apart by its times
        if kind == "create":
            ops.append({"op": "create", "user": user, "sid": sid if rnd.random() < 0.8 else None,
                        "gen": f"gen-{seed}-{i}", "state": _state(rnd), "time": t})
        elif kind == "append":
            ops.append({"op": "append", "user": user, "sid": sid, "id": f"e-{seed}-{i}", "time": t,
                        "text": "x" * rnd.randrange(200), "delta": _state(rnd)})
        else:
            ops.append({"op": "delete", "user": user, "sid": sid})
    return ops


async def apply_op(service: BaseSessionService, app: str, op: dict[str, Any]) -> str:
    """Run one op; its result as text: "ok" or the type of the ADK error it raised."""
    try:
        if op["op"] == "create":
            platform_time.set_time_provider(lambda: op["time"])
            platform_uuid.set_id_provider(lambda: op["gen"])
            await service.create_session(app_name=app, user_id=op["user"], session_id=op["sid"], state=op["state"])
        elif op["op"] == "append":
            session = await service.get_session(app_name=app, user_id=op["user"], session_id=op["sid"])
            if session is None:  # a session object for a session storage does not have
                session = Session(id=op["sid"], app_name=app, user_id=op["user"])
            event = Event(id=op["id"], invocation_id="inv", author="agent", timestamp=op["time"],
                          content=types.Content(role="model", parts=[types.Part(text=op["text"])]))
            event.actions.state_delta.update(op["delta"])
            await service.append_event(session, event)
        else:
            await service.delete_session(app_name=app, user_id=op["user"], session_id=op["sid"])
    except (AlreadyExistsError, SessionNotFoundError, StaleSessionError) as exc:
        return type(exc).__name__
    return "ok"


def _say(obj: dict[str, Any]) -> None:
    os.write(1, (json.dumps(obj) + "\n").encode())  # one write per line: whole lines in the pipe


class _DiesAfterWrite(JournalSessionService):
    """Kills its own process with SIGKILL right after its k-th committed write: the write is
    durable and its caller never acknowledged it (the one op in flight)."""

    def __init__(self, path: str, die_after_writes: int | None) -> None:
        super().__init__(path)
        self.writes = 0
        self.die_after_writes = die_after_writes

    async def _write(self, app: Any, record: dict[str, Any], what: str) -> int:
        seq = await super()._write(app, record, what)
        self.writes += 1
        if self.writes == self.die_after_writes:
            os.kill(os.getpid(), signal.SIGKILL)
        return seq


async def _run(cmd: dict[str, Any]) -> None:
    service = _DiesAfterWrite(cmd["dir"], cmd.get("die_after_writes"))
    for i, op in enumerate(make_ops(cmd["seed"], cmd["n"])):
        result = await apply_op(service, cmd["app"], op)
        _say({"ack": i, "result": result})
    _say({"end": True})
    signal.pause()  # wait for the parent's SIGKILL, with the journal still open


def main() -> None:
    for line in sys.stdin:
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(_run(cmd))
            finally:
                os._exit(1)
        _say({"pid": pid})
        os.waitpid(pid, 0)
        _say({"reaped": pid})


if __name__ == "__main__":
    main()
