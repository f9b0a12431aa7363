"""Writes tests/vectors/format_v2.json. Run it only when the format version changes on purpose.

The vectors pin the exact bytes of what format version 2 added to version 1: a version 2
segment header and block frames (one zstd, one raw), next to a data frame of one record, in a
synced batch, and the seal footer that indexes them. A change to format.py that alters any of
them breaks tests/test_format_v2.py, which is the point. (format_v1.json still pins the rest.)
"""

from __future__ import annotations

import json
import pathlib

import zstandard

from journal.engine import format as fmt

JOURNAL_ID = bytes(range(16, 32))
SALT = 0x7EDCBA9876543210 & ((1 << 63) - 1)
# Records 1002-1004 share a zstd block, 1005-1006 a raw one; 1001 is a data frame of its own.
ALONE = b'{"type":"user_message","text":"hello"}'
ZSTD_RECORDS = [
    (0, b'{"type":"tool_result","output":"' + b"line\\n" * 30 + b'"}'),
    (fmt.FLAG_BYTES, b"\x00\x01\x02opaque"),
    (fmt.FLAG_SYNTHETIC, b'{"type":"turn.ended","reason":"interrupted"}'),
]
RAW_RECORDS = [(0, b'{"a":1}'), (0, b"{}")]


def block_spec(records: list[tuple[int, bytes]], zstd: bool) -> fmt.FrameSpec:
    raw = b"".join(r for _, r in records)
    # zstd output may differ between library versions, so the vector pins the stored bytes and
    # checks only that the body decompresses to the records.
    body = (
        zstandard.ZstdCompressor(level=1, write_content_size=False, write_checksum=False, write_dict_id=False).compress(
            raw
        )
        if zstd
        else raw
    )
    head = fmt.encode_block_head([len(r) for _, r in records], [f for f, _ in records])
    codec = fmt.CODEC_ZSTD if zstd else fmt.CODEC_RAW
    return fmt.FrameSpec(fmt.KIND_BLOCK | codec, len(raw), head + body, len(records))


def build() -> dict[str, object]:
    header = fmt.SegmentHeader(2, JOURNAL_ID, 0, 1001, SALT)
    specs = [fmt.FrameSpec(0, len(ALONE), ALONE), block_spec(ZSTD_RECORDS, True), block_spec(RAW_RECORDS, False)]
    batch = fmt.encode_batch(1001, specs, SALT, commit_last=True)
    second = 64 + fmt.FRAME_HEADER_SIZE_BYTES + len(ALONE)
    index = [(1001, 64), (1002, second)]
    seal_payload = fmt.encode_seal_payload(6, 1001, 1006, 512, index, 64 + len(batch))
    seal = fmt.encode_frame(1006, fmt.KIND_SEAL, len(seal_payload), seal_payload, SALT)
    return {
        "comment": "format version 2 (block frames); regenerate only on purpose with make_format_v2.py",
        "salt": SALT,
        "journal_id": JOURNAL_ID.hex(),
        "segment_header": {"segment_number": 0, "base_seq": 1001, "hex": fmt.encode_segment_header(header).hex()},
        "batch": {
            "first_seq": 1001,
            "frames": [
                {"flags": s.flags, "raw_len": s.raw_len, "records": s.records, "stored_hex": s.stored.hex()}
                for s in specs
            ],
            "records": [
                {"seq": 1001, "flags": 0, "hex": ALONE.hex()},
                *({"seq": 1002 + i, "flags": f, "hex": r.hex()} for i, (f, r) in enumerate(ZSTD_RECORDS)),
                *({"seq": 1005 + i, "flags": f, "hex": r.hex()} for i, (f, r) in enumerate(RAW_RECORDS)),
            ],
            "hex": batch.hex(),
        },
        "seal": {"payload_hex": seal_payload.hex(), "frame_hex": seal.hex()},
    }


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("format_v2.json")
    out.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {out}")
