"""journal.adapters.strands and its guard, unchanged, on the server backends (PostgreSQL,
JetStream): Strands' own session tests from its sdist (the plugin of tests/test_adapter_strands.py
in store mode), the differential against FileSessionManager, and a real agent whose guarded tool
writes its intent to the server. A backend whose server is not reachable is skipped, unless
JOURNAL_REQUIRE_SERVICES=1 (CI)."""

from __future__ import annotations

import pathlib
import random
import uuid
from collections.abc import Iterator

import pytest

from tests.backends import Backend, made_or_skipped
from tests.conftest import report_count
from tests.guard_harness import missing_framework_reason

pytest.importorskip("strands", reason=missing_framework_reason("strands", "strands"))

from strands import Agent, tool
from strands.session.file_session_manager import FileSessionManager

from journal.adapters.strands import JournalSessionManager, JournalSessionRepository
from journal.adapters.strands_guard import guard_for
from tests.strands_app import ScriptedModel, text_reply, tool_reply
from tests.test_adapter_strands import (
    SDK_PASSED,
    _answer,
    _apply,
    _random_ops,
    run_strands_suite,
    strands_sdist,  # noqa: F401 - the fixture
)

SERVERS = ("postgres", "nats")
DIFFERENTIAL_OPS = 150  # each is a few round trips to the server


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_strands_session_suite_on_a_server(server: Backend, strands_sdist: pathlib.Path,  # noqa: F811
                                           tmp_path: pathlib.Path) -> None:
    prefix = f"st{uuid.uuid4().hex[:6]}"
    try:
        passed, counts, out = run_strands_suite(strands_sdist, tmp_path / "strands.xml", {
            "JOURNAL_STRANDS_STORE": server.store_template(), "JOURNAL_STRANDS_STORE_PREFIX": prefix})
    finally:
        server.drop_stores(prefix)
    report_count(f"strands session tests on {server.name}", f"{passed} passed")
    assert not out, out
    assert passed == SDK_PASSED, counts


def test_differential_on_a_server(server: Backend, tmp_path: pathlib.Path) -> None:
    prefix = f"sd{uuid.uuid4().hex[:6]}"
    url = server.store_template().replace("{store}", prefix)
    file = FileSessionManager("zz-made-by-the-constructor", storage_dir=str(tmp_path / "files"))
    ours = JournalSessionRepository(url)
    try:
        for i, op in enumerate(_random_ops(random.Random(7), DIFFERENTIAL_OPS)):
            if op[0] == "reopen":
                ours.close()
                ours = JournalSessionRepository(url)
                continue
            if op[0] == "retry":
                for repo in (file, ours):
                    _answer(lambda r=repo, o=op: r.create_message(o[1], o[2], o[3]))
            assert _apply(ours, op) == _apply(file, op), (i, op)
    finally:
        ours.close()
        server.drop_stores(prefix)


def test_a_guarded_agent_on_a_server(server: Backend) -> None:
    prefix = f"sg{uuid.uuid4().hex[:6]}"
    url = server.store_template().replace("{store}", prefix)
    ran: list[str] = []

    @tool
    def deploy(version: str) -> str:
        """Deploy a version."""
        ran.append(version)
        return f"deployed {version}"

    try:
        manager = JournalSessionManager("ops", url)
        hooks = guard_for(manager)
        replies = iter([tool_reply(("c1", "deploy", {"version": "v1"})), text_reply("done")])
        agent = Agent(agent_id="a", model=ScriptedModel(lambda _m: next(replies)), tools=[deploy],
                      session_manager=manager, hooks=[hooks], callback_handler=None)
        agent("deploy v1")
        assert ran == ["v1"]
        names = manager.store.names()
        assert any(n.startswith("guard.") for n in names) and "ops" in names
        scope = hooks.scope(agent)
        assert [e["type"] for e in scope.history()][-3:] == ["tool.requested", "tool.started", "tool.result"]
        hooks.close()
        manager.close()
        again = JournalSessionManager("ops", url)
        assert [m.message["role"] for m in again.list_messages("ops", "a")] == ["user", "assistant", "user",
                                                                                 "assistant"]
        again.close()
    finally:
        server.drop_stores(prefix)
