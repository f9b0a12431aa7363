"""The server backends stay in small rooms (issue 34): no file under journal/remote/ over
FILE_LINES_MAX lines, no class over CLASS_LINES_MAX, as scripts/sizes counts them (ast)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Final

ROOT: Final = pathlib.Path(__file__).resolve().parent.parent
SIZES: Final = ROOT / "scripts" / "sizes"
FILE_LINES_MAX: Final = 600
CLASS_LINES_MAX: Final = 400


def sizes(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SIZES), *args], capture_output=True, text=True, check=False)


def test_every_file_and_class_under_journal_remote_is_within_its_budget() -> None:
    got = sizes("--file-lines-max", str(FILE_LINES_MAX), "--class-lines-max", str(CLASS_LINES_MAX),
                str(ROOT / "journal" / "remote"))
    assert got.returncode == 0, got.stdout + got.stderr
    assert "postgres/commit.py" in got.stdout and "jetstream" in got.stdout  # both backends were counted


def test_sizes_names_what_is_over_budget_and_leaves_links_out(tmp_path: pathlib.Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "big.py").write_text("import os\n\n\n@dataclass\nclass A:\n    class B:\n        x = 1\n    y = 2\n")
    (pkg / "small.py").write_text("x = 1\n")
    (pkg / "notes.txt").write_text("\n" * 50)
    outside = tmp_path / "outside.py"
    outside.write_text("\n" * 50)
    os.symlink(outside, pkg / "linked.py")
    got = sizes("--file-lines-max", "7", "--class-lines-max", "4", str(pkg))
    assert got.returncode == 1, got.stdout + got.stderr
    over = got.stdout.split("over budget:\n", 1)[1].splitlines()
    assert over == [f"  {pkg / 'big.py'}: 8 lines (budget 7)", f"  {pkg / 'big.py'}: class A: 5 lines (budget 4)"]
    assert "     2      class A.B" in got.stdout  # a nested class, named by its path
    assert f"left out (a link): {pkg / 'linked.py'}" in got.stdout
    assert "notes.txt" not in got.stdout
    assert sizes("--file-lines-max", "8", "--class-lines-max", "5", str(pkg)).returncode == 0


def test_sizes_refuses_a_file_that_does_not_parse_or_a_missing_path(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.py").write_text("class (:\n")
    assert sizes(str(tmp_path)).returncode == 2
    assert sizes(str(tmp_path / "nowhere")).returncode == 2
