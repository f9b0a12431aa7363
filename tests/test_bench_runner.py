"""The benchmark runner's pieces, run small: the event mixes, the bytes counted on disk, the
targets table and its verdicts, the real-files workload, opening a session and the fork chain.
Nothing here asserts a speed: the figures are synthetic or whatever the machine gives."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from journal.benchmark import events as evs
from journal.benchmark import runner
from journal.benchmark import stores as st

ROOT = Path(__file__).resolve().parent.parent

TINY = dataclasses.replace(
    runner.Plan.quick(),
    repeats=1,
    sync_events=12,
    thread_events=32,
    bulk_events=60,
    random_reads=10,
    recover_repeats=1,
    session_counts=(2,),
    session_events=8,
    open_sizes=(20, 120),
)


def quiet(line: str) -> None:
    pass


def test_dir_bytes_counts_a_file_with_several_names_once(tmp_path: Path) -> None:
    """A file hard-linked into two journals (a store's dictionary, a fork's shared segment) is on
    the disk once: counted once, as du counts it; two files of the same content count twice."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "dict-00001.zdict").write_bytes(b"x" * 1000)
    os.link(a / "dict-00001.zdict", b / "dict-00001.zdict")
    (a / "seg").write_bytes(b"y" * 10)
    (b / "seg").write_bytes(b"y" * 10)
    assert st.dir_bytes(str(a), str(b)) == 1020
    assert st.dir_bytes(str(tmp_path)) == 1020
    assert st.dir_bytes(str(a / "seg")) == 10


