"""The asyncio face of a journal: ``await journal.aio.open(path, create=True)``.

    import journal.aio
    async with await journal.aio.open(path, create=True) as j:
        out = await j.append({"type": "user_message", "text": "hi"})
        async for rec in j.read():
            ...

The event loop never waits on I/O: every call that touches a file (open and its recovery, the
write and the fdatasync, reads, close) runs on a worker thread and its result comes back to the
coroutine through the loop.

Group commit across coroutines. Appends do not each take a thread: a coroutine's records go
into this handle's queue, and one worker takes everything queued at once and hands it to the
engine as one ``append_many`` (one write, and one fdatasync if any of them asked for "sync"),
then wakes every coroutine with its own outcome. While that batch is in the kernel the next one
gathers, with no timer (the engine's rule). Threads appending to the same journal meanwhile
join the same group commit in the engine. A batch is written at the highest level any of its
records asked for, so an outcome may report more durability than its caller asked for, never
less.

Cancellation. A record handed to the writer is written or not as one unit whatever happens to
the coroutine awaiting it. Cancelled while its record still waits in the queue, the record is
taken out and never written. Cancelled once its batch was taken, the write goes on and the
outcome is lost to that coroutine only: it learns it from the journal, by the idempotency key it
gave (append it again: a duplicate answers with the seq) or with ``resolve``. Either way the
journal holds it whole or not at all, and seqs stay contiguous.
"""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Any, TypeVar

import journal
from journal.api import (
    DURABILITY_LEVELS,
    DurabilityError,
    Journal,
    JournalClosedError,
    JournalError,
    Outcome,
    Record,
    RecoveryReport,
    Store,
)

READ_BATCH_RECORDS = 256  # records a reader fetches per trip to its worker thread
QUEUE_RECORDS_MAX = 65_536  # records waiting for the writer; an append past it waits for room
FOLLOW_POLL_INTERVAL_S = 0.02
_RANK: dict[str, int] = {level: rank for rank, level in enumerate(DURABILITY_LEVELS)}
_T = TypeVar("_T")


@dataclass
class _Pending:
    event: Any
    durability: str
    key: str | None
    future: asyncio.Future[Outcome]
    caller: int  # records of one call share it: an error in one call's records is that call's
    taken: bool = False


async def open(path: str | os.PathLike[str], create: bool = False, **options: Any) -> AsyncJournal:  # noqa: A001
    """Open a journal (``journal.open``'s arguments) without blocking the loop on its recovery.

    Cancelled while the open runs on its thread, the open still finishes there; the journal it
    opened is then closed at once, so its writer lock is not left held."""
    return await _open_with(partial(journal.open, path, create=create, **options))


async def open_in(store: Store, name: str, create: bool = False, **options: Any) -> AsyncJournal:
    """``open`` for the journal called ``name`` in a ``journal.api.Store`` (``journal.store``)."""
    return await _open_with(partial(store.open, name, create=create, **options))


async def _open_with(opener: Callable[[], Journal]) -> AsyncJournal:
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="journal-aio")
    opening = executor.submit(opener)
    try:
        j = await asyncio.wrap_future(opening)
    except BaseException:
        opening.add_done_callback(_close_if_opened)
        executor.shutdown(wait=False)
        raise
    return AsyncJournal(j, executor)


def _close_if_opened(done: Future[Any]) -> None:
    if not done.cancelled() and done.exception() is None:
        done.result().close()


