"""A session as one Markdown document to read or share (``journal export --format markdown``).

The document is made from the log alone, opened read-only (no lock, no repair, not a byte
changed): a header with the session's title (its first user message), ids, lineage and counts;
then every event in seq order, turns as sections, messages quoted, each tool call with its
arguments and its result folded in ``<details>``; the closers a repair wrote marked as such with
what they close and why; and at the end the resume gate's verdict with its reasons and options,
and what a repair would still close. Transient events (deltas, live output, progress) are
counted, not shown: the complete message or result that follows them is.

Secrets are redacted by default (journal/session/redact.py lists the rules); every string of
every event goes through the one Redactor, and the header says how many it replaced. Text is
quoted so that what a model or a tool wrote cannot become the document's own structure: raw HTML
is escaped, code is fenced with a fence longer than any backtick run inside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from journal.session.envelope import Event
from journal.session.gate import GateDecision
from journal.session.redact import Redactor
from journal.session.repair import RepairReport
from journal.session.state import SessionState

TEXT_CHARS_MAX = 64 * 1024  # one message or tool output shown in full up to this many characters
TITLE_CHARS_MAX = 80
TRANSIENT = frozenset({"assistant.delta", "tool.output", "ui.progress"})


@dataclass
class TranscriptInput:
    """What a transcript is made of: the events in seq order and what replay and a dry-run repair say."""

    events: list[Event]
    state: SessionState
    gate: GateDecision
    repair: RepairReport | None = None
    where: str = ""
    damage: list[str] = field(default_factory=list)  # what the reader reported (torn tail, corruption)


def title_of(events: Iterable[Event]) -> str:
    for ev in events:
        if ev.type == "user.message":
            text = ev.data.get("text")
            if isinstance(text, str) and text.strip():
                first = text.strip().splitlines()[0]
                return first if len(first) <= TITLE_CHARS_MAX else first[: TITLE_CHARS_MAX - 1] + "…"
    return "(no user message)"


def _fence(text: str, shortest: int = 3) -> str:
    """A run of backticks longer than any inside ``text``: the text cannot close it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(shortest, longest + 1)


def _escape_html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str) -> tuple[str, int]:
    if len(text) <= TEXT_CHARS_MAX:
        return text, 0
    return text[:TEXT_CHARS_MAX], len(text) - TEXT_CHARS_MAX


def _inline(text: str) -> str:
    """One line of code-span text: backticks and newlines cannot break out of it."""
    flat = " ".join(text.split())
    fence = _fence(flat, 1)
    return f"{fence} {flat} {fence}" if "`" in flat else f"`{flat}`"


class _Writer:
    def __init__(self, redactor: Redactor) -> None:
        self.r = redactor
        self.out: list[str] = []

    def line(self, s: str = "") -> None:
        self.out.append(s)

    def quote(self, text: str) -> None:
        shown, more = _clip(self.r.text(text))
        for ln in _escape_html(shown).splitlines() or [""]:
            self.out.append(f"> {ln}" if ln else ">")
        if more:
            self.out.append(f"> … {more} more characters not shown")
        self.out.append("")

    def block(self, summary: str, value: Any) -> None:
        if isinstance(value, str):
            text, lang = self.r.text(value), ""
        else:
            text = json.dumps(self.r.value(value), indent=2, ensure_ascii=False, default=str)
            lang = "json"
        shown, more = _clip(text)
        fence = _fence(shown)
        lines = shown.count("\n") + 1
        self.out.append(f"<details><summary>{_escape_html(summary)} ({lines} lines)</summary>")
        self.out.append("")
        self.out.append(f"{fence}{lang}")
        self.out.append(shown)
        self.out.append(fence)
        if more:
            self.out.append(f"… {more} more characters not shown")
        self.out.append("")
        self.out.append("</details>")
        self.out.append("")


INLINE_DATA_CHARS_MAX = 160  # an event's data shown on its own line up to this, folded beyond
# What a closer's status means for the reader, in the words the resume gate uses.
CLOSER_MEANING = {
    "TOOL_OUTCOME_UNKNOWN": "the tool started and the log stops before its result: it may have run; "
                            "check the world before running it again",
    "TOOL_NOT_STARTED": "the call was requested and never started: it did not run",
    "interrupted": "the runtime stopped before this ended",
    "expired": "never decided before the runtime stopped; counts as denied",
}


def _closer_note(ev: Event) -> str:
    closes = ev.data.get("closes")
    what = str(ev.data.get("status") or ev.data.get("reason") or ev.data.get("decision") or "")
    target = ""
    if isinstance(closes, dict):
        target = f" closes {_escape_html(str(closes.get('type')))} at seq {_escape_html(str(closes.get('seq')))}"
    meaning = CLOSER_MEANING.get(what)
    return f"**written by repair** ({_escape_html(what)}){target}" + (f": {meaning}" if meaning else "")


