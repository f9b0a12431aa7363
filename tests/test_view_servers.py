"""`journal view` over a session store on PostgreSQL and on JetStream: listed from the catalog,
searched, a session's closers and fork shown, and nothing of the store changed by viewing."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from journal import session as S
from journal.session import catalog_store as cs
from journal.view.server import Viewer
from journal.view.source import ServerStore, open_source
from tests.backends import Backend, made_or_skipped
from tests.view_store import SEARCH_WORD, build_store


@pytest.fixture(params=("postgres", "nats"))
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def _state(st: cs.CatalogSessionStore) -> tuple[Any, ...]:
    names = sorted(st.backing.names())
    lasts = []
    for n in names:
        with st.backing.open(n, readonly=True) as j:
            lasts.append((n, j.last_seq))
    return tuple(sorted(st.catalog.items(), key=lambda kv: kv[0])), tuple(lasts)


def test_a_server_store_is_listed_searched_and_shown_read_only(server: Backend, tmp_path: pathlib.Path) -> None:
    url = server.store_location()
    st = S.open_store(url)
    assert isinstance(st, cs.CatalogSessionStore)
    try:
        built = build_store(st)
        before = _state(st)
        src = open_source(url)
        assert isinstance(src, ServerStore)
        viewer = Viewer(src, str(tmp_path / "cache"), index_in_background=False)
        viewer.indexer.one_pass()
        assert viewer.indexer.errors == {}
        listing = viewer.listing({"sort": "title", "order": "asc"})
        assert listing["total"] == 3
        by_id = {s["sessionId"]: s for s in listing["sessions"]}
        assert "repaired" in by_id[built.crashed]["status"] and "paused" in by_id[built.crashed]["status"]
        assert by_id[built.child]["parentSessionId"] == built.clean
        hits = viewer.search(SEARCH_WORD)["hits"]
        assert {h["session_id"] for h in hits} == {built.clean}
        page = viewer.session_page(built.crashed)
        assert page.count('class="ev g-tool synthetic"') == 1 and "TOOL_OUTCOME_UNKNOWN" in page
        parent = viewer.session_page(built.clean)
        assert f'class="fork-child" href="/s/{built.child}"' in parent
        summary = viewer.summary(built.crashed)
        assert "TOOL_OUTCOME_UNKNOWN" in summary["gate_html"]
        viewer.close()
        # One session by its journal URL: shown as a store of that one session.
        one_url = url + ("&" if "?" in url else "?") + f"journal={built.crashed}"
        one = Viewer(open_source(one_url), str(tmp_path / "cache-one"), index_in_background=False)
        assert list(one.entries()) == [built.crashed]
        first = one.events(built.crashed, 0, None, "")
        assert first.done and first.html.count("synthetic closer") == 3
        one.close()
        assert _state(st) == before  # the catalog and every journal as they were
    finally:
        st.close()
