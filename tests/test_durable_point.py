"""Damage in synced data is refused, never cut as a torn tail (FLAG_AFTER_SYNC, format version 3).

Records appended one at a time at "sync" are each their own synced batch. Before the flag, damage
to the second-to-last of them was cut as a torn tail: nothing after it proved it synced (its own
commit flag is in the damaged frame, and the last batch's commit frame has nothing after it).
The writer now marks the first frame it writes after an fdatasync returned, and that frame
proves every byte before it synced. docs/GUARANTEES.md, "Torn tails".
"""

from __future__ import annotations

import errno
import pathlib
import struct
from unittest import mock

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.verify import verify
from journal.fs import OsFileSystem
from tests.backends import FileBackend
from tests.conftest import frames_of, segments, snapshot_files

TEXT = "some words " * 20  # a record of a few hundred bytes, stored raw (too small to compress)


def write_synced(path: str, n: int) -> None:
    with journal.open(path, create=True) as j:
        for i in range(n):
            assert j.append({"n": i, "text": TEXT}, durability="sync") == journal.Committed(i + 1, "sync")


def flip(path: str, seq: int, root: pathlib.Path) -> None:
    FileBackend(root).tamper(path, seq)


def damaged_offset(path: str, seq: int) -> int:
    return next(fr.offset for fr in frames_of(segments(path)[-1]) if fr.seq == seq)


CASES = [(n, t) for n in range(2, 6) for t in range(1, n)]


@pytest.mark.parametrize(("n", "t"), CASES)
def test_damage_before_the_last_synced_batch_is_refused_and_nothing_is_cut(
    tmp_path: pathlib.Path, n: int, t: int
) -> None:
    path = str(tmp_path / "j")
    write_synced(path, n)
    offset = damaged_offset(path, t)
    flip(path, t, tmp_path)
    before = snapshot_files(path)
    with pytest.raises(journal.CorruptionError) as exc:
        journal.open(path)
    err = exc.value
    assert (err.segment, err.offset, err.seq) == (segments(path)[-1].name, offset, t)
    assert "synced data" in err.reason
    assert snapshot_files(path) == before  # nothing cut, nothing quarantined
    assert not (pathlib.Path(path) / "quarantine").exists()
    # Every reader asks the one classifier: the read-only open, a cursor and verify refuse too.
    with pytest.raises(journal.CorruptionError):
        with journal.open(path, readonly=True) as ro:
            list(ro.read())
    report = verify(path)
    assert report.verdict == "corrupt" and report.torn_tail is None
    assert snapshot_files(path) == before


def test_damage_inside_the_last_synced_batch_is_still_a_torn_tail(tmp_path: pathlib.Path) -> None:
    """A batch of several records in one write with its first record damaged and nothing written
    after it: no frame after the damage was written after a sync, so it is cut (the batch may have
    been in flight). Its first frame carries the flag, but it is the damaged one."""
    path = str(tmp_path / "j")
    with journal.open(path, create=True, block_bytes=0) as j:  # one data frame a record
        j.append({"n": 0, "text": TEXT}, durability="sync")
        j.append({"n": 1, "text": TEXT}, durability="sync")
        out = j.append_many([{"n": i, "text": TEXT} for i in range(2, 5)], durability="sync")
        assert [o.seq for o in out if isinstance(o, journal.Committed)] == [3, 4, 5]
    frames = frames_of(segments(path)[-1])
    assert [bool(fr.flags & fmt.FLAG_AFTER_SYNC) for fr in frames if fr.seq >= 3] == [True, False, False]
    offset = damaged_offset(path, 3)
    flip(path, 3, tmp_path)
    with journal.open(path) as j:
        assert j.last_seq == 2
        assert j.recovery.truncated_at == offset
        assert any(a.startswith("cut torn tail") for a in j.recovery.actions)


