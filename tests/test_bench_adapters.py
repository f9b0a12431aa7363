"""bench/bench_adapters.py at --quick sizes, in-process: every workload stores what it claims, on
our adapter and on the peer (at synchronous=FULL and as shipped). It asserts no speed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    name = "bench_adapters_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "bench_adapters.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


ba = _load()
Q = ba.QUICK
STORES = ["ours", ba.FULL, ba.SHIPPED]


def _needs_peer(store: str, module: str) -> None:
    if store != "ours":
        pytest.importorskip(module)


def _needs_adk(store: str) -> None:
    pytest.importorskip("google.adk")
    pytest.importorskip("aiosqlite")
    if store == "ours" and not ba.adk_ours_available():
        pytest.skip("journal/adapters/adk.py is not there yet")


def _common(run: Any, store: str, ops: int) -> None:
    assert run.ops == ops and run.seconds > 0 and run.bytes > 0
    if store == "ours":
        assert run.durability == ba.OURS_DURABILITY
    else:  # read back from the peer's connection; FULL is what this benchmark sets
        assert "synchronous=" in run.durability
        if store == ba.FULL:
            assert "synchronous=FULL (set by this benchmark" in run.durability
            assert "syncs every commit" in run.durability
        else:
            assert "as shipped" in run.durability


@pytest.mark.parametrize("store", STORES)
def test_langgraph_sync_run_ends_in_the_right_state(store: str, tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    _needs_peer(store, "langgraph.checkpoint.sqlite")
    run = ba.lg_sync(store, str(tmp_path), Q.steps, Q.runs)
    _common(run, store, Q.steps * Q.runs)
    threads = run.stored["threads"]
    assert sorted(threads) == [f"run-{i}" for i in range(Q.runs)]
    for got in threads.values():  # the saver's latest checkpoint of every thread, read back
        assert got == {"count": Q.steps, "messages": Q.steps, "last": f"step {Q.steps}: " + "x" * 48}
    ba.check_langgraph(run, Q.runs, Q.steps)


@pytest.mark.parametrize("store", STORES)
def test_langgraph_async_runs_end_in_the_right_state(store: str, tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    _needs_peer(store, "langgraph.checkpoint.sqlite")
    _needs_peer(store, "aiosqlite")
    run = ba.lg_async(store, str(tmp_path), Q.async_steps, Q.async_threads)
    _common(run, store, Q.async_steps * Q.async_threads)
    threads = run.stored["threads"]
    assert len(threads) == Q.async_threads
    assert all(v["count"] == Q.async_steps and v["messages"] == Q.async_steps for v in threads.values())
    ba.check_langgraph(run, Q.async_threads, Q.async_steps)


@pytest.mark.parametrize("store", STORES)
def test_agents_sdk_sequential_session_holds_every_item(store: str, tmp_path: Path) -> None:
    pytest.importorskip("agents")
    run = ba.sdk_sequential(store, str(tmp_path), Q.items)
    _common(run, store, Q.items)
    items = run.stored["items"]
    assert list(items) == ["s0"] and len(items["s0"]) == Q.items
    assert items["s0"] == [ba._sdk_item(0, i)["content"] for i in range(Q.items)]
    ba.check_sdk(run, 1, Q.items)


@pytest.mark.parametrize("store", STORES)
def test_agents_sdk_concurrent_sessions_hold_their_items(store: str, tmp_path: Path) -> None:
    pytest.importorskip("agents")
    run = ba.sdk_concurrent(store, str(tmp_path), Q.sessions, Q.session_items)
    _common(run, store, Q.sessions * Q.session_items)
    items = run.stored["items"]
    assert len(items) == Q.sessions and all(len(v) == Q.session_items for v in items.values())
    ba.check_sdk(run, Q.sessions, Q.session_items)


@pytest.mark.parametrize("store", STORES)
def test_adk_sequential_session_holds_every_event(store: str, tmp_path: Path) -> None:
    _needs_adk(store)
    run = ba.adk_sequential(store, str(tmp_path), Q.events)
    _common(run, store, 1 + Q.events)
    events = run.stored["events"]
    assert list(events) == ["s0"] and len(events["s0"]) == Q.events
    ba.check_adk(run, 1, Q.events)


@pytest.mark.parametrize("store", STORES)
def test_adk_concurrent_sessions_hold_their_events(store: str, tmp_path: Path) -> None:
    _needs_adk(store)
    run = ba.adk_concurrent(store, str(tmp_path), Q.sessions, Q.session_events)
    _common(run, store, Q.sessions * (1 + Q.session_events))
    events = run.stored["events"]
    assert len(events) == Q.sessions and all(len(v) == Q.session_events for v in events.values())
    ba.check_adk(run, Q.sessions, Q.session_events)


TOOL_STORES = [*STORES, "ours, no guard"]
TOOL_RUNNERS: dict[str, tuple[str, Any, list[str]]] = {  # framework -> (function, scope names, modules)
    "langgraph": ("lg_tools", [f"tools-{i}" for i in range(Q.tool_runs)], ["langgraph", "langgraph.checkpoint.sqlite"]),
    "agents": ("sdk_tools", [f"s{k}" for k in range(Q.tool_runs)], ["agents"]),
    "adk": ("adk_tools", [f"t{k}" for k in range(Q.tool_runs)], ["google.adk", "aiosqlite"]),
    "pydantic_ai": ("pai_tools", [f"c{k}" for k in range(Q.tool_runs)], ["pydantic_ai"]),
}
TOOL_CASES = [(fw, st) for fw in TOOL_RUNNERS for st in TOOL_STORES
              if not (fw == "pydantic_ai" and st == ba.FULL)]  # its only store is in memory: no synchronous


@pytest.mark.parametrize(("framework", "store"), TOOL_CASES)
def test_tool_calls_run_each_call_exactly_once(framework: str, store: str, tmp_path: Path) -> None:
    """Each framework's tool-calling run: every call's side effect ran once, in order, the store holds
    every result, and the guard (on in "ours" only) synced every call's intent to its journal."""
    fn, scopes, modules = TOOL_RUNNERS[framework]
    for module in modules:
        pytest.importorskip(module)
    if framework == "adk" and not ba.adk_ours_available():
        pytest.skip("journal/adapters/adk.py is not there yet")
    run = getattr(ba, fn)(store, str(tmp_path), Q.tool_calls, Q.tool_runs)
    in_memory = framework == "pydantic_ai" and store == ba.SHIPPED
    assert run.ops == Q.tool_calls * Q.tool_runs and run.seconds > 0 and (run.bytes == 0) == in_memory
    assert run.stored["effects"] == {s: list(range(1, Q.tool_calls + 1)) for s in scopes}
    assert run.stored["results"] == {s: [ba._tool_result(n) for n in range(1, Q.tool_calls + 1)] for s in scopes}
    if store == "ours":
        assert run.durability == ba.GUARD_DURABILITY
        assert run.stored["guarded"] == {s: Q.tool_calls for s in scopes}
    else:
        assert "guarded" not in run.stored
        if store == ba.UNGUARDED:
            assert run.durability == ba.OURS_DURABILITY
        elif in_memory:
            assert run.durability == ba.MEMORY_DURABILITY
        else:
            _common(run, store, Q.tool_calls * Q.tool_runs)
    ba.check_tools(run, scopes, Q.tool_calls)


