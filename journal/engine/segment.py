"""Segment files: naming, atomic creation, headers, seal footers.

A segment is created whole before any record goes into it: header written to ``<name>.tmp``,
fsync'd, renamed into place, directory fsync'd. So a segment that is visible under its name
always has a valid, durable header, and a crash can only leave a ``.tmp`` file that holds no
record (recovery removes it).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from journal.engine import format as fmt
from journal.errors import CorruptionError, InvariantError, NewerFormatError
from journal.fs import File, FileSystem, pread_upto, write_all

TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class SegmentName:
    base_seq: int
    name: str


def list_segments(fs: FileSystem, dirpath: str, names: list[str] | None = None) -> list[SegmentName]:
    """The segments of a directory, by base seq (from ``names`` if the caller listed it)."""
    out = []
    for name in fs.listdir(dirpath) if names is None else names:
        base = fmt.parse_segment_name(name)
        if base is not None:
            out.append(SegmentName(base, name))
    out.sort(key=lambda s: s.base_seq)
    return out


def list_temp_files(fs: FileSystem, dirpath: str) -> list[str]:
    return [n for n in fs.listdir(dirpath) if n.endswith(fmt.SEGMENT_SUFFIX + TMP_SUFFIX)]


def new_header(journal_id: bytes, segment_number: int, base_seq: int) -> fmt.SegmentHeader:
    return fmt.SegmentHeader(
        fmt.FORMAT_VERSION, journal_id, segment_number, base_seq, fmt.segment_salt(journal_id, segment_number, base_seq)
    )


def create_segment(fs: FileSystem, dirpath: str, header: fmt.SegmentHeader, sector_bytes: int = 0) -> File:
    """Make a segment durable under its final name and return it open for writing.

    With ``sector_bytes``, a padding frame after the header fills its sector, so the first
    batch never shares a sector with the synced header (storage without powersafe overwrite).
    """
    name = fmt.segment_name(header.base_seq)
    final = os.path.join(dirpath, name)
    tmp = final + TMP_SUFFIX
    if not (not fs.exists(final)):
        raise InvariantError(f"segment {name} already exists")
    if fs.exists(tmp):
        fs.unlink(tmp)  # a previous attempt's temp file holds only a header
    f = fs.open_write(tmp, create=True)
    try:
        write_all(f, fmt.encode_segment_header(header) + header_padding(header, sector_bytes), 0)
        f.fsync()
        fs.rename(tmp, final)
        fs.fsync_dir(dirpath)
    except BaseException:
        f.close()
        raise
    f.path = final
    return f


def header_padding(header: fmt.SegmentHeader, sector_bytes: int) -> bytes:
    """The padding frame that ends a new segment's first sector (b"" without sector_bytes)."""
    return fmt.padding_frame(fmt.SEGMENT_HEADER_SIZE_BYTES, sector_bytes, header.base_seq - 1, header.salt)


def read_header(f: File, segment: str) -> fmt.SegmentHeader:
    data = f.pread(fmt.SEGMENT_HEADER_SIZE_BYTES, 0)
    try:
        header = fmt.decode_segment_header(data)
    except fmt.HeaderError as exc:
        if exc.version > fmt.FORMAT_VERSION:
            raise NewerFormatError(f.path, f"segment format version {exc.version}", fmt.FORMAT_VERSION) from None
        raise CorruptionError(segment, 0, None, exc.reason) from None
    expected_base = fmt.parse_segment_name(segment)
    if expected_base is not None and header.base_seq != expected_base:
        raise CorruptionError(segment, 0, None, f"header base seq {header.base_seq} does not match the file name")
    return header


