"""The C helper against its pure-Python twin: same checksums, same bytes, same scan results.

A missing build fails these tests loudly: CI has a C compiler, so a silent fallback there
would hide a broken build. Set JOURNAL_NATIVE_OPTIONAL=1 where a missing build is expected.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.engine import format as fmt
from journal.engine import native

U64_MAX = (1 << 64) - 1
ROOT = Path(__file__).resolve().parents[1]
OPTIONAL_ENV = "JOURNAL_NATIVE_OPTIONAL"
EXAMPLES = int(os.environ.get("JOURNAL_NATIVE_EXAMPLES", "150"))


@pytest.fixture(autouse=True)
def _require_native() -> None:
    if native.load() is None:
        if os.environ.get(OPTIONAL_ENV) == "1":
            pytest.skip(f"C helper not built and {OPTIONAL_ENV}=1: {native.load_error()}")
        pytest.fail(f"C helper not built ({native.load_error()}); set {OPTIONAL_ENV}=1 if that is expected")


# --- checksum ---------------------------------------------------------------------------------


def test_xxh64_published_vectors() -> None:
    # Values from the xxHash reference: the empty input with seed 0, and with seed 1.
    assert native.xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert native.xxh64(b"", 1) == xxhash.xxh64_intdigest(b"", seed=1)


def test_xxh64_matches_xxhash_for_every_length_up_to_4096() -> None:
    rng = random.Random(20260529)
    data = rng.randbytes(4096 + 7)
    seeds = [0, 1, U64_MAX, rng.getrandbits(64)]
    for n in range(4097):
        for seed in seeds:
            # An odd offset too: the C code must not depend on alignment.
            chunk = memoryview(data)[n % 7 : n % 7 + n]
            assert native.xxh64(chunk, seed) == xxhash.xxh64_intdigest(chunk, seed=seed), (n, seed)


# --- encoding ---------------------------------------------------------------------------------

specs_st = st.lists(
    st.builds(
        fmt.FrameSpec,
        flags=st.integers(0, fmt.FLAGS_KNOWN),
        raw_len=st.integers(0, 0xFFFFFFFF),
        stored=st.binary(max_size=300),
        records=st.just(1),
        dict_id=st.just(0) | st.integers(1, 0xFFFF),  # format version 4: the C path hands these to the twin
    ),
    max_size=24,
)
u64_st = st.integers(0, U64_MAX) | st.sampled_from([0, 1, U64_MAX - 1, U64_MAX])


@settings(max_examples=EXAMPLES, deadline=None)
@given(specs=specs_st, first_seq=u64_st, salt=u64_st, commit_last=st.booleans())
def test_encode_batch_same_bytes(specs: list[fmt.FrameSpec], first_seq: int, salt: int, commit_last: bool) -> None:
    first_seq = min(first_seq, U64_MAX - max(len(specs) - 1, 0))
    expected = fmt.py_encode_batch(first_seq, specs, salt, commit_last)
    got = fmt.c_encode_batch(first_seq, specs, salt, commit_last)
    assert type(got) is bytes
    assert got == expected
    # And what was encoded scans back to the same frames on both paths.
    assert fmt.c_scan(got, 0, salt, first_seq) == fmt.py_scan(got, 0, salt, first_seq)


@pytest.mark.parametrize(
    ("first_seq", "specs", "salt"),
    [
        (1, [fmt.FrameSpec(0x200, 1, b"x")], 7),  # an unknown flag bit
        (1, [fmt.FrameSpec(0, -1, b"x")], 7),  # negative raw length
        (1, [fmt.FrameSpec(0, 1 << 32, b"x")], 7),  # raw length past u32
        (U64_MAX, [fmt.FrameSpec(0, 1, b"x")] * 2, 7),  # the second seq does not fit in u64
        (-1, [fmt.FrameSpec(0, 1, b"x")], 7),  # negative seq
        (1, [fmt.FrameSpec(0, 1, b"x")], -1),  # negative salt
        (1, [fmt.FrameSpec(0, 1, b"x")], 1 << 64),  # salt past u64
    ],
)
def test_encode_batch_out_of_range_behaves_like_the_twin(first_seq: int, specs: list[fmt.FrameSpec], salt: int) -> None:
    def outcome(fn: Any) -> object:
        try:
            return fn(first_seq, specs, salt, True)
        except Exception as exc:
            return type(exc)

    assert outcome(fmt.c_encode_batch) == outcome(fmt.py_encode_batch)


def test_encode_batch_empty() -> None:
    assert fmt.c_encode_batch(1, [], 5, True) == fmt.py_encode_batch(1, [], 5, True) == b""


# --- scanning ---------------------------------------------------------------------------------


def raw_frame(seq: int, flags: int, raw_len: int, stored: bytes, salt: int, dict_id: int = 0) -> bytes:
    """A genuine frame with any field values, including ones the encoder refuses to write."""
    tail = struct.pack("<IIQHHI", len(stored), raw_len, seq, flags, dict_id, fmt.FRAME_MARKER) + stored
    return struct.pack("<Q", xxhash.xxh64_intdigest(tail, seed=salt)) + tail


KIND_FLAGS = [fmt.KIND_DATA, fmt.KIND_PADDING, fmt.KIND_SEAL, fmt.KIND_BLOCK]


@st.composite
def block_payloads(draw: st.DrawFn) -> tuple[int, bytes]:
    """(record count, stored payload) of a block frame: mostly a table that fits, sometimes a
    count out of range or a table longer than the payload (a frame this version cannot read)."""
    count = draw(st.integers(2, 6))
    lengths = draw(st.lists(st.integers(0, 40), min_size=count, max_size=count))
    record_flags = st.sampled_from([0, fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC, 0xC0])
    flags = draw(st.lists(record_flags, min_size=count, max_size=count))
    stored = fmt.encode_block_head(lengths, flags) + draw(st.binary(max_size=64))
    bad = draw(st.integers(0, 7))
    if bad == 0:  # a count out of range, or one whose table runs past the payload
        n = draw(st.sampled_from([0, 1, fmt.BLOCK_RECORDS_MAX + 1, U64_MAX >> 32, len(stored)]))
        stored = struct.pack("<I", n) + stored[4:]
    elif bad == 1:  # cut inside the table
        stored = stored[: draw(st.integers(0, 4 + 5 * count - 1))]
    return count, stored


@st.composite
def frame_buffers(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """(buffer, start, salt, base seq): frames that are mostly right, then damage of one kind."""
    salt = draw(u64_st)
    base = draw(u64_st)
    prefix = draw(st.binary(max_size=40))
    parts = [prefix]
    expected = base
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(KIND_FLAGS + [fmt.KIND_DATA] * 4))
        flags = kind | draw(st.integers(0, 0xFF)) & ~fmt.FLAG_KIND_MASK
        if draw(st.integers(0, 15)) == 0:
            flags = draw(st.integers(0, 0xFFFF))  # unknown bits, codecs or kinds
        count = 1
        stored = draw(st.binary(max_size=64))
        if kind == fmt.KIND_BLOCK:
            count, stored = draw(block_payloads())
            if draw(st.integers(0, 3)):
                flags &= ~fmt.BLOCK_FRAME_FLAGS_REFUSED  # mostly flags a block may carry
        want = expected + count - 1 if kind in (fmt.KIND_DATA, fmt.KIND_BLOCK) else expected - 1
        seq = want if 0 <= want <= U64_MAX and draw(st.integers(0, 7)) else draw(u64_st)
        dict_id = 0 if draw(st.integers(0, 15)) else draw(st.integers(0, 0xFFFF))
        parts.append(raw_frame(seq, flags, draw(st.integers(0, 0xFFFFFFFF)), stored, salt, dict_id))
        if kind in (fmt.KIND_DATA, fmt.KIND_BLOCK) and seq == want:
            expected += count
    buf = bytearray(b"".join(parts))
    damage = draw(st.sampled_from(["none", "truncate", "flip", "zeros", "zero_tail", "garbage", "random", "big_len"]))
    if damage == "truncate" and buf:
        del buf[draw(st.integers(0, len(buf) - 1)) :]
    elif damage == "flip" and buf:
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
    elif damage == "zeros" and buf:
        i = draw(st.integers(0, len(buf) - 1))
        n = draw(st.integers(1, 96))
        buf[i : i + n] = bytes(len(buf[i : i + n]))
    elif damage == "zero_tail":
        buf += bytes(draw(st.integers(1, 100)))
    elif damage == "garbage":
        buf += draw(st.binary(min_size=1, max_size=100))
    elif damage == "random":
        buf = bytearray(draw(st.binary(max_size=400)))
    elif damage == "big_len" and len(buf) >= len(prefix) + 32:
        # A header whose length field lies: past the limit, or past the end of the buffer.
        struct.pack_into(
            "<I", buf, len(prefix) + 8, draw(st.sampled_from([fmt.FRAME_STORED_BYTES_LIMIT + 1, U64_MAX >> 32]))
        )
    start = len(prefix) if draw(st.booleans()) else draw(st.integers(0, len(buf)))
    start = min(start, len(buf))
    return bytes(buf), start, salt, base


scan_args_st = st.tuples(
    frame_buffers(),
    st.sampled_from([0, 1, -1, 2]),  # expected seq relative to the base
    st.sampled_from([0, 4096, 1 << 40]),  # base offset
    st.sampled_from([1 << 62, 0, 1, 2, 3]),  # frames_max
    st.sampled_from([2, 3, native.SCAN_CHUNK_FRAMES]),  # chunk size of the C wrapper
)


@settings(max_examples=EXAMPLES * 3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=scan_args_st)
def test_scan_same_results(args: tuple[tuple[bytes, int, int, int], int, int, int, int]) -> None:
    (buf, start, salt, base), delta, base_offset, frames_max, chunk = args
    expected_seq = min(max(base + delta, 0), U64_MAX)
    with mock.patch.object(native, "SCAN_CHUNK_FRAMES", chunk):
        got = fmt.c_scan(buf, start, salt, expected_seq, base_offset, frames_max)
    want = fmt.py_scan(buf, start, salt, expected_seq, base_offset, frames_max)
    assert got == want
    assert type(got.stop) is fmt.Stop and all(type(f) is fmt.Frame for f in got.frames)
    # memoryview input (how the reader passes chunks) takes the same path to the same answer.
    assert fmt.c_scan(memoryview(buf), start, salt, expected_seq, base_offset, frames_max) == want
    if frames_max == 1 << 62:
        v = fmt.verify_scan(buf, start, salt, expected_seq, base_offset)
        assert (v.frame_count, v.stop, v.stop_offset, v.stop_seq) == (
            len(want.frames),
            want.stop,
            want.stop_offset,
            want.stop_seq,
        )


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=frame_buffers(), after=st.sampled_from([0, 1, 2, 5]), at=st.integers(0, 500))
def test_find_later_commit_same_results(args: tuple[bytes, int, int, int], after: int, at: int) -> None:
    buf, start, salt, base = args
    after_seq = min(base + after, U64_MAX) if after else 0
    for s in (start, min(at, len(buf)), 0):
        assert fmt.c_find_later_commit(buf, s, salt, after_seq) == fmt.py_find_later_commit(buf, s, salt, after_seq)


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=frame_buffers(), at=st.integers(-2, 600))
def test_verify_frame_same_results(args: tuple[bytes, int, int, int], at: int) -> None:
    """The one frame verifier and its C twin agree at every offset: frame starts, damaged
    frames, offsets inside frames and past the end (the frames other readers ask about)."""
    buf, start, salt, _ = args
    for pos in {start, at, 0, len(buf), len(buf) - fmt.FRAME_HEADER_SIZE_BYTES}:
        got, want = fmt.c_verify_frame(buf, pos, salt), fmt.py_verify_frame(buf, pos, salt)
        assert got == want, pos
        assert got is None or type(got) is fmt.GenuineFrame
        if want is not None:
            # Genuine means a frame the scanner would accept whole, whatever its seq.
            count = 1
            readable = want.supported
            if want.kind == fmt.KIND_BLOCK:
                count = fmt.block_count(buf, pos + fmt.FRAME_HEADER_SIZE_BYTES, want.stored_len)
                readable = readable and count > 0  # a block whose table this version reads
            first = want.seq + 1 - count if want.kind in (fmt.KIND_DATA, fmt.KIND_BLOCK) else want.seq + 1
            res = fmt.py_scan(buf, pos, salt, max(first, 0), frames_max=1)
            assert res.stop_offset == pos or res.frames[0].offset == pos
            assert readable == (res.stop != fmt.Stop.FLAGS)
    assert fmt.c_verify_frame(memoryview(buf), start, salt) == fmt.py_verify_frame(buf, start, salt)


def test_find_later_commit_finds_a_commit_past_damage() -> None:
    salt = 99
    frames = fmt.py_encode_batch(1, [fmt.FrameSpec(0, 3, b"abc")] * 3, salt, commit_last=True)
    buf = bytearray(frames)
    buf[40] ^= 0xFF  # damage the first frame's payload
    later = 2 * (32 + 3)
    assert fmt.c_find_later_commit(bytes(buf), 0, salt, 0) == later == fmt.py_find_later_commit(bytes(buf), 0, salt, 0)
    assert fmt.c_find_later_commit(bytes(buf), 0, salt, 3) is None


def test_scan_arguments_out_of_c_range_use_the_twin() -> None:
    buf = fmt.py_encode_batch(5, [fmt.FrameSpec(0, 1, b"a")] * 2, 3, commit_last=False)
    for start, expected_seq, base_offset in [(len(buf) + 5, 5, 0), (0, 1 << 64, 0), (0, 5, -1)]:
        assert fmt.c_scan(buf, start, 3, expected_seq, base_offset) == fmt.py_scan(
            buf, start, 3, expected_seq, base_offset
        )


def test_scan_long_buffer_crosses_chunks() -> None:
    n = native.SCAN_CHUNK_FRAMES * 2 + 17
    specs = [fmt.FrameSpec(fmt.FLAG_BYTES, 4, i.to_bytes(4, "little")) for i in range(n)]
    buf = fmt.py_encode_batch(1, specs, 42, commit_last=True) + b"\x00" * 10
    got = fmt.c_scan(buf, 0, 42, 1, base_offset=64)
    assert got == fmt.py_scan(buf, 0, 42, 1, base_offset=64)
    assert len(got.frames) == n and got.stop == fmt.Stop.ZEROS
    v = fmt.verify_scan(buf, 0, 42, 1, base_offset=64)
    assert v == fmt.Verified(n, fmt.Stop.ZEROS, got.stop_offset, 0, n + 1)


# --- selection, GIL, end to end -------------------------------------------------------------


def test_selection_is_automatic_and_exported() -> None:
    assert journal.native_available is native.native_available
    if native.forced_pure():
        assert fmt.scan is fmt.py_scan and not journal.native_available()
    else:
        assert journal.native_available()
        assert fmt.scan is fmt.c_scan
        assert fmt.encode_batch is fmt.c_encode_batch
        assert fmt.find_later_commit is fmt.c_find_later_commit
        assert fmt.verify_frame is fmt.c_verify_frame


def test_journal_pure_env_forces_the_pure_path() -> None:
    code = (
        "import journal, journal.engine.format as f, journal.engine.native as n; "
        "print(journal.native_available(), f.scan is f.py_scan, f.encode_batch is f.py_encode_batch, "
        "n.native_status())"
    )
    env = dict(os.environ, JOURNAL_PURE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[:3] == ["False", "True", "True"]
    assert "JOURNAL_PURE=1" in out.stdout
    assert out.stderr == ""  # forcing the pure path is a choice, not worth a warning


def test_c_calls_release_the_gil() -> None:
    """While the C helper hashes a large buffer, another Python thread gets to run.

    With a long switch interval, a thread that waits for the GIL only runs if the holder
    releases it; so the counter moving during the call proves the release.
    """
    data = bytes(64 * 1024 * 1024)
    counter = [0]
    stop = threading.Event()
    running = threading.Event()

    def spin() -> None:
        running.set()
        while not stop.is_set():
            counter[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    t = threading.Thread(target=spin)
    try:
        t.start()
        assert running.wait(10)  # the spinner runs (waiting released the GIL to it)
        moved = False
        for _ in range(3):
            before = counter[0]
            native.xxh64(data, 1)
            if counter[0] != before:
                moved = True
                break
        assert moved, "the counter thread never ran during a C call: the GIL was held"
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)


def test_journal_written_by_one_path_reads_on_the_other(tmp_path: Path) -> None:
    events = [{"type": "user_message", "text": "hello " * (i % 30), "i": i} for i in range(300)]
    for writer, reader in [("pure", "c"), ("c", "pure")]:
        path = tmp_path / writer
        with ExitStack() as stack:
            if writer == "pure":
                stack.enter_context(mock.patch.object(fmt, "scan", fmt.py_scan))
                stack.enter_context(mock.patch.object(fmt, "encode_batch", fmt.py_encode_batch))
                stack.enter_context(mock.patch.object(fmt, "find_later_commit", fmt.py_find_later_commit))
            else:
                stack.enter_context(mock.patch.object(fmt, "scan", fmt.c_scan))
                stack.enter_context(mock.patch.object(fmt, "encode_batch", fmt.c_encode_batch))
            with journal.open(path, create=True) as j:
                j.append_many(events[:100], durability="sync")
                for e in events[100:]:
                    j.append(e, durability="buffered")
        with ExitStack() as stack:
            scan = fmt.py_scan if reader == "pure" else fmt.c_scan
            stack.enter_context(mock.patch.object(fmt, "scan", scan))
            with journal.open(path) as j:
                assert [r.event for r in j.read()] == events
    assert _segment_bytes(tmp_path / "pure") != b""


def _segment_bytes(path: Path) -> bytes:
    # Headers differ (random salt and journal id) but both journals hold real frames.
    return b"".join(p.read_bytes()[fmt.SEGMENT_HEADER_SIZE_BYTES :] for p in sorted(path.glob("*.seg")))
