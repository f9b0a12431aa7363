"""The asyncio face of the session layer: ``await journal.session.aio.open(path, create=True)``.

Every call runs on the session's own worker thread (one per session: a session has one writer,
and its in-memory state is folded in append order), so the event loop never waits on a write,
an fdatasync, a repair or a replay. A cancelled call's work still runs to its end on that
thread: an append is written whole or not at all, as with journal.aio, and a caller that was
cancelled learns what happened from the session (an idempotency key, or ``read``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from journal.session.gate import GateDecision, ResumeChecks
from journal.session.repair import RepairReport
from journal.session.session import Appended, Session
from journal.session.state import SessionState
from journal.session.store import SessionInfo, SessionStore

_T = TypeVar("_T")
READ_BATCH_EVENTS = 256  # events a reader fetches per trip to the worker thread


def _worker(name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"journal-session-{name}")


async def open(path: str | os.PathLike[str], create: bool = False, **kwargs: Any) -> AsyncSession:  # noqa: A001
    """Open (and repair) a session without blocking the loop; ``journal.session.open``'s arguments."""
    executor = _worker("open")
    try:
        s = await asyncio.get_running_loop().run_in_executor(executor, partial(Session.open, path, create, **kwargs))
    except BaseException:
        executor.shutdown(wait=False)
        raise
    return AsyncSession(s, executor)


class AsyncSession:
    """A Session whose calls are awaitables (made by ``open``, or around a Session you have)."""

    def __init__(self, session: Session, executor: ThreadPoolExecutor | None = None) -> None:
        self.session = session
        self._executor = executor or _worker(session.session_id or "session")

    @property
    def session_id(self) -> str:
        return self.session.session_id

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def append(self, type: str, data: Any = None, **kw: Any) -> Appended:  # noqa: A002
        """``Session.append``: one event with the durability its type demands."""
        return await self._call(partial(self.session.append, type, data, **kw))

    async def sync(self) -> None:
        await self._call(self.session.sync)

    async def state(self) -> SessionState:
        return await self._call(lambda: self.session.state)

    async def read(self, after_seq: int = 0) -> AsyncIterator[Any]:
        """The session's events after ``after_seq``, fetched READ_BATCH_EVENTS at a time."""
        events = self.session.read(after_seq)
        done = object()

        def chunk() -> list[Any]:
            out = []
            for _ in range(READ_BATCH_EVENTS):
                ev = next(events, done)
                if ev is done:
                    break
                out.append(ev)
            return out

        while True:
            got = await self._call(chunk)
            for ev in got:
                yield ev
            if len(got) < READ_BATCH_EVENTS:
                return

    async def repair(self, dry_run: bool = False) -> RepairReport:
        return await self._call(partial(self.session.repair, dry_run))

    async def resume_gate(self, checks: ResumeChecks | None = None) -> GateDecision:
        return await self._call(partial(self.session.resume_gate, checks))

    async def close(self) -> None:
        try:
            await self._call(self.session.close)
        finally:
            self._executor.shutdown(wait=False)

    async def _call(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


class AsyncSessionStore:
    """A SessionStore whose calls are awaitables; the sessions it opens are AsyncSessions."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._executor = _worker("store")

    @classmethod
    async def open(cls, root: str | os.PathLike[str], **kwargs: Any) -> AsyncSessionStore:
        store = await asyncio.to_thread(partial(SessionStore, root, **kwargs))
        return cls(store)

    async def create(self, **kwargs: Any) -> AsyncSession:
        s = await self._call(partial(self.store.create, **kwargs))
        return AsyncSession(s)

    async def open_session(self, session_id: str, readonly: bool = False, **options: Any) -> AsyncSession:
        s = await self._call(partial(self.store.open, session_id, readonly, **options))
        return AsyncSession(s)

    async def list(self, status: str | None = None, workspace: str | None = None) -> list[SessionInfo]:
        return await self._call(partial(self.store.list, status, workspace))

    async def latest(self, workspace: str | None = None) -> SessionInfo | None:
        return await self._call(partial(self.store.latest, workspace))

    async def info(self, session_id: str) -> SessionInfo:
        return await self._call(partial(self.store.info, session_id))

    async def archive(self, session_id: str) -> SessionInfo:
        return await self._call(partial(self.store.archive, session_id))

    async def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def _call(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)


__all__ = ["AsyncSession", "AsyncSessionStore", "open"]
