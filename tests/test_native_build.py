"""Installing without a working C compiler still succeeds, says so in one line, and runs pure."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from journal import fs, record
from journal.engine import native

ROOT = Path(__file__).resolve().parents[1]


def test_build_with_a_failing_compiler_warns_and_succeeds(tmp_path: Path) -> None:
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "native", tmp_path / "native")
    (tmp_path / "journal" / "engine").mkdir(parents=True)
    shutil.copy(ROOT / "journal" / "engine" / "_native_build.py", tmp_path / "journal" / "engine" / "_native_build.py")
    env = dict(os.environ, CC="false", LDSHARED="false")  # a compiler that exists and always fails
    res = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    warning = [ln for ln in res.stderr.splitlines() if "the C helper was not built" in ln]
    assert len(warning) == 1, res.stderr
    assert not list((tmp_path / "journal").rglob("_journal_native*"))
    held = [ln for ln in res.stderr.splitlines() if "the GIL-holding zstd module was not built" in ln]
    assert len(held) == 1, res.stderr
    assert not list((tmp_path / "journal").rglob("_zstd_held*"))
    floats = [ln for ln in res.stderr.splitlines() if "the big-float walk in C was not built" in ln]
    assert len(floats) == 1, res.stderr
    assert not list((tmp_path / "journal").rglob("_json_floats*"))
    write_sync = [ln for ln in res.stderr.splitlines() if "the one-call durable write was not built" in ln]
    assert len(write_sync) == 1, res.stderr
    assert not list((tmp_path / "journal").rglob("_write_sync*"))


def test_missing_module_falls_back_to_pure_with_one_warning_line(tmp_path: Path) -> None:
    # A copy of the package without the compiled module: what a compiler-less install leaves.
    shutil.copytree(ROOT / "journal", tmp_path / "journal", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    code = ("import journal, journal.engine.format as f, journal.record as r, journal.fs as fs; "
            "print(journal.native_available(), f.scan is f.py_scan, r._NO_BIG_FLOAT is r._no_big_float,"
            " fs._WRITE_ALL_SYNC is None)")
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_PURE"}
    # -S skips the .pth files, so the editable install's finder cannot map journal back here.
    paths = sysconfig.get_paths()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), paths["purelib"], paths["platlib"]])
    res = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True", "True", "True"]
    assert len(res.stderr.strip().splitlines()) == 1 and "C helper not available" in res.stderr


def test_every_c_source_the_build_names_ships_in_the_sdist() -> None:
    # setup.py's Extension sources and the cffi builder's; MANIFEST.in must carry each, or an
    # install from the sdist builds without that module and only warns.
    named = set(re.findall(r'"(native/[\w.]+\.[ch])"', (ROOT / "setup.py").read_text()))
    named |= {"native/journal_native.c", "native/journal_native.h"}
    assert "native/write_sync.c" in named
    shipped = set()
    for line in (ROOT / "MANIFEST.in").read_text().splitlines():
        if line.startswith("include "):
            shipped.update(line.split()[1:])
    assert named <= shipped, f"MANIFEST.in lacks {sorted(named - shipped)}"


# The bottom layer's compiled leaves, each loaded by its own module, which reads JOURNAL_PURE by
# name as journal/engine/native.py's forced_pure() does (that module is above them).
LEAF_LOADERS = [
    ("journal._json_floats", "no_big_float", lambda: record._walk_in_c()),
    ("journal._write_sync", "write_all_sync", lambda: fs._write_sync_in_c()),
]


@pytest.mark.parametrize("setting", ["1", "true", "yes", "0", ""])
@pytest.mark.parametrize(("name", "function", "load"), LEAF_LOADERS)
def test_journal_pure_is_read_as_the_engine_reads_it(
    monkeypatch: pytest.MonkeyPatch, setting: str, name: str, function: str, load: Callable[[], object]
) -> None:
    monkeypatch.setenv("JOURNAL_PURE", setting)
    got = load()
    if native.forced_pure():
        assert got is None
    else:
        try:
            mod = importlib.import_module(name)
        except ImportError:  # not built here: the loader must say so
            assert got is None
        else:
            assert got is getattr(mod, function)
