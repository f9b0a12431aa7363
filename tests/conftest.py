"""Shared helpers for the test suite."""

from __future__ import annotations

import os
import pathlib

import pytest

from journal.engine import format as fmt


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


@pytest.fixture
def jpath(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "j")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the crash harness explored (tests/test_crash_harness.py fills SUMMARY)."""
    import sys

    mod = next((m for n, m in sys.modules.items() if n.endswith("test_crash_harness")), None)
    summary = getattr(mod, "SUMMARY", None)
    if not summary:
        return
    states = summary.get("states", {})
    tr = terminalreporter
    tr.write_sep("-", "crash harness")
    tr.write_line(
        f"power-loss states: {sum(states.values())} ({', '.join(f'{m}: {n}' for m, n in states.items())}), "
        f"violations: {summary.get('violations', 0)}"
    )
    if "npsow" in states:
        opt = summary.get("sector_option")
        tr.write_line(f"  npsow ran {'with ' + opt + '=4096' if opt else 'without sector padding (none offered)'}")
    if "kill_rounds" in summary:
        tr.write_line(f"kill -9 rounds: {summary['kill_rounds']}, violations: {summary['kill_violations']}")
    if "fault_sites" in summary:
        tr.write_line(f"injected-error sites: {summary['fault_sites']}, violations: {summary['fault_violations']}")
