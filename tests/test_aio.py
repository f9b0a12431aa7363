"""journal.aio: awaitable appends that share one group commit, a loop that never waits on I/O,
cancellation that leaves every record whole or absent, and a bound on open journals."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path
from typing import Any

import pytest

import journal
import journal.aio
from journal.fs import File, OsFileSystem


class CountingFileSystem(OsFileSystem):
    """The real file layer, counting fdatasyncs; ``gate``, when set, holds each fdatasync until
    the test opens it (to catch the loop while a write is in the kernel)."""

    def __init__(self) -> None:
        self.fdatasyncs = 0
        self.mu = threading.Lock()
        self.gate: threading.Event | None = None
        self.in_sync = threading.Event()

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        inner = f.fdatasync

        def fdatasync() -> None:
            with self.mu:
                self.fdatasyncs += 1
            if self.gate is not None:
                self.in_sync.set()
                self.gate.wait()
            inner()

        f.fdatasync = fdatasync  # type: ignore[method-assign]
        return f


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_open_append_read_follow_get_resolve_close(tmp_path: Path) -> None:
    async def main() -> None:
        async with await journal.aio.open(tmp_path / "j", create=True) as j:
            outs = [await j.append({"n": i}) for i in range(5)]
            assert [o.seq for o in outs if isinstance(o, journal.Committed)] == [1, 2, 3, 4, 5]
            many = await j.append_many([{"n": 5}, {"n": 6}], durability="flush")
            assert [o.seq for o in many if isinstance(o, journal.Committed)] == [6, 7]
            assert [r.event["n"] async for r in j.read(after_seq=2)] == [2, 3, 4, 5, 6]
            rec = await j.get(4)
            assert rec is not None and rec.event == {"n": 3}
            assert await j.resolve(outs[0]) is outs[0]
            await j.sync()
            stop = asyncio.Event()
            seen: list[int] = []

            async def follower() -> None:
                async for r in j.follow(after_seq=7, poll_interval_s=0.001, stop=stop):
                    seen.append(r.seq)
                    if r.seq == 9:
                        stop.set()

            task = asyncio.create_task(follower())
            await j.append({"n": 7})
            await j.append({"n": 8})
            await asyncio.wait_for(task, 30)
            assert seen == [8, 9]
            with pytest.raises(journal.DurabilityError):
                await j.append({"n": 0}, durability="later")
        with pytest.raises(journal.JournalClosedError):
            await j.append({"n": 9})

    run(main())
    with journal.open(tmp_path / "j", readonly=True) as r:
        assert r.last_seq == 9


def test_many_coroutines_share_one_write_and_one_fdatasync(tmp_path: Path) -> None:
    fs = CountingFileSystem()
    n = 300

    async def main() -> list[journal.Outcome]:
        async with await journal.aio.open(tmp_path / "j", create=True, fs=fs) as j:
            before = fs.fdatasyncs
            outs = await asyncio.gather(*(j.append({"i": i}, durability="sync") for i in range(n)))
            syncs = fs.fdatasyncs - before
        # The first coroutine's record goes alone; everything queued while it was in the
        # kernel goes in the next batch: a handful of fdatasyncs for all of them.
        assert syncs <= 5, syncs
        return list(outs)

    outs = run(main())
    assert sorted(o.seq for o in outs if isinstance(o, journal.Committed)) == list(range(1, n + 1))
    assert all(isinstance(o, journal.Committed) and o.durability == "sync" for o in outs)


def test_the_loop_runs_while_a_write_waits_in_fdatasync(tmp_path: Path) -> None:
    fs = CountingFileSystem()

    async def main() -> None:
        async with await journal.aio.open(tmp_path / "j", create=True, fs=fs) as j:
            fs.gate = threading.Event()
            task = asyncio.create_task(j.append({"x": 1}))
            await asyncio.to_thread(fs.in_sync.wait, 30)
            # The write is held inside fdatasync on a worker thread, and this coroutine runs:
            ticks = 0
            for _ in range(10):
                await asyncio.sleep(0)
                ticks += 1
            assert ticks == 10 and not task.done()
            fs.gate.set()
            out = await task
            assert isinstance(out, journal.Committed) and out.seq == 1
            fs.gate = None

    run(main())


def test_cancelled_appends_leave_every_record_whole_or_absent(tmp_path: Path) -> None:
    """Thousands of appends cancelled at each point of their life, the point forced through the
    loop's order (no timing): before they ran, while queued, and once their batch was taken."""
    n = 3000
    rng = random.Random(14)

    async def main() -> tuple[dict[int, journal.Outcome], dict[str, int]]:
        results: dict[int, journal.Outcome] = {}
        phases = {"before it ran": 0, "queued": 0, "in flight": 0}
        async with await journal.aio.open(tmp_path / "j", create=True, segment_size_bytes=65536) as j:

            async def one(i: int) -> None:
                level = ("sync", "flush", "buffered")[i % 3]
                results[i] = await j.append({"i": i, "pad": "p" * (i % 97)}, level, idempotency_key=f"k{i}")

            tasks = [asyncio.create_task(one(i)) for i in range(n)]
            live = list(tasks)

            def cancel_some(share: float, phase: str) -> None:
                for t in rng.sample(live, int(len(live) * share)):
                    assert t.cancel()  # each is pending: not started, or awaiting its outcome
                    live.remove(t)
                    phases[phase] += 1

            cancel_some(0.2, "before it ran")
            await asyncio.sleep(0)  # every other task runs up to its await: all of them queued
            assert j._queue and all(not p.taken for p in j._queue)
            cancel_some(0.35, "queued")
            while j._queue:  # the writer takes the batch on its next turn
                await asyncio.sleep(0)
            cancel_some(0.25, "in flight")
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert sum(isinstance(d, asyncio.CancelledError) for d in done) == sum(phases.values())
            # A cancelled caller learns its outcome from the journal: the same key again.
            for i in range(n):
                if i not in results:
                    again = await j.append({"i": i, "pad": "p" * (i % 97)}, "flush", idempotency_key=f"k{i}")
                    assert isinstance(again, journal.Committed)
                    results[i] = again
        return results, phases

    results, phases = run(main())
    assert sum(phases.values()) > 1500 and all(phases.values())
    with journal.open(tmp_path / "j", readonly=True) as r:
        recs = list(r.read())
    assert [x.seq for x in recs] == list(range(1, len(recs) + 1))  # contiguous
    assert len(recs) == n  # each event exactly once: written before the cancel, or by the retry
    by_seq = {x.seq: x for x in recs}
    for i, out in results.items():
        assert isinstance(out, journal.Committed)
        assert by_seq[out.seq].event == {"i": i, "pad": "p" * (i % 97)} and by_seq[out.seq].key == f"k{i}"


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")
def test_the_cache_never_holds_more_than_its_bound_of_open_journals(tmp_path: Path) -> None:
    bound = 4

    async def main() -> None:
        cache = journal.aio.JournalCache(bound)
        base = _fds()
        async with cache.use(tmp_path / "probe") as j:
            await j.append({"probe": 1})
            per_journal = _fds() - base
        most = 0

        async def session(k: int) -> None:
            nonlocal most
            async with cache.use(tmp_path / f"s{k % 40}") as j:
                most = max(most, cache.open_count)
                assert cache.open_count <= bound
                # Descriptors grow with the bound, not with the 40 sessions (2 more per journal
                # for the files an open or a close has in hand for a moment).
                assert _fds() <= base + bound * (per_journal + 2)
                await j.append({"k": k})

        # 40 sessions, 200 uses, at most 8 at a time: journals are opened on demand and the
        # least recently used idle one is closed to make room.
        sem = asyncio.Semaphore(8)

        async def limited(k: int) -> None:
            async with sem:
                await session(k)

        await asyncio.gather(*(limited(k) for k in range(200)))
        assert most == bound
        await cache.close()
        assert cache.open_count == 0

    run(main())
    total = 0
    for k in range(40):
        with journal.open(tmp_path / f"s{k}", readonly=True) as r:
            total += r.last_seq
    assert total == 200


