"""A session store: many sessions under one root, listed from a small index, never by scanning logs.

Layout (directories 0700, files 0600: agent logs hold prompts, secrets and tool output)::

    <root>/index.json                  the index: one entry per session (see below)
    <root>/INDEX.lock                  serializes index updates across processes (flock)
    <root>/sessions/<id>/journal/      the session's journal
    <root>/sessions/<id>/snapshots/    snapshot files (disposable)
    <root>/archive/<id>/...            an archived session, moved here whole
    <root>/artifacts/                  the artifact store shared by the sessions

Session ids are time-sortable (``s`` + milliseconds in hex + random), so sorting ids sorts by
creation (seed 003). The index is a cache in the snapshot-file format (canonical JSON and an
XXH64 line, written atomically): per session its status (active, archived), workspace, created,
updated, last seq and parent. The journals stay the truth: the index is rebuilt from them when
it is missing or damaged, an entry is rebuilt when its directory appears, disappears or moves,
and an entry whose session was opened through the store and never closed through it (a crash)
is refreshed from its journal. Listing otherwise opens one file, the index. A session written
by something other than the store keeps a stale last seq until ``refresh(id)`` or
``rebuild_index()``.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, cast

import xxhash

import journal
from journal.api import LOCK_FILE, JournalError
from journal.fs import FileSystem, OsFileSystem, take_lock
from journal.session.artifacts import ArtifactStore
from journal.session.errors import SessionError
from journal.session.fork import ForkReducer, ForkResult, fork, remove_tree
from journal.session.registry import Registry
from journal.session.session import Session, new_session_id, utc_now
from journal.session.snapshot import snapshot_path, write_atomic

INDEX_FILE = "index.json"
INDEX_LOCK = "INDEX.lock"
SESSIONS_DIR = "sessions"
ARCHIVE_DIR = "archive"
ARTIFACTS_DIR = "artifacts"
JOURNAL_DIR = "journal"
SNAPSHOTS_DIR = "snapshots"
INDEX_VERSION = 1
INDEX_LOCK_TIMEOUT_S = 10.0
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_INDEX_MAGIC = b"journal-session-index 1\n"


class StoreError(SessionError):
    """Base class of the session store's errors."""


