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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import journal
from journal.api import (
    DURABILITY_LEVELS,
    Committed,
    Durability,
    DurabilityError,
    IdempotencyConflictError,
    InvariantError,
    Journal,
    Outcome,
)
from journal.outcomes import DURABILITY_RANK
from journal.session.closers import RepairPolicy
from journal.session.envelope import Event, check_for_append, check_session_id, decode
from journal.session.errors import NotASessionError, ProtocolError, SessionError
from journal.session.gate import GateDecision, ResumeChecks, evaluate
from journal.session.reducer import Reducer, SessionReducer
from journal.session.registry import EventType, Registry, Role
from journal.session.repair import RepairReport, repair
from journal.session.replay import Replayed, Snapshot, replay
from journal.session.state import SessionState

Clock = Callable[[], str]


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
        self._reducer = SessionReducer()
        self._state = self._reducer.initial()

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
        **journal_options: Any,
    ) -> Session:
        _check_arguments(session_id, durability_floor)  # before the journal (or its directory) exists
        j = journal.open(path, create=create, readonly=readonly, **journal_options)
        try:
            return cls.attach(j, create=create and not readonly, session_id=session_id, workspace=workspace,
                              lineage=lineage, registry=registry, repair_on_open=repair_on_open, policy=policy,
                              clock=clock, durability_floor=durability_floor)
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
    ) -> Session:
        """A session over a journal the caller opened (a test harness's file system, a wrapper).

        The session takes ownership: closing the session closes ``j``.
        """
        _check_arguments(session_id, durability_floor)
        s = cls(j, registry or Registry(), clock, durability_floor)
        s._load(j.path, create and not j.readonly, session_id, workspace, lineage,
                repair_on_open and not j.readonly, policy)
        return s

    def _load(self, path: str, create: bool, session_id: str | None, workspace: Mapping[str, Any] | None,
              lineage: Mapping[str, Any] | None, do_repair: bool, policy: RepairPolicy | None) -> None:
        if do_repair:
            self.repair_report = repair(self.journal, self.registry, policy)
        self._rebuild()
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
        out = replay(self.journal, self.registry, self._reducer)
        self._state = out.state
        self.skipped = out.skipped

    def close(self) -> None:
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
        call = st.tools.get(event.tool_call_id) if event.tool_call_id else None
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
                approval = st.approvals.get(call.approval_id)
                if approval is not None and approval.status != "allowed":
                    raise ProtocolError(
                        f"tool call {call.tool_call_id} needs approval {call.approval_id}, which is {approval.status}",
                        "a tool never runs on an approval that was not granted",
                    )
        if spec.role is Role.TOOL_RESULT and call is not None and call.has_result:
            raise ProtocolError(f"tool call {call.tool_call_id} already has a result at seq {call.result_seq}",
                                "a call has exactly one result; use tool.reconciled to record a later check")
        if spec.role is Role.APPROVAL_OPEN and event.approval_id:
            same = st.approvals.get(event.approval_id)
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
            same = st.approvals.get(event.approval_id)
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
        return evaluate(self.replay(self._reducer).state, checks)


def open(  # noqa: A001 - mirrors journal.open
    path: str | os.PathLike[str], create: bool = False, readonly: bool = False, **kwargs: Any
) -> Session:
    """Open (and by default repair) the session stored in journal directory ``path``."""
    return Session.open(path, create=create, readonly=readonly, **kwargs)
