"""Snapshot files: a reducer's state saved atomically, used only while it provably matches the log.

The journal is the only source of truth; a snapshot is a disposable cache that makes resuming
cost the tail of the log instead of its length (seed 004, 14.3.5; seed 000, section 10). A file
holds, as one canonical JSON object:

    sessionId        the envelope sessionId of the record at lastSeq
    lastSeq          the last seq folded into the state
    lastDigest       XXH64 of the stored payload of the record at lastSeq
    reducer          the reducer's name
    reducerVersion   the version of its folding rules
    registry         the event-type registry's fingerprint (Registry.fingerprint)
    state            reducer.dump(state)

between a first line ``journal-snapshot 1`` and a last line ``xxh64 <16 hex digits>``, the
checksum of every byte before it. It is written to ``<name>.tmp``, fsync'd, renamed over
``<name>`` and the directory fsync'd, all through the file layer, so a crash leaves the old
snapshot or the new one, never a mix, and the crash harness sees every step.

A snapshot may also live in a ``SnapshotSlot`` instead of a file (the session store on a server
keeps it as a record of a journal of its store: journal/session/catalog_store.py): the same
bytes, replaced atomically by the slot.

``resume`` uses the snapshot only if all of these hold, and otherwise replays from seq 1 and
says why in ``rebuild_reason``: the file is readable and its checksum matches; the reducer name
and version are the caller's, and so is the registry's fingerprint (a file without one was saved
before snapshots recorded it: it is taken as folded with the built-in types); the journal
still holds lastSeq and the record there has the digest the snapshot was made after; the state
loads; and every event after lastSeq belongs to the same session (a fork's child starts a new
session after the shared prefix, so a parent's snapshot is never taken for the child's state,
nor the other way round).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import xxhash

from journal.api import Journal, JournalError
from journal.fs import FileSystem, OsFileSystem, follow_link, pread_upto
from journal.fs import write_atomic as fs_write_atomic
from journal.session.envelope import Event, decode
from journal.session.errors import SessionError
from journal.session.reducer import Reducer
from journal.session.registry import EventType, Registry, builtin_fingerprint
from journal.session.replay import Replayed, fold

S = TypeVar("S")

MAGIC = b"journal-snapshot 1\n"
CHECKSUM_PREFIX = b"xxh64 "
SNAPSHOT_SUFFIX = ".snap"
TMP_SUFFIX = ".tmp"
SNAPSHOT_BYTES_MAX = 1 << 31  # a state larger than this is not a cache worth keeping


class SnapshotDamagedError(SessionError):
    """A snapshot file that cannot be trusted; ``resume`` falls back to a full replay on it."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"snapshot {path!r} cannot be used: {why}; replay from the journal and save a new one")
        self.path = path
        self.why = why


@dataclass(frozen=True)
class SavedSnapshot:
    session_id: str | None
    last_seq: int
    last_digest: int
    reducer: str
    reducer_version: int
    state: dict[str, Any]
    registry: str | None = None  # Registry.fingerprint of the saver's registry; None: not recorded


@dataclass
class Resumed(Generic[S]):
    """A replay that may have started from a snapshot."""

    replayed: Replayed[S]
    snapshot_seq: int  # 0 when the state was rebuilt from seq 1

    @property
    def state(self) -> S:
        return self.replayed.state

    @property
    def from_snapshot(self) -> bool:
        return self.replayed.from_snapshot

    @property
    def rebuild_reason(self) -> str | None:
        return self.replayed.rebuild_reason


def snapshot_path(directory: str | os.PathLike[str], reducer: Reducer[Any]) -> str:
    """The conventional file name of ``reducer``'s snapshot in ``directory``."""
    return os.path.join(os.fspath(directory), reducer.name + SNAPSHOT_SUFFIX)


