"""A JSON value the viewer shows as indented text is cut as it is written, never written whole
and then cut (review 32). Indenting puts each value on its own line after as many spaces as it
is deep: a record of 60 KB nested 400 deep became 8 million characters, and one of the 16 MiB a
record may hold, nested 900 deep, some 7 GB, for one event of a page (and for the search index
taking a non-text tool output)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from journal.view.model import Item, output_of
from journal.view.render import Context, render_item

PEAK_BYTES_MAX = 4 * 1024 * 1024  # what rendering one such event may allocate at most (it took 17 MB)


def _deep() -> Any:
    v: Any = [0] * 20_000
    for _ in range(400):
        v = [v]
    assert len(json.dumps(v)) < 64 * 1024  # a small record
    return v


def _peak(f: Any) -> int:
    tracemalloc.start()
    try:
        f()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind,data", [
    ("tool.requested", {"tool": "t", "args": "DEEP"}),
    ("tool.result", {"status": "ok", "output": "DEEP"}),
    ("custom.thing", {"value": "DEEP"}),
])
def test_a_deep_json_value_is_rendered_in_bounded_memory(kind: str, data: dict[str, Any]) -> None:
    deep = _deep()
    data = {k: (deep if v == "DEEP" else v) for k, v in data.items()}
    it = Item(1, kind, "tool", None, False, {}, data)
    html: list[str] = []
    assert _peak(lambda: html.append(render_item(it, Context(), "s"))) < PEAK_BYTES_MAX
    assert "[\n" in html[0] and "more characters not shown" in html[0]  # shown indented, and said cut


def test_a_deep_tool_output_is_indexed_in_bounded_memory() -> None:
    deep = _deep()
    got: list[str] = []
    assert _peak(lambda: got.append(output_of({"output": deep}))) < PEAK_BYTES_MAX
    assert got[0].startswith("[\n [\n")
