"""The crash-safe tool guard's core (journal/session/toolguard.py): decisions, answers, reloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.session.artifacts import ArtifactStore
from journal.session.toolguard import (
    ABANDON,
    RUN_AGAIN,
    AnswerConflictError,
    BadAnswerError,
    CallRunningError,
    NotUnknownError,
    ToolGuard,
    Verdict,
    happened,
    journal_name,
)


def _guard(tmp_path: Path, **kw: Any) -> ToolGuard:
    return ToolGuard(journal.store(str(tmp_path / "store")), **kw)


def _crash_mid_call(tmp_path: Path, call_id: str = "c1", args: Any = None) -> None:
    """A process that synced the intent and died while the tool ran (the journal is closed without a result)."""
    g = _guard(tmp_path)
    d = g.scope("t1").before(call_id, "deploy", args if args is not None else {"env": "prod"})
    assert d.verdict is Verdict.RUN
    g.close()  # no after(): what a SIGKILL mid-tool leaves (the intent is durable, no result)


def test_run_then_done_without_running_again(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    d = s.before("c1", "deploy", {"env": "prod"})
    assert d.verdict is Verdict.RUN and d.run and d.attempt_id == "c1"
    s.after("c1", {"ok": 1})
    assert s.before("c1", "deploy", {"env": "prod"}).verdict is Verdict.DONE
    g.close()
    g = _guard(tmp_path)
    d = g.scope("t1").before("c1", "deploy", {"env": "prod"})
    assert d.verdict is Verdict.DONE and d.result == {"ok": 1}
    assert g.scope("t1").unknown() == []
    assert not g.scope("t1").gate().paused
    g.close()


def test_intent_costs_one_sync_and_result_none(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    calls: list[str] = []
    real = s.journal.append_many

    def spy(events: Any, durability: str = "sync", **kw: Any) -> Any:
        calls.append(durability)
        return real(events, durability=durability, **kw)

    s.journal.append_many = spy  # type: ignore[method-assign,assignment]
    s.before("c1", "deploy", {})
    s.after("c1", "x")
    assert calls == ["sync", "flush"]  # one group-committed batch for requested+started, the result flushed
    g.close()


def test_crash_mid_call_is_unknown_with_args_reasons_options(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path, args={"env": "prod", "n": 3})
    g = _guard(tmp_path)
    s = g.scope("t1")
    d = s.before("c1", "deploy", {"env": "prod", "n": 3})
    assert d.verdict is Verdict.UNKNOWN and not d.run
    assert d.unknown is not None
    (u,) = s.unknown()
    assert u == d.unknown
    assert u.call_id == "c1" and u.tool == "deploy" and u.args == {"env": "prod", "n": 3}
    assert [r.code for r in u.reasons] == ["TOOL_OUTCOME_UNKNOWN"]
    assert u.reasons[0].options  # the gate's own advice
    assert [a for a, _ in u.options] == ["happened", "run_again", "abandon"]
    payload = u.to_payload()
    assert payload["tool"] == "deploy" and payload["args"] == {"env": "prod", "n": 3}
    assert s.gate().paused and "TOOL_OUTCOME_UNKNOWN" in s.gate().codes()
    # Asking again without an answer asks again: never runs on its own.
    assert s.before("c1", "deploy", {}).verdict is Verdict.UNKNOWN
    g.close()


def test_answer_happened_is_persisted_and_final(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    g = _guard(tmp_path)
    s = g.scope("t1")
    s.answer("c1", {"answer": "happened", "result": {"deployed": "v2"}})
    assert s.unknown() == [] and not s.gate().paused
    with pytest.raises(AnswerConflictError):
        s.answer("c1", ABANDON)
    s.answer("c1", happened({"deployed": "v2"}))  # the same answer again is a no-op
    g.close()
    for _ in range(2):  # loading twice gives the same answer
        g = _guard(tmp_path)
        d = g.scope("t1").before("c1", "deploy", {})
        assert d.verdict is Verdict.DONE and d.result == {"deployed": "v2"}
        g.close()


def test_answer_run_again_runs_a_new_attempt(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    g = _guard(tmp_path)
    s = g.scope("t1")
    s.answer("c1", "run_again")
    d = s.before("c1", "deploy", {})
    assert d.verdict is Verdict.RUN_AGAIN and d.run and d.attempt_id == "c1~2"
    s.after("c1", "second")
    g.close()
    g = _guard(tmp_path)
    d = g.scope("t1").before("c1", "deploy", {})
    assert d.verdict is Verdict.DONE and d.result == "second"
    g.close()


def test_run_again_that_crashes_asks_again(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    g = _guard(tmp_path)
    g.scope("t1").answer("c1", RUN_AGAIN)
    assert g.scope("t1").before("c1", "deploy", {}).attempt_id == "c1~2"
    g.close()
    g = _guard(tmp_path)
    d = g.scope("t1").before("c1", "deploy", {})
    assert d.verdict is Verdict.UNKNOWN and d.unknown is not None and d.unknown.attempt_id == "c1~2"
    g.close()


def test_answer_abandon(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    g = _guard(tmp_path)
    g.scope("t1").answer("c1", {"answer": "abandon"})
    g.close()
    g = _guard(tmp_path)
    assert g.scope("t1").before("c1", "deploy", {}).verdict is Verdict.ABANDONED
    g.close()


def test_bad_answers_are_refused(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    for bad in ("yes", {"answer": "happened!"}, {"answer": "abandon", "result": 1}, 3):
        with pytest.raises(BadAnswerError):
            s.answer("c1", bad)  # type: ignore[arg-type]
    with pytest.raises(NotUnknownError):
        s.answer("c1", ABANDON)
    s.before("c2", "deploy", {})
    s.after("c2", 1)
    with pytest.raises(NotUnknownError):
        s.answer("c2", ABANDON)
    g.close()


def test_error_result_may_run_again(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    s.before("c1", "deploy", {})
    s.after("c1", error=RuntimeError("boom"))
    d = s.before("c1", "deploy", {})
    assert d.verdict is Verdict.RUN and d.attempt_id == "c1~2"
    s.after("c1", "ok")
    assert s.before("c1", "deploy", {}).result == "ok"
    g.close()


def test_call_ids_that_could_name_an_attempt_are_refused(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    for bad in ("c1~2", "", "x" * 200):
        with pytest.raises(ValueError, match="call_id"):
            g.scope("t1").before(bad, "deploy", {})
    g.close()


def test_running_twice_in_process_is_refused(tmp_path: Path) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    s.before("c1", "deploy", {})
    with pytest.raises(CallRunningError):
        s.before("c1", "deploy", {})
    g.close()


@pytest.mark.parametrize(("side_effect", "idempotency"), [("read", "unsafe"), ("none", "unsafe"),
                                                          ("external-write", "safe")])
def test_free_or_idempotent_tools_write_nothing_and_rerun(tmp_path: Path, side_effect: str, idempotency: str) -> None:
    g = _guard(tmp_path)
    s = g.scope("t1")
    before = s.journal.last_seq
    d = s.before("c1", "read_file", {}, side_effect=side_effect, idempotency=idempotency)
    assert d.verdict is Verdict.RUN and d.attempt_id is None
    s.after("c1", "x")
    assert s.journal.last_seq == before
    assert s.before("c1", "read_file", {}, side_effect=side_effect, idempotency=idempotency).verdict is Verdict.RUN
    g.close()


def test_scopes_are_separate_journals_that_cannot_collide(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    g = _guard(tmp_path)
    assert g.scope("t2").before("c1", "deploy", {}).verdict is Verdict.RUN
    names = g.store.names()
    assert names == sorted([journal_name("t1"), journal_name("t2")])
    assert all("." in n for n in names)  # no adapter's own journal name holds a "."
    g.close()


def test_large_result_goes_to_the_artifact_store(tmp_path: Path) -> None:
    arts = ArtifactStore(str(tmp_path / "artifacts"))
    g = _guard(tmp_path, artifacts=arts)
    s = g.scope("t1")
    big = "x" * (200 * 1024)
    s.before("c1", "dump", {})
    s.after("c1", big)
    assert all(len(str(e)) < 10_000 for e in s.history())
    g.close()
    g = _guard(tmp_path, artifacts=arts)
    assert g.scope("t1").before("c1", "dump", {}).result == big
    g.close()


def test_history_is_the_same_on_every_load(tmp_path: Path) -> None:
    _crash_mid_call(tmp_path)
    seen = []
    for _ in range(3):
        g = _guard(tmp_path)
        events = g.scope("t1").history()
        seen.append([(e["type"], e.get("toolCallId"), e.get("data", {}).get("status")) for e in events])
        g.close()
    assert seen[0] == seen[1] == seen[2]
    assert ("tool.result", "c1", "TOOL_OUTCOME_UNKNOWN") in seen[0]


def test_guard_on_a_path(tmp_path: Path) -> None:
    with ToolGuard(journal.store(os.fspath(tmp_path / "p"))) as g:
        assert g.scope("x").before("c", "t", 1).verdict is Verdict.RUN


def test_open_scopes_are_bounded_and_a_closed_one_reopens_from_its_journal(tmp_path: Path) -> None:
    """Each scope is an open journal (a descriptor and a writer's lock): a guard serving many
    threads kept every one open for its life. Beyond scopes_open_max the least recently used
    idle scope is closed, and opened again from its journal with what it knew; a scope with a
    call running, or handed out within SCOPE_IDLE_CLOSE_S, is never closed under its caller."""
    from journal.session import toolguard

    now = [0.0]
    g = _guard(tmp_path, scopes_open_max=2, monotonic=lambda: now[0])
    first = g.scope("t0")
    first.before("c1", "deploy", {"n": 0})
    first.after("c1", {"ok": 0})
    running = g.scope("t1")
    assert running.before("c1", "deploy", {"n": 1}).verdict is Verdict.RUN  # no result yet: busy
    now[0] += toolguard.SCOPE_IDLE_CLOSE_S / 2
    g.scope("t2")
    assert g.open_scopes() == 3  # t0 was handed out too recently to close
    now[0] += toolguard.SCOPE_IDLE_CLOSE_S
    for i in range(3, 8):
        g.scope(f"t{i}")
        now[0] += toolguard.SCOPE_IDLE_CLOSE_S
    assert g.open_scopes() == 2  # the limit: t1, whose call is running, and the latest
    with pytest.raises(journal.JournalError):
        first.before("c2", "deploy", {})  # closed: a caller that kept it past the limit is refused
    again = g.scope("t0")
    assert again is not first
    d = again.before("c1", "deploy", {"n": 0})
    assert d.verdict is Verdict.DONE and d.result == {"ok": 0}
    running.after("c1", {"ok": 1})  # t1 was kept open under its running call
    assert g.scope("t1").before("c1", "deploy", {"n": 1}).verdict is Verdict.DONE
    g.close()
    assert g.open_scopes() == 0


def test_guard_for_takes_the_adapters_store_and_refuses_another_saver(tmp_path: Path) -> None:
    """guard_for puts a guard's journals in the adapter's own store (its public ``store``), and
    refuses, with what to do instead, a saver or service that is not the adapter's."""
    pytest.importorskip("langgraph")
    pytest.importorskip("google.adk")
    from google.adk.sessions import InMemorySessionService
    from langgraph.checkpoint.memory import InMemorySaver

    from journal.adapters import adk_guard, langgraph_guard
    from journal.adapters.adk import JournalSessionService
    from journal.adapters.langgraph import JournalSaver

    saver = JournalSaver(str(tmp_path / "lg"))
    service = JournalSessionService(str(tmp_path / "adk"))
    for guard, store in ((langgraph_guard.guard_for(saver), saver.store),
                         (adk_guard.guard_for(service), service.store)):
        assert guard.store is store
        guard.scope("t").before("c1", "deploy", {})
        assert store.exists(journal_name("t"))
        guard.close()
    with pytest.raises(TypeError, match="ToolGuard"):
        langgraph_guard.guard_for(InMemorySaver())
    with pytest.raises(TypeError, match="ToolGuard"):
        adk_guard.guard_for(InMemorySessionService())  # type: ignore[no-untyped-call]
    saver.close()
