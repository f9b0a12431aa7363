"""Retention: Journal.seal(), Journal.drop_prefix() and the start marker (docs/FORMAT.md)."""

from __future__ import annotations

import errno
import os
import pathlib
import shutil

import pytest

import journal
from journal.api import PrefixDrop, Retention
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import format as fmt
from journal.engine.salvage import salvage
from journal.engine.verify import verify
from journal.fs import OsFileSystem
from tests.conftest import segments

SEGMENT_BYTES = 4096


def _filled(path: str, n: int, fs: FaultyFileSystem | None = None) -> journal.Journal:
    j = journal.open(path, create=True, segment_size_bytes=SEGMENT_BYTES, fs=fs)
    for i in range(1, n + 1):
        j.append({"i": i, "pad": "x" * 120}, "flush", idempotency_key=f"k{i}")
    j.sync()
    return j


def _names(path: str) -> list[str]:
    return [p.name for p in segments(path)]


def test_seal_then_drop_keeps_only_what_was_appended_after(jpath: str) -> None:
    j = _filled(jpath, 100)
    assert isinstance(j, Retention)
    assert len(segments(jpath)) >= 3
    assert j.get(50) is not None  # the point-read cache now knows the segments about to go
    j.seal()
    kept = j.append({"keep": True})
    assert isinstance(kept, journal.Committed) and kept.seq == 101
    assert _names(jpath)[-1] == fmt.segment_name(101)  # sealed: the record began a new segment
    before = _names(jpath)
    drop = j.drop_prefix(101)
    assert drop == PrefixDrop(101, before[:-1], drop.bytes_dropped) and drop.bytes_dropped > 0
    assert _names(jpath) == [fmt.segment_name(101)]
    assert j.first_seq == 101
    assert [r.seq for r in j.read()] == [101]
    assert j.get(1) is None and j.get(100) is None and j.get(101) is not None
    # Seqs go on; a dropped record's key is forgotten, so its retry is a new record.
    again = j.append({"i": 5, "pad": "x" * 120}, idempotency_key="k5")
    assert isinstance(again, journal.Committed) and again.seq == 102 and not again.duplicate
    j.close()
    with journal.open(jpath) as j2:
        assert (j2.first_seq, j2.last_seq) == (101, 102)
        assert [r.seq for r in j2.read()] == [101, 102]
    with journal.open(jpath, readonly=True) as ro:
        assert ro.first_seq == 101 and [r.seq for r in ro.read(0)] == [101, 102]
    report = verify(jpath)
    assert report.verdict == "clean", report.summary()


def test_drop_goes_by_whole_sealed_segments_and_never_takes_the_live_one(jpath: str) -> None:
    j = _filled(jpath, 100)
    names = _names(jpath)
    second_base = fmt.parse_segment_name(names[1])
    assert second_base is not None
    # Mid-segment: only the segments wholly before the seq go.
    drop = j.drop_prefix(second_base + 2)
    assert drop.segments_dropped == names[:1] and j.first_seq == second_base
    assert next(r.seq for r in j.read()) == second_base
    # Past the end: everything but the live segment.
    drop = j.drop_prefix(10_000)
    assert _names(jpath) == names[-1:] and drop.first_seq == fmt.parse_segment_name(names[-1])
    assert j.drop_prefix(1) == PrefixDrop(j.first_seq)  # nothing older left: a no-op
    j.close()
    assert verify(jpath).verdict == "clean"


