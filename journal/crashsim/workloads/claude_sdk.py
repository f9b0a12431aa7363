"""Crash workload of the Claude Agent SDK store: a power loss in the middle of append calls.

``register()`` registers ``claude-sdk-store`` when ``claude_agent_sdk`` imports (and returns its
name, or nothing): neither importing this module nor ``journal.crashsim.workloads`` does, for
the reason guard_frameworks.py gives (the built-in set must not depend on what is installed).

Where the store lives. ``JournalSessionStore`` is given a ``journal.api.Store`` on the harness's
file system in which the one SessionKey's transcript *is* ``/j``, opened through ``Ctx.open`` in
the recorded run, so every batch's record is on the ledger and the core invariants hold every
acknowledged batch to its place; the project's index is a journal beside it (``/claude/``), so
every crash state cuts both at once, as a power loss does. The run appends batches of entries
``(b, 0..n-1)`` (each with a uuid), re-sends an earlier batch now and then (stored nothing), and
appends entries without a uuid.

What each crash state is checked for (``recover_and_check``), on a clone of the recovered image:

* every record of ``/j`` holds one whole batch, batches in increasing order, none twice;
* the store on the image loads exactly those batches' entries, in order (never
  TranscriptDamagedError: the index, written after the batch is synced, is never ahead of the
  transcript), lists the session, and loads the same a second time;
* a new batch appended on the image is loaded after them.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
from typing import Any

from journal.crashsim.campaign import SECTOR_OPTIONS
from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, WORKLOADS, Ctx, workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.engine.store import DirectoryStore
from journal.fs import FileSystem

NAME = "claude-sdk-store"
NAMES: tuple[str, ...] = (NAME,)
STORE_DIR = "/claude"  # the index journal (and any other key's transcript) live here
KEY: Any = {"project_key": "proj", "session_id": "crash"}
CLOCK_START_MS = 1_767_225_600_000  # 2026-01-01: the store's clock, fixed per run so replays match
CHECKED_IMAGES_MAX = 64  # recent images whose check is remembered (the harness recovers each twice)


class ClaudeStoreViolation(AssertionError):
    """The store's promise failed on a recovered crash image."""


class _HarnessStore:
    """A ``journal.api.Store`` whose transcript of KEY is ``/j`` and whose other journals are
    directories under STORE_DIR on the same file system."""

    def __init__(self, fs: FileSystem, open_transcript: Any, transcript: str, options: dict[str, Any]) -> None:
        self._dirs = DirectoryStore(STORE_DIR, fs=fs)
        self._fs = fs
        self._open_transcript = open_transcript
        self._transcript = transcript
        self._options = {k: v for k, v in options.items() if k in SECTOR_OPTIONS}

    @property
    def location(self) -> str:
        return STORE_DIR

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Any:
        if name == self._transcript:
            return self._open_transcript(create, options)
        return self._dirs.open(name, create=create, readonly=readonly, **{**self._options, **options})

    def exists(self, name: str) -> bool:
        return self._fs.exists(JOURNAL_PATH) if name == self._transcript else self._dirs.exists(name)

    def names(self) -> list[str]:
        return sorted(self._dirs.names() + ([self._transcript] if self._fs.exists(JOURNAL_PATH) else []))

    def delete(self, name: str) -> None:
        if name == self._transcript:
            raise PermissionError("the harness's journal is not deleted by a workload")
        self._dirs.delete(name)

    def copy(self, source: str, target: str, **kw: Any) -> None:
        self._dirs.copy(source, target, **kw)


def _store(fs: FileSystem, open_transcript: Any, options: dict[str, Any]) -> Any:
    from journal.adapters.claude_agent_sdk import JournalSessionStore, journal_name

    ticks = iter(range(CLOCK_START_MS, CLOCK_START_MS + 10**9))
    return JournalSessionStore(_HarnessStore(fs, open_transcript, journal_name(KEY), options),
                               clock_ms=lambda: next(ticks))


def _batch(tag: str, b: int, n: int, size: int) -> list[dict[str, Any]]:
    return [{"type": "user", "uuid": f"{tag}-{b}-{i}", "batch": b, "i": i, "of": n, "text": "x" * size}
            for i in range(n)]


