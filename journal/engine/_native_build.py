"""The cffi builder for the C helper (out-of-line API mode); setup.py runs it at install time.

The generated wrapper C file and the compiled module stay out of the source tree's history:
setuptools writes the former under build/ and the latter is ignored by .gitignore.
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

MODULE_NAME = "journal.engine._journal_native"

# Mirrors native/journal_native.h (cffi needs the declarations without the preprocessor).
CDEF = """
typedef struct jn_frame {
    uint64_t offset;
    uint64_t seq;
    uint32_t flags;
    uint32_t raw_len;
    uint32_t stored_len;
    uint32_t aux;
} jn_frame;

typedef struct jn_scan_state {
    uint64_t pos;
    uint64_t expected_seq;
    uint32_t seq_exhausted;
    uint32_t stop;
    uint64_t stop_seq;
    uint64_t count;
    uint64_t last_seq;
} jn_scan_state;

uint64_t jn_xxh64(const uint8_t *p, size_t n, uint64_t seed);
size_t jn_encode_batch(uint8_t *out, size_t out_cap, const uint8_t *payloads, size_t payloads_len,
                       const uint32_t *flags, const uint32_t *raw_lens, const uint32_t *stored_lens,
                       size_t n, uint64_t first_seq, uint64_t salt, int commit_last);
int jn_scan(const uint8_t *buf, size_t size, uint64_t base_offset, uint64_t salt, jn_scan_state *state,
            jn_frame *frames, size_t frames_cap, int count_only);
int jn_verify_frame(const uint8_t *buf, size_t size, size_t pos, uint64_t salt, jn_frame *out);
int64_t jn_find_later_commit(const uint8_t *buf, size_t size, size_t start, uint64_t salt, uint64_t after_seq);
"""


def _compile_args() -> list[str]:
    if sys.platform == "win32":
        return ["/O2"]
    # -Werror is not applied here because it would also judge cffi's generated wrapper;
    # tests/test_native_sanitize.py compiles native/journal_native.c alone with -Werror.
    return ["-O2", "-Wall", "-Wextra"]


def make_builder(source_dir: str = "native") -> FFI:
    """The FFI builder; ``source_dir`` is relative to the project root (setuptools wants that)."""
    ffibuilder = FFI()
    ffibuilder.cdef(CDEF)
    ffibuilder.set_source(
        MODULE_NAME,
        '#include "journal_native.h"',
        sources=[os.path.join(source_dir, "journal_native.c")],
        include_dirs=[source_dir],
        extra_compile_args=_compile_args(),
    )
    return ffibuilder


ffibuilder = make_builder()
