"""The framework adapters, unchanged, on the server backends (PostgreSQL, JetStream).

The adapters keep their journals in a ``journal.api.Store``; given a server URL instead of a
directory they run on the server. Here the frameworks' own suites run there: LangGraph's
conformance suite (58 base and 23 extended checks) and a real StateGraph with an interrupt,
resumed by a new saver; the OpenAI Agents SDK's session tests from its sdist (the same plugin
as tests/test_adapter_openai_agents.py, in store mode); and ADK's and Pydantic AI's services
through a round of their operations and a reopen. A backend whose server is not reachable is
skipped, unless JOURNAL_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.backends import Backend, made_or_skipped
from tests.conftest import report_count

SERVERS = ("postgres", "nats")


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_langgraph_conformance_suite(server: Backend, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("langgraph.checkpoint.conformance")
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    from journal.adapters.langgraph import JournalSaver

    prefix = f"lg{uuid.uuid4().hex[:6]}"
    count = iter(range(1_000_000))

    @checkpointer_test(name="JournalSaver")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        saver = JournalSaver(server.store_template().replace("{store}", f"{prefix}{next(count)}"))
        try:
            yield saver
        finally:
            saver.close()

    try:
        report = asyncio.run(validate(factory))
    finally:
        server.drop_stores(prefix)
    counts = {name: (r["tests_passed"], r["tests_failed"]) for name, r in report.to_dict()["results"].items()}
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    base = sum(counts[c][0] for c in ("put", "put_writes", "get_tuple", "list", "delete_thread"))
    extended = sum(counts[c][0] for c in ("delete_for_runs", "copy_thread", "prune"))
    assert (base, extended) == (58, 23), counts
    report_count(f"LangGraph conformance on {server.name} (base, extended)", f"{base}, {extended}")


def test_langgraph_state_graph_interrupt_and_resume(server: Backend, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("langgraph")
    from langgraph.types import Command

    from journal.adapters.langgraph import JournalSaver
    from tests.child_langgraph import build_graph, expected_log

    store = server.store_location()
    cfg: Any = {"configurable": {"thread_id": "t1"}}
    exec_path = str(tmp_path / "exec")
    with JournalSaver(store) as saver:
        graph = build_graph(saver, exec_path, loops=3, ask_at=2)
        graph.invoke({}, cfg, durability="sync")
        assert graph.get_state(cfg).next == ("join",)  # waiting at the interrupt
    with JournalSaver(store) as saver:  # another worker picks the thread up
        graph = build_graph(saver, exec_path, loops=3, ask_at=2)
        done = graph.invoke(Command(resume="yes"), cfg, durability="sync")
        assert done["log"] == expected_log(3) and done["answer"] == "yes"
        counts = pathlib.Path(exec_path).read_text().split()
        assert sorted(set(counts)) == sorted(set(expected_log(3)))
        assert all(counts.count(label) == 1 for label in expected_log(3) if not label.startswith("join:2"))


def test_openai_agents_sdk_session_suite(server: Backend, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("agents")
    from tests.test_adapter_openai_agents import LEFT_OUT, PLUGIN, SDK_MODULES, sdk_sdist

    root = sdk_sdist.__wrapped__()  # type: ignore[attr-defined]  # the session fixture's function
    prefix = f"sdk{uuid.uuid4().hex[:6]}"
    report = tmp_path / "sdk.xml"
    cmd = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q", f"--junitxml={report}",
           *SDK_MODULES]
    for nodeid in LEFT_OUT:
        cmd += ["--deselect", f"tests/memory/{nodeid}"]
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parent), "JOURNAL_SDK_STORE": server.store_template(),
           "JOURNAL_SDK_STORE_PREFIX": prefix}
    try:
        got = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    finally:
        server.drop_stores(prefix)
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    report_count(f"openai-agents sdk session tests on {server.name}", f"{passed} passed")
    assert got.returncode == 0, got.stdout[-5000:] + got.stderr[-3000:]
    assert passed == 53, counts


def test_adk_session_service_round_and_reopen(server: Backend) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    from journal.adapters.adk import JournalSessionService

    store = server.store_location()

    def event(author: str, text: str, t: float, delta: dict[str, Any]) -> Event:
        return Event(author=author, invocation_id="i1", timestamp=t, actions=EventActions(state_delta=delta),
                     content=types.Content(role="user", parts=[types.Part(text=text)]))

    async def first() -> None:
        async with JournalSessionService(store) as service:
            s = await service.create_session(app_name="app", user_id="u", session_id="s1",
                                             state={"k": 1, "app:shared": "a", "user:pref": "p", "temp:t": 1})
            for i in range(5):
                await service.append_event(s, event("user", f"hi {i}", 10.0 + i, {"n": i, "app:count": i}))

    async def second() -> None:
        async with JournalSessionService(store) as service:
            s = await service.get_session(app_name="app", user_id="u", session_id="s1")
            assert s is not None and len(s.events) == 5
            assert s.state["n"] == 4 and s.state["app:count"] == 4 and s.state["user:pref"] == "p"
            assert "temp:t" not in s.state
            other = await service.create_session(app_name="app", user_id="u", session_id="s2")
            assert other.state["app:count"] == 4  # app state shared across sessions
            listed = await service.list_sessions(app_name="app", user_id="u")
            assert sorted(x.id for x in listed.sessions) == ["s1", "s2"]
            await service.delete_session(app_name="app", user_id="u", session_id="s2")
            assert await service.get_session(app_name="app", user_id="u", session_id="s2") is None

    asyncio.run(first())
    asyncio.run(second())


def test_pydantic_ai_conversation_store_round_and_reopen(server: Backend) -> None:
    pytest.importorskip("pydantic_ai")
    from tests.child_pydantic_ai import server_round

    target = server.target()
    asyncio.run(server_round(target, reopen=False))
    asyncio.run(server_round(target, reopen=True))
