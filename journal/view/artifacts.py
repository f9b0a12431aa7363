"""The viewer's read-only, verified reading of a session store's artifact store.

Events reference bulky evidence as ``artifact://<sha256 hex>`` (journal/session/artifacts.py).
The session layer's ArtifactStore makes its directories when it is opened, so the viewer, which
changes no byte of what it shows, reads the same layout itself (``<store>/artifacts/<hh>/<hex>.zst``)
with the same refusals: a symbolic link at the artifacts directory, a shard or a blob is refused,
never followed (the blob is opened O_NOFOLLOW by the file layer), and every read decompresses the
blob a chunk at a time and hashes what it decodes. A blob whose content does not hash to its name
(or does not decompress, or decodes past the session layer's limit) is *damaged*: its reason is
shown, its bytes never are.

Only a 64-hex digest (``DIGEST_RE``) reaches a path here; the caller checks it first and this
module checks it again.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, cast

import zstandard

from journal.errors import UnexpectedFileError, UnexpectedLinkError
from journal.fs import File, OsFile, OsFileSystem, refuse_link
from journal.record import zstd_declared_size
from journal.session.artifacts import ARTIFACT_BYTES_MAX, ARTIFACT_READ_CHUNK_BYTES, BLOB_SUFFIX, SCHEME
from journal.session.store import ARTIFACTS_DIR

DIGEST_RE = re.compile(r"[0-9a-f]{64}")
ZSTD_HEADER_BYTES_MAX = 18  # a zstd frame header is at most this long: enough to read its declared size
VERDICTS_MAX = 4096  # blobs whose verdict is kept (keyed by the blob's inode, size and mtime)

VERIFIED, DAMAGED, MISSING, REFUSED, UNAVAILABLE = "verified", "damaged", "missing", "refused", "unavailable"


@dataclass(frozen=True)
class Verdict:
    """What reading a blob whole found. ``size`` (bytes of content) and ``text`` (the content is
    UTF-8) are known only when it is verified."""

    state: str
    why: str = ""
    size: int | None = None
    text: bool = False

    def badge(self) -> str:
        if self.state == VERIFIED:
            return "artifact verified"
        if self.state == MISSING:
            return "artifact missing"
        if self.state == UNAVAILABLE:
            return "artifact not available here"
        return f"artifact {self.state}: {self.why}"

    def to_json(self) -> dict[str, object]:
        return {"state": self.state, "why": self.why, "size": self.size, "text": self.text, "badge": self.badge()}


class _Reader:
    """A File read front to back, as zstandard's stream reader wants (``read(n)``)."""

    def __init__(self, f: File) -> None:
        self.f = f
        self.offset = 0

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = ARTIFACT_READ_CHUNK_BYTES
        got = self.f.pread(n, self.offset)
        self.offset += len(got)
        return got


