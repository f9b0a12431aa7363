"""Fork a session at a clean boundary into a new session journal; list the clean boundaries.

A fork copies a finished prefix of the past and gives it a new identity (seed 004, 14.5):

    parent  1 ... F ... N          unchanged, not a byte written
    child   1 ... F, F+1 = session.started {lineage: parentSessionId, forkSeq F, depth, origin}

The child keeps the parent's seqs (seed 003: never renumber, so seq F names the same event in
both), then starts its own future with a header that records where it came from. Storage is
shared, not copied: sealed segments are linked and only the segment holding F is cut
(the journal's copy_prefix, journal.api.PrefixCopier), so the cost does not grow with the sealed
history. The child seals its cut and saves its fork state at its header (FORK_SNAPSHOT_NAME), so
a fork of the child links the cut and checks from there: in a chain of forks each fork costs the
events since the last one, whatever the depth (copy_prefix keeps the number of linked segments
bounded by merging small ones). The child is built in a temporary directory, header and
snapshot included, and renamed into place, so a crash leaves either no child or a complete one.

Clean boundaries (seeds 003 and 004): right after a user message, or after an assistant message
that asked for no tool, and only when nothing is open there: no turn, step, tool call, approval,
streaming attempt, compaction or background job. An assistant message at the end of a turn is
therefore a clean point once the turn has ended (its step.ended and turn.ended are part of the
boundary). Anywhere else the child would start with a dangling structure that repair would have
to close, so ``fork`` refuses with the nearest clean points.
"""

from __future__ import annotations

import copy
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import journal
from journal.api import Committed, Journal, PrefixCopier, PrefixCopy, Retention
from journal.fs import FileSystem, OsFileSystem
from journal.session.envelope import Event, check_for_append, check_session_id, decode
from journal.session.errors import SessionError
from journal.session.registry import EventType, Registry, Role
from journal.session.replay import Replayed
from journal.session.session import new_session_id, utc_now
from journal.session.snapshot import SNAPSHOT_SUFFIX, SnapshotSource, resume, save

PREVIEW_CHARS = 60
# The fork state at a child's header, saved in the child's directory when it is built: a fork
# of that child checks its fork point from there and reads only the child's own events, so a
# chain of forks does not read the whole chain again at each step.
FORK_SNAPSHOT_NAME = "journal.fork" + SNAPSHOT_SUFFIX
# The lock file in a fork's temp directory, held until the rename (removed from the child then).
BUILD_LOCK_NAME = ".fork-build.lock"
NEAREST_MAX = 3  # clean points named on each side in a refusal

# role -> (structure kind, envelope attribute or data key holding its id, +1 opens / -1 closes / 0 neither)
_OPENERS: dict[Role, tuple[str, str, int]] = {
    Role.TURN_OPEN: ("turn", "turn_id", 1),
    Role.TURN_CLOSE: ("turn", "turn_id", -1),
    Role.STEP_OPEN: ("step", "step_id", 1),
    Role.STEP_CLOSE: ("step", "step_id", -1),
    Role.TOOL_REQUEST: ("tool call", "tool_call_id", 1),
    Role.TOOL_START: ("tool call", "tool_call_id", 1),
    Role.TOOL_RESULT: ("tool call", "tool_call_id", -1),
    Role.APPROVAL_OPEN: ("approval", "approval_id", 1),
    Role.APPROVAL_CLOSE: ("approval", "approval_id", -1),
    Role.ATTEMPT_DELTA: ("attempt", "attempt_id", 1),
    Role.ATTEMPT_CLOSE: ("attempt", "attempt_id", -1),
    Role.COMPACTION_OPEN: ("compaction", "data.compactionId", 1),
    Role.COMPACTION_CLOSE: ("compaction", "data.compactionId", -1),
    Role.COMPACTION_ROLLBACK: ("compaction", "data.compactionId", -1),
    Role.JOB_OPEN: ("job", "data.jobId", 1),
    Role.JOB_CLOSE: ("job", "data.jobId", -1),
}


class UncleanForkPointError(SessionError):
    """``fork`` was asked for a seq that is not a clean boundary; ``nearest`` lists ones that are."""

    def __init__(self, seq: int, why: str, nearest: list[ForkPoint]) -> None:
        near = ", ".join(p.describe() for p in nearest) or "none: this session has no clean boundary yet"
        super().__init__(f"seq {seq} is not a clean fork point ({why}); nearest clean points: {near}")
        self.seq = seq
        self.why = why
        self.nearest = nearest


