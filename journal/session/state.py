"""The built-in reducer's state: what the agent vocabulary folds into, and the model-visible projection.

Everything here is derived from the log and can be thrown away and rebuilt. ``messages()`` is
the projection a model would be sent: assistant text only from complete messages (never from
deltas, so two attempts are never glued into one reply), a tool call only together with its
result (a result written by repair says TOOL_NOT_STARTED or TOOL_OUTCOME_UNKNOWN in words the
model can act on), and a compaction's summary only once the compaction ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

SIDE_EFFECT_FREE = frozenset({"none", "read", "pure"})
RESULT_STATUSES = frozenset({"ok", "error", "timeout", "cancelled", "TOOL_NOT_STARTED", "TOOL_OUTCOME_UNKNOWN"})


@dataclass
class Span:
    """A turn or a step: opened at a seq, closed (or not) with a reason."""

    opened_seq: int
    status: str = "running"  # running | completed | cancelled | failed | interrupted | <runtime reason>
    closed_seq: int | None = None
    turn_id: str | None = None
    synthetic_close: bool = False


@dataclass
class ToolCall:
    tool_call_id: str
    tool: str | None
    args: Any
    side_effect: str  # none | read | workspace-write | external-write | network | process
    idempotency: str  # safe | conditional | unsafe
    request_seq: int
    turn_id: str | None = None
    status: str = "requested"  # requested | started | a RESULT_STATUSES member
    started_seq: int | None = None
    result_seq: int | None = None
    result_synthetic: bool = False
    output: Any = None
    reconciled: str | None = None  # applied | not_applied, after the runtime checked the world
    approval_id: str | None = None

    @property
    def has_result(self) -> bool:
        return self.result_seq is not None

    @property
    def outcome_unknown(self) -> bool:
        return self.status == "TOOL_OUTCOME_UNKNOWN" and self.reconciled is None

    @property
    def has_side_effect(self) -> bool:
        return self.side_effect not in SIDE_EFFECT_FREE


@dataclass
class Approval:
    approval_id: str
    requested_seq: int
    tool_call_id: str | None = None
    status: str = "pending"  # pending | allowed | denied | expired
    decided_seq: int | None = None


@dataclass
class Attempt:
    attempt_id: str
    first_seq: int
    deltas: int = 0
    status: str = "streaming"  # streaming | complete | interrupted


@dataclass
class Compaction:
    compaction_id: str
    started_seq: int
    status: str = "open"  # open | applied | rolled_back
    replaced_from_seq: int | None = None
    replaced_to_seq: int | None = None
    summary: str | None = None
    summary_ref: str | None = None


@dataclass
class Job:
    job_id: str
    started_seq: int
    status: str = "running"  # running | exited | killed | orphaned | <runtime status>
    restart: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    """One transcript item in log order; messages() turns these into the model's view."""

    seq: int
    kind: str  # user | assistant | tool_call
    text: str | None = None
    tool_call_id: str | None = None


