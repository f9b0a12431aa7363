"""The OpenAI Agents SDK with the crash-safe tool guard (journal/adapters/openai_agents_guard.py), killed
with SIGKILL.

A real agent on a JournalSession with the SDK's own scripted model (``agents.testing``, no network):
asked to deploy v1..vN, it calls the guarded ``deploy`` tool once per version (under a new call id
in every process, as a real model does) until the session holds an output for each version, then
answers. ``deploy`` appends a line to a side file outside the journal. Each life runs in a child
forked from this process (the SDK is imported once); the first life kills itself with SIGKILL at a
chosen point of deploy's life, forced by a hook on the guard's journal (its ``append_many``:
before/after the intent batch, before/after the result) or in the tool's body or the next model
call -- no sleeps. Each later life is a new process that resumes the session ("continue").

Checks: the tool ran at most once unless the app answered "run_again"; the resume surfaced exactly
the calls whose outcome is unknown, with their arguments (as approval interruptions); after an
answer the run finishes; the session's history is well-formed (every function call has an output)
and, with the guard's journal, the same on every load.

``JOURNAL_GUARD_OFF=1`` gives the agent the plain function tool, and these tests fail; what the
four framework guard tests share (killing, counting, the random rounds) is in tests/guard_harness.py.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.guard_harness import (
    EXPECT_UNKNOWN,
    GUARD_ON,
    POINTS,
    GuardedApp,
    KillPlan,
    as_unknown_entry,
    assert_asks_about_unknown_call,
    deploy_side_effect,
    in_child,
    kill_hooks,
    missing_framework_reason,
    random_kill_rounds,
    run_example_demo,
    same_on_every_load,
    tool_runs,
    truthful_answer,
)

pytest.importorskip("agents", reason=missing_framework_reason("agents", "openai-agents"))

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.run_state import RunState
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as model_call

import journal
from journal.adapters.openai_agents import JournalSession
from journal.adapters.openai_agents_guard import SessionGuard, guard_for, guarded_tool
from journal.session.toolguard import ToolGuard, happened

SESSION = "ops-1"
MODEL_CALLS_MAX = 64  # scripted model calls one life may make (a life makes at most 2 per version)
RUN_CONFIG = RunConfig(tracing_disabled=True)
VERSIONS_RANDOM = 3  # versions a random-kill round deploys (one deploy call each)


def _outputs(items: list[Any]) -> list[str]:
    """The versions whose deploy call has an output in ``items`` (the model's view), in order."""
    calls = {i["call_id"]: json.loads(i["arguments"])["version"] for i in items
             if isinstance(i, dict) and i.get("type") == "function_call" and i.get("name") == "deploy"}
    return [calls[i["call_id"]] for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output" and i.get("call_id") in calls]


def build(tmp: Path, plan: KillPlan, versions: int | list[str], guard: SessionGuard | None,
          together: bool = False) -> Agent[Any]:
    """The agent; its model deploys ``versions`` (v1..vN, or the names given) one call at a time (all in
    one response with ``together``), each while the session holds fewer outputs than its place."""
    names = [f"v{n}" for n in range(1, versions + 1)] if isinstance(versions, int) else versions
    counter = iter(range(1_000_000))

    def respond(call: Any) -> Any:
        done = _outputs(list(call.input) if isinstance(call.input, list) else [])
        if done:
            plan.reached("after")  # the model call after a deploy returned
        if len(done) < len(names):
            todo = names[len(done):] if together else names[len(done):len(done) + 1]
            # a real model's call ids are new in every process
            return [model_call("deploy", {"version": v}, call_id=f"call_{os.getpid()}_{next(counter)}") for v in todo]
        return [assistant_message(f"deployed {', '.join(done)}")]

    def deploy(version: str) -> str:
        """Deploy a version."""
        deploy_side_effect(tmp, plan, version, guarded=guard is not None)
        return f"deployed {version}"

    plain: FunctionTool = function_tool(deploy)
    tool = guarded_tool(guard, plain) if guard is not None else plain
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
    return Agent(name="ops", instructions="deploy", model=model, tools=[tool])


async def _alife(tmp: Path, plan: KillPlan, inp: Any, versions: int | list[str], answers: list[Any] | None,
                 together: bool) -> dict[str, Any]:
    session = await JournalSession.open(SESSION, tmp / "sessions")
    guard = SessionGuard(ToolGuard(kill_hooks(journal.store(str(tmp / "sessions")), plan)), session) \
        if GUARD_ON else None
    try:
        agent = build(tmp, plan, versions, guard, together)
        if answers is not None:  # answer the asks a previous life saw, then resume its run
            assert guard is not None
            state = await RunState.from_string(agent, (tmp / "state.json").read_text())
            for item, answer in zip(state.get_interruptions(), answers, strict=True):
                if answer == "approve":  # the SDK's own answer, not through the guard
                    state.approve(item)
                else:
                    await guard.answer(state, item, answer)
            result = await Runner.run(agent, state, session=session, run_config=RUN_CONFIG)
        else:
            result = await Runner.run(agent, inp, session=session, run_config=RUN_CONFIG)
        asks = await guard.asks(result.interruptions) if guard is not None else []
        if result.interruptions:
            (tmp / "state.json").write_text(result.to_state().to_string())
        return {"asks": [u.to_payload() for _, u in asks], "interruptions": len(result.interruptions),
                "final": result.final_output if not result.interruptions else None,
                "items": await session.get_items()}
    finally:
        if guard is not None:
            guard.close()
        session.close()


def _life(tmp: Path, plan: KillPlan, inp: Any, versions: int | list[str], answers: list[Any] | None = None,
          together: bool = False) -> dict[str, Any]:
    return asyncio.run(_alife(tmp, plan, inp, versions, answers, together))


def _deploys(tmp: Path) -> dict[str, int]:
    return tool_runs(tmp, str)  # keyed by version ("v1")


def _loads(tmp: Path) -> tuple[Any, Any, Any]:
    """The session's items, the guard's history and its unknown calls, as a fresh process loads them."""
    async def go() -> tuple[Any, Any, Any]:
        session = await JournalSession.open(SESSION, tmp / "sessions")
        guard = guard_for(session)
        try:
            unknown = [[u.call_id, u.tool, u.args] for u in guard.scope.unknown()]
            return await session.get_items(), guard.scope.history(), unknown
        finally:
            guard.close()
            session.close()

    return asyncio.run(go())


def _check_history(tmp: Path, held: frozenset[str] = frozenset()) -> None:
    """Well-formed (every function call the session stores has an output, but for calls ``held`` for an
    approval in a RunState the app dropped) and the same on every load."""
    items = same_on_every_load(lambda: _loads(tmp))[0]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(set(calls) - held) == sorted(outputs), items


def _unknown_calls(tmp: Path) -> list[list[Any]]:
    """``[call id, tool, args]`` of the calls the guard's journal holds as unknown."""
    return list(_loads(tmp)[2])


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), "deploy v1", 1)
    assert killed
    ran_before = _deploys(tmp_path).get("v1", 0)
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    if EXPECT_UNKNOWN[point]:
        assert len(resumed["asks"]) == 1 and resumed["interruptions"] == 1, resumed  # exactly the unknown call
        (u,) = resumed["asks"]
        assert_asks_about_unknown_call(u, {"version": "v1"})
        assert _unknown_calls(tmp_path) == [as_unknown_entry(u)]
        assert _deploys(tmp_path).get("v1", 0) == ran_before  # asking ran nothing
        answer = truthful_answer(ran_before > 0, "deployed v1")
        _, done = in_child(_life, tmp_path, KillPlan(None), None, 1, [answer])
    else:
        assert resumed["asks"] == [] and resumed["interruptions"] == 0 and _unknown_calls(tmp_path) == [], resumed
        done = resumed
    assert done["interruptions"] == 0 and done["final"] == "deployed v1", done  # the run finished
    assert _outputs(done["items"]) == ["v1"]
    assert _deploys(tmp_path) == {"v1": 1}  # at most once; once here, as the answer said
    _check_history(tmp_path)
    # Settled: a later request for the same call is a new call, and runs.
    _, later = in_child(_life, tmp_path, KillPlan(None), "deploy v1 once more", ["v1", "v1"])
    assert later["asks"] == [] and _outputs(later["items"]) == ["v1", "v1"]
    assert _deploys(tmp_path) == {"v1": 2}
    _check_history(tmp_path)


