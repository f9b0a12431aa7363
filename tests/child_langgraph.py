"""The LangGraph graph of tests/test_adapter_langgraph.py, and the child process of its kill test.

    python -m tests.child_langgraph      # a fork server: one JSON command a line on stdin

The graph is plain Python: ``start`` fans out to ``a`` and ``b`` (parallel branches), ``join``
waits for both, and the loop goes round ``loops`` times. Every node execution appends its label
to a side file before it returns, so a test can count how often each one ran.

Importing LangGraph takes most of a second, so the child is a fork server: it imports once, then
for each command forks a grandchild that runs the graph on a JournalSaver. The grandchild is
killed with SIGKILL either by itself, at its k-th saver call (just before or just after the call,
so also between a durable write and the acknowledgement), or by the fork server after a delay,
which lands anywhere, in the middle of a write too. The fork server kills only its own child and
only before reaping it, so the pid cannot belong to anything else. It answers with one line per
command: ``{"pid", "killed"}`` once the grandchild is reaped.

What the grandchild was told was saved goes to ``acked.jsonl`` after each saver call returned:
``{"cp": id}`` for a put, ``{"w": [checkpoint_id, task_id]}`` for a put_writes.

``"mode": "prune"`` runs the graph one loop further per round and prunes the thread after each
(``{"ran": r}``, ``{"pruned": r}``); ``kill_in_prune`` then names the prune step before which
the grandchild kills itself at its ``kill_at``-th prune: "seal", "append_many", "drop_prefix",
or "reindex" (after the drop).
"""

from __future__ import annotations

import json
import operator
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from journal.adapters.langgraph import JournalSaver


class State(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]
    answer: str


def _ran(exec_path: str, label: str) -> None:
    # One write of one line with O_APPEND: whole lines even from parallel branches; the page
    # cache keeps it through a SIGKILL of this process.
    fd = os.open(exec_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{label}\n".encode())
    finally:
        os.close(fd)


def build_graph(
    saver: BaseCheckpointSaver[Any], exec_path: str, loops: int, ask_at: int | None = None
) -> Any:  # a CompiledStateGraph; its generic parameters say nothing useful here
    """The test graph; with ``ask_at``, ``join`` of that loop asks a human (``interrupt()``)."""

    def start(s: State) -> State:
        n = s.get("n", 0) + 1
        _ran(exec_path, f"start:{n}")
        return {"n": n, "log": [f"start:{n}"]}

    def a(s: State) -> State:
        _ran(exec_path, f"a:{s['n']}")
        return {"log": [f"a:{s['n']}"]}

    def b(s: State) -> State:
        _ran(exec_path, f"b:{s['n']}")
        return {"log": [f"b:{s['n']}"]}

    def join(s: State) -> State:
        out: State = {"log": [f"join:{s['n']}"]}
        if ask_at is not None and s["n"] == ask_at:
            out["answer"] = interrupt({"question": f"continue after loop {s['n']}?"})
        _ran(exec_path, f"join:{s['n']}")
        return out

    def again(s: State) -> str:
        return "start" if s["n"] < loops else END

    g = StateGraph(State)
    g.add_node("start", start)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("join", join)
    g.add_edge(START, "start")
    g.add_edge("start", "a")
    g.add_edge("start", "b")
    g.add_edge(["a", "b"], "join")
    g.add_conditional_edges("join", again, ["start", END])
    return g.compile(checkpointer=saver)


def expected_log(loops: int) -> list[str]:
    """The state's log after a whole run (a and b run in one superstep, in task order)."""
    out = []
    for n in range(1, loops + 1):
        out += [f"start:{n}", f"a:{n}", f"b:{n}", f"join:{n}"]
    return out


class KillingSaver(JournalSaver):
    """A JournalSaver that records what it acknowledged and SIGKILLs itself at its k-th call."""

    def __init__(self, path: str, acked_path: str, kill_at: int | None, kill_after: bool) -> None:
        super().__init__(path)
        self._acked_path = acked_path
        self._kill_at = kill_at
        self._kill_after = kill_after
        self._calls = 0
        self._count_lock = threading.Lock()

    def _enter(self) -> int:
        with self._count_lock:
            self._calls += 1
            call = self._calls
        if not self._kill_after and call == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return call

    def _leave(self, call: int) -> None:
        if self._kill_after and call == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def _ack(self, line: dict[str, Any]) -> None:
        _ran(self._acked_path, json.dumps(line))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        call = self._enter()
        out = super().put(config, checkpoint, metadata, new_versions)
        self._leave(call)
        self._ack({"cp": checkpoint["id"]})
        return out

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        call = self._enter()
        super().put_writes(config, writes, task_id, task_path)
        self._leave(call)
        self._ack({"w": [config["configurable"]["checkpoint_id"], task_id]})


class _KillBefore:
    """A thread's journal that SIGKILLs the process just before one named call."""

    def __init__(self, inner: Any, step: str) -> None:
        self._inner = inner
        self._step = step

    def __getattr__(self, name: str) -> Any:
        if name == self._step:
            os.kill(os.getpid(), signal.SIGKILL)
        return getattr(self._inner, name)


class PruneKillingSaver(JournalSaver):
    """A JournalSaver whose ``kill_at``-th compaction dies just before the step ``kill_in_prune``."""

    def __init__(self, path: str, kill_at: int | None, step: str | None) -> None:
        # Small segments: a thread's history spans several, so the latest checkpoint's blobs
        # are in segments a prune drops (they must be copied before the drop).
        super().__init__(path, segment_size_bytes=4096)
        self._kill_at, self._step, self._compactions = kill_at, step, 0

    def _compact(self, thread_id: str, t: Any, keep: set[tuple[str, str]]) -> None:
        self._compactions += 1
        if self._step is not None and self._compactions == self._kill_at:
            if self._step == "reindex":
                t.reindex = lambda serde: os.kill(os.getpid(), signal.SIGKILL)
            else:
                t.journal = _KillBefore(t.journal, self._step)
        super()._compact(thread_id, t, keep)


def run_pruning(cmd: dict[str, Any]) -> None:
    """The grandchild of "prune" mode: one more loop, then a prune, round after round."""
    saver = PruneKillingSaver(cmd["dir"], cmd.get("kill_at"), cmd.get("kill_in_prune"))
    config: RunnableConfig = {"configurable": {"thread_id": cmd["thread"]}}
    for r in range(1, cmd["loops"] + 1):
        graph = build_graph(saver, cmd["exec"], r)
        graph.invoke({}, config, durability="sync")  # a new run from START: one more loop
        _ran(cmd["acked"], json.dumps({"ran": r}))
        saver.prune([cmd["thread"]])
        _ran(cmd["acked"], json.dumps({"pruned": r}))
    saver.close()


def run_child(cmd: dict[str, Any]) -> None:
    """The grandchild: run the graph from wherever its thread is, until done or killed."""
    if cmd.get("mode") == "prune":
        run_pruning(cmd)
        return
    saver = KillingSaver(cmd["dir"], cmd["acked"], cmd.get("kill_at"), cmd.get("kill_after", False))
    graph = build_graph(saver, cmd["exec"], cmd["loops"])
    config: RunnableConfig = {"configurable": {"thread_id": cmd["thread"]}}
    graph.invoke({"n": 0}, config, durability=cmd["durability"])
    saver.close()


def main() -> int:
    for line in sys.stdin:
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run_child(cmd)
            except BaseException:
                code = 1
            os._exit(code)
        delay = cmd.get("kill_delay_s")
        if delay is not None:
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still ours
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"pid": pid, "killed": killed, "code": code}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