@dataclass
class ForkState:
    """What decides whether the position after the last folded event is a clean boundary."""

    open: dict[str, list[str]] = field(default_factory=dict)  # structure kind -> ids still open
    session_id: str | None = None  # of the latest header: a fork's child has its own
    workspace: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    talk_seq: int = 0  # the last model-visible event
    talk_kind: str = ""  # user | assistant | tool | other
    talk_text: str | None = None
    last_seq: int = 0

    def open_structures(self) -> list[str]:
        return [f"{kind} {ident}" for kind, ids in sorted(self.open.items()) for ident in ids]

    def clean(self) -> bool:
        return self.talk_kind in ("user", "assistant") and not any(self.open.values())

    def why_unclean(self) -> str:
        still = self.open_structures()
        if still:
            shown = ", ".join(still[:4]) + (f" and {len(still) - 4} more" if len(still) > 4 else "")
            return f"inside an open {shown}"
        if self.talk_kind == "":
            return "no user or assistant message yet"
        return f"the last model-visible event (seq {self.talk_seq}) is a {self.talk_kind} event, not a message"


class ForkReducer:
    """Folds just enough to tell clean boundaries apart; small, so its snapshots are cheap."""

    name = "journal.fork"
    version = 1

    def initial(self) -> ForkState:
        return ForkState()

    def dump(self, state: ForkState) -> dict[str, Any]:
        return {
            "open": {k: sorted(v) for k, v in state.open.items() if v},
            "sessionId": state.session_id,
            "workspace": state.workspace,
            "lineage": state.lineage,
            "talkSeq": state.talk_seq,
            "talkKind": state.talk_kind,
            "talkText": state.talk_text,
            "lastSeq": state.last_seq,
        }

    def load(self, data: dict[str, Any]) -> ForkState:
        return ForkState(
            {k: list(v) for k, v in data["open"].items()},
            data["sessionId"],
            dict(data["workspace"]),
            dict(data["lineage"]),
            int(data["talkSeq"]),
            str(data["talkKind"]),
            data["talkText"],
            int(data["lastSeq"]),
        )

    def apply(self, state: ForkState, event: Event, spec: EventType) -> ForkState:
        state.last_seq = event.seq
        role = spec.role
        if role is Role.HEADER:
            state.session_id = event.session_id
            ws, lin = event.data.get("workspace"), event.data.get("lineage")
            state.workspace = dict(ws) if isinstance(ws, dict) else {}
            state.lineage = dict(lin) if isinstance(lin, dict) else {}
        opener = _OPENERS.get(role)
        if opener is not None:
            kind, where, delta = opener
            ident = event.data.get(where[5:]) if where.startswith("data.") else getattr(event, where)
            if isinstance(ident, str) and ident:
                ids = state.open.setdefault(kind, [])
                if delta > 0 and ident not in ids:
                    ids.append(ident)
                elif delta < 0 and ident in ids:
                    ids.remove(ident)
        if spec.model_visible:
            if event.type == "user.message":
                state.talk_kind = "user"
            elif role is Role.ATTEMPT_CLOSE:
                state.talk_kind = "assistant"
            elif role is Role.TOOL_REQUEST:
                state.talk_kind = "tool"
            else:
                state.talk_kind = "other"
            text = event.data.get("text")
            state.talk_text = text[:PREVIEW_CHARS] if isinstance(text, str) else None
            state.talk_seq = event.seq
        return state


@dataclass(frozen=True)
class ForkPoint:
    """A clean boundary: any seq from ``seq`` to ``last_seq`` forks after the same message."""

    seq: int
    last_seq: int
    kind: str  # user | assistant
    message_seq: int
    preview: str | None

    def describe(self) -> str:
        span = f"{self.seq}" if self.seq == self.last_seq else f"{self.seq}-{self.last_seq}"
        return f"{span} (after {self.kind} message at seq {self.message_seq}: {self.preview or ''!r})"


@dataclass(frozen=True)
class ForkResult:
    path: str
    session_id: str
    parent_session_id: str | None
    fork_seq: int
    depth: int
    origin: str
    header_seq: int  # the child's session.started: fork_seq + 1
    storage: PrefixCopy
    checked_from_seq: int  # 0, or the snapshot seq the cleanliness check started from
    snapshot_reason: str | None  # why a given snapshot was not used


