"""The crash-injection harness run against the engine, and proof that it can fail.

CI budget: >= 20,000 power-loss states over every workload and both overwrite models, >= 200
kill -9 rounds, every injected-error site of every workload. The counts are printed in the
terminal summary (tests/conftest.py). JOURNAL_CAMPAIGN=1 multiplies everything.
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from journal.crashsim import campaign, faultsweep, killtest
from journal.crashsim.workloads.core import WORKLOADS
from journal.engine.core import Journal

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES_PER_PAIR = 20_000 if CAMPAIGN else 2_100
KILL_ROUNDS = 2_000 if CAMPAIGN else 200
SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))

# Filled by the tests, printed by tests/conftest.py's terminal summary.
SUMMARY: dict[str, Any] = {}


def _fail_report(tallies: list[campaign.Tally]) -> str:
    lines = []
    for t in tallies:
        for f in t.failures[:3]:
            lines.append(f"{t.workload}/{t.model} seed {f.seed} ({f.saved_to}): {f.violations[:2]}")
            lines.extend(f.state[:10])
    return "\n".join(lines)


@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_campaign(model: str, tmp_path: pathlib.Path) -> None:
    tallies = campaign.run_campaign(list(WORKLOADS), [model], STATES_PER_PAIR, SEED, save_dir=str(tmp_path))
    states = sum(t.states for t in tallies)
    SUMMARY.setdefault("states", {})[model] = states
    SUMMARY.setdefault("violations", 0)
    SUMMARY["violations"] += sum(t.violations for t in tallies)
    SUMMARY["sector_option"] = campaign.sector_option()
    assert states >= STATES_PER_PAIR * len(WORKLOADS) * 0.99
    assert all(t.violations == 0 for t in tallies), _fail_report(tallies)


def test_kill_9_rounds(tmp_path: pathlib.Path) -> None:
    stats = killtest.run_kill_rounds(KILL_ROUNDS, SEED + 1, str(tmp_path))
    SUMMARY["kill_rounds"] = stats.rounds
    SUMMARY["kill_violations"] = len(stats.violations)
    assert stats.rounds == KILL_ROUNDS
    assert stats.records_checked > 0
    assert not stats.violations, stats.violations[:10]


def test_injected_errors_at_every_call_site() -> None:
    names = [n for n in WORKLOADS if n != "group"]
    swept = faultsweep.sweep(names, SEED)
    # Threaded: a call site seen in the dry run may not come again in the faulty run.
    randomly = faultsweep.random_faults(["group"], 200 if CAMPAIGN else 30, SEED)
    sites = swept + randomly
    SUMMARY["fault_sites"] = len(sites)
    bad = [s for s in sites if s.violations]
    SUMMARY["fault_violations"] = len(bad)
    assert all(s.injected for s in swept)
    assert sum(s.injected for s in randomly) >= len(randomly) // 2
    swept_ops = {s.op for s in sites}
    for op in ("pwrite", "short_write", "fdatasync", "fsync", "rename", "fsync_dir", "truncate"):
        assert op in swept_ops, f"no call site of {op} was swept"
    assert {s.followup for s in sites} >= {None, "truncate", "fdatasync"}
    assert not bad, [(s.name(), s.violations[:2]) for s in bad[:10]]


# --- the harness can fail -------------------------------------------------------------------


@pytest.fixture
def acks_before_fdatasync(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A broken engine: every batch is acknowledged without its fdatasync ever happening."""
    original = Journal._write_batch

    def write_batch(self: Journal, batch: Any) -> Any:
        active = self._active
        if active is not None:
            saved = active.fdatasync
            active.fdatasync = lambda: None  # type: ignore[method-assign]
            try:
                return original(self, batch)
            finally:
                active.fdatasync = saved  # type: ignore[method-assign]
        return original(self, batch)

    monkeypatch.setattr(Journal, "_write_batch", write_batch)
    yield


