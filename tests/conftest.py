"""Shared helpers for the test suite."""

from __future__ import annotations

import os
import pathlib

import pytest

from journal import format as fmt


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
