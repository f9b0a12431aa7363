"""A writer keeps the dictionary its frames name in the journal's directory.

The journal's directory holds every dictionary its frames name, so that it reads back on its
own (docs/FORMAT.md, "Dictionaries"). A file removed while a writer has the journal open (by
hand, by a clean-up) is written again from the writer's bytes before a new segment takes frames
naming it and at close; a file replaced by other bytes stops the writer (the frames it would
write name a dictionary no reader could use); a failure to write it again is a failed roll-over
(fail-stop) or a close that raises.
"""

from __future__ import annotations

import errno
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import zstandard

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine.core import Journal
from journal.engine.dictionary import Dictionary, dictionary_file_name, encode_dictionary_file
from journal.engine.verify import CLEAN, verify
from journal.errors import CorruptionError, JournalFailStoppedError, JournalIOError
from journal.fs import OsFileSystem
from journal.outcomes import Committed, NotCommitted

SEGMENT_BYTES = 64 * 1024  # small segments: a few dozen appends roll over


class DictionaryFaults(FaultyFileSystem):
    """Faults on the dictionary file's writes only: the segments' pwrites pass uncounted."""

    def check(self, op: str, path: str) -> None:
        if op == "pwrite" and ".zdict" not in os.path.basename(path):
            return
        super().check(op, path)


def event(i: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed * 1_000_003 + i)
    return {
        "type": rng.choice(["message", "tool_call", "tool_result"]),
        "id": f"evt_{i:08d}",
        "content": " ".join(rng.choice(["the", "file", "search", "result", "ok", "error"]) for _ in range(60)),
        "meta": {"tokens": rng.randint(1, 5000), "model": "m-1"},
    }


def _train(seed: int) -> Dictionary:
    samples = [json.dumps(event(i, seed=seed)).encode() for i in range(2000)]
    return Dictionary(1, zstandard.train_dictionary(16384, list[Any](samples)).as_bytes())


@pytest.fixture(scope="module")
def trained() -> Dictionary:
    return _train(2)


def jopen(path: Path, **options: Any) -> Journal:
    j = journal.open(path, segment_size_bytes=SEGMENT_BYTES, **options)
    assert isinstance(j, Journal)
    return j


def segments(path: Path) -> int:
    return sum(1 for p in path.iterdir() if p.name.endswith(".seg"))


def append_until_roll(j: Journal, path: Path, first: int) -> int:
    """Sync appends from ``first`` until a new segment exists; the next event's number."""
    before = segments(path)
    i = first
    while segments(path) == before:
        out = j.append(event(i))
        assert isinstance(out, Committed), out
        i += 1
        assert i - first < 10_000
    return i


def reads_back(path: Path, n: int) -> None:
    with jopen(path, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(n)]
    assert verify(str(path)).verdict == CLEAN


