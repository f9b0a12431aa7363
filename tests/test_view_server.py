"""`journal view` without a browser: the security checks, read-only viewing (the store's bytes
before and after, a writer opening meanwhile), the search index, the standalone page."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from journal.session.store import SessionStore
from journal.view import render_session_html
from journal.view.model import item_of
from journal.view.searchindex import CacheLocationError, SearchIndex, fts_query
from journal.view.server import Viewer, ViewerServer
from journal.view.source import open_source
from tests.view_store import SEARCH_WORD, Built, build_store


@pytest.fixture
def built(tmp_path: Path) -> Built:
    return build_store(str(tmp_path / "store"))


@pytest.fixture
def server(built: Built, tmp_path: Path) -> Iterator[ViewerServer]:
    viewer = Viewer(open_source(built.root), str(tmp_path / "cache"))
    srv = ViewerServer(viewer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    viewer.indexer.idle.wait(60)
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


def request(srv: ViewerServer, path: str, host: str | None = None, cookie: str | None = None,
            method: str = "GET") -> http.client.HTTPResponse:
    port = srv.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if cookie:
        headers["Cookie"] = cookie
    c.request(method, path, headers=headers)
    r = c.getresponse()
    r.read()
    return r


def login(srv: ViewerServer) -> str:
    r = request(srv, f"/?token={srv.viewer.token}")
    assert r.status == 303
    assert r.getheader("Location") == "/"  # the token leaves the address bar
    set_cookie = r.getheader("Set-Cookie") or ""
    assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
    return set_cookie.split(";", 1)[0]


def test_requests_without_the_token_or_with_another_host_are_refused(server: ViewerServer, built: Built) -> None:
    assert request(server, "/").status == 403
    assert request(server, "/api/sessions").status == 403
    assert request(server, "/?token=wrong").status == 403
    with_token = request(server, f"/api/sessions?token={server.viewer.token}&limit=5")
    assert with_token.status == 303 and with_token.getheader("Location") == "/api/sessions?limit=5"
    cookie = login(server)
    assert request(server, "/", cookie=cookie).status == 200
    assert request(server, "/", cookie="journal_view_1=" + server.viewer.token + "x").status == 403
    port = server.server_address[1]
    assert request(server, "/", cookie=cookie, host=f"localhost:{port}").status == 200
    for host in (f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", f"rebind.127.0.0.1.nip.io:{port}"):
        assert request(server, "/", cookie=cookie, host=host).status == 403, host
        assert request(server, f"/?token={server.viewer.token}", host=host).status == 403, host
    assert request(server, "/", cookie=cookie, method="POST").status == 405


def test_no_path_reaches_the_file_system(server: ViewerServer, built: Built) -> None:
    cookie = login(server)
    for path in ("/static/../../../etc/passwd", "/static/%2e%2e/server.py", "/static/", "/s/..%2F..%2Fetc",
                 "/s/%2E%2E", "/api/session/..%2Findex.json/summary", "/s/sessions", "/s/nosuchsession",
                 f"/api/session/{built.clean}/event/0", f"/api/session/{built.clean}/event/99999"):
        assert request(server, path, cookie=cookie).status == 404, path
    assert request(server, "/static/app.js", cookie=cookie).status == 200
    r = request(server, f"/s/{built.clean}", cookie=cookie)
    assert r.status == 200 and "default-src 'none'" in (r.getheader("Content-Security-Policy") or "")


def test_the_search_index_is_never_inside_the_store(built: Built) -> None:
    with pytest.raises(CacheLocationError):
        SearchIndex(os.path.join(built.root, "cache"), built.root)
    with pytest.raises(CacheLocationError):
        Viewer(open_source(built.root), os.path.join(built.root, "sessions", "x"), index_in_background=False)


def _tree_digest(root: str) -> str:
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            p = os.path.join(d, name)
            st = os.lstat(p)
            h.update(f"{os.path.relpath(p, root)} {st.st_mode:o} {st.st_size}\n".encode())
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


@pytest.mark.parametrize("index", ["as the store left it", "missing"])
def test_viewing_changes_no_byte_and_a_writer_opens_meanwhile(built: Built, tmp_path: Path, index: str) -> None:
    if index == "missing":  # the store would rebuild it and write it; the viewer reads the journals instead
        os.unlink(os.path.join(built.root, "index.json"))
    before = _tree_digest(built.root)
    viewer = Viewer(open_source(built.root), str(tmp_path / "cache"))
    srv = ViewerServer(viewer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        viewer.indexer.idle.wait(60)
        cookie = login(srv)
        for sid in (built.clean, built.child, built.crashed):
            for path in (f"/s/{sid}", f"/api/session/{sid}/summary", f"/api/session/{sid}/events?after=0",
                         f"/api/session/{sid}/event/1"):
                assert request(srv, path, cookie=cookie).status == 200, path
        assert request(srv, "/api/sessions?sort=title&order=asc", cookie=cookie).status == 200
        assert request(srv, f"/api/search?q={SEARCH_WORD}", cookie=cookie).status == 200
        # A live tail is open on the crashed session while nothing is written.
        port = srv.server_address[1]
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", f"/api/session/{built.crashed}/stream?after=0", headers={"Host": f"127.0.0.1:{port}",
                                                                                   "Cookie": cookie})
        stream = c.getresponse()
        assert stream.status == 200
        assert stream.fp.readline() == b": following\n"
        assert _tree_digest(built.root) == before
        # ... and a writer opens a session the viewer is following: the viewer holds no lock.
        store = SessionStore(built.root)
        with store.open(built.crashed) as s:
            seq = s.append("user.message", {"text": "written while viewed"}).event.seq
        lines = []
        while not any(b"written while viewed" in x for x in lines):
            lines.append(stream.fp.readline())
        assert any(f'"last": {seq}'.encode() in x for x in lines)
        c.close()
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)


def test_the_store_listing_is_sorted_filtered_and_paged_on_the_server(server: ViewerServer, built: Built) -> None:
    v = server.viewer
    d = v.listing({"sort": "title", "order": "asc", "limit": "2"})
    assert d["total"] == 3 and len(d["sessions"]) == 2
    titles = [s["title"] for s in d["sessions"]]
    assert titles == sorted(titles, key=str.casefold)
    d2 = v.listing({"sort": "title", "order": "asc", "limit": "2", "offset": "2"})
    assert len(d2["sessions"]) == 1 and d2["sessions"][0]["sessionId"] not in {s["sessionId"] for s in d["sessions"]}
    repaired = v.listing({"status": "repaired"})
    assert [s["sessionId"] for s in repaired["sessions"]] == [built.crashed]
    assert "paused" in repaired["sessions"][0]["status"]
    assert v.listing({"text": "deploy"})["total"] == 1
    forked = [s for s in v.listing({})["sessions"] if s["parentSessionId"]]
    assert [(s["sessionId"], s["parentSessionId"], s["forkSeq"]) for s in forked] == [
        (built.child, built.clean, built.fork_seq)]


def test_search_is_incremental_from_the_last_indexed_seq(built: Built, tmp_path: Path) -> None:
    src = open_source(built.root)
    idx = SearchIndex(str(tmp_path / "cache"), built.root)
    s1 = idx.update_session(src, built.clean)
    idx.update_session(src, built.crashed)  # rows after the clean session's: a re-insert would get new rowids
    assert [h.session_id for h in idx.search(SEARCH_WORD)] == [built.clean]
    with idx.connect() as c:
        docs_before, first_row = c.execute("SELECT count(*), min(rowid) FROM docs WHERE sid=?",
                                           (built.clean,)).fetchone()
    store = SessionStore(built.root)
    with store.open(built.clean) as s:
        s.append("user.message", {"text": "zeppelin appears later"})
    s2 = idx.update_session(src, built.clean)
    assert s2.last_seq == s1.last_seq + 1 and s2.events == s1.events + 1
    with idx.connect() as c:
        docs_after, first_after = c.execute("SELECT count(*), min(rowid) FROM docs WHERE sid=?",
                                            (built.clean,)).fetchone()
    assert docs_after == docs_before + 1  # only the new record was read and indexed ...
    assert first_after == first_row  # ... and the earlier ones were left as they were
    assert [h.seq for h in idx.search("zeppelin")] == [s2.last_seq]
    assert fts_query('a" OR b* NEAR(') == '"a" "OR" "b" "NEAR"*'  # no FTS5 syntax of the user's gets through
    assert idx.search('" OR *') == []


def test_the_standalone_page_has_no_script_and_escapes_what_the_journal_holds(tmp_path: Path) -> None:
    from journal.session import open as open_session

    with open_session(str(tmp_path / "j"), create=True) as s:
        s.append("user.message", {"text": "<script>alert(1)</script><img src=x onerror=alert(2)>"})
    import journal

    with journal.open(str(tmp_path / "j"), readonly=True) as j:
        html = render_session_html("s", [item_of(r) for r in j.read()])
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "http://" not in html and "https://" not in html


def test_the_listing_json_names_each_session_once(server: ViewerServer) -> None:
    cookie = login(server)
    port = server.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/api/sessions", headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
    body = json.loads(c.getresponse().read())
    ids = [s["sessionId"] for s in body["sessions"]]
    assert len(ids) == len(set(ids)) == 3


def test_the_command_prints_a_token_url_on_127_0_0_1_and_stops_on_ctrl_c(built: Built, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    from urllib.parse import urlsplit

    proc = subprocess.Popen([sys.executable, "-m", "journal", "view", built.root, "--no-browser",
                             "--cache-dir", str(tmp_path / "cache")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = urlsplit(proc.stdout.readline().strip())
        assert url.hostname == "127.0.0.1" and url.query.startswith("token=") and len(url.query) > 40
        c = http.client.HTTPConnection("127.0.0.1", url.port, timeout=30)
        c.request("GET", "/?" + url.query, headers={"Host": url.netloc})
        assert c.getresponse().status == 303
        c = http.client.HTTPConnection("127.0.0.1", url.port, timeout=30)
        c.request("GET", "/", headers={"Host": url.netloc})
        assert c.getresponse().status == 403
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "read-only" in err and str(tmp_path / "cache") in err


def test_the_command_refuses_what_is_neither_a_store_nor_a_journal(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "empty").mkdir()
    got = subprocess.run([sys.executable, "-m", "journal", "view", str(tmp_path / "empty"), "--no-browser"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode != 0 and "neither a session store" in got.stderr


def test_the_token_redirect_stays_on_this_server(server: ViewerServer) -> None:
    token = server.viewer.token
    # http.server itself makes a leading "//" one "/" (a path on this server).
    for path, where in ((f"//evil.example/?token={token}", "/evil.example/"),
                        (f"/%5Cevil.example?token={token}", "/%5Cevil.example"),
                        (f"/s/abc?token={token}&x=1", "/s/abc?x=1")):
        r = request(server, path)
        assert r.status == 303 and r.getheader("Location") == where, (path, r.getheader("Location"))
    r = request(server, "/\\\\evil.example?token=" + token)
    assert r.status == 303 and r.getheader("Location") == "/"


CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
CORPUS_FORMATS = {"codex-rollout": "codex", "pi-session": "pi", "claude-code": "claude"}


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_every_imported_corpus_session_is_listed_shown_and_searched(tmp_path: Path) -> None:
    """Real agents' logs, imported: each listed with its format as agent and a title, every page
    of its timeline rendered, a word of its title found. The store has no index.json: the viewer
    reads the sessions' headers, and writes no index into the store."""
    from journal.session import importers

    root = tmp_path / "store"
    (root / "sessions").mkdir(parents=True)
    formats = {}
    for folder, fmt in CORPUS_FORMATS.items():
        for src in sorted((CORPUS / folder).glob("*.jsonl")):
            tmp = tmp_path / "tmp" / src.name
            rep = importers.import_file(fmt, str(src), str(tmp), split_joined=True)
            if (root / "sessions" / rep.session_id).exists():
                continue  # the same session read twice (a live log's prefix)
            (root / "sessions" / rep.session_id).mkdir()
            tmp.rename(root / "sessions" / rep.session_id / "journal")
            formats[rep.session_id] = fmt
    assert formats
    viewer = Viewer(open_source(str(root)), str(tmp_path / "cache"), index_in_background=False)
    viewer.indexer.one_pass()
    assert viewer.indexer.errors == {}
    listed = {s["sessionId"]: s for s in viewer.listing({"limit": "500"})["sessions"]}
    assert listed.keys() == formats.keys()
    for sid, fmt in formats.items():
        assert listed[sid]["agent"] == fmt
        after, pages = 0, 0
        while True:
            page = viewer.events(sid, after, None, "")
            pages += 1
            assert 'class="ev damage"' not in page.html
            if page.done:
                break
            after = page.next
        assert "<script" not in page.html
        title = listed[sid]["title"]
        if title:
            words = [w for w in title.split() if w.isalpha() and len(w) > 3][:2]
            if words:
                assert sid in {h["session_id"] for h in viewer.search(" ".join(words))["hits"]} or \
                    len(viewer.search(" ".join(words))["hits"]) == 50, (sid, words)
    assert not (root / "index.json").exists()
    viewer.close()


