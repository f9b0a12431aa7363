"""The crash harness's check of the session-open workload can fail (the workload itself runs in
tests/test_crash_harness.py with every built-in one: journal/crashsim/workloads/session_open.py)."""

from __future__ import annotations

import pytest

from journal.crashsim import campaign


def test_the_check_catches_a_snapshot_saved_before_its_records_are_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the journal sync that precedes a save, a crash can leave a snapshot naming records
    the crash took: the check sees it (the snapshot on disk is not the log's, or not used)."""
    from journal.session import session as session_mod

    real = session_mod.Session.save_snapshot

    def unsynced(self: session_mod.Session) -> bool:
        j = self.journal
        sync = j.sync
        j.sync = lambda: None  # type: ignore[method-assign]
        try:
            return real(self)
        finally:
            j.sync = sync  # type: ignore[method-assign]

    monkeypatch.setattr(session_mod.Session, "save_snapshot", unsynced)
    (tally,) = campaign.run_campaign(["session-open"], ["psow"], 120, seed=21)
    assert tally.failures, "the check did not see a snapshot ahead of the durable journal"
