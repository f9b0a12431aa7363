"""Hostile files: a structure-aware fuzzer over whole journal directories (docs/CRASH-TESTING.md).

Every byte a reader takes from disk may have been crafted. The scanners' fuzzing (fuzz/, the C
helper under sanitizers) feeds bytes to one function; this feeds whole journal directories to
every reader a user has, the way an attacker or a broken disk would:

* **Inputs** are made from real journals: the engine writes a few small ones (several segments,
  sealed ones with footers and indexes, a live one, block frames and single frames, compressed
  and not, keys, bytes records, a START marker after ``drop_prefix``, quarantine, a session, an
  import), normalised so that a seed always gives the same bytes (``build_bases``). A seed and
  an index choose a base and one to three mutations (``make_input``). Most mutations keep the
  frame checksums genuine while a field lies (lengths, counts, seqs, flags, codec, kind,
  dictionary id, block tables, footer counts, last seq, sparse index entries and offsets,
  segment header fields, start marker fields) or while the payload contradicts its flags (zstd
  with a lying declared content size, zstd bombs, not UTF-8, not JSON, nesting 100,000 deep,
  ints of 5,000 digits): the format's own encoders, with the segment's salt, so a lie reaches
  the parsing behind the checksum. The rest are what a disk or a careless copy does: byte
  flips, truncations, zeros, sparse holes, segments duplicated, removed, renamed, reordered.
* **Readers** (``Reader``, a table the caller gives: the engine's here, the command's in
  journal/cli/hostile_test.py) each run on a fresh copy of the input, in a long-lived worker
  process under a memory limit (``RLIMIT_AS``) with a wall-clock limit per run; a worker that
  hangs, dies or fails is replaced.
* **The oracle**: a reader's outcome is a result, a ``journal.JournalError`` with a message, or
  a command's documented exit code with its verdict; never another exception, a hang, a memory
  blow-up or a change outside the journal (and a read-only reader changes no byte of it). A
  writer (open for writing, ``repair``) may cut a tail only if the bytes were zeros or are in
  ``quarantine/``, and remove only what the format says it removes. Across readers: a journal
  that ``verify`` calls clean reads, opens and prints without error; a journal ``salvage`` or
  ``copy`` made verifies clean.

Failures are saved as JSON (the input's files, the reader, what went wrong) for
``journal hostile-test --replay FILE``, after being minimised (``minimize``: mutations, then
files, dropped while the failure stays the same).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import xxhash
import zstandard

from journal.engine import format as fmt
from journal.engine import live_hint

if TYPE_CHECKING:
    from journal.engine.core import Journal as EngineJournal

# --- limits ---------------------------------------------------------------------------------------

MEMORY_BYTES_DEFAULT = 768 * 1024 * 1024  # RLIMIT_AS of a worker: address space, not resident memory
RUN_TIMEOUT_S_DEFAULT = 10.0  # one reader on one input, wall clock
WORKER_START_TIMEOUT_S = 60.0  # imports, on a loaded machine
WORKER_RUNS_MAX = 2000  # a worker is replaced after this many runs, so a slow leak cannot add up
FOLLOW_IDLE_S = 0.05  # follow() ends after this long without a record
READ_RECORDS_MAX = 1_000_000  # a reader that yields more than this from a small input is a failure
SPARSE_BIG_BYTES = (2 << 30) + 8192  # a sparse hole just past 2 GiB (one read of a whole file fails there)
MINIMIZE_RUNS_MAX = 60  # worker runs one minimisation may spend
MINIMIZE_SECONDS_MAX = 60.0  # and time (a hang costs a whole run timeout per try)
SAVE_PER_SIGNATURE = 2  # failing inputs saved per distinct failure
WORK_TMPFS = "/dev/shm"
WORK_TMPFS_FREE_BYTES_MIN = 1 << 30

U16 = 0xFFFF
U32 = 0xFFFFFFFF
U64 = (1 << 64) - 1

# --- an input: a journal directory as values --------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A file (``data``, then zeros up to ``size``: a sparse hole) or a directory."""

    data: bytes = b""
    size: int = -1  # -1: len(data)
    is_dir: bool = False

    @property
    def length(self) -> int:
        return len(self.data) if self.size < 0 else self.size


Tree = dict[str, Entry]  # path relative to the journal directory ("quarantine/x.torn") -> entry


def read_tree(root: str) -> Tree:
    tree: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            tree[os.path.normpath(os.path.join(rel, d))] = Entry(is_dir=True)
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as f:
                tree[os.path.normpath(os.path.join(rel, name))] = Entry(f.read())
    return tree


def write_tree(tree: Tree, root: str) -> None:
    """Make ``root`` (which must not exist) hold ``tree``; holes stay sparse."""
    os.makedirs(root, mode=0o700)
    for rel in sorted(tree):
        e = tree[rel]
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if e.is_dir:
            os.makedirs(path, mode=0o700, exist_ok=True)
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(e.data)
            while view:
                view = view[os.write(fd, view) :]
            if e.size > len(e.data):
                os.ftruncate(fd, e.size)
        finally:
            os.close(fd)


def copy_tree(src: str, dst: str) -> None:
    """A copy of a directory whose holes stay holes (a sparse file of GiBs costs nothing)."""
    os.makedirs(dst, mode=0o700)
    for name in sorted(os.listdir(src)):
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s) and not os.path.islink(s):
            copy_tree(s, d)
        else:
            _copy_sparse(s, d)


def _copy_sparse(src: str, dst: str) -> None:
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        size = os.fstat(fi).st_size
        for start, end in _data_regions(fi, size):
            pos = start
            while pos < end:
                chunk = os.pread(fi, min(1 << 20, end - pos), pos)
                if not chunk:
                    break
                os.pwrite(fo, chunk, pos)
                pos += len(chunk)
        os.ftruncate(fo, size)
    finally:
        os.close(fi)
        os.close(fo)


def _data_regions(fd: int, size: int) -> Iterator[tuple[int, int]]:
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole after pos
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        pos = end


def fingerprint(root: str) -> dict[str, str]:
    """Every path under ``root`` with its kind, size and content hash (holes hashed as holes)."""
    out: dict[str, str] = {}
    if not os.path.lexists(root):
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            p = os.path.join(dirpath, d)
            out[os.path.normpath(os.path.join(rel, d))] = "link" if os.path.islink(p) else "dir"
        for name in filenames:
            p = os.path.join(dirpath, name)
            key = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(p):
                out[key] = "link -> " + os.readlink(p)
                continue
            h = xxhash.xxh64()
            fd = os.open(p, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                for start, end in _data_regions(fd, size):
                    h.update(struct.pack("<QQ", start, end))
                    pos = start
                    while pos < end:
                        chunk = os.pread(fd, min(1 << 20, end - pos), pos)
                        if not chunk:
                            break
                        h.update(chunk)
                        pos += len(chunk)
            finally:
                os.close(fd)
            out[key] = f"file {size} {h.hexdigest()}"
    return out


def tree_to_json(tree: Tree) -> dict[str, Any]:
    return {
        rel: {"dir": True} if e.is_dir else {"data": base64.b64encode(e.data).decode("ascii"), "size": e.length}
        for rel, e in sorted(tree.items())
    }


def tree_from_json(obj: Mapping[str, Any]) -> Tree:
    tree: Tree = {}
    for rel, v in obj.items():
        if v.get("dir"):
            tree[rel] = Entry(is_dir=True)
        else:
            data = base64.b64decode(v["data"])
            tree[rel] = Entry(data, int(v["size"]) if int(v["size"]) != len(data) else -1)
    return tree


# --- the format's encoders, without their checks: a field may lie, the checksum stays genuine ---------

_HEADER_BODY = struct.Struct("<8sHHI16sQQQ")
_FRAME_TAIL = struct.Struct("<IIQHHI")
_START_BODY = struct.Struct("<8sHHI16sQQ")
_SEAL_HEAD = struct.Struct("<QQQIII")


def pack_header(version: int, journal_id: bytes, number: int, base_seq: int, salt: int,
                header_size: int = fmt.SEGMENT_HEADER_SIZE_BYTES, flags: int = 0,
                magic: bytes = fmt.SEGMENT_MAGIC) -> bytes:
    body = _HEADER_BODY.pack(magic, version & U16, header_size & U16, flags & U32, journal_id,
                             number & U64, base_seq & U64, salt & U64)
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body, seed=0))


def pack_frame(seq: int, flags: int, raw_len: int, stored: bytes, salt: int, dict_id: int = 0,
               stored_len: int | None = None) -> bytes:
    """A frame whose checksum holds over its header and ``stored``, whatever its fields say."""
    n = len(stored) if stored_len is None else stored_len
    tail = _FRAME_TAIL.pack(n & U32, raw_len & U32, seq & U64, flags & U16, dict_id & U16, fmt.FRAME_MARKER) + stored
    return struct.pack("<Q", xxhash.xxh64_intdigest(tail, seed=salt & U64)) + tail


def reseal(data: bytearray, offset: int, salt: int) -> bool:
    """Make the checksum of the frame header at ``offset`` hold over the bytes its stored length
    names (False when they are not all there: the frame stays not genuine)."""
    if offset < 0 or offset + fmt.FRAME_HEADER_SIZE_BYTES > len(data):
        return False
    (stored_len,) = struct.unpack_from("<I", data, offset + 8)
    end = offset + fmt.FRAME_HEADER_SIZE_BYTES + stored_len
    if end > len(data):
        return False
    struct.pack_into("<Q", data, offset, xxhash.xxh64_intdigest(bytes(data[offset + 8 : end]), seed=salt & U64))
    return True


def pack_start(journal_id: bytes, number: int, first_seq: int, version: int = fmt.START_VERSION,
               size: int = fmt.START_SIZE_BYTES, flags: int = 0) -> bytes:
    body = _START_BODY.pack(fmt.START_MAGIC, version & U16, size & U16, flags & U32, journal_id, number & U64,
                            first_seq & U64)
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body, seed=0))


def pack_seal(count: int, first: int, last: int, interval: int, entries: Sequence[tuple[int, int]],
              keys: Sequence[tuple[int, bytes]], seal_offset: int, n_entries: int | None = None,
              n_keys: int | None = None) -> bytes:
    parts = [_SEAL_HEAD.pack(count & U64, first & U64, last & U64, interval & U32,
                             (len(entries) if n_entries is None else n_entries) & U32,
                             (len(keys) if n_keys is None else n_keys) & U32)]
    parts.extend(struct.pack("<QQ", s & U64, o & U64) for s, o in entries)
    parts.extend(struct.pack("<QB", s & U64, len(k) & 0xFF) + k for s, k in keys)
    parts.append(struct.pack("<Q", seal_offset & U64))
    return b"".join(parts)


@dataclass
class FrameModel:
    seq: int
    flags: int
    raw_len: int
    stored: bytes
    dict_id: int = 0

    @property
    def kind(self) -> int:
        return self.flags & fmt.FLAG_KIND_MASK

    @property
    def size(self) -> int:
        return fmt.FRAME_HEADER_SIZE_BYTES + len(self.stored)

    def encode(self, salt: int) -> bytes:
        return pack_frame(self.seq, self.flags, self.raw_len, self.stored, salt, self.dict_id)


