"""Forks from clean boundaries: the child's past is the parent's, the parent is never touched."""

from __future__ import annotations

import os
import pathlib
import random
from typing import Any

import pytest

import journal
from journal import session
from journal.session import fork as forking
from journal.session import snapshot
from journal.session.envelope import decode
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry
from journal.session.replay import fold
from journal.session.state import SessionState
from tests.conftest import snapshot_files
from tests.session_gen import FIXED_TIME, add_turns, write_session


def state_upto(path: str, seq: int) -> dict[str, Any]:
    """The built-in reducer's state after the events 1..seq of the journal at ``path``."""
    reg = Registry()
    red = SessionReducer()
    with journal.open(path, readonly=True) as j:
        items = ((r.seq, decode(r, reg)) for r in j.read() if r.seq <= seq)
        return red.dump(fold(items, red, red.initial()).state)


def assert_valid_journal(path: str) -> list[journal.Record]:
    """What the core's tests call valid: opens for writing with nothing to recover, reads end to end."""
    with journal.open(path, readonly=True) as j:
        recs = list(j.read())
        assert [r.seq for r in recs] == list(range(1, j.last_seq + 1))
    with journal.open(path) as j:
        assert j.recovery.actions == [] and j.recovery.quarantined == []
        assert j.recovery.tail in ("clean", "sealed")
    return recs


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("fork") / "parent")
    write_session(path, seed=7, turns=12).close()
    return path


def test_every_clean_point_forks_into_a_valid_child_with_the_parents_past(parent: str, tmp_path: pathlib.Path) -> None:
    before = snapshot_files(parent)
    points = forking.fork_points(parent)
    assert len(points) >= 12
    parent_recs = assert_valid_journal(parent)
    linked = 0
    for n, point in enumerate(points):
        for at in sorted({point.seq, point.last_seq}):
            child = str(tmp_path / f"c{n}-{at}")
            got = forking.fork(parent, child, at, origin="test", time=FIXED_TIME)
            assert got.fork_seq == at and got.header_seq == at + 1 and got.depth == 1
            linked += len(got.storage.segments_linked)
            recs = assert_valid_journal(child)
            assert [r.payload for r in recs[:at]] == [r.payload for r in parent_recs[:at]]
            header = recs[at].event
            assert header["type"] == "session.started" and header["sessionId"] == got.session_id
            assert header["data"]["lineage"] == {
                "parentSessionId": got.parent_session_id,
                "forkSeq": at,
                "depth": 1,
                "origin": "test",
            }
            assert state_upto(child, at) == state_upto(parent, at)
            with session.open(child) as s:  # a clean point needs no repair in the child
                assert s.repair_report is not None and not s.repair_report.changed
                assert s.state.messages() == SessionState.load(state_upto(parent, at)).messages()
    assert linked > 0, "no fork shared a sealed segment"
    assert snapshot_files(parent) == before


def test_sealed_segments_are_shared_not_copied(parent: str, tmp_path: pathlib.Path) -> None:
    point = forking.fork_points(parent)[-1]
    got = forking.fork(parent, str(tmp_path / "c"), point.last_seq)
    assert got.storage.segments_linked and not got.storage.segments_copied
    for name in got.storage.segments_linked:
        assert os.stat(os.path.join(parent, name)).st_ino == os.stat(os.path.join(got.path, name)).st_ino
    sealed_bytes = sum(os.path.getsize(os.path.join(parent, n)) for n in got.storage.segments_linked)
    assert got.storage.bytes_copied < sealed_bytes


def test_without_links_the_segments_are_copied(parent: str, tmp_path: pathlib.Path) -> None:
    point = forking.fork_points(parent)[-1]
    got = forking.fork(parent, str(tmp_path / "c"), point.last_seq, link=False)
    assert got.storage.segments_copied and not got.storage.segments_linked
    assert_valid_journal(got.path)


def test_unclean_points_are_refused_with_the_nearest_clean_ones(parent: str, tmp_path: pathlib.Path) -> None:
    before = snapshot_files(parent)
    points = forking.fork_points(parent)
    clean = {s for p in points for s in range(p.seq, p.last_seq + 1)}
    with journal.open(parent, readonly=True) as j:
        last = j.last_seq
    unclean = [s for s in range(1, last + 1) if s not in clean]
    assert unclean
    for at in [*random.Random(3).sample(unclean, 25), last + 1]:
        child = tmp_path / f"bad{at}"
        with pytest.raises(forking.UncleanForkPointError) as err:
            forking.fork(parent, str(child), at)
        assert err.value.nearest and "nearest clean points" in str(err.value)
        assert not child.exists()
    assert not [p for p in tmp_path.iterdir() if ".fork-" in p.name]
    assert snapshot_files(parent) == before


