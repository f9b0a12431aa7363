"""A session store on a server: its sessions are journals of a ``journal.api.Store``, its index a
``journal.api.Catalog`` of that store, so listing and ``latest`` ask the server, never a log.

    store = journal.session.open_store("postgresql://127.0.0.1:5432/test?schema=agents")
    with store.create(workspace={"path": "/repo"}) as s: ...
    store.latest(workspace="/repo")

It has the file ``SessionStore``'s methods and meaning (create, open, fork, archive, list,
latest, info, refresh, rebuild_index), so code written against one runs on the other;
``journal.session.open_store`` picks by what it is given. What lies in the store:

    <id>                     the session's journal (a session id never holds '%')
    <id>%snap.<reducer>      the session's snapshots for one reducer, a record each, the latest
                             last (older ones dropped after each save); ``snapshot_slot``
    catalog "sessions"       an entry per session, the fields of ``SessionInfo``

How the index stays true. The journals are the truth and the catalog a cache, as on files:

- ``create`` makes the journal and appends its header (``Session.attach``), then puts the
  entry. A crash between the two leaves a journal the catalog lacks; ``list`` finds it (one
  listing of the store's names, a server query) and reads its entry from its journal. A crash
  before the header leaves an empty journal, which is not a session: listings skip it and a
  ``create`` of that id finishes it.
- ``fork`` checks the clean point in the parent (``fork.plan_fork``; from the parent's
  ForkReducer snapshot when there is one), then asks the store for a server-side copy of the
  prefix with the child's header appended in the same copy (``Store.copy(upto_seq=, append=)``:
  one transaction on PostgreSQL; the metadata message last on JetStream), whole or absent.
- ``open`` for writing and ``close`` update the entry's ``open``, ``last_seq`` and ``updated``.
  A writer that died leaves ``open`` true and ``last_seq`` as of its open until the session is
  opened again, or ``refresh(id)`` reads it (a server cannot be asked, as a lock file can,
  whether a writer of another machine is alive without taking its claim).
- ``archive`` takes the session's writer lock (refused while a writer holds it), marks the
  entry archived, and lets go; ``open`` for writing reads the entry again once it holds the lock,
  so a writer never starts on a session archived meanwhile.

Artifacts are files: pass ``artifacts_dir`` for ``artifacts`` (a shared file system), or keep
them elsewhere.
"""

from __future__ import annotations

import builtins
import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import journal
from journal.api import (
    Catalog,
    CatalogStore,
    Committed,
    Journal,
    JournalError,
    JournalLockedError,
    JournalNotFoundError,
    PrefixCopy,
    Retention,
    Store,
)
from journal.session.artifacts import ArtifactStore
from journal.session.envelope import SESSION_ID_RE, check_session_id
from journal.session.errors import StoreError
from journal.session.fork import ForkReducer, ForkResult, plan_fork
from journal.session.reducer import Reducer
from journal.session.registry import Registry
from journal.session.session import new_session_id, utc_now
from journal.session.snapshot import SnapshotDamagedError
from journal.session.store import (
    SessionExistsError,
    SessionInfo,
    SessionNotFoundError,
    StoreSession,
    info_from_journal,
)

CATALOG_NAME: Final = "sessions"
SNAPSHOT_MARK: Final = "%snap."  # between a session id and its reducer's escaped name
# What Session.attach takes; every other option of create/open goes to the store's open.
SESSION_OPTIONS: Final = frozenset({"registry", "repair_on_open", "policy", "clock", "durability_floor"})
_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(SessionInfo))
_NAME_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def snapshot_journal_name(session_id: str, reducer_name: str) -> str:
    """The journal of a session's snapshots for one reducer: ``<id>%snap.<name>``, the name
    escaped (%XX for every byte but letters, digits, '_' and '-'), so no two pairs share one."""
    escaped = "".join(c if c in _NAME_SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in reducer_name)
    return f"{check_session_id(session_id)}{SNAPSHOT_MARK}{escaped}"


