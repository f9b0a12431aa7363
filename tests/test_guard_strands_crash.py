"""The crash harness over the Strands guard (journal/crashsim/workloads/guard_strands.py).

A real Strands run whose guarded tool is called a few times on the harness's simulated file
system; every power-loss state (200 per model) is recovered and checked as for the other
frameworks (tests/test_guard_crash_frameworks.py): the core invariants on the guard's journal,
the stored histories loading the same twice, the guard's verdicts against its records, and a
second life (``agent()``, interrupts answered "happened") that never runs a call again without an
answer. A guard whose intent is not synced is caught.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from journal.crashsim import campaign
from journal.crashsim.workloads import guard_strands as gs
from journal.session.toolguard import GuardScope
from tests.guard_harness import missing_framework_reason
from tests.on_demand_workloads import failures, registered_for_module

pytest.importorskip("strands", reason=missing_framework_reason("strands", "strands"))

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES = 2_000 if CAMPAIGN else 200  # per model, like the other framework workloads
SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))


@pytest.fixture(scope="module")
def registered() -> Iterator[tuple[str, ...]]:
    """The workload, registered for this module only (other tests' runs of every registered
    workload must not pick it up)."""
    yield from registered_for_module(gs.register)



@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_over_the_strands_guard(registered: tuple[str, ...], model: str, tmp_path: pathlib.Path) -> None:
    assert registered == (gs.NAME,)
    (tally,) = campaign.run_campaign([gs.NAME], [model], STATES, SEED, save_dir=str(tmp_path))
    assert tally.states >= STATES, f"{model}: {tally.states} distinct states in {tally.runs} runs"
    assert tally.violations == 0, failures(tally)


def test_catches_a_guard_whose_intent_is_not_synced(registered: tuple[str, ...],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    append = GuardScope._append

    def broken(self: GuardScope, events: list[Any], keys: list[str | None], durability: Any, what: str) -> None:
        if any(e.type == "tool.requested" for e in events):
            durability = "buffered"  # the tool runs before its intent is durable
        append(self, events, keys, durability, what)

    monkeypatch.setattr(GuardScope, "_append", broken)
    (tally,) = campaign.run_campaign([gs.NAME], ["psow"], STATES, SEED, stop_on_failure=True)
    assert tally.violations > 0
    assert "without an answer" in " ".join(tally.failures[0].violations), tally.failures[0].violations


def test_without_strands_nothing_is_registered() -> None:
    code = ("import sys\nsys.modules['strands'] = None\n"
            "from journal.crashsim.workloads import guard_strands as gs, WORKLOADS\n"
            "print(repr(gs.register()), 'guard-strands' in WORKLOADS)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["()", "False"], proc.stdout
