"""The layers hold: every module imports on its own, and the import contracts are kept.

A module that only imports because some other module happened to be imported first (a cycle
broken by luck, a name taken from a half-initialised package) fails here, in a fresh interpreter
per module, before it fails for a user whose first import is that module. The contracts
themselves (which layer may import which) are in pyproject.toml, ``[tool.importlinter]``.
"""

from __future__ import annotations

import os
import pathlib
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import importlinter  # noqa: F401 - in the test extra: its absence is a broken set-up, not a skip

import journal
import journal.api
from journal.engine.core import Journal as FileJournal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED = {
    "journal.engine._journal_native",  # the compiled helper: imported through journal.engine.native
    "journal.cli.__main__",  # runs the command
    "journal.__main__",  # runs the command (python -m journal)
}
IMPORT_TIMEOUT_S = 120
# Each check is a process start and an import: they wait on the interpreter, not on each other.
WORKERS = max(2, 2 * (os.cpu_count() or 1))
# The names journal exported before journal.api existed; a release may add names, never drop one.
PUBLIC_NAMES = {
    "AckLost", "Committed", "CorruptionError", "EventNotSerializableError", "Journal", "JournalClosedError",
    "JournalError", "JournalFailStoppedError", "JournalIOError", "JournalLockedError", "JournalNotFoundError",
    "NewerFormatError", "NotAJournalError", "NotCommitted", "Options", "Outcome", "ReadOnlyError", "Record",
    "RecordTooLargeError", "RecoveryReport", "SequenceError", "native_available", "open",
}


def modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(journal.__path__, "journal.")]
    return sorted({"journal", *names} - SKIPPED)


def _import_alone(name: str) -> tuple[str, int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
    )
    return name, proc.returncode, proc.stderr


def test_every_module_imports_on_its_own_in_a_fresh_interpreter() -> None:
    names = modules()
    assert len(names) > 50 and "journal.api" in names and "journal.session.fork" in names, names
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(_import_alone, names))
    failed = [f"{name} (exit {rc}):\n{err.strip().splitlines()[-1] if err.strip() else ''}"
              for name, rc, err in results if rc != 0]
    assert not failed, "modules that do not import on their own:\n" + "\n".join(failed)


def test_the_import_contracts_are_kept() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout, proc.stdout


def test_the_file_engine_implements_the_protocols(tmp_path: pathlib.Path) -> None:
    # mypy holds the signatures (journal/__init__.py); this holds the names at run time. The
    # Journal protocol has properties, so only an instance can be checked against it.
    assert journal.Journal is FileJournal and issubclass(FileJournal, journal.api.PrefixCopier)
    with journal.open(tmp_path / "j", create=True) as j:
        assert isinstance(j, journal.api.Journal) and isinstance(j, journal.api.PrefixCopier)


def test_the_public_names_stay_and_the_api_exports_its_vocabulary() -> None:
    assert set(journal.__all__) >= PUBLIC_NAMES
    for name in journal.__all__:
        assert hasattr(journal, name), name
    for name in journal.api.__all__:
        assert hasattr(journal.api, name), name
    from journal.api import Committed, Journal, JournalError, Record, RecoveryReport  # the documented import

    assert Committed is journal.Committed and JournalError is journal.JournalError
    assert Record is journal.Record and RecoveryReport is journal.RecoveryReport
    assert Journal is journal.api.Journal
