"""Commit groups: the journals of one store share an fdatasync per group commit.

``g = journal.open_group(root)``, then ``journal.open(path, group=g)`` for journals in
directories under ``root`` (a session store's sessions). A durable append of such a journal
writes its frames into the journal's own live segment as always, then a copy of those bytes into
the group's log (journal/engine/group_log.py has the format); the log, not the segment, is
fdatasync'd, and one fdatasync covers every journal whose append met in that group commit
(RocksDB's rule again: no delay added, a bounded batch). A journal's segment is fdatasync'd at
seal, at close, and when the group retires a log file, so a closed journal's directory holds
every record it acknowledged, with no group needed to read it.

On disk, under ``root``:

    .journal-group/RECOVER.lock      taken by whoever recovers or starts a group (below)
    .journal-group/g-<pid>-<hex>/    one group, open in one process (its LOCK held for its life)
        LOCK
        log-<generation>.jgl         its logs, in generation order
    <journal>/GROUP                  in each journal that joined a group: how many levels up its
                                     root is ("journal-group 1 up=N"); written before its first
                                     group commit, and never removed

Life of a log: the group appends entries to its current log file; once the file holds
LOG_ROTATE_BYTES, a leader makes the next one (durable before use), fdatasyncs every segment the
old one wrote to, and only then removes it. A clean close does the same with the last file and
removes the group's directory.

Recovery: a group whose process died leaves its directory, its LOCK free. Before a journal with
a GROUP file is opened (for writing or reading), and when a group opens, every such dead group
under the root is recovered under RECOVER.lock: each entry of its logs, in order, is written back
into the segment it names where the bytes there differ (a power loss dropped them), those
segments are fdatasync'd, and only then are the logs removed. An entry whose segment is gone,
sealed (a seal is synced), or belongs to another journal (another journal id) is skipped: it is
already durable or was deleted on purpose. A torn tail of a log (a write a crash cut short, never
acknowledged) is kept aside in ``.journal-group/quarantine``; damage to synced bytes of a log is
GroupLogCorruptionError and nothing is changed. Writing the entries back is idempotent: a crash
during recovery is recovered by the next one.

Failures: a log write that fails is cut back (every append in that group commit NotCommitted,
each journal truncating its own frames); a failed fdatasync of the log, a failed cut, or a failed
fdatasync of a segment while a log is retired fail-stops the group and every journal in it (their
appends in flight AckLost): the kernel may have dropped pages, and the logs stay for recovery.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from journal.engine import format as fmt
from journal.engine import group_log as glog
from journal.engine.recovery import quarantine
from journal.engine.segment import read_header, read_seal
from journal.errors import (
    CorruptionError,
    GroupError,
    GroupLogCorruptionError,
    InvalidArgumentError,
    InvariantError,
    JournalError,
    JournalIOError,
    UnexpectedFileError,
    present,
)
from journal.fs import (
    BatchItem,
    File,
    FileSystem,
    Lock,
    OsFileSystem,
    SyncError,
    ensure_dir,
    pread_upto,
    read_file,
    take_lock,
    write_all,
    write_all_synced,
    write_atomic,
    write_batch,
)

if TYPE_CHECKING:
    from journal.engine.core import Journal

GROUP_DIR = ".journal-group"
RECOVER_LOCK = "RECOVER.lock"
INSTANCE_LOCK = "LOCK"
INSTANCE_PREFIX = "g-"
QUARANTINE_DIR = "quarantine"
MARKER_FILE = "GROUP"
MARKER_BYTES_MAX = 64
MARKER_LEVELS_MAX = 64  # a journal this many directories below its root at most
RECOVER_LOCK_TIMEOUT_S = 60.0  # a recovery writes back at most a few logs: minutes would be damage
COMMIT_BYTES_MAX = 8 * 1024 * 1024  # one log write carries at most this much (one entry may be larger)
COMMIT_ENTRIES_MAX = 1024  # and at most this many entries
RECOVERY_OPEN_FILES_MAX = 16  # segments a recovery holds open at once
_MARKER = re.compile(rb"journal-group 1 up=([0-9]{1,2})\n")

# (status, reason, errno), as writer.Results: "ok", "rolled_back" (nothing of it is in the log:
# the journal cuts its frames back), "not_written" (the group had stopped before: nothing was
# logged) or "failed" (fail-stop: unknown what is durable).
Results = tuple[str, str, "int | None"]
OK: Results = ("ok", "", None)


@dataclass
class RecoveryNote:
    """What a recovery of dead groups did (each group's directory, entries, segments written)."""

    groups: list[str] = field(default_factory=list)
    entries_applied: int = 0
    entries_skipped: int = 0
    segments_written: int = 0
    quarantined: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


class Member:
    """A journal in the group, as its entries name it: its directory (absolute, for retiring a
    log), its path relative to the root (checked once, at join, and kept encoded)."""

    __slots__ = ("journal_dir", "path_raw", "rel")

    def __init__(self, journal_dir: str, rel: str) -> None:
        self.journal_dir = journal_dir
        self.rel = rel
        self.path_raw = glog.check_path(rel).encode("utf-8", "surrogateescape")


class _Waiter:
    """One commit() waiting for its group commit: its entry's fields (the leader numbers and
    encodes it), whether it asks for the fdatasync, and the lock a leader releases to wake it."""

    __slots__ = (
        "base_seq", "data", "file", "first_last", "journal_id", "lead", "member", "offset", "result", "sync", "wake"
    )

    def __init__(
        self, member: Member, file: File, journal_id: bytes, base_seq: int, offset: int,
        data: bytes | memoryview, first_last: int, sync: bool,
    ) -> None:
        self.member = member
        self.file = file  # the journal's live segment, which the leader writes ``data`` into
        self.first_last = first_last
        self.journal_id = journal_id
        self.base_seq = base_seq
        self.offset = offset
        self.data = data  # b"": no entry (a sync of what was logged before)
        self.sync = sync
        self.lead = False
        self.result: Results = OK
        self.wake: threading.Lock | None = None  # made (held) only when it waits for a leader


class CommitGroup:
    """One process's commit group under a store root; see the module's doc. Thread-safe."""

    def __init__(self, root: str, fs: FileSystem, instance: str, lock: Lock) -> None:
        self.root = root
        self._fs = fs
        self._dir = instance
        self._lock: Lock | None = lock
        self.recovery = RecoveryNote()
        self._mu = threading.Lock()
        self._pending: list[_Waiter] = []
        self._leading = False
        self._failed: str | None = None
        self._closed = False
        self._members: dict[int, str] = {}  # id(journal) -> its directory, of journals open in the group
        self._generation = 0
        self._log: File | None = None
        self._salt = 0
        self._end = 0  # where the next entry goes in the current log
        # Where the log's last returned fdatasync left it (nothing written since if it equals
        # _end): the next write's first entry is then marked ENTRY_AFTER_SYNC.
        self._synced_end = 0
        self._number = 0  # the last entry's number in the current log
        self._touched: set[tuple[str, int]] = set()  # (journal dir, segment base seq) the current log wrote to

    # --- opening and closing -------------------------------------------------------------

    @classmethod
    def open(cls, root: str | os.PathLike[str], fs: FileSystem | None = None) -> CommitGroup:
        """Recover the dead groups under ``root`` and start this process's group there."""
        fs = fs or OsFileSystem()
        root = os.path.abspath(os.fspath(root))
        if not fs.is_dir(root):
            raise InvalidArgumentError(f"a commit group's root must be an existing directory: {root}")
        try:
            gdir = os.path.join(root, GROUP_DIR)
            if ensure_dir(fs, gdir):
                fs.fsync_dir(root)
            recover_lock = _take_recover_lock(fs, gdir)
            try:
                note = _recover_dead(fs, root)
                instance = os.path.join(gdir, f"{INSTANCE_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
                fs.mkdir(instance)
                fs.fsync_dir(gdir)
                lock = fs.try_lock(os.path.join(instance, INSTANCE_LOCK))
                if lock is None:  # a name this process just made: nobody else could hold it
                    raise GroupError(f"could not lock the new commit group {instance}")
                fs.fsync_dir(instance)
            finally:
                recover_lock.release()
            group = cls(root, fs, instance, lock)
            group.recovery = note
            try:
                group._new_log(1)
            except BaseException:
                group._release()
                raise
        except OSError as exc:
            if isinstance(exc, JournalError):
                raise
            raise JournalIOError(root, exc, doing="opening the commit group of") from exc
        return group

    def __enter__(self) -> CommitGroup:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def failed(self) -> str | None:
        """Why the group fail-stopped, or None."""
        return self._failed

    def close(self) -> None:
        """Retire the last log (sync the segments it wrote to, remove it) and release the group.
        Its journals must be closed first. Idempotent. A fail-stopped group keeps its logs for
        the next open's recovery."""
        with self._mu:
            if self._closed:
                return
            if self._members:
                raise GroupError(
                    f"{len(self._members)} journal(s) of the commit group are still open: close them first"
                )
            self._closed = True
            # Every journal closed, none is in commit(): a leader is done before its journal's
            # close returns (Journal.close waits for its own leader).
            leading = self._leading
        if leading:
            raise InvariantError("a commit group closed with a batch in flight")
        try:
            if self._failed is None and self._log is not None:
                try:
                    self._retire(self._generation, self._log, self._touched)
                    self._log = None
                    # Its logs are gone: a reader's open that finds the LOCK free from here on
                    # finds nothing to recover, and may remove the directory first (both sides
                    # take a name already removed as removed).
                    _remove_instance(self._fs, self._dir)
                except OSError as exc:
                    self._fail(f"retiring the group's last log at close failed: {exc}")
                    raise JournalIOError(self.root, exc, doing="closing the commit group of") from exc
        finally:
            self._release()

    def _release(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # --- journals in the group ---------------------------------------------------------------

    def join(self, journal: Journal) -> Member:
        """Admit an open writable journal: its GROUP file is made durable here (before any entry
        names it) and its directory relative to the root is returned (the entries' path)."""
        path = os.path.abspath(journal.path)
        try:
            rel = glog.relative_path(self.root, path)
        except ValueError as exc:
            raise InvalidArgumentError(f"{exc}: a journal joins the group of a directory above it") from None
        _check_no_links(self._fs, self.root, rel)
        levels = len(rel.split("/"))
        if levels > MARKER_LEVELS_MAX:
            raise InvalidArgumentError(
                f"{path} is {levels} directories below the group's root; at most {MARKER_LEVELS_MAX}"
            )
        marker = f"journal-group 1 up={levels}\n".encode()
        mpath = os.path.join(path, MARKER_FILE)
        if _read_marker(self._fs, path) != levels:
            write_atomic(self._fs, mpath, marker)
        with self._mu:
            if self._closed or self._failed is not None:
                raise GroupError(f"the commit group is {'closed' if self._closed else 'fail-stopped'}: "
                                 f"{self._failed or 'open a new one'}")
            self._members[id(journal)] = path
        return Member(path, rel)

    def leave(self, journal: Journal) -> None:
        with self._mu:
            self._members.pop(id(journal), None)

    def segment_failed(self, reason: str) -> None:
        """A journal of the group could not fdatasync its segment: what the log holds for it must
        stay until recovery writes it back, so the group fail-stops (the logs are kept)."""
        self._fail(reason)

    # --- the commit path ---------------------------------------------------------------------

    def commit(
        self, member: Member, file: File, journal_id: bytes, base_seq: int, offset: int,
        data: bytes | memoryview, first_last: int, sync: bool,
    ) -> Results:
        """Write ``data`` (frames) at ``offset`` of ``file``, the live segment ``base_seq`` of
        ``member``, the first ``first_last`` bytes last (journal/fs.py's write_all), and log a
        copy; if ``sync``, return once the log holding it is fdatasync'd. The leader of the group
        commit makes every journal's write and the log's in one call (one release of the GIL for
        the batch). With no ``data``, only the fdatasync (the journal's sync() of what it logged
        at flush level). "seg_failed": this journal's write failed (nothing of it is in the log);
        "rolled_back": the log's write failed (cut back): either way the journal cuts its frames
        back; "not_written": nothing was written (the group had stopped)."""
        w = _Waiter(member, file, journal_id, base_seq, offset, data, first_last, sync)
        mu = self._mu
        with mu:
            if self._failed is not None or self._closed:
                return ("not_written", self._stopped_reason(), None)
            if self._leading:
                wake = w.wake = threading.Lock()
                wake.acquire()
                self._pending.append(w)
            else:
                # Nobody leads, so nobody waits: this one is a batch of its own at once, with no
                # lock to make or to wake (the one writer of a quiet group pays no more).
                self._leading = True
                wake = None
        if wake is None:
            raised = self._write_safely([w])
            self._end_lead()
            if raised is not None and not isinstance(raised, Exception):
                raise raised
            return w.result
        wake.acquire()  # released by a leader: with the result, or to lead
        if not w.lead:
            return w.result
        return self._lead(w)

    def _end_lead(self) -> None:
        """The leader is done: the first waiter leads next, or nobody does."""
        with self._mu:
            if not self._pending:
                self._leading = False
                return
            nxt = self._pending[0]
            nxt.lead = True
        present(nxt.wake, "a waiter holds its lock").release()

    def _stopped_reason(self) -> str:
        if self._failed is not None:
            return f"the commit group fail-stopped: {self._failed}"
        return "the commit group is closed"

    def _lead(self, me: _Waiter) -> Results:
        """Write batches from the queue until one holds ``me``, then hand the lead on."""
        interrupt: BaseException | None = None
        while True:
            with self._mu:
                pending = self._pending
                if len(pending) <= COMMIT_ENTRIES_MAX and sum(len(w.data) for w in pending) <= COMMIT_BYTES_MAX:
                    batch, self._pending = pending, []
                else:
                    batch, nbytes = [], 0
                    while pending and (not batch or (nbytes < COMMIT_BYTES_MAX and len(batch) < COMMIT_ENTRIES_MAX)):
                        w = pending.pop(0)
                        batch.append(w)
                        nbytes += len(w.data)
            raised = self._write_safely(batch)
            if raised is not None and not isinstance(raised, Exception):
                interrupt = raised  # raised once this leader's own record is answered
            mine = False
            for w in batch:
                if w is me:
                    mine = True
                else:
                    present(w.wake, "a waiter holds its lock").release()
            if mine:
                self._end_lead()
                if interrupt is not None:
                    raise interrupt  # an interrupt of the leader: its followers were answered first
                return me.result

    def _write_safely(self, batch: list[_Waiter]) -> BaseException | None:
        """_write, and if it raises (a bug, memory, an interrupt), every waiter of the batch is
        answered "failed" (what reached the files is unknown) and the group fail-stops: no
        follower is left waiting on a leader that is gone. What it raised, or None."""
        try:
            self._write(batch)
        except BaseException as exc:
            reason = f"the commit group's write failed: {exc!r}"
            self._fail(reason)
            for w in batch:
                w.result = ("failed", reason, None)
            return exc
        return None

    def _write(self, batch: list[_Waiter]) -> None:
        """The batch's frames into their segments and its entries into the log, and an fdatasync
        of the log if any of them asks: each waiter's ``result`` says what it got."""
        stopped: Results | None = None
        if self._failed is not None or self._log is None:
            stopped = ("not_written", self._stopped_reason(), None)
        elif self._end >= glog.LOG_ROTATE_BYTES:
            self._rotate()
            if self._failed is not None or self._log is None:
                stopped = ("not_written", self._stopped_reason(), None)
        if stopped is not None:
            for w in batch:
                w.result = stopped
            return
        log = present(self._log, "a group that has not stopped has a log")
        sync = False
        writes: list[_Waiter] = []
        for w in batch:
            sync = sync or w.sync
            if w.data:
                writes.append(w)
        if not writes:
            result = self._sync_only(log) if sync else OK
            for w in batch:
                w.result = result
            return
        items: list[BatchItem] = [(w.file, w.data, w.offset, w.first_last) for w in writes]
        data = self._entries(writes)
        start = self._end
        if start + len(data) > glog.LOG_FILE_BYTES_MAX:
            # Nothing is written: every journal of the batch gives its records back.
            full: Results = ("not_written", f"the commit group's log is full ({start} bytes), not retired", None)
            for w in batch:
                w.result = full
            return
        items.append((log, data, start, 0))
        answers = write_batch(items, sync)
        last = answers[-1]
        failed: dict[int, OSError] = {}
        if any(answers):
            failed = {id(w): exc for w, exc in zip(writes, answers, strict=False) if exc is not None}
        if failed:
            # A journal's own write failed: its frames are not logged (it cuts them back); the
            # others' entries are logged now, numbered anew.
            for w in writes:
                own = failed.get(id(w))
                if own is not None:
                    w.result = ("seg_failed", f"write failed: {own}", own.errno)
            writes = [w for w in writes if id(w) not in failed]
            data = self._entries(writes)
            if not data:
                result = self._sync_only(log) if sync else OK
                for w in batch:
                    if id(w) not in failed:
                        w.result = result
                return
            try:
                (write_all_synced if sync else write_all)(log, data, start)
                last = None
            except OSError as exc:
                last = exc
        result = self._logged(writes, data, start, last, sync)
        for w in batch:
            if id(w) not in failed:
                w.result = result

    def _entries(self, writes: list[_Waiter]) -> bytes:
        """The log entries of ``writes``, numbered on from the log's last; the first marked
        ENTRY_AFTER_SYNC if every byte of the log before it is synced."""
        pieces: list[bytes | memoryview] = []
        number, salt = self._number, self._salt
        after_sync = self._synced_end == self._end
        for w in writes:
            number += 1
            pieces.extend(
                glog.entry_pieces(
                    number, w.journal_id, w.base_seq, w.offset, w.member.path_raw, w.data, salt, after_sync
                )
            )
            after_sync = False
        return b"".join(pieces)

    def _logged(self, writes: list[_Waiter], data: bytes, start: int, exc: OSError | None, sync: bool) -> Results:
        """Account for the log write of ``writes``'s entries at ``start`` whose answer was ``exc``."""
        log = present(self._log, "a group writing has a log")
        if isinstance(exc, SyncError):
            self._end = start + len(data)  # written: whatever is durable of it, the log is kept
            return self._sync_failed(exc)
        if exc is not None:
            try:
                log.truncate(start)
                log.fdatasync()
            except OSError as cut:
                self._fail(f"a log write failed ({exc}) and cutting it back failed too: {cut}")
                return ("failed", f"the commit group's log write failed and could not be cut back: {cut}", cut.errno)
            self._synced_end = start  # the cut's fdatasync returned
            return ("rolled_back", f"writing the commit group's log failed: {exc}", exc.errno)
        self._end = start + len(data)
        if sync:
            self._synced_end = self._end
        self._number += len(writes)
        touched = self._touched  # a segment counted and then not written costs one extra fdatasync
        for w in writes:
            touched.add((w.member.journal_dir, w.base_seq))
        return OK

    def _sync_only(self, log: File) -> Results:
        """An fdatasync of the log with nothing new to write (a sync() after flush appends)."""
        try:
            log.fdatasync()
        except OSError as exc:
            return self._sync_failed(exc)
        self._synced_end = self._end
        return OK

    def _sync_failed(self, exc: OSError) -> Results:
        reason = f"fdatasync of the commit group's log failed: {exc}"
        self._fail(reason)
        return ("failed", reason, exc.errno)

    def _fail(self, reason: str) -> None:
        with self._mu:
            if self._failed is None:
                self._failed = reason

    # --- log files ----------------------------------------------------------------------------

    def _new_log(self, generation: int) -> None:
        """Make log ``generation`` durable under its name (temp file, fsync, rename, directory
        fsync) and make it the current one."""
        salt = int.from_bytes(secrets.token_bytes(8), "little")
        path = os.path.join(self._dir, glog.log_name(generation))
        write_atomic(self._fs, path, glog.encode_header(generation, salt))
        f = self._fs.open_write(path, create=False)
        self._log, self._generation, self._salt = f, generation, salt
        self._end, self._number, self._touched = glog.LOG_HEADER_SIZE_BYTES, 0, set()
        self._synced_end = self._end  # write_atomic synced the header

    def _rotate(self) -> None:
        """The next log file, then the old one retired. A failure to make the new file keeps the
        old one (it grows to LOG_FILE_BYTES_MAX); a failure to retire fail-stops the group."""
        old, generation, touched = self._log, self._generation, self._touched
        if old is None:
            return
        try:
            self._new_log(generation + 1)
        except OSError:
            return  # retried at the next batch; the old log stays current
        try:
            self._retire(generation, old, touched)
        except OSError as exc:
            self._fail(f"retiring commit group log {generation} failed: {exc}")

    def _retire(self, generation: int, log: File, touched: set[tuple[str, int]]) -> None:
        """fdatasync every segment log ``generation`` wrote to, then remove it. A segment that is
        gone was dropped or deleted with its journal: nothing of it is to keep."""
        fs = self._fs
        for jdir, base_seq in sorted(touched):
            seg = os.path.join(jdir, fmt.segment_name(base_seq))
            try:
                f = fs.open_write(seg, create=False)
            except FileNotFoundError:
                continue
            try:
                f.fdatasync()
            finally:
                f.close()
        log.close()
        fs.unlink(os.path.join(self._dir, glog.log_name(generation)))
        fs.fsync_dir(self._dir)


# --- recovery -----------------------------------------------------------------------------------


def _take_recover_lock(fs: FileSystem, gdir: str) -> Lock:
    lock = take_lock(fs, os.path.join(gdir, RECOVER_LOCK), RECOVER_LOCK_TIMEOUT_S)
    if lock is None:
        raise GroupError(
            f"another process has been recovering the commit groups in {gdir} for {RECOVER_LOCK_TIMEOUT_S:.0f} s; "
            "if it is stuck, stop it and open again"
        )
    return lock


def _read_marker(fs: FileSystem, journal_dir: str) -> int | None:
    """How many levels above ``journal_dir`` its group's root is (its GROUP file), or None."""
    path = os.path.join(journal_dir, MARKER_FILE)
    try:
        if not fs.exists(path):
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None  # no journal there yet (its open says so, or makes one)
    f = fs.open_read(path)
    try:
        data = f.pread(MARKER_BYTES_MAX + 1, 0)
    finally:
        f.close()
    m = _MARKER.fullmatch(data)
    if m is None or not 1 <= int(m.group(1)) <= MARKER_LEVELS_MAX:
        raise GroupError(
            f"{path} is not a commit group marker this build wrote ({data[:MARKER_BYTES_MAX]!r}); "
            "if the journal never joined a group, remove the file"
        )
    return int(m.group(1))


def _groups_of(fs: FileSystem, journal_dir: str) -> tuple[str, str] | None:
    """(root, its .journal-group directory) of the group the journal in ``journal_dir`` joined,
    from its GROUP file; None if it joined none, or no group ever ran at that root (the journal
    was moved or copied out of its store)."""
    levels = _read_marker(fs, journal_dir)
    if levels is None:
        return None
    root = os.path.abspath(journal_dir)
    for _ in range(levels):
        root = os.path.dirname(root)
    gdir = os.path.join(root, GROUP_DIR)
    if not fs.is_dir(gdir) or fs.is_link(gdir):
        return None
    return root, gdir


def recover_for_journal(fs: FileSystem, journal_dir: str) -> RecoveryNote | None:
    """Before a journal is opened: if it joined a commit group, recover that root's dead groups,
    so that every record the journal acknowledged through a group is in its segments."""
    found = _groups_of(fs, journal_dir)
    if found is None:
        return None
    root, gdir = found
    if not any(n.startswith(INSTANCE_PREFIX) for n in fs.listdir(gdir)):
        return None
    lock = _take_recover_lock(fs, gdir)
    try:
        return _recover_dead(fs, root)
    finally:
        lock.release()


def pending_recovery(fs: FileSystem, journal_dir: str) -> str | None:
    """The first dead group under the root of the journal in ``journal_dir`` whose logs are not
    yet written back (a tool that must not change the journal reports it rather than read
    segments that may lack what the log holds), or None. Changes no byte of any journal."""
    found = _groups_of(fs, journal_dir)
    if found is None:
        return None
    _root, gdir = found
    for name in fs.listdir(gdir):
        inst = os.path.join(gdir, name)
        if not name.startswith(INSTANCE_PREFIX) or not fs.is_dir(inst) or fs.is_link(inst):
            continue
        if not any(glog.parse_log_name(n) is not None for n in fs.listdir(inst)):
            continue
        lock = fs.try_lock(os.path.join(inst, INSTANCE_LOCK))
        if lock is None:
            continue  # alive: its journals' bytes are in the page cache
        lock.release()
        return inst
    return None


def _recover_dead(fs: FileSystem, root: str) -> RecoveryNote:
    """Recover every group under ``root`` whose LOCK is free (its process is gone). The caller
    holds RECOVER.lock: a LOCK held now is held by a live group, whose journals' bytes are in the
    page cache, and whose entries for closed journals were synced at their close."""
    note = RecoveryNote()
    gdir = os.path.join(root, GROUP_DIR)
    for name in fs.listdir(gdir):
        inst = os.path.join(gdir, name)
        if not name.startswith(INSTANCE_PREFIX) or not fs.is_dir(inst) or fs.is_link(inst):
            continue
        try:
            lock = fs.try_lock(os.path.join(inst, INSTANCE_LOCK))
        except FileNotFoundError:
            continue  # removed meanwhile by its own clean close
        if lock is None:
            continue  # a live group
        try:
            _recover_instance(fs, root, inst, note)
        finally:
            lock.release()
        _remove_instance(fs, inst)
        note.groups.append(name)
    return note


def _recover_instance(fs: FileSystem, root: str, inst: str, note: RecoveryNote) -> None:
    try:
        names = fs.listdir(inst)
    except FileNotFoundError:
        return  # removed meanwhile by its own clean close: nothing was left to recover
    logs = sorted((g, n) for n in names if (g := glog.parse_log_name(n)) is not None)
    scans: list[tuple[str, glog.Scan]] = []
    for generation, name in logs:
        path = os.path.join(inst, name)
        f = fs.open_read(path)
        try:
            size = f.size()
            if size > glog.LOG_FILE_BYTES_MAX:
                raise GroupLogCorruptionError(path, 0, f"{size} bytes, more than a log file ever holds")
            data = pread_upto(f, size, 0)
        finally:
            f.close()
        try:
            got = glog.scan(data)
        except glog.LogError as exc:
            if exc.offset == 0 and len(data) < glog.LOG_HEADER_SIZE_BYTES + 8 and not data.strip(b"\x00"):
                continue  # made and never written: nothing to recover
            raise GroupLogCorruptionError(path, exc.offset, exc.reason) from None
        if got.header.generation != generation:
            raise GroupLogCorruptionError(path, 0, f"its header says generation {got.header.generation}")
        if got.torn:
            kept = quarantine(fs, os.path.dirname(inst), f"{os.path.basename(inst)}-{name}", got.end, data[got.end :])
            note.quarantined.append(kept)
            note.actions.append(f"kept aside the torn tail of {name} ({len(data) - got.end} bytes) as {kept}")
        scans.append((name, got))
    segments = _Segments(fs, root)
    try:
        for _name, got in scans:
            for entry in got.entries:
                if segments.apply(entry):
                    note.entries_applied += 1
                else:
                    note.entries_skipped += 1
        segments.sync_all()
    finally:
        segments.close()
    note.segments_written += segments.written
    for _g, name in logs:
        path = os.path.join(inst, name)
        if segments.odd:
            # An entry's segment was no regular file (a directory, a link, a FIFO where a segment
            # was): its records were not written back, so the log is kept aside before it goes.
            kept = quarantine(fs, os.path.dirname(inst), f"{os.path.basename(inst)}-{name}", 0, read_file(fs, path))
            note.quarantined.append(kept)
            note.actions.append(f"kept {name} aside as {kept}: {'; '.join(sorted(segments.odd))}")
        fs.unlink(path)
    fs.fsync_dir(inst)


class _Segments:
    """The segments a recovery writes entries back into: at most RECOVERY_OPEN_FILES_MAX open at
    once (a group may have touched more sessions than a process may open files; one evicted is
    fdatasync'd first), and what was decided for each (skipped, and why)."""

    def __init__(self, fs: FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root
        self.open: OrderedDict[str, tuple[File, bool]] = OrderedDict()  # segment -> (file, written to)
        self.skipped: set[str] = set()
        self.odd: set[str] = set()  # why segments were skipped for not being regular files
        self.written = 0

    def apply(self, entry: glog.Entry) -> bool:
        """Write ``entry`` back where the bytes there differ; False if it is skipped (the segment is
        gone, sealed, another journal's, or no regular file)."""
        jdir = os.path.join(self.root, *entry.path.split("/"))
        seg = os.path.join(jdir, fmt.segment_name(entry.base_seq))
        if seg in self.skipped:
            return False
        got = self.open.get(seg)
        try:
            if got is None:
                f = self._open(entry, seg)
                if f is None:
                    self.skipped.add(seg)
                    return False
                got = (f, False)
                self._make_room()
            else:
                self.open.move_to_end(seg)
            f, dirty = got
            if pread_upto(f, len(entry.data), entry.offset) != entry.data:
                write_all(f, entry.data, entry.offset)
                if not dirty:
                    self.written += 1
                dirty = True
            self.open[seg] = (f, dirty)
        except OSError as exc:
            if isinstance(exc, JournalError):
                raise
            raise JournalIOError(jdir, exc, doing="writing a dead commit group's records back into") from exc
        return True

    def _make_room(self) -> None:
        while len(self.open) >= RECOVERY_OPEN_FILES_MAX:
            _seg, (f, dirty) = self.open.popitem(last=False)
            try:
                if dirty:
                    f.fdatasync()
            finally:
                f.close()

    def _open(self, entry: glog.Entry, seg: str) -> File | None:
        fs = self.fs
        try:
            _check_no_links(fs, self.root, entry.path)
        except JournalError:
            return None  # never written through a link out of the root
        if not fs.exists(seg):
            return None
        try:
            f = fs.open_write(seg, create=False)
        except (UnexpectedFileError, IsADirectoryError) as exc:
            self.odd.add(f"{seg}: {exc}")
            return None
        try:
            header = read_header(f, os.path.basename(seg))
            if header.journal_id != entry.journal_id or header.base_seq != entry.base_seq:
                f.close()
                return None
            if read_seal(f, header, os.path.basename(seg), f.size()) is not None:
                f.close()  # sealed: synced when it was sealed
                return None
        except CorruptionError:
            f.close()  # the journal's own open reports a damaged header
            return None
        except BaseException:
            f.close()
            raise
        return f

    def sync_all(self) -> None:
        for seg, (f, dirty) in self.open.items():
            if dirty:
                f.fdatasync()
                self.open[seg] = (f, False)

    def close(self) -> None:
        for f, _dirty in self.open.values():
            f.close()
        self.open.clear()


def _check_no_links(fs: FileSystem, root: str, rel: str) -> None:
    """No directory between the root and a journal is a symbolic link: an entry is written only
    into a segment under the root, never through a link out of it."""
    from journal.errors import UnexpectedLinkError

    here = root
    for part in rel.split("/"):
        here = os.path.join(here, part)
        if fs.is_link(here):
            raise UnexpectedLinkError(here)


def _remove_instance(fs: FileSystem, inst: str) -> None:
    """Remove a group's directory, its logs already retired or written back. Its closing process
    and a recovering one may both be at it (a reader's open right after the close freed the
    LOCK): a name the other removed first counts as removed."""
    try:
        names = fs.listdir(inst)
    except FileNotFoundError:
        names = []
    for name in names:
        try:
            fs.unlink(os.path.join(inst, name))
        except FileNotFoundError:
            pass
    remove = getattr(fs, "rmdir", None)
    if remove is not None:
        try:
            remove(inst)
        except FileNotFoundError:
            pass
    fs.fsync_dir(os.path.dirname(inst))


def open_group(root: str | os.PathLike[str], fs: FileSystem | None = None) -> CommitGroup:
    """Start this process's commit group under the store root ``root``; see journal/engine/group.py."""
    return CommitGroup.open(root, fs)


__all__ = ["CommitGroup", "RecoveryNote", "open_group", "pending_recovery", "recover_for_journal"]
