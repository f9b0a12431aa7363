"""The power-loss campaign: run workloads on the recording file system, crash them everywhere.

For each (workload, model) pair, runs are repeated with seeds ``seed, seed+1, ...`` until the
state budget is spent. One run: record the workload's trace, walk every crash point, and check
the states the model allows there -- all of them when the trace is short, a seeded random sample
of structured and random states when it is long. A crash state is identified by its disk image
and by what the ledger says must (and may) be read back from it; a state seen before, in this run
or an earlier one of the pair, is checked once. The count of a pair is the number of distinct
states it checked: runs stop when it reaches the budget, or when STALE_RUNS_MAX runs in a row
add nothing new (the workload has no more states to give), so a workload whose runs repeat
falls short of its budget instead of being counted again.

A failure is saved as JSON with everything needed to check it again without the engine run that
produced it (the image, the expectation, the model) and with the seed that reproduces the run.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
import random
import secrets as _secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from journal.crashsim.checker import Expect, check_image
from journal.crashsim.memfs import Image, MemFileSystem
from journal.crashsim.model import CrashState, Replay, crash_points, exhaustive, sample
from journal.crashsim.workloads.core import WORKLOADS, Ctx, Ledger, Workload

STATES_PER_RUN_MAX = 300  # beyond this a run's states are sampled, so seeds vary the traces
DEEP_EVERY = 25  # every Nth checked state also checks appends after recovery
SECOND_CRASH_EVERY = 40  # every Nth checked state also crashes recovery itself
SECOND_CRASH_STATES = 4
STALE_RUNS_MAX = 3  # runs in a row without a new distinct state end a pair's campaign


class _SeededSecrets:
    """Stands in for ``secrets`` in the engine during a run, so that salts and ids repeat."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def randbits(self, k: int) -> int:
        return self._rng.getrandbits(k)

    def token_bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)


@contextlib.contextmanager
def deterministic(seed: int) -> Iterator[None]:
    """Make the engine's random salts and journal ids a function of ``seed`` (they are not part
    of any crash behaviour, but they are part of every byte, so a seed must fix them)."""
    from journal.engine import core, segment

    shim = _SeededSecrets(random.Random(seed ^ 0x5EED))
    saved = [(m, m.__dict__["secrets"]) for m in (core, segment) if "secrets" in m.__dict__]
    for m, _ in saved:
        setattr(m, "secrets", shim)  # noqa: B010 - the engine's module attribute, patched on purpose
    try:
        yield
    finally:
        for m, orig in saved:
            setattr(m, "secrets", orig)  # noqa: B010


# Option names the engine may offer to survive the npsow model (padding synced batches to a
# sector boundary). When Journal.open takes one, npsow runs with it, and any loss is a violation.
SECTOR_OPTIONS = ("sector_bytes", "sector_size_bytes")
SECTOR_BYTES = 4096


def sector_option() -> str | None:
    from journal.engine.core import Journal

    params = inspect.signature(Journal.open).parameters
    return next((name for name in SECTOR_OPTIONS if name in params), None)


def for_model(wl: Workload, model: str) -> Workload:
    """The workload as run under ``model``: npsow turns on the engine's sector padding if any."""
    opt = sector_option()
    if model == "npsow" and opt is not None and opt not in wl.options:
        return dataclasses.replace(wl, options={**wl.options, opt: SECTOR_BYTES})
    return wl


def is_padded(wl: Workload) -> bool:
    return any(wl.options.get(name) for name in SECTOR_OPTIONS)


