"""A session store: many sessions under one root, listed from a small index, never by scanning logs.

Layout (directories 0700, files 0600: agent logs hold prompts, secrets and tool output)::

    <root>/index.json                  the index snapshot: one entry per session (see below)
    <root>/index.log-<generation>/     a journal of the index updates made since that snapshot
    <root>/INDEX.lock                  serializes index updates across processes (flock)
    <root>/sessions/<id>/journal/      the session's journal
    <root>/sessions/<id>/snapshots/    snapshot files (disposable)
    <root>/archive/<id>/...            an archived session, moved here whole
    <root>/artifacts/                  the artifact store shared by the sessions
    <root>/dictionaries/               the store's zstd dictionaries (journal/session/dictionaries.py)

Session ids are time-sortable (``s`` + milliseconds in hex + random), so sorting ids sorts by
creation (seed 003). The index is a cache: per session its status (active, archived),
workspace, created, updated, last seq and parent. The journals stay the truth: the index is
rebuilt from them when it is missing or damaged, an entry is rebuilt when its directory appears,
disappears or moves, and an entry whose session was opened through the store and never closed
through it (a crash) is refreshed from its journal. A session written by something other than
the store keeps a stale last seq until ``refresh(id)`` or ``rebuild_index()``.

How the index is kept, so that an update costs the same with ten sessions or a million: the
index is a snapshot plus a log. ``index.json`` (snapshot-file format: a header line, canonical
JSON, an XXH64 line; written atomically) holds every entry as of its *generation* g; the
journal ``index.log-<g>/`` holds the updates made since, one small record each (``put`` an
entry, ``set`` some of an entry's fields, ``del`` one), appended at "sync" under INDEX.lock.
Creating or closing a session appends one record and reads nothing of the index but the
snapshot's first line (its generation and size): O(1) in the number of sessions. Reading the
index is the snapshot plus the records of the logs of generation g and later, in order.
Compaction, once a log holds a quarter as many records as the snapshot has entries (and at
least INDEX_COMPACT_RECORDS_MIN), folds them into a snapshot of generation g+1: the new log's
directory is made first, then the snapshot is written (its directory fsync covers both), then
the older logs are removed. A crash at any point leaves either the old snapshot (the new empty
log is read after it, harmlessly) or the new one (older logs are ignored, and removed by the
next compaction). Its O(n) cost comes once per n/4 updates, and a listing replays at most that
many records after the snapshot. Listing opens the snapshot and the
log's segments, never a session's journal.

``read_index(root)`` is that reading alone, for a reader that must not write (the viewer): no
lock, no refresh, no rebuild; the store's own loading is the same code, and so is the check of
every field's type (an index's bytes may be crafted).
"""

from __future__ import annotations

import builtins
import dataclasses
import errno
import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import xxhash

import journal
from journal import Dictionary
from journal.api import LOCK_FILE, Committed, Journal, JournalError, JournalNotFoundError, NotAJournalError
from journal.fs import FileSystem, Lock, OsFileSystem, ensure_dir, make_dirs, read_all, refuse_link, take_lock
from journal.fs import remove_tree as remove_dir
from journal.session import dictionaries
from journal.session.artifacts import ArtifactStore
from journal.session.envelope import SESSION_ID_RE, check_session_id
from journal.session.errors import InvalidSessionIdError, StoreError
from journal.session.fork import ForkReducer, ForkResult, fork, remove_tree
from journal.session.registry import Registry
from journal.session.session import Session, new_session_id, utc_now
from journal.session.snapshot import snapshot_path, write_atomic

