"""Instructions counted by valgrind's callgrind for one run of a bench script: the count every
``--callgrind`` bench of this folder reads (bench_codec_cpu.py, bench_langgraph_cpu.py).

Counts, unlike times, repeat from run to run on a shared machine; one hash seed for every run
keeps set and dict layouts, and so the counts, the same each time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence


def callgrind_ir(script: str, args: list[str], out: str, valgrind_args: Sequence[str] = ()) -> int:
    """Total instructions of ``python script *args`` under callgrind (its output file: ``out``);
    ``valgrind_args`` go to valgrind (bench/callgrind.py's ``--toggle-collect``, for one)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            *valgrind_args,
            sys.executable,
            os.path.abspath(script),
            *args,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    with open(out) as f:
        text = f.read()
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"no totals in {out}")
    return int(m.group(1))
