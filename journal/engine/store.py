"""A directory of journals: the file engine's ``journal.api.Store``.

    store = DirectoryStore("sessions/")
    with store.open("t-42", create=True) as j: ...

Each journal is the directory ``<root>/<name>``. Every change to the set of journals is one
rename, fsync'd, so a crash leaves each journal whole or absent:

- create: the journal is made in a dot-named directory beside its place (``temp_dir_beside``:
  never listed, removed by the next maker if a crash left it) and renamed in once it is whole;
- delete: the directory is renamed into ``<root>/.trash/`` (the commit point), then removed;
  what a crash leaves in ``.trash`` is removed by the next store opened on the root;
- copy: the target is built beside its place by ``copy_prefix`` (sealed segments hard-linked,
  shared rather than copied; only the live segment's records copied), the records to append
  are appended there, and it is renamed in whole.

Names are checked by ``check_store_name`` (journal.api.Store says which are allowed): a name is
one path component that no escaping can turn into ``..``, a dot file or a path.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from typing import Any, Final

from journal.api import LOCK_FILE, Committed, Journal
from journal.engine.core import Journal as FileJournal
from journal.engine.segment import list_segments
from journal.errors import InvalidArgumentError, JournalError, JournalIOError, JournalLockedError, JournalNotFoundError
from journal.fs import (
    FileSystem,
    OsFileSystem,
    make_dirs,
    publish_dir,
    refuse_link,
    remove_tree,
    take_lock,
    temp_dir_beside,
)

TRASH_DIR: Final = ".trash"
NAME_BYTES_MAX: Final = 200
_NAME: Final = re.compile(r"[A-Za-z0-9_%-][A-Za-z0-9._%-]*")


def check_upto(where: str, first_seq: int, last_seq: int, upto_seq: int | None) -> int:
    """The last seq a copy of a journal holding ``first_seq..last_seq`` takes (``Store.copy``)."""
    if upto_seq is None:
        return last_seq
    if not isinstance(upto_seq, int) or isinstance(upto_seq, bool):
        raise InvalidArgumentError(f"upto_seq must be an int, not {upto_seq!r}")
    if upto_seq > last_seq:
        raise ValueError(f"{where} ends at seq {last_seq}, before seq {upto_seq}: nothing was copied")
    if upto_seq < first_seq - 1:
        raise ValueError(f"{where} begins at seq {first_seq} (a prefix was dropped) and no longer holds seq "
                         f"{upto_seq}: nothing was copied")
    return upto_seq


def append_whole(j: Journal, events: list[Any], where: str) -> None:
    """Append ``events`` to a copy being built, at "sync", and close it; any other outcome than
    Committed for each raises, and the caller drops the build."""
    with j:
        outs = j.append_many(events, durability="sync") if events else []
    failed = [o for o in outs if not isinstance(o, Committed)]
    if failed:
        raise JournalError(f"{where}: the records appended to its copy were not written ({failed[0]}); nothing "
                           "was copied, try again")


def check_store_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name.encode()) > NAME_BYTES_MAX:
        raise InvalidArgumentError(
            f"a journal name in a store is 1 to {NAME_BYTES_MAX} characters of [A-Za-z0-9._%-], not starting "
            f"with '.', not {name!r}: escape other ids first (the adapters do)"
        )
    return name


class DirectoryStore:
    """Journals as directories under ``root``, made with the first journal (a store only read
    writes nothing). See the module doc."""

    def __init__(self, root: str | os.PathLike[str], fs: FileSystem | None = None) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._fs = fs or OsFileSystem()
        self._empty_trash()

    @property
    def location(self) -> str:
        return self.root

    def path_of(self, name: str) -> str:
        return os.path.join(self.root, check_store_name(name))

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
        where = self.path_of(name)
        if create and not readonly and not self._fs.exists(where):
            make_dirs(self._fs, self.root)
            tmp = temp_dir_beside(self._fs, where, "new", LOCK_FILE)
            # The build's journal stays open, its lock held, until it is renamed in: another
            # maker of the same name (temp_dir_beside) removes only builds nobody holds.
            build = FileJournal.open(tmp, create=True, fs=self._fs, **options)
            try:
                publish_dir(self._fs, tmp, where)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                # made at the same moment by another opener: it is whole; open it below
            finally:
                build.close()
                if self._fs.exists(tmp):
                    remove_tree(self._fs, tmp)
        return FileJournal.open(refuse_link(self._fs, where), readonly=readonly, fs=self._fs, **options)

    def exists(self, name: str) -> bool:
        where = self.path_of(name)
        try:
            return not self._fs.is_link(where) and self._fs.is_dir(where) and bool(list_segments(self._fs, where))
        except JournalError:
            raise
        except OSError as exc:  # "cannot tell" is not "no": typed, with the path
            raise JournalIOError(where, exc, "looking at") from exc

    def names(self) -> list[str]:
        try:
            if not self._fs.exists(self.root):
                return []
            out = []
            for name in sorted(self._fs.listdir(self.root)):
                if name.startswith(".") or not _NAME.fullmatch(name):
                    continue
                path = os.path.join(self.root, name)
                if not self._fs.is_link(path) and self._fs.is_dir(path):  # a link is no journal of the store's
                    out.append(name)
            return out
        except OSError as exc:
            raise JournalIOError(self.root, exc, "listing") from exc

    def delete(self, name: str) -> None:
        where = self.path_of(name)
        if not self._fs.exists(where):
            return
        if self._fs.is_link(where):  # not a journal the store made: the name goes, what it points to stays
            self._fs.unlink(where)
            self._fs.fsync_dir(self.root)
            return
        # The journal's writer lock is held from before the rename until its files are gone: a
        # journal open for writing (here or in another process) is refused, never deleted
        # under its writer, and nobody opens it for writing meanwhile.
        lock_path = os.path.join(where, LOCK_FILE)
        lock = self._fs.try_lock(lock_path)
        if lock is None:
            raise JournalLockedError(where, self._fs.read_lock_owner(lock_path))
        try:
            trash = self._trash()
            make_dirs(self._fs, trash)
            dead = os.path.join(trash, f"{name}.{os.urandom(4).hex()}")
            self._fs.rename(where, dead)
            self._fs.fsync_dir(self.root)
            self._fs.fsync_dir(trash)
            remove_tree(self._fs, dead)
        finally:
            lock.release()

    def copy(
        self, source: str, target: str, *, upto_seq: int | None = None, append: Sequence[Any] = ()
    ) -> None:
        src, dst = refuse_link(self._fs, self.path_of(source)), refuse_link(self._fs, self.path_of(target))
        if self._fs.exists(dst):
            raise FileExistsError(f"journal {target!r} exists in {self.root}; delete it before copying onto it")
        if not self.exists(source):
            raise JournalNotFoundError(src)
        tmp = temp_dir_beside(self._fs, dst, "copy", LOCK_FILE)
        # Held until the rename: another copy or maker of the same name leaves this build alone.
        lock = take_lock(self._fs, os.path.join(tmp, LOCK_FILE), 0.0)
        try:
            empty_from: int | None = None
            with FileJournal.open(src, readonly=True, fs=self._fs) as j:
                upto = check_upto(src, j.first_seq, j.last_seq, upto_seq)
                if upto >= j.first_seq:
                    j.copy_prefix(tmp, upto)
                else:  # no record: an empty journal of its own, beginning where the source does
                    empty_from = j.first_seq
            if append or empty_from is not None:
                # The build's lock passes to the writer that makes the journal or adds the records:
                # it takes the same lock file, so a concurrent build of this name still sees it held.
                if lock is not None:
                    lock.release()
                    lock = None
                w = FileJournal.open(tmp, create=empty_from is not None, fs=self._fs, first_seq=empty_from or 1,
                                     reserve_bytes=0)
                append_whole(w, list(append), src)
            publish_dir(self._fs, tmp, dst)
        finally:
            if lock is not None:
                lock.release()
            if self._fs.exists(tmp):
                remove_tree(self._fs, tmp)

    def _trash(self) -> str:
        """``<root>/.trash``, where a symbolic link is no trash of the store's: the link alone is
        removed (a deletion renamed into it, or emptying it, would reach what it points to)."""
        trash = os.path.join(self.root, TRASH_DIR)
        if self._fs.is_link(trash):
            self._fs.unlink(trash)
            self._fs.fsync_dir(self.root)
        return trash

    def _empty_trash(self) -> None:
        trash = self._trash()
        if self._fs.exists(trash):
            for name in self._fs.listdir(trash):
                remove_tree(self._fs, os.path.join(trash, name))  # a link in it goes itself, never its target