def _events(j: Journal, registry: Registry, after_seq: int = 0) -> Iterator[tuple[Event, EventType] | int]:
    """Decoded events in seq order; an unknown ignorable event yields its bare seq."""
    for rec in j.read(after_seq=after_seq):
        item = decode(rec, registry)
        yield rec.seq if item is None else item


def scan_points(j: Journal, registry: Registry) -> list[ForkPoint]:
    """Every clean boundary of the session in ``j``, in seq order (reads the whole log)."""
    reducer = ForkReducer()
    state = reducer.initial()
    points: list[ForkPoint] = []
    run: ForkPoint | None = None
    for item in _events(j, registry):
        if isinstance(item, int):
            state.last_seq = item
        else:
            event, spec = item
            if spec.role is Role.TOOL_REQUEST and spec.model_visible and state.talk_kind == "assistant":
                # That assistant message asked for a tool after all: no boundary after it.
                talk = state.talk_seq
                points = [p for p in points if p.message_seq != talk]
                run = None if run is not None and run.message_seq == talk else run
            state = reducer.apply(state, event, spec)
        if state.clean():
            if run is None or run.message_seq != state.talk_seq:
                if run is not None:
                    points.append(run)
                run = ForkPoint(state.last_seq, state.last_seq, state.talk_kind, state.talk_seq, state.talk_text)
            else:
                run = ForkPoint(run.seq, state.last_seq, run.kind, run.message_seq, run.preview)
        elif run is not None:
            points.append(run)
            run = None
    if run is not None:
        points.append(run)
    return points


def fork_points(
    path: str | os.PathLike[str],
    registry: Registry | None = None,
    fs: FileSystem | None = None,
    record_size_bytes_max: int | None = None,
) -> list[ForkPoint]:
    """The clean fork points of the session stored in the journal at ``path`` (a directory or a
    server URL), read with ``record_size_bytes_max`` (the handle's default if None)."""
    options: dict[str, Any] = {} if fs is None else {"fs": fs}  # a server journal takes no file system
    if record_size_bytes_max is not None:
        options["record_size_bytes_max"] = record_size_bytes_max
    with journal.open(path, readonly=True, **options) as j:
        return scan_points(j, registry or Registry())


def _nearest(points: list[ForkPoint], seq: int) -> list[ForkPoint]:
    before = [p for p in points if p.last_seq < seq][-NEAREST_MAX:]
    after = [p for p in points if p.seq > seq][:NEAREST_MAX]
    return before + after


def check_point(
    j: Journal,
    registry: Registry,
    at_seq: int,
    snapshot: SnapshotSource | None = None,
    fs: FileSystem | None = None,
) -> tuple[ForkState, int, str | None]:
    """The fork state at ``at_seq``; raises UncleanForkPointError unless it is a clean boundary.

    With ``snapshot`` (a saved ForkReducer snapshot, see snapshot.save) only the records after
    it are read, so checking costs the tail of the log, not its whole length.
    """
    if not 1 <= at_seq <= j.last_seq:
        raise UncleanForkPointError(
            at_seq, f"the session's seqs run from 1 to {j.last_seq}", _nearest(scan_points(j, registry), at_seq)
        )
    reducer = ForkReducer()
    got = resume(j, registry, reducer, snapshot, fs=fs, upto_seq=at_seq) if snapshot is not None else None
    if got is not None and got.from_snapshot:
        state, checked_from, reason = got.state, got.snapshot_seq, None
    else:
        state, checked_from = reducer.initial(), 0
        reason = got.rebuild_reason if got is not None else None
        for item in _events(j, registry):
            if isinstance(item, int):
                if item > at_seq:
                    break
                state.last_seq = item
                continue
            if item[0].seq > at_seq:
                break
            state = reducer.apply(state, *item)
    why = None if state.clean() else state.why_unclean()
    if why is None and state.talk_kind == "assistant":
        # The message's tool calls, if any, are the next model-visible events.
        for item in _events(j, registry, after_seq=at_seq):
            if isinstance(item, int) or not item[1].model_visible:
                continue
            if item[1].role is Role.TOOL_REQUEST:
                why = f"the assistant message at seq {state.talk_seq} asks for a tool (seq {item[0].seq})"
            break
    if why is not None:
        raise UncleanForkPointError(at_seq, why, _nearest(scan_points(j, registry), at_seq))
    return state, checked_from, reason


