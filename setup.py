"""Build the optional C helper with cffi, and three small CPython modules (the GIL-holding zstd
module, the big-float walk of a decoded record, a durable write under one release of the GIL);
metadata lives in pyproject.toml.

The helper is an accelerator, not a requirement: if the C compiler is missing or fails,
installation still succeeds, the pure-Python twin in journal/engine/format.py is used, and one
warning line says so (journal.native_available() tells which path is in use).
"""

from __future__ import annotations

import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

WARNING = "journal: the C helper was not built ({}); the pure-Python path will be used"
HELD_WARNING = "journal: the GIL-holding zstd module was not built ({}); the zstandard package compresses every payload"
HELD_NAME = "journal.engine._zstd_held"
FLOATS_WARNING = "journal: the big-float walk in C was not built ({}); records are checked in Python"
FLOATS_NAME = "journal._json_floats"
WRITE_SYNC_WARNING = "journal: the one-call durable write was not built ({}); pwrite and fdatasync are called apart"
WRITE_SYNC_NAME = "journal._write_sync"
_WARNINGS = {HELD_NAME: HELD_WARNING, FLOATS_NAME: FLOATS_WARNING, WRITE_SYNC_NAME: WRITE_SYNC_WARNING}


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning and leaves the module out."""

    failed: list[str]

    def run(self) -> None:
        self.failed = []
        try:
            super().run()
        except Exception as exc:  # a missing compiler can fail before any extension is tried
            self._warn(exc)
            self.extensions = []

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._warn(exc, _WARNINGS.get(ext.name, WARNING))
            self.failed.append(ext.name)

    def copy_extensions_to_source(self) -> None:
        # Editable installs copy built modules into the tree; skip the ones that failed.
        self.extensions = [e for e in self.extensions if e.name not in getattr(self, "failed", [])]
        super().copy_extensions_to_source()

    def get_outputs(self) -> list[str]:
        self.extensions = [e for e in self.extensions if e.name not in getattr(self, "failed", [])]
        outputs: list[str] = super().get_outputs()
        return outputs

    def _warn(self, exc: BaseException, warning: str = WARNING) -> None:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(warning.format(reason[:200]), file=sys.stderr)


# The two modules that hold a buffer while the GIL is released use the limited API's buffer
# protocol, which Python 3.11 added: on 3.10 they are built against the full API instead (a
# module for that one Python rather than one for every later one).
BUFFER_LIMITED_API = sys.version_info >= (3, 11)
BUFFER_MACROS = [] if BUFFER_LIMITED_API else [("JOURNAL_FULL_API", "1")]

# zstd for small payloads with the GIL held (native/zstd_held.c says why); optional like the
# helper: without it, the zstandard package compresses every payload.
ZSTD_HELD = Extension(
    HELD_NAME,
    # journal_native.c for its XXH64: frame_write_sync checksums the frame it makes.
    sources=["native/zstd_held.c", "native/journal_native.c"],
    py_limited_api=BUFFER_LIMITED_API,
    define_macros=BUFFER_MACROS,
    # -Werror is for tests/test_native_sanitize.py, which compiles the file alone: here a new
    # compiler's new warning would only leave the module out.
    extra_compile_args=[] if sys.platform == "win32" else ["-O2", "-Wall", "-Wextra"],
)

# The big-float walk of a decoded record (native/json_floats.c says why); optional: without it
# journal/record.py walks in Python, as before.
JSON_FLOATS = Extension(
    FLOATS_NAME,
    sources=["native/json_floats.c"],
    py_limited_api=True,
    extra_compile_args=[] if sys.platform == "win32" else ["-O2", "-Wall", "-Wextra"],
    # It calls nothing of libc, so the linker would leave libc out of its needed libraries, and
    # auditwheel, which reads the C library a wheel targets from its extensions, stops at it.
    extra_link_args=["-Wl,--no-as-needed", "-lc"] if sys.platform.startswith("linux") else [],
)

# A pwrite and an fdatasync under one release of the GIL (native/write_sync.c says why);
# optional: without it, journal/fs.py calls them one by one, as before. POSIX only.
WRITE_SYNC = Extension(
    WRITE_SYNC_NAME,
    sources=["native/write_sync.c"],
    py_limited_api=BUFFER_LIMITED_API,
    define_macros=BUFFER_MACROS,
    extra_compile_args=["-O2", "-Wall", "-Wextra"],
)

setup(
    cffi_modules=["journal/engine/_native_build.py:ffibuilder"],
    # zstd_held uses dlopen, write_sync pwrite and fdatasync: neither is built on Windows
    ext_modules=[JSON_FLOATS] if sys.platform == "win32" else [ZSTD_HELD, JSON_FLOATS, WRITE_SYNC],
    cmdclass={"build_ext": OptionalBuildExt},
)
