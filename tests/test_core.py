"""The public contract, bad input, recovery of torn and damaged tails, roll-over and seeking."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat

import pytest

import journal
from journal.engine import format as fmt
from journal.fs import OsFileSystem
from tests.conftest import frames_of, live_segment, segments, snapshot_files


def events(n: int, start: int = 0, size: int = 40) -> list[dict[str, object]]:
    return [{"type": "message", "i": i, "text": "w" * (size + i % 7)} for i in range(start, start + n)]


# The tests of segments (roll-over, seeking, damage, gaps) size their journals in records of a
# frame each, as the writer frames records appended one by one; block frames, which an
# append_many makes by default, are tested the same ways in tests/test_format_v2.py.
ONE_A_FRAME = {"block_bytes": 0}


def test_public_contract(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        assert j.last_seq == 0
        out = j.append({"type": "user_message", "text": "hi"}, durability="sync")
        assert isinstance(out, journal.Committed) and out.seq == 1 and out.durability == "sync"
        outs = j.append_many(events(3), durability="flush")
        assert [o.seq for o in outs if isinstance(o, journal.Committed)] == [2, 3, 4]
        assert j.append(b"\x00raw", durability="buffered") == journal.Committed(5, "buffered")
        assert j.last_seq == 5
        recs = list(j.read(after_seq=0))
        assert [r.seq for r in recs] == [1, 2, 3, 4, 5]
        assert recs[0].event == {"type": "user_message", "text": "hi"}
        assert recs[4].event == b"\x00raw"
    j2 = journal.Journal.open(jpath)
    assert j2.last_seq == 5 and [r.seq for r in j2.read(after_seq=3)] == [4, 5]
    j2.close()
    j2.close()  # idempotent
    with pytest.raises(journal.JournalClosedError):
        j2.append({"x": 1})


def test_default_durability_is_sync(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        out = j.append({"a": 1})
        assert isinstance(out, journal.Committed) and out.durability == "sync"


def test_files_are_owner_only(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append({"secret": "token"})
    assert stat.S_IMODE(os.stat(jpath).st_mode) == 0o700
    for p in pathlib.Path(jpath).iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


@pytest.mark.parametrize(
    "event, error",
    [
        ({"x": object()}, journal.EventNotSerializableError),
        ({"x": float("nan")}, journal.EventNotSerializableError),
        ({"x": "\ud800"}, journal.EventNotSerializableError),
        (["not", "a", "dict"], journal.EventNotSerializableError),
        ({"x": "y" * 5000}, journal.RecordTooLargeError),
    ],
)
def test_bad_events_are_refused_and_nothing_changes(jpath: str, event: object, error: type) -> None:
    with journal.open(jpath, create=True, record_size_bytes_max=4096) as j:
        j.append({"ok": 1})
        before = snapshot_files(jpath)
        with pytest.raises(error) as exc:
            j.append(event)
        assert isinstance(exc.value, journal.JournalError)
        assert snapshot_files(jpath) == before
        assert j.append({"ok": 2}) == journal.Committed(2, "sync")


def test_bad_paths(tmp_path: pathlib.Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(journal.NotAJournalError, match="is a file"):
        journal.open(str(afile), create=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(journal.NotAJournalError, match="other files"):
        journal.open(str(other), create=True)
    assert sorted(os.listdir(other)) == ["notes.txt"]
    with pytest.raises(journal.JournalNotFoundError, match="create=True"):
        journal.open(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="durability"):
        with journal.open(str(tmp_path / "j"), create=True) as j:
            j.append({}, durability="fsync")


def test_readonly_changes_nothing_and_cannot_append(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append_many(events(5))
    seg = live_segment(jpath)
    with open(seg, "ab") as f:
        f.write(b"torn bytes")  # a torn tail a writer would cut
    before = snapshot_files(jpath)
    with journal.open(jpath, readonly=True) as r:
        assert r.last_seq == 5 and len(list(r.read())) == 5
        with pytest.raises(journal.ReadOnlyError):
            r.append({"x": 1})
    assert snapshot_files(jpath) == before


def test_torn_tail_cut_at_every_byte_of_the_last_frame(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    with journal.open(src, create=True) as j:
        j.append_many(events(3, size=120))
        j.append(events(1, 3, size=120)[0])  # a frame of its own (a torn block: test_format_v2.py)
    seg = live_segment(src)
    last = frames_of(seg)[-1]
    whole = seg.read_bytes()
    assert last.end == len(whole)
    for cut in range(last.offset + 1, last.end):
        d = tmp_path / f"cut{cut}"
        shutil.copytree(src, d)
        with open(live_segment(d), "r+b") as f:
            f.truncate(cut)
        with journal.open(d) as j:
            rep = j.recovery
            # The checksum leads the header and the salt is random: its first bytes can be zero,
            # and a tail of zero bytes only is cut without a copy (it holds nothing).
            zeros = not any(whole[last.offset : cut])
            tail = "zeros" if zeros else "torn"
            assert (rep.tail, rep.truncated_at, rep.truncated_bytes) == (tail, last.offset, cut - last.offset)
            assert j.last_seq == 3 and [r.event for r in j.read()] == events(3, size=120)
            if zeros:
                assert rep.quarantined == []
            else:
                kept = (d / rep.quarantined[0]).read_bytes()
                assert kept == whole[last.offset : cut]  # the cut bytes are kept, never just deleted
            assert j.append({"after": True}) == journal.Committed(4, "sync")
        files = snapshot_files(d)
        with journal.open(d) as j:  # a second recovery has nothing to do
            assert j.recovery.truncated_at is None and j.last_seq == 4
        assert snapshot_files(d) == files
        shutil.rmtree(d)


@pytest.mark.parametrize("zeros", [1, 31, 32, 4096, 70000])
def test_zero_filled_tail_is_cut(jpath: str, zeros: int) -> None:
    with journal.open(jpath, create=True) as j:
        j.append_many(events(3))
    with open(live_segment(jpath), "ab") as f:
        f.write(bytes(zeros))
    with journal.open(jpath) as j:
        assert j.recovery.tail == "zeros" and j.recovery.truncated_bytes == zeros
        assert j.last_seq == 3


def test_flipped_bit_in_committed_data_is_an_error_and_nothing_is_cut(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        for e in events(10):
            j.append(e)  # each its own synced batch, so each carries the commit flag
    seg = live_segment(jpath)
    # Without LIVE.hint, which lets a read-only open skip the synced prefix and find this damage
    # only when it reads it (tests/test_live_hint.py).
    os.remove(os.path.join(jpath, "LIVE.hint"))
    victim = frames_of(seg)[2]
    data = bytearray(seg.read_bytes())
    data[victim.payload_offset + 3] ^= 0x10
    seg.write_bytes(bytes(data))
    before = snapshot_files(jpath)
    with pytest.raises(journal.CorruptionError) as exc:
        journal.open(jpath)
    err = exc.value
    assert (err.segment, err.offset, err.seq) == (seg.name, victim.offset, 3)
    assert seg.name in str(err) and str(victim.offset) in str(err) and "salvage" in str(err)
    assert snapshot_files(jpath) == before
    # A read-only open classifies the tail exactly as the writer's recovery: the same refusal.
    with pytest.raises(journal.CorruptionError) as ro:
        journal.open(jpath, readonly=True)
    assert (ro.value.segment, ro.value.offset, ro.value.seq) == (seg.name, victim.offset, 3)
    assert snapshot_files(jpath) == before


def test_roll_over_and_seek_by_seq_on_sealed_segments(jpath: str) -> None:
    n = 3000
    with journal.open(jpath, create=True, segment_size_bytes=16384, index_interval_bytes=1024, **ONE_A_FRAME) as j:
        for start in range(0, n, 100):
            j.append_many(events(100, start), durability="flush")
    segs = segments(jpath)
    assert len(segs) > 10
    opened: list[str] = []

    class CountingFS(OsFileSystem):
        def open_read(self, path: str) -> journal.fs.File:  # type: ignore[name-defined]
            opened.append(os.path.basename(path))
            return super().open_read(path)

    with journal.open(jpath, readonly=True, fs=CountingFS()) as r:
        assert r.last_seq == n
        opened.clear()
        target = 2 * n // 3
        got = next(iter(r.read(after_seq=target)))
        assert got.seq == target + 1 and got.event == events(1, target)[0]
        # Seeking opened only the segment holding the seq, none of the history before it.
        assert len(opened) == 1
        assert [r.seq for r in r.read(after_seq=0)] == list(range(1, n + 1))
    with journal.open(jpath) as j:  # opening reads the live segment, not the history
        assert j.recovery.segments == len(segs) and j.last_seq == n
        assert j.append({"next": 1}) == journal.Committed(n + 1, "sync")


def test_sealed_segment_damage_is_an_error(jpath: str) -> None:
    with journal.open(jpath, create=True, segment_size_bytes=8192, **ONE_A_FRAME) as j:
        for start in range(0, 400, 50):
            j.append_many(events(50, start))
    first = segments(jpath)[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0x01
    first.write_bytes(bytes(data))
    with journal.open(jpath, readonly=True) as r, pytest.raises(journal.CorruptionError) as exc:
        list(r.read())
    assert exc.value.segment == first.name


def test_newer_format_is_refused(jpath: str) -> None:
    import struct

    import xxhash

    with journal.open(jpath, create=True) as j:
        j.append({"a": 1})
    seg = live_segment(jpath)
    data = bytearray(seg.read_bytes())
    struct.pack_into("<H", data, 8, fmt.FORMAT_VERSION + 1)
    struct.pack_into("<Q", data, 56, xxhash.xxh64_intdigest(bytes(data[:56])))
    seg.write_bytes(bytes(data))
    with pytest.raises(journal.NewerFormatError, match="newer journal format"):
        journal.open(jpath)


def test_sequence_gap_between_segments_is_an_error(jpath: str) -> None:
    with journal.open(jpath, create=True, segment_size_bytes=8192, **ONE_A_FRAME) as j:
        for start in range(0, 600, 50):
            j.append_many(events(50, start))
    segs = segments(jpath)
    assert len(segs) >= 3
    segs[1].unlink()  # a whole segment lost
    with journal.open(jpath, readonly=True) as r, pytest.raises(journal.SequenceError):
        list(r.read())


def test_idempotency_key_dedupes_retries_across_reopen(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        first = j.append({"eventId": "e1"}, idempotency_key="e1")
        again = j.append({"eventId": "e1"}, idempotency_key="e1")
        assert isinstance(first, journal.Committed) and isinstance(again, journal.Committed)
        assert again.seq == first.seq and again.duplicate and j.last_seq == 1
    with journal.open(jpath) as j:
        retry = j.append({"eventId": "e1"}, idempotency_key="e1")
        assert isinstance(retry, journal.Committed) and retry.duplicate and retry.seq == 1
        assert [r.key for r in j.read()] == ["e1"]
        outs = j.append_many([{"n": 1}, {"n": 2}], idempotency_keys=["k1", None])
        assert [o.seq for o in outs if isinstance(o, journal.Committed)] == [2, 3]


def test_buffered_appends_reach_disk_on_close(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        for e in events(50):
            assert isinstance(j.append(e, durability="buffered"), journal.Committed)
    with journal.open(jpath, readonly=True) as r:
        assert [rec.event for rec in r.read()] == events(50)


def test_large_records_across_read_chunks(jpath: str) -> None:
    big = os.urandom(3 * 1024 * 1024)
    with journal.open(jpath, create=True) as j:
        j.append_many([{"a": 1}, big, {"b": 2}])
    with journal.open(jpath, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [{"a": 1}, big, {"b": 2}]


def test_leftover_temp_segment_is_removed(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append({"a": 1})
    tmp = pathlib.Path(jpath) / (fmt.segment_name(2) + ".tmp")
    tmp.write_bytes(b"\x00" * 64)
    with journal.open(jpath) as j:
        assert not tmp.exists() and any("unfinished segment" in a for a in j.recovery.actions)
        assert j.last_seq == 1


def test_opening_for_writing_reads_only_the_live_segment_the_footer_before_it_and_a_header(jpath: str) -> None:
    with journal.open(jpath, create=True, segment_size_bytes=8192, **ONE_A_FRAME) as j:
        for start in range(0, 1500, 50):
            j.append_many(events(50, start))
    segs = segments(jpath)
    assert len(segs) > 5
    touched: list[tuple[str, int]] = []

    class CountingFS(OsFileSystem):
        def open_read(self, path: str) -> journal.fs.File:  # type: ignore[name-defined]
            f = super().open_read(path)
            outer = self

            class Tracked:
                def __init__(self) -> None:
                    self.path = f.path

                def pread(self, size: int, offset: int) -> bytes:
                    touched.append((os.path.basename(path), size))
                    return f.pread(size, offset)

                def __getattr__(self, name: str) -> object:
                    return getattr(f, name)

            del outer
            return Tracked()  # type: ignore[return-value]

        def open_write(self, path: str, create: bool) -> journal.fs.File:  # type: ignore[name-defined]
            touched.append((os.path.basename(path), -1))
            return super().open_write(path, create)

    with journal.open(jpath, fs=CountingFS()) as j:
        assert j.last_seq == 1500
    names = {name for name, _ in touched if not name.startswith("LIVE.hint")}  # the close writes LIVE.hint
    assert names == {segs[0].name, segs[-1].name, segs[-2].name}
    # Of the sealed segment before the live one, only the header and the footer were read; of the
    # first, only its header (its journal id is the journal's: tests/test_reader_races.py).
    assert sum(size for name, size in touched if name == segs[-2].name) < segs[-2].stat().st_size // 4
    assert [size for name, size in touched if name == segs[0].name] == [fmt.SEGMENT_HEADER_SIZE_BYTES]


@pytest.mark.parametrize("sector", [512, 4096])
def test_sector_padding_keeps_synced_bytes_out_of_later_writes(jpath: str, sector: int) -> None:
    padded = 0
    with journal.open(jpath, create=True, sector_bytes=sector, segment_size_bytes=64 * 1024) as j:
        for i, e in enumerate(events(60, size=90)):
            if i % 3 == 2:
                assert j.append(e, durability="flush") == journal.Committed(i + 1, "flush")
                j.sync()
            else:
                assert j.append(e, durability="sync") == journal.Committed(i + 1, "sync")
            # After every sync the data ends on a sector boundary: the end of the last frame, not
            # the file's size (the writer reserves space ahead, rounded far past any sector).
            last = frames_of(live_segment(jpath))[-1]
            assert last.seq == i + 1 and last.end % sector == 0, (last, sector)
            padded += last.flags & fmt.FLAG_KIND_MASK == fmt.KIND_PADDING
        j.append_many(events(5, 60, size=90), durability="sync")
    assert padded >= 55  # a 90-byte record ends on a sector boundary by chance only now and then
    with journal.open(jpath) as j:
        assert j.recovery.truncated_at is None
        assert [r.event for r in j.read()] == events(65, size=90)
    with pytest.raises(ValueError, match="sector_bytes"):
        journal.open(jpath, sector_bytes=1000)


def test_idempotency_keys_survive_roll_over_and_reopen(jpath: str) -> None:
    with journal.open(jpath, create=True, segment_size_bytes=4096, compress=False) as j:
        first = j.append({"eventId": "early", "pad": "e" * 300}, idempotency_key="early")
        for i in range(40):
            j.append({"n": i, "pad": "f" * 300}, durability="flush")
    assert len(segments(jpath)) >= 3
    with journal.open(jpath, segment_size_bytes=4096, compress=False) as j:
        # The key lives in a sealed segment that is not even the one before the live one,
        # so it is not remembered; keys of the segment just before the live one are.
        prev_keyed = j.append({"eventId": "late"}, idempotency_key="late")
        assert isinstance(first, journal.Committed) and isinstance(prev_keyed, journal.Committed)
        i = 0
        while int(live_segment(jpath).name.split(".")[0]) <= prev_keyed.seq:  # until it is sealed
            j.append({"n": i, "pad": "g" * 300}, durability="flush")
            i += 1
    with journal.open(jpath, segment_size_bytes=4096, compress=False) as j:
        live_base = int(live_segment(jpath).name.split(".")[0])
        assert prev_keyed.seq < live_base  # sealed by now
        again = j.append({"eventId": "late"}, idempotency_key="late")
        assert again == journal.Committed(prev_keyed.seq, "sync", True, "idempotency key matched")
        early = j.append({"eventId": "early", "pad": "e" * 300}, idempotency_key="early")
        assert isinstance(early, journal.Committed) and not early.duplicate  # outside the window


def test_rewriting_the_same_records_gives_the_same_bytes(tmp_path: pathlib.Path) -> None:
    """Salts are derived, not drawn: the same appends from the same state give the same files."""
    base = tmp_path / "base"
    with journal.open(base, create=True, segment_size_bytes=4096) as j:
        j.append({"seed": 1})
    copies = []
    for name in ("a", "b"):
        d = tmp_path / name
        shutil.copytree(base, d)
        with journal.open(d, segment_size_bytes=4096, compress=False) as j:
            for start in range(0, 80, 10):
                j.append_many(events(10, start, size=120))
        copies.append(snapshot_files(d))
    assert copies[0] == copies[1] and len(copies[0]) > 2


def test_leftover_temp_segment_with_data_is_quarantined_first(jpath: str) -> None:
    with journal.open(jpath, create=True) as j:
        j.append({"a": 1})
    tmp = pathlib.Path(jpath) / (fmt.segment_name(2) + ".tmp")
    tmp.write_bytes(b"not a header, and more than one" * 4)
    with journal.open(jpath) as j:
        assert not tmp.exists() and len(j.recovery.quarantined) == 1
        assert (pathlib.Path(jpath) / j.recovery.quarantined[0]).read_bytes() == b"not a header, and more than one" * 4


def test_leftover_padded_temp_segment_is_just_removed(jpath: str) -> None:
    from journal.engine.segment import header_padding, new_header

    with journal.open(jpath, create=True) as j:
        j.append({"a": 1})
        jid = j._journal_id
    header = new_header(jid, 1, 2)
    tmp = pathlib.Path(jpath) / (fmt.segment_name(2) + ".tmp")
    tmp.write_bytes(fmt.encode_segment_header(header) + header_padding(header, 4096))
    with journal.open(jpath) as j:
        assert not tmp.exists() and j.recovery.quarantined == []


def test_create_makes_missing_parent_directories(tmp_path: pathlib.Path) -> None:
    deep = tmp_path / "a" / "b" / "j"
    with journal.open(deep, create=True) as j:
        assert j.append({"x": 1}) == journal.Committed(1, "sync")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    (tmp_path / "f").write_text("x")
    with pytest.raises(journal.NotAJournalError, match="is a file"):
        journal.open(tmp_path / "f" / "j", create=True)
