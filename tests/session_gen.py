"""A generator of realistic sessions for the fork, snapshot and store tests."""

from __future__ import annotations

import random
from typing import Any

from journal import session
from journal.session.session import Session

FIXED_TIME = "2026-01-01T00:00:00.000Z"


def write_session(
    path: str, seed: int, turns: int, segment_size_bytes: int = 4096, **options: Any
) -> Session:
    """A session of ``turns`` turns with tools, approvals, compactions and goal updates (left open)."""
    rng = random.Random(seed)
    s = session.open(path, create=True, workspace={"path": "/repo", "fingerprint": "git:1"},
                     clock=lambda: FIXED_TIME, segment_size_bytes=segment_size_bytes, **options)
    add_turns(s, rng, turns, 0)
    return s


def add_turns(s: Session, rng: random.Random, turns: int, first: int) -> None:
    for t in range(first, first + turns):
        tid = f"t{t}"
        s.append("user.message", {"text": f"request {t}: " + "x" * rng.randrange(0, 80)})
        if rng.random() < 0.2:
            s.append("goal.updated", {"goal": {"text": f"goal {t}", "status": "active"}})
        s.append("turn.started", turn_id=tid)
        for k in range(rng.randrange(1, 3)):
            sid = f"{tid}.{k}"
            s.append("step.started", turn_id=tid, step_id=sid)
            s.append("model.requested", turn_id=tid, step_id=sid)
            for d in range(rng.randrange(0, 3)):
                s.append("assistant.delta", {"text": f"d{d}"}, turn_id=tid, step_id=sid, attempt_id=f"{sid}.a")
            s.append("assistant.message", {"text": f"answer {t}.{k}"}, turn_id=tid, step_id=sid, attempt_id=f"{sid}.a")
            if rng.random() < 0.6:
                call = f"{sid}.c"
                approval = f"{sid}.ap" if rng.random() < 0.3 else None
                s.append("tool.requested", {"tool": "bash", "args": {"cmd": "make"}, "sideEffect": "process",
                                            "idempotency": "unsafe"}, turn_id=tid, step_id=sid, tool_call_id=call,
                         approval_id=approval)
                if approval:
                    s.append("approval.requested", {}, turn_id=tid, tool_call_id=call, approval_id=approval)
                    s.append("approval.decided", {"decision": "allowed"}, turn_id=tid, approval_id=approval)
                s.append("tool.started", turn_id=tid, step_id=sid, tool_call_id=call)
                s.append("tool.output", {"chunk": "..."}, turn_id=tid, tool_call_id=call)
                s.append("tool.result", {"status": "ok", "output": "y" * rng.randrange(0, 300)}, turn_id=tid,
                         step_id=sid, tool_call_id=call)
                s.append("assistant.message", {"text": f"after tool {t}.{k}"}, turn_id=tid, step_id=sid,
                         attempt_id=f"{sid}.b")
            s.append("step.ended", {"reason": "completed"}, turn_id=tid, step_id=sid)
        if rng.random() < 0.15:
            cid = f"{tid}.k"
            s.append("compaction.started", {"compactionId": cid}, turn_id=tid)
            s.append("compaction.ended", {"compactionId": cid, "replacedFromSeq": 1, "replacedToSeq": 3,
                                          "summary": "earlier work"}, turn_id=tid)
        s.append("turn.ended", {"reason": "completed"}, turn_id=tid)