@dataclass
class SegModel:
    """A segment parsed as far as it is genuine: header, the genuine frames, the rest as bytes."""

    version: int
    journal_id: bytes
    number: int
    base_seq: int
    salt: int
    frames: list[FrameModel]
    tail: bytes
    header_size: int = fmt.SEGMENT_HEADER_SIZE_BYTES
    header_flags: int = 0

    def header(self) -> bytes:
        return pack_header(self.version, self.journal_id, self.number, self.base_seq, self.salt,
                           self.header_size, self.header_flags)

    def encode(self, salt: int | None = None) -> bytes:
        s = self.salt if salt is None else salt
        return self.header() + b"".join(fr.encode(s) for fr in self.frames) + self.tail

    def offsets(self) -> list[int]:
        out, pos = [], fmt.SEGMENT_HEADER_SIZE_BYTES
        for fr in self.frames:
            out.append(pos)
            pos += fr.size
        return out

    @property
    def sealed(self) -> bool:
        return bool(self.frames) and self.frames[-1].kind == fmt.KIND_SEAL and not self.tail

    def record_frames(self) -> list[int]:
        return [i for i, fr in enumerate(self.frames) if fr.kind in (fmt.KIND_DATA, fmt.KIND_BLOCK)]

    def refooter(self, interval: int = fmt.INDEX_INTERVAL_BYTES_MIN) -> None:
        """Make a sealed segment's footer agree with its frames again (after a frame changed)."""
        if not self.sealed:
            return
        offsets = self.offsets()
        entries: list[tuple[int, int]] = []
        keys: list[tuple[int, bytes]] = []
        count = 0
        next_at = 0
        for i in self.record_frames():
            fr = self.frames[i]
            records = _records_of(fr)
            count += records
            if offsets[i] >= next_at:
                entries.append((fr.seq - records + 1, offsets[i]))
                next_at = offsets[i] + interval
            if fr.flags & fmt.FLAG_KEYED and fr.stored and len(fr.stored) > fr.stored[0] >= 1:
                keys.append((fr.seq, fr.stored[1 : 1 + fr.stored[0]]))
        if count < 1:
            return
        last = self.base_seq + count - 1
        seal = self.frames[-1]
        seal.seq = last
        seal.stored = pack_seal(count, self.base_seq, last, interval, entries, keys, offsets[-1])
        seal.raw_len = len(seal.stored)


def _records_of(fr: FrameModel) -> int:
    if fr.kind == fmt.KIND_DATA:
        return 1
    if fr.kind == fmt.KIND_BLOCK and len(fr.stored) >= 4:
        (count,) = struct.unpack_from("<I", fr.stored, 0)
        return max(1, min(int(count), fmt.BLOCK_RECORDS_MAX))
    return 0


def parse_segment(data: bytes) -> SegModel | None:
    """The genuine structure of a segment's bytes, or None when its header does not verify."""
    if len(data) < fmt.SEGMENT_HEADER_SIZE_BYTES:
        return None
    body = data[: _HEADER_BODY.size]
    magic, version, header_size, header_flags, jid, number, base_seq, salt = _HEADER_BODY.unpack(body)
    (checksum,) = struct.unpack_from("<Q", data, _HEADER_BODY.size)
    if magic != fmt.SEGMENT_MAGIC or checksum != xxhash.xxh64_intdigest(body, seed=0):
        return None
    frames: list[FrameModel] = []
    pos = fmt.SEGMENT_HEADER_SIZE_BYTES
    while True:
        g = fmt.py_verify_frame(data, pos, salt)
        if g is None:
            break
        frames.append(FrameModel(g.seq, g.flags, g.raw_len, data[pos + fmt.FRAME_HEADER_SIZE_BYTES : g.end], g.dict_id))
        pos = g.end
    return SegModel(version, jid, number, base_seq, salt, frames, data[pos:], header_size, header_flags)


def segment_names(tree: Tree) -> list[str]:
    return sorted(rel for rel, e in tree.items()
                  if "/" not in rel and not e.is_dir and fmt.parse_segment_name(rel) is not None)


def parsed_segments(tree: Tree) -> list[tuple[str, SegModel]]:
    out = []
    for name in segment_names(tree):
        e = tree[name]
        if e.size > len(e.data):
            continue
        seg = parse_segment(e.data)
        if seg is not None:
            out.append((name, seg))
    return out


def rekey(tree: Tree, journal_id: bytes) -> Tree:
    """The same journal under another journal id: every salt, checksum and the START marker
    follow, so a base journal's bytes depend on nothing random."""
    out = dict(tree)
    for name, seg in parsed_segments(tree):
        seg.journal_id = journal_id
        seg.salt = fmt.segment_salt(journal_id, seg.number, seg.base_seq)
        out[name] = Entry(seg.encode())
    if fmt.START_FILE in tree:
        m = fmt.decode_start(tree[fmt.START_FILE].data)
        out[fmt.START_FILE] = Entry(fmt.encode_start(fmt.StartMarker(journal_id, m.segment_number, m.first_seq)))
    if live_hint.HINT_FILE in tree:
        out.pop(live_hint.HINT_FILE)
        hint = _rekeyed_hint(tree[live_hint.HINT_FILE].data, out, journal_id)
        if hint is not None:  # kept valid, so that readers meet hints that hold as well as damaged ones
            out[live_hint.HINT_FILE] = Entry(live_hint.encode(hint))
    return out


def _rekeyed_hint(data: bytes, tree: Tree, journal_id: bytes) -> live_hint.LiveHint | None:
    """LIVE.hint under the rekeyed journal id: its salt and its frame's checksum follow."""
    try:
        hint = live_hint.decode(data)
    except live_hint.HintError:
        return None
    seg = tree.get(hint.segment)
    if seg is None or seg.size > len(seg.data):
        return None
    salt = fmt.segment_salt(journal_id, fmt.decode_segment_header(seg.data).segment_number, hint.base_seq)
    if fmt.verify_frame(seg.data, hint.frame_offset, salt) is None:
        return None
    checksum = fmt.read_frame_header(seg.data, hint.frame_offset)[0]
    return hint._replace(journal_id=journal_id, salt=salt, frame_checksum=checksum)


# --- base journals, written by the engine ---------------------------------------------------------

FIXED_TIME = "2026-01-01T00:00:00Z"
IMPORT_SOURCES: dict[str, list[dict[str, Any]]] = {
    "claude": [
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"trackedFileBackups": {}}},
        {"parentUuid": None, "type": "user", "message": {"role": "user", "content": "create hello.py"}, "uuid": "u1",
         "timestamp": "2025-12-10T19:37:45.343Z", "sessionId": "4c2ddfdc-0000", "cwd": "/tmp/p"},
        {"parentUuid": "u1", "type": "assistant", "uuid": "u3", "timestamp": "2025-12-10T19:37:47Z",
         "sessionId": "4c2ddfdc-0000", "message": {"id": "msg_1", "role": "assistant", "content": [
             {"type": "tool_use", "id": "toolu_9", "name": "Write", "input": {"file_path": "hello.py"}}]}},
        {"parentUuid": "u3", "type": "user", "uuid": "u4", "timestamp": "2025-12-10T19:37:48Z",
         "sessionId": "4c2ddfdc-0000", "message": {"role": "user", "content": [
             {"tool_use_id": "toolu_9", "type": "tool_result", "content": "File created"}]}},
        {"parentUuid": "u4", "type": "assistant", "uuid": "u5", "timestamp": "2025-12-10T19:37:49Z",
         "sessionId": "4c2ddfdc-0000", "message": {"id": "msg_2", "role": "assistant",
                                                   "content": [{"type": "text", "text": "Done \U0001F600"}]}},
        {"parentUuid": "u5", "type": "system", "subtype": "turn_duration", "durationMs": 1200, "uuid": "u8"},
    ],
    "codex": [
        {"timestamp": FIXED_TIME, "type": "session_meta", "payload": {"id": "019b7f94-0000", "cwd": "/repo"}},
        {"timestamp": FIXED_TIME, "type": "event_msg", "payload": {"type": "task_started", "turn_id": "t1"}},
        {"timestamp": FIXED_TIME, "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "list"}]}},
        {"timestamp": FIXED_TIME, "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "call_1", "arguments": "{\"command\":[\"ls\"]}"}},
        {"timestamp": FIXED_TIME, "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_1", "output": "{\"output\":\"a\\nb\\n\"}"}},
        {"timestamp": FIXED_TIME, "type": "event_msg", "payload": {"type": "task_complete"}},
    ],
    "pi": [
        {"type": "session", "version": 3, "id": "5fd1e58c-0000", "timestamp": FIXED_TIME, "cwd": "/repo"},
        {"type": "message", "id": "a2", "parentId": None, "timestamp": FIXED_TIME,
         "message": {"role": "user", "content": [{"type": "text", "text": "read it"}], "timestamp": 1}},
        {"type": "message", "id": "a3", "parentId": "a2", "timestamp": FIXED_TIME, "message": {
            "role": "assistant", "content": [{"type": "toolCall", "id": "toolu_1", "name": "read",
                                              "arguments": {"path": "README.md"}}], "stopReason": "toolUse"}},
        {"type": "message", "id": "a4", "parentId": "a3", "timestamp": FIXED_TIME, "message": {
            "role": "toolResult", "toolCallId": "toolu_1", "toolName": "read",
            "content": [{"type": "text", "text": "# readme"}], "isError": False}},
    ],
    "jsonl": [
        {"type": "user_message", "text": "hi", "sessionId": "plain-1"},
        {"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}},
        {"type": "tool_result", "id": "c1", "output": "a b"},
        {"type": "assistant_message", "text": "done"},
    ],
}


def open_file(path: str | os.PathLike[str], **options: Any) -> EngineJournal:
    """``journal.open`` of a journal directory, as a user calls it (the file engine's Journal)."""
    import journal

    return cast("EngineJournal", journal.open(path, **options))


def _line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def _text(i: int, n: int) -> str:
    words = ("tool", "result", "the", "session", "journal", "agent", "read", "file", "line", "ok")
    return " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(n))


def _noise(i: int, n: int) -> str:
    """Text that compresses poorly, so a few records fill a small segment."""
    return hashlib.blake2b(str(i).encode(), digest_size=64).hexdigest()[: 2 * n]


def _base_mixed(path: str) -> None:

    with open_file(path, create=True, segment_size_bytes=4096, index_interval_bytes=512) as j:
        for r in range(10):
            for i in range(3):
                j.append({"type": "user.message", "n": i, "text": _text(i, 5), "id": _noise(r * 10 + i, 8)})
            j.append_many([{"type": "delta", "n": i, "text": _text(i, 3), "id": _noise(i, 6)}
                           for i in range(10)])  # block frames
            j.append({"type": "big", "text": _text(r, 120)})  # zstd, a frame of its own
            j.append({"type": "keyed", "n": r}, idempotency_key=f"key-{r}")
            j.append(bytes(range(256)) + _noise(r, 32).encode())  # a bytes record
            j.append({"type": "closer", "n": r}, synthetic=True)
            j.append_many([{"type": "bulk", "n": i, "text": _text(i, 40), "id": _noise(i, 10)}
                           for i in range(6)])  # compressed blocks
            j.append_many([b"raw-%d" % i for i in range(3)], durability="flush")
        j.seal()
        for i in range(6):
            j.append({"type": "after-seal", "n": i}, idempotency_key=f"t-{i}" if i % 2 else None)
        second = segment_names(read_tree(path))[1]
        j.drop_prefix(fmt.parse_segment_name(second) or 1)  # the first segment goes: START
    _quarantine_tail(path)


def _quarantine_tail(path: str) -> None:
    """Leave a torn tail and let a writer's open keep it in quarantine/."""

    live = os.path.join(path, segment_names(read_tree(path))[-1])
    with open(live, "ab") as f:
        f.write(b"torn tail, not a frame" * 3)
    open_file(path).close()


