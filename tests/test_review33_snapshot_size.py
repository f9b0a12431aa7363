"""Review of issue 33's session snapshot with big data: a save never writes a file the next open
refuses for its size (SNAPSHOT_BYTES_MAX). The limit is made small here instead of writing 2 GiB:
the save and the open read the same module limit."""

from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

from journal import session
from journal.session import snapshot as snap
from journal.session.session import SESSION_SNAPSHOT_NAME, SnapshotWriteWarning
from tests.session_gen import FIXED_TIME, add_turns, write_session


def test_a_snapshot_over_the_read_limit_is_not_saved_over_a_usable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "s"
    s = write_session(str(p), 3, 6)
    assert s.save_snapshot()
    first_seq = s.state.last_seq
    usable = (p / SESSION_SNAPSHOT_NAME).read_bytes()
    # The history only grows: the next save is larger than this one, and over the limit.
    monkeypatch.setattr(snap, "SNAPSHOT_BYTES_MAX", len(usable))
    add_turns(s, random.Random(4), 6, 100)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert s.save_snapshot() is False
        s.close()
    assert [w.category for w in caught] == [SnapshotWriteWarning]
    assert (p / SESSION_SNAPSHOT_NAME).read_bytes() == usable  # the usable one, left in place
    with session.open(p, readonly=True, clock=lambda: FIXED_TIME) as r:
        assert r.snapshot_seq == first_seq, r.snapshot_reason
