"""Injected I/O errors at every call site of a workload, each held to its documented outcome.

A sweep first runs the workload on ``FaultyFileSystem(MemFileSystem())`` with no fault and
counts its calls per operation. Then, for every operation and every call number, it runs the
workload again with that one call failing (and, for the rollback path, a failing write followed
by a failing truncate or fdatasync), and checks:

* failed write (EIO, ENOSPC, short write) -> the records of that write are NotCommitted and
  nothing of them is readable after reopening; the journal carries on;
* failed fdatasync/fsync -> never Committed: the records are AckLost (or NotCommitted when they
  were never written) and the journal is fail-stopped (every later append on that handle raises
  JournalFailStoppedError; a workload that reopens it gets a new handle);
* failed rename, directory fsync, truncate -> NotCommitted or AckLost, then fail-stop;
* after any of these, reopening succeeds, every Committed record is there (sync ones even on the
  image a power loss would leave right after the fault), no NotCommitted record is, and
  ``resolve()`` turns each AckLost into Committed exactly when the journal holds that record.
"""

from __future__ import annotations

import errno as errno_mod
import random
from dataclasses import dataclass, field

from journal.crashsim.campaign import deterministic
from journal.crashsim.checker import Expect, check_records
from journal.crashsim.faults import FaultyFileSystem
from journal.crashsim.memfs import Image, MemFileSystem
from journal.crashsim.model import CrashState, Replay
from journal.crashsim.workloads.core import JOURNAL_PATH, WORKLOADS, Ctx, Ledger, Workload
from journal.engine.core import Journal
from journal.outcomes import AckLost, Committed, NotCommitted

# (operation, errno) pairs swept at every call site; the second tuple entry of a plan is an
# extra rule that fails the first later call of another operation (the rollback path).
SWEPT: tuple[tuple[str, int], ...] = (
    ("pwrite", errno_mod.EIO),
    ("pwrite", errno_mod.ENOSPC),
    ("short_write", errno_mod.ENOSPC),
    ("fdatasync", errno_mod.EIO),
    ("fsync", errno_mod.EIO),
    ("rename", errno_mod.EIO),
    ("fsync_dir", errno_mod.EIO),
    ("truncate", errno_mod.EIO),
    ("open_write", errno_mod.ENOSPC),
    ("mkdir", errno_mod.ENOSPC),
    ("unlink", errno_mod.EIO),
)
ROLLBACK_FOLLOWUPS = ("truncate", "fdatasync")  # fail these too, right after a failed write
WRITE_OPS = ("pwrite", "short_write")
SYNC_OPS = ("fdatasync", "fsync")


@dataclass
class SiteResult:
    workload: str
    op: str
    errno: int
    call: int
    followup: str | None
    injected: bool
    violations: list[str] = field(default_factory=list)

    def name(self) -> str:
        extra = f"+{self.followup}" if self.followup else ""
        return f"{self.workload}: {self.op}#{self.call} {errno_mod.errorcode.get(self.errno, self.errno)}{extra}"


def _run(wl: Workload, seed: int, plan: list[tuple[str, int, int]]) -> tuple[FaultyFileSystem, MemFileSystem, Ledger]:
    inner = MemFileSystem()
    inner.record_reads = False
    fs = FaultyFileSystem(inner)
    for op, err, after in plan:
        fs.fail(op, err, after=after)
    with deterministic(seed):
        if wl.prepare is not None:
            image, first = wl.prepare(seed, wl.options)
            inner = MemFileSystem.from_image(image)
            inner.record_reads = False
            fs.inner = inner
        else:
            first = Ledger()
        ctx = Ctx(fs, wl.options, seed, inner.op_count)
        ctx.ledger.attempts.extend(first.attempts)
        ctx.ledger.created_at = first.created_at
        try:
            wl.run(ctx)
        except Exception as exc:  # a fault in open, or an append after fail-stop: the ledger has it
            ctx.ledger.errors.append(f"{type(exc).__name__}: {exc}")
    return fs, inner, ctx.ledger


def _durable_image(fs: MemFileSystem) -> Image:
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while replay.point < len(fs.log):
        replay.advance()
    return replay.build(CrashState(replay.point)).image


def _reopen(wl: Workload, image: Image, create: bool) -> tuple[list[tuple[int, bytes]], Journal, MemFileSystem]:
    fs = MemFileSystem.from_image(image)
    fs.record_reads = False
    j = Journal.open(JOURNAL_PATH, create=create, fs=fs, **wl.options)
    return [(r.seq, r.payload) for r in j.read()], j, fs


