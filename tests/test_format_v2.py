"""What format version 2 added: block frames, pinned by tests/vectors/format_v2.json, and what
the engine does with them (write, read, seek, get, tear, damage, copy, salvage, old segments)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct

import pytest
import xxhash
import zstandard

import journal
from journal.engine import format as fmt
from journal.engine.encoding import encode_event, frame_specs
from journal.engine.options import Options
from journal.engine.reader import decode_block
from journal.engine.salvage import salvage
from journal.engine.verify import CLEAN, CORRUPT, verify

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "format_v2.json").read_text())
SALT = VECTORS["salt"]


def _batch() -> tuple[list[fmt.FrameSpec], bytes]:
    b = VECTORS["batch"]
    specs = [
        fmt.FrameSpec(f["flags"], f["raw_len"], bytes.fromhex(f["stored_hex"]), f["records"]) for f in b["frames"]
    ]
    return specs, bytes.fromhex(b["hex"])


def _segment() -> bytes:
    header = bytes.fromhex(VECTORS["segment_header"]["hex"])
    return header + bytes.fromhex(VECTORS["batch"]["hex"]) + bytes.fromhex(VECTORS["seal"]["frame_hex"])


# --- the bytes ----------------------------------------------------------------------------------


def test_a_version_2_header_is_pinned_and_read() -> None:
    v = VECTORS["segment_header"]
    header = fmt.SegmentHeader(2, bytes.fromhex(VECTORS["journal_id"]), v["segment_number"], v["base_seq"], SALT)
    data = fmt.encode_segment_header(header)
    assert data.hex() == v["hex"]
    assert struct.unpack_from("<H", data, 8)[0] == 2 and fmt.FORMAT_VERSION_MIN <= 2 < fmt.FORMAT_VERSION  # still read
    assert fmt.decode_segment_header(data) == header


def test_block_frames_are_pinned_field_by_field() -> None:
    specs, expected = _batch()
    assert fmt.encode_batch(VECTORS["batch"]["first_seq"], specs, SALT, commit_last=True) == expected
    pos, seqs = 0, []
    for i, spec in enumerate(specs):
        checksum, stored_len, raw_len, seq, flags, dict_id, marker = struct.unpack_from("<QIIQHHI", expected, pos)
        assert (stored_len, raw_len, dict_id, marker) == (len(spec.stored), spec.raw_len, 0, fmt.FRAME_MARKER)
        assert flags == spec.flags | (fmt.FLAG_COMMIT if i == len(specs) - 1 else 0)
        assert checksum == xxhash.xxh64_intdigest(expected[pos + 8 : pos + 32 + stored_len], seed=SALT)
        seqs.append(seq)
        pos += 32 + stored_len
    assert pos == len(expected)
    # A block frame carries the seq of its last record: 1001 alone, 1002-1004, 1005-1006.
    assert seqs == [1001, 1004, 1006]
    assert [s.flags & fmt.FLAG_KIND_MASK for s in specs] == [fmt.KIND_DATA, fmt.KIND_BLOCK, fmt.KIND_BLOCK]


def test_a_block_table_reads_back_as_written() -> None:
    specs, _ = _batch()
    records = VECTORS["batch"]["records"]
    zstd_block = specs[1]
    head = fmt.decode_block_head(zstd_block.stored, zstd_block.raw_len)
    assert head.lengths == tuple(len(bytes.fromhex(r["hex"])) for r in records[1:4])
    assert list(head.flags) == [r["flags"] for r in records[1:4]]
    assert head.body_offset == 4 + 5 * 3
    body = zstandard.ZstdDecompressor().decompress(zstd_block.stored[head.body_offset :], max_output_size=1 << 20)
    assert body == b"".join(bytes.fromhex(r["hex"]) for r in records[1:4])
    raw_block = specs[2]
    head = fmt.decode_block_head(raw_block.stored, raw_block.raw_len)
    assert raw_block.stored[head.body_offset :] == b"".join(bytes.fromhex(r["hex"]) for r in records[4:])


def test_the_vector_segment_scans_and_decodes_to_its_records() -> None:
    seg = _segment()
    res = fmt.scan(seg, 64, SALT, 1001)
    assert res.stop == fmt.Stop.SEALED and res.stop_offset == len(seg)
    got = [(f.first_seq, f.seq, f.records) for f in res.frames[:3]]
    assert got == [(1001, 1001, 1), (1002, 1004, 3), (1005, 1006, 2)]
    assert res.record_count == 6
    assert fmt.verify_scan(seg, 64, SALT, 1001).next_seq == 1007
    got = []
    for fr in res.frames[1:3]:
        got += [(r.seq, r.payload, r.is_bytes, r.synthetic) for r in decode_block(fr, seg, 0, "x.seg", 1 << 20)]
    want = [
        (r["seq"], bytes.fromhex(r["hex"]), bool(r["flags"] & fmt.FLAG_BYTES), bool(r["flags"] & fmt.FLAG_SYNTHETIC))
        for r in VECTORS["batch"]["records"][1:]
    ]
    assert got == want
    info = fmt.decode_seal_payload(bytes.fromhex(VECTORS["seal"]["payload_hex"]))
    # The index names a frame by its first record, so a seek to 1003 lands on the block at 1002.
    assert info.entries == [(1001, 64), (1002, res.frames[1].offset)]
    assert (info.record_count, info.first_seq, info.last_seq) == (6, 1001, 1006)


def _frame(seq: int, flags: int, raw_len: int, stored: bytes) -> bytes:
    """A genuine frame with any field values, including ones the encoder refuses to write."""
    tail = struct.pack("<IIQHHI", len(stored), raw_len, seq, flags, 0, fmt.FRAME_MARKER) + stored
    return struct.pack("<Q", xxhash.xxh64_intdigest(tail, seed=SALT)) + tail


BAD_TABLES = {
    "a block of one record": struct.pack("<I", 1) + bytes(5),
    "more records than a block holds": struct.pack("<I", fmt.BLOCK_RECORDS_MAX + 1) + bytes(64),
    "a table longer than the payload": struct.pack("<I", 3) + bytes(10),
    "no room for the count": b"\x02\x00",
}


@pytest.mark.parametrize("why", sorted(BAD_TABLES))
def test_a_block_table_this_version_cannot_read_stops_the_scan_as_a_newer_format(why: str) -> None:
    buf = _frame(1002, fmt.KIND_BLOCK, 0, BAD_TABLES[why])
    res = fmt.scan(buf, 0, SALT, 1001)  # the C helper's scan where it is built (tests/test_native.py)
    assert (res.stop, res.frames) == (fmt.Stop.FLAGS, []), why
    assert fmt.py_scan(buf, 0, SALT, 1001) == res


@pytest.mark.parametrize("flag", [fmt.FLAG_KEYED, fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC])
def test_record_flags_on_a_block_frame_header_are_refused(flag: int) -> None:
    stored = fmt.encode_block_head([1, 1], [0, 0]) + b"ab"
    res = fmt.scan(_frame(1002, fmt.KIND_BLOCK | flag, 2, stored), 0, SALT, 1001)
    assert res.stop == fmt.Stop.FLAGS


def test_a_block_whose_first_seq_is_not_the_next_one_is_a_sequence_stop() -> None:
    stored = fmt.encode_block_head([1, 1, 1], [0, 0, 0]) + b"abc"
    for last, first in ((1004, 1002), (1002, 1000)):  # a gap, and a duplicate
        res = fmt.scan(_frame(last, fmt.KIND_BLOCK, 3, stored), 0, SALT, 1001)
        assert (res.stop, res.stop_seq) == (fmt.Stop.SEQ, first)


@pytest.mark.parametrize(
    ("lengths", "flags", "body", "raw_len", "reason"),
    [
        ([2, 2], [0, 0], b"abcd", 5, "add up"),
        ([2, 2], [0, 0x01], b"abcd", 4, "bits"),
        ([2, 2], [0, 0], b"abc", 3, "add up"),
        ([2, 3], [0, 0], b"abcd", 5, "length differs"),
    ],
)
def test_a_block_that_disagrees_with_its_frame_is_corruption(
    lengths: list[int], flags: list[int], body: bytes, raw_len: int, reason: str
) -> None:
    stored = struct.pack(f"<I{len(lengths)}I", len(lengths), *lengths) + bytes(flags) + body
    buf = _frame(1002, fmt.KIND_BLOCK, raw_len, stored)
    frame = fmt.scan(buf, 0, SALT, 1001).frames[0]
    with pytest.raises(journal.CorruptionError, match=reason):
        decode_block(frame, buf, 0, "x.seg", 1 << 20)


def test_a_zstd_block_that_does_not_decode_is_corruption() -> None:
    stored = fmt.encode_block_head([3, 3], [0, 0]) + b"not zstd at all"
    buf = _frame(1002, fmt.KIND_BLOCK | fmt.CODEC_ZSTD, 6, stored)
    frame = fmt.scan(buf, 0, SALT, 1001).frames[0]
    with pytest.raises(journal.CorruptionError, match="zstd block"):
        decode_block(frame, buf, 0, "x.seg", 1 << 20)


def test_a_block_record_over_the_readers_limit_is_refused_by_name() -> None:
    stored = fmt.encode_block_head([10, 2], [0, 0]) + b"0123456789ab"
    buf = _frame(1002, fmt.KIND_BLOCK, 12, stored)
    frame = fmt.scan(buf, 0, SALT, 1001).frames[0]
    with pytest.raises(journal.RecordTooLargeError):
        decode_block(frame, buf, 0, "x.seg", 8)


# --- how the writer forms blocks -----------------------------------------------------------------


def _encoded(events: list[object], keys: list[str | None] | None = None, **opts: int) -> list[object]:
    options = Options(**opts)  # type: ignore[arg-type]
    keys = keys or [None] * len(events)
    return [encode_event(e, k, False, options, together=True) for e, k in zip(events, keys, strict=True)]


def test_records_appended_together_share_blocks_up_to_block_bytes() -> None:
    events = [{"i": i, "text": "x" * 90} for i in range(40)]  # ~110 bytes each
    items = _encoded(events, block_bytes=1024)
    specs = frame_specs(items, Options(block_bytes=1024), blocks=True)  # type: ignore[arg-type]
    assert sum(s.records for s in specs) == 40
    assert all(s.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK for s in specs)
    assert all(s.raw_len <= 1024 for s in specs) and len(specs) == 5  # 9 records of 110 bytes a block
    # Without blocks (a version 1 live segment) each record is a frame of its own, compressed alone.
    alone = frame_specs(items, Options(block_bytes=1024), blocks=False)  # type: ignore[arg-type]
    assert [s.records for s in alone] == [1] * 40
    assert all(s.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA for s in alone)


def test_keyed_and_oversized_records_break_a_block_and_stand_alone() -> None:
    events: list[object] = [{"i": 1}, {"i": 2}, {"k": 1}, {"big": "y" * 3000}, {"i": 3}, {"i": 4}, b"raw"]
    items = _encoded(events, [None, None, "key-1", None, None, None, None], block_bytes=1024)
    specs = frame_specs(items, Options(block_bytes=1024), blocks=True)  # type: ignore[arg-type]
    kinds = [(s.flags & fmt.FLAG_KIND_MASK, s.records) for s in specs]
    assert kinds == [(fmt.KIND_BLOCK, 2), (fmt.KIND_DATA, 1), (fmt.KIND_DATA, 1), (fmt.KIND_BLOCK, 3)]
    assert specs[1].flags & fmt.FLAG_KEYED
    assert specs[2].flags & fmt.CODEC_ZSTD  # the large record is compressed alone, as before
    head = fmt.decode_block_head(specs[3].stored, specs[3].raw_len)
    assert list(head.flags) == [0, 0, fmt.FLAG_BYTES]


def test_block_bytes_is_checked() -> None:
    with pytest.raises(ValueError, match="block_bytes"):
        Options(block_bytes=fmt.BLOCK_BYTES_LIMIT + 1).check()
    with pytest.raises(ValueError, match="block_bytes"):
        Options(block_bytes=-1).check()


# --- the engine with blocks ----------------------------------------------------------------------


def _events(n: int) -> list[dict[str, object]]:
    return [{"type": "delta", "i": i, "text": f"word {i} " * (i % 7 + 1)} for i in range(n)]


def _frames(path: pathlib.Path) -> list[fmt.Frame]:
    seg = sorted(p for p in path.iterdir() if p.name.endswith(".seg"))[-1]
    data = seg.read_bytes()
    header = fmt.decode_segment_header(data)
    return fmt.scan(data, 64, header.salt, header.base_seq).frames


def test_append_many_writes_blocks_that_read_back_event_for_event(tmp_path: pathlib.Path) -> None:
    events = _events(300)
    with journal.open(tmp_path / "j", create=True, block_bytes=2048) as j:
        outs = j.append_many(events)
        assert [o.seq for o in outs] == list(range(1, 301))  # type: ignore[union-attr]
        assert [r.event for r in j.read()] == events
    frames = _frames(tmp_path / "j")
    assert all(f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK for f in frames) and len(frames) > 1
    assert frames[-1].flags & fmt.FLAG_COMMIT
    with journal.open(tmp_path / "j", readonly=True) as r:
        assert r.last_seq == 300 and [rec.seq for rec in r.read(after_seq=137)] == list(range(138, 301))
        assert r.recovery.live_records == 300
    assert verify(str(tmp_path / "j")).verdict == CLEAN


def test_buffered_appends_share_blocks_and_a_sync_append_alone_stands_alone(tmp_path: pathlib.Path) -> None:
    with journal.open(tmp_path / "j", create=True) as j:
        for e in _events(50):
            j.append(e, durability="buffered")
        j.append({"type": "tool.requested"}, durability="sync")  # queued behind them: one batch
        j.append({"type": "tool.result"}, durability="sync")  # nothing queued: written alone
    kinds = [(f.flags & fmt.FLAG_KIND_MASK, f.records) for f in _frames(tmp_path / "j")]
    assert kinds[-1] == (fmt.KIND_DATA, 1) and sum(n for _, n in kinds) == 52
    assert all(k == fmt.KIND_BLOCK for k, _ in kinds[:-1])
    with journal.open(tmp_path / "j", readonly=True) as r:
        assert [rec.event for rec in r.read(after_seq=50)] == [{"type": "tool.requested"}, {"type": "tool.result"}]


def test_block_bytes_zero_writes_a_frame_per_record(tmp_path: pathlib.Path) -> None:
    with journal.open(tmp_path / "j", create=True, block_bytes=0) as j:
        j.append_many(_events(20))
    assert [f.records for f in _frames(tmp_path / "j")] == [1] * 20


def test_get_reads_every_record_of_a_block_and_hands_out_copies(tmp_path: pathlib.Path) -> None:
    events = _events(200)
    with journal.open(tmp_path / "j", create=True, block_bytes=4096, segment_size_bytes=8192) as j:
        j.append_many(events)
        for _ in range(3):  # past the point where a segment's dense index is built
            for seq in (1, 57, 200, 5, 199, 100):
                rec = j.get(seq)
                assert rec is not None and rec.event == events[seq - 1]
        first = j.get(10)
        assert first is not None
        first.event["mutated"] = True
        again = j.get(10)
        assert again is not None and again.event == events[9]  # another object: no leak between reads
        assert j.get(201) is None
    with journal.open(tmp_path / "j", readonly=True) as r:
        assert [r.get(s).event for s in range(1, 201)] == events  # type: ignore[union-attr]


def test_a_torn_block_is_cut_whole_and_the_records_before_it_stay(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    with journal.open(src, create=True, block_bytes=1024) as j:
        j.append_many(_events(10))
        j.append_many(_events(12))
    last = _frames(src)[-1]
    assert last.flags & fmt.FLAG_KIND_MASK == fmt.KIND_BLOCK
    seg = sorted(p for p in src.iterdir() if p.name.endswith(".seg"))[-1]
    whole = seg.read_bytes()
    first_lost = last.first_seq
    for cut in sorted({last.offset + 1, last.offset + 31, last.offset + 32, last.offset + 40, last.end - 1}):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(src, d)
        with open(d / seg.name, "r+b") as f:
            f.truncate(cut)
        with journal.open(d) as j:
            assert j.recovery.truncated_at == last.offset
            assert j.last_seq == first_lost - 1
            assert [r.seq for r in j.read()] == list(range(1, first_lost))
        if any(whole[last.offset : cut]):
            kept = (d / j.recovery.quarantined[0]).read_bytes()
            assert kept == whole[last.offset : cut]


def test_a_damaged_block_before_a_durable_point_is_refused_then_salvaged(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    with journal.open(src, create=True, block_bytes=1024) as j:
        j.append_many(_events(10))
        j.append_many(_events(10))
        j.append({"after": 1})
    frames = _frames(src)
    victim = frames[0]  # a synced block, then another synced block and a record after it
    assert [(f.first_seq, f.seq) for f in frames] == [(1, 10), (11, 20), (21, 21)]
    seg = sorted(p for p in src.iterdir() if p.name.endswith(".seg"))[-1]
    data = bytearray(seg.read_bytes())
    data[victim.payload_offset + 30] ^= 0x40
    seg.write_bytes(bytes(data))
    with pytest.raises(journal.CorruptionError):
        journal.open(src)
    assert verify(str(src)).verdict == CORRUPT
    report = salvage(str(src), str(tmp_path / "out"))
    assert [(loss.seq_first, loss.seq_last) for loss in report.losses] == [(1, 10)]
    with journal.open(tmp_path / "out", readonly=True) as r:
        got = {rec.seq: rec.event for rec in r.read()}
    assert [got[s] for s in range(11, 21)] == _events(10) and got[21] == {"after": 1}
    assert all(got[s]["type"] == "journal.lost" for s in range(1, 11))


def test_a_prefix_copy_cut_inside_a_block_holds_exactly_the_records_up_to_it(tmp_path: pathlib.Path) -> None:
    events = _events(60)
    with journal.open(tmp_path / "src", create=True, block_bytes=2048) as j:
        j.append_many(events)
        blocks = [f for f in _frames(tmp_path / "src") if f.records > 2]
        at = blocks[1].first_seq + 1  # inside the second block
        (tmp_path / "dst").mkdir()
        j.copy_prefix(tmp_path / "dst", at)
    assert verify(str(tmp_path / "dst")).verdict == CLEAN
    with journal.open(tmp_path / "dst") as d:
        assert [r.event for r in d.read()] == events[:at]
        assert d.append({"next": 1}).seq == at + 1  # type: ignore[union-attr]


def test_a_version_1_live_segment_takes_frames_of_one_record_until_it_rolls(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True, block_bytes=0) as j:
        j.append_many(_events(5))
    seg = sorted(p for p in path.iterdir() if p.name.endswith(".seg"))[-1]
    data = bytearray(seg.read_bytes())
    # Make it the version 1 segment an earlier version wrote: the frames are the same bytes.
    struct.pack_into("<H", data, 8, 1)
    struct.pack_into("<Q", data, 56, xxhash.xxh64_intdigest(bytes(data[:56])))
    seg.write_bytes(bytes(data))
    with journal.open(path) as j:
        j.append_many(_events(30))
        assert [f.records for f in _frames(path)] == [1] * 35  # no block in a version 1 segment
        j.seal()
        j.append_many(_events(30))
    segs = sorted(p for p in path.iterdir() if p.name.endswith(".seg"))
    assert [fmt.decode_segment_header(p.read_bytes()).version for p in segs] == [1, fmt.FORMAT_VERSION]
    assert any(f.records > 1 for f in _frames(path))
    with journal.open(path, readonly=True) as r:
        assert [rec.event for rec in r.read()] == _events(5) + _events(30) + _events(30)
    assert verify(str(path)).verdict == CLEAN


def test_sealed_segments_of_blocks_seek_through_their_footer(tmp_path: pathlib.Path) -> None:
    events = _events(400)
    with journal.open(tmp_path / "j", create=True, block_bytes=1024, segment_size_bytes=4096,
                      index_interval_bytes=512) as j:
        for i in range(0, 400, 20):
            j.append_many(events[i : i + 20])
    assert len([n for n in os.listdir(tmp_path / "j") if n.endswith(".seg")]) > 2
    assert verify(str(tmp_path / "j")).verdict == CLEAN
    with journal.open(tmp_path / "j", readonly=True) as r:
        for after in (0, 1, 77, 150, 233, 398, 399):
            assert [rec.seq for rec in r.read(after_seq=after)][:3] == list(range(after + 1, min(after + 4, 401)))
