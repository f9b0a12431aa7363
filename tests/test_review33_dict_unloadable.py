"""A dictionary file that verifies (magic, length, digest, checksum, id all right) but whose data
zstd refuses to load: a zstd dictionary header with damaged entropy tables, crafted or written by
other software. Before, zstd's own ZstdError (no JournalError) came out of every read of a frame
naming it, out of `verify` (no report at all) and out of `salvage` (no record kept, not even
those that need no dictionary); a writer opened with such data failed with it after installing
the file, and a store whose current dictionary it was could not open a session for writing.
Now the file is CorruptionError naming it, like any file that does not verify."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import zstandard

import journal
from journal.engine.core import Journal
from journal.engine.dictionary import (
    Dictionary,
    decode_dictionary_file,
    dictionary_file_name,
    encode_dictionary_file,
)
from journal.engine.salvage import salvage
from journal.engine.verify import CORRUPT, verify
from journal.errors import CorruptionError, InvalidArgumentError, JournalError
from journal.session import dictionaries as D
from journal.session.store import SessionStore
from tests.dictionary_samples import event, lost, train


@pytest.fixture(scope="module")
def trained() -> bytes:
    return train()


# zstd's dictionary magic, a dictionary id, then bytes that are no entropy tables.
UNLOADABLE = b"\x37\xa4\x30\xec" + b"\x07\x00\x00\x00" + bytes(random.Random(3).getrandbits(8) for _ in range(2000))


def test_zstd_refuses_the_data() -> None:
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(UNLOADABLE)).decompress(
            zstandard.ZstdCompressor(write_content_size=True).compress(b"")
        )


def test_the_file_does_not_verify() -> None:
    with pytest.raises(CorruptionError, match=r"dict-00001\.zdict.*zstd cannot load"):
        decode_dictionary_file(encode_dictionary_file(Dictionary(1, UNLOADABLE)), "dict-00001.zdict")


def journal_with_damaged_dictionary(path: Path, trained: bytes) -> None:
    """Records 1-3 without a dictionary (a version 3 writer's, say: written raw here), 4-23 with it."""
    j = journal.open(path, create=True, compress=False)
    with j:
        for i in range(3):
            j.append(event(i))
    j = journal.open(path, dictionary=Dictionary(1, trained))
    assert isinstance(j, Journal)
    with j:
        for i in range(3, 13):
            j.append(event(i))
        j.append_many([event(i) for i in range(13, 23)])
    (path / dictionary_file_name(1)).write_bytes(encode_dictionary_file(Dictionary(1, UNLOADABLE)))


def test_reads_verify_and_salvage_say_corruption_and_keep_the_rest(tmp_path: Path, trained: bytes) -> None:
    path = tmp_path / "j"
    journal_with_damaged_dictionary(path, trained)
    with journal.open(path, readonly=True) as r:
        assert [r.get(s).event for s in (1, 2, 3)] == [event(i) for i in range(3)]  # type: ignore[union-attr]
        with pytest.raises(CorruptionError, match=r"dict-00001\.zdict"):
            r.get(4)
        with pytest.raises(CorruptionError, match=r"dict-00001\.zdict"):
            r.get(20)
        with pytest.raises(CorruptionError, match=r"dict-00001\.zdict"):
            list(r.read())
    report = verify(str(path))
    assert report.verdict == CORRUPT
    assert all("dict-00001.zdict" in p.reason for p in report.problems)
    assert lost(report) == set(range(4, 24))
    salvage(str(path), str(tmp_path / "out"))
    with journal.open(tmp_path / "out", readonly=True) as r:
        assert [rec.event for rec in r.read()][:3] == [event(i) for i in range(3)]


def test_a_writer_given_such_data_is_refused_before_it_writes(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with pytest.raises(InvalidArgumentError, match="zstd cannot load"):
        journal.open(path, create=True, dictionary=Dictionary(1, UNLOADABLE))
    with journal.open(path, create=True) as j:
        j.append(event(0))
    with pytest.raises(InvalidArgumentError):
        journal.open(path, dictionary=Dictionary(1, UNLOADABLE))
    assert not [n for n in os.listdir(path) if n.startswith("dict-")]
    with journal.open(path) as j:  # the refused open left the lock free
        j.append(event(1))


def test_a_store_with_such_a_dictionary_still_opens_sessions_for_writing(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    d = os.path.join(st.root, D.DICTIONARIES_DIR)
    os.makedirs(d)
    with open(os.path.join(d, dictionary_file_name(1)), "wb") as f:
        f.write(encode_dictionary_file(Dictionary(1, UNLOADABLE)))
    s = st.create(workspace={"path": "/repo"})
    try:
        s.append("user.message", {"text": "hello"})
    finally:
        s.close()
    assert isinstance(st.dictionary_problem, JournalError)
    assert "zstd cannot load" in str(st.dictionary_problem)
    with journal.open(st.journal_path(s.store_id), readonly=True) as r:
        assert r.last_seq >= 2  # its start and the message, read back
        list(r.read())