class JournalSlot:
    """A snapshot slot (``journal.session.snapshot.SnapshotSlot``) in a journal of a store: a
    save appends the snapshot at "sync" and then drops the older ones (a crash in between
    leaves both; the last is the one read)."""

    def __init__(self, store: Store, name: str) -> None:
        self._store = store
        self._name = name

    @property
    def where(self) -> str:
        return f"{self._store.location} journal {self._name}"

    def load(self) -> bytes:
        try:
            with self._store.open(self._name, readonly=True) as j:
                first = j.first_seq if isinstance(j, Retention) else 1
                rec = j.get(j.last_seq) if j.last_seq >= first else None
        except JournalNotFoundError:
            raise FileNotFoundError(f"no snapshot in {self.where}") from None
        except OSError:
            raise  # unreadable now, which says nothing about the snapshot
        except JournalError as exc:  # a damaged record: the snapshot is not to be trusted
            raise SnapshotDamagedError(self.where, str(exc)) from None
        if rec is None:
            raise FileNotFoundError(f"no snapshot in {self.where}")
        return rec.payload

    def store(self, data: bytes) -> None:
        with self._store.open(self._name, create=True) as j:
            out = j.append(data, durability="sync")
            if not isinstance(out, Committed):
                raise StoreError(f"the snapshot was not saved in {self.where} ({out}); the session is unchanged")
            if isinstance(j, Retention) and out.seq > j.first_seq:
                j.seal()
                j.drop_prefix(out.seq)


