"""bench/bench_remote.py at --quick sizes, in-process: each side of each workload stores what it
claims (every session's events, in order, contiguous). It asserts no speed. Skipped when a server
is unreachable, unless JOURNAL_REQUIRE_SERVICES=1."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.backends import require_services

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    name = "bench_remote_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "bench_remote.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


br = _load()
Q = br.QUICK
EVENTS = br.session_events(Q.sessions, max(Q.per_session, Q.js_per_session))


def _needs(reason: str | None) -> None:
    if reason is not None:
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def nats_cluster() -> Iterator[None]:
    _needs(br.js_reason())
    try:
        yield
    finally:
        br.js_stop()  # the cluster this module's runs started


def _sessions_stored(run: Any, sessions: int, per: int) -> None:
    assert run.events == sessions * per and run.seconds > 0 and len(run.latencies) == sessions * per
    for k in range(sessions):
        got = run.stored[f"s{k}"]
        assert got == {"count": per, "contiguous": True, "same": True}, (k, got)


def test_events_are_agent_events_of_about_200_bytes() -> None:
    import json

    assert all(150 <= len(json.dumps(e)) <= 400 for per in EVENTS for e in per)
    assert len({json.dumps(e) for per in EVENTS for e in per}) == sum(len(per) for per in EVENTS)


@pytest.mark.parametrize("side", ["ours", "theirs"])
def test_postgres_sessions_store_every_event(side: str) -> None:
    _needs(br.pg_reason())
    run = (br.pg_ours if side == "ours" else br.pg_plain)(Q, EVENTS)
    _sessions_stored(run, Q.sessions, Q.per_session)
    if side == "ours":  # the store's journals shared their COMMITs: never more than one per event
        assert 0 < run.measured["our_commits_per_event"] <= 1


@pytest.mark.parametrize("side", ["ours", "theirs"])
@pytest.mark.parametrize("shape", ["sequential", "concurrent"])
def test_langgraph_on_postgres_ends_in_the_right_state(side: str, shape: str) -> None:
    _needs(br.lg_reason())
    if shape == "sequential":
        run = br.lg_sequential(side, Q)
        steps, n, prefix = Q.lg_steps, Q.lg_runs, "run"
    else:
        run = br.lg_concurrent(side, Q)
        steps, n, prefix = Q.lg_thread_steps, Q.lg_threads, "thread"
    assert run.events == steps * n
    threads = run.stored["threads"]
    assert sorted(threads) == sorted(f"{prefix}-{i}" for i in range(n))
    for got in threads.values():
        assert got == {"count": steps, "messages": steps, "last": f"step {steps}: " + "x" * 48}, got


@pytest.mark.parametrize("side", ["ours", "theirs"])
def test_jetstream_sessions_store_every_event(side: str, nats_cluster: None) -> None:
    run = (br.js_ours if side == "ours" else br.js_plain)(Q, EVENTS)
    _sessions_stored(run, Q.sessions, Q.js_per_session)
    if side == "theirs":
        assert run.stored["replicas"] == 3
