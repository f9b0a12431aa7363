"""HTML of the viewer's pages, rendered on the server: one renderer for the live page, its
fragments (more events, the live tail, store rows) and the standalone page another module may
write to a file (``render_session_html``).

Everything a journal holds is untrusted text: it reaches the page only through ``esc`` (or as
a JSON string through ``json.dumps`` into a data attribute, escaped too), never as markup.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote

from journal.session.artifacts import SCHEME, refs_in
from journal.view import assets
from journal.view.artifacts import UNAVAILABLE, VERIFIED, ArtifactReader
from journal.view.model import (
    ARGS_CHARS_MAX,
    TEXT_CHARS_MAX,
    Item,
    Summary,
    json_text,
    output_of,
    text_of,
    usage_of,
)
from journal.view.source import Entry

ARTIFACT_REFS_SHOWN_MAX = 20  # artifact references linked per event; the rest are counted
FILE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
COLLAPSE_LINES = 12  # a text longer than this many lines (or TEXT_CHARS_MAX/4 chars) starts collapsed


def esc(v: Any) -> str:
    return escape(v if isinstance(v, str) else str(v), quote=True)


def _time(t: str | None) -> str:
    if not t:
        return ""
    return f'<time datetime="{esc(t)}">{esc(t.replace("T", " ")[:19])}</time>'


def _parse_time(t: str | None) -> datetime.datetime | None:
    if not t:
        return None
    try:
        return datetime.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration_text(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def session_href(sid: str) -> str:
    return "/s/" + quote(sid, safe="")


@dataclass
class Context:
    """What rendering an event needs from the events before it: tool names and start times
    (durations), usage per turn. Advanced by every event read, shown or filtered out."""

    seen: int = 0
    tools: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # callId -> (tool, start time)
    turn_usage: dict[str, dict[str, float]] = field(default_factory=dict)
    turn_start: dict[str, str | None] = field(default_factory=dict)

    def advance(self, it: Item) -> None:
        self.seen = max(self.seen, it.seq)
        call = it.ids().get("toolCallId")
        d = it.data
        if call and it.type == "tool.requested":
            name = d.get("tool")
            self.tools[call] = (name if isinstance(name, str) else "tool", it.time)
        elif call and it.type == "tool.started" and call in self.tools:
            self.tools[call] = (self.tools[call][0], it.time or self.tools[call][1])
        turn = it.ids().get("turnId")
        if turn and it.type == "turn.started":
            self.turn_start[turn] = it.time
        if turn:
            for k, v in usage_of(d).items():
                u = self.turn_usage.setdefault(turn, {})
                u[k] = u.get(k, 0) + v

    def copy(self) -> Context:
        return Context(self.seen, dict(self.tools), {k: dict(v) for k, v in self.turn_usage.items()},
                       dict(self.turn_start))


def _usage_chips(u: dict[str, float]) -> str:
    out = []
    if "in" in u:
        # Formatted as floats: finite counts can still sum past the float range (to inf),
        # which int() would refuse with OverflowError.
        out.append(f'<span class="chip">in {u["in"]:,.0f} tok</span>')
    if "out" in u:
        out.append(f'<span class="chip">out {u["out"]:,.0f} tok</span>')
    if "cost" in u:
        out.append(f'<span class="chip">${u["cost"]:.4f}</span>')
    return "".join(out)


def _text_block(text: str, cls: str, seq: int, sid: str | None) -> str:
    cut = len(text) > TEXT_CHARS_MAX
    shown = text[:TEXT_CHARS_MAX]
    more = ""
    if cut:
        more = (f'<p class="cut">{len(text) - TEXT_CHARS_MAX:,} more characters not shown'
                + (f' · <a class="full" href="/api/session/{quote(sid, safe="")}/event/{seq}">the whole event</a>'
                   if sid is not None else "") + "</p>")
    long = cut or shown.count("\n") > COLLAPSE_LINES or len(shown) > TEXT_CHARS_MAX // 4
    body = f'<pre class="{cls}">{esc(shown)}</pre>{more}'
    if long:
        lines = text.count("\n") + 1
        return (f'<details class="long"><summary>{lines:,} lines, {len(text):,} characters</summary>'
                f"{body}</details>")
    return body


def artifact_block(d: dict[str, Any], artifacts: ArtifactReader | None) -> str:
    """Every ``artifact://`` reference in an event's data as a link to the viewer's artifact route,
    with a badge: the verdict of an earlier read when the blob is unchanged since, else a button
    that has it checked (hashing every blob at render would make a long page slow). Without an
    artifact store (a single journal, a server store, a page written to a file) the reference is
    said to be not available here."""
    digests = list(dict.fromkeys(r[len(SCHEME):] for r in refs_in(d)))  # each is SCHEME + 64 hex
    if not digests:
        return ""
    size = d.get("outputBytes") if type(d.get("outputBytes")) is int else None
    out_ref = d.get("outputRef") if isinstance(d.get("outputRef"), str) else None
    rows = []
    for digest in digests[:ARTIFACT_REFS_SHOWN_MAX]:
        label = f"artifact {digest[:12]}…"
        what = " (the whole output)" if out_ref == SCHEME + digest else ""
        sized = f" · {size:,} bytes" if what and size is not None else ""
        if artifacts is None or not artifacts.available:
            why = "not available here" + ("" if artifacts is None else f": {artifacts.where} has no artifact store")
            rows.append(f'<li><span class="id" title="{esc(digest)}">{esc(label)}</span>{what}{sized} '
                        f'<span class="badge artifact-state {UNAVAILABLE}">artifact {esc(why)}</span></li>')
            continue
        known = artifacts.cached(digest)
        if known is not None:
            cls = "ok" if known.state == VERIFIED else "err"
            badge = f'<span class="badge artifact-state {cls}">{esc(known.badge())}</span>'
            if known.size is not None:
                sized = f" · {known.size:,} bytes"
        else:
            badge = (f'<button type="button" class="badge artifact-check" data-digest="{esc(digest)}">'
                     "not checked yet: check</button>")
        rows.append(f'<li><a class="artifact" href="/artifact/{esc(digest)}" data-digest="{esc(digest)}" '
                    f'title="sha256 {esc(digest)}">{esc(label)}</a>{what}{sized} {badge}</li>')
    more = len(digests) - ARTIFACT_REFS_SHOWN_MAX
    if more > 0:
        rows.append(f'<li class="dim">{more:,} more artifact references (see the whole event)</li>')
    return f'<ul class="artifacts">{"".join(rows)}</ul>'


def _closer_note(it: Item) -> str:
    d = it.data
    closes = d.get("closes") if isinstance(d.get("closes"), dict) else {}
    what = d.get("status") or d.get("decision") or d.get("reason") or "closed"
    parts = [f'<span class="badge closer">synthetic closer</span> <strong>{esc(what)}</strong>']
    if closes:
        cseq = closes.get("seq")
        link = f'<a href="#e{int(cseq)}">seq {int(cseq)}</a>' if isinstance(cseq, int) else "?"
        parts.append(f"closes {esc(closes.get('type', '?'))} at {link}")
    if isinstance(d.get("lastFactSeq"), int):
        parts.append(f"after the last fact at seq {d['lastFactSeq']}: the runtime stopped ({esc(d.get('reason', ''))})")
    out = '<p class="why">' + " · ".join(parts) + "</p>"
    if isinstance(d.get("mustCheck"), str):
        out += f'<p class="must">{esc(d["mustCheck"])}</p>'
    if isinstance(d.get("effect"), str):
        out += f'<p class="must">{esc(d["effect"])}</p>'
    return out


def render_item(it: Item, ctx: Context, sid: str | None, children: dict[int, list[str]] | None = None,
                artifacts: ArtifactReader | None = None) -> str:
    """One event as an <article>; ``ctx`` must have seen the events before it (then is advanced)."""
    ids = it.ids()
    d = it.data
    call = ids.get("toolCallId")
    tool = d.get("tool") if isinstance(d.get("tool"), str) else (ctx.tools.get(call, ("", None))[0] if call else "")
    classes = ["ev", f"g-{it.group}"]
    if it.synthetic:
        classes.append("synthetic")
    head = [f'<a class="seq" href="#e{it.seq}">#{it.seq}</a>', f'<span class="type">{esc(it.type)}</span>']
    if tool:
        head.append(f'<span class="tool">{esc(tool)}</span>')
    for k in ("turnId", "stepId"):
        if k in ids:
            head.append(f'<span class="id" title="{k}">{esc(ids[k])}</span>')
    body = ""
    t = it.type
    if t in ("user.message", "assistant.message"):
        classes.append("msg-user" if t == "user.message" else "msg-assistant")
        body = _text_block(text_of(d), "text", it.seq, sid)
        u = usage_of(d)
        if u:
            body += f'<p class="usage">{_usage_chips(u)}</p>'
    elif t == "assistant.delta":
        body = f'<pre class="text dim">{esc(text_of(d)[:200])}</pre>'
    elif t == "tool.requested":
        args = d.get("args", d.get("arguments"))
        text = json_text(args, ARGS_CHARS_MAX * 4) if args is not None else "{}"
        meta = " ".join(f'<span class="chip">{esc(k)}: {esc(d[k])}</span>' for k in ("sideEffect", "idempotency")
                        if isinstance(d.get(k), str))
        body = f'<p class="meta">{meta}</p>' + _text_block(text, "args", it.seq, sid)
    elif t in ("tool.result", "tool.output", "tool.reconciled"):
        got = d.get("status")
        status = got if isinstance(got, str) else ("chunk" if t == "tool.output" else "")
        st_cls = "ok" if status == "ok" else ("warn" if status.startswith("TOOL_") else "err")
        badges = f'<span class="badge {st_cls}">{esc(status or "result")}</span>' if t != "tool.output" else ""
        started = ctx.tools.get(call, ("", None))[1] if call else None
        a, b = _parse_time(started), _parse_time(it.time)
        if a is not None and b is not None and t == "tool.result" and not it.synthetic:
            badges += f' <span class="chip">took {duration_text(max(0.0, (b - a).total_seconds()))}</span>'
        body = f'<p class="meta">{badges}</p>'
        if it.synthetic:
            body += _closer_note(it)
        out = output_of(d) if not it.synthetic else ""
        if out:
            body += _text_block(out, "output", it.seq, sid)
    elif t == "turn.started":
        classes.append("turn")
    elif t == "turn.ended":
        classes.append("turn-end")
        reason = d.get("reason") if isinstance(d.get("reason"), str) else ""
        u = ctx.turn_usage.get(ids.get("turnId", ""), {})
        body = f'<p class="meta"><span class="badge">{esc(reason or "ended")}</span> {_usage_chips(u)}</p>'
    elif t == "session.started":
        got_ws, got_lin = d.get("workspace"), d.get("lineage")
        ws: dict[str, Any] = got_ws if isinstance(got_ws, dict) else {}
        lin: dict[str, Any] = got_lin if isinstance(got_lin, dict) else {}
        parts = [f"workspace {esc(ws.get('path', '-'))}"]
        if isinstance(lin.get("parentSessionId"), str):
            p = lin["parentSessionId"]
            parts.append(f'fork of <a class="fork-parent" href="{session_href(p)}">{esc(p)}</a> at seq '
                         f'{esc(lin.get("forkSeq"))}')
        body = f'<p class="meta">{" · ".join(parts)}</p>'
    elif t == "branch.switched":
        to, frm = d.get("leafId"), d.get("fromLeafId")
        body = (f'<p class="meta">the leaf moved to <strong>{esc(to if isinstance(to, str) else "?")}</strong>'
                + (f" from {esc(frm)}" if isinstance(frm, str) else "") + "; nothing was rewritten</p>")
    elif t == "session.forked":
        child = d.get("childSessionId")
        if isinstance(child, str):
            body = (f'<p class="meta">forked into <a class="fork-child" href="{session_href(child)}">'
                    f"{esc(child)}</a></p>")
    elif not it.synthetic:  # a closer's fields are said in words by _closer_note
        shown = {k: v for k, v in d.items() if k not in ("entryId", "parentId", "import")}
        if shown:
            body = _text_block(json_text(shown, ARGS_CHARS_MAX * 4), "json", it.seq, sid)
    if it.synthetic and not t.startswith("tool."):
        body = _closer_note(it) + body
    body += artifact_block(d, artifacts)
    for child in (children or {}).get(it.seq, []):
        body += (f'<p class="forkpoint">↳ fork point: <a class="fork-child" href="{session_href(child)}">'
                 f"{esc(child)}</a> continues from here</p>")
    imported = d.get("import")
    if isinstance(imported, dict) and type(imported.get("line")) is int:
        # Where an imported event came from: the source's line (the original is kept in the record).
        head.append(f'<span class="chip" title="imported{" (derived)" if imported.get("derived") else ""}">'
                    f'source line {imported["line"]}</span>')
    if isinstance(d.get("entryId"), str):
        head.append(f'<span class="id" title="branch entry (parent {esc(d.get("parentId") or "root")})">'
                    f"⎇ {esc(d['entryId'])}</span>")
    ctx.advance(it)
    return (f'<article class="{" ".join(classes)}" id="e{it.seq}" data-seq="{it.seq}" data-type="{esc(t)}" '
            f'data-tool="{esc(tool)}" tabindex="-1"><header>{"".join(head)}{_time(it.time)}</header>{body}</article>')


def render_damage(where: dict[str, Any], resumes_after: int | None = None) -> str:
    """Where reading stopped, and why: segment, offset, seq and the reader's reason; and where
    it goes on (the next segment), or that nothing after it can be read."""
    parts = [f"{esc(k)} <strong>{esc(where[k])}</strong>" for k in ("segment", "offset", "seq") if where.get(k)
             is not None]
    seq = where.get("seq")
    if resumes_after is not None and isinstance(seq, int):
        gone = f"seq {seq}" + (f" to {resumes_after}" if resumes_after > seq else "")
        after = f"<p>{gone} cannot be read; reading goes on at seq {resumes_after + 1}, the next segment.</p>"
    else:
        after = "<p>Nothing after this point can be read.</p>"
    return (f'<article class="ev damage" data-seq="{int(seq) if isinstance(seq, int) else 0}" tabindex="-1"><header>'
            f'<span class="badge err">damage</span> reading stopped here</header><p>{", ".join(parts)}</p>'
            f'<pre class="text">{esc(where.get("message", ""))}</pre>{after}</article>')


def damage_banner(report: dict[str, Any] | None, read_error: dict[str, Any] | None) -> str:
    """The read-only verification's verdict and the reader's report, on top of the page."""
    rows = []
    if report is not None and report.get("verdict") not in (None, "clean"):
        torn = report.get("tornTail")
        if isinstance(torn, dict):
            rows.append(f"torn tail in segment <strong>{esc(torn.get('segment'))}</strong> at offset "
                        f"<strong>{esc(torn.get('offset'))}</strong> ({esc(torn.get('lengthBytes'))} bytes, seq "
                        f"{esc(torn.get('seqFirst'))}): {esc(torn.get('reason'))}; the records before it are "
                        "whole, and a writer's open (or `journal repair`) cuts it")
        for p in report.get("problems") or []:
            if isinstance(p, dict):
                rows.append(f"{esc(p.get('reason'))} in segment <strong>{esc(p.get('segment'))}</strong> at offset "
                            f"<strong>{esc(p.get('offset'))}</strong>, seq <strong>{esc(p.get('seqFirst'))}</strong>"
                            + (f" to {esc(p.get('seqLast'))}" if p.get("seqLast") not in (None, p.get("seqFirst"))
                               else ""))
    if read_error is not None and not rows:
        rows.append(esc(read_error.get("message", "")))
    if not rows and (report is None or report.get("verdict") in (None, "clean")):
        return ""
    verdict = esc((report or {}).get("verdict", "unreadable")).upper()
    items = "".join(f"<li>{r}</li>" for r in rows)
    return (f'<section class="damage-banner" role="alert"><h2>Damage: {verdict}</h2><ul>{items}</ul>'
            "<p>Shown below is everything that could be read. Nothing was changed: the viewer only reads.</p>"
            "</section>")


def gate_panel(s: Summary, live: bool) -> str:
    g = s.gate or {}
    if "error" in g:
        return (f'<section class="gate"><h2>Resume gate</h2><p class="dim">not evaluated: {esc(g["error"])}</p>'
                "</section>")
    decision = g.get("decision", "?")
    cls = "paused" if decision == "paused" else "ok"
    if decision == "paused" and not g.get("paused"):
        cls, decision = "grant", "paused until authorized"  # the grant every session with side effects needs
    rows = []
    for r in g.get("reasons") or []:
        opts = "".join(f"<li>{esc(o)}</li>" for o in r.get("options") or [])
        subj = f' <span class="id">{esc(r["subject"])}</span>' if r.get("subject") else ""
        rows.append(f'<li class="reason sev-{esc(r.get("severity"))}"><span class="badge">{esc(r.get("code"))}</span>'
                    f'{subj} {esc(r.get("message"))}' + (f'<ul class="options">{opts}</ul>' if opts else "") + "</li>")
    note = ' <span class="dim">(a writer holds it now: this is what a resume would be told if it stopped here)</span>' \
        if live else ""
    if s.damage:
        note += (f' <span class="dim">(evaluated on the {s.events:,} records read before the damage; the rest '
                 "could not be read)</span>")
    return (f'<section class="gate {cls}"><h2>Resume gate: <span class="verdict">{esc(decision)}</span>{note}</h2>'
            f'<ul class="reasons">{"".join(rows)}</ul></section>')


def branch_tree(s: Summary) -> str:
    """The session's branch tree (entries with entryId and parentId, journal.session.branch):
    each entry links to its event; the current leaf and the path to it are marked."""
    if not s.branch_entries:
        return ""
    kids: dict[str | None, list[list[Any]]] = {}
    known = {e[0] for e in s.branch_entries}
    for e in s.branch_entries:
        kids.setdefault(e[1] if e[1] in known else None, []).append(e)
    parent_of = {e[0]: e[1] for e in s.branch_entries}
    on_path, at = set(), s.branch_leaf
    while at is not None and at not in on_path:
        on_path.add(at)
        at = parent_of.get(at)

    # Each id is drawn once, however many records name it: children are found by id, so a
    # crafted journal repeating ids would otherwise have a subtree drawn once per record naming
    # its root, a count doubling per level (2^200 nodes from three records whose id is its own parent).
    drawn: set[str] = set()

    def node(e: list[Any], depth: int) -> str:
        # A straight run of single children is drawn as one line, so a long branch stays short.
        run = [e]
        drawn.add(e[0])
        while len(kids.get(run[-1][0], [])) == 1 and depth + len(run) < 200 \
                and kids[run[-1][0]][0][0] not in drawn:
            run.append(kids[run[-1][0]][0])
            drawn.add(run[-1][0])
        cls = ' class="here"' if run[-1][0] == s.branch_leaf else (' class="path"' if run[-1][0] in on_path else "")
        label = (f'<a href="#e{int(run[0][2])}">{esc(run[0][0])}</a>' if len(run) == 1 else
                 f'<a href="#e{int(run[0][2])}">{esc(run[0][0])}</a> … <a href="#e{int(run[-1][2])}">'
                 f"{esc(run[-1][0])}</a> <span class=\"dim\">({len(run)})</span>")
        sub = "".join(node(c, depth + len(run)) for c in kids.get(run[-1][0], []) if c[0] not in drawn) \
            if depth < 200 else ""
        return f"<li{cls}>{label}" + (f'<ul class="tree">{sub}</ul>' if sub else "") + "</li>"

    roots = "".join(node(e, 0) for e in kids.get(None, []) if e[0] not in drawn)
    leaves = sum(1 for e in s.branch_entries if e[0] not in kids)
    return (f'<h2>Branches</h2><p class="dim">{len(s.branch_entries)} entries, {leaves} leaves; leaf '
            f'{esc(s.branch_leaf or "-")}</p><ul class="tree branches">{roots}</ul>')


def _badges(statuses: Iterable[str]) -> str:
    return "".join(f'<span class="badge st-{esc(s)}">{esc(s)}</span>' for s in statuses)


def store_row(e: Entry, s: Summary | None, forks: int = 0) -> str:
    info = e.info
    sid = info.session_id
    title = (s.title if s is not None and s.title else None)
    statuses = s.status(e.live) if s is not None else (["live"] if e.live else ["not indexed yet"])
    lineage = ""
    if info.parent:
        lineage = (f'<span class="dim">fork of</span> <a class="fork-parent" href="{session_href(info.parent)}">'
                   f'{esc(info.parent)}</a> <span class="dim">@{esc(info.fork_seq)}</span>')
    if forks:
        lineage += f' <span class="chip">{forks} fork{"s" if forks > 1 else ""}</span>'
    ws = info.workspace.get("path") if isinstance(info.workspace.get("path"), str) else ""
    return (f'<tr data-sid="{esc(sid)}"><td class="title"><a href="{session_href(sid)}">'
            f'{esc(title or "(no user message)")}</a><div class="sub"><span class="id">{esc(sid)}</span>'
            f'{" · " + esc(ws) if ws else ""}</div></td>'
            f'<td>{esc((s.agent if s else None) or "-")}</td>'
            f'<td>{_time(info.created)}</td><td>{_time(info.updated)}</td>'
            f'<td class="num">{s.turns if s else "-"}</td><td class="num">{s.tool_calls if s else "-"}</td>'
            f'<td class="num">{info.last_seq:,}</td><td>{_badges(statuses)}</td><td>{lineage}</td></tr>')


def page(title: str, body: str, kind: str, extra_attrs: dict[str, str] | None = None, inline: bool = False) -> str:
    """A whole page: the style and script from the package (or inlined, for a standalone file)."""
    attrs = "".join(f' data-{k}="{esc(v)}"' for k, v in (extra_attrs or {}).items())
    if inline:
        # Opened from disk there is no server to send a policy: the page holds its own, allowing
        # its inlined style and nothing else (it has no script), so an escaping slip never runs.
        head = (f'<meta http-equiv="Content-Security-Policy" content="{FILE_CSP}">'
                f"<style>{assets.STYLE_CSS}</style>")
    else:
        head = ('<link rel="stylesheet" href="/static/style.css">'
                '<script src="/static/app.js" defer></script>')
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="color-scheme" content="light dark"><title>{esc(title)}</title>{head}</head>'
            f'<body data-page="{esc(kind)}"{attrs}>{body}</body></html>')


def render_session_html(session_id: str, items: Iterable[Item], summary: Summary | None = None,
                        verify_report: dict[str, Any] | None = None,
                        read_error: dict[str, Any] | None = None) -> str:
    """A session's timeline as one standalone HTML page: style inlined, no script, no network.

    ``items`` are the session's records as ``journal.view.model.item_of`` gives them, in seq
    order. For `journal export --format html` and anything else that writes a file.
    """
    ctx = Context()
    rows = "".join(render_item(it, ctx, None) for it in items)
    title = (summary.title if summary is not None and summary.title else None) or session_id
    gate = gate_panel(summary, False) if summary is not None and summary.gate else ""
    body = (f'<header class="top"><h1>{esc(title)}</h1><p class="sub"><span class="id">{esc(session_id)}</span></p>'
            f"</header><main>{damage_banner(verify_report, read_error)}{gate}"
            f'<section class="timeline">{rows}</section></main>')
    return page(title, body, "export", inline=True)
