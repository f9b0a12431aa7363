"""What the viewer knows of a session, folded from its records: a summary for the store page
(title, agent, counts, status), the resume gate's verdict, and each record as a display item.

Records are read as the journal holds them: any JSON value may sit in a record (a crafted file,
another writer), so every field is checked for its type before it is used, and nothing here
raises on a strange event; it is shown as it is. The gate's verdict comes from the session
layer itself (``SessionReducer`` and ``gate.evaluate``), fed the same records, so the viewer
says what a runtime resuming the session would be told.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

from journal.api import Record
from journal.session.envelope import decode
from journal.session.errors import SessionError
from journal.session.gate import ResumeChecks, evaluate
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry
from journal.session.state import SessionState

TITLE_CHARS_MAX = 160
TEXT_CHARS_MAX = 4000  # a message's or result's text shown before "show all" (the rest on demand)
ARGS_CHARS_MAX = 2000
JSON_TEXT_CHARS_MAX = 64 * 1024  # of a non-text value shown or indexed as indented JSON
STATE_BYTES_MAX = 4 * 1024 * 1024  # a gate state larger than this compressed is not cached: replayed instead
BRANCH_ENTRIES_MAX = 5000  # branch-tree entries a summary keeps (the page draws the tree from them)

# Event types by the filter group the session page offers.
GROUPS: dict[str, tuple[str, ...]] = {
    "message": ("user.message", "assistant.message", "assistant.delta"),
    "tool": ("tool.requested", "tool.started", "tool.output", "tool.result", "tool.reconciled",
             "approval.requested", "approval.decided"),
    "structure": ("turn.started", "turn.ended", "step.started", "step.ended", "model.requested"),
    "session": ("session.started", "session.forked", "session.resumed", "branch.switched", "goal.updated"),
    "other": (),
}
_GROUP_OF = {t: g for g, ts in GROUPS.items() for t in ts}


def group_of(event_type: str) -> str:
    return _GROUP_OF.get(event_type, "other")


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def text_of(data: Any) -> str:
    """The readable text of an event's data: ``text``, ``content`` (a string or parts), ``output``."""
    if not isinstance(data, dict):
        return ""
    for key in ("text", "content", "message", "summary"):
        v = data.get(key)
        if isinstance(v, str):
            return v
        if isinstance(v, list):
            parts = [p.get("text") if isinstance(p, dict) else p for p in v]
            joined = "\n".join(p for p in parts if isinstance(p, str))
            if joined:
                return joined
    return ""


def output_of(data: Any) -> str:
    if not isinstance(data, dict):
        return ""
    for key in ("output", "result", "content", "error", "text"):
        v = data.get(key)
        if isinstance(v, str):
            return v
        if v is not None:
            return json_text(v)
    return ""


def json_text(value: Any, chars_max: int = JSON_TEXT_CHARS_MAX) -> str:
    """``value`` as indented JSON, its first ``chars_max`` characters, written only that far:
    indenting puts each value after as many spaces as it is deep, so a small record nested deep
    is many times larger written whole (16 MiB nested 900 deep: some 7 GB)."""
    out: list[str] = []
    n = 0
    for chunk in json.JSONEncoder(ensure_ascii=False, indent=1, default=str).iterencode(value):
        out.append(chunk)
        n += len(chunk)
        if n >= chars_max:
            break
    return "".join(out)[:chars_max]


def usage_of(data: Any) -> dict[str, float]:
    """Token counts and cost an event's data carries (``usage``: input/output tokens, cost)."""
    if not isinstance(data, dict):
        return {}
    u = data.get("usage")
    out: dict[str, float] = {}
    if isinstance(u, dict):
        for src, dst in (("input_tokens", "in"), ("inputTokens", "in"), ("prompt_tokens", "in"),
                         ("output_tokens", "out"), ("outputTokens", "out"), ("completion_tokens", "out"),
                         ("cost", "cost"), ("costUsd", "cost"), ("cost_usd", "cost")):
            v = _number(u.get(src))
            if v is not None:
                out[dst] = out.get(dst, 0) + v
    for src in ("cost", "costUsd"):
        v = _number(data.get(src))
        if v is not None and "cost" not in out:
            out["cost"] = v
    return out