@dataclass
class SessionState:
    session_id: str | None = None
    workspace: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    turns: dict[str, Span] = field(default_factory=dict)
    steps: dict[str, Span] = field(default_factory=dict)
    tools: dict[str, ToolCall] = field(default_factory=dict)
    approvals: dict[str, Approval] = field(default_factory=dict)
    attempts: dict[str, Attempt] = field(default_factory=dict)
    compactions: dict[str, Compaction] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    goal: dict[str, Any] | None = None
    goal_revision: int = 0
    budget: dict[str, Any] | None = None
    entries: list[Entry] = field(default_factory=list)
    last_seq: int = 0
    duplicate_results: int = 0  # a second result for a call already closed: kept in the log, not applied
    resumed_seqs: list[int] = field(default_factory=list)

    # --- lazy history (see _History) ------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # Called only for an attribute the instance does not hold: a history map of a state
        # loaded lazily (load_split) is loaded on first use, with what was folded since on top.
        lazy = self.__dict__.get("_history")
        if name in HISTORY_FIELDS and lazy is not None:
            self._materialize()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict[str, Any]:
        """For copy and pickle: the whole state (the history loaded), none of its snapshot bookkeeping."""
        self._materialize()
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def _view(self, name: str) -> Any:
        """The map (or list) the reducer and the derived views work on without loading history:
        the whole one when it is loaded, else what is not history (open, pending, notable)."""
        got = self.__dict__.get(name)
        if got is not None:
            return got
        lazy: _History = self.__dict__["_history"]
        return lazy.hot[name]

    def lookup(self, name: str, key: str) -> Any:
        """``getattr(self, name).get(key)``, loading the history only when ``key`` is in it."""
        got = self._view(name).get(key)
        if got is None and name not in self.__dict__:
            lazy: _History = self.__dict__["_history"]
            keys = self._cold_keys(lazy)
            if "_history" not in self.__dict__ or key in keys[name]:
                self._materialize()
                got = self.__dict__[name].get(key)
        if got is not None:
            self._touch(name, key)  # the reducer may change it: the next snapshot saves it again
        return got

    def insert(self, name: str, key: str, value: Any) -> Any:
        """Add a new key to a history map (look it up first: it must not be there)."""
        self._view(name)[key] = value
        self._touch(name, key)
        return value

    def add_entry(self, entry: Entry) -> None:
        self._view("entries").append(entry)

    def _touch(self, name: str, key: str) -> None:
        touched: dict[str, set[str]] | None = self.__dict__.get("_touched")
        if touched is not None:
            touched[name].add(key)

    @property
    def history_loaded(self) -> bool:
        """False while the history of a state loaded from a session snapshot is still on disk bytes."""
        return self.__dict__.get("_history") is None

    def _cold_keys(self, lazy: _History) -> dict[str, set[str]]:
        if lazy.cold_keys is None:
            try:
                lazy.cold_keys = _parse_keys(lazy.parts)
            except (KeyError, TypeError, ValueError, AttributeError, OSError):
                self._rebuild(lazy)
                return {name: set() for name in HISTORY_FIELDS}
        return lazy.cold_keys

    def _rebuild(self, lazy: _History) -> None:
        """A history part that does not load (damaged or crafted after the open checked the
        head): the log decides, the state is replayed from seq 1."""
        if lazy.rebuild is None:
            raise ValueError("the snapshot's history does not load and there is no log to replay")
        full = lazy.rebuild()
        self.__dict__.pop("_history", None)
        self.__dict__.pop("_save_base", None)  # what was saved is not trusted: the next save is whole
        lazy.parts.close()
        for f in fields(self):
            setattr(self, f.name, getattr(full, f.name))

    def _materialize(self) -> None:
        lazy: _History | None = self.__dict__.get("_history")
        if lazy is None:
            return
        try:
            raw = [lazy.parts.read(i) for i in range(lazy.parts.count())]
            cold = _parse_chunks(raw)
        except (KeyError, TypeError, ValueError, AttributeError, OSError):
            self._rebuild(lazy)
            return
        lazy.parts.close()
        base: _SaveBase | None = self.__dict__.get("_save_base")
        if base is not None and base.parts is None:
            base.parts = raw  # the next save keeps them as they are
        for name in HISTORY_FIELDS:
            if name in self.__dict__:
                continue  # set by the caller since the load: theirs
            hot = lazy.hot[name]
            if name == "entries":
                self.__dict__[name] = cold[name] + hot
                continue
            merged = dict(cold[name])
            merged.update(hot)
            self.__dict__[name] = _by_first_seq(name, merged)
        self.__dict__.pop("_history", None)

    # --- derived views -------------------------------------------------------------------

    def pending_tools(self) -> list[ToolCall]:
        """Requested or started and still without a result (only a kept approval leaves these after repair)."""
        return [t for t in self._view("tools").values() if not t.has_result]

    def unknown_outcomes(self) -> list[ToolCall]:
        return [t for t in self._view("tools").values() if t.outcome_unknown]

    def not_started(self) -> list[ToolCall]:
        return [t for t in self._view("tools").values() if t.status == "TOOL_NOT_STARTED"]

    def pending_approvals(self) -> list[Approval]:
        return [a for a in self._view("approvals").values() if a.status == "pending"]

    def open_turns(self) -> list[str]:
        return [k for k, s in self._view("turns").items() if s.status == "running"]

    def interrupted_turns(self) -> list[tuple[str, Span]]:
        return [(k, s) for k, s in self._view("turns").items() if s.status == "interrupted"]

    def open_steps(self) -> list[str]:
        return [k for k, s in self._view("steps").items() if s.status == "running"]

    def interrupted_attempts(self) -> list[Attempt]:
        return [a for a in self._view("attempts").values() if a.status == "interrupted"]

    def running_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.status == "running"]

    def orphaned_jobs(self) -> list[Job]:
        return [j for j in self.jobs.values() if j.status == "orphaned"]

    def had_side_effects(self) -> bool:
        lazy: _History | None = self.__dict__.get("_history")
        if lazy is not None and "tools" not in self.__dict__ and lazy.cold_side_effects:
            return True
        return any(
            t.has_side_effect and t.status != "TOOL_NOT_STARTED" and t.status != "requested"
            for t in self._view("tools").values()
        )

    def applied_compactions(self) -> list[Compaction]:
        return [c for c in self.compactions.values() if c.status == "applied"]

    def messages(self) -> list[dict[str, Any]]:
        """What a model would be sent, rebuilt from the log; never the source of truth."""
        replaced: list[tuple[int, int, Compaction]] = []
        for c in self.applied_compactions():
            if c.replaced_from_seq is not None and c.replaced_to_seq is not None:
                replaced.append((c.replaced_from_seq, c.replaced_to_seq, c))
        replaced.sort(key=lambda r: (r[0], r[1], r[2].started_seq))
        out: list[dict[str, Any]] = []
        emitted: set[str] = set()
        for entry in self.entries:
            cover = next((r for r in replaced if r[0] <= entry.seq <= r[1]), None)
            if cover is not None:
                comp = cover[2]
                if comp.compaction_id not in emitted:
                    emitted.add(comp.compaction_id)
                    out.append(
                        {
                            "role": "system",
                            "content": f"[summary of seq {cover[0]}..{cover[1]}] "
                            + (comp.summary or f"see {comp.summary_ref}"),
                        }
                    )
                continue
            if entry.kind == "user":
                out.append({"role": "user", "content": entry.text or ""})
            elif entry.kind == "assistant":
                out.append({"role": "assistant", "content": entry.text or ""})
            elif entry.kind == "tool_call" and entry.tool_call_id is not None:
                call = self.tools.get(entry.tool_call_id)
                if call is None or not call.has_result:
                    continue  # a call without its result is never shown to the model
                out.append(
                    {"role": "assistant", "toolCall": {"id": call.tool_call_id, "name": call.tool, "args": call.args}}
                )
                out.append({"role": "tool", "toolCallId": call.tool_call_id, "content": _result_text(call)})
        return out

    # --- snapshots -----------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """A JSON-ready dict. Records are stored as rows (lists in field order, the layout kept
        under ``rows``): a snapshot of a long session parses and loads several times faster
        than with one dict per record. The dict shares values with the state: serialize it,
        do not mutate it."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, kind in _MAPS.items():
            names = _ROW_FIELDS[kind]
            d[key] = {k: [getattr(v, n) for n in names] for k, v in d[key].items()}
        names = _ROW_FIELDS[Entry]
        d["entries"] = [[getattr(e, n) for n in names] for e in self.entries]
        d["rows"] = {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}
        return d

    @classmethod
    def load(cls, data: dict[str, Any]) -> SessionState:
        """The inverse of dump(); raises (KeyError, TypeError, ValueError) on any mismatch."""
        d = dict(data)
        layout = d.pop("rows")
        if layout != {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}:
            raise ValueError("snapshot rows have another layout than this reducer's state")
        for key, kind in _MAPS.items():
            d[key] = {k: kind(*row) for k, row in d[key].items()}
        d["entries"] = [Entry(*row) for row in d["entries"]]
        return cls(**d)


    # --- session snapshots: what open needs, and the history apart -------------------------
    #
    # A session snapshot holds the core (every field but the history, and the history maps'
    # items that are not history: open, pending, interrupted) and history parts, (keys, rows)
    # pairs of canonical JSON, later pairs overriding earlier ones. After a first save, a state
    # remembers what it saved (_SaveBase) and which keys the reducer looked up or added since
    # (_touched): the next save keeps the parts as they are and adds one pair for what changed,
    # so saving costs what was folded since, not the history.

    def dump_split(self) -> SplitDump:
        """What a session snapshot of this state holds: ``core`` and ``parts`` (see above).
        Call ``saved(dump)`` once it is durable, so the next dump adds to it."""
        lazy: _History | None = self.__dict__.get("_history")
        if lazy is not None and any(n in self.__dict__ for n in HISTORY_FIELDS):
            self._materialize()  # a caller replaced a map: start over from whole maps
            lazy = None
        base: _SaveBase | None = self.__dict__.get("_save_base")
        touched: dict[str, set[str]] | None = self.__dict__.get("_touched")
        if base is None or touched is None:
            return self._dump_whole()
        if lazy is not None and base.parts is None:
            try:
                base.parts = [lazy.parts.read(i) for i in range(lazy.parts.count())]
            except (OSError, ValueError):
                self._rebuild(lazy)  # a part damaged since the open: save the log's state whole
                return self._dump_whole()
        hot: dict[str, Any] = {}
        keys: dict[str, list[str]] = {}
        chunk: dict[str, Any] = {}
        hot_keys: dict[str, set[str]] = {}
        side = base.side
        for name in HISTORY_FIELDS:
            if name == "entries":
                continue
            view = self._view(name)
            is_cold = _COLD[name]
            hot[name], chunk[name], hot_keys[name] = {}, {}, set()
            for k in sorted(base.hot_keys[name] | touched[name], key=lambda k: getattr(view[k], _FIRST_SEQ[name])):
                v = view[k]
                if is_cold(v):
                    chunk[name][k] = _row(v)
                    side = side or (name == "tools" and v.has_side_effect)
                else:
                    hot[name][k] = _row(v)
                    hot_keys[name].add(k)
            keys[name] = list(chunk[name])
        entries = self._view("entries")
        offset = base.entries - (lazy.entries_before if lazy is not None else 0)
        chunk["entries"] = [_row(e) for e in entries[offset:]]
        parts = list(base.parts or [])
        if any(chunk.values()):
            parts += [_canonical(keys), _canonical(chunk)]
        return SplitDump(self._core(hot, side, base.entries + len(chunk["entries"])), parts,
                         _SaveBase(parts, hot_keys, base.entries + len(chunk["entries"]), side))

    def _dump_whole(self) -> SplitDump:
        self._materialize()
        hot: dict[str, Any] = {}
        keys: dict[str, list[str]] = {}
        chunk: dict[str, Any] = {}
        hot_keys: dict[str, set[str]] = {}
        side = False
        for name in HISTORY_FIELDS:
            if name == "entries":
                continue
            is_cold = _COLD[name]
            items = self.__dict__[name].items()
            hot[name] = {k: _row(v) for k, v in items if not is_cold(v)}
            chunk[name] = {k: _row(v) for k, v in items if is_cold(v)}
            hot_keys[name] = set(hot[name])
            keys[name] = list(chunk[name])
            if name == "tools":
                side = any(v.has_side_effect for v in self.__dict__[name].values() if is_cold(v))
        chunk["entries"] = [_row(e) for e in self.__dict__["entries"]]
        parts = [_canonical(keys), _canonical(chunk)] if any(chunk.values()) else []
        n = len(chunk["entries"])
        return SplitDump(self._core(hot, side, n), parts, _SaveBase(parts, hot_keys, n, side))

    def _core(self, hot: dict[str, Any], side: bool, entries: int) -> dict[str, Any]:
        core: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in HISTORY_FIELDS}
        for key in _MAPS:
            if key not in HISTORY_FIELDS:
                core[key] = {k: _row(v) for k, v in core[key].items()}
        core["hot"] = hot
        core["coldSideEffects"] = side
        core["entriesCount"] = entries
        core["rows"] = {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}
        return core

    def saved(self, dump: SplitDump) -> None:
        """``dump`` is durable: the next dump_split adds to it."""
        self.__dict__["_save_base"] = dump.base
        self.__dict__["_touched"] = {name: set() for name in HISTORY_FIELDS}

    @classmethod
    def load_split(
        cls, core: dict[str, Any], parts: HistoryParts, rebuild: Callable[[], SessionState] | None = None
    ) -> SessionState:
        """The inverse of dump_split, with the history left in ``parts`` until first use.

        ``rebuild`` gives the state from the log instead when a part turns out not to load
        (its digest or its JSON: a file damaged or crafted after the open read its head).
        Raises (KeyError, TypeError, ValueError) when the core does not load."""
        d = dict(core)
        layout = d.pop("rows")
        if layout != {kind.__name__: list(names) for kind, names in _ROW_FIELDS.items()}:
            raise ValueError("snapshot rows have another layout than this reducer's state")
        if parts.count() % 2:
            raise ValueError("history parts come in pairs (keys, rows)")
        hot_rows = d.pop("hot")
        side = d.pop("coldSideEffects")
        entries = d.pop("entriesCount")
        if not isinstance(side, bool):
            raise TypeError("coldSideEffects is not a bool")
        if type(entries) is not int or entries < 0:
            raise TypeError("entriesCount is not a count")
        # Canonical JSON sorts keys; a map's order is the order its keys came in: by first seq.
        for key, kind in _MAPS.items():
            if key not in HISTORY_FIELDS:
                d[key] = _by_first_seq(key, {_key(k): _obj(kind, row) for k, row in d[key].items()})
        state = cls(**d)
        hot: dict[str, Any] = {"entries": []}
        for name in HISTORY_FIELDS:
            if name != "entries":
                hot[name] = _by_first_seq(name, {_key(k): _obj(_MAPS[name], row) for k, row in hot_rows[name].items()})
        for name in HISTORY_FIELDS:
            del state.__dict__[name]
        state.__dict__["_history"] = _History(hot, parts, side, rebuild, entries)
        base = _SaveBase(None, {name: set(hot[name]) for name in HISTORY_FIELDS if name != "entries"}, entries, side)
        state.__dict__["_save_base"] = base
        state.__dict__["_touched"] = {name: set() for name in HISTORY_FIELDS}
        return state


