"""Session.open from the session snapshot and the tail (issue 33): the same state, the same repair
decision and the same gate verdict as a full replay, and a fallback to it for every defect."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import session
from journal.fs import File, OsFileSystem
from journal.session import snapshot as snap
from journal.session.gate import ResumeChecks
from journal.session.session import SESSION_SNAPSHOT_NAME, SNAPSHOT_AT_CLOSE_MIN_EVENTS, Session, SnapshotWriteWarning
from journal.session.state import SessionState
from tests.session_gen import FIXED_TIME, add_turns, write_session


def snap_file(path: Path) -> Path:
    return path / SESSION_SNAPSHOT_NAME


def outcome(path: Path, use_snapshot: bool, readonly: bool = False) -> tuple[dict[str, Any], Session]:
    """Everything an open decides: gate verdicts (taken first, on the state as opened), the
    repair report, the state, the records after the open (closers included)."""
    s = session.open(path, readonly=readonly, snapshot=use_snapshot, clock=lambda: FIXED_TIME)
    try:
        gates = [s.resume_gate(ResumeChecks(authorized=a, workspace_fingerprint="git:2")) for a in (False, True)]
        lazy = not s.state.history_loaded
        rep = s.repair_report
        got = {
            "gates": [(g.decision, g.reasons) for g in gates],
            "repair": None if rep is None else ([c.to_dict() for c in rep.closers], rep.kept, rep.events_scanned),
            "skipped": s.skipped,
            "pending": [t.tool_call_id for t in s.state.pending_tools()],
            "side_effects": s.state.had_side_effects(),
            "open_turns": s.state.open_turns(),
            "state": s.state,  # compared whole below: this loads the history
            "messages": s.state.messages(),
            "records": [(r.seq, r.payload, r.synthetic) for r in s.journal.read()],
        }
        got["lazy"] = lazy
        return got, s
    finally:
        s.close()


def assert_same(a: Path, b: Path, readonly: bool = False) -> Session:
    """Open ``a`` from its snapshot and ``b`` (a copy) by full replay; they decide the same."""
    fast, s = outcome(a, True, readonly)
    full, _ = outcome(b, False, readonly)
    assert s.snapshot_seq > 0, s.snapshot_reason
    assert fast.pop("lazy") is True  # the gate and the views ran without loading the history
    full.pop("lazy")
    assert fast == full
    return s


def twin(path: Path, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(path, dst)
    (dst / SESSION_SNAPSHOT_NAME).unlink(missing_ok=True)
    return dst


@pytest.mark.parametrize("seed", range(6))
def test_open_from_the_snapshot_decides_what_a_full_replay_decides(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    src = tmp_path / "s"
    s = write_session(str(src), seed, rng.randrange(3, 12))
    assert s.save_snapshot()
    s.close()
    assert snap_file(src).exists()
    with session.open(src, clock=lambda: FIXED_TIME) as s:  # a later life: a tail after the snapshot
        add_turns(s, rng, rng.randrange(1, 4), 100)
        if rng.random() < 0.7:  # stop inside a turn, with a tool started and one requested
            s.append("turn.started", turn_id="open")
            s.append("tool.requested", {"tool": "bash", "sideEffect": "process"}, turn_id="open", tool_call_id="x1")
            s.append("tool.started", turn_id="open", tool_call_id="x1")
            s.append("approval.requested", {}, turn_id="open", tool_call_id="x2", approval_id="ap")
            for call in ("zz", "aa", "mm"):  # pending, in an order their ids do not sort in
                s.append("tool.requested", {"tool": "read", "sideEffect": "read"}, turn_id="open", tool_call_id=call)
        if rng.random() < 0.7:  # a snapshot holding what is open, and a tail after it
            assert s.save_snapshot()
            s.append("user.message", {"text": "and one more"})
        s.journal.sync()
        crashed = tmp_path / "crashed"
        shutil.copytree(src, crashed)  # a power loss now: the journal as synced, the snapshot as saved
    for readonly in (True, False):
        a = tmp_path / f"a{readonly}"
        shutil.copytree(crashed, a)
        assert_same(a, twin(crashed, tmp_path, f"b{readonly}"), readonly)


def test_crash_cut_sessions_decide_what_a_full_replay_decides(tmp_path: Path) -> None:
    """Cut the live segment at random offsets after a snapshot: a cut after the snapshot's seq
    opens from it, a cut before falls back; either way the open decides what a replay decides."""
    rng = random.Random(7)
    src = tmp_path / "s"
    s = write_session(str(src), 7, 6, segment_size_bytes=1 << 20)
    assert s.save_snapshot()
    add_turns(s, rng, 3, 50)
    s.journal.sync()
    image = tmp_path / "image"
    shutil.copytree(src, image)
    s.journal.close()
    (seg,) = sorted(p for p in image.iterdir() if p.suffix == ".seg")
    size = len(seg.read_bytes().rstrip(b"\0"))  # the records' end (the file may be preallocated)
    used = {True: 0, False: 0}
    for k in range(20):
        cut = tmp_path / f"cut{k}"
        shutil.copytree(image, cut)
        offset = rng.randrange(size // 4, size)
        with open(cut / seg.name, "r+b") as f:
            f.truncate(offset)
        other = twin(cut, tmp_path, f"full{k}")  # before the open below repairs ``cut``
        fast, s2 = outcome(cut, True)
        full, _ = outcome(other, False)
        fast.pop("lazy"), full.pop("lazy")
        assert fast == full, offset
        used[s2.snapshot_seq > 0] += 1
        if s2.snapshot_seq == 0:
            assert s2.snapshot_reason
    assert used[True] and used[False], used  # both paths were taken


def test_the_session_snapshot_is_left_alone_by_verify_salvage_and_copy(tmp_path: Path) -> None:
    from journal.engine.salvage import salvage
    from journal.engine.verify import verify

    src = tmp_path / "s"
    write_session(str(src), 1, 8).close()
    data = snap_file(src).read_bytes()
    report = verify(str(src))
    assert report.verdict == "clean", report
    salvage(str(src), str(tmp_path / "salvaged"))
    assert snap_file(src).read_bytes() == data
    with journal.open(src) as j:
        assert j.last_seq > 0
    with session.open(tmp_path / "salvaged") as s2:  # no snapshot there: replayed, and it works
        assert s2.snapshot_seq == 0 and s2.state.session_id
    (tmp_path / "prefix").mkdir()
    with journal.open(src) as j:
        j.copy_prefix(str(tmp_path / "prefix"), j.last_seq - 3)  # type: ignore[attr-defined]
    assert not snap_file(tmp_path / "prefix").exists()
    assert snap_file(src).read_bytes() == data
    with session.open(tmp_path / "prefix", readonly=True) as s3:
        assert s3.snapshot_seq == 0 and s3.state.session_id
    assert verify(str(src)).verdict == "clean"


# --- each defect falls back to a full replay, and says why --------------------------------------


def _session(tmp_path: Path, name: str = "s", turns: int = 8, seed: int = 3) -> Path:
    p = tmp_path / name
    s = write_session(str(p), seed, turns)
    assert s._since_snapshot >= SNAPSHOT_AT_CLOSE_MIN_EVENTS  # the close saves the snapshot
    s.close()
    assert snap_file(p).exists()
    return p


def _rewrite(p: Path, **head: Any) -> None:
    saved, parts = snap.read_session(str(snap_file(p)))
    raw = [parts.read(i) for i in range(parts.count())]
    parts.close()
    fields = {**saved.__dict__, **head}
    snap_file(p).write_bytes(snap.encode_session(snap.SavedSession(**fields), raw))


def _falls_back(p: Path, why: str, tmp_path: Path) -> None:
    full, _ = outcome(twin(p, tmp_path, "twin-" + p.name), False, readonly=True)
    got, s = outcome(p, True, readonly=True)
    assert s.snapshot_seq == 0
    assert s.snapshot_reason is not None and why in s.snapshot_reason, s.snapshot_reason
    got.pop("lazy"), full.pop("lazy")
    assert got == full


def test_missing(tmp_path: Path) -> None:
    p = _session(tmp_path)
    snap_file(p).unlink()
    _falls_back(p, "no snapshot at", tmp_path)


def test_stale_digest(tmp_path: Path) -> None:
    """Another session's snapshot at the same seq: the record there is not the one it was made after."""
    a, b = _session(tmp_path, "a", seed=3), _session(tmp_path, "b", seed=3)
    with session.open(b, clock=lambda: FIXED_TIME) as s:
        s.append("user.message", {"text": "b goes on"})
    with session.open(a, clock=lambda: FIXED_TIME) as s:
        s.append("user.message", {"text": "a goes on differently"})
    shutil.copy(snap_file(a), snap_file(b))
    saved, parts = snap.read_session(str(snap_file(b)))
    parts.close()
    with journal.open(b, readonly=True) as j:
        assert j.last_seq >= saved.last_seq
    _falls_back(b, "is not the one the snapshot was made after", tmp_path)


