"""The viewer's derived index: per-session summaries and a full-text index of the store's events.

It is a cache, never a source of truth: an SQLite file (FTS5) under
``$XDG_CACHE_HOME/journal-view/<hash of the store's location>/index.sqlite`` (``~/.cache`` when
the variable is unset), outside the store, which the viewer never writes. Deleting the file, or
``journal view --rebuild-index``, rebuilds it. Each session's row remembers the last seq it
indexed, so an update reads only the records after it; a session whose journal now ends before
that seq (deleted and made again) is indexed again from its start.

What is indexed: the text of user and assistant messages, tool names, a tool call's arguments,
a tool result's output (its first ``DOC_CHARS_MAX`` characters) and any other event's ``text``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from journal.api import JournalError
from journal.view.model import Folder, Summary, output_of, text_of
from journal.view.source import Entry, Source

SCHEMA_VERSION = "2"
DOC_CHARS_MAX = 64 * 1024  # of one event's text in the index: a huge tool output is cut, not refused
BATCH_DOCS = 2000  # rows inserted per executemany
QUERY_TERMS_MAX = 16
PREFIX_CHARS_MIN = 3  # the last word is a prefix from this length (FTS5 keeps a prefix index of 3)
RESULTS_MAX = 200
TOKEN_RE = re.compile(r"\w+", re.UNICODE)
SNIPPET_OPEN, SNIPPET_CLOSE = "\x02", "\x03"  # markers no event text is shown with (escaped, then <mark>)


class CacheLocationError(JournalError):
    """The index would be written inside the store; the viewer never writes there."""


def default_cache_dir(location: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return os.path.join(base, "journal-view", digest)


def check_outside(cache_dir: str, store_root: str | None) -> None:
    if store_root is None:
        return
    cache, root = os.path.realpath(cache_dir), os.path.realpath(store_root)
    if os.path.commonpath([cache, root]) == root:
        raise CacheLocationError(f"the search index {cache!r} would be inside the store {root!r}, which the "
                                 "viewer never writes; give --cache-dir a directory outside it")


@dataclass
class Hit:
    session_id: str
    seq: int
    kind: str
    tool: str
    snippet: str  # with SNIPPET_OPEN / SNIPPET_CLOSE around the matched words


def fts_query(text: str) -> str | None:
    """Words as quoted FTS5 terms (no operator of the user's reaches FTS5), the last as a prefix."""
    words = TOKEN_RE.findall(text)[:QUERY_TERMS_MAX]
    if not words:
        return None
    terms = [f'"{w}"' for w in words]
    if len(words[-1]) >= PREFIX_CHARS_MIN:
        terms[-1] += "*"
    return " ".join(terms)


class SearchIndex:
    """The SQLite file; one writer (the indexer, under ``write_lock``), readers on their own
    connections."""

    def __init__(self, cache_dir: str, store_root: str | None = None, rebuild: bool = False) -> None:
        check_outside(cache_dir, store_root)
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(cache_dir, "index.sqlite")
        if rebuild:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(self.path + suffix)
                except FileNotFoundError:
                    pass
        self.write_lock = threading.Lock()
        self.version = 0  # bumped by every update this process commits: readers' caches key on it
        with self.connect() as c:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT)")
            got = c.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            if got is not None and got[0] != SCHEMA_VERSION:
                c.execute("DROP TABLE IF EXISTS sessions")
                c.execute("DROP TABLE IF EXISTS docs")
            c.execute("INSERT OR REPLACE INTO meta VALUES('version', ?)", (SCHEMA_VERSION,))
            c.execute("CREATE TABLE IF NOT EXISTS sessions(sid TEXT PRIMARY KEY, jkey TEXT, last_seq INTEGER, "
                      "summary TEXT, gate_state BLOB)")
            c.execute("CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, tool, sid UNINDEXED, "
                      "seq UNINDEXED, kind UNINDEXED, tokenize='unicode61', prefix='3')")

    def connect(self) -> sqlite3.Connection:
        c = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        c.execute("PRAGMA busy_timeout=30000")
        # A derived cache: a power loss may cost its last updates (they are made again from the
        # journals), never its consistency (WAL), so commits skip the fsync.
        c.execute("PRAGMA synchronous=NORMAL")
        return c

    def summary(self, sid: str) -> Summary | None:
        with self.connect() as c:
            got = c.execute("SELECT summary FROM sessions WHERE sid=?", (sid,)).fetchone()
        try:
            return Summary.from_json(json.loads(got[0]), None) if got is not None else None
        except (ValueError, TypeError):
            return None

    def summaries(self) -> dict[str, Summary]:
        with self.connect() as c:
            rows = c.execute("SELECT sid, summary FROM sessions").fetchall()
        out = {}
        for sid, text in rows:
            try:
                out[sid] = Summary.from_json(json.loads(text), None)
            except (ValueError, TypeError):
                continue
        return out

    def _row(self, c: sqlite3.Connection, sid: str) -> tuple[str, int, Summary] | None:
        got = c.execute("SELECT jkey, last_seq, summary, gate_state FROM sessions WHERE sid=?", (sid,)).fetchone()
        if got is None:
            return None
        try:
            return got[0], int(got[1]), Summary.from_json(json.loads(got[2]), got[3])
        except (ValueError, TypeError):
            return None

    def update_session(self, source: Source, sid: str, known_last_seq: int | None = None) -> Summary:
        """Index the records of ``sid`` after its last indexed seq; returns its summary."""
        with self.write_lock, self.connect() as c:
            jkey = source.journal_key(sid)
            row = self._row(c, sid)
            if row is not None and known_last_seq is not None and row[1] == known_last_seq and row[0] == jkey:
                return row[2]
            with source.open_journal(sid) as j:
                last = j.last_seq
                stale = row is not None and (row[0] != jkey or row[1] > last)
                if stale:  # another journal under this id now: index it from its start
                    # (a scan of the whole table, sid being no key of it: only when needed)
                    c.execute("DELETE FROM docs WHERE sid=?", (sid,))
                    row = None
                if row is None:
                    folder, after = Folder(), 0
                else:
                    if row[1] == last:
                        return row[2]  # nothing new (damage found before stays said until the journal changes)
                    folder, after = Folder(row[2]), row[1]
                docs: list[tuple[str, str, str, int, str]] = []
                c.execute("BEGIN")
                try:
                    while True:
                        try:
                            for rec in j.read(after_seq=after):
                                it = folder.feed(rec)
                                after = rec.seq
                                docs.extend(_docs(sid, it.seq, it.type, it.data))
                                if len(docs) >= BATCH_DOCS:
                                    c.executemany("INSERT INTO docs(text, tool, sid, seq, kind) VALUES(?,?,?,?,?)",
                                                  docs)
                                    docs.clear()
                            break
                        except JournalError as exc:
                            folder.s.damage = str(exc)
                            # Read on from the next segment, as the session page does.
                            bad = getattr(exc, "seq", None)
                            later = [b for b in source.segment_bases(sid) if isinstance(bad, int) and b > bad]
                            if not later or min(later) - 1 <= after:
                                break
                            after = min(later) - 1
                    if docs:
                        c.executemany("INSERT INTO docs(text, tool, sid, seq, kind) VALUES(?,?,?,?,?)", docs)
                    s = folder.finish()
                    c.execute("INSERT OR REPLACE INTO sessions VALUES(?,?,?,?,?)",
                              (sid, jkey, s.last_seq, json.dumps(s.to_json(), default=str), s.gate_state))
                    c.execute("COMMIT")
                    self.version += 1
                except BaseException:
                    c.execute("ROLLBACK")
                    raise
                return s

    def search(self, text: str, limit: int = 50, session_id: str | None = None) -> list[Hit]:
        q = fts_query(text)
        if q is None:
            return []
        limit = max(1, min(limit, RESULTS_MAX))
        # Newest first (rowid order, which FTS5 walks and stops at the limit) rather than by
        # rank, which scores every match: a word in every session would cost the whole index.
        sql = ("SELECT sid, seq, kind, tool, snippet(docs, 0, ?, ?, '…', 16) FROM docs WHERE docs MATCH ?"
               + (" AND sid = ?" if session_id else "") + " ORDER BY rowid DESC LIMIT ?")
        args: list[Any] = [SNIPPET_OPEN, SNIPPET_CLOSE, q] + ([session_id] if session_id else []) + [limit]
        with self.connect() as c:
            try:
                rows = c.execute(sql, args).fetchall()
            except sqlite3.OperationalError:
                return []
        return [Hit(str(r[0]), int(r[1]), str(r[2]), str(r[3] or ""), str(r[4] or "")) for r in rows]


