"""A journal's dictionary file swapped for another that verifies (another journal's
dict-00001.zdict, a file restored from the wrong backup): the frame checksum covers the stored
bytes only, and a dictionary that differs in content alone decodes them to other bytes of the
right length. zstd's content checksum, which every frame naming a dictionary carries (format
version 4, docs/FORMAT.md "Dictionaries"), is what fails then: every read is CorruptionError,
never other bytes, and verify and salvage report the frames instead of keeping wrong records."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import zstandard

import journal
from journal.engine.core import Journal
from journal.engine.dictionary import Dictionary, dictionary_file_name, encode_dictionary_file
from journal.engine.salvage import salvage
from journal.engine.verify import CORRUPT, verify
from journal.errors import CorruptionError
from tests.dictionary_samples import lost


def event(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    return {
        "type": rng.choice(["message", "tool_call", "tool_result"]),
        "id": f"evt_{i:08d}",
        "content": " ".join(rng.choice(["the", "file", "search", "result", "ok", "error"]) for _ in range(30)),
    }


# A raw-content dictionary (zstd takes any bytes as one) and one of the same length that differs
# in content only: a frame compressed with the first refers to its bytes by offset, and the
# second hands back its own bytes there. Trained dictionaries that differ in content alone do the
# same; two trained on different data mostly fail to decode at all, but not always.
ORIGINAL = ("".join(json.dumps(event(i)) for i in range(40)) * 2).encode()[:8192]
SWAPPED = bytes(b ^ 0x20 if 0x61 <= b <= 0x7A else b for b in ORIGINAL)  # the letters' case flipped


def write(path: Path) -> dict[int, bytes]:
    """Bytes payloads (never checked as JSON) and JSON ones, alone and in blocks."""
    j = journal.open(path, create=True, dictionary=Dictionary(1, ORIGINAL))
    assert isinstance(j, Journal)
    with j:
        for i in range(10):
            j.append(json.dumps(event(i)).encode(), durability="sync")
        j.append_many([json.dumps(event(i)).encode() for i in range(10, 30)])
        for i in range(30, 40):
            j.append(event(i))
    with journal.open(path, readonly=True) as r:
        return {rec.seq: rec.payload for rec in r.read()}


def dictionary_frames_decode_with(path: Path, data: bytes) -> None:
    (path / dictionary_file_name(1)).write_bytes(encode_dictionary_file(Dictionary(1, data)))


def test_the_two_dictionaries_differ_in_content_only() -> None:
    assert len(ORIGINAL) == len(SWAPPED) and ORIGINAL != SWAPPED
    c = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(ORIGINAL), write_content_size=False)
    raw = json.dumps(event(3)).encode()
    frame = c.compress(raw)
    d = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(SWAPPED))
    wrong = d.decompress(frame, max_output_size=len(raw))
    assert len(wrong) == len(raw) and wrong != raw  # what a frame without zstd's checksum gives


def test_a_swapped_dictionary_never_reads_as_other_bytes(tmp_path: Path) -> None:
    path = tmp_path / "j"
    original = write(path)
    assert len(original) == 40
    dictionary_frames_decode_with(path, SWAPPED)
    with journal.open(path, readonly=True) as r:
        for seq, payload in original.items():
            try:
                rec = r.get(seq)
            except CorruptionError:
                continue
            assert rec is not None and rec.payload == payload, f"seq {seq} read as other bytes"
        with pytest.raises(CorruptionError):
            list(r.read())
    report = verify(str(path))
    assert report.verdict == CORRUPT
    assert lost(report) == set(original)  # every record was compressed with the dictionary


def test_salvage_keeps_no_record_decoded_with_the_wrong_dictionary(tmp_path: Path) -> None:
    path = tmp_path / "j"
    original = write(path)
    dictionary_frames_decode_with(path, SWAPPED)
    salvage(str(path), str(tmp_path / "out"))
    with journal.open(tmp_path / "out", readonly=True) as r:
        for rec in r.read():
            assert rec.payload == original[rec.seq]


def test_the_right_dictionary_put_back_reads_everything(tmp_path: Path) -> None:
    path = tmp_path / "j"
    original = write(path)
    dictionary_frames_decode_with(path, SWAPPED)
    dictionary_frames_decode_with(path, ORIGINAL)
    with journal.open(path, readonly=True) as r:
        assert {rec.seq: rec.payload for rec in r.read()} == original
