"""One test per row of the recovery table (seed 004, 14.4): the action happens, the forbidden one does not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import session as S
from journal.session.envelope import Event
from journal.session.registry import Registry


def seg_bytes(path: Path) -> dict[str, bytes]:
    return {n: (path / n).read_bytes() for n in sorted(os.listdir(path)) if n.endswith(".seg")}


def start(path: Path, **kw: Any) -> S.Session:
    s = S.open(path, create=True, session_id="s-test", workspace={"path": "/repo", "fingerprint": "w1"}, **kw)
    s.append("user.message", {"text": "fix the login bug"})
    s.append("turn.started", turn_id="t1")
    s.append("step.started", turn_id="t1", step_id="st1")
    return s


def edit_request(s: S.Session, call: str = "c1", **kw: Any) -> S.Appended:
    data = {"tool": "edit_file", "args": {"path": "src/auth.py"}, "sideEffect": "workspace-write",
            "idempotency": "unsafe"}
    return s.append("tool.requested", data, turn_id="t1", step_id="st1", tool_call_id=call, **kw)


def types(path: Path) -> list[tuple[str, bool, dict[str, Any]]]:
    with journal.open(path, readonly=True) as j:
        return [(r.event["type"], r.synthetic, r.event["data"]) for r in j.read()]


def test_delta_only_attempt_is_interrupted_and_never_glued_to_the_next(tmp_path: Path) -> None:
    s = start(tmp_path)
    for text in ("Let me ", "look at "):
        s.append("assistant.delta", {"text": text}, turn_id="t1", step_id="st1", attempt_id="a1")
    s.sync()  # the deltas reached the disk; the complete message never did
    s.close()
    with S.open(tmp_path) as s:
        closers = s.repair_report.closers if s.repair_report else []
        assert [c.type for c in closers][:1] == ["attempt.interrupted"]
        assert closers[0].attempt_id == "a1" and closers[0].data["deltas"] == 2 and closers[0].synthetic
        assert s.state.attempts["a1"].status == "interrupted"
        s.append("turn.started", turn_id="t2")
        s.append("assistant.message", {"text": "The bug is in auth.py."}, turn_id="t2", attempt_id="a2")
        msgs = [m["content"] for m in s.replay().state.messages() if m["role"] == "assistant"]
    assert msgs == ["The bug is in auth.py."]  # forbidden: "Let me look at The bug is..."
    assert not any("Let me" in m for m in msgs)


def test_requested_not_started_gets_tool_not_started_and_never_pretends_success(tmp_path: Path) -> None:
    s = start(tmp_path)
    edit_request(s)
    s.close()
    with S.open(tmp_path) as s:
        call = s.state.tools["c1"]
        assert call.status == S.TOOL_NOT_STARTED and call.result_synthetic
        gate = s.resume_gate(S.ResumeChecks(authorized=True))
        assert "TOOL_NOT_STARTED" in gate.codes() and not gate.paused
        assert any("reschedule" in o for o in gate.options())
        with pytest.raises(S.ProtocolError):
            s.append("tool.started", turn_id="t1", tool_call_id="c1")
        # rescheduling is a new call
        s.append("turn.started", turn_id="t2")
        edit_request(s, "c1-retry")
        assert s.append("tool.started", tool_call_id="c1-retry").committed
    kinds = types(tmp_path)
    assert not any(t == "tool.result" and d.get("status") == "ok" for t, _, d in kinds)
    assert [t for t, syn, _ in kinds if syn] == ["tool.result", "step.ended", "turn.ended"]


def test_started_without_result_is_outcome_unknown_and_not_retried(tmp_path: Path) -> None:
    s = start(tmp_path)
    edit_request(s)
    s.append("tool.started", turn_id="t1", step_id="st1", tool_call_id="c1")
    s.close()
    with S.open(tmp_path) as s:
        assert s.state.tools["c1"].status == S.TOOL_OUTCOME_UNKNOWN
        gate = s.resume_gate(S.ResumeChecks(authorized=True))
        assert gate.paused and "TOOL_OUTCOME_UNKNOWN" in gate.codes()
        assert any("do not retry" in o for o in gate.options())
        with pytest.raises(S.ProtocolError, match="TOOL_OUTCOME_UNKNOWN"):
            s.append("tool.started", tool_call_id="c1")  # forbidden: blind retry
        with pytest.raises(S.ProtocolError):
            s.append("tool.result", {"status": "ok"}, tool_call_id="c1")
        s.append("tool.reconciled", {"outcome": "applied"}, tool_call_id="c1")
        gate = s.resume_gate(S.ResumeChecks(authorized=True))
        assert "TOOL_OUTCOME_UNKNOWN" not in gate.codes() and not gate.paused
    assert sum(1 for t, _, _ in types(tmp_path) if t == "tool.started") == 1


def test_result_in_log_is_read_back_not_executed_again(tmp_path: Path) -> None:
    s = start(tmp_path)
    edit_request(s)
    s.append("tool.started", turn_id="t1", step_id="st1", tool_call_id="c1")
    s.append("tool.result", {"status": "ok", "output": "patched"}, turn_id="t1", step_id="st1", tool_call_id="c1")
    s.close()  # the UI never heard about the result
    with S.open(tmp_path) as s:
        call = s.state.tools["c1"]
        assert call.status == "ok" and call.output == "patched" and not call.result_synthetic
        assert {"role": "tool", "toolCallId": "c1", "content": "ok: patched"} in s.state.messages()
        with pytest.raises(S.ProtocolError, match="already has a result"):
            s.append("tool.started", tool_call_id="c1")
        assert [c.type for c in (s.repair_report.closers if s.repair_report else [])] == ["step.ended", "turn.ended"]


def test_pending_approval_expires_by_default_and_is_never_granted(tmp_path: Path) -> None:
    s = start(tmp_path)
    edit_request(s, approval_id="ap1")
    s.append("approval.requested", {"prompt": "edit src/auth.py?"}, turn_id="t1", tool_call_id="c1", approval_id="ap1")
    s.close()
    with S.open(tmp_path) as s:
        assert s.state.approvals["ap1"].status == "expired"
        assert s.state.tools["c1"].status == S.TOOL_NOT_STARTED
        with pytest.raises(S.ProtocolError):
            s.append("tool.started", tool_call_id="c1")
        with pytest.raises(S.ProtocolError):
            s.append("approval.decided", {"decision": "allowed"}, approval_id="ap1")
    decided = [d for t, _, d in types(tmp_path) if t == "approval.decided"]
    assert decided == [decided[0]] and decided[0]["decision"] == "expired" and decided[0]["allowed"] is False


def test_pending_approval_kept_by_policy_resumes_the_same_id_once(tmp_path: Path) -> None:
    keep = S.RepairPolicy(approvals=S.ApprovalPolicy.KEEP)
    s = start(tmp_path)
    edit_request(s, approval_id="ap1")
    s.append("approval.requested", {"prompt": "edit?"}, turn_id="t1", tool_call_id="c1", approval_id="ap1")
    s.close()
    with S.open(tmp_path, policy=keep) as s:
        assert s.state.approvals["ap1"].status == "pending"
        assert s.state.tools["c1"].status == "requested"
        gate = s.resume_gate(S.ResumeChecks(authorized=True))
        assert gate.paused and ("APPROVAL_PENDING", "ap1") in [(r.code, r.subject) for r in gate.reasons]
        again = s.append("approval.requested", {"prompt": "edit?"}, tool_call_id="c1", approval_id="ap1")
        assert isinstance(again.outcome, journal.Committed) and again.outcome.duplicate
        with pytest.raises(S.ProtocolError, match="pending approval"):
            s.append("approval.requested", {"prompt": "edit?"}, tool_call_id="c1", approval_id="ap2")
        with pytest.raises(S.ProtocolError, match="needs approval"):
            s.append("tool.started", tool_call_id="c1")  # forbidden: default allow
        s.append("approval.decided", {"decision": "allowed"}, approval_id="ap1")
        assert s.append("tool.started", tool_call_id="c1").committed
    assert sum(1 for t, _, _ in types(tmp_path) if t == "approval.requested") == 1
    with S.open(tmp_path, policy=keep) as s:  # a kept approval's repair is idempotent too
        assert s.repair_report is not None and s.repair_report.closers[0].data["status"] == S.TOOL_OUTCOME_UNKNOWN


def test_running_job_without_process_is_orphaned_with_its_restart_entry(tmp_path: Path) -> None:
    s = start(tmp_path)
    s.append("job.started", {"jobId": "j1", "command": "npm run dev", "cwd": "/repo", "pid": 4242}, turn_id="t1")
    s.close()
    with S.open(tmp_path) as s:
        job = s.state.jobs["j1"]
        assert job.status == "orphaned" and job.restart == {"command": "npm run dev", "cwd": "/repo", "pid": 4242}
        assert not s.state.running_jobs()  # forbidden: showing it as running forever
        gate = s.resume_gate(S.ResumeChecks(authorized=True))
        assert gate.paused and "JOB_ORPHANED" in gate.codes()
        assert any("npm run dev" in o for o in gate.options())
    assert ("job.started", False) in [(t, syn) for t, syn, _ in types(tmp_path)]  # the log is kept


def test_open_compaction_is_rolled_back_and_no_half_summary_replaces_history(tmp_path: Path) -> None:
    s = start(tmp_path)
    s.append("assistant.message", {"text": "reading auth.py"}, turn_id="t1", step_id="st1", attempt_id="a1")
    s.append("compaction.started", {"compactionId": "k1", "replacedFromSeq": 2, "replacedToSeq": 5,
                                    "partialSummary": "user wants"}, turn_id="t1")
    s.close()
    with S.open(tmp_path) as s:
        assert s.state.compactions["k1"].status == "rolled_back"
        msgs = s.state.messages()
        assert {"role": "user", "content": "fix the login bug"} in msgs
        assert not any("user wants" in str(m) or m["role"] == "system" for m in msgs)
        assert "COMPACTION_ROLLED_BACK" in s.resume_gate().codes()
        # control: a finished compaction does replace its range
        s.append("compaction.started", {"compactionId": "k2"})
        s.append("compaction.ended", {"compactionId": "k2", "replacedFromSeq": 2, "replacedToSeq": 5,
                                      "summary": "user reported a login bug"})
        msgs = s.state.messages()
        assert msgs[0]["role"] == "system" and "login bug" in msgs[0]["content"]
        assert {"role": "user", "content": "fix the login bug"} not in msgs


def test_snapshot_behind_is_tailed_and_a_bad_one_is_rebuilt(tmp_path: Path) -> None:
    s = start(tmp_path)
    reducer = S.SessionReducer()
    first = s.replay()
    snap = S.make_snapshot(s.journal, first, reducer)
    s.append("assistant.message", {"text": "more"}, turn_id="t1", step_id="st1", attempt_id="a1")
    s.append("step.ended", {"reason": "completed"}, turn_id="t1", step_id="st1")
    full = s.replay()
    tailed = s.replay(snapshot=S.Snapshot.from_json(snap.to_json()))
    assert tailed.from_snapshot and tailed.replayed == 2 and tailed.state.dump() == full.state.dump()
    bad = S.Snapshot(snap.last_seq, snap.last_digest, snap.reducer, snap.reducer_version, snap.checksum ^ 1,
                     snap.state)
    rebuilt = s.replay(snapshot=bad)
    assert not rebuilt.from_snapshot and "checksum" in (rebuilt.rebuild_reason or "")
    assert rebuilt.state.dump() == full.state.dump()  # forbidden: trusting the cache over the log
    foreign = S.Snapshot(snap.last_seq, snap.last_digest ^ 1, snap.reducer, snap.reducer_version, snap.checksum,
                         snap.state)
    assert "not the one" in (s.replay(snapshot=foreign).rebuild_reason or "")
    old = S.Snapshot(snap.last_seq, snap.last_digest, snap.reducer, 0, snap.checksum, snap.state)
    assert "reducer" in (s.replay(snapshot=old).rebuild_reason or "")
    # Made with a registry: used with a registry of the same fingerprint, rebuilt with another.
    same = S.make_snapshot(s.journal, full, reducer, s.registry)
    assert same.registry == s.registry.fingerprint() and S.Snapshot.from_json(same.to_json()) == same
    assert s.replay(snapshot=same).from_snapshot
    other = s.registry.copy()
    other.register(S.EventType("myrt.cache_hit", S.DurabilityClass.ORDINARY, ignorable=True))
    theirs = S.make_snapshot(s.journal, full, reducer, other)
    rebuilt = s.replay(snapshot=theirs)
    assert not rebuilt.from_snapshot and "another event-type registry" in (rebuilt.rebuild_reason or "")
    s.close()


def _ev(seq: int, type_: str, time: str, **kw: Any) -> tuple[Event, Any]:
    spec = Registry().get(type_)
    return Event(type=type_, session_id="s", seq=seq, time=time, **kw), spec


def test_duplicate_seq_is_deduped_or_refused_and_time_never_orders(tmp_path: Path) -> None:
    a = _ev(1, "session.started", "2026-01-01T00:00:09Z")
    b = _ev(2, "user.message", "2026-01-01T00:00:01Z", data={"text": "first"})
    c = _ev(3, "user.message", "2026-01-01T00:00:00Z", data={"text": "second"})
    out = S.replay_events([a, b, b, c], S.SessionReducer())
    assert out.duplicates == 1 and out.replayed == 3
    assert [m["content"] for m in out.state.messages()] == ["first", "second"]  # seq order, not time
    other = _ev(2, "user.message", "2026-01-01T00:00:01Z", data={"text": "different"})
    with pytest.raises(S.DuplicateSeqError):
        S.replay_events([a, b, other], S.SessionReducer())
    # a retried append with the same key is stored once
    with S.open(tmp_path, create=True) as s:
        one = s.append("user.message", {"text": "x"}, idempotency_key="msg-1")
        two = s.append("user.message", {"text": "x"}, idempotency_key="msg-1")
        assert isinstance(two.outcome, journal.Committed) and two.outcome.duplicate
        assert two.outcome.seq == one.event.seq and s.journal.last_seq == 2


def test_seq_gap_stops_replay_and_a_snapshot_past_the_end_rebuilds(tmp_path: Path) -> None:
    a = _ev(1, "session.started", "t")
    c = _ev(3, "user.message", "t", data={"text": "after the gap"})
    with pytest.raises(S.SequenceGapError):
        S.replay_events([a, c], S.SessionReducer())  # forbidden: skipping the gap
    with start(tmp_path) as s:
        snap = S.make_snapshot(s.journal, s.replay(), S.SessionReducer())
        ahead = S.Snapshot(snap.last_seq + 5, snap.last_digest, snap.reducer, snap.reducer_version, snap.checksum,
                           snap.state)
        out = s.replay(snapshot=ahead)
        assert not out.from_snapshot and "beyond" in (out.rebuild_reason or "") and out.last_seq == s.journal.last_seq
