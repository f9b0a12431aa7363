"""The session-fork-chain workload for the crash harness: a power loss inside a fork deep in a chain
of forks, one that merges small sealed segments (issue 33).

The built-in workload "session-fork-chain" (journal/crashsim/workloads/__init__.py). Its starting
image is a chain of forks built in ``/chain`` (each fork of the previous child, a turn appended
between), continued until the next child's sealed segments are enough for its fork to merge some
(journal/engine/copy.py, plan_merges); that child is moved to ``/j``. The recorded run is one fork
of ``/j`` at its last clean point into ``/child``: its copy links, merges (temp file, rename) and
cuts. Recovery and the checks are the session-fork workload's: the parent's files are untouched,
``/child`` is absent or whole with the records of an uncrashed fork, and a fork run again on the
image succeeds.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads import session_fork as base
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Attempt, Ctx, Ledger, workload
from journal.engine import copy as prefix_copy
from journal.engine import format as fmt
from journal.engine.core import Journal
from journal.engine.segment import list_segments, read_header, read_seal
from journal.fs import FileSystem
from journal.outcomes import Committed
from journal.session import fork as forking
from journal.session.session import Session

CHAIN_DIR = "/chain"
SESSION_ID = "s-chain-root"
FORKS_MAX = 400  # the chain is built until a fork merges; this bounds a run that never would


def _sealed(fs: FileSystem, path: str) -> tuple[list[int], list[int]]:
    sizes: list[int] = []
    versions: list[int] = []
    for seg in list_segments(fs, path):
        f = fs.open_read(posixpath.join(path, seg.name))
        try:
            header = read_header(f, seg.name)
            if read_seal(f, header, seg.name, f.size()) is not None:
                sizes.append(f.size())
                versions.append(header.version)
        finally:
            f.close()
    return sizes, versions


def would_merge(fs: FileSystem, path: str) -> bool:
    """A fork of the journal at ``path`` at its last record merges sealed segments."""
    return any(len(g) > 1 for g in prefix_copy.plan_merges(*_sealed(fs, path)))


def _turn(fs: FileSystem, path: str, ctx: Ctx, first: int, create: bool = False) -> None:
    j = Journal.open(path, create=create, fs=fs, sector_bytes=0, segment_size_bytes=fmt.SEGMENT_SIZE_BYTES_MIN)
    s = Session.attach(j, create=create, session_id=SESSION_ID if create else None,
                       clock=lambda: base.FIXED_TIME, workspace={"path": "/repo"})
    base.talk(s, ctx.rng, 1, first=first)
    s.journal.sync()
    s.close()


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    fs.record_reads = False
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    fs.mkdir(CHAIN_DIR)
    prev = posixpath.join(CHAIN_DIR, "c0")
    _turn(fs, prev, ctx, 0, create=True)
    for d in range(1, FORKS_MAX + 1):
        if would_merge(fs, prev):
            break
        child = posixpath.join(CHAIN_DIR, f"c{d}")
        forking.fork(prev, child, None, origin="chain", fs=fs, time=base.FIXED_TIME)
        _turn(fs, child, ctx, d)
        prev = child
    else:
        raise AssertionError(f"no fork of a chain of {FORKS_MAX} merged segments")
    # /j: the deepest child, whose fork (the recorded run) merges; a directory rename moves it
    # whole (the hard links it shares with its ancestors stay links).
    fs.rename(prev, JOURNAL_PATH)
    fs.fsync_dir("/")
    # Its records came by forks, not by appends the ledger saw: they are entered as synced
    # appends of the first life, so the core checks hold them to what they are.
    for rec in base._records(fs, JOURNAL_PATH, {})[0]:
        ctx.ledger.add(Attempt(rec.payload, "sync", 0, 0, Committed(rec.seq, "sync")))
    at = forking.fork_points(JOURNAL_PATH, fs=fs)[-1].last_seq
    plan: dict[str, Any] = {"at": at, "parent": base._files_under(fs, JOURNAL_PATH)}
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    got = base._fork(clone, plan)
    if not got.storage.segments_merged:
        raise AssertionError("the recorded fork would merge no segment: the workload tests nothing new")
    plan["child"] = base._digest(base._records(clone, base.CHILD_PATH, {})[0])
    f = fs.open_write(base.PLAN_PATH, create=True)
    f.pwrite(json.dumps(plan, sort_keys=True).encode(), 0)
    f.close()
    fs.record_reads = True
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


@workload(
    "session-fork-chain",
    recover=base.recover_and_check,
    prepare=_first_life,
    segment_size_bytes=base.SEGMENT_BYTES,
    reserve_bytes=CRASH_RESERVE_BYTES,
)
def session_fork_chain(ctx: Ctx) -> None:
    """Fork the deepest child of a chain of forks, a fork that merges small sealed segments."""
    base._fork(ctx.fs, base._plan(ctx.fs))


__all__ = ["session_fork_chain", "would_merge"]
