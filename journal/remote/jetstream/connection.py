"""The connection to the servers: one asyncio loop in a daemon thread for the process (_Loop), one
NATS connection per set of servers shared by every handle of the process (_Conn), and the
few JetStream calls a journal makes on it, each with a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import itertools
import json
import os
import threading
from collections import deque
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

from journal.errors import (
    InvariantError,
)
from journal.remote.jetstream.client import NATS, Msg, Subscription, nats
from journal.remote.jetstream.errors import _Lost, _Refused
from journal.remote.jetstream.headers import ERR_NO_MESSAGE, _StoredMsg
from journal.remote.url import RemoteURL

_T = TypeVar("_T")


class _Stoppable(Protocol):
    """A reader of the stream (consumer._OrderedReader) as _Loop.stop_soon stops it."""

    async def stop(self) -> None: ...


class _Loop:
    """One asyncio loop in a daemon thread for the process; every handle's I/O runs on it."""

    _mu = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _stopping: set[asyncio.Future[None]] = set()  # readers being stopped from the loop's own thread

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._mu:
            if cls._loop is None or cls._thread is None or not cls._thread.is_alive():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                t = threading.Thread(target=run, name="journal-nats-loop", daemon=True)
                t.start()
                ready.wait()
                cls._loop, cls._thread = loop, t
            return cls._loop

    @classmethod
    def call(cls, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        """Run ``coro`` on the loop and wait for it (a backstop ``timeout_s``: the coroutines set
        their own). Raises what it raises; _Lost if the backstop passes."""
        loop = cls.get()
        if cls._thread is threading.current_thread():
            coro.close()
            raise InvariantError("a journal on NATS was called from its own event loop thread")
        fut = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return fut.result(timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise _Lost(f"no answer within {timeout_s:g} s") from None
        except BaseException:
            fut.cancel()
            raise


    @classmethod
    def stop_soon(cls, reader: _Stoppable) -> None:
        """Stop a reader: waited for, or (when a generator holding it is finalized on the loop's
        own thread, by the garbage collector) scheduled."""
        if cls._thread is threading.current_thread():
            task = asyncio.ensure_future(reader.stop())
            cls._stopping.add(task)
            task.add_done_callback(cls._stopping.discard)
            return
        try:
            cls.call(reader.stop(), 10.0)
        except (_Lost, _Refused, nats.errors.Error, OSError):
            pass




class _Slot:
    """One publish handed from a caller's thread to the loop (``_Conn.publish_sync``): settled
    once, by whoever takes it out of ``_Conn._waiting`` (the reply, a send that failed, the
    caller's timeout), which then releases ``done``."""

    __slots__ = ("body", "done", "error", "headers", "msg", "subject", "token")

    def __init__(self, subject: str, body: bytes, headers: dict[str, str], token: str) -> None:
        self.subject = subject
        self.body = body
        self.headers = headers
        self.token = token
        self.msg: Msg | None = None
        self.error: BaseException | None = None
        self.done = threading.Lock()
        self.done.acquire()


class _Conn:
    """A NATS connection with the few JetStream calls the journal makes, all with timeouts.

    Shared: every handle of the process on the same servers uses one (``_Conn.shared``, counted
    references), so the publishes of many journals leave in one burst (one socket write, one
    read on the server) and their acks come back in one. Each journal still has one message on
    the wire at a time, fenced on its own previous one: what the burst shares is the socket."""

    _pool_mu = threading.Lock()
    _pool: dict[tuple[str, ...], tuple[_Conn, int]] = {}

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self._prefix = nc.new_inbox() + "."
        self._waiting: dict[str, asyncio.Future[Msg] | _Slot] = {}
        self._sub: Subscription | None = None
        self._tokens = itertools.count(1)  # reply tokens: unique on this connection's inbox prefix
        self._loop = asyncio.get_running_loop()
        self._outbox: deque[_Slot] = deque()  # publishes from callers' threads, for the loop to send
        self._kicked = False  # a _send_outbox is scheduled on the loop
        self._senders: set[asyncio.Task[None]] = set()

    @classmethod
    def shared(cls, servers: list[str], timeout_s: float) -> _Conn:
        """The process's connection to ``servers`` (made if there is none, or it was closed), with
        one more reference: give it back with ``release``. Never called on the loop's thread."""
        key = (str(os.getpid()), *servers)  # a forked child makes its own (its loop is another)
        loop = _Loop.get()
        with cls._pool_mu:
            got = cls._pool.get(key)
            if got is not None and not got[0].nc.is_closed and got[0]._loop is loop:
                cls._pool[key] = (got[0], got[1] + 1)
                return got[0]
        # Connected without the pool's lock held (a release on the loop's thread takes it).
        conn = _Loop.call(cls.connect(servers, timeout_s), timeout_s + 5.0)
        with cls._pool_mu:
            got = cls._pool.get(key)
            if got is not None and not got[0].nc.is_closed and got[0]._loop is loop:
                cls._pool[key] = (got[0], got[1] + 1)  # another open made one meanwhile: that one
            else:
                cls._pool[key] = (conn, 1)
                return conn
        with contextlib.suppress(_Lost, nats.errors.Error, OSError):
            _Loop.call(conn.close(), 10.0)
        return got[0]

    def release(self, wait: bool = True) -> None:
        """Give back a reference from ``shared``; the last one closes the connection (waited for
        unless ``wait`` is false or this runs on the loop's thread)."""
        with self._pool_mu:
            last = True
            for key, (conn, refs) in list(self._pool.items()):
                if conn is self:
                    last = refs <= 1
                    if last:
                        del self._pool[key]
                    else:
                        self._pool[key] = (conn, refs - 1)
                    break
        if not last:
            return
        if wait and _Loop._thread is not threading.current_thread():
            try:
                _Loop.call(self.close(), 10.0)
            except (_Lost, nats.errors.Error, OSError):
                pass
        else:
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self.close(), self._loop)

    @classmethod
    async def connect(cls, servers: list[str], timeout_s: float) -> _Conn:
        async def quiet(_exc: Exception) -> None:
            return None

        nc = await asyncio.wait_for(
            nats.connect(
                servers=servers,
                connect_timeout=max(1, int(timeout_s)),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.1,
                error_cb=quiet,
                name=f"journal pid {os.getpid()}",
            ),
            timeout_s,
        )
        conn = cls(nc)
        conn._sub = await nc.subscribe(conn._prefix + "*", cb=conn._on_reply)
        return conn

    async def _on_reply(self, msg: Msg) -> None:
        got = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if isinstance(got, _Slot):
            got.msg = msg
            got.done.release()
        elif got is not None and not got.done():
            got.set_result(msg)

    def publish_sync(self, subject: str, body: bytes, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
        """``publish`` from a caller's thread without a coroutine per call: the message joins the
        outbox, which the loop sends in one burst with whatever other threads queued meanwhile;
        the caller waits on a lock of its own for the ack (or ``timeout_s``: _Lost)."""
        if _Loop._thread is threading.current_thread():
            raise InvariantError("a journal on NATS was called from its own event loop thread")
        slot = _Slot(subject, body, headers, f"{next(self._tokens):x}")
        self._waiting[slot.token] = slot
        self._outbox.append(slot)
        if not self._kicked:
            self._kicked = True
            try:
                self._loop.call_soon_threadsafe(self._send_outbox)
            except RuntimeError as exc:  # the loop is closed (the interpreter is exiting)
                self._kicked = False
                if self._waiting.pop(slot.token, None) is slot:
                    raise _Refused(f"not sent: the event loop is closed ({exc})") from exc
        if not slot.done.acquire(timeout=timeout_s):
            if self._waiting.pop(slot.token, None) is slot:  # still ours: no answer will be taken
                raise _Lost(f"no answer from the server within {timeout_s:g} s")
            slot.done.acquire()  # settled meanwhile: its result is a moment away
        if slot.error is not None:
            raise slot.error
        if slot.msg is None:
            raise InvariantError("a settled publish has an answer or an error")
        return _ack_of(slot.msg)

    def _send_outbox(self) -> None:
        """On the loop: send every publish queued (one task for the burst, not one per publish)."""
        self._kicked = False
        burst: list[_Slot] = []
        while self._outbox:
            burst.append(self._outbox.popleft())
        if burst:
            task = self._loop.create_task(self._send_burst(burst))
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)

    async def _send_burst(self, burst: list[_Slot]) -> None:
        for i, slot in enumerate(burst):
            if self._waiting.get(slot.token) is not slot:
                continue  # its caller gave up waiting: never sent
            try:
                await self.nc.publish(slot.subject, slot.body, reply=self._prefix + slot.token, headers=slot.headers)
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError,
                    nats.errors.OutboundBufferLimitError) as exc:
                # Raised before anything was queued (OutboundBufferLimitError: the connection was
                # lost and its buffer is full until it is made again): surely not sent.
                err: BaseException = _Refused(f"not sent: the connection is closed or being made again "
                                              f"({type(exc).__name__})")
                err.__cause__ = exc
                self._settle(slot, err)
            except asyncio.CancelledError:
                for rest in burst[i:]:
                    self._settle(rest, _Lost("the publish was cancelled (the event loop is stopping)"))
                raise
            except Exception as exc:  # handed to the caller's thread, raised there
                self._settle(slot, exc)

    def _settle(self, slot: _Slot, error: BaseException) -> None:
        if self._waiting.pop(slot.token, None) is slot:
            slot.error = error
            slot.done.release()

    async def request(self, subject: str, body: bytes, timeout_s: float, headers: dict[str, str] | None = None) -> Msg:
        """Send and await the answer. _Refused if it surely was not delivered (the connection
        was closed before sending, no responders); _Lost if no answer came."""
        token = f"{next(self._tokens):x}"
        fut: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._waiting[token] = fut
        try:
            try:
                await self.nc.publish(subject, body, reply=self._prefix + token, headers=headers)
            except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError) as exc:
                raise _Refused(f"not sent: the connection is closed ({type(exc).__name__})") from exc
            except nats.errors.OutboundBufferLimitError as exc:  # lost, being made again, its buffer full
                raise _Refused("not sent: the connection was lost and its buffer is full until it is made "
                               f"again ({type(exc).__name__})") from exc
            try:
                msg = await asyncio.wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                raise _Lost(f"no answer from the server within {timeout_s:g} s") from None
        finally:
            self._waiting.pop(token, None)
        if msg.headers and msg.headers.get("Status") == "503":
            raise _Refused("no responders: no JetStream stream or server took the message", 503)
        return msg

    async def api(self, subject: str, req: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
        msg = await self.request(subject, json.dumps(req).encode() if req is not None else b"", timeout_s)
        try:
            resp: dict[str, Any] = json.loads(msg.data)
        except ValueError as exc:
            raise _Refused(f"unreadable JetStream answer: {msg.data[:100]!r}") from exc
        err = resp.get("error")
        if err:
            raise _Refused(str(err.get("description", err)), int(err.get("code", 0)), int(err.get("err_code", 0)))
        return resp

    async def publish(self, subject: str, body: bytes, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
        """A JetStream publish; its ack (stream, seq, duplicate) or _Refused or _Lost."""
        return _ack_of(await self.request(subject, body, timeout_s, headers))

    async def get_msg(self, stream: str, req: dict[str, Any], timeout_s: float) -> _StoredMsg | None:
        """STREAM.MSG.GET (answered by the stream's leader, never a lagging replica); None if no message."""
        try:
            resp = await self.api(f"$JS.API.STREAM.MSG.GET.{stream}", req, timeout_s)
        except _Refused as exc:
            if exc.err_code == ERR_NO_MESSAGE:
                return None
            raise
        m = resp["message"]
        hdrs: dict[str, str] = {}
        raw_h = base64.b64decode(m.get("hdrs") or "")
        if raw_h:
            for line in raw_h.split(b"\r\n")[1:]:
                if b":" in line:
                    k, v = line.split(b":", 1)
                    hdrs[k.decode()] = v.strip().decode()
        return _StoredMsg(int(m["seq"]), m["subject"], hdrs, base64.b64decode(m.get("data") or ""))

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.nc.close(), 5)
        except (asyncio.TimeoutError, nats.errors.Error, OSError):
            pass
        for got in list(self._waiting.values()):  # no answer comes any more
            if isinstance(got, _Slot):
                self._settle(got, _Lost("the connection was closed before the answer came"))


def _ack_of(msg: Msg) -> dict[str, Any]:
    """A publish's ack (stream, seq, duplicate) from its answer, or _Refused or _Lost."""
    if msg.headers and msg.headers.get("Status") == "503":
        raise _Refused("no responders: no JetStream stream or server took the message", 503)
    try:
        ack: dict[str, Any] = json.loads(msg.data)
    except ValueError:
        raise _Lost(f"unreadable publish ack: {msg.data[:100]!r}") from None
    err = ack.get("error")
    if err:
        raise _Refused(str(err.get("description", err)), int(err.get("code", 0)), int(err.get("err_code", 0)))
    if "seq" not in ack:
        raise _Lost(f"publish ack without a sequence: {ack!r}")
    return ack


def _servers_of(parsed: RemoteURL) -> list[str]:
    netloc = parsed.server.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    cred = ""
    if "@" in netloc:
        cred, netloc = netloc.rsplit("@", 1)
        cred += "@"
    out = []
    for hp in netloc.split(","):
        hp = hp.strip()
        if hp:
            out.append(f"nats://{cred}{hp}" if ":" in hp.rsplit("]", 1)[-1] else f"nats://{cred}{hp}:4222")
    return out