@dataclass
class _SaveBase:
    """What the last session snapshot of a state holds: its parts (None: still only on disk,
    in the history of a lazily loaded state), the keys it saved as not history, the entries it
    saved, and whether a closed call in it had a side effect."""

    parts: list[bytes] | None
    hot_keys: dict[str, set[str]]
    entries: int
    side: bool


@dataclass
class SplitDump:
    core: dict[str, Any]
    parts: list[bytes]
    base: _SaveBase


class HistoryParts(Protocol):
    """The history parts of a session snapshot, read on demand: (keys, rows) pairs in the order
    they were saved, each verified against its digest when read (OSError or ValueError if not)."""

    def count(self) -> int: ...

    def read(self, index: int) -> bytes: ...

    def close(self) -> None: ...


@dataclass
class _History:
    """The history of a state loaded from a session snapshot, still on disk: ``parts`` reads it;
    ``hot`` holds what is not history (and what was folded since the load); ``cold_keys``, read
    on the first lookup that needs it, says which keys the history holds, so that a new key does
    not load it."""

    hot: dict[str, Any]
    parts: HistoryParts
    cold_side_effects: bool  # a closed call in the history had a side effect
    rebuild: Callable[[], SessionState] | None
    entries_before: int  # the entries the history holds (the hot list holds those after them)
    cold_keys: dict[str, set[str]] | None = None