@pytest.fixture
def no_dir_fsync_on_roll(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A broken engine: a new segment's rename is never made durable with a directory fsync."""
    import journal.engine.segment as segment
    import journal.engine.writer as writer

    original = segment.create_segment

    def create_segment(fs: Any, dirpath: str, header: Any, sector_bytes: int = 0) -> Any:
        class NoDirSync:
            def __getattr__(self, name: str) -> Any:
                return getattr(fs, name)

            def fsync_dir(self, path: str) -> None:
                pass

        return original(NoDirSync(), dirpath, header, sector_bytes)

    monkeypatch.setattr(writer, "create_segment", create_segment)
    yield


@pytest.fixture
def ignores_fdatasync_errors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A broken engine: a failed fdatasync is swallowed and the batch reported Committed."""
    original = Journal._write_batch

    def write_batch(self: Journal, batch: Any) -> Any:
        active = self._active
        if active is not None:
            saved = active.fdatasync

            def swallow() -> None:
                try:
                    saved()
                except OSError:
                    pass

            active.fdatasync = swallow  # type: ignore[method-assign]
            try:
                return original(self, batch)
            finally:
                active.fdatasync = saved  # type: ignore[method-assign]
        return original(self, batch)

    monkeypatch.setattr(Journal, "_write_batch", write_batch)
    yield


def test_catches_ack_before_fdatasync(acks_before_fdatasync: None, tmp_path: pathlib.Path) -> None:
    tallies = campaign.run_campaign(["single"], ["psow"], 400, SEED, save_dir=str(tmp_path))
    failures = [f for t in tallies for f in t.failures]
    assert failures, "a journal that never fdatasyncs passed the power-loss campaign"
    assert any("acknowledged Committed(sync) before the crash is missing" in v for f in failures for v in f.violations)
    # The saved failure replays: the same image still breaks the same invariant.
    saved = failures[0].saved_to
    assert saved is not None
    again, violations = campaign.replay_failure(saved)
    assert again.seed == failures[0].seed and violations


def test_catches_missing_dir_fsync_on_roll_over(no_dir_fsync_on_roll: None) -> None:
    tallies = campaign.run_campaign(["rollover"], ["psow"], 1500, SEED)
    failures = [f for t in tallies for f in t.failures]
    assert failures, "a journal that skips the directory fsync of a new segment passed"


def test_catches_swallowed_fdatasync_error(ignores_fdatasync_errors: None) -> None:
    sites = faultsweep.sweep(["single"], SEED)
    bad = [s for s in sites if s.violations and s.op == "fdatasync"]
    assert bad, "a journal that ignores fdatasync errors passed the fault sweep"


def test_catches_lost_flush_after_kill(tmp_path: pathlib.Path) -> None:
    def forgetful_child(path: str, seed: int, report: killtest.Report, options: dict[str, Any]) -> None:
        # Claims "flush" but keeps the records in memory (buffered): a kill loses them.
        j = Journal.open(path, create=True, **options)
        report("R")
        for i in range(1000):
            rid = f"s{seed}-{i}"
            report(f"A {rid}")
            o = j.append({"id": rid}, durability="buffered")
            report(f"O {rid} C {getattr(o, 'seq', 0)} flush")

    stats = killtest.run_kill_rounds(5, SEED, str(tmp_path), child=forgetful_child, delay_s_max=0.05)
    assert any("lost after kill -9" in v for v in stats.violations)


def test_fault_sweep_counts_every_site() -> None:
    counts = faultsweep.call_counts(WORKLOADS["single"], SEED)
    sites = faultsweep.sweep(["single"], SEED)
    for op, err in faultsweep.SWEPT:
        per = [s for s in sites if s.op == op and s.errno == err and s.followup is None]
        assert len(per) == counts.get(op, 0)


def test_command_summary_and_exit_code(tmp_path: pathlib.Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "journal.cli",
        "crash-test",
        "--states",
        "30",
        "--kill-rounds",
        "2",
        "--workload",
        "single",
        "--save-dir",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "states" in proc.stdout and "kill -9: 2 rounds" in proc.stdout and "injected I/O errors" in proc.stdout
    assert "\r" not in proc.stderr  # no progress bar when piped


def test_injected_fault_api_is_unchanged() -> None:
    from journal.crashsim.faults import FaultyFileSystem
    from journal.crashsim.memfs import MemFileSystem

    fs = FaultyFileSystem(MemFileSystem())
    fs.fail("fdatasync", errno.EIO, after=0)
    j = Journal.open("/j", create=True, fs=fs)
    out = j.append(b"x", durability="sync")
    assert type(out).__name__ == "AckLost"
    assert fs.injected == [("fdatasync", 0)] and ("fdatasync", 0) in fs.trace
