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

With ``JOURNAL_GUARD_OFF=1`` deploy is a plain node and these tests fail (tests/guard_harness.py
holds the kill points, the side file, the forked lives and the random rounds).
"""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from tests.guard_harness import (
    EXPECT_UNKNOWN,
    GUARD_ON,
    POINTS,
    GuardedApp,
    KillPlan,
    append_line,
    as_unknown_entry,
    assert_asks_about_unknown_call,
    deploy_side_effect,
    in_child,
    kill_hooks,
    kill_this_process,
    missing_framework_reason,
    random_kill_rounds,
    run_example_demo,
    same_on_every_load,
    side_file,
    tool_runs,
    truthful_answer,
)

pytest.importorskip("langgraph", reason=missing_framework_reason("langgraph", "langgraph"))

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from journal.adapters.langgraph import JournalSaver
from journal.adapters.langgraph_guard import GuardNeedsSyncDurabilityError, guarded
from journal.session.toolguard import ToolGuard

THREAD: RunnableConfig = {"configurable": {"thread_id": "t1"}}
LOOPS_RANDOM = 3  # loops of the graph in a random-kill round (one deploy per loop)


class State(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]


def build(saver: JournalSaver, guard: ToolGuard | None, tmp: Path, plan: KillPlan, loops: int = 1) -> Any:
    def prep(s: State) -> State:
        return {"n": s.get("n", 0) + 1, "log": [f"prep:{s.get('n', 0) + 1}"]}

    def deploy(s: State) -> State:
        deploy_side_effect(tmp, plan, s["n"], guarded=guard is not None)
        return {"log": [f"deployed:{s['n']}"]}

    def finish(s: State) -> State:
        plan.reached("after")
        append_line(side_file(tmp), f"finish:{s['n']}")
        return {"log": [f"finish:{s['n']}"]}

    node = guarded(guard, side_effect="external-write")(deploy) if guard is not None else deploy
    b: Any = StateGraph(State)  # its add_node overloads refuse a plain (State) -> State function under mypy
    b.add_node("prep", prep)
    b.add_node("deploy", node)
    b.add_node("finish", finish)
    b.add_edge(START, "prep")
    b.add_edge("prep", "deploy")
    b.add_edge("deploy", "finish")
    b.add_conditional_edges("finish", lambda s: "prep" if s["n"] < loops else END)
    return b.compile(checkpointer=saver)


def _life(tmp: Path, plan: KillPlan, inp: Any, loops: int) -> dict[str, Any]:
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(kill_hooks(saver._store, plan)) if GUARD_ON else None
    try:
        graph = build(saver, guard, tmp, plan, loops)
        graph.invoke(inp, THREAD, durability="sync")
        st = graph.get_state(THREAD)
        return {"interrupts": [i.value for i in st.interrupts], "next": list(st.next), "log": st.values.get("log")}
    finally:
        if guard is not None:
            guard.close()
        saver.close()


def _loads(tmp: Path) -> tuple[Any, Any]:
    """The graph's state and the guard's history, as a fresh process would load them."""
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(saver._store)
    try:
        graph = build(saver, guard, tmp, KillPlan(None))
        st = graph.get_state(THREAD)
        return st.values, guard.scope("t1").history()
    finally:
        guard.close()
        saver.close()


def _check_same_on_every_load(tmp: Path) -> None:
    same_on_every_load(lambda: _loads(tmp))


def _unknown_calls(tmp: Path) -> list[list[Any]]:
    """``[call id, tool, args]`` of the calls the guard's journal holds as unknown and unanswered,
    read as a fresh process would."""
    saver = JournalSaver(str(tmp / "cp"))
    guard = ToolGuard(saver._store)
    try:
        return [[c.call_id, c.tool, c.args] for c in guard.scope("t1").unknown()]
    finally:
        guard.close()
        saver.close()


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), {"n": 0}, 1)
    assert killed
    ran_before = tool_runs(tmp_path).get(1, 0)
    _, resumed = in_child(_life, tmp_path, KillPlan(None), None, 1)
    unknown = resumed["interrupts"]
    if EXPECT_UNKNOWN[point]:
        assert len(unknown) == 1, resumed  # exactly the call whose outcome is unknown, with its arguments
        (u,) = unknown
        assert_asks_about_unknown_call(u, {"n": 1, "log": ["prep:1"]})  # the node's input: the state
        assert _unknown_calls(tmp_path) == [as_unknown_entry(u)]
        assert tool_runs(tmp_path).get(1, 0) == ran_before  # asking ran nothing
        answer = truthful_answer(ran_before > 0, {"log": ["deployed:1"]})
        _, done = in_child(_life, tmp_path, KillPlan(None), Command(resume=answer), 1)
    else:
        assert unknown == [] and _unknown_calls(tmp_path) == [], resumed
        done = resumed
    assert done["interrupts"] == [] and done["next"] == []  # the run finished
    assert "deployed:1" in done["log"] and done["log"][-1] == "finish:1"
    assert tool_runs(tmp_path) == {1: 1}  # at most once; once here, as the answer said
    _check_same_on_every_load(tmp_path)


def test_abandon_runs_nothing_and_the_graph_goes_on(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), {"n": 0}, 2)
    assert killed
    _, resumed = in_child(_life, tmp_path, KillPlan(None), None, 2)
    assert [u["args"]["n"] for u in resumed["interrupts"]] == [1]
    _, done = in_child(_life, tmp_path, KillPlan(None), Command(resume="abandon"), 2)
    assert done["next"] == [] and "deployed:1" not in done["log"] and "deployed:2" in done["log"]
    assert tool_runs(tmp_path) == {1: 1, 2: 1}
    _check_same_on_every_load(tmp_path)


def _finished(out: dict[str, Any], loops: int) -> bool:
    return out.get("next") == [] and (out.get("log") or [None])[-1] == f"finish:{loops}"


def test_random_kills(tmp_path: Path) -> None:
    def resume(tmp: Path, given: Any) -> dict[str, Any]:
        inp: Command[Any] | None = None if given is None else Command(resume=given)
        return in_child(_life, tmp, KillPlan(None), inp, LOOPS_RANDOM)[1]

    random_kill_rounds(tmp_path, GuardedApp(
        units=LOOPS_RANDOM,
        start=lambda tmp, plan: in_child(_life, tmp, plan, {"n": 0}, LOOPS_RANDOM),
        resume=resume,
        asks=lambda out: out.get("interrupts", []),
        finished=lambda out: _finished(out, LOOPS_RANDOM),
        unit_of=lambda ask: ask["args"]["n"],
        result_of=lambda n: {"log": [f"deployed:{n}"]},
        journal_unknown=lambda tmp, out: _unknown_calls(tmp),
        check_history=_check_same_on_every_load,
    ), seed_offset=30, steps_max=LOOPS_RANDOM * 3)


def test_without_the_guard_a_killed_node_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): the plain node runs again from its start."""
    def life(plan: KillPlan, inp: Any) -> dict[str, Any]:
        saver = JournalSaver(str(tmp_path / "cp"))
        try:
            graph = build(saver, None, tmp_path, plan)
            graph.invoke(inp, THREAD, durability="sync")
            return {"next": list(graph.get_state(THREAD).next)}
        finally:
            saver.close()

    killed, _ = in_child(life, KillPlan("mid_tool"), {"n": 0})
    assert killed
    _, out = in_child(life, KillPlan(None), None)
    assert out["next"] == [] and tool_runs(tmp_path) == {1: 2}