INDEX_FILE = "index.json"
INDEX_LOG_PREFIX = "index.log-"  # + the generation in 10 digits: the journal of updates since the snapshot
INDEX_LOCK = "INDEX.lock"
SESSIONS_DIR = "sessions"
BUILD_DIR = ".new"  # in sessions/: where a new session is made whole before its rename
BUILD_LOCK_SUFFIX = ".lock"  # beside each build in .new/: held by its creator until it is done
BUILD_NAME_TRIES = 8  # names a creator draws for its build before it gives up (see _building)
ARCHIVE_DIR = "archive"
ARTIFACTS_DIR = "artifacts"
JOURNAL_DIR = "journal"
SNAPSHOTS_DIR = "snapshots"
INDEX_VERSION = 2  # version 1 (a snapshot without a log) is read as generation 0
INDEX_LOCK_TIMEOUT_S = 10.0
INDEX_COMPACT_RECORDS_MIN = 64  # a log is folded into a new snapshot at this many records at least
INDEX_LOG_SHARE = 4  # ... and once it holds a quarter as many records as the snapshot has entries
INDEX_LOG_SEGMENT_BYTES = 64 * 1024  # an update opens the log: its live segment is read and scanned
INDEX_LOAD_ATTEMPTS = 3  # reads of the index without the lock that may race a compaction
HEAD_BYTES_MAX = 128
_INDEX_MAGIC = b"journal-session-index "

_loads: Callable[[bytes], Any] = json.loads
try:
    from orjson import loads as _orjson_loads  # the index of a large store parses several times faster

    _loads = _orjson_loads
except ImportError:  # not CPython: the standard library's
    pass

__all__ = [
    "SESSION_ID_RE",
    "IndexRead",
    "InvalidSessionIdError",
    "SessionExistsError",
    "SessionInfo",
    "SessionNotFoundError",
    "SessionStore",
    "StoreError",
    "StoreSession",
    "check_session_id",
    "entry_from_fields",
    "read_index",
]


class SessionNotFoundError(StoreError, KeyError):
    def __init__(self, session_id: str, where: str) -> None:
        super().__init__(f"no {where}session {session_id!r} in this store; list the store to see its ids")
        self.session_id = session_id


class SessionExistsError(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} already exists in this store; pick another id")


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

    def to_json(self) -> dict[str, Any]:
        """The entry as `journal sessions --json` prints it (camelCase, like every --json)."""
        return {"sessionId": self.session_id, "status": self.status, "workspace": self.workspace,
                "created": self.created, "updated": self.updated, "lastSeq": self.last_seq,
                "parentSessionId": self.parent, "forkSeq": self.fork_seq, "open": self.open}


class SessionIndex(Protocol):
    """What a StoreSession tells when it closes: the store that keeps its index entry."""

    def _closed(self, session_id: str, last_seq: int) -> None: ...


