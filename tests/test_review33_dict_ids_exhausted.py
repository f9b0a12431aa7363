"""A journal whose every dictionary id (1 to 65535) has a file, opened for writing with yet
another dictionary: before, install_dictionary raised a bare ValueError (no JournalError, no
word of what to do); now InvalidArgumentError saying what to do, with nothing written and the
journal free to open again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import zstandard

import journal
from journal.engine.dictionary import DICTIONARY_ID_MAX, DICTIONARY_ID_MIN, Dictionary, dictionary_file_name
from journal.errors import InvalidArgumentError, JournalError


def test_every_id_taken_is_a_typed_error(tmp_path: Path) -> None:
    samples: list[bytes | bytearray | memoryview] = [
        json.dumps({"n": i, "text": "tool output " * (i % 30)}).encode() for i in range(2000)
    ]
    d = Dictionary(1, zstandard.train_dictionary(2048, samples).as_bytes())
    path = tmp_path / "j"
    with journal.open(path, create=True) as j:
        j.append({"n": 0})
    for i in range(DICTIONARY_ID_MIN, DICTIONARY_ID_MAX + 1):  # names only: none verifies
        (path / dictionary_file_name(i)).touch()
    names = set(os.listdir(path))
    with pytest.raises(InvalidArgumentError, match="every id") as e:
        journal.open(path, dictionary=d)
    assert isinstance(e.value, JournalError) and "or without one" in str(e.value)
    assert set(os.listdir(path)) == names
    with journal.open(path) as j:
        j.append({"n": 1})