def test_a_guarded_node_refuses_to_run_without_sync_durability(tmp_path: Path) -> None:
    saver = JournalSaver(str(tmp_path / "cp"))
    guard = ToolGuard(saver._store)
    try:
        graph = build(saver, guard, tmp_path, KillPlan(None))
        with pytest.raises(GuardNeedsSyncDurabilityError, match='durability="sync"'):
            graph.invoke({"n": 0}, THREAD)  # LangGraph's default: "async"
        assert tool_runs(tmp_path) == {}
    finally:
        guard.close()
        saver.close()


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/langgraph_crash_safe_tool.py, as docs/ADAPTERS.md shows it: killed, asked, answered, finished."""
    out = run_example_demo("langgraph_crash_safe_tool.py", tmp_path)
    assert "'announced'" in out  # the graph's node after deploy ran


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
        append_line(side_file(tmp), f"deploy:{x}:{os.getpid()}")
        if crash:
            kill_this_process()
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
    assert killed and tool_runs(tmp_path) == {0: 1}
    _, resumed = in_child(_task_life, tmp_path, False, None)
    assert [(u["tool"], u["args"]) for u in resumed["interrupts"]] == [("send", 0)]
    assert tool_runs(tmp_path) == {0: 1}
    _, done = in_child(_task_life, tmp_path, False, Command(resume={"answer": "happened", "result": 7}))
    assert done == {"out": [7, 10], "interrupts": []}
    assert tool_runs(tmp_path) == {0: 1, 1: 1}
