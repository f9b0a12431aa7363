"""Strands Agents with the crash-safe tool guard (journal/adapters/strands_guard.py), killed with
SIGKILL.

A real ``strands.Agent`` on a JournalSessionManager with a scripted model (tests/strands_app.py,
no network): asked to deploy v1..vN, it calls the guarded ``deploy`` tool once per version (under
a toolUseId new in every process, as a real model's are) until the conversation holds a result for
each version, then answers. ``deploy`` appends a line to a side file outside the journal. Each life
runs in a child forked from this process (Strands is imported once); the first life kills itself
with SIGKILL at a chosen point of deploy's life, forced by a hook on the guard's journal
(``append_many``: before/after the intent batch, before/after the result) or in the tool's body
or the next model call -- no sleeps. Each later life is a new process that resumes the agent with
``agent()`` (no new prompt: Strands runs the pending toolUse again), or answers the interrupt the
last life surfaced.

Checks: the tool ran at most once unless the app answered "run_again"; the resume surfaced
exactly the call whose outcome is unknown, with its input (as a Strands interrupt); after an
answer the run finishes; the session's history is well formed (every toolUse has its result) and,
with the guard's journal, the same on every load. ``JOURNAL_GUARD_OFF=1`` builds the agent without
the hooks, and these tests fail.
"""

from __future__ import annotations

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

pytest.importorskip("strands", reason=missing_framework_reason("strands", "strands"))

from strands import Agent, tool
from strands.agent.conversation_manager.null_conversation_manager import NullConversationManager

from journal.adapters.strands import JournalSessionManager
from journal.adapters.strands_guard import INTERRUPT_PREFIX, CallIdReusedError, GuardHooks, guard_for
from journal.session.toolguard import ToolGuard
from tests.strands_app import ScriptedModel, text_reply, tool_reply

SESSION = "ops-1"
AGENT = "ops"
VERSIONS_RANDOM = 3


def _done(messages: list[dict[str, Any]]) -> list[str]:
    """The versions whose deploy call has a result in ``messages`` (the model's view), in order."""
    calls = {b["toolUse"]["toolUseId"]: b["toolUse"]["input"]["version"] for m in messages for b in m["content"]
             if "toolUse" in b and b["toolUse"]["name"] == "deploy"}
    return [calls[b["toolResult"]["toolUseId"]] for m in messages for b in m["content"]
            if "toolResult" in b and b["toolResult"]["toolUseId"] in calls]


def build(tmp: Path, plan: KillPlan, versions: int) -> tuple[Agent, JournalSessionManager, GuardHooks | None]:
    names = [f"v{n}" for n in range(1, versions + 1)]
    counter = iter(range(1_000_000))

    def respond(messages: list[dict[str, Any]]) -> dict[str, Any]:
        done = _done(messages)
        if done:
            plan.reached("after")  # the model call after a deploy returned
        if len(done) < len(names):
            return tool_reply((f"call_{os.getpid()}_{next(counter)}", "deploy", {"version": names[len(done)]}))
        return text_reply(f"deployed {', '.join(done)}")

    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        deploy_side_effect(tmp, plan, version, guarded=GUARD_ON)
        return f"deployed {version}"

    manager = JournalSessionManager(SESSION, tmp / "sessions")
    guard = GuardHooks(ToolGuard(kill_hooks(manager.store, plan)), SESSION) if GUARD_ON else None
    agent = Agent(agent_id=AGENT, model=ScriptedModel(respond), tools=[deploy], session_manager=manager,
                  hooks=[guard] if guard is not None else [], conversation_manager=NullConversationManager(),
                  callback_handler=None)
    return agent, manager, guard


def _life(tmp: Path, plan: KillPlan, versions: int, resume: bool, given: Any = None) -> dict[str, Any]:
    agent, manager, guard = build(tmp, plan, versions)
    try:
        if given is None and agent._interrupt_state.activated:
            # Killed while an answered call ran once more: Strands restores the agent still inside
            # its interrupt and takes only interrupt responses. The app sends its last answer again;
            # it answered the earlier attempt, so the guard runs nothing on it and asks anew.
            given = json.loads((tmp / "ask.json").read_text())["given"]
        if given is not None:
            ask = json.loads((tmp / "ask.json").read_text())
            (tmp / "ask.json").write_text(json.dumps({**ask, "given": given}))
            result = agent([{"interruptResponse": {"interruptId": ask["interruptId"], "response": given}}])
        else:
            result = agent() if resume else agent("deploy")
        asks = [i for i in result.interrupts or [] if i.name.startswith(INTERRUPT_PREFIX)]
        if asks:
            (tmp / "ask.json").write_text(json.dumps({"interruptId": asks[0].id}))
        text = [b.get("text") for b in (result.message or {}).get("content", []) if "text" in b]
        return {"asks": [a.reason for a in asks], "stop": result.stop_reason, "text": text,
                "finished": result.stop_reason == "end_turn" and any(t and t.startswith("deployed") for t in text)}
    finally:
        if guard is not None:
            guard.close()
        manager.close()


