"""LangGraph with the crash-safe tool guard (journal/adapters/langgraph_guard.py), killed with SIGKILL.

A real graph on a JournalSaver: ``prep`` -> ``deploy`` (guarded: it appends a line to a side file
outside the journal) -> ``finish``, looping ``loops`` times. Each life of the graph runs in a
child forked from this process (LangGraph is imported once); the first life kills itself with
SIGKILL at a chosen point of deploy's life, forced by a hook on the guard's journal (its
``append_many``: before/after the intent batch, before/after the result) or in the tool's body
or the next node -- no sleeps. Each later life is a new process that resumes the thread.

Checks: the tool ran at most once unless the app answered "run_again"; the resume surfaced
exactly the calls whose outcome is unknown, with their arguments; after an answer the run
finishes; the history (the graph's state and the guard's journal) is the same on every load.

``JOURNAL_GUARD_OFF=1`` runs the same tests with the guard turned off (a plain node): they fail
(the tool runs twice, nothing is surfaced). ``JOURNAL_GUARD_ROUNDS`` sets the random rounds (20).
"""

from __future__ import annotations

import json
import operator
import os
import random
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from journal.adapters.langgraph import JournalSaver
from journal.adapters.langgraph_guard import GuardNeedsSyncDurabilityError, guarded
from journal.session.toolguard import ToolGuard

GUARD_ON = os.environ.get("JOURNAL_GUARD_OFF") != "1"
ROUNDS = int(os.environ.get("JOURNAL_GUARD_ROUNDS", "20"))
POINTS = ("before_intent", "after_intent", "mid_tool", "before_result", "after_result", "after")
THREAD = {"configurable": {"thread_id": "t1"}}