HISTORY_FIELDS = ("tools", "turns", "steps", "approvals", "attempts", "entries")
_FIRST_SEQ = {"tools": "request_seq", "turns": "opened_seq", "steps": "opened_seq", "approvals": "requested_seq",
              "attempts": "first_seq", "compactions": "started_seq", "jobs": "started_seq"}


def _by_first_seq(name: str, items: dict[str, Any]) -> dict[str, Any]:
    """A map in the order the reducer added its keys: each is added at the seq it records first."""
    first = _FIRST_SEQ[name]
    return dict(sorted(items.items(), key=lambda kv: getattr(kv[1], first)))
# What is history: nothing a derived view, the gate, repair or a guard's refusal looks for.
_COLD: dict[str, Callable[[Any], bool]] = {
    "tools": lambda t: t.has_result and t.status not in ("TOOL_NOT_STARTED", "TOOL_OUTCOME_UNKNOWN"),
    "turns": lambda s: s.status not in ("running", "interrupted"),
    "steps": lambda s: s.status != "running",
    "approvals": lambda a: a.status != "pending",
    "attempts": lambda a: a.status == "complete",
}


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _row(v: Any) -> list[Any]:
    return [getattr(v, n) for n in _ROW_FIELDS[type(v)]]


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise TypeError(f"a key is not a string: {k!r}")
    return k


