"""Find every structure the log opened and never closed: a pure function of the events.

Structures are found by role (registry.Role), never by type name, so a runtime's own types take
part as soon as they are registered with a role. Each open structure remembers the event that
opened it; repair derives its closer from that event alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from journal.api import Record
from journal.session.envelope import Event, decode
from journal.session.registry import EventType, Registry, Role


@dataclass
class OpenTool:
    request: Event  # the intent (or the start, for a runtime that records no intent)
    started: Event | None = None


@dataclass
class Dangling:
    """Open structures in the order they were opened, plus what a closer needs to know."""

    turns: dict[str, Event] = field(default_factory=dict)
    steps: dict[str, Event] = field(default_factory=dict)
    tools: dict[str, OpenTool] = field(default_factory=dict)
    approvals: dict[str, Event] = field(default_factory=dict)
    attempts: dict[str, Event] = field(default_factory=dict)  # first delta of an attempt with no close
    attempt_deltas: dict[str, int] = field(default_factory=dict)
    compactions: dict[str, Event] = field(default_factory=dict)
    jobs: dict[str, Event] = field(default_factory=dict)
    header: Event | None = None
    last_fact: Event | None = None  # the last event a runtime wrote (not a closer)
    events: int = 0

    def apply(self, event: Event, spec: EventType) -> None:
        """Fold one more event (find_dangling is this over every event, so a snapshot can carry it)."""
        d = self
        d.events += 1
        if not event.synthetic:
            d.last_fact = event
        role = spec.role
        if role is Role.HEADER:
            if d.header is None:
                d.header = event
        elif role is Role.TURN_OPEN and event.turn_id:
            d.turns.setdefault(event.turn_id, event)
        elif role is Role.TURN_CLOSE and event.turn_id:
            d.turns.pop(event.turn_id, None)
        elif role is Role.STEP_OPEN and event.step_id:
            d.steps.setdefault(event.step_id, event)
        elif role is Role.STEP_CLOSE and event.step_id:
            d.steps.pop(event.step_id, None)
        elif role is Role.TOOL_REQUEST and event.tool_call_id:
            d.tools.setdefault(event.tool_call_id, OpenTool(event))
        elif role is Role.TOOL_START and event.tool_call_id:
            tool = d.tools.setdefault(event.tool_call_id, OpenTool(event))
            if tool.started is None:
                tool.started = event
        elif role is Role.TOOL_RESULT and event.tool_call_id:
            d.tools.pop(event.tool_call_id, None)
        elif role is Role.APPROVAL_OPEN and event.approval_id:
            d.approvals.setdefault(event.approval_id, event)
        elif role is Role.APPROVAL_CLOSE and event.approval_id:
            d.approvals.pop(event.approval_id, None)
        elif role is Role.ATTEMPT_DELTA and event.attempt_id:
            d.attempts.setdefault(event.attempt_id, event)
            d.attempt_deltas[event.attempt_id] = d.attempt_deltas.get(event.attempt_id, 0) + 1
        elif role is Role.ATTEMPT_CLOSE and event.attempt_id:
            d.attempts.pop(event.attempt_id, None)
            d.attempt_deltas.pop(event.attempt_id, None)
        elif role is Role.COMPACTION_OPEN:
            cid = data_id(event, "compactionId")
            if cid:
                d.compactions.setdefault(cid, event)
        elif role in (Role.COMPACTION_CLOSE, Role.COMPACTION_ROLLBACK):
            cid = data_id(event, "compactionId")
            if cid:
                d.compactions.pop(cid, None)
        elif role is Role.JOB_OPEN:
            jid = data_id(event, "jobId")
            if jid:
                d.jobs.setdefault(jid, event)
        elif role is Role.JOB_CLOSE:
            jid = data_id(event, "jobId")
            if jid:
                d.jobs.pop(jid, None)

    def dump(self) -> dict[str, Any]:
        """A JSON-ready dict: each open structure as its opening event (seq, synthetic, stored form)."""
        def ev(e: Event | None) -> list[Any] | None:
            return None if e is None else [e.seq, e.synthetic, e.to_stored()]

        return {
            "turns": {k: ev(e) for k, e in self.turns.items()},
            "steps": {k: ev(e) for k, e in self.steps.items()},
            "tools": {k: [ev(t.request), ev(t.started)] for k, t in self.tools.items()},
            "approvals": {k: ev(e) for k, e in self.approvals.items()},
            "attempts": {k: ev(e) for k, e in self.attempts.items()},
            "attemptDeltas": dict(self.attempt_deltas),
            "compactions": {k: ev(e) for k, e in self.compactions.items()},
            "jobs": {k: ev(e) for k, e in self.jobs.items()},
            "header": ev(self.header),
            "lastFact": ev(self.last_fact),
            "events": self.events,
        }

    @classmethod
    def load(cls, data: dict[str, Any], registry: Registry) -> Dangling:
        """The inverse of dump(). Every event is checked as a record read from the journal is
        (envelope.decode); raises (KeyError, TypeError, ValueError, SessionError) on a mismatch."""
        def ev(row: Any) -> Event:
            if not isinstance(row, list) or len(row) != 3:
                raise TypeError(f"an open structure's event is {row!r}")
            seq, synthetic, stored = row
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1 or not isinstance(synthetic, bool):
                raise TypeError(f"an open structure's event has seq {seq!r}")
            payload = json.dumps(stored, ensure_ascii=False, allow_nan=False).encode()
            got = decode(Record(seq, payload, False, None, synthetic), registry)
            if got is None:
                raise ValueError(f"the event at seq {seq} is of a type this registry does not know")
            return got[0]

        def opt(row: Any) -> Event | None:
            return None if row is None else ev(row)

        def table(key: str) -> dict[str, Event]:
            return {_key(k): ev(row) for k, row in data[key].items()}

        deltas = data["attemptDeltas"]
        events = data["events"]
        if not isinstance(events, int) or isinstance(events, bool) or events < 0:
            raise TypeError(f"events is {events!r}")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in deltas.values()):
            raise TypeError("attemptDeltas are not counts")
        tools: dict[str, OpenTool] = {}
        for k, pair in data["tools"].items():
            if not isinstance(pair, list) or len(pair) != 2:
                raise TypeError(f"an open tool is {pair!r}")
            tools[_key(k)] = OpenTool(ev(pair[0]), opt(pair[1]))
        return cls(
            turns=table("turns"), steps=table("steps"), tools=tools, approvals=table("approvals"),
            attempts=table("attempts"), attempt_deltas={_key(k): v for k, v in deltas.items()},
            compactions=table("compactions"), jobs=table("jobs"), header=opt(data["header"]),
            last_fact=opt(data["lastFact"]), events=events,
        )

    def empty(self) -> bool:
        return not (self.turns or self.steps or self.tools or self.approvals or self.attempts
                    or self.compactions or self.jobs)


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise TypeError(f"a key is not a string: {k!r}")
    return k


def data_id(event: Event, key: str) -> str | None:
    value: Any = event.data.get(key)
    return value if isinstance(value, str) and value else None


def find_dangling(events: Iterable[tuple[Event, EventType]]) -> Dangling:
    d = Dangling()
    for event, spec in events:
        d.apply(event, spec)
    return d