class State(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Plan:
    """Kill this process at the ``at``-th time ``point`` is reached."""

    def __init__(self, point: str | None, at: int = 1) -> None:
        self.point, self.at, self.seen = point, at, 0

    def reached(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.at:
                _die()


class _HookedJournal:
    def __init__(self, j: Any, plan: Plan) -> None:
        self._j, self._plan = j, plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._j, name)

    def append_many(self, events: Any, *args: Any, **kw: Any) -> Any:
        events = list(events)
        kind = "intent" if any(e.get("type") == "tool.requested" for e in events) else (
            "result" if any(e.get("type") == "tool.result" for e in events) else None)
        if kind is not None:
            self._plan.reached(f"before_{kind}")
        out = self._j.append_many(events, *args, **kw)
        if kind is not None:
            self._plan.reached(f"after_{kind}")
        return out


class _HookedStore:
    def __init__(self, store: Any, plan: Plan) -> None:
        self._store, self._plan = store, plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def open(self, name: str, **kw: Any) -> Any:
        return _HookedJournal(self._store.open(name, **kw), self._plan)


def _line(side: Path, text: str) -> None:
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def build(saver: JournalSaver, guard: ToolGuard | None, side: Path, plan: Plan, loops: int = 1) -> Any:
    def prep(s: State) -> State:
        return {"n": s.get("n", 0) + 1, "log": [f"prep:{s.get('n', 0) + 1}"]}

    def deploy(s: State) -> State:
        if guard is None and plan.point in ("before_intent", "after_intent"):
            plan.reached(plan.point)  # no intent without the guard: the same moment, before the tool
        _line(side, f"deploy:{s['n']}:{os.getpid()}")
        plan.reached("mid_tool")
        if guard is None and plan.point in ("before_result", "after_result"):
            plan.reached(plan.point)
        return {"log": [f"deployed:{s['n']}"]}

    def finish(s: State) -> State:
        plan.reached("after")
        _line(side, f"finish:{s['n']}")
        return {"log": [f"finish:{s['n']}"]}

    node = guarded(guard, side_effect="external-write")(deploy) if guard is not None else deploy
    b = StateGraph(State)
    b.add_node("prep", prep)
    b.add_node("deploy", node)
    b.add_node("finish", finish)
    b.add_edge(START, "prep")
    b.add_edge("prep", "deploy")
    b.add_edge("deploy", "finish")
    b.add_conditional_edges("finish", lambda s: "prep" if s["n"] < loops else END)
    return b.compile(checkpointer=saver)


def _life(tmp: Path, plan: Plan, inp: Any, loops: int) -> dict[str, Any]:
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(_HookedStore(saver._store, plan)) if GUARD_ON else None
    try:
        graph = build(saver, guard, tmp / "side.log", plan, loops)
        graph.invoke(inp, THREAD, durability="sync")
        st = graph.get_state(THREAD)
        return {"interrupts": [i.value for i in st.interrupts], "next": list(st.next), "log": st.values.get("log")}
    finally:
        if guard is not None:
            guard.close()
        saver.close()


def in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> tuple[bool, dict[str, Any]]:
    """Run ``fn`` in a forked child; (killed by SIGKILL, what it returned)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            try:
                payload = json.dumps(fn(*args))
            except BaseException as exc:
                payload = json.dumps({"error": repr(exc)})
            os.write(w, payload.encode())
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    out = json.loads(b"".join(chunks)) if chunks else {}
    assert "error" not in out, out["error"]
    return killed, out


def _deploys(tmp: Path) -> dict[int, int]:
    side = tmp / "side.log"
    counts: dict[int, int] = {}
    for line in side.read_text().splitlines() if side.exists() else []:
        if line.startswith("deploy:"):
            n = int(line.split(":")[1])
            counts[n] = counts.get(n, 0) + 1
    return counts


def _loads(tmp: Path) -> tuple[Any, Any]:
    """The graph's state and the guard's history, as a fresh process would load them."""
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(saver._store)
    try:
        graph = build(saver, guard, tmp / "side.log", Plan(None))
        st = graph.get_state(THREAD)
        return st.values, guard.scope("t1").history()
    finally:
        guard.close()
        saver.close()


def _check_same_on_every_load(tmp: Path) -> None:
    assert _loads(tmp) == _loads(tmp)


EXPECT_UNKNOWN = {"before_intent": False, "after_intent": True, "mid_tool": True, "before_result": True,
                  "after_result": False, "after": False}


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, Plan(point), {"n": 0}, 1)
    assert killed
    ran_before = _deploys(tmp_path).get(1, 0)
    _, resumed = in_child(_life, tmp_path, Plan(None), None, 1)
    unknown = resumed["interrupts"]
    if EXPECT_UNKNOWN[point]:
        assert len(unknown) == 1, resumed  # exactly the call whose outcome is unknown, with its arguments
        (u,) = unknown
        assert u["tool"] == "deploy" and u["args"]["n"] == 1
        assert [(c.call_id, c.args) for c in _unknown_calls(tmp_path)] == [(u["callId"], u["args"])]
        assert [r["code"] for r in u["reasons"]] == ["TOOL_OUTCOME_UNKNOWN"]
        assert [o["answer"] for o in u["options"]] == ["happened", "run_again", "abandon"]
        assert _deploys(tmp_path).get(1, 0) == ran_before  # asking ran nothing
        answer: Any = ({"answer": "happened", "result": {"log": ["deployed:1"]}} if ran_before else "run_again")
        _, done = in_child(_life, tmp_path, Plan(None), Command(resume=answer), 1)
        expected_runs = 1
    else:
        assert unknown == [] and _unknown_calls(tmp_path) == [], resumed
        done = resumed
        expected_runs = 1
    assert done["interrupts"] == [] and done["next"] == []  # the run finished
    assert "deployed:1" in done["log"] and done["log"][-1] == "finish:1"
    assert _deploys(tmp_path) == {1: expected_runs}  # at most once; once here, as the answer said
    _check_same_on_every_load(tmp_path)


def test_abandon_runs_nothing_and_the_graph_goes_on(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, Plan("mid_tool"), {"n": 0}, 2)
    assert killed
    _, resumed = in_child(_life, tmp_path, Plan(None), None, 2)
    assert [u["args"]["n"] for u in resumed["interrupts"]] == [1]
    _, done = in_child(_life, tmp_path, Plan(None), Command(resume="abandon"), 2)
    assert done["next"] == [] and "deployed:1" not in done["log"] and "deployed:2" in done["log"]
    assert _deploys(tmp_path) == {1: 1, 2: 1}
    _check_same_on_every_load(tmp_path)


def test_random_kills(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "0")) + 30)
    loops = 3
    for r in range(ROUNDS):
        tmp = tmp_path / f"r{r}"
        tmp.mkdir()
        point, at = rng.choice(POINTS), rng.randint(1, loops)
        killed, out = in_child(_life, tmp, Plan(point, at), {"n": 0}, loops)
        reruns: dict[int, int] = {}
        inp: Any = None
        for _ in range(loops * 3):  # bounded: at most one unknown call per kill
            _, out = in_child(_life, tmp, Plan(None), inp, loops)
            if not out["interrupts"]:
                break
            (u,) = out["interrupts"]
            n = u["args"]["n"]
            assert killed and u["tool"] == "deploy"
            assert [(c.call_id, c.args) for c in _unknown_calls(tmp)] == [(u["callId"], u["args"])]
            answer = rng.choice(["happened", "run_again", "abandon"])
            reruns[n] = reruns.get(n, 0) + (answer == "run_again")
            inp = Command(resume={"answer": "happened", "result": {"log": [f"deployed:{n}"]}}
                          if answer == "happened" else answer)
        assert out["next"] == [] and out["log"][-1] == f"finish:{loops}", (r, point, at, out)
        for n, count in _deploys(tmp).items():
            assert count <= 1 + reruns.get(n, 0), (r, point, at, n, count, reruns)
        _check_same_on_every_load(tmp)


def _unknown_calls(tmp: Path) -> list[Any]:
    """The calls the guard's journal holds as unknown and unanswered, read as a fresh process would."""
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(saver._store)
    try:
        return guard.scope("t1").unknown()
    finally:
        guard.close()
        saver.close()


def test_without_the_guard_a_killed_node_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): the plain node runs again from its start."""
    def life(plan: Plan, inp: Any) -> dict[str, Any]:
        saver = JournalSaver(str(tmp_path / "cp"))
        try:
            graph = build(saver, None, tmp_path / "side.log", plan)
            graph.invoke(inp, THREAD, durability="sync")
            return {"next": list(graph.get_state(THREAD).next)}
        finally:
            saver.close()

    killed, _ = in_child(life, Plan("mid_tool"), {"n": 0})
    assert killed
    _, out = in_child(life, Plan(None), None)
    assert out["next"] == [] and _deploys(tmp_path) == {1: 2}


def test_a_guarded_node_refuses_to_run_without_sync_durability(tmp_path: Path) -> None:
    saver = JournalSaver(str(tmp_path / "cp"))
    guard = ToolGuard(saver._store)
    try:
        graph = build(saver, guard, tmp_path / "side.log", Plan(None))
        with pytest.raises(GuardNeedsSyncDurabilityError, match='durability="sync"'):
            graph.invoke({"n": 0}, THREAD)  # LangGraph's default: "async"
        assert _deploys(tmp_path) == {}
    finally:
        guard.close()
        saver.close()


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/langgraph_crash_safe_tool.py, as docs/ADAPTERS.md shows it: killed, asked, answered, finished."""
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "examples" / "langgraph_crash_safe_tool.py"
    out = subprocess.run([sys.executable, str(example), "demo", str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert "run: the process was killed inside deploy" in out
    assert "resume: deploy(" in out and "run_again: run it again" in out
    assert "answer happened: finished=True" in out and "'announced'" in out
    assert "deployed.log has 1 line(s)" in out


def test_a_return_value_json_cannot_hold_goes_through_the_savers_serde(tmp_path: Path) -> None:
    import datetime

    from journal.adapters import langgraph_guard

    saver = JournalSaver(str(tmp_path / "cp"))
    guard = langgraph_guard.guard_for(saver)
    try:
        codec = langgraph_guard._Codec(langgraph_guard._SERDES.get(guard))
        value = {"at": datetime.datetime(2026, 1, 2, 3, 4, 5), "n": [1, 2]}
        stored = codec.encode(value)
        assert set(stored) == {"$serde", "b64"}
        assert json.loads(json.dumps(stored)) == stored and codec.decode(stored) == value
        assert codec.encode({"log": ["x"]}) == {"log": ["x"]}  # JSON stays readable
    finally:
        guard.close()
        saver.close()


def _task_life(tmp: Path, crash: bool, inp: Any) -> dict[str, Any]:
    """A functional-API workflow whose guarded @task appends a line; killed inside the first task."""
    from langgraph.func import entrypoint, task

    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(saver._store)

    @task
    @guarded(guard)
    def send(x: int) -> int:
        _line(tmp / "side.log", f"deploy:{x}:{os.getpid()}")
        if crash:
            _die()
        return x * 10

    @entrypoint(checkpointer=saver)
    def workflow(n: int) -> list[int]:
        return [send(i).result() for i in range(n)]

    try:
        out = workflow.invoke(inp, THREAD, durability="sync")
        st = workflow.get_state(THREAD)
        return {"out": out if isinstance(out, list) else None, "interrupts": [i.value for i in st.interrupts]}
    finally:
        guard.close()
        saver.close()


def test_a_guarded_task_killed_mid_call_is_asked_about(tmp_path: Path) -> None:
    killed, _ = in_child(_task_life, tmp_path, True, 2)
    assert killed and _deploys(tmp_path) == {0: 1}
    _, resumed = in_child(_task_life, tmp_path, False, None)
    assert [(u["tool"], u["args"]) for u in resumed["interrupts"]] == [("send", 0)]
    assert _deploys(tmp_path) == {0: 1}
    _, done = in_child(_task_life, tmp_path, False, Command(resume={"answer": "happened", "result": 7}))
    assert done == {"out": [7, 10], "interrupts": []}
    assert _deploys(tmp_path) == {0: 1, 1: 1}
