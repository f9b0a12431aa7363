"""An OpenAI Agents SDK tool with a side effect that survives a crash: never run twice behind your back.

    python examples/openai_agents_crash_safe_tool.py demo /tmp/guard-demo [happened|run_again|abandon]

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the agent starts; its ``deploy`` tool appends to DIR/deployed.log and the
                   process is killed (SIGKILL) inside it, before it returns. The SDK hands a turn's
                   items to the session at the turn's end, so the session never heard of the call
    resume DIR     ``Runner.run(agent, "continue", session=session)``: the model asks for deploy
                   again (a new call id); the guard does not run it: the run stops with a tool
                   approval interruption, and ``guard.unknown_call(item)`` tells the tool, its
                   arguments and the three answers
    answer DIR A   the app answers (A = happened | run_again | abandon) with ``guard.answer(state,
                   item, A)`` and resumes the run from its saved RunState; it finishes

The model is the SDK's scripted test model (``agents.testing``), so the demo needs no network or key;
with a real model the guard works the same. The only lines that make the tool crash-safe are
``guard = guard_for(session)`` and ``guarded_tool(guard, deploy)``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.run_state import RunState
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from journal.adapters.openai_agents import JournalSession
from journal.adapters.openai_agents_guard import SessionGuard, guard_for, guarded_tool
from journal.session.toolguard import happened

SESSION = "release-42"
MODEL_CALLS_MAX = 8  # scripted model calls one step may make
RUN_CONFIG = RunConfig(tracing_disabled=True)


def build(directory: str, guard: SessionGuard, crash: bool) -> Agent[Any]:
    def respond(call: Any) -> Any:
        """A stand-in for a model: deploy v2, then say what the tool answered."""
        items = call.input if isinstance(call.input, list) else []
        outputs = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            return [assistant_message(f"done: {outputs[-1]}")]
        return [function_call("deploy", {"version": "v2"}, call_id=f"call_{os.getpid()}")]

    @function_tool
    def deploy(version: str) -> str:
        """Deploy a version to production."""
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {version} (pid {os.getpid()})\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the tool returns
        return f"deployed {version}"

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(MODEL_CALLS_MAX)])
    return Agent(name="ops", instructions="Deploy what you are asked to.", model=model,
                 tools=[guarded_tool(guard, deploy, side_effect="external-write")])


async def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    session = await JournalSession.open(SESSION, os.path.join(directory, "sessions"))
    guard = guard_for(session)
    state_file = os.path.join(directory, "run-state.json")
    try:
        agent = build(directory, guard, crash=what == "run")
        if what == "answer":
            state = await RunState.from_string(agent, open(state_file).read())
            for item in state.get_interruptions():
                given: Any = happened("deployed v2 (checked by hand)") if answer == "happened" else answer
                await guard.answer(state, item, given)  # synced before the run goes on
            result = await Runner.run(agent, state, session=session, run_config=RUN_CONFIG)
        else:
            result = await Runner.run(agent, "deploy v2" if what == "run" else "continue", session=session,
                                      run_config=RUN_CONFIG)
        asks = await guard.asks(result.interruptions)
        if result.interruptions:
            with open(state_file, "w") as f:
                f.write(result.to_state().to_string())
        return {"asks": [u.to_payload() for _, u in asks], "finished": not result.interruptions,
                "final": None if result.interruptions else result.final_output}
    finally:
        guard.close()
        session.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, lambda d, life, a: asyncio.run(step(d, life, a)), "final")
