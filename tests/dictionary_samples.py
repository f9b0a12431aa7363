"""What the dictionary review tests share: the records they write, a dictionary trained on them,
and the seqs a report loses."""

from __future__ import annotations

import functools
import json
import random
from typing import Any

import zstandard

from journal.engine.verify import VerifyReport


def event(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    return {"type": "tool_result", "n": i, "output": " ".join(rng.choice(["ok", "fail", "line"]) for _ in range(40))}


@functools.cache
def train() -> bytes:
    """A 4 KiB zstd dictionary trained on ``event(0..999)`` (once a process)."""
    return zstandard.train_dictionary(4096, [json.dumps(event(i)).encode() for i in range(1000)]).as_bytes()


def lost(report: VerifyReport) -> set[int]:
    """The seqs of every record the report's problems take."""
    out: set[int] = set()
    for p in report.problems:
        assert p.seq_first is not None and p.seq_last is not None
        out.update(range(p.seq_first, p.seq_last + 1))
    return out