def test_tool_check_catches_a_call_run_twice_or_unguarded() -> None:
    """check_tools fails a run whose tool ran twice, skipped a call, lost a result or claims a guard
    whose journal does not hold every intent."""
    want = [1, 2]
    results = {"a": [ba._tool_result(1), ba._tool_result(2)]}

    def run(effects: list[int], got: list[str], guarded: dict[str, int] | None = None) -> Any:
        stored: dict[str, Any] = {"effects": {"a": effects}, "results": {"a": got}}
        if guarded is not None:
            stored["guarded"] = guarded
        return ba.Run(2, 1.0, 1, ba.GUARD_DURABILITY if guarded is not None else ba.OURS_DURABILITY, stored)

    ba.check_tools(run(want, results["a"]), ["a"], 2)
    ba.check_tools(run(want, results["a"], {"a": 2}), ["a"], 2)
    for bad in (run([1, 2, 2], results["a"]), run([1], results["a"]), run(want, results["a"][:1]),
                run(want, results["a"], {"a": 1})):
        with pytest.raises(AssertionError):
            ba.check_tools(bad, ["a"], 2)


def test_checks_catch_a_wrong_store() -> None:
    """The run's own checks fail on a store that lost an item or a step (so the bench cannot lie)."""
    short = ba.Run(1, 1.0, 1, "", {"items": {"s0": [ba._sdk_item(0, 0)["content"]]}})
    with pytest.raises(AssertionError):
        ba.check_sdk(short, 1, 2)
    stale = ba.Run(1, 1.0, 1, "", {"threads": {"run-0": {"count": 1, "messages": 1, "last": "step 1: "}}})
    with pytest.raises(AssertionError):
        ba.check_langgraph(stale, 1, 2)


def test_quick_main_writes_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "adapters.md"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert ba.main(["--quick", "--rounds", "1", "--dir", str(scratch), "--out", str(out)]) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    assert "| workload | ours/s | theirs/s | ratio median | ratio min-max | bytes ours | bytes theirs " in text
    for w in ba.workloads(Q):  # every workload is in the table or listed as skipped
        assert w.name in text
    assert list(scratch.iterdir()) == []  # the stores' files are removed
