"""The viewer on crafted journals (review 32): a token count too large for a float, or two
usages summing past the float range, and a branch tree whose entry ids repeat. Each once
stopped the viewer: the first aborted every indexer pass at that session (the sessions after it
never indexed, so never searchable) and its page failed with an OverflowError; the second drew
an entry's subtree once per record naming it, a count doubling per level (three records made
it 2^200 nodes, so the facts panel never came back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from journal.session.store import SessionStore
from journal.view.model import Summary
from journal.view.render import branch_tree
from journal.view.server import Viewer
from journal.view.source import open_source


def test_usage_past_the_float_range_is_shown_and_indexed_without_stopping_the_viewer(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path / "store"))
    sids = []
    for n, usage in enumerate(({"input_tokens": 10**400}, {"input_tokens": 1e308, "cost": 1e308},
                               {"input_tokens": 7})):
        with store.create(workspace={"path": "/w"}, session_id=f"crafted{n}") as s:
            s.append("user.message", {"text": "hello pelican"})
            s.append("turn.started", turn_id="t")
            for _ in range(2):  # 1e308 twice sums to infinity
                s.append("assistant.message", {"text": "x", "usage": usage}, turn_id="t")
            s.append("turn.ended", {"reason": "completed"}, turn_id="t")
            sids.append(f"crafted{n}")
    viewer = Viewer(open_source(str(tmp_path / "store")), str(tmp_path / "cache"), index_in_background=False)
    try:
        viewer.indexer.one_pass()  # raised OverflowError at the first crafted session before
        assert viewer.indexer.errors == {}
        assert set(viewer.summaries()) == set(sids)  # every session indexed, the sane one too
        assert {h.session_id for h in viewer.index.search("pelican", 10)} == set(sids)
        for sid in sids:
            assert "hello pelican" in viewer.session_page(sid)
            assert "<dl>" in viewer.summary(sid)["facts_html"]
        assert "in 14 tok" in viewer.session_page(sids[2])  # a sane count is shown as before
    finally:
        viewer.close()


def test_a_branch_tree_whose_entry_ids_repeat_draws_each_entry_once() -> None:
    # Two records per level naming the same id, each child of the level above: the tree has
    # 2 * LEVELS + 1 records, which the old drawing multiplied into 2^(LEVELS+1) - 2 nodes.
    levels = 12
    entries: list[list[object]] = [["root", None, 1]]
    for n in range(levels):
        parent = "root" if n == 0 else f"id{n - 1}"
        entries += [[f"id{n}", parent, 2 + 2 * n], [f"id{n}", parent, 3 + 2 * n]]
    s = Summary()
    s.branch_entries = entries
    s.branch_leaf = f"id{levels - 1}"
    html = branch_tree(s)
    assert html.count("<li") <= len(entries)
    assert f">id{levels - 1}</a>" in html  # the deepest level is still drawn

    # An id that is its own parent (a cycle through a repeated id): bounded too.
    s2 = Summary()
    s2.branch_entries = [["X", None, 1], ["X", "X", 2], ["X", "X", 3]]
    s2.branch_leaf = "X"
    assert branch_tree(s2).count("<li") <= 3


def test_a_lone_journals_search_index_is_never_written_inside_its_directory(tmp_path: Path) -> None:
    from journal.session import open as open_session
    from journal.view.searchindex import CacheLocationError

    path = tmp_path / "lone"
    with open_session(str(path), create=True) as s:
        s.append("user.message", {"text": "hello"})
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(CacheLocationError):
        Viewer(open_source(str(path)), str(path / "cache"), index_in_background=False)
    assert sorted(p.name for p in path.iterdir()) == before  # no cache directory made in the journal's


def test_a_session_the_indexer_fails_on_stops_only_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any fault folding one crafted session (the float overflow above was one) is said for that
    # session; the pass goes on to the others, which stay searchable.
    from journal.view import model

    store = SessionStore(str(tmp_path / "store"))
    for sid in ("good1", "good2", "bad"):  # the last updated is indexed first
        with store.create(workspace={"path": "/w"}, session_id=sid) as s:
            s.append("user.message", {"text": f"{sid} heron"})
    feed = model.Folder.feed

    def failing(self: model.Folder, rec: object) -> model.Item:
        it = feed(self, rec)  # type: ignore[arg-type]
        if it.raw.get("sessionId") == "bad" or it.data.get("text") == "bad heron":
            raise RuntimeError("a fault folding this session")
        return it

    monkeypatch.setattr(model.Folder, "feed", failing)
    viewer = Viewer(open_source(str(tmp_path / "store")), str(tmp_path / "cache"), index_in_background=False)
    try:
        viewer.indexer.one_pass()
        assert set(viewer.summaries()) == {"good1", "good2"}
        assert "a fault folding this session" in viewer.indexer.errors["bad"]
    finally:
        viewer.close()