def test_other_reducer_version(tmp_path: Path) -> None:
    p = _session(tmp_path)
    saved, parts = snap.read_session(str(snap_file(p)))
    parts.close()
    _rewrite(p, reducer_version=saved.reducer_version + 1)
    _falls_back(p, "replaying with journal.session", tmp_path)


def test_a_snapshot_without_its_registry_recorded(tmp_path: Path) -> None:
    """Saved before snapshots recorded their registry: not used, the open replays."""
    p = _session(tmp_path)
    _rewrite(p, registry=None)
    _falls_back(p, "before snapshots recorded the event-type registry", tmp_path)


def test_a_snapshot_folded_with_another_registry_is_not_used(tmp_path: Path) -> None:
    """A type a reader skipped as unknown (ignorable) when the snapshot was saved is folded by a
    reader that has registered it since: the saved state and counts are not what a replay with
    the new registry makes, so that open replays (and the next one uses its new snapshot)."""
    cache_hit = session.EventType("myrt.cache_hit", session.DurabilityClass.ORDINARY, ignorable=True)
    writer = session.Registry()
    writer.register(cache_hit)
    p = tmp_path / "s"
    with session.open(p, create=True, registry=writer, clock=lambda: FIXED_TIME) as s:
        for i in range(SNAPSHOT_AT_CLOSE_MIN_EVENTS):
            s.append("myrt.cache_hit", {"n": i})
    with session.open(p, clock=lambda: FIXED_TIME) as s:  # a reader without the runtime's types
        assert s.skipped == SNAPSHOT_AT_CLOSE_MIN_EVENTS
        s.save_snapshot()
    with session.open(p, readonly=True, clock=lambda: FIXED_TIME) as s:
        assert s.snapshot_seq > 0 and s.skipped == SNAPSHOT_AT_CLOSE_MIN_EVENTS  # the same registry uses it
    with session.open(p, registry=writer, clock=lambda: FIXED_TIME) as s:
        assert s.snapshot_seq == 0 and "another event-type registry" in (s.snapshot_reason or ""), s.snapshot_reason
        assert s.skipped == 0  # what a full replay with this registry counts
        s.save_snapshot()
    with session.open(p, registry=writer, readonly=True, clock=lambda: FIXED_TIME) as s:
        assert s.snapshot_seq > 0 and s.skipped == 0


