"""A Microsoft Agent Framework tool with a side effect that survives a crash: never run twice behind your back.

    python examples/agent_framework_crash_safe_tool.py demo /tmp/guard-demo [happened|run_again|abandon]

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the agent starts; its ``deploy`` tool appends to DIR/deployed.log and the
                   process is killed (SIGKILL) inside it, before it returns. The framework hands a
                   run's messages to the history provider at the run's end, so the history never
                   heard of the call
    resume DIR     ``agent.run("continue", session=session)``: the model asks for deploy again (a
                   new call id); the guard does not run it: the run stops with
                   ``ToolOutcomeUnknownError``, whose ``unknown`` tells the tool, its arguments and
                   the three answers
    answer DIR A   the app records the answer (A = happened | run_again | abandon) with
                   ``guard.answer(session_id, call_id, A)`` and runs the agent again; it finishes

The chat client is a scripted stand-in (the framework's own function-invocation layer, no network
or key); with a real model the guard works the same. The only lines that make the tool
crash-safe are ``guard = guard_for(history)`` and ``middleware=guard.middleware()``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import Agent, BaseChatClient, ChatResponse, Content, Message, tool
from agent_framework._tools import FunctionInvocationLayer

from journal.adapters.agent_framework import JournalHistoryProvider
from journal.adapters.agent_framework_guard import AgentGuard, ToolOutcomeUnknownError, guard_for
from journal.session.toolguard import happened

SESSION = "release-42"


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """A stand-in for a model: deploy v2, then say what the tool answered."""

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse[Any]:
        results = [c.result for m in messages for c in m.contents if c.type == "function_result"]
        if results:
            return ChatResponse(messages=[Message(role="assistant", contents=[f"done: {results[-1]}"])])
        call = Content.from_function_call(call_id=f"call_{os.getpid()}", name="deploy",
                                          arguments=json.dumps({"version": "v2"}))
        return ChatResponse(messages=[Message(role="assistant", contents=[call])])

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any],
                            **kwargs: Any) -> Any:
        return self._answer(messages)


def build(directory: str, history: JournalHistoryProvider, guard: AgentGuard, crash: bool) -> Agent[Any]:
    @tool
    def deploy(version: str) -> str:
        """Deploy a version to production."""
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {version} (pid {os.getpid()})\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the tool returns
        return f"deployed {version}"

    return Agent(client=ScriptedClient(), instructions="Deploy what you are asked to.", tools=[deploy],
                 context_providers=[history], middleware=guard.middleware())


async def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    history = JournalHistoryProvider(os.path.join(directory, "store"))
    guard = guard_for(history)  # its journal lives beside the history's, in the same store
    try:
        if what == "answer":
            for u in guard.unknown(SESSION):
                given: Any = happened("deployed v2 (checked by hand)") if answer == "happened" else answer
                guard.answer(SESSION, u.call_id, given)  # synced before the run goes on
        agent = build(directory, history, guard, crash=what == "run")
        try:
            result = await agent.run("deploy v2" if what == "run" else "continue",
                                     session=agent.create_session(session_id=SESSION))
        except ToolOutcomeUnknownError as err:  # the call may have run before the crash: ask, do not run it
            return {"asks": [err.unknown.to_payload()], "finished": False, "final": None}
        return {"asks": [], "finished": True, "final": result.text}
    finally:
        guard.close()
        history.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, lambda d, life, a: asyncio.run(step(d, life, a)), "final")
