"""What the viewer reads: a session store, a server store or one journal, opened read-only.

Nothing here takes a lock, repairs, or writes. A file store's index is read by the store's own
reader (``journal.session.store.read_index``: the ``index.json`` snapshot, then the
``index.log-<g>`` journals of its generation and later, opened read-only, each field's type
checked), which never refreshes or rebuilds it: a session the index lacks is read from its
journal's header into the viewer's memory only. Whether a writer holds
a session is asked of Linux's /proc/locks (``journal.fs.flock_holder``), which takes no lock,
so a writer opening the session at that moment is never turned away by the viewer.

A session id reaches the file system only after it passes the store's rule
(``check_session_id``) and names an entry of the listing; the journal's path is then built by
the store's layout, and a symbolic link there is refused.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import journal
from journal.api import Journal, JournalError, JournalNotFoundError, NotAJournalError, UnexpectedFileError
from journal.fs import OsFileSystem, flock_holder, refuse_link
from journal.session.envelope import SESSION_ID_RE, check_session_id
from journal.session.errors import InvalidSessionIdError
from journal.session.store import (
    ARCHIVE_DIR,
    INDEX_FILE,
    INDEX_LOG_PREFIX,
    JOURNAL_DIR,
    SESSIONS_DIR,
    SessionInfo,
    entry_from_fields,
    info_from_journal,
    read_index,
)

SINGLE_ID = "journal"  # the id a lone journal is shown under when its header names none


class ViewError(JournalError):
    """The viewer cannot show what it was given; the message says what to give it instead."""


class UnknownSessionError(ViewError, KeyError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in what this viewer shows; open the store page to see its ids")
        self.session_id = session_id


@dataclass(frozen=True)
class Entry:
    """A session as the store's index lists it, and whether a writer holds it now."""

    info: SessionInfo
    live: bool  # a writer holds its lock now (file stores); a server cannot be asked without a claim
    in_index: bool = True  # False: read from its journal's header by the viewer (the index lacked it)

    @property
    def session_id(self) -> str:
        return self.info.session_id


class Source(Protocol):
    """A read-only view of sessions: listing from an index, opening a journal read-only."""

    location: str
    kind: str  # "store", "server" or "journal"

    def entries(self) -> dict[str, Entry]: ...

    @contextmanager
    def open_journal(self, session_id: str) -> Iterator[Journal]:
        yield from ()  # pragma: no cover - protocol

    def verify(self, session_id: str) -> dict[str, Any] | None: ...

    def journal_key(self, session_id: str) -> str: ...

    def segment_bases(self, session_id: str) -> list[int]: ...


def _held_flocks() -> set[str]:
    """The files ("maj:min:inode") some process holds an exclusive flock on, from Linux's
    /proc/locks, read once for a whole listing (``journal.fs.flock_holder`` reads it per file).
    Looking takes no lock, so a writer opening at that moment is never turned away."""
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    out = set()
    for line in lines:
        fields = line.split()
        if "->" not in line and len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE":
            out.add(fields[5])
    return out


def _file_id(path: str) -> str | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def _segment_bases(path: str) -> list[int]:
    """The first seqs of a journal directory's segments, from their names (20 digits + .seg)."""
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(int(n[:20]) for n in names if len(n) == 24 and n.endswith(".seg") and n[:20].isdigit())


