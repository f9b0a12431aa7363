"""A directory (or a FIFO) at a journal's dict-00001.zdict, where a dictionary file belongs.
Before, its open raised IsADirectoryError (an OSError, so JournalIOError) or UnexpectedFileError
out of every reader: a read-only open could not read even the records that need no dictionary,
`verify` and `salvage` stopped with an I/O error instead of reporting the frames and keeping the
rest, and a writer opened with a dictionary could not open at all. Now it is a dictionary file
that does not verify: CorruptionError naming it, for the frames that need it only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import journal
from journal.engine.core import Journal
from journal.engine.dictionary import Dictionary, dictionary_file_name, load_dictionary
from journal.engine.salvage import salvage
from journal.engine.verify import CORRUPT, verify
from journal.errors import CorruptionError
from journal.fs import OsFileSystem
from tests.dictionary_samples import event, lost, train


@pytest.fixture(scope="module")
def trained() -> bytes:
    return train()


def make(path: Path, trained: bytes, kind: str) -> None:
    """Records 1-3 raw (no dictionary), 4-23 with dictionary 1, whose file is then a ``kind``."""
    with journal.open(path, create=True, compress=False) as j:
        for i in range(3):
            j.append(event(i))
    j = journal.open(path, dictionary=Dictionary(1, trained))
    assert isinstance(j, Journal)
    with j:
        for i in range(3, 13):
            j.append(event(i))
        j.append_many([event(i) for i in range(13, 23)])
    name = path / dictionary_file_name(1)
    os.unlink(name)
    if kind == "directory":
        os.mkdir(name)
    else:
        os.mkfifo(name)


KINDS = ["directory", "fifo"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_loader_says_corruption(tmp_path: Path, trained: bytes, kind: str) -> None:
    path = tmp_path / "j"
    make(path, trained, kind)
    with pytest.raises(CorruptionError, match="not a dictionary file"):
        load_dictionary(OsFileSystem(), str(path), 1)


@pytest.mark.parametrize("kind", KINDS)
def test_readers_lose_only_the_frames_that_need_it(tmp_path: Path, trained: bytes, kind: str) -> None:
    path = tmp_path / "j"
    make(path, trained, kind)
    with journal.open(path, readonly=True) as r:
        got = r.get(2)
        assert got is not None and got.event == event(1)
        with pytest.raises(CorruptionError, match=r"dict-00001\.zdict"):
            r.get(5)
    report = verify(str(path))
    assert report.verdict == CORRUPT
    assert lost(report) == set(range(4, 24))
    salvage(str(path), str(tmp_path / "out"))
    with journal.open(tmp_path / "out", readonly=True) as r:
        assert [rec.event for rec in r.read()][:3] == [event(i) for i in range(3)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_with_a_dictionary_still_opens(tmp_path: Path, trained: bytes, kind: str) -> None:
    path = tmp_path / "j"
    make(path, trained, kind)
    j = journal.open(path, dictionary=Dictionary(1, trained))
    with j:
        j.append(event(99))  # its id 1 is taken (by what is there): the dictionary goes in as 2
    assert dictionary_file_name(2) in os.listdir(path)
    with journal.open(path, readonly=True) as r:
        last = r.get(24)
        assert last is not None and last.event == event(99)
