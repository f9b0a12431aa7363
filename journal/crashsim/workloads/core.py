"""Workloads: what the engine does while the harness watches. Adding one is writing one function.

    from journal.crashsim.workloads.core import workload, Ctx

    @workload("my-runtime", segment_size_bytes=4096)
    def my_runtime(ctx: Ctx) -> None:
        j = ctx.open()                      # a journal on the harness's file system
        j.append({"type": "turn_start"}, durability="sync")
        ...                                 # or hand ``j`` to your own code: it is a Journal
        j.close()

Everything appended through ``ctx.open()``'s journal (append / append_many, any thread) is
written to the ledger with the file-system operation count when the call started and when it
returned, so the checker knows what was acknowledged before every crash point. A workload must
make each payload unique (``ctx.payload()`` does) so a record read back names its append.
A workload that checks more than the core invariants passes ``check=`` (see ``Workload``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from journal.api import PrefixDrop
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.engine.segment import drop_victims, list_segments
from journal.fs import FileSystem
from journal.outcomes import AckLost, Committed, Outcome

JOURNAL_PATH = "/j"


def stored_payload(event: Any) -> bytes:
    """The bytes a Record's ``payload`` holds for ``event`` (the engine's JSON encoding)."""
    if isinstance(event, (bytes, bytearray, memoryview)):
        return bytes(event)
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass
class Attempt:
    """One record handed to append/append_many, and what became of it."""

    payload: bytes
    durability: str
    start: int  # file-system op count when the call started
    end: int = -1  # ... and when it returned (-1: it raised or never returned)
    outcome: Outcome | None = None
    error: str | None = None  # the exception the call raised, if it did
    t0: int = 0  # ledger ticks at call and return: the order calls happened in, across threads
    t1: int = -1

    @property
    def seq(self) -> int | None:
        o = self.outcome
        if isinstance(o, (Committed, AckLost)):
            return o.seq
        return None


@dataclass
class Drop:
    """One drop_prefix call: op counts at call and return (-1: it raised or never returned)."""

    start: int
    end: int = -1
    first_seq: int = 1  # where it made the journal begin (the uncrashed run's answer)


@dataclass
class Ledger:
    attempts: list[Attempt] = field(default_factory=list)
    created_at: int = -1  # op count when the creating open() returned (-1: it has not)
    mu: threading.Lock = field(default_factory=threading.Lock)
    ticks: int = 0
    errors: list[str] = field(default_factory=list)  # exceptions that ended the workload early
    drops: list[Drop] = field(default_factory=list)
    # Ledger ticks at which a handle was opened (Ctx.open): an attempt belongs to the handle of
    # the last open before it. A workload of several lives reopens after a fail-stop, as a user
    # does (recovery runs), and the new handle's appends are its own.
    opens: list[int] = field(default_factory=list)

    def add(self, a: Attempt) -> None:
        with self.mu:
            self.attempts.append(a)

    def tick(self) -> int:
        with self.mu:
            self.ticks += 1
            return self.ticks

    def at(self, point: int) -> Ledger:
        """The ledger as it stood when a crash at ``point`` happened, for a workload's ``check``:
        the calls that had started (an outcome only where the call had returned; one in flight,
        or that raised, has none), the journal created only if its open had returned, and the
        drop_prefix calls that had started (``end`` -1 where one had not returned)."""
        with self.mu:
            attempts = [a if 0 <= a.end <= point else dataclasses.replace(a, end=-1, outcome=None, t1=-1, error=None)
                        for a in self.attempts if a.start < point or a.start == 0]
            drops = [d if 0 <= d.end <= point else dataclasses.replace(d, end=-1)
                     for d in self.drops if d.start < point]
        created = self.created_at if 0 <= self.created_at <= point else -1
        return Ledger(attempts, created, ticks=self.ticks, errors=list(self.errors), drops=drops,
                      opens=list(self.opens))

    def same_handle(self, a: Attempt, b: Attempt) -> bool:
        """Whether ``b``, called after ``a`` returned, went to the handle ``a`` did (no open between)."""
        return not any(a.t1 < o < b.t0 for o in self.opens)


class RecordingJournal:
    """A Journal whose appends are written to the ledger; every other attribute is the Journal's."""

    def __init__(self, inner: Journal, ctx: Ctx) -> None:
        self._inner = inner
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> RecordingJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()

    def append(self, event: Any, durability: str = "sync", **kw: Any) -> Outcome:
        return self.append_many([event], durability, **({"idempotency_keys": [kw.pop("idempotency_key")]}
                                                       if "idempotency_key" in kw else {}), **kw)[0]

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        # Where it makes the journal begin is known before it changes anything (the base of
        # the first segment it keeps), and a crash or a fault part way may leave it in effect.
        segments = list_segments(self._ctx.fs, self._inner.path)
        victims = drop_victims(segments, before_seq)
        first = segments[len(victims)].base_seq if victims else self._inner.first_seq
        d = Drop(self._ctx.clock(), first_seq=first)
        with self._ctx.ledger.mu:
            self._ctx.ledger.drops.append(d)
        done = self._inner.drop_prefix(before_seq)
        d.end = self._ctx.clock()
        return done

    def append_many(self, events: Iterable[Any], durability: str = "sync", **kw: Any) -> list[Outcome]:
        events = list(events)
        start = self._ctx.clock()
        t0 = self._ctx.ledger.tick()
        attempts = [Attempt(stored_payload(e), durability, start, t0=t0) for e in events]
        for a in attempts:
            self._ctx.ledger.add(a)
        try:
            if len(events) == 1 and "idempotency_keys" not in kw:
                outs = [self._inner.append(events[0], durability, **kw)]
            else:
                outs = self._inner.append_many(events, durability, **kw)
        except Exception as exc:
            t1 = self._ctx.ledger.tick()
            for a in attempts:
                a.error = f"{type(exc).__name__}: {exc}"
                a.t1 = t1
            raise
        end = self._ctx.clock()
        t1 = self._ctx.ledger.tick()
        for a, o in zip(attempts, outs, strict=True):
            a.outcome = o
            a.end = end
            a.t1 = t1
        return outs


