"""A session: the agent vocabulary over one journal, with repair on open, guards and replay.

    from journal import session
    with session.open(path, create=True, workspace={"path": "/repo"}) as s:
        s.append("turn.started", turn_id="t1")
        s.append("tool.requested", turn_id="t1", tool_call_id="c1",
                 data={"tool": "edit_file", "sideEffect": "workspace-write", "idempotency": "unsafe"})

``append`` picks the durability from the type's class (transient: buffered, ordinary: flush,
boundary: sync before it returns) and returns what the event got. Structural events get an
idempotency key ``<type>:<id>`` so a retry after AckLost cannot write them twice. The guards
refuse the forbidden actions of the recovery table: starting a tool that already has a result
or whose outcome is unknown, starting one whose approval is not granted, and a second
submittable approval for the same call.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time as _time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import xxhash

import journal
from journal.api import (
    DURABILITY_LEVELS,
    Committed,
    Durability,
    DurabilityError,
    IdempotencyConflictError,
    InvariantError,
    Journal,
    JournalError,
    Outcome,
)
from journal.fs import FileSystem, OsFileSystem
from journal.outcomes import DURABILITY_RANK
from journal.session.closers import RepairPolicy
from journal.session.dangling import Dangling
from journal.session.envelope import Event, check_for_append, check_session_id, decode
from journal.session.errors import NotASessionError, ProtocolError, SessionError
from journal.session.gate import GateDecision, ResumeChecks, evaluate
from journal.session.reducer import Reducer, SessionReducer
from journal.session.registry import EventType, Registry, Role
from journal.session.repair import RepairReport, repair, repair_dangling
from journal.session.replay import Replayed, Snapshot, fold, replay
from journal.session.snapshot import (
    Parts,
    SavedSession,
    SnapshotDamagedError,
    SnapshotMismatchError,
    SnapshotSource,
    no_cyclic_gc,
    read_session,
    save_session,
    tail_items,
    where_of,
)
from journal.session.snapshot import check as check_snapshot
from journal.session.state import SessionState

Clock = Callable[[], str]
Items = Iterator[tuple[int, tuple[Event, EventType] | None]]

# The session snapshot (snapshot.py, "the session's own snapshot"): a file in the journal
# directory the engine leaves alone (verify, salvage and copy look only at their own names).
SESSION_SNAPSHOT_NAME = "session.snap"
# Events appended between two snapshot saves while a session is open: a crash costs the next
# open at most this many events of replay. Each save syncs the journal and writes what is not
# history (and the history added since, once): chosen so that the append path's cost moves
# within noise (bench/README.md, "Session snapshots").
SNAPSHOT_EVERY_EVENTS = 16384
# At close a snapshot is saved when at least this many events were folded since the last one:
# fewer cost the next open less than writing the file costs this close.
SNAPSHOT_AT_CLOSE_MIN_EVENTS = 64


class SnapshotWriteWarning(UserWarning):
    """Saving the session snapshot failed. Nothing is lost (it is a cache): the next open replays
    more of the log. This session saves no more snapshots; ``Session.snapshot_error`` says why."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _check_arguments(session_id: str | None, durability_floor: str) -> None:
    if session_id is not None:
        check_session_id(session_id)  # the store's rule: ids become directory names
    if durability_floor not in DURABILITY_LEVELS:
        raise DurabilityError(durability_floor, DURABILITY_LEVELS)


def _without_time(event: Mapping[str, Any]) -> str:
    """The event as canonical JSON without its ``time`` (so true and 1, or 1 and 1.0, differ)."""
    return json.dumps({k: v for k, v in event.items() if k != "time"}, sort_keys=True, ensure_ascii=False)