def _docs(sid: str, seq: int, kind: str, data: dict[str, Any]) -> Iterable[tuple[str, str, str, int, str]]:
    got = data.get("tool")
    tool = got if isinstance(got, str) else ""
    if kind == "tool.requested":
        args = data.get("args", data.get("arguments"))
        text = json.dumps(args, ensure_ascii=False, default=str) if args is not None else ""
        yield (f"{tool} {text}"[:DOC_CHARS_MAX], tool, sid, seq, kind)
        return
    if kind in ("tool.result", "tool.output", "tool.reconciled"):
        text = output_of(data)
    else:
        text = text_of(data)
    if text:
        yield (text[:DOC_CHARS_MAX], tool, sid, seq, kind)


class Indexer(threading.Thread):
    """Brings the index up to date in the background: the most recently updated sessions first,
    so the store page's first screen gets its titles first. ``kick()`` asks for another pass."""

    def __init__(self, index: SearchIndex, source: Source, entries: Callable[[], dict[str, Entry]]) -> None:
        super().__init__(name="journal-view-indexer", daemon=True)
        self.index = index
        self.source = source
        self.entries = entries
        self.stop = threading.Event()
        self._wake = threading.Event()
        self.done = 0
        self.total = 0
        self.passes = 0
        self.idle = threading.Event()
        self.errors: dict[str, str] = {}

    def kick(self) -> None:
        self._wake.set()

    def run(self) -> None:
        while not self.stop.is_set():
            self._wake.clear()
            self.idle.clear()
            try:
                self.one_pass()
            except Exception as exc:  # the store's listing failed: said on the page, tried again when kicked
                self.errors[""] = f"{type(exc).__name__}: {exc}"
            self.passes += 1
            self.idle.set()
            self._wake.wait()

    def one_pass(self) -> None:
        entries = sorted(self.entries().values(), key=lambda e: (e.info.updated or "", e.session_id), reverse=True)
        self.total, self.done = len(entries), 0
        for e in entries:
            if self.stop.is_set():
                return
            try:
                # A live session's index entry lags its journal: its journal is asked.
                self.index.update_session(self.source, e.session_id, None if e.live else e.info.last_seq)
                self.errors.pop(e.session_id, None)
            except Exception as exc:  # crafted bytes of one session never stop the others' indexing
                self.errors[e.session_id] = str(exc) if isinstance(exc, (JournalError, OSError)) else \
                    f"{type(exc).__name__}: {exc}"
            self.done += 1
