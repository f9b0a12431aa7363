"""Review of issue 33's fork state: ``journal.fork.snap`` is a name the fork makes in a child, so
a symbolic link there was planted; like the session snapshot, it is not followed (a fork reads
no file outside the journal because of it) and the fork point is checked from seq 1 instead."""

from __future__ import annotations

import os
from pathlib import Path

from journal import session
from journal.session import fork as forking

TIME = "2026-01-01T00:00:00.000Z"


def append(path: str, n: int, tag: str, create: bool = False) -> int:
    seq = 0
    with session.open(path, create=create, session_id="s-root" if create else None) as s:
        for k in range(n):
            seq = s.append("user.message", {"text": f"{tag} {k}"}, time=TIME).event.seq
    return seq


def test_a_link_at_the_fork_snapshot_name_is_not_followed(tmp_path: Path) -> None:
    root, child = str(tmp_path / "c0"), str(tmp_path / "c1")
    at = append(root, 10, "root", create=True)
    forking.fork(root, child, at, origin="test", time=TIME)
    at = append(child, 3, "c1")
    own = os.path.join(child, forking.FORK_SNAPSHOT_NAME)
    # The child's own fork state, genuine, used when it is a file: checked from its header.
    assert forking.fork(child, str(tmp_path / "direct"), at, origin="test", time=TIME).checked_from_seq > 0
    outside = str(tmp_path / "elsewhere.snap")
    os.rename(own, outside)
    os.symlink(outside, own)
    got = forking.fork(child, str(tmp_path / "c2"), at, origin="test", time=TIME)
    assert got.checked_from_seq == 0
