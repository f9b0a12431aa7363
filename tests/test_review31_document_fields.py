"""Review of issue 32: any mapped field too large for a record is left out, not only text, output
and args.

A document's element maps to one event; a field other than text, output or args (SWE-agent's
``thought``, OpenHands' ``observation``, a tool's name, a timestamp) over the record limit made
the whole import fail with UnstorableLineError naming "line 0" and telling to shorten a line,
for a document that is valid and whose bytes the chunks keep exactly either way.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

import journal
from journal.session import importers

BIG = 17 * 1024 * 1024  # over the journal's default record limit (16 MiB)


@pytest.mark.parametrize("fmt, doc", [
    ("swe-agent", {"history": [{"role": "user", "content": "t"},
                               {"role": "assistant", "content": "a", "thought": "x" * BIG}]}),
    ("gemini", {"sessionId": "s", "messages": [{"type": "user", "content": "hi", "timestamp": "2024" + "x" * BIG}]}),
    ("openhands", [{"id": 1, "action": "run", "args": {"command": "ls"}, "source": "agent"},
                   {"id": 2, "observation": "x" * BIG, "cause": 1, "content": "ok"}]),
])
def test_a_valid_document_with_one_huge_field_imports_and_exports_exactly(
        tmp_path: pathlib.Path, fmt: str, doc: Any) -> None:
    src, dest = tmp_path / "doc.json", tmp_path / "j"
    src.write_text(json.dumps(doc))
    importers.import_file(fmt, str(src), str(dest))
    with journal.open(dest, readonly=True) as j:
        derived = [r.event for r in j.read() if r.event.get("data", {}).get("import", {}).get("derived")]
    assert any("clipped" in e["data"] or e.get("time") is None for e in derived)
    lines, final_newline, _ = importers.export_journal(str(dest))
    assert ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode() == src.read_bytes()
