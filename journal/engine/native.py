"""The C helper's loader and raw wrappers: a leaf module that knows buffers and integers only.

It imports nothing of the engine. journal/engine/format.py owns everything else: the range
checks that decide whether an argument fits the C types, the fall-back to the pure-Python
twin, and the choice of path (``format.scan`` and friends are rebound to the C path when the
compiled module loaded). The bytes and the results are the same either way
(tests/test_native.py holds them equal); docs/NATIVE.md tells the story.

Set ``JOURNAL_PURE=1`` to force the pure path (the compiled module is then not even loaded).

The C functions release the GIL while they run (cffi's API mode does that for every call), so
a scan or an encode on one thread does not stall the others. The one exception is the second,
optional module loaded here, ``_zstd_held`` (native/zstd_held.c): it compresses a small payload
with the system's libzstd and keeps the GIL, because for a call of a few microseconds giving it
up costs more than it frees; but its frame_write_sync, a lone durable record's append, makes the
record's compression and frame in the release of the GIL its write and fdatasync make anyway.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

PURE_ENV = "JOURNAL_PURE"
MODULE_NAME = "journal.engine._journal_native"
STOP_FULL = 7  # the C scanner's "frame array is full, call again"; never escapes format.py
SCRATCH_BYTES_MAX = 8 * 1024 * 1024  # larger outputs get their own buffer (the writer caps a batch at 4 MiB)
SCRATCH_BYTES_MIN = 64 * 1024  # the smallest per-thread scratch buffer, so small batches do not regrow it
SCAN_CHUNK_FRAMES = 4096  # frames converted per C call: bounds the scratch array at 128 KiB
FRAME_ROW_BYTES = 32  # sizeof(jn_frame): u64 offset, u64 seq, u32 flags, raw_len, stored_len, aux
FRAME_HEADER_BYTES = 32  # JN_FRAME_HEADER_BYTES; format.FRAME_HEADER_SIZE_BYTES (tests compare them)

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
        if _ffi.sizeof("jn_frame") != FRAME_ROW_BYTES:
            _ext, _load_error = None, f"jn_frame is {_ffi.sizeof('jn_frame')} bytes, expected {FRAME_ROW_BYTES}"
            return None
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
    held = "zstd with the GIL held: " + held_status if held_compress is not None else f"no held zstd: {held_status}"
    if _selected:
        return f"C helper ({_ext.__file__}); {held}"
    if forced_pure():
        return f"pure Python ({PURE_ENV}=1)"
    return f"pure Python (C helper not built: {_load_error}); {held}"


# --- zstd with the GIL held (native/zstd_held.c) ---------------------------------------------

HELD_MODULE_NAME = "journal.engine._zstd_held"


def _load_held() -> tuple[Any, str]:
    if forced_pure():
        return None, f"{PURE_ENV}=1"
    try:
        mod = importlib.import_module(HELD_MODULE_NAME)
    except ImportError as exc:  # not built, or no libzstd on this system
        return None, str(exc)
    v = mod.LIBRARY_VERSION
    return mod, f"libzstd {v // 10000}.{v // 100 % 100}.{v % 100}"


_held, held_status = _load_held()
# The compressor of small payloads that keeps the GIL (None: the zstandard package does all),
# and a word on which library it is or why there is none.
held_compress: Callable[[bytes], bytes] | None = None if _held is None else _held.compress
# The same at a given zstd level (a block frame's, encoding.BLOCK_ZSTD_LEVEL), the GIL held too;
# None where the module is missing or was built before it took a level.
held_compress_at: Callable[[bytes, int], bytes] | None = _held.compress if hasattr(_held, "LEVEL_MAX") else None
# The same with a trained dictionary: held_make_cdict(dictionary bytes) digests it once (an
# opaque handle, freed with its last reference), held_compress_with(handle, data) compresses
# against it. None where the module is missing or was built before it had them.
# held_make_cdict_at(dictionary bytes, level) digests it for another level than the module's
# LEVEL (a CDict fixes the level of every frame made with it); None as held_compress_at.
held_make_cdict: Callable[[bytes], object] | None = getattr(_held, "make_cdict", None)
held_make_cdict_at: Callable[[bytes, int], object] | None = None if held_compress_at is None else _held.make_cdict
held_compress_with: Callable[[object, bytes], bytes] | None = getattr(_held, "compress_with", None)
# A lone record's durable append in one release of the GIL, its compression and framing in the
# release its pwrite and fdatasync make anyway: held_frame_write_sync(fd, raw, offset, seq, flags,
# salt, compress_min, cdict, dict_id) -> (answer, frame bytes), the answer as
# journal._write_sync's. None where the module is missing or was built before it had it.
held_frame_write_sync: Callable[..., tuple[int, int]] | None = getattr(_held, "frame_write_sync", None)


if not _selected and not forced_pure():
    # One line on stderr (logging's last-resort handler) unless the application configured
    # logging; JOURNAL_PURE=1 says the pure path is wanted and silences it.
    logging.getLogger("journal").warning(
        "journal: C helper not available (%s); using the pure-Python path (set %s=1 to silence)",
        _load_error,
        PURE_ENV,
    )


# --- raw wrappers (only called once load() has succeeded) -----------------------------------
# Arguments are already in range for the C types: format.py checks them first.


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
        buf = _local.scratch = _alloc("uint8_t[]", max(size, SCRATCH_BYTES_MIN))
    return buf


def encode_batch(
    payload: bytes, flags: Any, raw_lens: Any, lens: Any, first_seq: int, salt: int, commit_last: bool
) -> bytes | None:
    """jn_encode_batch over arrays of u32 (flags, raw lengths, stored lengths) and the joined
    payloads; None when the C code refuses the arguments (the twin then raises the error)."""
    n = len(lens)
    total = len(payload) + n * FRAME_HEADER_BYTES
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
        return None
    data: bytes = _ffi.buffer(out, total)[:]
    return data


def scan(
    mv: memoryview,
    start: int,
    salt: int,
    expected_seq: int,
    base_offset: int,
    frames_max: int,
    make_frame: Callable[[tuple[int, int, int, int, int, int]], Any],
) -> tuple[list[Any], int, int, int]:
    """jn_scan to a stop: (frames made by ``make_frame`` from (offset, seq, flags, raw_len,
    stored_len, record count) rows, stop code, stop offset without ``base_offset``, stop seq).
    The stop code is STOP_FULL when ``frames_max`` frames were taken before any other stop."""
    size = mv.nbytes
    cbuf = _ffi.from_buffer("uint8_t[]", mv)
    state = _ffi.new("jn_scan_state *")
    state.pos = start
    state.expected_seq = expected_seq
    rows_max = max(1, min(SCAN_CHUNK_FRAMES, (size - start) // FRAME_HEADER_BYTES))
    rows = _alloc("jn_frame[]", rows_max)
    frames: list[Any] = []
    while True:
        room = frames_max - len(frames)
        if room <= 0:
            return frames, STOP_FULL, state.pos, 0
        stop = _lib.jn_scan(cbuf, size, base_offset, salt, state, rows, min(room, rows_max), 0)
        count = state.count
        if count:
            # Columns of the jn_frame rows (native byte order: these are C structs, not disk
            # bytes); zip reuses its tuple, so each frame costs one object and its ints.
            mem = memoryview(_ffi.buffer(rows, count * FRAME_ROW_BYTES))
            u64, u32 = mem.cast("Q"), mem.cast("I")
            columns = zip(u64[0::4], u64[1::4], u32[4::8], u32[5::8], u32[6::8], u32[7::8], strict=True)
            frames.extend(map(make_frame, columns))
        if stop != STOP_FULL:
            return frames, stop, state.pos, state.stop_seq


def count_frames(
    mv: memoryview, start: int, salt: int, expected_seq: int, base_offset: int
) -> tuple[int, int, int, int, bool, int]:
    """jn_scan without rows: (frames accepted, stop code, stop offset without ``base_offset``,
    stop seq, whether a data frame carried the last u64 seq, the next expected seq)."""
    state = _ffi.new("jn_scan_state *")
    state.pos = start
    state.expected_seq = expected_seq
    frames_cap = mv.nbytes // FRAME_HEADER_BYTES + 1  # never reached: a frame is >= 32 bytes
    cbuf = _ffi.from_buffer("uint8_t[]", mv)
    stop = _lib.jn_scan(cbuf, mv.nbytes, base_offset, salt, state, _ffi.NULL, frames_cap, 1)
    return state.count, stop, state.pos, state.stop_seq, bool(state.seq_exhausted), state.expected_seq


def verify_frame(mv: memoryview, pos: int, salt: int) -> tuple[int, int, int, int, int, int] | None:
    """jn_verify_frame: (offset, seq, flags, raw_len, stored_len, dict_id) of a genuine frame at
    ``pos``, or None."""
    out = _ffi.new("jn_frame *")
    if not _lib.jn_verify_frame(_ffi.from_buffer("uint8_t[]", mv), mv.nbytes, pos, salt, out):
        return None
    return out.offset, out.seq, out.flags, out.raw_len, out.stored_len, out.aux


def find_later_commit(mv: memoryview, start: int, salt: int, after_seq: int) -> int:
    """jn_find_later_commit: an offset, or -1."""
    at: int = _lib.jn_find_later_commit(_ffi.from_buffer("uint8_t[]", mv), mv.nbytes, start, salt, after_seq)
    return at
