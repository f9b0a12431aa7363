"""Readers that misbehave on purpose, for tests/test_hostile_fuzz.py: each one is what the hostile
files harness must catch (journal/crashsim/hostile.py). ``worker()`` is a worker process's entry."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from journal.crashsim import hostile
from journal.crashsim.hostile import COPIER, READ_ONLY, WRITER, Paths, Reader
from journal.errors import CorruptionError, InvariantError


def raises_value_error(p: Paths) -> dict[str, Any]:
    raise ValueError("a bare ValueError from a reader")


class _Silent(CorruptionError):
    """A typed error whose message says nothing."""

    def __init__(self) -> None:
        Exception.__init__(self, "")

    def __str__(self) -> str:
        return ""


def raises_empty_message(p: Paths) -> dict[str, Any]:
    raise _Silent()


def raises_invariant(p: Paths) -> dict[str, Any]:
    raise InvariantError("an engine check that the input tripped")


def raises_typed(p: Paths) -> dict[str, Any]:
    raise CorruptionError("00000000000000000001.seg", 64, 1, "a typed error with a message")


def hangs(p: Paths) -> dict[str, Any]:
    time.sleep(3600)
    return {}


def blows_up(p: Paths) -> dict[str, Any]:
    chunks = [bytearray(64 << 20) for _ in range(64)]  # 4 GiB, past any sane RLIMIT_AS
    return {"n": len(chunks)}


def dies(p: Paths) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


def writes_journal(p: Paths) -> dict[str, Any]:
    with open(os.path.join(p.journal, "START"), "wb") as f:
        f.write(b"a read-only reader wrote this")
    return {}


def writes_outside(p: Paths) -> dict[str, Any]:
    with open(os.path.join(p.box, "sentinel"), "ab") as f:
        f.write(b"!")
    return {}


def cuts_without_keeping(p: Paths) -> dict[str, Any]:
    seg = hostile.segment_names(hostile.read_tree(p.journal))[0]
    path = os.path.join(p.journal, seg)
    os.truncate(path, os.path.getsize(path) - 40)
    return {}


def cuts_and_keeps(p: Paths) -> dict[str, Any]:
    seg = hostile.segment_names(hostile.read_tree(p.journal))[0]
    path = os.path.join(p.journal, seg)
    with open(path, "rb") as f:
        data = f.read()
    os.makedirs(os.path.join(p.journal, "quarantine"), exist_ok=True)
    with open(os.path.join(p.journal, "quarantine", seg + ".kept.torn"), "wb") as f:
        f.write(data[-40:])
    os.truncate(path, len(data) - 40)
    return {}


def leaves_temp(p: Paths) -> dict[str, Any]:
    os.makedirs(os.path.join(p.out, ".dest.salvage-x"))
    return {"made": False}


def well_behaved(p: Paths) -> dict[str, Any]:
    import journal

    with journal.open(p.journal, readonly=True) as j:
        return {"records": sum(1 for _ in j.read())}


PLANTED: list[Reader] = [
    Reader("value-error", READ_ONLY, raises_value_error),
    Reader("empty-message", READ_ONLY, raises_empty_message),
    Reader("invariant", READ_ONLY, raises_invariant),
    Reader("typed", READ_ONLY, raises_typed),
    Reader("hang", READ_ONLY, hangs),
    Reader("memory", READ_ONLY, blows_up),
    Reader("dies", READ_ONLY, dies),
    Reader("writes-journal", READ_ONLY, writes_journal),
    Reader("writes-outside", READ_ONLY, writes_outside),
    Reader("cuts-without-keeping", WRITER, cuts_without_keeping),
    Reader("cuts-and-keeps", WRITER, cuts_and_keeps),
    Reader("leaves-temp", COPIER, leaves_temp),
    Reader("well-behaved", READ_ONLY, well_behaved),
]


def worker(memory_bytes: int) -> None:
    hostile.worker_loop(PLANTED, memory_bytes)
