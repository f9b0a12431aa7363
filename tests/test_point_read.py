"""Journal.get through a segment's dense index (reader.read_point): the records a scan gives, a
block decoded once for its neighbours, and a block frame whose table disagrees with it refused."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.engine import format as fmt
from journal.engine import reader
from journal.engine.core import Journal
from journal.errors import CorruptionError
from tests.conftest import count_decodes


def _event(i: int) -> dict[str, object]:
    return {"i": i, "pad": "x" * ((i * 7919) % 900)}


def _engine(j: object) -> Journal:
    assert isinstance(j, Journal)
    return j


def _write_mixed(path: Path, **opts: Any) -> None:
    """Records of every kind a point read decodes: JSON, bytes, synthetic, keyed; written
    together (block frames, unless ``block_bytes=0``) and one at a time at "flush" (a frame each)."""
    with journal.open(path, create=True, **opts) as j:
        for i in range(1, 121):
            if i % 11 == 0:
                j.append(f"bytes {i}".encode() * (i % 5), durability="buffered")
            elif i % 13 == 0:
                j.append(_event(i), durability="buffered", synthetic=True)
            elif i % 17 == 0:
                j.append(_event(i), durability="buffered", idempotency_key=f"k{i}")
            else:
                j.append(_event(i), durability="buffered")
        for i in range(121, 141):
            j.append(_event(i), durability="flush")
        j.sync()


@pytest.mark.parametrize(
    "opts", [{}, {"block_bytes": 0}, {"compress": False}, {"block_bytes": 4096}], ids=["blocks", "frames", "raw", "4k"]
)
def test_point_reads_give_what_a_scan_gives(tmp_path: Path, opts: dict[str, Any]) -> None:
    path = tmp_path / "j"
    _write_mixed(path, **opts)
    with journal.open(path, readonly=True) as j:
        scanned = {r.seq: (r.payload, r.is_bytes, r.synthetic, r.key, r.event) for r in j.read()}
        assert len(scanned) == 140
        for _round in range(2):  # the first round builds the dense index, the second reads through it
            for seq in [*range(140, 0, -3), *range(1, 141, 2)]:
                rec = j.get(seq)
                assert rec is not None and rec.seq == seq
                assert (rec.payload, rec.is_bytes, rec.synthetic, rec.key, rec.event) == scanned[seq], seq
        eng = _engine(j)
        opened = eng._segments.open(eng._segments.listing()[-1])
        assert len(opened.offsets) == 140  # the reads above went through the dense index


def test_frame_header_layout_is_the_formats() -> None:
    assert reader._FRAME_HEAD.format == fmt._FRAME_HEADER.format
    assert reader._FRAME_HEAD.size == fmt.FRAME_HEADER_SIZE_BYTES


def test_a_neighbour_of_the_last_read_decodes_no_block_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True) as j:
        j.append_many([_event(i) for i in range(1, 41)], durability="flush")  # one block frame
    with journal.open(path, readonly=True) as j:
        j.get(20)  # builds the index (a small segment: after one read)
        j.get(20)
        calls = count_decodes(monkeypatch)
        got = [j.get(seq) for seq in (21, 19, 40, 1)]
        assert [r.event for r in got if r is not None] == [_event(s) for s in (21, 19, 40, 1)]
        assert calls == []
        # Each read has a Record of its own: a change to one event reaches no other read.
        a, b = j.get(5), j.get(5)
        assert a is not None and b is not None and a is not b
        a.event["i"] = -1
        assert b.event == _event(5)


def _first_block(data: bytes, salt: int) -> tuple[int, int, int, int]:
    """(offset, stored_len, raw_len, count) of the first block frame of a segment's bytes."""
    res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, salt, 1)
    for fr in res.frames:
        if fr.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK:
            return fr.offset, fr.stored_len, fr.raw_len, fr.records
    raise AssertionError("no block frame")


@pytest.mark.parametrize("fault", ["lengths", "flags"])
def test_a_block_table_that_disagrees_with_its_frame_is_corruption(tmp_path: Path, fault: str) -> None:
    """A block frame whose checksum holds but whose table does not add up to its body (its
    records' lengths), or names flags this version does not know, is refused, never cut."""
    path = tmp_path / "j"
    with journal.open(path, create=True) as j:
        j.append_many([_event(i) for i in range(1, 41)], durability="flush")
    seg = os.path.join(path, sorted(n for n in os.listdir(path) if n.endswith(".seg"))[0])
    with open(seg, "rb") as f:
        data = bytearray(f.read())
    salt = fmt.decode_segment_header(bytes(data)).salt
    off, stored_len, _raw_len, count = _first_block(bytes(data), salt)
    table = off + fmt.FRAME_HEADER_SIZE_BYTES + fmt.BLOCK_COUNT_SIZE_BYTES
    if fault == "lengths":
        first, second = struct.unpack_from("<II", data, table)
        struct.pack_into("<II", data, table, first + 1, second)  # the lengths add up to one byte more
    else:
        data[table + 4 * count] = 0x01  # a record flag bit no version knows
    header_tail = bytes(data[off + fmt.FRAME_CHECKSUMMED_FROM : off + fmt.FRAME_HEADER_SIZE_BYTES])
    payload = bytes(data[off + fmt.FRAME_HEADER_SIZE_BYTES : off + fmt.FRAME_HEADER_SIZE_BYTES + stored_len])
    struct.pack_into("<Q", data, off, fmt.frame_checksum(header_tail, payload, salt))  # a genuine frame
    with open(seg, "wb") as f:
        f.write(data)
    with journal.open(path, readonly=True) as j:
        eng = _engine(j)
        eng._segments.open(eng._segments.listing()[-1])._extend(40, 1 << 30)  # the dense index, no read yet
        with pytest.raises(CorruptionError, match="block"):
            j.get(2)


def test_a_point_read_on_a_closed_handle_is_refused(tmp_path: Path) -> None:
    """Read-only or not, a closed handle refuses a point read (a read-only one checks under the
    point-read lock only: the check before it guards the flush of a writable one)."""
    path = tmp_path / "j"
    j = journal.open(path, create=True)
    j.append(_event(1), durability="flush")
    r = journal.open(path, readonly=True)
    assert r.get(1) is not None
    for h in (j, r):
        h.close()
        with pytest.raises(journal.JournalClosedError):
            h.get(1)
