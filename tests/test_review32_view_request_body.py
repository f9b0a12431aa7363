"""A request with a body the viewer never reads (a POST it refuses, a GET carrying one) ends its
connection (review 32). Before, the unread body was parsed as the next request on the same
keep-alive connection: a form another page posts could have the viewer answer requests of the
poster's writing on a connection the browser goes on using."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from journal.view.server import Viewer, ViewerServer
from journal.view.source import open_source
from tests.view_store import build_store

READ_TIMEOUT_S = 30.0  # a hang guard only: the server closes the connection long before


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ViewerServer]:
    built = build_store(str(tmp_path / "store"))
    srv = ViewerServer(Viewer(open_source(built.root), str(tmp_path / "cache"), index_in_background=False))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(10)


def _exchange(srv: ViewerServer, method: str) -> bytes:
    port = srv.server_address[1]
    inner = (f"GET /static/app.js?token={srv.viewer.token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
             "Connection: close\r\n\r\n").encode()
    outer = (f"{method} / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n"
             f"Content-Length: {len(inner)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S) as s:
        s.sendall(outer + inner)
        got = b""
        while chunk := s.recv(65536):  # ends when the server closes the connection
            got += chunk
    return got


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_body_the_viewer_never_reads_is_never_taken_for_another_request(server: ViewerServer,
                                                                          method: str) -> None:
    got = _exchange(server, method)
    assert got.count(b"HTTP/1.1 ") == 1, got[:400]  # one answer: the body was no request