def test_tools_mix_is_fixed_and_in_its_sizes() -> None:
    got = evs.make_tool_events()
    assert got == evs.make_tool_events() and len(got) == evs.TOOLS_MIX_EVENTS
    kinds = {e["type"] for e in got}
    assert kinds == {k for k, _ in evs.TOOLS_KINDS}
    for e in got:
        if e["type"] == "tool_result":
            assert evs.TOOL_RESULT_BYTES_MIN <= len(e["output"]) <= evs.TOOL_RESULT_BYTES_MAX
        elif e["type"] == "assistant_delta":
            assert len(e["text"]) == evs.DELTA_TEXT_BYTES
        elif e["type"] in ("assistant_message", "user_message"):
            assert len(e["text"]) < 200
    results = sorted(len(e["output"]) for e in got if e["type"] == "tool_result")
    assert results[len(results) // 10] < 1000 and results[-len(results) // 10] > 6000  # spread over the range
    longer = evs.make_mix("tools", 9000)
    assert longer[:4000] == got and longer[4000] == got[0]  # more than the mix: round it again
    assert evs.make_mix("agent", 50) == evs.make_events(50)
    with pytest.raises(ValueError, match="give their folder"):
        evs.make_mix("corpus", 1)
    with pytest.raises(ValueError, match="no event mix 'nope'"):
        evs.make_mix("nope", 1)


def _report(rows: list[runner.Row], **plan: object) -> runner.Report:
    r = runner.Report(dataclasses.replace(runner.Plan.quick(), **plan), True, runner.machine_info("."))  # type: ignore[arg-type]
    r.rows = rows
    return r


def _target(r: runner.Report, start: str) -> runner.Target:
    return next(t for t in r.targets if t.text.startswith(start))


def test_targets_show_median_spread_and_a_miss_as_not_met() -> None:
    w = "1 writer, durable per event"
    r = _report(
        [
            runner.Row(w, "journal sync", "events/s", [100.0, 120.0, 90.0]),
            runner.Row(w, "JSONL write+fdatasync", "events/s", [100.0, 100.0, 100.0]),
        ]
    )
    runner.evaluate(r)
    t = _target(r, "speed: 1 writer sync per event vs JSONL")
    assert t.value == pytest.approx(1.0) and t.spread == pytest.approx((0.9, 1.2)) and t.ok is False
    assert _target(r, "1 writer sync per event vs JSONL").ok is True  # needs 0.9x
    assert _target(r, "speed: 64 sessions").ok is None  # not measured: said, never dropped
    table = runner.markdown(r, "journal bench")
    line = next(ln for ln in table.splitlines() if ln.startswith("| speed: 1 writer"))
    assert line.endswith("| >= 1.1x | 1.00 | 0.90-1.20 | **NOT met** |"), line
    assert "not measured" in next(
        ln for ln in table.splitlines() if "the 10,000th fork of a chain vs the first, time" in ln
    )


def test_bytes_target_holds_only_when_the_events_read_back_and_the_import_is_exact() -> None:
    w = "bytes on disk per event, real session files"
    rows = [
        runner.Row(w, "journal sync", "bytes/event", [25.0]),
        runner.Row(w, "JSONL buffered", "bytes/event", [100.0]),
    ]
    r = _report(rows)
    r.checks = {"every event reads back": True, "import exact": True}
    runner.evaluate(r)
    assert _target(r, "speed: bytes on disk, real session files").ok is True
    r = _report(rows)
    r.checks = {"every event reads back": True, "import exact": False}
    runner.evaluate(r)
    assert _target(r, "speed: bytes on disk, real session files").ok is False
    assert any(n.startswith("NOT held: import exact") for n in r.notes)


def test_corpus_halves_keep_a_prefix_file_with_its_longer_twin(tmp_path: Path) -> None:
    files = {}
    for name, size in (("big", 1200), ("mid", 1300), ("small", 300), ("tiny", 100)):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_bytes(name.encode() * size)
    twin = tmp_path / "mid-later.jsonl"
    twin.write_bytes(files["mid"].read_bytes() + b"more lines")
    a, b = runner.corpus_halves([str(p) for p in (*files.values(), twin)])
    mid_half = a if str(files["mid"]) in a else b
    assert str(twin) in mid_half
    assert sorted(a + b) == sorted(str(p) for p in (*files.values(), twin))
    assert abs(len(a) - len(b)) <= 1 and str(files["big"]) not in mid_half


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus" / "plain"
    root.mkdir(parents=True)
    for k in range(3):
        lines = [json.dumps(e) for e in evs.make_mix("tools", 40 + k)]
        (root / f"s{k}.jsonl").write_text("\n".join(lines) + "\n")
    return root.parent


def test_real_files_workload_checks_read_back_and_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(runner, "dictionary_trainer", lambda: None)
    b = runner.Bench(TINY, str(scratch), True, quiet)
    b.corpus(str(_corpus(tmp_path)))
    w = "bytes on disk per event, real session files"
    assert {r.store for r in b.report.rows if r.workload == w} == {
        "journal sync",
        "journal sync, block_bytes=0",
        "JSONL buffered",
    }
    assert b.report.checks and all(b.report.checks.values()), b.report.checks
    assert any("store-wide dictionary: not measured" in n and "half A = plain/" in n for n in b.report.notes)
    assert os.listdir(scratch) == []
    runner.evaluate(b.report)
    assert _target(b.report, "speed: bytes on disk, real session files").value is not None


def test_an_import_that_does_not_export_byte_exact_fails_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from journal.session import importers

    real = importers.export_journal

    def lossy(path: str) -> tuple[list[str], bool, object]:
        lines, final_newline, rep = real(path)
        return [ln.replace('":', '": ') for ln in lines], final_newline, rep

    monkeypatch.setattr(importers, "export_journal", lossy)
    monkeypatch.setattr(runner, "dictionary_trainer", lambda: None)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    b = runner.Bench(TINY, str(scratch), True, quiet)
    b.corpus(str(_corpus(tmp_path)))
    assert b.report.checks["journal import of every real file exports it byte for byte"] is False
    runner.evaluate(b.report)
    assert _target(b.report, "speed: bytes on disk, real session files").ok is False


def test_read_back_check_sees_an_event_that_differs(tmp_path: Path) -> None:
    events = evs.make_mix("tools", 30)
    runner._journal_of(str(tmp_path / "j"), events)
    assert runner._reads_back(str(tmp_path / "j"), events)
    changed = [*events[:-1], {**events[-1], "text": "other"}]
    assert not runner._reads_back(str(tmp_path / "j"), changed)
    assert not runner._reads_back(str(tmp_path / "j"), events[:-1])


def test_a_dictionary_hook_that_fails_is_said_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def trainer(root: str, sessions: list[list[evs.Event]]) -> None:
        raise RuntimeError(f"cannot train on {len(sessions)} sessions")

    def none_stored(root: str, sessions: list[list[evs.Event]]) -> None:
        return None

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for hook, said in ((trainer, "cannot train on"), (none_stored, "the training stored none")):
        monkeypatch.setattr(runner, "dictionary_trainer", lambda hook=hook: hook)
        b = runner.Bench(TINY, str(scratch), True, quiet)
        b.corpus(str(_corpus(tmp_path / hook.__name__)))
        notes = [n for n in b.report.notes if n.startswith("Store dictionary trained on")]
        assert len(notes) == 2 and all(said in n for n in notes), b.report.notes
        assert os.listdir(scratch) == []


def test_session_open_workload_times_both_sizes_each_way(tmp_path: Path) -> None:
    b = runner.Bench(TINY, str(tmp_path), True, quiet)
    b.session_open()
    w = "open a session, 20 vs 120 events"
    stores = {r.store for r in b.report.rows if r.workload == w}
    assert stores == {
        f"{name}, {n} events" for name in ("session rw", "session ro", "journal rw", "journal ro") for n in (20, 120)
    }
    assert all(len(r.values) == 1 and r.values[0] > 0 for r in b.report.rows if r.workload == w)
    runner.evaluate(b.report)
    for mode in ("read-write", "read-only"):
        assert _target(b.report, f"open a 120-event session {mode} vs a 20-event one").value is not None
    assert os.listdir(tmp_path) == []


def test_fork_chain_figures_are_read_from_the_script(tmp_path: Path) -> None:
    b = runner.Bench(TINY, str(tmp_path), True, quiet)
    b.fork_chain(10)
    w = "fork chain of 10: the last fork over the first"
    rows = [r for r in b.report.rows if r.workload == w]
    assert len(rows) == 3 and all(len(r.values) == 1 and r.values[0] > 0 for r in rows), rows
    r = dataclasses.replace(TINY, fork_chain_depth=10)
    b.report.plan = r
    runner.evaluate(b.report)
    assert _target(b.report, "the 10th fork of a chain vs the first, time").value == rows[0].values[0]
    assert os.listdir(tmp_path) == []


def test_every_mix_runs_and_is_judged_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--mix all --corpus: every write and read workload runs on each mix (the real files the
    third), named apart, and the speed targets are judged on each."""
    monkeypatch.setattr(runner, "dictionary_trainer", lambda: None)
    corpus = _corpus(tmp_path / "real")
    scratch = tmp_path / "scratch"
    plan = dataclasses.replace(TINY, mixes=("agent", "tools", "corpus"))
    r = runner.run(plan, True, str(scratch), quiet, str(corpus))
    names = {row.workload for row in r.rows}
    for base in ("1 writer, durable per event", "random reads by seq", "2 sessions in one process, durable per event"):
        assert base in names and f"{base}, tools mix" in names and f"{base}, corpus mix" in names
    texts = [t.text for t in r.targets]
    assert (
        "speed: random reads by seq vs JSONL + offset index, records written one at a time (a frame each), tools mix"
        in texts
    )
    assert set(r.event_sizes) == {"agent", "tools", "corpus"}
    assert r.event_sizes["tools"]["kinds"] == len(evs.TOOLS_KINDS)
    table = runner.markdown(r, "journal bench --mix all")
    assert "Event mix 'tools'" in table and "### random reads by seq, tools mix" in table
    assert "### decode scan (every record to a dict), corpus mix" in table
    assert os.listdir(scratch) == []


def test_cli_refuses_an_unknown_mix_and_the_corpus_mix_without_files(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "journal.cli", "bench", "--quick", "--mix", "nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "invalid choice: 'nope'" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "journal.cli", "bench", "--quick", "--mix", "corpus", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "give --corpus DIR too" in proc.stderr
    assert os.listdir(tmp_path) == []
    from journal.cli import bench

    assert bench.FORK_CHAIN_DEPTH == runner.FORK_CHAIN_DEPTH