def test_identical_calls_in_one_turn_are_two_calls(tmp_path: Path) -> None:
    _, out = in_child(_life, tmp_path, KillPlan(None), "deploy v1 twice", ["v1", "v1"], None, True)
    assert out["asks"] == [] and out["final"] == "deployed v1, v1"
    assert _deploys(tmp_path) == {"v1": 2}
    _check_history(tmp_path)


def test_abandon_runs_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "deploy v1 and v2", 2)
    assert killed
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 2)
    assert [u["args"] for u in resumed["asks"]] == [{"version": "v1"}]
    _, done = in_child(_life, tmp_path, KillPlan(None), None, 2, ["abandon"])
    assert done["final"] == "deployed v1, v2" and _deploys(tmp_path) == {"v1": 1, "v2": 1}
    outputs = [i["output"] for i in done["items"] if i.get("type") == "function_call_output"]
    assert "was not run" in outputs[0] and outputs[1] == "deployed v2"  # the model is told it was abandoned
    assert _unknown_calls(tmp_path) == []
    _check_history(tmp_path)
    _, again = in_child(_life, tmp_path, KillPlan(None), "continue", 2)  # answered once: never asked again
    assert again["asks"] == [] and _deploys(tmp_path) == {"v1": 1, "v2": 1}


def _refused(tmp: Path, answers: list[Any]) -> dict[str, Any]:
    try:
        return _life(tmp, KillPlan(None), None, 1, answers)
    except Exception as exc:  # the SDK may wrap what the tool raised
        return {"refused": f"{exc!r} {exc.__cause__!r}"}