def _loads(tmp: Path) -> tuple[Any, Any, Any]:
    """The session's messages, the guard's history and its unknown calls, as a fresh process loads them."""
    manager = JournalSessionManager(SESSION, tmp / "sessions")
    guard = guard_for(manager)
    try:
        scope = guard.guard.scope(json.dumps(["strands", SESSION, AGENT], separators=(",", ":")))
        unknown = [[u.call_id, u.tool, u.args] for u in scope.unknown()]
        messages = [m.to_dict() for m in manager.list_messages(SESSION, AGENT)] \
            if manager.read_agent(SESSION, AGENT) is not None else []
        return messages, scope.history(), unknown
    finally:
        guard.close()
        manager.close()


def _check_history(tmp: Path) -> None:
    messages, _, _ = same_on_every_load(lambda: _loads(tmp))
    msgs = [m["message"] for m in messages]
    for i, m in enumerate(msgs):
        uses = [b["toolUse"]["toolUseId"] for b in m["content"] if "toolUse" in b]
        if uses and i + 1 < len(msgs):
            results = [b["toolResult"]["toolUseId"] for b in msgs[i + 1]["content"] if "toolResult" in b]
            assert sorted(results) == sorted(uses), (i, msgs)


def _unknown_in_journal(tmp: Path, _out: dict[str, Any] | None = None) -> list[Any]:
    return in_child(lambda: {"u": _loads(tmp)[2]})[1]["u"]


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_each_point_then_answer_truthfully(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), 1, False)
    assert killed
    ran = tool_runs(tmp_path, str).get("v1", 0) == 1
    out = in_child(_life, tmp_path, KillPlan(None), 1, True)[1]
    if EXPECT_UNKNOWN[point]:
        (ask,) = out["asks"]
        assert_asks_about_unknown_call(ask, {"version": "v1"})
        assert _unknown_in_journal(tmp_path) == [as_unknown_entry(ask)]
        assert tool_runs(tmp_path, str).get("v1", 0) == int(ran)  # asked, never re-run on its own
        out = in_child(_life, tmp_path, KillPlan(None), 1, True, truthful_answer(ran, "deployed v1"))[1]
    assert out["asks"] == [] and out["finished"], out
    assert tool_runs(tmp_path, str) == {"v1": 1}
    _check_history(tmp_path)


@pytest.mark.parametrize("answer", ["abandon", "run_again"])
def test_abandon_runs_nothing_and_run_again_runs_once_more(tmp_path: Path, answer: str) -> None:
    assert in_child(_life, tmp_path, KillPlan("mid_tool"), 1, False)[0]
    (ask,) = in_child(_life, tmp_path, KillPlan(None), 1, True)[1]["asks"]
    assert ask["tool"] == "deploy"
    out = in_child(_life, tmp_path, KillPlan(None), 1, True, answer)[1]
    assert tool_runs(tmp_path, str) == {"v1": 1 if answer == "abandon" else 2}
    if answer == "abandon":  # the model got a result saying so, and went on to answer
        _, history, unknown = _loads(tmp_path)
        assert unknown == [] and any(e["type"] == "tool.reconciled" for e in history)
    assert out["asks"] == []
    _check_history(tmp_path)


def test_run_again_that_dies_too_is_asked_about_again(tmp_path: Path) -> None:
    assert in_child(_life, tmp_path, KillPlan("mid_tool"), 1, False)[0]
    (first,) = in_child(_life, tmp_path, KillPlan(None), 1, True)[1]["asks"]
    assert in_child(_life, tmp_path, KillPlan("mid_tool"), 1, True, "run_again")[0]  # the rerun dies too
    (second,) = in_child(_life, tmp_path, KillPlan(None), 1, True)[1]["asks"]
    assert second["callId"] == first["callId"] and tool_runs(tmp_path, str) == {"v1": 2}
    out = in_child(_life, tmp_path, KillPlan(None), 1, True, {"answer": "happened", "result": "deployed v1"})[1]
    assert out["finished"] and tool_runs(tmp_path, str) == {"v1": 2}


def test_a_new_prompt_while_a_call_is_unknown_is_refused_until_answered(tmp_path: Path) -> None:
    assert in_child(_life, tmp_path, KillPlan("mid_tool"), 1, False)[0]

    def new_prompt() -> dict[str, Any]:
        agent, manager, guard = build(tmp_path, KillPlan(None), 1)
        try:
            result = agent("what happened?")
            text = result.message["content"][0]["text"]
            assert guard is not None
            unknown = [u.call_id for u in guard.unknown(agent)]
            guard.answer(agent, unknown[0], {"answer": "happened", "result": "deployed v1"})
            after = agent("go on")
            return {"text": text, "after": after.message["content"][0]["text"], "unknown": unknown}
        finally:
            if guard is not None:
                guard.close()
            manager.close()

    out = in_child(new_prompt)[1]
    assert out["text"].startswith("Waiting for your answer") and "deploy" in out["text"], out
    assert out["after"].startswith("deployed"), out
    assert tool_runs(tmp_path, str) == {"v1": 1}


