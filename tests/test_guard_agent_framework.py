"""Agent Framework agents with the crash-safe tool guard (journal/adapters/agent_framework_guard.py),
killed with SIGKILL.

A real ``Agent`` with a ``JournalHistoryProvider``, driven by a scripted chat client
(tests/af_scripted.py: the framework's own function-invocation layer, no network): asked to deploy
v1..vN, it calls the guarded ``deploy`` tool once per version (under a new call id in every
process, as a real model does) until the history holds a result for each version, then answers.
``deploy`` appends a line to a side file outside the journal. Each life runs in a forked child; the
first kills itself with SIGKILL at a chosen point of deploy's life, forced by a hook on the guard's
journal (before/after the intent batch, before/after the result), in the tool's body or in the
next model call: no sleeps. Each later life is a new process that runs the agent again on the
same session ("continue").

Checks: the tool ran at most once unless the app answered "run_again"; the resumed run stopped
with ``ToolOutcomeUnknownError`` naming exactly the call whose outcome is unknown, with its
arguments; after an answer the run finishes; the history is well formed (every call has a result)
and the same on every load. ``JOURNAL_GUARD_OFF=1`` runs the agent without the guard: these fail.
"""

from __future__ import annotations

import asyncio
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

pytest.importorskip("agent_framework", reason=missing_framework_reason("agent_framework", "agent-framework"))

from agent_framework import Agent, FunctionInvocationContext, Message, tool

import journal
from journal.adapters.agent_framework import JournalHistoryProvider
from journal.adapters.agent_framework_guard import (
    AgentGuard,
    CallIdReusedError,
    ToolOutcomeUnknownError,
    guard_for,
)
from journal.session.toolguard import ToolGuard
from tests.af_scripted import ScriptedClient, function_call, results_of, text

SESSION = "ops-1"
VERSIONS_RANDOM = 3


def build(tmp: Path, plan: KillPlan, versions: list[str], guard: AgentGuard | None,
          history: JournalHistoryProvider) -> Agent[Any]:
    counter = iter(range(1_000_000))

    def respond(messages: list[Message]) -> list[Message]:
        done = [a["version"] for a in results_of(messages, "deploy")]
        if done and messages[-1].role == "tool":
            plan.reached("after")  # the model call after a deploy returned
        if len(done) < len(versions):
            # a real model's call ids are new in every process
            return [function_call("deploy", {"version": versions[len(done)]},
                                  f"call_{os.getpid()}_{next(counter)}")]
        return [text(f"deployed {', '.join(done)}")]

    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        deploy_side_effect(tmp, plan, version, guarded=guard is not None)
        return f"deployed {version}"

    middleware = guard.middleware() if guard is not None else []
    return Agent(client=ScriptedClient(respond), tools=[deploy], context_providers=[history],
                 middleware=middleware)


async def _alife(tmp: Path, plan: KillPlan, inp: str, versions: list[str], answers: list[Any]) -> dict[str, Any]:
    history = JournalHistoryProvider(tmp / "store")
    guard = AgentGuard(ToolGuard(kill_hooks(journal.store(str(tmp / "store")), plan)), history) if GUARD_ON else None
    try:
        for answer in answers:
            assert guard is not None
            (u,) = guard.unknown(SESSION)
            guard.answer(SESSION, u.call_id, answer)
        agent = build(tmp, plan, versions, guard, history)
        session = agent.create_session(session_id=SESSION)
        try:
            result = await agent.run(inp, session=session)
        except ToolOutcomeUnknownError as err:
            return {"asks": [err.unknown.to_payload()], "final": None}
        return {"asks": [], "final": result.text}
    finally:
        if guard is not None:
            guard.close()
        history.close()


def _life(tmp: Path, plan: KillPlan, inp: str, versions: list[str], answers: list[Any] | None = None
          ) -> dict[str, Any]:
    return asyncio.run(_alife(tmp, plan, inp, versions, answers or []))


def _loads(tmp: Path) -> tuple[list[dict[str, Any]], list[Any], list[list[Any]]]:
    """The history, the guard's events and its unknown calls, as a fresh process loads them."""
    async def go() -> tuple[list[dict[str, Any]], list[Any], list[list[Any]]]:
        history = JournalHistoryProvider(tmp / "store")
        guard = guard_for(history)
        try:
            unknown = [[u.call_id, u.tool, u.args] for u in guard.unknown(SESSION)]
            messages = [m.to_dict() for m in await history.get_messages(SESSION)]
            return messages, guard.scope(SESSION).history(), unknown
        finally:
            guard.close()
            history.close()

    return asyncio.run(go())


