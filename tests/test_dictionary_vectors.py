"""Format version 4's bytes, pinned by tests/vectors/format_v4.json (tests/vectors/make_format_v4.py):
a dictionary file, a version 4 segment header, and a data and a block frame naming dictionary 1."""

from __future__ import annotations

import json
import pathlib

from journal.engine import dictionary as dic
from journal.engine import format as fmt
from journal.engine import reader
from journal.fs import OsFileSystem

V = json.loads((pathlib.Path(__file__).parent / "vectors" / "format_v4.json").read_text())


def test_dictionary_file_bytes() -> None:
    d = dic.Dictionary(1, bytes.fromhex(V["dictionary_data"]))
    assert dic.encode_dictionary_file(d).hex() == V["dictionary_file"]
    assert dic.decode_dictionary_file(bytes.fromhex(V["dictionary_file"]), "dict-00001.zdict") == d


def test_segment_header_and_frames(tmp_path: pathlib.Path) -> None:
    header = fmt.SegmentHeader(4, bytes.fromhex(V["journal_id"]), 0, 1001, V["salt"])
    assert fmt.encode_segment_header(header).hex() == V["segment_header"]
    assert fmt.decode_segment_header(bytes.fromhex(V["segment_header"])) == header
    specs = [
        fmt.FrameSpec(s["flags"], s["raw_len"], bytes.fromhex(s["stored"]), s["records"], s["dict_id"])
        for s in V["specs"]
    ]
    batch = bytes.fromhex(V["batch"])
    assert fmt.py_encode_batch(1001, specs, V["salt"], True) == batch
    assert fmt.encode_batch(1001, specs, V["salt"], True) == batch  # the C path hands them to the twin
    res = fmt.scan(batch, 0, V["salt"], 1001)
    assert res.stop == fmt.Stop.END and [f.records for f in res.frames] == [1, 2]
    assert [fmt.read_frame_header(batch, f.offset)[5] for f in res.frames] == [1, 1]
    # Decoded with the dictionary (the zstd frames name none; the journal frame does).
    (tmp_path / "dict-00001.zdict").write_bytes(bytes.fromhex(V["dictionary_file"]))
    cache = dic.DictionaryCache(OsFileSystem(), str(tmp_path))
    alone = reader.decode_payload(res.frames[0], batch, 0, "seg", 1 << 20, cache)
    assert alone.payload == bytes.fromhex(V["alone"])
    block = reader.decode_block(res.frames[1], batch, 0, "seg", 1 << 20, cache)
    assert [r.payload for r in block] == [bytes.fromhex(h) for h in V["block"]]