class SessionIds:
    """Session ids, each greater (as a string) than the one before in this process, whatever the
    clock does: ``s``, 12 hex digits of milliseconds since the epoch, 8 hex digits.

    A new millisecond starts the low part at a random value below 2**31. Within a millisecond,
    or when the clock stands still or steps back (NTP, a VM restored), the previous id's
    millisecond is kept and its low part goes up by one, as ULID's monotonic mode does; if it
    would overflow, the millisecond moves on by one. So ids sort by creation order in a process
    and by clock across processes, where the random part tells them apart.
    """

    LOW_BITS = 32

    def __init__(self, clock: Callable[[], float] = _time.time, random_low: Callable[[], int] | None = None) -> None:
        self._clock = clock  # seconds since the epoch
        self._random_low = random_low or (lambda: secrets.randbits(self.LOW_BITS - 1))
        self._mu = threading.Lock()
        self._last: tuple[int, int] = (-1, 0)  # (milliseconds, low part) of the last id

    def __call__(self) -> str:
        ms = max(0, int(self._clock() * 1000))
        with self._mu:
            last_ms, last_low = self._last
            if ms > last_ms:
                low = self._random_low() % (1 << self.LOW_BITS)
            elif last_low + 1 < 1 << self.LOW_BITS:
                ms, low = last_ms, last_low + 1
            else:
                ms, low = last_ms + 1, self._random_low() % (1 << self.LOW_BITS)
            self._last = (ms, low)
        return f"s{ms:012x}{low:08x}"


_SESSION_IDS = SessionIds()


def new_session_id() -> str:
    """A new session id: time-sortable, and greater than every id this process made before."""
    return _SESSION_IDS()


@dataclass(frozen=True)
class Appended:
    """What one append got: the event with its seq, the outcome, and the durability level reached."""

    event: Event
    outcome: Outcome
    durability_class: str
    level_requested: Durability

    @property
    def committed(self) -> bool:
        return isinstance(self.outcome, Committed)

    @property
    def level(self) -> Durability | None:
        """The level the event is known to have reached (None unless Committed)."""
        return self.outcome.durability if isinstance(self.outcome, Committed) else None


_STRUCT_ID: dict[Role, str] = {
    Role.TURN_OPEN: "turn_id", Role.TURN_CLOSE: "turn_id", Role.STEP_OPEN: "step_id", Role.STEP_CLOSE: "step_id",
    Role.TOOL_REQUEST: "tool_call_id", Role.TOOL_START: "tool_call_id", Role.TOOL_RESULT: "tool_call_id",
    Role.APPROVAL_OPEN: "approval_id", Role.APPROVAL_CLOSE: "approval_id", Role.ATTEMPT_CLOSE: "attempt_id",
}


