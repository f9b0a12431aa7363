"""A pytest plugin that runs Strands Agents' own session tests against journal.adapters.strands.

Loaded with ``-p adapters_strands_plugin`` by tests/test_adapter_strands.py, in a pytest run
inside Strands' source distribution (fetched at test time, never kept in this repo). Strands'
modules name ``FileSessionManager`` (and, in the repository manager's tests, the in-memory
``MockedSessionRepository`` they drive ``RepositorySessionManager`` with) at module level; before
each of their tests this plugin replaces those names in the module with classes of the same
signature built on ``JournalSessionManager`` and ``JournalSessionRepository``, so the tests
exercise our repository through their own assertions.

With JOURNAL_STRANDS_STORE set to a server store URL with a ``{store}`` placeholder, every storage
directory becomes a store of its own on that server (JOURNAL_STRANDS_STORE_PREFIX + a digest of
the directory), so the same tests run on PostgreSQL and JetStream.

Their few ``async def`` tests are marked ``@pytest.mark.asyncio``; the plugin runs each one in a
fresh event loop itself (``asyncio.run``), rather than add pytest-asyncio to this project.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from journal.adapters.strands import JournalSessionManager, JournalSessionRepository

# The Strands test modules whose names are substituted, by the last part of their name.
MODULES = ("test_file_session_manager", "test_repository_session_manager")
_MADE: list[JournalSessionRepository] = []
_STORES: dict[str, str] = {}  # storage directory -> server store URL (server runs only)
# Server stores emptied after the test that used them, for the next test to reuse: making a
# store on a server (a stream of 3 replicas) costs far more than deleting its few journals.
_FREE: list[str] = []


def _where(storage_dir: str) -> str:
    """The repository's path: the directory, or its store on the server under test."""
    server = os.environ.get("JOURNAL_STRANDS_STORE")
    if not server:
        return storage_dir
    if storage_dir not in _STORES:
        token = hashlib.blake2b(f"{os.getpid()}:{storage_dir}".encode(), digest_size=6).hexdigest()
        fresh = server.replace("{store}", os.environ.get("JOURNAL_STRANDS_STORE_PREFIX", "st") + token)
        _STORES[storage_dir] = _FREE.pop() if _FREE else fresh
    return _STORES[storage_dir]


class FileSessionManagerOnJournals(JournalSessionManager):
    """``FileSessionManager(session_id, storage_dir=None)`` as Strands' tests make it."""

    def __init__(self, session_id: str, storage_dir: str | None = None, **kwargs: Any) -> None:
        storage = storage_dir or tempfile.mkdtemp(prefix="strands-journal-")
        super().__init__(session_id, _where(storage), **kwargs)
        _MADE.append(self)


class MockedRepositoryOnJournals(JournalSessionRepository):
    """``MockedSessionRepository()``: a repository of its own, in a fresh directory."""

    def __init__(self) -> None:
        super().__init__(_where(tempfile.mkdtemp(prefix="strands-journal-repo-")))
        _MADE.append(self)


@pytest.fixture(autouse=True)
def _journals_for_strands_stores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.module.__name__.rpartition(".")[2] not in MODULES:
        raise pytest.UsageError(f"{request.module.__name__} is not one of the Strands modules this plugin substitutes")
    for name, module in list(sys.modules.items()):
        if name.rpartition(".")[2] in MODULES:
            if hasattr(module, "FileSessionManager"):
                monkeypatch.setattr(module, "FileSessionManager", FileSessionManagerOnJournals)
            if hasattr(module, "MockedSessionRepository"):
                monkeypatch.setattr(module, "MockedSessionRepository", MockedRepositoryOnJournals)
    yield
    while _MADE:  # a test's repositories must not keep their journals open (and locked)
        _MADE.pop().close()
    if _STORES:
        import journal

        for url in _STORES.values():
            store = journal.store(url)
            for name in store.names():
                store.delete(name)
            _FREE.append(url)  # empty again: the next test starts from nothing
        _STORES.clear()


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
    return ("journal: FileSessionManager -> JournalSessionManager, MockedSessionRepository -> "
            "JournalSessionRepository in " + ", ".join(MODULES))
