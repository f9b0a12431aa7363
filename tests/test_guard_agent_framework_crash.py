"""The crash harness over the Agent Framework guard (journal/crashsim/workloads/guard_agent_framework.py).

A real agent run whose guarded tool is called a few times on the harness's simulated file system;
every power-loss state (200 per model) is recovered and checked as the other frameworks' guard
workloads are (tests/test_guard_crash_frameworks.py): the core invariants on the guard's journal,
the stored history and the guard's loading the same twice, the guard's verdicts against its
records, and a second life that never runs a call again without an answer. A guard whose intent
is not synced is caught.
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
from journal.crashsim.workloads import guard_agent_framework as gaf
from journal.session.toolguard import GuardScope
from tests.on_demand_workloads import failures, registered_for_module

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES = 2_000 if CAMPAIGN else 200
SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))

pytest.importorskip("agent_framework", reason="the agent-framework extra is not installed "
                                              "(pip install -e '.[agent-framework]')")


@pytest.fixture(scope="module")
def registered() -> Iterator[tuple[str, ...]]:
    yield from registered_for_module(gaf.register)



@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_over_the_agent_framework_guard(registered: tuple[str, ...], model: str,
                                                   tmp_path: pathlib.Path) -> None:
    assert registered == (gaf.NAME,)
    (tally,) = campaign.run_campaign([gaf.NAME], [model], STATES, SEED, save_dir=str(tmp_path))
    assert tally.states >= STATES, f"{model}: {tally.states} distinct states in {tally.runs} runs"
    assert tally.violations == 0, failures(tally)


@pytest.fixture
def intent_not_synced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard appends the intent batch at "buffered": the tool runs before its intent is durable."""
    append = GuardScope._append

    def broken(self: GuardScope, events: list[Any], keys: list[str | None], durability: Any, what: str) -> None:
        if any(e.type == "tool.requested" for e in events):
            durability = "buffered"
        append(self, events, keys, durability, what)

    monkeypatch.setattr(GuardScope, "_append", broken)


def test_catches_a_guard_whose_intent_is_not_synced(registered: tuple[str, ...], intent_not_synced: None) -> None:
    (tally,) = campaign.run_campaign([gaf.NAME], ["psow"], STATES, SEED, stop_on_failure=True)
    assert tally.violations > 0
    assert "without an answer" in " ".join(tally.failures[0].violations), tally.failures[0].violations


def test_a_missing_framework_registers_nothing() -> None:
    code = ("import sys\nsys.modules['agent_framework'] = None\n"
            "from journal.crashsim.workloads import guard_agent_framework as g, WORKLOADS\n"
            "print(repr(g.register()), g.NAME in WORKLOADS)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["()", "False"], proc.stdout