class InvalidSessionIdError(StoreError, ValueError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session id {session_id!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' (ids become directory names)"
        )


class SessionNotFoundError(StoreError, KeyError):
    def __init__(self, session_id: str, where: str) -> None:
        super().__init__(f"no {where}session {session_id!r} in this store; list the store to see its ids")
        self.session_id = session_id


class SessionExistsError(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists in this store; pick another id")


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id) or ".." in session_id:
        raise InvalidSessionIdError(str(session_id))
    return session_id


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    status: str  # active | archived
    workspace: dict[str, Any]
    created: str | None
    updated: str | None
    last_seq: int
    parent: str | None = None  # parentSessionId of a fork
    fork_seq: int | None = None
    open: bool = False  # opened for writing through the store and not closed through it yet


class StoreSession(Session):
    """A Session that tells its store its last seq when it is closed."""

    store: SessionStore | None = None
    store_id = ""  # the store's name for it (a fork's first header still names its parent)

    def close(self) -> None:
        try:
            super().close()
        finally:
            store, self.store = self.store, None
            if store is not None:
                store._closed(self.store_id, self.journal.last_seq)


class SessionStore:
    """Sessions under ``root``: create, open, fork, list, latest, archive. See the module doc."""

    def __init__(self, root: str | os.PathLike[str], fs: FileSystem | None = None, registry: Registry | None = None):
        self.root = os.path.abspath(os.fspath(root))
        self.fs = fs or OsFileSystem()
        self.registry = registry or Registry()
        for d in (self.root, self._dir(SESSIONS_DIR), self._dir(ARCHIVE_DIR)):
            if not self.fs.exists(d):
                self.fs.mkdir(d)
                self.fs.fsync_dir(os.path.dirname(d))
        self._artifacts: ArtifactStore | None = None

    # --- paths --------------------------------------------------------------------------

    def _dir(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def session_dir(self, session_id: str) -> str:
        """The directory of an active or archived session (SessionNotFoundError if neither)."""
        check_session_id(session_id)
        for where in (SESSIONS_DIR, ARCHIVE_DIR):
            d = self._dir(where, session_id)
            if self.fs.exists(d):
                return d
        raise SessionNotFoundError(session_id, "")

    def journal_path(self, session_id: str) -> str:
        return os.path.join(self.session_dir(session_id), JOURNAL_DIR)

    def snapshots_dir(self, session_id: str) -> str:
        return os.path.join(self.session_dir(session_id), SNAPSHOTS_DIR)

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts is None:
            self._artifacts = ArtifactStore(self._dir(ARTIFACTS_DIR), self.fs)
        return self._artifacts

    # --- sessions -----------------------------------------------------------------------

    def create(
        self, workspace: dict[str, Any] | None = None, session_id: str | None = None, **options: Any
    ) -> StoreSession:
        """A new session, open for writing (close it when done). ``options`` go to session.open."""
        sid = check_session_id(new_session_id() if session_id is None else session_id)
        d = self._dir(SESSIONS_DIR, sid)
        if self.fs.exists(d) or self.fs.exists(self._dir(ARCHIVE_DIR, sid)):
            raise SessionExistsError(sid)
        options.setdefault("registry", self.registry)
        tmp = self._build_dir(sid)
        try:
            StoreSession.open(
                os.path.join(tmp, JOURNAL_DIR), create=True, session_id=sid, workspace=workspace, fs=self.fs, **options
            ).close()
            self._publish(tmp, sid)
        except BaseException:
            remove_tree(self.fs, tmp)
            raise
        opened = StoreSession.open(os.path.join(d, JOURNAL_DIR), fs=self.fs, **options)
        s = self._attach(cast(StoreSession, opened), sid)
        now = utc_now()
        with self._closed_on_error(s), self._index() as idx:
            idx[sid] = SessionInfo(sid, "active", dict(workspace or {}), now, now, s.journal.last_seq, open=True)
        return s

    def open(self, session_id: str, readonly: bool = False, **options: Any) -> StoreSession:
        """Open (and repair) an active session; archived ones open read-only only."""
        d = self.session_dir(session_id)
        archived = os.path.dirname(d) == self._dir(ARCHIVE_DIR)
        if archived and not readonly:
            raise StoreError(f"session {session_id!r} is archived; open it with readonly=True")
        options.setdefault("registry", self.registry)
        s = cast(
            StoreSession, StoreSession.open(os.path.join(d, JOURNAL_DIR), readonly=readonly, fs=self.fs, **options)
        )
        if not readonly:
            self._attach(s, session_id)
            with self._closed_on_error(s), self._index() as idx:
                old = idx.get(session_id) or self._read_info(session_id)
                idx[session_id] = _replace(old, open=True, last_seq=s.journal.last_seq)
        return s

    @contextmanager
    def _closed_on_error(self, s: StoreSession) -> Iterator[None]:
        """A session whose index entry could not be written is closed, not leaked holding its lock."""
        try:
            yield
        except BaseException:
            s.store = None  # closing it must not touch the index that just failed
            s.close()
            raise

    def _attach(self, s: StoreSession, session_id: str) -> StoreSession:
        s.store = self
        s.store_id = session_id
        return s

    def _closed(self, session_id: str, last_seq: int) -> None:
        with self._index() as idx:
            old = idx.get(session_id) or self._read_info(session_id)
            idx[session_id] = _replace(old, open=False, last_seq=last_seq, updated=utc_now())

    def fork(
        self,
        parent_id: str,
        at_seq: int | None = None,
        session_id: str | None = None,
        origin: str = "user",
        workspace: dict[str, Any] | None = None,
    ) -> ForkResult:
        """Fork a session of this store into a new one (see journal.session.fork)."""
        parent = self.journal_path(parent_id)
        sid = check_session_id(new_session_id() if session_id is None else session_id)
        d = self._dir(SESSIONS_DIR, sid)
        if self.fs.exists(d) or self.fs.exists(self._dir(ARCHIVE_DIR, sid)):
            raise SessionExistsError(sid)
        snap = snapshot_path(os.path.join(os.path.dirname(parent), SNAPSHOTS_DIR), ForkReducer())
        tmp = self._build_dir(sid)
        try:
            got = fork(
                parent,
                os.path.join(tmp, JOURNAL_DIR),
                at_seq,
                session_id=sid,
                origin=origin,
                workspace=workspace,
                registry=self.registry,
                snapshot=snap if self.fs.exists(snap) else None,
                fs=self.fs,
            )
            self._publish(tmp, sid)
        except BaseException:
            remove_tree(self.fs, tmp)
            raise
        got = dataclasses.replace(got, path=os.path.join(d, JOURNAL_DIR))
        with self._index() as idx:
            idx[sid] = self._read_info(sid)
        return got

    def _build_dir(self, session_id: str) -> str:
        """A temp directory where a new session is made whole before it gets its name.

        Its name starts with a dot, so listings never show it; those of an earlier attempt for
        the same id that crashed or failed are removed first (they were never published).
        """
        sessions = self._dir(SESSIONS_DIR)
        prefix = f".{session_id}.new-"
        for stale in self.fs.listdir(sessions):
            if stale.startswith(prefix):
                remove_tree(self.fs, os.path.join(sessions, stale))
        tmp = os.path.join(sessions, prefix + uuid.uuid4().hex[:8])
        self.fs.mkdir(tmp)
        return tmp

    def _publish(self, tmp: str, session_id: str) -> None:
        self.fs.rename(tmp, self._dir(SESSIONS_DIR, session_id))
        self.fs.fsync_dir(self._dir(SESSIONS_DIR))

    def archive(self, session_id: str) -> SessionInfo:
        """Move an active session under archive/ (refused while a writer holds it).

        Archiving an archived session finishes what an interrupted archive may have left: the
        move is made durable and the index updated.
        """
        src = self._dir(SESSIONS_DIR, check_session_id(session_id))
        if not self.fs.exists(src) and self.fs.exists(self._dir(ARCHIVE_DIR, session_id)):
            return self._archived(session_id)
        if not self.fs.exists(src):
            raise SessionNotFoundError(session_id, "active ")
        lock = self.fs.try_lock(os.path.join(src, JOURNAL_DIR, LOCK_FILE))
        if lock is None:
            raise StoreError(f"session {session_id!r} is open for writing elsewhere; close it before archiving")
        try:
            self.fs.rename(src, self._dir(ARCHIVE_DIR, session_id))
        finally:
            lock.release()
        return self._archived(session_id)

    def _archived(self, session_id: str) -> SessionInfo:
        self.fs.fsync_dir(self._dir(SESSIONS_DIR))
        self.fs.fsync_dir(self._dir(ARCHIVE_DIR))
        with self._index() as idx:
            old = idx.get(session_id) or self._read_info(session_id)
            idx[session_id] = info = _replace(old, status="archived", open=False)
        # The index is a cache rebuilt from the directories, but an archive finished by a retry
        # may find it already written (unchanged, so not rewritten) by a run whose sync failed.
        self.fs.fsync_dir(self.root)
        return info

    # --- listing ------------------------------------------------------------------------

    def list(self, status: str | None = None, workspace: str | None = None) -> list[SessionInfo]:
        """Sessions in id (creation) order, from the index; ``workspace`` filters on its path.

        A fresh index is read without the lock (it is replaced by an atomic rename); the lock is
        taken only when the index must be rebuilt or refreshed.
        """
        loaded = self._load_index()
        idx = dict(loaded or {})
        if loaded is not None:
            self._freshen(idx, full=False)
        if loaded is None or idx != loaded:
            with self._index() as fresh:
                idx = dict(fresh)
        return [
            i
            for i in sorted(idx.values(), key=lambda i: i.session_id)
            if (status is None or i.status == status) and (workspace is None or i.workspace.get("path") == workspace)
        ]

    def latest(self, workspace: str | None = None) -> SessionInfo | None:
        """The active session updated last (ties: the newer id), optionally in one workspace."""
        active = self.list(status="active", workspace=workspace)
        return max(active, key=lambda i: (i.updated or "", i.session_id), default=None)

    def info(self, session_id: str) -> SessionInfo:
        for i in self.list():
            if i.session_id == session_id:
                return i
        raise SessionNotFoundError(session_id, "")

    def refresh(self, session_id: str) -> SessionInfo:
        """Re-read one session's entry from its journal."""
        with self._index() as idx:
            idx[session_id] = info = self._read_info(session_id)
        return info

    def rebuild_index(self) -> int:
        """Rebuild the whole index from the sessions; returns how many it holds."""
        with self._index(rebuild=True) as idx:
            return len(idx)

    # --- the index ----------------------------------------------------------------------

    @contextmanager
    def _index(self, rebuild: bool = False) -> Iterator[dict[str, SessionInfo]]:
        """The index under the store lock, made fresh; written back if the caller changed it."""
        lock = take_lock(self.fs, self._dir(INDEX_LOCK), INDEX_LOCK_TIMEOUT_S)
        if lock is None:
            raise StoreError(f"the index of {self.root!r} stayed locked for {INDEX_LOCK_TIMEOUT_S}s")
        try:
            loaded = None if rebuild else self._load_index()
            idx = dict(loaded or {})
            self._freshen(idx, full=loaded is None)
            yield idx
            if loaded is None or idx != loaded:
                self._save_index(idx)
        finally:
            lock.release()

    def _load_index(self) -> dict[str, SessionInfo] | None:
        path = self._dir(INDEX_FILE)
        try:
            f = self.fs.open_read(path)
        except FileNotFoundError:
            return None
        try:
            data = f.pread(f.size(), 0)
        finally:
            f.close()
        cut = data.rfind(b"\n", 0, len(data) - 1) + 1
        if not data.startswith(_INDEX_MAGIC) or data[cut:] != b"xxh64 %016x\n" % xxhash.xxh64_intdigest(data[:cut]):
            return None  # damaged or torn: rebuilt from the sessions
        try:
            body = json.loads(data[len(_INDEX_MAGIC) : cut - 1])
            if body.get("version") != INDEX_VERSION:
                return None
            return {k: SessionInfo(**v) for k, v in body["sessions"].items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def _save_index(self, idx: dict[str, SessionInfo]) -> None:
        body = json.dumps(
            {"version": INDEX_VERSION, "sessions": {k: asdict(v) for k, v in sorted(idx.items())}},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        head = _INDEX_MAGIC + body + b"\n"
        write_atomic(self.fs, self._dir(INDEX_FILE), head + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(head))

    def _freshen(self, idx: dict[str, SessionInfo], full: bool) -> None:
        """Make ``idx`` agree with the directories: two listings, and reads only where they differ."""
        on_disk = {name: "active" for name in self._ids(SESSIONS_DIR)}
        on_disk.update({name: "archived" for name in self._ids(ARCHIVE_DIR)})
        for sid in [s for s in idx if s not in on_disk]:
            del idx[sid]
        for sid, status in on_disk.items():
            old = idx.get(sid)
            if full or old is None or old.status != status or (old.open and not self._writer_alive(sid, status)):
                idx[sid] = self._read_info(sid)

    def _ids(self, where: str) -> builtins.list[str]:
        out = []
        for name in self.fs.listdir(self._dir(where)):
            if SESSION_ID_RE.fullmatch(name) and ".." not in name:
                out.append(name)
        return out

    def _writer_alive(self, session_id: str, status: str) -> bool:
        if status != "active":
            return False
        lock = self.fs.try_lock(os.path.join(self._dir(SESSIONS_DIR, session_id), JOURNAL_DIR, LOCK_FILE))
        if lock is None:
            return True
        lock.release()
        return False

    def _read_info(self, session_id: str) -> SessionInfo:
        """An index entry rebuilt from the session's journal (O(live segment) plus a header read)."""
        d = self.session_dir(session_id)
        status = "archived" if os.path.dirname(d) == self._dir(ARCHIVE_DIR) else "active"
        workspace: dict[str, Any] = {}
        created = updated = parent = None
        fork_seq = None
        last_seq = 0
        try:
            with journal.open(os.path.join(d, JOURNAL_DIR), readonly=True, fs=self.fs) as j:
                last_seq = j.last_seq
                header = None
                for rec in j.read():  # its header is record 1, or a fork's first record of its own
                    ev = rec.event if not rec.is_bytes else None
                    if (
                        isinstance(ev, dict)
                        and ev.get("type") == "session.started"
                        and ev.get("sessionId") == session_id
                    ):
                        header = ev
                        break
                last = j.get(last_seq) if last_seq else None
        except OSError:
            # An I/O error says nothing about the session: raise it rather than save an empty
            # entry (last seq 0, no workspace) into the index, where it would be trusted later.
            raise
        except JournalError:
            return SessionInfo(session_id, status, {}, None, None, 0)
        if header is not None:
            data = header.get("data") or {}
            workspace = dict(data.get("workspace") or {})
            lineage = data.get("lineage") or {}
            parent = lineage.get("parentSessionId")
            fork_seq = lineage.get("forkSeq")
            created = header.get("time")
        if last is not None and not last.is_bytes and isinstance(last.event, dict):
            updated = last.event.get("time")
        return SessionInfo(session_id, status, workspace, created, updated, last_seq, parent, fork_seq)


def _replace(info: SessionInfo, **changes: Any) -> SessionInfo:
    return SessionInfo(**{**asdict(info), **changes})
