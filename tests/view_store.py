"""Session stores for the viewer's tests and benchmark: a clean session with a tool call, a fork
of it, a crashed session repaired on open (its closers, a paused gate), a damaged journal."""

from __future__ import annotations

import glob
import os
import random
import shutil
from dataclasses import dataclass
from typing import Any

from journal.session.session import Session
from journal.session.store import SessionStore

SEARCH_WORD = "flamingo"  # only in one tool result's output


@dataclass
class Built:
    root: str
    clean: str
    child: str
    crashed: str
    fork_seq: int


def _turn(s: Session, n: int, tool_output: str = "ok", args: dict[str, Any] | None = None,
          result: bool = True) -> None:
    tid, step, call = f"t{n}", f"t{n}.s", f"t{n}.c"
    s.append("turn.started", turn_id=tid)
    s.append("step.started", turn_id=tid, step_id=step)
    s.append("model.requested", turn_id=tid, step_id=step)
    s.append("assistant.message", {"text": f"I will run a command for turn {n}.",
                                   "usage": {"input_tokens": 1200 + n, "output_tokens": 80, "cost": 0.0042}},
             turn_id=tid, step_id=step, attempt_id=f"{step}.a")
    s.append("tool.requested", {"tool": "bash", "args": args or {"cmd": "ls -la"}, "sideEffect": "process",
                                "idempotency": "unsafe"}, turn_id=tid, step_id=step, tool_call_id=call)
    s.append("tool.started", turn_id=tid, step_id=step, tool_call_id=call)
    if not result:
        return
    s.append("tool.result", {"status": "ok", "output": tool_output}, turn_id=tid, step_id=step, tool_call_id=call)
    s.append("assistant.message", {"text": f"Done with turn {n}."}, turn_id=tid, step_id=step,
             attempt_id=f"{step}.b")
    s.append("step.ended", {"reason": "completed"}, turn_id=tid, step_id=step)
    s.append("turn.ended", {"reason": "completed"}, turn_id=tid)


def build_store(root: str | Any) -> Built:
    """The sessions in a store directory ``root``, or in a session store object (a server's)."""
    store = SessionStore(root) if isinstance(root, str) else root
    with store.create(workspace={"path": "/repo/app"}) as s:
        clean = s.store_id
        s.append("user.message", {"text": "Please list the files in the repository"})
        _turn(s, 0, "README.md\nsetup.py\n" + SEARCH_WORD + ".txt\n" + "\n".join(f"file{i}.py" for i in range(40)))
        fork_seq = s.append("user.message", {"text": "Now count the lines"}).event.seq
        _turn(s, 1, "1234 total")
    child = store.fork(clean, at_seq=fork_seq).session_id
    with store.open(child) as s:
        s.append("user.message", {"text": "A different direction on the fork"})
        _turn(s, 2, "forked work")
    with store.create(workspace={"path": "/repo/svc"}) as s:
        crashed = s.store_id
        s.append("user.message", {"text": "Deploy the service to staging"})
        _turn(s, 0, args={"cmd": "make deploy"}, result=False)
        # The process dies here: no result, the step and the turn open. Closing without
        # repair stands for the kill; the store's open below repairs, as a runtime's would.
        s.store = None
        Session.close(s)
    with store.open(crashed):
        pass
    return Built(root if isinstance(root, str) else "", clean, child, crashed, fork_seq)


def build_many(root: str, sessions: int, events_each: int = 12, seed: int = 0) -> SessionStore:
    """``sessions`` small sessions, for the benchmark's store page and search index."""
    rng = random.Random(seed)
    store = SessionStore(root)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    for i in range(sessions):
        with store.create(workspace={"path": f"/repo/{i % 17}"}) as s:
            s.append("user.message", {"text": f"task {i}: " + " ".join(rng.choices(words, k=8))})
            for t in range(max(1, events_each // 10)):
                _turn(s, t, " ".join(rng.choices(words, k=30)) + f" unique{i}")
    return store


def damage(journal_dir: str, how: str) -> None:
    """``torn``: half a frame after the last one; ``corrupt``: bytes of a sealed segment overwritten."""
    segs = sorted(glob.glob(os.path.join(journal_dir, "0*.seg")))
    if how == "torn":
        with open(segs[-1], "ab") as f:
            f.write(b"\x40\x00\x00\x00half-a-frame")
    elif how == "corrupt":
        if len(segs) < 2:
            raise ValueError("corrupt needs a sealed segment: write a journal with small segments")
        with open(segs[0], "r+b") as f:
            f.seek(300)
            f.write(b"XXXXXXXX")
    else:
        raise ValueError(how)


def copy_tree(src: str, dst: str) -> None:
    shutil.copytree(src, dst, symlinks=True)
