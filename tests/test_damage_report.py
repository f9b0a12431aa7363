"""verify and salvage describe one damaged frame the same way: the same bytes, the same seqs and
the same words, so a user who reads both sees one loss, not two different ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import journal
from tests.conftest import frames_of, live_segment


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal", *args, "--json"], capture_output=True, text=True,
                          timeout=120)


def test_verify_counts_the_damaged_frame_that_salvage_loses(tmp_path: Path) -> None:
    src = tmp_path / "j"
    with journal.open(src, create=True, block_bytes=0) as j:  # a frame per record
        for i in range(30):
            j.append({"type": "x", "i": i, "text": "hello world " * 8}, durability="sync")
    seg = live_segment(src)
    frame = frames_of(seg)[9]  # seq 10, with durable (commit-marked) frames after it
    data = bytearray(seg.read_bytes())
    data[frame.offset + 40] ^= 0xFF
    seg.write_bytes(bytes(data))

    verified = _cli("verify", str(src))
    assert verified.returncode == 3, verified.stderr
    (problem,) = json.loads(verified.stdout)["problems"]
    salvaged = _cli("salvage", str(src), str(tmp_path / "rescued"))
    assert salvaged.returncode == 8, salvaged.stderr
    (loss,) = json.loads(salvaged.stdout)["losses"]

    for key in ("segment", "offset", "lengthBytes", "seqFirst", "seqLast"):
        assert problem[key] == loss[key], (key, problem, loss)
    assert (problem["offset"], problem["seqFirst"], problem["seqLast"]) == (frame.offset, 10, 10)
    assert problem["reason"].startswith(loss["reason"]), (problem["reason"], loss["reason"])
    assert "before a durable frame" in problem["reason"]  # why it is damage, not a torn tail
