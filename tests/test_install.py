"""The package as a user installs it and first meets it.

- Every install line in the tree names the package's own name on the index (journal-engine;
  "journal" there is an unrelated project), and the extras are ranges that the CI and lowest
  constraint files pin inside.
- ``journal --version``, ``python -m journal``, a subcommand's own usage for an unknown option,
  command-line wording for a missing journal, and an adapter imported without its framework
  naming the extra to install.
- Run by scripts/test-pythons in a fresh venv of each supported Python (JOURNAL_INSTALLED set),
  on the package installed from a built wheel with no compiler on PATH, or from the sdist with
  no compiler: the package is the installed one, the C modules came with the wheel (or the pure
  path serves the sdist), and ``journal --version`` and ``journal demo`` work.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "journal-engine"

# The old spelling of an install line: the extra of a package called journal (not preceded by
# a word character, a dot, a hyphen or a slash, so journal-engine's extras and '.[x]' pass), or
# pip naming journal itself. Written with escapes so that this file does not match itself.
OLD_SPELLINGS = (
    re.compile(r"(?<![\w.\-/])journal\[[A-Za-z{][\w,\-{}.]*\]"),
    re.compile(r"\bpip3?\s+(?:install|download)\s+(?:-{1,2}[\w\-]+\s+)*['\"]?journal(?![\w\-.\[/])"),
)

# The extras that install a framework or a client library (as ranges, pinned by the constraint
# files), and those that do not (tools pinned exactly, benchmark peers, extras of extras).
FRAMEWORK_EXTRAS = ("openai-agents", "langgraph", "langgraph-test", "adk", "pydantic-ai", "claude-agent-sdk",
                    "langgraph-store", "strands", "agent-framework", "postgres", "nats")


def _text_files() -> list[Path]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_file_tells_a_user_to_install_the_old_name() -> None:
    found = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # not text
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in OLD_SPELLINGS):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, f"install lines that name another project (use {DISTRIBUTION}):\n" + "\n".join(found)


def test_the_old_spellings_are_recognised() -> None:
    # The check above cannot pass by matching nothing.
    old = ["pip install 'jour" + "nal[langgraph]'", "pip install jour" + "nal", "(`jour" + "nal[nats]`)",
           "pip install -U jour" + "nal\n", "``pip install 'jour" + "nal[NAME]'``", "'jour" + "nal[{extra}]'"]
    new = ["pip install 'journal-engine[langgraph]'", "pip install journal-engine", "pip install -e '.[adk]'",
           "self.journal" + "[key]", "pip install journal_engine-0.1.0.whl"]
    assert all(any(p.search(s) for p in OLD_SPELLINGS) for s in old)
    assert not any(p.search(s) for p in OLD_SPELLINGS for s in new)


def _pyproject() -> dict[str, object]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the tree's checks run on the suite's Python
    with open(ROOT / "pyproject.toml", "rb") as f:
        loaded: dict[str, object] = tomllib.load(f)
    return loaded


def _constraints(name: str) -> list[str]:
    lines = (ROOT / "constraints" / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _framework_requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    assert project["name"] == DISTRIBUTION
    extras = project["optional-dependencies"]
    reqs = []
    assert isinstance(extras, dict)
    for extra in FRAMEWORK_EXTRAS:
        for spec in extras[extra]:
            req = Requirement(spec)
            if req.name != DISTRIBUTION:  # langgraph-test names the langgraph extra
                reqs.append(req)
    return reqs


def test_framework_extras_are_ranges_and_the_constraint_files_pin_inside_them() -> None:
    reqs = _framework_requirements()
    lowest = {Requirement(line).name: Requirement(line) for line in _constraints("lowest.txt")}
    ci = [Requirement(line) for line in _constraints("ci.txt")]
    for req in reqs:
        ops = {s.operator for s in req.specifier}
        assert ops == {">=", "<"}, f"{req}: a range from the lowest release tested to the next that may break"
        (low,) = [s.version for s in req.specifier if s.operator == ">="]
        assert req.name in lowest, f"constraints/lowest.txt has no line for {req.name}"
        pinned = [s.version for s in lowest[req.name].specifier]
        assert pinned == [low], f"constraints/lowest.txt pins {req.name} at {pinned}, the range starts at {low}"
        in_ci = [c for c in ci if c.name == req.name]
        assert in_ci, f"constraints/ci.txt has no line for {req.name}"
        for c in in_ci:
            (version,) = [s.version for s in c.specifier if s.operator == "=="]
            assert req.specifier.contains(version), f"constraints/ci.txt: {c} is outside {req}"
    assert set(lowest) == {r.name for r in reqs}, "constraints/lowest.txt names a package no extra has"


# -- the first commands ----------------------------------------------------------------------


def _journal(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def test_version_and_python_m_journal() -> None:
    got = _journal("--version")
    assert got.returncode == 0, got.stderr
    import journal

    assert got.stdout.startswith("journal "), got.stdout
    assert f"from {Path(journal.__file__).resolve().parent}" in got.stdout
    assert ("C helper" if journal.native_available() else "pure Python") in got.stdout


def test_an_unknown_option_shows_the_subcommands_usage(tmp_path: Path) -> None:
    got = _journal("cat", str(tmp_path / "j"), "--bogus")
    assert got.returncode == 2
    # (after the pure path's one warning line, where the C helper is not built)
    assert "\nusage: journal cat " in "\n" + got.stderr, got.stderr
    assert "journal cat: error: unrecognized arguments: --bogus" in got.stderr


def test_a_missing_journal_is_explained_in_command_line_terms(tmp_path: Path) -> None:
    got = _journal("info", str(tmp_path / "nowhere"))
    assert got.returncode == 4
    assert "journal.open" not in got.stderr and "create=True" not in got.stderr, got.stderr
    assert "no journal at" in got.stderr and "journal import" in got.stderr


ADAPTERS = {
    "adk": ("google.adk", "adk"),
    "agent_framework": ("agent_framework", "agent-framework"),
    "langgraph": ("langgraph", "langgraph"),
    "openai_agents": ("agents", "openai-agents"),
    "pydantic_ai": ("pydantic_ai", "pydantic-ai"),
    "strands": ("strands", "strands"),
    "strands_guard": ("strands", "strands"),
}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_an_adapter_without_its_framework_names_the_extra(adapter: str) -> None:
    framework, extra = ADAPTERS[adapter]
    code = (
        "import sys\n"
        f"sys.modules[{framework!r}] = None  # as if it were not installed\n"
        "from journal.errors import MissingExtraError\n"
        "try:\n"
        f"    import journal.adapters.{adapter}\n"
        "except MissingExtraError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('imported')\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    assert f"pip install '{DISTRIBUTION}[{extra}]'" in got.stdout, got.stdout


# -- the installed package (scripts/test-pythons) --------------------------------------------

INSTALLED = os.environ.get("JOURNAL_INSTALLED", "")
installed = pytest.mark.skipif(
    not INSTALLED, reason="scripts/test-pythons runs these in a fresh venv of each Python (JOURNAL_INSTALLED)"
)
C_MODULES = ("journal.engine._journal_native", "journal.engine._zstd_held", "journal._write_sync",
             "journal._json_floats")


@installed
def test_the_package_is_the_installed_one() -> None:
    import journal

    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    assert Path(journal.__file__).resolve().is_relative_to(site), (journal.__file__, site)
    assert metadata.distribution(DISTRIBUTION).metadata["Name"] == DISTRIBUTION
    assert INSTALLED in ("wheel", "sdist-without-compiler"), INSTALLED


@installed
def test_the_c_modules_came_with_the_wheel() -> None:
    import importlib

    import journal

    files = [str(f) for f in metadata.distribution(DISTRIBUTION).files or ()]
    compiled = sorted(f for f in files if f.endswith(".so"))
    if INSTALLED == "wheel":
        assert journal.native_available(), "the wheel's C helper is not in use"
        for name in C_MODULES:
            importlib.import_module(name)
        assert len(compiled) == len(C_MODULES), compiled
    else:  # built from the sdist with no compiler: the pure path, and nothing half-built
        assert not journal.native_available()
        assert compiled == [], compiled


@installed
def test_the_journal_command_works(tmp_path: Path) -> None:
    command = Path(sys.executable).parent / "journal"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"journal {metadata.version(DISTRIBUTION)} from "), version.stdout
    assert f"Python {sys.version.split()[0]}" in version.stdout
    demo = subprocess.run([str(command), "demo", "--dir", str(tmp_path / "demo"), "--events", "50"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "reopened" in demo.stdout


def test_crash_test_list_describes_every_workload() -> None:
    got = _journal("crash-test", "--list")
    assert got.returncode == 0, got.stderr
    rows = [line.split(None, 1) for line in got.stdout.splitlines() if line.strip()]
    assert {"retention", "shared-writers"} <= {row[0] for row in rows}
    assert all(len(row) == 2 and len(row[1]) > 20 for row in rows), [row for row in rows if len(row) < 2]


@pytest.mark.parametrize(("url", "library", "extra"), [
    ("postgresql://127.0.0.1:5432/test?journal=x", "psycopg", "postgres"),
    ("nats://127.0.0.1:4222?journal=x", "nats", "nats"),
])
def test_a_server_url_without_its_client_library_names_the_extra(url: str, library: str, extra: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{library!r}] = None  # as if it were not installed\n"
        "import journal\n"
        "try:\n"
        f"    journal.open({url!r})\n"
        "except journal.JournalError as exc:\n"
        "    print(exc)\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.count(f"pip install '{DISTRIBUTION}[{extra}]'") == 1, got.stdout


@pytest.mark.parametrize(("package", "library", "extra"), [
    ("journal.remote.postgres", "psycopg", "postgres"),
    ("journal.remote.jetstream", "nats", "nats"),
])
def test_every_module_of_a_backend_without_its_client_library_names_the_extra(package: str, library: str,
                                                                              extra: str) -> None:
    """Whichever module of a server backend is imported first (a tool walking the package, a
    test), a missing client library is MissingExtraError with the install line, never a bare
    ModuleNotFoundError."""
    code = (
        "import importlib, pkgutil, sys\n"
        f"sys.modules[{library!r}] = None  # as if it were not installed\n"
        "from journal.errors import MissingExtraError\n"
        f"spec = importlib.util.find_spec({package!r})\n"
        "names = [''] + ['.' + m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)]\n"
        "for name in names:\n"
        "    for key in [k for k in sys.modules if k.startswith('journal.remote')]:\n"
        "        del sys.modules[key]\n"
        "    try:\n"
        f"        importlib.import_module({package!r} + name)\n"
        "        print(name, 'imported')\n"
        "    except MissingExtraError as exc:\n"
        f"        print(name, 'ok' if {extra!r} in str(exc) else 'no install line')\n"
        "    except Exception as exc:\n"
        "        print(name, type(exc).__name__)\n"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stdout + got.stderr
    lines = got.stdout.split("\n")[:-1]
    assert len(lines) > 5 and all(line.endswith(" ok") for line in lines), got.stdout


def test_every_module_imports_on_this_python() -> None:
    # A module written for a later Python than the package claims fails here on the earlier
    # one (scripts/test-pythons runs this file on each). An adapter or backend whose framework
    # is not installed raises MissingExtraError, which is what it should do.
    import importlib
    import pkgutil

    import journal
    from journal.errors import MissingExtraError

    failed, imported = [], 0
    for info in pkgutil.walk_packages(journal.__path__, "journal."):
        if info.name.endswith("__main__"):
            continue  # runs the command
        try:
            importlib.import_module(info.name)
            imported += 1
        except MissingExtraError:
            pass
        except Exception as exc:
            failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
    assert not failed, "\n".join(failed)
    assert imported > 80
