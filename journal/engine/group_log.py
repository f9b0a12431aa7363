"""The bytes of a commit group's log, and their pure encoding and scan (no I/O).

A commit group (journal/engine/group.py) lets the journals of one store share an fdatasync: each
journal still writes its frames into its own live segment, and a copy of those bytes goes into
the group's log, which is the one file synced per group commit. The log is what makes the frames
durable until the journal's own segment is synced (at seal, at close, or when the group retires
a log file); recovery writes the log's entries back into the segments they name.

A log file, ``log-<generation, 20 digits>.jgl``, little-endian:

    header, LOG_HEADER_SIZE_BYTES (40):
        0   magic        8 bytes  LOG_MAGIC
        8   version      u32      LOG_VERSION
        12  reserved     u32      0
        16  generation   u64      the number in the file's name
        24  salt         u64      random per file: seeds every entry's checksum, so an entry left
                                  by another file (a recycled block) never passes as this one's
        32  checksum     u64      xxh64 of bytes 0..32

    then entries, each starting at a multiple of 8:
        0   magic        u32      ENTRY_MAGIC
        4   body_bytes   u32      the body's length (at most ENTRY_BODY_BYTES_MAX)
        8   number       u64      1, 2, 3, ... in the file: contiguous
        16  flags        u32      ENTRY_AFTER_SYNC: every byte of the file before this entry had
                                  been fdatasync'd when it was written (the first entry of a
                                  write that followed a returned fdatasync)
        20  head_check   u32      the low 32 bits of xxh64 of bytes 0..20, seeded with the salt
        24  checksum     u64      xxh64 of bytes 0..24 and of the body, seeded with the salt
        32  body:
            journal_id   16 bytes the segment header's journal id
            base_seq     u64      the segment's (its file name)
            offset       u64      where ``data`` goes in that segment
            path_bytes   u16      then the journal's directory relative to the group's root,
                                  '/'-separated UTF-8, no '.', '..' or empty component
            data         the rest: the bytes written to the segment at ``offset``
        zeros up to the next multiple of 8

The checksums are verified before the length is trusted. A scan stops at the first entry that
does not verify: what follows is a torn tail (a write the crash cut short, never acknowledged, or
entries written at flush level whose pages a power loss dropped out of order), unless a verified
entry marked ENTRY_AFTER_SYNC follows: every byte before it had been synced, so the entry that
does not verify was damaged after its fdatasync: corruption. The segments' frames use the same
rule (FLAG_AFTER_SYNC). Looking for such an entry in a torn tail checks each 8-byte position's
head_check (20 bytes hashed) before it hashes any body: a tail that record payloads fill with
headers (they are copied into the log) cannot make the scan quadratic, as the salt they would
need to forge a head_check is the file's own, random.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import xxhash

from journal.engine import format as fmt

LOG_MAGIC = b"JRNLGRP\x00"
LOG_VERSION = 1
LOG_SUFFIX = ".jgl"
_LOG_HEADER_BODY = struct.Struct("<8sIIQQ")
LOG_HEADER_SIZE_BYTES = _LOG_HEADER_BODY.size + 8
ENTRY_MAGIC = 0x4A475245  # "ERGJ" on disk
_ENTRY_HEADER = struct.Struct("<IIQIIQ")  # magic, body_bytes, number, flags, head_check, checksum
ENTRY_HEADER_SIZE_BYTES = _ENTRY_HEADER.size
ENTRY_AFTER_SYNC = 1
_HEAD_CHECKED_BYTES = 20  # the header's bytes head_check covers
_CHECKED_BYTES = 24  # the header's bytes the checksum covers, with the body
_ENTRY_FIXED = struct.Struct("<16sQQH")
_ENTRY_HEAD = struct.Struct("<IIQI")  # the fields head_check covers
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_ZEROS = bytes(8)
ENTRY_ALIGN_BYTES = 8
PATH_BYTES_MAX = 4096  # a journal's directory relative to the group root
# One entry carries one write of one journal's frames: a journal writes more than this at once
# (a record larger than a batch) into its segment and syncs it there, without the group
# (writer._write_frames), so an entry's body stays under ENTRY_BODY_BYTES_MAX.
GROUP_WRITE_BYTES_MAX = 8 * 1024 * 1024
ENTRY_BODY_BYTES_MAX = 16 * 1024 * 1024
# A log file is retired (its journals' segments synced, the file removed) once it holds this much.
LOG_ROTATE_BYTES = 64 * 1024 * 1024
# No log file this engine writes is larger: a retirement is due long before. A recovery refuses a
# larger one rather than read it whole.
LOG_FILE_BYTES_MAX = LOG_ROTATE_BYTES + 2 * (ENTRY_BODY_BYTES_MAX + ENTRY_HEADER_SIZE_BYTES)

assert LOG_HEADER_SIZE_BYTES % ENTRY_ALIGN_BYTES == 0


class LogHeader(NamedTuple):
    generation: int
    salt: int


class Entry(NamedTuple):
    number: int
    journal_id: bytes
    base_seq: int
    offset: int
    path: str  # relative to the group's root, '/'-separated
    data: bytes
    at: int  # the entry's offset in its log file


class LogError(ValueError):
    """A log file whose bytes cannot be trusted; ``offset`` and ``reason`` say where and why."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class Scan(NamedTuple):
    header: LogHeader
    entries: list[Entry]
    end: int  # where the valid entries end: a torn tail, if any, is [end, len(data))
    torn: bool  # bytes other than zeros follow ``end``


