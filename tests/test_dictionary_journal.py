"""Journals written with a trained zstd dictionary (format version 4): what they write, what every
reader does with them, and what a missing or damaged dictionary file means to reads, verify,
copy and salvage."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
import zstandard

import journal
from journal.engine import format as fmt
from journal.engine.copy import copy_prefix
from journal.engine.core import Journal
from journal.engine.dictionary import Dictionary, dictionary_file_name, dictionary_ids
from journal.engine.salvage import salvage
from journal.engine.verify import CLEAN, CORRUPT, verify
from journal.errors import CorruptionError
from journal.fs import OsFileSystem


def jopen(path: Path, **options: Any) -> Journal:
    """journal.open, the file engine's handle (its seal() and options)."""
    j = journal.open(path, **options)
    assert isinstance(j, Journal)
    return j


def event(i: int, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed * 1_000_003 + i)
    return {
        "type": rng.choice(["message", "tool_call", "tool_result"]),
        "id": f"evt_{i:08d}",
        "role": rng.choice(["user", "assistant"]),
        "content": " ".join(rng.choice(["the", "file", "search", "result", "ok", "error"]) for _ in range(20)),
        "meta": {"tokens": rng.randint(1, 5000), "model": "m-1"},
    }


@pytest.fixture(scope="module")
def trained() -> Dictionary:
    samples = [json.dumps(event(i, seed=2)).encode() for i in range(2000)]
    return Dictionary(1, zstandard.train_dictionary(16384, list[Any](samples)).as_bytes())


def record_frames(path: Path) -> list[tuple[str, int, int, int]]:
    """(segment, kind, first seq, dictionary id) of every record frame of the journal."""
    out = []
    for name in sorted(n for n in os.listdir(path) if n.endswith(".seg")):
        data = (path / name).read_bytes()
        header = fmt.decode_segment_header(data)
        res = fmt.py_scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        for fr in fmt.record_frames(res.frames):
            dict_id = fmt.read_frame_header(data, fr.offset)[5]
            out.append((name, fr.flags & fmt.FLAG_KIND_MASK, fr.first_seq, dict_id))
    return out


def segment_versions(path: Path) -> list[int]:
    return [
        fmt.decode_segment_header((path / n).read_bytes()).version
        for n in sorted(n for n in os.listdir(path) if n.endswith(".seg"))
    ]


def write(j: Journal, first: int, n: int) -> None:
    """Sync appends, an append_many (blocks) and buffered appends: every kind of frame."""
    third = n // 3
    for i in range(first, first + third):
        j.append(event(i))
    j.append_many([event(i) for i in range(first + third, first + 2 * third)])
    for i in range(first + 2 * third, first + n):
        j.append(event(i), durability="buffered")
    j.flush()


