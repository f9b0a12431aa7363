"""The bytes of format version 1, pinned by tests/vectors/format_v1.json, and the scanner's verdicts."""

from __future__ import annotations

import json
import pathlib
import struct

import pytest
import xxhash
import zstandard

from journal.engine import format as fmt

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "format_v1.json").read_text())
SALT = VECTORS["salt"]


def _batch() -> tuple[list[fmt.FrameSpec], bytes]:
    b = VECTORS["batch"]
    specs = [fmt.FrameSpec(f["flags"], f["raw_len"], bytes.fromhex(f["stored_hex"])) for f in b["frames"]]
    return specs, bytes.fromhex(b["hex"])


def test_segment_header_bytes_are_pinned() -> None:
    v = VECTORS["segment_header"]
    header = fmt.SegmentHeader(1, bytes.fromhex(VECTORS["journal_id"]), v["segment_number"], v["base_seq"], SALT)
    data = fmt.encode_segment_header(header)
    assert data.hex() == v["hex"]
    assert data[:8] == b"JRNLSEG\x00" and len(data) == 64
    assert struct.unpack_from("<Q", data, 48)[0] == SALT
    assert struct.unpack_from("<Q", data, 56)[0] == xxhash.xxh64_intdigest(data[:56])
    assert fmt.decode_segment_header(data) == header


def test_frame_bytes_are_pinned_field_by_field() -> None:
    specs, expected = _batch()
    data = fmt.encode_batch(VECTORS["batch"]["first_seq"], specs, SALT, commit_last=True)
    assert data == expected
    pos = 0
    for i, spec in enumerate(specs):
        checksum, stored_len, raw_len, seq, flags, dict_id, marker = struct.unpack_from("<QIIQHHI", data, pos)
        assert (stored_len, raw_len, seq, dict_id, marker) == (len(spec.stored), spec.raw_len, 1001 + i, 0, 0x3146524A)
        assert flags == spec.flags | (fmt.FLAG_COMMIT if i == len(specs) - 1 else 0)
        end = pos + 32 + stored_len
        assert checksum == xxhash.xxh64_intdigest(data[pos + 8 : end], seed=SALT)
        pos = end
    assert pos == len(data)
    zraw = bytes.fromhex(VECTORS["batch"]["zstd_raw_hex"])
    assert zstandard.ZstdDecompressor().decompress(specs[1].stored, max_output_size=len(zraw)) == zraw


def test_seal_footer_is_pinned_and_found_from_the_end() -> None:
    v = VECTORS["seal"]
    payload = bytes.fromhex(v["payload_hex"])
    info = fmt.decode_seal_payload(payload)
    assert (info.record_count, info.first_seq, info.last_seq, info.entries) == (4, 1001, 1004, [(1001, 64)])
    assert info.keys == [(1004, b"evt-42")]
    frame = bytes.fromhex(v["frame_hex"])
    assert fmt.encode_frame(1004, fmt.KIND_SEAL, len(payload), payload, SALT) == frame
    assert fmt.seal_tail_offset(frame[-8:]) == info.seal_offset


def test_segment_salt_is_derived_and_pinned() -> None:
    v = VECTORS["derived_salt"]
    jid = bytes.fromhex(VECTORS["journal_id"])
    assert fmt.segment_salt(jid, v["segment_number"], v["base_seq"]) == v["salt"] < 2**63
    assert fmt.segment_salt(jid, v["segment_number"] + 1, v["base_seq"]) != v["salt"]
    assert fmt.segment_salt(bytes(16), v["segment_number"], v["base_seq"]) != v["salt"]


def test_scan_accepts_the_vector_segment() -> None:
    _, batch = _batch()
    seal = bytes.fromhex(VECTORS["seal"]["frame_hex"])
    buf = bytes(64) + batch + seal
    res = fmt.scan(buf, 64, SALT, 1001)
    assert res.stop == fmt.Stop.SEALED and res.stop_offset == len(buf)
    assert [f.seq for f in res.frames] == [1001, 1002, 1003, 1004, 1004]


