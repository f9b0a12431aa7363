"""Review fixes of the crash-safe tool guards (docs/ADAPTERS.md, "Crash-safe tools"): an answer
counts only for the attempt it was asked about (Pydantic AI), a cancelled ADK tool leaves no entry
behind in the plugin, and a call id reused for another call is refused (ADK, Agents SDK) rather
than handed the other call's recorded result.

Each framework runs with a scripted model. A life that must die runs in a forked child and kills
itself with SIGKILL inside the tool's body, right after the tool's effect (one line appended to a
side file outside every journal): the call then has a durable intent and no result. Self-contained
on purpose (the framework suites' shared harness is being reworked); no sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.guard_harness import in_child

SIDE_FILE = "side.log"  # one line per run of the tool, outside every journal
RESULTS_FILE = "stored-results.json"  # the app's stored DeferredToolResults, applied again after a crash


def _ran(tmp: Path, unit: object, die: bool) -> None:
    """The tool's effect (a line in the side file; O_APPEND, kept by the page cache through a
    SIGKILL, as a real effect stays done), then, if ``die``, the process dies mid-tool."""
    fd = os.open(tmp / SIDE_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"deploy:{unit}\n".encode())
    finally:
        os.close(fd)
    if die:
        os.kill(os.getpid(), signal.SIGKILL)


def _runs(tmp: Path) -> int:
    path = tmp / SIDE_FILE
    return len(path.read_text().splitlines()) if path.exists() else 0


# --- Pydantic AI: an approval is bound to the attempt it was asked about -------------------------

PAI_CID = "conv-1"


async def _pai_life(tmp: Path, die: bool, step: str) -> dict[str, Any]:
    """One life of a Pydantic AI app (a scripted model calls ``deploy(n=1)`` until the conversation
    holds its return). ``step``: "go" (send the request, or resume it), "answer" (answer run_again,
    storing those results before the run acts on them, as an app that keeps its answers does),
    "reapply" (run with the results an earlier "answer" stored)."""
    from pydantic import TypeAdapter
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from journal.adapters.pydantic_ai import JournalConversationStore
    from journal.adapters.pydantic_ai_guard import CrashSafeTools, answers, guard_for

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("finished")])
        return ModelResponse(parts=[ToolCallPart("deploy", {"n": 1})])

    store = JournalConversationStore(tmp / "conv")
    guard = guard_for(store)
    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                                    capabilities=[CrashSafeTools(guard)])

    @agent.tool_plain
    def deploy(n: int) -> str:
        _ran(tmp, n, die)
        return f"deployed:{n}"

    kept = tmp / RESULTS_FILE
    adapter: TypeAdapter[DeferredToolResults] = TypeAdapter(DeferredToolResults)
    try:
        conv = await store.load(PAI_CID)
        if step == "go":
            result = await agent.run("deploy please", conversation=conv or Conversation(conversation_id=PAI_CID))
        else:
            assert conv is not None and conv.deferred_tool_requests is not None
            if step == "answer":
                asked = conv.deferred_tool_requests
                results = answers(asked, {c.tool_call_id: "run_again" for c in asked.approvals})
                kept.write_bytes(adapter.dump_json(results))
            else:
                results = adapter.validate_json(kept.read_bytes())
            result = await agent.run(conversation=conv, deferred_tool_results=results)
        await store.save(result)
        req = result.conversation.deferred_tool_requests
        return {"asked": [req.metadata.get(c.tool_call_id) or {} for c in req.approvals] if req else [],
                "output": result.output if isinstance(result.output, str) else None}
    finally:
        guard.close()
        await store.close()


def _pai(tmp: Path, die: bool, step: str) -> dict[str, Any]:
    return asyncio.run(_pai_life(tmp, die, step))


def test_pydantic_ai_a_stored_approval_applied_again_after_the_rerun_died_asks_again(tmp_path: Path) -> None:
    """The call dies mid-tool, is asked about and approved (run_again); the re-run dies mid-tool too.
    The app applies its stored DeferredToolResults again: that approval answered the question about
    the first attempt, and taken for the second one's it ran the tool a third time with nobody asked.
    Now nothing runs and the call is asked about again, naming its new attempt."""
    pytest.importorskip("pydantic_ai")
    killed, _ = in_child(_pai, tmp_path, True, "go")
    assert killed and _runs(tmp_path) == 1
    _, asked = in_child(_pai, tmp_path, False, "go")
    (first,) = asked["asked"]
    killed, _ = in_child(_pai, tmp_path, True, "answer")
    assert killed and _runs(tmp_path) == 2  # the approved re-run ran, and died
    _, again = in_child(_pai, tmp_path, False, "reapply")
    assert _runs(tmp_path) == 2, again  # the stale approval ran nothing
    (second,) = again["asked"]
    # Each question names the attempt it is about: the first attempt's id is the call's own.
    assert first["attemptId"] == first["callId"] == second["callId"] != second["attemptId"], again
    # The answer to the new question (it names the new attempt) is taken: the tool runs once more.
    _, done = in_child(_pai, tmp_path, False, "answer")
    assert done == {"asked": [], "output": "finished"} and _runs(tmp_path) == 3, done


# --- Google ADK: cancelled calls leave no entry; a reused function-call id is refused -------------

ADK_APP, ADK_USER, ADK_SID = "app", "u", "s"
CANCELS = 3  # cancellations per place a call is cancelled at


def _adk_runner(tmp: Path, calls: list[tuple[str | None, int]], tool: Callable[..., Any],
                before_tool: Callable[..., Any] | None = None) -> tuple[Any, Any, Any]:
    """An ADK runner whose scripted model, at each user message, calls ``deploy`` with the next
    (function-call id, n) of ``calls`` (id None: ADK assigns one), then says "finished" once the
    call has its response. Returns (runner, plugin, guard)."""
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    from journal.adapters.adk import JournalSessionService
    from journal.adapters.adk_guard import GuardPlugin, guard_for

    class Scripted(BaseLlm):
        model: str = "scripted"

        async def generate_content_async(self, llm_request: LlmRequest,
                                         stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            last = llm_request.contents[-1].parts or [] if llm_request.contents else []
            if any(p.function_response is not None for p in last):
                yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="finished")]))
                return
            call_id, n = calls.pop(0)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(
                function_call=types.FunctionCall(id=call_id, name="deploy", args={"n": n}))]))

    service = JournalSessionService(str(tmp / "sessions"))
    guard = guard_for(service)
    plugin = GuardPlugin(guard)
    agent = LlmAgent(name="ops", model=Scripted(), tools=[tool], before_tool_callback=before_tool)
    return Runner(app=App(name=ADK_APP, root_agent=agent, plugins=[plugin]), session_service=service), plugin, guard


async def _adk_send(runner: Any, text: str) -> list[str]:
    from google.genai import types

    out: list[str] = []
    async for ev in runner.run_async(user_id=ADK_USER, session_id=ADK_SID,
                                     new_message=types.Content(role="user", parts=[types.Part(text=text)])):
        out += [p.text for p in (ev.content.parts or []) if p.text] if ev.content else []
    return out


@pytest.mark.parametrize("where", ["tool", "agent_callback"])
def test_adk_a_cancelled_call_leaves_no_entry_in_the_plugin(tmp_path: Path, where: str) -> None:
    """A call cancelled in the tool's body, or in the agent's own before_tool_callback (after the
    plugin let it run; ADK tells no plugin callback of that one), CANCELS times: the plugin's map of
    running calls does not grow (it grew by one per cancellation in the callback, and each kept call
    looked running to seal(), so it was never closed in this process), and nothing is recorded as
    the calls' result (a cancelled call stays started: unknown to a new process)."""
    pytest.importorskip("google.adk")
    import gc

    from journal.adapters.adk_guard import scope_id

    async def go() -> tuple[list[int], list[str]]:
        started = asyncio.Event()
        never = asyncio.Event()  # never set: the call waits until it is cancelled

        async def deploy(n: int) -> dict[str, Any]:
            """Deploys release n."""
            started.set()
            await never.wait()
            return {"deployed": n}

        async def before_tool(tool: Any, args: Any, tool_context: Any) -> None:
            if where == "agent_callback":
                started.set()
                await never.wait()

        runner, plugin, guard = _adk_runner(tmp_path, [(None, i) for i in range(CANCELS)], deploy, before_tool)
        try:
            await runner.session_service.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SID)
            sizes: list[int] = []
            for _ in range(CANCELS):
                started.clear()
                task = asyncio.create_task(_adk_send(runner, "go"))
                await started.wait()
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                gc.collect()  # the run's objects hold one another: what they free, the collector frees
                sizes.append(len(plugin._running))
            types = [e["type"] for e in guard.scope(scope_id(ADK_APP, ADK_USER, ADK_SID)).history()]
            return sizes, types
        finally:
            guard.close()
            await runner.session_service.close()

    sizes, types = asyncio.run(go())
    assert sizes == [0] * CANCELS, sizes
    assert types.count("tool.started") == CANCELS and "tool.result" not in types, types