def test_skipped_events_at_the_end_are_counted_once_across_opens_and_repairs(tmp_path: Path) -> None:
    """Events of a type the reader does not know (marked ignorable) at the end of the log are
    after the state's last seq: an open from a snapshot saved there, and the fold after a
    repair's closers, read them again and must not count them again."""
    cache_hit = session.EventType("myrt.cache_hit", session.DurabilityClass.ORDINARY, ignorable=True)
    writer = session.Registry()
    writer.register(cache_hit)
    p = tmp_path / "s"
    with session.open(p, create=True, registry=writer, clock=lambda: FIXED_TIME) as s:
        s.append("turn.started", {}, turn_id="t1")  # left open: the next open's repair closes it
        for i in range(5):
            s.append("myrt.cache_hit", {"n": i})
    with session.open(p, clock=lambda: FIXED_TIME) as s:  # repairs, then folds its closer
        assert s.repair_report is not None and s.repair_report.changed
        assert s.skipped == 5
    with session.open(p, registry=writer, clock=lambda: FIXED_TIME) as s:  # the log ends with them again
        for i in range(3):
            s.append("myrt.cache_hit", {"n": 5 + i})
    for _ in range(3):
        with session.open(p, clock=lambda: FIXED_TIME) as s:
            assert s.skipped == 8, (s.snapshot_seq, s.skipped)
            s.save_snapshot()
    with session.open(p, readonly=True, clock=lambda: FIXED_TIME) as s:
        assert s.snapshot_seq > 0 and s.skipped == 8
    with session.open(p, snapshot=False, clock=lambda: FIXED_TIME) as s:
        assert s.skipped == 8  # what a full replay counts


