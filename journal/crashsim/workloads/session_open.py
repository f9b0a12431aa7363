"""The session-open workload for the crash harness: a power loss while a session opens from its
snapshot, repairs, appends and saves snapshots (issue 33).

The built-in workload "session-open" (journal/crashsim/workloads/__init__.py). Its starting image is
a session in ``/j`` with a session snapshot saved part way and more events after it, sometimes
ending inside a turn. The recorded run is one life of the session: open (from the snapshot and the
tail; repair closes what was open), append turns, save a snapshot, append more, save again and
close. The harness crashes it at every point and recovers each image with ``recover_and_check``: the
core invariants on the journal, and, on two copies of the image, that opening from the snapshot
decides exactly what a full replay decides (the state, the repair's closers and the records they
make, the gate verdicts), and that a snapshot file that survived the crash is used (every save syncs
the journal first, so a snapshot on disk never names a record the crash took).
"""

from __future__ import annotations

from typing import Any, cast

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, Ledger, workload
from journal.crashsim.workloads.session_fork import CheckCache, image_key, talk
from journal.engine import live_hint
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.errors import JournalError
from journal.fs import FileSystem
from journal.session.gate import ResumeChecks
from journal.session.session import SESSION_SNAPSHOT_NAME, Session

SESSION_ID = "s-open"
FIXED_TIME = "2026-01-01T00:00:00Z"
SEGMENT_BYTES = 4096
SNAP = JOURNAL_PATH + "/" + SESSION_SNAPSHOT_NAME

_CHECKED = CheckCache()
_HINT_CHECKED = CheckCache()


class SessionOpenViolation(AssertionError):
    """An open from the snapshot decided otherwise than a full replay on a recovered image."""


def _attach(j: Any, fs: FileSystem, snapshot: bool = True) -> Session:
    return Session.attach(cast(Journal, j), fs=fs, snapshot=snapshot, clock=lambda: FIXED_TIME)


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    rng = ctx.rng
    s = Session.attach(cast(Journal, ctx.open()), create=True, session_id=SESSION_ID,
                       clock=lambda: FIXED_TIME, workspace={"path": "/repo"}, fs=fs)
    talk(s, rng, rng.randint(1, 3))
    assert s.save_snapshot(), s.snapshot_error
    talk(s, rng, rng.randint(0, 2), first=10)
    if rng.random() < 0.5:  # end inside a turn: the next open repairs it
        s.append("turn.started", turn_id="open")
        s.append("tool.requested", {"tool": "bash", "sideEffect": "process"}, turn_id="open", tool_call_id="oc")
        s.append("tool.started", turn_id="open", tool_call_id="oc")
    s.journal.sync()
    s.journal.close()  # no save at close: the next open has a tail to read
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


def _decisions(s: Session) -> dict[str, Any]:
    gates = [s.resume_gate(ResumeChecks(authorized=a)) for a in (False, True)]
    rep = s.repair_report
    return {
        "gates": [(g.decision, g.reasons) for g in gates],
        "repair": None if rep is None else ([c.to_dict() for c in rep.closers], rep.kept, rep.events_scanned),
        "skipped": s.skipped,
        "state": s.state,
        "records": [(r.seq, r.payload, r.synthetic, r.key) for r in s.journal.read()],
    }


def check_open(fs: MemFileSystem, options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    fast_fs = MemFileSystem.from_image(fs.snapshot())
    full_fs = MemFileSystem.from_image(fs.snapshot())
    for c in (fast_fs, full_fs):
        c.record_reads = False
    had_snapshot = fs.exists(SNAP)
    try:
        fast = _attach(Journal.open(JOURNAL_PATH, fs=fast_fs, **options), fast_fs)
        full = _attach(Journal.open(JOURNAL_PATH, fs=full_fs, **options), full_fs, snapshot=False)
    except Exception as exc:
        return [f"opening the recovered session raised {type(exc).__name__}: {exc}"]
    try:
        if had_snapshot and fast.snapshot_seq == 0:
            out.append(f"the snapshot on disk was not used: {fast.snapshot_reason}")
        a, b = _decisions(fast), _decisions(full)
        for key in a:
            if a[key] != b[key]:
                out.append(f"open from the snapshot (seq {fast.snapshot_seq}) differs from a full replay in {key}")
    finally:
        fast.close()
        full.close()
    return out


def _readonly_view(fs: MemFileSystem, options: dict[str, Any]) -> tuple[Any, ...]:
    """What a read-only open of the image finds: (last seq, records), or the error it raises."""
    try:
        with Journal.open(JOURNAL_PATH, readonly=True, fs=fs, **options) as r:
            return ("ok", r.last_seq, [(x.seq, x.payload) for x in r.read()])
    except JournalError as exc:
        return (type(exc).__name__, str(exc))


def check_hint(fs: MemFileSystem, options: dict[str, Any]) -> list[str]:
    """A read-only open that starts from LIVE.hint (journal/engine/live_hint.py) finds what the
    full scan finds: the same last seq and records, or the same refusal."""
    hinted, plain = MemFileSystem.from_image(fs.snapshot()), MemFileSystem.from_image(fs.snapshot())
    hint_path = JOURNAL_PATH + "/" + live_hint.HINT_FILE
    if not plain.exists(hint_path):
        return []
    plain.unlink(hint_path)
    for c in (hinted, plain):
        c.record_reads = False
    a, b = _readonly_view(hinted, options), _readonly_view(plain, options)
    if a != b:
        return [f"a read-only open with LIVE.hint finds {a[:2]}, the full scan {b[:2]}"]
    return []


def _hint_problems(fs: FileSystem, options: dict[str, Any]) -> list[str]:
    if not isinstance(fs, MemFileSystem) or not fs.exists(JOURNAL_PATH):
        return []
    key = image_key(fs)
    cached = _HINT_CHECKED.get(key)
    problems = check_hint(fs, options) if cached is None else cached
    _HINT_CHECKED.put(key, problems)
    return problems


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Core recovery, then the open checks -- unless the harness appended its own records after
    recovery (invariant 6): those images get the core checks only. On the crashed image and on
    the recovered one, a read-only open with LIVE.hint is checked against one without it."""
    hint_problems = _hint_problems(fs, options)  # the image as the crash left it
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        recs = list(j.read())
    finally:
        j.close()
    ours = bool(recs) and all(not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event
                              for r in recs)
    problems: list[str] = hint_problems + _hint_problems(fs, options)  # and as recovery left it
    if ours and isinstance(fs, MemFileSystem):
        key = image_key(fs)
        cached = _CHECKED.get(key)
        opened = check_open(fs, options) if cached is None else cached
        _CHECKED.put(key, opened)
        problems += opened
    if problems:
        raise SessionOpenViolation("; ".join(problems))
    return recs


@workload(
    "session-open",
    recover=recover_and_check,
    prepare=_first_life,
    segment_size_bytes=SEGMENT_BYTES,
    reserve_bytes=CRASH_RESERVE_BYTES,
)
def session_open(ctx: Ctx) -> None:
    """One life: open from the snapshot (repair), append, save, append, save, close."""
    s = _attach(ctx.open(create=False), ctx.fs)
    talk(s, ctx.rng, ctx.rng.randint(1, 2), first=20)
    _stream(s, "a20")  # buffered events last: the save's own journal sync is what makes them durable
    s.save_snapshot()
    talk(s, ctx.rng, 1, first=30)
    _stream(s, "a30")
    s.save_snapshot()
    s.close()


def _stream(s: Session, attempt: str) -> None:
    for k in range(3):
        s.append("assistant.delta", {"text": f"chunk {k}"}, attempt_id=attempt)
