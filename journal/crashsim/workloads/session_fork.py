"""The session-fork workload for the crash harness (journal.crashsim): a power loss inside a fork.

Importing this module registers the workload "session-fork". Its starting image is a finished
session of a few turns with tool calls in ``/j``, written with 4 KiB segments so that at least
one is sealed, and a plan file (``/fork-plan.json``: the fork seq F, the child's id and time,
the hash of every parent file, the records of an uncrashed fork). The recorded run is one fork
of that session at a clean point into ``/child`` (sometimes at the last record of a sealed
segment, so the child starts with no live segment of its own). The harness crashes it at every
point and recovers each image with ``recover_and_check``, which holds the core invariants on
the parent (it reads through the core alone) and the fork's own:

* the parent's files are byte for byte as before the fork (the fork never writes the parent);
* ``/child`` does not exist, or it is a whole journal: it opens with nothing to recover, records
  1..F are the parent's byte for byte, F+1 is the fork's session.started, and nothing follows;
  a half-built child is never visible under that name;
* running the fork again on the image (any leftover temp directory still there) succeeds when
  there is no child, and either way the child holds the records of an uncrashed fork.

The checks run on copies of the image, so the harness's own checks (recovering twice gives the
same files) see only what recovery did.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any, cast

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, Ledger, workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.fs import FileSystem, read_all
from journal.session import fork as forking
from journal.session.envelope import decode
from journal.session.registry import Registry
from journal.session.session import Session

SESSION_ID = "s-fork-parent"
CHILD_ID = "s-fork-child"
CHILD_PATH = "/child"
PLAN_PATH = "/fork-plan.json"
FIXED_TIME = "2026-01-01T00:00:00Z"
SEGMENT_BYTES = 4096


class SessionForkViolation(AssertionError):
    """A fork invariant failed on a recovered crash image."""


def talk(s: Session, rng: Any, turns: int, first: int = 0) -> None:
    """``turns`` finished turns (ids from ``first``): user message, steps with tool calls, answers."""
    for t in range(first, first + turns):
        tid = f"t{t}"
        # A large user message now and then fills a segment, so a turn's end is often the last
        # record of a sealed segment (a fork there copies no live segment).
        size = rng.choice((20, 60, 2500, 3400))
        s.append("user.message", {"text": f"request {t} " + rng.randbytes(size // 2).hex()})
        s.append("turn.started", turn_id=tid)
        for k in range(rng.randint(1, 2)):
            sid, call = f"{tid}.{k}", f"{tid}.{k}.c"
            s.append("step.started", turn_id=tid, step_id=sid)
            s.append("assistant.message", {"text": f"let me look ({t}.{k})"}, turn_id=tid, step_id=sid,
                     attempt_id=f"{sid}.a")
            if rng.random() < 0.8:
                s.append("tool.requested", {"tool": "bash", "args": {"cmd": "ls"}, "sideEffect": "process"},
                         turn_id=tid, step_id=sid, tool_call_id=call)
                s.append("tool.started", turn_id=tid, step_id=sid, tool_call_id=call)
                s.append("tool.result", {"status": "ok", "output": "y" * rng.randrange(0, 600)}, turn_id=tid,
                         step_id=sid, tool_call_id=call)
                s.append("assistant.message", {"text": f"done {t}.{k}"}, turn_id=tid, step_id=sid,
                         attempt_id=f"{sid}.b")
            s.append("step.ended", {"reason": "completed"}, turn_id=tid, step_id=sid)
        s.append("turn.ended", {"reason": "completed"}, turn_id=tid)


def _files_under(fs: FileSystem, directory: str) -> dict[str, str]:
    """sha256 of every file in ``directory`` (one level: a journal directory has no subdirectory)."""
    out: dict[str, str] = {}
    for name in fs.listdir(directory):
        path = posixpath.join(directory, name)
        if fs.is_dir(path):
            out[name] = "<dir>"
            continue
        f = fs.open_read(path)
        try:
            out[name] = hashlib.sha256(read_all(f)).hexdigest()
        finally:
            f.close()
    return out


def _records(fs: FileSystem, path: str, options: dict[str, Any]) -> tuple[list[Record], list[str]]:
    """The records of the journal at ``path`` and what its recovery did (actions, quarantined)."""
    j = Journal.open(path, fs=fs, **options)
    try:
        return list(j.read()), [str(a) for a in j.recovery.actions] + [str(q) for q in j.recovery.quarantined]
    finally:
        j.close()


def _digest(recs: list[Record]) -> str:
    h = hashlib.sha256()
    for r in recs:
        h.update(b"%d|%d|%d|%s|" % (r.seq, r.is_bytes, r.synthetic, (r.key or "").encode()) + r.payload)
    return h.hexdigest()


def _fork(fs: FileSystem, plan: dict[str, Any]) -> forking.ForkResult:
    return forking.fork(JOURNAL_PATH, CHILD_PATH, plan["at"], session_id=CHILD_ID, origin="crash-test",
                        fs=fs, time=FIXED_TIME)


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    # The parent is only read by the fork, so it is written without the sector padding npsow adds
    # (padding every synced event would put each in a segment of its own).
    s = Session.attach(cast(Journal, ctx.open(sector_bytes=0)), create=True, session_id=SESSION_ID,
                       clock=lambda: FIXED_TIME, workspace={"path": "/repo"})
    talk(s, ctx.rng, ctx.rng.randint(3, 5))
    s.journal.sync()
    s.close()
    points = forking.fork_points(JOURNAL_PATH, fs=fs)
    bases = {int(n.split(".")[0]) for n in fs.listdir(JOURNAL_PATH) if n.endswith(".seg")}
    at_seal = [p.last_seq for p in points if p.last_seq + 1 in bases]
    if at_seal and ctx.rng.random() < 0.4:
        at = ctx.rng.choice(at_seal)
    else:
        p = ctx.rng.choice(points)
        at = ctx.rng.choice((p.seq, p.last_seq))
    plan: dict[str, Any] = {"at": at, "parent": _files_under(fs, JOURNAL_PATH)}
    # What an uncrashed fork gives: the records every child, first or retried, must hold.
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    _fork(clone, plan)
    plan["child"] = _digest(_records(clone, CHILD_PATH, {})[0])
    f = fs.open_write(PLAN_PATH, create=True)
    f.pwrite(json.dumps(plan, sort_keys=True).encode(), 0)
    f.close()
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


def _plan(fs: FileSystem) -> dict[str, Any]:
    f = fs.open_read(PLAN_PATH)
    try:
        return cast(dict[str, Any], json.loads(read_all(f)))
    finally:
        f.close()


def check_child(fs: FileSystem, plan: dict[str, Any], parent: list[Record], label: str) -> list[str]:
    """The child at CHILD_PATH is a whole journal holding the parent's 1..F and the fork header."""
    at = plan["at"]
    try:
        recs, recovered = _records(fs, CHILD_PATH, {})
    except Exception as exc:
        return [f"{label}: the child does not open: {type(exc).__name__}: {exc}"]
    out: list[str] = []
    if recovered:
        out.append(f"{label}: opening the child had recovery to do: {recovered[:3]}")
    if [r.seq for r in recs] != list(range(1, at + 2)):
        return [*out, f"{label}: the child holds seqs {[r.seq for r in recs][-5:]}..., not 1..{at + 1}"]
    mine = [(r.seq, r.payload, r.key, r.synthetic) for r in recs[:at]]
    if mine != [(r.seq, r.payload, r.key, r.synthetic) for r in parent[:at]]:
        out.append(f"{label}: the child's records 1..{at} are not the parent's")
    item = decode(recs[at], Registry())
    ev = item[0] if item is not None else None
    if ev is None or ev.type != "session.started" or ev.session_id != CHILD_ID or \
            ev.data.get("lineage", {}).get("forkSeq") != at:
        out.append(f"{label}: record {at + 1} of the child is not the fork's session.started")
    if not out and _digest(recs) != plan["child"]:
        out.append(f"{label}: the child's records differ from those of an uncrashed fork")
    return out


