"""An ADK tool with a side effect that survives a crash: never run twice behind your back.

    python examples/adk_crash_safe_tool.py demo /tmp/guard-demo

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the agent starts; its model calls ``deploy``, which appends to
                   DIR/deployed.log, and the process is killed (SIGKILL) inside it
    resume DIR     a new message arrives: the guard does not run ``deploy`` again; the call gets
                   a response saying its outcome is unknown and an adk_request_confirmation
                   carrying the tool, its arguments and the options, and the run waits
    answer DIR A   the app answers that confirmation (A = happened | run_again | abandon) and
                   the run finishes

The model here is scripted (no network): it calls deploy once, then says it is done. The only
lines that make the tool crash-safe are ``guard = guard_for(service)`` and
``plugins=[GuardPlugin(guard)]``.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents.llm_agent import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from journal.adapters.adk import JournalSessionService
from journal.adapters.adk_guard import GuardPlugin, answer_message, guard_for, pending_unknown

APP, USER, SESSION = "release", "ops-team", "release-42"


class ScriptedModel(BaseLlm):
    """Calls deploy(version="v2") until its request holds deploy's response, then reports."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        answered = [p.function_response.response for c in llm_request.contents for p in c.parts or []
                    if p.function_response is not None and p.function_response.name == "deploy"]
        if not answered:
            call = types.FunctionCall(name="deploy", args={"version": "v2"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"done: {answered[-1]}")]))


async def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    service = JournalSessionService(os.path.join(directory, "sessions"))
    guard = guard_for(service)

    def deploy(version: str) -> dict[str, Any]:
        """Deploys a release."""
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {version} (pid {os.getpid()})\n")
        if what == "run":
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the tool returns
        return {"deployed": version}

    agent = LlmAgent(name="deployer", model=ScriptedModel(), tools=[deploy])
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[GuardPlugin(guard)]), session_service=service)
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        if session is None:
            session = await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        if what == "answer":
            given: Any = {"answer": "happened", "result": {"deployed": "v2 (checked by hand)"}} \
                if answer == "happened" else answer
            message = answer_message(pending_unknown(session)[0]["confirmationCallId"], given)
        else:
            message = types.Content(role="user", parts=[types.Part(text="deploy v2" if what == "run" else "continue")])
        said = [p.text async for ev in runner.run_async(user_id=USER, session_id=SESSION, new_message=message)
                for p in ((ev.content.parts or []) if ev.content else []) if p.text]
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        asks = pending_unknown(session) if session is not None else []
        return {"asks": asks, "said": said, "finished": bool(said) and said[-1].startswith("done")}
    finally:
        guard.close()
        await service.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, lambda d, life, a: asyncio.run(step(d, life, a)), "said")
