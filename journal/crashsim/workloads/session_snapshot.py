"""The session-snapshot workload for the crash harness (journal.crashsim): a power loss inside a save.

Importing this module registers the workload "session-snapshot". Its starting image is a session
in ``/j`` with a snapshot of the built-in reducer saved part way (``/snaps/journal.session.snap``),
more events appended after it, sometimes a stale ``.tmp`` left by an earlier crashed save, and a
plan file (``/snapshot-plan.json``: the old snapshot's bytes and those an uncrashed save writes).
The recorded run is one ``snapshot.take``: resume from the old snapshot, then temp file, fsync,
rename, directory fsync. The harness crashes it at every point and recovers each image with
``recover_and_check``: the core invariants on the journal (read through the core alone), and

* the snapshot file is the old one or the new one, byte for byte: never a mix, never missing;
* ``resume`` returns exactly the state (and last seq) of a full replay of the image's journal,
  never an error; it starts from the snapshot the file holds (both match the journal), and a
  rebuild from seq 1 would have to say why;
* saving again on the image (a leftover temp file included) writes the new snapshot.

The checks that write run on a copy of the image.
"""

from __future__ import annotations

import json
from typing import Any, cast

from journal import api
from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, Ledger, workload
from journal.crashsim.workloads.session_fork import CheckCache, image_key, talk
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.fs import FileSystem, read_file, write_new
from journal.session import snapshot
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry
from journal.session.session import Session

SESSION_ID = "s-snapshot"
SNAP_PATH = "/snaps/journal.session.snap"
PLAN_PATH = "/snapshot-plan.json"
FIXED_TIME = "2026-01-01T00:00:00Z"
SEGMENT_BYTES = 4096


_CHECKED = CheckCache()


class SessionSnapshotViolation(AssertionError):
    """A snapshot invariant failed on a recovered crash image."""


def _take(fs: FileSystem, j: api.Journal) -> snapshot.Resumed[Any]:
    return snapshot.take(j, Registry(), SessionReducer(), SNAP_PATH, fs)


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    rng = ctx.rng
    # Written without npsow's sector padding (one segment per synced event otherwise): the run
    # never writes the journal, only the snapshot file.
    s = Session.attach(cast(Journal, ctx.open(sector_bytes=0)), create=True, session_id=SESSION_ID,
                       clock=lambda: FIXED_TIME, workspace={"path": "/repo"})
    before = rng.randint(1, 3)
    talk(s, rng, before)
    s.journal.sync()
    _take(fs, s.journal)
    old = read_file(fs, SNAP_PATH)
    talk(s, rng, rng.randint(1, 3), first=before)
    if rng.random() < 0.5:  # end inside a turn: the state has an open turn and a pending tool
        s.append("user.message", {"text": "one more thing"})
        s.append("turn.started", turn_id="open")
        s.append("tool.requested", {"tool": "bash", "sideEffect": "process"}, turn_id="open", tool_call_id="oc")
    s.journal.sync()
    s.journal.close()
    if rng.random() < 0.3:  # an earlier save crashed after writing part of its temp file
        write_new(fs, SNAP_PATH + snapshot.TMP_SUFFIX, old[: rng.randrange(1, len(old))])
    clone = MemFileSystem.from_image(fs.snapshot())
    with Journal.open(JOURNAL_PATH, fs=clone, readonly=True) as j:
        _take(clone, j)
    plan = {"old": old.hex(), "new": read_file(clone, SNAP_PATH).hex()}
    write_new(fs, PLAN_PATH, json.dumps(plan, sort_keys=True).encode())
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


def check_snapshot(fs: MemFileSystem, j: Journal) -> list[str]:
    """The snapshot invariants of one recovered image (violations as strings)."""
    plan = json.loads(read_file(fs, PLAN_PATH))
    old, new = bytes.fromhex(plan["old"]), bytes.fromhex(plan["new"])
    out: list[str] = []
    on_disk = read_file(fs, SNAP_PATH) if fs.exists(SNAP_PATH) else None
    if on_disk is None:
        out.append("the snapshot file is gone")
    elif on_disk not in (old, new):
        out.append(f"the snapshot file is neither the old one nor the new one ({len(on_disk)} bytes)")
    registry, reducer = Registry(), SessionReducer()
    full = snapshot.resume(j, registry, reducer, None)
    try:
        got = snapshot.resume(j, registry, reducer, SNAP_PATH, fs)
    except Exception as exc:
        return [*out, f"resume raised {type(exc).__name__}: {exc}"]
    if reducer.dump(got.state) != reducer.dump(full.state) or got.replayed.last_seq != full.replayed.last_seq:
        out.append(f"resume (snapshot seq {got.snapshot_seq}) gives a state that a full replay does not")
    if got.from_snapshot:
        if on_disk is None or got.snapshot_seq != snapshot.decode_file(on_disk).last_seq:
            out.append(f"resume started from seq {got.snapshot_seq}, which no snapshot on disk holds")
    elif not got.rebuild_reason:
        out.append("resume replayed from seq 1 without saying why")
    elif on_disk in (old, new):
        out.append(f"resume rebuilt from seq 1 although the snapshot on disk is whole: {got.rebuild_reason}")
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    try:
        with Journal.open(JOURNAL_PATH, fs=clone, readonly=True) as cj:
            _take(clone, cj)
    except Exception as exc:
        return [*out, f"saving again after the crash raised {type(exc).__name__}: {exc}"]
    if read_file(clone, SNAP_PATH) != new:
        out.append("saving again after the crash does not write the snapshot an uncrashed save writes")
    return out


def _is_session_event(r: Record) -> bool:
    return not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Core recovery of the journal, then the snapshot checks -- unless the harness appended its
    own records after recovery (invariant 6): those images get the core checks only."""
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        recs = list(j.read())
        ours = bool(recs) and all(_is_session_event(r) for r in recs)
        problems: list[str] = []
        if ours and isinstance(fs, MemFileSystem) and fs.exists(PLAN_PATH):
            key = image_key(fs)
            cached = _CHECKED.get(key)
            problems = check_snapshot(fs, j) if cached is None else cached
            _CHECKED.put(key, problems)
    finally:
        j.close()
    if problems:
        raise SessionSnapshotViolation("; ".join(problems))
    return recs


@workload(
    "session-snapshot",
    recover=recover_and_check,
    prepare=_first_life,
    segment_size_bytes=SEGMENT_BYTES,
    reserve_bytes=CRASH_RESERVE_BYTES,
)
def session_snapshot(ctx: Ctx) -> None:
    """Save a new snapshot over an old one: resume from it, temp file, fsync, rename, dir fsync."""
    j = ctx.open(create=False)
    try:
        _take(ctx.fs, cast(Journal, j))
    finally:
        j.close()


__all__ = ["SNAP_PATH", "SessionSnapshotViolation", "check_snapshot", "recover_and_check", "session_snapshot"]