def check_site(wl: Workload, fs: FaultyFileSystem, inner: MemFileSystem, ledger: Ledger, op: str) -> list[str]:
    out: list[str] = []
    attempts = ledger.attempts
    injected = bool(fs.injected)
    outs = [a.outcome for a in attempts]
    # The documented outcome of the injected error itself.
    if injected and op in SYNC_OPS:
        for a in attempts:
            if isinstance(a.outcome, AckLost):
                # Later calls on the same handle: one reopened after the fail-stop is a new
                # handle (recovery ran), whose appends are its own.
                later = [b for b in attempts if b.t0 > a.t1 and ledger.same_handle(a, b)]
                for b in later:
                    refused = bool(b.error and "JournalFailStoppedError" in b.error)
                    if not refused and not isinstance(b.outcome, NotCommitted):
                        out.append(f"append after an AckLost was not refused: {b.outcome or b.error}")
                        break
                break
    if injected and op in WRITE_OPS and any(isinstance(o, AckLost) for o in outs) and "truncate" not in str(
        fs.injected
    ) and "fdatasync" not in str(fs.injected):
        out.append("a failed write with a successful rollback gave AckLost, not NotCommitted")
    if any(a.error and "JournalFailStoppedError" not in a.error and "OSError" not in a.error for a in attempts):
        bad = next(a.error for a in attempts if a.error and "JournalFailStoppedError" not in a.error)
        out.append(f"an append raised something other than fail-stop: {bad}")
    # Reopen as after a process exit (the OS kept everything written) and as after a power loss.
    created = ledger.created_at >= 0
    current, durable = inner.snapshot(), _durable_image(inner)
    fs_ops = inner.op_count()
    for label, image, levels in (("after exit", current, ("flush", "sync")), ("after power loss", durable, ("sync",))):
        exp = Expect.at(ledger, fs_ops + 1)
        exp.required = {
            a.outcome.seq: a.payload
            for a in attempts
            if isinstance(a.outcome, Committed)
            and a.outcome.durability in levels
            and not a.outcome.duplicate
            # A prepared first life (end == 0) went through a power loss: only its syncs count.
            and (a.end > 0 or a.outcome.durability == "sync")
        }
        try:
            recs, j, _ = _reopen(wl, image, create=not created)
        except Exception as exc:
            out.append(f"reopen {label} raised {type(exc).__name__}: {exc}")
            continue
        try:
            out.extend(f"{label}: {m}" for m in check_records(recs, exp))
            got = dict(recs)
            for a in attempts:
                o = a.outcome
                if isinstance(o, AckLost):
                    r = j.resolve(o)
                    there = got.get(o.seq) == a.payload
                    if isinstance(r, Committed) != there:
                        out.append(f"{label}: resolve() says {type(r).__name__} for seq {o.seq}, but on disk: {there}")
        finally:
            j.close()
    return out


def call_counts(wl: Workload, seed: int) -> dict[str, int]:
    fs, _, _ = _run(wl, seed, [])
    counts = dict(fs.calls)
    counts["short_write"] = counts.get("pwrite", 0)
    return counts


def sweep(names: list[str], seed: int = 0, calls_max: int | None = None) -> list[SiteResult]:
    """Fail every call site of every named workload once (and the rollback after each write)."""
    results: list[SiteResult] = []
    for name in names:
        wl = WORKLOADS[name]
        if name == "group":
            continue  # thread timing moves call sites between runs: swept by the random pass instead
        counts = call_counts(wl, seed)
        for op, err in SWEPT:
            n_calls = counts.get(op, 0)
            sites = range(n_calls) if calls_max is None else range(min(n_calls, calls_max))
            for n in sites:
                followups: list[str | None] = [None]
                if op in WRITE_OPS:
                    followups += list(ROLLBACK_FOLLOWUPS)
                for follow in followups:
                    plan = [(op, err, n)]
                    if follow is not None:
                        # The first call of ``follow`` after the failed write is the rollback's.
                        plan.append((follow, errno_mod.EIO, _calls_before(wl, seed, op, n, follow)))
                    fs, inner, ledger = _run(wl, seed, plan)
                    res = SiteResult(name, op, err, n, follow, bool(fs.injected))
                    res.violations = check_site(wl, fs, inner, ledger, op)
                    results.append(res)
    return results


def _calls_before(wl: Workload, seed: int, op: str, n: int, follow: str) -> int:
    """How many calls of ``follow`` happen before call ``n`` of ``op`` fails (from a dry run)."""
    fs, _, _ = _run(wl, seed, [(op, errno_mod.EIO, n)])
    # The failing call stops the count at the fault; the rollback's call is the next one.
    return _count_until(fs, op, n, follow)


def _count_until(fs: FaultyFileSystem, op: str, n: int, follow: str) -> int:
    count = 0
    for o, k in fs.trace:
        if o == op and k == n:
            return count
        if o == follow:
            count += 1
    return count


def random_faults(names: list[str], rounds: int, seed: int) -> list[SiteResult]:
    """Random single faults (any op, any call) for workloads whose call sites move (threads)."""
    rng = random.Random(seed)
    results: list[SiteResult] = []
    for r in range(rounds):
        name = names[r % len(names)]
        wl = WORKLOADS[name]
        counts = call_counts(wl, seed + r)
        op, err = rng.choice(SWEPT)
        if not counts.get(op):
            continue
        # Threads move call sites between runs (group commit merges batches differently), so
        # a late call counted in the dry run may never come: aim at the earlier half.
        n = rng.randrange(max(1, counts[op] // 2))
        fs, inner, ledger = _run(wl, seed + r, [(op, err, n)])
        res = SiteResult(name, op, err, n, None, bool(fs.injected))
        res.violations = check_site(wl, fs, inner, ledger, op)
        results.append(res)
    return results


__all__ = ["SWEPT", "SiteResult", "call_counts", "check_site", "random_faults", "sweep"]
