"""Writes tests/vectors/format_v4.json. Run it only when the format version changes on purpose.

The vectors pin the exact bytes of what format version 4 added: a dictionary file
(``dict-00001.zdict``), a version 4 segment header, and a data frame and a block frame whose zstd
payloads were compressed with that dictionary (dictionary id 1 in their headers), in a synced
batch. A change to format.py or dictionary.py that alters any of them breaks
tests/test_dictionary_vectors.py. (format_v1.json and format_v2.json still pin the rest.)
"""

from __future__ import annotations

import json
import pathlib

import zstandard

from journal.engine import dictionary as dic
from journal.engine import format as fmt

JOURNAL_ID = bytes(range(32, 48))
SALT = 0x1234_5678_9ABC_DEF0
# A raw-content dictionary (zstd takes any bytes as one): deterministic, unlike training.
DICTIONARY = dic.Dictionary(1, b'{"type":"tool_result","output":"' + b"line of output\\n" * 20 + b'","status":"ok"}')
ALONE = b'{"type":"tool_result","output":"line of output\\nline of output\\n","status":"ok"}' * 2
BLOCK = [b'{"type":"tool_result","output":"line of output\\n","status":"ok"}', b'{"type":"user","text":"hi"}']


def compress(raw: bytes) -> bytes:
    cdict = zstandard.ZstdCompressionDict(DICTIONARY.data)
    c = zstandard.ZstdCompressor(
        dict_data=cdict, level=1, write_content_size=False, write_checksum=True, write_dict_id=False
    )
    return c.compress(raw)


def main() -> None:
    header = fmt.SegmentHeader(4, JOURNAL_ID, 0, 1001, SALT)
    raw_block = b"".join(BLOCK)
    specs = [
        fmt.FrameSpec(fmt.CODEC_ZSTD, len(ALONE), compress(ALONE), 1, 1),
        fmt.FrameSpec(
            fmt.KIND_BLOCK | fmt.CODEC_ZSTD,
            len(raw_block),
            fmt.encode_block_head([len(r) for r in BLOCK], [0, 0]) + compress(raw_block),
            2,
            1,
        ),
    ]
    out = {
        "dictionary_file": dic.encode_dictionary_file(DICTIONARY).hex(),
        "dictionary_data": DICTIONARY.data.hex(),
        "segment_header": fmt.encode_segment_header(header).hex(),
        "journal_id": JOURNAL_ID.hex(),
        "salt": SALT,
        "alone": ALONE.hex(),
        "block": [r.hex() for r in BLOCK],
        "specs": [
            {
                "flags": s.flags,
                "raw_len": s.raw_len,
                "stored": s.stored.hex(),
                "records": s.records,
                "dict_id": s.dict_id,
            }
            for s in specs
        ],
        "batch": fmt.py_encode_batch(1001, specs, SALT, commit_last=True).hex(),
    }
    path = pathlib.Path(__file__).with_name("format_v4.json")
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