def _base_session(path: str) -> None:
    from journal import session

    s = session.open(path, create=True, session_id="s-hostile", clock=lambda: FIXED_TIME,
                     workspace={"path": "/repo"}, segment_size_bytes=4096, index_interval_bytes=512)
    with s:
        for t in range(3):
            turn = f"t{t}"
            s.append("turn.started", turn_id=turn)
            s.append("user.message", {"text": _text(t, 30)}, turn_id=turn)
            s.append("tool.requested", {"tool": "bash", "args": {"cmd": "ls"}}, turn_id=turn, tool_call_id=f"c{t}")
            s.append("tool.started", turn_id=turn, tool_call_id=f"c{t}")
            s.append("tool.result", {"output": _text(t, 60)}, turn_id=turn, tool_call_id=f"c{t}")
            s.append("assistant.message", {"text": _text(t, 10)}, turn_id=turn)
            s.append("turn.ended", {"reason": "completed"}, turn_id=turn)
        s.append("turn.started", turn_id="t9")  # left open: repair has something to close
        s.append("tool.requested", {"tool": "edit"}, turn_id="t9", tool_call_id="c9")


def _base_padded(path: str) -> None:

    with open_file(path, create=True, segment_size_bytes=8192, sector_bytes=512, compress=False,
                      block_bytes=0) as j:
        for i in range(30):
            j.append({"type": "padded", "n": i, "text": _text(i, 8)}, idempotency_key=f"p{i}" if i % 5 == 0 else None)
    live = os.path.join(path, segment_names(read_tree(path))[-1])
    with open(live, "ab") as f:
        f.write(bytes(4096))  # the reserved space of a writer that did not close


def _base_v1(path: str) -> None:

    with open_file(path, create=True, segment_size_bytes=4096, block_bytes=0) as j:
        for i in range(60):
            j.append({"type": "v1", "n": i, "text": _text(i, 12)})
    tree = read_tree(path)
    for name, seg in parsed_segments(tree):
        seg.version = 1
        with open(os.path.join(path, name), "wb") as f:
            f.write(seg.encode())


def _base_tiny(path: str) -> None:

    with open_file(path, create=True) as j:
        j.append({"type": "only", "n": 1})
        j.append_many([{"a": 1}, {"b": 2}, {"c": 3}])


def _base_empty(path: str) -> None:

    open_file(path, create=True).close()


def _base_imported(path: str) -> None:
    from journal.session.importers import import_file

    src = path + ".claude.jsonl"
    with open(src, "wb") as f:
        f.write(b"\n".join(_line(o) for o in IMPORT_SOURCES["claude"]) + b"\n")
    import_file("claude", src, path)
    os.unlink(src)


BASES: dict[str, Callable[[str], None]] = {
    "mixed": _base_mixed,
    "session": _base_session,
    "padded": _base_padded,
    "v1": _base_v1,
    "tiny": _base_tiny,
    "empty": _base_empty,
    "imported": _base_imported,
}
BASE_WEIGHTS = {"mixed": 5, "session": 4, "padded": 2, "v1": 2, "tiny": 1, "empty": 1, "imported": 2}
IMPORT_SHARE = 0.12  # the share of inputs that are import sources rather than journals


@dataclass
class Base:
    name: str
    tree: Tree
    session: bool  # a session journal (its first record is session.started)


def build_bases(workdir: str) -> dict[str, Base]:
    """The base journals, written by the engine and normalised (journal id derived from the
    base's name, no LOCK file) so that their bytes are the same in every run."""
    out: dict[str, Base] = {}
    for name, make in BASES.items():
        path = os.path.join(workdir, name)
        make(path)
        tree = {rel: e for rel, e in read_tree(path).items() if rel != "LOCK"}
        jid = hashlib.blake2b(name.encode(), digest_size=16).digest()
        out[name] = Base(name, rekey(tree, jid), name in ("session", "imported"))
    return out


# --- mutations ------------------------------------------------------------------------------------

Mutation = Callable[[Tree, random.Random], "str | None"]
MUTATIONS: dict[str, tuple[Mutation, int]] = {}


def mutation(weight: int) -> Callable[[Mutation], Mutation]:
    def register(fn: Mutation) -> Mutation:
        MUTATIONS[fn.__name__.removeprefix("m_").replace("_", "-")] = (fn, weight)
        return fn

    return register


def _pick_seg(tree: Tree, rng: random.Random, want: Callable[[SegModel], bool] = lambda s: True
              ) -> tuple[str, SegModel] | None:
    segs = [(n, s) for n, s in parsed_segments(tree) if want(s)]
    return rng.choice(segs) if segs else None


def _pick_frame(tree: Tree, rng: random.Random) -> tuple[str, SegModel, int] | None:
    """A segment with frames, and the index of one of its frames (at random)."""
    got = _pick_seg(tree, rng, lambda s: bool(s.frames))
    if got is None:
        return None
    name, seg = got
    return name, seg, rng.randrange(len(seg.frames))


def _put(tree: Tree, name: str, seg: SegModel, refooter: bool) -> None:
    if refooter:
        seg.refooter()
    tree[name] = Entry(seg.encode())


def _lie_int(rng: random.Random, value: int, bits: int) -> int:
    top = (1 << bits) - 1
    return rng.choice([0, 1, value - 1, value + 1, value + 2, value * 2, top, top - 1, 1 << (bits - 1),
                       (1 << (bits - 2)) if bits > 8 else 3, rng.randrange(top + 1)]) & top


@mutation(8)
def m_frame_seq(tree: Tree, rng: random.Random) -> str | None:
    picked = _pick_frame(tree, rng)
    if picked is None:
        return None
    name, seg, i = picked
    fr = seg.frames[i]
    old = fr.seq
    fr.seq = rng.choice([old + 1, old - 1, old + 2, 0, 1 << 62, (1 << 62) + old, U64, 1 << 63,
                         seg.base_seq - 1, rng.randrange(1 << 64)]) & U64
    _put(tree, name, seg, rng.random() < 0.5)
    return f"{name}: frame {i} seq {old} -> {fr.seq}"


@mutation(8)
def m_frame_flags(tree: Tree, rng: random.Random) -> str | None:
    picked = _pick_frame(tree, rng)
    if picked is None:
        return None
    name, seg, i = picked
    fr = seg.frames[i]
    old = fr.flags
    how = rng.choice(["unknown-bit", "codec", "kind", "commit", "keyed", "bytes", "synthetic", "block-refused", "any"])
    if how == "unknown-bit":
        fr.flags |= 1 << rng.randrange(8, 16)
    elif how == "codec":
        fr.flags = (fr.flags & ~fmt.FLAG_CODEC_MASK) | rng.randrange(4)
    elif how == "kind":
        fr.flags = (fr.flags & ~fmt.FLAG_KIND_MASK) | rng.choice(fmt.KINDS_KNOWN)
    elif how == "block-refused":
        fr.flags = (fr.flags & ~fmt.FLAG_KIND_MASK) | fmt.KIND_BLOCK | rng.choice(
            [fmt.FLAG_KEYED, fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC])
    elif how == "any":
        fr.flags = rng.randrange(1 << 16)
    else:
        fr.flags ^= {"commit": fmt.FLAG_COMMIT, "keyed": fmt.FLAG_KEYED, "bytes": fmt.FLAG_BYTES,
                     "synthetic": fmt.FLAG_SYNTHETIC}[how]
    _put(tree, name, seg, rng.random() < 0.5)
    return f"{name}: frame {i} flags {old:#x} -> {fr.flags:#x} ({how})"


@mutation(3)
def m_frame_dict_id(tree: Tree, rng: random.Random) -> str | None:
    picked = _pick_frame(tree, rng)
    if picked is None:
        return None
    name, seg, i = picked
    seg.frames[i].dict_id = rng.choice([1, 0x8000, U16, rng.randrange(1, U16)])
    _put(tree, name, seg, False)
    return f"{name}: frame {i} dictionary id {seg.frames[i].dict_id}"


@mutation(6)
def m_frame_raw_len(tree: Tree, rng: random.Random) -> str | None:
    picked = _pick_frame(tree, rng)
    if picked is None:
        return None
    name, seg, i = picked
    fr = seg.frames[i]
    old = fr.raw_len
    fr.raw_len = rng.choice([0, old - 1, old + 1, U32, fmt.RECORD_SIZE_BYTES_MAX_DEFAULT,
                             fmt.RECORD_SIZE_BYTES_MAX_DEFAULT + 1, fmt.FRAME_STORED_BYTES_LIMIT, 1 << 31,
                             len(fr.stored), _lie_int(rng, old, 32)]) & U32
    _put(tree, name, seg, rng.random() < 0.5)
    return f"{name}: frame {i} raw length {old} -> {fr.raw_len}"


@mutation(6)
def m_frame_stored_len(tree: Tree, rng: random.Random) -> str | None:
    """A stored length that lies: the checksum is made over the bytes it names, so a longer one
    swallows the frames after it and a shorter one leaves the rest of its payload as the next
    'frame'."""
    picked = _pick_frame(tree, rng)
    if picked is None:
        return None
    name, seg, i = picked
    data = bytearray(seg.encode())
    off = seg.offsets()[i]
    old = len(seg.frames[i].stored)
    room = len(data) - off - fmt.FRAME_HEADER_SIZE_BYTES
    new = rng.choice([0, old - 1, old + 1, room, room + 1, rng.randrange(room + 1), fmt.FRAME_STORED_BYTES_LIMIT,
                      fmt.FRAME_STORED_BYTES_LIMIT + 1, U32]) & U32
    struct.pack_into("<I", data, off + 8, new)
    genuine = reseal(data, off, seg.salt)
    tree[name] = Entry(bytes(data))
    return f"{name}: frame {i} stored length {old} -> {new} ({'genuine' if genuine else 'not genuine'})"


def _hostile_json(rng: random.Random) -> tuple[bytes, str]:
    depth = rng.choice([1000, 100_000])
    choices: list[tuple[bytes, str]] = [
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b'{"t":"\xc3"}', "truncated UTF-8"),
        (b'{"t":"\xed\xa0\xbd"}', "a surrogate in UTF-8"),
        (b'{"t":"\\ud83d"}', "a lone surrogate escape"),
        (b"not json at all", "not JSON"),
        (b"[1,2,3]", "a JSON list"),
        (b'"a string"', "a JSON string"),
        (b"12", "a JSON number"),
        (b"null", "JSON null"),
        (b"", "empty"),
        (b'{"a":1}trailing', "trailing bytes"),
        (b"\xef\xbb\xbf{}", "a BOM"),
        (b'{"a":1,"a":2}', "a repeated key"),
        (b'{"n":' + b"9" * 5000 + b"}", "an int of 5000 digits"),
        (b'{"n":-' + b"1" * 20000 + b"}", "an int of 20000 digits"),
        (b'{"x":1e400,"y":NaN,"z":-Infinity}', "overflowing floats"),
        (b'{"a":' * depth + b"1" + b"}" * depth, f"objects nested {depth} deep"),
        (b"[" * depth + b"]" * depth, f"lists nested {depth} deep"),
        (b'{"type":' + b"[" * depth + b"]" * depth + b"}", f"a type nested {depth} deep"),
        (b'{"s":"' + b"x" * (1 << 20) + b'"}', "a 1 MiB string"),
        (b'{"\\u0000":"\\u0000"}', "NUL escapes"),
        (b'{"t":"\\x"}', "a bad escape"),
        (b'{"type":5,"seq":"x","sessionId":[],"data":7,"schemaVersion":1e999}', "an envelope of wrong types"),
        (b'{"type":"turn.ended","schemaVersion":' + b"9" * 400 + b',"data":{}}', "a huge schema version"),
    ]
    return rng.choice(choices)