def test_a_reused_tool_use_id_with_other_input_is_refused(tmp_path: Path) -> None:
    calls = iter([tool_reply(("same", "deploy", {"version": "v1"})), text_reply("ok"),
                  tool_reply(("same", "deploy", {"version": "v2"})), text_reply("ok")])

    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        return f"deployed {version}"

    manager = JournalSessionManager(SESSION, tmp_path / "sessions")
    guard = guard_for(manager)
    try:
        agent = Agent(agent_id=AGENT, model=ScriptedModel(lambda _m: next(calls)), tools=[deploy],
                      session_manager=manager, hooks=[guard], callback_handler=None)
        agent("one")
        with pytest.raises(Exception) as info:  # Strands wraps a hook's error in EventLoopException
            agent("two")
        causes = [info.value, info.value.__cause__]
        assert any(isinstance(c, CallIdReusedError) and "same" in str(c) for c in causes), causes
    finally:
        guard.close()
        manager.close()


def test_read_only_and_idempotent_tools_are_not_recorded(tmp_path: Path) -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    replies = iter([tool_reply(("c1", "lookup", {"key": "a"})), text_reply("ok")])
    manager = JournalSessionManager(SESSION, tmp_path / "sessions")
    guard = guard_for(manager, side_effects={"lookup": "read"})
    try:
        agent = Agent(agent_id=AGENT, model=ScriptedModel(lambda _m: next(replies)), tools=[lookup],
                      session_manager=manager, hooks=[guard], callback_handler=None)
        agent("go")
        assert not any(n.startswith("guard.") for n in manager.store.names())
    finally:
        guard.close()
        manager.close()


def test_guard_for_refuses_another_manager(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="JournalSessionManager"):
        guard_for(object())


def test_random_kill_rounds(tmp_path: Path) -> None:
    def start(tmp: Path, plan: KillPlan) -> tuple[bool, dict[str, Any]]:
        return in_child(_life, tmp, plan, VERSIONS_RANDOM, False)

    def resume(tmp: Path, given: Any) -> dict[str, Any]:
        return in_child(_life, tmp, KillPlan(None), VERSIONS_RANDOM, True, given)[1]

    app = GuardedApp(
        units=VERSIONS_RANDOM, start=start, resume=resume, asks=lambda out: out.get("asks", []),
        finished=lambda out: bool(out.get("finished")), unit_of=lambda ask: ask["args"]["version"],
        result_of=lambda unit: f"deployed {unit}", journal_unknown=_unknown_in_journal,
        check_history=_check_history, tool_unit=str)
    random_kill_rounds(tmp_path, app, seed_offset=31, steps_max=2 * VERSIONS_RANDOM + 2)


def test_the_example_tells_its_story(tmp_path: Path) -> None:
    out = run_example_demo("strands_crash_safe_tool.py", tmp_path)
    assert "deploy said: deployed v2 (checked by hand)" in out, out


def test_a_call_whose_result_the_conversation_holds_is_not_pending(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard's result is written at "flush": a power loss may lose it while the session's later
    synced message with the tool's real result survives. The call then reads unknown to the guard,
    but the model has its result: a new prompt is not refused."""
    replies = iter([tool_reply(("c1", "deploy", {"version": "v1"})), text_reply("deployed v1"), text_reply("ok")])
    ran: list[str] = []

    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        ran.append(version)
        return f"deployed {version}"

    manager = JournalSessionManager(SESSION, tmp_path / "sessions")
    guard = guard_for(manager)
    with monkeypatch.context() as m:
        m.setattr(ToolGuard, "close", lambda self: None)  # the result record never reaches the journal
        m.setattr("journal.session.toolguard.GuardScope.after", lambda *a, **k: None)
        agent = Agent(agent_id=AGENT, model=ScriptedModel(lambda _m: next(replies)), tools=[deploy],
                      session_manager=manager, hooks=[guard], callback_handler=None)
        agent("deploy")
    for scope_, _ in list(guard.guard._scopes.values()):
        scope_.journal.close()
    manager.close()
    manager = JournalSessionManager(SESSION, tmp_path / "sessions")
    again = guard_for(manager)
    try:
        agent = Agent(agent_id=AGENT, model=ScriptedModel(lambda _m: next(replies)), tools=[deploy],
                      session_manager=manager, hooks=[again], callback_handler=None)
        assert [u.call_id for u in again.unknown(agent)] == ["c1"]  # the guard lost the result
        out = agent("anything else?")
        assert out.message["content"][0]["text"] == "ok" and ran == ["v1"]
    finally:
        again.close()
        manager.close()