def test_the_writer_sets_the_flag_only_where_its_claim_holds(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    with journal.open(path, create=True, segment_size_bytes=4096, compress=False) as j:
        j.append({"n": 0}, durability="sync")  # after the new segment's fsynced header: flagged
        j.append({"n": 1}, durability="flush")  # after a synced batch: flagged
        j.append({"n": 2}, durability="flush")  # after unsynced bytes: not flagged
        j.append({"n": 3}, durability="sync")  # still after unsynced bytes: not flagged
        j.append({"n": 4}, durability="sync")  # after the sync above: flagged
        j.append_many([{"n": i} for i in range(5, 8)], durability="sync")  # one block frame: flagged
        j.append({"big": "x" * 3000}, durability="sync")
        j.append({"big": "y" * 3000}, durability="sync")  # rolls over: the seal is not flagged
    segs = segments(path)
    assert len(segs) >= 2
    first = frames_of(segs[0])
    flagged = [(fr.seq, bool(fr.flags & fmt.FLAG_AFTER_SYNC)) for fr in first]
    assert flagged[:6] == [(1, True), (2, True), (3, False), (4, False), (5, True), (8, True)]
    assert first[-1].flags & fmt.FLAG_KIND_MASK == fmt.KIND_SEAL and not first[-1].flags & fmt.FLAG_AFTER_SYNC
    assert frames_of(segs[1])[0].flags & fmt.FLAG_AFTER_SYNC  # a new segment's first frame
    assert fmt.FORMAT_VERSION >= fmt.AFTER_SYNC_FORMAT_VERSION_MIN
    assert all(fmt.decode_segment_header(s.read_bytes()).version == fmt.FORMAT_VERSION for s in segs)


def test_a_shared_writer_never_sets_the_flag(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    journal.open(path, create=True).close()
    with journal.open(path, writer="shared") as j:
        for i in range(3):
            j.append({"n": i}, durability="sync")
    assert not any(fr.flags & fmt.FLAG_AFTER_SYNC for fr in frames_of(segments(path)[-1]))


def test_the_first_frame_after_a_reopen_claims_nothing_until_this_handle_synced(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    write_synced(path, 1)
    with journal.open(path) as j:
        j.append({"n": 1}, durability="sync")
        j.append({"n": 2}, durability="sync")
    flags = [bool(fr.flags & fmt.FLAG_AFTER_SYNC) for fr in frames_of(segments(path)[-1])]
    assert flags == [True, False, True]


def _rewrite_as_version_2(path: str) -> None:
    """The journal's segments as software of version 2 wrote them: header version 2, frames
    without FLAG_AFTER_SYNC (re-encoded through the format functions, same salt)."""
    for seg in segments(path):
        data = seg.read_bytes()
        header = fmt.decode_segment_header(data)
        old = fmt.encode_segment_header(header._replace(version=2))
        out = bytearray(old)
        for fr in fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames:
            stored = data[fr.payload_offset : fr.end]
            out += fmt.encode_frame(fr.seq, fr.flags & ~fmt.FLAG_AFTER_SYNC, fr.raw_len, stored, header.salt)
        seg.write_bytes(bytes(out))


def test_journals_of_version_2_read_as_before(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    write_synced(path, 3)
    _rewrite_as_version_2(path)
    with journal.open(path, readonly=True) as ro:
        assert [r.event["n"] for r in ro.read()] == [0, 1, 2]
    with journal.open(path) as j:
        j.append({"n": 3}, durability="sync")
        j.append({"n": 4}, durability="sync")
    # A writer appending to a version 2 live segment keeps its version's frames.
    seg = segments(path)[-1]
    assert fmt.decode_segment_header(seg.read_bytes()).version == 2
    assert not any(fr.flags & fmt.FLAG_AFTER_SYNC for fr in frames_of(seg))
    assert verify(path).verdict == "clean"


def test_damage_in_a_version_2_journal_keeps_its_old_verdict(tmp_path: pathlib.Path) -> None:
    """Without the flag nothing proves the second-to-last batch synced: a torn tail, as before."""
    path = str(tmp_path / "j")
    write_synced(path, 3)
    _rewrite_as_version_2(path)
    flip(path, 2, tmp_path)
    with journal.open(path) as j:
        assert j.last_seq == 1 and any(a.startswith("cut torn tail") for a in j.recovery.actions)


def test_software_of_version_2_refuses_a_version_3_segment(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    write_synced(path, 2)
    with mock.patch.object(fmt, "FORMAT_VERSION", 2), pytest.raises(journal.NewerFormatError):
        journal.open(path)


def test_the_flag_is_known_to_the_scanners_and_only_genuine_frames_carry_its_proof() -> None:
    salt = 77
    first = fmt.encode_frame(1, fmt.FLAG_COMMIT, 3, b"abc", salt)
    damaged = bytearray(first)
    damaged[-1] ^= 1
    after = fmt.encode_frame(2, fmt.FLAG_AFTER_SYNC | fmt.FLAG_COMMIT, 3, b"def", salt)
    buf = bytes(damaged) + after
    assert fmt.scan(after, 0, salt, 2).stop == fmt.py_scan(after, 0, salt, 2).stop == fmt.Stop.END
    assert fmt.find_durable_point(buf, 0, salt, 0) == len(first)
    assert tail.durable_point(tail.Span(tail.InMemory(buf), 0), salt, 0) == len(first)
    assert fmt.find_durable_point(buf, 0, salt + 1, 0) is None  # another segment's salt: not genuine
    assert fmt.find_durable_point(buf, 0, salt, 2) is None  # not above the last good seq
    plain = bytes(damaged) + fmt.encode_frame(2, fmt.FLAG_COMMIT, 3, b"def", salt)
    assert fmt.find_durable_point(plain, 0, salt, 0) is None  # a commit frame with nothing after it
    # A frame with the flag's bit in a reader of version 2 (flags it does not know): refused.
    with mock.patch.object(fmt, "FLAGS_KNOWN", fmt.FLAGS_KNOWN & ~fmt.FLAG_AFTER_SYNC):
        assert fmt.py_scan(after, 0, salt, 2).stop == fmt.Stop.FLAGS
    assert struct.unpack_from("<H", after, 24)[0] & fmt.FLAG_AFTER_SYNC


def test_an_eio_during_get_is_a_journal_io_error(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "j")
    fs = FaultyFileSystem(OsFileSystem())
    with journal.open(path, create=True, fs=fs) as j:
        for i in range(3):
            j.append({"n": i})
        fs.fail("pread", errno.EIO, after=fs.calls["pread"])
        with pytest.raises(journal.JournalIOError) as exc:
            j.get(2)
        assert fs.injected, "the fault was never raised"
        assert exc.value.errno == errno.EIO and exc.value.path == path
        assert "run it again" in str(exc.value)
        assert j.get(2) is not None and j.get(2).event == {"n": 1}  # type: ignore[union-attr]