def fork(
    parent: str | os.PathLike[str],
    child: str | os.PathLike[str],
    at_seq: int | None = None,
    *,
    session_id: str | None = None,
    origin: str = "user",
    workspace: dict[str, Any] | None = None,
    registry: Registry | None = None,
    snapshot: SnapshotSource | None = None,
    link: bool = True,
    fs: FileSystem | None = None,
    time: str | None = None,
    record_size_bytes_max: int | None = None,
) -> ForkResult:
    """Fork the session in ``parent`` after seq ``at_seq`` into a new session journal ``child``.

    ``at_seq`` defaults to the last clean point. ``origin`` says why the fork was made (user,
    subagent, eval, ...). ``workspace`` overrides the parent's (a fork into a new worktree).
    The parent is opened read-only: not a byte of it changes. Raises UncleanForkPointError at
    an unclean seq and FileExistsError if ``child`` exists.
    """
    fs = fs or OsFileSystem()
    registry = registry or Registry()
    if session_id is not None:
        check_session_id(session_id)  # the store's rule, refused before anything is made
    parent_path, child_path = os.fspath(parent), os.fspath(child)
    if fs.exists(child_path):
        raise FileExistsError(f"fork target {child_path!r} already exists; pick a new directory")
    # The parent stays open (read-only, no lock) until its prefix is copied: the copy is its own
    # (PrefixCopier.copy_prefix), so the session layer needs nothing of the engine's storage.
    # The parent is read with ``record_size_bytes_max`` (the handle's default if None): a parent
    # whose writer raised its limit holds records only a handle with that limit reads.
    limit: dict[str, Any] = {} if record_size_bytes_max is None else {"record_size_bytes_max": record_size_bytes_max}
    if snapshot is None:
        own = os.path.join(parent_path, FORK_SNAPSHOT_NAME)
        # Checked by resume like any snapshot (reducer, the digest of the record it was made
        # after, the session of every later event); one that does not match is replayed past.
        # A fork makes this name in its child: a symbolic link there was planted and is not
        # followed (it would read a file outside the journal, up to the snapshot size limit).
        snapshot = own if fs.exists(own) and not fs.is_link(own) else None
    with journal.open(parent_path, readonly=True, fs=fs, **limit) as pj:
        plan = plan_fork(pj, at_seq, session_id=session_id, origin=origin, workspace=workspace, registry=registry,
                         snapshot=snapshot, fs=fs, time=time)
        at_seq, header = plan.at_seq, plan.header
        parent_dir = os.path.dirname(os.path.abspath(child_path))
        tmp_prefix = f".{os.path.basename(child_path)}.fork-"
        # A fork of this child that crashed before its rename left its temp directory: a copy of
        # the parent's prefix (or links to it) and nothing else, never renamed, never trusted.
        # A fork of the same name still running (a caller retrying one it thinks lost) has one
        # that looks the same: it holds the lock file in it until its rename, and is left alone
        # (removing files of its build would publish a child without its prefix).
        for stale in fs.listdir(parent_dir):
            if not stale.startswith(tmp_prefix):
                continue
            path = os.path.join(parent_dir, stale)
            try:
                held = fs.try_lock(os.path.join(path, BUILD_LOCK_NAME))
            except FileNotFoundError:
                continue  # renamed into place meanwhile
            if held is None:
                continue  # being built right now
            try:
                remove_tree(fs, path)
            finally:
                held.release()
        tmp = os.path.join(parent_dir, f"{tmp_prefix}{uuid.uuid4().hex[:8]}")
        fs.mkdir(tmp)
        try:
            build = fs.try_lock(os.path.join(tmp, BUILD_LOCK_NAME))
        except BaseException:
            remove_tree(fs, tmp)
            raise
        if build is None:  # another fork's cleanup took it first: it removes this directory
            raise SessionError(f"a fork into {child_path!r} is running beside this one; fork again when it is done")
        try:
            if not isinstance(pj, PrefixCopier):
                raise SessionError(f"the journal of {parent_path!r} cannot copy its prefix: forks need a backend "
                                   "that can (the file engine)")
            storage = pj.copy_prefix(tmp, at_seq, link=link)
            # No reserved space: one record goes in, and the child must open with nothing to
            # recover even if the cut at close never reached the disk.
            with journal.open(tmp, fs=fs, reserve_bytes=0) as cj:
                if cj.last_seq != at_seq or cj.recovery.actions:
                    raise SessionError(
                        f"the copied prefix ends at seq {cj.last_seq}, not {at_seq}: {cj.recovery.summary()}"
                    )
                # The cut segment (the parent's records up to F, copied) is sealed here, and the
                # header starts the child's own live segment: a fork of this child then links the
                # cut instead of copying it again, so a chain of forks copies each record once,
                # not once per later fork (it is the child's own file: the parent is not touched).
                if isinstance(cj, Retention):  # the file engine's journals are
                    cj.seal()
                out = cj.append(header.to_stored(), durability="sync")
                if not isinstance(out, Committed):
                    raise SessionError(f"the fork header was not written ({out}); nothing was forked")
                reducer, spec = ForkReducer(), registry.get(header.type)
                if spec is None:
                    raise SessionError(f"the registry no longer knows {header.type}; nothing was forked")
                state = reducer.apply(copy.deepcopy(plan.state), header.with_seq(out.seq, False), spec)
                save(cj, Replayed(state, out.seq, 1, 0, 0, reducer.name, reducer.version), reducer, registry,
                     os.path.join(tmp, FORK_SNAPSHOT_NAME), fs)
            fs.rename(tmp, child_path)
        except BaseException:
            remove_tree(fs, tmp)
            build.release()
            raise
        try:  # renamed with the build: the child's, now, and no lock of a journal
            fs.unlink(os.path.join(child_path, BUILD_LOCK_NAME))
        finally:
            build.release()
    fs.fsync_dir(os.path.dirname(os.path.abspath(child_path)))
    return ForkResult(child_path, plan.session_id, plan.parent_session_id, at_seq, plan.depth, origin, out.seq,
                      storage, plan.checked_from_seq, plan.snapshot_reason)


