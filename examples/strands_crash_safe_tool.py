"""A Strands tool with a side effect that survives a crash: never run twice behind your back.

    python examples/strands_crash_safe_tool.py demo /tmp/guard-demo

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the agent starts; its ``deploy`` tool appends to DIR/deployed.log and the process
                   is killed (SIGKILL) inside it, before it returns (the session holds the model's
                   toolUse and no result; the guard's journal holds the call's synced intent)
    resume DIR     a new process resumes the agent with ``agent()``: Strands runs the pending
                   toolUse again, and the guard does not run it: the agent stops with an interrupt
                   whose reason carries the tool, its input and the options
    answer DIR A   the app answers the interrupt (A = happened | run_again | abandon) and the run
                   finishes

The only lines that make the tool crash-safe are ``guard = guard_for(manager)`` and
``hooks=[guard]``. The model is scripted, so the example needs no network.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncGenerator
from typing import Any

from strands import Agent, tool
from strands.models import Model

from journal.adapters.strands import JournalSessionManager
from journal.adapters.strands_guard import INTERRUPT_PREFIX, guard_for

SESSION = "release-42"


class ScriptedModel(Model):
    """Calls deploy(version="v2") until the conversation holds its result, then says what it got."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None,
                                **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None,
                     **kwargs: Any) -> AsyncGenerator[Any, None]:
        results = [b["toolResult"] for m in messages for b in m["content"] if "toolResult" in b]
        yield {"messageStart": {"role": "assistant"}}
        if results:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": f"deploy said: {results[-1]['content'][0]['text']}"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        yield {"contentBlockStart": {"start": {"toolUse": {"name": "deploy", "toolUseId": "tooluse_1"}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"version": "v2"})}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {version} (pid {os.getpid()})\n")
        if what == "run":
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the tool returns
        return f"deployed {version}"

    manager = JournalSessionManager(SESSION, os.path.join(directory, "sessions"))
    guard = guard_for(manager)
    agent = Agent(agent_id="ops", model=ScriptedModel(), tools=[deploy], session_manager=manager, hooks=[guard],
                  callback_handler=None)
    ask_file = os.path.join(directory, "ask.json")
    try:
        if what == "run":
            result = agent("ship v2")
        elif what == "resume":
            result = agent()  # no new prompt: Strands runs the pending toolUse again
        else:
            with open(ask_file) as f:
                interrupt_id = json.load(f)["interruptId"]
            given: Any = {"answer": "happened", "result": "deployed v2 (checked by hand)"} \
                if answer == "happened" else answer
            result = agent([{"interruptResponse": {"interruptId": interrupt_id, "response": given}}])
        asks = [i for i in result.interrupts or [] if i.name.startswith(INTERRUPT_PREFIX)]
        if asks:
            with open(ask_file, "w") as f:
                json.dump({"interruptId": asks[0].id}, f)
        text = None if asks else "".join(b.get("text", "") for b in result.message["content"])
        return {"asks": [i.reason for i in asks], "finished": text is not None, "output": text}
    finally:
        guard.close()
        manager.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, step, "output")
