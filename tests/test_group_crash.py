"""Commit groups under the power-loss harness: the "commit-group" workload
(journal/crashsim/workloads/group.py), and proof that it catches a group that loses records.

Without power-safe overwrite (npsow) a commit group loses acknowledged records with no error: a
log entry written after an fdatasync shares its sector with the synced entry before it (entries
are not padded to a sector, and Journal.open refuses sector_bytes with a group), and a power
loss that trashes that sector while the journal's segment write is lost leaves neither copy.
That is held as a strict xfail until the group pads its log or documents the cost.
"""

from __future__ import annotations

import pathlib
import struct

import pytest

from journal.crashsim import campaign
from journal.crashsim.workloads import WORKLOADS
from journal.crashsim.workloads import group as wgroup
from journal.engine import core
from journal.engine import group as group_mod
from journal.engine import group_log as glog

STATES = 1500  # distinct states per model: 5 to 6 runs, every crash point of each (~6 s)
SEED = 0

wgroup.register()


def _report(tally: campaign.Tally) -> str:
    return "\n".join(f"{f.violations[:2]}\n" + "\n".join(f.state[:12]) for f in tally.failures[:3])


def _entries_in(data: bytes) -> int:
    n = at = 0
    while at + glog.ENTRY_HEADER_SIZE_BYTES <= len(data):
        magic, body_bytes, _number, _checksum = struct.unpack_from("<IIQQ", data, at)
        if magic != glog.ENTRY_MAGIC:
            break
        n += 1
        at += glog.ENTRY_HEADER_SIZE_BYTES + body_bytes
        at += -at % glog.ENTRY_ALIGN_BYTES
    return n


def _run(model: str, states: int = STATES) -> campaign.Tally:
    (tally,) = campaign.run_campaign([wgroup.NAME], [model], states, SEED)
    return tally


def test_the_workload_runs_what_it_says() -> None:
    """Three journals, a log rotation, a reopen, append_many, both levels, commits shared."""
    fs, ledger = campaign.record_run(WORKLOADS[wgroup.NAME], SEED)
    assert isinstance(ledger, wgroup.GroupLedger)
    trace = [op.describe() for op in fs.log]
    assert sum("rename" in t and t.endswith(".jgl") for t in trace) >= 2, "no log rotation"
    assert any(t.startswith("unlink") and t.endswith("log-00000000000000000001.jgl") for t in trace)
    levels = {a.durability for led in (ledger, *ledger.others.values()) for a in led.attempts}
    assert levels == {"sync", "flush"}
    assert all(led.attempts for led in ledger.others.values())
    assert sum("/k/" in t and t.startswith("fdatasync") for t in trace) >= 2  # closed, reopened, closed
    # One write of the log carries the entries of more than one journal: a group commit.
    assert any(_entries_in(op.data) > 1 for op in fs.log if op.kind == "write" and op.path.endswith(".jgl"))


@pytest.mark.xfail(strict=True, reason="log entries are not sector-padded and a group refuses sector_bytes: "
                   "without power-safe overwrite a trashed log sector loses a synced entry silently")
def test_power_loss_npsow() -> None:
    tally = _run("npsow")
    assert tally.states == STATES
    assert not tally.failures, _report(tally)


def test_power_loss_psow() -> None:
    """Every journal's sync acks read back at their seqs, contiguous seqs, no corruption
    reported, stable and writable after recovery, a crash inside recovery recovered."""
    tally = _run("psow")
    assert tally.states == STATES and tally.runs >= 3
    assert tally.second_crash > 0
    assert not tally.failures, _report(tally)


def test_recovery_disabled_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal opened without writing its group's logs back loses what only the log held: the
    workload sees it in /j (the harness's checker) and in the other journals (its own check)."""
    monkeypatch.setattr(core, "recover_for_journal", lambda fs, path: None)
    tally = _run("psow", 300)
    lost = [v for f in tally.failures for v in f.violations if "acknowledged Committed(sync)" in v]
    assert any(v.startswith("record seq") for v in lost), _report(tally)
    assert any(v.startswith("workload check: /") for v in lost), _report(tally)


def test_recovery_that_removes_logs_before_syncing_is_caught(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery writes entries back into segments and must fdatasync them before it removes the
    logs; without that fdatasync a crash inside recovery loses acknowledged records."""

    monkeypatch.setattr(group_mod._Segments, "sync_all", lambda self: None)
    monkeypatch.setattr(wgroup, "RECOVERY_CRASH_EVERY", 1)
    tally = _run("psow", 600)
    inside = [v for f in tally.failures for v in f.violations if v.startswith("workload check: crash inside recovery")]
    # The workload's own check crashes recovery and looks at every journal, not only /j.
    assert any(f" {path}: " in v for v in inside for path in wgroup.OTHERS), _report(tally)


def test_saved_failure_replays(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure of the workload is saved with its image and checks again from the file. (One
    the harness's own checker found in /j: the workload's check of the other journals gets the
    ledger of a new run, whose thread interleaving may differ.)"""
    monkeypatch.setattr(core, "recover_for_journal", lambda fs, path: None)
    (tally,) = campaign.run_campaign([wgroup.NAME], ["psow"], 300, SEED, save_dir=str(tmp_path))
    own = [f for f in tally.failures if any(not v.startswith("workload check") for v in f.violations)]
    assert own and own[0].saved_to, _report(tally)
    _failure, again = campaign.replay_failure(own[0].saved_to)
    assert any("acknowledged Committed(sync)" in v for v in again), again