def _zstd_lying(rng: random.Random, body: bytes) -> tuple[bytes, str]:
    """zstd frames a writer never makes: a declared content size that lies, bombs, garbage."""
    magic = struct.pack("<I", 0xFD2FB528)
    raw_block = (1 | (0 << 1) | (len(body) << 3)).to_bytes(3, "little") + body
    fcs = rng.choice([1 << 40, 1 << 31, U64, len(body) + 1, 0, 1 << 33])
    rle_size = 128 * 1024
    rle = (0 | (1 << 1) | (rle_size << 3)).to_bytes(3, "little") + b" "
    n_rle = rng.choice([8, 200, 2000])  # up to 250 MiB of spaces
    choices: list[tuple[bytes, str]] = [
        (magic + bytes([0xE0]) + struct.pack("<Q", fcs) + raw_block, f"declared content size {fcs}"),
        (magic + bytes([0x38]) + rle * n_rle + (1 | (0 << 1) | (len(body) << 3)).to_bytes(3, "little") + body,
         f"a bomb of {n_rle * rle_size} spaces"),
        (zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(body), "with checksum"),
        (zstandard.ZstdCompressor().compress(body)[:-3], "cut short"),
        (struct.pack("<II", 0x184D2A50, 4) + b"skip" + zstandard.ZstdCompressor().compress(body), "a skippable frame"),
        (zstandard.ZstdCompressor().compress(body) * 2, "two frames"),
        (zstandard.ZstdCompressor().compress(bytes(rng.choice([1 << 20, 1 << 24, 1 << 26]))), "compressed zeros"),
        (body, "not zstd"),
    ]
    return rng.choice(choices)


@mutation(10)
def m_payload(tree: Tree, rng: random.Random) -> str | None:
    """A genuine data frame whose payload is not what its flags say."""
    got = _pick_seg(tree, rng, lambda s: any(fr.kind == fmt.KIND_DATA for fr in s.frames))
    if got is None:
        return None
    name, seg = got
    i = rng.choice([k for k, fr in enumerate(seg.frames) if fr.kind == fmt.KIND_DATA])
    fr = seg.frames[i]
    body, what = _hostile_json(rng)
    keyed = fr.flags & fmt.FLAG_KEYED
    key = fr.stored[: 1 + fr.stored[0]] if keyed and fr.stored and len(fr.stored) > fr.stored[0] else b""
    if rng.random() < 0.35:
        stored, zwhat = _zstd_lying(rng, body)
        fr.flags = (fr.flags & ~fmt.FLAG_CODEC_MASK) | fmt.CODEC_ZSTD
        what = f"zstd {zwhat} of {what}"
    else:
        stored = body
        fr.flags &= ~fmt.FLAG_CODEC_MASK
    if rng.random() < 0.2:
        fr.flags &= ~fmt.FLAG_BYTES
    fr.stored = key + stored
    fr.raw_len = rng.choice([len(body), len(body), len(stored), len(body) + 1, max(0, len(body) - 1)])
    _put(tree, name, seg, rng.random() < 0.8)
    return f"{name}: frame {i} payload {what}, raw length {fr.raw_len}"


_ENVELOPE_LIES: dict[str, list[Any]] = {
    "type": ["turn.ended", "tool.result", "x.unknown-type", "", "session.started", 5, None, ["turn.started"]],
    "schemaVersion": [2, 0, -1, 10**30, "1", 1.5, None],
    "sessionId": ["another-session", "", 7, None],
    "turnId": [None, 5, "", "t" * 300, {"a": 1}, "t-unknown"],
    "toolCallId": [None, 5, "", "c-unknown", ["c0"]],
    "data": [[], "s", None, {"reason": 5}, {"workspace": 5, "lineage": "x"}, {"text": {"a": []}}],
    "time": [5, "not a time", None],
    "ignorable": [True, "yes", 0],
    "causationId": [-1, 10**20, "x"],
}


def _writer_zstd(raw: bytes) -> bytes:
    """zstd as the writer makes it: no content size, no checksum."""
    return zstandard.ZstdCompressor(level=1, write_content_size=False).compress(raw)


@mutation(6)
def m_envelope(tree: Tree, rng: random.Random) -> str | None:
    """A genuine record whose JSON is well formed and whose session envelope lies: a field of the
    wrong type or value, one missing, one added (what the session layer's readers must refuse)."""
    found: list[tuple[str, SegModel, int, bytes, dict[str, Any]]] = []
    for name, seg in parsed_segments(tree):
        for i, fr in enumerate(seg.frames):
            if fr.kind != fmt.KIND_DATA or fr.flags & fmt.FLAG_BYTES:
                continue
            key = fr.stored[: 1 + fr.stored[0]] if fr.flags & fmt.FLAG_KEYED and fr.stored else b""
            body = fr.stored[len(key) :]
            try:
                raw = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 20) \
                    if fr.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD else body
                obj = json.loads(raw)
            except (zstandard.ZstdError, ValueError, RecursionError):
                continue
            if isinstance(obj, dict) and "type" in obj:
                found.append((name, seg, i, key, obj))
    if not found:
        return None
    name, seg, i, key, obj = rng.choice(found)
    field_name = rng.choice(sorted(_ENVELOPE_LIES))
    how = rng.choice(["set", "set", "delete"])
    if how == "delete" and field_name in obj:
        del obj[field_name]
    else:
        obj[field_name] = rng.choice(_ENVELOPE_LIES[field_name])
        how = "set"
    raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    fr = seg.frames[i]
    fr.stored = key + (_writer_zstd(raw) if fr.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD else raw)
    fr.raw_len = len(raw)
    _put(tree, name, seg, True)
    return f"{name}: frame {i} envelope {how} {field_name} = {obj.get(field_name)!r}"[:200]


@mutation(4)
def m_payload_key(tree: Tree, rng: random.Random) -> str | None:
    """A keyed frame whose key does not fit, or is no text."""
    got = _pick_seg(tree, rng, lambda s: any(fr.kind == fmt.KIND_DATA for fr in s.frames))
    if got is None:
        return None
    name, seg = got
    i = rng.choice([k for k, fr in enumerate(seg.frames) if fr.kind == fmt.KIND_DATA])
    fr = seg.frames[i]
    body = fr.stored[1 + fr.stored[0] :] if fr.flags & fmt.FLAG_KEYED and fr.stored else fr.stored
    key = rng.choice([b"", b"\xff\xfe", b"k\x00ey", b"\xed\xa0\xbd", b"x" * 255])
    n = rng.choice([len(key), 255, min(255, len(key) + 1), 0])
    fr.stored = bytes([n]) + key + body if rng.random() < 0.8 else bytes([n])
    fr.flags |= fmt.FLAG_KEYED
    _put(tree, name, seg, rng.random() < 0.8)
    return f"{name}: frame {i} key length {n}, key {key[:8]!r}"


@mutation(8)
def m_block(tree: Tree, rng: random.Random) -> str | None:
    """A block frame whose table or body lies (genuine checksum)."""
    got = _pick_seg(tree, rng, lambda s: any(fr.kind in (fmt.KIND_DATA, fmt.KIND_BLOCK) for fr in s.frames))
    if got is None:
        return None
    name, seg = got
    i = rng.choice([k for k, fr in enumerate(seg.frames) if fr.kind in (fmt.KIND_DATA, fmt.KIND_BLOCK)])
    fr = seg.frames[i]
    parts = [b'{"a":1}', b'{"b":"\xc3\xa9"}']
    how = rng.choice(["count", "lengths", "sum", "flags", "body", "cut-utf8", "hostile-record", "bomb", "many"])
    if how == "hostile-record":
        parts.append(_hostile_json(rng)[0])
    if how == "many":
        parts = [b"{}"] * rng.choice([4096, 4097, 3000])
    count = len(parts)
    lengths = [len(p) for p in parts]
    flags = [0] * count
    body = b"".join(parts)
    if how == "count":
        count = rng.choice([0, 1, 3, fmt.BLOCK_RECORDS_MAX + 1, U32, 1 << 20])
    elif how == "lengths":
        lengths = [rng.choice([0, U32, 1 << 31, 7]) for _ in lengths]
    elif how == "sum":
        lengths[0] += 1
    elif how == "flags":
        flags[rng.randrange(count)] = rng.choice([1, 0x20, 0xFF, 0x41])
    elif how == "cut-utf8":
        lengths = [len(parts[0]) + 8, len(parts[1]) - 8]
    raw_len = sum(len(p) for p in parts) if how != "sum" else sum(lengths)
    table = struct.pack("<I", count & U32) + b"".join(struct.pack("<I", n & U32) for n in lengths) + bytes(flags)
    codec = fmt.CODEC_RAW
    if how == "bomb" or rng.random() < 0.4:
        body, _ = _zstd_lying(rng, body) if how == "bomb" else (zstandard.ZstdCompressor().compress(body), "")
        codec = fmt.CODEC_ZSTD
    elif how == "body":
        body = body[: rng.randrange(len(body))]
    records = max(1, min(count & U32, fmt.BLOCK_RECORDS_MAX))
    held = _records_of(fr)
    first = fr.seq - held + 1
    fr.flags = fmt.KIND_BLOCK | codec | (fr.flags & fmt.FLAG_COMMIT)
    fr.stored = table + body
    fr.raw_len = raw_len
    if rng.random() < 0.7:
        # Take the seqs the block claims, and shift the frames after it, so that a scan accepts it.
        fr.seq = first + records - 1
        for later in seg.frames[i + 1 :]:
            later.seq += records - held
    _put(tree, name, seg, rng.random() < 0.8)
    return f"{name}: frame {i} -> block ({how}, count {count}, lengths {lengths[:3]})"


@mutation(3)
def m_padding(tree: Tree, rng: random.Random) -> str | None:
    got = _pick_seg(tree, rng, lambda s: bool(s.frames))
    if got is None:
        return None
    name, seg = got
    i = rng.randrange(len(seg.frames) + 1)
    prev = seg.frames[i - 1].seq if i else seg.base_seq - 1
    stored = rng.choice([bytes(100), b"not zeros" * 10, bytes(70000)])
    seg.frames.insert(i, FrameModel(prev, fmt.KIND_PADDING | rng.choice([0, 0, fmt.FLAG_COMMIT, fmt.CODEC_ZSTD]),
                                    rng.choice([len(stored), 0, U32]), stored))
    _put(tree, name, seg, rng.random() < 0.7)
    return f"{name}: padding frame inserted at {i}"


@mutation(8)
def m_footer(tree: Tree, rng: random.Random) -> str | None:
    """A genuine seal frame whose footer lies about its segment."""
    got = _pick_seg(tree, rng, lambda s: s.sealed)
    if got is None:
        return None
    name, seg = got
    seal = seg.frames[-1]
    try:
        info = fmt.decode_seal_payload(seal.stored)
    except ValueError:
        return None
    count, first, last, interval = info.record_count, info.first_seq, info.last_seq, info.index_interval_bytes
    entries, keys, off = list(info.entries), list(info.keys), info.seal_offset
    n_entries: int | None = None
    n_keys: int | None = None
    how = rng.choice(["count", "first", "last", "interval", "entry-seq", "entry-offset", "entries-order",
                      "n-entries", "n-keys", "key-seq", "key-len", "seal-offset", "many-entries", "consistent-last"])
    if how == "count":
        count = _lie_int(rng, count, 64)
    elif how == "first":
        first = _lie_int(rng, first, 64)
    elif how == "last":
        last = _lie_int(rng, last, 64)
    elif how == "consistent-last":
        d = rng.choice([1, -1, 1 << 62])
        last, count = (last + d) & U64, (count + d) & U64
    elif how == "interval":
        interval = rng.choice([0, 1, U32, 511])
    elif how == "entry-seq" and entries:
        k = rng.randrange(len(entries))
        entries[k] = (_lie_int(rng, entries[k][0], 64), entries[k][1])
    elif how == "entry-offset" and entries:
        k = rng.randrange(len(entries))
        entries[k] = (entries[k][0], rng.choice([0, 1, 63, 64, off, off + 1, entries[k][1] + 1, U64, 1 << 40,
                                                 entries[k][1] + 32]))
    elif how == "entries-order" and len(entries) > 1:
        entries.reverse()
    elif how == "many-entries":
        entries = [(first + k, 64) for k in range(rng.choice([1000, 20000]))]
    elif how == "n-entries":
        n_entries = rng.choice([len(entries) + 1, U32, 1 << 28, max(0, len(entries) - 1)])
    elif how == "n-keys":
        n_keys = rng.choice([len(keys) + 1, U32, 1 << 28])
    elif how == "key-seq" and keys:
        k = rng.randrange(len(keys))
        keys[k] = (_lie_int(rng, keys[k][0], 64), keys[k][1])
    elif how == "key-len":
        keys.append((last, rng.choice([b"", b"\xff\xfe", b"z" * 255])))
    elif how == "seal-offset":
        off = rng.choice([0, 64, off - 1, off + 1, U64, 1 << 40])
    else:
        return None
    seal.stored = pack_seal(count, first, last, interval, entries, keys, off, n_entries, n_keys)
    seal.raw_len = len(seal.stored)
    if rng.random() < 0.3:
        seal.seq = last & U64
    tree[name] = Entry(seg.encode())
    return f"{name}: footer {how}"


