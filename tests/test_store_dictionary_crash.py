"""A power loss anywhere in training a store's dictionary and in the session write that follows.

The run, recorded on the crash simulator's file system (journal/crashsim/memfs.py): train the
store's dictionary (it is stored: the rename of its file makes it current), then open a session
made before it for writing (the store gives it the dictionary; the engine links the file into
the journal directory before any frame names it) and append events at durability "sync". Every
state a power loss can leave, at every point of that run (journal/crashsim/model.py: each cut
of the pending operations, each one left out, torn writes), must reopen: every dictionary file
at its name is whole, every session reads back (what it held before the run, then a prefix of
the appended events holding at least every append acknowledged before the crash), so no frame
ever names a dictionary whose file is not whole; and the session opens for writing again.
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

import pytest

from journal import read_dictionary_file
from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.model import Replay, crash_points, exhaustive
from journal.errors import CorruptionError
from journal.session import dictionaries as D
from journal.session.store import SessionStore

ROOT = "/store"
SIZE = 512
WORDS = ["pytest", "failed", "passed", "assert", "traceback", "module", "import", "fixture", "error", "line"]
APPENDS = 4
_DICT_FILE = re.compile(r"dict-\d{5}\.zdict")


def _text(rng: random.Random) -> str:
    return "run the tool and report: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 50)))


def _base() -> tuple[Any, list[str]]:
    """A store with two sessions, enough records for a small dictionary, all of it durable."""
    fs = MemFileSystem()
    st = SessionStore(ROOT, fs=fs)
    rng = random.Random(1)
    ids = []
    for _ in range(2):
        s = st.create(workspace={"path": "/repo"}, durability_floor="sync")
        for i in range(40):
            s.append("user.message", {"text": _text(rng), "n": i})
        s.close()
        ids.append(s.store_id)
    return fs.snapshot(), sorted(ids)


def _read(fs: MemFileSystem, sid: str) -> list[Any]:
    st = SessionStore(ROOT, fs=fs)
    s = st.open(sid, readonly=True)
    try:
        return [r.event for r in s.journal.read()]
    finally:
        s.close()


def _train_kwargs() -> dict[str, Any]:
    return {"size_bytes": SIZE, "sample_bytes_min": 8 * 1024, "sessions_min": 2}


def test_a_power_loss_anywhere_in_training_and_the_next_write_leaves_a_store_that_reads_back() -> None:
    base, ids = _base()
    before = {sid: _read(MemFileSystem.from_image(base), sid) for sid in ids}
    fs = MemFileSystem.from_image(base)
    st = SessionStore(ROOT, fs=fs)
    assert D.train_store_dictionary(st, **_train_kwargs()).stored
    trained_at = fs.op_count()
    s = st.open(ids[0], durability_floor="sync")
    acked: list[tuple[int, dict[str, Any]]] = []  # (op count when acknowledged, the event's data)
    rng = random.Random(2)
    for i in range(APPENDS):
        data = {"text": _text(rng), "after": i}
        s.append("user.message", data)
        acked.append((fs.op_count(), data))
    s.close()
    journal_dir = f"{ROOT}/sessions/{ids[0]}/journal"
    assert "dict-00001.zdict" in fs.listdir(journal_dir)
    # The appended frames do name the dictionary: without its file they do not read.
    files, dirs = fs.snapshot()
    without = MemFileSystem.from_image(({p: b for p, b in files.items() if not p.endswith(".zdict")}, dirs))
    with pytest.raises(CorruptionError):
        _read(without, ids[0])

    replay = Replay(fs.log, fs.base, fs.base_inodes)
    points = set(crash_points(fs.log))
    rng_states = random.Random(0)
    states = with_dictionary = named = 0
    while True:
        if replay.point in points:
            for state in exhaustive(replay, "psow", rng_states):
                files, dirs = replay.build(state).image
                _check(files, dirs, ids, before, acked, state.point, "\n".join(state.describe(fs.log)))
                states += 1
                with_dictionary += any(
                    _DICT_FILE.fullmatch(os.path.basename(p)) for p in files if p.startswith(f"{ROOT}/sessions/")
                )
                named += state.point >= trained_at
        if replay.point >= len(fs.log):
            break
        replay.advance()
    # The run was cut before, inside and after the training and the write, and the states include
    # journals that hold the dictionary (so frames naming it were read back).
    assert states > 100 and with_dictionary > 10 and named > 10, (states, with_dictionary, named)


def _check(
    files: dict[str, bytes],
    dirs: frozenset[str],
    ids: list[str],
    before: dict[str, list[Any]],
    acked: list[tuple[int, dict[str, Any]]],
    point: int,
    where: str,
) -> None:
    fs = MemFileSystem.from_image((files, dirs))
    for path in files:
        if _DICT_FILE.fullmatch(os.path.basename(path)):
            read_dictionary_file(fs, path)  # whole and verified wherever it is at its name
    for sid in ids:
        got = _read(fs, sid)
        assert got[: len(before[sid])] == before[sid], where
        tail = [e["data"] for e in got[len(before[sid]) :]]
        if sid == ids[0]:
            assert tail == [d for _, d in acked[: len(tail)]], where  # a prefix of the appends
            assert len(tail) >= sum(1 for at, _ in acked if at <= point), where  # none acknowledged is lost
        else:
            assert tail == [], where
    st = SessionStore(ROOT, fs=fs)
    s = st.open(ids[0])  # the session opens for writing again: with whatever dictionary is whole
    s.append("user.message", {"text": "after the crash"})
    s.close()
    assert _read(fs, ids[0])[-1]["data"] == {"text": "after the crash"}, where
