"""Google ADK with the crash-safe tool guard (journal/adapters/adk_guard.py), killed with SIGKILL.

A real ADK app: an LlmAgent whose model is scripted (no network: it calls ``deploy(n)`` for each
n of 1..loops that has no answer in its request yet, then says "finished") and whose ``deploy``
tool appends a line to a side file outside the journal, run by ADK's Runner on a
JournalSessionService with ``GuardPlugin(guard_for(service))``. Each life of the app runs in a
child forked from this process (ADK is imported once); the first life kills itself with SIGKILL
at a chosen point of deploy's life, forced by a hook on the guard's journal (its
``append_many``: before/after the intent batch, before/after the result), in the tool's body,
or in the model call after it -- no sleeps. Each later life is a new process that sends the
session a message ("continue", or the answer to the guard's adk_request_confirmation).

Checks: the tool ran at most once unless the app answered "run_again"; the resume surfaced
exactly the calls whose outcome is unknown, with their arguments; after an answer the run
finishes; every function call in the session has a response (the closers) and the session and
the guard's journal are the same on every load.

Without the plugin (``JOURNAL_GUARD_OFF=1``) these tests fail. The machinery they share with the
other frameworks' guard tests is tests/guard_harness.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
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

pytest.importorskip("google.adk", reason=missing_framework_reason("google.adk", "adk"))

from google.adk.agents.llm_agent import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.session import Session
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types

from journal.adapters.adk import JournalSessionService
from journal.adapters.adk_guard import (
    METADATA_KEY,
    BadAnswerError,
    GuardPlugin,
    answer_message,
    guard_for,
    parse_answer,
    pending_unknown,
    scope_id,
    session_gate,
)
from journal.session.toolguard import ABANDON, RUN_AGAIN, ToolGuard, happened

APP, USER, SID = "ops", "u1", "s1"
STEPS_MAX = 12  # messages one round may send before it must have finished
LOOPS_RANDOM = 3  # deploys a random-kill round's model asks for, one at a time


class _HookedService(JournalSessionService):
    """Kills at "after_closer": once the plugin's closer of an orphaned call is stored, before the
    confirmation request that follows it."""

    def __init__(self, path: str, plan: KillPlan) -> None:
        super().__init__(path)
        self._plan = plan

    async def append_event(self, session: Session, event: Event) -> Event:
        out = await super().append_event(session, event)
        if "closes" in (event.custom_metadata or {}).get(METADATA_KEY, {}):
            self._plan.reached("after_closer")
        return out


def _answered(contents: list[types.Content]) -> tuple[set[int], bool]:
    """Which n the model's request shows answered (a call that never started is not), and
    whether the request ends with a response to deploy. ADK sends the model no client-made call
    ids, so responses pair with the calls of the model turn before them, in order, as in Gemini."""
    done: set[int] = set()
    calls: list[types.FunctionCall] = []
    for c in contents:
        parts = c.parts or []
        if any(p.function_call is not None for p in parts):
            calls = [p.function_call for p in parts if p.function_call is not None]
            continue
        responses = [p.function_response for p in parts if p.function_response is not None]
        for fc, fr in zip(calls, responses, strict=False):
            if fr.name == "deploy" and (fr.response or {}).get("status") != "TOOL_NOT_STARTED":
                done.add(int((fc.args or {})["n"]))
    last = contents[-1].parts or [] if contents else []
    return done, any(p.function_response is not None and p.function_response.name == "deploy" for p in last)


class ScriptedModel(BaseLlm):
    """Calls deploy(n) for the first n of 1..loops its request shows unanswered, then "finished"."""

    model: str = "scripted"
    loops: int = 1
    plan: Any = None
    parallel: bool = False

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        done, after_tool = _answered(list(llm_request.contents))
        if after_tool:
            self.plan.reached("after")  # deploy's response is stored: the tool's life is over
        todo = [n for n in range(1, self.loops + 1) if n not in done][: self.loops if self.parallel else 1]
        if todo:  # one call, or all of them in one response (ADK runs them concurrently)
            parts = [types.Part(function_call=types.FunctionCall(name="deploy", args={"n": n})) for n in todo]
            yield LlmResponse(content=types.Content(role="model", parts=parts))
            return
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="finished")]))


def build(service: JournalSessionService, guard: ToolGuard | None, tmp: Path, plan: KillPlan, loops: int,
          resumable: bool = False, parallel: bool = False, confirm: bool = False) -> Runner:
    def deploy(n: int) -> dict[str, Any]:
        """Deploys release n (appends to a file outside the journal)."""
        deploy_side_effect(tmp, plan, n, guarded=guard is not None)
        return {"deployed": n}

    tool = FunctionTool(deploy, require_confirmation=True) if confirm else deploy
    agent = LlmAgent(name="ops", model=ScriptedModel(loops=loops, plan=plan, parallel=parallel), tools=[tool])
    plugins: list[BasePlugin] = [GuardPlugin(guard)] if guard is not None else []
    app = App(name=APP, root_agent=agent, plugins=plugins,
              resumability_config=ResumabilityConfig(is_resumable=True) if resumable else None)
    return Runner(app=app, session_service=service)


def _message(step: str, session: Session) -> types.Content:
    if step.startswith("answer:"):
        answer: Any = json.loads(step.removeprefix("answer:"))
        return answer_message(pending_unknown(session)[0]["confirmationCallId"], answer)
    return types.Content(role="user", parts=[types.Part(text=step)])


async def _alife(tmp: Path, plan: KillPlan, step: str, loops: int, resumable: bool = False,
                 parallel: bool = False, confirm: bool = False) -> dict[str, Any]:
    service = _HookedService(str(tmp / "sessions"), plan)
    guard = ToolGuard(kill_hooks(guard_for(service).store, plan)) if GUARD_ON else None
    try:
        runner = build(service, guard, tmp, plan, loops, resumable, parallel, confirm)
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
        if session is None:
            session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
        texts: list[str] = []
        kwargs: dict[str, Any] = {"invocation_id": step.removeprefix("resume:")} if step.startswith("resume:") \
            else {"new_message": _message(step, session)}
        async for ev in runner.run_async(user_id=USER, session_id=SID, **kwargs):
            texts += [p.text for p in (ev.content.parts or []) if p.text] if ev.content else []
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
        assert session is not None
        scope = guard.scope(scope_id(APP, USER, SID)) if guard is not None else None
        unknown = [[u.call_id, u.tool, u.args] for u in scope.unknown()] if scope is not None else []
        return {"pending": pending_unknown(session), "texts": texts, "finished": texts[-1:] == ["finished"],
                "unknown": unknown}
    finally:
        if guard is not None:
            guard.close()
        await service.close()


def _life(tmp: Path, plan: KillPlan, step: str, loops: int, resumable: bool = False, parallel: bool = False,
          confirm: bool = False) -> dict[str, Any]:
    return asyncio.run(_alife(tmp, plan, step, loops, resumable, parallel, confirm))


def _load(tmp: Path) -> dict[str, Any]:
    """The session's events, the calls left without a response, and the guard's history and
    unknown calls, as a fresh process loads them."""
    async def go() -> dict[str, Any]:
        service = JournalSessionService(str(tmp / "sessions"))
        guard = guard_for(service)
        try:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
            assert session is not None
            answered = {fr.id for e in session.events for fr in e.get_function_responses()}
            open_calls = [fc.id for e in session.events for fc in e.get_function_calls()
                          if fc.id not in answered and fc.id not in (e.long_running_tool_ids or set())]
            scope = guard.scope(scope_id(APP, USER, SID))
            return {"events": [e.model_dump(mode="json") for e in session.events], "open_calls": open_calls,
                    "guard": scope.history(), "unknown": [[u.call_id, u.tool, u.args] for u in scope.unknown()],
                    "gate": session_gate(guard, APP, USER, SID).decision}
        finally:
            guard.close()
            await service.close()

    return asyncio.run(go())


def load(tmp: Path) -> dict[str, Any]:
    return in_child(_load, tmp)[1]


def _check_well_formed_and_stable(tmp: Path) -> None:
    first = in_child(lambda: same_on_every_load(lambda: _load(tmp)))[1]  # both loads in one child
    assert first["open_calls"] == []  # every function call the session holds has a response


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), "go", 1)
    assert killed
    ran_before = tool_runs(tmp_path).get(1, 0)
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    pending = resumed["pending"]
    if EXPECT_UNKNOWN[point]:
        assert len(pending) == 1, resumed  # exactly the call whose outcome is unknown, with its arguments
        (u,) = pending
        assert_asks_about_unknown_call(u, {"n": 1})
        assert load(tmp_path)["unknown"] == [as_unknown_entry(u)]
        assert load(tmp_path)["gate"] == "paused"  # the session's gate, from the adapter
        assert not resumed["finished"] and "Waiting for your answer" in resumed["texts"][-1]  # paused: asked
        assert tool_runs(tmp_path).get(1, 0) == ran_before  # asking ran nothing
        _check_well_formed_and_stable(tmp_path)  # the closer answers the call while it waits
        answer = truthful_answer(ran_before > 0, {"deployed": 1})
        _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps(answer), 1)
    else:
        assert pending == [] and load(tmp_path)["unknown"] == [], resumed
        done = resumed
    assert done["finished"] and done["pending"] == [], done  # the run finished
    assert tool_runs(tmp_path) == {1: 1}  # at most once; once here, as the answer said
    assert load(tmp_path)["gate"] == "continue"
    _check_well_formed_and_stable(tmp_path)


def test_abandon_runs_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "go", 2)
    assert killed
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 2)
    assert [u["args"] for u in resumed["pending"]] == [{"n": 1}]
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps("abandon"), 2)
    assert done["finished"], done
    assert tool_runs(tmp_path) == {1: 1, 2: 1}
    events = load(tmp_path)["events"]
    statuses = [p["function_response"]["response"].get("status") for e in events
                for p in (e.get("content") or {}).get("parts", []) if p.get("function_response")
                and p["function_response"]["name"] == "deploy"]
    assert statuses == ["TOOL_OUTCOME_UNKNOWN", "abandoned", None]  # the model saw each for what it was
    _check_well_formed_and_stable(tmp_path)


def test_killed_between_the_closer_and_its_question(tmp_path: Path) -> None:
    """The closer is stored and the process dies before the adk_request_confirmation: the next
    message writes the missing request (with the id the first would have had), once."""
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "go", 1)
    assert killed
    killed, _ = in_child(_life, tmp_path, KillPlan("after_closer"), "continue", 1)
    assert killed
    assert load(tmp_path)["open_calls"] == []  # the closer alone already answers the call
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    assert [u["args"] for u in resumed["pending"]] == [{"n": 1}], resumed
    _, again = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    assert again["pending"] == resumed["pending"]  # asked once: no second closer, no second request
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps({"answer": "happened", "result": 1}), 1)
    assert done["finished"] and tool_runs(tmp_path) == {1: 1}
    _check_well_formed_and_stable(tmp_path)


def test_a_crash_while_an_answered_call_runs_again_asks_again(tmp_path: Path) -> None:
    """Answered "run_again", the new attempt is killed mid-tool too: the next message asks about
    that attempt (a new closer and question), and nothing runs until it is answered."""
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "go", 1)
    assert killed
    _, first = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "answer:" + json.dumps("run_again"), 1)
    assert killed and tool_runs(tmp_path) == {1: 2}
    _, second = in_child(_life, tmp_path, KillPlan(None), "continue", 1)
    assert [(u["callId"], u["args"]) for u in second["pending"]] == [(first["pending"][0]["callId"], {"n": 1})]
    assert second["pending"][0]["confirmationCallId"] != first["pending"][0]["confirmationCallId"]
    assert not second["finished"] and tool_runs(tmp_path) == {1: 2}
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps({"answer": "happened", "result": 1}), 1)
    assert done["finished"] and tool_runs(tmp_path) == {1: 2}
    _check_well_formed_and_stable(tmp_path)


def test_random_kills(tmp_path: Path) -> None:
    def resume(tmp: Path, given: Any) -> dict[str, Any]:
        step = "continue" if given is None else "answer:" + json.dumps(given)  # a message to the session
        return in_child(_life, tmp, KillPlan(None), step, LOOPS_RANDOM)[1]

    random_kill_rounds(tmp_path, GuardedApp(
        units=LOOPS_RANDOM,
        start=lambda tmp, plan: in_child(_life, tmp, plan, "go", LOOPS_RANDOM),
        resume=resume,
        asks=lambda out: out.get("pending", []),
        finished=lambda out: bool(out.get("finished")),
        unit_of=lambda ask: ask["args"]["n"],
        result_of=lambda n: {"deployed": n},
        journal_unknown=lambda tmp, out: out["unknown"],  # the life read the journal as it ended
        check_history=_check_well_formed_and_stable,
    ), seed_offset=30, steps_max=STEPS_MAX)


def test_a_resumable_app_replays_the_call_and_the_guard_asks(tmp_path: Path) -> None:
    """ResumabilityConfig(is_resumable=True): resumed by invocation id, ADK replays the orphaned
    call itself; the plugin answers that replay with the question instead of running the tool."""
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), "go", 1, True)
    assert killed
    invocation = next(e["invocation_id"] for e in load(tmp_path)["events"] if e["author"] == "ops")
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "resume:" + invocation, 1, True)
    assert [(u["tool"], u["args"]) for u in resumed["pending"]] == [("deploy", {"n": 1})], resumed
    assert tool_runs(tmp_path) == {1: 1}
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps("run_again"), 1, True)
    assert done["finished"] and tool_runs(tmp_path) == {1: 2}  # run again, once, as answered
    _check_well_formed_and_stable(tmp_path)


def test_parallel_calls_killed_in_the_second(tmp_path: Path) -> None:
    """The model calls deploy(1) and deploy(2) in one response and ADK runs them together; the
    process dies inside the second. Every call gets a closer; only the unknown ones are asked
    about; none runs again unasked."""
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool", 2), "go", 2, False, True)
    assert killed and tool_runs(tmp_path) == {1: 1, 2: 1}
    out: dict[str, Any] = {"finished": False, "pending": []}
    step, asked = "continue", []
    for _ in range(STEPS_MAX):
        if out["finished"] and not out["pending"]:
            break
        _, out = in_child(_life, tmp_path, KillPlan(None), step, 2, False, True)
        step = "continue"
        if out["pending"]:
            u = out["pending"][0]
            asked.append(u["args"]["n"])
            step = "answer:" + json.dumps({"answer": "happened", "result": {"deployed": u["args"]["n"]}})
    assert out["finished"] and 2 in asked and set(asked) <= {1, 2}, (out, asked)
    assert tool_runs(tmp_path) == {1: 1, 2: 1}
    _check_well_formed_and_stable(tmp_path)


def test_a_tool_that_asks_for_its_own_confirmation_is_guarded_once_confirmed(tmp_path: Path) -> None:
    """FunctionTool(require_confirmation=True): ADK's gate asks first and the tool does not run
    (the guard writes nothing then); once confirmed it runs, guarded; killed inside, it is
    asked about again, as an unknown call, not run again."""
    in_child(_life, tmp_path, KillPlan(None), "go", 1, False, False, True)
    assert tool_runs(tmp_path) == {} and load(tmp_path)["guard"][1:] == []  # only the journal's header
    confirm = json.dumps({"confirmed": True})
    killed, _ = in_child(_confirm_life, tmp_path, KillPlan("mid_tool"), confirm)
    assert killed and tool_runs(tmp_path) == {1: 1}
    _, resumed = in_child(_life, tmp_path, KillPlan(None), "continue", 1, False, False, True)
    assert [u["args"] for u in resumed["pending"]] == [{"n": 1}] and tool_runs(tmp_path) == {1: 1}
    _, done = in_child(_life, tmp_path, KillPlan(None), "answer:" + json.dumps({"answer": "happened", "result": 1}),
                       1, False, False, True)
    assert done["finished"] and tool_runs(tmp_path) == {1: 1}
    _check_well_formed_and_stable(tmp_path)


def _confirm_life(tmp: Path, plan: KillPlan, response: str) -> dict[str, Any]:
    """Answer ADK's own confirmation request (not the guard's) with ``response``."""
    async def go() -> dict[str, Any]:
        service = JournalSessionService(str(tmp / "sessions"))
        guard = ToolGuard(kill_hooks(guard_for(service).store, plan)) if GUARD_ON else None
        try:
            runner = build(service, guard, tmp, plan, 1, confirm=True)
            session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
            assert session is not None
            answered = {fr.id for e in session.events for fr in e.get_function_responses()}
            (request,) = [fc.id for e in session.events for fc in e.get_function_calls()
                          if fc.name == "adk_request_confirmation" and fc.id not in answered]
            msg = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
                id=request, name="adk_request_confirmation", response=json.loads(response)))])
            texts = [p.text async for ev in runner.run_async(user_id=USER, session_id=SID, new_message=msg)
                     for p in ((ev.content.parts or []) if ev.content else []) if p.text]
            return {"texts": texts}
        finally:
            if guard is not None:
                guard.close()
            await service.close()

    return asyncio.run(go())


def test_without_the_guard_a_killed_tool_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): ADK drops the orphaned call from the model's
    request, the model calls the tool again, and nothing tells anyone it may have run."""
    def life(plan: KillPlan, step: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            service = JournalSessionService(str(tmp_path / "sessions"))
            try:
                runner = build(service, None, tmp_path, plan, 1)
                if await service.get_session(app_name=APP, user_id=USER, session_id=SID) is None:
                    await service.create_session(app_name=APP, user_id=USER, session_id=SID)
                msg = types.Content(role="user", parts=[types.Part(text=step)])
                texts = [p.text async for ev in runner.run_async(user_id=USER, session_id=SID, new_message=msg)
                         for p in ((ev.content.parts or []) if ev.content else []) if p.text]
                return {"texts": texts}
            finally:
                await service.close()

        return asyncio.run(go())

    killed, _ = in_child(life, KillPlan("mid_tool"), "go")
    assert killed
    _, out = in_child(life, KillPlan(None), "continue")
    assert out["texts"] == ["finished"] and tool_runs(tmp_path) == {1: 2}


def test_read_only_and_idempotent_tools_write_nothing(tmp_path: Path) -> None:
    plugin = GuardPlugin(ToolGuard(guard_for(JournalSessionService(str(tmp_path))).store),
                         side_effects={"lookup": "read"}, idempotent={"set_flag"})
    assert not plugin.guards("lookup") and not plugin.guards("set_flag") and plugin.guards("deploy")
    assert plugin.declared("set_flag") == ("external-write", "safe")


def test_answers_from_adk_tool_confirmations() -> None:
    """What the app sends back through ADK's ToolConfirmation, read as the guard's answers."""
    assert parse_answer(ToolConfirmation(confirmed=False)) == ABANDON  # ADK's plain rejection
    assert parse_answer(ToolConfirmation(confirmed=True, payload="run_again")) == RUN_AGAIN
    assert parse_answer(ToolConfirmation(confirmed=True, payload={"answer": "happened", "result": 3})) == \
        happened(3)
    with pytest.raises(BadAnswerError, match="give 'run_again', 'abandon'"):
        parse_answer(ToolConfirmation(confirmed=True))  # "yes" alone does not say what happened
    message = answer_message("adk-q1", {"answer": "happened", "result": {"deployed": 1}})
    (part,) = message.parts or []
    assert part.function_response is not None and part.function_response.name == "adk_request_confirmation"
    assert parse_answer(ToolConfirmation.from_response_dict(part.function_response.response or {})) == \
        happened({"deployed": 1})


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/adk_crash_safe_tool.py, as the docs show it: killed, asked, answered, finished."""
    run_example_demo("adk_crash_safe_tool.py", tmp_path)