@mutation(4)
def m_seal_move(tree: Tree, rng: random.Random) -> str | None:
    """A sealed segment without its seal, a live one sealed, a seal in the middle."""
    got = _pick_seg(tree, rng, lambda s: bool(s.frames))
    if got is None:
        return None
    name, seg = got
    how = rng.choice(["unseal", "seal-live", "seal-middle", "double-seal"])
    if how == "unseal" and seg.sealed:
        seg.frames.pop()
    elif how in ("seal-live", "double-seal") and (how == "double-seal" or not seg.sealed):
        seg.frames.append(FrameModel(seg.frames[-1].seq, fmt.KIND_SEAL, 0, b""))
        _put(tree, name, seg, True)
        return f"{name}: {how}"
    elif how == "seal-middle" and len(seg.frames) > 2:
        k = rng.randrange(1, len(seg.frames) - 1)
        seg.frames.insert(k, FrameModel(seg.frames[k - 1].seq, fmt.KIND_SEAL, 0, b"x" * 48))
    else:
        return None
    tree[name] = Entry(seg.encode())
    return f"{name}: {how}"


@mutation(8)
def m_header(tree: Tree, rng: random.Random) -> str | None:
    """A segment header whose checksum holds and whose fields lie."""
    got = _pick_seg(tree, rng)
    if got is None:
        return None
    name, seg = got
    how = rng.choice(["version", "header-size", "header-flags", "journal-id", "number", "base-seq", "salt",
                      "salt-resalted", "journal-id-resalted"])
    old_salt = seg.salt
    if how == "version":
        seg.version = rng.choice([0, 1, 3, 99, U16])
    elif how == "header-size":
        seg.header_size = rng.choice([0, 32, 65, U16])
    elif how == "header-flags":
        seg.header_flags = rng.choice([1, U32])
    elif how in ("journal-id", "journal-id-resalted"):
        seg.journal_id = bytes(rng.randrange(256) for _ in range(16))
        if how.endswith("resalted"):
            seg.salt = fmt.segment_salt(seg.journal_id, seg.number, seg.base_seq)
    elif how == "number":
        seg.number = _lie_int(rng, seg.number, 64)
    elif how == "base-seq":
        seg.base_seq = rng.choice([0, seg.base_seq + 1, seg.base_seq - 1, 1 << 62, U64, 10**19 + 1])
    elif how in ("salt", "salt-resalted"):
        seg.salt = rng.randrange(1 << 64)
    body = seg.header() + b"".join(fr.encode(seg.salt if how.endswith("resalted") else old_salt)
                                   for fr in seg.frames) + seg.tail
    tree[name] = Entry(body)
    return f"{name}: header {how}"


@mutation(4)
def m_foreign_segment(tree: Tree, rng: random.Random) -> str | None:
    """A whole segment of another journal (genuine under its own id) in place of one of ours."""
    got = _pick_seg(tree, rng)
    if got is None:
        return None
    name, seg = got
    seg.journal_id = bytes(rng.randrange(256) for _ in range(16))
    seg.salt = fmt.segment_salt(seg.journal_id, seg.number, seg.base_seq)
    tree[name] = Entry(seg.encode())
    return f"{name}: from another journal"


@mutation(5)
def m_start(tree: Tree, rng: random.Random) -> str | None:
    """A START marker that lies (checksum genuine), or one where none belongs, or none where one does."""
    segs = parsed_segments(tree)
    jid = segs[0][1].journal_id if segs else bytes(16)
    first = segs[0][1] if segs else None
    how = rng.choice(["first-seq", "number", "journal-id", "version", "size", "flags", "remove", "add", "tmp",
                      "short", "directory"])
    base = first.base_seq if first else 1
    number = first.number if first else 0
    if how == "first-seq":
        data = pack_start(jid, number, rng.choice([0, 1, base - 1, base + 1, 1 << 62, U64]))
    elif how == "number":
        data = pack_start(jid, _lie_int(rng, number, 64), base)
    elif how == "journal-id":
        data = pack_start(bytes(16), number, base)
    elif how == "version":
        data = pack_start(jid, number, base, version=rng.choice([0, 2, U16]))
    elif how == "size":
        data = pack_start(jid, number, base, size=rng.choice([0, 57, U16]))
    elif how == "flags":
        data = pack_start(jid, number, base, flags=1)
    elif how == "remove":
        if fmt.START_FILE not in tree:
            return None
        del tree[fmt.START_FILE]
        return "START removed"
    elif how == "add":
        data = pack_start(jid, number, rng.choice([1, base]))
    elif how == "tmp":
        tree[fmt.START_FILE + ".tmp"] = Entry(pack_start(jid, number, base + 5))
        return "START.tmp left behind"
    elif how == "short":
        data = pack_start(jid, number, base)[: rng.randrange(56)]
    else:
        tree[fmt.START_FILE] = Entry(is_dir=True)
        return "START is a directory"
    tree[fmt.START_FILE] = Entry(data)
    return f"START {how}"


@mutation(5)
def m_frames_shuffle(tree: Tree, rng: random.Random) -> str | None:
    """Genuine frames removed, duplicated, swapped or carried into another segment."""
    got = _pick_seg(tree, rng, lambda s: len(s.frames) >= 2)
    if got is None:
        return None
    name, seg = got
    how = rng.choice(["remove", "duplicate", "swap", "transplant"])
    i = rng.randrange(len(seg.frames))
    if how == "remove":
        seg.frames.pop(i)
    elif how == "duplicate":
        seg.frames.insert(i, dataclasses.replace(seg.frames[i]))
    elif how == "swap":
        j = rng.randrange(len(seg.frames))
        seg.frames[i], seg.frames[j] = seg.frames[j], seg.frames[i]
    else:
        other = _pick_seg(tree, rng, lambda s: bool(s.frames))
        if other is None:
            return None
        seg.frames.insert(i, dataclasses.replace(rng.choice(other[1].frames)))
    _put(tree, name, seg, rng.random() < 0.5)
    return f"{name}: frame {i} {how}"


@mutation(6)
def m_segment_files(tree: Tree, rng: random.Random) -> str | None:
    """Segments duplicated, removed, renamed or reordered, as a careless copy leaves them."""
    names = segment_names(tree)
    if not names:
        return None
    how = rng.choice(["remove", "duplicate", "rename", "swap", "rename-far", "remove-all"])
    a = rng.choice(names)
    if how == "remove":
        del tree[a]
    elif how == "remove-all":
        for n in names:
            del tree[n]
    elif how == "duplicate":
        base = fmt.parse_segment_name(a) or 1
        tree[fmt.segment_name(base + rng.choice([1, 2, 100]))] = tree[a]
    elif how in ("rename", "rename-far"):
        base = fmt.parse_segment_name(a) or 1
        new = fmt.segment_name(rng.choice([base + 1, max(1, base - 1), 10**19 - 1]) if how == "rename"
                               else rng.choice([1 << 62, 10**20 - 1]))
        if new in tree:
            return None
        tree[new] = tree.pop(a)
    elif how == "swap" and len(names) > 1:
        b = rng.choice([n for n in names if n != a])
        tree[a], tree[b] = tree[b], tree[a]
    else:
        return None
    return f"segments: {how} {a}"


@mutation(3)
def m_odd_files(tree: Tree, rng: random.Random) -> str | None:
    """Files the format names, in shapes it does not expect."""
    names = segment_names(tree)
    how = rng.choice(["tmp-header", "tmp-garbage", "tmp-frames", "dir-as-segment", "quarantine-file",
                      "zero-name", "near-name", "huge-name"])
    if how.startswith("tmp-") and names:
        src = tree[rng.choice(names)].data
        data = {"tmp-header": src[:64], "tmp-garbage": b"\x00garbage" * 40, "tmp-frames": src}[how]
        # After the last segment, unless that one is a huge name already (the largest a name holds).
        base = min((fmt.parse_segment_name(names[-1]) or 1) + 1, 10**fmt.SEGMENT_NAME_DIGITS - 1)
        tree[fmt.segment_name(base) + ".tmp"] = Entry(data)
    elif how == "dir-as-segment":
        tree[fmt.segment_name(10**18)] = Entry(is_dir=True)
    elif how == "quarantine-file":
        for rel in [r for r in tree if r == "quarantine" or r.startswith("quarantine/")]:
            del tree[rel]
        tree["quarantine"] = Entry(b"not a directory")
    elif how == "zero-name":
        tree["0" * 20 + ".seg"] = Entry(tree[names[0]].data if names else b"")
    elif how == "near-name":
        tree[(names[0] if names else "00000000000000000001.seg") + ".bak"] = Entry(b"x")
    elif how == "huge-name":
        tree["9" * 20 + ".seg"] = Entry(tree[names[-1]].data if names else b"")
    else:
        return None
    return f"files: {how}"


def _any_file(tree: Tree, rng: random.Random) -> str | None:
    files = [rel for rel, e in tree.items() if not e.is_dir and e.data]
    if not files:
        return None
    segs = [f for f in files if f in segment_names(tree)]
    return rng.choice(segs) if segs and rng.random() < 0.8 else rng.choice(files)


@mutation(6)
def m_bytes_flip(tree: Tree, rng: random.Random) -> str | None:
    rel = _any_file(tree, rng)
    if rel is None:
        return None
    data = bytearray(tree[rel].data)
    n = rng.choice([1, 1, 2, 8])
    for _ in range(n):
        p = rng.randrange(len(data))
        data[p] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
    tree[rel] = Entry(bytes(data), tree[rel].size)
    return f"{rel}: {n} byte(s) flipped"


@mutation(6)
def m_truncate(tree: Tree, rng: random.Random) -> str | None:
    rel = _any_file(tree, rng)
    if rel is None:
        return None
    data = tree[rel].data
    at = rng.choice([0, 1, 32, 63, 64, 65, 96, len(data) - 1, len(data) - 8, rng.randrange(len(data))])
    at = max(0, min(at, len(data)))
    tree[rel] = Entry(data[:at])
    return f"{rel}: truncated to {at} of {len(data)} bytes"


@mutation(5)
def m_zeros(tree: Tree, rng: random.Random) -> str | None:
    rel = _any_file(tree, rng)
    if rel is None:
        return None
    data = bytearray(tree[rel].data)
    how = rng.choice(["whole", "run", "append"])
    if how == "whole":
        data = bytearray(len(data))
    elif how == "run":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.choice([8, 32, 512, 4096]))
        data[a:b] = bytes(b - a)
    else:
        data += bytes(rng.choice([1, 31, 32, 4096, 70000]))
    tree[rel] = Entry(bytes(data))
    return f"{rel}: zeros ({how})"