def _number(v: Any) -> float | None:
    """A JSON number as a finite float, or None: a crafted int past the float range (10**400)
    would raise OverflowError in whatever folds it, and stop the indexer's pass there."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


@dataclass
class Item:
    """One record as the page shows it."""

    seq: int
    type: str
    group: str
    time: str | None
    synthetic: bool
    raw: Any  # the event as stored (dict), or a description of raw bytes
    data: dict[str, Any] = field(default_factory=dict)

    def ids(self) -> dict[str, str]:
        if not isinstance(self.raw, dict):
            return {}
        return {k: v for k in ("turnId", "stepId", "attemptId", "toolCallId", "approvalId")
                if isinstance(v := self.raw.get(k), str)}


def item_of(rec: Record) -> Item:
    if rec.is_bytes:
        return Item(rec.seq, "(bytes)", "other", None, rec.synthetic, {"bytes": len(rec.payload)})
    ev = rec.event
    if not isinstance(ev, dict):
        return Item(rec.seq, "(value)", "other", None, rec.synthetic, ev)
    t = _str(ev.get("type")) or "(untyped)"
    data = ev.get("data")
    return Item(rec.seq, t, group_of(t), _str(ev.get("time")), rec.synthetic, ev,
                data if isinstance(data, dict) else {})


@dataclass
class Summary:
    """What the store page and the search index keep per session, folded record by record."""

    last_seq: int = 0
    events: int = 0
    title: str | None = None
    agent: str | None = None
    first_time: str | None = None
    last_time: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    closers: int = 0
    forks: list[dict[str, Any]] = field(default_factory=list)  # session.forked: childSessionId, forkSeq
    tools: dict[str, int] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)
    damage: str | None = None
    branch_entries: list[list[Any]] = field(default_factory=list)  # [entryId, parentId, seq] (branch.py's tree)
    branch_leaf: str | None = None  # the leaf: the last entry appended or the target of the last switch
    gate: dict[str, Any] | None = None  # decision, reasons, options; or error
    gate_state: bytes | None = None  # the reducer's state, compressed, to continue from last_seq
    gate_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "gate_state"}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], gate_state: bytes | None) -> Summary:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "gate_state"}
        return cls(**known, gate_state=gate_state)

    def status(self, live: bool) -> list[str]:
        """Badges, the first the one the store page sorts and filters by."""
        out = []
        if self.damage:
            out.append("damaged")
        if live:
            out.append("live")
        if self.gate is not None and self.gate.get("paused"):
            out.append("paused")
        if self.gate is not None and self.gate.get("dangling") and not live:
            out.append("interrupted")
        if self.closers:
            out.append("repaired")
        if not out:
            out.append("clean")
        return out


class Folder:
    """Folds records into a Summary, the session layer's reducer alongside for the gate."""

    def __init__(self, summary: Summary | None = None) -> None:
        self.s = summary or Summary()
        self.registry = Registry()
        self.reducer = SessionReducer()
        self.state: SessionState | None = None
        if self.s.gate_error is None:
            try:
                self.state = (SessionState.load(json.loads(zlib.decompress(self.s.gate_state)))
                              if self.s.gate_state else self.reducer.initial())
            except (ValueError, TypeError, KeyError, zlib.error):
                self.state = None
                self.s.gate_error = "the cached state could not be loaded"

    def feed(self, rec: Record) -> Item:
        s = self.s
        it = item_of(rec)
        s.last_seq = rec.seq
        s.events += 1
        if it.time:
            s.first_time = s.first_time or it.time
            s.last_time = it.time
        d = it.data
        if it.type == "session.started" and isinstance(d.get("lineage"), dict) \
                and d["lineage"].get("forkSeq") == rec.seq - 1:
            s.title = None  # a fork's title is its own first message, not its parent's
        if it.type == "session.started" and s.agent is None:
            imported = d.get("importedFrom")
            agent = (_str(imported.get("format")) if isinstance(imported, dict) else None) or _str(d.get("agent"))
            ws = d.get("workspace")
            s.agent = agent or (_str(ws.get("agent")) if isinstance(ws, dict) else None) or "journal"
        elif it.type == "user.message" and s.title is None:
            s.title = " ".join(text_of(d).split())[:TITLE_CHARS_MAX] or None
        elif it.type == "turn.started":
            s.turns += 1
        elif it.type == "tool.requested":
            s.tool_calls += 1
            tool = _str(d.get("tool")) or "?"
            s.tools[tool] = s.tools.get(tool, 0) + 1
        elif it.type == "tool.result" and _str(d.get("status")) not in (None, "ok"):
            s.tool_errors += 1
        elif it.type == "session.forked":
            s.forks.append({"childSessionId": _str(d.get("childSessionId")), "forkSeq": d.get("forkSeq"),
                            "seq": rec.seq})
        entry = d.get("entryId")
        if it.type == "branch.switched" and isinstance(d.get("leafId"), str):
            s.branch_leaf = d["leafId"]
        elif isinstance(entry, str) and len(s.branch_entries) < BRANCH_ENTRIES_MAX:
            parent = d.get("parentId")
            s.branch_entries.append([entry, parent if isinstance(parent, str) else None, rec.seq])
            s.branch_leaf = entry
        if it.synthetic:
            s.closers += 1
        for k, v in usage_of(d).items():
            s.usage[k] = s.usage.get(k, 0) + v
        if self.state is not None:
            try:
                got = decode(rec, self.registry)
                if got is not None:
                    self.state = self.reducer.apply(self.state, *got)
            except (SessionError, ValueError, TypeError, KeyError, AttributeError) as exc:
                self.state = None
                self.s.gate_error = f"seq {rec.seq}: {exc}"
        return it

    def finish(self) -> Summary:
        """The summary with the gate evaluated on the state so far, and that state saved."""
        s = self.s
        if self.state is None:
            s.gate = {"error": s.gate_error or "not a session the session layer reads"}
            s.gate_state = None
            return s
        st = self.state
        decision = evaluate(st)
        without_grant = evaluate(st, ResumeChecks(authorized=True))
        dangling = bool(st.open_turns() or st.open_steps() or st.pending_tools() or st.pending_approvals()
                        or st.running_jobs())
        s.gate = {
            "decision": decision.decision,
            "paused": without_grant.paused,  # paused for a reason beyond the grant every side effect needs
            "dangling": dangling,
            "reasons": [{"code": r.code, "severity": r.severity, "message": r.message, "subject": r.subject,
                         "options": list(r.options)} for r in decision.reasons],
            "options": decision.options(),
        }
        saved = st.dump()
        saved["entries"] = []  # the messages: the gate never reads them, and they are the bulk
        names = saved["rows"]["ToolCall"]
        for row in saved["tools"].values():
            row[names.index("args")] = None  # shown from the records; the gate never reads them
            row[names.index("output")] = None
        blob = zlib.compress(json.dumps(saved, default=str).encode())
        if len(blob) <= STATE_BYTES_MAX:
            s.gate_state = blob
        else:  # the next update cannot continue from it: the session page replays the session instead
            s.gate_state = None
            s.gate_error = f"the gate's state is over {STATE_BYTES_MAX} bytes; the session page evaluates it"
        return s
