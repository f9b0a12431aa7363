"""The crash harness over a session's open, appends and snapshot saves (tests/crash_session_open.py)."""

from __future__ import annotations

import os

import pytest

from journal.crashsim import campaign
from tests import crash_session_open  # noqa: F401 - registers the workload "session-open"

STATES = int(os.environ.get("JOURNAL_SESSION_OPEN_CRASH_STATES", "200"))


@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_while_opening_appending_and_saving_snapshots(model: str) -> None:
    (tally,) = campaign.run_campaign(["session-open"], [model], STATES, seed=21)
    assert tally.states >= STATES
    assert not tally.failures, [f.violations for f in tally.failures[:3]]


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
