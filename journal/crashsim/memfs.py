"""A recording, in-memory FileSystem: every operation is logged and nothing is durable until synced.

It implements the protocol of ``journal.fs`` so the engine runs on it unchanged. Each call is
appended to ``log`` as an ``Op``. The file system keeps two views:

* the *current* view, what a process reading the files sees (the OS page cache);
* for every file, the bytes that are durable (made so by ``fsync``/``fdatasync``), and for every
  directory, the entries that are durable (made so by ``fsync_dir``).

``journal.crashsim.model`` replays ``log`` to build the disk images a power loss could leave at
any point. ``MemFileSystem.from_image`` mounts such an image (everything in it durable), so that
recovery can run on it, and be recorded in turn for a second crash.
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
from dataclasses import dataclass, field

from journal.fs import File, Lock

# What a crash image is: file path -> bytes, plus the set of directory paths.
Image = tuple[dict[str, bytes], frozenset[str]]

# Operation kinds. The mutating ones are what a crash can keep, drop or tear.
WRITE = "write"
TRUNCATE = "truncate"
SYNC = "sync"  # fsync or fdatasync of a file: its data and size become durable
CREATE = "create"
MKDIR = "mkdir"
RENAME = "rename"
LINK = "link"  # a hard link: a new directory entry for an existing file (its inode)
UNLINK = "unlink"
DIRSYNC = "dirsync"
READ = "read"  # not mutating; logged so a trace shows everything the engine did
MUTATING = frozenset({WRITE, TRUNCATE, CREATE, MKDIR, RENAME, LINK, UNLINK})


@dataclass(frozen=True)
class Op:
    """One logged call. Fields unused by a kind stay at their defaults."""

    kind: str
    path: str = ""  # file path at the time of the call, or directory path
    ino: int = -1  # the file's identity (stable across renames)
    offset: int = 0  # write offset, truncate size
    data: bytes = b""  # written bytes
    name: str = ""  # directory entry (create, mkdir, unlink, rename or link source)
    dst_dir: str = ""  # rename or link destination directory
    dst: str = ""  # rename or link destination entry
    how: str = ""  # fsync or fdatasync, for the trace

    def describe(self) -> str:
        if self.kind == WRITE:
            return f"pwrite {self.path} [{self.offset}, {self.offset + len(self.data)})"
        if self.kind == TRUNCATE:
            return f"truncate {self.path} to {self.offset}"
        if self.kind == SYNC:
            return f"{self.how} {self.path}"
        if self.kind in (RENAME, LINK):
            return f"{self.kind} {posixpath.join(self.path, self.name)} -> {posixpath.join(self.dst_dir, self.dst)}"
        if self.kind in (CREATE, MKDIR, UNLINK):
            return f"{self.kind} {posixpath.join(self.path, self.name)}"
        if self.kind == DIRSYNC:
            return f"fsync_dir {self.path}"
        return f"{self.kind} {self.path}"


# A directory entry points at a file (its inode number) or at a directory (DIR_ENTRY).
DIR_ENTRY = -1


@dataclass
class _Inode:
    data: bytearray = field(default_factory=bytearray)


class _MemLock:
    def __init__(self, fs: MemFileSystem, path: str) -> None:
        self._fs = fs
        self._path = path
        # The note lives with the lock in memory: it outlives a holder (the page cache does),
        # and a crash of the simulated machine forgets it with everything else unsynced.
        self.note_before = fs._lock_notes.get(path, b"")

    def write_note(self, note: bytes) -> None:
        with self._fs._mu:
            self._fs._lock_notes[self._path] = note

    def release(self) -> None:
        with self._fs._mu:
            self._fs._locks.discard(self._path)


class MemFile:
    """An open file of a MemFileSystem; identity is the inode, so it survives a rename."""

    def __init__(self, fs: MemFileSystem, path: str, ino: int, writable: bool) -> None:
        self.path = path
        self._fs = fs
        self._ino = ino
        self._writable = writable
        self._closed = False

    def _check(self, write: bool) -> _Inode:
        if self._closed:
            raise OSError(errno.EBADF, "file is closed", self.path)
        if write and not self._writable:
            raise OSError(errno.EBADF, "file is open read-only", self.path)
        return self._fs._inodes[self._ino]

    def pread(self, size: int, offset: int) -> bytes:
        with self._fs._mu:
            node = self._check(False)
            self._fs._record(Op(READ, self.path, self._ino, offset))
            return bytes(node.data[offset : offset + size])

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        raw = bytes(data)
        with self._fs._mu:
            node = self._check(True)
            if offset > len(node.data):
                node.data.extend(b"\0" * (offset - len(node.data)))
            node.data[offset : offset + len(raw)] = raw
            self._fs._record(Op(WRITE, self.path, self._ino, offset, raw))
            return len(raw)

    def truncate(self, size: int) -> None:
        with self._fs._mu:
            node = self._check(True)
            if size < len(node.data):
                del node.data[size:]
            else:
                node.data.extend(b"\0" * (size - len(node.data)))
            self._fs._record(Op(TRUNCATE, self.path, self._ino, size))

    def _sync(self, how: str) -> None:
        with self._fs._mu:
            self._check(False)
            self._fs._record(Op(SYNC, self.path, self._ino, how=how))

    def fsync(self) -> None:
        self._sync("fsync")

    def fdatasync(self) -> None:
        self._sync("fdatasync")

    def size(self) -> int:
        with self._fs._mu:
            return len(self._check(False).data)

    def close(self) -> None:
        self._closed = True


class MemFileSystem:
    """In-memory file system with an operation log. Thread-safe (one mutex)."""

    def __init__(self, root: str = "/") -> None:
        self._mu = threading.RLock()
        self._inodes: dict[int, _Inode] = {}
        self._dirs: dict[str, dict[str, int]] = {root: {}}
        self._locks: set[str] = set()
        self._lock_notes: dict[str, bytes] = {}
        self._next_ino = 1
        self.log: list[Op] = []
        self.base: Image = ({}, frozenset({root}))  # the durable state the log starts from
        self.base_inodes: dict[str, int] = {}  # path -> inode number of each file in ``base``
        self.root = root
        self.record_reads = True

    # --- building from and taking images -------------------------------------------------

    @classmethod
    def from_image(cls, image: Image, root: str = "/") -> MemFileSystem:
        files, dirs = image
        fs = cls(root)
        for d in sorted(dirs, key=lambda p: p.count("/")):
            if d != root:
                fs._dirs[d] = {}
                fs._dirs[posixpath.dirname(d)][posixpath.basename(d)] = DIR_ENTRY
        for path in sorted(files):
            ino = fs._new_inode(files[path])
            fs._dirs[posixpath.dirname(path)][posixpath.basename(path)] = ino
            fs.base_inodes[path] = ino
        fs.base = (dict(files), frozenset(dirs))
        return fs

    def snapshot(self) -> Image:
        """The current view as an image (what a clean shutdown would leave on disk)."""
        with self._mu:
            files: dict[str, bytes] = {}
            for d, entries in self._dirs.items():
                for name, ino in entries.items():
                    if ino != DIR_ENTRY:
                        files[posixpath.join(d, name)] = bytes(self._inodes[ino].data)
            return files, frozenset(self._dirs)

    def op_count(self) -> int:
        with self._mu:
            return len(self.log)

    # --- internals -------------------------------------------------------------------------

    def _record(self, op: Op) -> None:
        if op.kind == READ and not self.record_reads:
            return
        self.log.append(op)

    def _new_inode(self, content: bytes = b"") -> int:
        ino = self._next_ino
        self._next_ino += 1
        self._inodes[ino] = _Inode(bytearray(content))
        return ino

    def _split(self, path: str) -> tuple[str, str, dict[str, int]]:
        path = posixpath.normpath(path)
        parent, name = posixpath.split(path)
        entries = self._dirs.get(parent)
        if entries is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory", parent)
        return parent, name, entries

    def _lookup(self, path: str) -> int:
        _, name, entries = self._split(path)
        ino = entries.get(name)
        if ino is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        if ino == DIR_ENTRY:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        return ino

    # --- the FileSystem protocol -----------------------------------------------------------

    def open_read(self, path: str) -> File:
        with self._mu:
            return MemFile(self, path, self._lookup(path), writable=False)

    def open_write(self, path: str, create: bool) -> File:
        with self._mu:
            parent, name, entries = self._split(path)
            if create:
                if name in entries:
                    raise FileExistsError(errno.EEXIST, "file exists", path)
                ino = self._new_inode()
                entries[name] = ino
                self._record(Op(CREATE, parent, ino, name=name))
            else:
                ino = self._lookup(path)
            return MemFile(self, path, ino, writable=True)

    def rename(self, src: str, dst: str) -> None:
        with self._mu:
            sparent, sname, sentries = self._split(src)
            dparent, dname, dentries = self._split(dst)
            if sname not in sentries:
                raise FileNotFoundError(errno.ENOENT, "no such file", src)
            node = sentries[sname]
            if node == DIR_ENTRY:
                self._rename_dir(posixpath.normpath(src), posixpath.normpath(dst), dentries.get(dname))
            elif dentries.get(dname) == DIR_ENTRY:
                raise IsADirectoryError(errno.EISDIR, "is a directory", dst)
            del sentries[sname]
            dentries[dname] = node
            self._record(Op(RENAME, sparent, node, name=sname, dst_dir=dparent, dst=dname))

    def _rename_dir(self, src: str, dst: str, existing: int | None) -> None:
        """Move the directory ``src`` and everything under it to ``dst`` (the caller moves the entry).

        As rename(2): ``dst`` may be an empty directory (it is replaced), not a file, not a
        non-empty directory, not inside ``src``. The log op is a RENAME whose ``ino`` is DIR_ENTRY.
        """
        if dst == src:
            return
        if dst.startswith(src + "/"):
            raise OSError(errno.EINVAL, "cannot move a directory into itself", dst)
        if existing is not None and existing != DIR_ENTRY:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", dst)
        if existing == DIR_ENTRY:
            if self._dirs[dst]:
                raise OSError(errno.ENOTEMPTY, "directory not empty", dst)
            del self._dirs[dst]
        for path in [p for p in self._dirs if p == src or p.startswith(src + "/")]:
            self._dirs[dst + path[len(src):]] = self._dirs.pop(path)

    def link(self, src: str, dst: str) -> None:
        """A hard link: ``dst`` becomes a second entry of the file ``src`` (the same inode).

        As link(2): ``src`` must be a file (a directory gives EPERM) and ``dst`` must not exist.
        The new entry is pending in its directory like a create until that directory is synced.
        """
        with self._mu:
            sparent, sname, sentries = self._split(src)
            dparent, dname, dentries = self._split(dst)
            node = sentries.get(sname)
            if node is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", src)
            if node == DIR_ENTRY:
                raise PermissionError(errno.EPERM, "cannot link a directory", src)
            if dname in dentries:
                raise FileExistsError(errno.EEXIST, "file exists", dst)
            dentries[dname] = node
            self._record(Op(LINK, sparent, node, name=sname, dst_dir=dparent, dst=dname))

    def unlink(self, path: str) -> None:
        with self._mu:
            parent, name, entries = self._split(path)
            ino = self._lookup(path)
            del entries[name]
            self._record(Op(UNLINK, parent, ino, name=name))

    def mkdir(self, path: str) -> None:
        with self._mu:
            path = posixpath.normpath(path)
            parent, name, entries = self._split(path)
            if name in entries:
                raise FileExistsError(errno.EEXIST, "file exists", path)
            entries[name] = DIR_ENTRY
            self._dirs[path] = {}
            self._record(Op(MKDIR, parent, name=name))

    def fsync_dir(self, path: str) -> None:
        with self._mu:
            path = posixpath.normpath(path)
            if path not in self._dirs:
                raise FileNotFoundError(errno.ENOENT, "no such directory", path)
            self._record(Op(DIRSYNC, path))

    def listdir(self, path: str) -> list[str]:
        with self._mu:
            entries = self._dirs.get(posixpath.normpath(path))
            if entries is None:
                raise FileNotFoundError(errno.ENOENT, "no such directory", path)
            return sorted(entries)

    def exists(self, path: str) -> bool:
        with self._mu:
            path = posixpath.normpath(path)
            if path in self._dirs:
                return True
            parent, name = posixpath.split(path)
            return name in self._dirs.get(parent, {})

    def is_dir(self, path: str) -> bool:
        with self._mu:
            return posixpath.normpath(path) in self._dirs

    def is_link(self, path: str) -> bool:
        return False  # this file system has no symbolic links: the engine never makes one

    def try_lock(self, path: str) -> Lock | None:
        # The lock file is created like the real one (it may or may not survive a crash), but
        # the lock itself lives in memory: a crash releases it, as the kernel would.
        with self._mu:
            path = posixpath.normpath(path)
            if path in self._locks:
                return None
            if not self.exists(path):
                self.open_write(path, create=True).close()
            self._locks.add(path)
            return _MemLock(self, path)

    def read_lock_owner(self, path: str) -> int | None:
        return os.getpid() if posixpath.normpath(path) in self._locks else None
