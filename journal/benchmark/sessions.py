"""The many-sessions workload: N sessions in one process, each durable per event.

Each session is its own journal (``journal.open(dir, create=True)``) or its own JSONL file
(``json.dumps`` + ``write`` + ``fdatasync`` per event, the file opened once): what a runtime
keeping one log per session does. ``min(N, SESSION_THREADS_MAX)`` worker threads each own an
equal share of the sessions and append one event to each of them in turn, every append durable
before the next. Besides events/s, each side's CPU per event (user + system seconds of the
process over the events, and each of the two) is kept: with many sessions the GIL, not the
disk, is what bounds.

A third kind, RESERVED, is no store a user would pick but the floor of the journal's own file
layout: each event's JSON written with ``pwrite`` into space set aside ahead by ``ftruncate`` (as
a journal's live segment reserves it), then ``fdatasync``: what the kernel costs a journal's
durable append, with no framing, compression or bookkeeping in Python. A fourth,
RESERVED_TOGETHER (bench/bench_sessions_cpu.py only, Linux), is the same floor with the sessions'
syncs shared: each event's pwrite, then one ``syncfs`` for every event written meanwhile, by
whichever thread leads (a group commit across the files): what sharing the syncs of a store's
sessions could give at best.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

import journal
from journal.benchmark.events import Event
from journal.benchmark.stores import dumps
from journal.engine import format as fmt
from journal.engine.dictionary import Dictionary

SESSION_THREADS_MAX = 64
JOURNAL = "journal, a journal per session"
JSONL = "JSONL, a file per session (write+fdatasync)"
RESERVED = "a reserved file per session (pwrite+fdatasync)"
RESERVED_TOGETHER = "a reserved file per session, synced together (syncfs)"


@dataclass
class Side:
    events_per_s: float
    cpu_s_per_event: float  # user + system
    user_s_per_event: float  # the process's own code: Python, JSON, zstd
    system_s_per_event: float  # the kernel on its behalf: the writes and the fdatasyncs
    # What the sessions' files hold at the end, per event: segments (journal), lines (JSONL);
    # a journal's dictionary file is not counted (one for every session a store keeps).
    bytes_per_event: float = 0.0


class _Journals:
    def __init__(self, root: str, n: int, compress: bool, dictionary: Dictionary | None = None) -> None:
        self.handles = [
            journal.open(os.path.join(root, f"s{i}"), create=True, compress=compress, dictionary=dictionary)
            for i in range(n)
        ]

    def append(self, i: int, event: Event) -> None:
        out = self.handles[i].append(event, durability="sync")
        if not isinstance(out, journal.Committed):
            raise RuntimeError(f"append failed: {out}")

    def close(self) -> None:
        for j in self.handles:
            j.close()


class _JsonlFiles:
    def __init__(self, root: str, n: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.fds = [os.open(os.path.join(root, f"s{i}.jsonl"), flags, 0o600) for i in range(n)]

    def append(self, i: int, event: Event) -> None:
        fd = self.fds[i]
        os.write(fd, dumps(event) + b"\n")
        os.fdatasync(fd)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


class _ReservedFiles:
    def __init__(self, root: str, n: int) -> None:
        self.fds = [os.open(os.path.join(root, f"s{i}.floor"), os.O_RDWR | os.O_CREAT, 0o600) for i in range(n)]
        self.ends = [0] * n  # where the next event goes
        self.reserved = [0] * n  # the file's size, set ahead of what is written

    def append(self, i: int, event: Event) -> None:
        os.fdatasync(self._write(i, event))

    def _write(self, i: int, event: Event) -> int:
        """The event's line written at session ``i``'s end (reserving ahead); its fd."""
        fd, data, at = self.fds[i], dumps(event) + b"\n", self.ends[i]
        if at + len(data) > self.reserved[i]:  # a journal's first append reserves, as here
            self.reserved[i] = at + len(data) + fmt.RESERVE_BYTES_DEFAULT
            os.ftruncate(fd, self.reserved[i])
        if os.pwrite(fd, data, at) != len(data):
            raise OSError(f"short pwrite to session {i}")
        self.ends[i] = at + len(data)
        return fd

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


class _ReservedFilesSyncedTogether(_ReservedFiles):
    """_ReservedFiles whose appends share their syncs: a thread whose event is written waits
    for a ``syncfs`` begun after its write; the first to find none under way leads one for
    every event written so far."""

    def __init__(self, root: str, n: int) -> None:
        super().__init__(root, n)
        self._syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        self._cv = threading.Condition()
        self._written = 0  # events written (their pwrite returned)
        self._synced = 0  # events a finished syncfs covers
        self._leading = False

    def append(self, i: int, event: Event) -> None:
        fd = self._write(i, event)
        with self._cv:
            self._written += 1
            mine = self._written
            while self._synced < mine:
                if self._leading:
                    self._cv.wait()
                    continue
                self._leading, covers = True, self._written
                self._cv.release()
                err, synced = 0, False
                try:
                    if self._syncfs(fd) != 0:
                        err = ctypes.get_errno()
                    else:
                        synced = True  # only a call that returned 0 covers the events
                finally:
                    self._cv.acquire()
                    self._leading = False
                    if synced:
                        self._synced = max(self._synced, covers)
                    self._cv.notify_all()
                if err:
                    raise OSError(err, f"syncfs failed: {os.strerror(err)}")


def run_side(
    kind: str,
    base: str,
    sessions: int,
    events_total: int,
    events: list[Event],
    compress: bool = True,
    dictionary: Dictionary | None = None,
) -> Side:
    """One side (JOURNAL, JSONL, RESERVED or RESERVED_TOGETHER) for one round: ``events_total`` appends over
    ``sessions`` (``compress``, ``dictionary``: the journals' options of those names; every
    session is opened with the one dictionary, as a store's sessions share theirs)."""
    root = tempfile.mkdtemp(prefix="sessions-", dir=base)
    try:
        store: _Journals | _JsonlFiles | _ReservedFiles
        if kind == JOURNAL:
            store = _Journals(root, sessions, compress, dictionary)
        elif kind == JSONL:
            store = _JsonlFiles(root, sessions)
        elif kind == RESERVED:
            store = _ReservedFiles(root, sessions)
        elif kind == RESERVED_TOGETHER:
            store = _ReservedFilesSyncedTogether(root, sessions)
        else:
            raise ValueError(f"no side {kind!r}: {JOURNAL!r}, {JSONL!r}, {RESERVED!r} or {RESERVED_TOGETHER!r}")
        threads = min(sessions, SESSION_THREADS_MAX)
        per_session = max(1, events_total // sessions)
        share = [list(range(t, sessions, threads)) for t in range(threads)]
        start = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def worker(t: int) -> None:
            k = t
            start.wait()
            try:
                for _ in range(per_session):
                    for i in share[t]:
                        store.append(i, events[k % len(events)])
                        k += threads
            except BaseException as exc:  # reported after the join
                errors.append(exc)

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        cpu0 = os.times()  # every thread of the process
        start.wait()
        t0 = time.perf_counter()
        for w in workers:
            w.join()
        wall = time.perf_counter() - t0
        cpu1 = os.times()
        user, system = cpu1.user - cpu0.user, cpu1.system - cpu0.system
        store.close()
        if errors:
            raise errors[0]
        total = per_session * sessions
        stored = _stored_bytes(root)
        return Side(total / wall, (user + system) / total, user / total, system / total, stored / total)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _stored_bytes(root: str) -> int:
    """The bytes of the sessions' data files under ``root``, once closed (a closed journal's
    live segment is cut back to what it holds): segments and JSONL files (a reserved file keeps
    its reservation: 0 counted)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith((".seg", ".jsonl")):
                total += os.path.getsize(os.path.join(dirpath, name))
    return total


__all__ = ["JOURNAL", "JSONL", "RESERVED", "RESERVED_TOGETHER", "SESSION_THREADS_MAX", "Side", "run_side"]