@dataclass
class Failure:
    workload: str
    model: str
    seed: int
    point: int
    state: list[str]
    violations: list[str]
    image: Image
    expect: Expect
    damaged_synced: bool
    saved_to: str | None = None

    def to_json(self) -> dict[str, Any]:
        files, dirs = self.image
        return {
            "workload": self.workload,
            "model": self.model,
            "seed": self.seed,
            "point": self.point,
            "state": self.state,
            "violations": self.violations,
            "damaged_synced": self.damaged_synced,
            "image": {
                "files": {p: base64.b64encode(b).decode() for p, b in files.items()},
                "dirs": sorted(dirs),
            },
            "expect": self.expect.to_json(),
            "replay": f"journal crash-test --replay <this file>   (or: --workload {self.workload} "
            f"--model {self.model} --seed {self.seed} --runs 1)",
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Failure:
        files = {p: base64.b64decode(b) for p, b in d["image"]["files"].items()}
        return cls(
            d["workload"],
            d["model"],
            d["seed"],
            d["point"],
            d["state"],
            d["violations"],
            (files, frozenset(d["image"]["dirs"])),
            Expect.from_json(d["expect"]),
            d["damaged_synced"],
        )


@dataclass
class Tally:
    workload: str
    model: str
    runs: int = 0
    states: int = 0  # distinct crash states checked (image and expectation; see the module doc)
    repeats: int = 0  # states drawn again and not checked twice
    detected_damage: int = 0  # CorruptionError after damage to synced bytes (npsow only)
    deep: int = 0
    second_crash: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return len(self.failures)

    seconds: float = 0.0


def record_run(wl: Workload, seed: int) -> tuple[MemFileSystem, Ledger]:
    """Run ``wl`` once with ``seed`` on a fresh recording file system."""
    with deterministic(seed):
        if wl.prepare is not None:
            image, ledger = wl.prepare(seed, wl.options)
            fs = MemFileSystem.from_image(image)
        else:
            fs, ledger = MemFileSystem(), Ledger()
        ctx = Ctx(fs, wl.options, seed, fs.op_count)
        ctx.ledger.attempts.extend(ledger.attempts)
        if ledger.created_at >= 0:
            ctx.ledger.created_at = ledger.created_at
        wl.run(ctx)
    return fs, ctx.ledger


def count_exhaustive(fs: MemFileSystem, model: str) -> int:
    """How many crash states the exhaustive enumeration of one recorded run yields."""
    points = set(crash_points(fs.log))
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    total = 0
    while True:
        if replay.point in points:
            total += sum(1 for _ in exhaustive(replay, model, random.Random(0)))
        if replay.point >= len(fs.log):
            return total
        replay.advance()


def states_of_run(
    fs: MemFileSystem, model: str, rng: random.Random, budget: int
) -> Iterator[tuple[Replay, CrashState]]:
    """The crash states of one recorded run: exhaustive if they fit ``budget``, else sampled."""
    points = set(crash_points(fs.log))
    total = count_exhaustive(fs, model)
    keep = min(1.0, budget / max(1, total))
    extra = 0 if keep >= 1.0 else max(1, budget // (4 * max(1, len(points))))
    replay = Replay(fs.log, fs.base, fs.base_inodes)
    while True:
        if replay.point in points:
            for state in exhaustive(replay, model, rng):
                if keep >= 1.0 or rng.random() < keep * 0.75:
                    yield replay, state
            for _ in range(extra):
                yield replay, sample(replay, model, rng)
        if replay.point >= len(fs.log):
            break
        replay.advance()


def run_campaign(
    workloads: list[str],
    models: list[str],
    states: int,
    seed: int,
    save_dir: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    stop_on_failure: bool = False,
    runs_max: int | None = None,
) -> list[Tally]:
    """Check up to ``states`` distinct crash states per (workload, model); one Tally per pair.

    A pair's ``Tally.states`` falls short of ``states`` only when its workload ran out of new
    states (or ``runs_max`` was reached): callers assert the count they need.
    """
    tallies: list[Tally] = []
    total = states * len(workloads) * len(models)
    done = 0
    for name in workloads:
        for model in models:
            wl = for_model(WORKLOADS[name], model)
            tally = Tally(name, model)
            tallies.append(tally)
            t0 = time.monotonic()
            run = 0
            seen: set[str] = set()  # every state of the pair checked so far
            stale = 0
            while tally.states < states and (runs_max is None or run < runs_max) and stale < STALE_RUNS_MAX:
                run_seed = seed + run
                run += 1
                tally.runs += 1
                fs, ledger = record_run(wl, run_seed)
                rng = random.Random(f"{run_seed}/{model}/{name}")
                expects: dict[int, tuple[Expect, str]] = {}  # by crash point
                ledgers: dict[int, Ledger] = {}  # the ledger at each crash point, for the workload's check
                before = tally.states
                budget = min(STATES_PER_RUN_MAX, states - tally.states)
                for replay, state in states_of_run(fs, model, rng, budget):
                    if tally.states >= states:
                        break
                    built = replay.build(state)
                    if state.point not in expects:
                        e = Expect.at(ledger, state.point)
                        expects[state.point] = (e, expect_key(e))
                    exp, exp_key = expects[state.point]
                    key = f"{built.digest}/{exp_key}"
                    if key in seen:
                        tally.repeats += 1
                        continue
                    seen.add(key)
                    tally.states += 1
                    deep = tally.states % DEEP_EVERY == 0
                    second = SECOND_CRASH_STATES if tally.states % SECOND_CRASH_EVERY == 0 else 0
                    if wl.check is not None and state.point not in ledgers:
                        ledgers[state.point] = ledger.at(state.point)
                    verdict = check_image(
                        wl, built.image, exp, built.damaged_synced, rng, deep, second, padded=is_padded(wl),
                        ledger=ledgers.get(state.point),
                    )
                    tally.deep += deep
                    tally.second_crash += bool(second)
                    tally.detected_damage += verdict.detected_damage
                    if verdict.violations:
                        f = Failure(
                            name,
                            model,
                            run_seed,
                            state.point,
                            state.describe(fs.log),
                            verdict.violations,
                            built.image,
                            exp,
                            built.damaged_synced,
                        )
                        if save_dir is not None:
                            f.saved_to = save_failure(f, save_dir, len(tally.failures))
                        tally.failures.append(f)
                        if stop_on_failure:
                            tally.seconds += time.monotonic() - t0
                            return tallies
                    done += 1
                    if progress is not None:
                        progress(done, total)
                stale = stale + 1 if tally.states == before else 0
            tally.seconds = time.monotonic() - t0
    return tallies


def expect_key(exp: Expect) -> str:
    """What identifies an expectation: the same image checked against a different ledger view
    (a record acknowledged since, a call started since) is a different crash state."""
    h = hashlib.blake2b(digest_size=16)
    h.update(b"created" if exp.created else b"-")
    for seq in sorted(exp.required):
        h.update(b"r%d:%d:" % (seq, len(exp.required[seq])) + exp.required[seq])
    for payload, at in sorted(exp.allowed.items(), key=lambda item: item[0]):
        h.update(b"a%d:%d:" % (-1 if at is None else at, len(payload)) + payload)
    for payload in sorted(exp.forbidden):
        h.update(b"f%d:" % len(payload) + payload)
    return h.hexdigest()


def save_failure(f: Failure, save_dir: str, n: int) -> str:
    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, f"{f.workload}-{f.model}-seed{f.seed}-op{f.point}-{n}-{_secrets.token_hex(3)}.json")
    with open(path, "w") as fh:
        json.dump(f.to_json(), fh, indent=1)
    return path


def replay_failure(path: str) -> tuple[Failure, list[str]]:
    """Check a saved failure again; returns it and the violations found now (empty: fixed).

    The saved image and expectation are checked as they are; a workload's own ``check`` needs
    the ledger, which is not saved: the run is recorded again with the failure's seed (exact for
    a single-threaded workload) and its ledger at the crash point is what the check gets."""
    with open(path) as fh:
        f = Failure.from_json(json.load(fh))
    wl = for_model(WORKLOADS[f.workload], f.model)
    ledger = record_run(wl, f.seed)[1].at(f.point) if wl.check is not None else None
    verdict = check_image(
        wl, f.image, f.expect, f.damaged_synced, random.Random(f.seed), deep=True, padded=is_padded(wl),
        ledger=ledger,
    )
    return f, verdict.violations
