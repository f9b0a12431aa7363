"""Pydantic AI with the crash-safe tool guard (journal/adapters/pydantic_ai_guard.py), killed with SIGKILL.

A real agent with a scripted model (``FunctionModel``: it calls ``deploy(n=k+1)`` while the
conversation holds fewer than ``loops`` deploy results, then answers "finished"), its ``deploy``
tool appending a line to a side file outside the journal, ``CrashSafeTools(guard)``, and a
``JournalConversationStore`` the app saves the conversation to after each run (the framework's
documented pattern). Each life runs in a child forked from this process (Pydantic AI is imported
once); the first life kills itself with SIGKILL at a chosen point of deploy's life, forced by a
hook on the guard's journal (its ``append_many``: before/after the intent batch, before/after the
result), in the tool's body, or in the model's next turn -- no sleeps. Each later life is a new
process that loads the conversation and runs again.

Checks: the tool ran at most once unless the app answered "run_again"; the resume surfaced
exactly the calls whose outcome is unknown, with their arguments (as ``DeferredToolRequests``);
after an answer (``deferred_tool_results``) the run finishes; the stored history is well formed
(every tool call has its return) and the same on every load, and so is the guard's journal.

These tests fail when ``JOURNAL_GUARD_OFF=1`` leaves the CrashSafeTools capability out. Killing a
life, counting the tool's runs and the random rounds: tests/guard_harness.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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

pytest.importorskip("pydantic_ai", reason=missing_framework_reason("pydantic_ai", "pydantic-ai"))

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import journal
from journal.adapters.pydantic_ai import JournalConversationStore
from journal.adapters.pydantic_ai_guard import (
    ABANDONED_CONTENT,
    CrashSafeTools,
    answers,
    close_open_calls,
    conversation_gate,
    guard_for,
    guard_store,
)
from journal.session.toolguard import ToolGuard, journal_name
from tests.backends import Backend, made_or_skipped

CID = "conv-1"
LOOPS_RANDOM = 3  # deploys a random-kill round's model asks for, one at a time


def _deploy_returns(messages: list[ModelMessage]) -> int:
    return sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == "deploy")


def build(guard: ToolGuard | None, tmp: Path, plan: KillPlan, loops: int) -> Agent[None, Any]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        k = _deploy_returns(messages)
        if k >= loops:
            plan.reached("after")
            return ModelResponse(parts=[TextPart(f"finished:{k}")])
        if k > 0:
            plan.reached("after")  # the model's turn after a deploy returned: past the tool's life
        return ModelResponse(parts=[ToolCallPart("deploy", {"n": k + 1})])

    caps = [CrashSafeTools(guard)] if guard is not None else []
    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests], capabilities=caps)

    @agent.tool_plain
    def deploy(n: int) -> str:
        deploy_side_effect(tmp, plan, n, guarded=guard is not None)
        return f"deployed:{n}"

    return agent


def _summary(conv: Conversation) -> dict[str, Any]:
    req = conv.deferred_tool_requests
    asked = [{"toolCallId": c.tool_call_id, **(req.metadata.get(c.tool_call_id) or {})}
             for c in req.approvals] if req is not None else []
    text = [p.content for m in conv.messages if isinstance(m, ModelResponse) for p in m.parts
            if isinstance(p, TextPart)]
    return {"asked": asked, "finished": bool(text) and text[-1].startswith("finished:") and req is None,
            "text": text}


async def _alife(tmp: Path, plan: KillPlan, loops: int, given: dict[str, Any] | None,
                 target: str | None = None) -> dict[str, Any]:
    store = JournalConversationStore(target or tmp / "conv")
    guard = ToolGuard(kill_hooks(guard_store(store), plan)) if GUARD_ON else None
    try:
        agent = build(guard, tmp, plan, loops)
        conv = await store.load(CID)
        if conv is not None and conv.deferred_tool_requests is not None:
            assert given is not None, "the conversation waits for answers"
            req = conv.deferred_tool_requests
            results = answers(req, {c.tool_call_id: given for c in req.approvals})
            result = await agent.run(conversation=conv, deferred_tool_results=results)
        elif conv is not None and _summary(conv)["finished"]:
            return _summary(conv)
        else:
            # Nothing stored, or a finished earlier turn: the app (re)sends the user's request.
            result = await agent.run("deploy please", conversation=conv or Conversation(conversation_id=CID))
        await store.save(result)
        return _summary(result.conversation)
    finally:
        if guard is not None:
            guard.close()
        await store.close()


def _life(tmp: Path, plan: KillPlan, loops: int, given: Any = None, target: str | None = None) -> dict[str, Any]:
    return asyncio.run(_alife(tmp, plan, loops, given, target))


async def _aload(tmp: Path) -> tuple[Any, Any, Any]:
    store = JournalConversationStore(tmp / "conv")
    guard = guard_for(store)
    try:
        conv = await store.load(CID)
        messages = json.loads(json.dumps([m.parts for m in conv.messages], default=repr)) if conv else None
        return messages, guard.scope(CID).history(), [[u.call_id, u.tool, u.args] for u in guard.scope(CID).unknown()]
    finally:
        guard.close()
        await store.close()


def _loads(tmp: Path) -> tuple[Any, Any, Any]:
    """The stored conversation, the guard's history and its unknown calls (``[call id, tool, args]``),
    as a fresh process reads them."""
    _, out = in_child(lambda: {"v": asyncio.run(_aload(tmp))})
    first, history, unknown = out["v"]
    return first, history, unknown


async def _awell_formed(tmp: Path) -> dict[str, Any]:
    store = JournalConversationStore(tmp / "conv")
    try:
        conv = await store.load(CID)
        assert conv is not None
        calls = [p.tool_call_id for m in conv.messages for p in m.parts if isinstance(p, ToolCallPart)]
        returns = [p for m in conv.messages for p in m.parts if isinstance(p, ToolReturnPart)]
        return {"calls": calls, "returns": [p.tool_call_id for p in returns],
                "contents": [p.content for p in returns]}
    finally:
        await store.close()


def _check_history(tmp: Path) -> dict[str, Any]:
    """Every stored call has its return, and every load gives the same conversation and guard journal."""
    same_on_every_load(lambda: _loads(tmp))
    _, shape = in_child(lambda: asyncio.run(_awell_formed(tmp)))
    assert sorted(shape["calls"]) == sorted(shape["returns"]), shape
    return shape


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan(point), 1)
    assert killed
    ran_before = tool_runs(tmp_path).get(1, 0)
    _, resumed = in_child(_life, tmp_path, KillPlan(None), 1)
    if EXPECT_UNKNOWN[point]:
        assert len(resumed["asked"]) == 1, resumed  # exactly the call whose outcome is unknown, with its arguments
        (u,) = resumed["asked"]
        assert_asks_about_unknown_call(u, {"n": 1})
        assert _loads(tmp_path)[2] == [as_unknown_entry(u)]
        assert tool_runs(tmp_path).get(1, 0) == ran_before  # asking ran nothing
        given = truthful_answer(ran_before > 0, "deployed:1")
        _, done = in_child(_life, tmp_path, KillPlan(None), 1, given)
    else:
        assert resumed["asked"] == [] and _loads(tmp_path)[2] == [], resumed
        done = resumed
    assert done["finished"] and done["text"][-1] == "finished:1", done  # the run finished
    assert tool_runs(tmp_path) == {1: 1}  # at most once; once here, as the answer said
    shape = _check_history(tmp_path)
    assert shape["contents"] == ["deployed:1"]


def test_abandon_runs_nothing_and_the_model_is_told_the_outcome_is_unknown(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool", 2), 3)
    assert killed and tool_runs(tmp_path) == {1: 1, 2: 1}
    _, resumed = in_child(_life, tmp_path, KillPlan(None), 3)
    assert [u["args"] for u in resumed["asked"]] == [{"n": 2}]  # deploy 1 returned: its result is reused
    _, done = in_child(_life, tmp_path, KillPlan(None), 3, "abandon")
    assert done["finished"] and tool_runs(tmp_path) == {1: 1, 2: 1, 3: 1}
    shape = _check_history(tmp_path)
    assert shape["contents"] == ["deployed:1", ABANDONED_CONTENT, "deployed:3"]
    assert _loads(tmp_path)[2] == []


def test_random_kills(tmp_path: Path) -> None:
    random_kill_rounds(tmp_path, GuardedApp(
        units=LOOPS_RANDOM,
        start=lambda tmp, plan: in_child(_life, tmp, plan, LOOPS_RANDOM),
        # A later life answers the conversation's deferred calls with ``given``, else runs on.
        resume=lambda tmp, given: in_child(_life, tmp, KillPlan(None), LOOPS_RANDOM, given)[1],
        asks=lambda out: out.get("asked", []),
        finished=lambda out: bool(out.get("finished")) and out["text"][-1] == f"finished:{LOOPS_RANDOM}",
        unit_of=lambda ask: ask["args"]["n"],
        result_of=lambda n: f"deployed:{n}",
        journal_unknown=lambda tmp, out: _loads(tmp)[2],
        check_history=_check_history,
    ), seed_offset=31, steps_max=LOOPS_RANDOM * 3)


def test_without_the_guard_a_killed_tool_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): the model calls the tool again, and it runs again."""
    def life(plan: KillPlan) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            store = JournalConversationStore(tmp_path / "conv")
            try:
                agent = build(None, tmp_path, plan, 1)
                conv = await store.load(CID) or Conversation(conversation_id=CID)
                result = await agent.run("deploy please", conversation=conv)
                await store.save(result)
                return _summary(result.conversation)
            finally:
                await store.close()
        return asyncio.run(go())

    killed, _ = in_child(life, KillPlan("mid_tool"))
    assert killed
    _, out = in_child(life, KillPlan(None))
    assert out["finished"] and tool_runs(tmp_path) == {1: 2}


