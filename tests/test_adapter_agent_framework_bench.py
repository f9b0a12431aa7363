"""bench/bench_agent_framework.py at small sizes, in-process: every workload stores what it claims, on
the adapter and on the framework's file stores (fsync'd by the benchmark, and as shipped). No speed
is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra is not installed "
                                              "(pip install -e '.[agent-framework]')")

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    name = "bench_agent_framework_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "bench_agent_framework.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


baf = _load()


@pytest.mark.parametrize("store", ["ours", "full", "shipped"])
def test_each_workload_stores_what_it_claims(store: str, tmp_path: Path) -> None:
    for w in baf.workloads(baf.ba.Sizes(), 7, 9):
        where = tmp_path / w.ours / store
        where.mkdir(parents=True)
        run = w.fn(store, str(where))
        w.check(run)
        assert run.ops in (7, 9) and run.seconds > 0 and run.bytes > 0
        assert ("fdatasync" in run.durability) == (store == "ours")
        assert ("does not sync" in run.durability) == (store == "shipped")
