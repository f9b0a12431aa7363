"""A Pydantic AI tool with a side effect that survives a crash: never run twice behind your back.

    python examples/pydantic_ai_crash_safe_tool.py demo /tmp/guard-demo

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the agent starts; its ``deploy`` tool appends to DIR/deployed.log and the process
                   is killed (SIGKILL) inside it, before it returns (the conversation is saved
                   after a run, so the store holds nothing of this one)
    resume DIR     the app sends the request again; the model calls ``deploy`` again (under a new
                   tool_call_id); the guard does not run it: the run ends with DeferredToolRequests
                   whose metadata carries the tool, its arguments and the options
    answer DIR A   the app answers (A = happened | run_again | abandon) with
                   deferred_tool_results and the run finishes

The only lines that make the tool crash-safe are ``guard = guard_for(store)``,
``capabilities=[CrashSafeTools(guard)]`` and ``DeferredToolRequests`` in ``output_type``.
The model is scripted (``FunctionModel``), so the example needs no network.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from journal.adapters.pydantic_ai import JournalConversationStore
from journal.adapters.pydantic_ai_guard import CrashSafeTools, answers, guard_for

CONVERSATION = "release-42"


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls deploy(version="v2") until it has its return, then says what it got."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == "deploy"]
    if returns:
        return ModelResponse(parts=[TextPart(f"deploy said: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("deploy", {"version": "v2"})])


async def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    store = JournalConversationStore(os.path.join(directory, "conversations"))
    guard = guard_for(store)
    agent = Agent(FunctionModel(scripted_model), output_type=[str, DeferredToolRequests],
                  capabilities=[CrashSafeTools(guard)])

    @agent.tool_plain
    def deploy(version: str) -> str:
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {version} (pid {os.getpid()})\n")
        if what == "run":
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the tool returns
        return f"deployed {version}"

    try:
        conv = await store.load(CONVERSATION)
        if what in ("run", "resume"):
            result = await agent.run("ship v2", conversation=conv or Conversation(conversation_id=CONVERSATION))
        else:
            assert conv is not None and conv.deferred_tool_requests is not None, "nothing was asked"
            requests = conv.deferred_tool_requests
            given: Any = {"answer": "happened", "result": "deployed v2 (checked by hand)"} \
                if answer == "happened" else answer
            results = answers(requests, {c.tool_call_id: given for c in requests.approvals})
            result = await agent.run(conversation=conv, deferred_tool_results=results)
        await store.save(result)
        output = result.output
        asks = [output.metadata[c.tool_call_id] for c in output.approvals] \
            if isinstance(output, DeferredToolRequests) else []
        text = output if isinstance(output, str) else None
        return {"asks": asks, "finished": text is not None, "output": text}
    finally:
        guard.close()
        await store.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, lambda d, life, a: asyncio.run(step(d, life, a)), "output")
