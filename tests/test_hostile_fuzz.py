"""Hostile files: every reader and command on crafted journal directories (journal/crashsim/hostile.py).

The campaign makes journal directories from real ones, keeps their checksums genuine while their
fields and payloads lie (and breaks them the way disks and copies do), and runs every reader on
each in a worker process under a memory and a time limit: the outcome must be a record, a typed
JournalError with a message, or a command's documented exit code with its verdict; nothing may
change outside the journal, and a read-only reader changes no byte of it.

It runs for JOURNAL_HOSTILE_SECONDS (default 40 in the normal suite, and at most
JOURNAL_HOSTILE_INPUTS inputs, default 150; 600 s with JOURNAL_CAMPAIGN=1, no cap) from seed
JOURNAL_HOSTILE_SEED (default 0), and prints its figures in the terminal summary.
A failing input is saved under hostile-failures/ (JOURNAL_HOSTILE_SAVE_DIR) for
``journal hostile-test --replay FILE``. The other tests hold the harness itself: the inputs
repeat by seed, the lies keep their checksums genuine, and each kind of misbehaviour is caught.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import sys
from typing import Any

import pytest

from journal.cli.hostile_test import READERS, worker_argv
from journal.crashsim import hostile
from journal.engine import format as fmt
from tests.conftest import report_count

ROOT = pathlib.Path(__file__).resolve().parents[1]
CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
SECONDS = float(os.environ.get("JOURNAL_HOSTILE_SECONDS", "600" if CAMPAIGN else "40"))
SEED = int(os.environ.get("JOURNAL_HOSTILE_SEED", "0"))
# The normal suite also stops after this many inputs, so that its verdict does not depend on how
# fast the machine is: a faster one runs the same inputs, not more (all of them pass today).
INPUTS_MAX = None if CAMPAIGN else int(os.environ.get("JOURNAL_HOSTILE_INPUTS", "150"))
SAVE_DIR = os.environ.get("JOURNAL_HOSTILE_SAVE_DIR", str(ROOT / "hostile-failures"))
# A run that reached fewer inputs than this did not fuzz (a worker that cannot start, a machine
# so loaded that nothing ran): about a tenth of what the default budget reaches on 2 shared cores.
INPUTS_MIN = 10


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, hostile.Base]:
    return hostile.build_bases(str(tmp_path_factory.mktemp("bases")))


def test_every_reader_survives_hostile_journal_directories() -> None:
    summary = hostile.campaign(READERS, worker_argv(hostile.MEMORY_BYTES_DEFAULT), SECONDS, seed=SEED,
                               save_dir=SAVE_DIR, inputs_max=INPUTS_MAX, out=lambda line: print(line, file=sys.stderr))
    for line in summary.lines():
        print(line)
    report_count("hostile files: inputs (journals + import sources)",
                 f"{summary.inputs} ({summary.journals} + {summary.imports}) in {summary.elapsed_s:.0f} s, "
                 f"seed {summary.seed}")
    report_count("hostile files: reader runs", f"{summary.runs} by {len(summary.readers)} readers "
                 f"({', '.join(summary.readers)})")
    report_count("hostile files: limits per run",
                 f"{summary.memory_bytes >> 20} MiB address space, {summary.timeout_s:.0f} s wall; the most resident "
                 f"memory a run took: {summary.peak_rss_bytes / (1 << 20):.0f} MiB ({summary.peak_rss_reader})")
    report_count("hostile files: outcomes", ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())))
    report_count("hostile files: failures", len(summary.failures))
    assert summary.inputs >= INPUTS_MIN and summary.journals and summary.runs >= summary.inputs * 5, summary.lines()
    assert not summary.failures, "\n".join(
        summary.lines() + [f"input {f.index}: {f.reader}: {f.failure[:500]} ({f.description[:300]}); "
                           f"saved: {f.saved}" for f in summary.failures[:20]])


# --- the harness itself ------------------------------------------------------------------------------


def test_bases_and_inputs_repeat_by_seed(bases: dict[str, hostile.Base], tmp_path: pathlib.Path) -> None:
    again = hostile.build_bases(str(tmp_path / "again"))
    assert {n: b.tree for n, b in again.items()} == {n: b.tree for n, b in bases.items()}
    for index in range(40):
        a = hostile.make_input(7, index, bases)
        b = hostile.make_input(7, index, again)
        assert a == b
    assert hostile.make_import_input(7, 3) == hostile.make_import_input(7, 3)
    assert hostile.make_input(7, 1, bases) != hostile.make_input(8, 1, bases)


def test_the_bases_hold_what_the_mutations_need(bases: dict[str, hostile.Base]) -> None:
    mixed = bases["mixed"].tree
    segs = hostile.parsed_segments(mixed)
    assert len(segs) >= 3 and fmt.START_FILE in mixed and any(r.startswith("quarantine/") for r in mixed)
    frames = [fr for _, s in segs for fr in s.frames]
    kinds = {fr.kind for fr in frames}
    assert {fmt.KIND_DATA, fmt.KIND_BLOCK, fmt.KIND_SEAL} <= kinds
    assert any(fr.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD for fr in frames)
    assert any(fr.flags & fmt.FLAG_KEYED for fr in frames) and any(fr.flags & fmt.FLAG_BYTES for fr in frames)
    assert sum(s.sealed for _, s in segs) >= 2 and not segs[-1][1].sealed
    assert any(fr.kind == fmt.KIND_PADDING for _, s in hostile.parsed_segments(bases["padded"].tree)
               for fr in s.frames)
    assert all(s.version == 1 for _, s in hostile.parsed_segments(bases["v1"].tree))
    assert bases["session"].session and len(hostile.parsed_segments(bases["session"].tree)) >= 2


@pytest.mark.parametrize("name", ["frame-seq", "frame-flags", "frame-raw-len", "frame-dict-id", "payload", "envelope",
                                  "payload-key", "block", "footer", "header"])
def test_a_lie_keeps_the_checksums_genuine(bases: dict[str, hostile.Base], name: str) -> None:
    """Each structure-aware mutation changes a field or a payload and leaves every frame genuine
    under its segment's salt, so the lie reaches what a reader parses after the checksum."""
    fn = hostile.MUTATIONS[name][0]
    changed = 0
    for i in range(30):
        tree = dict(bases["mixed"].tree)
        before = {n: s for n, s in hostile.parsed_segments(tree)}
        what = fn(tree, random.Random(i))
        if what is None:
            continue
        for seg_name, old in before.items():
            if tree[seg_name].data == bases["mixed"].tree[seg_name].data:
                continue
            changed += 1
            now = hostile.parse_segment(tree[seg_name].data)
            assert now is not None, what  # the header's checksum holds, whatever its fields say
            if name != "header":
                assert len(now.frames) >= len(old.frames) - 1 and not now.tail, what
                assert now.encode() == tree[seg_name].data
    assert changed >= 10


