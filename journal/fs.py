"""The one file layer. Every open, write, sync, truncate, rename, link, unlink and lock goes through it.

The engine never calls ``os`` for file work directly. Tests wrap a FileSystem to inject faults
at any call (journal.crashsim.faults), and the crash simulator replaces it with one that records every
byte (journal.crashsim), so what they see is exactly what reaches a disk.
"""

from __future__ import annotations

import errno
import fcntl
import importlib
import os
import stat
import time
from collections.abc import Callable
from typing import Protocol, TypeGuard

from journal.errors import UnexpectedFileError, UnexpectedLinkError

FILE_MODE = 0o600  # agent logs carry prompts, secrets and tool output: owner-only by default
DIR_MODE = 0o700
LOCK_POLL_INTERVAL_S = 0.01
LOCK_NOTE_BYTES = 64  # the lock file holds one note of this size, space-padded: "<pid>[ shared <state>]"
_SEEK_DATA: int | None = getattr(os, "SEEK_DATA", None)  # Linux, the BSDs, macOS; not Windows
_SEEK_HOLE: int | None = getattr(os, "SEEK_HOLE", None)


class File(Protocol):
    """An open file. Offsets are explicit: the engine never relies on a shared file position."""

    path: str

    def pread(self, size: int, offset: int) -> bytes: ...
    def pwrite(self, data: bytes | memoryview, offset: int) -> int: ...
    def truncate(self, size: int) -> None: ...
    def fsync(self) -> None: ...
    def fdatasync(self) -> None: ...
    def size(self) -> int: ...
    def close(self) -> None: ...


class Lock(Protocol):
    """A held writer lock. Its file carries a short note: the holder's pid, and in shared-writer
    mode whether the last holder finished its batch (journal/engine/shared.py)."""

    note_before: bytes  # the lock file's note as the previous holder left it

    def write_note(self, note: bytes) -> None: ...
    def release(self) -> None: ...