class CatalogSessionStore:
    """Sessions in a server's store, indexed by its catalog. See the module doc."""

    def __init__(
        self,
        target: str | Store,
        registry: Registry | None = None,
        artifacts_dir: str | os.PathLike[str] | None = None,
        **store_options: Any,
    ) -> None:
        store = journal.store(target, **store_options) if isinstance(target, str) else target
        if not isinstance(store, CatalogStore):
            raise StoreError(f"the store at {store.location} keeps no catalog: a session store on it needs one "
                             "(PostgreSQL and JetStream stores have one; for a directory, use "
                             "journal.session.SessionStore)")
        self.backing: Store = store
        self.catalog: Catalog = store.catalog(CATALOG_NAME)
        self.registry = registry or Registry()
        self._artifacts_dir = None if artifacts_dir is None else os.fspath(artifacts_dir)
        self._artifacts: ArtifactStore | None = None

    @property
    def root(self) -> str:
        """Where the store is (its URL, without password)."""
        return self.backing.location

    @property
    def artifacts(self) -> ArtifactStore:
        if self._artifacts_dir is None:
            raise StoreError(f"the session store at {self.root} keeps no artifacts: open it with artifacts_dir= (a "
                             "directory every worker shares)")
        if self._artifacts is None:
            self._artifacts = ArtifactStore(self._artifacts_dir)
        return self._artifacts

    def journal_path(self, session_id: str) -> str:
        """What ``journal cat`` and the other commands take for the session's journal."""
        sid = check_session_id(session_id)
        url = self.root
        if "://" not in url:
            return os.path.join(url, sid)
        head, _, query = url.partition("?")
        return f"{head}?journal={sid}" + (f"&{query}" if query else "")

    def snapshot_slot(self, session_id: str, reducer: Reducer[Any]) -> JournalSlot:
        """Where ``snapshot.take``/``resume`` keep the session's snapshots for ``reducer``."""
        return JournalSlot(self.backing, snapshot_journal_name(session_id, reducer.name))

    # --- sessions -----------------------------------------------------------------------

    def create(
        self, workspace: dict[str, Any] | None = None, session_id: str | None = None, **options: Any
    ) -> StoreSession:
        """A new session, open for writing (close it when done)."""
        sid = check_session_id(new_session_id() if session_id is None else session_id)
        session_opts, journal_opts = _split(options, self.registry)
        if self.catalog.get(sid) is not None:
            raise SessionExistsError(sid)
        j = self.backing.open(sid, create=True, **journal_opts)
        if j.last_seq > 0:  # made already (an empty journal is a create cut short: finished here)
            j.close()
            raise SessionExistsError(sid)
        s = self._attached(j, sid, create=True, workspace=workspace, **session_opts)
        now = utc_now()
        with _closed_on_error(s):
            self.catalog.put(sid, _fields(SessionInfo(sid, "active", dict(workspace or {}), now, now,
                                                      s.journal.last_seq, open=True)))
        return s

    def open(self, session_id: str, readonly: bool = False, **options: Any) -> StoreSession:
        """Open (and repair) an active session; archived ones open read-only only."""
        sid = check_session_id(session_id)
        session_opts, journal_opts = _split(options, self.registry)
        entry = self.catalog.get(sid)
        if entry is not None and entry.get("status") == "archived" and not readonly:
            raise StoreError(f"session {sid!r} is archived; open it with readonly=True")
        try:
            j = self.backing.open(sid, readonly=readonly, **journal_opts)
        except JournalNotFoundError:
            raise SessionNotFoundError(sid, "") from None
        if j.last_seq == 0:
            j.close()
            raise SessionNotFoundError(sid, "")  # a create cut short before its header
        s = self._attached(j, sid, create=False, workspace=None, **session_opts)
        if not readonly:
            with _closed_on_error(s):
                # Read again under the writer lock: an archive that took the lock meanwhile wins.
                entry = self.catalog.get(sid)
                if entry is not None and entry.get("status") == "archived":
                    raise StoreError(f"session {sid!r} was archived while it was being opened; open it with "
                                     "readonly=True")
                if entry is None or not self.catalog.update(sid, {"open": True, "last_seq": s.journal.last_seq}):
                    info = info_from_journal(s.journal, sid, "active")
                    self.catalog.put(sid, _fields(dataclasses.replace(info, open=True)))
            s.store = self
            s.store_id = sid
        return s

    def _attached(self, j: Journal, sid: str, create: bool, workspace: dict[str, Any] | None,
                  **session_opts: Any) -> StoreSession:
        try:
            s = StoreSession.attach(j, create=create, session_id=sid, workspace=workspace, **session_opts)
        except BaseException:
            j.close()
            raise
        assert isinstance(s, StoreSession)
        if create:
            s.store = self
            s.store_id = sid
        return s

    def _closed(self, session_id: str, last_seq: int) -> None:
        self.catalog.update(session_id, {"open": False, "last_seq": last_seq, "updated": utc_now()})

    def fork(
        self,
        parent_id: str,
        at_seq: int | None = None,
        session_id: str | None = None,
        origin: str = "user",
        workspace: dict[str, Any] | None = None,
    ) -> ForkResult:
        """Fork a session of this store into a new one, the prefix copied on the server."""
        check_session_id(parent_id)
        sid = check_session_id(new_session_id() if session_id is None else session_id)
        if self.catalog.get(sid) is not None or self.backing.exists(sid):
            raise SessionExistsError(sid)
        try:
            pj = self.backing.open(parent_id, readonly=True)
        except JournalNotFoundError:
            raise SessionNotFoundError(parent_id, "") from None
        with pj:
            plan = plan_fork(pj, at_seq, session_id=sid, origin=origin, workspace=workspace, registry=self.registry,
                             snapshot=self.snapshot_slot(parent_id, ForkReducer()))
        try:
            self.backing.copy(parent_id, sid, upto_seq=plan.at_seq, append=[plan.header.to_stored()])
        except FileExistsError:
            raise SessionExistsError(sid) from None
        with self.backing.open(sid, readonly=True) as cj:
            info = info_from_journal(cj, sid, "active")
        self.catalog.put(sid, _fields(info))
        return ForkResult(self.journal_path(sid), sid, plan.parent_session_id, plan.at_seq, plan.depth, origin,
                          plan.at_seq + 1, PrefixCopy(), plan.checked_from_seq, plan.snapshot_reason)

    def archive(self, session_id: str) -> SessionInfo:
        """Mark a session archived (refused while a writer holds it): it then opens read-only."""
        sid = check_session_id(session_id)
        entry = self.catalog.get(sid)
        if entry is not None and entry.get("status") == "archived":
            return self.info(sid)
        try:
            held = self.backing.open(sid, lock_timeout_s=0.0)
        except JournalNotFoundError:
            raise SessionNotFoundError(sid, "active ") from None
        except JournalLockedError:
            raise StoreError(f"session {sid!r} is open for writing elsewhere; close it before archiving") from None
        with held:
            if entry is None:
                self.catalog.put(sid, _fields(info_from_journal(held, sid, "active")))
            self.catalog.update(sid, {"status": "archived", "open": False, "last_seq": held.last_seq})
        return self.info(sid)

    # --- listing ------------------------------------------------------------------------

    def list(self, status: str | None = None, workspace: str | None = None) -> builtins.list[SessionInfo]:
        """Sessions in id (creation) order, from the catalog; ``workspace`` filters on its path.

        One listing of the catalog and one of the store's names; a journal the catalog lacks (a
        create or a fork cut short before its entry) is read and entered, an entry whose journal
        is gone is removed."""
        idx = self._index()
        return [
            i for i in sorted(idx.values(), key=lambda i: i.session_id)
            if (status is None or i.status == status) and (workspace is None or i.workspace.get("path") == workspace)
        ]

    def latest(self, workspace: str | None = None) -> SessionInfo | None:
        """The active session updated last (ties: the newer id), optionally in one workspace."""
        active = self.list(status="active", workspace=workspace)
        return max(active, key=lambda i: (i.updated or "", i.session_id), default=None)

    def info(self, session_id: str) -> SessionInfo:
        entry = self.catalog.get(check_session_id(session_id))
        if entry is None:
            for i in self.list():
                if i.session_id == session_id:
                    return i
            raise SessionNotFoundError(session_id, "")
        return _info(session_id, entry)

    def refresh(self, session_id: str) -> SessionInfo:
        """Re-read one session's entry from its journal (its status and open flag kept)."""
        sid = check_session_id(session_id)
        entry = self.catalog.get(sid) or {}
        info = self._read_info(sid, str(entry.get("status", "active")))
        if info is None:
            raise SessionNotFoundError(sid, "")
        info = dataclasses.replace(info, open=bool(entry.get("open", False)))
        self.catalog.put(sid, _fields(info))
        return info

    def rebuild_index(self) -> int:
        """Every entry read again from the journals; returns how many there are."""
        entries = dict(self.catalog.items())
        names = self._session_names()
        for sid in names:
            old = entries.get(sid, {})
            info = self._read_info(sid, str(old.get("status", "active")))
            if info is not None:
                self.catalog.put(sid, _fields(info))
        for sid in entries.keys() - names:
            self.catalog.delete(sid)
        return len(self._index())

    def close(self) -> None:
        close = getattr(self.catalog, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> CatalogSessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the index ----------------------------------------------------------------------

    def _index(self) -> dict[str, SessionInfo]:
        entries = dict(self.catalog.items())
        names = self._session_names()
        idx: dict[str, SessionInfo] = {}
        for sid, entry in entries.items():
            if sid in names:
                idx[sid] = _info(sid, entry)
            else:
                self.catalog.delete(sid)  # its journal is gone
        for sid in names - entries.keys():
            info = self._read_info(sid, "active")
            if info is not None:  # None: an empty journal, a create cut short
                self.catalog.put(sid, _fields(info))
                idx[sid] = info
        return idx

    def _session_names(self) -> set[str]:
        return {n for n in self.backing.names() if "%" not in n and SESSION_ID_RE.fullmatch(n)}

    def _read_info(self, sid: str, status: str) -> SessionInfo | None:
        try:
            with self.backing.open(sid, readonly=True) as j:
                if j.last_seq == 0 or not _begins_a_session(j):
                    return None
                return info_from_journal(j, sid, status)
        except JournalNotFoundError:
            return None
        except OSError:
            raise  # says nothing about the session: never entered as an empty one
        except JournalError:
            return SessionInfo(sid, status, {}, None, None, 0)


def _begins_a_session(j: Journal) -> bool:
    """Whether ``j`` is a session's journal: its first record is a session header (a fork's is
    its parent's, copied with the prefix). Other journals of the store (an app's own records
    beside its sessions) are no sessions, and listing them as sessions was wrong. One record is
    read. A journal whose prefix was dropped cannot tell, and is taken for one, as before."""
    first = next(iter(j.read()), None)
    if first is None:
        return False
    if first.seq != 1:
        return True
    if first.is_bytes:
        return False
    try:
        event = first.event
    except JournalError:
        return True  # damage is reported where the session is opened, not hidden by the listing
    return isinstance(event, dict) and event.get("type") == "session.started"


def open_store(target: str | os.PathLike[str] | Store, **options: Any) -> Any:
    """The session store at ``target``: ``SessionStore`` for a directory, ``CatalogSessionStore``
    for a server URL (``postgresql://...``, ``nats://...``) or a store object with a catalog."""
    from journal.remote.url import SCHEMES
    from journal.session.store import SessionStore

    if isinstance(target, str) and "://" in target and target.split("://", 1)[0].lower() in SCHEMES:
        return CatalogSessionStore(target, **options)
    if not isinstance(target, (str, os.PathLike)):
        return CatalogSessionStore(target, **options)
    return SessionStore(target, **options)


@contextmanager
def _closed_on_error(s: StoreSession) -> Iterator[None]:
    try:
        yield
    except BaseException:
        s.store = None
        s.close()
        raise


def _split(options: dict[str, Any], registry: Registry) -> tuple[dict[str, Any], dict[str, Any]]:
    session_opts = {k: v for k, v in options.items() if k in SESSION_OPTIONS}
    session_opts.setdefault("registry", registry)
    return session_opts, {k: v for k, v in options.items() if k not in SESSION_OPTIONS}


def _fields(info: SessionInfo) -> dict[str, Any]:
    return dict(info.__dict__)


def _info(sid: str, entry: dict[str, Any]) -> SessionInfo:
    known = {k: v for k, v in entry.items() if k in _FIELDS}
    known["session_id"] = sid
    known.setdefault("status", "active")
    known.setdefault("workspace", {})
    known.setdefault("created", None)
    known.setdefault("updated", None)
    known.setdefault("last_seq", 0)
    return SessionInfo(**known)


__all__ = ["CATALOG_NAME", "CatalogSessionStore", "JournalSlot", "open_store", "snapshot_journal_name"]