def test_a_removed_dictionary_file_is_written_again_at_roll_over(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    with jopen(path, create=True, dictionary=trained) as j:
        n = append_until_roll(j, path, 0)  # the first segment takes frames naming it
        dict_file.unlink()
        n = append_until_roll(j, path, n)
        assert dict_file.read_bytes() == encode_dictionary_file(Dictionary(1, trained.data))
        dict_file.unlink()  # and once more, after the last roll-over: the close writes it
        j.append(event(n))
        n += 1
    assert dict_file.exists()
    reads_back(path, n)


def test_a_replaced_dictionary_file_stops_the_writer(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    other = encode_dictionary_file(_train(5))
    with jopen(path, create=True, dictionary=trained) as j:
        n = append_until_roll(j, path, 0)
        kept = dict_file.read_bytes()
        dict_file.unlink()
        dict_file.write_bytes(other)  # a valid dictionary file, another dictionary
        before = segments(path)
        outs: list[journal.Outcome] = []
        while segments(path) == before and len(outs) < 10_000:
            out = j.append(event(n + len(outs)))
            outs.append(out)
            if not isinstance(out, Committed):
                break
        assert isinstance(outs[-1], NotCommitted) and "replaced" in outs[-1].reason, outs[-1]
        n += len(outs) - 1
        with pytest.raises(JournalFailStoppedError):
            j.append(event(n))
    dict_file.write_bytes(kept)  # put back: every acknowledged record reads
    reads_back(path, n)


def test_a_dictionary_file_replaced_after_the_last_roll_over_fails_the_close(
    tmp_path: Path, trained: Dictionary
) -> None:
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    j = jopen(path, create=True, dictionary=trained)
    for i in range(5):
        j.append(event(i))
    kept = dict_file.read_bytes()
    dict_file.unlink()
    dict_file.write_bytes(encode_dictionary_file(_train(5)))
    with pytest.raises(CorruptionError, match="replaced since the journal was opened"):
        j.close()
    jopen(path).close()  # the lock was released: a writer opens
    dict_file.write_bytes(kept)
    reads_back(path, 5)


@pytest.mark.parametrize("op", ["open_write", "pwrite", "fsync", "rename", "fsync_dir"])
def test_a_failed_rewrite_fails_the_roll_over(tmp_path: Path, trained: Dictionary, op: str) -> None:
    """Each I/O call of writing the file again, failed: the roll-over fails (the append is not
    committed, the journal fail-stops); a reopen writes it (the open installs the dictionary)
    and every acknowledged record reads back."""
    path = tmp_path / "j"
    fs = DictionaryFaults(OsFileSystem())
    dict_file = path / dictionary_file_name(1)
    with jopen(path, create=True, dictionary=trained, fs=fs) as j:
        n = append_until_roll(j, path, 0)
        dict_file.unlink()
        # The roll-over's first calls of ``op`` are the rewrite's: fail every one from here.
        fs.fail(op, errno.EIO, after=fs.calls[op], times=-1)
        outs: list[journal.Outcome] = []
        while True:
            out = j.append(event(n + len(outs)))
            outs.append(out)
            if not isinstance(out, Committed):
                break
            assert len(outs) < 10_000
        assert isinstance(outs[-1], NotCommitted), outs[-1]
        assert fs.injected and "roll-over failed" in outs[-1].reason, outs[-1]
        n += len(outs) - 1
        fs.clear()
    with jopen(path, dictionary=trained) as j:  # the open installs it again
        assert j.last_seq == n
    reads_back(path, n)


@pytest.mark.parametrize("op", ["open_write", "rename"])
def test_a_failed_rewrite_at_close_raises(tmp_path: Path, trained: Dictionary, op: str) -> None:
    path = tmp_path / "j"
    fs = DictionaryFaults(OsFileSystem())
    dict_file = path / dictionary_file_name(1)
    j = jopen(path, create=True, dictionary=trained, fs=fs)
    for i in range(5):
        j.append(event(i))
    dict_file.unlink()
    fs.fail(op, errno.EIO, after=fs.calls[op], times=-1)
    with pytest.raises(JournalIOError):
        j.close()
    fs.clear()
    assert not dict_file.exists()
    with jopen(path, dictionary=trained) as j:  # the next writer installs it
        assert j.last_seq == 5
    reads_back(path, 5)


@pytest.mark.parametrize("planted", ["link", "damaged"])
def test_a_link_or_a_damaged_file_at_the_name_is_refused_and_left_as_it_is(
    tmp_path: Path, trained: Dictionary, planted: str
) -> None:
    """Neither written through (a link) nor overwritten (a damaged file: bytes are kept, and
    verify reports them): the close raises, the thing at the name is as it was."""
    path = tmp_path / "j"
    dict_file = path / dictionary_file_name(1)
    j = jopen(path, create=True, dictionary=trained)
    j.append(event(0))
    kept = dict_file.read_bytes()
    dict_file.unlink()
    target = tmp_path / "elsewhere"
    if planted == "link":
        target.write_bytes(b"not to be touched")
        dict_file.symlink_to(target)
    else:
        dict_file.write_bytes(kept[:100] + bytes([kept[100] ^ 1]) + kept[101:])
    before = dict_file.read_bytes()
    with pytest.raises(journal.JournalError):
        j.close()
    assert dict_file.read_bytes() == before and dict_file.is_symlink() == (planted == "link")
    if planted == "link":
        assert target.read_bytes() == b"not to be touched"
    dict_file.unlink()
    dict_file.write_bytes(kept)
    reads_back(path, 1)