def test_adk_a_reused_function_call_id_is_refused_not_given_another_calls_result(tmp_path: Path) -> None:
    """The model gives its calls ids itself, and reuses one: deploy(n=1) as "fc-1" ran and returned;
    a later deploy(n=2) as "fc-1" got n=1's recorded result and never ran. Now it is refused with
    CallIdReusedError (it does not run either, and no recorded result is passed off as its own)."""
    pytest.importorskip("google.adk")
    from journal.adapters.adk_guard import CallIdReusedError

    async def go() -> list[str]:
        def deploy(n: int) -> dict[str, Any]:
            """Deploys release n."""
            _ran(tmp_path, n, False)
            return {"deployed": n}

        runner, _, guard = _adk_runner(tmp_path, [("fc-1", 1), ("fc-1", 2), ("fc-3", 1)], deploy)
        try:
            await runner.session_service.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SID)
            assert await _adk_send(runner, "go") == ["finished"]
            with pytest.raises(Exception) as refused:  # ADK wraps a plugin's error in a RuntimeError
                await _adk_send(runner, "again")
            cause = refused.value if isinstance(refused.value, CallIdReusedError) else refused.value.__cause__
            assert isinstance(cause, CallIdReusedError) and "fc-1" in str(cause), repr(refused.value)
            assert await _adk_send(runner, "once more") == ["finished"]  # a fresh id runs as usual
            return (tmp_path / SIDE_FILE).read_text().splitlines()
        finally:
            guard.close()
            await runner.session_service.close()

    assert asyncio.run(go()) == ["deploy:1", "deploy:1"]


