"""Repair under the crash harness: a power loss at any point of a repair is repaired to the same events."""

from __future__ import annotations

import os
import random

import pytest

campaign = pytest.importorskip("journal.crashsim.campaign")
crash_workload = pytest.importorskip("journal.session.crash_workload")

STATES = int(os.environ.get("JOURNAL_SESSION_CRASH_STATES", "250"))


@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_inside_repair(model: str) -> None:
    tallies = campaign.run_campaign(["session-repair"], [model], STATES, seed=11)
    (tally,) = tallies
    assert tally.states >= STATES // 2
    assert not tally.failures, [f.violations for f in tally.failures[:3]]


def test_the_check_catches_closers_that_are_not_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.session import closers

    monkeypatch.setattr(closers, "_time", lambda d: str(random.random()))
    (tally,) = campaign.run_campaign(["session-repair"], ["psow"], 40, seed=3)
    assert tally.failures and "uncrashed repair" in " ".join(tally.failures[0].violations)