def test_damaged_checksum(tmp_path: Path) -> None:
    p = _session(tmp_path)
    data = bytearray(snap_file(p).read_bytes())
    data[40] ^= 0x01  # inside the head line
    snap_file(p).write_bytes(bytes(data))
    _falls_back(p, "checksum mismatch", tmp_path)


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    p = _session(tmp_path)
    elsewhere = tmp_path / "elsewhere.snap"
    shutil.move(snap_file(p), elsewhere)
    os.symlink(elsewhere, snap_file(p))  # a whole, matching snapshot: refused all the same
    _falls_back(p, "which a session snapshot never is", tmp_path)
    with session.open(p, clock=lambda: FIXED_TIME) as s:  # a writer replaces the link, never writes through it
        add_turns(s, random.Random(1), 8, 70)
    assert not snap_file(p).is_symlink()
    assert elsewhere.read_bytes().startswith(snap.SESSION_MAGIC)
    assert session.open(p, readonly=True).snapshot_seq > 0


def test_truncated(tmp_path: Path) -> None:
    p = _session(tmp_path)
    data = snap_file(p).read_bytes()
    snap_file(p).write_bytes(data[: len(data) - 7])
    _falls_back(p, "torn or truncated", tmp_path)


def test_beyond_the_journals_last_seq(tmp_path: Path) -> None:
    long = _session(tmp_path, "long", turns=8)
    short = tmp_path / "short"
    write_session(str(short), 3, 4).close()  # the same first events, fewer of them
    shutil.copy(snap_file(long), snap_file(short))
    _falls_back(short, "no longer holds seq", tmp_path)


def test_after_drop_prefix(tmp_path: Path) -> None:
    """A snapshot whose record was dropped: a fallback, which behaves as an open without one."""
    p = tmp_path / "s"
    s = write_session(str(p), 5, 4)
    assert s.save_snapshot()
    s.journal.seal()  # type: ignore[attr-defined]
    add_turns(s, random.Random(5), 4, 40)
    at = s.journal.last_seq
    s.journal.sync()
    s.journal.seal()  # type: ignore[attr-defined]
    s.journal.append({"schemaVersion": 1, "sessionId": s.session_id, "type": "user.message",
                      "time": FIXED_TIME, "data": {"text": "after"}}, durability="sync")
    s.journal.drop_prefix(at)  # type: ignore[attr-defined]
    s.journal.close()
    twin_p = twin(p, tmp_path, "twin")
    with pytest.raises(Exception) as full_exc:
        session.open(twin_p, readonly=True)
    with pytest.raises(type(full_exc.value)) as got:
        session.open(p, readonly=True)
    assert str(got.value) == str(full_exc.value)


def test_a_damaged_history_part_replays_when_first_used(tmp_path: Path) -> None:
    """The head verifies, a history part does not: the open uses the head, and the first use of
    the history replays the log instead of trusting the part."""
    p = _session(tmp_path)
    data = bytearray(snap_file(p).read_bytes())
    at = data.rindex(b"answer")  # an assistant text in the last history part: still valid JSON
    data[at] = ord("A")
    snap_file(p).write_bytes(bytes(data))
    full, _ = outcome(twin(p, tmp_path, "twin"), False, readonly=True)
    got, s = outcome(p, True, readonly=True)
    assert s.snapshot_seq > 0
    got.pop("lazy"), full.pop("lazy")
    assert got == full


