"""Every write call of a training of the store's dictionary, failed in turn (EIO; ENOSPC and a short
write for pwrite): the training reports it (a typed error or an OSError), the store still has
either no dictionary or a whole one as its current choice, sessions still open for writing and
read back, and the training retried after the fault succeeds with an id never used before."""

from __future__ import annotations

import errno
import os
import random
import shutil
from pathlib import Path

import pytest

import journal
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from journal.session import dictionaries as D
from journal.session.store import SessionStore

SIZE = 1024
WRITE_OPS = ("open_write", "pwrite", "short_write", "fsync", "rename", "unlink", "mkdir", "fsync_dir", "link")
WORDS = ["pytest", "failed", "passed", "assert", "traceback", "module", "import", "fixture", "error", "line"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base") / "store"
    st = SessionStore(root)
    rng = random.Random(7)
    for _ in range(3):
        s = st.create()
        for i in range(120):
            s.append("user.message", {"text": " ".join(rng.choice(WORDS) for _ in range(60)), "n": i})
        s.close()
    return root


def test_every_write_of_a_training_failed_in_turn_leaves_a_usable_store(base: Path, tmp_path: Path) -> None:
    counter = FaultyFileSystem(OsFileSystem())
    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    D.train_store_dictionary(SessionStore(probe, fs=counter), size_bytes=SIZE)
    sites = [(op, n) for op in WRITE_OPS for n in range(counter.calls[op])]
    assert len(sites) >= 12, counter.calls  # the directory, two files each written whole, renamed, synced
    failed = runs = 0
    for k, (op, n) in enumerate(sites):
        for err in (errno.EIO, errno.ENOSPC) if op == "pwrite" else (errno.EIO,):
            root = tmp_path / f"run-{k}-{err}"
            shutil.copytree(base, root)
            fs = FaultyFileSystem(OsFileSystem())
            fs.fail(op, err, after=n)
            runs += 1
            try:
                D.train_store_dictionary(SessionStore(root, fs=fs), size_bytes=SIZE)
            except (journal.JournalError, OSError):
                failed += 1
            fs.clear()
            st = SessionStore(root)
            current = D.current_dictionary(st)  # none or whole: never a torn file at its name
            ids = D.dictionary_ids(st.fs, os.path.join(root, D.DICTIONARIES_DIR))
            sid = sorted(st._ids("sessions"))[0]
            s = st.open(sid)
            s.append("user.message", {"text": "after the fault"})
            s.close()
            with journal.open(st.journal_path(sid), readonly=True) as j:
                assert [r.event for r in j.read()][-1]["data"] == {"text": "after the fault"}, (op, n)
            again = D.train_store_dictionary(st, size_bytes=SIZE)
            assert again.stored and again.dictionary_id == (ids[-1] if ids else 0) + 1, (op, n, ids)
            assert current is None or current.id == ids[-1]
    assert failed == runs, (failed, runs)  # every write fault is reported, none absorbed