async def _saved_midway_then_killed(tmp: Path, point: str = "mid_tool") -> dict[str, Any]:
    """An app that saves the conversation once the model's call is in it, killed at ``point``."""
    store = JournalConversationStore(tmp / "conv")
    plan = KillPlan(point)
    guard = ToolGuard(kill_hooks(guard_store(store), plan))
    agent = build(guard, tmp, plan, 1)
    conv = Conversation(conversation_id=CID)
    saved = False
    async with agent.iter("deploy please", conversation=conv) as run:
        async for node in run:
            if Agent.is_call_tools_node(node) and not saved:  # the model's call is in the history: save it
                await store.save(Conversation(messages=list(run.all_messages()), conversation_id=CID))
                saved = True
    return {}


def test_a_stored_history_ending_in_the_call_resumes_through_the_guard(tmp_path: Path) -> None:
    """An app that saved midway (the history ends in the model's call): resumed without a prompt,
    Pydantic AI executes that call under its own tool_call_id, and the guard asks about it."""
    killed, _ = in_child(lambda: asyncio.run(_saved_midway_then_killed(tmp_path)))
    assert killed and tool_runs(tmp_path) == {1: 1}

    async def resume(given: Any) -> dict[str, Any]:
        store = JournalConversationStore(tmp_path / "conv")
        guard = guard_for(store)
        try:
            agent = build(guard, tmp_path, KillPlan(None), 1)
            conv = await store.load(CID)
            assert conv is not None and isinstance(conv.messages[-1], ModelResponse)
            if given is None:
                result = await agent.run(conversation=conv)
            else:
                req = conv.deferred_tool_requests
                assert req is not None
                result = await agent.run(conversation=conv, deferred_tool_results=DeferredToolResults(
                    approvals={c.tool_call_id: ToolDenied() for c in req.approvals}))
            await store.save(result)
            gate = conversation_gate(guard, CID)
            return {**_summary(result.conversation), "gate": gate.decision, "codes": gate.codes()}
        finally:
            guard.close()
            await store.close()

    _, asked = in_child(lambda: asyncio.run(resume(None)))
    assert [u["args"] for u in asked["asked"]] == [{"n": 1}]
    assert asked["codes"] == ["TOOL_OUTCOME_UNKNOWN"] and asked["gate"] == "paused"
    _, done = in_child(lambda: asyncio.run(resume("abandon")))  # ToolDenied(): abandon
    assert done["finished"] and done["codes"] == [] and done["gate"] == "continue"
    assert tool_runs(tmp_path) == {1: 1}
    shape = _check_history(tmp_path)
    assert shape["contents"] == [ABANDONED_CONTENT]  # ToolDenied's default words replaced: unknown, not denied


