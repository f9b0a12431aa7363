"""The crash harness over the Claude Agent SDK store (journal/crashsim/workloads/claude_sdk.py).

Every power-loss state of a run of append calls (200 per model; 2,000 in a campaign) is
recovered and checked: the core invariants on the transcript's journal (every acknowledged
batch where it was), every record one whole batch in order, and the store on the image loading
exactly those batches, listing the session and taking a new batch. A store whose batches are not
synced before the call returns is caught.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest

pytest.importorskip("claude_agent_sdk")

from journal.adapters import claude_agent_sdk as adapter
from journal.crashsim import campaign
from journal.crashsim.workloads import claude_sdk
from tests.conftest import report_count
from tests.on_demand_workloads import failures, registered_for_module

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES = 2_000 if CAMPAIGN else 200
SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))


@pytest.fixture(scope="module")
def registered() -> Iterator[tuple[str, ...]]:
    """The workload, registered for this module only (other tests' runs of every registered
    workload must not pick it up)."""
    yield from registered_for_module(claude_sdk.register)



@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_in_the_middle_of_appends(registered: tuple[str, ...], model: str, tmp_path: pathlib.Path) -> None:
    assert registered == (claude_sdk.NAME,)
    (tally,) = campaign.run_campaign([claude_sdk.NAME], [model], STATES, SEED, save_dir=str(tmp_path))
    assert tally.states >= STATES, f"{model}: {tally.states} distinct states in {tally.runs} runs"
    assert tally.violations == 0, failures(tally)
    report_count(f"Claude Agent SDK store crash states ({model})", tally.states)


def test_catches_a_store_that_acknowledges_before_the_sync(registered: tuple[str, ...],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adapter, "DURABILITY", "flush")
    (tally,) = campaign.run_campaign([claude_sdk.NAME], ["psow"], STATES, SEED, stop_on_failure=True)
    assert tally.violations > 0