def encode(saved: SavedSnapshot) -> bytes:
    body = json.dumps(
        {
            "sessionId": saved.session_id,
            "lastSeq": saved.last_seq,
            "lastDigest": saved.last_digest,
            "reducer": saved.reducer,
            "reducerVersion": saved.reducer_version,
            "registry": saved.registry,
            "state": saved.state,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")
    head = MAGIC + body + b"\n"
    return head + CHECKSUM_PREFIX + b"%016x\n" % xxhash.xxh64_intdigest(head)


def decode_file(data: bytes, path: str = "<bytes>") -> SavedSnapshot:
    """Parse and verify a snapshot file's bytes; SnapshotDamagedError says what is wrong."""
    if not data.startswith(MAGIC):
        raise SnapshotDamagedError(path, "not a snapshot file (bad first line)")
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    trailer = data[cut:]
    if not trailer.startswith(CHECKSUM_PREFIX) or not trailer.endswith(b"\n") or len(trailer) != 23:
        raise SnapshotDamagedError(path, "the checksum line is missing (a torn or truncated file)")
    try:
        want = int(trailer[len(CHECKSUM_PREFIX) : -1], 16)
    except ValueError:
        raise SnapshotDamagedError(path, "the checksum line is not hex") from None
    if xxhash.xxh64_intdigest(data[:cut]) != want:
        raise SnapshotDamagedError(path, "checksum mismatch")
    try:
        d = json.loads(data[len(MAGIC) : cut - 1])
        saved = SavedSnapshot(
            d["sessionId"], d["lastSeq"], d["lastDigest"], d["reducer"], d["reducerVersion"], d["state"],
            d.get("registry"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotDamagedError(path, f"body does not parse: {exc}") from None
    if not isinstance(saved.last_seq, int) or saved.last_seq < 0 or not isinstance(saved.state, dict) \
            or not _is_fingerprint(saved.registry):
        raise SnapshotDamagedError(path, "fields out of range")
    return saved


def _is_fingerprint(value: object) -> bool:
    """None (a file saved before snapshots recorded it) or Registry.fingerprint's 16 hex digits."""
    if value is None:
        return True
    return isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value)


@runtime_checkable
class SnapshotSlot(Protocol):
    """Where a snapshot lives when it is not a file: a journal of a store on a server (the
    session store's ``snapshot_slot``). ``store`` replaces the slot's snapshot durably and
    atomically (the old one or the new one after a crash); ``load`` raises FileNotFoundError
    when there is none."""

    @property
    def where(self) -> str: ...

    def load(self) -> bytes: ...

    def store(self, data: bytes) -> None: ...


SnapshotSource = str | os.PathLike[str] | SnapshotSlot


def where_of(source: SnapshotSource) -> str:
    return source.where if isinstance(source, SnapshotSlot) else os.fspath(source)


def read(path: SnapshotSource, fs: FileSystem | None = None) -> SavedSnapshot:
    """Read and verify a snapshot (a file, or a slot). FileNotFoundError if there is none."""
    if isinstance(path, SnapshotSlot):
        data = path.load()
        if len(data) > SNAPSHOT_BYTES_MAX:
            raise SnapshotDamagedError(path.where, f"{len(data)} bytes is over the {SNAPSHOT_BYTES_MAX} byte limit")
        return decode_file(data, path.where)
    fs = fs or OsFileSystem()
    p = os.fspath(path)
    f = fs.open_read(follow_link(fs, p))  # a file the caller names: a link to it is followed
    try:
        size = f.size()
        if size > SNAPSHOT_BYTES_MAX:
            raise SnapshotDamagedError(p, f"{size} bytes is over the {SNAPSHOT_BYTES_MAX} byte limit")
        data = pread_upto(f, size, 0)  # a short read fails the file's checksum: damaged
    finally:
        f.close()
    return decode_file(data, p)


def write_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Temp file, fsync, rename, directory fsync (making the directory first if needed).

    The directory's own entry is fsync'd in its parent every time, not only when this call made
    it: a save whose fsync failed right after the mkdir left a directory that exists and may not
    survive a power loss, and the retry must not take its existence for durability.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not fs.exists(directory):
        fs.mkdir(directory)
    fs.fsync_dir(os.path.dirname(directory))
    fs_write_atomic(fs, path, data, path + TMP_SUFFIX)


def save(
    j: Journal,
    replayed: Replayed[S],
    reducer: Reducer[S],
    registry: Registry,
    path: SnapshotSource,
    fs: FileSystem | None = None,
) -> SavedSnapshot:
    """Save ``replayed.state`` (folded by ``reducer`` with ``registry`` up to ``replayed.last_seq`` of ``j``)."""
    seq = replayed.last_seq
    session_id: str | None = None
    digest = 0
    if seq > 0:
        rec = j.get(seq)
        if rec is None:
            raise ValueError(f"the journal holds no record at seq {seq}; replay it again")
        digest = xxhash.xxh64_intdigest(rec.payload)
        ev = rec.event if not rec.is_bytes else None
        session_id = ev.get("sessionId") if isinstance(ev, dict) else None
    saved = SavedSnapshot(session_id, seq, digest, reducer.name, reducer.version, reducer.dump(replayed.state),
                          registry.fingerprint())
    if isinstance(path, SnapshotSlot):
        path.store(encode(saved))
    else:
        write_atomic(fs or OsFileSystem(), os.fspath(path), encode(saved))
    return saved


class _Mismatch(Exception):
    """Found while tailing: the snapshot does not belong to this log after all."""

    def __init__(self, why: str) -> None:
        self.why = why


def _items(
    j: Journal, registry: Registry, after_seq: int, upto_seq: int | None, session_id: str | None, digest: int | None
) -> Iterator[tuple[int, tuple[Event, EventType] | None]]:
    """Decoded records after ``after_seq``; with ``digest``, the record at ``after_seq`` is read
    first (one pass over the live segment, not two) and must have that digest."""
    start = after_seq - 1 if digest is not None and after_seq > 0 else after_seq
    checked = False
    for rec in j.read(after_seq=start):
        if rec.seq == after_seq and start < after_seq:
            if xxhash.xxh64_intdigest(rec.payload) != digest:
                raise _Mismatch(f"the record at seq {after_seq} is not the one the snapshot was made after")
            checked = True
            continue
        if start < after_seq and rec.seq < after_seq:
            continue
        if start < after_seq and rec.seq > after_seq and not checked:
            raise _Mismatch(f"the journal no longer holds seq {after_seq}")
        checked = True
        if upto_seq is not None and rec.seq > upto_seq:
            return
        item = decode(rec, registry)
        if session_id is not None and item is not None and item[0].session_id != session_id:
            raise _Mismatch(
                f"seq {rec.seq} belongs to session {item[0].session_id}, not {session_id}: "
                "the journal was forked after the snapshot"
            )
        yield rec.seq, item


def check(
    j: Journal,
    saved: SavedSnapshot,
    reducer: Reducer[Any],
    registry: Registry,
    upto_seq: int | None = None,
    digest: bool = True,
    unrecorded_as_builtin: bool = True,
) -> str | None:
    """None when ``saved`` can be trusted for ``j``, ``reducer`` and ``registry``; otherwise why not.

    ``digest=False`` leaves the record digest to the caller (``resume`` checks it while tailing).
    A snapshot saved before snapshots recorded their registry is taken as folded with the
    built-in types (``unrecorded_as_builtin``): used by a reader with the built-in registry, as
    it was before, and replayed past by any other. Nothing saves a fork's snapshot again, so
    refusing those would make every later fork of an older child replay its whole chain. The
    session snapshot passes False: an older one may hold a wrong ``skipped`` count, and the
    session's writer saves a new one.
    """
    if saved.reducer != reducer.name or saved.reducer_version != reducer.version:
        return (
            f"snapshot made by reducer {saved.reducer} v{saved.reducer_version}, "
            f"replaying with {reducer.name} v{reducer.version}"
        )
    if saved.registry is None:
        if not unrecorded_as_builtin or registry.fingerprint() != builtin_fingerprint():
            return "snapshot saved before snapshots recorded the event-type registry they were folded with"
    elif saved.registry != registry.fingerprint():
        return (
            f"snapshot folded with another event-type registry (fingerprint {saved.registry}, this one's "
            f"{registry.fingerprint()}): a type was registered, or defined otherwise, since"
        )
    if upto_seq is not None and saved.last_seq > upto_seq:
        return f"snapshot is at seq {saved.last_seq}, past the wanted seq {upto_seq}"
    if saved.last_seq > j.last_seq:
        return f"the journal ends at seq {j.last_seq} and no longer holds seq {saved.last_seq}"
    if saved.last_seq == 0 or not digest:
        return None
    rec = j.get(saved.last_seq)
    if rec is None:
        return f"the journal no longer holds seq {saved.last_seq}"
    if xxhash.xxh64_intdigest(rec.payload) != saved.last_digest:
        return f"the record at seq {saved.last_seq} is not the one the snapshot was made after"
    return None


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large snapshot is decoded and loaded.

    Decoding allocates millions of acyclic objects, and each allocation burst triggers full
    collections that find nothing: a quarter of a long session's resume time. Reference
    counting still frees everything as usual; the collector runs again afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def resume(
    j: Journal,
    registry: Registry,
    reducer: Reducer[S],
    path: SnapshotSource | None,
    fs: FileSystem | None = None,
    upto_seq: int | None = None,
) -> Resumed[S]:
    """Fold ``j`` with ``reducer``: from the snapshot at ``path`` if it matches, else from seq 1.

    ``upto_seq`` stops the fold there (the state at a past seq, as a fork check needs).
    """
    reason: str | None = None
    saved: SavedSnapshot | None = None
    if path is None:
        reason = "no snapshot given"
    else:
        try:
            with no_cyclic_gc():
                saved = read(path, fs)
        except FileNotFoundError:
            reason = f"no snapshot at {where_of(path)!r}"
        except SnapshotDamagedError as exc:
            reason = exc.why
        except OSError as exc:
            reason = f"snapshot unreadable: {exc}"
    if saved is not None:
        reason = check(j, saved, reducer, registry, upto_seq, digest=False)
        if reason is None:
            try:
                with no_cyclic_gc():
                    state = reducer.load(saved.state)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                reason = f"snapshot state does not load: {exc!r}"
            else:
                tail = _items(j, registry, saved.last_seq, upto_seq, saved.session_id, saved.last_digest)
                try:
                    out = fold(tail, reducer, state, saved.last_seq)
                except _Mismatch as exc:
                    reason = exc.why
                else:
                    out.from_snapshot = True
                    return Resumed(out, saved.last_seq)
    out = fold(_items(j, registry, 0, upto_seq, None, None), reducer, reducer.initial())
    out.rebuild_reason = reason
    return Resumed(out, 0)


def take(
    j: Journal, registry: Registry, reducer: Reducer[S], path: SnapshotSource, fs: FileSystem | None = None
) -> Resumed[S]:
    """Bring the snapshot at ``path`` up to the end of ``j`` (from itself when it matches)."""
    got = resume(j, registry, reducer, path, fs)
    save(j, got.replayed, reducer, registry, path, fs)
    return got


# --- the session's own snapshot: state and open structures, with the history apart -----------
#
# Session.open resumes from this file (``<journal dir>/session.snap`` by default): the state the
# built-in reducer folded, the open structures repair needs (dangling.Dangling) and the counts,
# at lastSeq. Its layout:
#
#     journal-session-snapshot 2
#     one line of canonical JSON: sessionId, lastSeq, lastDigest, reducer, reducerVersion,
#         registry (Registry.fingerprint; a file without it is not used), skipped, dangling
#         (Dangling.dump), core (SessionState.dump_split: all but the history),
#         parts: [[length, xxh64], ...] of the history parts that follow
#     xxh64 <16 hex digits>       the checksum of the two lines above
#     the history parts, back to back: (keys, rows) pairs of canonical JSON
#
# An open reads and verifies the head alone (and that the file is as long as its parts say): its
# cost does not grow with the history. A part is read and checked against its digest on first
# use; one that fails makes the state replay from seq 1 then. The head is used under the same
# conditions as a reducer's snapshot (``check``, then the digest of the record at lastSeq and the
# tail's session ids while reading): the file is only a cache, and whatever is wrong with it, the
# session is replayed from seq 1.

SESSION_MAGIC = b"journal-session-snapshot 2\n"
HEAD_READ_BYTES = 64 * 1024  # the first read of an open; a longer head is read on
PARTS_MAX = 1 << 20  # more parts than this is not a file this code wrote


@dataclass(frozen=True)
class SavedSession:
    session_id: str | None
    last_seq: int
    last_digest: int
    reducer: str
    reducer_version: int
    skipped: int
    dangling: dict[str, Any]
    core: dict[str, Any]
    registry: str | None = None  # Registry.fingerprint of the saver's registry; None: not recorded

    def as_saved(self) -> SavedSnapshot:
        """The fields ``check`` looks at."""
        return SavedSnapshot(self.session_id, self.last_seq, self.last_digest, self.reducer, self.reducer_version,
                             self.core, self.registry)


class HistoryPartError(SnapshotDamagedError, ValueError):
    """A history part that does not match its digest (or is read after its file was closed): the
    state that needed it replays the log instead (SessionState's rebuild)."""


class Parts:
    """The history parts of a session snapshot, read on demand from the file opened at resume
    (kept open until the history is loaded, so a newer snapshot renamed over the name meanwhile
    does not change what is read), each checked against its digest."""

    def __init__(self, path: str, spans: list[tuple[int, int, int]], pread: Callable[[int, int], bytes],
                 close: Callable[[], None]) -> None:
        self._path = path
        self._spans = spans  # (offset, length, xxh64)
        self._pread: Callable[[int, int], bytes] | None = pread
        # A state dropped before its history was used closes the file with it (the file layer's
        # File has no finalizer of its own: its descriptor would stay open to the end).
        self._close = weakref.finalize(self, close)

    def count(self) -> int:
        return len(self._spans)

    def read(self, index: int) -> bytes:
        if self._pread is None:
            raise HistoryPartError(self._path, "its file was closed before its history was read")
        offset, length, digest = self._spans[index]
        data = self._pread(length, offset)
        if len(data) != length or xxhash.xxh64_intdigest(data) != digest:
            raise HistoryPartError(self._path, f"history part {index} does not match its digest")
        return data

    def close(self) -> None:
        if self._pread is not None:
            self._pread = None
            self._close()


def encode_session(saved: SavedSession, parts: list[bytes]) -> bytes:
    head = json.dumps(
        {"sessionId": saved.session_id, "lastSeq": saved.last_seq, "lastDigest": saved.last_digest,
         "reducer": saved.reducer, "reducerVersion": saved.reducer_version, "skipped": saved.skipped,
         "dangling": saved.dangling, "core": saved.core, "registry": saved.registry,
         "parts": [[len(p), xxhash.xxh64_intdigest(p)] for p in parts]},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    ).encode("utf-8")
    top = SESSION_MAGIC + head + b"\n"
    return b"".join([top, CHECKSUM_PREFIX, b"%016x\n" % xxhash.xxh64_intdigest(top), *parts])


def _decode_head(data: bytes, size: int, path: str) -> tuple[SavedSession, list[tuple[int, int, int]]]:
    """The head of a session snapshot of ``size`` bytes, from its first bytes ``data`` (which
    hold its checksum line), and the spans of its parts."""
    end = data.find(b"\n", len(SESSION_MAGIC))
    trailer = data[end + 1 : end + 24]
    if end < 0 or not trailer.startswith(CHECKSUM_PREFIX) or len(trailer) != 23 or not trailer.endswith(b"\n"):
        raise SnapshotDamagedError(path, "the checksum line is missing (a torn or truncated file)")
    try:
        want = int(trailer[len(CHECKSUM_PREFIX) : -1], 16)
    except ValueError:
        raise SnapshotDamagedError(path, "the checksum line is not hex") from None
    if xxhash.xxh64_intdigest(data[: end + 1]) != want:
        raise SnapshotDamagedError(path, "checksum mismatch")
    try:
        d = json.loads(data[len(SESSION_MAGIC) : end])
        saved = SavedSession(d["sessionId"], d["lastSeq"], d["lastDigest"], d["reducer"], d["reducerVersion"],
                             d["skipped"], d["dangling"], d["core"], d.get("registry"))
        listed = d["parts"]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotDamagedError(path, f"body does not parse: {exc}") from None
    ints = (saved.last_seq, saved.last_digest, saved.skipped, saved.reducer_version)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) \
            or not isinstance(saved.dangling, dict) or not isinstance(saved.core, dict) \
            or not (saved.session_id is None or isinstance(saved.session_id, str)) \
            or not _is_fingerprint(saved.registry) \
            or not isinstance(listed, list) or len(listed) > PARTS_MAX:
        raise SnapshotDamagedError(path, "fields out of range")
    spans: list[tuple[int, int, int]] = []
    offset = end + 24
    for item in listed:
        if not (isinstance(item, list) and len(item) == 2 and all(type(v) is int and v >= 0 for v in item)):
            raise SnapshotDamagedError(path, f"a history part is listed as {item!r}")
        spans.append((offset, item[0], item[1]))
        offset += item[0]
    if offset != size:
        raise SnapshotDamagedError(path, f"it is {size} bytes, its parts say {offset} (a torn or truncated file)")
    return saved, spans


def read_session(path: SnapshotSource, fs: FileSystem | None = None) -> tuple[SavedSession, Parts]:
    """Read and verify a session snapshot's head; its history parts are read on demand (close
    the Parts when done). FileNotFoundError if there is none; a symbolic link at a file's name
    is refused (SnapshotDamagedError): the session makes that name, so a link there was planted."""
    if isinstance(path, SnapshotSlot):
        data = path.load()
        if len(data) > SNAPSHOT_BYTES_MAX:
            raise SnapshotDamagedError(path.where, f"{len(data)} bytes is over the {SNAPSHOT_BYTES_MAX} byte limit")
        saved, spans = _decode_head(data, len(data), path.where)
        return saved, Parts(path.where, spans, lambda n, off: data[off : off + n], lambda: None)
    fs = fs or OsFileSystem()
    p = os.fspath(path)
    if fs.is_link(p):
        raise SnapshotDamagedError(p, "it is a symbolic link, which a session snapshot never is")
    f = fs.open_read(p)
    try:
        size = f.size()
        if size > SNAPSHOT_BYTES_MAX:
            raise SnapshotDamagedError(p, f"{size} bytes is over the {SNAPSHOT_BYTES_MAX} byte limit")
        want = min(size, HEAD_READ_BYTES)
        data = pread_upto(f, want, 0)
        end = data.find(b"\n", len(SESSION_MAGIC))
        while (end < 0 or len(data) < end + 24) and len(data) == want < size:
            # A head longer than the first read: read on, doubling, until its checksum line is
            # in hand, never the whole file at once (its history parts can be most of 2 GiB).
            want = min(size, 2 * want if end < 0 else end + 24)
            data = pread_upto(f, want, 0)
            end = data.find(b"\n", len(SESSION_MAGIC))
        saved, spans = _decode_head(data, size, p)
    except BaseException:
        f.close()
        raise
    return saved, Parts(p, spans, lambda n, off: pread_upto(f, n, off), f.close)


def tail_items(
    j: Journal, registry: Registry, saved: SavedSnapshot
) -> Iterator[tuple[int, tuple[Event, EventType] | None]]:
    """The decoded records after ``saved.last_seq``, checking on the way that the record there
    has the snapshot's digest and that every later event is of the snapshot's session
    (raises SnapshotMismatchError otherwise)."""
    seq = saved.last_seq
    if seq > 0:
        # A point read, not a read from seq - 1: positioning a read in a long live segment costs
        # more than the rest of an open (bench/bench_session_open.py).
        try:
            rec = j.get(seq)
        except JournalError as exc:
            raise SnapshotMismatchError(f"the journal no longer holds seq {seq} ({exc})") from None
        if rec is None:
            raise SnapshotMismatchError(f"the journal no longer holds seq {seq}")
        if xxhash.xxh64_intdigest(rec.payload) != saved.last_digest:
            raise SnapshotMismatchError(f"the record at seq {seq} is not the one the snapshot was made after")
    if j.last_seq == seq:
        return  # nothing after it
    try:
        yield from _items(j, registry, seq, None, saved.session_id, None)
    except _Mismatch as exc:
        raise SnapshotMismatchError(exc.why) from None


class SnapshotTooLargeError(SessionError, ValueError):
    """A session snapshot larger than SNAPSHOT_BYTES_MAX, which an open would refuse: not saved."""

    def __init__(self, where: str, size: int) -> None:
        super().__init__(f"the session snapshot for {where!r} would be {size} bytes, over the "
                         f"{SNAPSHOT_BYTES_MAX} byte limit an open reads; not saved (opens replay from the last "
                         "one saved)")
        self.size = size


class SnapshotMismatchError(SessionError):
    """Found while reading the tail: the snapshot does not belong to this log (a fallback)."""

    def __init__(self, why: str) -> None:
        super().__init__(f"the snapshot does not match the journal: {why}")
        self.why = why


def save_session(fs: FileSystem | None, path: SnapshotSource, saved: SavedSession, parts: list[bytes]) -> None:
    """Replace the session snapshot atomically (the old one or the new one after a crash)."""
    data = encode_session(saved, parts)
    if len(data) > SNAPSHOT_BYTES_MAX:
        # read_session refuses such a file: saving it would replace a usable snapshot by one
        # every later open replays past (and write it again at every save).
        raise SnapshotTooLargeError(where_of(path), len(data))
    if isinstance(path, SnapshotSlot):
        path.store(data)
        return
    fs = fs or OsFileSystem()
    p = os.fspath(path)
    if fs.is_dir(os.path.dirname(os.path.abspath(p))):
        # The journal's own directory (or one made before): durable already, so temp file,
        # fsync, rename and a fsync of this directory are all a save needs.
        fs_write_atomic(fs, p, data, p + TMP_SUFFIX)
    else:
        write_atomic(fs, p, data)