def _strs(v: Any) -> list[str]:
    if not isinstance(v, list) or not all(type(k) is str for k in v):
        raise TypeError("history keys are not a list of strings")
    return v


# Field types a loaded row must have (every byte of a snapshot may be crafted): int fields are
# seqs and counters, the rest strings or JSON values; "?" allows None.
_ROW_TYPES: dict[str, str] = {
    "opened_seq": "int", "closed_seq": "int?", "request_seq": "int", "started_seq": "int?", "result_seq": "int?",
    "requested_seq": "int", "decided_seq": "int?", "first_seq": "int", "deltas": "int", "seq": "int",
    "replaced_from_seq": "int?", "replaced_to_seq": "int?", "synthetic_close": "bool",
    "result_synthetic": "bool", "restart": "dict",
}


def _obj(kind: type, row: Any) -> Any:
    if not isinstance(row, list) or len(row) != len(_ROW_FIELDS[kind]):
        raise TypeError(f"a {kind.__name__} row has another shape: {row!r}")
    for name, value in zip(_ROW_FIELDS[kind], row, strict=True):
        want = _ROW_TYPES.get(name)
        if want is None:
            continue
        if value is None and want.endswith("?"):
            continue
        base = want.rstrip("?")
        ok = (isinstance(value, int) and not isinstance(value, bool)) if base == "int" else (
            isinstance(value, bool) if base == "bool" else isinstance(value, dict))
        if not ok:
            raise TypeError(f"{kind.__name__}.{name} is {value!r}")
    return kind(*row)


