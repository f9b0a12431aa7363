"""A page written to a file (`journal export --format html`) carries its own Content-Security-
Policy (review 32): opened from disk it has no server to send one, and it needs no script, no
fetch and no form, so none is allowed. Everything is escaped already; this keeps an escaping
slip from ever running in a file:// page."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from journal.view.model import Item
from journal.view.render import render_session_html


class _Meta(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.csp: list[str] = []
        self.in_head = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.in_head = False
        if tag == "meta" and self.in_head and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp.append(a.get("content") or "")


def test_an_exported_page_allows_no_script_and_nothing_from_elsewhere() -> None:
    item = Item(1, "user.message", "message", None, False, {}, {"text": "<script>alert(1)</script>"})
    html = render_session_html("s1", [item])
    assert "<script>alert" not in html
    p = _Meta()
    p.feed(html)
    (csp,) = p.csp
    rules = {m.group(1): m.group(2).split() for m in re.finditer(r"([a-z-]+)\s+([^;]*)", csp)}
    assert rules["default-src"] == ["'none'"]  # script, fetch, frames, images from elsewhere: none
    assert "script-src" not in rules
    assert rules["style-src"] == ["'unsafe-inline'"]  # its own inlined style, nothing else
    assert rules["form-action"] == ["'none'"] and rules["base-uri"] == ["'none'"]