def test_the_example_runs(tmp_path: Path) -> None:
    """examples/pydantic_ai_crash_safe_tool.py, as the docs show it: killed, asked, answered, finished."""
    run_example_demo("pydantic_ai_crash_safe_tool.py", tmp_path)


def test_a_read_only_or_idempotent_tool_is_not_synced_and_runs_again(tmp_path: Path) -> None:
    """Tools declared free of side effects (the capability's map, or the tool's own metadata) or
    idempotent write nothing to the guard's journal: after a crash they simply run again."""
    async def go(crash: bool) -> dict[str, Any]:
        store = JournalConversationStore(tmp_path / "conv")
        guard = guard_for(store)
        try:
            def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                done = {p.tool_name for m in messages for p in m.parts if isinstance(p, ToolReturnPart)}
                todo = [t for t in ("lookup", "ping", "status") if t not in done]
                if not todo:
                    return ModelResponse(parts=[TextPart("finished:0")])
                return ModelResponse(parts=[ToolCallPart(todo[0], {"q": 1})])

            agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                                            capabilities=[CrashSafeTools(guard, side_effects={"lookup": "read"},
                                                                         idempotent={"ping"})])

            def tool(name: str) -> Callable[[int], str]:
                def run(q: int) -> str:
                    append_line(side_file(tmp_path), f"{name}:{q}")
                    if crash and name == "status":
                        kill_this_process()
                    return name
                run.__name__ = name
                return run

            agent.tool_plain(tool("lookup"))
            agent.tool_plain(tool("ping"))
            agent.tool_plain(metadata={"sideEffect": "none"})(tool("status"))
            result = await agent.run("go", conversation=Conversation(conversation_id=CID))
            await store.save(result)
            return {**_summary(result.conversation), "history": guard.scope(CID).history()}
        finally:
            guard.close()
            await store.close()

    killed, _ = in_child(lambda: asyncio.run(go(True)))
    assert killed
    _, out = in_child(lambda: asyncio.run(go(False)))
    assert out["finished"] and out["asked"] == []
    assert [e["type"] for e in out["history"]] == ["session.started"]  # no intent was synced for any of them
    assert side_file(tmp_path).read_text().splitlines() == ["lookup:1", "ping:1", "status:1"] * 2