class FileSystem(Protocol):
    def open_read(self, path: str) -> File: ...
    def open_write(self, path: str, create: bool) -> File:
        """Open read-write; ``create`` makes it exclusively (it must not exist yet)."""
        ...

    def rename(self, src: str, dst: str) -> None: ...
    def link(self, src: str, dst: str) -> None:
        """Make ``dst`` a hard link to the file ``src`` (``dst`` must not exist).

        Raises OSError with the errno of link(2): EXDEV, EPERM, ENOTSUP and the like where the
        file system cannot link, and a caller that can copy instead does so.
        """
        ...

    def unlink(self, path: str) -> None: ...
    def mkdir(self, path: str) -> None: ...
    def fsync_dir(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool:
        """Whether the name ``path`` is there, whatever it is: a symbolic link counts, even one
        to nothing (it is not followed)."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a directory, following a symbolic link: for a directory a caller
        names (a journal, a store's root, a destination). A directory the engine names itself
        is checked with ``is_link`` first (``ensure_dir``, ``remove_tree``)."""
        ...

    def is_link(self, path: str) -> bool:
        """Whether the name ``path`` is a symbolic link (not followed; False where nothing is)."""
        ...

    def try_lock(self, path: str) -> Lock | None:
        """Take the exclusive writer lock, or None if another holder has it. Like every open of
        the file layer, a symbolic link at ``path`` is refused (UnexpectedLinkError), never followed."""
        ...

    def read_lock_owner(self, path: str) -> int | None: ...


class OsFile:
    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(self._fd, data, offset)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def fdatasync(self) -> None:
        os.fdatasync(self._fd)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def preadinto(self, buf: memoryview, offset: int) -> int:
        """pread into ``buf`` (os.preadv): a reader that reads window after window into one
        buffer does not have fresh memory faulted in for each (ten times the cost of the read
        itself for a frame of 256 MiB, measured here)."""
        return os.preadv(self._fd, [buf], offset)

    def seek_data(self, offset: int) -> int:
        """The next offset at or after ``offset`` that is not in a hole (SEEK_DATA; the file's
        position is never used for reads, so moving it costs nothing); ``offset`` itself where
        the file system cannot say, the file's size where only holes follow."""
        if _SEEK_DATA is None:
            return offset
        try:
            return os.lseek(self._fd, offset, _SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # at or past the end, or nothing but a hole after it
                return max(offset, self.size())
            return offset  # EINVAL and the like: holes cannot be told here; every byte is read

    def seek_hole(self, offset: int) -> int:
        """The next offset at or after ``offset`` that is in a hole (SEEK_HOLE; the end of the
        file counts as one); the file's size where the file system cannot say."""
        if _SEEK_HOLE is None:
            return max(offset, self.size())
        try:
            return os.lseek(self._fd, offset, _SEEK_HOLE)
        except OSError:  # ENXIO: at or past the end; EINVAL and the like: no holes known
            return max(offset, self.size())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsLock:
    def __init__(self, fd: int, note_before: bytes) -> None:
        self._fd = fd
        self.note_before = note_before

    def write_note(self, note: bytes) -> None:
        # Not synced: the note is for processes that outlive a holder's death (the page cache
        # survives that); after a power loss every writer's open recovers and syncs anyway.
        os.pwrite(self._fd, note.ljust(LOCK_NOTE_BYTES), 0)

    def release(self) -> None:
        if self._fd >= 0:
            # Closing the descriptor drops the flock; the kernel also drops it if we die.
            os.close(self._fd)
            self._fd = -1


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _open_file(path: str, flags: int) -> int:
    """os.open of a file the engine names, by every open of OsFileSystem: never through a
    symbolic link at ``path`` (O_NOFOLLOW: UnexpectedLinkError), never waiting on a FIFO
    (O_NONBLOCK: a FIFO opened to read would wait for a writer forever; it changes nothing for a
    regular file), and a regular file only (anything else but a directory: UnexpectedFileError).
    The directories above ``path`` are resolved as the OS does: the caller's journal directory
    may be a link (docs/GUARANTEES.md, "Links")."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP and _is_link(path):
            raise UnexpectedLinkError(path) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    raise UnexpectedFileError(path, _KINDS.get(stat.S_IFMT(mode), "not a regular file"), errno.ENXIO)


def _empty_dir_at(top: int) -> None:
    """Remove everything in the open directory ``top``, relative to directory descriptors
    (unlinkat, openat, rmdir at): a directory is entered by a descriptor opened with O_NOFOLLOW,
    so a name that is, or is swapped during the walk for, a symbolic link is unlinked itself and
    never followed. Depth first on a stack of its own: a tree made deep on purpose cannot exhaust
    the interpreter's recursion (only descriptors, an OSError)."""
    stack: list[tuple[int, list[str], str]] = [(top, os.listdir(top), "")]
    try:
        while stack:
            fd, names, name_here = stack[-1]
            if not names:
                stack.pop()
                if stack:  # an emptied subdirectory: closed, then removed from its parent
                    os.close(fd)
                    os.rmdir(name_here, dir_fd=stack[-1][0])
                continue
            name = names.pop()
            if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=fd)
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.unlink(name, dir_fd=fd)  # no longer a directory (a link now): the name alone goes
                continue
            try:
                inner = os.listdir(child)
            except OSError:
                os.close(child)
                raise
            stack.append((child, inner, name))
    finally:
        for fd, _names, _name in stack[1:]:
            os.close(fd)


class OsFileSystem:
    """The real thing: POSIX calls, owner-only modes, flock for the writer lock. No open, lock
    or removal follows a symbolic link at the name it is given (docs/GUARANTEES.md, "Links")."""

    def open_read(self, path: str) -> File:
        return OsFile(path, _open_file(path, os.O_RDONLY))

    def open_write(self, path: str, create: bool) -> File:
        return OsFile(path, _open_file(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)))

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def link(self, src: str, dst: str) -> None:
        # link(2) would make ``dst`` the file a link at ``src`` points to (Python asks it to
        # follow): a file from elsewhere in the journal. Refused; the race left after this check
        # at worst links the link itself, which every open then refuses.
        if _is_link(src):
            raise UnexpectedLinkError(src)
        os.link(src, dst, follow_symlinks=False)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        os.mkdir(path, DIR_MODE)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory (remove_tree's last step; optional in other file layers)."""
        os.rmdir(path)

    def remove_tree(self, path: str) -> None:
        """``remove_tree`` on a real file system, by directory descriptors (``_empty_dir_at``):
        a symbolic link met anywhere, ``path`` itself included, is unlinked and never followed.
        The directories above ``path`` are resolved as the OS does."""
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(path):
                os.unlink(path)
                return
            raise
        try:
            _empty_dir_at(fd)
        finally:
            os.close(fd)
        os.rmdir(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def is_link(self, path: str) -> bool:
        return _is_link(path)

    def try_lock(self, path: str) -> Lock | None:
        fd = _open_file(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        # A lock file that its holder removes (a session store's build locks) may be unlinked
        # between this open and the flock: the flock then holds an inode no name leads to, and the
        # next process to look makes a new file at the name and takes that one. The lock that
        # counts is the one at the name: if the file locked is no longer there, it is not held.
        try:
            held, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) != (there.st_dev, there.st_ino):
            os.close(fd)
            return None
        # The pid is advisory, for the error message of a second writer; the flock is the lock.
        try:
            before = os.pread(fd, LOCK_NOTE_BYTES, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode().ljust(LOCK_NOTE_BYTES), 0)
        except OSError:
            os.close(fd)  # drops the lock too
            raise
        return OsLock(fd, before)

    def read_lock_owner(self, path: str) -> int | None:
        # The kernel's answer first: the pid note is written just after the flock is taken, so a
        # second writer that looks in between would read the previous holder's pid from it.
        holder = flock_holder(path)
        if holder is not None:
            return holder
        try:
            fd = _open_file(path, os.O_RDONLY)
            try:
                fields = os.pread(fd, LOCK_NOTE_BYTES, 0).split()
            finally:
                os.close(fd)
        except OSError:
            return None
        return int(fields[0]) if fields and fields[0].isdigit() else None


def flock_holder(path: str) -> int | None:
    """The pid holding an exclusive flock on ``path``, read from Linux's /proc/locks; None if
    nobody does, or if that cannot be known here. It takes no lock: a writer opening at the same
    moment is never turned away by a look."""
    try:
        st = os.stat(path, follow_symlinks=False)  # a link's own inode: never flocked, so no holder
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return holder_in_proc_locks(lines, f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}")


def holder_in_proc_locks(lines: list[str], where: str) -> int | None:
    """The pid of the exclusive flock on the file ``where`` ("maj:min:inode") in /proc/locks."""
    for line in lines:
        if "->" in line:
            continue  # a process waiting for the lock, not holding it
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 2155 fe:00:5357654 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == where:
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def take_lock(fs: FileSystem, path: str, timeout_s: float) -> Lock | None:
    """Try the lock until ``timeout_s`` has passed (0: try once)."""
    if timeout_s < 0:
        raise ValueError(f"lock timeout must be >= 0 seconds, not {timeout_s}")
    deadline = time.monotonic() + timeout_s
    while True:
        lock = fs.try_lock(path)
        if lock is not None or time.monotonic() >= deadline:
            return lock
        time.sleep(LOCK_POLL_INTERVAL_S)


def write_all(f: File, data: bytes | memoryview, offset: int, first_last: int = 0) -> None:
    """pwrite until done; a short write that makes no progress is an error (ENOSPC).

    ``first_last``: the first so many bytes are written after the rest (a batch of several
    frames goes down with its first header last, so a reader that sees it sees them all)."""
    if first_last:
        view = memoryview(data)
        write_all(f, view[first_last:], offset + first_last)
        write_all(f, view[:first_last], offset)
        return
    done = f.pwrite(data, offset)
    if done == len(data):
        return
    if done <= 0:
        raise OSError(errno.ENOSPC, "short write made no progress", f.path)
    view = memoryview(data)
    while done < len(view):
        n = f.pwrite(view[done:], offset + done)
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write made no progress", f.path)
        done += n


class SyncError(OSError):
    """An fdatasync failed after the write before it went through (write_all_synced).

    Never retried: after a failed fdatasync the kernel may have dropped the dirty pages and
    marked them clean, so a second one could report success for data that never reached the
    disk. The writer fails stop on it."""


def _write_sync_in_c() -> Callable[[int, bytes | memoryview, int, int], int] | None:
    """native/write_sync.c's write_all_sync, where it was built. JOURNAL_PURE keeps the two
    calls, read as journal/engine/native.py's forced_pure() reads it (that module is above this
    one; tests/test_native_build.py holds the two readings equal)."""
    if os.environ.get("JOURNAL_PURE", "") not in ("", "0"):
        return None
    try:
        # By name: the compiled leaf imports nothing, where ``from journal import`` would read as
        # an edge to the root package (above every layer) to the import contracts.
        mod = importlib.import_module("journal._write_sync")
    except ImportError:  # not built (no compiler, or Windows): the two calls
        return None
    call: Callable[[int, bytes | memoryview, int, int], int] = mod.write_all_sync
    return call


# The one-call durable write where it was built: a pwrite and an fdatasync under one release
# of the GIL instead of two (native/write_sync.c says why).
_WRITE_ALL_SYNC = _write_sync_in_c()
_NO_PROGRESS = 0x10000  # its answer for a pwrite that wrote nothing (NO_PROGRESS in the C file)

# OsFile's methods that write_all_synced stands for: a file whose own attribute replaces one of
# them (a test counting or failing fdatasyncs) is written and synced through them, one by one.
_STANDS_FOR = frozenset(("pwrite", "fdatasync"))


def plain_os_file(f: File) -> TypeGuard[OsFile]:
    """Whether ``f`` is an OsFile whose pwrite and fdatasync are its own: the files a C call may
    write and sync itself (write_all_synced; the writer's lone frame, native/zstd_held.c). Any
    other file (the crash simulator's, a fault injector's, one a test wrapped) is written through
    its own methods, so whatever wraps them sees every call."""
    return type(f) is OsFile and _STANDS_FOR.isdisjoint(f.__dict__)


def raise_for_write_sync(rc: int, f: File) -> None:
    """Raise what write_all then fdatasync would have raised for a C write-and-sync call's
    answer ``rc`` (native/write_all.h: 0, a write's errno or NO_PROGRESS, minus an fdatasync's
    errno): OSError for a failed write, SyncError for a failed fdatasync. Raised as os.pwrite
    and os.fdatasync raise them (no file name), so an outcome's reason reads the same on every
    path."""
    if rc == _NO_PROGRESS:
        raise OSError(errno.ENOSPC, "short write made no progress", f.path)  # as write_all
    if rc > 0:
        raise OSError(rc, os.strerror(rc))
    if rc < 0:
        raise SyncError(-rc, os.strerror(-rc))


def write_all_synced(f: File, data: bytes | memoryview, offset: int, first_last: int = 0) -> None:
    """write_all (``first_last`` as there), then fdatasync: every durable write of the writer.

    A failed write raises OSError (nothing was synced: the caller may roll it back); a failed
    fdatasync raises SyncError. On a plain OsFile it is one C call that releases the GIL once,
    where the calls from Python release it at each pwrite and fdatasync and, with many threads
    appending, each release is a context switch; on any other file (the crash simulator's, a
    fault injector's, one whose pwrite or fdatasync is wrapped) the calls run one by one through
    its own methods, so whatever wraps them sees every call."""
    c_call = _WRITE_ALL_SYNC
    if c_call is not None and plain_os_file(f):
        raise_for_write_sync(c_call(f.fileno(), data, offset, first_last), f)
        return
    write_all(f, data, offset, first_last)
    try:
        f.fdatasync()
    except OSError as exc:
        raise _as_sync_error(exc) from exc


def _as_sync_error(exc: OSError) -> SyncError:
    """``exc`` as a SyncError that reads as it did: the same errno, text and file names."""
    if exc.errno is None or exc.strerror is None:
        return SyncError(*exc.args)
    return SyncError(exc.errno, exc.strerror, exc.filename, None, exc.filename2)


def write_new(fs: FileSystem, path: str, data: bytes | memoryview) -> None:
    """Create ``path`` (it must not exist), write ``data``, fsync. The name is not yet durable."""
    f = fs.open_write(path, create=True)
    try:
        write_all(f, data, 0)
        f.fsync()
    finally:
        f.close()


def write_atomic(fs: FileSystem, path: str, data: bytes | memoryview, tmp_path: str | None = None) -> None:
    """Temp file, fsync, rename, directory fsync: ``path`` is the old file or the new one, whole.

    A temp file left by a crash before its rename is never trusted or renamed: it is replaced.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = tmp_path if tmp_path is not None else path + ".tmp"
    if fs.exists(tmp):
        fs.unlink(tmp)
    write_new(fs, tmp, data)
    fs.rename(tmp, path)
    fs.fsync_dir(directory)


READ_CHUNK_BYTES = 1 << 20  # read_all's reads after the first, for a file still growing
# The most one pread asks for. Linux returns at most 0x7ffff000 bytes a call whatever is asked
# (a longer read comes back short), so every read loops; this keeps one call well under that.
READ_CALL_BYTES_MAX = 1 << 30


class UnexpectedEOFError(OSError):
    """A file ended before bytes a reader had to find there (it was cut, or changed, while it
    was read). An OSError (EIO), so it reaches a caller the way an I/O error does."""


def pread_upto(f: File, size: int, offset: int) -> bytes:
    """``size`` bytes of ``f`` from ``offset``, fewer only where the file ends (a short read is
    read on, never taken for the end). Each pread asks for at most READ_CALL_BYTES_MAX."""
    if size <= 0:
        return b""
    first = f.pread(min(size, READ_CALL_BYTES_MAX), offset)
    if len(first) == size or not first:
        return first
    parts = [first]
    got = len(first)
    while got < size:
        chunk = f.pread(min(size - got, READ_CALL_BYTES_MAX), offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def pread_exact(f: File, size: int, offset: int) -> bytes:
    """``size`` bytes of ``f`` from ``offset``; UnexpectedEOFError if the file ends before."""
    data = pread_upto(f, size, offset)
    if len(data) != size:
        raise UnexpectedEOFError(
            errno.EIO,
            f"the file ends at offset {offset + len(data)}, inside the {size} bytes read from offset {offset}; "
            "it was cut or replaced while it was read",
            f.path,
        )
    return data


def pread_into(f: File, buf: memoryview, offset: int) -> int:
    """Fill ``buf`` with the bytes of ``f`` from ``offset``; the count read, less only where the
    file ends (short reads are read on). On a plain OsFile one preadv a call, into ``buf``; on
    any other file (the crash simulator's, a fault injector's, one whose ``pread`` is wrapped)
    through its own ``pread``, so whatever wraps it sees every read."""
    direct = f if type(f) is OsFile and "pread" not in f.__dict__ else None
    size = len(buf)
    got = 0
    while got < size:
        want = min(size - got, READ_CALL_BYTES_MAX)
        if direct is not None:
            n = direct.preadinto(buf[got : got + want], offset + got)
        else:
            data = f.pread(want, offset + got)
            n = len(data)
            buf[got : got + n] = data
        if n <= 0:
            break
        got += n
    return got


def data_from(f: File, offset: int) -> int:
    """The first offset at or after ``offset`` that may hold a byte other than zero: past a hole
    (a sparse file's unwritten range, which reads as zeros) where the file layer can tell
    (``seek_data``: SEEK_DATA on a real file), else ``offset`` itself. At or past the end of
    the data: the file's size, or more. Lets a reader skip the holes of a sparse file without
    reading them; a layer without ``seek_data`` (journal.crashsim.memfs) has them read."""
    seek = getattr(f, "seek_data", None)
    if seek is None:
        return offset
    found: int = seek(offset)
    return max(found, offset)


def hole_from(f: File, offset: int) -> int | None:
    """The first offset at or after ``offset`` that is in a hole (or the end of the file), where
    the file layer can tell (``seek_hole``: SEEK_HOLE on a real file); None where it cannot. With
    ``data_from``, where the data of a sparse file begins and ends, so a reader reads only that."""
    seek = getattr(f, "seek_hole", None)
    if seek is None:
        return None
    found: int = seek(offset)
    return max(found, offset)


def read_all(f: File) -> bytes:
    """Every byte of ``f`` from offset 0 to its end, through ``pread``. Like ``read()`` on a new
    file object it reads until a read returns nothing, so a file that a writer grows or cuts
    while it is read is read to where it ends then, not to the size it had before. For files
    whose whole content the caller needs in memory (the caller bounds their size)."""
    chunks: list[bytes] = []
    offset = 0
    want = min(max(f.size(), 1), READ_CALL_BYTES_MAX)  # one read when the file does not change meanwhile
    while True:
        chunk = f.pread(want, offset)
        if not chunk:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)
        want = READ_CHUNK_BYTES


def read_file(fs: FileSystem, path: str) -> bytes:
    """The whole file at ``path``, read through ``fs`` (open_read, pread, close)."""
    f = fs.open_read(path)
    try:
        return read_all(f)
    finally:
        f.close()


# The calls remove_tree makes one by one through a file layer. An OsFileSystem that replaces
# none of them walks by directory descriptors instead (OsFileSystem.remove_tree); one that does
# (a test's hooks) is walked through its own methods, so whatever wraps them sees every call.
_WALK_CALLS = ("listdir", "unlink", "rmdir", "is_dir", "is_link", "remove_tree")


def _walks_by_descriptor(fs: FileSystem) -> TypeGuard[OsFileSystem]:
    return isinstance(fs, OsFileSystem) and all(
        getattr(type(fs), name) is getattr(OsFileSystem, name) and name not in vars(fs) for name in _WALK_CALLS
    )


def remove_tree(fs: FileSystem, path: str) -> None:
    """Remove the directory ``path`` and everything in it, through ``fs``: files by ``unlink``,
    directories by the file layer's ``rmdir`` where it has one (a layer without it keeps the
    emptied directories). Raises the first OSError; what was removed by then stays removed.
    Used for what was never published (a temporary build directory) or is superseded.

    A symbolic link, anywhere in the tree or at ``path`` itself, is unlinked, never followed:
    what it points to is left as it is. On a real file system the walk goes by directory
    descriptors, so a directory swapped for a link while it runs is not followed either."""
    if _walks_by_descriptor(fs):
        fs.remove_tree(path)
        return
    if fs.is_link(path):
        fs.unlink(path)
        return
    for name in fs.listdir(path):
        child = os.path.join(path, name)
        if not fs.is_link(child) and fs.is_dir(child):
            remove_tree(fs, child)
        else:
            fs.unlink(child)
    rmdir = getattr(fs, "rmdir", None)
    if rmdir is not None:
        rmdir(path)


def follow_link(fs: FileSystem, path: str) -> str:
    """``path`` with a symbolic link at its end resolved (as the OS would): for a file the caller
    names (an import's source, a snapshot file), which may be a link. The file layer's opens
    follow none themselves."""
    return os.path.realpath(path) if fs.is_link(path) else path


def refuse_link(fs: FileSystem, path: str) -> str:
    """``path``, unless it is a symbolic link (UnexpectedLinkError): for a name the engine makes
    and then goes on using by its path (a directory it writes into, a file it trusts by name)."""
    if fs.is_link(path):
        raise UnexpectedLinkError(path)
    return path


def ensure_dir(fs: FileSystem, path: str) -> bool:
    """Make the directory ``path`` unless it is one; True if it was made here (not yet durable in
    its parent). A symbolic link there is refused (UnexpectedLinkError), never written through."""
    if fs.is_dir(refuse_link(fs, path)):
        return False
    try:
        fs.mkdir(path)
    except FileExistsError:
        # Made between the look and the mkdir by a concurrent creator (processes making one new
        # store at once): as good as made here, if it is a directory and not a link.
        if not fs.is_dir(refuse_link(fs, path)):
            raise
        return False
    return True


def make_dirs(fs: FileSystem, path: str) -> None:
    """Like mkdir -p, each new directory made durable in its parent: synced whether it was made
    here or by a concurrent creator that may not have synced it yet (ensure_dir takes one made
    meanwhile), so what is built in it next never stands on a name that a power loss can undo."""
    missing = []
    d = os.path.abspath(path)
    while not fs.exists(d):
        missing.append(d)
        d = os.path.dirname(d)
    for d in reversed(missing):
        ensure_dir(fs, d)
        fs.fsync_dir(os.path.dirname(d))


def temp_dir_beside(fs: FileSystem, dest: str, tag: str, lock_name: str) -> str:
    """An empty directory beside ``dest`` to build it in (``.<name>.<tag>-<random>``: a dot name,
    so nothing lists it), for ``publish_dir`` to rename into place once it is whole.

    Leftovers of earlier runs for the same ``dest`` that failed or crashed are removed first,
    unless a process still holds the lock file ``lock_name`` in one (a run building it now).
    ``dest`` is the caller's: a link there is followed, and the build is made beside its target.
    """
    dest = os.path.abspath(follow_link(fs, dest))
    parent, name = os.path.split(dest)
    make_dirs(fs, parent)
    prefix = f".{name}.{tag}-"
    for stale in fs.listdir(parent):
        path = os.path.join(parent, stale)
        # A build is a directory made here: a link of that name (planted where others can write,
        # /tmp say) is no build of ours, and is neither followed nor removed.
        if not stale.startswith(prefix) or fs.is_link(path) or not fs.is_dir(path):
            continue
        lock_path = os.path.join(path, lock_name)
        # A build's lock is a file its maker made: a link there holds no lock, so the leftover
        # is removed like any other (remove_tree unlinks the link itself).
        held = fs.exists(lock_path) and not fs.is_link(lock_path)
        lock = fs.try_lock(lock_path) if held else None
        if held and lock is None:
            continue  # being built right now
        try:
            remove_tree(fs, path)
        finally:
            if lock is not None:
                lock.release()
    tmp = os.path.join(parent, prefix + os.urandom(4).hex())
    fs.mkdir(tmp)
    return tmp


def publish_dir(fs: FileSystem, tmp: str, dest: str) -> None:
    """Rename the directory ``tmp`` (built whole) to ``dest`` (absent, or an empty directory,
    which the rename replaces) and make the rename durable (its parent directory's fsync).

    If that fsync fails, the rename is taken back (and an empty ``dest`` made again), so that a
    failed publish leaves what was there before and ``tmp`` for its caller to remove. A link at
    ``dest`` is followed, as ``temp_dir_beside`` follows it: ``tmp`` replaces its target.
    """
    dest = follow_link(fs, dest)
    parent = os.path.dirname(os.path.abspath(dest))
    was_dir = fs.exists(dest)
    fs.rename(tmp, dest)
    try:
        fs.fsync_dir(parent)
    except OSError:
        try:
            fs.rename(dest, tmp)
            if was_dir:
                fs.mkdir(dest)
        except OSError:
            pass  # dest keeps the whole copy; the error says the publish failed
        raise


def discard_dir(fs: FileSystem, tmp: str) -> str | None:
    """Remove a build directory that was not published; its path if that failed too (the
    caller's error names it, so nothing is left behind unsaid)."""
    if not fs.exists(tmp):
        return None  # renamed into place: the failure came after (the rename's directory fsync)
    try:
        remove_tree(fs, tmp)
    except OSError:
        return tmp
    return None
