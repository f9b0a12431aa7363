"""The artifact store: large evidence (stdout, diffs, model-input snapshots) kept beside the log.

The event log keeps the index, causes and boundaries; an artifact keeps the bulky material, and
the event references it as ``artifact://<sha256 hex>`` (seed 000, sections 7 and 10). A blob is
named by the SHA-256 of its content, so the same bytes are stored once and a reference can be
checked: every read decompresses and hashes the blob and refuses one that does not match
(ArtifactCorruptError), rather than hand back evidence that was changed or damaged.

Layout under the store's directory::

    <hh>/<sha256 hex>.zst      zstd frame (with its own content checksum) of the content
    tmp/                       blobs being written: fsync'd, then renamed into place

A blob is written to ``tmp/``, fsync'd, renamed to its name and the directory fsync'd, so a
name always holds a whole blob. Garbage collection deletes blobs that no event references,
except ones younger than a grace period, which a writer may have stored and not referenced yet.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import zstandard

from journal.api import Journal
from journal.fs import FileSystem, OsFileSystem, read_all, refuse_link, write_atomic
from journal.record import zstd_declared_size
from journal.session.errors import SessionError

SCHEME = "artifact://"
REF_RE = re.compile(r"artifact://([0-9a-f]{64})")
BLOB_SUFFIX = ".zst"
TMP_DIR = "tmp"
ZSTD_LEVEL = 3
ARTIFACT_BYTES_MAX = 1 << 32  # what one read may decompress to
ARTIFACT_READ_CHUNK_BYTES = 1 << 20  # a blob without a declared size is decoded this much at a time
PREVIEW_BYTES_DEFAULT = 2048  # what an event keeps of an output it moved here
INLINE_BYTES_MAX_DEFAULT = 8192  # outputs up to this size stay in the event
GC_GRACE_S_DEFAULT = 3600.0


class ArtifactError(SessionError):
    """Base class of the artifact store's errors."""


class ArtifactMissingError(ArtifactError):
    def __init__(self, ref: str) -> None:
        super().__init__(f"{ref} is not in the artifact store; the evidence it names is gone")
        self.ref = ref


class ArtifactCorruptError(ArtifactError):
    """A blob whose content does not hash to its name: never returned."""

    def __init__(self, ref: str, why: str) -> None:
        super().__init__(f"{ref} is damaged ({why}); it is not returned. Restore it from a backup or drop it")
        self.ref = ref
        self.why = why


def digest_of(ref: str) -> str:
    """The hex digest of ``artifact://<hex>`` (or of a bare hex digest); ValueError otherwise."""
    m = REF_RE.fullmatch(ref) or REF_RE.fullmatch(SCHEME + ref)
    if m is None:
        raise ValueError(f"{ref!r} is not an artifact reference (artifact://<64 hex digits>)")
    return m.group(1)


def refs_in(value: Any) -> Iterator[str]:
    """Every artifact reference in a JSON value (an event), wherever it sits."""
    if isinstance(value, str):
        if SCHEME in value:
            yield from (SCHEME + m for m in REF_RE.findall(value))
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from refs_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from refs_in(v)


def references(journals: Iterable[Journal]) -> set[str]:
    """The artifact references of every event in ``journals`` (reads them whole)."""
    out: set[str] = set()
    for j in journals:
        for rec in j.read():
            if not rec.is_bytes and SCHEME.encode() in rec.payload:
                out.update(refs_in(rec.event))
    return out


@dataclass(frozen=True)
class ArtifactInfo:
    ref: str
    stored_bytes: int
    mtime: float


def _decompressed(ref: str, packed: bytes) -> bytes:
    """The content of blob ``packed``, at most ARTIFACT_BYTES_MAX bytes of it.

    Its zstd header declares its size (``put`` writes it), and zstandard's one-call decompress
    allocates a declared size whole, however few bytes hold it: one over the limit is refused
    at once, and the blob is decoded a chunk at a time, so what a read takes is what the blob
    really holds, never what its header claims."""
    try:
        declared = zstd_declared_size(packed)
    except ValueError as exc:
        raise ArtifactCorruptError(ref, f"does not decompress: {exc}") from None
    if declared is not None and declared > ARTIFACT_BYTES_MAX:
        raise ArtifactCorruptError(ref, f"its zstd header declares {declared} bytes, over {ARTIFACT_BYTES_MAX}")
    out = io.BytesIO()
    try:
        with zstandard.ZstdDecompressor().stream_reader(packed) as reader:
            while chunk := reader.read(ARTIFACT_READ_CHUNK_BYTES):
                if out.tell() + len(chunk) > ARTIFACT_BYTES_MAX:
                    raise ArtifactCorruptError(ref, f"decompresses to more than {ARTIFACT_BYTES_MAX} bytes")
                out.write(chunk)
    except zstandard.ZstdError as exc:
        raise ArtifactCorruptError(ref, f"does not decompress: {exc}") from None
    if declared is not None and out.tell() != declared:
        raise ArtifactCorruptError(ref, f"decompresses to {out.tell()} bytes, its zstd header says {declared}")
    return out.getvalue()


