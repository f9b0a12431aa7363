"""bench/bench_langgraph_store.py runs (a smoke run, sizes small): every store it can run here
ends holding every memory (the script checks after its clock stops), and the ratios are made.
Its figures are not asserted: timing belongs in the benchmark's own output."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

from tests.backends import require_services

pytest.importorskip("langgraph.store.sqlite")


def test_the_store_benchmark_runs_and_every_store_holds_every_memory(tmp_path: pathlib.Path) -> None:
    path = pathlib.Path(__file__).parents[1] / "bench" / "bench_langgraph_store.py"
    spec = importlib.util.spec_from_file_location("bench_langgraph_store", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    lines: list[str] = []
    got = bench.main(["--quick", "--dir", str(tmp_path)], log=lines.append)
    assert {"JournalStore (files)", "SqliteStore, synchronous=FULL"} <= set(got["rates"])
    assert "JournalStore (files) / SqliteStore, synchronous=FULL" in got["ratios"]
    if require_services():
        assert not got["skipped"], got["skipped"]
    assert any("syncs every commit" in line for line in lines if "SqliteStore, synchronous=FULL" in line)