class StoreSession(Session):
    """A Session that tells its store its last seq when it is closed."""

    store: SessionIndex | None = None
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
        # Processes may make one new store at once: make_dirs takes a directory another one made
        # meanwhile, and syncs its entry either way.
        for d in (self.root, self._dir(SESSIONS_DIR), self._dir(ARCHIVE_DIR)):
            make_dirs(self.fs, d)
        self._artifacts: ArtifactStore | None = None
        # Why the last session opened for writing got no dictionary although the store has one
        # (a damaged file, a link): journal/session/dictionaries.py. None when nothing is wrong.
        self.dictionary_problem: JournalError | None = None
        self._dictionary: Dictionary | None = None  # the current one, read and verified once

    # --- paths --------------------------------------------------------------------------

    def _dir(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def session_dir(self, session_id: str) -> str:
        """The directory of an active or archived session (SessionNotFoundError if neither)."""
        check_session_id(session_id)
        for where in (SESSIONS_DIR, ARCHIVE_DIR):
            d = self._dir(where, session_id)
            if self.fs.exists(d):
                return self._own(d)
        raise SessionNotFoundError(session_id, "")

    def _own(self, d: str) -> str:
        """``d``, a session's directory, which the store made: a link there or at its journal is
        never followed (its writes and locks would go elsewhere) but refused, typed, with the
        path to move away (UnexpectedLinkError)."""
        refuse_link(self.fs, os.path.join(refuse_link(self.fs, d), JOURNAL_DIR))
        return d

    def journal_path(self, session_id: str) -> str:
        return os.path.join(self.session_dir(session_id), JOURNAL_DIR)

    def snapshots_dir(self, session_id: str) -> str:
        return refuse_link(self.fs, os.path.join(self.session_dir(session_id), SNAPSHOTS_DIR))

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts is None:
            self._artifacts = ArtifactStore(refuse_link(self.fs, self._dir(ARTIFACTS_DIR)), self.fs)
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
        self._with_dictionary(options)
        with self._building(sid) as tmp:
            StoreSession.open(
                os.path.join(tmp, JOURNAL_DIR), create=True, session_id=sid, workspace=workspace, fs=self.fs, **options
            ).close()
            self._publish(tmp, sid)
        opened = StoreSession.open(os.path.join(d, JOURNAL_DIR), fs=self.fs, **options)
        s = self._attach(cast(StoreSession, opened), sid)
        now = utc_now()
        with self._closed_on_error(s):
            self._update([_put(SessionInfo(sid, "active", dict(workspace or {}), now, now, s.journal.last_seq,
                                           open=True))])
        return s

    def open(self, session_id: str, readonly: bool = False, **options: Any) -> StoreSession:
        """Open (and repair) an active session; archived ones open read-only only."""
        d = self.session_dir(session_id)
        archived = os.path.dirname(d) == self._dir(ARCHIVE_DIR)
        if archived and not readonly:
            raise StoreError(f"session {session_id!r} is archived; open it with readonly=True")
        options.setdefault("registry", self.registry)
        if not readonly:  # a reader needs none: the journal directory holds what its frames name
            self._with_dictionary(options)
        s = cast(
            StoreSession, StoreSession.open(os.path.join(d, JOURNAL_DIR), readonly=readonly, fs=self.fs, **options)
        )
        if not readonly:
            self._attach(s, session_id)
            with self._closed_on_error(s):
                # An entry the index lacks is read from the directories by the next listing.
                self._update([_set(session_id, open=True, last_seq=s.journal.last_seq)])
        return s

    def _with_dictionary(self, options: dict[str, Any]) -> None:
        """Give a session opened for writing the store's current dictionary (unless the caller
        chose one): its new frames are compressed with it, and the engine puts the file in the
        journal directory (a hard link to the store's) before any frame names it. A dictionary
        that cannot be used (damaged, a link) is left out and said in ``dictionary_problem``."""
        if "dictionary" in options or options.get("writer") == "shared":
            return  # the caller's choice; shared writers take none (the engine refuses one)
        d = self.current_dictionary()
        if d is not None:
            options["dictionary"] = d

    def current_dictionary(self) -> Dictionary | None:
        """The dictionary sessions opened for writing now get (journal/session/dictionaries.py):
        the store's highest id, verified when first seen; None when the store has none or it
        cannot be used (then ``dictionary_problem`` says why)."""
        try:
            d = dictionaries.dictionaries_dir(self)
            ids = dictionaries.dictionary_ids(self.fs, d)
            if not ids:
                self.dictionary_problem = None
                return None
            if self._dictionary is None or self._dictionary.id != ids[-1]:
                self._dictionary = dictionaries.load(self.fs, d, ids[-1])
        except JournalError as exc:  # damaged or crafted, a link: never used (see the module)
            self.dictionary_problem, self._dictionary = exc, None
            return None
        self.dictionary_problem = None
        return self._dictionary

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
        self._update([_set(session_id, open=False, last_seq=last_seq, updated=utc_now())])

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
        with self._building(sid) as tmp:
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
        got = dataclasses.replace(got, path=os.path.join(d, JOURNAL_DIR))
        self._update([_put(self._read_info(sid))])
        return got

    @contextmanager
    def _building(self, session_id: str) -> Iterator[str]:
        """A temp directory where a new session is made whole before it gets its name (removed
        if the block raises).

        It is in ``sessions/.new/`` (a dot name: listings never show it), so that finding the
        leftovers of an earlier attempt for the same id that crashed or failed (never published,
        removed first) lists the builds under way, not every session of the store. Each build
        holds the lock file beside it (``<build>.lock``) until it is renamed out or removed:
        another process creating the same id at the same moment removes only leftovers nobody
        holds, and loses the rename with SessionExistsError instead of pulling a build from
        under its creator.
        """
        building = self._dir(SESSIONS_DIR, BUILD_DIR)
        # Never published: what is renamed out of it is synced there. A link there is refused:
        # removing the leftovers in it would reach what it points to.
        ensure_dir(self.fs, building)
        prefix = f"{session_id}.new-"
        for stale in sorted({n.removesuffix(BUILD_LOCK_SUFFIX) for n in self.fs.listdir(building)
                             if n.startswith(prefix)}):
            self._remove_build(os.path.join(building, stale))
        for _ in range(BUILD_NAME_TRIES):
            tmp = os.path.join(building, prefix + uuid.uuid4().hex[:8])
            held = self.fs.try_lock(tmp + BUILD_LOCK_SUFFIX)
            if held is not None:
                break
            # A name nobody else drew: another creator's sweep of leftovers found its lock file
            # before it was locked here, took it and removed it. Draw another name.
        else:
            raise StoreError(f"the lock of a new build in {building!r} was taken {BUILD_NAME_TRIES} times by another "
                             "process's sweep of leftovers; try again")
        try:
            self.fs.mkdir(tmp)
            try:
                yield tmp
            except BaseException:
                remove_tree(self.fs, tmp)
                raise
        finally:
            # Unlinked while still held: once let go, the file is no longer at its name, so no
            # process can lock it and take the build for a leftover (fs.try_lock checks that).
            self._unlink_lock(tmp + BUILD_LOCK_SUFFIX)
            held.release()

    def _remove_build(self, path: str) -> None:
        """Remove the leftover build ``path`` unless its creator still holds its lock."""
        lock = self.fs.try_lock(path + BUILD_LOCK_SUFFIX)
        if lock is None:
            return  # being built right now
        try:
            if self.fs.exists(path):
                remove_tree(self.fs, path)
            self._unlink_lock(path + BUILD_LOCK_SUFFIX)  # while held: see _building
        finally:
            lock.release()

    def _unlink_lock(self, path: str) -> None:
        try:
            self.fs.unlink(path)
        except FileNotFoundError:
            pass  # removed by another creator that took it after this one let it go

    def _publish(self, tmp: str, session_id: str) -> None:
        try:
            self.fs.rename(tmp, self._dir(SESSIONS_DIR, session_id))
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):  # made meanwhile by another creator
                raise SessionExistsError(session_id) from None
            raise
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
        lock = self.fs.try_lock(os.path.join(self._own(src), JOURNAL_DIR, LOCK_FILE))
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
        self._update([_set(session_id, status="archived", open=False)])
        return self.info(session_id)

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
            idx = self._refreshed()
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
        info = self._read_info(session_id)
        self._update([_put(info)])
        return info

    def rebuild_index(self) -> int:
        """Rebuild the whole index from the sessions; returns how many it holds."""
        with self._locked():
            return len(self._compact([], rebuild=True))

    # --- the index (see the module doc: a snapshot, a log of updates, compaction) ---------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """INDEX.lock: one index writer at a time, across processes."""
        lock: Lock | None = take_lock(self.fs, self._dir(INDEX_LOCK), INDEX_LOCK_TIMEOUT_S)
        if lock is None:
            raise StoreError(f"the index of {self.root!r} stayed locked for {INDEX_LOCK_TIMEOUT_S}s")
        try:
            yield
        finally:
            lock.release()

    def _update(self, records: builtins.list[dict[str, Any]]) -> None:
        """Log index updates (O(1) in the number of sessions), under the lock."""
        with self._locked():
            self._log(records)

    def _refreshed(self) -> dict[str, SessionInfo]:
        """Under the lock: the index made to agree with the directories, what changed logged (or,
        without a usable index, rebuilt from the sessions and snapshotted)."""
        with self._locked():
            loaded = self._load_index()
            if loaded is None:
                return self._compact([], rebuild=True)
            idx = dict(loaded)
            self._freshen(idx, full=False)
            changes = [_put(info) for sid, info in idx.items() if loaded.get(sid) != info]
            changes += [{"op": "del", "id": sid} for sid in loaded if sid not in idx]
            if changes:
                self._log(changes)
            return idx

    def _log(self, records: builtins.list[dict[str, Any]]) -> None:
        """Append ``records`` to the current generation's log (the lock is held), compacting it
        when it has grown as large as the snapshot. Without a usable snapshot the index is
        rebuilt from the sessions instead, with the records applied."""
        head = self._snapshot_head()
        if head is None:
            self._compact(records, rebuild=True)
            return
        generation, entries = head
        with self._open_log(generation) as j:
            outs = j.append_many(records, durability="sync")
            failed = [o for o in outs if not isinstance(o, Committed)]
            if failed:
                raise StoreError(
                    f"the index of {self.root!r} could not be updated ({failed[0]}); the sessions are "
                    "unchanged and the next listing re-reads what the index missed. Fix the cause and retry"
                )
            logged = j.last_seq
        if logged >= max(INDEX_COMPACT_RECORDS_MIN, entries // INDEX_LOG_SHARE):
            try:
                self._compact([])
            except (OSError, JournalError):
                pass  # the update is durable in the log; the next update compacts again

    def _open_log(self, generation: int) -> Journal:
        return journal.open(
            refuse_link(self.fs, self._log_path(generation)),  # made by the store: a link is never followed
            create=True, fs=self.fs, segment_size_bytes=INDEX_LOG_SEGMENT_BYTES,
            reserve_bytes=0,  # opened for every update and closed: nothing to gain from reserving
            compress=False,  # records of a few hundred bytes: decompressing them would slow listings
        )

    def _compact(self, records: builtins.list[dict[str, Any]], rebuild: bool = False) -> dict[str, SessionInfo]:
        """Fold the index (or, with ``rebuild``, the sessions themselves) and ``records`` into a
        snapshot of a new generation, and remove the older logs. The lock is held."""
        loaded = None if rebuild else self._load_index()
        idx = dict(loaded or {})
        if loaded is None:
            self._freshen(idx, full=True)
        for rec in records:
            _apply(idx, rec)
        olds = self._log_generations()
        head = self._snapshot_head()
        generation = max([*olds, head[0] if head is not None else 0]) + 1
        # The new log's directory first: the snapshot's directory fsync makes both durable, and a
        # crash before the snapshot leaves an empty log that is read (as nothing) after the old one.
        self.fs.mkdir(self._log_path(generation))
        self._save_snapshot(generation, idx)
        for old in olds:
            remove_dir(self.fs, self._log_path(old))  # superseded by the snapshot
        return idx

    def _log_path(self, generation: int) -> str:
        return self._dir(f"{INDEX_LOG_PREFIX}{generation:010d}")

    def _log_generations(self) -> builtins.list[int]:
        return _log_generations(self.root, self.fs)

    def _snapshot_head(self) -> tuple[int, int] | None:
        """(generation, entries) from the snapshot's first line, for a writer: no checksum is
        checked and nothing else is read. A damaged snapshot that still has a readable first
        line only sends records to a log that the rebuild its readers do makes moot."""
        return _snapshot_head(self.root, self.fs)

    def _load_index(self) -> dict[str, SessionInfo] | None:
        """The index as ``read_index`` reads it; None when it is missing, damaged or holds an
        entry or update the store never writes (a crafted field): the caller rebuilds it from
        the sessions."""
        got = read_index(self.root, self.fs)
        return got.sessions if got is not None and got.exact else None

    def _save_snapshot(self, generation: int, idx: dict[str, SessionInfo]) -> None:
        body = json.dumps(
            {"version": INDEX_VERSION, "generation": generation,
             "sessions": {k: _fields(v) for k, v in sorted(idx.items())}},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        head = _INDEX_MAGIC + b"%d %d %d\n" % (INDEX_VERSION, generation, len(idx)) + body + b"\n"
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
            # A link is no session the store made: not listed, and never opened or locked.
            if SESSION_ID_RE.fullmatch(name) and ".." not in name and not self.fs.is_link(self._dir(where, name)):
                out.append(name)
        return out

    def _writer_alive(self, session_id: str, status: str) -> bool:
        if status != "active":
            return False
        lock = self.fs.try_lock(os.path.join(self._own(self._dir(SESSIONS_DIR, session_id)), JOURNAL_DIR, LOCK_FILE))
        if lock is None:
            return True
        lock.release()
        return False

    def _read_info(self, session_id: str) -> SessionInfo:
        """An index entry rebuilt from the session's journal (O(live segment) plus a header read)."""
        d = self.session_dir(session_id)
        status = "archived" if os.path.dirname(d) == self._dir(ARCHIVE_DIR) else "active"
        try:
            with journal.open(os.path.join(d, JOURNAL_DIR), readonly=True, fs=self.fs) as j:
                return info_from_journal(j, session_id, status)
        except OSError:
            # An I/O error says nothing about the session: raise it rather than save an empty
            # entry (last seq 0, no workspace) into the index, where it would be trusted later.
            raise
        except JournalError:
            return SessionInfo(session_id, status, {}, None, None, 0)


def info_from_journal(j: Journal, session_id: str, status: str) -> SessionInfo:
    """An index entry read from the session's journal: its header (record 1, or a fork's first
    record of its own) and its last record (O(live segment) plus a header read)."""
    workspace: dict[str, Any] = {}
    created = updated = parent = None
    fork_seq = None
    last_seq = j.last_seq
    header = None
    for rec in j.read():
        ev = rec.event if not rec.is_bytes else None
        if isinstance(ev, dict) and ev.get("type") == "session.started" and ev.get("sessionId") == session_id:
            header = ev
            break
    last = j.get(last_seq) if last_seq else None
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


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(SessionInfo))


def _put(info: SessionInfo) -> dict[str, Any]:
    return {"op": "put", "id": info.session_id, "info": _fields(info)}


def _fields(info: SessionInfo) -> dict[str, Any]:
    """The entry as a dict of its fields (asdict without its deep copy: they are JSON values)."""
    return dict(info.__dict__)


def _set(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"op": "set", "id": session_id, "fields": fields}


def _parse_head(line: bytes) -> tuple[int, int] | None:
    """(generation, entries) of a snapshot's first line; version 1 is generation 0."""
    if line == b"journal-session-index 1\n":
        return 0, 0
    fields = line.split()
    if len(fields) != 4 or fields[0] != _INDEX_MAGIC.strip() or fields[1] != b"%d" % INDEX_VERSION:
        return None
    if not (fields[2].isdigit() and fields[3].isdigit()):
        return None
    return int(fields[2]), int(fields[3])


# --- reading the index: the one parser of the store's own loading and of read-only readers -----

INDEX_SEQ_MAX = 2**63 - 1  # a seq an index may name; a larger number (or a negative one) was crafted
_MISSING = object()


@dataclass(frozen=True)
class IndexRead:
    """The index as read from its files: the snapshot and the logs of its generation and later."""

    sessions: dict[str, SessionInfo]
    # Every entry and update was as the store writes them. False: some field had another type,
    # an out-of-range number or an unknown name, or an id broke the store's rule; such a field was
    # replaced by its default, such an id dropped. The store rebuilds such an index from its
    # sessions; a read-only reader shows what was read, with nothing of the wrong type in it.
    exact: bool
    generation: int


def read_index(root: str | os.PathLike[str], fs: FileSystem | None = None) -> IndexRead | None:
    """The index of the store at ``root``, read only: no lock taken, nothing written, nothing
    refreshed from the sessions or rebuilt. None when the snapshot is missing or damaged or a log
    is damaged (the store rebuilds the index from its sessions then; a reader reads their
    journals' headers), or when a compaction replaced the snapshot during each of
    INDEX_LOAD_ATTEMPTS reads.

    A compaction may run meanwhile (readers take no lock): it makes the log of generation g+1,
    writes the snapshot of g+1 and then removes the older logs; nothing is appended to the log of
    g once g+1's snapshot is written. A read that saw the old snapshot of g finds g's log listed
    and reads it whole (the old snapshot, its log and the new log agree), or finds it gone while
    opening it, or not listed (and the snapshot no longer of g): then it reads again, since the
    old snapshot plus the logs left would lack the removed log's updates."""
    root = os.fspath(root)
    fs = fs or OsFileSystem()
    for _ in range(INDEX_LOAD_ATTEMPTS):
        snap = _read_snapshot(root, fs)
        if snap is None:
            return None
        generation, idx, exact = snap
        try:
            generations = _log_generations(root, fs)
            if generation not in generations:
                # Made before this snapshot by the compaction that wrote it, so removed since by
                # the next one, unless the snapshot has none (version 1): asked of its first line.
                head = _snapshot_head(root, fs)
                if head is None or head[0] != generation:
                    continue  # a newer snapshot: the old one plus the logs left would lack an update
            for g in generations:
                if g >= generation:
                    exact = _replay_log(root, fs, g, idx) and exact
        except (JournalNotFoundError, FileNotFoundError):
            continue  # a compaction removed a log after the snapshot was read: read again
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue  # the same, seen while the log was being opened
            raise  # an I/O error says nothing about the index: never rebuild on it
        except (JournalError, ValueError, TypeError, KeyError, AttributeError):
            return None  # a damaged log: rebuilt from the sessions
        return IndexRead(idx, exact, generation)
    return None


def entry_from_fields(session_id: str, fields: dict[str, Any]) -> SessionInfo:
    """An index entry from its fields as stored (an index or a catalog: its bytes may be
    crafted): a field of the wrong type or range, or missing, gets its default."""
    return _entry(session_id, fields)[0]


def _opt_str(v: Any) -> bool:
    return v is None or type(v) is str


def _seq_ok(v: Any) -> bool:
    return type(v) is int and 0 <= v <= INDEX_SEQ_MAX


# Each field but session_id: (whether a stored value is what the store writes, its default).
_FIELD_RULES: dict[str, tuple[Callable[[Any], bool], Any]] = {
    "status": (lambda v: type(v) is str, "active"),
    "workspace": (lambda v: type(v) is dict, None),  # default: a new {} per entry
    "created": (_opt_str, None),
    "updated": (_opt_str, None),
    "last_seq": (_seq_ok, 0),
    "parent": (_opt_str, None),
    "fork_seq": (lambda v: v is None or _seq_ok(v), None),
    "open": (lambda v: type(v) is bool, False),
}


def _as_written(f: dict[str, Any]) -> bool:
    """Whether every field of an entry with exactly the store's field names has the type and
    range the store writes (the rules of _FIELD_RULES, spelled out: a listing checks every entry)."""
    last, fork = f["last_seq"], f["fork_seq"]
    created, updated, parent = f["created"], f["updated"], f["parent"]
    return (type(f["status"]) is str and type(f["workspace"]) is dict and type(f["open"]) is bool
            and type(last) is int and 0 <= last <= INDEX_SEQ_MAX
            and (fork is None or (type(fork) is int and 0 <= fork <= INDEX_SEQ_MAX))
            and (created is None or type(created) is str) and (updated is None or type(updated) is str)
            and (parent is None or type(parent) is str))


def _entry(session_id: str, fields: dict[str, Any]) -> tuple[SessionInfo, bool]:
    """The entry ``fields`` describe, and whether they were exactly as the store writes them."""
    exact = fields.keys() == _FIELD_NAMES and fields["session_id"] == session_id
    if exact and _as_written(fields):
        info = object.__new__(SessionInfo)  # SessionInfo(**fields) without its cost: a listing makes many
        info.__dict__.update(fields)
        return info, True
    values: dict[str, Any] = {"session_id": session_id}  # crafted: each field checked, defaults for the rest
    for name, (ok, default) in _FIELD_RULES.items():
        v = fields.get(name, _MISSING)
        if v is _MISSING or not ok(v):
            v = {} if name == "workspace" else default
        values[name] = v
    info = object.__new__(SessionInfo)
    info.__dict__.update(values)
    return info, False


def _id_ok(session_id: str) -> bool:
    return SESSION_ID_RE.fullmatch(session_id) is not None and ".." not in session_id


def _apply(idx: dict[str, SessionInfo], rec: Any) -> bool:
    """One logged update, and whether it was as the store writes them (a ``put`` or ``set`` of a
    crafted field applies its default; an id that breaks the store's rule is dropped). A ``set``
    for an entry the index lacks is dropped: the directories still show the session, and the
    next listing reads its entry from its journal. Anything but an update raises ValueError."""
    if type(rec) is not dict:
        raise ValueError("an index update is not an object")
    op, sid = rec.get("op"), rec.get("id")
    if type(sid) is not str:
        raise ValueError("an index update names no session")
    if op == "put" and type(rec.get("info")) is dict:
        if not _id_ok(sid):
            return False
        idx[sid], exact = _entry(sid, rec["info"])
        return exact
    if op == "set" and type(rec.get("fields")) is dict:
        if not _id_ok(sid):
            return False
        old = idx.get(sid)
        if old is None:
            return True
        idx[sid], exact = _entry(sid, {**old.__dict__, **rec["fields"]})
        return exact
    if op == "del":
        idx.pop(sid, None)
        return _id_ok(sid)
    raise ValueError(f"unknown index update {op!r}")


def _log_generations(root: str, fs: FileSystem) -> list[int]:
    out = []
    for name in fs.listdir(root):
        tail = name[len(INDEX_LOG_PREFIX) :]
        if name.startswith(INDEX_LOG_PREFIX) and tail.isdigit() and len(tail) == 10:
            out.append(int(tail))
    return sorted(out)


def _snapshot_head(root: str, fs: FileSystem) -> tuple[int, int] | None:
    """(generation, entries) from the snapshot's first line: no checksum checked, nothing else read."""
    try:
        f = fs.open_read(os.path.join(root, INDEX_FILE))
    except FileNotFoundError:
        return None
    try:
        first = f.pread(HEAD_BYTES_MAX, 0)
    finally:
        f.close()
    return _parse_head(first[: first.find(b"\n") + 1])


def _read_snapshot(root: str, fs: FileSystem) -> tuple[int, dict[str, SessionInfo], bool] | None:
    """(generation, entries, exact) of the snapshot; None when it is missing, torn or damaged."""
    try:
        f = fs.open_read(os.path.join(root, INDEX_FILE))
    except FileNotFoundError:
        return None
    try:
        data = read_all(f)
    finally:
        f.close()
    first = data.find(b"\n") + 1
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    head = _parse_head(data[:first])
    if head is None or data[cut:] != b"xxh64 %016x\n" % xxhash.xxh64_intdigest(data[:cut]):
        return None  # damaged or torn: rebuilt from the sessions
    try:
        body = _loads(data[first : cut - 1])
    except ValueError:
        return None
    if type(body) is not dict or body.get("version") not in (1, INDEX_VERSION):
        return None
    if type(body.get("sessions")) is not dict:
        return None
    exact = True
    idx: dict[str, SessionInfo] = {}
    for sid, fields in body["sessions"].items():
        if type(fields) is not dict or not _id_ok(sid):
            exact = False
            continue
        idx[sid], ok = _entry(sid, fields)
        exact = exact and ok
    return head[0], idx, exact


def _replay_log(root: str, fs: FileSystem, generation: int, idx: dict[str, SessionInfo]) -> bool:
    """Apply the updates of one generation's log to ``idx``; whether they were all exact."""
    path = os.path.join(root, f"{INDEX_LOG_PREFIX}{generation:010d}")
    try:
        j = journal.open(refuse_link(fs, path), readonly=True, fs=fs)  # made by the store: a link is refused
    except NotAJournalError:
        return True  # made by a compaction, no update logged yet
    exact = True
    with j:
        for rec in j.read():
            exact = _apply(idx, rec.event) and exact
    return exact
