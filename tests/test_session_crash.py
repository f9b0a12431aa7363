"""Session code under the crash harness: a power loss inside a repair, a fork or a snapshot save.

The campaigns over session-repair, session-fork and session-snapshot at their budgets run with
every other workload in tests/test_crash_harness.py; here: another seed for repair, and proof
that each session check catches the bug it is for.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from journal.crashsim import campaign
from journal.crashsim.workloads import WORKLOADS

STATES = int(os.environ.get("JOURNAL_SESSION_CRASH_STATES", "250"))


@pytest.mark.parametrize("model", ["psow", "npsow"])
def test_power_loss_inside_repair(model: str) -> None:
    tallies = campaign.run_campaign(["session-repair"], [model], STATES, seed=11)
    (tally,) = tallies
    assert tally.states >= STATES
    assert not tally.failures, [f.violations for f in tally.failures[:3]]


def test_the_check_catches_closers_that_are_not_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.session import closers

    monkeypatch.setattr(closers, "_time", lambda d: str(random.random()))
    (tally,) = campaign.run_campaign(["session-repair"], ["psow"], 40, seed=3)
    assert tally.failures and "uncrashed repair" in " ".join(tally.failures[0].violations)


# --- fork and snapshot --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["session-fork", "session-snapshot"])
def test_every_crash_point_of_each_run_is_checked(name: str) -> None:
    """Each run's states fit the per-run budget, so the campaign checks all of them (exhaustive)."""
    for model in ("psow", "npsow"):
        for seed in range(11, 15):
            fs, _ = campaign.record_run(campaign.for_model(WORKLOADS[name], model), seed)
            total = campaign.count_exhaustive(fs, model)
            assert 10 < total <= campaign.STATES_PER_RUN_MAX, (model, seed, total)


def _violations(name: str, states: int = 120) -> list[str]:
    (tally,) = campaign.run_campaign([name], ["psow"], states, seed=11)
    return [v for f in tally.failures for v in f.violations]


def test_the_fork_check_catches_a_child_renamed_before_its_entries_are_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.crashsim.memfs import MemFileSystem

    fsync_dir = MemFileSystem.fsync_dir

    def broken(self: MemFileSystem, path: str) -> None:
        # No directory fsync inside the child's temp directory (the copy's, the new segment's,
        # the snapshot's): its entries may be lost although the rename that publishes it is kept.
        if ".fork-" not in path:
            fsync_dir(self, path)

    monkeypatch.setattr(MemFileSystem, "fsync_dir", broken)
    assert any("the child does not open" in v for v in _violations("session-fork"))


def test_the_fork_check_catches_a_fork_that_writes_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.engine import copy as prefix

    copy_prefix = prefix.copy_prefix

    def touching(fs: Any, src: str, dst: str, at_seq: int, link: bool = True) -> Any:
        seg = sorted(n for n in fs.listdir(src) if n.endswith(".seg"))[-1]
        f = fs.open_write(f"{src}/{seg}", create=False)
        f.pwrite(b"\0", f.size())  # one byte past the end: no record is lost, the bytes changed
        f.fsync()
        f.close()
        return copy_prefix(fs, src, dst, at_seq, link)

    monkeypatch.setattr(prefix, "copy_prefix", touching)
    assert any("changed the parent's files" in v for v in _violations("session-fork"))


def test_the_snapshot_check_catches_a_save_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.session import snapshot

    def in_place(fs: Any, path: str, data: bytes, tmp_path: str | None = None) -> None:
        f = fs.open_write(path, create=not fs.exists(path))
        f.truncate(0)
        f.pwrite(data, 0)
        f.fsync()
        f.close()

    monkeypatch.setattr(snapshot, "fs_write_atomic", in_place)
    assert any("neither the old one nor the new one" in v for v in _violations("session-snapshot"))


def test_the_snapshot_check_catches_a_resume_that_loses_the_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    from journal.session import snapshot

    items = snapshot._items

    def short(j: Any, registry: Any, after_seq: int, *rest: Any) -> Iterator[Any]:
        got = list(items(j, registry, after_seq, *rest))
        return iter(got[:-1] if after_seq > 0 else got)

    monkeypatch.setattr(snapshot, "_items", short)
    assert any("a state that a full replay does not" in v for v in _violations("session-snapshot"))


def test_the_command_lists_the_session_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    from journal import cli

    assert cli.main(["crash-test", "--list"]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert {"session-repair", "session-fork", "session-snapshot", "single", "rollover"} <= listed