@mutation(3)
def m_garbage(tree: Tree, rng: random.Random) -> str | None:
    """Bytes appended or spliced in: random, a frame marker, a copy of another part of the file."""
    rel = _any_file(tree, rng)
    if rel is None:
        return None
    data = tree[rel].data
    how = rng.choice(["random", "marker", "splice"])
    if how == "random":
        data += bytes(rng.randrange(256) for _ in range(rng.choice([1, 40, 300])))
    elif how == "marker":
        data += bytes(28) + fmt.FRAME_MARKER_BYTES + b"\xff" * 20
    else:
        a = rng.randrange(len(data))
        b = rng.randrange(a, min(len(data), a + 4096) + 1)
        p = rng.randrange(len(data) + 1)
        data = data[:p] + data[a:b] + data[p:]
    tree[rel] = Entry(data)
    return f"{rel}: {how} bytes"


@mutation(2)
def m_sparse(tree: Tree, rng: random.Random) -> str | None:
    """A segment extended by a hole of zeros (a file system that extended it; a crafted size)."""
    names = segment_names(tree)
    if not names:
        return None
    rel = rng.choice([names[-1], names[-1], rng.choice(names)])
    e = tree[rel]
    grow = SPARSE_BIG_BYTES if rng.random() < 0.1 else rng.choice([4096, 1 << 20, 64 << 20])
    tree[rel] = Entry(e.data, len(e.data) + grow)
    return f"{rel}: a hole of {grow} zero bytes after its data"


def make_input(seed: int, index: int, bases: Mapping[str, Base], steps: Sequence[str] | None = None
               ) -> tuple[Tree, str, list[str], list[str]]:
    """Input ``index`` of seed ``seed``: (tree, base name, mutation names, their descriptions).
    ``steps`` replays a subset of the mutations (minimisation): step k's choices depend on the
    seed, the index and k only."""
    rng = random.Random(f"hostile/{seed}/{index}")
    names = list(BASE_WEIGHTS)
    base = rng.choices(names, weights=[BASE_WEIGHTS[n] for n in names])[0]
    muts = list(MUTATIONS)
    weights = [MUTATIONS[m][1] for m in muts]
    chosen = rng.choices(muts, weights=weights, k=rng.choice([1, 1, 1, 2, 2, 3]))
    keys = [f"{k}:{m}" for k, m in enumerate(chosen)] if steps is None else list(steps)
    tree = dict(bases[base].tree)
    done: list[str] = []
    for key in keys:
        k, _, m = key.partition(":")
        got = MUTATIONS[m][0](tree, random.Random(f"hostile/{seed}/{index}/{k}"))
        done.append(f"{m}: {got}" if got is not None else f"{m}: (not applicable)")
    return tree, base, keys, done


def is_import_input(seed: int, index: int) -> bool:
    """Whether input ``index`` of ``seed`` is a session log to import rather than a journal."""
    return random.Random(f"hostile-kind/{seed}/{index}").random() < IMPORT_SHARE


def make_import_input(seed: int, index: int) -> tuple[str, bytes, str]:
    """A session log for `journal import`: (format, bytes, description), its lines mutated the way
    real logs are odd (lone surrogates, deep nesting, huge numbers, bytes that are not UTF-8,
    lines cut or joined)."""
    rng = random.Random(f"hostile-import/{seed}/{index}")
    form = rng.choice(sorted(IMPORT_SOURCES))
    lines = [_line(o) for o in IMPORT_SOURCES[form]]
    what = []
    for _ in range(rng.choice([1, 1, 2])):
        k = rng.randrange(len(lines))
        how = rng.choice(["surrogate", "deep", "huge-int", "not-utf8", "cut", "joined", "not-object", "crlf",
                          "nul", "bom", "long", "empty", "hostile-json", "wrong-types"])
        ln = lines[k]
        if how == "surrogate":
            ln = ln[:-1] + b',"x":"\\ud83d"}'
        elif how == "deep":
            d = rng.choice([1000, 100_000])
            ln = ln[:-1] + b',"deep":' + b"[" * d + b"]" * d + b"}"
        elif how == "huge-int":
            ln = ln[:-1] + b',"n":' + b"7" * 5000 + b"}"
        elif how == "not-utf8":
            ln = ln[:-1] + b',"b":"\xff\xfe"}'
        elif how == "cut":
            ln = ln[: rng.randrange(len(ln))]
        elif how == "joined":
            ln = ln + rng.choice(lines)
        elif how == "not-object":
            ln = b"[1,2,3]"
        elif how == "crlf":
            ln = ln + b"\r"
        elif how == "nul":
            ln = ln[:5] + b"\x00" + ln[5:]
        elif how == "bom":
            ln = b"\xef\xbb\xbf" + ln
        elif how == "long":
            ln = ln[:-1] + b',"s":"' + b"y" * (2 << 20) + b'"}'
        elif how == "empty":
            ln = b""
        elif how == "hostile-json":
            ln = _hostile_json(rng)[0].replace(b"\n", b" ")
        else:
            try:
                obj = json.loads(ln)
            except (ValueError, RecursionError):  # an earlier oddity made it no JSON object
                obj = None
            if not isinstance(obj, dict):
                continue
            for key in list(obj)[:3]:
                obj[key] = rng.choice([None, 5, [], {"x": []}, "s" * 3, 1e308])
            ln = _line(obj)
        lines[k] = ln
        what.append(f"line {k + 1} {how}")
    end = rng.choice([b"\n", b"\n", b""])
    return form, b"\n".join(lines) + end, f"{form} source: " + ", ".join(what)


# --- readers and the oracle -----------------------------------------------------------------------------


class Violation(Exception):
    """An outcome the oracle does not allow (not an error of the reader's own kind)."""


READ_ONLY = "read-only"  # changes no byte of the journal
WRITER = "writer"  # may cut a torn tail (kept in quarantine/) and append
COPIER = "copier"  # reads the journal, writes a new one (or a file) at Paths.dest


@dataclass(frozen=True)
class Paths:
    box: str  # the sandbox of one run
    journal: str  # box/j: a fresh copy of the input
    out: str  # box/out: the directory a copier writes into (nothing else may appear there)
    dest: str  # box/out/dest: what a copier makes
    source: str  # box/source.jsonl: an import's source


@dataclass(frozen=True)
class Reader:
    name: str
    kind: str
    run: Callable[[Paths], dict[str, Any]]  # facts for the cross-checks; raises JournalError or Violation
    imports: bool = False  # reads an import source, not a journal
    sessions_only: bool = False


def _journal_error_types() -> tuple[type[BaseException], type[BaseException]]:
    from journal.errors import InvariantError, JournalError

    return JournalError, InvariantError


def _materialise(rec: Any) -> None:
    """Touch everything a caller would: the event (decoded lazily), payload, key, flags."""
    _ = rec.payload, rec.key, rec.synthetic, rec.seq
    if not rec.is_bytes:
        _ = rec.event


def _count_read(it: Iterator[Any]) -> int:
    n = 0
    for rec in it:
        _materialise(rec)
        n += 1
        if n > READ_RECORDS_MAX:
            raise Violation(f"more than {READ_RECORDS_MAX} records from a small input")
    return n