# PostgreSQL: a killed writer's lock goes with its connection. (On JetStream a killed writer's
# claim holds for up to 30 s, which the next process would wait out; the guard's journals there
# go through the same journal.api.Store.)
@pytest.fixture(params=("postgres",))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_on_a_server_store_the_guard_journals_live_on_the_same_server(tmp_path: Path, server: Backend) -> None:
    """A JournalConversationStore on PostgreSQL or JetStream: guard_for puts the guard's journals on
    the same server (its URL without journal=), and a tool killed mid-call is asked about there."""
    target = server.target()
    killed, _ = in_child(_life, tmp_path, KillPlan("mid_tool"), 1, None, target)
    assert killed and tool_runs(tmp_path) == {1: 1}
    _, resumed = in_child(_life, tmp_path, KillPlan(None), 1, None, target)
    assert [u["args"] for u in resumed["asked"]] == [{"n": 1}]
    _, done = in_child(_life, tmp_path, KillPlan(None), 1, {"answer": "happened", "result": "deployed:1"}, target)
    assert done["finished"] and tool_runs(tmp_path) == {1: 1}
    assert not (tmp_path / "conv").exists() and not (tmp_path / "conv.tool-guards").exists()
    store = journal.store(server.store_location())
    try:
        assert store.exists(journal_name(CID))
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def test_call_keys_name_the_tool_its_arguments_and_their_place_in_the_conversation() -> None:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    from journal.adapters.pydantic_ai_guard import call_key

    def resp(*calls: tuple[str, Any, str]) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=tid) for name, args, tid in calls])

    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("go")]),
        resp(("deploy", {"n": 1, "env": "prod"}, "a"), ("deploy", '{"env": "prod", "n": 1}', "b")),
        resp(("deploy", {"n": 2}, "c"), ("lookup", {"n": 1, "env": "prod"}, "d")),
        resp(("deploy", {"env": "prod", "n": 1}, "e"), ("x" * 200, {}, "f")),
    ]
    found = {tid: call_key(history, tid) for tid in "abcdef"}
    keys = {tid: k for tid, k in found.items() if k is not None}
    assert set(keys) == set("abcdef")
    assert [keys[t][0].rsplit(":", 1)[1] for t in "abe"] == ["0", "1", "2"]  # the same call, counted in order
    assert len({keys[t][0].rsplit(":", 1)[0] for t in "abe"}) == 1  # key order and JSON text do not matter
    assert keys["b"][1] == {"env": "prod", "n": 1}
    assert keys["c"][0].endswith(":0")
    assert keys["d"][0].startswith("pai:lookup:") and keys["d"][0].endswith(":0")
    assert keys["f"][0].startswith("pai:h") and len(keys["f"][0]) == len("pai:h") + 64
    assert call_key(history, "zz") is None
    # The same history read again (a new process): the same keys.
    assert {tid: call_key(list(history), tid) for tid in "abcdef"} == found


