"""Journals written by earlier versions of the engine open and read the same with this one.

The speed work changed how payloads are made (orjson in the codec, zstd with the GIL held), then
the format (version 2: block frames): a journal written before must read back event for event,
verify clean, and take appends, which go on in its version 1 live segment as frames of one
record until it rolls over. The earlier code is taken from this repository's own history (``git archive`` of a
pinned commit), so the journal is written by the engine's code as it was then (on today's
dependencies), run in a subprocess on its pure-Python path (its compiled helper is not built
there). A clone without that history (shallow, or no git) skips, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.engine import format as fmt
from journal.engine.verify import CLEAN, verify

ROOT = Path(__file__).resolve().parents[1]

# The commit before each change of how payloads are written: before orjson, before held zstd,
# before format version 2 (block frames).
COMMITS = {
    "json": "dc3be850d1dadf985020d72df9fcf1c782f84561",
    "orjson": "fdbafd987035d23bde88de0000a4da215b6e0913",
    "format-v1": "9fc1d324dc2cf8616dcf4bc903f09e43dcae5d78",
}

# What the old code appends: the benchmark's mix, the values whose bytes changed with orjson
# (floats in [1e-9, 1e-4), integers beyond 64 bits), keyed, bytes and synthetic records.
WRITE = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import journal
assert os.path.abspath(journal.__file__).startswith(os.path.abspath(sys.argv[1])), journal.__file__
from journal.benchmark.events import make_events
events = make_events(600)
events += [{"f": 1.5e-05, "g": 3e-9, "h": [9.9e-5, 1e-4]}, {"big": 2 ** 70 + 12345, "neg": -(2 ** 65) - 7},
           {"text": "é ☃ \U0001F600 " * 40, "nested": {"a": [1, {"b": None, "c": True}]}}]
j = journal.open(sys.argv[2], create=True)
for i, e in enumerate(events):
    out = j.append(e, durability="sync" if i % 50 == 0 else "buffered", idempotency_key=f"k{i}" if i % 7 == 0 else None)
    assert isinstance(out, journal.Committed), out
j.append(b"raw bytes \x00\x01" * 30, durability="sync")
j.close()
print(json.dumps(events))
"""


def _old_tree(commit: str, dest: Path) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the earlier code comes from its history")
    got = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "journal"], capture_output=True)
    if got.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone's history (a shallow clone?): {got.stderr.decode()[-200:]}")
    with tarfile.open(fileobj=BytesIO(got.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # 3.10.12 and 3.11.4 on: refuse anything but plain files
            tar.extractall(dest, filter="data")
        else:  # our own history's archive, of one folder
            tar.extractall(dest)
    return dest


@pytest.mark.parametrize("before", sorted(COMMITS))
def test_a_journal_written_before_reads_the_same_and_takes_appends(tmp_path: Path, before: str) -> None:
    tree = _old_tree(COMMITS[before], tmp_path / "old")
    path = tmp_path / "j"
    env = {**os.environ, "JOURNAL_PURE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", WRITE, str(tree), str(path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events: list[Any] = json.loads(proc.stdout.splitlines()[-1])

    with journal.open(path, readonly=True) as j:
        records = list(j.read())
    assert [r.event for r in records[:-1]] == events
    assert records[-1].event == b"raw bytes \x00\x01" * 30
    assert [r.key for r in records[:-1]] == [f"k{i}" if i % 7 == 0 else None for i in range(len(events))]
    assert verify(str(path)).verdict == CLEAN

    # This version appends to it, answers the old records' keys as duplicates, and reads both.
    with journal.open(path) as j:
        again = j.append(events[7], idempotency_key="k7", durability="sync")
        assert isinstance(again, journal.Committed) and again.duplicate and again.seq == 8
        new = j.append({"after": "the change", "f": 1.5e-05}, durability="sync")
        assert isinstance(new, journal.Committed) and new.seq == len(records) + 1
    with journal.open(path, readonly=True) as j:
        assert [r.event for r in j.read()][-1] == {"after": "the change", "f": 1.5e-05}
    assert verify(str(path)).verdict == CLEAN

    # Records appended together go on in the version 1 live segment a frame each (software of
    # version 1 can still read it); once it rolls over, the next segment is of the current version and
    # takes block frames.
    more = [{"together": i, "text": "words " * (i % 9)} for i in range(60)]
    with journal.open(path) as j:
        j.append_many(more[:30])
        live = _segments(path)[-1]
        assert _versions(path)[-1] == 1 and all(f.records == 1 for f in _record_frames(live))
        j.seal()
        j.append_many(more[30:])
    assert _versions(path)[-2:] == [1, fmt.FORMAT_VERSION]
    assert any(f.records > 1 for f in _record_frames(_segments(path)[-1]))
    with journal.open(path, readonly=True) as j:
        assert [r.event for r in j.read()][-60:] == more
    assert verify(str(path)).verdict == CLEAN


def _segments(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(fmt.SEGMENT_SUFFIX))


def _versions(path: Path) -> list[int]:
    return [fmt.decode_segment_header(p.read_bytes()).version for p in _segments(path)]


def _record_frames(seg: Path) -> list[fmt.Frame]:
    data = seg.read_bytes()
    header = fmt.decode_segment_header(data)
    return fmt.record_frames(fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames)
