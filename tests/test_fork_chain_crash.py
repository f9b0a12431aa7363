"""The crash harness's check of the session-fork-chain workload can fail (the workload itself runs
in tests/test_crash_harness.py with every built-in one: journal/crashsim/workloads/session_fork_chain.py)."""

from __future__ import annotations

import pytest

from journal.crashsim import campaign


def test_the_check_catches_a_merged_segment_renamed_before_it_is_synced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the fsync of the merged segment before the child's rename, a power loss can keep the
    child's name and lose the merged bytes: the harness sees a child that does not open whole."""
    from journal.engine import copy as prefix

    real_merge = prefix._merge

    class NoSync:
        def __init__(self, inner: object) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> object:
            if name == "fsync":
                return lambda: None
            return getattr(self._inner, name)

    def unsynced_merge(fs: object, members: list[object], dst_dir: str) -> int:
        class Fs:
            def __getattr__(self, name: str) -> object:
                if name == "open_write":
                    return lambda path, create: NoSync(fs.open_write(path, create))  # type: ignore[attr-defined]
                return getattr(fs, name)

        return real_merge(Fs(), members, dst_dir)  # type: ignore[arg-type]

    monkeypatch.setattr(prefix, "_merge", unsynced_merge)
    (tally,) = campaign.run_campaign(["session-fork-chain"], ["psow"], 600, seed=31)
    assert tally.failures, "a merged segment renamed unsynced went unnoticed"
