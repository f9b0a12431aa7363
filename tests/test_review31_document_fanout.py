"""Review of issue 32: a document's mapped events hold at most a bounded multiple of its bytes.

One ``role: tool`` message may name many calls (``tool_call_ids``), and each named call's result
event held the message's whole content: a document of a few MiB made a journal of hundreds of
times its size (one content of 1 MiB and 100,000 ids of a few bytes each: 100 GB). What is
mapped past the bound is left out of its event, which says so; the bytes stay exact in the chunks.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
from typing import Any

from journal.session import importers

OUTPUT_CHARS = 900_000  # under a mapped value's limit (1 MiB), so the content is kept on its own
CALLS = 64
# incompressible, so what the journal stores is what it is given
CONTENT = base64.b64encode(os.urandom(OUTPUT_CHARS * 3 // 4)).decode("ascii")


def journal_bytes(path: pathlib.Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def swe_doc(ids: int) -> dict[str, Any]:
    calls = [{"id": f"c{i}", "function": {"name": "bash", "arguments": "{}"}} for i in range(ids)]
    return {"history": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "calling", "tool_calls": calls},
        {"role": "tool", "tool_call_ids": [f"c{i}" for i in range(ids)], "content": CONTENT},
    ]}


def imported(tmp_path: pathlib.Path, doc: dict[str, Any]) -> tuple[int, int, list[dict[str, Any]]]:
    import journal

    src, dest = tmp_path / "t.traj", tmp_path / "j"
    src.write_text(json.dumps(doc))
    importers.import_file("swe-agent", str(src), str(dest))
    with journal.open(dest, readonly=True) as j:
        evs = [r.event for r in j.read()]
    return src.stat().st_size, journal_bytes(dest), evs


def test_one_content_named_by_many_calls_is_not_copied_into_each(tmp_path: pathlib.Path) -> None:
    size, written, evs = imported(tmp_path, swe_doc(CALLS))
    results = [e for e in evs if e["type"] == "tool.result"]
    assert len(results) == CALLS  # every call still has its result
    assert all(e["data"]["status"] == "ok" for e in results)  # what is small is kept past the bound
    # the chunks (1x), the mapped values (bounded) and each event's envelope
    assert written <= 8 * size + 1024 * 1024, (size, written)
    held = sum(len(json.dumps(e)) for e in evs)  # what a reader of the journal holds
    assert held <= 8 * size + 1024 * 1024, (size, held)
    assert any(e["data"].get("output") == CONTENT for e in results)  # the first keeps it
    assert all("clipped" in e["data"] for e in results if e["data"].get("output") is None)


def test_a_large_result_named_once_is_kept(tmp_path: pathlib.Path) -> None:
    _, _, evs = imported(tmp_path, swe_doc(1))
    [result] = [e for e in evs if e["type"] == "tool.result"]
    assert result["data"]["output"] == CONTENT
