"""Review of issue 32: a mini-swe-agent message's bash block is found in time linear in its text.

A message of many block openings none of which is closed (``x```bash\\n`` repeated) made the
block search scan from each opening to the end of the text: 71 s for a message of 180 KB, hours
for one of the megabytes a document may hold. This is a hang guard: the old search needs over a
minute for this message, the new one milliseconds, and the limit is far from both.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import journal
from journal.session import importers

OPENINGS = 20_000


@pytest.mark.timeout(30)
def test_many_unclosed_openings_import_without_rescanning(tmp_path: pathlib.Path) -> None:
    text = "x```bash\n" * OPENINGS
    doc = {"messages": [{"role": "user", "content": "task"}, {"role": "assistant", "content": text}]}
    src, dest = tmp_path / "t.traj.json", tmp_path / "j"
    src.write_text(json.dumps(doc))
    report = importers.import_file("mini-swe-agent", str(src), str(dest))
    assert report.closed == []  # no block is closed, so no call is mapped
    with journal.open(dest, readonly=True) as j:
        assert not any(r.event["type"] == "tool.requested" for r in j.read())


@pytest.mark.parametrize("text, commands", [
    ("run\n```bash\nls -la\n```\n", ["ls -la"]),
    ("```bash\n\n```", [""]),  # the opening's newline and the closing's are two
    ("```bash\n```", []),  # one newline cannot be both
    ("```bash\nls\n```\nthen\n```mswea_bash_command\npwd\n```", ["ls", "pwd"]),
    ("x```bash\nls\nx```bash\n", []),
])
def test_blocks_found_are_the_same(tmp_path: pathlib.Path, text: str, commands: list[str]) -> None:
    doc = [{"role": "user", "content": "task"}, {"role": "assistant", "content": text}]
    src, dest = tmp_path / "t.traj.json", tmp_path / "j"
    src.write_text(json.dumps(doc))
    importers.import_file("mini-swe-agent", str(src), str(dest))
    with journal.open(dest, readonly=True) as j:
        got = [r.event["data"]["args"]["command"] for r in j.read() if r.event["type"] == "tool.requested"]
    assert got == (commands if len(commands) == 1 else [])  # the agent runs exactly one block