class Ctx:
    """What a workload gets: a file system, a journal path, open options, a seeded rng, a ledger."""

    def __init__(
        self, fs: FileSystem, options: dict[str, Any], seed: int, clock: Callable[[], int], tag: str = "w"
    ) -> None:
        self.fs = fs
        self.path = JOURNAL_PATH
        self.options = dict(options)
        self.rng = random.Random(seed)
        self.seed = seed
        self.ledger = Ledger()
        self.clock = clock
        self.tag = tag  # payload prefix: different lives of one journal must not repeat payloads
        self._n = 0
        self._n_mu = threading.Lock()

    def open(self, create: bool = True, **kw: Any) -> RecordingJournal:
        self.ledger.opens.append(self.ledger.tick())
        j = Journal.open(self.path, create=create, fs=self.fs, **{**self.options, **kw})
        if self.ledger.created_at < 0:
            self.ledger.created_at = self.clock()
        return RecordingJournal(j, self)

    def payload(self, size: int | None = None, as_dict: bool | None = None) -> Any:
        """A unique event: a dict (JSON) or bytes, compressible or not, of about ``size`` bytes."""
        with self._n_mu:
            self._n += 1
            n = self._n
        rng = self.rng
        size = size if size is not None else rng.choice((16, 40, 100, 300, 700, 1500))
        tag = f"{self.tag}{self.seed}-{n}"
        if as_dict if as_dict is not None else rng.random() < 0.5:
            text = ("lorem ipsum " * (size // 12 + 1))[:size] if rng.random() < 0.5 else rng.randbytes(size // 2).hex()
            return {"type": "event", "id": tag, "text": text}
        body = rng.randbytes(size) if rng.random() < 0.5 else bytes(size)
        return tag.encode() + b"|" + body

    def durability(self, sync_share: float = 0.6) -> str:
        r = self.rng.random()
        if r < sync_share:
            return "sync"
        return "flush" if r < sync_share + (1 - sync_share) / 2 else "buffered"


def default_recover(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Open the journal (recovery runs), read every record, close."""
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        return list(j.read())
    finally:
        j.close()


@dataclass(frozen=True)
class Workload:
    """A registered workload.

    ``run`` drives the engine; ``options`` are the journal.open keyword arguments it uses (the
    checker reopens with the same); ``recover`` is how a runtime opens after a crash (default:
    ``Journal.open`` and read everything); ``check`` adds invariants of its own: the campaign
    calls it for every crash state whose image recovers, with the records read back and the
    ledger as it stood at the crash (``Ledger.at``), and reports the violations (strings) it
    returns like its own.
    ``prepare`` (optional) builds the starting disk image, so the recorded trace starts from it
    (used to crash recovery itself).
    """

    name: str
    run: Callable[[Ctx], None]
    options: dict[str, Any]
    recover: Callable[[FileSystem, str, dict[str, Any], bool], list[Record]] = default_recover
    check: Callable[[list[Record], Ledger], list[str]] | None = None
    prepare: Callable[[int, dict[str, Any]], tuple[Any, Ledger]] | None = None


# The reserved space of the live segment, kept small under the harness: the images stay small
# (every crash state copies and hashes them) and the reservation grows many times per run, so
# crashes land around its extensions. Its logic does not depend on the size.
CRASH_RESERVE_BYTES = 8192
WORKLOADS: dict[str, Workload] = {}


def workload(
    name: str,
    recover: Callable[[FileSystem, str, dict[str, Any], bool], list[Record]] = default_recover,
    check: Callable[[list[Record], Ledger], list[str]] | None = None,
    prepare: Callable[[int, dict[str, Any]], tuple[Any, Ledger]] | None = None,
    **options: Any,
) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    """Register ``fn`` as a workload called ``name``; ``options`` go to journal.open."""

    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        WORKLOADS[name] = Workload(name, fn, options, recover, check, prepare)
        return fn

    return register


# --- the engine's own workloads ----------------------------------------------------------------


@workload("single", reserve_bytes=CRASH_RESERVE_BYTES)
def single_appends(ctx: Ctx) -> None:
    """One record per call, mixed durability, mixed sizes and codecs."""
    j = ctx.open()
    for _ in range(ctx.rng.randint(4, 9)):
        j.append(ctx.payload(), durability=ctx.durability())
    if ctx.rng.random() < 0.5:
        j.append(ctx.payload(), durability="sync")
    j.close()


@workload("batch", reserve_bytes=CRASH_RESERVE_BYTES)
def batches(ctx: Ctx) -> None:
    """append_many: one write (and at most one fdatasync) per batch."""
    j = ctx.open()
    for _ in range(ctx.rng.randint(2, 5)):
        n = ctx.rng.randint(1, 6)
        j.append_many([ctx.payload() for _ in range(n)], durability=ctx.durability(0.7))
    j.close()


@workload("group", reserve_bytes=CRASH_RESERVE_BYTES)
def group_commit(ctx: Ctx) -> None:
    """Threads appending at once: their records share writes and fdatasyncs."""
    j = ctx.open()
    events = [[ctx.payload(ctx.rng.choice((30, 200, 900))) for _ in range(4)] for _ in range(3)]
    levels = [[ctx.durability(0.7) for _ in range(4)] for _ in range(3)]
    barrier = threading.Barrier(3)

    errors: list[BaseException] = []

    def writer(t: int) -> None:
        barrier.wait()
        try:
            for e, d in zip(events[t], levels[t], strict=True):
                j.append(e, durability=d)
        except Exception as exc:  # the ledger has it; an injected fault may fail-stop the journal
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    j.append(ctx.payload(), durability="sync")
    j.close()


@workload("rollover", segment_size_bytes=4096)
def rollover(ctx: Ctx) -> None:
    """Small segments: seals, new segments (temp file, rename, directory fsync) between records."""
    j = ctx.open()
    for _ in range(ctx.rng.randint(8, 14)):
        if ctx.rng.random() < 0.3:
            j.append_many([ctx.payload(ctx.rng.randint(100, 900)) for _ in range(2)], durability=ctx.durability())
        else:
            j.append(ctx.payload(ctx.rng.randint(200, 1500), as_dict=False), durability=ctx.durability())
    j.close()


def _torn_start(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    """A journal whose last writes were cut by a power loss: recovery will have work to do."""
    from journal.crashsim.memfs import MemFileSystem
    from journal.crashsim.model import KEEP, TEAR, CrashState, Fate, Replay

    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    j = ctx.open()
    for _ in range(ctx.rng.randint(1, 3)):
        j.append(ctx.payload(), durability="sync")
    for _ in range(ctx.rng.randint(1, 3)):
        j.append(ctx.payload(ctx.rng.choice((100, 700, 1500))), durability="flush")
    if ctx.rng.random() < 0.5:  # records appended together: the torn tail is then a block frame
        j.append_many([ctx.payload(ctx.rng.choice((100, 700))) for _ in range(ctx.rng.randint(2, 4))], "flush")
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while replay.point < len(fs.log):
        replay.advance()
    pend = replay.pending()
    fates: dict[int, Fate] = {i: Fate(KEEP) for i in pend}
    if pend:
        last = fs.log[pend[-1]]
        fates[pend[-1]] = Fate(TEAR, 0, max(1, ctx.rng.randrange(len(last.data)))) if last.data else Fate(KEEP)
    built = replay.build(CrashState(replay.point, fates))
    # Everything acknowledged in the first life happened before any crash point of the second.
    for a in ctx.ledger.attempts:
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return built.image, ctx.ledger


@workload("recovery", prepare=_torn_start, reserve_bytes=CRASH_RESERVE_BYTES)
def recovery_then_append(ctx: Ctx) -> None:
    """Open a journal with a torn tail (quarantine, truncate, sync), then append and roll on."""
    j = ctx.open(create=False)
    for _ in range(ctx.rng.randint(1, 3)):
        j.append(ctx.payload(), durability=ctx.durability(0.8))
    if ctx.rng.random() < 0.5:  # a block frame after the recovered tail
        j.append_many([ctx.payload(ctx.rng.choice((100, 700))) for _ in range(ctx.rng.randint(2, 4))],
                      durability=ctx.durability(0.8))
    j.close()


def workload_names() -> list[str]:
    return list(WORKLOADS)


def env_seed() -> int:
    return int(os.environ.get("JOURNAL_CRASH_SEED", "0"))