@dataclass(frozen=True)
class ForkPlan:
    """What a fork writes, decided from the parent before anything is made: the checked clean
    point ``at_seq`` and the child's header (seq ``at_seq + 1``)."""

    at_seq: int
    header: Event
    session_id: str
    parent_session_id: str | None
    depth: int
    checked_from_seq: int
    snapshot_reason: str | None
    state: ForkState  # the fork state at ``at_seq`` (clean)


def plan_fork(
    pj: Journal,
    at_seq: int | None,
    *,
    session_id: str | None = None,
    origin: str = "user",
    workspace: dict[str, Any] | None = None,
    registry: Registry | None = None,
    snapshot: SnapshotSource | None = None,
    fs: FileSystem | None = None,
    time: str | None = None,
) -> ForkPlan:
    """Check the fork point in the parent ``pj`` (the last clean point by default) and make the
    child's header. Raises UncleanForkPointError; reads only."""
    registry = registry or Registry()
    if at_seq is None and snapshot is not None and pj.last_seq >= 1:
        # The last clean point from the snapshot and the tail: when the end is clean, it is the
        # last seq (the run of seqs after the last message ends there), and the whole log (a
        # whole chain's, for a child) need not be read to find it.
        got = resume(pj, registry, ForkReducer(), snapshot, fs=fs)
        if got.from_snapshot and got.state.clean() and got.replayed.last_seq == pj.last_seq:
            at_seq = pj.last_seq
    if at_seq is None:
        points = scan_points(pj, registry)
        if not points:
            raise UncleanForkPointError(pj.last_seq, "no clean boundary in the whole session", [])
        at_seq = points[-1].last_seq
    state, checked_from, reason = check_point(pj, registry, at_seq, snapshot, fs)
    sid = new_session_id() if session_id is None else session_id
    depth_before = state.lineage.get("depth", 0)
    depth = (depth_before if isinstance(depth_before, int) else 0) + 1
    lineage = {"parentSessionId": state.session_id, "forkSeq": at_seq, "depth": depth, "origin": origin}
    header = Event(
        type="session.started",
        session_id=sid,
        time=time or utc_now(),
        causation_id=at_seq,
        data={"workspace": dict(state.workspace if workspace is None else workspace), "lineage": lineage},
    )
    check_for_append(header, registry.get("session.started"))
    return ForkPlan(at_seq, header, sid, state.session_id, depth, checked_from, reason, state)


def remove_tree(fs: FileSystem, path: str) -> None:
    """Best effort: drop a half-built child (only its own files; links leave the parent intact)."""
    if isinstance(fs, OsFileSystem):
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        for name in fs.listdir(path):
            if not fs.is_dir(os.path.join(path, name)):
                fs.unlink(os.path.join(path, name))
    except OSError:
        pass