class FileStore:
    """A session store directory (journal.session.store's layout), read-only."""

    kind = "store"

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.location = self.root
        self.fs = OsFileSystem()
        self._lock = threading.Lock()
        self._header_cache: dict[tuple[str, str, int], SessionInfo] = {}
        self._index_cache: tuple[Any, dict[str, SessionInfo] | None] | None = None

    def _index_key(self) -> Any:
        """What the index's files look like now (names, sizes, times): the parsed index is kept
        while this stays the same, so a page load on a store nobody writes parses nothing."""
        key: list[tuple[str, str, int, int, int]] = []
        with os.scandir(self.root) as it:
            for e in it:
                if e.name == INDEX_FILE or e.name.startswith(INDEX_LOG_PREFIX):
                    st = e.stat(follow_symlinks=False)
                    key.append((e.name, "", st.st_ino, st.st_size, st.st_mtime_ns))
                    if e.is_dir(follow_symlinks=False):
                        with os.scandir(e.path) as segs:
                            for g in segs:
                                gst = g.stat(follow_symlinks=False)
                                key.append((e.name, g.name, gst.st_ino, gst.st_size, gst.st_mtime_ns))
        return tuple(sorted(key))

    def _index(self) -> dict[str, SessionInfo] | None:
        key = self._index_key()
        with self._lock:
            cached = self._index_cache
        if cached is not None and cached[0] == key:
            return dict(cached[1]) if cached[1] is not None else None
        got = self._load_index()
        with self._lock:
            self._index_cache = (key, got)
        return dict(got) if got is not None else None

    def _load_index(self) -> dict[str, SessionInfo] | None:
        try:
            got = read_index(self.root, self.fs)  # the store's own reader: no lock, nothing written
        except UnexpectedFileError:
            return None  # a link (or a FIFO...) where the store keeps its index: never followed
        return got.sessions if got is not None else None

    def _ids(self, where: str) -> list[str]:
        try:
            with os.scandir(os.path.join(self.root, where)) as it:
                # A link is no session the store made: not listed (the file type comes with the listing).
                return [e.name for e in it if SESSION_ID_RE.fullmatch(e.name) and ".." not in e.name
                        and not e.is_symlink()]
        except FileNotFoundError:
            return []

    def entries(self) -> dict[str, Entry]:
        """The index, made to agree with the directories in memory (two listings, and a header
        read for each session the index lacks); the store itself is never written."""
        idx = self._index() or {}
        on_disk = {sid: "active" for sid in self._ids(SESSIONS_DIR)}
        on_disk.update({sid: "archived" for sid in self._ids(ARCHIVE_DIR)})
        out: dict[str, Entry] = {}
        held = _held_flocks()
        for sid, status in on_disk.items():
            info = idx.get(sid)
            in_index = info is not None and info.status == status
            if info is None or info.status != status:
                info = self._header_info(sid, status)
            # A writer through the store marks its entry open; one that is not (or an entry the index
            # lacks) is asked of /proc/locks: a stat each, only where a writer can be.
            live = (status == "active" and bool(held) and (info.open or not in_index)
                    and _file_id(os.path.join(self._journal_dir(sid, status), "LOCK")) in held)
            out[sid] = Entry(info, live, in_index)
        return out

    def _header_info(self, sid: str, status: str) -> SessionInfo:
        path = self._journal_dir(sid, status)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            mtime = 0
        key = (sid, status, mtime)
        with self._lock:
            got = self._header_cache.get(key)
        if got is not None:
            return got
        try:
            with journal.open(path, readonly=True) as j:
                got = info_from_journal(j, sid, status)
        except (JournalError, OSError):
            got = SessionInfo(sid, status, {}, None, None, 0)
        with self._lock:
            self._header_cache[key] = got
        return got

    def _journal_dir(self, sid: str, status: str) -> str:
        where = ARCHIVE_DIR if status == "archived" else SESSIONS_DIR
        d = os.path.join(self.root, where, sid)
        return os.path.join(d, JOURNAL_DIR)

    def path_of(self, session_id: str) -> str:
        """The journal directory of a listed session; links refused, ids checked."""
        try:
            check_session_id(session_id)
        except InvalidSessionIdError:
            raise UnknownSessionError(str(session_id)[:200]) from None
        for where in (SESSIONS_DIR, ARCHIVE_DIR):
            d = os.path.join(self.root, where, session_id)
            if os.path.isdir(d) and not os.path.islink(d):
                return refuse_link(self.fs, os.path.join(d, JOURNAL_DIR))
        raise UnknownSessionError(session_id)

    def journal_key(self, session_id: str) -> str:
        return self.path_of(session_id)

    def segment_bases(self, session_id: str) -> list[int]:
        return _segment_bases(self.path_of(session_id))

    @contextmanager
    def open_journal(self, session_id: str) -> Iterator[Journal]:
        with journal.open(self.path_of(session_id), readonly=True) as j:
            yield j

    def verify(self, session_id: str) -> dict[str, Any] | None:
        from journal.engine.verify import verify

        return verify(self.path_of(session_id)).to_json()


class SingleJournal:
    """One journal (a directory or a journal URL), shown as a store of one session."""

    kind = "journal"

    def __init__(self, target: str) -> None:
        self.remote = "://" in target
        self.target = target if self.remote else os.path.realpath(target)
        self.location = self.target
        if self.remote:
            from journal.remote.url import parse_url

            self.location = parse_url(target).display()
        with journal.open(self.target, readonly=True) as j:
            sid = None
            try:
                first = next(iter(j.read()), None) if j.last_seq else None
                ev = first.event if first is not None and not first.is_bytes else None
            except JournalError:
                ev = None  # damage in the first record: the session page shows it
            if isinstance(ev, dict) and isinstance(ev.get("sessionId"), str) and SESSION_ID_RE.fullmatch(
                    ev["sessionId"]) and ".." not in ev["sessionId"]:
                sid = ev["sessionId"]
            self.session_id = sid or SINGLE_ID
            try:
                self._info = info_from_journal(j, self.session_id, "active")
            except JournalError:
                self._info = SessionInfo(self.session_id, "active", {}, None, None, j.last_seq)

    def entries(self) -> dict[str, Entry]:
        info = self._info
        last = info.last_seq
        try:
            with journal.open(self.target, readonly=True) as j:
                last = j.last_seq
                if last != info.last_seq:
                    self._info = info = info_from_journal(j, self.session_id, "active")
        except (JournalError, OSError):
            pass
        live = not self.remote and flock_holder(os.path.join(self.target, "LOCK")) is not None
        return {self.session_id: Entry(dataclasses.replace(info, last_seq=last), live)}

    def _check(self, session_id: str) -> None:
        if session_id != self.session_id:
            raise UnknownSessionError(str(session_id)[:200])

    def journal_key(self, session_id: str) -> str:
        self._check(session_id)
        return self.location

    def segment_bases(self, session_id: str) -> list[int]:
        self._check(session_id)
        return [] if self.remote else _segment_bases(self.target)

    @contextmanager
    def open_journal(self, session_id: str) -> Iterator[Journal]:
        self._check(session_id)
        with journal.open(self.target, readonly=True) as j:
            yield j

    def verify(self, session_id: str) -> dict[str, Any] | None:
        self._check(session_id)
        if self.remote:
            return None  # a server's records are verified as they are read (the reader's report)
        from journal.engine.verify import verify

        return verify(self.target).to_json()