class AsyncJournal:
    """A journal whose calls are awaitables. Made by ``journal.aio.open``, or around a journal
    you already have with ``AsyncJournal(j)`` (then closing this closes ``j``)."""

    def __init__(self, j: Journal, executor: ThreadPoolExecutor | None = None) -> None:
        self.journal = j
        # Two workers: one for the writer's batches, one for reads, so a long read never
        # delays a commit.
        self._executor = executor or ThreadPoolExecutor(max_workers=2, thread_name_prefix="journal-aio")
        self._queue: deque[_Pending] = deque()
        self._writing = False
        self._idle = asyncio.Event()  # set while no batch is queued or being written
        self._idle.set()
        self._closed = False
        self._room = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None  # the writer's task, while it runs

    # --- what the journal knows ----------------------------------------------------------

    @property
    def path(self) -> str:
        return self.journal.path

    @property
    def last_seq(self) -> int:
        return self.journal.last_seq

    @property
    def recovery(self) -> RecoveryReport:
        return self.journal.recovery

    async def __aenter__(self) -> AsyncJournal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- writing -------------------------------------------------------------------------

    async def append(self, event: Any, durability: str = "sync", idempotency_key: str | None = None) -> Outcome:
        """Append one event; its outcome, as ``Journal.append`` gives it (see the module doc on
        cancellation)."""
        return (await self._submit([(event, idempotency_key)], durability))[0]

    async def append_many(
        self, events: Iterable[Any], durability: str = "sync", idempotency_keys: Iterable[str | None] | None = None
    ) -> list[Outcome]:
        """Append events in order, in one batch with whatever else is queued."""
        events = list(events)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(events)
        if len(keys) != len(events):
            raise ValueError("idempotency_keys must have one entry per event")
        return await self._submit(list(zip(events, keys, strict=True)), durability)

    async def _submit(self, items: list[tuple[Any, str | None]], durability: str) -> list[Outcome]:
        if durability not in DURABILITY_LEVELS:
            raise DurabilityError(durability, DURABILITY_LEVELS)
        if self._closed:
            raise JournalClosedError()
        if not items:
            return []
        loop = asyncio.get_running_loop()
        async with self._room:
            await self._room.wait_for(lambda: len(self._queue) + len(items) <= QUEUE_RECORDS_MAX or not self._queue)
        caller = id(items)
        mine = [_Pending(event, durability, key, loop.create_future(), caller) for event, key in items]
        self._queue.extend(mine)
        if not self._writing:
            self._writing = True
            self._idle.clear()
            self._task = loop.create_task(self._write_queued())
        try:
            return list(await asyncio.gather(*(p.future for p in mine)))
        except asyncio.CancelledError:
            # Records still waiting leave the queue unwritten; a batch already taken is written
            # whole or not at all, its outcome to be learnt from the journal.
            for p in mine:
                if not p.taken:
                    try:
                        self._queue.remove(p)
                    except ValueError:
                        pass
                    p.future.cancel()
            raise

    async def _write_queued(self) -> None:
        """Hand everything queued to the engine, one batch per trip, until the queue is empty."""
        try:
            while self._queue:
                batch = list(self._queue)
                self._queue.clear()
                for p in batch:
                    p.taken = True
                async with self._room:
                    self._room.notify_all()
                try:
                    await self._write(batch)
                except JournalError:
                    # A refusal (bad input, a key reused for another event) comes before anything
                    # is written: write each call on its own, so only the call at fault gets it.
                    callers: dict[int, list[_Pending]] = {}
                    for p in batch:
                        callers.setdefault(p.caller, []).append(p)
                    for group in callers.values():
                        try:
                            await self._write(group)
                        except Exception as exc:
                            for p in group:
                                if not p.future.done():
                                    p.future.set_exception(exc)
                except BaseException as exc:
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
        finally:
            self._writing = False
            self._idle.set()

    async def _write(self, batch: list[_Pending]) -> None:
        """One append_many for ``batch``, at the highest level any of its records asked for;
        each record's future gets its outcome."""
        level = max((p.durability for p in batch), key=_RANK.__getitem__)
        write = partial(self.journal.append_many, [p.event for p in batch], level, [p.key for p in batch])
        outs = await asyncio.get_running_loop().run_in_executor(self._executor, write)
        for p, out in zip(batch, outs, strict=True):
            if not p.future.done():
                p.future.set_result(out)

    async def flush(self) -> None:
        await self._call(self.journal.flush)

    async def sync(self) -> None:
        await self._call(self.journal.sync)

    async def resolve(self, outcome: Outcome) -> Outcome:
        return await self._call(lambda: self.journal.resolve(outcome))

    # --- reading -------------------------------------------------------------------------

    async def get(self, seq: int) -> Record | None:
        return await self._call(lambda: self.journal.get(seq))

    async def read(self, after_seq: int = 0) -> AsyncIterator[Record]:
        """Records with seq > after_seq, in seq order, fetched READ_BATCH_RECORDS at a time."""
        records: Iterator[Record] = self.journal.read(after_seq)
        try:
            while True:
                chunk = await self._call(lambda: list(islice(records, READ_BATCH_RECORDS)))
                for rec in chunk:
                    yield rec
                if len(chunk) < READ_BATCH_RECORDS:
                    return
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                await self._call(close)

    async def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        stop: asyncio.Event | None = None,
    ) -> AsyncIterator[Record]:
        """Records as they are committed, until ``stop`` is set or nothing came for idle_timeout_s."""
        last = after_seq
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while not (stop is not None and stop.is_set()):
            got = False
            async for rec in self.read(last):
                got = True
                last = rec.seq
                yield rec
            now = loop.time()
            if got:
                idle_since = now
            elif idle_timeout_s is not None and now - idle_since >= idle_timeout_s:
                return
            if not got:
                if stop is not None:
                    try:
                        await asyncio.wait_for(stop.wait(), poll_interval_s)
                    except asyncio.TimeoutError:  # the builtin TimeoutError only from Python 3.11 on
                        pass
                else:
                    await asyncio.sleep(poll_interval_s)

    # --- closing -------------------------------------------------------------------------

    async def close(self) -> None:
        """Write what is queued, close the journal, stop the workers. Idempotent."""
        if self._closed:
            return
        self._closed = True  # no new appends; what is queued is written first
        await self._idle.wait()
        try:
            await self._call(self.journal.close)
        finally:
            self._executor.shutdown(wait=False)

    async def _call(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


class JournalCache:
    """Open journals on demand and close the least recently used, so a store of many sessions
    never holds more than ``journals_max`` open at once. An open writer holds a few descriptors
    (the lock, the live segment, and the segments get() keeps open, at most 8): a server with
    1,024 descriptors and 100,000 sessions sets journals_max well below 1,024 / 10.

    ``async with cache.use(path) as j`` gives an AsyncJournal that stays open while it is used;
    one not in use is closed when room is needed. Options go to journal.open.
    """

    def __init__(self, journals_max: int, **options: Any) -> None:
        if journals_max < 1:
            raise ValueError("journals_max must be at least 1")
        self.journals_max = journals_max
        self.options = options
        self._open: OrderedDict[str, AsyncJournal] = OrderedDict()
        self._users: dict[str, int] = {}
        self._opening: dict[str, asyncio.Future[AsyncJournal]] = {}
        self._mu = asyncio.Condition()

    @property
    def open_count(self) -> int:
        return len(self._open) + len(self._opening)

    def use(self, path: str | os.PathLike[str]) -> _Use:
        return _Use(self, os.path.abspath(os.fspath(path)))

    async def _acquire(self, path: str) -> AsyncJournal:
        async with self._mu:
            while True:
                if path in self._open:
                    self._open.move_to_end(path)
                    self._users[path] = self._users.get(path, 0) + 1
                    return self._open[path]
                if path in self._opening:
                    waiter = self._opening[path]
                    self._mu.release()
                    try:
                        await asyncio.shield(waiter)
                    except BaseException:
                        if not waiter.done():
                            raise  # this caller was cancelled while it waited
                        # else the open failed (or was cancelled) for its own caller: try again
                    finally:
                        await self._mu.acquire()
                    continue
                if self.open_count < self.journals_max:
                    break
                idle = next((p for p in self._open if not self._users.get(p)), None)
                if idle is None:
                    await self._mu.wait()  # every open journal is in use: wait for one to be let go
                    continue
                victim = self._open.pop(idle)
                self._users.pop(idle, None)
                await victim.close()
            waiter = asyncio.get_running_loop().create_future()
            self._opening[path] = waiter
        try:
            aj = await open(path, create=True, **self.options)
        except BaseException as exc:
            async with self._mu:
                del self._opening[path]
                if isinstance(exc, asyncio.CancelledError):
                    waiter.cancel()
                else:
                    waiter.set_exception(exc)
                    waiter.exception()  # retrieved: the waiters retry and see their own error
                self._mu.notify_all()
            raise
        async with self._mu:
            del self._opening[path]
            self._open[path] = aj
            self._users[path] = 1
            waiter.set_result(aj)
            self._mu.notify_all()
        return aj

    async def _release(self, path: str) -> None:
        async with self._mu:
            self._users[path] -= 1
            self._mu.notify_all()

    async def close(self) -> None:
        async with self._mu:
            while self._open:
                _, aj = self._open.popitem()
                await aj.close()
            self._users.clear()


class _Use:
    def __init__(self, cache: JournalCache, path: str) -> None:
        self._cache = cache
        self._path = path

    async def __aenter__(self) -> AsyncJournal:
        return await self._cache._acquire(self._path)

    async def __aexit__(self, *exc: object) -> None:
        await self._cache._release(self._path)


__all__ = ["AsyncJournal", "JournalCache", "open"]