def reader_open_write(p: Paths) -> dict[str, Any]:
    import journal

    with open_file(p.journal) as j:
        before = j.last_seq
        out = j.append({"type": "hostile.after-open", "n": before})
        if not isinstance(out, journal.Committed) or out.seq != before + 1:
            raise Violation(f"append after a writer's open: {out!r}, last seq was {before}")
        for seq in sorted({j.first_seq, (j.first_seq + before) // 2, before}):
            rec = j.get(seq) if seq >= 1 else None  # through the writer's own index of its live segment
            if rec is not None:
                _materialise(rec)
    with open_file(p.journal, readonly=True) as r:
        got = r.get(before + 1)
        if got is None or got.event != {"type": "hostile.after-open", "n": before}:
            raise Violation(f"the record appended after the writer's open reads back as {got!r}")
    return {"lastSeq": before}


def reader_open_shared(p: Paths) -> dict[str, Any]:
    """A shared writer: its batch catches up with the files (the other writers' appends) first."""
    import journal

    with open_file(p.journal, writer="shared") as j:
        before = j.last_seq
        out = j.append({"type": "hostile.shared", "n": before})
        if not isinstance(out, journal.Committed):
            raise Violation(f"a shared writer's append after its open: {out!r}")
        got = j.get(out.seq)
        if got is None or got.event != {"type": "hostile.shared", "n": before}:
            raise Violation(f"the record a shared writer appended reads back as {got!r}")
        for seq in (j.first_seq, before):
            rec = j.get(seq) if seq >= 1 else None
            if rec is not None:
                _materialise(rec)
    return {"lastSeq": before}


def reader_open_readonly(p: Paths) -> dict[str, Any]:

    with open_file(p.journal, readonly=True) as j:
        return {"lastSeq": j.last_seq, "firstSeq": j.first_seq, "tail": j.recovery.tail}


def reader_read(p: Paths) -> dict[str, Any]:

    with open_file(p.journal, readonly=True) as j:
        n = _count_read(j.read())
        if n and n != j.last_seq - j.first_seq + 1:
            raise Violation(f"read() gave {n} records of seqs {j.first_seq}..{j.last_seq}")
        return {"records": n}


def reader_get(p: Paths) -> dict[str, Any]:

    with open_file(p.journal, readonly=True) as j:
        first, last = j.first_seq, j.last_seq
        got = 0
        for seq in sorted({first, last, (first + last) // 2, last + 1, 1, 2, first + 7, 1 << 62, U64 >> 1}):
            if seq < 1:
                continue
            rec = j.get(seq)
            if rec is not None:
                _materialise(rec)
                if rec.seq != seq:
                    raise Violation(f"get({seq}) returned seq {rec.seq}")
                got += 1
            elif first <= seq <= last:
                raise Violation(f"get({seq}) is None but the journal holds {first}..{last}")
        return {"got": got}


def reader_follow(p: Paths) -> dict[str, Any]:

    with open_file(p.journal, readonly=True) as j:
        return {"records": _count_read(j.follow(poll_interval_s=0.01, idle_timeout_s=FOLLOW_IDLE_S))}


def reader_copy_prefix(p: Paths) -> dict[str, Any]:

    os.makedirs(p.dest, mode=0o700)
    with open_file(p.journal, readonly=True) as j:
        if j.last_seq < j.first_seq:
            return {"made": False, "empty": True}  # no prefix to fork at
        got = j.copy_prefix(p.dest, at_seq=(j.first_seq + j.last_seq) // 2)
    with open_file(p.dest, readonly=True) as f:
        n = _count_read(f.read())
    return {"made": True, "copied": n, "fork": repr(got)[:80]}


def reader_session_open(p: Paths) -> dict[str, Any]:
    from journal import session

    with session.open(p.journal, readonly=True) as s:
        return {"sessionId": s.session_id}


ENGINE_READERS: list[Reader] = [
    Reader("open-readonly", READ_ONLY, reader_open_readonly),
    Reader("read", READ_ONLY, reader_read),
    Reader("get", READ_ONLY, reader_get),
    Reader("follow", READ_ONLY, reader_follow),
    Reader("copy-prefix", COPIER, reader_copy_prefix),
    Reader("session-open", READ_ONLY, reader_session_open, sessions_only=True),
    Reader("open-shared", WRITER, reader_open_shared),
    Reader("open-write", WRITER, reader_open_write),
]


# --- checks of what a reader did to the files --------------------------------------------------------


def check_read_only(before: Mapping[str, str], after: Mapping[str, str]) -> None:
    if before != after:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        raise Violation(f"a read-only reader changed the journal: {changed[:5]}")


def check_writer(pristine: Tree, root: str) -> None:
    """A writer keeps every byte it removes: a tail it cuts is zeros or is in quarantine/; it
    removes no file but a .seg.tmp (kept unless it holds a header only), START.tmp and segments
    a START marker says were dropped; it adds only LOCK, quarantine/ files and new segments.
    LIVE.hint (and its temp file) is no data: a writer's close may write, replace or leave it."""
    hints = (live_hint.HINT_FILE, live_hint.HINT_TMP_FILE)
    after = {rel: e for rel, e in read_tree_shallow(root).items() if rel not in hints}
    quarantine_new = [e.data for rel, e in after.items()
                      if rel.startswith("quarantine/") and rel not in pristine and not e.is_dir]
    start_seq = _start_first_seq(after.get(fmt.START_FILE))
    for rel, e in pristine.items():
        if e.is_dir or e.size > len(e.data) or rel in hints:
            continue
        now = after.get(rel)
        if now is None:
            if rel.endswith(".seg.tmp") and (_header_only(e.data) or any(q == e.data for q in quarantine_new)):
                continue
            if rel == fmt.START_FILE + ".tmp":
                continue
            base = fmt.parse_segment_name(rel) if "/" not in rel else None
            if base is not None and start_seq is not None and base < start_seq:
                continue
            raise Violation(f"a writer removed {rel} ({len(e.data)} bytes) without keeping it")
        if now.is_dir or now.data == e.data:
            continue
        k = _common_prefix(e.data, now.data)
        cut = e.data[k:]
        if cut and cut.count(0) != len(cut) and not any(q.endswith(cut) for q in quarantine_new):
            raise Violation(f"a writer cut {len(cut)} bytes at {rel} offset {k} that are not zeros and are "
                            "not in quarantine/")
    for rel, e in after.items():
        if rel in pristine or rel == "LOCK" or rel == "quarantine" or rel.startswith("quarantine/"):
            continue
        if "/" not in rel and fmt.parse_segment_name(rel) is not None and not e.is_dir:
            continue
        raise Violation(f"a writer left {rel}, which the format does not name")


def read_tree_shallow(root: str) -> Tree:
    """read_tree, but a file with a hole (or over 64 MiB) is only its size."""
    tree: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            tree[os.path.normpath(os.path.join(rel, d))] = Entry(is_dir=True)
        for name in filenames:
            path = os.path.join(dirpath, name)
            size = os.path.getsize(path)
            key = os.path.normpath(os.path.join(rel, name))
            if size > (64 << 20):
                tree[key] = Entry(b"", size)
            else:
                with open(path, "rb") as f:
                    tree[key] = Entry(f.read())
    return tree


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # the longest prefix that matches, by halving (no byte loop in Python)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _header_only(data: bytes) -> bool:
    if len(data) < fmt.SEGMENT_HEADER_SIZE_BYTES:
        return True
    seg = parse_segment(data)
    return seg is not None and all(fr.kind == fmt.KIND_PADDING for fr in seg.frames) and not seg.tail.strip(b"\0")


def _start_first_seq(e: Entry | None) -> int | None:
    if e is None or e.is_dir:
        return None
    try:
        return fmt.decode_start(e.data).first_seq
    except fmt.HeaderError:
        return None


def check_copy(dest: str) -> dict[str, Any]:
    """A journal a copier made verifies clean and reads whole."""
    from journal.engine.verify import verify

    rep = verify(dest)
    if rep.verdict != "clean":
        raise Violation(f"the journal made at {dest} does not verify clean: {rep.summary()[:300]}")
    with open_file(dest, readonly=True) as j:
        return {"destRecords": _count_read(j.read())}


# --- one run: a reader on a fresh copy of an input ---------------------------------------------------------


def run_one(reader: Reader, input_dir: str, box: str, pristine: Tree | None) -> dict[str, Any]:
    """Run ``reader`` on a copy of ``input_dir`` in ``box`` and judge it. The result is JSON:
    ``status`` ok (a result), error (a typed JournalError) or fail (anything else), with facts."""
    JournalError, InvariantError = _journal_error_types()
    if os.path.lexists(box):
        shutil.rmtree(box)
    os.makedirs(box, mode=0o700)
    paths = Paths(box, os.path.join(box, "j"), os.path.join(box, "out"), os.path.join(box, "out", "dest"),
                  os.path.join(box, "source.jsonl"))
    if reader.imports:
        shutil.copyfile(os.path.join(input_dir, "source.jsonl"), paths.source)
        shutil.copyfile(os.path.join(input_dir, "format"), os.path.join(box, "format"))
    else:
        copy_tree(input_dir, paths.journal)
    os.makedirs(paths.out, mode=0o700)
    with open(os.path.join(box, "sentinel"), "wb") as f:
        f.write(b"nothing may change this file")
    outside = {k: v for k, v in fingerprint(box).items() if not _inside(k)}
    before = fingerprint(paths.journal)
    result: dict[str, Any] = {"reader": reader.name, "status": "ok", "facts": {}}
    _reset_peak_rss()
    cwd = os.getcwd()
    os.chdir(paths.out)  # a relative path a reader wrongly makes lands where the checks see it
    try:
        result["facts"] = reader.run(paths)
    except Violation as exc:
        result.update(status="fail", failure=f"violation: {exc}", signature=f"violation: {_violation_kind(exc)}")
    except InvariantError as exc:
        result.update(status="fail", failure=f"InvariantError (the engine's own check) on input: {exc}",
                      traceback=traceback.format_exc(), signature=_signature(exc))
    except JournalError as exc:
        if not str(exc).strip():
            result.update(status="fail", failure=f"{type(exc).__name__} with an empty message",
                          signature=f"empty message {type(exc).__name__}")
        else:
            result.update(status="error", error=type(exc).__name__, message=str(exc)[:500])
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        result.update(status="fail", failure=f"{type(exc).__name__}: {str(exc)[:500]}",
                      traceback=traceback.format_exc()[-4000:], signature=_signature(exc))
    finally:
        os.chdir(cwd)
    result["peakRssBytes"] = _peak_rss()
    if result["status"] != "fail":
        try:
            _check_files(reader, paths, before, outside, pristine, result)
        except Violation as exc:
            result.update(status="fail", failure=f"violation: {exc}", signature=f"violation: {_violation_kind(exc)}")
    return result


def _reset_peak_rss() -> None:
    """Start this process's resident-memory high-water mark afresh (Linux: /proc/self/clear_refs),
    so that the mark after a run is that run's peak."""
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")


def _peak_rss() -> int:
    """This process's resident-memory high-water mark (VmHWM), in bytes; 0 where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _inside(rel: str) -> bool:
    return rel in ("j", "out") or rel.startswith(("j/", "out/"))


def _check_files(reader: Reader, paths: Paths, before: Mapping[str, str], outside: Mapping[str, str],
                 pristine: Tree | None, result: dict[str, Any]) -> None:
    now_outside = {k: v for k, v in fingerprint(paths.box).items() if not _inside(k)}
    if now_outside != outside:
        changed = sorted(k for k in set(now_outside) | set(outside) if now_outside.get(k) != outside.get(k))
        raise Violation(f"changed outside the journal: {changed[:5]}")
    if reader.kind in (READ_ONLY, COPIER) and not reader.imports:
        check_read_only(before, fingerprint(paths.journal))
    elif reader.kind == WRITER and pristine is not None:
        check_writer(pristine, paths.journal)
    made = sorted(os.listdir(paths.out))
    if reader.kind == COPIER or reader.imports:
        claims = result["status"] == "ok" and bool(result["facts"].get("made"))
        if claims and made != ["dest"]:
            raise Violation(f"a copier that succeeded left {made} in the destination's directory")
        if not claims and made not in ([], ["dest"]):
            raise Violation(f"a copier that made nothing left {made} beside its destination")
    elif made:
        raise Violation(f"a reader wrote {made} where it was given no destination")


def _violation_kind(exc: Violation) -> str:
    text = str(exc)
    return text.split(":")[0][:80]


def _signature(exc: BaseException) -> str:
    """What makes two failures the same: the exception's type and the innermost frame of the
    package (file and function) it came from."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if f"{os.sep}journal{os.sep}" in code.co_filename and "crashsim" not in code.co_filename:
            where = f"{os.path.basename(code.co_filename)}:{code.co_name}"
        tb = tb.tb_next
    return f"{type(exc).__name__} at {where or '?'}"


# --- the worker: many runs in one process under a memory limit -----------------------------------------


def worker_loop(readers: Sequence[Reader], memory_bytes: int) -> None:
    """Read jobs (one JSON line each) from stdin and answer each on the original stdout; the
    process's own stdout and stderr go to /dev/null so no reader can garble the answers."""
    import resource

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(1, "w", closefd=False)
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    by_name = {r.name: r for r in readers}
    proto.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        pristine = tree_from_json(job["pristine"]) if job.get("pristine") is not None else None
        res = run_one(by_name[job["reader"]], job["input"], job["box"], pristine)
        proto.write(json.dumps(res) + "\n")


class Worker:
    """The parent's side of one worker process: start it, hand it a job, wait at most
    ``timeout_s`` for the answer, replace it when it hangs, dies or fails."""

    def __init__(self, argv: Sequence[str], workdir: str, timeout_s: float) -> None:
        self.argv = list(argv)
        self.workdir = workdir
        self.timeout_s = timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.buf = b""
        self.ended = False  # the worker's stdout ended: it died
        self.runs = 0
        self.starts = 0
        self.log = os.path.join(workdir, "worker.log")

    def _start(self) -> None:
        env = dict(os.environ, MALLOC_ARENA_MAX="2", JOURNAL_NO_PROGRESS="1")
        log = open(self.log, "wb")
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         env=env, start_new_session=True, cwd=self.workdir)
        finally:
            log.close()
        self.buf = b""
        self.ended = False
        self.runs = 0
        self.starts += 1
        ready = self._answer(WORKER_START_TIMEOUT_S)
        if ready is None or "ready" not in ready:
            raise RuntimeError(f"the hostile-file worker did not start: {self._log_tail()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.proc = None

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _answer(self, timeout_s: float) -> dict[str, Any] | None:
        """The next line from the worker, or None on a timeout or its end."""
        if self.proc is None or self.proc.stdout is None:
            raise RuntimeError("worker not started")
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.ended = True
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.runs >= WORKER_RUNS_MAX:
            self.stop()
            self._start()
        proc = self.proc
        if proc is None or proc.stdin is None:
            raise RuntimeError("worker not started")
        self.runs += 1
        try:
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        started = time.monotonic()
        answer = self._answer(self.timeout_s)
        if answer is not None:
            if answer.get("status") == "fail":
                self.stop()  # whatever it left behind (threads, descriptors, memory) goes with it
            return answer
        took = time.monotonic() - started
        ended, self.ended = self.ended, False
        if ended:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=WORKER_START_TIMEOUT_S)
        self.stop()
        if not ended:
            return {"reader": job["reader"], "status": "fail", "signature": "hang",
                    "failure": f"hang: no answer in {took:.1f} s (limit {self.timeout_s} s)"}
        return {"reader": job["reader"], "status": "fail", "signature": f"worker died ({proc.returncode})",
                "failure": f"the worker died with {proc.returncode}: {self._log_tail()}"}


# --- a campaign ---------------------------------------------------------------------------------------------


@dataclass
class Failure:
    seed: int
    index: int
    reader: str
    signature: str
    failure: str
    description: str
    traceback: str = ""
    saved: str | None = None


@dataclass
class Summary:
    seed: int
    seconds: float
    memory_bytes: int
    timeout_s: float
    inputs: int = 0
    journals: int = 0
    imports: int = 0
    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # ok / error / fail
    errors: dict[str, int] = field(default_factory=dict)  # typed errors by name
    readers: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    worker_starts: int = 0
    elapsed_s: float = 0.0
    peak_rss_bytes: int = 0  # the most resident memory one run took (its worker's, imports included)
    peak_rss_reader: str = ""
    mutations: dict[str, int] = field(default_factory=dict)

    def signatures(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.failures:
            key = f"{f.reader}: {f.signature}"
            out[key] = out.get(key, 0) + 1
        return out

    def lines(self) -> list[str]:
        return [
            f"hostile files: seed {self.seed}, {self.elapsed_s:.0f} s (budget {self.seconds:.0f} s): "
            f"{self.inputs} inputs ({self.journals} journals, {self.imports} import sources), "
            f"{self.runs} reader runs",
            f"readers ({len(self.readers)}): {', '.join(self.readers)}",
            f"limits per run: {self.memory_bytes >> 20} MiB address space (RLIMIT_AS), {self.timeout_s:.0f} s wall; "
            f"worker processes started: {self.worker_starts}; the most resident memory a run took: "
            f"{self.peak_rss_bytes / (1 << 20):.0f} MiB ({self.peak_rss_reader or '-'})",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
            + "; typed errors: " + ", ".join(f"{k} {v}" for k, v in sorted(self.errors.items(), key=lambda x: -x[1])),
            f"failures: {len(self.failures)}"
            + "".join(f"\n  {n} x {sig}" for sig, n in sorted(self.signatures().items())),
        ]


def cross_check(results: Mapping[str, dict[str, Any]], session: bool) -> list[tuple[str, str]]:
    """What one input's readers must agree on: (reader, what is wrong)."""
    out: list[tuple[str, str]] = []
    verify = results.get("verify")
    if verify is None or verify.get("status") != "ok":
        return out
    verdict = verify.get("facts", {}).get("verdict")
    if verdict == "clean":
        for name in ("open-readonly", "read", "get", "follow", "cat", "info", "tail", "open-write", "open-shared",
                     "copy", "salvage"):
            r = results.get(name)
            if r is None:
                continue
            code = r.get("facts", {}).get("code", 0)
            if r.get("status") != "ok" or code != 0:
                why = r.get("error") or r.get("failure") or r.get("facts")
                out.append((name, f"verify calls the journal clean, but {name} gave {str(why)[:300]}"))
    if verdict == "torn":
        for name in ("open-readonly", "open-write", "open-shared"):
            r = results.get(name)
            if r is not None and r.get("status") != "ok":
                why = r.get("error") or r.get("failure")
                out.append((name, f"verify finds only a torn tail, but {name} gave {why}"))
    return out


def run_input(worker: Worker, readers: Sequence[Reader], input_dir: str, box: str, tree: Tree | None,
              session: bool) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    pristine = tree_to_json(_shallow(tree)) if tree is not None else None
    for r in readers:
        if r.imports != (tree is None) or (r.sessions_only and not session):
            continue
        results[r.name] = worker.run({"reader": r.name, "input": input_dir, "box": box,
                                      "pristine": pristine if r.kind == WRITER else None})
    return results


def _shallow(tree: Tree) -> Tree:
    return {rel: (Entry(b"", e.length) if e.size > len(e.data) else e) for rel, e in tree.items()}


def campaign(readers: Sequence[Reader], worker_argv: Sequence[str], seconds: float, seed: int = 0,
             save_dir: str | None = None, memory_bytes: int = MEMORY_BYTES_DEFAULT,
             timeout_s: float = RUN_TIMEOUT_S_DEFAULT, minimise: bool = True,
             inputs_max: int | None = None, out: Callable[[str], None] | None = None,
             first_index: int = 0) -> Summary:
    """Inputs ``first_index``, ``first_index + 1``, ... of ``seed`` through every reader until
    ``seconds`` have passed (or ``inputs_max`` inputs)."""
    summary = Summary(seed, seconds, memory_bytes, timeout_s, readers=[r.name for r in readers])
    started = time.monotonic()
    saved: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="journal-hostile-", dir=work_root()) as work:
        bases = build_bases(os.path.join(work, "bases"))
        worker = Worker(list(worker_argv), work, timeout_s)
        try:
            index = first_index
            while time.monotonic() - started < seconds and (inputs_max is None or summary.inputs < inputs_max):
                inp = os.path.join(work, f"input-{index}")
                box = os.path.join(work, "box")
                if is_import_input(seed, index):
                    form, data, desc = make_import_input(seed, index)
                    os.makedirs(inp)
                    with open(os.path.join(inp, "source.jsonl"), "wb") as f:
                        f.write(data)
                    with open(os.path.join(inp, "format"), "w") as f:
                        f.write(form)
                    tree: Tree | None = None
                    session = False
                    summary.imports += 1
                else:
                    tree, base, keys, done = make_input(seed, index, bases)
                    write_tree(tree, inp)
                    desc = f"base {base}; " + "; ".join(done)
                    session = bases[base].session
                    summary.journals += 1
                    for k in keys:
                        m = k.partition(":")[2]
                        summary.mutations[m] = summary.mutations.get(m, 0) + 1
                summary.inputs += 1
                results = run_input(worker, readers, inp, box, tree, session)
                for name, why in cross_check(results, session):
                    results[name] = {"reader": name, "status": "fail", "failure": f"violation: {why}",
                                     "signature": "violation: readers disagree with verify"}
                for res in results.values():
                    summary.runs += 1
                    if res.get("peakRssBytes", 0) > summary.peak_rss_bytes:
                        summary.peak_rss_bytes, summary.peak_rss_reader = res["peakRssBytes"], res["reader"]
                    st = res["status"]
                    summary.outcomes[st] = summary.outcomes.get(st, 0) + 1
                    if st == "error":
                        summary.errors[res["error"]] = summary.errors.get(res["error"], 0) + 1
                    if st != "fail":
                        continue
                    fail = Failure(seed, index, res["reader"], res.get("signature", "?"), res["failure"], desc,
                                   res.get("traceback", ""))
                    key = f"{fail.reader}: {fail.signature}"
                    if save_dir is not None and saved.get(key, 0) < SAVE_PER_SIGNATURE:
                        saved[key] = saved.get(key, 0) + 1
                        tree_min: Tree | None = tree
                        desc_min = desc
                        if minimise and tree is not None:
                            tree_min, desc_min = minimize(worker, readers, bases, seed, index, fail, work)
                        fail.saved = save_failure(save_dir, fail, tree_min, desc_min, inp if tree is None else None)
                    summary.failures.append(fail)
                    if out is not None:
                        out(f"FAIL input {index} ({desc[:200]}): {fail.reader}: {fail.failure[:300]}"
                            + (f"\n  saved: {fail.saved}" if fail.saved else ""))
                shutil.rmtree(inp, ignore_errors=True)
                index += 1
        finally:
            summary.worker_starts = worker.starts
            worker.stop()
    summary.elapsed_s = time.monotonic() - started
    return summary


def work_root() -> str | None:
    """Where inputs and sandboxes go: a tmpfs when there is a roomy one (every writer's fsync is
    then free, which is most of a run's time on a disk), else the default temporary directory."""
    try:
        st = os.statvfs(WORK_TMPFS)
    except OSError:
        return None
    return WORK_TMPFS if st.f_bavail * st.f_frsize >= WORK_TMPFS_FREE_BYTES_MIN and os.access(WORK_TMPFS, os.W_OK) \
        else None


def minimize(worker: Worker, readers: Sequence[Reader], bases: Mapping[str, Base], seed: int, index: int,
             fail: Failure, work: str) -> tuple[Tree, str]:
    """The smallest input found that fails the same way: mutations dropped one at a time, then
    files, while the reader's failure keeps its signature."""
    reader = next(r for r in readers if r.name == fail.reader)
    runs = 0
    until = time.monotonic() + MINIMIZE_SECONDS_MAX

    def same(tree: Tree) -> bool:
        nonlocal runs
        runs += 1 if time.monotonic() < until else MINIMIZE_RUNS_MAX
        inp = os.path.join(work, "minimise")
        shutil.rmtree(inp, ignore_errors=True)
        write_tree(tree, inp)
        res = worker.run({"reader": reader.name, "input": inp, "box": os.path.join(work, "box"),
                          "pristine": tree_to_json(_shallow(tree)) if reader.kind == WRITER else None})
        shutil.rmtree(inp, ignore_errors=True)
        return res.get("status") == "fail" and res.get("signature") == fail.signature

    tree, _, keys, done = make_input(seed, index, bases)
    if fail.signature.startswith("violation: readers disagree"):
        return tree, "; ".join(done)
    k = 0
    while k < len(keys) and len(keys) > 1 and runs < MINIMIZE_RUNS_MAX:
        fewer = keys[:k] + keys[k + 1 :]
        t, _, _, d = make_input(seed, index, bases, fewer)
        if same(t):
            keys, tree, done = fewer, t, d
        else:
            k += 1
    for rel in sorted(tree, key=lambda r: -len(r)):
        if runs >= MINIMIZE_RUNS_MAX:
            break
        smaller = {r: e for r, e in tree.items() if r != rel and not r.startswith(rel + "/")}
        if smaller != tree and same(smaller):
            tree = smaller
    kept = sorted(tree)
    return tree, "; ".join(done) + f" (minimised: files {kept})"


def save_failure(save_dir: str, fail: Failure, tree: Tree | None, desc: str, import_dir: str | None) -> str:
    os.makedirs(save_dir, exist_ok=True)
    doc: dict[str, Any] = {
        "seed": fail.seed, "index": fail.index, "reader": fail.reader, "signature": fail.signature,
        "failure": fail.failure, "description": desc, "traceback": fail.traceback,
        "replay": f"journal hostile-test --replay {{this file}}  (or --seed {fail.seed} --index {fail.index})",
    }
    if tree is not None:
        doc["files"] = tree_to_json(tree)
    elif import_dir is not None:
        with open(os.path.join(import_dir, "source.jsonl"), "rb") as f:
            doc["source"] = base64.b64encode(f.read()).decode("ascii")
        with open(os.path.join(import_dir, "format")) as f:
            doc["format"] = f.read()
    tag = hashlib.blake2b(f"{fail.reader}/{fail.signature}".encode(), digest_size=4).hexdigest()
    path = os.path.join(save_dir, f"hostile-seed{fail.seed}-input{fail.index}-{fail.reader}-{tag}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def replay(path: str, readers: Sequence[Reader], worker_argv: Sequence[str],
           timeout_s: float = RUN_TIMEOUT_S_DEFAULT) -> list[dict[str, Any]]:
    """Run the saved input through its reader (and every other reader) again: the results."""
    with open(path) as f:
        doc = json.load(f)
    with tempfile.TemporaryDirectory(prefix="journal-hostile-replay-", dir=work_root()) as work:
        inp = os.path.join(work, "input")
        tree: Tree | None = None
        if "files" in doc:
            tree = tree_from_json(doc["files"])
            write_tree(tree, inp)
        else:
            os.makedirs(inp)
            with open(os.path.join(inp, "source.jsonl"), "wb") as fo:
                fo.write(base64.b64decode(doc["source"]))
            with open(os.path.join(inp, "format"), "w") as fo:
                fo.write(doc["format"])
        session = tree is not None and _looks_like_session(inp)
        worker = Worker(list(worker_argv), work, timeout_s)
        try:
            results = run_input(worker, readers, inp, os.path.join(work, "box"), tree, session)
        finally:
            worker.stop()
    for name, why in cross_check(results, session):
        results[name] = {"reader": name, "status": "fail", "failure": f"violation: {why}"}
    first = [results.pop(doc["reader"])] if doc["reader"] in results else []
    return first + list(results.values())


def _looks_like_session(path: str) -> bool:

    try:
        with open_file(path, readonly=True) as j:
            rec = next(iter(j.read()), None)
            return rec is not None and not rec.is_bytes and isinstance(rec.event, dict) and \
                rec.event.get("type") == "session.started"
    except Exception:
        return False


def capture(fn: Callable[[], int]) -> tuple[int, str, str]:
    """Run ``fn`` (a command, in this process) with its stdout and stderr captured as a pipe
    would take them: UTF-8, strict, so text a pipe would refuse is refused here too."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="strict", write_through=True)
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = fn()
    finally:
        sys.stdout, sys.stderr = old
    return code, out_bytes.getvalue().decode("utf-8", "replace"), err_bytes.getvalue().decode("utf-8", "replace")
