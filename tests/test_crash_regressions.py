"""Engine bugs the crash harness found, each as the smallest power loss that shows it.

They are strict xfails: once the engine is fixed they pass, the xfail turns red, and the entry
in journal.crashsim.campaign.KNOWN_BUGS (which keeps the campaign from failing on them while
they are open) must be removed with the marker.
"""

from __future__ import annotations

import os
import random

import pytest

from journal.core import Journal
from journal.crashsim.campaign import sector_option
from journal.crashsim.memfs import SYNC, WRITE, MemFileSystem
from journal.crashsim.model import DROP, KEEP, CrashState, Fate, Replay, Trash
from journal.errors import CorruptionError


def _replay_to(fs: MemFileSystem, point: int) -> Replay:
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while replay.point < point:
        replay.advance()
    return replay


def _segment_writes(fs: MemFileSystem) -> list[int]:
    return [i for i, op in enumerate(fs.log) if op.kind == WRITE and op.path.endswith(".seg")]


@pytest.mark.xfail(
    strict=True,
    raises=CorruptionError,
    reason="recovery trusts the commit marker of a batch whose fdatasync never returned: a power "
    "loss that keeps that batch's last sector but not an earlier unsynced write makes the journal "
    "refuse to open (CorruptionError) although nothing acknowledged at sync was damaged",
)
def test_in_flight_commit_marker_after_lost_flush_write() -> None:
    fs = MemFileSystem()
    j = Journal.open("/j", create=True, fs=fs)
    j.append(b"a" * 100, durability="flush")  # reaches the OS, not the disk
    j.append(b"b" * 100, durability="sync")  # its pwrite reaches the disk, then the power fails
    first, second = _segment_writes(fs)[-2:]
    assert fs.log[second + 1].kind == SYNC
    replay = _replay_to(fs, second + 1)  # crash between b's pwrite and b's fdatasync
    state = CrashState(replay.point, {first: Fate(DROP), second: Fate(KEEP)})
    image = replay.build(state).image
    # Nothing was acknowledged at "sync": any prefix (here: none) is a correct recovery.
    j2 = Journal.open("/j", fs=MemFileSystem.from_image(image))
    assert [r.seq for r in j2.read()] in ([], [1], [1, 2])


@pytest.mark.xfail(
    strict=True,
    raises=CorruptionError,
    reason="same bug inside one write: the sectors of a multi-sector batch reach the disk out of "
    "order; the commit-marked last frame survives, a middle sector does not",
)
def test_in_flight_commit_marker_torn_inside_one_write() -> None:
    fs = MemFileSystem()
    j = Journal.open("/j", create=True, fs=fs)
    rng = random.Random(1)
    j.append_many([rng.randbytes(700) for _ in range(3)], durability="sync")
    write = _segment_writes(fs)[-1]
    replay = _replay_to(fs, write + 1)
    op = fs.log[write]
    # Only the batch's bytes from its second 512-byte sector on reached the disk.
    lo = (op.offset // 512 + 1) * 512 - op.offset
    image = replay.build(CrashState(replay.point, {write: Fate("tear", lo, len(op.data))})).image
    j2 = Journal.open("/j", fs=MemFileSystem.from_image(image))
    assert list(j2.read()) == []


def _npsow_loss(options: dict[str, int]) -> tuple[list[int], bool]:
    fs = MemFileSystem()
    j = Journal.open("/j", create=True, fs=fs, compress=False, **options)
    out = j.append(os.urandom(600), durability="sync")  # durable; its tail shares sector 1
    assert type(out).__name__ == "Committed"
    j.append(b"next", durability="sync")  # written into the same sector, then the power fails
    write = _segment_writes(fs)[-1]
    replay = _replay_to(fs, write + 1)
    op = fs.log[write]
    sector = op.offset // 512 * 512
    built = replay.build(CrashState(replay.point, {}, [Trash(op.ino, sector, sector + 512)], garbage_seed=7))
    try:
        j2 = Journal.open("/j", fs=MemFileSystem.from_image(built.image), compress=False, **options)
    except CorruptionError:
        return [-1], built.damaged_synced  # reported, not silently lost: acceptable
    return [r.seq for r in j2.read()], built.damaged_synced


@pytest.mark.xfail(
    sector_option() is None,
    strict=True,
    reason="no powersafe overwrite: a sync batch that starts inside the last sector of the previous "
    "synced batch can, on power loss, trash that sector; recovery then cuts the synced record as a "
    "torn tail and acknowledged data disappears without an error. Fix: pad every synced batch to a "
    "sector boundary (KIND_PADDING frame) behind an option such as sector_bytes",
)
def test_no_powersafe_overwrite_keeps_synced_record() -> None:
    opt = sector_option()
    seqs, _ = _npsow_loss({opt: 4096} if opt else {})
    assert seqs in ([1], [-1])
    if opt:
        # With padding, a pending write never shares a sector with synced bytes: no damage at all.
        assert seqs == [1]


@pytest.mark.skipif(sector_option() is None, reason="the engine offers no sector padding option")
@pytest.mark.xfail(
    strict=True,
    raises=CorruptionError,
    reason="with sector padding, the segment header (64 synced bytes) still shares sector 0 with the "
    "segment's first batch; trashing that sector on power loss makes the segment unreadable. Fix: "
    "pad the header to sector_bytes (a KIND_PADDING frame after it) before the segment is fsynced",
)
def test_sector_padding_covers_the_segment_header() -> None:
    opt = sector_option()
    assert opt is not None
    fs = MemFileSystem()
    j = Journal.open("/j", create=True, fs=fs, **{opt: 4096})
    j.append(b"first", durability="sync")  # the power fails before its fdatasync
    write = _segment_writes(fs)[-1]
    replay = _replay_to(fs, write + 1)
    op = fs.log[write]
    assert op.offset < 4096, "the first batch starts in the header's sector"
    built = replay.build(CrashState(replay.point, {}, [Trash(op.ino, 0, 4096)], garbage_seed=3))
    j2 = Journal.open("/j", fs=MemFileSystem.from_image(built.image), **{opt: 4096})
    assert list(j2.read()) == []