def test_a_crash_after_the_marker_leaves_segments_the_next_open_removes(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    j = _filled(jpath, 100, fs)
    j.seal()
    j.append({"keep": True})
    names = _names(jpath)
    fs.fail("unlink", errno.EIO, after=fs.calls["unlink"] + 1)  # the second segment's unlink
    with pytest.raises(journal.JournalIOError):
        j.drop_prefix(101)
    assert _names(jpath) == names[1:]  # the first went, the rest is still there
    # The marker is durable, so the drop is in effect for this handle and every later one.
    assert [r.seq for r in j.read()] == [101]
    j.close()
    with journal.open(jpath, readonly=True) as ro:
        assert [r.seq for r in ro.read()] == [101]
    with journal.open(jpath) as j2:
        assert _names(jpath) == [fmt.segment_name(101)]
        assert any("dropped before seq 101" in a for a in j2.recovery.actions)
        assert [r.seq for r in j2.read()] == [101]
    assert verify(jpath).verdict == "clean"


def test_a_crash_before_the_marker_is_renamed_drops_nothing(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    j = _filled(jpath, 100, fs)
    j.seal()
    j.append({"keep": True})
    names = _names(jpath)
    fs.fail("rename", errno.EIO, after=fs.calls["rename"])
    with pytest.raises(journal.JournalIOError):
        j.drop_prefix(101)
    assert _names(jpath) == names and j.first_seq == 1
    j.close()
    assert os.path.exists(os.path.join(jpath, fmt.START_FILE + ".tmp"))
    with journal.open(jpath) as j2:
        assert not os.path.exists(os.path.join(jpath, fmt.START_FILE + ".tmp"))
        assert j2.first_seq == 1 and [r.seq for r in j2.read()] == list(range(1, 102))


def test_a_missing_first_segment_is_refused_with_or_without_a_marker(jpath: str, tmp_path: pathlib.Path) -> None:
    with _filled(jpath, 100):
        pass
    plain = str(tmp_path / "plain")
    shutil.copytree(jpath, plain)
    os.unlink(os.path.join(plain, _names(plain)[0]))  # lost, not dropped: no marker says so
    with pytest.raises(journal.CorruptionError, match="segments before it are missing"):
        journal.open(plain)
    with pytest.raises(journal.CorruptionError, match="segments before it are missing"):
        journal.open(plain, readonly=True)
    assert verify(plain).verdict == "corrupt"

    with journal.open(jpath) as j:
        j.drop_prefix(fmt.parse_segment_name(_names(jpath)[1]) or 0)
    os.unlink(os.path.join(jpath, _names(jpath)[0]))  # now the segment the marker names is lost
    with pytest.raises(journal.CorruptionError, match="segment that holds its first records is missing"):
        journal.open(jpath)
    report = verify(jpath)
    assert report.verdict == "corrupt" and "missing" in report.summary()


def test_a_damaged_marker_is_corruption_never_a_guess(jpath: str) -> None:
    with _filled(jpath, 100) as j:
        j.drop_prefix(fmt.parse_segment_name(_names(jpath)[1]) or 0)
    marker = pathlib.Path(jpath, fmt.START_FILE)
    data = bytearray(marker.read_bytes())
    data[30] ^= 0x01
    marker.write_bytes(bytes(data))
    with pytest.raises(journal.CorruptionError, match="start marker checksum"):
        journal.open(jpath)
    with pytest.raises(journal.CorruptionError, match="start marker checksum"):
        journal.open(jpath, readonly=True)
    report = verify(jpath)
    assert report.verdict == "corrupt" and "start marker" in report.summary()


def test_a_marker_naming_another_segment_is_refused(jpath: str) -> None:
    with _filled(jpath, 100) as j:
        j.drop_prefix(fmt.parse_segment_name(_names(jpath)[1]) or 0)
        marker = fmt.decode_start(pathlib.Path(jpath, fmt.START_FILE).read_bytes())
    wrong = marker._replace(segment_number=marker.segment_number + 1)
    pathlib.Path(jpath, fmt.START_FILE).write_bytes(fmt.encode_start(wrong))
    with pytest.raises(journal.CorruptionError, match="names segment number"):
        journal.open(jpath)


def test_a_fork_of_a_dropped_journal_begins_where_it_does(jpath: str, tmp_path: pathlib.Path) -> None:
    with _filled(jpath, 100) as j:
        j.seal()
        j.append({"keep": 1})
        j.append({"keep": 2})
        j.drop_prefix(101)
        dst = tmp_path / "copy"
        dst.mkdir()
        with pytest.raises(ValueError, match="begins at seq 101"):
            j.copy_prefix(str(tmp_path / "never"), 50)
        j.copy_prefix(str(dst), 101)
    with journal.open(str(dst)) as c:
        assert c.first_seq == 101 and [r.event for r in c.read()] == [{"keep": 1}]
    assert verify(str(dst)).verdict == "clean"


def test_salvage_keeps_the_seqs_of_a_dropped_journal(jpath: str, tmp_path: pathlib.Path) -> None:
    with _filled(jpath, 100) as j:
        j.seal()
        j.append({"keep": 1})
        j.drop_prefix(101)
    dest = str(tmp_path / "salvaged")
    report = salvage(jpath, dest)
    assert report.copied == 1 and report.placeholders == 0 and not report.losses
    with journal.open(dest) as s:
        assert s.first_seq == 101 and [(r.seq, r.event) for r in s.read()] == [(101, {"keep": 1})]


def test_a_journal_can_be_created_to_begin_at_a_later_seq(jpath: str) -> None:
    with journal.open(jpath, create=True, first_seq=500) as j:
        assert (j.first_seq, j.last_seq) == (0 + 500, 499)
        assert j.append({"a": 1}) == journal.Committed(500, "sync")
    with journal.open(jpath) as j:
        assert [r.seq for r in j.read()] == [500]
    with pytest.raises(journal.InvalidArgumentError):
        journal.open(jpath + "x", create=True, first_seq=0)


def test_seal_with_nothing_live_is_a_no_op_and_a_failed_seal_fail_stops(jpath: str) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    j = journal.open(jpath, create=True, fs=fs)
    j.seal()  # no record yet: nothing to seal
    assert _names(jpath) == [fmt.segment_name(1)]
    j.append({"a": 1})
    j.seal()
    j.seal()  # the live segment is sealed already and nothing came since
    j.append({"a": 2})
    assert _names(jpath) == [fmt.segment_name(1), fmt.segment_name(2)]
    fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
    with pytest.raises(journal.JournalFailStoppedError):
        j.seal()
    with pytest.raises(journal.JournalFailStoppedError):
        j.append({"a": 3})
    fs.clear()
    j.close()
    with journal.open(jpath) as j2:
        assert [r.event for r in j2.read()] == [{"a": 1}, {"a": 2}]


def test_drop_prefix_refuses_what_it_cannot_do(jpath: str) -> None:
    with _filled(jpath, 10) as j:
        for bad in (0, -1, True, "5"):
            with pytest.raises(journal.InvalidArgumentError):
                j.drop_prefix(bad)  # type: ignore[arg-type]
    with journal.open(jpath, readonly=True) as ro:
        with pytest.raises(journal.ReadOnlyError):
            ro.drop_prefix(5)
        with pytest.raises(journal.ReadOnlyError):
            ro.seal()
    with journal.open(jpath, writer="shared") as sh:
        with pytest.raises(journal.InvalidArgumentError, match="exclusive"):
            sh.drop_prefix(5)
