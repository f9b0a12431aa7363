"""Opening the viewer in a browser without its token on the browser's command line.

A browser started with the viewer's URL as an argument carries the token in its argv, which any
local user can read (/proc/<pid>/cmdline on Linux, ``ps`` elsewhere) and then read every session
the viewer serves. So the browser is given a file instead: a page in a directory only this user
can enter (mode 0700), itself 0600, that sends the browser on to the URL. The file is removed
when the viewer stops. ``journal view`` still prints the URL on its own standard output.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

LAUNCH_FILE_NAME = "open.html"


def write_launch_file(url: str) -> Path:
    """A page that redirects to ``url``, in a new private directory; the caller removes it with
    ``remove_launch_file``."""
    where = Path(tempfile.mkdtemp(prefix="journal-view-"))  # 0700: mkdtemp's own mode
    path = where / LAUNCH_FILE_NAME
    target = html.escape(url, quote=True)
    page = (
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"refresh\" content=\"0;url={target}\"><title>journal view</title></head>"
        f"<body><a href=\"{target}\">Open journal view</a></body></html>\n"
    ).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, page)
        finally:
            os.close(fd)
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)
        raise
    return path


def remove_launch_file(path: Path) -> None:
    """Remove the page and its directory (nothing else was put there)."""
    shutil.rmtree(path.parent, ignore_errors=True)


def open_in_browser(url: str, open_browser: Callable[[str], object]) -> Path:
    """Open ``url`` through a launch file (``open_browser`` is webbrowser.open in the command);
    returns the file, for ``remove_launch_file`` once the viewer stops."""
    path = write_launch_file(url)
    try:
        open_browser(path.as_uri())
    except BaseException:
        remove_launch_file(path)
        raise
    return path


__all__ = ["LAUNCH_FILE_NAME", "open_in_browser", "remove_launch_file", "write_launch_file"]
