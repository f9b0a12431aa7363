"""Review of issue 33's fork: two forks into the same child name at once (a caller retrying a
fork it thinks is lost, say). A fork removes the temp directories a crashed fork of that name
left, and a fork still running has one that looks the same: the second must not remove files of
the first's build while the first goes on to publish it, leaving a child without its prefix."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import journal
from journal import session
from journal.fs import OsFileSystem
from journal.session import fork as forking

TIME = "2026-01-01T00:00:00.000Z"
WAIT_S = 30.0  # a bound on each wait, so a broken interleaving fails instead of hanging


class Hooked:
    """The real file system, with a hook before some calls (not an OsFileSystem: the fork's
    cleanup goes through its calls)."""

    def __init__(self, before: dict[str, Any]) -> None:
        self._fs = OsFileSystem()
        self._before = before

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._fs, name)
        hook = self._before.get(name)
        if hook is None:
            return real

        def call(*args: Any) -> Any:
            return hook(real, *args)

        return call


def test_a_second_fork_of_one_name_leaves_the_first_ones_build_alone(tmp_path: Path) -> None:
    root, child = str(tmp_path / "p"), str(tmp_path / "c")
    with session.open(root, create=True, session_id="s-root", segment_size_bytes=4096) as s:
        for k in range(200):
            at = s.append("user.message", {"text": f"m {k} " + "x" * 60}, time=TIME).event.seq
    with journal.open(root, readonly=True) as j:
        want = [r.payload for r in j.read()][:at]
    a_publishing, b_removed, a_published = threading.Event(), threading.Event(), threading.Event()
    a_tmp: list[str] = []

    def a_rename(real: Any, src: str, dst: str) -> None:
        if dst == child:
            a_tmp.append(src)
            a_publishing.set()
            b_removed.wait(WAIT_S)  # the second fork's cleanup has run by now, or not at all
            real(src, dst)
            a_published.set()
            return
        real(src, dst)

    def b_unlink(real: Any, path: str) -> None:
        real(path)
        if a_tmp and os.path.dirname(path) == a_tmp[0] and not b_removed.is_set():
            b_removed.set()
            a_published.wait(WAIT_S)

    errors: dict[str, BaseException] = {}

    def run(name: str, fs: Hooked) -> None:
        try:
            forking.fork(root, child, at, origin="test", time=TIME, fs=fs)  # type: ignore[arg-type]
        except BaseException as exc:  # the outcome is checked below
            errors[name] = exc
        finally:
            b_removed.set()  # either way, nothing waits on the other any more

    a = threading.Thread(target=run, args=("a", Hooked({"rename": a_rename})))
    a.start()
    assert a_publishing.wait(WAIT_S)
    b = threading.Thread(target=run, args=("b", Hooked({"unlink": b_unlink})))
    b.start()
    b.join(WAIT_S)
    a.join(WAIT_S)
    # One of them made the child (the other failed: the name was taken); whichever it was, the
    # child holds the parent's prefix and its header.
    assert len(errors) <= 1, errors
    with journal.open(child, readonly=True) as j:
        got = [r.payload for r in j.read()]
    assert got[:at] == want and len(got) == at + 1
