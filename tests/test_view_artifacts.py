"""The viewer's artifact route: every artifact reference of an event links to content read
whole and hashed before any of it is served; a damaged, missing, linked or path-like blob is
named and refused, never served."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from journal.session.store import SessionStore
from journal.view.artifacts import DIGEST_RE
from journal.view.server import ARTIFACT_INLINE_BYTES, Viewer, ViewerServer
from journal.view.source import open_source

SCRIPT = "<script>alert('artifact')</script>"
TAIL_MARK = "the-last-line-of-the-long-output"


@dataclass
class Made:
    root: str
    sid: str
    text: str  # the whole output of the tool call (over the inline limit: moved to an artifact)
    text_ref: str
    binary: bytes
    binary_ref: str
    long_ref: str
    absent_ref: str

    def blob(self, ref: str) -> str:
        digest = ref.removeprefix("artifact://")
        return os.path.join(self.root, "artifacts", digest[:2], digest + ".zst")


@pytest.fixture
def made(tmp_path: Path) -> Made:
    root = str(tmp_path / "store")
    store = SessionStore(root)
    text = "".join(f"line {i} {SCRIPT}\n" for i in range(2000))
    binary = bytes(range(256)) * 64
    long = "".join(f"row {i:08d}\n" for i in range((ARTIFACT_INLINE_BYTES * 3 // 2) // 13)) + TAIL_MARK + "\n"
    absent = "artifact://" + hashlib.sha256(b"never stored").hexdigest()
    with store.create(workspace={"path": "/repo"}) as s:
        sid = s.session_id
        s.append("user.message", {"text": "run it"})
        s.append("tool.requested", {"tool": "bash", "args": {"cmd": "cat big"}}, tool_call_id="c1")
        fields = store.artifacts.offload(text)  # the session layer's own move of a large output
        assert fields.get("truncated") is True
        s.append("tool.result", {"status": "ok", **fields}, tool_call_id="c1")
        binary_ref = store.artifacts.put(binary)
        long_ref = store.artifacts.put(long.encode())
        s.append("assistant.message", {"text": f"a core dump {binary_ref}, a log {long_ref}, and {absent}"})
    return Made(os.path.realpath(root), sid, text, fields["outputRef"], binary, binary_ref, long_ref, absent)


@pytest.fixture
def server(made: Made, tmp_path: Path) -> Iterator[ViewerServer]:
    viewer = Viewer(open_source(made.root), str(tmp_path / "cache"), index_in_background=False)
    srv = ViewerServer(viewer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


@dataclass
class Got:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def get(srv: ViewerServer, path: str, auth: bool = True, host: str | None = None) -> Got:
    port = srv.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if auth:
        headers["Cookie"] = f"{srv.cookie_name}={srv.viewer.token}"
    c.request("GET", path, headers=headers)
    r = c.getresponse()
    body = r.read()
    c.close()
    return Got(r.status, {k.lower(): v for k, v in r.getheaders()}, body)


def hexof(ref: str) -> str:
    return ref.removeprefix("artifact://")


def test_each_reference_links_to_a_route_serving_exactly_its_bytes(server: ViewerServer, made: Made) -> None:
    page = get(server, f"/s/{made.sid}")
    assert page.status == 200
    for ref in (made.text_ref, made.binary_ref, made.long_ref, made.absent_ref):
        assert f'href="/artifact/{hexof(ref)}"' in page.text
    assert "(the whole output)" in page.text and f"{len(made.text.encode()):,} bytes" in page.text
    for ref, content in ((made.text_ref, made.text.encode()), (made.binary_ref, made.binary)):
        raw = get(server, f"/artifact/{hexof(ref)}/raw")
        assert raw.status == 200 and raw.body == content
        assert raw.headers["content-type"] == "application/octet-stream"
        assert raw.headers["content-disposition"].startswith("attachment")
        assert raw.headers["x-content-type-options"] == "nosniff"
        status = json.loads(get(server, f"/api/artifact/{hexof(ref)}").body)
        assert status["state"] == "verified" and status["size"] == len(content)
        assert status["badge"] == "artifact verified"


def test_text_is_escaped_in_its_page_and_binary_is_never_shown(server: ViewerServer, made: Made) -> None:
    shown = get(server, f"/artifact/{hexof(made.text_ref)}")
    assert shown.status == 200 and shown.headers["content-type"].startswith("text/html")
    assert shown.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in shown.headers["content-security-policy"]
    assert SCRIPT not in shown.text
    assert "&lt;script&gt;alert(&#x27;artifact&#x27;)&lt;/script&gt;" in shown.text
    assert "artifact verified" in shown.text and f"{len(made.text.encode()):,} bytes" in shown.text
    binary = get(server, f"/artifact/{hexof(made.binary_ref)}")
    assert binary.status == 200 and "not UTF-8" in binary.text
    assert made.binary[:64].decode("latin-1") not in binary.text


def test_long_text_is_shown_one_mib_a_page(server: ViewerServer, made: Made) -> None:
    first = get(server, f"/artifact/{hexof(made.long_ref)}")
    assert first.status == 200 and "row 00000000" in first.text and TAIL_MARK not in first.text
    assert f"?offset={ARTIFACT_INLINE_BYTES}" in first.text
    second = get(server, f"/artifact/{hexof(made.long_ref)}?offset={ARTIFACT_INLINE_BYTES}")
    assert second.status == 200 and TAIL_MARK in second.text and "row 00000000" not in second.text


def test_a_character_a_page_boundary_cuts_is_shown_whole_once(server: ViewerServer, made: Made) -> None:
    n = ARTIFACT_INLINE_BYTES // 2 + 10
    ref = SessionStore(made.root).artifacts.put(("x" + "é" * n).encode())  # 1 MiB falls inside an é
    first = get(server, f"/artifact/{hexof(ref)}")
    nxt = first.text.split("?offset=")[1].split('"')[0]
    second = get(server, f"/artifact/{hexof(ref)}?offset={nxt}")
    assert first.status == second.status == 200
    assert "\ufffd" not in first.text + second.text
    assert first.text.count("é") + second.text.count("é") == n


def _replace_blob(path: str, content: bytes) -> None:
    """A blob rewritten beside and renamed over the original: a new inode, so nothing kept
    about the old one can stand for it."""
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(zstandard.ZstdCompressor(write_checksum=True).compress(content))
    os.replace(tmp, path)


def test_a_blob_changed_on_disk_is_damaged_and_never_served(server: ViewerServer, made: Made) -> None:
    digest = hexof(made.text_ref)
    assert json.loads(get(server, f"/api/artifact/{digest}").body)["state"] == "verified"  # a verdict kept
    forged = made.text.replace("line 7 ", "LINE 7 ").encode()
    _replace_blob(made.blob(made.text_ref), forged)
    for path in (f"/artifact/{digest}", f"/artifact/{digest}/raw"):
        got = get(server, path)
        assert got.status == 422, (path, got.status)
        assert "artifact damaged: its content does not match its hash" in got.text
        assert b"LINE 7" not in got.body
    status = json.loads(get(server, f"/api/artifact/{digest}").body)
    assert status["state"] == "damaged" and status["badge"].startswith("artifact damaged: ")
    # The page shows the verdict now known, beside the link.
    assert "artifact damaged: its content does not match its hash" in get(server, f"/s/{made.sid}").text
    # Bytes that do not decompress at all are damaged too, with zstd's reason.
    with open(made.blob(made.binary_ref), "r+b") as f:
        f.write(b"not zstd")
    got = get(server, f"/artifact/{hexof(made.binary_ref)}/raw")
    assert got.status == 422 and "does not decompress" in got.text and made.binary not in got.body


def test_a_blob_changed_between_the_check_and_the_sending_is_never_a_whole_download(
        server: ViewerServer, made: Made, monkeypatch: pytest.MonkeyPatch) -> None:
    """The download reads the blob twice: the check, then the sending. A blob replaced with other
    bytes of the same size in between must not reach its Content-Length."""
    digest = hexof(made.long_ref)
    reader = server.viewer.artifacts
    original = type(reader).check
    forged = get(server, f"/artifact/{digest}/raw").body.replace(b"row 00000007", b"ROW 00000007")
    calls: list[bool] = []

    def check(self: object, d: str, window: object = None, sink: object = None) -> object:
        got = original(reader, d, window, sink)  # type: ignore[arg-type]
        if sink is None and not calls:  # the check passed: now the blob changes under the download
            calls.append(True)
            _replace_blob(made.blob(made.long_ref), forged)
        return got

    monkeypatch.setattr(type(reader), "check", check)
    port = server.server_address[1]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", f"/artifact/{digest}/raw",
              headers={"Host": f"127.0.0.1:{port}", "Cookie": f"{server.cookie_name}={server.viewer.token}"})
    r = c.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length") or 0) == len(forged)
    with pytest.raises(http.client.IncompleteRead) as got:
        r.read()
    assert len(got.value.partial) < len(forged) and calls == [True]
    c.close()


def test_a_missing_blob_is_a_404_that_says_so(server: ViewerServer, made: Made) -> None:
    for path in (f"/artifact/{hexof(made.absent_ref)}", f"/artifact/{hexof(made.absent_ref)}/raw"):
        got = get(server, path)
        assert got.status == 404 and "artifact missing" in got.text and "not in the artifact store" in got.text
    assert json.loads(get(server, f"/api/artifact/{hexof(made.absent_ref)}").body)["badge"] == "artifact missing"


def test_a_digest_with_a_path_is_refused(server: ViewerServer, made: Made) -> None:
    digest = hexof(made.text_ref)
    for path in (f"/artifact/..%2F..%2F{digest}", f"/artifact/{digest.upper()}", f"/artifact/{digest[:63]}",
                 f"/artifact/{digest}%2F..", "/api/artifact/..%2f..%2fetc%2fpasswd",
                 f"/artifact/{digest[:2]}%2F{digest}", "/artifact/%2E%2E", "/artifact/"):
        got = get(server, path)
        assert got.status == 400 and "64 lowercase hex digits" in got.text, (path, got.status)
    for path in ("/artifact/../../etc/passwd", f"/artifact/{digest}/../raw", f"/artifact/x/{digest}"):
        got = get(server, path)
        assert got.status in (400, 404) and got.body != made.text.encode(), path
    assert DIGEST_RE.fullmatch(digest) and not DIGEST_RE.fullmatch("../" + digest[3:])


def test_a_symlinked_blob_or_directory_is_refused(server: ViewerServer, made: Made, tmp_path: Path) -> None:
    digest = hexof(made.text_ref)
    blob = made.blob(made.text_ref)
    elsewhere = str(tmp_path / "elsewhere.zst")
    shutil.copyfile(blob, elsewhere)  # a good blob: a link to it is refused all the same
    os.unlink(blob)
    os.symlink(elsewhere, blob)
    for path in (f"/artifact/{digest}", f"/artifact/{digest}/raw"):
        got = get(server, path)
        assert got.status == 403 and got.body != made.text.encode(), path
        assert f"artifacts/{digest[:2]}/{digest}.zst is a symbolic link" in got.text, got.text
    os.unlink(blob)
    shutil.copyfile(elsewhere, blob)
    assert get(server, f"/artifact/{digest}/raw").body == made.text.encode()
    # The shard directory, then the artifacts directory, moved away and linked back.
    for d in (os.path.dirname(blob), os.path.join(made.root, "artifacts")):
        moved = str(tmp_path / ("moved-" + os.path.basename(d)))
        os.rename(d, moved)
        os.symlink(moved, d)
        got = get(server, f"/artifact/{digest}/raw")
        assert got.status == 403 and "symbolic link" in got.text, d
        assert os.path.relpath(d, made.root) + " is a symbolic link" in got.text, got.text
        os.unlink(d)
        os.rename(moved, d)


def test_a_blob_that_is_a_fifo_or_a_directory_is_refused(server: ViewerServer, made: Made) -> None:
    digest = hexof(made.binary_ref)
    blob = made.blob(made.binary_ref)
    os.unlink(blob)
    os.mkfifo(blob)  # opened to read, a FIFO would wait for a writer forever
    got = get(server, f"/artifact/{digest}/raw")
    assert got.status == 403 and "is a FIFO (named pipe), not a blob" in got.text, got.text
    os.unlink(blob)
    os.mkdir(blob)
    got = get(server, f"/artifact/{digest}/raw")
    assert got.status == 403 and "is a directory, not a blob" in got.text, got.text


def test_every_artifact_route_needs_the_token_and_the_host(server: ViewerServer, made: Made) -> None:
    digest = hexof(made.text_ref)
    for path in (f"/artifact/{digest}", f"/artifact/{digest}/raw", f"/api/artifact/{digest}"):
        got = get(server, path, auth=False)
        assert got.status == 403 and got.body != made.text.encode() and b"line 0" not in got.body
        got = get(server, path, host=f"evil.example:{server.server_address[1]}")
        assert got.status == 403 and b"line 0" not in got.body


def test_rendering_the_page_hashes_no_blob(server: ViewerServer, made: Made) -> None:
    page = get(server, f"/s/{made.sid}")
    assert page.text.count('class="badge artifact-check"') == 4  # each one a button that asks
    assert server.viewer.artifacts._verdicts == {}
    get(server, f"/api/artifact/{hexof(made.text_ref)}")
    assert "artifact verified" in get(server, f"/s/{made.sid}").text  # now known, shown at once


def test_without_an_artifact_store_a_reference_says_it_is_not_available_here(made: Made, tmp_path: Path) -> None:
    journal_dir = os.path.join(made.root, "sessions", made.sid, "journal")
    viewer = Viewer(open_source(journal_dir), str(tmp_path / "cache1"), index_in_background=False)
    srv = ViewerServer(viewer)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        page = get(srv, f"/s/{made.sid}")
        assert page.status == 200, page.text
        assert "artifact not available here: a single journal has no artifact store" in page.text
        assert f'href="/artifact/{hexof(made.text_ref)}"' not in page.text
        got = get(srv, f"/artifact/{hexof(made.text_ref)}/raw")
        assert got.status == 404 and "no artifact store" in got.text and got.body != made.text.encode()
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)
