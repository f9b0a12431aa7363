"""The session page's artifact badges in a real headless Chromium (driven as tests/test_view_browser.py
drives it): a page renders without hashing a blob, a badge is asked for when its button is
pressed or its event expanded, and an artifact's page shows its text escaped, never run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from journal.view.server import Viewer, ViewerServer
from journal.view.source import open_source
from tests.test_view_artifacts import SCRIPT, Made, _replace_blob, hexof, made  # noqa: F401 - made: a fixture
from tests.test_view_browser import WAIT_MS, browser, screens  # noqa: F401 - fixtures


@pytest.fixture
def served(made: Made, tmp_path: Path) -> Iterator[ViewerServer]:  # noqa: F811 - made: the fixture above
    viewer = Viewer(open_source(made.root), str(tmp_path / "cache"), index_in_background=False)
    srv = ViewerServer(viewer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


def test_badges_are_checked_on_demand_and_artifact_text_is_never_run(
        browser: Any, served: ViewerServer, made: Made, screens: Path) -> None:  # noqa: F811 - fixtures
    from playwright.sync_api import expect  # the browser fixture has skipped without it
    _replace_blob(made.blob(made.binary_ref), b"\x00" * len(made.binary))  # damaged: other bytes, same size
    base = f"http://127.0.0.1:{served.server_address[1]}"
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(WAIT_MS)
        dialogs: list[str] = []
        pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        pg.goto(served.url)
        pg.goto(f"{base}/s/{made.sid}")
        assert pg.locator("button.artifact-check").count() == 4
        assert served.viewer.artifacts._verdicts == {}  # the page is up; no blob was read for it
        # The tool result's button, pressed.
        pg.click(f'button.artifact-check[data-digest="{hexof(made.text_ref)}"]')
        pg.wait_for_selector("article[data-type='tool.result'] .badge.artifact-state.ok")
        assert pg.inner_text("article[data-type='tool.result'] .badge.artifact-state") == "artifact verified"
        # The assistant message's three references, checked when the event is expanded (Enter).
        msg = pg.locator("article[data-type='assistant.message']")
        msg.focus()
        pg.keyboard.press("Enter")
        expect(msg.locator("button.artifact-check")).to_have_count(0, timeout=WAIT_MS)  # polled, no eval (CSP)
        expect(msg.locator(".badge.artifact-state")).to_have_count(3, timeout=WAIT_MS)
        badges = msg.locator(".badge.artifact-state").all_inner_texts()
        assert sorted(badges) == sorted(["artifact damaged: its content does not match its hash", "artifact verified",
                                         "artifact missing"]), badges
        pg.screenshot(path=str(screens / "session-artifacts.png"), full_page=True)
        # The link opens the artifact's page: the output as text, its <script> never an element.
        pg.click(f'article[data-type="tool.result"] a.artifact[data-digest="{hexof(made.text_ref)}"]')
        pg.wait_for_selector("pre.output")
        assert SCRIPT in pg.inner_text("pre.output")
        assert pg.evaluate("document.querySelectorAll('main script').length") == 0
        pg.screenshot(path=str(screens / "artifact.png"))
        assert dialogs == []
    finally:
        ctx.close()
