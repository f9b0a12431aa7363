"""Shared helpers for the test suite."""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from journal.engine import format as fmt

if TYPE_CHECKING:
    from tests.backend_postgres import PostgresBackend
    from tests.nats_cluster import Cluster

# No example has a deadline: timing is never asserted in tests (it belongs in benchmarks), and the
# suite's two passes share the machine, so how long an example took says nothing about the code.
settings.register_profile("journal", deadline=None)
settings.load_profile("journal")


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# scripts/test stops a pass with SIGTERM (its other pass failed or the run was cut off): as
# KeyboardInterrupt, pytest ends the session with its teardown, and the servers the tests
# started (tests/nats_cluster.py, stopped at exit) go with it instead of staying behind.
signal.signal(signal.SIGTERM, _interrupted)


@pytest.fixture
def block_cache_at_default() -> Iterator[None]:
    """The process's block cache at its default budget for the test, as it was after."""
    import journal

    before = journal.set_block_cache_bytes(journal.BLOCK_CACHE_BYTES_DEFAULT)
    yield
    journal.set_block_cache_bytes(before)


def count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an entry each time a point read takes the plain zstd decompressor (a
    block or a frame decoded, not served from the cache of decoded blocks)."""
    from journal.engine import reader

    calls: list[int] = []
    real = reader._decompressor

    def counted() -> Any:
        calls.append(1)
        return real()

    monkeypatch.setattr(reader, "_decompressor", counted)
    return calls


def segments(path: str | os.PathLike[str]) -> list[pathlib.Path]:
    return sorted(p for p in pathlib.Path(path).iterdir() if fmt.parse_segment_name(p.name) is not None)


def live_segment(path: str | os.PathLike[str]) -> pathlib.Path:
    return segments(path)[-1]


def frames_of(seg: pathlib.Path) -> list[fmt.Frame]:
    data = seg.read_bytes()
    header = fmt.decode_segment_header(data)
    return fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames


def snapshot_files(path: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under ``path`` (but the lock file) with its bytes."""
    root = pathlib.Path(path)
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != "LOCK"
    }


@pytest.fixture(scope="module")
def nats() -> Iterator[Cluster]:
    """The session's 3-node nats-server cluster (tests/nats_cluster.py), for a module's tests:
    skipped without nats-server, unless JOURNAL_REQUIRE_SERVICES=1 (then they fail)."""
    from tests.backends import require_services  # not at the top: tests.backends imports this module
    from tests.nats_cluster import cluster, skip_reason

    why = skip_reason()
    if why is not None:
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {why}")
        pytest.skip(why)
    yield cluster()


@pytest.fixture
def pg() -> Iterator[PostgresBackend]:
    """A scratch schema on the test server (tests/backend_postgres.py), dropped afterwards; the
    module using it skips itself when the server is unreachable."""
    from tests.backend_postgres import PostgresBackend  # not at the top: psycopg is an extra

    backend = PostgresBackend()
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def jpath(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "j")


# Counts that tests report (what they explored, checked or ran; each is asserted against a floor
# by its test), printed in the terminal summary below. Tests add to it with report_count().
COUNTS: dict[str, str] = {}


def report_count(what: str, value: object) -> None:
    COUNTS[what] = str(value)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the crash harness explored (tests/test_crash_harness.py fills SUMMARY) and the
    counts other tests reported."""
    import sys

    tr = terminalreporter
    mod = next((m for n, m in sys.modules.items() if n.endswith("test_crash_harness")), None)
    summary = getattr(mod, "SUMMARY", None)
    if summary:
        tr.write_sep("-", "crash harness")
        states: dict[str, dict[str, int]] = summary.get("states", {})
        runs: dict[str, dict[str, int]] = summary.get("runs", {})
        if states:
            models = sorted({m for per in states.values() for m in per}, key=("psow", "npsow").index)
            tr.write_line("distinct crash states: N per workload/model (power loss; each a disk image with what the")
            tr.write_line("ledger expects of it, checked once; asserted per pair), in R runs:")
            for name, per in states.items():
                ran = runs.get(name, {})
                cells = "  ".join(f"{m} {per[m]:>5} in {ran.get(m, 0):>3} runs" for m in models if m in per)
                tr.write_line(f"  {name:<17} {cells}")
            by_model = {m: sum(per.get(m, 0) for per in states.values()) for m in models}
            tr.write_line(
                f"  total {sum(by_model.values())} ({', '.join(f'{m}: {n}' for m, n in by_model.items())}), "
                f"violations: {summary.get('violations', 0)}"
            )
            if "npsow" in models:
                opt = summary.get("sector_option")
                how = f"with {opt}=4096" if opt else "without sector padding (none offered)"
                tr.write_line(f"  npsow ran {how}")
        kill = summary.get("kill")
        if kill:
            tr.write_line(
                f"kill -9 rounds: {kill['rounds']} ({kill['during_open']} killed during open, {kill['in_flight']} "
                f"with an append in flight); records acknowledged at flush/sync: {kill['acked']} "
                f"(in {kill['acking_rounds']} rounds, at most {kill['acked_max']} in one); "
                f"records read back: {kill['records_checked']}; violations: {kill['violations']}"
            )
        if "fault_sites" in summary:
            tr.write_line(f"injected-error sites: {summary['fault_sites']}, violations: {summary['fault_violations']}")
    if COUNTS:
        tr.write_sep("-", "counts reported by tests (each asserted against a floor)")
        for what, value in COUNTS.items():
            tr.write_line(f"{what}: {value}")