class Session:
    """One agent session stored in one journal directory. Use ``journal.session.open``."""

    def __init__(self, j: Journal, registry: Registry, clock: Clock, floor: Durability) -> None:
        self.journal = j
        self.registry = registry
        self.clock = clock
        self.floor: Durability = floor
        self.repair_report: RepairReport | None = None
        self.session_id = ""
        self.skipped = 0
        # The skipped events up to the state's last seq, which is the last event folded: those
        # after it (unknown ignorable types at the end of the log) are read again by a fold from
        # there, so a snapshot saved at that seq counts only these (or an open would count the
        # later ones twice).
        self._skipped_at_state = 0
        self._reducer = SessionReducer()
        self._state = self._reducer.initial()
        self._dangling = Dangling()  # the open structures, folded with the state (repair needs them)
        self._snapshot: SnapshotSource | None = None
        self._snapshot_fs: FileSystem | None = None
        self._snapshot_writable = False
        self._since_snapshot = 0  # events folded since the snapshot the next open would use
        self._closed = False
        self.snapshot_seq = 0  # the seq this open resumed from (0: replayed from seq 1)
        self.snapshot_reason: str | None = None  # why the open replayed from seq 1
        self.snapshot_error: Exception | None = None  # the save that failed; no save is tried after it

    # --- life ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        create: bool = False,
        readonly: bool = False,
        session_id: str | None = None,
        workspace: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        registry: Registry | None = None,
        repair_on_open: bool = True,
        policy: RepairPolicy | None = None,
        clock: Clock = utc_now,
        durability_floor: Durability = "buffered",
        snapshot: SnapshotSource | bool = True,
        **journal_options: Any,
    ) -> Session:
        _check_arguments(session_id, durability_floor)  # before the journal (or its directory) exists
        j = journal.open(path, create=create, readonly=readonly, **journal_options)
        try:
            return cls.attach(j, create=create and not readonly, session_id=session_id, workspace=workspace,
                              lineage=lineage, registry=registry, repair_on_open=repair_on_open, policy=policy,
                              clock=clock, durability_floor=durability_floor, snapshot=snapshot,
                              fs=journal_options.get("fs"))
        except BaseException:
            j.close()
            raise

    @classmethod
    def attach(
        cls,
        j: Journal,
        create: bool = False,
        session_id: str | None = None,
        workspace: Mapping[str, Any] | None = None,
        lineage: Mapping[str, Any] | None = None,
        registry: Registry | None = None,
        repair_on_open: bool = True,
        policy: RepairPolicy | None = None,
        clock: Clock = utc_now,
        durability_floor: Durability = "buffered",
        snapshot: SnapshotSource | bool = True,
        fs: FileSystem | None = None,
    ) -> Session:
        """A session over a journal the caller opened (a test harness's file system, a wrapper).

        The session takes ownership: closing the session closes ``j``. ``snapshot``: True keeps
        the session snapshot in the journal's directory (``session.snap``, when ``j`` is a
        directory on ``fs``); a path or a SnapshotSlot keeps it there; False keeps none (every
        open replays from seq 1). ``fs`` is the file system of ``j`` (a test harness's).
        """
        _check_arguments(session_id, durability_floor)
        s = cls(j, registry or Registry(), clock, durability_floor)
        s._snapshot_fs = fs
        s._snapshot = _snapshot_source(j, snapshot, fs or OsFileSystem())
        # Only the holder of the writer lock saves, and only a writer whose state is the whole
        # log (shared writers each see their own appends only).
        s._snapshot_writable = not j.readonly and not getattr(j, "shared", False)
        s._load(j.path, create and not j.readonly, session_id, workspace, lineage,
                repair_on_open and not j.readonly, policy)
        return s

    def _load(self, path: str, create: bool, session_id: str | None, workspace: Mapping[str, Any] | None,
              lineage: Mapping[str, Any] | None, do_repair: bool, policy: RepairPolicy | None) -> None:
        self._resume()
        if do_repair:
            self.repair_report = repair_dangling(self.journal, self._dangling, policy)
            if self.repair_report.changed:
                self._fold(self._decoded(self._state.last_seq), self._state, self._dangling, self._state.last_seq,
                           self._skipped_at_state)
        if self._state.session_id is None:
            if self.journal.last_seq > 0:
                raise NotASessionError(path, "its first events hold no session.started header")
            if not create:
                raise NotASessionError(path, "it is empty")
            sid = new_session_id() if session_id is None else session_id
            self.session_id = sid
            data: dict[str, Any] = {"workspace": dict(workspace or {}), "lineage": dict(lineage or {"depth": 0})}
            got = self.append("session.started", data=data)
            if not got.committed:
                # A session without its header is not a session: report it, never return one.
                raise SessionError(f"the session header was not written ({got.outcome}); no session was created")
        else:
            self.session_id = self._state.session_id
            if session_id is not None and session_id != self.session_id:
                raise NotASessionError(path, f"it holds session {self.session_id}, not {session_id}")

    def _rebuild(self) -> None:
        self._fold(self._decoded(0), self._reducer.initial(), Dangling(), 0, 0)

    def _decoded(self, after_seq: int) -> Items:
        for rec in self.journal.read(after_seq=after_seq):
            yield rec.seq, decode(rec, self.registry)

    def _fold(self, items: Items, state: SessionState, dangling: Dangling, after_seq: int, skipped: int) -> None:
        """Fold ``items`` (the records after ``after_seq``) into the state and the open structures."""

        trailing = 0  # skipped events after the last one folded

        def both() -> Items:
            nonlocal trailing
            for seq, item in items:
                if item is None:
                    trailing += 1
                else:
                    trailing = 0
                    dangling.apply(*item)
                yield seq, item

        out = fold(both(), self._reducer, state, after_seq)
        self._state, self._dangling = out.state, dangling
        self.skipped = skipped + out.skipped
        self._skipped_at_state = self.skipped - trailing
        self._since_snapshot += out.last_seq - after_seq

    def _resume(self) -> None:
        """The state and the open structures at the end of the log: from the session snapshot
        and the records after it when the snapshot is verified (snapshot.check, then the digest
        of its record and the tail's session ids while reading), else from seq 1 with the
        reason in ``snapshot_reason``."""
        src = self._snapshot
        reason: str | None
        if src is None:
            reason = "no snapshot is kept for this journal"
        else:
            try:
                saved, parts = read_session(src, self._snapshot_fs)
            except FileNotFoundError:
                reason = f"no snapshot at {where_of(src)!r}"
            except SnapshotDamagedError as exc:
                reason = exc.why
            except OSError as exc:
                reason = f"snapshot unreadable: {exc}"
            else:
                reason = self._resume_from(saved, parts)
                if reason is None:
                    return
                parts.close()
        self.snapshot_reason, self.snapshot_seq, self._since_snapshot = reason, 0, 0
        self._fold(self._decoded(0), self._reducer.initial(), Dangling(), 0, 0)

    def _resume_from(self, saved: SavedSession, parts: Parts) -> str | None:
        head = saved.as_saved()
        reason = check_snapshot(self.journal, head, self._reducer, self.registry, digest=False,
                                unrecorded_as_builtin=False)
        if reason is not None:
            return reason
        try:
            with no_cyclic_gc():
                state = SessionState.load_split(saved.core, parts, rebuild=self._replayed_state)
                dangling = Dangling.load(saved.dangling, self.registry)
        except (KeyError, TypeError, ValueError, AttributeError, SessionError) as exc:
            return f"snapshot state does not load: {exc!r}"
        if state.last_seq != saved.last_seq or dangling.events > saved.last_seq:
            return f"snapshot state is at seq {state.last_seq}, its header at seq {saved.last_seq}"
        self._since_snapshot = 0
        try:
            self._fold(tail_items(self.journal, self.registry, head), state, dangling, saved.last_seq, saved.skipped)
        except SnapshotMismatchError as exc:
            return exc.why
        self.snapshot_seq, self.snapshot_reason = saved.last_seq, None
        return None

    def _replayed_state(self) -> SessionState:
        """The state from seq 1: what a lazily loaded history is replaced by if it does not load."""
        return replay(self.journal, self.registry, SessionReducer()).state

    def _saves_snapshots(self) -> bool:
        return self._snapshot is not None and self._snapshot_writable and self.snapshot_error is None

    def save_snapshot(self) -> bool:
        """Save the session snapshot now (a writer only); False when none was saved.

        The snapshot is a cache: a failed save loses nothing (the next open replays more) and is
        not raised. It warns (SnapshotWriteWarning), keeps the error in ``snapshot_error`` and
        turns saving off for this session, so a failing disk is not written again and again.
        """
        target = self._snapshot
        if target is None or not self._saves_snapshots():
            return False
        seq = self._state.last_seq
        if seq == 0:
            return False
        try:
            # The journal first: a snapshot never names a record a power loss could still take.
            self.journal.sync()
            rec = self.journal.get(seq)
            if rec is None:
                raise SessionError(f"the journal holds no record at seq {seq}, the state's last")
            ev = rec.event if not rec.is_bytes else None
            sid = ev.get("sessionId") if isinstance(ev, dict) else None
            dump = self._state.dump_split()
            saved = SavedSession(sid if isinstance(sid, str) else None, seq, xxhash.xxh64_intdigest(rec.payload),
                                 self._reducer.name, self._reducer.version, self._skipped_at_state,
                                 self._dangling.dump(),
                                 dump.core, self.registry.fingerprint())
            save_session(self._snapshot_fs, target, saved, dump.parts)
        except (OSError, JournalError, SessionError, ValueError, TypeError) as exc:
            self.snapshot_error = exc
            warnings.warn(SnapshotWriteWarning(
                f"the session snapshot at {where_of(target)!r} was not saved ({exc!r}); nothing is lost, "
                "the next open replays from the last snapshot saved; this session saves no more"), stacklevel=2)
            return False
        self._state.saved(dump)
        self._since_snapshot = 0
        return True

    def close(self) -> None:
        if not self._closed and self._since_snapshot >= SNAPSHOT_AT_CLOSE_MIN_EVENTS and self._saves_snapshots():
            self.save_snapshot()
        self._closed = True
        self.journal.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ------------------------------------------------------------------------

    def level_for(self, spec: EventType) -> Durability:
        level = spec.durability.level
        return self.floor if DURABILITY_RANK[self.floor] > DURABILITY_RANK[level] else level

    def append(
        self,
        type: str,  # noqa: A002 - the envelope's field is called type
        data: Mapping[str, Any] | None = None,
        *,
        turn_id: str | None = None,
        step_id: str | None = None,
        attempt_id: str | None = None,
        tool_call_id: str | None = None,
        approval_id: str | None = None,
        causation_id: int | None = None,
        correlation_id: str | None = None,
        time: str | None = None,
        idempotency_key: str | None = None,
    ) -> Appended:
        """Append one event with the durability its type demands; returns what it got."""
        spec = self.registry.get(type)
        event = Event(
            type=type, session_id=self.session_id, time=time if time is not None else self.clock(),
            turn_id=turn_id, step_id=step_id, attempt_id=attempt_id, tool_call_id=tool_call_id,
            approval_id=approval_id, causation_id=causation_id, correlation_id=correlation_id,
            data=dict(data or {}), ignorable=spec.ignorable if spec else False,
        )
        check_for_append(event, spec)
        if spec is None:
            raise InvariantError("the event type is registered")
        existing = self._guard(event, spec)
        if existing is not None:
            return existing
        key = idempotency_key
        if key is None and spec.role in _STRUCT_ID:
            ident = getattr(event, _STRUCT_ID[spec.role])
            key = f"{type}:{ident}" if ident else None
        level = self.level_for(spec)
        stored = event.to_stored()
        try:
            out = self.journal.append(stored, durability=level, idempotency_key=key)
        except IdempotencyConflictError as exc:
            out = self._retried(exc, stored, level)
        if isinstance(out, Committed):
            event = event.with_seq(out.seq, synthetic=False)
            if not out.duplicate:
                self._state = self._reducer.apply(self._state, event, spec)
                self._dangling.apply(event, spec)
                self._skipped_at_state = self.skipped  # the state's last seq is this event's now
                self._since_snapshot += 1
                if self._since_snapshot >= SNAPSHOT_EVERY_EVENTS and self._saves_snapshots():
                    self.save_snapshot()
        return Appended(event, out, spec.durability.value, level)

    def _retried(self, exc: IdempotencyConflictError, stored: dict[str, Any], level: Durability) -> Outcome:
        """A structural key already holds an event: a retry of the same event made again (its
        ``time``, which is for display only, differs) is that event's duplicate; anything else
        is the caller's conflict and is raised."""
        rec = self.journal.get(exc.seq) if exc.seq is not None else None
        if rec is None or rec.is_bytes or not isinstance(rec.event, dict):
            raise exc
        if _without_time(rec.event) != _without_time(stored):
            raise exc
        # Appending the stored event again gets the writer's own duplicate answer, durability included.
        return self.journal.append(rec.event, durability=level, idempotency_key=exc.key)

    def _guard(self, event: Event, spec: EventType) -> Appended | None:
        """Refuse what the recovery table forbids; return the earlier event for an idempotent repeat."""
        st = self._state
        call = st.lookup("tools", event.tool_call_id) if event.tool_call_id else None
        if spec.role is Role.TOOL_START and call is not None:
            if call.outcome_unknown:
                raise ProtocolError(
                    f"tool call {call.tool_call_id} has outcome TOOL_OUTCOME_UNKNOWN",
                    "check the world and append tool.reconciled, then request a new call with a new toolCallId",
                )
            if call.has_result:
                raise ProtocolError(
                    f"tool call {call.tool_call_id} already has a result ({call.status}, seq {call.result_seq})",
                    "read that result instead of running the tool again; reschedule with a new toolCallId",
                )
            if call.started_seq is not None:
                raise ProtocolError(f"tool call {call.tool_call_id} already started at seq {call.started_seq}",
                                    "wait for its result")
            if call.approval_id is not None:
                approval = st.lookup("approvals", call.approval_id)
                if approval is not None and approval.status != "allowed":
                    raise ProtocolError(
                        f"tool call {call.tool_call_id} needs approval {call.approval_id}, which is {approval.status}",
                        "a tool never runs on an approval that was not granted",
                    )
        if spec.role is Role.TOOL_RESULT and call is not None and call.has_result:
            raise ProtocolError(f"tool call {call.tool_call_id} already has a result at seq {call.result_seq}",
                                "a call has exactly one result; use tool.reconciled to record a later check")
        if spec.role is Role.APPROVAL_OPEN and event.approval_id:
            same = st.lookup("approvals", event.approval_id)
            if same is not None and same.status == "pending":
                prior = Event(type=event.type, session_id=event.session_id, seq=same.requested_seq,
                              approval_id=same.approval_id, tool_call_id=same.tool_call_id)
                return Appended(prior, Committed(same.requested_seq, "sync", duplicate=True,
                                                 reason="approval already pending: shown again, not duplicated"),
                                spec.durability.value, self.level_for(spec))
            if same is not None:
                raise ProtocolError(f"approval {event.approval_id} was already decided ({same.status})",
                                    "ask again under a new approvalId")
            for other in st.pending_approvals():
                if event.tool_call_id and other.tool_call_id == event.tool_call_id:
                    raise ProtocolError(
                        f"tool call {event.tool_call_id} already has pending approval {other.approval_id}",
                        "show that approval again instead of creating a second one",
                    )
        if spec.role is Role.APPROVAL_CLOSE and event.approval_id:
            same = st.lookup("approvals", event.approval_id)
            if same is None or same.status != "pending":
                raise ProtocolError(f"approval {event.approval_id} is not pending",
                                    "decide only an approval that was requested and not yet decided")
        return None

    def sync(self) -> None:
        """Make every event appended so far durable (fdatasync)."""
        self.journal.sync()

    # --- reading ------------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The live state (built-in reducer), folded as events are appended."""
        return self._state

    def read(self, after_seq: int = 0) -> Iterator[Event]:
        """Events in seq order; unknown types marked ignorable are skipped, unknown required ones refused."""
        for rec in self.journal.read(after_seq=after_seq):
            item = decode(rec, self.registry)
            if item is not None:
                yield item[0]

    def replay(self, reducer: Reducer[Any] | None = None, snapshot: Snapshot | None = None) -> Replayed[Any]:
        return replay(self.journal, self.registry, reducer or self._reducer, snapshot)

    def repair(self, dry_run: bool = False, policy: RepairPolicy | None = None) -> RepairReport:
        report = repair(self.journal, self.registry, policy, dry_run=dry_run)
        if report.changed:
            self._rebuild()
        return report

    def resume_gate(self, checks: ResumeChecks | None = None) -> GateDecision:
        """The gate on the live state (folded at open and with every append since)."""
        return evaluate(self._state, checks)


def _snapshot_source(j: Journal, snapshot: SnapshotSource | bool, fs: FileSystem) -> SnapshotSource | None:
    if snapshot is False:
        return None
    if snapshot is not True:
        return snapshot
    try:
        local = fs.is_dir(j.path)  # a server's journal has a URL, not a directory: no snapshot
    except (OSError, ValueError):
        local = False
    return os.path.join(j.path, SESSION_SNAPSHOT_NAME) if local else None


def open(  # noqa: A001 - mirrors journal.open
    path: str | os.PathLike[str], create: bool = False, readonly: bool = False, **kwargs: Any
) -> Session:
    """Open (and by default repair) the session stored in journal directory ``path``."""
    return Session.open(path, create=create, readonly=readonly, **kwargs)
