"""Engine bugs the crash harness found, each as the smallest power loss that showed it.

Each was a failing reproducer first; they stay as regression tests of the fixes.
"""

from __future__ import annotations

import os
import random

from journal.crashsim.campaign import sector_option
from journal.crashsim.memfs import SYNC, WRITE, MemFileSystem
from journal.crashsim.model import DROP, KEEP, CrashState, Fate, Replay, Trash
from journal.engine.core import Journal
from journal.errors import CorruptionError


def _replay_to(fs: MemFileSystem, point: int) -> Replay:
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while replay.point < point:
        replay.advance()
    return replay


def _segment_writes(fs: MemFileSystem) -> list[int]:
    return [i for i, op in enumerate(fs.log) if op.kind == WRITE and op.path.endswith(".seg")]


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


def test_no_powersafe_overwrite_keeps_synced_record() -> None:
    """Without powersafe overwrite, a later write trashing a sector must not take synced bytes:
    with sector padding a pending write never shares a sector with them."""
    opt = sector_option()
    assert opt is not None
    seqs, damaged_synced = _npsow_loss({opt: 4096})
    assert seqs == [1] and not damaged_synced


def test_sector_padding_covers_the_segment_header() -> None:
    opt = sector_option()
    assert opt is not None
    fs = MemFileSystem()
    j = Journal.open("/j", create=True, fs=fs, **{opt: 4096})
    j.append(b"first", durability="sync")  # the power fails before its fdatasync
    write = _segment_writes(fs)[-1]
    replay = _replay_to(fs, write + 1)
    op = fs.log[write]
    # The header's sector is padded out, so the first batch starts in a sector of its own and a
    # power loss can trash only that one.
    assert op.offset == 4096
    built = replay.build(CrashState(replay.point, {}, [Trash(op.ino, 4096, 8192)], garbage_seed=3))
    assert not built.damaged_synced
    j2 = Journal.open("/j", fs=MemFileSystem.from_image(built.image), **{opt: 4096})
    assert list(j2.read()) == []


def test_model_fills_never_written_space_like_the_end_of_a_file() -> None:
    """The crash model's zeros/garbage fate covers, from the last byte ever written to the
    write's end, space a size extension made (a writer's reserved zeros) as it covers space past
    the end of the file; bytes written before stay as they were."""
    import random

    from journal.crashsim.memfs import WRITE, Op
    from journal.crashsim.model import GARBAGE, KEEP, ZEROS, Fate, _apply

    head = b"h" * 64
    for size in (64, 8192):  # the file ends at its last written byte, or has reserved zeros
        buf = bytearray(head + bytes(size - 64))
        op = Op(WRITE, "/f", 1, 100, b"x" * 50)  # a gap of 36 bytes before the write
        written = _apply(buf, op, Fate(GARBAGE), random.Random(1), 64)
        assert written == 150 and len(buf) == max(size, 150)
        assert buf[:64] == head and any(buf[64:150]) and not any(buf[150:])
        buf = bytearray(head + bytes(size - 64))
        assert _apply(buf, op, Fate(ZEROS), random.Random(1), 64) == 150 and buf[:64] == head
        assert not any(buf[64:]) and len(buf) == max(size, 150)
        buf = bytearray(head + bytes(size - 64))
        assert _apply(buf, op, Fate(KEEP), random.Random(1), 64) == 150 and buf[100:150] == b"x" * 50
    # A write that lands inside written bytes and drops: nothing changes.
    buf = bytearray(b"w" * 200)
    assert _apply(buf, Op(WRITE, "/f", 1, 10, b"y" * 20), Fate(GARBAGE), random.Random(1), 200) == 200
    assert buf == bytearray(b"w" * 200)