def test_a_saved_approval_resumed_twice_does_not_run_the_tool_twice(tmp_path: Path) -> None:
    """A plain state.approve is "run it again" once: the RunState that holds it, resumed again after the
    run it allowed was killed too, runs nothing; the app is asked again and answers through the guard."""
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "deploy v1", 1)
    assert killed
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    assert [u["args"] for u in resumed["asks"]] == [{"version": "v1"}]
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), None, 1, ["approve"])  # runs again, killed again
    assert killed and _deploys(tmp_path) == {"v1": 2}
    _, stale = in_child(_refused, tmp_path, ["approve"])  # the same saved state, approved again
    assert "NotAnsweredError" in stale["refused"] or "was not answered" in stale["refused"], stale
    assert _deploys(tmp_path) == {"v1": 2}
    _, asked = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    assert [(u["callId"], u["args"]) for u in asked["asks"]] == [(resumed["asks"][0]["callId"], {"version": "v1"})]
    _, done = in_child(_life, tmp_path, KillPlan(None), None, 1, ["run_again"])
    assert done["final"] == "deployed v1" and _deploys(tmp_path) == {"v1": 3}  # two answers, two runs again
    # The SDK stores a call held for approval with the interrupted turn; the state that held it was
    # dropped, so it has no output: the SDK leaves such a call out of the model's input, and it never ran.
    (held,) = [i["call_id"] for i in resumed["items"] if i.get("type") == "function_call"]
    _check_history(tmp_path, frozenset({held}))


def _finished(out: dict[str, Any], versions: int) -> bool:
    """Nothing waits for an answer, the model answered, and every version's call has an output."""
    return (out.get("interruptions") == 0 and out.get("final") is not None
            and sorted(set(_outputs(out["items"]))) == [f"v{n}" for n in range(1, versions + 1)])


def test_random_kills(tmp_path: Path) -> None:
    def resume(tmp: Path, given: Any) -> dict[str, Any]:
        if given is None:  # a new message resumes the session
            return in_child(_life, tmp, KillPlan(None), "continue", VERSIONS_RANDOM)[1]
        return in_child(_life, tmp, KillPlan(None), None, VERSIONS_RANDOM, [given])[1]  # the saved RunState

    random_kill_rounds(tmp_path, GuardedApp(
        units=VERSIONS_RANDOM,
        start=lambda tmp, plan: in_child(_life, tmp, plan, "deploy", VERSIONS_RANDOM),
        resume=resume,
        asks=lambda out: out.get("asks", []),
        finished=lambda out: _finished(out, VERSIONS_RANDOM),
        unit_of=lambda ask: ask["args"]["version"],
        result_of=lambda version: f"deployed {version}",
        journal_unknown=lambda tmp, out: _unknown_calls(tmp),
        check_history=_check_history,
        tool_unit=str,
    ), seed_offset=30, steps_max=VERSIONS_RANDOM * 3)


