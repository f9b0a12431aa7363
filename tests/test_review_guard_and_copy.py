"""Review findings on the crash-safe tool guards and the byte-for-byte copy: each test is a defect
found by attacking the guard (a crafted answer, a plain rejection) and the fix that closes it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as model_call

from journal.adapters.openai_agents import JournalSession
from journal.adapters.openai_agents_guard import guard_for, guarded_tool

SESSION = "review-1"
MODEL_CALLS_MAX = 8  # scripted model calls one run may make
RUN_CONFIG = RunConfig(tracing_disabled=True)


def _crashed_call(tmp: Path) -> None:
    """An earlier process synced the intent of deploy(v1) and died while it ran: outcome unknown."""
    async def go() -> None:
        session = await JournalSession.open(SESSION, tmp / "sessions")
        guard = guard_for(session)
        try:
            d = guard.scope.before("call_old", "deploy", {"version": "v1"})
            assert d.run
        finally:
            guard.close()  # no after(): the call stays started with no result
            session.close()

    asyncio.run(go())


def test_openai_plain_reject_keeps_the_unknown_call_asked(tmp_path: Path) -> None:
    """A plain ``state.reject(item)`` records no answer: the module doc says the call stays unknown and
    is asked about again if the model asks for it again. The rejection's output in the session must not
    count as the output of a call that stood for the unknown one (it would let the re-issued call run
    the tool, whose outcome is unknown, with no "run_again" answer)."""
    _crashed_call(tmp_path)
    ran: list[str] = []
    ids = iter(range(1_000_000))

    def respond(call: Any) -> Any:
        items = list(call.input) if isinstance(call.input, list) else []
        if any(i.get("type") == "function_call_output" and "deployed" in str(i.get("output")) for i in items
               if isinstance(i, dict)):
            return [assistant_message("done")]
        return [model_call("deploy", {"version": "v1"}, call_id=f"call_new_{next(ids)}")]

    def deploy(version: str) -> str:
        """Deploy a version."""
        ran.append(version)
        return f"deployed {version}"

    async def go() -> tuple[int, int]:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
            agent = Agent(name="ops", instructions="deploy", model=model,
                          tools=[guarded_tool(guard, function_tool(deploy))])
            first = await Runner.run(agent, "deploy v1", session=session, run_config=RUN_CONFIG)
            assert len(await guard.asks(first.interruptions)) == 1
            state = first.to_state()
            (item,) = state.get_interruptions()
            state.reject(item)  # the SDK's own rejection: no answer reaches the guard
            second = await Runner.run(agent, state, session=session, run_config=RUN_CONFIG)
            asked = len(await guard.asks(second.interruptions))
            return asked, len(guard.scope.unknown())
        finally:
            guard.close()
            session.close()

    async def later_process() -> tuple[int, int]:
        # A new process: no claims in memory; the session holds the rejected stand-in's output.
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
            agent = Agent(name="ops", instructions="deploy", model=model,
                          tools=[guarded_tool(guard, function_tool(deploy))])
            out = await Runner.run(agent, "continue", session=session, run_config=RUN_CONFIG)
            return len(await guard.asks(out.interruptions)), len(guard.scope.unknown())
        finally:
            guard.close()
            session.close()

    asked, unknown = asyncio.run(go())
    assert ran == []  # the tool whose outcome is unknown never ran again without a "run_again" answer
    assert unknown == 1 and asked == 1  # still unknown, and asked again when the model asked again
    asked, unknown = asyncio.run(later_process())
    assert ran == [] and unknown == 1 and asked == 1


def test_adk_a_rejected_confirmation_never_runs_the_tool_again() -> None:
    """ADK's ``confirmed: false`` is a rejection (ADK's own FunctionTool answers "This tool call is
    rejected." and runs nothing). The plugin read the payload alone, so a rejection carrying
    "run_again" (a UI that rejects but echoes or edits the payload) ran the tool whose outcome is
    unknown once more. A rejection that says run_again is refused (nothing recorded, ask again)."""
    pytest.importorskip("google.adk")
    from google.adk.tools.tool_confirmation import ToolConfirmation

    from journal.adapters.adk_guard import parse_answer
    from journal.session.toolguard import ABANDON, BadAnswerError, happened

    for payload in ("run_again", {"answer": "run_again"}):
        with pytest.raises(BadAnswerError, match="confirmed"):
            parse_answer(ToolConfirmation(confirmed=False, payload=payload))
    assert parse_answer(ToolConfirmation(confirmed=False, payload="abandon")) == ABANDON
    assert parse_answer(ToolConfirmation(confirmed=False)) == ABANDON
    assert parse_answer(ToolConfirmation(confirmed=False, payload={"answer": "happened", "result": 1})) == happened(1)


def test_verify_calls_a_seal_footer_that_names_fewer_keys_clean(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer remembers at most KEYS_REMEMBERED_MAX keys (1,000,000), so a segment with more keyed
    records than that (or whose keys were forgotten before it was sealed) gets a footer naming only
    the keys still remembered. That footer acknowledges nothing that was never written; verify called
    such a healthy journal CORRUPT. Only a footer entry that disagrees with its record is a problem."""
    from journal.engine import core, writer
    from journal.engine.verify import verify

    keys_remembered_max = 3  # the limit, made small: 10 keyed records are "more than it"
    monkeypatch.setattr(writer, "KEYS_REMEMBERED_MAX", keys_remembered_max)
    path = str(tmp_path / "j")
    with core.open(path, create=True) as j:
        for i in range(10):
            j.append({"n": i}, durability="flush", idempotency_key=f"k{i}")
        j.seal()  # its footer names k7, k8, k9: the first seven keys were forgotten
        j.append({"n": 10}, durability="sync")
    report = verify(path)
    assert report.verdict == "clean" and report.problems == [], report.summary()


