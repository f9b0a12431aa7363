"""A trained dictionary's life under the crash harness, and salvage of a journal whose dictionary
file is damaged (issue 33).

The workload itself ("dictionary", journal/crashsim/workloads/dictionary.py) runs in
tests/test_crash_harness.py with every built-in one; here its checks are shown to fail when the
engine installs a dictionary out of order, and salvage is shown to keep every record that does
not need a damaged dictionary file.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.crashsim import campaign
from journal.crashsim.workloads import WORKLOADS
from journal.crashsim.workloads import dictionary as W
from journal.engine import core as engine_core
from journal.engine import dictionary as D
from journal.engine.core import Journal
from journal.engine.salvage import salvage
from journal.engine.verify import CLEAN, CORRUPT, verify
from journal.fs import FileSystem, OsFileSystem

SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "0"))


def _failures(states: int) -> list[str]:
    (tally,) = campaign.run_campaign(["dictionary"], ["psow"], states, SEED)
    return [v for f in tally.failures for v in f.violations]


def test_the_workload_names_both_dictionaries_and_holds_frames_of_each() -> None:
    """What the checks look at is there: frames naming id 1 (D1) and id 2 (D2), whose files
    hold the writer's dictionaries, after an uncrashed run."""
    wl = campaign.for_model(WORKLOADS["dictionary"], "psow")
    linked = written = 0
    for seed in range(SEED, SEED + 6):
        fs, _ = campaign.record_run(wl, seed)
        assert {i for *_, i in W.named_ids(fs, "/j")} == {W.D1_ID, W.D2_ID}
        with Journal.open("/j", fs=fs, readonly=True) as j:
            assert W.check_recovered(fs, "/j", list(j.read())) == []
        if fs.exists(W.OUTSIDE_DIR):
            linked += 1
            assert fs._lookup("/j/dict-00002.zdict") == fs._lookup("/dicts/dict-00002.zdict")  # one file
        else:
            written += 1
    assert linked and written


def test_the_check_catches_a_dictionary_written_in_place_without_its_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file written straight at its name, never fsync'd nor its directory: a power loss keeps
    the synced frames that name it and loses (or cuts) the file."""

    def careless(fs: FileSystem, journal_dir: str, d: D.Dictionary) -> int:
        for i in D.dictionary_ids(fs, journal_dir):
            if D.load_dictionary(fs, journal_dir, i).digest == d.digest:
                return i
        taken = set(D.dictionary_ids(fs, journal_dir))
        target = d.id if d.id not in taken else min(set(range(1, 100)) - taken)
        f = fs.open_write(os.path.join(journal_dir, D.dictionary_file_name(target)), create=True)
        try:
            f.pwrite(D.encode_dictionary_file(D.Dictionary(target, d.data)), 0)
        finally:
            f.close()
        return target

    monkeypatch.setattr(engine_core, "install_dictionary", careless)
    found = _failures(600)
    # A frame outlives the file, or the file is at its name cut short or empty.
    assert any("DictionaryViolation" in v and "whose file is missing" in v for v in found), found[:5]
    assert any("DictionaryViolation" in v and "not whole" in v for v in found), found[:5]


def test_the_check_catches_frames_written_before_the_directory_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file synced and renamed, but the rename never made durable: frames that name it can
    outlive its directory entry."""

    class NoDirSync:
        def __init__(self, fs: FileSystem) -> None:
            self._fs = fs

        def __getattr__(self, name: str) -> Any:
            return getattr(self._fs, name)

        def fsync_dir(self, path: str) -> None:
            pass

    install = D.install_dictionary
    monkeypatch.setattr(engine_core, "install_dictionary", lambda fs, d_, dic: install(NoDirSync(fs), d_, dic))
    found = _failures(600)
    assert any("whose file is missing" in v for v in found), found[:5]


# --- salvage of a journal whose dictionary file is damaged ------------------------------------


def _event(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    return {"type": "event", "id": f"e{i}", "text": " ".join(rng.choice(W.WORDS) for _ in range(40))}


def _jopen(path: Path, **options: Any) -> Journal:
    j = journal.open(path, **options)
    assert isinstance(j, Journal)
    return j


def _four_lives(path: Path) -> list[dict[str, Any]]:
    """Records 1-10 without a dictionary, 11-20 with D1, 21-30 without, 31-40 with D2; each life
    some single appends and a batch (data and block frames)."""
    d1, d2 = W.trained()
    events = [_event(i) for i in range(40)]
    for life, d in enumerate((None, D.Dictionary(1, d1), None, D.Dictionary(2, d2))):
        with _jopen(path, create=True, dictionary=d) as j:
            part = events[life * 10 : life * 10 + 10]
            for e in part[:5]:
                j.append(e)
            j.append_many(part[5:])
    return events


@pytest.mark.parametrize("damage", ["flipped", "truncated", "removed"])
def test_salvage_keeps_every_record_that_does_not_need_the_damaged_dictionary(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "j"
    events = _four_lives(path)
    name = D.dictionary_file_name(1)
    fs = OsFileSystem()
    needs = {seq for _, seq, i in W.named_ids(fs, str(path)) if i == 1}
    # Every record written with D1 names it (a block frame's last seq stands for its records).
    assert max(needs) == 20 and min(needs) > 10
    needs = set(range(11, 21))
    file = path / name
    data = file.read_bytes()
    if damage == "flipped":
        file.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "truncated":
        file.write_bytes(data[: len(data) // 2])
    else:
        file.unlink()
    assert verify(str(path)).verdict == CORRUPT

    out = tmp_path / "salvaged"
    report = salvage(str(path), str(out), renumber=False)
    about = [loss for loss in report.losses if name in loss.reason]
    assert about and len(about) == len(report.losses), [loss.describe() for loss in report.losses]
    lost = set()
    for loss in about:
        assert loss.seq_first is not None and loss.seq_last is not None
        lost |= set(range(loss.seq_first, loss.seq_last + 1))
    assert lost == needs  # the report names exactly the records it could not keep
    assert verify(str(out)).verdict == CLEAN
    with _jopen(out, readonly=True) as j:
        kept = {r.seq: r.event for r in j.read() if r.seq not in lost}
    assert len(kept) == 30  # every record that does not need the damaged file, D2's included
    assert kept == {i + 1: events[i] for i in range(40) if i + 1 not in needs}
