"""The viewer's HTTP server: the standard library's ``http.server``, on 127.0.0.1 only.

Security model (docs/VIEWER.md says it for users):

- It binds 127.0.0.1, never another address, on a port the OS picks unless told.
- A random token (``secrets.token_urlsafe``, 32 bytes) is in the first URL it prints; a request
  carrying it gets a cookie holding it (HttpOnly, SameSite=Strict) and is sent on without the
  token in its URL. Every request needs the cookie or the token; anything else is refused (403).
- The Host header must be ``127.0.0.1:<port>`` or ``localhost:<port>``: a page of another site
  resolving its own name to 127.0.0.1 (DNS rebinding) is refused (403).
- GET and HEAD only. Responses carry a Content-Security-Policy allowing only the viewer's own
  script and style, no framing, no referrer.
- No part of a URL reaches the file system: static assets are a fixed table of names held in
  memory, a session id passes the store's id rule and must name a listed session, seqs are ints,
  an artifact is named by its 64-hex digest alone (journal/view/artifacts.py reads it, refusing a
  link, and hashes it whole before any byte is served).
- Everything is opened read-only: no lock is taken, nothing is repaired, no byte of the store
  changes. The search index lives in a cache directory outside the store.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from journal.api import JournalError
from journal.view import assets
from journal.view.artifacts import DAMAGED, MISSING, REFUSED, UNAVAILABLE, VERIFIED, ArtifactReader, Verdict
from journal.view.model import GROUPS, Item, Summary, item_of
from journal.view.render import (
    Context,
    branch_tree,
    damage_banner,
    esc,
    gate_panel,
    page,
    render_damage,
    render_item,
    session_href,
    store_row,
)
from journal.view.searchindex import SNIPPET_CLOSE, SNIPPET_OPEN, Indexer, SearchIndex
from journal.view.source import Entry, FileStore, SingleJournal, Source, UnknownSessionError

TOKEN_BYTES = 32
PAGE_EVENTS = 200  # events rendered per timeline page
PAGE_EVENTS_MAX = 2000  # per page when the page asks for more (going to an event far down)
SCAN_RECORDS_MAX = 20_000  # records one timeline request reads looking for filtered matches
STORE_PAGE_MAX = 500  # sessions per store page, at most
STORE_PAGE_DEFAULT = 50
ENTRIES_TTL_S = 1.0  # the store's index is re-read at most this often
HEARTBEAT_S = 15.0  # an SSE comment this often, so a closed tab is noticed
FOLLOW_POLL_S = 0.1
CONTEXTS_MAX = 32  # sessions whose rendering context is kept
VERIFY_LIVE_S = 30.0  # a live session's journal is verified again at most this often
TREE_NODES_MAX = 200
SEARCH_LIMIT = 50
SORTS = ("updated", "created", "title", "turns", "tools", "seq", "status", "agent", "id")
STATIC = {"style.css": ("text/css; charset=utf-8", assets.STYLE_CSS.encode()),
          "app.js": ("text/javascript; charset=utf-8", assets.APP_JS.encode())}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SESSION_PATH = re.compile(r"^/s/([^/]+)$")
SAFE_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9._~%/-]*")
API_SESSION = re.compile(r"^/api/session/([^/]+)/(summary|events|stream|event/(\d{1,19}))$")
ARTIFACT_PATH = re.compile(r"^/(api/)?artifact/([^/]*)(/raw)?$")
ARTIFACT_DIGEST = re.compile(r"[0-9a-f]{64}")  # the only thing of the URL that reaches the artifact store
ARTIFACT_INLINE_BYTES = 1 << 20  # 1 MiB of an artifact's text shown per page; the whole is a download
ARTIFACT_STATUS = {MISSING: HTTPStatus.NOT_FOUND, REFUSED: HTTPStatus.FORBIDDEN, UNAVAILABLE: HTTPStatus.NOT_FOUND,
                   DAMAGED: HTTPStatus.UNPROCESSABLE_ENTITY}
KEYS_HELP = ('<p class="keys"><kbd>j</kbd>/<kbd>k</kbd> next/previous event · <kbd>n</kbd>/<kbd>p</kbd> turn · '
             "<kbd>c</kbd> next closer or damage · <kbd>Enter</kbd> expand · <kbd>g</kbd>/<kbd>G</kbd> top/end</p>")


@dataclass
class Page:
    html: str
    next: int
    done: bool
    last_seq: int


class Viewer:
    """What the handler serves: a source, its derived index, rendering contexts."""

    def __init__(self, source: Source, cache_dir: str, rebuild_index: bool = False, index_in_background: bool = True):
        self.source = source
        root = source.root if isinstance(source, FileStore) else None
        # The index is kept outside whatever the viewer reads: a store, or a lone local journal's directory.
        local = source.target if isinstance(source, SingleJournal) and not source.remote else None
        self.index = SearchIndex(cache_dir, root or local, rebuild=rebuild_index)
        where = {"journal": "a single journal", "server": "a server store"}.get(source.kind, source.kind)
        self.artifacts = ArtifactReader(root, where)
        self.token = secrets.token_urlsafe(TOKEN_BYTES)
        self._entries: tuple[float, dict[str, Entry]] | None = None
        self._lock = threading.Lock()
        self._contexts: OrderedDict[str, tuple[threading.Lock, Context]] = OrderedDict()
        self._verify: dict[tuple[str, int], dict[str, Any] | None] = {}
        self._summaries: tuple[int, dict[str, Summary]] = (-1, {})
        self._verified_live: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self.stop = threading.Event()
        self.indexer = Indexer(self.index, source, self.entries)
        if index_in_background:
            self.indexer.start()

    # --- the store ----------------------------------------------------------------------

    def entries(self) -> dict[str, Entry]:
        with self._lock:
            now = time.monotonic()
            if self._entries is None or now - self._entries[0] > ENTRIES_TTL_S:
                self._entries = (now, self.source.entries())
            return self._entries[1]

    def summaries(self) -> dict[str, Summary]:
        """Every session's summary, read again only after the index changed."""
        version = self.index.version
        if self._summaries[0] != version:
            self._summaries = (version, self.index.summaries())
        return self._summaries[1]

    def listing(self, q: dict[str, str]) -> dict[str, Any]:
        entries = self.entries()
        sums = self.summaries()
        status, agent = q.get("status", ""), q.get("agent", "")
        text = q.get("text", "").casefold()
        rows: list[tuple[Entry, Summary | None]] = []
        for e in entries.values():
            s = sums.get(e.session_id)
            if s is not None and s.last_seq < e.info.last_seq:
                self.indexer.kick()
            if status and (s is None or status not in s.status(e.live)) and not (status == "live" and e.live):
                continue
            if agent and (s is None or s.agent != agent):
                continue
            if text:
                hay = f"{e.session_id} {s.title if s else ''} {e.info.workspace.get('path', '')}".casefold()
                if text not in hay:
                    continue
            rows.append((e, s))
        sort = q.get("sort", "updated") if q.get("sort") in SORTS else "updated"
        desc = q.get("order", "desc") != "asc"
        keys: dict[str, Callable[[tuple[Entry, Summary | None]], Any]] = {
            "updated": lambda r: r[0].info.updated or "",
            "created": lambda r: r[0].info.created or "",
            "title": lambda r: ((r[1].title or "") if r[1] else "").casefold(),
            "turns": lambda r: r[1].turns if r[1] else -1,
            "tools": lambda r: r[1].tool_calls if r[1] else -1,
            "seq": lambda r: r[0].info.last_seq,
            "status": lambda r: r[1].status(r[0].live)[0] if r[1] else "",
            "agent": lambda r: (r[1].agent or "") if r[1] else "",
            "id": lambda r: r[0].session_id,
        }
        key = keys[sort]
        rows.sort(key=lambda r: (key(r), r[0].session_id), reverse=desc)
        offset = max(0, _int(q.get("offset"), 0))
        limit = max(1, min(STORE_PAGE_MAX, _int(q.get("limit"), STORE_PAGE_DEFAULT)))
        shown = rows[offset: offset + limit]
        agents = sorted({s.agent for s in sums.values() if s.agent})
        forks: dict[str, int] = {}
        for e in entries.values():
            if e.info.parent:
                forks[e.info.parent] = forks.get(e.info.parent, 0) + 1
        return {
            "total": len(rows), "offset": offset, "limit": limit, "sort": sort, "order": "desc" if desc else "asc",
            "sessions": [{**e.info.to_json(), "live": e.live, "title": s.title if s else None,
                          "agent": s.agent if s else None, "turns": s.turns if s else None,
                          "toolCalls": s.tool_calls if s else None,
                          "status": s.status(e.live) if s else None} for e, s in shown],
            "html": "".join(store_row(e, s, forks.get(e.session_id, 0)) for e, s in shown)
                    or '<tr><td colspan="9" class="dim">no session matches</td></tr>',
            "agents": agents,
            "indexing": {"done": self.indexer.done, "total": self.indexer.total,
                         "pending": sum(1 for e in entries.values() if e.session_id not in sums)},
        }

    def search(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        hits = self.index.search(text, SEARCH_LIMIT)
        took_ms = (time.perf_counter() - t0) * 1000
        # A fork holds its parent's records up to its fork point: the parent's hit stands for both.
        entries = self.entries()
        found = {(h.session_id, h.seq) for h in hits}

        def inherited(sid: str, seq: int) -> bool:
            e = entries.get(sid)
            p, at = (e.info.parent, e.info.fork_seq) if e is not None else (None, None)
            return p is not None and isinstance(at, int) and seq <= at and (p, seq) in found

        hits = [h for h in hits if not inherited(h.session_id, h.seq)]
        sums = self.summaries() if hits else {}
        rows = []
        for h in hits:
            snip = esc(h.snippet).replace(SNIPPET_OPEN, "<mark>").replace(SNIPPET_CLOSE, "</mark>")
            title = sums[h.session_id].title if h.session_id in sums and sums[h.session_id].title else h.session_id
            rows.append(f'<li data-sid="{esc(h.session_id)}" data-seq="{h.seq}"><a href="{session_href(h.session_id)}'
                        f'#e{h.seq}">{esc(title)}</a> <span class="badge">{esc(h.kind)}</span>'
                        + (f' <span class="tool">{esc(h.tool)}</span>' if h.tool else "")
                        + f' <span class="id">seq {h.seq}</span><div class="snip">{snip}</div></li>')
        head = f'<li class="dim">{len(hits)} match{"es" if len(hits) != 1 else ""} in {took_ms:.1f} ms</li>'
        return {"hits": [h.__dict__ for h in hits], "tookMs": took_ms, "html": head + "".join(rows)}

    # --- a session ----------------------------------------------------------------------

    def _context(self, sid: str) -> tuple[threading.Lock, Context]:
        with self._lock:
            got = self._contexts.get(sid)
            if got is None:
                got = (threading.Lock(), Context())
                self._contexts[sid] = got
                while len(self._contexts) > CONTEXTS_MAX:
                    self._contexts.popitem(last=False)
            self._contexts.move_to_end(sid)
            return got

    def events(self, sid: str, after: int, groups: set[str] | None, tool: str,
               children: dict[int, list[str]] | None = None, limit: int = PAGE_EVENTS) -> Page:
        lock, ctx = self._context(sid)
        with lock, self.source.open_journal(sid) as j:
            last = j.last_seq
            if ctx.seen > after:
                ctx.__init__()  # type: ignore[misc]  # read again from the start
            out: list[str] = []
            nxt, shown, scanned = after, 0, 0
            try:
                if ctx.seen < after:
                    for rec in j.read(after_seq=ctx.seen):
                        if rec.seq > after:
                            break
                        ctx.advance(item_of(rec))
                for rec in j.read(after_seq=after):
                    it = item_of(rec)
                    nxt = rec.seq
                    scanned += 1
                    if _matches(it, ctx, groups, tool):
                        out.append(render_item(it, ctx, sid, children, self.artifacts))
                        shown += 1
                    else:
                        ctx.advance(it)
                    if shown >= limit or scanned >= SCAN_RECORDS_MAX:
                        break
            except JournalError as exc:
                where = _where(exc)
                skip = self._skip_to(sid, where.get("seq"))
                out.append(render_damage(where, skip))
                if isinstance(skip, int) and skip > nxt:
                    nxt = skip
                    ctx.seen = skip
                else:
                    nxt = last  # nothing more can be read past it
            return Page("".join(out), nxt, nxt >= last, last)

    def _skip_to(self, sid: str, bad: Any) -> int | None:
        """Where reading goes on after damage at seq ``bad``: before the next segment's first
        record (a reader cannot step over a bad frame inside its segment; the next segment is
        read from its own header). None when no later segment is known."""
        if not isinstance(bad, int):
            return None
        later = [b for b in self.source.segment_bases(sid) if b > bad]
        return min(later) - 1 if later else None

    def verify(self, sid: str) -> dict[str, Any] | None:
        """The read-only verification of the session's journal, once per last seq; a live
        session's at most every VERIFY_LIVE_S (it reads every frame, and a writer moves on)."""
        entry = self.entries().get(sid)
        key = (sid, entry.info.last_seq if entry else -1)
        now = time.monotonic()
        with self._lock:
            if key in self._verify:
                return self._verify[key]
            if entry is not None and entry.live:
                recent = self._verified_live.get(sid)
                if recent is not None and now - recent[0] < VERIFY_LIVE_S:
                    return recent[1]
        try:
            got = self.source.verify(sid)
        except (JournalError, OSError) as exc:
            got = {"verdict": "unreadable", "problems": [], "message": str(exc)}
        with self._lock:
            for old in [k for k in self._verify if k[0] == sid]:
                del self._verify[old]  # one verdict kept per session: the latest
            self._verify[key] = got
            self._verified_live[sid] = (now, got)
        return got

    def summary(self, sid: str) -> dict[str, Any]:
        entry = self.entries().get(sid)
        live = entry.live if entry else False
        read_error = None
        try:
            s = self.index.update_session(self.source, sid)
        except JournalError as exc:
            s, read_error = Summary(damage=str(exc)), _where(exc)
        report = self.verify(sid)
        if s.damage and read_error is None:
            read_error = {"message": s.damage}
        statuses = s.status(live)
        verdict = (report or {}).get("verdict")
        if verdict not in (None, "clean"):  # what the read-only verification found, beside the reader's
            statuses = [f"verify: {verdict}", *[x for x in statuses if x != "clean"]]
        facts = [("status", " ".join(statuses)), ("agent", s.agent or "-"), ("events", f"{s.events:,}"),
                 ("turns", str(s.turns)), ("tool calls", f"{s.tool_calls} ({s.tool_errors} not ok)"),
                 ("synthetic closers", str(s.closers)),
                 ("first", (s.first_time or "-").replace("T", " ")[:19]),
                 ("last", (s.last_time or "-").replace("T", " ")[:19])]
        if s.usage:
            facts.append(("usage", ", ".join(f"{k} {v:,.4g}" for k, v in s.usage.items())))
        facts_html = "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts) + "</dl>"
        facts_html += branch_tree(s)
        return {"summary": s.to_json(), "verify": report,
                "gate_html": damage_banner(report, read_error) + gate_panel(s, live), "facts_html": facts_html}

    def tree(self, sid: str) -> str:
        """The fork tree this session belongs to, from the store's index (parent ids)."""
        entries = self.entries()
        parent = {k: e.info.parent for k, e in entries.items()}
        kids: dict[str, list[str]] = {}
        for k, p in parent.items():
            if p:
                kids.setdefault(p, []).append(k)
        root, seen = sid, {sid}
        while parent.get(root) and parent[root] in entries and parent[root] not in seen:
            root = parent[root]  # type: ignore[assignment]
            seen.add(root)
        budget = [TREE_NODES_MAX]

        def node(k: str, depth: int) -> str:
            budget[0] -= 1
            if budget[0] < 0 or depth > 50:
                return ""
            e = entries.get(k)
            at = f' <span class="id">@{esc(e.info.fork_seq)}</span>' if e and e.info.fork_seq else ""
            sub = "".join(node(c, depth + 1) for c in sorted(kids.get(k, [])))
            cls = ' class="here"' if k == sid else ""
            return (f'<li{cls}><a href="{session_href(k)}">{esc(k)}</a>{at}'
                    + (f'<ul class="tree">{sub}</ul>' if sub else "") + "</li>")

        if root == sid and not kids.get(sid):
            return '<p class="dim">no forks</p>'
        return f'<ul class="tree">{node(root, 0)}</ul>'

    def children_at(self, sid: str) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for k, e in self.entries().items():
            if e.info.parent == sid and isinstance(e.info.fork_seq, int):
                out.setdefault(e.info.fork_seq, []).append(k)
        return out

    def store_page(self) -> str:
        d = self.listing({})
        agents = "".join(f'<option value="{esc(a)}">{esc(a)}</option>' for a in d["agents"])
        statuses = "".join(f'<option value="{s}">{s}</option>'
                           for s in ("clean", "live", "repaired", "interrupted", "paused", "damaged"))
        heads = "".join(f'<th data-sort="{k}"{" class=sorted" if k == "updated" else ""}>{label}</th>' if k else
                        f"<th>{label}</th>"
                        for k, label in (("title", "Session"), ("agent", "Agent"), ("created", "Created"),
                                         ("updated", "Updated"), ("turns", "Turns"), ("tools", "Tools"),
                                         ("seq", "Events"), ("status", "Status"), ("", "Lineage")))
        n = d["total"]
        body = (f'<header class="top"><h1>Sessions</h1><p class="sub">{esc(self.source.kind)} '
                f'<span class="id">{esc(self.source.location)}</span> · read-only</p></header><main>'
                '<form id="search" class="toolbar" role="search"><input type="search" id="q" name="q" '
                'placeholder="Search messages, tools, arguments, results  ( / )" autocomplete="off">'
                '<button>Search</button></form><ul id="results" class="results"></ul>'
                '<form id="filters" class="toolbar"><input type="search" id="filter-text" name="text" '
                f'placeholder="Filter by title, id or workspace"><label>status <select name="status"><option value="">'
                f'any</option>{statuses}</select></label><label>agent <select name="agent"><option value="">any'
                f'</option>{agents}</select></label></form>'
                f'<table class="sessions"><thead><tr>{heads}</tr></thead><tbody id="rows">{d["html"]}</tbody></table>'
                f'<div class="pager"><button id="prev" type="button" disabled>← Previous</button>'
                f'<button id="next" type="button"{" disabled" if n <= d["limit"] else ""}>Next →</button>'
                f'<span id="count">{n:,} session{"s" if n != 1 else ""}</span></div></main>')
        return page("Sessions · journal view", body, "store",
                    {"total": str(n), "limit": str(d["limit"]), "pending": str(d["indexing"]["pending"])})

    def session_page(self, sid: str) -> str:
        entries = self.entries()
        entry = entries.get(sid)
        if entry is None:
            raise UnknownSessionError(sid)
        cached = self.index.summary(sid)
        children = self.children_at(sid)
        first = self.events(sid, 0, None, "", children)
        title = (cached.title if cached and cached.title else None) or sid
        tools = sorted(cached.tools) if cached else []
        groups = "".join(f'<label><input type="checkbox" name="g" value="{g}" checked> {g}</label>' for g in GROUPS)
        tool_opts = "".join(f'<option value="{esc(t)}">{esc(t)}</option>' for t in tools)
        info = entry.info
        lineage = ""
        if info.parent:
            lineage = (f' · fork of <a class="fork-parent" href="{session_href(info.parent)}">{esc(info.parent)}</a>'
                       f" at seq {esc(info.fork_seq)}")
        body = (f'<header class="top"><p class="sub"><a href="/">← Sessions</a></p><h1>{esc(title)}</h1>'
                f'<p class="sub"><span class="id">{esc(sid)}</span>{lineage} · last seq <span id="last">'
                f'{first.last_seq}</span> <span id="live" hidden>· <span class="live-dot"></span>following</span>'
                "</p></header>"
                '<main><div class="layout"><div><div id="gate"><p class="dim">evaluating the resume gate…</p></div>'
                f'<form id="evfilters" class="toolbar">{groups}<label>tool <select id="tool" name="tool">'
                f'<option value="">any</option>{tool_opts}</select></label></form>'
                f'<section id="timeline" class="timeline">{first.html}</section><div id="loading"></div></div>'
                f'<aside><section><h2>Session</h2><div id="facts"><span class="dim">…</span></div></section>'
                f'<section><h2>Fork tree</h2>{self.tree(sid)}</section><section><h2>Keys</h2>{KEYS_HELP}</section>'
                "</aside></div></main>")
        return page(f"{title} · journal view", body, "session",
                    {"sid": sid, "next": str(first.next), "done": "1" if first.done else "0",
                     "last": str(first.last_seq), "start": str(first.last_seq)})

    def close(self) -> None:
        self.stop.set()
        self.indexer.stop.set()
        self.indexer.kick()


def _int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _where(exc: BaseException) -> dict[str, Any]:
    return {"segment": getattr(exc, "segment", None), "offset": getattr(exc, "offset", None),
            "seq": getattr(exc, "seq", None), "message": str(exc)}


def _matches(it: Item, ctx: Context, groups: set[str] | None, tool: str) -> bool:
    if groups is not None and it.group not in groups:
        return False
    if tool:
        call = it.ids().get("toolCallId")
        name = it.data.get("tool") if isinstance(it.data.get("tool"), str) else (
            ctx.tools.get(call, ("", None))[0] if call else "")
        return name == tool
    return True


def _groups(q: dict[str, str]) -> set[str] | None:
    if "groups" not in q:
        return None
    return {g for g in q["groups"].split(",") if g in GROUPS}


class Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    protocol_version = "HTTP/1.1"
    server_version = "journal-view"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _end_if_body(self) -> None:
        """A request body is never read here, and an unread one would be parsed as the next
        request of a kept-alive connection (one of another page's writing, in a form it posts):
        a request that has one ends its connection after the answer."""
        if self.headers.get("Content-Length", "0").strip() != "0" or "Transfer-Encoding" in self.headers:
            self.close_connection = True

    def do_POST(self) -> None:
        self._end_if_body()
        self._plain(HTTPStatus.METHOD_NOT_ALLOWED, "the viewer only reads: GET and HEAD")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_POST

    def _send(self, status: int, ctype: str, data: bytes, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _plain(self, status: int, text: str) -> None:
        self._send(status, "text/plain; charset=utf-8", (text + "\n").encode())

    def _json(self, obj: Any) -> None:
        self._send(200, "application/json", json.dumps(obj, default=str).encode())

    def _html(self, text: str) -> None:
        self._send(200, "text/html; charset=utf-8", text.encode("utf-8", "surrogateescape"))

    def _allowed(self, query: dict[str, str]) -> bool:
        """The Host check, then the token (URL) or the cookie; False once the refusal is sent."""
        port = self.server.server_address[1]
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or hosts[0] not in (f"127.0.0.1:{port}", f"localhost:{port}"):
            self._plain(HTTPStatus.FORBIDDEN, "refused: the Host header must be 127.0.0.1:PORT or localhost:PORT")
            return False
        token = self.server.viewer.token
        given = query.get("token")
        if given is not None and hmac.compare_digest(given.encode(), token.encode()):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(self.headers.get("Cookie") or "")
        except Exception:  # a malformed cookie header is no token
            cookie = SimpleCookie()
        morsel = cookie.get(self.server.cookie_name)
        if morsel is not None and hmac.compare_digest(morsel.value.encode(), token.encode()):
            return True
        self._plain(HTTPStatus.FORBIDDEN, "refused: open the URL `journal view` printed (it holds the token)")
        return False

    def do_GET(self) -> None:
        self._end_if_body()
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if not self._allowed(query):
            return
        if "token" in query:  # the token goes into the cookie and out of the address bar and history
            cookie = (f"{self.server.cookie_name}={self.server.viewer.token}; HttpOnly; SameSite=Strict; Path=/")
            rest = "&".join(f"{quote(k)}={quote(v)}" for k, v in query.items() if k != "token")
            # Only a path of this server: never "//host" or "/\\host", which a browser takes for another site.
            path = parts.path if SAFE_PATH.fullmatch(parts.path) else "/"
            self._send(HTTPStatus.SEE_OTHER, "text/plain", b"", {"Location": path + ("?" + rest if rest else ""),
                                                                 "Set-Cookie": cookie})
            return
        try:
            self._route(parts.path, query)
        except UnknownSessionError as exc:
            self._plain(HTTPStatus.NOT_FOUND, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass
        except (JournalError, OSError) as exc:
            self._plain(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _route(self, path: str, q: dict[str, str]) -> None:
        v = self.server.viewer
        if path == "/":
            if v.source.kind == "journal":
                (sid,) = v.entries()
                self._send(HTTPStatus.SEE_OTHER, "text/plain", b"", {"Location": session_href(sid)})
                return
            self._html(v.store_page())
            return
        if path.startswith("/static/"):
            got = STATIC.get(path[len("/static/"):])
            if got is None:
                self._plain(HTTPStatus.NOT_FOUND, "no such asset")
                return
            self._send(200, got[0], got[1])
            return
        if path == "/api/sessions":
            self._json(v.listing(q))
            return
        if path == "/api/search":
            self._json(v.search(q.get("q", "")))
            return
        m = ARTIFACT_PATH.match(path)
        if m:
            self._artifact(m.group(2), api=bool(m.group(1)), raw=bool(m.group(3)), q=q)
            return
        m = SESSION_PATH.match(path)
        if m:
            self._html(v.session_page(self._sid(m.group(1))))
            return
        m = API_SESSION.match(path)
        if m:
            sid, what = self._sid(m.group(1)), m.group(2)
            if what == "summary":
                self._json(v.summary(sid))
            elif what == "events":
                limit = max(1, min(PAGE_EVENTS_MAX, _int(q.get("limit"), PAGE_EVENTS)))
                p = v.events(sid, max(0, _int(q.get("after"), 0)), _groups(q), q.get("tool", ""), v.children_at(sid),
                             limit)
                self._json({"html": p.html, "next": p.next, "done": p.done, "last_seq": p.last_seq})
            elif what == "stream":
                self._stream(sid, max(0, _int(q.get("after"), 0)), _groups(q), q.get("tool", ""))
            else:
                self._event(sid, int(m.group(3)))
            return
        self._plain(HTTPStatus.NOT_FOUND, "no such page")

    def _sid(self, raw: str) -> str:
        sid = unquote(raw)
        if sid not in self.server.viewer.entries():
            raise UnknownSessionError(sid[:200])
        return sid

    def _artifact(self, digest: str, api: bool, raw: bool, q: dict[str, str]) -> None:
        """An artifact's content, read whole and hashed before any of it is served: its text
        escaped in a page (ARTIFACT_INLINE_BYTES a page), or the whole as a download. A blob that
        does not hash to its name is named damaged with the reason and never served."""
        if not ARTIFACT_DIGEST.fullmatch(digest) or (api and raw):
            self._plain(HTTPStatus.BAD_REQUEST, "refused: an artifact is named by its SHA-256 digest, 64 lowercase "
                                                "hex digits (/artifact/<digest>), never by a path")
            return
        reader = self.server.viewer.artifacts
        if api:
            got, _ = reader.check(digest)
            self._json(got.to_json())
            return
        if raw:
            self._artifact_raw(reader, digest)
            return
        offset = max(0, _int(q.get("offset"), 0))
        # Three bytes past the page: a character the page boundary cuts is shown whole here.
        got, shown = reader.check(digest, (offset, ARTIFACT_INLINE_BYTES + 3))
        if got.state != VERIFIED:
            self._artifact_refused(digest, got)
            return
        size = got.size or 0
        head = (f'<header class="top"><h1>artifact <span class="id">{esc(digest)}</span></h1><p class="sub">'
                f'<span class="badge ok">{esc(got.badge())}</span> {size:,} bytes · sha256 checked while reading · '
                f'<a href="/artifact/{digest}/raw">download the whole ({size:,} bytes)</a></p></header>')
        if not got.text:
            body = '<p>not UTF-8 text: it is offered as a download only, never shown.</p>'
        else:
            # A character a page boundary cuts is shown whole on the page it starts on: the bytes
            # that continue one from the page before are skipped, those that end one are taken.
            lead = 0
            while lead < min(3, len(shown)) and shown[lead] & 0xC0 == 0x80:
                lead += 1
            cut = min(len(shown), ARTIFACT_INLINE_BYTES)
            while cut < len(shown) and shown[cut] & 0xC0 == 0x80:
                cut += 1
            text = shown[lead:cut].decode("utf-8", "replace")  # whole characters of verified UTF-8
            end = offset + cut
            nav = []
            if offset > 0:
                nav.append(f'<a href="/artifact/{digest}?offset={max(0, offset - ARTIFACT_INLINE_BYTES)}">'
                           "← previous MiB</a>")
            if end < size:
                nav.append(f'<a href="/artifact/{digest}?offset={end}">next MiB →</a>')  # where this page stopped
            body = (f'<p class="dim">bytes {offset + lead:,} to {end:,} of {size:,} (1 MiB a page)</p>'
                    f'<pre class="output">{esc(text)}</pre><p class="pager">{" · ".join(nav)}</p>')
        self._html(page(f"artifact {digest[:12]} · journal view", head + f"<main>{body}</main>", "artifact"))

    def _artifact_refused(self, digest: str, got: Verdict) -> None:
        words = got.badge()
        if got.state in (MISSING, UNAVAILABLE) and got.why:  # the badge is short; the reason is said here
            words += f": {got.why}"
        if got.state in (DAMAGED, REFUSED):
            words += "; none of its bytes are served"
        self._plain(ARTIFACT_STATUS.get(got.state, HTTPStatus.INTERNAL_SERVER_ERROR), f"artifact://{digest}: {words}")

    def _artifact_raw(self, reader: ArtifactReader, digest: str) -> None:
        """The whole content as a download: checked in a first pass, then sent in a second pass
        that hashes again; a blob changed between the two passes is cut short (the download falls
        short of its Content-Length), never completed with other bytes."""
        got, _ = reader.check(digest)
        if got.state != VERIFIED:
            self._artifact_refused(digest, got)
            return
        self.send_response(200)
        for k, v in (("Content-Type", "application/octet-stream"), ("Content-Length", str(got.size or 0)),
                     ("Content-Disposition", f'attachment; filename="{digest}.bin"'),
                     ("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", CSP),
                     ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store")):
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD":
            return
        held = _HeldBack(self.wfile.write, got.size or 0)
        again, _ = reader.check(digest, sink=held)
        if again.state == VERIFIED and again.size == got.size and not held.over:
            held.finish()
        else:  # changed since the first pass: the last chunk is never sent, so the download falls short
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def _event(self, sid: str, seq: int) -> None:
        with self.server.viewer.source.open_journal(sid) as j:
            rec = j.get(seq) if 0 < seq <= j.last_seq else None
            if rec is None:
                self._plain(HTTPStatus.NOT_FOUND, f"no record at seq {seq}")
                return
            it = item_of(rec)
        # Compact: indented, a record nested deep grows by its depth (16 MiB 900 deep: some 7 GB).
        self._send(200, "application/json", json.dumps({"seq": it.seq, "synthetic": it.synthetic,
                                                        "event": it.raw}, default=str).encode())

    def _stream(self, sid: str, after: int, groups: set[str] | None, tool: str) -> None:
        """Server-Sent Events: each record committed after ``after``, rendered, as it comes (the
        journal's follow(), which takes no lock)."""
        v = self.server.viewer
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        self.wfile.write(b": following\n\n")
        self.wfile.flush()
        lock, shared = v._context(sid)
        with lock:
            ctx = shared.copy() if shared.seen == after else Context()
        with v.source.open_journal(sid) as j:
            if ctx.seen != after:
                for rec in j.read():
                    if rec.seq > after:
                        break
                    ctx.advance(item_of(rec))
            last = after
            while not v.stop.is_set():
                for rec in j.follow(after_seq=last, poll_interval_s=FOLLOW_POLL_S, idle_timeout_s=HEARTBEAT_S,
                                    stop=v.stop):
                    it = item_of(rec)
                    last = rec.seq
                    html = render_item(it, ctx, sid, None, v.artifacts) if _matches(it, ctx, groups, tool) else ""
                    if not html:
                        ctx.advance(it)
                    data = json.dumps({"html": html, "last": last})
                    self.wfile.write(f"event: items\ndata: {data}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b": idle\n\n")
                self.wfile.flush()


class _HeldBack:
    """A download's sink that sends each decoded chunk only once the next one has come, and the
    last only when the whole read verified (``finish``): a blob changed between the check and
    the sending never reaches its Content-Length, so no forged download looks whole. Nothing
    past ``size`` bytes is sent."""

    def __init__(self, write: Callable[[bytes], object], size: int) -> None:
        self.write = write
        self.size = size
        self.sent = 0
        self.pending = b""
        self.over = False

    def __call__(self, chunk: bytes) -> None:
        if self.pending and not self.over:
            self._send(self.pending)
        self.pending = chunk

    def _send(self, data: bytes) -> None:
        if self.sent + len(data) > self.size:
            self.over = True
            return
        self.write(data)
        self.sent += len(data)

    def finish(self) -> None:
        if self.pending and not self.over:
            self._send(self.pending)
        self.pending = b""


class ViewerServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, viewer: Viewer, port: int = 0, verbose: bool = False) -> None:
        self.viewer = viewer
        self.verbose = verbose
        super().__init__(("127.0.0.1", port), Handler)
        self.cookie_name = f"journal_view_{self.server_address[1]}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/?token={self.viewer.token}"

    def server_close(self) -> None:
        self.viewer.close()
        super().server_close()