def test_written_with_a_dictionary_reads_back(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    with jopen(path, create=True, dictionary=trained) as j:
        write(j, 0, 90)
        assert [r.event for r in j.read()] == [event(i) for i in range(90)]
    assert dictionary_ids(OsFileSystem(), str(path)) == [1]
    frames = record_frames(path)
    assert {kind for _, kind, _, _ in frames} == {fmt.KIND_DATA, fmt.KIND_BLOCK}
    assert all(dict_id == 1 for *_, dict_id in frames)
    # Reading needs only the directory's files: no dictionary passed, read-only and writable.
    with jopen(path, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(90)]
        assert j.get(5).event == event(4)  # type: ignore[union-attr]
        assert j.get(40).event == event(39)  # type: ignore[union-attr]
    with jopen(path) as j:
        j.append(event(90))
        assert [r.event for r in j.read()] == [event(i) for i in range(91)]
        assert [j.get(s).event for s in (1, 31, 45, 89)] == [event(0), event(30), event(44), event(88)]  # type: ignore[union-attr]
    assert record_frames(path)[-1][3] == 0  # a handle without the dictionary writes without it
    assert verify(str(path)).verdict == CLEAN


def test_journal_without_then_with(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    with jopen(path, create=True) as j:
        write(j, 0, 30)
    with jopen(path, dictionary=trained) as j:
        write(j, 30, 30)
        assert [r.event for r in j.read()] == [event(i) for i in range(60)]
    ids = [(seq, dict_id) for _, _, seq, dict_id in record_frames(path)]
    assert all(d == 0 for s, d in ids if s <= 30) and all(d == 1 for s, d in ids if s > 30)
    with jopen(path, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(60)]


def test_older_live_segment_continued_without_it(
    tmp_path: Path, trained: Dictionary, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j"
    with monkeypatch.context() as m:
        m.setattr(fmt, "FORMAT_VERSION", 3)  # a journal made by version 3
        with jopen(path, create=True) as j:
            write(j, 0, 9)
    assert segment_versions(path) == [3]
    with jopen(path, dictionary=trained) as j:
        write(j, 9, 9)  # the live segment is of version 3: no dictionary in it
        j.seal()
        write(j, 18, 9)  # the next segment is of version 4: the dictionary from now on
        assert [r.event for r in j.read()] == [event(i) for i in range(27)]
    assert segment_versions(path) == [3, 4]
    frames = record_frames(path)
    first, second = sorted({name for name, *_ in frames})
    assert all(d == 0 for name, _, _, d in frames if name == first)
    assert all(d == 1 for name, _, _, d in frames if name == second)
    with jopen(path, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(27)]


def test_install_takes_next_free_id(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    with jopen(path, create=True, dictionary=trained) as j:
        j.append(event(0))
    samples = [json.dumps(event(i, seed=5)).encode() for i in range(2000)]
    other = Dictionary(1, zstandard.train_dictionary(8192, list[Any](samples)).as_bytes())
    with jopen(path, dictionary=other) as j:  # id 1 is taken by another dictionary
        j.append(event(1))
    with jopen(path, dictionary=Dictionary(7, trained.data)) as j:  # the same bytes: file 1 again
        j.append(event(2))
    assert [d for *_, d in record_frames(path)] == [1, 2, 1]
    with jopen(path, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(3)]


def _written(tmp_path: Path, trained: Dictionary) -> Path:
    """Records 1-30 without the dictionary, 31-60 with it."""
    path = tmp_path / "j"
    with jopen(path, create=True) as j:
        write(j, 0, 30)
    with jopen(path, dictionary=trained) as j:
        write(j, 30, 30)
    return path


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_missing_or_damaged_dictionary(tmp_path: Path, trained: Dictionary, damage: str) -> None:
    path = _written(tmp_path, trained)
    name = dictionary_file_name(1)
    if damage == "missing":
        os.unlink(path / name)
    else:
        data = bytearray((path / name).read_bytes())
        data[100] ^= 0xFF
        (path / name).write_bytes(bytes(data))
    first = next((seg, seq) for seg, _, seq, d in record_frames(path) if d)
    with jopen(path, readonly=True) as j:
        got = []
        with pytest.raises(CorruptionError) as err:
            for r in j.read():
                got.append(r.seq)
        assert got == list(range(1, 31))  # every record before the first that needs it
        assert j.get(10).event == event(9)  # type: ignore[union-attr]
        with pytest.raises(CorruptionError):
            j.get(45)
    exc = err.value
    assert name in exc.reason and "restore" in exc.reason and "salvage" in exc.reason
    assert (exc.segment, exc.seq) == first and exc.offset > 0
    assert ("the file is missing" in exc.reason) == (damage == "missing")

    report = verify(str(path))
    assert report.verdict == CORRUPT
    assert any(name in p.reason for p in report.problems)

    out = tmp_path / "salvaged"
    rep = salvage(str(path), str(out), renumber=True)
    assert any(name in loss.reason for loss in rep.losses)
    with jopen(out, readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(30)]


def test_copy_carries_the_dictionary(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    with jopen(path, create=True, dictionary=trained) as j:
        write(j, 0, 60)
        j.seal()  # a sealed segment a copy links whole
        j.append_many([event(i) for i in range(60, 70)])  # a block a cut falls inside
    assert len(segment_versions(path)) == 2
    fs = OsFileSystem()
    for at_seq in (25, 60, 65, 70):
        dst = tmp_path / f"copy{at_seq}"
        os.mkdir(dst)
        copy_prefix(fs, str(path), str(dst), at_seq)
        assert dictionary_ids(fs, str(dst)) == [1]
        with jopen(dst, readonly=True) as j:
            assert [r.event for r in j.read()] == [event(i) for i in range(at_seq)]
        assert verify(str(dst)).verdict == CLEAN


def test_store_fork_carries_the_dictionary(tmp_path: Path, trained: Dictionary) -> None:
    store = journal.store(str(tmp_path / "s"))
    with store.open("a", create=True, dictionary=trained) as j:
        assert isinstance(j, Journal)
        write(j, 0, 30)
    store.copy("a", "b", upto_seq=20)
    with store.open("b", readonly=True) as j:
        assert [r.event for r in j.read()] == [event(i) for i in range(20)]


def test_shared_writer_refuses_a_dictionary(tmp_path: Path, trained: Dictionary) -> None:
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(tmp_path / "j", create=True, writer="shared", dictionary=trained)


def test_dictionary_frame_in_an_older_segment_is_corruption(
    tmp_path: Path, trained: Dictionary, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j"
    with monkeypatch.context() as m:
        m.setattr(fmt, "FORMAT_VERSION", 3)
        with jopen(path, create=True, dictionary=trained) as j:
            j.append(event(0))
            use = j.options.dictionary
            assert use is not None and not use.active  # a version 3 live segment: not used
            use.active = True  # what a writer never does: a frame naming it in version 3
            j.append(event(1))
    assert segment_versions(path) == [3]
    assert [d for *_, d in record_frames(path)] == [0, 1]
    with jopen(path, readonly=True) as j:
        with pytest.raises(CorruptionError, match="format version before 4"):
            list(j.read())
        with pytest.raises(CorruptionError, match="format version before 4"):
            j.get(2)
    assert verify(str(path)).verdict == CORRUPT


def test_shared_writer_reads_keyed_frames_an_exclusive_one_wrote_with_it(tmp_path: Path, trained: Dictionary) -> None:
    path = tmp_path / "j"
    a = jopen(path, create=True, writer="shared")
    try:
        a.append(event(0), idempotency_key="k0")
        # Between two of the shared handle's batches, a handle with the dictionary writes a keyed
        # record with it: the shared one takes its key (and digest) when it catches up.
        with jopen(path, dictionary=trained) as b:
            b.append(event(1), idempotency_key="k1")
        assert [d for *_, d in record_frames(path)] == [0, 1]
        a.append(event(2), idempotency_key="k2")
        assert a.append(event(1), idempotency_key="k1").seq == 2  # type: ignore[union-attr]
        assert [r.event for r in a.read()] == [event(i) for i in range(3)]
    finally:
        a.close()
