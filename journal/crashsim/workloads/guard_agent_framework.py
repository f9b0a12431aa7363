"""Crash workload of the Agent Framework tool guard: a power loss over a real agent run's guarded tool.

``register()`` registers ``guard-agent-framework`` when the framework imports (and nothing
otherwise), the way journal/crashsim/workloads/guard_frameworks.py registers the other
frameworks' guards, with the same machinery (``Driver``): an ``Agent`` with a
``JournalHistoryProvider`` and ``guard_for(history).middleware()``, driven by a scripted chat
client (the framework's own function-invocation layer, no network) that calls ``deploy(n)`` for
n = 1..N (N from the request "deploy N" the history holds, 3 when it holds none: the history is
saved at the run's end, so a crash mid-run leaves none) under call ids new in every life. The
guard's journal is the harness's ``/j``; the history journals are beside it on the same recorded
file system, so every crash state cuts both at once.

The second life sends "continue"; every run stopped by ``ToolOutcomeUnknownError`` is answered
"happened" through ``guard.answer`` and run again. What each crash image is checked for is
guard_frameworks' ``check_image``: the stored histories load the same twice, the guard's verdicts
match its records, and no call runs again without an answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable
from typing import Any

from journal.crashsim.workloads.core import WORKLOADS, Ctx
from journal.crashsim.workloads.guard_frameworks import Driver, SecondLife, _clock, _workload
from journal.fs import FileSystem

NAME = "guard-agent-framework"
AF_SESSION = "af-crash"
AF_PATH = "/agent-framework"
AF_DEPLOYS_DEFAULT = 3  # deploys asked for when the history lost the request saying how many
SECOND_LIFE_ROUNDS_MAX = 8  # runs of the second life (one unknown call is answered per run)


def _agent(history: Any, guard: Any, effect: Callable[[int], None], life: str) -> Any:
    from agent_framework import Agent, BaseChatClient, ChatResponse, Content, Message, tool
    from agent_framework._tools import FunctionInvocationLayer

    counter = iter(range(1_000_000))

    def respond(messages: list[Any]) -> list[Any]:
        asked = [m.text for m in messages if m.role == "user"]
        total = next((int(t.split()[-1]) for t in asked if t.startswith("deploy ")), AF_DEPLOYS_DEFAULT)
        calls = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
        done = sum(1 for m in messages for c in m.contents if c.type == "function_result" and c.call_id in calls)
        if done < total:
            call = Content.from_function_call(call_id=f"call_{life}_{next(counter)}", name="deploy",
                                              arguments=json.dumps({"n": done + 1}))
            return [Message(role="assistant", contents=[call])]
        return [Message(role="assistant", contents=[f"deployed {done}"])]

    class Scripted(FunctionInvocationLayer[Any], BaseChatClient[Any]):
        async def _answer(self, messages: Any) -> Any:
            return ChatResponse(messages=respond(list(messages)))

        def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
            return self._answer(messages)

    @tool
    def deploy(n: int) -> str:
        """Deploys release n."""
        effect(n)
        return f"deployed {n}"

    return Agent(client=Scripted(), tools=[deploy], context_providers=[history], middleware=guard.middleware())


async def _first_async(calls: int, effect: Callable[[int], None]) -> None:
    from journal.adapters.agent_framework import JournalHistoryProvider
    from journal.adapters.agent_framework_guard import guard_for

    history = JournalHistoryProvider(AF_PATH)
    guard = guard_for(history, clock=_clock)
    try:
        agent = _agent(history, guard, effect, "first")
        await agent.run(f"deploy {calls}", session=agent.create_session(session_id=AF_SESSION))
    finally:
        guard.close()
        history.close()


def _first(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    asyncio.run(_first_async(calls, effect))


async def _load_async() -> Any:
    from journal.adapters.agent_framework import JournalHistoryProvider

    history = JournalHistoryProvider(AF_PATH)
    try:
        return [m.to_dict() for m in await history.get_messages(AF_SESSION)]
    finally:
        history.close()


def _load(fs: FileSystem) -> Any:
    return asyncio.run(_load_async())


async def _second_async() -> SecondLife:
    from journal.adapters.agent_framework import JournalHistoryProvider
    from journal.adapters.agent_framework_guard import ToolOutcomeUnknownError, guard_for

    history = JournalHistoryProvider(AF_PATH)
    guard = guard_for(history, clock=_clock)
    ran: list[int] = []
    surfaced: list[int] = []
    try:
        agent = _agent(history, guard, ran.append, "second")
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            try:
                await agent.run("continue", session=agent.create_session(session_id=AF_SESSION))
            except ToolOutcomeUnknownError as err:
                n = int(err.unknown.args["n"])
                surfaced.append(n)
                guard.answer(AF_SESSION, err.unknown.call_id, {"answer": "happened", "result": f"deployed {n}"})
                continue
            return SecondLife(ran, surfaced, True)
        return SecondLife(ran, surfaced, False)
    finally:
        guard.close()
        history.close()


def _second(fs: FileSystem) -> SecondLife:
    return asyncio.run(_second_async())


AGENT_FRAMEWORK = Driver(NAME, lambda: AF_SESSION, _first, _load, _second, lambda args: int(args["n"]))


def available() -> bool:
    try:
        return importlib.util.find_spec("agent_framework") is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
        return False


def register() -> tuple[str, ...]:
    """Register the workload when the framework is installed (again: a no-op); its name, or ()."""
    if not available():
        return ()
    if NAME not in WORKLOADS:
        _workload(AGENT_FRAMEWORK)
    return (NAME,)
