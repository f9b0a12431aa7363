"""langgraph-checkpoint's own store tests (tests/test_store.py of its sdist) against JournalStore.

The sdist is downloaded from the package registry at test time into a temporary directory, at
the installed version; tests/adapters_langgraph_store_plugin.py substitutes JournalStore for the
module's InMemoryStore, so each of its tests runs its own assertions on our store: namespaces
and their validation, listing with prefixes, suffixes, wildcards, depth and pagination, search
pages, the async batching wrapper over our store, and semantic search (its character-count
embedder, updates, filters, per-put index fields, pagination). Nothing is left out. On files
always; on PostgreSQL and JetStream when their servers are here.

The langgraph sdist ships no store tests of its own (its tests/conftest_store.py only builds
InMemoryStore and PostgresStore fixtures for its graph tests).
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from tests.backends import Backend, made_or_skipped
from tests.conftest import report_count

pytest.importorskip("langgraph.store.memory")

PLUGIN = "adapters_langgraph_store_plugin"
MODULE = "tests/test_store.py"
# What the module holds at 4.3.2 (constraints/ci.txt), every one run; and how many of them
# open a journal through the substituted store (the rest test the base's validation before any
# batch, the async batching wrapper with a mock store, and text extraction).
TESTS_MIN = 117
ON_JOURNAL_MIN = 25


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    version = importlib.metadata.version("langgraph-checkpoint")
    work = tmp_path_factory.mktemp("lgcp-sdist")
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
         f"langgraph-checkpoint=={version}", "-d", str(work)],
        capture_output=True, text=True, timeout=300,
    )
    assert got.returncode == 0, f"pip download langgraph-checkpoint=={version} failed: {got.stderr[-2000:]}"
    (archive,) = work.glob("langgraph_checkpoint-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    root = work / f"langgraph_checkpoint-{version}"
    assert (root / MODULE).is_file(), f"the sdist of langgraph-checkpoint {version} has no {MODULE}"
    return root


def run_suite(root: pathlib.Path, report: pathlib.Path, env_extra: dict[str, str]) -> dict[str, int]:
    cmd = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:asyncio",
           "-p", "no:pytest_mock", "-q", "-o", "addopts=--strict-markers --strict-config", f"--junitxml={report}",
           MODULE]
    tally = report.with_suffix(".tally")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(pathlib.Path(__file__).parent)]),
           "JOURNAL_LGSTORE_TALLY": str(tally), **env_extra}
    got = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    assert got.returncode == 0, got.stdout[-6000:] + got.stderr[-3000:]
    counts["on_journal"] = len(tally.read_text().splitlines()) if tally.exists() else 0
    return counts


def test_langgraph_checkpoint_store_tests_on_files(sdist: pathlib.Path, tmp_path: pathlib.Path) -> None:
    counts = run_suite(sdist, tmp_path / "report.xml", {})
    report_count("langgraph-checkpoint store tests on JournalStore (files)",
                 f"{counts['passed']} passed, {counts['on_journal']} of them on a journal")
    assert counts["passed"] == counts["tests"] >= TESTS_MIN and counts["on_journal"] >= ON_JOURNAL_MIN, counts


@pytest.fixture(params=("postgres", "nats"))
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_langgraph_checkpoint_store_tests_on_servers(
    server: Backend, sdist: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    location = server.store_location()
    counts = run_suite(sdist, tmp_path / "report.xml", {"JOURNAL_LGSTORE_STORE": location})
    report_count(f"langgraph-checkpoint store tests on JournalStore ({server.name})",
                 f"{counts['passed']} passed, {counts['on_journal']} of them on a journal")
    assert counts["passed"] == counts["tests"] >= TESTS_MIN and counts["on_journal"] >= ON_JOURNAL_MIN, counts
