"""`journal view` opens the browser on a private file, never on the URL: a browser's command line
is readable by every local user, and the URL holds the token (journal/view/launch.py)."""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import journal
from journal.view.launch import open_in_browser, remove_launch_file

WAIT_S = 60


def test_the_browser_gets_a_private_file_that_leads_to_the_url(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8765/?token=s3cr3t-&-<token>"
    given: list[str] = []
    path = open_in_browser(url, given.append)
    try:
        assert given == [path.as_uri()] and "s3cr3t" not in given[0]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        page = path.read_text()
        assert 'content="0;url=http://127.0.0.1:8765/?token=s3cr3t-&amp;-&lt;token&gt;"' in page
    finally:
        remove_launch_file(path)
    assert not path.parent.exists()


def test_a_browser_that_fails_to_start_leaves_no_file(tmp_path: Path) -> None:
    made: list[str] = []

    def failing(uri: str) -> None:
        made.append(uri)
        raise OSError("no browser")

    try:
        open_in_browser("http://127.0.0.1:1/?token=x", failing)
    except OSError:
        pass
    else:
        raise AssertionError("the browser's failure was swallowed")
    assert made and not Path(made[0].removeprefix("file://")).parent.exists()


def test_the_command_starts_the_browser_without_the_token_and_removes_the_file(tmp_path: Path) -> None:
    with journal.open(tmp_path / "j", create=True) as j:
        j.append({"type": "user", "text": "hello"})
    fifo = tmp_path / "argv"
    os.mkfifo(fifo)
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > "{fifo}"\n')
    browser.chmod(0o700)
    env = dict(os.environ, BROWSER=f"{browser} %s")
    proc = subprocess.Popen([sys.executable, "-m", "journal", "view", str(tmp_path / "j"),
                             "--cache-dir", str(tmp_path / "cache")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        token = urlsplit(url).query.removeprefix("token=")
        assert len(token) > 40
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            got = b""
            deadline = time.monotonic() + WAIT_S
            while True:  # until the browser's script has written its argument and closed the pipe
                ready, _, _ = select.select([fd], [], [], WAIT_S)
                assert ready and time.monotonic() < deadline, "the browser was never started"
                chunk = os.read(fd, 4096)
                if not chunk and got:
                    break
                got += chunk
        finally:
            os.close(fd)
        argv = got.decode()
        assert token not in argv and argv.startswith("file://")
        launch = Path(argv.removeprefix("file://"))
        assert stat.S_IMODE(launch.stat().st_mode) == 0o600 and url.replace("&", "&amp;") in launch.read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert not launch.exists() and not launch.parent.exists()
