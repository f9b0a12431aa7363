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

``JOURNAL_GUARD_OFF=1`` runs the same tests with the guard turned off (the plain function tool): they
fail (the tool runs twice, nothing is surfaced). ``JOURNAL_GUARD_ROUNDS`` sets the random rounds (20).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("agents")

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool
from agents.run_state import RunState
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.testing import function_call as model_call

import journal
from journal.adapters.openai_agents import JournalSession
from journal.adapters.openai_agents_guard import SessionGuard, guard_for, guarded_tool
from journal.api import Store
from journal.session.toolguard import ToolGuard, happened

GUARD_ON = os.environ.get("JOURNAL_GUARD_OFF") != "1"
ROUNDS = int(os.environ.get("JOURNAL_GUARD_ROUNDS", "20"))
POINTS = ("before_intent", "after_intent", "mid_tool", "before_result", "after_result", "after")
SESSION = "ops-1"
MODEL_CALLS_MAX = 64  # scripted model calls one life may make (a life makes at most 2 per version)
RUN_CONFIG = RunConfig(tracing_disabled=True)


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


def _outputs(items: list[Any]) -> list[str]:
    """The versions whose deploy call has an output in ``items`` (the model's view), in order."""
    calls = {i["call_id"]: json.loads(i["arguments"])["version"] for i in items
             if isinstance(i, dict) and i.get("type") == "function_call" and i.get("name") == "deploy"}
    return [calls[i["call_id"]] for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output" and i.get("call_id") in calls]


def build(tmp: Path, plan: Plan, versions: int | list[str], guard: SessionGuard | None,
          together: bool = False) -> Agent[Any]:
    """The agent; its model deploys ``versions`` (v1..vN, or the names given) one call at a time (all in
    one response with ``together``), each while the session holds fewer outputs than its place."""
    side = tmp / "side.log"
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
        if guard is None and plan.point in ("before_intent", "after_intent"):
            plan.reached(plan.point)  # no intent without the guard: the same moment, before the tool
        _line(side, f"deploy:{version}:{os.getpid()}")
        plan.reached("mid_tool")
        if guard is None and plan.point in ("before_result", "after_result"):
            plan.reached(plan.point)
        return f"deployed {version}"

    plain: FunctionTool = function_tool(deploy)
    tool = guarded_tool(guard, plain) if guard is not None else plain
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
    return Agent(name="ops", instructions="deploy", model=model, tools=[tool])


async def _alife(tmp: Path, plan: Plan, inp: Any, versions: int | list[str], answers: list[Any] | None,
                 together: bool) -> dict[str, Any]:
    session = await JournalSession.open(SESSION, tmp / "sessions")
    guard = SessionGuard(ToolGuard(cast(Store, _HookedStore(journal.store(str(tmp / "sessions")), plan))), session) \
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


def _life(tmp: Path, plan: Plan, inp: Any, versions: int | list[str], answers: list[Any] | None = None,
          together: bool = False) -> dict[str, Any]:
    return asyncio.run(_alife(tmp, plan, inp, versions, answers, together))


def in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> tuple[bool, dict[str, Any]]:
    """Run ``fn`` in a forked child; (killed by SIGKILL, what it returned)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            try:
                payload = json.dumps(fn(*args))
            except BaseException as exc:
                payload = json.dumps({"error": repr(exc)})
            os.write(w, payload.encode())
        finally:
            os._exit(0)
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


def _deploys(tmp: Path) -> dict[str, int]:
    side = tmp / "side.log"
    counts: dict[str, int] = {}
    for line in side.read_text().splitlines() if side.exists() else []:
        version = line.split(":")[1]
        counts[version] = counts.get(version, 0) + 1
    return counts


def _loads(tmp: Path) -> tuple[Any, Any, Any]:
    """The session's items, the guard's history and its unknown calls, as a fresh process loads them."""
    async def go() -> tuple[Any, Any, Any]:
        session = await JournalSession.open(SESSION, tmp / "sessions")
        guard = guard_for(session)
        try:
            unknown = [(u.call_id, u.tool, u.args) for u in guard.scope.unknown()]
            return await session.get_items(), guard.scope.history(), unknown
        finally:
            guard.close()
            session.close()

    return asyncio.run(go())


def _check_history(tmp: Path, held: frozenset[str] = frozenset()) -> None:
    """Well-formed (every function call the session stores has an output, but for calls ``held`` for an
    approval in a RunState the app dropped) and the same on every load."""
    first = _loads(tmp)
    assert first == _loads(tmp)
    items = first[0]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(set(calls) - held) == sorted(outputs), items


def _unknown_calls(tmp: Path) -> list[tuple[str, str, Any]]:
    return list(_loads(tmp)[2])


EXPECT_UNKNOWN = {"before_intent": False, "after_intent": True, "mid_tool": True, "before_result": True,
                  "after_result": False, "after": False}


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_point_of_the_tools_life(tmp_path: Path, point: str) -> None:
    killed, _ = in_child(_life, tmp_path, Plan(point), "deploy v1", 1)
    assert killed
    ran_before = _deploys(tmp_path).get("v1", 0)
    _, resumed = in_child(_life, tmp_path, Plan(None), "continue", 1)
    if EXPECT_UNKNOWN[point]:
        assert len(resumed["asks"]) == 1 and resumed["interruptions"] == 1, resumed  # exactly the unknown call
        (u,) = resumed["asks"]
        assert u["kind"] == "journal.tool_outcome_unknown" and u["tool"] == "deploy" and u["args"] == {"version": "v1"}
        assert _unknown_calls(tmp_path) == [(u["callId"], "deploy", u["args"])]
        assert [r["code"] for r in u["reasons"]] == ["TOOL_OUTCOME_UNKNOWN"]
        assert [o["answer"] for o in u["options"]] == ["happened", "run_again", "abandon"]
        assert _deploys(tmp_path).get("v1", 0) == ran_before  # asking ran nothing
        answer: Any = {"answer": "happened", "result": "deployed v1"} if ran_before else "run_again"
        _, done = in_child(_life, tmp_path, Plan(None), None, 1, [answer])
    else:
        assert resumed["asks"] == [] and resumed["interruptions"] == 0 and _unknown_calls(tmp_path) == [], resumed
        done = resumed
    assert done["interruptions"] == 0 and done["final"] == "deployed v1", done  # the run finished
    assert _outputs(done["items"]) == ["v1"]
    assert _deploys(tmp_path) == {"v1": 1}  # at most once; once here, as the answer said
    _check_history(tmp_path)
    # Settled: a later request for the same call is a new call, and runs.
    _, later = in_child(_life, tmp_path, Plan(None), "deploy v1 once more", ["v1", "v1"])
    assert later["asks"] == [] and _outputs(later["items"]) == ["v1", "v1"]
    assert _deploys(tmp_path) == {"v1": 2}
    _check_history(tmp_path)


def test_identical_calls_in_one_turn_are_two_calls(tmp_path: Path) -> None:
    _, out = in_child(_life, tmp_path, Plan(None), "deploy v1 twice", ["v1", "v1"], None, True)
    assert out["asks"] == [] and out["final"] == "deployed v1, v1"
    assert _deploys(tmp_path) == {"v1": 2}
    _check_history(tmp_path)


def test_abandon_runs_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    killed, _ = in_child(_life, tmp_path, Plan("mid_tool"), "deploy v1 and v2", 2)
    assert killed
    _, resumed = in_child(_life, tmp_path, Plan(None), "continue", 2)
    assert [u["args"] for u in resumed["asks"]] == [{"version": "v1"}]
    _, done = in_child(_life, tmp_path, Plan(None), None, 2, ["abandon"])
    assert done["final"] == "deployed v1, v2" and _deploys(tmp_path) == {"v1": 1, "v2": 1}
    outputs = [i["output"] for i in done["items"] if i.get("type") == "function_call_output"]
    assert "was not run" in outputs[0] and outputs[1] == "deployed v2"  # the model is told it was abandoned
    assert _unknown_calls(tmp_path) == []
    _check_history(tmp_path)
    _, again = in_child(_life, tmp_path, Plan(None), "continue", 2)  # answered once: never asked again
    assert again["asks"] == [] and _deploys(tmp_path) == {"v1": 1, "v2": 1}


def _refused(tmp: Path, answers: list[Any]) -> dict[str, Any]:
    try:
        return _life(tmp, Plan(None), None, 1, answers)
    except Exception as exc:  # the SDK may wrap what the tool raised
        return {"refused": f"{exc!r} {exc.__cause__!r}"}


def test_a_saved_approval_resumed_twice_does_not_run_the_tool_twice(tmp_path: Path) -> None:
    """A plain state.approve is "run it again" once: the RunState that holds it, resumed again after the
    run it allowed was killed too, runs nothing; the app is asked again and answers through the guard."""
    killed, _ = in_child(_life, tmp_path, Plan("mid_tool"), "deploy v1", 1)
    assert killed
    _, resumed = in_child(_life, tmp_path, Plan(None), "continue", 1)
    assert [u["args"] for u in resumed["asks"]] == [{"version": "v1"}]
    killed, _ = in_child(_life, tmp_path, Plan("mid_tool"), None, 1, ["approve"])  # runs again, killed again
    assert killed and _deploys(tmp_path) == {"v1": 2}
    _, stale = in_child(_refused, tmp_path, ["approve"])  # the same saved state, approved again
    assert "NotAnsweredError" in stale["refused"] or "was not answered" in stale["refused"], stale
    assert _deploys(tmp_path) == {"v1": 2}
    _, asked = in_child(_life, tmp_path, Plan(None), "continue", 1)
    assert [(u["callId"], u["args"]) for u in asked["asks"]] == [(resumed["asks"][0]["callId"], {"version": "v1"})]
    _, done = in_child(_life, tmp_path, Plan(None), None, 1, ["run_again"])
    assert done["final"] == "deployed v1" and _deploys(tmp_path) == {"v1": 3}  # two answers, two runs again
    # The SDK stores a call held for approval with the interrupted turn; the state that held it was
    # dropped, so it has no output: the SDK leaves such a call out of the model's input, and it never ran.
    (held,) = [i["call_id"] for i in resumed["items"] if i.get("type") == "function_call"]
    _check_history(tmp_path, frozenset({held}))


def test_random_kills(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "0")) + 30)
    versions = 3
    for r in range(ROUNDS):
        tmp = tmp_path / f"r{r}"
        tmp.mkdir()
        point, at = rng.choice(POINTS), rng.randint(1, versions)
        killed, out = in_child(_life, tmp, Plan(point, at), "deploy", versions)
        reruns: dict[str, int] = {}
        answers: list[Any] | None = None
        for _ in range(versions * 3):  # bounded: at most one unknown call per kill
            _, out = in_child(_life, tmp, Plan(None), "continue" if answers is None else None, versions, answers)
            if not out["asks"]:
                break
            (u,) = out["asks"]
            v = u["args"]["version"]
            assert killed and u["tool"] == "deploy"
            assert _unknown_calls(tmp) == [(u["callId"], "deploy", u["args"])]
            answer = rng.choice(["happened", "run_again", "abandon"])
            reruns[v] = reruns.get(v, 0) + (answer == "run_again")
            answers = [{"answer": "happened", "result": f"deployed {v}"} if answer == "happened" else answer]
        assert out["interruptions"] == 0 and out["final"] is not None, (r, point, at, out)
        assert sorted(set(_outputs(out["items"]))) == [f"v{n}" for n in range(1, versions + 1)], (r, point, at)
        for v, count in _deploys(tmp).items():
            assert count <= 1 + reruns.get(v, 0), (r, point, at, v, count, reruns)
        _check_history(tmp)


def test_without_the_guard_a_killed_tool_runs_twice(tmp_path: Path) -> None:
    """The failure the guard exists for (issue 30): the model asks again, the plain tool runs again."""
    def life(plan: Plan, inp: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            session = await JournalSession.open(SESSION, tmp_path / "sessions")
            try:
                result = await Runner.run(build(tmp_path, plan, 1, None), inp, session=session, run_config=RUN_CONFIG)
                return {"final": result.final_output}
            finally:
                session.close()

        return asyncio.run(go())

    killed, _ = in_child(life, Plan("mid_tool"), "deploy v1")
    assert killed
    _, out = in_child(life, Plan(None), "continue")
    assert out["final"] == "deployed v1" and _deploys(tmp_path) == {"v1": 2}


def test_the_gate_and_an_answer_given_directly(tmp_path: Path) -> None:
    """The session's resume gate shows the unknown call; happened() through guard.answer gives the
    model the result as the call's output without running the tool."""
    killed, _ = in_child(_life, tmp_path, Plan("after_intent"), "deploy v1", 1)
    assert killed and _deploys(tmp_path) == {}

    async def go() -> None:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            gate = guard.gate()
            assert gate.paused and gate.codes() == ["TOOL_OUTCOME_UNKNOWN"]
            agent = build(tmp_path, Plan(None), 1, guard)
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
    example = Path(__file__).resolve().parent.parent / "examples" / "openai_agents_crash_safe_tool.py"
    out = subprocess.run([sys.executable, str(example), "demo", str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    assert "run: the process was killed inside deploy" in out
    assert "resume: deploy(" in out and "run_again: run it again" in out
    assert "answer happened: finished=True" in out
    assert "deployed.log has 1 line(s)" in out


def test_a_call_of_this_process_is_never_taken_for_a_repeat(tmp_path: Path) -> None:
    """Two identical calls of one turn are two calls, even when the first has finished (and the session
    has not got it yet, as within a turn) before the second starts: the SDK's tool interface, called
    as the SDK calls it, one call after the other."""
    from agents.tool_context import ToolContext

    async def go() -> list[Any]:
        session = await JournalSession.open(SESSION, tmp_path / "sessions")
        guard = guard_for(session)
        try:
            agent = build(tmp_path, Plan(None), ["v1", "v1"], guard)
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
    def life(plan: Plan, inp: str) -> dict[str, Any]:
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

    killed, _ = in_child(life, Plan("mid_tool"), "deploy v1")
    assert killed
    _, out = in_child(life, Plan(None), "continue")
    assert out["final"] == "deployed v1" and out["interruptions"] == 0 and _deploys(tmp_path) == {"v1": 2}
    assert out["guard"] == ["session.started"]  # no intent, no result: nothing synced for it
