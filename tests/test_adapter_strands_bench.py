"""bench/bench_adapters.py's Strands workloads: each store's run stores and lists what it wrote, and
the check refuses a run whose listing is short or out of order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.guard_harness import missing_framework_reason

pytest.importorskip("strands", reason=missing_framework_reason("strands", "strands"))



def _load() -> ModuleType:
    """bench/bench_adapters.py, loaded by path as tests/test_bench_adapters.py loads it (one copy)."""
    name = "bench_adapters_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "bench"
                                                  / "bench_adapters.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the file runs
    spec.loader.exec_module(mod)
    return mod


ba = _load()

MESSAGES = 7


@pytest.mark.parametrize("store", ["ours", ba.SHIPPED])
def test_strands_workloads_store_and_list_every_message(store: str, tmp_path: Path) -> None:
    run = ba.strands_messages(store, str(tmp_path / "w"), MESSAGES)
    assert run.ops == MESSAGES and run.stored["ids"] == list(range(MESSAGES)) and run.bytes > 0
    ba.check_strands(run, MESSAGES)
    restored = ba.strands_restore(store, str(tmp_path / "r"), MESSAGES, 2)
    assert restored.ops == 2 * MESSAGES
    ba.check_strands(restored, MESSAGES)
    assert ("does not sync" in run.durability) == (store == ba.SHIPPED)


def test_the_check_refuses_a_short_or_unordered_listing(tmp_path: Path) -> None:
    run = ba.strands_messages("ours", str(tmp_path), MESSAGES)
    for wrong in (run.stored["ids"][:-1], list(reversed(run.stored["ids"]))):
        with pytest.raises(AssertionError, match="Strands"):
            ba.check_strands(ba.Run(run.ops, run.seconds, run.bytes, run.durability, {"ids": wrong}), MESSAGES)


def test_the_workloads_are_listed() -> None:
    names = [w.name for w in ba.workloads(ba.QUICK) if w.name.startswith("Strands")]
    assert len(names) == 2