def test_without_the_guard_a_killed_tool_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): the model asks again, the plain tool runs again."""
    def life(plan: KillPlan, inp: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            session = await JournalSession.open(SESSION, tmp_path / "sessions")
            try:
                result = await Runner.run(build(tmp_path, plan, 1, None), inp, session=session, run_config=RUN_CONFIG)
                return {"final": result.final_output}
            finally:
                session.close()

        return asyncio.run(go())

    killed, _ = in_child(life, KillPlan("mid_tool"), "deploy v1")
    assert killed
    _, out = in_child(life, KillPlan(None), "continue")
    assert out["final"] == "deployed v1" and _deploys(tmp_path) == {"v1": 2}


def test_the_gate_and_an_answer_given_directly(tmp_path: Path) -> None:
    """The session's resume gate shows the unknown call; happened() through guard.answer gives the
    model the result as the call's output without running the tool."""
    killed, _ = in_child(_life, tmp_path, KillPlan("after_intent"), "deploy v1", 1)
    assert killed and _deploys(tmp_path) == {}

    async def go() -> None:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            gate = guard.gate()
            assert gate.paused and gate.codes() == ["TOOL_OUTCOME_UNKNOWN"]
            agent = build(tmp_path, KillPlan(None), 1, guard)
            result = await Runner.run(agent, "continue", session=session, run_config=RUN_CONFIG)
            ((item, unknown),) = await guard.asks(result.interruptions)
            assert unknown.args == {"version": "v1"}
            state = result.to_state()
            await guard.answer(state, item, happened("checked by hand: v1 is live"))
            result = await Runner.run(agent, state, session=session, run_config=RUN_CONFIG)
            assert result.final_output == "deployed v1" and not result.interruptions
            items: list[Any] = list(await session.get_items())
            outputs = [i["output"] for i in items if i.get("type") == "function_call_output"]
            assert outputs == ["checked by hand: v1 is live"]
            assert guard.scope.unknown() == [] and not guard.gate().paused
        finally:
            guard.close()
            session.close()

    asyncio.run(go())
    assert _deploys(tmp_path) == {}


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/openai_agents_crash_safe_tool.py, as the docs show it: killed, asked, answered, finished."""
    run_example_demo("openai_agents_crash_safe_tool.py", tmp_path)


def test_a_call_of_this_process_is_never_taken_for_a_repeat(tmp_path: Path) -> None:
    """Two identical calls of one turn are two calls, even when the first has finished (and the session
    has not got it yet, as within a turn) before the second starts: the SDK's tool interface, called
    as the SDK calls it, one call after the other."""
    from agents.tool_context import ToolContext

    async def go() -> list[Any]:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            agent = build(tmp_path, KillPlan(None), ["v1", "v1"], guard)
            (tool,) = agent.tools
            assert isinstance(tool, FunctionTool)
            outs = []
            for call_id in ("call_a", "call_b"):
                ctx = ToolContext(context=None, tool_name="deploy", tool_call_id=call_id,
                                  tool_arguments='{"version":"v1"}')
                outs.append(await tool.on_invoke_tool(ctx, '{"version":"v1"}'))
            return outs
        finally:
            guard.close()
            session.close()

    assert asyncio.run(go()) == ["deployed v1", "deployed v1"]
    assert _deploys(tmp_path) == {"v1": 2}


def test_a_read_only_tool_writes_nothing_and_runs_again_on_its_own(tmp_path: Path) -> None:
    def life(plan: KillPlan, inp: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            session = await JournalSession.open(SESSION, tmp_path / "sessions")
            guard = guard_for(session)
            try:
                agent = build(tmp_path, plan, 1, None)
                (plain,) = agent.tools
                assert isinstance(plain, FunctionTool)
                agent = agent.clone(tools=[guarded_tool(guard, plain, side_effect="read")])
                result = await Runner.run(agent, inp, session=session, run_config=RUN_CONFIG)
                return {"final": result.final_output, "interruptions": len(result.interruptions),
                        "guard": [e["type"] for e in guard.scope.history()]}
            finally:
                guard.close()
                session.close()

        return asyncio.run(go())

    killed, _ = in_child(life, KillPlan("mid_tool"), "deploy v1")
    assert killed
    _, out = in_child(life, KillPlan(None), "continue")
    assert out["final"] == "deployed v1" and out["interruptions"] == 0 and _deploys(tmp_path) == {"v1": 2}
    assert out["guard"] == ["session.started"]  # no intent, no result: nothing synced for it
