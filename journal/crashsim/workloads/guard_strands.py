"""Crash workload of the Strands guard: a power loss over a real Strands run's guarded tool.

    guard-strands   a strands.Agent (a scripted Model) on a JournalSessionManager with
                    guard_for(manager) as its hooks; resumed with agent() (no new prompt), unknown
                    calls asked by Strands' interrupt and answered "happened"

``register()`` registers it when Strands imports (as ``guard_frameworks.register()`` does for the
other frameworks, and for the same reasons neither importing this module nor the package does).
The harness, the checks and the file layout are ``guard_frameworks``'s (its module doc): the
session's journals live in the manager's store on the harness's file system, the guard's journal
is ``/j``, and each tool execution writes ``/world/<n>``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from journal.crashsim.workloads.core import WORKLOADS
from journal.crashsim.workloads.guard_frameworks import (
    SECOND_LIFE_ROUNDS_MAX,
    Driver,
    SecondLife,
    _clock,
    _importable,
    _workload,
)
from journal.fs import FileSystem

ST_SESSION, ST_AGENT = "s-crash", "ops"
ST_PATH = "/strands"
ST_DEPLOYS_DEFAULT = 3  # deploys asked for when the session lost the request saying how many
NAME = "guard-strands"


def _st_model(life: str) -> Any:
    from strands.models import Model

    counter = iter(range(1_000_000))

    class ScriptedDeploys(Model):
        """Deploys v1..vN (N from the first request, "deploy N"), one toolUse per model call, with
        toolUseIds new in every life, as a real model's are."""

        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> Any:
            return {}

        async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None,
                                    **kwargs: Any) -> AsyncGenerator[Any, None]:
            raise NotImplementedError("no structured output")
            yield  # pragma: no cover

        async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None,
                         **kwargs: Any) -> AsyncGenerator[Any, None]:
            texts = [b["text"] for m in messages if m["role"] == "user" for b in m["content"] if "text" in b]
            total = next((int(t.split()[-1]) for t in texts if t.startswith("deploy ")), ST_DEPLOYS_DEFAULT)
            uses = {b["toolUse"]["toolUseId"] for m in messages for b in m["content"] if "toolUse" in b}
            done = sum(1 for m in messages for b in m["content"]
                       if "toolResult" in b and b["toolResult"]["toolUseId"] in uses)
            yield {"messageStart": {"role": "assistant"}}
            if done < total:
                use = {"name": "deploy", "toolUseId": f"call_{life}_{next(counter)}"}
                yield {"contentBlockStart": {"start": {"toolUse": use}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"n": done + 1})}}}}
                yield {"contentBlockStop": {}}
                yield {"messageStop": {"stopReason": "tool_use"}}
                return
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": f"deployed {done}"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}

    return ScriptedDeploys()


def _st_agent(fs: FileSystem, effect: Callable[[int], None], life: str) -> tuple[Any, Any, Any]:
    from strands import Agent, tool
    from strands.agent.conversation_manager.null_conversation_manager import NullConversationManager

    from journal.adapters.strands import JournalSessionManager
    from journal.adapters.strands_guard import guard_for

    @tool
    def deploy(n: int) -> str:
        """Deploy unit n."""
        effect(int(n))
        return f"deployed {n}"

    manager = JournalSessionManager(ST_SESSION, ST_PATH, fs=fs)
    try:
        hooks = guard_for(manager)
        hooks.guard.clock = _clock
    except BaseException:
        manager.close()
        raise
    agent = Agent(agent_id=ST_AGENT, model=_st_model(life), tools=[deploy], session_manager=manager, hooks=[hooks],
                  conversation_manager=NullConversationManager(), callback_handler=None)
    return agent, manager, hooks


def _st_first(ctx: Any, calls: int, effect: Callable[[int], None]) -> None:
    agent, manager, hooks = _st_agent(ctx.fs, effect, "first")
    try:
        agent(f"deploy {calls}")
    finally:
        hooks.close()
        manager.close()


def _st_load(fs: FileSystem) -> Any:
    from journal.adapters.strands import JournalSessionRepository

    with JournalSessionRepository(ST_PATH, fs=fs) as repo:
        if repo.read_agent(ST_SESSION, ST_AGENT) is None:
            return []
        return [m.to_dict() for m in repo.list_messages(ST_SESSION, ST_AGENT)]


def _st_second(fs: FileSystem) -> SecondLife:
    from journal.adapters.strands_guard import INTERRUPT_PREFIX

    ran: list[int] = []
    surfaced: list[int] = []
    agent, manager, hooks = _st_agent(fs, ran.append, "second")
    try:
        # A power loss may cut the session before the request: the agent then starts it again.
        result = agent() if agent.messages else agent(f"deploy {ST_DEPLOYS_DEFAULT}")
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            asks = [i for i in result.interrupts or [] if i.name.startswith(INTERRUPT_PREFIX)]
            if not asks:
                return SecondLife(ran, surfaced, result.stop_reason == "end_turn")
            responses = []
            for i in asks:
                n = int(i.reason["args"]["n"])
                surfaced.append(n)
                responses.append({"interruptResponse": {"interruptId": i.id,
                                                        "response": {"answer": "happened", "result": f"deployed {n}"}}})
            result = agent(responses)
        return SecondLife(ran, surfaced, False)
    finally:
        hooks.close()
        manager.close()


def _st_scope() -> str:
    from journal.adapters.strands_guard import scope_id

    return scope_id(ST_SESSION, ST_AGENT)


STRANDS = Driver(NAME, _st_scope, _st_first, _st_load, _st_second, lambda args: int(args["n"]))


def available() -> bool:
    return _importable("strands")


def register() -> tuple[str, ...]:
    """Register the workload if Strands is installed (again: a no-op); its name, or none."""
    if not available():
        return ()
    if NAME not in WORKLOADS:
        _workload(STRANDS)
    return (NAME,)