class ArtifactStore:
    """Content-addressed, compressed, verified blobs in one directory (created 0700)."""

    def __init__(self, path: str | os.PathLike[str], fs: FileSystem | None = None) -> None:
        self.path = os.fspath(path)
        self.fs = fs or OsFileSystem()
        # Names this store has made durable itself (a directory fsync'd after them). A name that
        # exists may not be durable yet: a call that made it and then failed to fsync its
        # directory left it so, and a retry must not take its existence for durability.
        self._durable: set[str] = set()
        for d in (self.path, os.path.join(self.path, TMP_DIR)):
            self._durable_dir(d)

    def _durable_dir(self, d: str) -> None:
        """Make directory ``d`` if needed and its entry durable, once per store object."""
        if d in self._durable:
            return
        if d != self.path:  # a shard or tmp/, made here: a link is refused, never written through
            refuse_link(self.fs, d)
        if not self.fs.exists(d):
            self.fs.mkdir(d)
        self.fs.fsync_dir(os.path.dirname(os.path.abspath(d)))
        self._durable.add(d)

    def _blob(self, digest: str) -> str:
        return os.path.join(self.path, digest[:2], digest + BLOB_SUFFIX)

    def put(self, data: bytes) -> str:
        """Store ``data`` durably (once per content) and return its ``artifact://`` reference."""
        digest = hashlib.sha256(data).hexdigest()
        ref = SCHEME + digest
        final = self._blob(digest)
        shard = os.path.dirname(final)
        if self.fs.exists(final):
            if final not in self._durable:  # stored by an earlier call, maybe one that failed
                self._durable_dir(shard)
                self.fs.fsync_dir(shard)
                self._durable.add(final)
            return ref
        packed = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True).compress(data)
        self._durable_dir(shard)
        tmp = os.path.join(self.path, TMP_DIR, f"{digest}.{uuid.uuid4().hex[:8]}")
        write_atomic(self.fs, final, packed, tmp)
        self._durable.add(final)
        return ref

    def get(self, ref: str) -> bytes:
        """The content of ``ref``, verified against its hash. Raises ArtifactMissing/CorruptError."""
        digest = digest_of(ref)
        ref = SCHEME + digest
        try:
            f = self.fs.open_read(self._blob(digest))
        except FileNotFoundError:
            raise ArtifactMissingError(ref) from None
        try:
            packed = read_all(f)  # reads on past a short read (a pread returns at most 2 GiB)
        finally:
            f.close()
        data = _decompressed(ref, packed)
        if hashlib.sha256(data).hexdigest() != digest:
            raise ArtifactCorruptError(ref, "content does not match its hash")
        return data

    def exists(self, ref: str) -> bool:
        return self.fs.exists(self._blob(digest_of(ref)))

    def missing(self, refs: Iterable[str], verify: bool = False) -> builtins.list[str]:
        """The refs that are absent (or, with ``verify``, fail their hash): for the resume gate."""
        out = []
        for ref in sorted(set(refs)):
            if not self.exists(ref):
                out.append(ref)
            elif verify:
                try:
                    self.get(ref)
                except ArtifactError:
                    out.append(ref)
        return out

    def list(self) -> list[ArtifactInfo]:
        out = []
        for shard in self.fs.listdir(self.path):
            if len(shard) != 2:  # the shards are two hex digits; tmp/ is not one
                continue
            for name in self.fs.listdir(os.path.join(self.path, shard)):
                digest = name.removesuffix(BLOB_SUFFIX)
                if not name.endswith(BLOB_SUFFIX) or not REF_RE.fullmatch(SCHEME + digest):
                    continue
                st = os.stat(os.path.join(self.path, shard, name)) if isinstance(self.fs, OsFileSystem) else None
                out.append(ArtifactInfo(SCHEME + digest, st.st_size if st else 0, st.st_mtime if st else 0.0))
        return out

    def gc(self, referenced: Iterable[str], grace_s: float = GC_GRACE_S_DEFAULT) -> builtins.list[str]:
        """Delete blobs not in ``referenced`` and older than ``grace_s``; return what was deleted."""
        keep = {SCHEME + digest_of(r) for r in referenced}
        now = time.time()
        dropped = []
        touched: set[str] = set()
        for info in self.list():
            if info.ref in keep or now - info.mtime < grace_s:
                continue
            path = self._blob(digest_of(info.ref))
            self.fs.unlink(path)
            touched.add(os.path.dirname(path))
            dropped.append(info.ref)
        for d in sorted(touched):
            self.fs.fsync_dir(d)
        tmp = os.path.join(self.path, TMP_DIR)
        for name in self.fs.listdir(tmp):  # leftovers of writes that crashed before their rename
            p = os.path.join(tmp, name)
            if isinstance(self.fs, OsFileSystem) and now - os.stat(p).st_mtime >= grace_s:
                self.fs.unlink(p)
        return dropped

    def offload(
        self,
        output: str | bytes,
        inline_bytes_max: int = INLINE_BYTES_MAX_DEFAULT,
        preview_bytes: int = PREVIEW_BYTES_DEFAULT,
    ) -> dict[str, Any]:
        """Fields for an event carrying ``output``: inline when small, else a bounded preview
        plus ``outputRef`` (the full output here), ``outputBytes`` and ``truncated``."""
        raw = output.encode("utf-8") if isinstance(output, str) else bytes(output)
        if len(raw) <= inline_bytes_max and isinstance(output, str):
            return {"output": output}
        ref = self.put(raw)
        preview = raw[:preview_bytes].decode("utf-8", "ignore")
        return {"output": preview, "outputRef": ref, "outputBytes": len(raw), "truncated": True}
