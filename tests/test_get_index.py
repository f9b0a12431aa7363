"""get(seq) enters segments through a sparse index (footer or in-memory) and stays exact."""

from __future__ import annotations

import os
import pathlib
import random
import struct
import threading
from pathlib import Path

import pytest
import xxhash

import journal
from journal.engine import format as fmt
from journal.engine.reader import Cursor
from journal.fs import OsFileSystem


def _event(i: int) -> dict[str, object]:
    return {"i": i, "pad": "x" * ((i * 7919) % 3000)}


def test_get_every_seq_writer_and_readonly(tmp_path: Path) -> None:
    path = tmp_path / "j"
    n = 1500
    opts = {"segment_size_bytes": 256 * 1024, "index_interval_bytes": 512}
    with journal.open(path, create=True, **opts) as j:
        j.append_many([_event(i) for i in range(1, n + 1)], durability="flush")
        seqs = list(range(1, n + 1))
        random.Random(3).shuffle(seqs)
        for seq in seqs:
            rec = j.get(seq)
            assert rec is not None and rec.event == _event(seq)
        assert j.get(n + 1) is None and j.get(0) is None
    with journal.open(path, readonly=True, **opts) as j:
        for seq in seqs[:300]:
            rec = j.get(seq)
            assert rec is not None and rec.event == _event(seq)


def test_a_wrong_hint_is_checked_and_ignored(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True) as j:
        j.append_many([_event(i) for i in range(1, 201)], durability="flush")
        base = j._active_header.base_seq if j._active_header is not None else 1
        for hint in ((base, 150, 4096 + 3), (base, 150, 10**9), (base + 7, 150, 4096), (base, 100, 4096)):
            cur = Cursor(j._fs, str(path), 149, j.options.record_size_bytes_max, hint)
            try:
                recs = list(cur.read(limit=1))
            finally:
                cur.close()
            assert [r.seq for r in recs] == [150] and recs[0].event == _event(150)


def test_get_while_a_writer_rolls_segments(tmp_path: Path) -> None:
    path = tmp_path / "j"
    with journal.open(path, create=True, segment_size_bytes=64 * 1024, index_interval_bytes=512) as j:
        j.append(_event(1), durability="flush")
        committed = [1]  # last_seq counts seqs handed out but not yet written: track outcomes
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            rng = random.Random(5)
            try:
                while not stop.is_set():
                    top = committed[0]
                    seq = rng.randrange(1, top + 1)
                    rec = j.get(seq)
                    assert rec is not None and rec.event == _event(seq), seq
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        try:
            for i in range(2, 1500):
                out = j.append(_event(i), durability="flush")
                assert isinstance(out, journal.Committed) and out.seq == i
                committed[0] = i
        finally:
            stop.set()
            t.join()
        assert not errors, errors[0]


def test_point_reads_reuse_open_segments_and_still_see_new_ones(tmp_path: pathlib.Path) -> None:
    """get() keeps sealed segments open between calls, yet finds records in segments made since."""
    path = str(tmp_path / "j")
    opened: list[str] = []

    class Counting(OsFileSystem):
        def open_read(self, p: str) -> journal.fs.File:  # type: ignore[name-defined]
            opened.append(os.path.basename(p))
            return super().open_read(p)

    with journal.open(path, create=True, segment_size_bytes=8192, fs=Counting()) as j:
        for i in range(300):
            j.append({"i": i, "pad": "p" * 100}, durability="flush")
        assert len([n for n in os.listdir(path) if n.endswith(".seg")]) > 3
        for _ in range(3):
            for seq in (5, 150, 290):
                rec = j.get(seq)
                assert rec is not None and rec.event["i"] == seq - 1
        first_pass = len(opened)
        for seq in (5, 150, 290):
            j.get(seq)
        assert len(opened) == first_pass  # nothing reopened
        while len([n for n in os.listdir(path) if n.endswith(".seg")]) < 8:
            last = j.append({"late": True, "pad": "q" * 300}, durability="flush")
        assert isinstance(last, journal.Committed) and j.get(last.seq) is not None
        assert j.get(last.seq).event["late"] is True  # type: ignore[union-attr]


# --- the dense point-read index (journal/engine/reader.py, _OpenSegment.locate) ----------------


def _fields(rec: object) -> tuple[object, ...]:
    assert rec is not None
    return (rec.seq, rec.payload, rec.is_bytes, rec.key, rec.synthetic)  # type: ignore[attr-defined]


def test_point_reads_through_the_dense_index_are_exact_everywhere(tmp_path: Path) -> None:
    """Keyed, compressed, bytes and synthetic records, sector padding between batches, sealed
    and live segments: every get equals what a scan reads."""
    path = tmp_path / "j"
    opts = {"segment_size_bytes": 64 * 1024, "sector_bytes": 4096}
    rng = random.Random(5)
    with journal.open(path, create=True, **opts) as j:
        for b in range(120):
            n = rng.randint(1, 6)
            events: list[object] = [_event(b * 10 + k) if k % 3 else bytes(rng.randbytes(rng.randint(1, 900)))
                                    for k in range(n)]
            keys = [f"k{b}-{k}" if rng.random() < 0.3 else None for k in range(n)]
            j.append_many(events, durability=rng.choice(["sync", "flush"]), idempotency_keys=keys,
                          synthetic=rng.random() < 0.1)
        by_scan = {r.seq: r for r in j.read()}
        seqs = list(by_scan)
        rng.shuffle(seqs)
        for seq in seqs:
            assert _fields(j.get(seq)) == _fields(by_scan[seq])
    with journal.open(path, readonly=True) as ro:
        for seq in seqs:
            assert _fields(ro.get(seq)) == _fields(by_scan[seq])


