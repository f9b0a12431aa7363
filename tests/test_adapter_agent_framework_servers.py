"""journal.adapters.agent_framework on the server backends (PostgreSQL, JetStream): the same
history provider and checkpoint storage given a server URL, through a round of operations, a
re-sent save and a reopen. A backend whose server is not reachable is skipped, unless
JOURNAL_REQUIRE_SERVICES=1 (CI)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra is not installed "
                                              "(pip install -e '.[agent-framework]')")

from agent_framework import Message, WorkflowCheckpoint, WorkflowCheckpointException

from journal.adapters.agent_framework import JournalCheckpointStorage, JournalHistoryProvider
from tests.backends import Backend, made_or_skipped


@pytest.fixture(params=("postgres", "nats"))
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_history_and_checkpoints_round_and_reopen(server: Backend) -> None:
    store = server.store_location()
    msgs = [Message(role="user", contents=["hi"], message_id="u1"),
            Message(role="assistant", contents=["hello"], message_id="a1")]

    async def first() -> None:
        async with JournalHistoryProvider(store) as p:
            await p.save_messages("s/1", msgs)
            await p.save_messages("s/1", msgs)  # re-sent: stored once
        async with JournalCheckpointStorage(store) as c:
            for n in range(3):
                await c.save(WorkflowCheckpoint(workflow_name="w", graph_signature_hash="g", checkpoint_id=f"c{n}",
                                                timestamp=f"2026-01-01T00:00:0{n}+00:00", state={"n": {n}}))
            assert await c.delete("c0") is True

    async def second() -> None:
        async with JournalHistoryProvider(store) as p:
            assert [(m.message_id, m.text) for m in await p.get_messages("s/1")] == [("u1", "hi"), ("a1", "hello")]
            assert await p.get_messages("other") == []
        async with JournalCheckpointStorage(store) as c:
            assert await c.list_checkpoint_ids(workflow_name="w") == ["c1", "c2"]
            latest = await c.get_latest(workflow_name="w")
            assert latest is not None and latest.checkpoint_id == "c2" and latest.state == {"n": {2}}
            with pytest.raises(WorkflowCheckpointException):
                await c.load("c0")

    asyncio.run(first())
    asyncio.run(second())


def test_the_guard_on_a_server_asks_about_a_call_left_unknown(server: Backend) -> None:
    """The guard's journal lives in the history's store on the server: a call started with no result
    (what a crash inside the tool leaves) stops the next run with the question, and runs nothing."""
    from agent_framework import Agent, tool

    from journal.adapters.agent_framework_guard import ToolOutcomeUnknownError, guard_for
    from tests.af_scripted import ScriptedClient, function_call, results_of, text

    store = server.store_location()
    ran: list[str] = []

    @tool
    def deploy(version: str) -> str:
        """Deploy."""
        ran.append(version)
        return f"deployed {version}"

    def respond(messages: list[Message]) -> list[Message]:
        if results_of(messages, "deploy"):
            return [text("done")]
        return [function_call("deploy", {"version": "v1"}, f"call-{len(ran)}-{len(messages)}")]

    async def main() -> None:
        async with JournalHistoryProvider(store) as history:
            guard = guard_for(history)
            # What a process killed inside deploy left: the intent synced, no result.
            d = guard.scope("s").before("call-dead", "deploy", {"version": "v1"})
            assert d.run
            guard.close()
        async with JournalHistoryProvider(store) as history:
            guard = guard_for(history)
            agent = Agent(client=ScriptedClient(respond), tools=[deploy], context_providers=[history],
                          middleware=guard.middleware())
            with pytest.raises(ToolOutcomeUnknownError) as err:
                await agent.run("continue", session=agent.create_session(session_id="s"))
            assert err.value.unknown.call_id == "call-dead" and ran == []
            guard.answer("s", "call-dead", "abandon")
            result = await agent.run("continue", session=agent.create_session(session_id="s"))
            assert result.text == "done" and ran == []
            guard.close()

    asyncio.run(main())