def read_seal(f: File, header: fmt.SegmentHeader, segment: str, file_size: int) -> fmt.SealInfo | None:
    """The verified seal footer of a segment, or None if its last bytes are not a valid seal."""
    min_size = fmt.SEGMENT_HEADER_SIZE_BYTES + fmt.FRAME_HEADER_SIZE_BYTES + fmt.SEAL_TAIL_SIZE_BYTES
    if file_size < min_size:
        return None
    # A reader's file_size can be stale: the writer cuts its reserved space off the live segment
    # before it writes the seal, so every read here may come back short. Not sealed (yet), then.
    tail = f.pread(fmt.SEAL_TAIL_SIZE_BYTES, file_size - fmt.SEAL_TAIL_SIZE_BYTES)
    if len(tail) < fmt.SEAL_TAIL_SIZE_BYTES:
        return None
    seal_offset = fmt.seal_tail_offset(tail)
    if not fmt.SEGMENT_HEADER_SIZE_BYTES <= seal_offset <= file_size - fmt.FRAME_HEADER_SIZE_BYTES:
        return None
    # Check the would-be seal frame's header before reading the rest: in a live segment the last
    # 8 bytes are payload, and reading "the footer" they point at would read the whole tail.
    head = f.pread(fmt.FRAME_HEADER_SIZE_BYTES, seal_offset)
    if len(head) < fmt.FRAME_HEADER_SIZE_BYTES:
        return None
    _, stored_len, _, _, flags, _, marker = fmt.read_frame_header(head, 0)
    if (
        marker != fmt.FRAME_MARKER
        or flags & fmt.FLAG_KIND_MASK != fmt.KIND_SEAL
        or fmt.FRAME_HEADER_SIZE_BYTES + stored_len != file_size - seal_offset
        or stored_len > fmt.FRAME_STORED_BYTES_LIMIT  # a length from disk sizes no read past the format's limit
    ):
        return None
    buf = pread_upto(f, file_size - seal_offset, seal_offset)
    if len(buf) < file_size - seal_offset:
        return None
    seal = fmt.verify_frame(buf, 0, header.salt)
    if seal is None or not seal.supported or seal.kind != fmt.KIND_SEAL or seal.end != len(buf):
        return None
    seq = seal.seq
    try:
        info = fmt.decode_seal_payload(buf[fmt.FRAME_HEADER_SIZE_BYTES :])
    except ValueError as exc:
        raise CorruptionError(segment, seal_offset, seq, f"seal footer: {exc}") from None
    if info.seal_offset != seal_offset or info.last_seq != seq or info.first_seq != header.base_seq:
        raise CorruptionError(segment, seal_offset, seq, "seal footer disagrees with its segment")
    return info


def read_start(fs: FileSystem, dirpath: str) -> fmt.StartMarker | None:
    """The journal's start marker (docs/FORMAT.md, "Start marker"), or None if it has none."""
    path = os.path.join(dirpath, fmt.START_FILE)
    if not fs.exists(path):
        return None
    f = fs.open_read(path)
    try:
        data = f.pread(fmt.START_SIZE_BYTES + 1, 0)
    finally:
        f.close()
    try:
        return fmt.decode_start(data)
    except fmt.HeaderError as exc:
        if exc.version > fmt.START_VERSION:
            raise NewerFormatError(path, f"start marker format version {exc.version}", fmt.START_VERSION) from None
        raise CorruptionError(fmt.START_FILE, 0, None, exc.reason) from None


def split_front(
    segments: list[SegmentName], start: fmt.StartMarker | None
) -> tuple[list[SegmentName], list[SegmentName]]:
    """(the journal's segments, the ones a drop_prefix dropped whose unlink a crash cut short).

    Raises CorruptionError when the front is missing: without a start marker the first
    segment must begin at seq 1; with one, a segment must begin exactly at its first seq.
    """
    if start is None:
        if segments and segments[0].base_seq != 1:
            raise CorruptionError(
                segments[0].name, 0, None,
                f"the first segment begins at seq {segments[0].base_seq}, not 1, and no {fmt.START_FILE} "
                "marker says the records before it were dropped: the segments before it are missing",
            )
        return segments, []
    dropped = [s for s in segments if s.base_seq < start.first_seq]
    kept = segments[len(dropped):]
    if not kept or kept[0].base_seq != start.first_seq:
        found = f"at seq {kept[0].base_seq}" if kept else "nowhere"
        raise CorruptionError(
            kept[0].name if kept else fmt.START_FILE, 0, None,
            f"the journal begins at seq {start.first_seq} ({fmt.START_FILE}), but its first segment begins {found}: "
            "the segment that holds its first records is missing",
        )
    return kept, dropped


def check_start_header(start: fmt.StartMarker | None, first: fmt.SegmentHeader, segment: str) -> None:
    """The first segment is the one the start marker names (its journal and number)."""
    if start is None:
        if first.segment_number != 0:
            raise CorruptionError(segment, 0, None, f"the first segment is number {first.segment_number}, not 0, "
                                                    f"and no {fmt.START_FILE} marker says earlier ones were dropped")
        return
    if first.journal_id != start.journal_id or first.segment_number != start.segment_number:
        raise CorruptionError(
            segment, 0, None,
            f"{fmt.START_FILE} names segment number {start.segment_number} of journal {start.journal_id.hex()}, "
            f"but the first segment is number {first.segment_number} of journal {first.journal_id.hex()}",
        )


def drop_victims(segments: list[SegmentName], before_seq: int) -> list[SegmentName]:
    """The segments ``drop_prefix(before_seq)`` deletes: every one followed by another (so it is
    sealed: the writer seals a segment before it makes the next) that begins at or before
    ``before_seq`` (so all of its records come before it). Never the last segment."""
    return [seg for seg, nxt in itertools.pairwise(segments) if nxt.base_seq <= before_seq]
