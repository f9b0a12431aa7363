"""The backends the contract suite runs on (tests/test_contract.py), one fixture for all three.

A backend hands out fresh journal targets (a path, or a URL with ``?journal=NAME``) that
``journal.open`` takes, and can change the stored bytes of one record behind the journal's back
(``tamper``), which is how the suite checks that corruption is refused on every backend.

The file engine is always here. PostgreSQL and JetStream come from tests/backend_postgres.py and
tests/backend_nats.py, each exposing ``make_backend(tmp_root) -> Backend | str`` (a string says
why it cannot run here: a server not reachable, a client library missing). Without a server the
suite skips that backend, unless JOURNAL_REQUIRE_SERVICES=1 (CI, which starts them), where a
missing one fails.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import uuid
from collections.abc import Iterator
from typing import Protocol

import pytest

from journal.engine import format as fmt
from tests.conftest import frames_of, segments

BACKENDS = ("file", "postgres", "nats")


class Backend(Protocol):
    name: str
    # Whether "sync" is what this backend gives in the test set-up (JetStream: an R3 stream).
    sync_durable: bool

    def target(self, name: str | None = None) -> str:
        """A new journal's target for journal.open (a fresh name unless one is given)."""
        ...

    def tamper(self, target: str, seq: int) -> None:
        """Flip one bit of the stored payload of record ``seq`` (the journal is closed)."""
        ...

    def store_location(self) -> str:
        """A store of journals (``journal.store``) of its own: a directory, or a URL."""
        ...

    def close(self) -> None: ...


class FileBackend:
    name = "file"
    sync_durable = True

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def target(self, name: str | None = None) -> str:
        return str(self.root / (name or uuid.uuid4().hex[:12]))

    def tamper(self, target: str, seq: int) -> None:
        for seg in segments(target):
            for frame in frames_of(seg):
                if frame.seq == seq and frame.flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA:
                    data = bytearray(seg.read_bytes())
                    data[frame.payload_offset + frame.stored_len // 2] ^= 0x01
                    seg.write_bytes(bytes(data))
                    return
        raise LookupError(f"no record {seq} in {target}")

    def store_location(self) -> str:
        return str(self.root / f"store-{uuid.uuid4().hex[:8]}")

    def close(self) -> None:
        pass


def make(name: str, root: pathlib.Path) -> Backend | str:
    """The backend called ``name``, or why it cannot run here."""
    if name == "file":
        return FileBackend(root)
    try:
        module = importlib.import_module(f"tests.backend_{name}")
    except ModuleNotFoundError as exc:
        return f"{name} backend tests not available: {exc}"
    made: Backend | str = module.make_backend(root)
    return made


def require_services() -> bool:
    return os.environ.get("JOURNAL_REQUIRE_SERVICES") == "1"


def made_or_skipped(name: str, root: pathlib.Path) -> Iterator[Backend]:
    """The body of every backend fixture: the backend, closed after the test; a skip when it
    cannot run here (a failure when JOURNAL_REQUIRE_SERVICES=1)."""
    made = make(name, root)
    if isinstance(made, str):
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {made}")
        pytest.skip(made)
    try:
        yield made
    finally:
        made.close()