def test_a_crafted_core_is_only_a_cache(tmp_path: Path) -> None:
    p = _session(tmp_path)
    saved, parts = snap.read_session(str(snap_file(p)))
    parts.close()
    core = json.loads(json.dumps(saved.core))
    hot_tools = core["hot"]["tools"]
    from journal.session.state import _ROW_FIELDS, ToolCall

    row: list[Any] = ["evil", "bash", None, "process", "unsafe", "not a seq"]
    hot_tools["evil"] = row + [None] * (len(_ROW_FIELDS[ToolCall]) - len(row))  # the right shape, a wrong type
    _rewrite(p, core=core)
    _falls_back(p, "does not load", tmp_path)


# --- saving -------------------------------------------------------------------------------------


class FailingSnapshotFsync(OsFileSystem):
    """The real file system, except that syncing a session snapshot's temp file fails (EIO)."""

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        if path.endswith(SESSION_SNAPSHOT_NAME + snap.TMP_SUFFIX):

            def fail() -> None:
                raise OSError(errno.EIO, "injected fsync failure", path)

            f.fsync = fail  # type: ignore[method-assign]
            f.fdatasync = fail  # type: ignore[method-assign]
        return f


def test_a_failed_snapshot_save_loses_nothing_and_is_not_retried(tmp_path: Path) -> None:
    """The snapshot is a cache: its fsync failing neither fails the append or the close nor
    touches the journal or the snapshot already there; the session warns and saves no more."""
    p = _session(tmp_path)
    before = snap_file(p).read_bytes()
    s = session.open(p, clock=lambda: FIXED_TIME, fs=FailingSnapshotFsync())
    add_turns(s, random.Random(2), 8, 60)
    assert s._since_snapshot >= SNAPSHOT_AT_CLOSE_MIN_EVENTS
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert s.save_snapshot() is False
        assert s.save_snapshot() is False  # not tried again
        s.close()
    assert [w.category for w in caught] == [SnapshotWriteWarning]
    assert isinstance(s.snapshot_error, OSError)
    assert snap_file(p).read_bytes() == before  # the old snapshot, whole
    full, _ = outcome(twin(p, tmp_path, "twin"), False)
    got, s2 = outcome(p, True)
    assert s2.snapshot_seq > 0
    got.pop("lazy"), full.pop("lazy")
    assert got == full


def test_saves_add_to_the_history_without_losing_or_doubling_any(tmp_path: Path) -> None:
    """Three lives, each opened lazily, appending and saving twice: the state is the log's."""
    p = _session(tmp_path)
    rng = random.Random(9)
    for life in range(3):
        with session.open(p, clock=lambda: FIXED_TIME) as s:
            assert not s.state.history_loaded
            add_turns(s, rng, 4, 200 + 20 * life)
            assert s.save_snapshot()
            if life == 1:
                s.state.messages()  # loads the history part way through
            add_turns(s, rng, 4, 210 + 20 * life)
    full, _ = outcome(twin(p, tmp_path, "twin"), False, readonly=True)
    got, _ = outcome(p, True, readonly=True)
    got.pop("lazy"), full.pop("lazy")
    assert got == full


def test_a_read_only_open_never_writes_the_snapshot(tmp_path: Path) -> None:
    p = tmp_path / "s"
    s = write_session(str(p), 4, 8)
    s.journal.close()  # a crash: no snapshot was saved
    assert not snap_file(p).exists()
    with session.open(p, readonly=True) as r:
        assert r.snapshot_seq == 0 and r.save_snapshot() is False
    assert not snap_file(p).exists()


def test_lazy_state_equals_and_copies_like_a_whole_one(tmp_path: Path) -> None:
    import copy

    p = _session(tmp_path)
    lazy = session.open(p, readonly=True).state
    whole = session.open(p, readonly=True, snapshot=False).state
    assert not lazy.history_loaded
    assert copy.deepcopy(lazy) == whole == lazy
    assert isinstance(lazy, SessionState) and lazy.history_loaded


