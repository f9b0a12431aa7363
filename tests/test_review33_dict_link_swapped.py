"""Installing a dictionary hard-links the store's file (``Dictionary.path``) into the journal
after checking that it holds the dictionary. A file put at that name between the check and the
link (the store's file replaced by another of the same id) was linked unchecked: the writer then
compressed with the dictionary it was given while its frames named a file of other bytes, and
every record it wrote read back as corrupt. Now the link is checked as readers will read it, and
replaced by a copy of the right bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import zstandard

import journal
from journal.engine.dictionary import Dictionary, dictionary_file_name, encode_dictionary_file
from journal.fs import OsFileSystem


def event(i: int) -> dict[str, Any]:
    return {"type": "tool_result", "n": i, "output": "the tests passed: " + " ".join(str(k) for k in range(i % 40))}


def trained(seed: int) -> bytes:
    samples: list[bytes | bytearray | memoryview] = [
        json.dumps({"seed": seed, **event(i), "pad": "x" * (i % (seed + 7))}).encode() for i in range(1500)
    ]
    return zstandard.train_dictionary(4096, samples).as_bytes()


class SwapsBeforeLinking(OsFileSystem):
    """Replaces the source file by another dictionary file of the same id just before linking."""

    def __init__(self, replacement: bytes) -> None:
        super().__init__()
        self.replacement = replacement
        self.links = 0

    def link(self, src: str, dst: str) -> None:
        self.links += 1
        tmp = src + ".swap"
        with open(tmp, "wb") as f:
            f.write(self.replacement)
        os.rename(tmp, src)
        super().link(src, dst)


def test_a_source_swapped_before_the_link_is_not_what_frames_name(tmp_path: Path) -> None:
    store_dir = tmp_path / "store-dictionaries"
    store_dir.mkdir()
    mine, other = trained(1), trained(2)
    src = store_dir / dictionary_file_name(1)
    src.write_bytes(encode_dictionary_file(Dictionary(1, mine)))
    fs = SwapsBeforeLinking(encode_dictionary_file(Dictionary(1, other)))
    path = tmp_path / "j"
    events = [event(i) for i in range(50)]
    with journal.open(path, create=True, fs=fs, dictionary=Dictionary(1, mine, str(src))) as j:
        for e in events:
            j.append(e)
    assert fs.links == 1
    assert (path / dictionary_file_name(1)).read_bytes() == encode_dictionary_file(Dictionary(1, mine))
    with journal.open(path, readonly=True) as r:
        assert [rec.event for rec in r.read()] == events
