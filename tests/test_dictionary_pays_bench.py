"""The bench's store-dictionary row reports what the store does: where the store declines a
dictionary, the row holds the store's bytes without one and a note says why
(journal/benchmark/runner.py, ``_dictionary_split``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from journal.benchmark import events as evs
from journal.benchmark import runner
from tests.test_bench_runner import TINY, quiet

W = "bytes on disk per event, real session files, store dictionary"


def _corpus(tmp_path: Path) -> Path:
    """Four files, none a byte prefix of another: two in each half."""
    root = tmp_path / "corpus" / "plain"
    root.mkdir(parents=True)
    for k, mix in enumerate(("tools", "agent", "tools", "agent")):
        events = evs.make_mix(mix, 30 + 7 * k)[k:]
        (root / f"s{k}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return root.parent


def test_a_declined_dictionary_is_measured_as_the_store_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def declined(root: str, sessions: list[list[evs.Event]]) -> tuple[Any, str]:
        return None, "it does not pay: a 1024-byte dictionary saves about 10 bytes"

    monkeypatch.setattr(runner, "dictionary_trainer", lambda: declined)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    b = runner.Bench(TINY, str(scratch), True, quiet)
    b.corpus(str(_corpus(tmp_path)))
    for label, measured in (
        ("trained on A, measured on B", "measured on B"),
        ("trained on B, measured on A", "measured on A"),
    ):
        row = b.report.row(W, f"journal, {label}")
        plain = b.report.row(W, f"journal without a dictionary, {measured}")
        assert row is not None and plain is not None and row.values == plain.values
        (note,) = [n for n in b.report.notes if n.startswith(f"Store dictionary {label}")]
        assert "it does not pay" in note and "the store's without a dictionary" in note
    runner.evaluate(b.report)
    assert any("store dictionary trained on A" in t.text and t.value is not None for t in b.report.targets)


def test_the_real_trainer_says_why(tmp_path: Path) -> None:
    train = runner.dictionary_trainer()
    assert train is not None
    sessions = [evs.make_mix("tools", 400)[k::2] for k in range(2)]
    d, why = train(str(tmp_path / "store"), sessions)
    assert why
    if d is None:
        assert why.startswith(("it does not pay", "zstd could not")), why
    else:
        assert "more than its own file's" in why, why