def _check_history(tmp: Path) -> list[str]:
    """Well formed (every call the history stores has a result) and the same on every load; the
    versions whose deploy has a result, in order."""
    stored = same_on_every_load(lambda: _loads(tmp))[0]
    messages = [Message.from_dict(m) for m in stored]
    calls = [str(c.call_id) for m in messages for c in m.contents if c.type == "function_call"]
    outputs = [str(c.call_id) for m in messages for c in m.contents if c.type == "function_result"]
    assert sorted(calls) == sorted(outputs), stored
    return [a["version"] for a in results_of(messages, "deploy")]


def _deploys(tmp: Path) -> dict[str, int]:
    return tool_runs(tmp, str)


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), "deploy v1", ["v1"])
    assert killed
    ran_before = _deploys(tmp_path).get("v1", 0)
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1"])
    if EXPECT_UNKNOWN[point]:
        (u,) = resumed["asks"]  # the run stopped, asking about exactly the unknown call
        assert_asks_about_unknown_call(u, {"version": "v1"})
        assert _loads(tmp_path)[2] == [as_unknown_entry(u)]
        assert _deploys(tmp_path).get("v1", 0) == ran_before  # asking ran nothing
        answer = truthful_answer(ran_before > 0, "deployed v1")
        _, done = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1"], [answer])
    else:
        assert resumed["asks"] == [] and _loads(tmp_path)[2] == [], resumed
        done = resumed
    assert done["asks"] == [] and done["final"] == "deployed v1", done
    assert _deploys(tmp_path) == {"v1": 1}  # at most once; once here, as the answer said
    assert _check_history(tmp_path) == ["v1"]
    # Settled: a later request for the same call is a new call, and runs.
    _, later = in_child(_life, tmp_path, KillPlan(None), "deploy v1 once more", ["v1", "v1"])
    assert later["asks"] == [] and _deploys(tmp_path) == {"v1": 2}
    assert _check_history(tmp_path) == ["v1", "v1"]


@pytest.mark.parametrize("answer", ["abandon", "run_again"])
def test_an_answer_is_acted_on_once(tmp_path: Path, answer: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "deploy v1", ["v1"])
    assert killed and _deploys(tmp_path) == {"v1": 1}
    _, asked = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1"])
    assert len(asked["asks"]) == 1
    _, done = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1"], [answer])
    assert done["asks"] == [] and done["final"] == "deployed v1", done
    assert _deploys(tmp_path) == {"v1": 2 if answer == "run_again" else 1}
    # The answer stands for its attempt only: running again asks nothing and runs nothing more.
    _, again = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1"])
    assert again["asks"] == [] and _deploys(tmp_path) == {"v1": 2 if answer == "run_again" else 1}


def test_killed_after_the_result_before_the_history_gets_the_recorded_result(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("after"), "deploy v1 v2", ["v1", "v2"])
    assert killed and _deploys(tmp_path) == {"v1": 1}
    _, done = in_child(_life, tmp_path, KillPlan(None), "continue", ["v1", "v2"])
    assert done["asks"] == [] and done["final"] == "deployed v1, v2", done
    assert _deploys(tmp_path) == {"v1": 1, "v2": 1}  # v1's recorded result was handed back
    assert _check_history(tmp_path) == ["v1", "v2"]


def test_a_reused_call_id_with_other_arguments_is_refused(tmp_path: Path) -> None:
    if not GUARD_ON:
        pytest.skip("a guard refusal: there is none without the guard")

    async def go() -> list[str]:
        history = JournalHistoryProvider(tmp_path / "store")
        guard = guard_for(history)
        ran: list[str] = []

        @tool
        def deploy(version: str) -> str:
            """Deploy."""
            ran.append(version)
            return version

        async def call_next() -> None:
            ctx.result = await deploy.invoke(arguments=ctx.arguments)

        try:
            for version in ("v1", "v2"):
                ctx = FunctionInvocationContext(function=deploy, arguments={"version": version})
                ctx.metadata["call_id"] = "same-id"
                try:
                    await guard.process(ctx, call_next)
                except CallIdReusedError:
                    ran.append(f"refused {version}")
            return ran
        finally:
            guard.close()
            history.close()

    assert asyncio.run(go()) == ["v1", "refused v2"]


