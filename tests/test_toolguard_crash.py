"""The tool guard under the crash harness: a power loss over its intent and result writes (0 violations),
and proof that the workload's check catches a guard that would run an unknown call again."""

from __future__ import annotations

import os

import pytest

import journal.crashsim.workloads.toolguard  # noqa: F401 - registers the "toolguard" workload
from journal.crashsim import campaign

STATES = int(os.environ.get("JOURNAL_TOOLGUARD_CRASH_STATES", "100"))


@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_over_intents_and_results(model: str) -> None:
    (tally,) = campaign.run_campaign(["toolguard"], [model], STATES, seed=5)
    assert tally.states >= STATES
    assert not tally.failures, [f.violations for f in tally.failures[:3]]


def test_the_check_catches_a_guard_that_reruns_unknown_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.session import toolguard

    real = toolguard.GuardScope.before

    def rerun(
        self: toolguard.GuardScope, call_id: str, tool: str, args: object = None, **kw: str
    ) -> toolguard.Decision:
        d = real(self, call_id, tool, args, **kw)
        if d.verdict is toolguard.Verdict.UNKNOWN:  # the failure the guard exists to prevent
            return toolguard.Decision(toolguard.Verdict.RUN, call_id, d.attempt_id)
        return d

    monkeypatch.setattr(toolguard.GuardScope, "before", rerun)
    (tally,) = campaign.run_campaign(["toolguard"], ["psow"], 40, seed=5)
    violations = [v for f in tally.failures for v in f.violations]
    assert any("the records say unknown" in v for v in violations), violations[:3]