def check_fork(fs: MemFileSystem, parent: list[Record], parent_files: dict[str, str]) -> list[str]:
    """The fork invariants of one recovered image (violations as strings)."""
    plan = _plan(fs)
    out: list[str] = []
    if parent_files != plan["parent"]:
        changed = sorted(set(parent_files) ^ set(plan["parent"]) |
                         {n for n in parent_files if parent_files[n] != plan["parent"].get(n)})
        out.append(f"the fork changed the parent's files: {changed}")
    image = fs.snapshot()
    if fs.exists(CHILD_PATH):
        out.extend(check_child(fs, plan, parent, "after the crash"))
        return out
    clone = MemFileSystem.from_image(image)
    clone.record_reads = False
    try:
        _fork(clone, plan)
    except Exception as exc:
        return [*out, f"forking again after the crash raised {type(exc).__name__}: {exc}"]
    out.extend(check_child(clone, plan, parent, "forked again after the crash"))
    return out


def _is_session_event(r: Record) -> bool:
    return not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event


def image_key(fs: MemFileSystem) -> bytes:
    """A digest of everything on ``fs``: the checks are a function of the image, so the harness's
    second recovery of an image that recovery left unchanged need not run them again."""
    files, dirs = fs.snapshot()
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(files):
        h.update(path.encode() + b"\0" + len(files[path]).to_bytes(8, "little") + files[path])
    for d in sorted(dirs):
        h.update(b"D" + d.encode() + b"\0")
    return h.digest()


class CheckCache:
    """The violations found on the last few images, by image digest."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._seen: dict[bytes, list[str]] = {}

    def get(self, key: bytes) -> list[str] | None:
        return self._seen.get(key)

    def put(self, key: bytes, problems: list[str]) -> None:
        if len(self._seen) >= self._size:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = problems


_CHECKED = CheckCache()


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Core recovery of the parent, then the fork checks -- unless the harness appended its own
    records to the parent after recovery (invariant 6): those images get the core checks only."""
    parent_files = _files_under(fs, path) if fs.exists(path) else {}
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        recs = list(j.read())
    finally:
        j.close()
    ours = bool(recs) and all(_is_session_event(r) for r in recs)
    if ours and isinstance(fs, MemFileSystem) and fs.exists(PLAN_PATH):
        key = image_key(fs)
        problems = _CHECKED.get(key)
        if problems is None:
            problems = check_fork(fs, recs, parent_files)
            _CHECKED.put(key, problems)
        if problems:
            raise SessionForkViolation("; ".join(problems))
    return recs


@workload(
    "session-fork",
    recover=recover_and_check,
    prepare=_first_life,
    segment_size_bytes=SEGMENT_BYTES,
    reserve_bytes=CRASH_RESERVE_BYTES,
)
def session_fork(ctx: Ctx) -> None:
    """Fork a finished session at a clean point: temp directory, copied prefix, header, rename."""
    _fork(ctx.fs, _plan(ctx.fs))


__all__ = ["CHILD_PATH", "SessionForkViolation", "check_fork", "recover_and_check", "session_fork"]

