"""Proof that the toolguard workload's check catches a guard that would run an unknown call again.

The workload itself is built in (journal.crashsim.workloads.BUILTIN): tests/test_crash_harness.py
runs it under both power-loss models with every other workload, 0 violations."""

from __future__ import annotations

import pytest

from journal.crashsim import campaign


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
