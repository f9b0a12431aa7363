"""Writes tests/vectors/format_v1.json. Run it only when the format version changes on purpose.

The vectors pin the exact bytes of format version 1: a change to format.py that alters any of
them breaks test_format.py, which is the point.
"""

from __future__ import annotations

import json
import pathlib

import zstandard

from journal.engine import format as fmt

JOURNAL_ID = bytes(range(16))
SALT = 0x0123456789ABCDEF & ((1 << 63) - 1)


def build() -> dict[str, object]:
    header = fmt.SegmentHeader(1, JOURNAL_ID, 3, 1001, SALT)
    raw_event = b'{"type":"user_message","text":"hello"}'
    # zstd output may differ between library versions, so the vector pins the stored bytes and
    # checks only that they decompress to the raw payload.
    zstd_raw = b'{"type":"tool_result","output":"' + b"line\\n" * 40 + b'"}'
    zstd_stored = zstandard.ZstdCompressor(
        level=3, write_content_size=False, write_checksum=False, write_dict_id=False
    ).compress(zstd_raw)
    key = b"evt-42"
    keyed_stored = bytes([len(key)]) + key + b'{"k":1}'
    specs = [
        fmt.FrameSpec(0, len(raw_event), raw_event),
        fmt.FrameSpec(fmt.CODEC_ZSTD, len(zstd_raw), zstd_stored),
        fmt.FrameSpec(fmt.FLAG_BYTES | fmt.FLAG_SYNTHETIC, 3, b"\x00\x01\x02"),
        fmt.FrameSpec(fmt.FLAG_KEYED, 7, keyed_stored),
    ]
    batch = fmt.encode_batch(1001, specs, SALT, commit_last=True)
    seal_payload = fmt.encode_seal_payload(4, 1001, 1004, 65536, [(1001, 64)], 64 + len(batch), [(1004, key)])
    seal = fmt.encode_frame(1004, fmt.KIND_SEAL, len(seal_payload), seal_payload, SALT)
    return {
        "comment": "format version 1; regenerate only on purpose with make_format_v1.py",
        "salt": SALT,
        "derived_salt": {"segment_number": 3, "base_seq": 1001, "salt": fmt.segment_salt(JOURNAL_ID, 3, 1001)},
        "journal_id": JOURNAL_ID.hex(),
        "segment_header": {"segment_number": 3, "base_seq": 1001, "hex": fmt.encode_segment_header(header).hex()},
        "batch": {
            "first_seq": 1001,
            "frames": [{"flags": s.flags, "raw_len": s.raw_len, "stored_hex": s.stored.hex()} for s in specs],
            "zstd_raw_hex": zstd_raw.hex(),
            "hex": batch.hex(),
        },
        "seal": {"payload_hex": seal_payload.hex(), "frame_hex": seal.hex()},
    }


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("format_v1.json")
    out.write_text(json.dumps(build(), indent=1) + "\n")
    print(f"wrote {out}")
