"""The crash harness over each framework guard (journal/crashsim/workloads/guard_frameworks.py).

One workload per framework: a real framework run whose guarded tool is called a few times on the
harness's simulated file system; every power-loss state (200 per workload and model) is
recovered and checked: the core invariants on the guard's journal, the stored histories loading
the same twice, the guard's verdicts against its records, and a second life of the run that
never runs a call again without an answer. A workload whose framework is not installed is
skipped. A guard whose intent is not synced is caught (the call runs again after a power loss).
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
from journal.crashsim.workloads import guard_frameworks as gf
from journal.session.toolguard import GuardScope
from tests.on_demand_workloads import failures, registered_for_module

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES = 2_000 if CAMPAIGN else 200  # per workload and model, like the toolguard workload
SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))
FRAMEWORK = {"guard-langgraph": "langgraph", "guard-openai-agents": "agents", "guard-adk": "google.adk",
             "guard-pydantic-ai": "pydantic_ai"}


@pytest.fixture(scope="module")
def registered() -> Iterator[tuple[str, ...]]:
    """The framework workloads, registered for this module only (other tests' runs of every
    registered workload must not pick them up)."""
    yield from registered_for_module(gf.register)



def test_every_framework_has_a_workload() -> None:
    assert set(gf.NAMES) == set(FRAMEWORK)


@pytest.mark.parametrize("model", ["psow", "npsow"])
@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_power_loss_over_a_framework_guard(registered: tuple[str, ...], name: str, model: str,
                                           tmp_path: pathlib.Path) -> None:
    pytest.importorskip(FRAMEWORK[name])
    assert name in registered
    (tally,) = campaign.run_campaign([name], [model], STATES, SEED, save_dir=str(tmp_path))
    assert tally.states >= STATES, f"{name}/{model}: {tally.states} distinct states in {tally.runs} runs"
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


@pytest.mark.parametrize("name", sorted(FRAMEWORK))
def test_catches_a_guard_whose_intent_is_not_synced(registered: tuple[str, ...], intent_not_synced: None,
                                                    name: str) -> None:
    pytest.importorskip(FRAMEWORK[name])
    (tally,) = campaign.run_campaign([name], ["psow"], STATES, SEED, stop_on_failure=True)
    assert tally.violations > 0
    assert "without an answer" in " ".join(tally.failures[0].violations), tally.failures[0].violations


def test_a_missing_framework_is_skipped_not_an_error() -> None:
    """With every framework blocked from import, the module imports and registers nothing."""
    code = ("import sys\n"
            + "".join(f"sys.modules[{m!r}] = None\n" for m in FRAMEWORK.values())
            + "from journal.crashsim.workloads import guard_frameworks as gf, WORKLOADS\n"
            "print(repr(gf.register()), sorted(n for n in WORKLOADS if n.startswith('guard-')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["()", "[]"], proc.stdout


@pytest.mark.parametrize(("name", "framework"), [("guard-langgraph", "langgraph"), ("guard-strands", "strands"),
                                               ("guard-agent-framework", "agent_framework"),
                                               ("claude-sdk-store", "claude_agent_sdk")])
def test_the_command_lists_and_runs_a_framework_workload_by_name(name: str, framework: str) -> None:
    """`journal crash-test` leaves them out of its default run (the built-in set) but lists them
    and runs one it is given by name: the workloads are not registered until it asks."""
    pytest.importorskip(framework)
    listed = subprocess.run([sys.executable, "-m", "journal", "crash-test", "--list"], capture_output=True,
                            text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert name in listed.stdout
    ran = subprocess.run([sys.executable, "-m", "journal", "crash-test", "--workload", name,
                          "--states", "5", "--model", "psow", "--no-faults", "--kill-rounds", "0"],
                         capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "OK: 0 violation(s)" in ran.stdout
