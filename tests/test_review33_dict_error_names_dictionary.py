"""A frame naming a dictionary that does not decode with the file of that name says so. With a
dictionary file swapped for another that verifies, zstd's content checksum fails on every frame
naming it (tests/test_review33_dict_wrong_dictionary.py); before, the error and verify's report
said only "restore the segment from a backup, or run `journal salvage`", and salvaging drops
every such record, although the segment is whole and putting the journal's own file back reads
them all. The message now names the dictionary file and says to put it back first."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
from journal.engine.verify import CORRUPT, verify
from journal.errors import CorruptionError
from tests.test_review33_dict_wrong_dictionary import SWAPPED, dictionary_frames_decode_with, write


def test_reads_and_verify_name_the_dictionary_file(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(path)
    dictionary_frames_decode_with(path, SWAPPED)
    with journal.open(path, readonly=True) as r:
        for seq in (1, 15, 35):  # a frame alone, a block, a JSON record
            with pytest.raises(CorruptionError, match=r"dict-00001\.zdict.*put the journal's own back"):
                r.get(seq)
        with pytest.raises(CorruptionError, match=r"dict-00001\.zdict"):
            list(r.read())
    report = verify(str(path))
    assert report.verdict == CORRUPT and report.problems
    assert all("dict-00001.zdict" in p.reason for p in report.problems)