def _forked(fn: Any) -> int:
    """Run ``fn`` in a forked child (a process of its own, as a crash needs); its exit status."""
    import os

    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            fn()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return status


def test_openai_a_tools_own_approval_resumed_again_is_not_an_answer(tmp_path: Path) -> None:
    """A tool with its own ``needs_approval``: the app approves, the saved RunState resumes, the tool
    runs (its intent recorded under the SDK's call id) and the process dies inside it. Resumed again
    from the same saved RunState, the SDK invokes the same call, still approved: that approval was
    given before the call ever ran, so it is no answer to its unknown outcome. It ran the tool again."""
    import os

    from agents.run_state import RunState

    side = tmp_path / "side.log"
    state_file = tmp_path / "state.json"
    die_inside = tmp_path / "die"

    def deploy(version: str) -> str:
        """Deploy a version."""
        with side.open("a") as f:
            f.write(version + "\n")
        if die_inside.exists():
            os._exit(9)  # the process dies inside the tool: its outcome is unknown
        return f"deployed {version}"

    def respond(call: Any) -> Any:
        items = list(call.input) if isinstance(call.input, list) else []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            return [assistant_message("done")]
        return [model_call("deploy", {"version": "v1"}, call_id="call_approved")]

    def agent_of(guard: Any) -> Agent[Any]:
        model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
        return Agent(name="ops", instructions="deploy", model=model,
                     tools=[guarded_tool(guard, function_tool(deploy, needs_approval=True))])

    async def first() -> None:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            result = await Runner.run(agent_of(guard), "deploy v1", session=session, run_config=RUN_CONFIG)
            assert await guard.asks(result.interruptions) == []  # the tool's own question, not the guard's
            state = result.to_state()
            (item,) = state.get_interruptions()
            state.approve(item)
            state_file.write_text(state.to_string())
        finally:
            guard.close()
            session.close()

    async def resume() -> str:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            agent = agent_of(guard)
            state = await RunState.from_string(agent, state_file.read_text())
            try:
                result = await Runner.run(agent, state, session=session, run_config=RUN_CONFIG)
            except Exception as exc:  # the SDK may wrap what the tool raised
                return f"refused: {exc!r} {exc.__cause__!r}"
            return f"final: {result.final_output!r}, interruptions: {len(result.interruptions)}"
        finally:
            guard.close()
            session.close()

    asyncio.run(first())
    die_inside.touch()
    assert os.WEXITSTATUS(_forked(lambda: asyncio.run(resume()))) == 9
    assert side.read_text().splitlines() == ["v1"]
    die_inside.unlink()
    out = asyncio.run(resume())  # the same saved RunState, resumed again
    assert side.read_text().splitlines() == ["v1"], out  # not run again on an approval older than the crash
    assert "NotAnsweredError" in out or "was not answered" in out, out


def test_adk_a_resumable_app_resumed_after_the_answered_rerun_died_asks_again(tmp_path: Path) -> None:
    """A resumable ADK app: the call dies, is asked about, answered "run_again", and its new attempt
    dies too. Resumed by invocation id with no message, ADK hands the tool the last confirmation again
    (it is consumed only by a response to the call, which never came). That answer was about the
    first attempt: taken for the second one's, it ran the tool a third time with nobody asked."""
    pytest.importorskip("google.adk")
    from tests.guard_harness import KillPlan, in_child, tool_runs
    from tests.test_guard_adk import _life, load

    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "go", 1, True)
    assert killed
    invocation = next(e["invocation_id"] for e in load(tmp_path)["events"] if e["author"] == "ops")
    _, asked = in_child(_life, tmp_path, KillPlan(None), "resume:" + invocation, 1, True)
    assert len(asked["pending"]) == 1
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "answer:" + json.dumps("run_again"), 1, True)
    assert killed and tool_runs(tmp_path) == {1: 2}
    last = load(tmp_path)["events"][-1]["invocation_id"]
    _, again = in_child(_life, tmp_path, KillPlan(None), "resume:" + last, 1, True)
    assert tool_runs(tmp_path) == {1: 2}, again  # the answer about the first attempt ran nothing
    (call_id, _, _), = again["unknown"]  # the model was told the outcome is unknown; it still is
    # ADK emits no question from a confirmed re-run, so the next message asks (the plugin's seal).
    _, asked_again = in_child(_life, tmp_path, KillPlan(None), "continue", 1, True)
    (question,) = asked_again["pending"]
    assert question["callId"] == call_id == asked["pending"][0]["callId"]
    assert tool_runs(tmp_path) == {1: 2}
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps({"answer": "happened", "result": 1}),
                       1, True)
    assert done["finished"] and tool_runs(tmp_path) == {1: 2}, done