def test_the_gate_on_a_lazy_state_sees_the_side_effects_in_the_history(tmp_path: Path) -> None:
    """Every call closed before the snapshot: none is open, the history alone says a tool with a
    side effect ran, and the gate still pauses for authorization."""
    p = _session(tmp_path)
    got, s = outcome(p, True, readonly=True)
    full, _ = outcome(twin(p, tmp_path, "twin"), False, readonly=True)
    assert s.snapshot_seq > 0 and got["lazy"]
    assert "SIDE_EFFECTS_NEED_AUTHORIZATION" in [r.code for r in got["gates"][0][1]]
    got.pop("lazy"), full.pop("lazy")
    assert got == full


def test_a_closed_call_changed_after_a_save_is_saved_again(tmp_path: Path) -> None:
    """A reconcile of a call the last snapshot holds as history: the next save holds the change."""
    p = _session(tmp_path)
    with session.open(p, clock=lambda: FIXED_TIME) as s:
        done = [t for t in (s.state.lookup("tools", f"t{k}.0.c") for k in range(8)) if t is not None]
        assert done and done[0].has_result
        s.append("tool.reconciled", {"outcome": "applied"}, tool_call_id=done[0].tool_call_id)
        add_turns(s, random.Random(4), 8, 90)  # enough to save at close
    got, r = outcome(p, True, readonly=True)
    full, _ = outcome(twin(p, tmp_path, "twin"), False, readonly=True)
    assert r.snapshot_seq > 0
    got.pop("lazy"), full.pop("lazy")
    assert got == full
    assert r.state.tools[done[0].tool_call_id].reconciled == "applied"


def test_the_gate_takes_the_live_state_and_reads_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resume_gate evaluates the state the session holds (opened and appended to), without
    reading the journal again: its verdict follows an append made after the open."""
    p = _session(tmp_path)
    with session.open(p, clock=lambda: FIXED_TIME) as s:
        before = s.resume_gate(ResumeChecks(authorized=True))
        s.append("turn.started", turn_id="late")
        s.append("tool.requested", {"tool": "bash", "sideEffect": "process"}, turn_id="late", tool_call_id="late.c")
        s.append("tool.started", turn_id="late", tool_call_id="late.c")

        def no_reads(*_: Any, **__: Any) -> Any:
            raise AssertionError("the gate read the journal")

        monkeypatch.setattr(s.journal, "read", no_reads)
        after = s.resume_gate(ResumeChecks(authorized=True))
        monkeypatch.undo()
    assert "TOOL_PENDING" not in before.codes() and "TOOL_PENDING" in after.codes()


def test_a_lazy_state_dropped_unused_closes_its_snapshot_file(tmp_path: Path) -> None:
    import gc

    p = _session(tmp_path)
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    gc.collect()  # what earlier tests left is closed first
    before = fds()
    held = [session.open(p, readonly=True) for _ in range(20)]
    for s in held:
        s.close()
        assert not s.state.history_loaded
    assert fds() >= before + 20  # each lazy state holds its snapshot file open
    del held, s
    gc.collect()
    assert fds() == before


def test_a_crafted_open_structure_is_only_a_cache(tmp_path: Path) -> None:
    """An opening event in the snapshot is checked as a record of the journal is."""
    p = _session(tmp_path)
    saved, parts = snap.read_session(str(snap_file(p)))
    parts.close()
    dangling = json.loads(json.dumps(saved.dangling))
    dangling["turns"]["evil"] = [3, False, {"schemaVersion": 1, "sessionId": 7, "type": "turn.started", "data": {}}]
    _rewrite(p, dangling=dangling)
    _falls_back(p, "does not load", tmp_path)


def test_a_snapshot_kept_elsewhere(tmp_path: Path) -> None:
    """``snapshot=`` a path: saved there (its directory made), used from there, none in the journal."""
    p, elsewhere = tmp_path / "s", tmp_path / "snaps" / "s1.snap"
    s = write_session(str(p), 6, 4, snapshot=str(elsewhere))
    assert s.save_snapshot()
    s.close()
    assert elsewhere.exists() and not snap_file(p).exists()
    with session.open(p, readonly=True, snapshot=str(elsewhere)) as r:
        assert r.snapshot_seq > 0
    with session.open(p, readonly=True, snapshot=False) as r:
        assert r.snapshot_seq == 0 and r.snapshot_reason == "no snapshot is kept for this journal"
