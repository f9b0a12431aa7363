"""What the tests of the lone frame's one-call append share (tests/test_frame_write_sync.py and
tests/test_review_frame_write_sync.py): the compiled call, and a small trained dictionary."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from journal.engine import native
from tests.native_modules import compiled


def module() -> Any:
    """journal.engine._zstd_held, whose frame_write_sync these tests hold to its twin; skipped in
    the pure pass, where the module imports but the engine writes through the twin."""
    if native.forced_pure():
        pytest.skip("JOURNAL_PURE=1: lone frames go through the twin; the C call is the shipped pass's to test")
    return compiled("journal.engine._zstd_held", "the lone frame's one-call append")


@functools.cache
def trained_dictionary() -> bytes:
    """A 4 KiB zstd dictionary trained on records like the tests' (made once per process)."""
    import zstandard

    samples = [b'{"i":%d,"text":"%s"}' % (i, (b"tool output line %d " % i) * (i % 30 + 1)) for i in range(400)]
    return zstandard.train_dictionary(4096, samples).as_bytes()