class ServerStore:
    """A session store on a server (postgresql:// or nats:// store URL): its catalog and names,
    read; entries the catalog lacks are read from their journals' headers, never written back."""

    kind = "server"

    def __init__(self, url: str) -> None:
        from journal.api import CatalogStore
        from journal.remote.url import parse_url
        from journal.session.catalog_store import CATALOG_NAME

        self.location = parse_url(url).display()
        self.backing = journal.store(url)
        if not isinstance(self.backing, CatalogStore):
            raise ViewError(f"the store at {self.location} keeps no session catalog")
        self.catalog = self.backing.catalog(CATALOG_NAME)
        self._lock = threading.Lock()
        self._header_cache: dict[tuple[str, int], SessionInfo] = {}

    def _names(self) -> set[str]:
        return {n for n in self.backing.names() if "%" not in n and SESSION_ID_RE.fullmatch(n) and ".." not in n}

    def entries(self) -> dict[str, Entry]:
        names = self._names()
        out: dict[str, Entry] = {}
        for sid, fields in self.catalog.items():
            if sid in names and isinstance(fields, dict):
                out[sid] = Entry(entry_from_fields(sid, fields), False)
        for sid in names - out.keys():
            info = self._header_info(sid)
            if info is not None:
                out[sid] = Entry(info, False, in_index=False)
        return out

    def _header_info(self, sid: str) -> SessionInfo | None:
        try:
            with self.backing.open(sid, readonly=True) as j:
                key = (sid, j.last_seq)
                with self._lock:
                    got = self._header_cache.get(key)
                if got is None:
                    if j.last_seq == 0:
                        return None  # an empty journal: a create cut short, no session yet
                    got = info_from_journal(j, sid, "active")
                    with self._lock:
                        self._header_cache[key] = got
                return got
        except JournalNotFoundError:
            return None
        except JournalError:
            return SessionInfo(sid, "active", {}, None, None, 0)

    def _check(self, session_id: str) -> str:
        try:
            sid = check_session_id(session_id)
        except InvalidSessionIdError:
            raise UnknownSessionError(str(session_id)[:200]) from None
        if sid not in self._names():
            raise UnknownSessionError(sid)
        return sid

    def journal_key(self, session_id: str) -> str:
        return f"{self.location} {self._check(session_id)}"

    def segment_bases(self, session_id: str) -> list[int]:
        self._check(session_id)
        return []  # a server's records have no segments to step over

    @contextmanager
    def open_journal(self, session_id: str) -> Iterator[Journal]:
        with self.backing.open(self._check(session_id), readonly=True) as j:
            yield j

    def verify(self, session_id: str) -> dict[str, Any] | None:
        self._check(session_id)
        return None  # every record read from a server is verified by its reader; damage is raised there


def open_source(target: str) -> FileStore | ServerStore | SingleJournal:
    """The source for ``target``: a session store directory, a journal directory, a store URL or
    a journal URL. Raises ViewError saying what was expected."""
    if "://" in target:
        from journal.remote.url import parse_url

        if parse_url(target).journal is not None:
            return SingleJournal(target)
        return ServerStore(target)
    if not os.path.isdir(target):
        raise ViewError(f"{target!r} is not a directory: give `journal view` a session store, a journal "
                        "directory, or a postgresql:// or nats:// URL")
    if os.path.isfile(os.path.join(target, INDEX_FILE)) or os.path.isdir(os.path.join(target, SESSIONS_DIR)):
        return FileStore(target)
    try:
        return SingleJournal(target)
    except (NotAJournalError, JournalNotFoundError):
        raise ViewError(f"{target!r} is neither a session store (no {INDEX_FILE}, no {SESSIONS_DIR}/) nor a "
                        "journal directory: give `journal view` one of those, or a server URL") from None