def test_answers_speak_pydantic_ais_vocabulary_and_refuse_a_call_not_asked() -> None:
    req = DeferredToolRequests(approvals=[ToolCallPart("deploy", {"n": 1}, tool_call_id="a"),
                                          ToolCallPart("deploy", {"n": 2}, tool_call_id="b"),
                                          ToolCallPart("deploy", {"n": 3}, tool_call_id="c")])
    out = answers(req, {"a": {"answer": "happened", "result": "R"}, "b": "run_again", "c": "abandon"})
    assert out.calls == {"a": "R"}
    assert set(out.approvals) == {"b", "c"} and isinstance(out.approvals["c"], ToolDenied)
    assert out.approvals["c"].message == ABANDONED_CONTENT
    with pytest.raises(ValueError, match="not a call these requests ask to approve"):
        answers(req, {"zz": "abandon"})


def test_a_second_call_with_the_same_arguments_is_another_call(tmp_path: Path) -> None:
    """The model asks for the same deploy twice in one conversation, on purpose: both run (the guard
    tells them apart by their place), and each is recorded."""
    async def go() -> dict[str, Any]:
        store = JournalConversationStore(tmp_path / "conv")
        guard = guard_for(store)
        try:
            def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
                if _deploy_returns(messages) >= 2:
                    return ModelResponse(parts=[TextPart("finished:2")])
                return ModelResponse(parts=[ToolCallPart("deploy", {"n": 1})])

            agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                                            capabilities=[CrashSafeTools(guard)])

            @agent.tool_plain
            def deploy(n: int) -> str:
                deploy_side_effect(tmp_path, KillPlan(None), n, guarded=True)
                return f"deployed:{n}"

            result = await agent.run("go", conversation=Conversation(conversation_id=CID))
            return {**_summary(result.conversation),
                    "results": [e for e in guard.scope(CID).history() if e["type"] == "tool.result"]}
        finally:
            guard.close()
            await store.close()

    out = asyncio.run(go())
    assert out["finished"] and tool_runs(tmp_path) == {1: 2} and len(out["results"]) == 2


@pytest.mark.parametrize("point", ["mid_tool", "after_result"])
def test_close_open_calls_persists_a_deterministic_closer(tmp_path: Path, point: str) -> None:
    """An app that moves on with a new prompt over a history saved midway: close_open_calls gives
    the open call a return (the recorded result, or the unknown-outcome closer, answering the
    guard "abandon"); saved, it loads the same every time, and the next prompt runs."""
    killed, _ = in_child(lambda: asyncio.run(_saved_midway_then_killed(tmp_path, point)))
    assert killed and tool_runs(tmp_path) == {1: 1}

    async def close() -> dict[str, Any]:
        store = JournalConversationStore(tmp_path / "conv")
        guard = guard_for(store)
        try:
            conv = await store.load(CID)
            assert conv is not None
            again = await store.load(CID)
            assert again is not None
            closed = await close_open_calls(conv, guard)
            twice = await close_open_calls(again, guard)  # closing again (the answer now stored): the same
            assert closed.messages == twice.messages
            await store.save(closed)
            return {"unknown": [u.call_id for u in guard.scope(CID).unknown()],
                    "gate": conversation_gate(guard, CID).decision}
        finally:
            guard.close()
            await store.close()

    _, closed = in_child(lambda: asyncio.run(close()))
    assert closed == {"unknown": [], "gate": "continue"}
    shape = _check_history(tmp_path)
    assert shape["contents"] == ([ABANDONED_CONTENT] if point == "mid_tool" else ["deployed:1"])

    async def next_prompt() -> dict[str, Any]:
        store = JournalConversationStore(tmp_path / "conv")
        guard = guard_for(store)
        try:
            conv = await store.load(CID)
            agent = build(guard, tmp_path, KillPlan(None), 1)
            result = await agent.run("and now?", conversation=conv)  # refused over an open call
            await store.save(result)
            return _summary(result.conversation)
        finally:
            guard.close()
            await store.close()

    _, done = in_child(lambda: asyncio.run(next_prompt()))
    assert done["finished"] and tool_runs(tmp_path) == {1: 1}