def test_a_stored_payload_cannot_be_changed_after_its_check(tmp_path: Path) -> None:
    """StoredPayload checks a JSON payload when it is made, so that no append writes a record that
    reads as corrupt; its fields were plain attributes, so one changed after the check was appended
    as it was, and the journal then read that record as corruption of committed data."""
    from journal.engine import core
    from journal.record import StoredPayload

    sp = StoredPayload(b'{"a":1}', False)
    with pytest.raises(AttributeError):
        sp.payload = b"\xff not json"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        sp.is_bytes = True  # type: ignore[misc]
    path = str(tmp_path / "j")
    with core.open(path, create=True) as j:
        j.append(sp)
    with core.open(path) as j:
        assert [r.event for r in j.read()] == [{"a": 1}]


def test_openai_a_cancelled_tool_is_not_recorded_as_failed(tmp_path: Path) -> None:
    """A tool cancelled while it runs (a streamed run cancelled, the app's timeout around
    Runner.run) may have done its work before the cancellation reached it. The guard recorded the
    CancelledError as a failure, and a failed call is a retry: the same call asked for again in the
    next process ran the tool again, with nobody asked. It stays started (its outcome unknown), as
    the ADK and Pydantic AI guards leave it."""
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    from journal.adapters.openai_agents_guard import NotAnsweredError

    ran: list[str] = []

    async def deploy(version: str) -> str:
        """Deploy a version."""
        ran.append(version)  # the side effect happened ...
        if len(ran) == 1:
            raise asyncio.CancelledError  # ... and then the task was cancelled
        return f"deployed {version}"

    async def invoke(call_id: str) -> Any:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            tool = guarded_tool(guard, function_tool(deploy))
            assert isinstance(tool, FunctionTool)
            ctx = ToolContext(context=None, tool_name="deploy", tool_call_id=call_id,
                              tool_arguments='{"version":"v1"}')
            return await tool.on_invoke_tool(ctx, '{"version":"v1"}')
        finally:
            guard.close()
            session.close()

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(invoke("call_a"))
    assert ran == ["v1"]
    with pytest.raises(NotAnsweredError):  # a new process: the model asks for the same call again
        asyncio.run(invoke("call_b"))
    assert ran == ["v1"]  # not run again: its outcome is unknown and nobody answered


class _Killed(BaseException):
    """Stands for the process dying inside the tool: no handler records anything."""


def test_langgraph_an_async_node_is_guarded(tmp_path: Path) -> None:
    """``@guarded`` on an ``async def`` node: the wrapper called it as a plain function, got its
    coroutine unrun, and recorded that as the result (TypeError: a coroutine is not serializable,
    with an intent left started for a tool that never ran). Now it runs once, its result recorded,
    and an unknown outcome is asked about through interrupt() as for a plain function."""
    pytest.importorskip("langgraph")
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command

    from journal.adapters.langgraph import JournalSaver
    from journal.adapters.langgraph_guard import guard_for as lg_guard_for
    from journal.adapters.langgraph_guard import guarded

    class State(TypedDict):
        n: int

    ran: list[int] = []
    die_inside = [False]

    def graph(saver: JournalSaver, guard: Any) -> Any:
        @guarded(guard, on_abandon={"n": -1})
        async def deploy(state: State) -> dict[str, int]:
            ran.append(state["n"])
            if die_inside[0]:
                raise _Killed
            return {"n": state["n"] + 1}

        g = StateGraph(State)
        g.add_node("deploy", deploy)
        g.add_edge(START, "deploy")
        g.add_edge("deploy", END)
        return g.compile(checkpointer=saver)

    async def life(inp: Any, thread: str) -> Any:
        saver = JournalSaver(str(tmp_path / "cp"))
        guard = lg_guard_for(saver)
        try:
            return await graph(saver, guard).ainvoke(inp, {"configurable": {"thread_id": thread}}, durability="sync")
        finally:
            guard.close()
            saver.close()

    assert asyncio.run(life({"n": 1}, "t1")) == {"n": 2} and ran == [1]
    die_inside[0] = True
    with pytest.raises(_Killed):
        asyncio.run(life({"n": 5}, "t2"))
    die_inside[0] = False
    asked = asyncio.run(life(None, "t2"))  # resumed: the node runs again, the guard asks
    (question,) = asked["__interrupt__"]
    assert question.value["kind"] == "journal.tool_outcome_unknown" and question.value["args"] == {"n": 5}
    assert ran == [1, 5]
    assert asyncio.run(life(Command(resume="abandon"), "t2")) == {"n": -1} and ran == [1, 5]
