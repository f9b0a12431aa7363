"""The C helper: loading it, and wrappers that make it a drop-in for the hot format functions.

journal/format.py keeps the pure-Python twins as ``py_scan``, ``py_encode_batch`` and
``py_find_later_commit`` and, at its bottom, rebinds ``scan``, ``encode_batch`` and
``find_later_commit`` to the wrappers here when the compiled module loaded. Callers go through
the ``format`` module attribute, so they never know which path ran; the bytes and the results
are the same either way (tests/test_native.py holds them equal).

Set ``JOURNAL_PURE=1`` to force the pure path (the compiled module is then not even loaded).
Arguments the C types cannot carry (a seq past 2**64, a negative start, a strided buffer) are
handed to the pure twin, so even the errors raised are the same.

The C functions release the GIL while they run (cffi's API mode does that for every call), so
a scan or an encode on one thread does not stall the others.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from array import array
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple

from journal.engine import format as fmt

PURE_ENV = "JOURNAL_PURE"
MODULE_NAME = "journal.engine._journal_native"
U64_MAX = (1 << 64) - 1
_STOP_FULL = 7  # the C scanner's "frame array is full, call again"; never escapes this module
SCRATCH_BYTES_MAX = 8 * 1024 * 1024  # larger outputs get their own buffer (the writer caps a batch at 4 MiB)
SCAN_CHUNK_FRAMES = 4096  # frames converted per C call: bounds the scratch array at 128 KiB

_FRAME_ROW_BYTES = 32  # sizeof(jn_frame): u64 offset, u64 seq, u32 flags, raw_len, stored_len, reserved
_new_frame = partial(tuple.__new__, fmt.Frame)  # a row is already in Frame's field order
_spec_flags = itemgetter(0)
_spec_raw_len = itemgetter(1)
_spec_stored = itemgetter(2)

_local = threading.local()
_ext: Any = None
_ffi: Any = None
_lib: Any = None
_load_error: str | None = None
_alloc: Any = None


def forced_pure() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def load() -> Any:
    """The compiled module, or None if it is not built; loads it even under JOURNAL_PURE."""
    global _ext, _ffi, _lib, _load_error, _alloc
    if _ext is None and _load_error is None:
        try:
            _ext = importlib.import_module(MODULE_NAME)
        except ImportError as exc:
            _load_error = str(exc)
            return None
        _ffi, _lib = _ext.ffi, _ext.lib
        assert _ffi.sizeof("jn_frame") == _FRAME_ROW_BYTES
        # Output buffers are overwritten in full by the encoder: skip cffi's zero fill.
        _alloc = _ffi.new_allocator(should_clear_after_alloc=False)
    return _ext


def load_error() -> str | None:
    """Why the compiled module could not be loaded (None if it loaded or was not tried)."""
    return _load_error


_selected = False if forced_pure() else load() is not None


def native_available() -> bool:
    """True when the C helper does the hot append and scan work in this process."""
    return _selected


def native_status() -> str:
    """One line saying which path is in use and why."""
    if _selected:
        return f"C helper ({_ext.__file__})"
    if forced_pure():
        return f"pure Python ({PURE_ENV}=1)"
    return f"pure Python (C helper not built: {_load_error})"


if not _selected and not forced_pure():
    # One line on stderr (logging's last-resort handler) unless the application configured
    # logging; JOURNAL_PURE=1 says the pure path is wanted and silences it.
    logging.getLogger("journal").warning(
        "journal: C helper not available (%s); using the pure-Python path (set %s=1 to silence)",
        _load_error,
        PURE_ENV,
    )


# --- wrappers (only called once load() has succeeded) ---------------------------------------


def xxh64(data: bytes | memoryview, seed: int = 0) -> int:
    """XXH64 computed by the C helper (tests cross-check it against the xxhash package)."""
    mv = memoryview(data)
    result: int = _lib.jn_xxh64(_ffi.from_buffer("uint8_t[]", mv), mv.nbytes, seed)
    return result


def _scratch(size: int) -> Any:
    """A per-thread output buffer for the encoder, reused across batches.

    A fresh megabyte per batch costs more in page faults than the C code costs in total, so
    the encoder writes into this buffer and the result is copied out as bytes once.
    """
    if size > SCRATCH_BYTES_MAX:
        return _alloc("uint8_t[]", size)
    buf: Any = getattr(_local, "scratch", None)
    if buf is None or len(buf) < size:
        buf = _local.scratch = _alloc("uint8_t[]", max(size, 64 * 1024))
    return buf


def encode_batch(first_seq: int, specs: list[fmt.FrameSpec], salt: int, commit_last: bool) -> bytes:
    """format.encode_batch in C: the same bytes in one output buffer."""
    n = len(specs)
    if n == 0 or first_seq < 0 or first_seq + n - 1 > U64_MAX or not 0 <= salt <= U64_MAX:
        return fmt.py_encode_batch(first_seq, specs, salt, commit_last)
    try:
        stored = list(map(_spec_stored, specs))
        lens = array("I", map(len, stored))
        flags = array("I", map(_spec_flags, specs))
        raw_lens = array("I", map(_spec_raw_len, specs))
        payload = b"".join(stored)
    except (OverflowError, TypeError, ValueError):
        return fmt.py_encode_batch(first_seq, specs, salt, commit_last)
    total = len(payload) + n * fmt.FRAME_HEADER_SIZE_BYTES
    out = _scratch(total)
    written = _lib.jn_encode_batch(
        out,
        total,
        _ffi.from_buffer("uint8_t[]", payload),
        len(payload),
        _ffi.from_buffer("uint32_t[]", flags),
        _ffi.from_buffer("uint32_t[]", raw_lens),
        _ffi.from_buffer("uint32_t[]", lens),
        n,
        first_seq,
        salt,
        1 if commit_last else 0,
    )
    if written != total:
        # Refused (unknown flags, a payload over the limit): the twin raises the same error.
        return fmt.py_encode_batch(first_seq, specs, salt, commit_last)
    data: bytes = _ffi.buffer(out, total)[:]
    return data


def _c_args_ok(mv: memoryview, start: int, salt: int, seq: int, base_offset: int) -> bool:
    return (
        mv.itemsize == 1
        and mv.c_contiguous
        and 0 <= start <= mv.nbytes
        and 0 <= salt <= U64_MAX
        and 0 <= seq <= U64_MAX
        and 0 <= base_offset <= U64_MAX - mv.nbytes
    )


def scan(
    buf: bytes | memoryview,
    start: int,
    salt: int,
    expected_seq: int,
    base_offset: int = 0,
    frames_max: int = 1 << 62,
) -> fmt.ScanResult:
    """format.scan in C: the same frames, stop reason, stop offset and stop seq."""
    mv = memoryview(buf)
    if not _c_args_ok(mv, start, salt, expected_seq, base_offset):
        return fmt.py_scan(buf, start, salt, expected_seq, base_offset, frames_max)
    size = mv.nbytes
    cbuf = _ffi.from_buffer("uint8_t[]", mv)
    state = _ffi.new("jn_scan_state *")
    state.pos = start
    state.expected_seq = expected_seq
    rows_max = max(1, min(SCAN_CHUNK_FRAMES, (size - start) // fmt.FRAME_HEADER_SIZE_BYTES))
    rows = _alloc("jn_frame[]", rows_max)
    frames: list[fmt.Frame] = []
    while True:
        room = frames_max - len(frames)
        if room <= 0:
            return fmt.ScanResult(frames, fmt.Stop.END, state.pos + base_offset, 0)
        stop = _lib.jn_scan(cbuf, size, base_offset, salt, state, rows, min(room, rows_max), 0)
        count = state.count
        if count:
            # Columns of the jn_frame rows (native byte order: these are C structs, not disk
            # bytes); zip reuses its tuple, so each frame costs one Frame and its ints.
            mem = memoryview(_ffi.buffer(rows, count * _FRAME_ROW_BYTES))
            u64, u32 = mem.cast("Q"), mem.cast("I")
            columns = zip(u64[0::4], u64[1::4], u32[4::8], u32[5::8], u32[6::8], strict=True)
            frames.extend(map(_new_frame, columns))
        if stop != _STOP_FULL:
            return fmt.ScanResult(frames, fmt.Stop(stop), state.pos + base_offset, state.stop_seq)


class Verified(NamedTuple):
    """What a verify-only scan found: how many frames are valid and where and why it stopped."""

    frame_count: int
    stop: fmt.Stop
    stop_offset: int
    stop_seq: int
    next_seq: int  # the seq the next data frame would carry


def verify(buf: bytes | memoryview, start: int, salt: int, expected_seq: int, base_offset: int = 0) -> Verified:
    """Validate every frame like scan() but build no per-frame objects (integrity checks, benchmarks).

    Falls back to the pure scan when the C helper is not in use.
    """
    mv = memoryview(buf)
    if not _selected or not _c_args_ok(mv, start, salt, expected_seq, base_offset):
        res = fmt.py_scan(buf, start, salt, expected_seq, base_offset)
        data_count = sum(1 for f in res.frames if f.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA)
        return Verified(len(res.frames), res.stop, res.stop_offset, res.stop_seq, expected_seq + data_count)
    state = _ffi.new("jn_scan_state *")
    state.pos = start
    state.expected_seq = expected_seq
    frames_cap = mv.nbytes // fmt.FRAME_HEADER_SIZE_BYTES + 1  # never reached: a frame is >= 32 bytes
    cbuf = _ffi.from_buffer("uint8_t[]", mv)
    stop = _lib.jn_scan(cbuf, mv.nbytes, base_offset, salt, state, _ffi.NULL, frames_cap, 1)
    next_seq = U64_MAX + 1 if state.seq_exhausted else state.expected_seq
    return Verified(state.count, fmt.Stop(stop), state.pos + base_offset, state.stop_seq, next_seq)


def find_later_commit(buf: bytes | memoryview, start: int, salt: int, after_seq: int) -> int | None:
    """format.find_later_commit in C."""
    mv = memoryview(buf)
    if not _c_args_ok(mv, start, salt, after_seq, 0):
        return fmt.py_find_later_commit(buf, start, salt, after_seq)
    at: int = _lib.jn_find_later_commit(_ffi.from_buffer("uint8_t[]", mv), mv.nbytes, start, salt, after_seq)
    return None if at < 0 else at