def test_the_session_layer_and_store_as_awaitables(tmp_path: Path) -> None:
    import journal.session.aio as saio

    async def main() -> str:
        async with await saio.open(tmp_path / "s", create=True) as s:
            turn = await s.append("turn.started", turn_id="t1")
            said = await s.append("user.message", {"text": "hi"}, turn_id="t1")
            assert turn.committed and said.committed and said.event.seq == turn.event.seq + 1
            await s.sync()
            types = [ev.type async for ev in s.read()]
            assert types[-2:] == ["turn.started", "user.message"]
            state = await s.state()
            assert state.session_id == s.session_id
            sid = s.session_id
        store = await saio.AsyncSessionStore.open(tmp_path / "store")
        made = await store.create()
        await made.append("user.message", {"text": "in the store"})
        await made.close()
        latest = await store.latest()
        assert latest is not None and latest.session_id == made.session_id
        again = await store.open_session(made.session_id)
        assert [ev.type async for ev in again.read()][-1] == "user.message"
        await again.close()
        await store.close()
        return sid

    sid = run(main())
    with journal.open(tmp_path / "s", readonly=True) as r:
        assert [rec.event["sessionId"] for rec in r.read()] == [sid] * r.last_seq


def test_a_cancelled_open_leaves_no_lock_and_one_bad_call_fails_alone(tmp_path: Path) -> None:
    from journal.engine.core import Journal as FileJournal

    entered, release = threading.Event(), threading.Event()
    real = FileJournal._open_writer

    def held_open(self: FileJournal, create: bool, lock_timeout_s: float) -> None:
        real(self, create, lock_timeout_s)
        entered.set()
        release.wait(30)  # a long recovery: the caller gives up while it runs

    async def main() -> None:
        FileJournal._open_writer = held_open  # type: ignore[method-assign]
        try:
            task = asyncio.create_task(journal.aio.open(tmp_path / "j", create=True))
            await asyncio.to_thread(entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            FileJournal._open_writer = real  # type: ignore[method-assign]
            release.set()
        # The open finished on its thread and was closed there: the lock is free again.
        for _ in range(1000):
            try:
                j = await journal.aio.open(tmp_path / "j")
                break
            except journal.JournalLockedError:
                await asyncio.sleep(0.01)
        else:
            raise AssertionError("the lock of the cancelled open was never released")
        async with j:
            await j.append({"v": 1}, idempotency_key="K")
            outs = await asyncio.gather(
                j.append({"v": 2}, idempotency_key="K"),  # another event under K: this call's fault
                j.append({"innocent": 1}),
                j.append({"bad": object()}),  # not JSON: this call's fault
                j.append({"innocent": 2}),
                return_exceptions=True,
            )
        assert isinstance(outs[0], journal.IdempotencyConflictError)
        assert isinstance(outs[2], journal.EventNotSerializableError)
        assert isinstance(outs[1], journal.Committed) and isinstance(outs[3], journal.Committed)

    run(main())
    with journal.open(tmp_path / "j", readonly=True) as r:
        assert [rec.event for rec in r.read()] == [{"v": 1}, {"innocent": 1}, {"innocent": 2}]
