"""Review of issue 33's merged segments: a member's seal footer is read from disk and may be
crafted (its checksum made to match). The idempotency keys it lists go into the merged seal;
one outside the member's seqs is a damaged source (CorruptionError, which says so), not an
internal invariant of the engine (InvariantError, "a bug in journal")."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import journal
from journal.engine import copy as prefix_copy
from journal.engine import format as fmt
from journal.engine.segment import read_header, read_seal
from journal.errors import CorruptionError
from journal.fs import OsFileSystem

RECORDS = 2000  # at 4 KiB segments: past SMALL_SEGMENTS_LINKED_MAX sealed segments, so a copy merges


def _reseal(path: str, keys: list[tuple[int, bytes]]) -> None:
    """Rewrite the seal footer of the sealed segment at ``path`` with ``keys``, its checksum valid."""
    fs = OsFileSystem()
    name = os.path.basename(path)
    f = fs.open_read(path)
    try:
        header = read_header(f, name)
        seal = read_seal(f, header, name, f.size())
    finally:
        f.close()
    assert seal is not None
    parts = [fmt._SEAL_HEAD.pack(seal.record_count, seal.first_seq, seal.last_seq, seal.index_interval_bytes,
                                 len(seal.entries), len(keys))]
    parts += [fmt._SEAL_ENTRY.pack(s, o) for s, o in seal.entries]
    parts += [fmt._SEAL_KEY.pack(s, len(k)) + k for s, k in keys]
    parts.append(struct.pack("<Q", seal.seal_offset))
    payload = b"".join(parts)
    frame = fmt.encode_frame(seal.last_seq, fmt.KIND_SEAL, len(payload), payload, header.salt)
    with open(path, "r+b") as g:
        g.truncate(seal.seal_offset)
        g.seek(seal.seal_offset)
        g.write(frame)


@pytest.mark.parametrize("key", [(10**9, b"k"), (1, b"")], ids=["seq-outside", "empty-key"])
def test_a_crafted_key_in_a_members_seal_is_corruption(tmp_path: Path, key: tuple[int, bytes]) -> None:
    src = str(tmp_path / "src")
    with journal.open(src, create=True, segment_size_bytes=4096) as j:
        for i in range(RECORDS):
            j.append({"i": i, "pad": "x" * 100}, durability="buffered", idempotency_key=f"k{i}")
        j.sync()
        at = j.last_seq - 1
    fs = OsFileSystem()
    dst = str(tmp_path / "dst")
    os.mkdir(dst)
    out = prefix_copy.copy_prefix(fs, src, dst, at)
    assert out.segments_merged  # the journal is one a copy merges
    member = out.segments_merged[0][1]
    _reseal(os.path.join(src, member), [key])
    dst2 = str(tmp_path / "dst2")
    os.mkdir(dst2)
    with pytest.raises(CorruptionError) as got:
        prefix_copy.copy_prefix(fs, src, dst2, at)
    assert got.value.segment == member
