"""The crash-injection harness run against the engine, and proof that it can fail.

CI budget: every built-in workload (journal.crashsim.workloads.BUILTIN, whatever else was
imported) under both overwrite models, each pair asserted to have checked its number of
distinct crash states (STATES: 2,100 per engine workload, over 20,000 in all); >= 200 kill -9
rounds, some killed during open and some with an append in flight; every injected-error site of
every workload. The counts are printed in the terminal summary (tests/conftest.py).
JOURNAL_CAMPAIGN=1 multiplies everything.
"""

from __future__ import annotations

import errno
import itertools
import os
import pathlib
import random
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from journal.crashsim import campaign, faultsweep, killtest
from journal.crashsim.workloads import BUILTIN, ENGINE, WORKLOADS, Ctx, Workload, builtin
from journal.engine.core import Journal

CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
STATES_PER_PAIR = 20_000 if CAMPAIGN else 2_100
# Distinct crash states each (workload, model) pair must check. The session workloads cost more
# per state (a session open, a fork or a snapshot resume in every check); fork and snapshot
# traces are short (20 to 40 states each), so 600 states are 15 to 30 runs: as many parents,
# fork points and snapshot histories, every crash point of each.
STATES: dict[str, int] = {
    **{name: STATES_PER_PAIR for name in ENGINE},
    "session-repair": STATES_PER_PAIR,
    "session-fork": 6_000 if CAMPAIGN else 600,
    "session-snapshot": 6_000 if CAMPAIGN else 600,
    "session-open": 2_000 if CAMPAIGN else 200,
    "session-fork-chain": 2_000 if CAMPAIGN else 200,
    "toolguard": 2_000 if CAMPAIGN else 200,
    # Its checks read every crashed image twice more (verify, a read with fresh dictionary
    # tables): 2,100 states take ~7 s under psow and ~17 s under npsow.
    "dictionary": STATES_PER_PAIR,
}
RUNS_MIN = {"session-fork": 5, "session-snapshot": 5}  # several parents, fork points, snapshots
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


def test_the_workload_set_is_the_built_in_registry_whatever_was_imported() -> None:
    """The campaign's workloads come from journal.crashsim.workloads, which imports them all: a
    fresh interpreter that imports nothing but the campaign sees every one, in the same order."""
    assert set(STATES) == set(BUILTIN) and list(builtin()) == list(BUILTIN)
    code = "import journal.crashsim.campaign as c; print(' '.join(c.WORKLOADS))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(BUILTIN), proc.stdout


@pytest.mark.parametrize("model", ["psow", "npsow"])
@pytest.mark.parametrize("name", BUILTIN)
def test_power_loss_campaign(name: str, model: str, tmp_path: pathlib.Path) -> None:
    (tally,) = campaign.run_campaign([name], [model], STATES[name], SEED, save_dir=str(tmp_path))
    SUMMARY.setdefault("states", {}).setdefault(name, {})[model] = tally.states
    SUMMARY.setdefault("runs", {}).setdefault(name, {})[model] = tally.runs
    SUMMARY.setdefault("violations", 0)
    SUMMARY["violations"] += tally.violations
    SUMMARY["sector_option"] = campaign.sector_option()
    # Distinct states: the campaign stops short of the budget when the workload's runs stop
    # giving new ones, so this is a measurement, not the loop's bound.
    assert tally.states >= STATES[name], f"{name}/{model}: {tally.states} distinct states in {tally.runs} runs"
    assert tally.runs >= RUNS_MIN.get(name, 1), tally.runs
    assert tally.violations == 0, _fail_report([tally])


