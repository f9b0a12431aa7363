"""A pytest plugin that runs the OpenAI Agents SDK's own session tests against JournalSession.

Loaded with ``-p adapters_openai_agents_plugin`` by tests/test_adapter_openai_agents.py, in a
pytest run inside the SDK's source distribution (fetched at test time, never kept in this
repo). The SDK's modules name ``SQLiteSession`` at module level; before each of their tests
this plugin replaces that name in each module with a factory of the same signature that
returns a ``JournalSession``, so the tests exercise our store through their own assertions.

With JOURNAL_SDK_STORE set to a server store URL with a ``{store}`` placeholder (for example
``postgresql://host/db?schema={store}``), every SQLite database becomes a store of its own on
that server, named JOURNAL_SDK_STORE_PREFIX + a digest of its path (or a fresh name for
":memory:"), so the same tests run on a server backend (tests/test_adapters_on_servers.py).

Their ``async def`` tests are marked ``@pytest.mark.asyncio``; rather than add pytest-asyncio to
this project's test dependencies (and to every pytest run of ours), the plugin runs each one in
a fresh event loop itself (``asyncio.run``, as pytest-asyncio does per function), and takes the
sdist's ``asyncio_*`` settings so that pytest does not warn about them.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from journal.adapters.openai_agents import JournalSession

# The SDK's test modules whose SQLiteSession is substituted, by the last part of their name
# (pytest imports tests/memory/*.py, a folder without __init__.py, under their basename; the
# limit module imports the other as tests.memory.test_session, a second copy).
MODULES = ("test_session", "test_session_limit")
# Server stores emptied after the test that used them, for the next test to reuse: making a
# store on a server (a stream of 3 replicas) costs far more than deleting its few journals.
_FREE_STORES: list[str] = []


@pytest.fixture(autouse=True)
def _journal_session_for_sqlite_session(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    made: list[JournalSession] = []
    stores: dict[str, str] = {}  # db_path (or a fresh key per ":memory:" instance) -> store URL

    def sqlite_session(
        session_id: str,
        db_path: str | os.PathLike[str] = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> JournalSession:
        # SQLite's tables are per file; a store of journals per db_path plays that part: two
        # sessions on one db_path share it, each with its own journal. ":memory:" is a private
        # store per instance, as an in-memory SQLite database is.
        server = os.environ.get("JOURNAL_SDK_STORE")
        path: str | Path
        if server:
            key = uuid.uuid4().hex if str(db_path) == ":memory:" else os.fspath(db_path)
            if key not in stores:
                token = hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
                fresh = server.replace("{store}", os.environ.get("JOURNAL_SDK_STORE_PREFIX", "sdk") + token)
                stores[key] = _FREE_STORES.pop() if _FREE_STORES else fresh
            path = stores[key]
        elif str(db_path) == ":memory:":
            path = tmp_path_factory.mktemp("memory")
        else:
            path = Path(f"{os.fspath(db_path)}.journals")
        session = JournalSession(session_id, path, session_settings=session_settings)
        made.append(session)
        return session

    if request.module.__name__.rpartition(".")[2] not in MODULES:
        raise pytest.UsageError(f"{request.module.__name__} is not one of the SDK modules this plugin substitutes")
    for name, module in list(sys.modules.items()):
        if name.rpartition(".")[2] in MODULES and hasattr(module, "SQLiteSession"):
            monkeypatch.setattr(module, "SQLiteSession", sqlite_session)
    yield
    for session in made:  # a test that forgot close() must not keep its journal locked
        session.close()
    if stores:
        import journal

        for url in stores.values():
            store = journal.store(url)
            for name in store.names():
                store.delete(name)
            _FREE_STORES.append(url)  # empty again: the next test starts from nothing


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("asyncio_mode", "pytest-asyncio's mode; here every async test runs in asyncio.run")
    parser.addini("asyncio_default_fixture_loop_scope", "pytest-asyncio's; unused here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: run this async test in a fresh event loop")
    if config.pluginmanager.has_plugin("asyncio"):
        raise pytest.UsageError("pytest-asyncio is installed: run with -p no:asyncio, this plugin runs async tests")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


def pytest_report_header(config: pytest.Config) -> str:
    return "journal: SQLiteSession -> journal.adapters.openai_agents.JournalSession in " + ", ".join(MODULES)
