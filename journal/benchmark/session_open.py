"""Opening a session of 500 events against one of 50,000 (issue 33): how the sessions are built and
opened, shared by ``journal bench`` (runner.py) and bench/bench_session_open.py.

Each session is a run of turns with three tool calls each (EVENTS_PER_TURN events a turn), written
with ``append_many`` under the journal, then opened once read-write as a runtime would after an
upgrade (that open replays the whole history and, at close, saves the session snapshot). A timed
figure is the median of OPENS_PER_FIGURE opens of one kind (one open is about a millisecond).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import journal
from journal import session

SID = "s-bench-open"
TIME = "2026-01-01T00:00:00.000Z"
EVENTS_PER_TURN = 13
TARGET_RATIO_MAX = 2.0  # the acceptance: big/small at most this
OPENS_PER_FIGURE = 15
SMALL_EVENTS = 500
BIG_EVENTS = 50_000
APPEND_BATCH_EVENTS = 1000


def ev(type_: str, data: dict[str, Any] | None = None, **ids: str) -> dict[str, Any]:
    keys = {"turn_id": "turnId", "tool_call_id": "toolCallId", "attempt_id": "attemptId"}
    out: dict[str, Any] = {"schemaVersion": 1, "sessionId": SID, "type": type_, "time": TIME}
    out.update({keys[k]: v for k, v in ids.items()})
    out["data"] = data or {}
    return out


def events(total: int) -> Iterator[dict[str, Any]]:
    yield ev("session.started", {"workspace": {"path": "/repo"}, "lineage": {"depth": 0}})
    n, t = 1, 0
    while n < total:
        tid = f"t{t}"
        turn = [ev("user.message", {"text": f"request {t}: make the auth tests pass"}), ev("turn.started", turn_id=tid)]
        for k in range(3):
            call = f"{tid}.c{k}"
            turn += [
                ev(
                    "tool.requested",
                    {"tool": "bash", "args": {"cmd": f"pytest -k {k}"}, "sideEffect": "read", "idempotency": "safe"},
                    turn_id=tid,
                    tool_call_id=call,
                ),
                ev("tool.started", turn_id=tid, tool_call_id=call),
                ev("tool.result", {"status": "ok", "output": "3 passed"}, turn_id=tid, tool_call_id=call),
            ]
        turn += [
            ev("assistant.message", {"text": f"done {t}"}, turn_id=tid, attempt_id=f"{tid}.a"),
            ev("turn.ended", {"reason": "completed"}, turn_id=tid),
        ]
        yield from turn[: total - n]
        n += len(turn)
        t += 1


def build(path: str, total: int) -> None:
    """A session of ``total`` events at ``path``, opened once read-write (its snapshot saved)."""
    with journal.open(path, create=True) as j:
        batch: list[dict[str, Any]] = []
        for e in events(total):
            batch.append(e)
            if len(batch) == APPEND_BATCH_EVENTS:
                j.append_many(batch, durability="flush")
                batch = []
        if batch:
            j.append_many(batch, durability="flush")
        j.sync()
    with session.open(path):  # the first open replays everything and saves the snapshot at close
        pass


def timed(fn: Callable[[], None], repeat: int = OPENS_PER_FIGURE) -> float:
    """The median of ``repeat`` calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def session_rw(path: str) -> None:
    session.open(path).close()


def session_ro(path: str) -> None:
    session.open(path, readonly=True).close()


def journal_rw(path: str) -> None:
    journal.open(path).close()


def journal_ro(path: str) -> None:
    journal.open(path, readonly=True).close()


# The opens timed, by name: the session's two (the targets) and the journal's under them.
OPENS: dict[str, Callable[[str], None]] = {
    "session rw": session_rw,
    "session ro": session_ro,
    "journal rw": journal_rw,
    "journal ro": journal_ro,
}
TARGETED = ("session rw", "session ro")

__all__ = [
    "BIG_EVENTS",
    "OPENS",
    "OPENS_PER_FIGURE",
    "SMALL_EVENTS",
    "TARGETED",
    "TARGET_RATIO_MAX",
    "build",
    "events",
    "timed",
]
