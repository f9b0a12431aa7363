"""bench/callgrind.py on one tiny workload under callgrind: its JSON and its table parse, the count
is positive, and twice the work counts about twice the instructions (so what is counted is the
work, not the interpreter's start-up and the set-up around it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "callgrind.py"

pytestmark = pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="valgrind is not installed: bench/callgrind.py runs the workloads under it"
)


def _run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(ROOT), "--workload", "append-sync-nocompress", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_counts_the_work_and_only_it() -> None:
    once = json.loads(_run("--count", "10", "--json"))
    (row,) = once["results"]
    assert row["workload"] == "append-sync-nocompress" and row["n"] == 10
    assert once["checkouts"]["A"]["path"] in ("native", "pure")
    assert row["A"] > 0
    once_total = row["A"] * 10

    table = _run("--count", "20")
    m = re.search(r"^\| append-sync-nocompress \| 20 \| ([\d,]+) \|$", table, re.M)
    assert m is not None, table
    twice_total = int(m.group(1).replace(",", "")) * 20
    # The interpreter's start-up alone is tens of millions of instructions, a durable append tens
    # of thousands: were start-up or set-up counted, twice the records would add a few percent.
    assert 1.6 < twice_total / once_total < 2.4, (once_total, twice_total)