def test_a_crafted_index_and_crafted_records_are_shown_not_trusted(built: Built, tmp_path: Path) -> None:
    import xxhash

    import journal

    # The store's index with fields of every wrong type (its checksum right, so it is read).
    sessions = {
        built.clean: {"session_id": built.clean, "status": 7, "workspace": [], "created": 1, "updated": {},
                      "last_seq": "many", "parent": ["x"], "fork_seq": "3", "open": "yes"},
        built.child: {"session_id": "someone-else", "last_seq": 10**30, "workspace": {"path": "<b>x</b>"}},
    }
    body = json.dumps({"version": 2, "generation": 99, "sessions": sessions}).encode()
    head = b"journal-session-index 2 99 2\n" + body + b"\n"
    with open(os.path.join(built.root, "index.json"), "wb") as f:
        f.write(head + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(head))
    # A session whose records are no envelopes: bytes, an object without or with a bad type, fields
    # of the wrong types.
    odd = os.path.join(built.root, "sessions", "odd-1", "journal")
    os.makedirs(os.path.dirname(odd))
    with journal.open(odd, create=True) as j:
        for ev in (b"[1, 2]", b"\x00\xffbytes", {"no": "type"}, {"type": ["x"], "data": "y"},
                   {"schemaVersion": 1, "sessionId": "odd-1", "type": "user.message", "data": {"text": ["a", 5]}},
                   {"schemaVersion": 1, "sessionId": "odd-1", "type": "tool.result", "toolCallId": 5,
                    "data": {"status": None, "output": {"deep": [[[]]]}}}):
            j.append(ev)
    viewer = Viewer(open_source(built.root), str(tmp_path / "cache"), index_in_background=False)
    viewer.indexer.one_pass()
    listing = viewer.listing({"sort": "seq"})
    assert {s["sessionId"] for s in listing["sessions"]} == {built.clean, built.child, built.crashed, "odd-1"}
    assert "<b>x</b>" not in listing["html"]
    assert "&lt;b&gt;x&lt;/b&gt;" in listing["html"]
    for sid in (built.clean, built.child, "odd-1"):
        page = viewer.session_page(sid)
        assert "<b>x" not in page
        viewer.summary(sid)
    odd_page = viewer.events("odd-1", 0, None, "")
    assert odd_page.done and odd_page.html.count("<article") == 6
    viewer.close()
