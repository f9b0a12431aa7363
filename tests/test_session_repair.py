"""Repair under cuts: random valid sessions cut at every event boundary and at random byte offsets.

After the cut the core recovers the bytes on open and the session layer repairs the structure.
The repaired journal must replay to a state where no tool call lacks a result and every turn,
step, attempt, compaction and approval is closed; repairing again must not change a byte; and a
repair cut anywhere in the middle must, once repaired again, give the very same bytes.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal import session as S
from journal.engine import format as fmt
from journal.engine.format import SEGMENT_HEADER_SIZE_BYTES
from tests.conftest import frames_of, report_count

SESSION_ID = "s-prop"
# Each example is cut at every event boundary (about 50) and inside records: about 30 ms a cut.
EXAMPLES = int(os.environ.get("JOURNAL_SESSION_EXAMPLES", "12"))
RANDOM_CUTS_PER_EXAMPLE = 6
CUTS = {"examples": 0, "boundaries": 0, "inside": 0}  # over all examples, for the summary


def live_segment(path: Path) -> Path:
    return sorted(p for p in path.iterdir() if p.name.endswith(".seg"))[-1]


def seg_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name.endswith(".seg")}


def write_session(path: Path, rnd: random.Random) -> int:
    """A valid, complete session; returns how many events it appended (session.started too)."""
    count = 0
    with S.open(path, create=True, session_id=SESSION_ID, durability_floor="flush",
                clock=lambda: "2026-01-01T00:00:00Z") as s:
        count = s.journal.last_seq

        def put(type_: str, data: dict[str, object] | None = None, **kw: str) -> None:
            nonlocal count
            s.append(type_, data, **kw)
            count += 1

        n = 0
        for t in range(rnd.randint(1, 3)):
            turn = f"t{t}"
            put("user.message", {"text": f"ask {t}"})
            put("turn.started", turn_id=turn)
            if rnd.random() < 0.2:
                put("goal.updated", {"goal": {"status": "active"}, "budget": {"used": t, "limit": 10}})
            for k in range(rnd.randint(1, 3)):
                step = f"{turn}s{k}"
                put("step.started", turn_id=turn, step_id=step)
                put("model.requested", turn_id=turn, step_id=step)
                att = f"{step}a"
                for _ in range(rnd.randint(0, 3)):
                    put("assistant.delta", {"text": "x"}, turn_id=turn, step_id=step, attempt_id=att)
                put("assistant.message", {"text": f"reply {step}"}, turn_id=turn, step_id=step, attempt_id=att)
                for _ in range(rnd.randint(0, 2)):
                    n += 1
                    call = f"c{n}"
                    put("tool.requested", {"tool": "edit", "sideEffect": "workspace-write"}, turn_id=turn,
                        step_id=step, tool_call_id=call)
                    allowed = True
                    if rnd.random() < 0.4:
                        ap = f"ap{n}"
                        put("approval.requested", {"prompt": "?"}, turn_id=turn, tool_call_id=call, approval_id=ap)
                        allowed = rnd.random() < 0.7
                        put("approval.decided", {"decision": "allowed" if allowed else "denied"}, approval_id=ap)
                    if allowed:
                        put("tool.started", turn_id=turn, step_id=step, tool_call_id=call)
                        if rnd.random() < 0.5:
                            put("tool.output", {"chunk": "..."}, tool_call_id=call)
                    put("tool.result", {"status": "ok" if allowed else "cancelled"}, turn_id=turn, step_id=step,
                        tool_call_id=call)
                if rnd.random() < 0.2:
                    cid = f"k{t}{k}"
                    put("compaction.started", {"compactionId": cid}, turn_id=turn)
                    put("compaction.ended", {"compactionId": cid, "replacedFromSeq": 2, "replacedToSeq": 3,
                                             "summary": "s"}, turn_id=turn)
                if rnd.random() < 0.15:
                    put("job.started", {"jobId": f"j{t}{k}", "command": "serve"}, turn_id=turn)
                    if rnd.random() < 0.5:
                        put("job.ended", {"jobId": f"j{t}{k}", "status": "exited"}, turn_id=turn)
                put("step.ended", {"reason": "completed"}, turn_id=turn, step_id=step)
            put("turn.ended", {"reason": "completed"}, turn_id=turn)
    return count


def event_ends(path: Path) -> list[int]:
    """Where each record of the live segment ends, read from its frames (the file's size is no
    guide while the journal is open: the writer reserves space ahead of the data)."""
    frames = frames_of(live_segment(path))
    assert all(f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA for f in frames)
    return [f.end for f in frames]


def assert_closed(state: S.SessionState) -> None:
    assert not state.pending_tools(), "a tool call lacks a result"
    assert not state.open_turns() and not state.open_steps()
    assert not state.pending_approvals()
    assert all(a.status != "streaming" for a in state.attempts.values())
    assert all(c.status != "open" for c in state.compactions.values())
    assert not state.running_jobs()
    for m in state.messages():
        if "toolCall" in m:
            assert state.tools[m["toolCall"]["id"]].has_result


def cut_and_check(src: Path, work: Path, offset: int) -> None:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    with open(live_segment(work), "r+b") as f:
        f.truncate(offset)
    with S.open(work, create=True, session_id=SESSION_ID) as s:
        dry = s.repair(dry_run=True)
        assert not dry.closers, "repair on open left something to close"
        assert_closed(s.replay().state)
    once = seg_bytes(work)
    with S.open(work) as s:
        assert s.repair_report is not None and not s.repair_report.changed
    assert seg_bytes(work) == once, "repairing again changed the journal"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rnd=st.randoms(use_true_random=False))
def test_cut_anywhere_then_repair_closes_everything_and_is_idempotent(tmp_path: Path, rnd: random.Random) -> None:
    src = tmp_path / "src"
    if src.exists():
        shutil.rmtree(src)
    events = write_session(src, rnd)
    ends = event_ends(src)
    assert len(ends) == events  # one frame per event: each boundary is a different cut
    boundaries = [SEGMENT_HEADER_SIZE_BYTES, *ends]  # before the first event, after each one
    starts = [SEGMENT_HEADER_SIZE_BYTES, *ends[:-1]]
    # Random bytes inside random records (the session.started event too): torn tails.
    randoms = set()
    for _ in range(RANDOM_CUTS_PER_EXAMPLE):
        i = rnd.randrange(len(ends))
        randoms.add(rnd.randint(starts[i] + 1, ends[i] - 1))
    inside = [c for c in randoms if any(a < c < b for a, b in zip(starts, ends, strict=True))]
    assert len(set(boundaries)) == events + 1 and len(inside) == len(randoms) >= 1, (sorted(randoms), boundaries)
    for offset in sorted(set(boundaries) | randoms):
        cut_and_check(src, tmp_path / "work", offset)
    CUTS["examples"] += 1
    CUTS["boundaries"] += len(boundaries)
    CUTS["inside"] += len(inside)
    report_count(
        "session cuts (tests/test_session_repair.py)",
        f"{CUTS['boundaries']} at event boundaries and {CUTS['inside']} inside records, "
        f"over {CUTS['examples']} sessions",
    )


def test_a_repair_cut_at_any_byte_repairs_to_the_same_bytes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    with S.open(src, create=True, session_id=SESSION_ID, clock=lambda: "2026-01-01T00:00:00Z") as s:
        s.append("turn.started", turn_id="t1")
        s.append("step.started", turn_id="t1", step_id="s1")
        s.append("assistant.delta", {"text": "half"}, turn_id="t1", step_id="s1", attempt_id="a1")
        s.append("tool.requested", {"tool": "edit", "sideEffect": "workspace-write"}, turn_id="t1", step_id="s1",
                 tool_call_id="c1")
        s.append("approval.requested", {}, turn_id="t1", tool_call_id="c2", approval_id="ap2")
        s.append("tool.requested", {"tool": "rm"}, turn_id="t1", step_id="s1", tool_call_id="c2", approval_id="ap2")
        s.append("tool.requested", {"tool": "bash"}, turn_id="t1", step_id="s1", tool_call_id="c3")
        s.append("tool.started", turn_id="t1", step_id="s1", tool_call_id="c1")
        s.append("compaction.started", {"compactionId": "k"}, turn_id="t1")
        s.append("job.started", {"jobId": "j", "command": "serve"}, turn_id="t1")
    before = live_segment(src).stat().st_size
    full = tmp_path / "full"
    shutil.copytree(src, full)
    with S.open(full) as s:
        report = s.repair_report
        assert report is not None and len(report.closers) == 9
    expected = seg_bytes(full)
    after = live_segment(full).stat().st_size
    work = tmp_path / "work"
    for offset in range(before, after):  # every byte of the repair's write
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(full, work)
        with open(live_segment(work), "r+b") as f:
            f.truncate(offset)
        S.open(work).close()
        assert seg_bytes(work) == expected, f"repair cut at byte {offset} did not repair to the same bytes"


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    with S.open(tmp_path, create=True) as s:
        s.append("turn.started", turn_id="t1")
        s.append("tool.requested", {"tool": "x"}, turn_id="t1", tool_call_id="c1")
    before = seg_bytes(tmp_path)
    with S.open(tmp_path, readonly=True) as s:
        report = s.repair(dry_run=True)
    assert [c.type for c in report.closers] == ["tool.result", "turn.ended"] and not report.changed
    with S.open(tmp_path, repair_on_open=False) as s:
        assert len(s.repair(dry_run=True).closers) == 2
    assert seg_bytes(tmp_path) == before