def log_name(generation: int) -> str:
    return f"log-{generation:020d}{LOG_SUFFIX}"


def parse_log_name(name: str) -> int | None:
    stem = name[4 : -len(LOG_SUFFIX)]
    if not (name.startswith("log-") and name.endswith(LOG_SUFFIX) and len(stem) == 20 and stem.isdigit()):
        return None
    return int(stem)


def encode_header(generation: int, salt: int) -> bytes:
    body = _LOG_HEADER_BODY.pack(LOG_MAGIC, LOG_VERSION, 0, generation, salt)
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body))


def decode_header(data: bytes) -> LogHeader:
    if len(data) < LOG_HEADER_SIZE_BYTES:
        raise LogError(0, f"{len(data)} bytes, shorter than a log header ({LOG_HEADER_SIZE_BYTES})")
    body = data[: _LOG_HEADER_BODY.size]
    (checksum,) = struct.unpack_from("<Q", data, _LOG_HEADER_BODY.size)
    if xxhash.xxh64_intdigest(body) != checksum:
        raise LogError(0, "the log header's checksum does not match")
    magic, version, _reserved, generation, salt = _LOG_HEADER_BODY.unpack(body)
    if magic != LOG_MAGIC:
        raise LogError(0, "not a commit group log (bad magic)")
    if version != LOG_VERSION:
        raise LogError(0, f"log version {version}; this build reads version {LOG_VERSION}")
    return LogHeader(generation, salt)