def test_an_assistant_message_that_asks_for_a_tool_is_not_a_boundary(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "p")
    with session.open(path, create=True) as s:  # no turns: only the tool request makes it unclean
        s.append("user.message", {"text": "hi"})
        a = s.append("assistant.message", {"text": "running it"}).event.seq
        s.append("tool.requested", {"tool": "ls"}, tool_call_id="c1")
        s.append("tool.result", {"status": "ok"}, tool_call_id="c1")
        b = s.append("assistant.message", {"text": "done"}).event.seq
    assert [p.message_seq for p in forking.fork_points(path)] == [2, b]
    with pytest.raises(forking.UncleanForkPointError, match="asks for a tool"):
        forking.fork(path, str(tmp_path / "c"), a)


def test_a_fork_of_a_fork_counts_depth_and_keeps_going(parent: str, tmp_path: pathlib.Path) -> None:
    first = forking.fork(parent, str(tmp_path / "c1"), forking.fork_points(parent)[3].seq)
    with session.open(first.path) as s:
        add_turns(s, random.Random(1), 2, 100)
    second = forking.fork(first.path, str(tmp_path / "c2"), origin="subagent")
    assert second.depth == 2 and second.parent_session_id == first.session_id
    assert second.fork_seq > first.header_seq
    recs = assert_valid_journal(second.path)
    assert recs[second.fork_seq].event["data"]["lineage"]["origin"] == "subagent"


def test_a_cut_sealed_segment_becomes_a_live_segment_that_takes_appends(parent: str, tmp_path: pathlib.Path) -> None:
    names = sorted(n for n in os.listdir(parent) if n.endswith(".seg"))
    second_base = int(names[1].split(".")[0])
    inside = [p for p in forking.fork_points(parent) if p.seq < second_base - 1]
    got = forking.fork(parent, str(tmp_path / "c"), inside[0].seq)
    assert got.storage.cut_segment == names[0] and not got.storage.segments_linked
    with session.open(got.path, segment_size_bytes=4096) as s:
        add_turns(s, random.Random(2), 6, 200)
    assert len([n for n in os.listdir(got.path) if n.endswith(".seg")]) > 1
    assert_valid_journal(got.path)


def test_fork_checks_from_a_snapshot_instead_of_the_whole_log(parent: str, tmp_path: pathlib.Path) -> None:
    snap = str(tmp_path / "snaps" / "journal.fork.snap")
    with journal.open(parent, readonly=True) as j:
        snapshot.take(j, Registry(), forking.ForkReducer(), snap)
    at = forking.fork_points(parent)[-1].last_seq
    got = forking.fork(parent, str(tmp_path / "c"), at, snapshot=snap)
    assert got.checked_from_seq > 0 and got.snapshot_reason is None
    clean = {x for p in forking.fork_points(parent) for x in range(p.seq, p.last_seq + 1)}
    unclean = max(s for s in range(1, at) if s not in clean)
    with pytest.raises(forking.UncleanForkPointError):
        forking.fork(parent, str(tmp_path / "c2"), unclean, snapshot=snap)


def test_fork_refuses_an_existing_target(parent: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "c").mkdir()
    with pytest.raises(FileExistsError):
        forking.fork(parent, str(tmp_path / "c"))


def test_a_fork_has_its_own_identity_when_reopened(parent: str, tmp_path: pathlib.Path) -> None:
    child = forking.fork(parent, str(tmp_path / "child"), forking.fork_points(parent)[2].seq)
    with session.open(parent) as p:
        parent_id = p.state.session_id
    with session.open(child.path) as s:
        assert s.state.session_id == s.session_id == child.session_id != parent_id
        assert s.state.lineage["parentSessionId"] == parent_id and s.state.lineage["forkSeq"] == child.fork_seq
        got = s.append("user.message", {"text": "the child's own future"})
    with journal.open(child.path, readonly=True) as j:
        rec = j.get(got.event.seq)
        assert rec is not None and rec.event["sessionId"] == child.session_id


def test_a_crashed_forks_temp_directory_is_cleared_by_the_next_fork(parent: str, tmp_path: pathlib.Path) -> None:
    stale = tmp_path / ".child.fork-deadbeef"
    stale.mkdir()
    (stale / "00000000000000000001.seg").write_bytes(b"half a copy")
    got = forking.fork(parent, str(tmp_path / "child"), forking.fork_points(parent)[1].seq)
    assert not stale.exists()
    assert_valid_journal(got.path)
    assert [p.name for p in tmp_path.iterdir()] == ["child"]
