"""The reads of a store-dictionary training failed one at a time (EIO on every open_read and on
every pread of the held-out frames' reading): the training either ends with its report (a
session it could not read is left out, as a sampled one is) or raises a typed error; the store
is unchanged unless a whole dictionary was stored, and every session still reads back."""

from __future__ import annotations

import errno
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from journal.session import dictionaries as D
from journal.session.store import SessionStore

SIZE = 1024
WORDS = ["pytest", "failed", "passed", "assert", "traceback", "module", "import", "fixture", "error", "line"]
RUNS_MAX = 40  # fault sites tried per operation, spread over all of them (each run is a training)


def _make(root: Path, sessions: int) -> list[str]:
    st = SessionStore(root)
    rng = random.Random(11)
    ids = []
    for _ in range(sessions):
        s = st.create()
        try:
            for i in range(80):
                s.append("user.message", {"text": " ".join(rng.choice(WORDS) for _ in range(50)), "n": i})
        finally:
            s.close()
        ids.append(s.session_id)
    return ids


@pytest.mark.parametrize("sessions", [D.HELD_OUT_EVERY, 3], ids=["held-out-sessions", "held-out-bytes"])
@pytest.mark.parametrize("op", ["open_read", "pread"])
def test_a_read_failing_anywhere_in_a_training_is_a_skip_or_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sessions: int, op: str
) -> None:
    base = tmp_path / "base"
    ids = _make(base, sessions)
    counter = FaultyFileSystem(OsFileSystem())
    D.train_store_dictionary(SessionStore(base, fs=counter), size_bytes=SIZE)
    total = counter.calls[op]
    assert total > 0
    # The held-out frames' reading is where a JournalError is a skip, not the end of the training:
    # count the times it raised, to show that branch ran under the faults below.
    raised: list[BaseException] = []
    real = D._session_frames

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except BaseException as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(D, "_session_frames", counted)
    step = max(1, total // RUNS_MAX)
    reports = errors = 0
    for n in range(0, total, step):
        root = tmp_path / f"run-{n}"
        shutil.copytree(base, root)
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(op, errno.EIO, after=n)
        before = len(raised)
        try:
            report = D.train_store_dictionary(SessionStore(root, fs=fs), size_bytes=SIZE)
        except (journal.JournalError, OSError) as exc:
            errors += 1
            # A held-out session that could not be read is left out, never the end of it all.
            assert len(raised) == before, f"the held-out frames' read failure ended the training: {exc!r}"
        else:
            reports += 1
            assert report.reason  # it says why it kept or declined one
        fs.clear()
        st = SessionStore(root)
        for sid in ids:  # nothing of the sessions changed
            with st.open(sid, readonly=True) as s:
                assert s.journal.last_seq >= 80
        if fs.injected:
            current = D.current_dictionary(st)
            assert current is None or len(current.data) > 0  # no dictionary, or a whole one
    assert reports + errors == len(range(0, total, step))
    assert reports > 0, "no fault was taken as a skip: every read failure ended the training"
    if op == "open_read":
        assert any(isinstance(e, journal.JournalError) for e in raised), (
            "no fault reached the held-out frames' reading"
        )
