"""`journal view` in a real headless Chromium (Debian's chromium, driven by Playwright).

Without /usr/bin/chromium or Playwright these tests skip, unless JOURNAL_REQUIRE_BROWSER=1 (as
.ci/run sets it), which makes the skip a failure. Each test saves a screenshot of the page it
looked at under the pytest tmp dir (``view-screens/``), never in the repository.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.session import open as open_session
from journal.session.store import SessionStore
from journal.view.server import Viewer, ViewerServer
from journal.view.source import open_source
from tests.view_store import SEARCH_WORD, Built, build_store, damage

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000


def _need_browser() -> None:
    missing = [what for what, ok in (("chromium at " + CHROMIUM, os.path.exists(CHROMIUM)),
                                     ("playwright", importlib.util.find_spec("playwright") is not None)) if not ok]
    if missing:
        why = f"no {', no '.join(missing)} (apt-get install chromium; pip install -e '.[view-test]')"
        if os.environ.get("JOURNAL_REQUIRE_BROWSER") == "1":
            pytest.fail(why + ", and JOURNAL_REQUIRE_BROWSER=1")
        pytest.skip(why)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def screens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("view-screens")


class Served:
    def __init__(self, target: str, cache: str) -> None:
        self.viewer = Viewer(open_source(target), cache)
        self.server = ViewerServer(self.viewer)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        assert self.viewer.indexer.idle.wait(60)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build_store(str(tmp_path / "store"))


@pytest.fixture
def served(built: Built, tmp_path: Path) -> Iterator[Served]:
    s = Served(built.root, str(tmp_path / "cache"))
    yield s
    s.close()


@pytest.fixture
def page(browser: Any, served: Served) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(WAIT_MS)
    pg.goto(served.server.url)  # the token URL: the cookie is set and the token leaves the address
    assert "token=" not in pg.url
    yield pg
    ctx.close()


def test_the_store_page_lists_sessions(page: Any, built: Built, screens: Path) -> None:
    page.wait_for_selector("#rows tr[data-sid]")
    rows = page.locator("#rows tr[data-sid]")
    assert rows.count() == 3
    text = page.inner_text("#rows")
    assert "Please list the files in the repository" in text and "Deploy the service to staging" in text
    crashed = page.locator(f'#rows tr[data-sid="{built.crashed}"]')
    assert "repaired" in crashed.inner_text() and "paused" in crashed.inner_text()
    child = page.locator(f'#rows tr[data-sid="{built.child}"]')
    assert built.clean in child.inner_text()  # its lineage names the parent
    page.screenshot(path=str(screens / "store.png"), full_page=True)
    page.click('th[data-sort="title"]')  # sorted on the server
    page.locator('th.sorted.asc[data-sort="title"]').wait_for()
    titles = page.locator("#rows td.title a").all_inner_texts()
    assert titles == sorted(titles, key=str.casefold)


def test_search_finds_a_tool_result_by_a_word_in_it(page: Any, built: Built, screens: Path) -> None:
    page.fill("#q", SEARCH_WORD)
    page.press("#q", "Enter")
    hit = page.locator(f'#results li[data-sid="{built.clean}"]')
    hit.wait_for()
    assert "tool.result" in hit.inner_text()
    assert page.locator("#results mark").first.inner_text().lower() == SEARCH_WORD
    page.screenshot(path=str(screens / "search.png"), full_page=True)
    seq = hit.get_attribute("data-seq")
    hit.locator("a").click()
    page.wait_for_selector(f"#e{seq} details[open]")  # the hit's event, its long output opened
    assert SEARCH_WORD in page.inner_text(f"#e{seq}")


def test_a_session_page_shows_a_repaired_crashs_closers_and_a_paused_gate(page: Any, served: Served, built: Built,
                                                                         screens: Path) -> None:
    page.goto(f"{served.base}/s/{built.crashed}")
    closers = page.locator("article.synthetic")
    closers.first.wait_for()
    assert closers.count() == 3  # the tool call's unknown outcome, the step and the turn
    tool_closer = page.locator('article.synthetic[data-type="tool.result"]')
    text = tool_closer.inner_text()
    assert "TOOL_OUTCOME_UNKNOWN" in text and "synthetic closer" in text and "closes tool.started" in text
    gate = page.locator("section.gate.paused")
    gate.wait_for()
    assert "TOOL_OUTCOME_UNKNOWN" in gate.inner_text() and "do not retry" in gate.inner_text()
    page.screenshot(path=str(screens / "session-repaired.png"), full_page=True)
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")  # prefers-color-scheme: the dark palette
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != light
    page.screenshot(path=str(screens / "session-repaired-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    # Keyboard: j focuses the first event, c jumps to the next closer.
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.dataset.seq") == "1"
    page.keyboard.press("c")
    assert page.evaluate("document.activeElement.classList.contains('synthetic')")


def test_a_fork_is_reachable_from_its_parent(page: Any, served: Served, built: Built, screens: Path) -> None:
    page.goto(f"{served.base}/s/{built.clean}")
    at_fork = page.locator(f"#e{built.fork_seq} a.fork-child")
    at_fork.wait_for()
    assert page.locator(f'aside .tree a:text-is("{built.child}")').count() == 1
    page.screenshot(path=str(screens / "session-parent.png"), full_page=True)
    at_fork.click()
    page.wait_for_url(f"**/s/{built.child}")
    parent = page.locator("header.top a.fork-parent")
    assert parent.inner_text() == built.clean
    assert "A different direction on the fork" in page.inner_text("h1")
    page.screenshot(path=str(screens / "session-fork.png"), full_page=True)


def test_a_live_sessions_new_events_appear_without_a_reload(page: Any, served: Served, built: Built,
                                                            screens: Path) -> None:
    store = SessionStore(built.root)
    with store.create(workspace={"path": "/repo/live"}) as s:
        s.append("user.message", {"text": "Watch this session grow"})
        sid = s.store_id
        served.viewer._entries = None  # the listing's cache: the new session is listed at once
        page.goto(f"{served.base}/s/{sid}")
        page.wait_for_selector("#live:not([hidden])")
        page.evaluate("window.__sameDocument = true")
        got = s.append("assistant.message", {"text": "a reply streamed to the open page"}).event.seq
        page.wait_for_selector(f"#e{got}")
        s.append("tool.requested", {"tool": "grep", "args": {"pattern": "live"}}, tool_call_id="c1")
        last = s.append("tool.result", {"status": "ok", "output": "live.txt:1"}, tool_call_id="c1").event.seq
        page.wait_for_selector(f'#e{last}[data-tool="grep"]')
        assert page.evaluate("window.__sameDocument") is True  # no reload happened
        assert page.inner_text("#last") == str(last)
        page.screenshot(path=str(screens / "session-live.png"), full_page=True)


@pytest.mark.parametrize("how", ["corrupt", "torn"])
def test_a_damaged_journal_shows_its_damage(browser: Any, tmp_path: Path, screens: Path, how: str) -> None:
    path = str(tmp_path / "damaged")
    with open_session(path, create=True, segment_size_bytes=4096) as s:
        for i in range(60):
            s.append("user.message", {"text": f"message {i} " + "x" * 40})
    damage(path, how)
    with journal.open(path, readonly=True) as j:
        last = j.last_seq
    served = Served(path, str(tmp_path / "cache"))
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(WAIT_MS)
        pg.goto(served.server.url)  # a lone journal: the page is its session's
        banner = pg.locator(".damage-banner")
        banner.wait_for()
        text = banner.inner_text()
        assert "segment 00000000000000000001.seg" in text if how == "corrupt" else "torn tail" in text
        assert "offset" in text
        assert pg.locator("#e1").count() == 1  # what can be read is shown
        pg.locator("#facts dl").wait_for()
        assert f"verify: {how}" in pg.inner_text("#facts")
        if how == "corrupt":
            stop = pg.locator("article.damage")
            assert "seq" in stop.inner_text() and "offset" in stop.inner_text()
            pg.wait_for_selector(f"#e{last}")  # read on past the damaged range
        pg.screenshot(path=str(screens / f"damaged-{how}.png"), full_page=True)
    finally:
        ctx.close()
        served.close()


def test_the_timeline_filters_by_event_group_and_tool(page: Any, served: Served, built: Built,
                                                      screens: Path) -> None:
    page.goto(f"{served.base}/s/{built.clean}")
    page.wait_for_selector("#e1")
    everything = page.locator("#timeline article.ev").count()
    for group in ("message", "structure", "session", "other"):
        page.uncheck(f'#evfilters input[value="{group}"]')
    page.select_option("#tool", "bash")  # filtered on the server: the timeline is read again
    page.locator('#timeline article.ev[data-type="tool.result"]').first.wait_for()
    page.wait_for_selector('#timeline article.ev[data-type="user.message"]', state="detached")
    kinds = page.locator("#timeline article.ev").evaluate_all("a => a.map(x => [x.dataset.type, x.dataset.tool])")
    assert kinds and all(tool == "bash" and kind.startswith("tool.") for kind, tool in kinds), kinds
    assert len(kinds) < everything
    page.screenshot(path=str(screens / "session-filtered.png"), full_page=True)


def test_a_sessions_branch_tree_is_drawn_and_its_entries_reached(browser: Any, tmp_path: Path, screens: Path) -> None:
    from journal.session.branch import BranchTree

    path = str(tmp_path / "branched")
    with BranchTree.open(path, create=True) as tree:
        first = tree.append("user.message", {"text": "Start here"}).event.data["entryId"]
        tree.append("assistant.message", {"text": "first answer"})
        tree.switch(first)
        other = tree.append("assistant.message", {"text": "a second answer on another branch"})
        leaf, leaf_seq = other.event.data["entryId"], other.event.seq
    served = Served(path, str(tmp_path / "cache"))
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(WAIT_MS)
        pg.goto(served.server.url)
        branches = pg.locator("#facts ul.branches")
        branches.wait_for()
        assert "2 leaves" in pg.inner_text("#facts")
        here = pg.locator("#facts ul.branches li.here > a").last
        assert here.inner_text() == leaf
        pg.screenshot(path=str(screens / "session-branches.png"), full_page=True)
        here.click()
        pg.wait_for_url(f"**#e{leaf_seq}")
        assert pg.evaluate("document.activeElement.id") == f"e{leaf_seq}"
    finally:
        ctx.close()
        served.close()


def test_an_event_far_down_a_long_session_is_reached_by_its_address(browser: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "long")
    with open_session(path, create=True) as s:
        for i in range(3000):
            s.append("user.message", {"text": f"message {i}"})
        far = s.journal.last_seq - 5
    served = Served(path, str(tmp_path / "cache"))
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        pg = ctx.new_page()
        pg.set_default_timeout(WAIT_MS)
        pg.goto(served.server.url)
        (sid,) = served.viewer.entries()
        pg.goto(f"{served.base}/s/{sid}#e{far}")  # past the first page of 200: loaded until it is there
        pg.wait_for_selector(f"#e{far}")
        pg.locator(f"#e{far}:focus").wait_for()  # the page went to it
        assert f"message {far - 2}" in pg.inner_text(f"#e{far}")
    finally:
        ctx.close()
        served.close()
