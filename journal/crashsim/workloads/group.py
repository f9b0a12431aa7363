"""commit-group: a power loss while the journals of one root share a commit group (journal/engine/group.py).

The name "group" was taken first by core.py's workload of threads sharing one journal's group
commit; this one is "commit-group". The recorded run, on an empty disk:

* ``open_group("/")``, then three journals under that root joined to it: ``/j`` (the journal the
  harness's own checker follows), ``/k`` and ``/d/m`` (two levels below the root, its GROUP
  file says ``up=2``);
* three threads, one per journal, started at a barrier, appending one record at a time and with
  ``append_many`` at "sync" and "flush": their durable appends meet in group commits, one
  fdatasync of the group's log for all of them;
* ``/k`` closed (its segment fdatasync'd) and reopened in the group half way;
* the log is rotated every ``ROTATE_BYTES`` (patched over ``group_log.LOG_ROTATE_BYTES`` for
  the run only): a new log made durable, the segments the old one wrote to fdatasync'd, the old
  one removed;
* every journal closed, then the group (its last log retired, its directory emptied).

Recovery (``recover_all``) is what a store does after a crash: open each journal (the first open
recovers every dead group of the root: the logs' entries written back into their segments),
read everything, close. The harness's checker holds ``/j`` to the core invariants; this
module's ``check`` holds ``/k`` and ``/d/m`` to the same ones (every record acknowledged
Committed at "sync" read back at its seq, seqs contiguous, nothing read that was not appended
or was NotCommitted), from their own ledgers, and every ``RECOVERY_CRASH_EVERY`` th image it
records the recovery itself, crashes it, and checks all three journals on the images that crash
leaves (the checker's own crash-inside-recovery check looks at ``/j`` only).

Sector padding (``sector_bytes``) is refused with a group, so the npsow model runs this workload
unpadded: a trashed sector of the log that held a synced entry is damage to synced bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from journal.crashsim.memfs import Image, MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, Ledger, default_recover, workload
from journal.engine import group as group_mod
from journal.engine import group_log as glog
from journal.engine.core import Journal
from journal.engine.group import CommitGroup
from journal.engine.reader import Record
from journal.fs import File, FileSystem

NAME = "commit-group"
ROOT = "/"
OTHERS = ("/k", "/d/m")  # the group's journals besides the checker's /j
ROTATE_BYTES = 3072  # small: a run of a few KiB of entries rotates its log once or twice
SEGMENT_BYTES = 8192  # small enough that a long run seals a segment (a seal is synced)
RECOVERY_CRASH_EVERY = 12  # every Nth checked image also crashes its own recovery
RECOVERY_CRASH_STATES = 6  # states of that recovery's trace checked
# journal.open's options for every journal of the run and of its recovery. No sector padding: a
# group refuses it (see the module's doc).
WORKLOAD_OPTIONS: dict[str, Any] = {
    "reserve_bytes": CRASH_RESERVE_BYTES, "segment_size_bytes": SEGMENT_BYTES, "sector_bytes": 0,
}


@dataclass
class GroupLedger(Ledger):
    """The ledger of /j (what the harness's checker reads) with the ledgers of the other journals
    beside it, and the crash point ``at`` was asked for (the workload's check needs it)."""

    others: dict[str, Ledger] = field(default_factory=dict)
    point: int = -1

    def at(self, point: int) -> GroupLedger:
        mine = super().at(point)
        return GroupLedger(
            **{f.name: getattr(mine, f.name) for f in dataclasses.fields(Ledger)},
            others={p: led.at(point) for p, led in self.others.items()},
            point=point,
        )


class GroupRecords(list[Record]):
    """/j's records (what the checker checks) carrying the other journals' and the image."""

    others: dict[str, list[Record] | None]  # None: the journal's directory is not there
    image: Image


class _SeededSecrets:
    """Stands in for ``secrets`` in journal/engine/group.py during a run: its instance names and
    log salts are part of every byte, so a seed must fix them."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def token_bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)

    def token_hex(self, n: int) -> str:
        return self._rng.randbytes(n).hex()


@contextmanager
def small_logs(rotate_bytes: int, seed: int, meeting: Meeting | None = None) -> Iterator[None]:
    """The group rotates its log every ``rotate_bytes`` (it reads the module constant at each
    commit), draws its names and salts from ``seed`` and, given a meeting, its waiters signal
    it; all restored after."""
    saved = glog.LOG_ROTATE_BYTES, group_mod.__dict__["secrets"], CommitGroup.commit
    glog.LOG_ROTATE_BYTES = rotate_bytes
    setattr(group_mod, "secrets", _SeededSecrets(random.Random(seed ^ 0x6E0)))  # noqa: B010 - patched on purpose
    if meeting is not None:
        CommitGroup.commit = signalling_commit(meeting)  # type: ignore[method-assign]
    try:
        yield
    finally:
        glog.LOG_ROTATE_BYTES = saved[0]
        setattr(group_mod, "secrets", saved[1])  # noqa: B010
        CommitGroup.commit = saved[2]  # type: ignore[method-assign]


MEET_TIMEOUT_S = 10.0  # how long a held log write waits for the other threads to queue (never, unless broken)


class Meeting:
    """Makes the threads' appends meet in one group commit once per phase, without sleeping: the
    first log write of a phase is held until ``others`` appends have called the group's commit
    (signalling_commit), so they queue behind it and the next leader writes them as one batch.
    Only the order of the calls changes; every one goes to the recording file system."""

    def __init__(self) -> None:
        self.queued = threading.Semaphore(0)
        self.armed = 0  # how many queued appends the next log write waits for
        self.mu = threading.Lock()

    def arm(self, others: int) -> None:
        with self.mu:
            self.armed = others
            self.queued = threading.Semaphore(0)  # signals of earlier waits count for nothing

    def hold(self) -> None:
        with self.mu:
            others, self.armed = self.armed, 0
        for _ in range(others + 1 if others else 0):  # the leader's own commit signalled too
            if not self.queued.acquire(timeout=MEET_TIMEOUT_S):
                break  # an append raised before it queued: the run goes on unmerged


class HeldLog:
    """A log file of the group whose writes wait on a meeting (see Meeting)."""

    def __init__(self, inner: File, meeting: Meeting) -> None:
        self._inner = inner
        self._meeting = meeting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        self._meeting.hold()
        return self._inner.pwrite(data, offset)


class HeldLogFs:
    """The recording file system as the group sees it: its log files' writes can be held."""

    def __init__(self, inner: FileSystem, meeting: Meeting) -> None:
        self._inner = inner
        self._meeting = meeting

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open_write(self, path: str, create: bool) -> File:
        f = self._inner.open_write(path, create)
        return HeldLog(f, self._meeting) if path.endswith(glog.LOG_SUFFIX) else f


def signalling_commit(meeting: Meeting) -> Any:
    """CommitGroup.commit, signalling the meeting as it is called: a caller queues behind the
    leader a few bytecodes later, and holds the GIL until it waits for that leader, so the
    leader, woken by the signal, finds it queued."""
    original = CommitGroup.commit

    def commit(self: CommitGroup, *args: Any, **kw: Any) -> Any:
        meeting.queued.release()
        return original(self, *args, **kw)

    return commit


def _sub_ctx(ctx: Ctx, path: str, n: int) -> Ctx:
    sub = Ctx(ctx.fs, ctx.options, ctx.seed * 7 + n, ctx.clock, tag=f"{path.strip('/').replace('/', '.')}-")
    sub.path = path
    return sub


def _appends(ctx: Ctx, j: Any, rounds: int) -> None:
    for _ in range(rounds):
        level = "sync" if ctx.rng.random() < 0.6 else "flush"
        if ctx.rng.random() < 0.3:
            j.append_many([ctx.payload(ctx.rng.choice((40, 300))) for _ in range(ctx.rng.randint(2, 3))], level)
        else:
            j.append(ctx.payload(ctx.rng.choice((16, 100, 300, 700))), durability=level)


def _in_threads(work: list[tuple[Ctx, Any, int]]) -> None:
    barrier = threading.Barrier(len(work))
    errors: list[BaseException] = []

    def run(c: Ctx, j: Any, rounds: int) -> None:
        barrier.wait()
        try:
            _appends(c, j, rounds)
        except Exception as exc:  # the ledger has it; re-raised once every thread is done
            errors.append(exc)

    threads = [threading.Thread(target=run, args=w) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run_group(ctx: Ctx, rotate_bytes: int = ROTATE_BYTES) -> None:
    """The recorded run (see the module's doc)."""
    ledger = GroupLedger()
    ledger.attempts.extend(ctx.ledger.attempts)
    ctx.ledger = ledger
    subs = [_sub_ctx(ctx, p, n) for n, p in enumerate(OTHERS, 1)]
    for sub in subs:
        ledger.others[sub.path] = sub.ledger
    meeting = Meeting()
    with small_logs(rotate_bytes, ctx.seed, meeting):
        g = CommitGroup.open(ROOT, fs=HeldLogFs(ctx.fs, meeting))
        j = ctx.open(group=g)
        if not ctx.fs.exists("/d"):
            ctx.fs.mkdir("/d")
            ctx.fs.fsync_dir("/")
        handles = [j, *(s.open(group=g) for s in subs)]
        meeting.arm(len(handles) - 1)
        _in_threads([(c, h, ctx.rng.randint(3, 5)) for c, h in zip([ctx, *subs], handles, strict=True)])
        # /k closed (its segment synced at close) and reopened in the group half way.
        handles[1].close()
        handles[1] = subs[0].open(create=False, group=g)
        meeting.arm(len(handles) - 1)
        _in_threads([(c, h, ctx.rng.randint(3, 5)) for c, h in zip([ctx, *subs], handles, strict=True)])
        handles[0].append(ctx.payload(), durability="sync")
        for h in handles:
            h.close()
        g.close()


def recover_all(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> GroupRecords:
    """Open every journal of the root (the first open recovers the dead groups), read, close."""
    out = GroupRecords(default_recover(fs, path, options, create))
    out.others = {}
    for other in OTHERS:
        if not fs.is_dir(other):
            out.others[other] = None
            continue
        j = Journal.open(other, create=True, fs=fs, **options)
        try:
            out.others[other] = list(j.read())
        finally:
            j.close()
    if isinstance(fs, MemFileSystem):
        out.image = fs.base
    return out


_checked = itertools.count(1)


def check_others(records: list[Record], ledger: Ledger) -> list[str]:
    """The core invariants on the journals the harness's checker does not follow, and, every
    RECOVERY_CRASH_EVERY th image, on all of them after a crash inside recovery."""
    from journal.crashsim.checker import Expect

    if not isinstance(records, GroupRecords) or not isinstance(ledger, GroupLedger):
        return ["the commit-group workload's check got records or a ledger its own recovery did not make"]
    out = _check_all(records, ledger)
    if out or next(_checked) % RECOVERY_CRASH_EVERY or not hasattr(records, "image"):
        return out
    expects = {JOURNAL_PATH: Expect.at(ledger, ledger.point)}
    expects.update({p: Expect.at(led, ledger.point) for p, led in ledger.others.items()})
    return crash_recovery(records.image, expects, random.Random(ledger.point), RECOVERY_CRASH_STATES)


def _check_all(records: GroupRecords, ledger: GroupLedger) -> list[str]:
    from journal.crashsim.checker import Expect, check_records

    out: list[str] = []
    for path, led in ledger.others.items():
        got = records.others.get(path)
        exp = Expect.at(led, ledger.point)
        recs = [(r.seq, r.payload) for r in got or []]
        out.extend(f"{path}: {m}" for m in check_records(recs, exp))
    return out


def crash_recovery(image: Image, expects: dict[str, Any], rng: random.Random, states: int) -> list[str]:
    """Record recover_all on ``image``, crash it at ``states`` points of its trace, recover each
    crash image and check every journal against ``expects`` (path -> checker.Expect)."""
    from journal.crashsim.checker import check_records
    from journal.crashsim.model import CrashState, Replay, crash_points, exhaustive

    fs = MemFileSystem.from_image(image)
    fs.record_reads = False
    options = dict(WORKLOAD_OPTIONS)
    try:
        recover_all(fs, JOURNAL_PATH, options, not expects[JOURNAL_PATH].created)
    except Exception:
        return []  # the harness's own recovery of this image reports it
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    points = set(crash_points(fs.log))
    candidates: list[CrashState] = []
    while True:
        if replay.point in points:
            candidates.extend(exhaustive(replay, "psow", rng))
        if replay.point >= len(fs.log):
            break
        replay.advance()
    chosen = sorted(rng.sample(candidates, min(states, len(candidates))), key=lambda s: s.point)
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    out: list[str] = []
    for state in chosen:
        while replay.point < state.point:
            replay.advance()
        built = replay.build(state)
        fs2 = MemFileSystem.from_image(built.image)
        fs2.record_reads = False
        try:
            got = recover_all(fs2, JOURNAL_PATH, options, not expects[JOURNAL_PATH].created)
        except Exception as exc:
            return [f"crash inside recovery ({state.label} at op {state.point}): reopen raised "
                    f"{type(exc).__name__}: {exc}"]
        per_path: dict[str, list[Record] | None] = {JOURNAL_PATH: list(got), **got.others}
        for path, exp in expects.items():
            recs = [(r.seq, r.payload) for r in per_path.get(path) or []]
            out.extend(f"crash inside recovery at op {state.point}: {path}: {m}" for m in check_records(recs, exp))
        if out:
            break
    return out


def commit_group(ctx: Ctx) -> None:
    """Three journals of one root in one commit group, appending from three threads."""
    run_group(ctx)


def register() -> None:
    """Register "commit-group" (the command asks through workloads.register_on_demand)."""
    workload(NAME, recover=recover_all, check=check_others, **WORKLOAD_OPTIONS)(commit_group)