@pytest.mark.parametrize("cut", range(1, 40))
def test_scan_reports_truncation_at_every_cut_of_a_frame(cut: int) -> None:
    _, batch = _batch()
    first_len = 32 + VECTORS["batch"]["frames"][0]["raw_len"]
    res = fmt.scan(bytes(64) + batch[: first_len + cut], 64, SALT, 1001)
    assert [f.seq for f in res.frames] == [1001]
    assert res.stop_offset == 64 + first_len
    assert res.stop in (fmt.Stop.TRUNCATED, fmt.Stop.CHECKSUM)


def test_scan_verdicts() -> None:
    _, batch = _batch()
    base = bytes(64) + batch
    assert fmt.scan(base + bytes(100), 64, SALT, 1001).stop == fmt.Stop.ZEROS
    assert fmt.scan(base, 64, SALT, 1001).stop == fmt.Stop.END
    assert fmt.scan(base, 64, SALT + 1, 1001).stop == fmt.Stop.CHECKSUM  # stale frame, other salt
    gap = fmt.scan(base, 64, SALT, 1000)
    assert gap.stop == fmt.Stop.SEQ and gap.stop_seq == 1001
    flipped = bytearray(base)
    flipped[64 + 40] ^= 0x01
    assert fmt.scan(bytes(flipped), 64, SALT, 1001).stop == fmt.Stop.CHECKSUM
    newer = fmt.encode_frame(1005, 0, 0, b"", SALT)
    bad_flags = bytearray(newer)
    struct.pack_into("<H", bad_flags, 24, 0x8000)
    struct.pack_into("<Q", bad_flags, 0, xxhash.xxh64_intdigest(bytes(bad_flags[8:]), seed=SALT))
    res = fmt.scan(base + bytes(bad_flags), 64, SALT, 1001)
    assert res.stop == fmt.Stop.FLAGS and res.stop_seq == 1005


def test_scan_caps_lengths_before_trusting_them() -> None:
    header = struct.pack("<QIIQHHI", 0, 0xFFFFFFFF, 0, 1, 0, 0, fmt.FRAME_MARKER)
    res = fmt.scan(bytes(64) + header + bytes(64), 64, SALT, 1)
    assert res.stop == fmt.Stop.CHECKSUM and res.frames == []


def test_find_later_commit_sees_only_genuine_commit_frames() -> None:
    _, batch = _batch()
    damaged = bytearray(bytes(64) + batch)
    damaged[64 + 40] ^= 0x01  # damage the first frame; the last one carries the commit flag
    assert fmt.find_later_commit(bytes(damaged), 64, SALT, 1000) is not None
    assert fmt.find_later_commit(bytes(damaged), 64, SALT + 1, 1000) is None
    no_commit = fmt.encode_batch(1001, _batch()[0], SALT, commit_last=False)
    assert fmt.find_later_commit(bytes(64) + no_commit, 64, SALT, 1000) is None


def test_segment_names_sort_by_seq() -> None:
    names = [fmt.segment_name(s) for s in (1, 9, 10, 12345678901234)]
    assert names == sorted(names)
    assert [fmt.parse_segment_name(n) for n in names] == [1, 9, 10, 12345678901234]
    for bad in ("1.seg", "00000000000000000000.seg", "0000000000000000000a.seg", "x.seg.tmp", "LOCK"):
        assert fmt.parse_segment_name(bad) is None


def test_header_damage_and_newer_version_are_told_apart() -> None:
    header = fmt.encode_segment_header(fmt.SegmentHeader(1, bytes(16), 0, 1, 5))
    damaged = bytearray(header)
    damaged[20] ^= 1
    with pytest.raises(fmt.HeaderError, match="checksum"):
        fmt.decode_segment_header(bytes(damaged))
    newer = bytearray(header)
    struct.pack_into("<H", newer, 8, fmt.FORMAT_VERSION + 1)
    struct.pack_into("<Q", newer, 56, xxhash.xxh64_intdigest(bytes(newer[:56])))
    with pytest.raises(fmt.HeaderError) as exc:
        fmt.decode_segment_header(bytes(newer))
    assert exc.value.version == fmt.FORMAT_VERSION + 1