def check_path(path: str) -> str:
    """``path`` if it is a journal directory relative to a group root this engine would write:
    '/'-separated, no empty, '.' or '..' component, not absolute. A log entry naming anything
    else is refused, so that no crafted log writes outside the group's root."""
    raw = path.encode("utf-8", "surrogateescape")
    parts = path.split("/")
    if (
        not path
        or len(raw) > PATH_BYTES_MAX
        or "\x00" in path
        or "\\" in path
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise ValueError(f"not a journal path relative to a group root: {path!r}")
    return path


def entry_pieces(
    number: int, journal_id: bytes, base_seq: int, offset: int, path_raw: bytes, data: bytes | memoryview, salt: int,
    after_sync: bool = False,
) -> tuple[bytes, bytes | memoryview, bytes]:
    """An entry as the pieces a write joins (its header and fixed fields, ``data``, its padding):
    on the durable append's path, so ``path_raw`` comes checked (check_path) and encoded."""
    fixed = _ENTRY_FIXED.pack(journal_id, base_seq, offset, len(path_raw)) + path_raw
    body_bytes = len(fixed) + len(data)
    if body_bytes > ENTRY_BODY_BYTES_MAX:
        raise ValueError(f"a log entry of {body_bytes} bytes is over {ENTRY_BODY_BYTES_MAX}")
    head = _ENTRY_HEAD.pack(ENTRY_MAGIC, body_bytes, number, ENTRY_AFTER_SYNC if after_sync else 0)
    head += _U32.pack(xxhash.xxh64_intdigest(head, salt) & 0xFFFFFFFF)
    digest = xxhash.xxh64(head, seed=salt)
    digest.update(fixed)
    digest.update(data)
    pad = -(ENTRY_HEADER_SIZE_BYTES + body_bytes) % ENTRY_ALIGN_BYTES
    return head + _U64.pack(digest.intdigest()) + fixed, data, _ZEROS[:pad]


def encode_entry(
    number: int, journal_id: bytes, base_seq: int, offset: int, path: str, data: bytes, salt: int,
    after_sync: bool = False,
) -> bytes:
    if len(journal_id) != fmt.SEGMENT_JOURNAL_ID_SIZE_BYTES:
        raise ValueError("a journal id is 16 bytes")
    raw_path = check_path(path).encode("utf-8", "surrogateescape")
    return b"".join(entry_pieces(number, journal_id, base_seq, offset, raw_path, data, salt, after_sync))


def _head_at(data: bytes, at: int, salt: int) -> tuple[int, int, int, int] | None:
    """(body_bytes, number, flags, checksum) of the header at ``at`` if its magic and head_check
    hold and its body fits the bytes there are; None otherwise. Hashes 20 bytes, never a body."""
    if at + ENTRY_HEADER_SIZE_BYTES > len(data):
        return None
    magic, body_bytes, number, flags, head_check, checksum = _ENTRY_HEADER.unpack_from(data, at)
    if magic != ENTRY_MAGIC or body_bytes < _ENTRY_FIXED.size or body_bytes > ENTRY_BODY_BYTES_MAX:
        return None
    if at + ENTRY_HEADER_SIZE_BYTES + body_bytes > len(data):  # the length against the bytes there are
        return None
    if xxhash.xxh64_intdigest(memoryview(data)[at : at + _HEAD_CHECKED_BYTES], salt) & 0xFFFFFFFF != head_check:
        return None
    return body_bytes, number, flags, checksum


def _entry_at(data: bytes, at: int, salt: int) -> tuple[Entry, int, int] | None:
    """The entry at ``at``, where the next one starts, and its flags; None if none verifies."""
    head = _head_at(data, at, salt)
    if head is None:
        return None
    body_bytes, number, flags, checksum = head
    start = at + ENTRY_HEADER_SIZE_BYTES
    body = memoryview(data)[start : start + body_bytes]
    digest = xxhash.xxh64(memoryview(data)[at : at + _CHECKED_BYTES], seed=salt)
    digest.update(body)
    if digest.intdigest() != checksum:
        return None
    journal_id, base_seq, offset, path_bytes = _ENTRY_FIXED.unpack_from(body, 0)
    path_end = _ENTRY_FIXED.size + path_bytes
    if path_end > body_bytes:
        raise LogError(at, f"entry {number}: its path runs past its body")
    path = bytes(body[_ENTRY_FIXED.size : path_end]).decode("utf-8", "surrogateescape")
    try:
        check_path(path)
    except ValueError as exc:
        raise LogError(at, f"entry {number}: {exc}") from None
    if offset < fmt.SEGMENT_HEADER_SIZE_BYTES or offset + (body_bytes - path_end) > fmt.SEGMENT_SIZE_BYTES_MAX:
        raise LogError(at, f"entry {number}: offset {offset} is outside a segment's frames")
    end = start + body_bytes
    end += -end % ENTRY_ALIGN_BYTES
    return Entry(number, journal_id, base_seq, offset, path, bytes(body[path_end:]), at), end, flags


def scan(data: bytes) -> Scan:
    """Every entry of a log file's bytes, in order; LogError where they cannot be trusted: a bad
    header, an entry whose number breaks the count, a verified ENTRY_AFTER_SYNC entry after one
    that does not verify."""
    if len(data) > LOG_FILE_BYTES_MAX:
        raise LogError(0, f"{len(data)} bytes, more than a log file ever holds ({LOG_FILE_BYTES_MAX})")
    header = decode_header(data)
    entries: list[Entry] = []
    at = LOG_HEADER_SIZE_BYTES
    while True:
        got = _entry_at(data, at, header.salt)
        if got is None:
            break
        entry, nxt, _flags = got
        if entry.number != len(entries) + 1:
            raise LogError(at, f"entry number {entry.number} where {len(entries) + 1} was due")
        entries.append(entry)
        at = nxt
    rest = memoryview(data)[at:]
    torn = len(rest) > 0 and any(rest.tobytes().strip(b"\x00"))
    if torn:
        # Bytes that are not an entry: a write the crash cut short, or unsynced entries a power
        # loss kept out of order; unless a verified entry marked ENTRY_AFTER_SYNC follows (every
        # byte before it had been synced): then synced bytes were damaged, and nothing is guessed.
        magic = _U32.pack(ENTRY_MAGIC)
        probe = data.find(magic, at + ENTRY_ALIGN_BYTES)
        while probe != -1:
            if probe % ENTRY_ALIGN_BYTES == 0:
                head = _head_at(data, probe, header.salt)
                if head is not None and head[2] & ENTRY_AFTER_SYNC and head[1] > len(entries):
                    try:
                        later = _entry_at(data, probe, header.salt)
                    except LogError:
                        later = None
                    if later is not None:
                        raise LogError(
                            at, f"entry {len(entries) + 1} does not verify, and entry {later[0].number} at offset "
                            f"{probe}, written after the bytes before it were synced, does: synced bytes of the "
                            "log are damaged",
                        )
            probe = data.find(magic, probe + 1)
    return Scan(header, entries, at, torn)


def relative_path(root: str, journal_path: str) -> str:
    """``journal_path`` relative to ``root``, '/'-separated; ValueError if it is not under it."""
    rel = os.path.relpath(os.path.abspath(journal_path), os.path.abspath(root))
    if rel == "." or rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        raise ValueError(f"{journal_path} is not inside the group's root {root}")
    return check_path(rel.replace(os.sep, "/"))


__all__ = [
    "ENTRY_BODY_BYTES_MAX",
    "LOG_FILE_BYTES_MAX",
    "LOG_HEADER_SIZE_BYTES",
    "LOG_ROTATE_BYTES",
    "Entry",
    "LogError",
    "LogHeader",
    "Scan",
    "check_path",
    "decode_header",
    "encode_entry",
    "encode_header",
    "entry_pieces",
    "log_name",
    "parse_log_name",
    "relative_path",
    "scan",
]