def test_a_campaign_whose_runs_repeat_falls_short_of_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken harness: its seeds never advance, so every run is the same trace crashed the
    same way (a trace short enough to be crashed exhaustively). Each state is counted once, and
    the campaign stops when the runs bring nothing new."""

    def two_appends(ctx: Ctx) -> None:
        j = ctx.open()
        j.append(ctx.payload(100), durability="sync")
        j.append(ctx.payload(100), durability="flush")
        j.close()

    class StuckRandom(random.Random):
        def __init__(self, seed: object = None) -> None:
            super().__init__(SEED)

    budget = 2 * campaign.STATES_PER_RUN_MAX
    monkeypatch.setitem(WORKLOADS, "two", Workload("two", two_appends, {}))
    (tally,) = campaign.run_campaign(["two"], ["psow"], budget, SEED)  # the harness as it is
    assert tally.states == budget and tally.runs > 1 + campaign.STALE_RUNS_MAX
    record_run = campaign.record_run
    monkeypatch.setattr(campaign, "record_run", lambda wl, seed: record_run(wl, SEED))
    monkeypatch.setattr(campaign, "random", types.SimpleNamespace(Random=StuckRandom))
    (tally,) = campaign.run_campaign(["two"], ["psow"], budget, SEED)
    # (A run or two may still add a state or so: the checks draw from the same rng as the
    # sampled tears, so a different count of deep checks shifts them.)
    assert 0 < tally.states <= campaign.STATES_PER_RUN_MAX and tally.repeats > 2 * tally.states
    assert tally.runs <= 2 * (1 + campaign.STALE_RUNS_MAX)


def test_kill_9_rounds(tmp_path: pathlib.Path) -> None:
    stats = killtest.run_kill_rounds(KILL_ROUNDS, SEED + 1, str(tmp_path))
    ready = stats.rounds - stats.killed_before_ready
    acking = sum(1 for n in stats.acked_per_round if n > 0)
    SUMMARY["kill"] = {
        "rounds": stats.rounds,
        "during_open": stats.killed_before_ready,
        "in_flight": stats.killed_in_flight,
        "acked": stats.acked,
        "acked_max": max(stats.acked_per_round, default=0),
        "acking_rounds": acking,
        "records_checked": stats.records_checked,
        "violations": len(stats.violations),
    }
    assert stats.rounds == KILL_ROUNDS and len(stats.acked_per_round) == KILL_ROUNDS
    assert not stats.violations, stats.violations[:10]
    assert stats.child_errors == 0
    # Both phases were hit: recovery interrupted, and appends interrupted mid-call.
    assert stats.killed_before_ready > 0, "no round killed the writer during open"
    assert stats.killed_in_flight > 0, "no round killed the writer with an append in flight"
    # Most rounds that got past open had something acknowledged to lose (counted per round).
    assert acking >= ready // 2, (acking, ready, stats.acked_per_round[:40])
    assert stats.records_checked > 0


def test_catches_a_writer_thread_that_dies(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """A broken engine: an append raises in one of the child's writer threads. The thread dies,
    the others go on writing, and every record still checks out -- but the round must fail."""
    calls = itertools.count()  # each forked child starts from the parent's count: zero
    append = Journal.append

    def failing(self: Journal, event: Any, durability: Any = "sync", **kw: Any) -> Any:
        if next(calls) == 3:
            raise RuntimeError("injected engine bug")
        return append(self, event, durability, **kw)

    monkeypatch.setattr(Journal, "append", failing)
    stats = killtest.run_kill_rounds(4, SEED, str(tmp_path), delay_s_max=0.3)
    assert stats.child_errors > 0
    assert any("RuntimeError: injected engine bug" in v for v in stats.violations), stats.violations[:4]


def test_catches_a_child_that_fails_to_open(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    """A child whose open raises exits before the kill: that is a failed round, not a short one."""

    def broken_child(path: str, seed: int, report: killtest.Report, options: dict[str, Any]) -> None:
        raise OSError(errno.EIO, "injected at open")

    stats = killtest.run_kill_rounds(2, SEED, str(tmp_path), child=broken_child, delay_s_max=0.3)
    assert stats.child_errors == 2 and stats.killed_before_ready == 2
    for r in range(2):
        assert f"round {r} (seed {SEED}): the child reported an error: main OSError: [Errno 5] injected at open" in (
            stats.violations
        )
        assert f"round {r} (seed {SEED}): the child exited with status 1 before it was killed" in stats.violations


def test_injected_errors_at_every_call_site() -> None:
    names = [n for n in BUILTIN if n != "group"]
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


def test_an_append_after_an_acklost_is_held_to_refusal_on_its_own_handle_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload of several lives reopens the journal after each: the appends of the handle
    opened after a fail-stop (recovery ran) are its own, not appends the failed handle let
    through. Seed 35's fdatasync #5 of the dictionary workload fails the last append of a life
    (the sweep flagged the next life's appends once); an engine that does not fail-stop after
    an AckLost is still caught on the same workload."""
    wl = WORKLOADS["dictionary"]
    fs, inner, ledger = faultsweep._run(wl, 35, [("fdatasync", errno.EIO, 5)])
    acklost = [a for a in ledger.attempts if type(a.outcome).__name__ == "AckLost"]
    assert acklost and len(ledger.opens) >= 2
    assert any(b.t0 > acklost[0].t1 and not ledger.same_handle(acklost[0], b) for b in ledger.attempts)
    assert faultsweep.check_site(wl, fs, inner, ledger, "fdatasync") == []

    original = Journal._settle_batch

    def forgets_the_failure(self: Journal, batch: Any, results: Any) -> None:
        original(self, batch, results)
        if results[0] == "failed":
            self._failed = None  # broken: AckLost reported, appends go on

    monkeypatch.setattr(Journal, "_settle_batch", forgets_the_failure)
    counts = faultsweep.call_counts(wl, 35)
    flagged = []
    for n in range(counts["fdatasync"]):
        fs, inner, ledger = faultsweep._run(wl, 35, [("fdatasync", errno.EIO, n)])
        flagged += [v for v in faultsweep.check_site(wl, fs, inner, ledger, "fdatasync") if "not refused" in v]
    assert flagged, "an engine that goes on after an AckLost passed the sweep"


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
    assert "distinct crash states" in proc.stdout and "kill -9: 2 rounds" in proc.stdout
    assert "injected I/O errors" in proc.stdout
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