@pytest.mark.parametrize("block_bytes", [0, journal.Options().block_bytes], ids=["a frame each", "one block"])
def test_a_wrong_dense_offset_is_a_miss_never_a_wrong_record(tmp_path: Path, block_bytes: int) -> None:
    """Every offset the index gives is verified at the read (checksum, seq, kind): an offset
    that names another record's frame is a miss, and the cursor answers. (The records of one
    append_many share a block frame unless block_bytes is 0: both kinds of frame are read.)"""
    path = str(tmp_path / "j")
    with journal.open(path, create=True, block_bytes=block_bytes) as j:
        j.append_many([{"n": i} for i in range(1, 11)], durability="sync")
    with journal.open(path, readonly=True) as ro:
        assert ro.get(10) is not None  # the index now covers seqs 1..10
        opened = next(iter(ro._segments._segments.values()))
        # seq 5 "is" seq 6's frame, whole (with the wrong length too, the read would miss anyway)
        opened.offsets[4], opened.ends[4] = opened.offsets[5], opened.ends[5]
        rec = ro.get(5)
        assert rec is not None and rec.seq == 5 and rec.event == {"n": 5}
        opened.offsets[6] = opened.offsets[6] + 3  # not a frame's start at all
        rec = ro.get(7)
        assert rec is not None and rec.event == {"n": 7}
        # The index follows records appended after it was built.
    with journal.open(path) as j:
        j.append({"n": 11})
    with journal.open(path, readonly=True) as ro:
        assert ro.get(10) is not None
        with journal.open(path) as j:
            j.append({"n": 12})
        rec = ro.get(12)
        assert rec is not None and rec.event == {"n": 12}


def test_a_frame_of_a_newer_format_at_a_dense_offset_is_refused_not_read(tmp_path: Path) -> None:
    """A genuine frame (its checksum holds) whose flags this version does not know, found
    through the index after it was built: get raises NewerFormatError, as a scan does, and
    never hands its bytes out as a record."""
    from tests.conftest import frames_of, live_segment

    path = str(tmp_path / "j")
    with journal.open(path, create=True, block_bytes=0, compress=False) as j:
        for i in range(1, 11):
            j.append({"n": i}, durability="sync")
    seg = live_segment(path)
    victim = next(f for f in frames_of(seg) if f.seq == 5 and f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA)
    with journal.open(path, readonly=True) as ro:
        assert ro.get(10) is not None  # the index now covers seqs 1..10
        opened = next(iter(ro._segments._segments.values()))
        data = bytearray(seg.read_bytes())
        at = victim.offset
        flags_at = at + struct.calcsize("<QIIQ")
        struct.pack_into("<H", data, flags_at, struct.unpack_from("<H", data, flags_at)[0] | 0x8000)
        end = victim.payload_offset + victim.stored_len
        checksum = xxhash.xxh64_intdigest(bytes(data[at + fmt.FRAME_CHECKSUMMED_FROM : end]), seed=opened.header.salt)
        struct.pack_into("<Q", data, at, checksum)
        seg.write_bytes(bytes(data))
        assert fmt.py_verify_frame(bytes(data), at, opened.header.salt) is not None  # genuine, flags unknown
        with pytest.raises(journal.NewerFormatError):
            ro.get(5)
        before = ro.get(4)  # the frame before it reads as ever
        assert before is not None and before.event == {"n": 4}


def test_damage_after_a_record_still_lets_it_be_read_and_damage_before_is_refused(tmp_path: Path) -> None:
    from tests.conftest import frames_of, segments

    path = tmp_path / "j"
    opts: dict[str, object] = {"segment_size_bytes": 64 * 1024, "compress": False}
    with journal.open(path, create=True, **opts) as j:
        for i in range(0, 400, 10):
            j.append_many([_event(k) for k in range(i, i + 10)], durability="sync")
    assert len(segments(path)) >= 3
    sealed = segments(path)[0]
    frames = [f for f in frames_of(sealed) if f.flags & 0x000C in (0x0, 0xC)]  # data and block frames
    victim = frames[len(frames) // 2]
    data = bytearray(sealed.read_bytes())
    data[victim.payload_offset] ^= 0x10
    sealed.write_bytes(bytes(data))
    with journal.open(path, readonly=True, **opts) as ro:
        assert ro.get(frames[0].seq) is not None  # before the damage: the index reaches it
        with pytest.raises(journal.CorruptionError):
            ro.get(victim.seq)
        with pytest.raises(journal.CorruptionError):
            ro.get(frames[-1].seq)  # after it, in the sealed segment: the cursor's answer