def test_random_kills(tmp_path: Path) -> None:
    versions = [f"v{n}" for n in range(1, VERSIONS_RANDOM + 1)]

    def start(tmp: Path, plan: KillPlan) -> tuple[bool, dict[str, Any]]:
        return in_child(_life, tmp, plan, "deploy", versions)

    def resume(tmp: Path, given: Any) -> dict[str, Any]:
        return in_child(_life, tmp, KillPlan(None), "continue", versions, [given] if given is not None else [])[1]

    app = GuardedApp(
        units=VERSIONS_RANDOM, start=start, resume=resume,
        asks=lambda out: list(out.get("asks", [])),
        finished=lambda out: out.get("final") == f"deployed {', '.join(versions)}",
        unit_of=lambda ask: ask["args"]["version"], result_of=lambda unit: f"deployed {unit}",
        journal_unknown=lambda tmp, out: _loads(tmp)[2], check_history=_check_history, tool_unit=str)
    random_kill_rounds(tmp_path, app, seed_offset=31, steps_max=VERSIONS_RANDOM + 2)


async def _alife_answering(tmp: Path, versions: list[str]) -> dict[str, Any]:
    """One process that runs the agent, answers every unknown call "happened" itself and runs it again."""
    history = JournalHistoryProvider(tmp / "store")
    guard = guard_for(history) if GUARD_ON else None
    asks: list[dict[str, Any]] = []
    try:
        agent = build(tmp, KillPlan(None), versions, guard, history)
        for _ in range(len(versions) + 2):
            try:
                result = await agent.run("continue", session=agent.create_session(session_id=SESSION))
            except ToolOutcomeUnknownError as err:
                assert guard is not None
                asks.append(err.unknown.to_payload())
                version = err.unknown.args["version"]
                guard.answer(SESSION, err.unknown.call_id, {"answer": "happened", "result": f"deployed {version}"})
                continue
            return {"asks": asks, "final": result.text}
        return {"asks": asks, "final": None}
    finally:
        if guard is not None:
            guard.close()
        history.close()


def test_a_run_stopped_by_an_unknown_call_is_a_crash_for_the_next_run_of_the_same_process(tmp_path: Path) -> None:
    """The run that stopped to ask handed v1's recorded result to a new call; that run's messages never
    reached the history, so the next run (same process, after the answer) asks for v1 again under a
    new id: it must get the recorded result again, not run the tool."""
    versions = ["v1", "v2", "v3"]
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool", at=2), "deploy", versions)
    assert killed and _deploys(tmp_path) == {"v1": 1, "v2": 1}
    _, out = in_child(lambda: asyncio.run(_alife_answering(tmp_path, versions)))
    assert [a["args"] for a in out["asks"]] == [{"version": "v2"}], out
    assert out["final"] == "deployed v1, v2, v3", out
    assert _deploys(tmp_path) == {"v1": 1, "v2": 1, "v3": 1}
    assert _check_history(tmp_path) == versions


def test_the_example_demo(tmp_path: Path) -> None:
    """examples/agent_framework_crash_safe_tool.py, as the docs show it: killed, asked, answered, finished."""
    if not GUARD_ON:
        pytest.skip("the example always has its guard")
    run_example_demo("agent_framework_crash_safe_tool.py", tmp_path)


def test_with_the_frameworks_in_memory_history_a_delivered_call_is_settled(tmp_path: Path) -> None:
    """The guard reads which results the history holds from the provider the agent uses, with the
    provider's own slice of the session state: after a run whose result reached the history, the same
    request is a new call and runs."""
    if not GUARD_ON:
        pytest.skip("a guard decision: there is none without the guard")
    from agent_framework import InMemoryHistoryProvider

    async def main() -> list[str]:
        history = InMemoryHistoryProvider()
        guard = guard_for(history, store=journal.store(str(tmp_path / "guards")))
        ran: list[str] = []

        @tool
        def deploy(version: str) -> str:
            """Deploy."""
            ran.append(version)
            return f"deployed {version}"

        def respond(messages: list[Message]) -> list[Message]:
            asked = sum(1 for m in messages if m.role == "user")
            done = results_of(messages, "deploy")
            if len(done) < asked:
                return [function_call("deploy", {"version": "v1"}, f"call-{len(messages)}")]
            return [text("done")]

        try:
            agent = Agent(client=ScriptedClient(respond), tools=[deploy], context_providers=[history],
                          middleware=guard.middleware())
            session = agent.create_session(session_id=SESSION)
            await agent.run("deploy v1", session=session)
            await agent.run("deploy v1 again", session=session)
            return ran
        finally:
            guard.close()

    assert asyncio.run(main()) == ["v1", "v1"]
