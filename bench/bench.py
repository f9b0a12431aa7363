"""Run `journal bench` from a checkout without installing the package.

    .venv/bin/python bench/bench.py            # the full run (a few minutes; 1 GiB of scratch disk)
    .venv/bin/python bench/bench.py --quick    # under a minute

The runner lives in the package (journal/benchmark/) so that `journal bench` works from an
installed wheel; this script only puts the checkout first on sys.path. Results go to
bench/results/ (bench.md, bench.json, bench.png; quick.* for --quick).
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from journal.cli import main  # noqa: E402

if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(["bench", *sys.argv[1:]]))
