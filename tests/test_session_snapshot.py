"""Snapshot files: resume from them equals a full replay, and every kind of damage falls back to one."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import shutil
from collections.abc import Callable
from typing import Any

import pytest

import journal
from journal.fs import File, OsFileSystem
from journal.session import branch, snapshot
from journal.session import fork as forking
from journal.session.reducer import SessionReducer
from journal.session.registry import DurabilityClass, EventType, Registry
from tests.session_gen import add_turns, write_session

REG = Registry()


def full(path: str) -> dict[str, Any]:
    red = SessionReducer()
    with journal.open(path, readonly=True) as j:
        return red.dump(snapshot.resume(j, REG, red, None).state)


def resume(path: str, snap: str, reducer: Any = None) -> snapshot.Resumed[Any]:
    with journal.open(path, readonly=True) as j:
        return snapshot.resume(j, REG, reducer or SessionReducer(), snap)


@pytest.fixture
def session_with_snapshot(tmp_path: pathlib.Path) -> tuple[str, str, int]:
    path = str(tmp_path / "s")
    s = write_session(path, seed=11, turns=8)
    snap = str(tmp_path / "snaps" / "journal.session.snap")
    red = SessionReducer()
    got = snapshot.take(s.journal, REG, red, snap)
    assert got.rebuild_reason and "no snapshot" in got.rebuild_reason
    at = s.journal.last_seq
    add_turns(s, random.Random(5), 3, 50)
    s.close()
    return path, snap, at


def test_snapshot_then_append_then_resume_equals_a_full_replay(session_with_snapshot: tuple[str, str, int]) -> None:
    path, snap, at = session_with_snapshot
    got = resume(path, snap)
    assert got.from_snapshot and got.snapshot_seq == at and got.rebuild_reason is None
    assert got.replayed.replayed < got.replayed.last_seq - at + 1  # only the tail was folded
    assert SessionReducer().dump(got.state) == full(path)


def _flip(snap: str) -> None:
    data = bytearray(pathlib.Path(snap).read_bytes())
    data[len(data) // 2] ^= 0x01
    pathlib.Path(snap).write_bytes(bytes(data))


def _truncate(snap: str) -> None:
    data = pathlib.Path(snap).read_bytes()
    pathlib.Path(snap).write_bytes(data[: len(data) - 30])


def _bad_state(snap: str) -> None:
    saved = snapshot.read(snap)
    bad = snapshot.SavedSnapshot(
        saved.session_id,
        saved.last_seq,
        saved.last_digest,
        saved.reducer,
        saved.reducer_version,
        {"turns": "not a map"},
        saved.registry,
    )
    pathlib.Path(snap).write_bytes(snapshot.encode(bad))


def _newer_reducer(snap: str) -> None:
    saved = snapshot.read(snap)
    bumped = snapshot.SavedSnapshot(
        saved.session_id, saved.last_seq, saved.last_digest, saved.reducer, saved.reducer_version + 1, saved.state,
        saved.registry,
    )
    pathlib.Path(snap).write_bytes(snapshot.encode(bumped))


def _registry(fingerprint: str | None) -> Callable[[str], None]:
    def rewrite(snap: str) -> None:
        saved = snapshot.read(snap)
        pathlib.Path(snap).write_bytes(snapshot.encode(dataclasses.replace(saved, registry=fingerprint)))

    return rewrite


def _another_registry() -> str:
    other = Registry()
    other.register(EventType("myrt.cache_hit", DurabilityClass.ORDINARY, ignorable=True))
    assert other.fingerprint() != REG.fingerprint()
    return other.fingerprint()


DAMAGE: dict[str, tuple[Callable[[str], object], str]] = {
    "bit flip": (_flip, "checksum mismatch"),
    "torn file": (_truncate, "checksum"),
    "empty file": (lambda p: pathlib.Path(p).write_text(""), "not a snapshot file"),
    "missing file": (os.unlink, "no snapshot"),
    "reducer version": (_newer_reducer, f"replaying with journal.session v{SessionReducer.version}"),
    "state does not load": (_bad_state, "does not load"),
    "another registry": (_registry(_another_registry()), "another event-type registry"),
    "registry not hex": (_registry("not-a-fingerprint"), "fields out of range"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_snapshots_fall_back_to_a_full_replay(session_with_snapshot: tuple[str, str, int], kind: str) -> None:
    path, snap, _ = session_with_snapshot
    damage, reason = DAMAGE[kind]
    damage(snap)
    got = resume(path, snap)
    assert not got.from_snapshot and got.snapshot_seq == 0
    assert got.rebuild_reason is not None and reason in got.rebuild_reason, got.rebuild_reason
    assert SessionReducer().dump(got.state) == full(path)


def test_a_journal_that_no_longer_holds_the_record_falls_back(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "s")
    s = write_session(path, seed=2, turns=4)
    snap = str(tmp_path / "x.snap")
    snapshot.take(s.journal, REG, SessionReducer(), snap)
    s.close()
    shutil.rmtree(path)  # replaced by a shorter session, then by one as long with other records
    write_session(path, seed=2, turns=2).close()
    got = resume(path, snap)
    assert not got.from_snapshot and "no longer holds" in (got.rebuild_reason or "")
    shutil.rmtree(path)
    write_session(path, seed=3, turns=9).close()
    got = resume(path, snap)
    assert not got.from_snapshot and "not the one the snapshot was made after" in (got.rebuild_reason or "")
    assert SessionReducer().dump(got.state) == full(path)


def test_a_parents_snapshot_is_not_taken_for_its_fork(
    session_with_snapshot: tuple[str, str, int], tmp_path: pathlib.Path
) -> None:
    path, snap, at = session_with_snapshot
    point = next(p for p in forking.fork_points(path) if p.seq >= at)
    child = forking.fork(path, str(tmp_path / "child"), point.seq).path
    got = resume(child, snap)
    assert not got.from_snapshot and "forked" in (got.rebuild_reason or "")
    assert SessionReducer().dump(got.state) == full(child)


def test_resume_up_to_a_seq_stops_there(session_with_snapshot: tuple[str, str, int]) -> None:
    path, snap, at = session_with_snapshot
    with journal.open(path, readonly=True) as j:
        got = snapshot.resume(j, REG, SessionReducer(), snap, upto_seq=at + 5)
        assert got.from_snapshot and got.replayed.last_seq == at + 5
        past = snapshot.resume(j, REG, SessionReducer(), snap, upto_seq=at - 1)
        assert not past.from_snapshot and "past the wanted seq" in (past.rebuild_reason or "")


class RecordingFS(OsFileSystem):
    def __init__(self) -> None:
        self.ops: list[str] = []

    def open_write(self, path: str, create: bool) -> File:
        self.ops.append(f"open {os.path.basename(path)}")
        f = super().open_write(path, create)
        inner = f.fsync
        ops = self.ops

        def fsync() -> None:
            ops.append(f"fsync {os.path.basename(path)}")
            inner()

        f.fsync = fsync  # type: ignore[method-assign]
        return f

    def rename(self, src: str, dst: str) -> None:
        self.ops.append(f"rename {os.path.basename(src)} {os.path.basename(dst)}")
        super().rename(src, dst)

    def fsync_dir(self, path: str) -> None:
        self.ops.append(f"fsync_dir {os.path.basename(path)}")
        super().fsync_dir(path)


def test_a_snapshot_is_written_atomically_through_the_file_layer(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "s")
    s = write_session(path, seed=1, turns=2)
    (tmp_path / "snaps").mkdir()
    fs = RecordingFS()
    snapshot.take(s.journal, REG, SessionReducer(), str(tmp_path / "snaps" / "a.snap"), fs=fs)
    s.close()
    # The directory's entry is fsync'd too, even though it existed (tests/test_session_faults.py).
    assert fs.ops == [
        f"fsync_dir {tmp_path.name}",
        "open a.snap.tmp",
        "fsync a.snap.tmp",
        "rename a.snap.tmp a.snap",
        "fsync_dir snaps",
    ]
    assert os.stat(tmp_path / "snaps" / "a.snap").st_mode & 0o777 == 0o600


def test_branch_tree_switching_appends_and_replays_the_path(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "tree")
    with branch.BranchTree.open(path, create=True) as tree:
        root = tree.append("user.message", {"text": "fix the tests"}).event.data["entryId"]
        a1 = tree.append("assistant.message", {"text": "plan A"}).event.data["entryId"]
        tree.append("user.message", {"text": "go on with A"})
        # Without the live segment's reserved zeros (its last record is JSON: it ends in "}").
        before = {p.name: p.read_bytes().rstrip(b"\0") for p in pathlib.Path(path).glob("*.seg")}
        tree.switch(root)
        b1 = tree.append("assistant.message", {"text": "plan B"}).event.data["entryId"]
        assert [e.data["text"] for e in tree.path()] == ["fix the tests", "plan B"]
        assert sorted(tree.leaves()) == sorted([b1, tree.nodes[a1].children[0]])
        for name, data in before.items():  # switching appended: the old bytes are a prefix
            assert (pathlib.Path(path) / name).read_bytes()[: len(data)] == data
    with branch.BranchTree.open(path) as tree:  # the leaf survives a reopen
        assert tree.leaf == b1 and tree.switches == 1
        state = tree.replay()
        assert [m["content"] for m in state.messages()] == ["fix the tests", "plan B"]
        assert [m["content"] for m in tree.replay(leaf=tree.nodes[a1].children[0]).messages()] == [
            "fix the tests",
            "plan A",
            "go on with A",
        ]
        with pytest.raises(branch.UnknownEntryError):
            tree.switch("nope")


def test_a_snapshot_saved_before_registries_were_recorded_is_taken_as_the_built_in_ones(
    session_with_snapshot: tuple[str, str, int],
) -> None:
    """Used by a reader with the built-in registry, as before (nothing saves a fork's snapshot
    again: refusing it would replay a chain at every fork), replayed past by any other."""
    path, snap, at = session_with_snapshot
    _registry(None)(snap)
    got = resume(path, snap)
    assert got.from_snapshot and got.snapshot_seq == at
    custom = Registry()
    custom.register(EventType("myrt.cache_hit", DurabilityClass.ORDINARY, ignorable=True))
    red = SessionReducer()
    with journal.open(path, readonly=True) as j:
        other = snapshot.resume(j, custom, red, snap)
    assert not other.from_snapshot and "before snapshots recorded the event-type registry" in (
        other.rebuild_reason or ""
    )
    assert red.dump(other.state) == full(path)
