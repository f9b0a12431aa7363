"""Training lists a large store's sessions by name alone. It samples at most
SESSIONS_SAMPLED_MAX of them, but listed them through the store's listing, which stats every
entry to leave out links: 200,000 sessions took 4.9 s before the first progress call (~25 s for
10^6), now 0.8 s. A link among the sampled ones is still never read: its open is refused and the
session skipped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from journal.fs import OsFileSystem
from journal.session import dictionaries as D
from journal.session.store import SESSIONS_DIR, SessionStore

SESSIONS = 300


class CountingFs(OsFileSystem):
    def __init__(self) -> None:
        super().__init__()
        self.stats = 0

    def is_link(self, path: str) -> bool:
        self.stats += 1
        return super().is_link(path)


def test_listing_stats_the_sampled_sessions_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fs = CountingFs()
    st = SessionStore(tmp_path / "store", fs=fs)
    for i in range(SESSIONS):
        os.mkdir(os.path.join(st.root, SESSIONS_DIR, f"s-{i:06d}"))
    monkeypatch.setattr(D, "SESSIONS_SAMPLED_MAX", 16)
    fs.stats = 0
    ids = D._session_ids(st)
    assert len(ids) == 16 and ids[0] == "s-000000"
    assert fs.stats <= 16, fs.stats  # before: one per session listed (300)


def test_a_link_among_the_sessions_is_still_never_read(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    s = st.create(workspace={"path": "/repo"})
    try:
        s.append("user.message", {"text": "mine " * 50})
    finally:
        s.close()
    elsewhere = SessionStore(tmp_path / "elsewhere")
    t = elsewhere.create(workspace={"path": "/secret"})
    try:
        for _ in range(100):
            t.append("user.message", {"text": "secret-token " * 50})
    finally:
        t.close()
    os.symlink(os.path.dirname(elsewhere.journal_path(t.store_id)), os.path.join(st.root, SESSIONS_DIR, "s-linked"))
    sample = D._sample(st, D.SAMPLE_BYTES_MAX_DEFAULT, D.SAMPLE_RECORDS_PER_SESSION_MAX, False, None)
    assert sample.sessions == 1  # the link is left out (listed and refused at its open, or not listed)
    assert not any(b"secret-token" in r for r in sample.records)
