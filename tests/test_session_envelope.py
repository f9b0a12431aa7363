"""Envelope, registry and durability policy: what is stored, what is refused, what level each event got."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
from journal import session as S


def test_seq_is_the_journals_and_is_not_stored(tmp_path: Path) -> None:
    with S.open(tmp_path, create=True, session_id="s1") as s:
        got = s.append("user.message", {"text": "hi"}, turn_id="t1", causation_id=1, correlation_id="k")
        assert got.event.seq == 2
    with journal.open(tmp_path, readonly=True) as j:
        raw = [r.event for r in j.read()]
    assert "seq" not in raw[1] and raw[1]["schemaVersion"] == S.SCHEMA_VERSION and raw[1]["sessionId"] == "s1"
    with S.open(tmp_path) as s:
        events = list(s.read())
    assert [e.seq for e in events] == [1, 2] and events[1].turn_id == "t1" and events[1].causation_id == 1


def test_each_class_gets_its_level_and_the_runtime_sees_it(tmp_path: Path) -> None:
    with S.open(tmp_path, create=True) as s:
        assert s.append("assistant.delta", {"text": "a"}, attempt_id="a1").level == "buffered"
        assert s.append("user.message", {"text": "b"}).level == "flush"
        for boundary in ("model.requested", "goal.updated"):
            got = s.append(boundary)
            assert got.level == "sync" and got.durability_class == "boundary"
        req = s.append("tool.requested", {"tool": "x"}, tool_call_id="c1")
        assert req.level == "sync"
    with S.open(tmp_path, durability_floor="sync") as s:
        assert s.append("assistant.delta", {"text": "a"}, attempt_id="a2").level == "sync"


def test_unknown_required_type_is_refused_and_ignorable_is_skipped(tmp_path: Path) -> None:
    reg = S.Registry()
    reg.register(S.EventType("myrt.cache_hit", S.DurabilityClass.TRANSIENT, ignorable=True))
    reg.register(S.EventType("myrt.sandbox_policy", S.DurabilityClass.BOUNDARY))
    with S.open(tmp_path, create=True, registry=reg) as s:
        s.append("myrt.cache_hit", {"n": 1})
        s.sync()
    with S.open(tmp_path) as s:  # a reader without the runtime's types
        out = s.replay()
        assert out.skipped == 1 and out.replayed == 1
    with S.open(tmp_path, registry=reg) as s:
        s.append("myrt.sandbox_policy", {"mode": "workspace-write"})
    with pytest.raises(S.UnknownEventTypeError, match=r"myrt\.sandbox_policy") as err:
        S.open(tmp_path)
    assert isinstance(err.value, journal.JournalError)


def test_newer_schema_and_foreign_records_are_refused(tmp_path: Path) -> None:
    with S.open(tmp_path / "a", create=True) as s:
        s.journal.append({"schemaVersion": 99, "sessionId": s.session_id, "type": "user.message", "data": {}})
    with pytest.raises(S.NewerSchemaError):
        S.open(tmp_path / "a")
    with journal.open(tmp_path / "b", create=True) as j:
        j.append({"type": "hello"})
    with pytest.raises(S.EnvelopeError):
        S.open(tmp_path / "b")
    journal.open(tmp_path / "empty", create=True).close()
    with pytest.raises(S.NotASessionError, match="empty"):
        S.open(tmp_path / "empty")
    S.open(tmp_path / "mine", create=True, session_id="mine").close()
    with pytest.raises(S.NotASessionError, match="not other"):
        S.open(tmp_path / "mine", session_id="other")


def test_registry_rules() -> None:
    reg = S.Registry()
    with pytest.raises(ValueError, match="cannot be ignorable"):
        reg.register(S.EventType("myrt.tool_begin", S.DurabilityClass.BOUNDARY, S.Role.TOOL_START, ignorable=True))
    with pytest.raises(ValueError, match="dotted"):
        reg.register(S.EventType("NoDots", S.DurabilityClass.ORDINARY))
    with pytest.raises(ValueError, match="different definition"):
        reg.register(S.EventType("tool.started", S.DurabilityClass.ORDINARY))
    assert reg.register(S.EventType("myrt.x", S.DurabilityClass.ORDINARY)) == reg.get("myrt.x")


def test_a_runtime_type_with_a_role_takes_part_in_repair(tmp_path: Path) -> None:
    reg = S.Registry()
    reg.register(S.EventType("myrt.exec_begin", S.DurabilityClass.BOUNDARY, S.Role.TOOL_START))
    with S.open(tmp_path, create=True, registry=reg) as s:
        s.append("myrt.exec_begin", {"tool": "shell"}, tool_call_id="x1")
    with S.open(tmp_path, registry=reg) as s:
        assert s.state.tools["x1"].status == S.TOOL_OUTCOME_UNKNOWN


def test_unregistered_type_cannot_be_appended(tmp_path: Path) -> None:
    with S.open(tmp_path, create=True) as s, pytest.raises(S.EnvelopeError, match="not registered"):
        s.append("nobody.knows")
