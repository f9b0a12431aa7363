"""Review of issue 32: aider's "Applied edit to PATH" notes are matched in time linear in the file.

Each note looked through every edit call of the reply before it: a reply of many edits followed
by their notes (what aider prints for a reply editing many files) cost edits x notes steps, 70 s
for a file of 1.6 MB, hours under the size limit. This is a hang guard: the old matching needs
minutes for this file, the new one seconds, and the limit is far from both.
"""

from __future__ import annotations

import pathlib

import pytest

import journal
from journal.session import importers

EDITS = 60_000


def aider_file(edits: int, same_path: bool) -> str:
    parts = ["# aider chat started at 2024-01-01 10:00:00\n", "#### edit them\n", "\n"]
    for i in range(edits):
        path = "same.py" if same_path else f"f{i}.py"
        parts.append(f"{path}\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n\n")
    parts.extend(f"> Applied edit to {'same.py' if same_path else f'f{i}.py'}\n" for i in range(edits))
    return "".join(parts)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("same_path", [False, True])
def test_many_edits_and_their_notes_import_in_linear_time(tmp_path: pathlib.Path, same_path: bool) -> None:
    src, dest = tmp_path / "h.md", tmp_path / "j"
    src.write_text(aider_file(EDITS, same_path))
    report = importers.import_file("aider", str(src), str(dest))
    assert report.closed == []  # every edit has its result from its note
    with journal.open(dest, readonly=True) as j:
        results = [r.event for r in j.read() if r.event["type"] == "tool.result"]
    assert len(results) == EDITS and all(e["data"]["status"] == "ok" for e in results)
