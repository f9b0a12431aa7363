"""A pytest plugin that runs langgraph-checkpoint's own store tests against JournalStore.

Loaded with ``-p adapters_langgraph_store_plugin`` by tests/test_adapter_langgraph_store_sdist.py
in a pytest run inside the package's source distribution (downloaded at test time, never kept
in this repo). Its tests/test_store.py names ``InMemoryStore`` at module level (its
``MockAsyncBatchedStore`` wraps one too); before each test this plugin replaces that name with a
subclass of ``JournalStore`` taking the same keyword arguments (``index=...``), each instance a
journal of its own: in a fresh directory, or, with JOURNAL_LGSTORE_STORE set to a server store
URL, a journal of its own name in that store (tests/test_adapters_on_servers.py's way of running
a framework's tests on PostgreSQL and JetStream).

The module's ``async def`` tests run in a fresh event loop each (``asyncio.run``), and its
``mocker`` fixture (pytest-mock's ``spy`` and ``stub``, all it uses) is given here with
``unittest.mock`` (and its ``MockerFixture`` annotation by a module made here when pytest-mock is
not installed), so neither pytest-asyncio nor pytest-mock is a test dependency of ours.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import os
import sys
import types
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest

from journal.adapters.langgraph_store import JournalStore

MODULE = "test_store"
_names = itertools.count()


class _Mocker:
    """pytest-mock's ``spy`` and ``stub``, undone at the end of the test."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def stub(self, name: str | None = None) -> mock.MagicMock:
        return mock.MagicMock(name=name)

    def spy(self, owner: Any, name: str) -> mock.MagicMock:
        original = getattr(owner, name)
        had_own = name in vars(owner)
        saved = vars(owner).get(name)
        record = mock.MagicMock(name=f"{getattr(owner, '__name__', owner)}.{name}")
        wrapper: Any
        if inspect.iscoroutinefunction(original):
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                record(*args, **kwargs)
                return await original(*args, **kwargs)
        else:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                record(*args, **kwargs)
                return original(*args, **kwargs)
        setattr(owner, name, wrapper)
        self._undo.append(lambda: setattr(owner, name, saved) if had_own else delattr(owner, name))
        return record

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


# The module imports pytest_mock for its MockerFixture annotation only: without the package, that
# name is this plugin's mocker class, in a module made here.
try:
    importlib.import_module("pytest_mock")
except ImportError:
    _shim = types.ModuleType("pytest_mock")
    _shim.MockerFixture = _Mocker  # type: ignore[attr-defined]
    sys.modules["pytest_mock"] = _shim


@pytest.fixture
def mocker() -> Iterator[_Mocker]:
    m = _Mocker()
    yield m
    m.undo()


@pytest.fixture(autouse=True)
def _journal_store_for_in_memory_store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    made: list[JournalStore] = []
    server = os.environ.get("JOURNAL_LGSTORE_STORE")

    class InMemoryStore(JournalStore):  # the name the module's tests and error messages use
        def __init__(self, **kwargs: Any) -> None:
            if server:
                super().__init__(server, name=f"t{os.getpid()}-{next(_names)}-{uuid.uuid4().hex[:6]}", **kwargs)
            else:
                super().__init__(tmp_path_factory.mktemp("store"), **kwargs)
            made.append(self)

    if request.module.__name__.rpartition(".")[2] != MODULE:
        raise pytest.UsageError(f"{request.module.__name__} is not the module this plugin substitutes")
    for name, module in list(sys.modules.items()):
        if name.rpartition(".")[2] == MODULE and hasattr(module, "InMemoryStore"):
            monkeypatch.setattr(module, "InMemoryStore", InMemoryStore)
    yield
    used = sum(1 for store in made if store.last_seq > 0)  # stores whose journal a batch opened
    for store in made:  # a test never closes its store; its journal lock goes here
        store.close()
    tally = os.environ.get("JOURNAL_LGSTORE_TALLY")
    if tally and used:
        with open(tally, "a") as f:
            f.write(f"{request.node.nodeid}\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("asyncio_mode", "pytest-asyncio's mode; here every async test runs in asyncio.run")
    parser.addini("asyncio_default_fixture_loop_scope", "pytest-asyncio's; unused here")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "asyncio: run this async test in a fresh event loop")
    for plugin in ("asyncio", "pytest_mock"):
        if config.pluginmanager.has_plugin(plugin):
            raise pytest.UsageError(f"{plugin} is installed: run with -p no:{plugin}, this plugin stands in for it")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


def pytest_report_header(config: pytest.Config) -> str:
    return f"journal: InMemoryStore -> a journal.adapters.langgraph_store.JournalStore subclass in {MODULE}"