def _parse_keys(parts: HistoryParts) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {name: set() for name in HISTORY_FIELDS}
    for i in range(0, parts.count(), 2):
        keys = json.loads(parts.read(i))
        for name in HISTORY_FIELDS:
            if name != "entries":
                got = _strs(keys[name])
                out[name].update(got)
    return out


def _parse_chunks(parts: list[bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {name: {} for name in HISTORY_FIELDS}
    out["entries"] = []
    for i in range(1, len(parts), 2):
        chunk = json.loads(parts[i])
        for name in HISTORY_FIELDS:
            if name == "entries":
                out[name] += [_obj(Entry, row) for row in chunk[name]]
            else:
                out[name].update((_key(k), _obj(_MAPS[name], row)) for k, row in chunk[name].items())
    return out


_MAPS: dict[str, type] = {
    "turns": Span,
    "steps": Span,
    "tools": ToolCall,
    "approvals": Approval,
    "attempts": Attempt,
    "compactions": Compaction,
    "jobs": Job,
}
_ROW_FIELDS: dict[type, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(kind)) for kind in (Span, ToolCall, Approval, Attempt, Compaction, Job, Entry)
}


def _result_text(call: ToolCall) -> str:
    if call.status == "TOOL_NOT_STARTED":
        return "TOOL_NOT_STARTED: the session was interrupted before this tool ran; nothing was executed."
    if call.status == "TOOL_OUTCOME_UNKNOWN":
        if call.reconciled is not None:
            return f"TOOL_OUTCOME_UNKNOWN, then checked by the runtime: {call.reconciled}."
        return (
            "TOOL_OUTCOME_UNKNOWN: the session was interrupted after this tool started; it may or may not "
            "have taken effect. Check the current state before relying on it; do not repeat it blindly."
        )
    if isinstance(call.output, str):
        return f"{call.status}: {call.output}"
    return call.status