def _event(w: _Writer, ev: Event, turns: list[int]) -> None:
    seq = f"seq {ev.seq}"
    when = f" · {ev.time}" if ev.time else ""
    mark = f" · {_closer_note(ev)}" if ev.synthetic else ""
    d = ev.data
    t = ev.type
    if t == "session.started":
        return  # the header says it
    if t == "turn.started":
        turns.append(ev.seq)
        w.line(f"## Turn {len(turns)}")
        w.line(f"*{seq}{when}*")
        w.line()
    elif t == "turn.ended":
        w.line(f"*turn ended: {_inline(str(d.get('reason', '')))} · {seq}*{mark}")
        w.line()
    elif t == "user.message":
        w.line(f"**User** · {seq}{when}")
        w.line()
        w.quote(str(d.get("text", "")))
    elif t == "assistant.message":
        w.line(f"**Assistant** · {seq}{when}")
        w.line()
        w.quote(str(d.get("text", "")))
    elif t == "tool.requested":
        w.line(f"**Tool call** {_inline(str(d.get('tool', '?')))} · id {_inline(ev.tool_call_id or '?')} · "
               f"side effect {d.get('sideEffect', '?')}, idempotency {d.get('idempotency', '?')} · {seq}{when}")
        w.line()
        w.block("arguments", d.get("args"))
    elif t == "tool.started":
        w.line(f"*tool {_inline(ev.tool_call_id or '?')} started · {seq}*")
        w.line()
    elif t == "tool.result":
        w.line(f"**Result** of {_inline(ev.tool_call_id or '?')}: **{_escape_html(str(d.get('status', '?')))}**"
               f" · {seq}{mark}")
        w.line()
        if "output" in d:
            w.block("output", d.get("output"))
        for ref in ("outputRef", "artifact"):
            if ref in d:
                w.line(f"artifact: {_inline(json.dumps(w.r.value(d[ref]), ensure_ascii=False))}")
                w.line()
    else:
        shown = {k: v for k, v in d.items() if not (ev.synthetic and k in ("closes", "lastFactSeq", "repairVersion"))}
        flat = json.dumps(w.r.value(shown), ensure_ascii=False, default=str) if shown else ""
        inline = f" · {_inline(flat)}" if shown and len(flat) <= INLINE_DATA_CHARS_MAX else ""
        w.line(f"*{_escape_html(t)}* · {seq}{when}{inline}{mark}")
        w.line()
        if shown and not inline:
            w.block("data", shown)


def _counts(events: list[Event]) -> tuple[int, int, int]:
    turns = sum(1 for e in events if e.type == "turn.started")
    calls = sum(1 for e in events if e.type == "tool.requested")
    transient = sum(1 for e in events if e.type in TRANSIENT)
    return turns, calls, transient


def render_markdown(src: TranscriptInput, redactor: Redactor) -> str:
    """The whole transcript as one Markdown document (UTF-8 text, ending in a newline)."""
    events = list(src.events)
    body = _Writer(redactor)
    turns: list[int] = []
    for ev in events:
        if ev.type not in TRANSIENT:
            _event(body, ev, turns)
    tail = _Writer(redactor)
    _gate(tail, src.gate)
    if src.repair is not None and src.repair.closers:
        tail.line("## What a repair would close")
        tail.line()
        for c in src.repair.closers:
            tail.line(f"- {_closer_note(c)}")
        tail.line()
    head = _Writer(redactor)
    st = src.state
    n_turns, n_calls, n_transient = _counts(events)
    head.line(f"# {_escape_html(redactor.text(title_of(events)))}")
    head.line()
    head.line(f"- session {_inline(st.session_id or '?')} · {len(events)} events ({n_transient} transient, "
              f"not shown) · {n_turns} turns · {n_calls} tool calls")
    parent = st.lineage.get("parentSessionId")
    if parent:
        head.line(f"- forked from {_inline(str(parent))} at seq {st.lineage.get('forkSeq')}"
                  f" (depth {st.lineage.get('depth')})")
    wpath = st.workspace.get("path")
    if wpath:
        head.line(f"- workspace {_inline(redactor.text(str(wpath)))}")
    for d in src.damage:
        head.line(f"- **damage**: {_escape_html(d)}")
    # The count is known only once every event went through the redactor: the header goes last.
    head.line(f"- secrets redacted: {redactor.total}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in sorted(redactor.counts.items())) + ")" if redactor.total else "")
        if redactor.enabled else "- secrets: not redacted (--no-redact)")
    head.line()
    return "\n".join([*head.out, *body.out, *tail.out]).rstrip("\n") + "\n"


def _gate(w: _Writer, gate: GateDecision) -> None:
    w.line(f"## Resume gate: {gate.decision}")
    w.line()
    for r in gate.reasons:
        subject = f" ({_inline(r.subject)})" if r.subject else ""
        w.line(f"- **{r.code}** [{r.severity}]{subject}: {_escape_html(w.r.text(r.message))}")
        for o in r.options:
            w.line(f"  - option: {_escape_html(w.r.text(o))}")
    if not gate.reasons:
        w.line("- nothing stands in the way of continuing")
    w.line()


def load(path: str) -> TranscriptInput:
    """Read the session at ``path`` (a journal directory or a server URL) without changing it.

    The journal is opened read-only: no writer lock, no repair. A torn tail or quarantined
    segment the read-only recovery saw is reported as damage in the header; what a repair would
    close is computed as a dry run.
    """
    from journal.session.session import Session

    s = Session.open(path, readonly=True)
    try:
        rec = s.journal.recovery
        damage: list[str] = []
        if rec.tail not in ("clean", "sealed", ""):
            damage.append(f"the tail of {rec.live_segment} is {rec.tail}"
                          + (f" at byte {rec.truncated_at} ({rec.truncated_bytes} bytes past the last whole record)"
                             if rec.truncated_at is not None else "")
                          + f"; seqs 1..{rec.last_seq} are whole and shown")
        damage += [f"quarantined segment {q}" for q in rec.quarantined]
        events = list(s.read())
        return TranscriptInput(events, s.state, s.resume_gate(), s.repair(dry_run=True), str(path), damage)
    finally:
        s.close()