def test_rekey_changes_every_salt_and_keeps_the_journal_readable(bases: dict[str, hostile.Base],
                                                                 tmp_path: pathlib.Path) -> None:

    tree = hostile.rekey(bases["mixed"].tree, b"\x01" * 16)
    hostile.write_tree(tree, str(tmp_path / "j"))
    with hostile.open_file(tmp_path / "j", readonly=True) as j:
        assert j.first_seq > 1 and sum(1 for _ in j.read()) == j.last_seq - j.first_seq + 1
    for _, seg in hostile.parsed_segments(tree):
        assert seg.journal_id == b"\x01" * 16 and seg.salt == fmt.segment_salt(seg.journal_id, seg.number, seg.base_seq)


def _planted_argv(memory_bytes: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            f"from tests.hostile_planted import worker; worker({memory_bytes})"]


@pytest.fixture(scope="module")
def planted(bases: dict[str, hostile.Base], tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every planted reader's result on the mixed base, through a real worker (5 s per run at most)."""
    from tests.hostile_planted import PLANTED

    work = str(tmp_path_factory.mktemp("planted"))
    inp = os.path.join(work, "input")
    hostile.write_tree(bases["mixed"].tree, inp)
    worker = hostile.Worker(_planted_argv(256 << 20), work, timeout_s=5.0)
    try:
        return hostile.run_input(worker, PLANTED, inp, os.path.join(work, "box"), bases["mixed"].tree, False)
    finally:
        worker.stop()


@pytest.mark.parametrize("reader, expect", [
    ("value-error", "ValueError"),
    ("empty-message", "empty message"),
    ("invariant", "InvariantError"),
    ("hang", "hang"),
    ("memory", "MemoryError"),
    ("dies", "worker died"),
    ("writes-journal", "read-only reader changed the journal"),
    ("writes-outside", "changed outside the journal"),
    ("cuts-without-keeping", "not in quarantine"),
    ("leaves-temp", "left ['.dest.salvage-x'] beside its destination"),
])
def test_the_harness_catches(planted: dict[str, dict[str, Any]], reader: str, expect: str) -> None:
    got = planted[reader]
    assert got["status"] == "fail" and expect in got["failure"] + got.get("signature", ""), got


def test_the_harness_accepts_typed_errors_and_kept_bytes(planted: dict[str, dict[str, Any]]) -> None:
    assert planted["typed"]["status"] == "error" and planted["typed"]["error"] == "CorruptionError"
    assert planted["cuts-and-keeps"]["status"] == "ok", planted["cuts-and-keeps"]
    assert planted["well-behaved"]["status"] == "ok" and planted["well-behaved"]["facts"]["records"] > 10


def test_a_failure_is_saved_minimised_and_replays(bases: dict[str, hostile.Base], tmp_path: pathlib.Path) -> None:
    from tests.hostile_planted import PLANTED

    readers = [r for r in PLANTED if r.name in ("value-error", "well-behaved")]
    index = next(i for i in range(100) if not hostile.is_import_input(3, i))
    summary = hostile.campaign(readers, _planted_argv(256 << 20), 600, seed=3, save_dir=str(tmp_path / "saved"),
                               inputs_max=1, first_index=index)
    assert len(summary.failures) >= 1 and all(f.reader == "value-error" for f in summary.failures)
    saved = summary.failures[0].saved
    assert saved is not None
    doc = json.loads(pathlib.Path(saved).read_text())
    assert doc["seed"] == 3 and doc["index"] == index and doc["reader"] == "value-error"
    assert doc["files"] == {}, "minimising drops every file the failure does not need"
    results = hostile.replay(saved, readers, _planted_argv(256 << 20))
    assert results[0]["reader"] == "value-error" and results[0]["status"] == "fail"


def test_the_command_replays_a_saved_input(tmp_path: pathlib.Path, bases: dict[str, hostile.Base]) -> None:
    """`journal hostile-test --replay FILE` runs every reader on a saved input and says how each did."""
    from journal.cli import main

    fail = hostile.Failure(0, 0, "cat", "test", "planted", "the mixed base, untouched")
    path = hostile.save_failure(str(tmp_path), fail, bases["mixed"].tree, "untouched", None)
    code, out, _ = hostile.capture(lambda: main(["hostile-test", "--replay", path, "--timeout", "30"]))
    assert code == 0, out
    assert [ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith(" ")][:1] == ["cat"]
    assert all(" fail " not in ln for ln in out.splitlines()), out



def test_every_mutation_applies_and_none_raises(bases: dict[str, hostile.Base]) -> None:
    """Making inputs is the harness's own code: none may raise, and every mutation must get to
    change something (a mutation that never applies tests nothing)."""
    applied: dict[str, int] = {name: 0 for name in hostile.MUTATIONS}
    for index in range(400):
        if hostile.is_import_input(1, index):
            form, data, _ = hostile.make_import_input(1, index)
            assert form in hostile.IMPORT_SOURCES and data
            continue
        _, _, keys, done = hostile.make_input(1, index, bases)
        for key, what in zip(keys, done, strict=True):
            if not what.endswith("(not applicable)"):
                applied[key.partition(":")[2]] += 1
    assert all(applied.values()), applied