class ArtifactReader:
    """The artifact store of the session store at ``root``; ``root`` None: the source has none
    (a single journal, a server store), and every reference is "not available here"."""

    def __init__(self, root: str | None, where: str = "") -> None:
        self.root = root
        self.where = where  # what the source is, for the "not available here" reason
        self.fs = OsFileSystem()
        self._lock = threading.Lock()
        self._verdicts: OrderedDict[str, tuple[tuple[int, int, int], Verdict]] = OrderedDict()

    @property
    def available(self) -> bool:
        return self.root is not None

    def _blob(self, digest: str) -> str:
        """The blob's path, every directory on the way checked for a link (refused)."""
        if not DIGEST_RE.fullmatch(digest):
            raise ValueError(f"{digest[:80]!r} is not an artifact digest (64 lowercase hex digits)")
        assert self.root is not None
        top = refuse_link(self.fs, os.path.join(self.root, ARTIFACTS_DIR))
        shard = refuse_link(self.fs, os.path.join(top, digest[:2]))
        return os.path.join(shard, digest + BLOB_SUFFIX)

    def _name(self, path: str) -> str:
        """``path`` as the store names it (from its root), for a reason shown on a page."""
        assert self.root is not None
        return os.path.relpath(path, self.root)

    def _stat_key(self, path: str) -> tuple[int, int, int] | None:
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def cached(self, digest: str) -> Verdict | None:
        """The verdict of an earlier read, if the blob looks the same now (one lstat); else None."""
        if self.root is None:
            return Verdict(UNAVAILABLE, f"{self.where} has no artifact store")
        try:
            path = self._blob(digest)
        except (UnexpectedLinkError, ValueError):
            return None
        key = self._stat_key(path)
        with self._lock:
            got = self._verdicts.get(digest)
        return got[1] if got is not None and key is not None and got[0] == key else None

    def check(self, digest: str, window: tuple[int, int] | None = None,
              sink: Callable[[bytes], object] | None = None) -> tuple[Verdict, bytes]:
        """Read the blob whole, decompressing and hashing: its verdict and the content bytes in
        ``window`` (offset, length), which are evidence only when the verdict is VERIFIED. Each
        decoded chunk also goes to ``sink`` (a download), which the caller must discard unless
        the verdict is VERIFIED."""
        if self.root is None:
            return Verdict(UNAVAILABLE, f"{self.where} has no artifact store"), b""
        try:
            path = self._blob(digest)
            f = self.fs.open_read(path)
        except ValueError as exc:
            return Verdict(REFUSED, str(exc)), b""
        except UnexpectedLinkError as exc:
            return Verdict(REFUSED, f"{self._name(exc.path)} is a symbolic link; the viewer never follows one"), b""
        except UnexpectedFileError as exc:
            return Verdict(REFUSED, f"{self._name(exc.path)} is {exc.kind}, not a blob"), b""
        except IsADirectoryError:
            return Verdict(REFUSED, f"{self._name(path)} is a directory, not a blob"), b""
        except (FileNotFoundError, NotADirectoryError):
            return Verdict(MISSING, f"{SCHEME}{digest} is not in the artifact store"), b""
        try:
            st = os.fstat(f.fileno()) if isinstance(f, OsFile) else None
            key = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else (-1, -1, -1)
            verdict, shown = _verify(digest, f, window, sink)
        finally:
            f.close()
        with self._lock:
            self._verdicts[digest] = (key, verdict)
            self._verdicts.move_to_end(digest)
            while len(self._verdicts) > VERDICTS_MAX:
                self._verdicts.popitem(last=False)
        return verdict, shown


def _verify(digest: str, f: File, window: tuple[int, int] | None,
            sink: Callable[[bytes], object] | None) -> tuple[Verdict, bytes]:
    """The session layer's checks on a blob (declared size bounded, decoded size bounded and equal
    to the declared one, SHA-256 equal to the name), a chunk at a time."""
    try:
        declared = zstd_declared_size(f.pread(ZSTD_HEADER_BYTES_MAX, 0))
    except ValueError as exc:
        return Verdict(DAMAGED, f"does not decompress: {exc}"), b""
    if declared is not None and declared > ARTIFACT_BYTES_MAX:
        return Verdict(DAMAGED, f"its zstd header declares {declared} bytes, over {ARTIFACT_BYTES_MAX}"), b""
    h = hashlib.sha256()
    utf8 = codecs.getincrementaldecoder("utf-8")()
    text = True
    size = 0
    lo, hi = (window[0], window[0] + window[1]) if window else (0, 0)
    shown = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], _Reader(f))) as reader:
            while chunk := reader.read(ARTIFACT_READ_CHUNK_BYTES):
                if size + len(chunk) > ARTIFACT_BYTES_MAX:
                    return Verdict(DAMAGED, f"decompresses to more than {ARTIFACT_BYTES_MAX} bytes"), b""
                h.update(chunk)
                if text:
                    try:
                        utf8.decode(chunk)
                    except UnicodeDecodeError:
                        text = False
                if hi > size and lo < size + len(chunk):
                    shown += chunk[max(0, lo - size): hi - size]
                if sink is not None:
                    sink(chunk)
                size += len(chunk)
    except zstandard.ZstdError as exc:
        return Verdict(DAMAGED, f"does not decompress: {exc}"), b""
    if text:
        try:
            utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            text = False
    if declared is not None and size != declared:
        return Verdict(DAMAGED, f"decompresses to {size} bytes, its zstd header says {declared}"), b""
    if h.hexdigest() != digest:
        return Verdict(DAMAGED, "its content does not match its hash"), b""
    return Verdict(VERIFIED, "", size, text), bytes(shown)
