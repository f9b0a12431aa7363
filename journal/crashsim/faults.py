"""Fault injection over any FileSystem: make the Nth call of an operation fail with an errno.

    fs = FaultyFileSystem(OsFileSystem())
    fs.fail("fdatasync", errno.EIO, after=2)     # the 3rd fdatasync raises EIO
    j = journal.open(path, create=True, fs=fs)

Operations: open_read, pread, open_write, pwrite, short_write, truncate, fsync, fdatasync, rename,
link, unlink, mkdir, rmdir, fsync_dir, listdir. ``short_write`` makes a pwrite write only half its bytes
and then fail with ENOSPC on the next attempt, the way a full disk behaves. Every call is
counted in ``calls`` (and listed in order in ``trace``) so a test can first count a workload's
call sites, then fail each one.

The engine's advisory files (``ADVISORY_NAMES``: LIVE.hint, which a writer's close leaves for
read-only opens) are outside the sites: their writes are best effort by design, a failure there
never reaches the caller and is the same as no hint, so calls on them are neither counted nor
failed here unless asked for (``advisory_sites=True``: tests/test_live_hint.py fails each).
"""

from __future__ import annotations

import errno as errno_mod
import os
from collections import Counter
from dataclasses import dataclass

from journal.engine.live_hint import HINT_FILE, HINT_TMP_FILE
from journal.fs import File, FileSystem, Lock, data_from, hole_from

ADVISORY_NAMES = frozenset({HINT_FILE, HINT_TMP_FILE})

OPERATIONS = (
    "open_read",
    "pread",
    "open_write",
    "pwrite",
    "short_write",
    "truncate",
    "fsync",
    "fdatasync",
    "rename",
    "link",
    "unlink",
    "mkdir",
    "rmdir",
    "fsync_dir",
    "listdir",
)


@dataclass
class _Rule:
    op: str
    errno: int
    after: int  # calls of ``op`` to let through before failing
    times: int  # how many calls fail once it triggers (-1: every later call)


class FaultyFileSystem:
    def __init__(self, inner: FileSystem, advisory_sites: bool = False) -> None:
        self.inner = inner
        self.advisory_sites = advisory_sites  # count and fail calls on ADVISORY_NAMES too
        self.calls: Counter[str] = Counter()
        self.injected: list[tuple[str, int]] = []  # (op, call number) of every fault raised
        self.trace: list[tuple[str, int]] = []  # (op, call number) of every call, in order
        self._rules: list[_Rule] = []

    def fail(self, op: str, err: int = errno_mod.EIO, after: int = 0, times: int = 1) -> None:
        """Make call number ``after`` (0-based) of ``op`` and the ``times``-1 after it fail."""
        if op not in OPERATIONS:
            raise ValueError(f"unknown operation {op!r}; choose from {OPERATIONS}")
        self._rules.append(_Rule(op, err, after, times))

    def clear(self) -> None:
        self._rules.clear()

    def check(self, op: str, path: str) -> None:
        if not self.advisory_sites and os.path.basename(path) in ADVISORY_NAMES:
            return  # best effort by design (see the module's docstring): not a site
        n = self.calls[op]
        self.calls[op] += 1
        self.trace.append((op, n))
        for rule in self._rules:
            if rule.op == op and n >= rule.after and (rule.times < 0 or n < rule.after + rule.times):
                self.injected.append((op, n))
                raise OSError(rule.errno, f"injected {os.strerror(rule.errno)} on {op} #{n}", path)

    def _wrap(self, f: File) -> File:
        return _FaultyFile(self, f)

    def open_read(self, path: str) -> File:
        self.check("open_read", path)
        return self._wrap(self.inner.open_read(path))

    def open_write(self, path: str, create: bool) -> File:
        self.check("open_write", path)
        return self._wrap(self.inner.open_write(path, create))

    def rename(self, src: str, dst: str) -> None:
        self.check("rename", src)
        self.inner.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        self.check("link", src)
        self.inner.link(src, dst)

    def unlink(self, path: str) -> None:
        self.check("unlink", path)
        self.inner.unlink(path)

    def mkdir(self, path: str) -> None:
        self.check("mkdir", path)
        self.inner.mkdir(path)

    def rmdir(self, path: str) -> None:
        self.check("rmdir", path)
        rmdir = getattr(self.inner, "rmdir", None)
        if rmdir is not None:
            rmdir(path)

    def fsync_dir(self, path: str) -> None:
        self.check("fsync_dir", path)
        self.inner.fsync_dir(path)

    def listdir(self, path: str) -> list[str]:
        self.check("listdir", path)
        return self.inner.listdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def is_link(self, path: str) -> bool:
        return self.inner.is_link(path)

    def try_lock(self, path: str) -> Lock | None:
        return self.inner.try_lock(path)

    def read_lock_owner(self, path: str) -> int | None:
        return self.inner.read_lock_owner(path)


class _FaultyFile:
    def __init__(self, fs: FaultyFileSystem, inner: File) -> None:
        self._fs = fs
        self._inner = inner
        self.path = inner.path
        self._full = False  # after a short write the disk is full: the next pwrite fails

    def pread(self, size: int, offset: int) -> bytes:
        self._fs.check("pread", self.path)
        return self._inner.pread(size, offset)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        if self._full:
            self._full = False
            raise OSError(errno_mod.ENOSPC, "injected ENOSPC after a short write", self.path)
        try:
            self._fs.check("short_write", self.path)
        except OSError:
            half = len(data) // 2
            if half == 0:
                raise
            self._full = True
            return self._inner.pwrite(memoryview(data)[:half], offset)
        self._fs.check("pwrite", self.path)
        return self._inner.pwrite(data, offset)

    def truncate(self, size: int) -> None:
        self._fs.check("truncate", self.path)
        self._inner.truncate(size)

    def fsync(self) -> None:
        self._fs.check("fsync", self.path)
        self._inner.fsync()

    def fdatasync(self) -> None:
        self._fs.check("fdatasync", self.path)
        self._inner.fdatasync()

    def size(self) -> int:
        return self._inner.size()

    def seek_data(self, offset: int) -> int:
        # Where the wrapped file's holes end (journal.fs.data_from): no bytes are read, so no
        # fault site; a read of what follows goes through pread and can fail there.
        return data_from(self._inner, offset)

    def seek_hole(self, offset: int) -> int:
        found = hole_from(self._inner, offset)
        return self._inner.size() if found is None else found

    def close(self) -> None:
        self._inner.close()