def run(ctx: Ctx) -> None:
    async def go() -> None:
        store = _store(ctx.fs, lambda create, kw: ctx.open(create=create, **kw), ctx.options)
        sent: list[list[dict[str, Any]]] = []
        try:
            for b in range(ctx.rng.randint(3, 6)):
                batch = _batch(ctx.tag + str(ctx.seed), b, ctx.rng.randint(1, 5), ctx.rng.choice((20, 300, 1500)))
                if ctx.rng.random() < 0.3:
                    batch.append({"type": "custom-title", "customTitle": f"t{b}", "batch": b, "i": len(batch),
                                  "of": len(batch) + 1})
                    for e in batch:
                        e["of"] = len(batch)
                await store.append(KEY, batch)
                sent.append(batch)
                if sent and ctx.rng.random() < 0.3:  # a re-send after a lost acknowledgement: nothing new
                    await store.append(KEY, [e for e in ctx.rng.choice(sent) if "uuid" in e])
        finally:
            await store.close()

    asyncio.run(go())


def _batches(recs: list[Record]) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """The batch each record of ``/j`` holds, and what is wrong with them."""
    out: list[list[dict[str, Any]]] = []
    problems: list[str] = []
    for r in recs:
        block = r.event.get("data", {}).get("import", {}) if isinstance(r.event, dict) else {}
        batch = block.get("batch") if isinstance(block, dict) else None
        if not isinstance(batch, list) or not batch:
            problems.append(f"seq {r.seq}: no batch of entries")
            continue
        b, n = batch[0].get("batch"), batch[0].get("of")
        if [(e.get("batch"), e.get("i")) for e in batch] != [(b, i) for i in range(n if isinstance(n, int) else -1)]:
            problems.append(f"seq {r.seq}: batch {b} is not whole ({len(batch)} of {n} entries)")
        if out and out[-1][0].get("batch", -1) >= b:
            problems.append(f"seq {r.seq}: batch {b} after batch {out[-1][0].get('batch')} (order or a second copy)")
        out.append(batch)
    return out, problems


def check_image(recs: list[Record], fs: MemFileSystem, options: dict[str, Any]) -> list[str]:
    batches, out = _batches(recs)
    want = [e for batch in batches for e in batch]
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False

    def open_plain(create: bool, kw: dict[str, Any]) -> Any:
        return Journal.open(JOURNAL_PATH, create=create, fs=clone, **{**options, **kw})

    async def go() -> None:
        store = _store(clone, open_plain, options)
        try:
            first = await store.load(KEY)
            if (first or []) != want:
                out.append(f"the store loads {len(first or [])} entries, /j holds {len(want)} in whole batches")
            listed = [e["session_id"] for e in await store.list_sessions(KEY["project_key"])]
            if want and listed != [KEY["session_id"]]:
                out.append(f"the store lists {listed}, not the session it holds")
            if await store.load(KEY) != first:
                out.append("the store loads differently the second time")
            more = _batch("after", 10**6, 2, 10)
            await store.append(KEY, more)
            if await store.load(KEY) != [*want, *more]:
                out.append("a batch appended on the recovered image is not loaded after the others")
        except Exception as exc:  # a typed refusal of an image the store wrote is a violation too
            out.append(f"the store on the recovered image raised {type(exc).__name__}: {exc}")
        finally:
            await store.close()

    asyncio.run(go())
    return out


def _image_key(fs: MemFileSystem, options: dict[str, Any]) -> str:
    files, dirs = fs.snapshot()
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    h.update("\0".join(sorted(dirs)).encode())
    return f"{h.hexdigest()}/{sorted(options.items())!r}"


def _register() -> None:
    checked: dict[str, list[str]] = {}

    def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
        """Core recovery of ``/j``, then the store's checks -- unless the harness appended its own
        records after recovery (they are not batches): those images get the core checks only."""
        j = Journal.open(path, create=create, fs=fs, **options)
        try:
            recs = list(j.read())
        finally:
            j.close()
        ours = all(not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event for r in recs)
        if isinstance(fs, MemFileSystem) and ours:
            key = _image_key(fs, options)
            problems = checked.get(key)
            if problems is None:
                problems = check_image(recs, fs, options)
                if len(checked) >= CHECKED_IMAGES_MAX:
                    checked.pop(next(iter(checked)))
                checked[key] = problems
            if problems:
                raise ClaudeStoreViolation("; ".join(problems))
        return recs

    run.__name__ = run.__qualname__ = "claude_sdk_store"
    workload(NAME, recover=recover_and_check, reserve_bytes=CRASH_RESERVE_BYTES)(run)


def available() -> tuple[str, ...]:
    try:
        found = importlib.util.find_spec("claude_agent_sdk") is not None
    except (ImportError, ValueError):
        found = False
    return NAMES if found else ()


def register() -> tuple[str, ...]:
    """Register the workload if the SDK is installed (again: a no-op); its name, or ()."""
    names = available()
    if names and NAME not in WORKLOADS:
        _register()
    return names
