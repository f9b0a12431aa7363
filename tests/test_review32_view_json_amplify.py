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


def test_the_whole_event_route_answers_in_about_the_records_size(tmp_path: Any) -> None:
    # The route that serves an event whole gives it as compact JSON: indented, the same record
    # came back 130 times its size.
    import http.client
    import threading

    from journal.session import open as open_session
    from journal.view.server import Viewer, ViewerServer
    from journal.view.source import open_source

    path = str(tmp_path / "lone")
    deep = _deep()
    with open_session(path, create=True) as s:
        seq = s.append("tool.requested", {"tool": "t", "args": deep}, tool_call_id="c1").event.seq
    record_chars = len(json.dumps(deep))
    srv = ViewerServer(Viewer(open_source(path), str(tmp_path / "cache"), index_in_background=False))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        (sid,) = srv.viewer.entries()
        port = srv.server_address[1]
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", f"/api/session/{sid}/event/{seq}?token={srv.viewer.token}",
                  headers={"Host": f"127.0.0.1:{port}"})
        r = c.getresponse()
        r.read()
        cookie = (r.getheader("Set-Cookie") or "").split(";", 1)[0]
        c.request("GET", f"/api/session/{sid}/event/{seq}", headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
        r = c.getresponse()
        body = r.read()
        assert r.status == 200
        assert json.loads(body)["event"]["data"]["args"] == deep
        assert len(body) < 2 * record_chars
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)