# --- OpenAI Agents SDK: a reused call id is refused ----------------------------------------------

def test_openai_agents_a_reused_call_id_is_refused_not_given_another_calls_output(tmp_path: Path) -> None:
    """A provider that reuses call ids (ids like "call_0" in every response): deploy(v1) as "call_0"
    ran and returned; a later turn's deploy(v2), also "call_0", got v1's recorded output ("deployed v1")
    and never ran. Now it is refused with CallIdReusedError; a call under a fresh id runs as usual."""
    pytest.importorskip("agents")
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message
    from agents.testing import function_call as model_call

    from journal.adapters.openai_agents import JournalSession
    from journal.adapters.openai_agents_guard import CallIdReusedError, guard_for, guarded_tool

    def deploy(version: str) -> str:
        """Deploy a version."""
        _ran(tmp_path, version, False)
        return f"deployed {version}"

    steps = [[model_call("deploy", {"version": "v1"}, call_id="call_0")], [assistant_message("done")],
             [model_call("deploy", {"version": "v2"}, call_id="call_0")],  # the run ends refused: no reply
             [model_call("deploy", {"version": "v3"}, call_id="call_1")], [assistant_message("done")]]

    def _replies(out: list[Any]) -> Callable[[Any], list[Any]]:
        return lambda _call: out

    async def go() -> list[str]:
        session = await JournalSession.open("ops-1", tmp_path / "sessions")
        guard = guard_for(session)
        try:
            model = ScriptedModel([ModelStep.respond(_replies(out)) for out in steps])
            agent: Agent[Any] = Agent(name="ops", instructions="deploy", model=model,
                                      tools=[guarded_tool(guard, function_tool(deploy))])
            config = RunConfig(tracing_disabled=True)
            assert (await Runner.run(agent, "deploy v1", session=session, run_config=config)).final_output == "done"
            try:
                out = await Runner.run(agent, "deploy v2", session=session, run_config=config)
                refused: BaseException | None = None
            except Exception as exc:  # the SDK may wrap what a tool raised
                refused, out = exc, None
            chain = [refused, refused.__cause__ if refused is not None else None]
            assert any(isinstance(e, CallIdReusedError) and "call_0" in str(e) for e in chain), (out, refused)
            assert (await Runner.run(agent, "deploy v3", session=session, run_config=config)).final_output == "done"
            return (tmp_path / SIDE_FILE).read_text().splitlines()
        finally:
            guard.close()
            session.close()

    assert asyncio.run(go()) == ["deploy:v1", "deploy:v3"]
