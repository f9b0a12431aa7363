"""One tail classifier: recovery, the read-only open and every lock-free reader give one answer.

A foreign live segment (copied in from another journal) is refused by every reader with a typed
error naming that file; a read-only open reaches the verdict of the writer's recovery on the same
bytes, for every kind of damage (hypothesis).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.engine import format as fmt
from journal.engine import tail
from journal.errors import ForeignSegmentError

EVENT_PAD = "x" * 100  # 40 of these roll a 4 KiB segment over once


def _segments(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(fmt.SEGMENT_SUFFIX))


def _two_journals_with_a_foreign_live_segment(root: Path) -> tuple[Path, str]:
    """The reproduction: A and B, 40 appends each, B's live segment copied over A's."""
    for name in ("A", "B"):
        with journal.open(root / name, create=True, segment_size_bytes=4096, compress=False) as j:
            for i in range(40):
                j.append({"journal": name, "i": i, "pad": EVENT_PAD})
    a, b = root / "A", root / "B"
    assert len(_segments(a)) == 2 and _segments(a) == _segments(b)
    live = _segments(b)[-1]
    shutil.copy(b / live, a / live)
    return a, live


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal.cli", *args], capture_output=True, text=True, timeout=60)


def test_a_foreign_live_segment_fails_every_reader_with_an_error_naming_it(tmp_path: Path) -> None:
    a, live = _two_journals_with_a_foreign_live_segment(tmp_path)
    before = {n: (a / n).read_bytes() for n in _segments(a)}
    for opener in (lambda: journal.open(a), lambda: journal.open(a, readonly=True)):
        with pytest.raises(ForeignSegmentError) as exc:
            opener()
        assert exc.value.segment == live and live in str(exc.value)
        assert isinstance(exc.value, journal.CorruptionError)
    for cmd in (["tail", str(a), "-n1"], ["cat", str(a), "--after-seq", "38"], ["info", str(a)]):
        res = _cli(*cmd)
        assert res.returncode != 0, (cmd, res.stdout)
        assert '"journal": "B"' not in res.stdout and '"journal":"B"' not in res.stdout, cmd
        assert live in res.stderr and "different journal" in res.stderr, (cmd, res.stderr)
        assert "Traceback" not in res.stderr
    assert {n: (a / n).read_bytes() for n in _segments(a)} == before  # nothing was cut or changed


@pytest.mark.parametrize("hash_seed", ["0", "1", "6"])
def test_verify_names_the_foreign_live_segment_whatever_the_hash_seed(tmp_path: Path, hash_seed: str) -> None:
    # A tie between one sealed and one foreign segment once went by set order (PYTHONHASHSEED).
    a, live = _two_journals_with_a_foreign_live_segment(tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    res = subprocess.run([sys.executable, "-m", "journal.cli", "verify", str(a), "--json"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 3, res.stderr
    report = json.loads(res.stdout)
    assert {p["segment"] for p in report["problems"]} == {live}
    assert all("different journal" in p["reason"] for p in report["problems"])


def test_a_cursor_refuses_a_segment_of_another_journal_by_name(tmp_path: Path) -> None:
    # A handle opened before the copy landed: its reads meet the foreign segment afterwards.
    for name in ("A", "B"):
        with journal.open(tmp_path / name, create=True, segment_size_bytes=4096, compress=False) as j:
            for i in range(40):
                j.append({"journal": name, "i": i, "pad": EVENT_PAD})
    a = tmp_path / "A"
    live = _segments(a)[-1]
    with journal.open(a, readonly=True) as r:
        shutil.copy(tmp_path / "B" / live, a / live)
        with pytest.raises(ForeignSegmentError) as exc:
            list(r.read(after_seq=30))
        assert exc.value.segment == live
        with pytest.raises(ForeignSegmentError):
            r.get(40)


# --- a read-only open and the writer's recovery: one verdict for the same bytes ----------------

DAMAGES = ("flip", "truncate", "zero", "garbage", "duplicate", "none")


def _build(path: str, batches: list[tuple[int, str]]) -> None:
    with journal.open(path, create=True, segment_size_bytes=8192, reserve_bytes=0) as j:
        n = 0
        for size, level in batches:
            j.append_many([{"i": n + k, "pad": "y" * (k * 7 % 50)} for k in range(size)], durability=level)
            n += size
    # The full scan's property: with LIVE.hint a read-only open skips the prefix its writer had
    # synced, and finds damage there only when it reads it (tests/test_live_hint.py).
    if os.path.exists(os.path.join(path, "LIVE.hint")):  # none if nothing was synced
        os.remove(os.path.join(path, "LIVE.hint"))


def _damage(path: str, kind: str, where: float, length: int) -> None:
    live = os.path.join(path, _segments(Path(path))[-1])
    data = bytearray(Path(live).read_bytes())
    body = len(data) - fmt.SEGMENT_HEADER_SIZE_BYTES
    at = fmt.SEGMENT_HEADER_SIZE_BYTES + int(where * max(body - 1, 0))
    if kind == "flip" and body > 0:
        data[at] ^= 0x40
    elif kind == "truncate":
        del data[at:]
    elif kind == "zero":
        data[at : at + length] = bytes(len(data[at : at + length]))
    elif kind == "garbage":
        data += bytes((i * 37 + 11) % 256 for i in range(length))
    elif kind == "duplicate":
        first = fmt.verify_frame(bytes(data), fmt.SEGMENT_HEADER_SIZE_BYTES, fmt.decode_segment_header(data).salt)
        if first is not None:
            data += data[first.offset : first.end]  # a stale copy of a frame after the tail
    Path(live).write_bytes(bytes(data))


def _verdict(path: str, readonly: bool) -> tuple[str, object, object, object]:
    try:
        with journal.open(path, readonly=readonly) as j:
            return ("ok", j.recovery.tail, j.recovery.last_seq, j.recovery.live_records)
    except journal.JournalError as exc:
        where = (getattr(exc, "segment", None), getattr(exc, "offset", None), getattr(exc, "seq", None))
        return (type(exc).__name__, *where)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["sync", "flush"])), min_size=1, max_size=25),
    kind=st.sampled_from(DAMAGES),
    where=st.floats(0, 1),
    length=st.integers(1, 300),
)
def test_a_readonly_open_classifies_every_damage_as_recovery_does(
    batches: list[tuple[int, str]], kind: str, where: float, length: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        original = os.path.join(root, "j")
        _build(original, batches)
        _damage(original, kind, where, length)
        ro, rw = os.path.join(root, "ro"), os.path.join(root, "rw")
        shutil.copytree(original, ro)
        shutil.copytree(original, rw)
        assert _verdict(ro, readonly=True) == _verdict(rw, readonly=False)


def test_each_kind_of_tail_is_named_by_the_classifier() -> None:
    """The pure classifier on hand-made buffers: one answer per kind."""
    header = fmt.SegmentHeader(fmt.FORMAT_VERSION, b"J" * 16, 0, 1, 77)
    frames = [fmt.FrameSpec(fmt.CODEC_RAW, 5, b"hello") for _ in range(3)]
    body = fmt.py_encode_batch(1, frames, header.salt, commit_last=True)
    seg = fmt.encode_segment_header(header) + body

    def kind_of(data: bytes, journal_id: bytes | None = None) -> str:
        res = fmt.py_scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        return tail.classify(res, data[res.stop_offset :], header, "s.seg", "/j/s.seg", journal_id).kind

    assert kind_of(seg) == tail.CLEAN
    assert kind_of(seg + bytes(100)) == tail.ZEROS
    assert kind_of(seg + b"\x01" * 40) == tail.TORN
    assert kind_of(seg, journal_id=b"K" * 16) == tail.FOREIGN
    later = fmt.py_encode_batch(4, frames, header.salt, commit_last=True)
    assert kind_of(seg + later) == tail.CLEAN
    assert kind_of(seg + fmt.py_encode_batch(9, frames, header.salt, commit_last=True)) == tail.GAP
    damaged = bytearray(seg + later + fmt.py_encode_batch(7, frames[:1], header.salt, commit_last=True))
    damaged[len(seg) + 40] ^= 1  # inside seq 4, with commit-marked seq 6 and a higher seq 7 after it
    assert kind_of(bytes(damaged)) == tail.CORRUPT
    # A genuine frame with a flag bit this version does not know: written by a newer format.
    head = struct.pack("<IIQHHI", 1, 1, 4, 0x0200, 0, fmt.FRAME_MARKER) + b"z"
    newer = struct.pack("<Q", xxhash.xxh64_intdigest(head, seed=header.salt)) + head
    assert kind_of(seg + newer) == tail.NEWER
