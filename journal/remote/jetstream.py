"""A journal on NATS JetStream 2.9: one subject per journal in one stream (docs/REMOTE.md).

    j = journal.open("nats://127.0.0.1:4222?journal=s-42&replicas=3", create=True)

Layout. Stream ``stream`` (default JOURNAL) holds ``<base>.<name>`` for every journal's records
and ``<base>-meta.<name>`` for its metadata message (id, first seq, creation), where ``<base>``
is ``journal`` for the stream JOURNAL and ``journal_<stream>`` for any other (JetStream refuses
two streams with overlapping subjects). A name is escaped into one subject token reversibly:
bytes outside ``[A-Za-z0-9-]`` become ``_XX`` (hex).

One message per group-commit batch. Its body is the frames of the batch's records, one after
the other, each exactly the frame the file engine would write (``records.frame_of``); its
headers say ``Journal-Seq`` (the first record's seq), ``Journal-Count`` and ``Nats-Msg-Id``
(journal id, first seq and a digest of the body). Every publish carries
``Nats-Expected-Last-Subject-Sequence``: the stream sequence of the journal's last message as
this writer knows it from its own acks, so the server refuses it if anyone else appended since.
Why a message per batch and not per record: on a stream shared by many journals the stream
sequence a message will get is unknown until its ack, so a pipelined burst of per-record
publishes cannot chain that header on 2.9; a batch in one message is fenced exactly and lands
or not as a whole. A batch is bounded by the server's max_payload (1 MiB by default).

The writer claim is a key of the KV bucket ``<stream>_LOCKS`` (history 1, max_age = the claim's
time to live), created with expected revision 0 and refreshed by its holder; close() marks it
released (and whether the writer ended cleanly). A writer that takes a claim not released
cleanly (expired: its holder died, or it fail-stopped) first publishes a fence message on the
journal's subject, chained on the last message it read: once it lands, no publish still in
flight from an earlier writer can land (its expected sequence is stale), so what resolve()
reads afterwards is final.

Shared writers (``writer="shared"``): several handles, in as many processes, append to one
journal. They hold the claim together (state "shared", a set of holders, each with a presence
key that expires claim_ttl_s after its last refresh), so they exclude an exclusive writer and
the reverse. Each batch message takes its seqs from what its handle knows and is chained on the
last message it knows; when another writer appended first the server refuses it, and the handle
catches up (reads the messages it has not seen: their seqs, keys and digests), answers records
whose key another writer now holds as duplicates, gives the rest the next seqs and publishes
again, for up to ``shared_lock_timeout_s``. No buffered level; resolve() publishes a fence of its
own before it answers NotCommitted, since the other writers do not fence for it. An exclusive
writer's fence seen after a shared writer's open means its claim lapsed: it fail-stops.

Races the server lets through. nats-server 2.9 checks Nats-Expected-Last-Subject-Sequence on a
replicated stream against what its leader has stored, not what is still being replicated: two
publishes chained on one message, sent at once, can both be stored (seen on a 3-node cluster,
some rounds in ten). So every message's own expected sequence is read back: a message chained
on an older message than the one before it on the subject lost such a race and is skipped by
every reader (``_lost_race``); a shared writer checks after each ack that its message came
first (``_won``), as every fence does, and otherwise catches up and publishes again. Claims,
where a lost race would let two writers in, are also chained on the bucket's last stream
sequence (``Nats-Expected-Last-Sequence``), which the server does check against what it is
replicating (``_claim_write``).

Idempotency keys persist across reopen: a writer's (and a reader's) open reads the journal's
subject once, in full, with an ordered consumer, and keeps every key with its seq and digest
and, per message, its first seq and stream sequence (16 bytes a message). Opening thus costs a
read of the whole journal (O(journal bytes) over the wire; about the cost of one read()).

All NATS I/O runs on one asyncio loop in a daemon thread for the process, on one connection
per set of servers shared by every handle of the process (``_Conn.shared``); the sync API calls
into it with timeouts. A batch's publish is queued for the loop (``_Conn.publish_sync``), which
sends what many journals queued meanwhile in one burst; each journal keeps one message on the
wire at a time, chained on its own last one. ``journal.aio`` wraps the sync API in threads.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import concurrent.futures
import contextlib
import errno
import itertools
import json
import os
import secrets
import socket
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import xxhash

from journal.errors import MissingExtraError

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.aio.client import Client as NATS
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.js import api as js_api
except ImportError as exc:  # the extra is not installed
    raise MissingExtraError(__name__, "nats-py 2.6 or later", "nats", exc) from exc

from journal.api import Journal, PrefixDrop, RecoveryReport, Retention
from journal.engine import format as fmt
from journal.engine.encoding import Encoded, check_durability, encode_event, repeated_keys, same_event, with_repeats
from journal.engine.options import Options
from journal.errors import (
    CorruptionError,
    DurabilityError,
    IdempotencyConflictError,
    InvalidArgumentError,
    InvariantError,
    JournalClosedError,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    JournalLockedError,
    JournalNotFoundError,
    NewerFormatError,
    ReadOnlyError,
    RecordTooLargeError,
    SequenceError,
)
from journal.outcomes import AckLost, Committed, Durability, NotCommitted, Outcome
from journal.record import Record
from journal.remote import records
from journal.remote.group import GroupCommit
from journal.remote.url import RemoteURL

_T = TypeVar("_T")

FORMAT: Final = 1
STREAM_DEFAULT: Final = "JOURNAL"
REPLICAS_DEFAULT: Final = 1
SYNC_REPLICAS_MIN: Final = 3  # "sync" needs a majority of 3 or more servers to hold each ack
CONNECT_TIMEOUT_S_DEFAULT: Final = 10.0
ACK_TIMEOUT_S_DEFAULT: Final = 10.0
CLAIM_TTL_S_DEFAULT: Final = 30.0
CLAIM_REFRESHES_PER_TTL: Final = 4
CLAIM_POLL_S: Final = 0.05  # between two tries of a claim someone holds (lock_timeout_s > 0)
DUPLICATE_WINDOW_S: Final = 120.0
HEADERS_ROOM_BYTES: Final = 4096  # of max_payload, kept for a message's headers
SCAN_CHUNK_MSGS: Final = 256
SCAN_CHUNK_BYTES: Final = 8 * 1024 * 1024
FOLLOW_POLL_INTERVAL_S: Final = 0.02
FENCE_TRIES_MAX: Final = 16
WRITER_MODES: Final = ("exclusive", "shared")
# A shared writer's batch, refused because another writer appended first, catches up and is
# published again for up to this long; then its records are NotCommitted and the handle goes on.
SHARED_LOCK_TIMEOUT_S_DEFAULT: Final = 30.0
RECOVERY_NOTES_MAX: Final = 64  # actions a handle's reads add to its recovery report (_note)
CATCH_UP_GETS_MAX: Final = 8  # messages a shared writer reads one by one before it takes a consumer
CLAIM_CAS_TRIES_MAX: Final = 32  # read-modify-writes of a shared claim before its caller hears _Lost
OPTIONS: Final = ("stream", "replicas", "connect_timeout_s", "ack_timeout_s", "claim_ttl_s", "record_size_bytes_max",
                  "compress", "shared_lock_timeout_s")

H_SEQ: Final = "Journal-Seq"
H_COUNT: Final = "Journal-Count"
H_KIND: Final = "Journal-Kind"
H_MSG_ID: Final = "Nats-Msg-Id"
H_EXPECT_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
H_EXPECT_STREAM: Final = "Nats-Expected-Stream"
H_EXPECT_LAST_SEQ: Final = "Nats-Expected-Last-Sequence"
H_WRITER: Final = "Journal-Writer"  # on a fence: "shared" if a shared writer published it
# The digest (message_digest) of the message this one is chained on, PREV_NONE when it is
# chained on none; absent from messages written before it was introduced (_LeaderCheck).
H_PREV: Final = "Journal-Prev"
PREV_NONE: Final = "-"
KIND_FENCE: Final = "fence"
WRITER_SHARED: Final = "shared"
ERR_WRONG_LAST_SEQ: Final = (10071, 10164)
ERR_STREAM_NOT_FOUND: Final = 10059
ERR_NO_MESSAGE: Final = 10037
_NAME_OK: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


# --- names -------------------------------------------------------------------------------


def subject_token(name: str) -> str:
    """A journal name as one subject token (and KV key): ``_XX`` for every byte outside [A-Za-z0-9-]."""
    return "".join(chr(b) if b in _NAME_OK else f"_{b:02X}" for b in name.encode("utf-8", "surrogatepass"))


def name_of_token(token: str) -> str:
    """The inverse of ``subject_token``."""
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(token[i]))
            i += 1
    return out.decode("utf-8", "surrogatepass")


def subject_base(stream: str) -> str:
    return "journal" if stream == STREAM_DEFAULT else f"journal_{stream}"


def _check_stream_name(stream: object) -> str:
    if not isinstance(stream, str) or not 1 <= len(stream) <= 64 or any(
        not (c.isascii() and (c.isalnum() or c in "_-")) for c in stream
    ):
        raise InvalidArgumentError(f"stream must be 1 to 64 characters of [A-Za-z0-9_-], not {stream!r}")
    return stream


# --- errors --------------------------------------------------------------------------------


class SyncNeedsReplicasError(DurabilityError):
    """``"sync"`` on a stream of fewer than 3 replicas: JetStream 2.9 cannot make one server's
    store durable per write, so only a majority of 3 or more servers makes a record survive a
    power loss (docs/REMOTE.md, "Durability")."""

    def __init__(self, stream: str, replicas: int) -> None:
        JournalError.__init__(
            self,
            f"durability 'sync' needs a stream of {SYNC_REPLICAS_MIN} or more replicas; stream {stream!r} has "
            f"{replicas}. nats-server 2.9 syncs its file store on an interval, so a single server's ack does not "
            f"survive a power loss: use replicas={SYNC_REPLICAS_MIN} on a cluster (a new stream, or update this "
            "one), or durability='flush'. Nothing was written",
        )
        self.durability = "sync"


class ClaimHeldError(JournalLockedError):
    """Another writer holds the journal's claim (a key of the KV bucket <stream>_LOCKS): an
    exclusive writer, or (for an exclusive open) one or more shared writers."""

    def __init__(self, where: str, holder: dict[str, Any], ttl_s: float, shared: bool = False) -> None:
        if holder.get("state") == WRITER_SHARED:
            listed = holder.get("holders")
            holders: dict[str, Any] = listed if isinstance(listed, dict) else {}
            procs = sorted({(str(h.get("host", "?")), h.get("pid")) for h in holders.values() if isinstance(h, dict)},
                           key=str)
            pid = procs[0][1] if procs else None
            self.host = procs[0][0] if procs else "?"
            who = ", ".join(f"process {p} on host {h}" for h, p in procs[:8]) + (", ..." if len(procs) > 8 else "")
            message = (
                f"journal {where!r} is open for writing by {len(holders)} shared writer(s) ({who}); an exclusive "
                "writer needs the journal to itself. Open it with writer='shared' to append alongside them, with "
                "readonly=True to read, pass lock_timeout_s to wait until they close, or, if they are gone, wait for "
                f"their claim to expire (within {ttl_s:g} s of the last refresh)"
            )
        else:
            pid = holder.get("pid")
            self.host = str(holder.get("host", "?"))
            what = "being created" if holder.get("creating") else "claimed for writing"
            rule = ("an exclusive writer holds it, so shared writers wait" if shared
                    else "only one writer is allowed")
            message = (
                f"journal {where!r} is {what} by process {pid} on host {self.host}; {rule}. Open it with "
                "readonly=True to read, pass lock_timeout_s to wait for the claim, or, if that process is gone, "
                f"wait for its claim to expire (within {ttl_s:g} s of its last refresh)"
            )
        JournalError.__init__(self, message)
        self.path = where
        self.pid = pid if isinstance(pid, int) else None


def _io_error(where: str, what: str, exc: BaseException | None = None, doing: str = "opening",
              advice: str | None = None) -> JournalIOError:
    detail = f"{what}" + (f" ({type(exc).__name__}: {exc})" if exc is not None else "")
    err = JournalIOError(where, OSError(errno.EIO, detail), doing=doing, advice=advice)
    if exc is not None:
        err.__cause__ = exc
    return err


class _Refused(Exception):
    """The server answered and refused (an API error, no stream): nothing was stored."""

    def __init__(self, reason: str, code: int = 0, err_code: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.err_code = err_code


class _Lost(Exception):
    """No answer (a timeout, the connection lost): the server may or may not have it."""


# --- the event loop ------------------------------------------------------------------------


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
    def stop_soon(cls, reader: _OrderedReader) -> None:
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


# --- one connection --------------------------------------------------------------------------


@dataclass
class _StoredMsg:
    sseq: int
    subject: str
    headers: dict[str, str]
    data: bytes
    _digest: str = field(default="", repr=False, compare=False)

    def digest(self) -> str:
        """Its message_digest, computed once (a read asks for it at each check it passes)."""
        if not self._digest:
            self._digest = message_digest(self.headers, self.data)
        return self._digest


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


def _span_of(m: _StoredMsg) -> tuple[int, int] | None:
    """(first seq, record count) of a message; a fence is (the seq after it, 0). None if its
    headers are not valid."""
    try:
        if m.headers.get(H_KIND) == KIND_FENCE:
            return int(m.headers[H_SEQ]) + 1, 0
        return int(m.headers[H_SEQ]), int(m.headers[H_COUNT])
    except (KeyError, ValueError):
        return None


def _chained_on(m: _StoredMsg) -> int | None:
    """The stream sequence a message was published chained on (its expected last subject
    sequence), or None if it carries none (then it is taken as chained on the one before it)."""
    try:
        return int(m.headers[H_EXPECT_SUBJECT_SEQ])
    except (KeyError, ValueError):
        return None


def _lost_race(m: _StoredMsg, prev_sseq: int) -> bool:
    """Whether message ``m``, which follows the message at ``prev_sseq`` on its subject, was
    chained on an older one: it lost a race, and is not part of the journal.

    nats-server 2.9 checks Nats-Expected-Last-Subject-Sequence on a replicated stream against
    the messages its leader has stored, not those still being replicated: two publishes chained
    on the same message, sent at once, can both be stored (seen on a 3-node cluster). Of such
    messages the first one stored is the journal's; each later one names a message older than
    the one before it. Every reader skips those, and a writer learns that its message lost
    (``_won``). A message chained on a newer message than the one before it (that message was
    deleted) is not a lost race: its seqs then tell the gap."""
    chained = _chained_on(m)
    return chained is not None and chained < prev_sseq


_DIGESTED: Final = (H_SEQ, H_COUNT, H_KIND, H_WRITER, H_EXPECT_SUBJECT_SEQ, H_MSG_ID, H_PREV)


def message_digest(headers: dict[str, str], body: bytes) -> str:
    """XXH64 (hex) of the headers a journal writer sets and the body: what the next message of
    the chain names in its Journal-Prev header."""
    h = xxhash.xxh64()
    for name in _DIGESTED:
        h.update(f"{name}:{str(headers.get(name, '')).strip()}\n".encode())  # as both readers parse it
    h.update(body)
    return h.hexdigest()


def chain_headers(chained_sseq: int, chained_digest: str) -> dict[str, str]:
    """The headers that chain a message on the one at ``chained_sseq`` (0: none)."""
    if not chained_sseq:
        return {H_EXPECT_SUBJECT_SEQ: "0", H_PREV: PREV_NONE}
    if not chained_digest:  # not known (never so for a writer's own chain): a message nothing vouches for
        return {H_EXPECT_SUBJECT_SEQ: str(chained_sseq)}
    return {H_EXPECT_SUBJECT_SEQ: str(chained_sseq), H_PREV: chained_digest}


class _Diverged(Exception):
    """A message a consumer delivered is not the stream leader's (_LeaderCheck): read again, from
    the leader, from stream sequence ``resume_sseq`` on (after the last message handed on)."""

    def __init__(self, resume_sseq: int, why: str) -> None:
        super().__init__(why)
        self.resume_sseq = resume_sseq


class _LeaderCheck:
    """Holds messages back until they are known to be the journal's as the stream leader has it.

    A consumer is served by whichever server holds it, from that server's copy of the stream;
    STREAM.MSG.GET is answered by the stream's leader. nats-server 2.9 can leave a replica with a
    message its leader does not have at that stream sequence (after a leader is killed, its last,
    unacknowledged message; seen on a 3-node cluster): taken in, it would be a record nobody
    acknowledged, or a gap or an overlap that is not there. So every message names the digest of
    the one it is chained on (Journal-Prev), and the message after it vouches for it: a message
    is handed on once the next one, chained on it, names its digest, or when nothing will (it is
    the last one read, or the next is not chained on it) once the leader's copy has its digest.
    From a consumer (``leader=False``), a digest that differs, or a message chained on one the
    consumer did not deliver, is _Diverged: the reader reads on from the leader.

    From the leader (``leader=True``) the same mismatch means the server kept, at that stream
    sequence, another message than the one the next writer was acknowledged there (2.9 was seen
    to lose a writer's acknowledged fence after a leader kill and keep the killed writer's last,
    unacknowledged message in its place; the next writer, chained on its fence, wrote the seqs
    again). That message is not part of the journal as its writers built it: it is dropped, and
    said in ``dropped``. A message already handed on is never taken back: one that the next
    names another digest for is handed on, and the seqs decide.

    Holding one message back is enough as long as the server keeps what it acknowledged (a
    writer publishes only once the message before is acknowledged, so nothing is chained on a
    message the leader lacks); when it does not, the chain tells which message was lost.
    Messages without Journal-Prev (written before it existed) are handed on unchecked."""

    def __init__(self, leader_copy: Callable[[int], _StoredMsg | None], start_sseq: int, prev_sseq: int,
                 prev_digest: str, leader: bool = False, disowned: set[int] | None = None) -> None:
        """Messages from stream sequence ``start_sseq`` on; ``prev_sseq`` and ``prev_digest``: the
        message just before it, if known (else 0 and ""). ``disowned``: stream sequences of
        messages a read from the leader dropped (the handle's, kept across reads, added to here),
        dropped from a consumer's read too, without going to the leader again."""
        self._leader_copy = leader_copy  # STREAM.MSG.GET of one stream sequence
        self._leader = leader
        self._disowned = disowned if disowned is not None else set()
        self._prev_sseq = prev_sseq  # the last message seen (handed on, or held) and its digest
        self._prev_digest = prev_digest
        self.out_sseq = max(prev_sseq, start_sseq - 1)  # the last message handed on (or before the start)
        self.out_digest = prev_digest
        self._held: _StoredMsg | None = None
        self.dropped: list[str] = []  # (leader) why each message dropped was dropped

    def take(self, m: _StoredMsg) -> list[_StoredMsg]:
        """The messages that can be handed on now that ``m`` came (in order); ``m`` is held if a
        later message can vouch for it."""
        out: list[_StoredMsg] = []
        named = m.headers.get(H_PREV)
        chained = _chained_on(m)
        known = self._prev_sseq > 0 and bool(self._prev_digest)
        vouches = named is not None and chained == self._prev_sseq and known
        if not self._leader and named is not None and chained is not None and known and chained > self._prev_sseq:
            raise _Diverged(self.out_sseq + 1, f"stream message {m.sseq} is chained on message {chained}, which "
                                               "the replica serving this read did not deliver")
        if vouches and named != self._prev_digest:
            why = (f"stream message {m.sseq} is chained on message {self._prev_sseq} with digest {named}, and the "
                   f"message there has digest {self._prev_digest}")
            held = self._held
            if not self._leader and (held is None or held.sseq not in self._disowned):
                raise _Diverged(self.out_sseq + 1, why)
            if held is not None:  # the server's, not the journal's: see the class doc
                self.dropped.append(f"{why}: the server holds another message than the one a writer was "
                                    f"acknowledged at {self._prev_sseq}; skipped it")
                self._disowned.add(held.sseq)
                self._held = None
            vouches = False
        if self._held is not None:
            if not vouches and not self._leader:
                self._check_with_leader(self._held)  # a lost race, or an older writer: nothing else will
            out.append(self._held)
            self._held = None
        self._prev_sseq, self._prev_digest = m.sseq, m.digest()
        if named is None:
            out.append(m)
        else:
            self._held = m
        if out:
            self.out_sseq = out[-1].sseq
            self.out_digest = out[-1].digest()
        return out

    @property
    def holding(self) -> bool:
        """Whether a message is held, waiting for the next one or the leader to vouch for it."""
        return self._held is not None

    def settle(self, leader: _StoredMsg | None = None, wait_absent: bool = False) -> list[_StoredMsg]:
        """The held message, handed on once the leader's copy (``leader`` if it is that one) has
        its digest: when no message is to come after it, or none for now (follow). With
        ``wait_absent`` (follow), a message the leader does not hold (yet) stays held."""
        held = self._held
        if held is None:
            return []
        if not self._leader:
            copy = leader if leader is not None and leader.sseq == held.sseq else self._leader_copy(held.sseq)
            if copy is None:
                if wait_absent:
                    return []
                raise _Diverged(self.out_sseq + 1, f"stream message {held.sseq} as a replica served it is not "
                                                   "on the stream leader")
            self._check_with_leader(held, copy)
        self._held = None
        self.out_sseq, self.out_digest = held.sseq, held.digest()
        return [held]

    def _check_with_leader(self, m: _StoredMsg, copy: _StoredMsg | None = None) -> None:
        if copy is None:
            copy = self._leader_copy(m.sseq)
        if copy is None or copy.subject != m.subject or (
            copy.digest() != m.digest()
        ):
            raise _Diverged(self.out_sseq + 1, f"stream message {m.sseq} as a replica served it is not the stream "
                                               "leader's (it holds another message there, or none)")


def _claim_of(last: _StoredMsg | None) -> dict[str, Any]:
    """The value of a claim key as a dict; {} when there is none (never taken, deleted, purged,
    expired) or it is not readable (taken as free, as a missing one)."""
    if last is None or last.headers.get("KV-Operation") in ("DEL", "PURGE") or not last.data:
        return {}
    try:
        value = json.loads(last.data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def chain_id(journal_id: bytes, after_sseq: int) -> str:
    """The Nats-Msg-Id of every message of a journal's subject that a writer chains on the
    message at stream sequence ``after_sseq`` (its Nats-Expected-Last-Subject-Sequence): a batch
    of records or a fence. Two messages chained on one message are two writers racing, and the
    journal must hold at most one of them. On a replicated stream, nats-server 2.9 checks the
    expected last subject sequence before the proposal, against what is applied, so two such
    publishes in flight can both be stored (tests/test_remote_nats_race.py shows it on the
    3-node cluster); the message id is checked in order, messages in flight included, and the
    second is answered as a duplicate, storing nothing. Past the server's duplicate window a
    stale publish is no longer in flight, and the expected sequence refuses it."""
    return f"{journal_id.hex()}@{after_sseq}"


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




# --- the journal ------------------------------------------------------------------------------


class JetStreamJournal:
    """A journal.api.Journal on a JetStream stream; see the module docstring and docs/REMOTE.md."""

    def __init__(
        self,
        parsed: RemoteURL,
        readonly: bool,
        settings: Settings,
        shared: bool = False,
    ) -> None:
        name = parsed.journal
        if name is None:
            raise InvalidArgumentError(f"{parsed.display()} names no journal: add ?journal=NAME")
        self._parsed = parsed
        self._where = parsed.display()
        self._readonly = readonly
        stream = settings.stream
        self._stream = stream
        self._replicas_asked = settings.replicas
        self._connect_timeout_s = settings.connect_timeout_s
        self._ack_timeout_s = settings.ack_timeout_s
        self._claim_ttl_s = settings.claim_ttl_s
        self._name = name
        self._token = subject_token(name)
        base = subject_base(stream)
        self._subjects = [f"{base}.>", f"{base}-meta.>"]
        self._subject = f"{base}.{self._token}"
        self._meta_subject = f"{base}-meta.{self._token}"
        self._bucket = f"{stream}_LOCKS"
        self._claim_subject = f"$KV.{self._bucket}.{self._token}"
        self._options = settings.options
        self._recovery = RecoveryReport()
        self._conn: _Conn | None = None
        self._shares_conn = False  # a reference to a shared connection (_Conn.shared), given back at close
        self._replicas = 0
        self._payload_max = 0
        self._journal_id = b""
        self._salt = 0
        self._first_seq = 1
        self._meta: dict[str, Any] = {}  # the journal's metadata message as read (or last written)
        self._meta_sseq = 0  # its stream sequence
        # Per message of the journal, in order: its first seq and its stream sequence.
        self._idx_first = array("Q")
        self._idx_sseq = array("Q")
        self._last_sseq = 0  # stream sequence of the journal's last message (a fence included)
        self._last_digest = ""  # its message_digest: the next message names it (Journal-Prev)
        self._disowned: set[int] = set()  # messages a read from the leader dropped (_LeaderCheck)
        self._stored_seq = 0  # the highest seq in the stream (as this handle knows)
        self._next_seq = 1
        self._keys: dict[str, tuple[int, int]] = {}  # idempotency key -> (seq, payload digest)
        self._inflight: dict[str, threading.Event] = {}  # keys of records on their way
        self._buffer: list[tuple[int, Encoded]] = []
        self._buffer_bytes = 0
        self._mu = threading.Lock()  # the state above
        self._wmu = threading.Lock()  # one write on the wire at a time (the chain of expected sequences)
        self._failed: str | None = None
        self._closed = False
        self._claim_rev = 0
        self._claim_token = secrets.token_hex(8)
        self._claim_lost = False
        self._claim_task: concurrent.futures.Future[None] | None = None
        # writer="shared": several handles append, each batch chained on what this one last saw
        # and, when another appended first, caught up and published again (_shared_write).
        self._shared = shared and not readonly
        self._shared_lock_timeout_s = settings.shared_lock_timeout_s
        self._claim_kind = ""  # the claim this handle holds now: "exclusive", "shared" or none
        self._live_subject = f"{self._claim_subject}.{self._claim_token}"  # a shared writer's presence
        self._opened = False  # the open is over: an exclusive writer's fence seen after it is a takeover
        self._fenced_out = 0  # stream sequence of such a fence (a shared writer then fail-stops)
        self._refusals = 0  # shared publishes refused: another writer had appended first
        self._lost_races = 0  # shared publishes stored after another chained on the same message
        self._group = GroupCommit(self._group_write)

    # --- opening -------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        return _Loop.call(coro, timeout_s + 5.0)

    def _connect(self) -> None:
        servers = _servers_of(self._parsed)
        try:
            self._conn = _Conn.shared(servers, self._connect_timeout_s)
            self._shares_conn = True
        except (OSError, asyncio.TimeoutError, nats.errors.Error, _Lost) as exc:
            raise _io_error(
                self._where,
                f"cannot reach a NATS server at {', '.join(servers)} within {self._connect_timeout_s:g} s; check that "
                "nats-server is running (with JetStream, -js) and the URL's host:port, or raise connect_timeout_s",
                exc,
            ) from exc
        self._payload_max = int(self._conn.nc.max_payload) - HEADERS_ROOM_BYTES

    def _open(self, create: bool, lock_timeout_s: float) -> None:
        deadline = time.monotonic() + self._connect_timeout_s
        self._connect()
        last: BaseException | None = None
        clean = created = True
        while True:
            try:
                self._open_stream(create)
                if self._shared:
                    created = self._open_shared(create, lock_timeout_s, deadline)
                else:
                    if not self._readonly:
                        # The claim first: a journal is made, copied onto, deleted and written only
                        # under its claim, so what the metadata says cannot change under this open.
                        clean = self._take_claim(lock_timeout_s, deadline)
                    try:
                        created = self._open_meta(create)
                    except JournalNotFoundError:
                        if self._claim_rev:
                            self._release_claim(clean=clean)  # nothing was touched: leave the claim as it was
                        raise
                self._scan_all()
                if not self._readonly:
                    self._purge_dropped()
                if not self._readonly and not self._shared and not created and not clean:
                    self._fence()
                break
            except (_Refused, _Lost) as exc:
                # JetStream answers "temporarily unavailable" or nothing while a stream or the
                # cluster elects a leader: try again until connect_timeout_s.
                last = exc
                if time.monotonic() >= deadline:
                    raise _io_error(
                        self._where,
                        f"JetStream did not serve stream {self._stream!r} within {self._connect_timeout_s:g} s "
                        "(no leader, or JetStream not enabled on the server); check the cluster "
                        "(nats-server -js, a quorum of its servers up), or raise connect_timeout_s",
                        last,
                    ) from exc
                time.sleep(0.1)
        self._recovery = RecoveryReport(
            segments=0,
            last_seq=self._stored_seq,
            live_segment=None,
            live_records=self._stored_seq - self._first_seq + 1,
            tail="empty" if created else "clean",
            actions=self._recovery.actions,
        )
        if not self._readonly:
            self._keep_claim()
        self._opened = True

    def _keep_claim(self) -> None:
        """Start refreshing the claim this handle holds (until _release_claim)."""
        refresh = self._refresh_shared() if self._claim_kind == "shared" else self._refresh_claim()
        self._claim_task = asyncio.run_coroutine_threadsafe(refresh, _Loop.get())

    def _abandon(self, clean: bool = False) -> None:
        """After a failed open: release what the open took (the claim, the connection)."""
        self._closed = True
        if self._claim_rev:
            self._release_claim(clean=clean)
        self._let_go_conn()

    def _let_go_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._shares_conn:
            self._shares_conn = False
            conn.release()

    @classmethod
    def _control(cls, parsed: RemoteURL, settings: Settings, conn: _Conn) -> JetStreamJournal:
        """A handle on one journal's place in the stream (its subjects, its claim) for a store's
        operation, on the store's connection: nothing is read or claimed yet. ``_detach`` ends it."""
        j = cls(parsed, False, settings)
        j._conn = conn
        j._payload_max = int(conn.nc.max_payload) - HEADERS_ROOM_BYTES
        return j

    def _detach(self, clean: bool) -> None:
        """The end of a ``_control`` handle: its claim released, the store's connection left open."""
        self._closed = True
        if self._claim_rev:
            self._release_claim(clean=clean)
        self._conn = None

    def _api(self, subject: str, req: dict[str, Any] | None) -> dict[str, Any]:
        conn = self._c()
        return self._call(conn.api(subject, req, self._ack_timeout_s), self._ack_timeout_s)

    def _c(self) -> _Conn:
        if self._conn is None:
            raise JournalClosedError()
        return self._conn

    def _open_stream(self, create: bool) -> None:
        try:
            info = self._api(f"$JS.API.STREAM.INFO.{self._stream}", None)
        except _Refused as exc:
            if exc.err_code != ERR_STREAM_NOT_FOUND:
                raise
            if not create:
                raise JournalNotFoundError(self._where) from None
            info = self._create_stream()
        config = info["config"]
        subjects = set(config.get("subjects") or [])
        if not set(self._subjects) <= subjects:
            raise InvalidArgumentError(
                f"stream {self._stream!r} exists with subjects {sorted(subjects)}, not the journal subjects "
                f"{self._subjects}; name another stream (?stream=S) for journals"
            )
        self._replicas = int(config.get("num_replicas", 1))

    def _create_stream(self) -> dict[str, Any]:
        config = {
            "name": self._stream,
            "subjects": self._subjects,
            "retention": "limits",
            "storage": "file",
            "num_replicas": self._replicas_asked,
            "discard": "old",
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": -1,
            "max_msg_size": -1,
            "duplicate_window": int(DUPLICATE_WINDOW_S * 1e9),
            "allow_direct": True,
            "deny_delete": False,
            "deny_purge": False,
        }
        try:
            return self._api(f"$JS.API.STREAM.CREATE.{self._stream}", config)
        except _Refused:
            # Made meanwhile by another open (or refused for a reason INFO will tell).
            return self._api(f"$JS.API.STREAM.INFO.{self._stream}", None)

    def _read_meta(self) -> tuple[dict[str, Any], int] | None:
        """The journal's metadata message (the last on its meta subject) and its stream sequence."""
        got = self._call(
            self._c().get_msg(self._stream, {"last_by_subj": self._meta_subject}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        if got is None:
            return None
        try:
            meta: dict[str, Any] = json.loads(got.data)
            if int(meta["format"]) > FORMAT:
                raise NewerFormatError(self._where, f"format {meta['format']}", FORMAT)
            journal_id = bytes.fromhex(meta["id"])
            if len(journal_id) != records.JOURNAL_ID_BYTES or int(meta["first_seq"]) < 1:
                raise ValueError("bad id or first seq")
            int(meta.get("first_sseq", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptionError(
                f"{self._where} (stream {self._stream}, message {got.sseq})", 0, None,
                f"the journal's metadata message is not readable ({exc})",
            ) from None
        return meta, got.sseq

    def _new_meta(self, journal_id: bytes, first_seq: int, first_sseq: int) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "journal": self._name,
            "id": journal_id.hex(),
            "first_seq": first_seq,
            "first_sseq": first_sseq,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }

    def _publish_meta(self, meta: dict[str, Any], expect_sseq: int) -> int:
        """Publish ``meta`` as the journal's metadata, chained on the meta subject's last message
        (0: none, the journal's creation); its stream sequence. _Refused (a wrong expected
        sequence: someone else changed it) or _Lost."""
        headers = {H_EXPECT_SUBJECT_SEQ: str(expect_sseq), H_EXPECT_STREAM: self._stream}
        ack = self._call(
            self._c().publish(self._meta_subject, json.dumps(meta).encode(), headers, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        return int(ack["seq"])

    def _purge(self, subject: str, before_sseq: int = 0, keep: int = 0) -> int:
        """STREAM.PURGE of ``subject``'s messages (those below stream sequence ``before_sseq``, or
        all but the last ``keep``, or all); how many went."""
        req: dict[str, Any] = {"filter": subject}
        if before_sseq:
            req["seq"] = before_sseq
        if keep:
            req["keep"] = keep
        return int(self._api(f"$JS.API.STREAM.PURGE.{self._stream}", req).get("purged", 0))

    def _open_meta(self, create: bool) -> bool:
        """Read (or, with ``create``, make) the journal's metadata; whether this call made it."""
        found = self._read_meta()
        created = False
        if found is None:
            if not create:
                raise JournalNotFoundError(self._where)
            # What a delete or a copy cut short left on the subject goes before the journal has
            # its name again (under the claim, so nobody else writes there meanwhile): a new
            # journal never reads another's leftovers.
            left = self._purge(self._subject)
            if left:
                self._recovery.actions.append(f"removed {left} messages a delete or a copy cut short left behind")
            new = self._new_meta(records.new_journal_id(), 1, 0)
            try:
                self._publish_meta(new, 0)
                created = True
            except _Refused as exc:
                if exc.err_code not in ERR_WRONG_LAST_SEQ:
                    raise
            found = self._read_meta()
            if found is None:
                raise _Lost("the journal's metadata message is not there yet")
            created = created and found[0]["id"] == new["id"]
            if created:
                self._recovery.actions.append("created journal")
        self._set_meta(*found)
        return created

    def _set_meta(self, meta: dict[str, Any], sseq: int) -> None:
        self._meta, self._meta_sseq = meta, sseq
        self._journal_id = bytes.fromhex(meta["id"])
        self._salt = records.salt_of(self._journal_id)
        self._first_seq = int(meta["first_seq"])

    # --- the claim -------------------------------------------------------------------------

    def _ensure_bucket(self) -> None:
        name = f"KV_{self._bucket}"
        try:
            self._api(f"$JS.API.STREAM.INFO.{name}", None)
            return
        except _Refused as exc:
            if exc.err_code != ERR_STREAM_NOT_FOUND:
                raise
        ttl_ns = int(self._claim_ttl_s * 1e9)
        config = {
            "name": name,
            "subjects": [f"$KV.{self._bucket}.>"],
            "retention": "limits",
            "storage": "file",
            "num_replicas": max(self._replicas, 1),
            "discard": "new",
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": ttl_ns,
            "max_msgs_per_subject": 1,
            "max_msg_size": -1,
            "duplicate_window": min(ttl_ns, int(DUPLICATE_WINDOW_S * 1e9)),
            "allow_rollup_hdrs": True,
            "deny_delete": True,
            "allow_direct": True,
        }
        try:
            self._api(f"$JS.API.STREAM.CREATE.{name}", config)
        except _Refused:
            self._api(f"$JS.API.STREAM.INFO.{name}", None)

    def _claim_value(self, state: str, clean: bool = True, **more: Any) -> bytes:
        return json.dumps({
            "state": state, "clean": clean, "host": socket.gethostname(), "pid": os.getpid(),
            "token": self._claim_token, "at": time.time(), **more,
        }).encode()

    def _take_claim(self, lock_timeout_s: float, open_deadline: float, creating: bool = False) -> bool:
        """Take the writer claim (waiting up to ``lock_timeout_s``); whether its last holder
        released it cleanly (then no fence is needed). ``creating``: taken by a shared writer's
        open to make the journal, which other shared writers wait out (``_open_shared``)."""
        self._ensure_bucket()
        bucket_info = self._api(f"$JS.API.STREAM.INFO.KV_{self._bucket}", None)
        ttl_ns = int(bucket_info["config"].get("max_age") or 0)
        if ttl_ns:
            self._claim_ttl_s = ttl_ns / 1e9
        wait_until = time.monotonic() + lock_timeout_s
        conn = self._c()
        while True:
            last = self._call(
                conn.get_msg(f"KV_{self._bucket}", {"last_by_subj": self._claim_subject}, self._ack_timeout_s),
                self._ack_timeout_s,
            )
            holder: dict[str, Any] = {}
            if last is not None:
                try:
                    holder = json.loads(last.data) if last.data else {}
                except ValueError:
                    holder = {}
            op = last.headers.get("KV-Operation") if last is not None else None
            free = last is None or op in ("DEL", "PURGE") or holder.get("state") == "released"
            ours = holder.get("token") == self._claim_token and holder.get("state") == "held"
            if free or ours:
                value = self._claim_value("held", creating=True) if creating else self._claim_value("held")
                try:
                    rev = self._call(self._claim_write(conn, value, last.sseq if last is not None else 0),
                                     self._ack_timeout_s * 2)
                except _Refused as exc:
                    if exc.err_code in ERR_WRONG_LAST_SEQ:
                        continue  # someone else moved first: look again
                    raise
                self._claim_rev = rev
                self._claim_kind = "exclusive"
                if ours:
                    return False  # our own claim from an open attempt that did not finish
                return bool(holder.get("state") == "released" and holder.get("clean"))
            if time.monotonic() >= wait_until:
                raise ClaimHeldError(self._where, holder, self._claim_ttl_s)
            time.sleep(CLAIM_POLL_S)

    async def _refresh_claim(self) -> None:
        """Keep the claim alive (every claim_ttl_s / 4); note it lost if another writer took it."""
        interval = self._claim_ttl_s / CLAIM_REFRESHES_PER_TTL
        while True:
            await asyncio.sleep(interval)
            conn = self._conn
            if conn is None or self._closed:
                return
            headers = {H_EXPECT_SUBJECT_SEQ: str(self._claim_rev)}
            try:
                ack = await conn.publish(self._claim_subject, self._claim_value("held"), headers, self._ack_timeout_s)
                self._claim_rev = int(ack["seq"])
            except _Refused as exc:
                if exc.err_code not in ERR_WRONG_LAST_SEQ:
                    continue
                try:
                    last = await conn.get_msg(
                        f"KV_{self._bucket}", {"last_by_subj": self._claim_subject}, self._ack_timeout_s
                    )
                except (_Refused, _Lost):
                    continue
                holder = json.loads(last.data) if last is not None and last.data else {}
                if last is not None and holder.get("token") == self._claim_token:
                    self._claim_rev = last.sseq  # our refresh landed though its ack was lost
                    continue
                if last is None:
                    # Expired while the bucket could not be reached (nobody took it meanwhile):
                    # take it again. The expected sequence of every publish fences us anyway.
                    try:
                        self._claim_rev = await self._claim_write(conn, self._claim_value("held"), 0)
                        continue
                    except _Lost:
                        continue
                    except _Refused:
                        pass
                self._claim_lost = True
                return
            except _Lost:
                continue

    def _release_claim(self, clean: bool) -> None:
        if self._claim_task is not None:
            self._claim_task.cancel()
            self._claim_task = None
        if self._claim_kind == "shared":
            self._leave_shared(clean)
            return
        self._claim_kind = ""
        if self._claim_rev == 0 or self._claim_lost or self._conn is None:
            return
        headers = {H_EXPECT_SUBJECT_SEQ: str(self._claim_rev)}
        try:
            self._call(
                self._conn.publish(self._claim_subject, self._claim_value("released", clean), headers,
                                   self._ack_timeout_s),
                self._ack_timeout_s,
            )
        except (_Refused, _Lost):
            pass  # the claim expires on its own (claim_ttl_s after the last refresh)
        self._claim_rev = 0

    # --- the claim of shared writers ----------------------------------------------------------
    #
    # Shared writers hold the same KV key as an exclusive writer, in another state:
    # {"state": "shared", "holders": {token: {"pid", "host"}}, "clean": ...}, changed only by
    # compare-and-set on the key and on the bucket (``_claim_write``), so a shared open and an
    # exclusive one can never both succeed. Each holder refreshes the key (which keeps it from
    # expiring) and a presence key of its own, <claim key>.<token>, every claim_ttl_s / 4: a
    # holder that died leaves a presence key that expires with the bucket's max_age, after which
    # the others drop it from the holders (and mark the claim not clean). The last holder to
    # leave marks the claim released, clean only if every holder left cleanly; if all of them
    # died, the key expires on its own. Either way the next exclusive writer fences the journal
    # when it is not clean.

    def _open_shared(self, create: bool, lock_timeout_s: float, open_deadline: float) -> bool:
        """A shared writer's open: join the claim, then read the metadata; whether this call made
        the journal. A journal that does not exist yet is made under the exclusive claim (taken
        as "creating", which other shared writers wait out): its purge of leftovers and its
        metadata message must not race another maker."""
        wait_until = time.monotonic() + lock_timeout_s
        created = False
        while True:
            self._join_shared(wait_until, open_deadline)
            found = self._read_meta()
            if found is not None:
                self._set_meta(*found)
                return created
            self._leave_shared(clean=True)
            if not create:
                raise JournalNotFoundError(self._where)
            try:
                clean = self._take_claim(0.0, open_deadline, creating=True)
            except ClaimHeldError:
                if time.monotonic() >= open_deadline:
                    raise
                time.sleep(CLAIM_POLL_S)  # another writer is making it, or writes: look again
                continue
            try:
                created = self._open_meta(True)
            finally:
                self._release_claim(clean=clean or created)  # a journal just made has nothing in flight

    def _join_shared(self, wait_until: float, open_deadline: float) -> None:
        """Become one of the journal's shared writers; waits for an exclusive writer up to
        ``wait_until`` (one making the journal up to ``open_deadline``), then ClaimHeldError."""
        self._ensure_bucket()
        bucket_info = self._api(f"$JS.API.STREAM.INFO.KV_{self._bucket}", None)
        ttl_ns = int(bucket_info["config"].get("max_age") or 0)
        if ttl_ns:
            self._claim_ttl_s = ttl_ns / 1e9
        while True:
            got, holder = self._call(self._shared_claim(self._c(), "join"), self._claim_call_s())
            if got == "joined":
                self._claim_kind = "shared"
                return
            until = open_deadline if holder.get("creating") else wait_until
            if time.monotonic() >= until:
                raise ClaimHeldError(self._where, holder, self._claim_ttl_s, shared=True)
            time.sleep(CLAIM_POLL_S)

    def _leave_shared(self, clean: bool) -> None:
        """No longer one of the shared writers; the last one marks the claim released."""
        self._claim_kind = ""
        conn = self._conn
        if self._claim_rev == 0 or conn is None:
            return
        self._claim_rev = 0
        if self._claim_lost:
            return
        with contextlib.suppress(_Refused, _Lost, nats.errors.Error, OSError):
            self._call(self._shared_claim(conn, "leave", clean), self._claim_call_s())
        with contextlib.suppress(_Refused, _Lost, nats.errors.Error, OSError):
            self._call(conn.publish(self._live_subject, b"", {"KV-Operation": "DEL"}, self._ack_timeout_s),
                       self._ack_timeout_s)

    def _claim_call_s(self) -> float:
        return self._ack_timeout_s * 8

    async def _refresh_shared(self) -> None:
        """A shared writer's claim_ttl_s / 4 heartbeat (``_shared_claim``, "refresh"); notes the
        claim lost if this handle is no longer among the holders (it was unreachable for longer
        than claim_ttl_s, and the others dropped it, or an exclusive writer has the journal)."""
        interval = self._claim_ttl_s / CLAIM_REFRESHES_PER_TTL
        while True:
            await asyncio.sleep(interval)
            conn = self._conn
            if conn is None or self._closed or self._claim_kind != "shared":
                return
            try:
                got, _holder = await self._shared_claim(conn, "refresh")
            except (_Refused, _Lost, nats.errors.Error, OSError):
                continue
            if got != "joined":
                self._claim_lost = True
                return

    async def _shared_claim(self, conn: _Conn, mode: str, clean: bool = True) -> tuple[str, dict[str, Any]]:
        """One change to the shared claim, by compare-and-set, read again when another writer
        changed it first. ``mode``: "join", "refresh" (both keep this handle's presence key and
        put it among the holders) or "leave". Holders whose presence key expired are dropped,
        which marks the claim not clean. Answers ("joined" | "left" | "held" (an exclusive writer
        has it) | "lost" (this handle is not among the holders any more), the claim's value)."""
        if mode != "leave":
            beat = {"pid": os.getpid(), "host": socket.gethostname(), "at": time.time()}
            await conn.publish(self._live_subject, json.dumps(beat).encode(), {}, self._ack_timeout_s)
        me = self._claim_token
        for _ in range(CLAIM_CAS_TRIES_MAX):
            last = await conn.get_msg(f"KV_{self._bucket}", {"last_by_subj": self._claim_subject},
                                      self._ack_timeout_s)
            value = _claim_of(last)
            state = value.get("state")
            free = last is None or last.headers.get("KV-Operation") in ("DEL", "PURGE") or state == "released"
            holders: dict[str, Any] = {}
            if state == WRITER_SHARED and isinstance(value.get("holders"), dict):
                holders = dict(value["holders"])
            dirty = False
            if state == WRITER_SHARED:
                dirty = not value.get("clean", False)
                if mode != "join" and me not in holders:
                    return ("left" if mode == "leave" else "lost"), value
                for token in [t for t in holders if t != me]:
                    if not await self._present(conn, token):
                        del holders[token]  # died (or was cut off) without leaving
                        dirty = True
            elif free:
                if mode != "join":
                    return ("left" if mode == "leave" else "lost"), value
                dirty = not (state == "released" and value.get("clean"))
            else:
                return "held", value  # an exclusive writer (or one making the journal)
            if mode == "leave":
                holders.pop(me, None)
                dirty = dirty or not clean
            else:
                holders[me] = {"pid": os.getpid(), "host": socket.gethostname()}
            if holders:
                new = self._claim_value(WRITER_SHARED, not dirty, holders=holders)
            else:
                new = self._claim_value("released", not dirty)
            try:
                rev = await self._claim_write(conn, new, last.sseq if last is not None else 0)
            except _Refused as exc:
                if exc.err_code in ERR_WRONG_LAST_SEQ:
                    continue  # another writer changed it first: read it again
                raise
            self._claim_rev = rev if mode != "leave" else 0
            return ("left" if mode == "leave" else "joined"), value
        raise _Lost(f"the journal's claim changed under {CLAIM_CAS_TRIES_MAX} tries in a row")

    async def _claim_write(self, conn: _Conn, value: bytes, chained: int) -> int:
        """Publish ``value`` as the claim (its new stream sequence), chained on the claim key's
        message at ``chained`` (0: none) and on the bucket's last stream sequence: nats-server 2.9
        may store two publishes chained on one subject sequence of a replicated stream (see
        ``_lost_race``), never two chained on one stream sequence. So a claim is taken, and the
        set of shared holders changed, by one writer at a time. _Refused (ERR_WRONG_LAST_SEQ) if
        anything was written to the bucket since (this journal's claim or another's): read again."""
        info = await conn.api(f"$JS.API.STREAM.INFO.KV_{self._bucket}", None, self._ack_timeout_s)
        headers = {H_EXPECT_SUBJECT_SEQ: str(chained), H_EXPECT_LAST_SEQ: str(int(info["state"]["last_seq"]))}
        ack = await conn.publish(self._claim_subject, value, headers, self._ack_timeout_s)
        return int(ack["seq"])

    async def _present(self, conn: _Conn, token: str) -> bool:
        """Whether the shared writer ``token`` refreshed its presence key within claim_ttl_s."""
        got = await conn.get_msg(f"KV_{self._bucket}", {"last_by_subj": f"{self._claim_subject}.{token}"},
                                 self._ack_timeout_s)
        return got is not None and got.headers.get("KV-Operation") not in ("DEL", "PURGE")

    # --- reading the stream ----------------------------------------------------------------

    def _where_msg(self, sseq: int) -> str:
        return f"{self._where} (stream {self._stream}, message {sseq})"

    def _decode(self, m: _StoredMsg, expect: int) -> list[Record]:
        """The records of one message, verified to continue the journal at seq ``expect``
        (a fence yields none). CorruptionError (SequenceError for a gap or an overlap)."""
        where = self._where_msg(m.sseq)
        if m.subject != self._subject:
            raise CorruptionError(where, 0, expect, f"the message is on subject {m.subject!r}, not this journal's")
        try:
            first = int(m.headers[H_SEQ])
            count = 0 if m.headers.get(H_KIND) == KIND_FENCE else int(m.headers[H_COUNT])
        except (KeyError, ValueError):
            raise CorruptionError(where, 0, expect, f"the message has no valid {H_SEQ}/{H_COUNT} headers") from None
        if m.headers.get(H_KIND) == KIND_FENCE:
            if m.data or first != expect - 1:
                raise CorruptionError(where, 0, expect, "a fence message with a body or at another seq")
            return []
        if count < 1:
            raise CorruptionError(where, 0, expect, f"the message says it holds {count} records")
        if first != expect:
            what = "is missing" if first > expect else "is held twice"
            raise SequenceError(
                where, 0, expect,
                f"seq {expect} {what}: the message holds seqs {first}..{first + count - 1} (a message deleted, "
                "moved or written by a second writer)",
            )
        out: list[Record] = []
        pos = 0
        body = m.data
        size_max = self._options.record_size_bytes_max
        for i in range(count):
            got = fmt.verify_frame(body, pos, self._salt)
            if got is None:
                raise CorruptionError(where, pos, first + i, "the stored frame fails its checksum (changed bytes, "
                                                             "or a frame of another journal)")
            out.append(records.record_of(memoryview(body)[pos : got.end], first + i, self._salt, where, size_max))
            pos = got.end
        if pos != len(body):
            raise CorruptionError(where, pos, first + count - 1, f"{len(body) - pos} bytes after the last frame")
        return out

    def _subject_last(self) -> _StoredMsg | None:
        return self._call(
            self._c().get_msg(self._stream, {"last_by_subj": self._subject}, self._ack_timeout_s), self._ack_timeout_s
        )

    def _messages(self, start_sseq: int, end_sseq: int | None = None) -> Iterator[_StoredMsg]:
        """This journal's messages from stream sequence ``start_sseq`` up to the last one now
        (or ``end_sseq``), in order, as the stream leader holds them: fetched in bounded chunks
        by an ordered consumer and checked against the leader (_LeaderCheck); from the first
        one a replica served differently on, read from the leader itself."""
        last: _StoredMsg | None = None
        if end_sseq is None:
            last = self._subject_last()
            if last is None:
                return
            end_sseq = last.sseq
        if end_sseq < start_sseq:
            return
        check = _LeaderCheck(self._leader_copy, start_sseq, *self._known_before(start_sseq), disowned=self._disowned)
        reader = _OrderedReader(self._c(), self._stream, self._subject, start_sseq, self._ack_timeout_s)
        self._call(reader.start(), self._ack_timeout_s)
        try:
            while True:
                try:
                    chunk = self._call(reader.next_chunk(end_sseq, SCAN_CHUNK_MSGS, SCAN_CHUNK_BYTES),
                                       self._ack_timeout_s)
                except _Lost as exc:  # the consumer's server lacks what the leader has: ask the leader
                    raise _Diverged(check.out_sseq + 1, f"consumer stopped short of {end_sseq} ({exc})") from exc
                for m in chunk:
                    yield from check.take(m)
                if not chunk or chunk[-1].sseq >= end_sseq:
                    yield from check.settle(last)
                    return
        except _Diverged as exc:
            diverged = exc
        finally:
            _Loop.stop_soon(reader)
        # The rest of this read from the leader: after a divergence the replica that served it
        # may serve this consumer's successor too.
        self._note(f"a replica served this journal's {diverged}; read on from the stream leader from message "
                   f"{diverged.resume_sseq}")
        yield from self._leader_messages(diverged.resume_sseq, end_sseq, check.out_sseq, check.out_digest)

    def _leader_messages(self, start_sseq: int, end_sseq: int, prev_sseq: int = 0,
                         prev_digest: str = "") -> Iterator[_StoredMsg]:
        """This journal's messages from ``start_sseq`` to ``end_sseq`` read one STREAM.MSG.GET each
        (answered by the stream's leader): slower than a consumer, never a replica's copy. A
        message the next one disowns is dropped (_LeaderCheck, ``leader``) and said in the
        recovery actions."""
        check = _LeaderCheck(self._leader_copy, start_sseq, prev_sseq, prev_digest, leader=True,
                             disowned=self._disowned)
        at = start_sseq
        try:
            while at <= end_sseq:
                m = self._call(self._c().get_msg(self._stream, {"seq": at, "next_by_subj": self._subject},
                                                 self._ack_timeout_s), self._ack_timeout_s)
                if m is None or m.sseq > end_sseq:
                    break
                yield from check.take(m)
                at = m.sseq + 1
            yield from check.settle()
        finally:
            for why in check.dropped:
                self._note(why)

    def _note(self, action: str) -> None:
        """Say ``action`` in the recovery report, once, and no more than RECOVERY_NOTES_MAX of them
        (a long-lived handle reads the same divergence again on every read)."""
        actions = self._recovery.actions
        if action not in actions and len(actions) < RECOVERY_NOTES_MAX:
            actions.append(action)

    def _leader_copy(self, sseq: int) -> _StoredMsg | None:
        return self._call(self._c().get_msg(self._stream, {"seq": sseq}, self._ack_timeout_s), self._ack_timeout_s)

    def _known_before(self, start_sseq: int) -> tuple[int, str]:
        """(stream sequence, digest) of the message just before ``start_sseq`` if this handle knows
        it (a catch-up reads on from its last message), else (0, "")."""
        with self._mu:
            if self._last_sseq and start_sseq == self._last_sseq + 1:
                return self._last_sseq, self._last_digest
        return 0, ""

    def _scan_all(self) -> None:
        """Build the index and the key map from the whole subject (open), from the first message
        kept by the last drop_prefix."""
        self._idx_first = array("Q")
        self._idx_sseq = array("Q")
        self._keys = {}
        self._last_sseq = 0
        self._last_digest = ""
        self._stored_seq = self._first_seq - 1
        self._catch_up(int(self._meta.get("first_sseq", 0)))

    def _catch_up(self, start_sseq: int = 0) -> int:
        """Read what was appended after what this handle knows; how many records came."""
        return self._take_in(self._messages(max(self._last_sseq + 1, start_sseq)))

    def _catch_up_shared(self) -> int:
        """A shared writer's catch-up (with _wmu held): a refused publish is most often a message
        or two behind, read here one STREAM.MSG.GET each (a consumer costs more round trips);
        further behind, the rest comes through a consumer. How many records came.

        The GETs are answered by the leader and checked as a read from it is (_LeaderCheck,
        ``leader``): a message the next one disowns is dropped here too, so a shared writer
        takes in what readers return (taken in, the disowned message's seqs would meet its
        successor's as "held twice", and fail the writer)."""
        start = self._last_sseq + 1
        check = _LeaderCheck(self._leader_copy, start, *self._known_before(start), leader=True,
                             disowned=self._disowned)
        came, at = 0, start
        try:
            for _ in range(CATCH_UP_GETS_MAX):
                m = self._call(
                    self._c().get_msg(self._stream, {"seq": at, "next_by_subj": self._subject}, self._ack_timeout_s),
                    self._ack_timeout_s,
                )
                if m is None:
                    return came + self._take_in(check.settle())
                came += self._take_in(check.take(m))
                at = m.sseq + 1
        finally:
            for why in check.dropped:
                self._note(why)
        return came + self._catch_up()  # a message still held is read again from there

    def _take_in(self, msgs: Iterable[_StoredMsg]) -> int:
        """Add ``msgs`` (this journal's messages after the last one known) to what this handle
        knows: the index, the keys and their digests, the last seq; how many records came."""
        came = 0
        for m, recs in self._verified(msgs, self._stored_seq + 1, self._last_sseq or None):
            if (self._shared and self._opened and m.headers.get(H_KIND) == KIND_FENCE
                    and m.headers.get(H_WRITER) != WRITER_SHARED and not self._fenced_out):
                # An exclusive writer fenced the journal after this handle's open: it took the
                # claim, which it can only have done once this handle's presence had expired.
                self._fenced_out = m.sseq
            with self._mu:
                if recs:
                    self._idx_first.append(recs[0].seq)
                    self._idx_sseq.append(m.sseq)
                    for r in recs:
                        if r.key is not None:
                            self._keys[r.key] = (r.seq, xxhash.xxh64_intdigest(r.payload))
                    self._stored_seq = recs[-1].seq
                    came += len(recs)
                if m.sseq > self._last_sseq:
                    self._last_sseq, self._last_digest = m.sseq, m.digest()
                self._next_seq = max(self._next_seq, self._stored_seq + 1)
        return came

    def _verified(
        self, msgs: Iterable[_StoredMsg], expect: int, prev_sseq: int | None = None
    ) -> Iterator[tuple[_StoredMsg, list[Record]]]:
        """Each of ``msgs`` with its records, verified to continue the journal at seq ``expect``,
        none below the journal's first seq: a message whose records all lie below it (dropped by
        drop_prefix, or left by one cut short) yields none. A gap sends a read-only handle to
        the metadata once more (a drop of the writer may have moved the first seq since).

        ``prev_sseq``: the stream sequence of the message just before the first of ``msgs`` on
        the subject (None: the first of ``msgs`` is a message this handle knows to be part of the
        journal, or the first of the subject). A message chained on an older message than the one
        before it lost a race (``_lost_race``) and yields none."""
        try:
            yield from self._verify_each(msgs, expect, prev_sseq)
        finally:
            close = getattr(msgs, "close", None)
            if close is not None:
                close()  # now, on this thread: the reader of a generator of messages is stopped

    def _verify_each(
        self, msgs: Iterable[_StoredMsg], expect: int, prev_sseq: int | None
    ) -> Iterator[tuple[_StoredMsg, list[Record]]]:
        first_seq = self._first_seq
        expect = max(expect, first_seq)
        for m in msgs:
            prev, prev_sseq = prev_sseq, m.sseq
            if prev is not None and m.sseq <= prev:
                # Read in the wrong order (_OrderedReader drops these): taken for a message that
                # lost a race, or for a second copy of committed seqs, it would be reported as one.
                raise InvariantError(f"reading {self._where} (stream {self._stream}), message {m.sseq} came after "
                                     f"message {prev}")
            if prev is not None and _lost_race(m, prev):
                yield m, []
                continue
            span = _span_of(m)
            if span is None:
                self._decode(m, expect)  # raises: the headers are not valid
                continue
            lo, count = span
            if lo > expect:
                first_seq = self._first_seq_now()
                expect = max(expect, first_seq)
            if (lo + count <= first_seq) if count else (lo < first_seq):
                yield m, []
                continue
            if count and lo < first_seq < lo + count and expect == first_seq:
                recs = [r for r in self._decode(m, lo) if r.seq >= first_seq]  # straddles the first seq
            else:
                recs = self._decode(m, expect)
            if recs:
                expect = recs[-1].seq + 1
            yield m, recs

    def _first_seq_now(self) -> int:
        """The journal's first seq as the server has it now. A writer's own is current (only it
        drops); a read-only handle reads the metadata again."""
        if not self._readonly:
            return self._first_seq
        found = self._read_meta()
        if found is not None and found[0]["id"] == self._journal_id.hex():
            self._advance_first(int(found[0]["first_seq"]))
        return self._first_seq

    def _refresh_first_io(self) -> None:
        try:
            self._first_seq_now()
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's metadata failed", exc, doing="reading") from exc

    def _advance_first(self, first_seq: int) -> None:
        """The journal begins at ``first_seq`` now: forget what lies below (index, keys)."""
        with self._mu:
            if first_seq <= self._first_seq:
                return
            self._first_seq = first_seq
            i = bisect.bisect_right(self._idx_first, first_seq) - 1
            if i > 0:
                del self._idx_first[:i]
                del self._idx_sseq[:i]
            self._keys = {k: v for k, v in self._keys.items() if v[0] >= first_seq}
            self._stored_seq = max(self._stored_seq, first_seq - 1)
            self._next_seq = max(self._next_seq, self._stored_seq + 1)

    def _purge_dropped(self) -> None:
        """A writer's open: remove the messages a drop_prefix cut short left below the first seq."""
        if self._first_seq <= 1 or not self._idx_sseq:
            return
        keep_from = self._idx_sseq[0]
        lowest = self._call(
            self._c().get_msg(self._stream, {"seq": 1, "next_by_subj": self._subject}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        if lowest is not None and lowest.sseq < keep_from:
            n = self._purge(self._subject, before_sseq=keep_from)
            self._recovery.actions.append(f"removed {n} messages below first seq {self._first_seq} (a drop_prefix "
                                          "cut short)")

    def _fence(self) -> None:
        """Publish a fence chained on the last message read, so nothing an earlier writer still
        has in flight can land after this open; catch up and try again if something did. A
        shared writer's fence (resolve(), with _wmu held) says so in its headers, and is tried
        for up to shared_lock_timeout_s while the other writers append."""
        deadline = time.monotonic() + self._shared_lock_timeout_s
        tries = 0
        while self._shared or tries < FENCE_TRIES_MAX:
            tries += 1
            if self._shared and tries > 1 and time.monotonic() >= deadline:
                break
            headers = {
                H_KIND: KIND_FENCE, H_SEQ: str(self._stored_seq), H_EXPECT_STREAM: self._stream,
                H_MSG_ID: chain_id(self._journal_id, self._last_sseq),
                **chain_headers(self._last_sseq, self._last_digest),
            }
            if self._shared:
                headers[H_WRITER] = WRITER_SHARED
            try:
                ack = self._call(self._c().publish(self._subject, b"", headers, self._ack_timeout_s),
                                 self._ack_timeout_s)
                # A duplicate: an earlier writer's message in flight is chained there (chain_id).
                won = not ack.get("duplicate") and self._won(int(ack["seq"]), self._last_sseq)
            except _Refused as exc:
                if exc.err_code not in ERR_WRONG_LAST_SEQ:
                    raise
                won = False
            if not won:  # refused, or stored after another message chained on the same one
                if self._shared:
                    self._catch_up_shared()
                    continue
                came = self._catch_up()
                self._recovery.actions.append(f"took in {came} records an earlier writer's publish landed late")
                continue
            with self._mu:  # a reader of another thread takes the pair as one (_known_before)
                self._last_sseq, self._last_digest = int(ack["seq"]), message_digest(headers, b"")
            if self._shared:
                return
            self._recovery.actions.append(
                f"fenced the journal at stream message {self._last_sseq} (the last writer did not release it cleanly)"
            )
            return
        if self._shared:
            raise _io_error(self._where, f"could not fence the journal within {self._shared_lock_timeout_s:g} s "
                            "(shared_lock_timeout_s): the other writers kept appending first; try again, or raise "
                            "shared_lock_timeout_s", doing="resolving an outcome of")
        raise _io_error(self._where, f"could not fence the journal in {FENCE_TRIES_MAX} tries: another writer keeps "
                                     "appending; is a second writer running with its claim expired?")

    # --- the public face ---------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._parsed.url

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def first_seq(self) -> int:
        return self._first_seq

    @property
    def writer_mode(self) -> str:
        return "shared" if self._shared else "exclusive"

    @property
    def replicas(self) -> int:
        """The stream's replica count (``"sync"`` needs 3 or more)."""
        return self._replicas

    def __enter__(self) -> JetStreamJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _check_append(self, level: Durability) -> None:
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("append")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        if level == "sync" and self._replicas < SYNC_REPLICAS_MIN:
            raise SyncNeedsReplicasError(self._stream, self._replicas)

    def _encode(self, event: Any, key: str | None, synthetic: bool) -> Encoded:
        enc = encode_event(event, key, synthetic, self._options)
        size = fmt.FRAME_HEADER_SIZE_BYTES + len(enc.spec.stored)
        if size > self._payload_max:
            raise RecordTooLargeError(size, self._payload_max)
        return enc

    def _reported(self, level: Durability) -> Durability:
        return "flush" if level == "buffered" else level

    def _level(self, durability: str) -> Durability:
        """The level an append is written at: a shared writer has no buffered level (a record
        other writers cannot see has no seq yet), so it writes those at once, as "flush"."""
        level = check_durability(durability)
        return "flush" if self._shared and level == "buffered" else level

    def append(
        self, event: Any, durability: str = "sync", idempotency_key: str | None = None, synthetic: bool = False
    ) -> Outcome:
        level = self._level(durability)
        self._check_append(level)
        enc = self._encode(event, idempotency_key, synthetic)
        if idempotency_key is None:
            return self._write_unkeyed([enc], level)[0]
        return self._write_keyed([enc], level)[0]

    def append_many(
        self,
        events: Iterable[Any],
        durability: str = "sync",
        idempotency_keys: Iterable[str | None] | None = None,
        synthetic: bool = False,
    ) -> list[Outcome]:
        level = self._level(durability)
        self._check_append(level)
        events = list(events)
        keys = list(idempotency_keys) if idempotency_keys is not None else [None] * len(events)
        if len(keys) != len(events):
            raise InvalidArgumentError(
                f"idempotency_keys must have one entry per event ({len(keys)} keys for {len(events)} events); "
                "nothing was written"
            )
        encoded = [self._encode(e, k, synthetic) for e, k in zip(events, keys, strict=True)]
        if not any(k is not None for k in keys):
            return self._write_unkeyed(encoded, level)
        repeats = repeated_keys(encoded)
        unique = [it for i, it in enumerate(encoded) if i not in repeats] if repeats else encoded
        outcomes = self._write_keyed(unique, level)
        return with_repeats(outcomes, repeats, len(encoded)) if repeats else outcomes

    def _chunks(self, items: list[Encoded]) -> Iterator[list[Encoded]]:
        """``items`` in runs whose frames fit one message."""
        run: list[Encoded] = []
        size = 0
        for it in items:
            n = fmt.FRAME_HEADER_SIZE_BYTES + len(it.spec.stored)
            if run and size + n > self._payload_max:
                yield run
                run, size = [], 0
            run.append(it)
            size += n
        if run:
            yield run

    def _write_unkeyed(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        if level == "buffered":
            return self._buffer_items(items)
        outcomes: list[Outcome] = []
        for chunk in self._chunks(items):
            if outcomes and self._failed is not None:
                reason = f"journal fail-stopped before this record was written: {self._failed}"
                outcomes.extend([NotCommitted(reason)] * len(chunk))
                continue
            outcomes.extend(self._group.submit(chunk, level))
        return outcomes

    def _buffer_items(self, items: list[Encoded]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        full = False
        with self._mu:
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            for it in items:
                seq = self._next_seq
                self._next_seq += 1
                self._buffer.append((seq, it))
                self._buffer_bytes += fmt.FRAME_HEADER_SIZE_BYTES + len(it.spec.stored)
                if it.key is not None:
                    self._keys[it.key] = (seq, it.digest)
                outcomes.append(Committed(seq, "buffered"))
            full = self._buffer_bytes >= self._payload_max
        if full:
            try:
                self.flush()
            except JournalFailStoppedError:
                pass  # reported by the next call, as the file engine does
        return outcomes

    def _write_keyed(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """Records with idempotency keys (each key once): a key the journal holds with the same
        event is a duplicate, with another event a conflict (raised before anything is written);
        a key on its way is waited for."""
        dups: dict[int, tuple[int, int]] = {}
        mine: list[str] = []
        while True:
            waits: list[threading.Event] = []
            reads: list[tuple[Encoded, int]] = []
            dups = {}
            with self._mu:
                if self._failed is not None:
                    raise JournalFailStoppedError(self._failed)
                for i, it in enumerate(items):
                    if it.key is None:
                        continue
                    ev = self._inflight.get(it.key)
                    if ev is not None:
                        waits.append(ev)
                        continue
                    known = self._keys.get(it.key)
                    if known is None:
                        continue
                    if known[1] == it.digest:
                        dups[i] = known
                    else:
                        reads.append((it, known[0]))
                if not waits and not reads:
                    mine = [it.key for i, it in enumerate(items) if it.key is not None and i not in dups]
                    for key in mine:
                        self._inflight[key] = threading.Event()
                    break
            for ev in waits:
                ev.wait()
            for it, seq in reads:
                rec = self.get(seq)
                key = present(it.key)
                if rec is None or rec.key != key:
                    raise InvariantError(f"idempotency key {key!r} points at seq {seq}, which does not hold it")
                if not same_event(rec.payload, rec.is_bytes, it):
                    raise IdempotencyConflictError(key, seq)
                with self._mu:
                    if self._keys.get(key, (0, 0))[0] == seq:
                        self._keys[key] = (seq, it.digest)
        fresh = [it for i, it in enumerate(items) if i not in dups]
        try:
            written = self._write_unkeyed(fresh, level) if fresh else []
        finally:
            with self._mu:
                for key in mine:
                    ev = self._inflight.pop(key, None)
                    if ev is not None:
                        ev.set()
        with self._mu:
            for it, out in zip(fresh, written, strict=True):
                if it.key is not None and isinstance(out, Committed):
                    self._keys[it.key] = (out.seq, it.digest)
        if dups and level != "buffered" and any(seq > self._stored_seq for seq, _ in dups.values()):
            try:
                self.flush()  # a retry of a buffered record is made as durable as it asks
            except JournalFailStoppedError:
                pass
        outcomes: list[Outcome] = []
        fresh_out = iter(written)
        for i, it in enumerate(items):
            if i not in dups:
                outcomes.append(next(fresh_out))
                continue
            seq = dups[i][0]
            if level != "buffered" and seq > self._stored_seq:
                outcomes.append(AckLost(seq, f"the record this key names was not written: {self._failed}",
                                        it.digest, it.key))
            else:
                outcomes.append(Committed(seq, level, True, "idempotency key matched an existing record"))
        return outcomes

    # --- writing ---------------------------------------------------------------------------

    def _group_write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """GroupCommit's writer: this batch (behind whatever buffered records wait) as messages."""
        if self._shared:
            return self._shared_write(items, level)
        with self._wmu:
            with self._mu:
                if self._failed is not None or self._closed:
                    why = self._failed or "the journal was closed"
                    return [NotCommitted(f"not written: {why}")] * len(items)
                held = self._take_buffer()
                first = self._next_seq
                self._next_seq += len(items)
            batch = held + [(first + i, it) for i, it in enumerate(items)]
            outcomes = self._write_records(batch, level)
        return outcomes[len(held) :]

    def _take_buffer(self) -> list[tuple[int, Encoded]]:
        held, self._buffer, self._buffer_bytes = self._buffer, [], 0
        return held

    def _fail(self, why: str) -> None:
        with self._mu:
            if self._failed is None:
                self._failed = why

    def _write_records(self, batch: list[tuple[int, Encoded]], level: Durability) -> list[Outcome]:
        """Publish ``batch`` (contiguous seqs) as messages, each chained on the last; one outcome
        per record. Called with _wmu held. A refusal is NotCommitted, a lost ack AckLost; both
        fail-stop the handle."""
        outcomes: list[Outcome] = []
        reported = self._reported(level)
        at = 0
        while at < len(batch):
            run: list[tuple[int, Encoded]] = []
            size = 0
            while at < len(batch):
                n = fmt.FRAME_HEADER_SIZE_BYTES + len(batch[at][1].spec.stored)
                if run and size + n > self._payload_max:
                    break
                run.append(batch[at])
                size += n
                at += 1
            if self._failed is not None:
                outcomes.extend(NotCommitted(f"not written: {self._failed}") for _ in run)
                continue
            if self._claim_lost:
                self._fail("the writer claim was taken by another writer (this handle's claim expired)")
                outcomes.extend(NotCommitted(f"not written: {self._failed}") for _ in run)
                continue
            got = self._publish_run(run, reported)
            if got is None:
                raise InvariantError("only a shared writer's publish is tried again")
            outcomes.extend(got)
        return outcomes

    def _publish_run(self, run: list[tuple[int, Encoded]], reported: Durability) -> list[Outcome] | None:
        """Publish one message of records chained on the last message known; their outcomes, or
        (shared writers only) None when the server refused it because another writer appended
        first: nothing was stored, and the caller catches up and tries again."""
        body = b"".join(records.frame_of(enc, seq, self._salt) for seq, enc in run)
        first = run[0][0]
        headers = {
            H_SEQ: str(first),
            H_COUNT: str(len(run)),
            H_MSG_ID: chain_id(self._journal_id, self._last_sseq),
            H_EXPECT_STREAM: self._stream,
            **chain_headers(self._last_sseq, self._last_digest),
        }
        try:
            ack = self._c().publish_sync(self._subject, body, headers, self._ack_timeout_s)
        except _Refused as exc:
            if self._shared and exc.err_code in ERR_WRONG_LAST_SEQ:
                self._refusals += 1
                return None
            why = f"the server refused the publish ({exc.reason})"
            if exc.err_code in ERR_WRONG_LAST_SEQ:
                why = (f"the server refused the publish: another writer appended to the journal since this one "
                       f"last did ({exc.reason}); this handle can no longer append")
            self._fail(why)
            return [NotCommitted(why) for _ in run]
        except (_Lost, nats.errors.Error, OSError) as exc:
            why = f"the publish's ack was lost ({exc}); the server may or may not hold these records"
            self._fail(why)
            return [AckLost(seq, why, enc.digest, enc.key) for seq, enc in run]
        if ack.get("duplicate"):
            # Another writer's message is chained where this one would go (chain_id): this one
            # was not stored. The journal never publishes one message twice, so it is not ours.
            if self._shared:
                self._lost_races += 1
                return None
            why = ("another writer's message is already chained where this one would go (a writer whose claim "
                   "lapsed, or a second writer); this handle can no longer append")
            self._fail(why)
            return [NotCommitted(why) for _ in run]
        sseq = int(ack["seq"])
        if ack.get("stream") != self._stream or sseq <= self._last_sseq:
            why = f"the publish was acknowledged by stream {ack.get('stream')!r} at {sseq}, not as expected"
            self._fail(why)
            return [AckLost(seq, why, enc.digest, enc.key) for seq, enc in run]
        if self._shared:
            # Other writers publish at the same moment, and the server may store two messages
            # chained on one (_lost_race): this one is the journal's only if it came first.
            try:
                won = self._won(sseq, self._last_sseq)
            except (_Lost, _Refused, nats.errors.Error, OSError) as exc:
                why = (f"the publish was acknowledged, but whether it came before another writer's could not be "
                       f"read ({exc}); the journal may or may not hold these records")
                self._fail(why)
                return [AckLost(seq, why, enc.digest, enc.key) for seq, enc in run]
            if not won:
                self._lost_races += 1
                return None  # stored, but not part of the journal: every reader skips it
        with self._mu:
            self._idx_first.append(first)
            self._idx_sseq.append(sseq)
            self._last_sseq, self._last_digest = sseq, message_digest(headers, body)
            self._stored_seq = run[-1][0]
            self._next_seq = max(self._next_seq, self._stored_seq + 1)
            if self._shared:
                for seq, enc in run:
                    if enc.key is not None:
                        self._keys[enc.key] = (seq, enc.digest)
        return [Committed(seq, reported) for seq, _ in run]

    def _shared_write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        """GroupCommit's writer for a shared writer. Each message of the batch takes its seqs from
        what this handle knows of the journal and is chained on the last message it knows. When
        the server refuses it because another writer appended first, the handle catches up (the
        others' records, their keys and digests), answers records whose key another writer now
        holds (a duplicate of that record, or NotCommitted if it holds another event), gives the
        rest the next seqs and publishes again, for up to shared_lock_timeout_s: then what is
        left is NotCommitted (errno EBUSY) and the handle goes on."""
        reported = self._reported(level)
        out: list[Outcome | None] = [None] * len(items)
        why, code = "", None
        with self._wmu:
            pending = list(range(len(items)))
            deadline = time.monotonic() + self._shared_lock_timeout_s
            refusals = 0
            while pending:
                if self._claim_lost:
                    self._fail("this shared writer's claim lapsed (it could not refresh it within claim_ttl_s) and "
                               "the other writers dropped it, or an exclusive writer has the journal now; reopen it")
                if self._fenced_out:
                    self._fail(f"an exclusive writer took the journal (its fence is stream message "
                               f"{self._fenced_out}) after this shared writer's claim lapsed; reopen it")
                if self._failed is not None or self._closed:
                    why = f"not written: {self._failed or 'the journal was closed'}"
                    break
                pending = self._shared_plan(items, pending, reported, out)
                if not pending:
                    break
                run = self._run_of(items, pending)
                first = self._stored_seq + 1
                got = self._publish_run([(first + k, items[i]) for k, i in enumerate(run)], reported)
                if got is not None:
                    for i, o in zip(run, got, strict=True):
                        out[i] = o
                    pending = pending[len(run) :]
                    continue
                refusals += 1
                if time.monotonic() >= deadline:
                    why = (
                        f"not written: another writer appended first every time; the batch was refused {refusals} "
                        f"times within {self._shared_lock_timeout_s:g} s (shared_lock_timeout_s) and none of these "
                        "records was stored: append them again, raise shared_lock_timeout_s, or have the writers "
                        "append fewer, larger batches"
                    )
                    code = errno.EBUSY
                    break
                before = self._last_sseq
                try:
                    self._catch_up_shared()
                except (_Lost, _Refused, nats.errors.Error, OSError) as exc:
                    why = (f"not written: reading what the journal's other writers appended failed ({exc}); none "
                           "of these records was stored")
                    break
                except JournalError as exc:  # committed data that fails verification: nothing more here
                    self._fail(f"catching up with the journal's other writers found: {exc}")
                    continue
                if self._last_sseq == before:
                    # Refused, yet nothing newer to read: a stream leader changing hands (its
                    # successor serves what the old one acknowledged). Look again shortly.
                    time.sleep(CLAIM_POLL_S)
        return [o if o is not None else NotCommitted(why, code) for o in out]

    def _shared_plan(self, items: list[Encoded], pending: list[int], reported: Durability,
                     out: list[Outcome | None]) -> list[int]:
        """The outcome, now, of each pending record whose idempotency key the journal holds (a
        catch-up found another writer's record under it): a duplicate of that record, or, if it
        holds another event, NotCommitted (a caller's bug, as IdempotencyConflictError says).
        The records still to write."""
        rest: list[int] = []
        for i in pending:
            it = items[i]
            known = self._keys.get(it.key) if it.key is not None else None
            if it.key is None or known is None:
                rest.append(i)
                continue
            seq, digest = known
            if digest != it.digest:  # the same event in another key order, or another event
                try:
                    rec = self._peek(seq)
                except JournalError as exc:
                    out[i] = NotCommitted(f"not written: the record holding idempotency key {it.key!r} (seq {seq}) "
                                          f"could not be read to compare ({exc})")
                    continue
                if rec is None or rec.key != it.key or not same_event(rec.payload, rec.is_bytes, it):
                    out[i] = NotCommitted(f"not written: {IdempotencyConflictError(it.key, seq)}")
                    continue
            out[i] = Committed(seq, reported, True, "idempotency key matched a record another writer wrote")
        return rest

    def _run_of(self, items: list[Encoded], pending: list[int]) -> list[int]:
        """The first of ``pending`` whose frames fit one message (at least one)."""
        run: list[int] = []
        size = 0
        for i in pending:
            n = fmt.FRAME_HEADER_SIZE_BYTES + len(items[i].spec.stored)
            if run and size + n > self._payload_max:
                break
            run.append(i)
            size += n
        return run

    def _won(self, sseq: int, chained: int) -> bool:
        """Whether this handle's message, stored at ``sseq`` and published chained on the message
        at ``chained``, is part of the journal: the first message on the subject after that one
        (``_lost_race``). _Lost or _Refused if that cannot be read."""
        if sseq == chained + 1:
            return True  # the stream stored nothing between the two
        first = self._call(
            self._c().get_msg(self._stream, {"seq": chained + 1, "next_by_subj": self._subject}, self._ack_timeout_s),
            self._ack_timeout_s,
        )
        return first is not None and first.sseq == sseq

    def flush(self) -> None:
        self._check_open()
        if self._readonly:
            return
        self._drain("flush")

    def sync(self) -> None:
        self._check_open()
        if self._readonly:
            return
        if self._replicas < SYNC_REPLICAS_MIN:
            raise SyncNeedsReplicasError(self._stream, self._replicas)
        self._drain("sync")

    def _drain(self, level: Durability) -> None:
        with self._wmu:
            with self._mu:
                held = self._take_buffer()
            if held:
                self._write_records(held, level)
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    # --- reading ---------------------------------------------------------------------------

    def _start_of(self, after_seq: int) -> tuple[int, int]:
        """(stream sequence to read from, seq its first message begins with) for records > after_seq."""
        start, expect, _prev = self._start_prev(after_seq)
        return start, expect

    def _start_prev(self, after_seq: int) -> tuple[int, int, int | None]:
        """``_start_of``, and the ``prev_sseq`` of ``_verified`` for a read from there: a message
        of the index is part of the journal; after the last one known, what follows is checked."""
        with self._mu:
            want = max(after_seq + 1, self._first_seq)
            i = bisect.bisect_right(self._idx_first, want) - 1
            if i < 0:
                return 1, self._first_seq, None
            if want > self._stored_seq:
                return self._last_sseq + 1, self._stored_seq + 1, self._last_sseq
            return self._idx_sseq[i], self._idx_first[i], None

    def read(self, after_seq: int = 0) -> Iterator[Record]:
        self._check_open()
        if not self._readonly:
            self.flush()
        else:
            self._refresh_first_io()
        start, expect, prev = self._start_prev(after_seq)
        try:
            for _m, recs in self._verified(self._messages(start), expect, prev):
                for rec in recs:
                    if rec.seq > after_seq:
                        yield rec
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc

    def follow(
        self,
        after_seq: int = 0,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        idle_timeout_s: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[Record]:
        self._check_open()
        if self._readonly:
            self._refresh_first_io()
        start, expect, prev = self._start_prev(after_seq)
        idle_since = time.monotonic()
        wait_s = max(0.001, poll_interval_s)
        while True:  # once per consumer: a replica that served a message not the leader's ends one
            check = _LeaderCheck(self._leader_copy, start, *self._known_before(start), disowned=self._disowned)
            reader = _OrderedReader(self._c(), self._stream, self._subject, start, self._ack_timeout_s)
            diverged: _Diverged | None = None
            try:
                self._call(reader.start(), self._ack_timeout_s)
                while diverged is None and not (stop is not None and stop.is_set()):
                    if self._closed:
                        return
                    got = self._call(reader.next_chunk(None, SCAN_CHUNK_MSGS, SCAN_CHUNK_BYTES, wait_s), wait_s + 5)
                    now = time.monotonic()
                    ready: list[_StoredMsg] = []
                    try:
                        for m in got:
                            ready += check.take(m)
                        if not got:
                            # Nothing more for now: the leader vouches for the last one. Not there
                            # (yet), or the leader not answering (an election): it stays held.
                            try:
                                ready = check.settle(wait_absent=True)
                            except (_Lost, _Refused):
                                ready = []
                    except _Diverged as exc:
                        diverged = exc  # what was ready before it is handed on first
                    if got:
                        idle_since = now
                    elif not ready and diverged is None and idle_timeout_s is not None and (
                        now - idle_since >= idle_timeout_s
                    ):
                        if not check.holding:
                            return
                        # Going idle with a message held: the leader answers for it now, or the
                        # follow ends with the error, never quietly short of it.
                        try:
                            ready = check.settle(wait_absent=True)
                        except _Diverged as exc:
                            diverged = exc
                        if not ready and diverged is None:
                            return  # the leader holds nothing there: not the journal's
                        idle_since = now
                    if ready:
                        verified = list(self._verified(ready, expect, prev))
                        prev = ready[-1].sseq
                        expect = yield from _records_after(verified, expect, after_seq)
                if diverged is None:
                    return
                self._note(f"a replica served this journal's {diverged}; followed on from the stream leader "
                           f"from message {diverged.resume_sseq}")
                # The rest up to the leader's last message, from the leader; then a new consumer.
                last = self._subject_last()
                ready = list(self._leader_messages(diverged.resume_sseq, last.sseq, check.out_sseq,
                                                   check.out_digest)) if last is not None else []
                start = max(diverged.resume_sseq, last.sseq + 1 if last is not None else 0)
                verified = list(self._verified(ready, expect, prev))
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "following the journal failed", exc, doing="reading") from exc
            finally:
                try:
                    self._call(reader.stop(), 5.0)
                except (_Lost, _Refused, nats.errors.Error, OSError):
                    pass
            if ready:
                prev = ready[-1].sseq
            expect = yield from _records_after(verified, expect, after_seq)

    def get(self, seq: int) -> Record | None:
        self._check_open()
        if self._readonly:
            self._refresh_first_io()
        if seq < self._first_seq:
            return None
        if not self._readonly:
            self.flush()
        if seq > self._stored_seq and (self._readonly or self._shared):
            self._catch_up_io()
        return self._peek(seq)

    def _peek(self, seq: int) -> Record | None:
        """Record ``seq`` of what this handle knows, read from its message (no flush, no catch-up)."""
        with self._mu:
            if seq > self._stored_seq or not self._idx_first:
                return None
            i = bisect.bisect_right(self._idx_first, seq) - 1
            first, sseq = self._idx_first[i], self._idx_sseq[i]
        try:
            m = self._call(self._c().get_msg(self._stream, {"seq": sseq}, self._ack_timeout_s), self._ack_timeout_s)
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc
        if m is None:
            try:
                first_seq = self._first_seq_now()
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "reading the journal's metadata failed", exc, doing="reading") from exc
            if seq < first_seq:
                return None  # dropped by a drop_prefix since
            raise CorruptionError(self._where_msg(sseq), 0, seq, "the message that held this record is gone "
                                                                  "(deleted from the stream)")
        for rec in self._decode(m, first):
            if rec.seq == seq:
                return rec
        return None

    def _catch_up_io(self) -> None:
        try:
            if self._shared:
                with self._wmu:  # a shared writer's batches catch up too: one at a time
                    self._catch_up_shared()
            else:
                self._catch_up()
        except (_Lost, _Refused) as exc:
            raise _io_error(self._where, "reading the journal's stream failed", exc, doing="reading") from exc

    def resolve(self, outcome: Outcome) -> Outcome:
        if not isinstance(outcome, AckLost):
            return outcome
        self._check_open()
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        if self._readonly or self._shared:
            self._catch_up_io()
        answer = self._resolved(outcome)
        if self._shared and isinstance(answer, NotCommitted) and outcome.seq > self._stored_seq:
            # Other shared writers do not fence the journal for this handle: the message may still
            # be on its way. A fence chained on the last message read either lands first (the
            # message's expected sequence is then stale for good) or is refused because something
            # landed (read by the catch-up): what the stream holds after it is final.
            try:
                with self._wmu:
                    self._fence()
            except (_Lost, _Refused) as exc:
                raise _io_error(self._where, "fencing the journal to resolve an outcome failed", exc,
                                doing="resolving an outcome of") from exc
            answer = self._resolved(outcome)
        return answer

    def _resolved(self, outcome: AckLost) -> Outcome:
        """What the journal, as this handle knows it, says of ``outcome``."""
        level: Durability = "sync" if self._replicas >= SYNC_REPLICAS_MIN else "flush"
        if outcome.key is not None:
            known = self._keys.get(outcome.key)
            if known is not None:
                return Committed(known[0], level, duplicate=True, reason="resolved by idempotency key")
        rec = self.get(outcome.seq)
        if rec is not None and xxhash.xxh64_intdigest(rec.payload) == outcome.digest and rec.key == outcome.key:
            return Committed(outcome.seq, level, reason="resolved: the record is in the journal")
        if rec is None:
            return NotCommitted("resolved: the journal ends before this record's seq")
        return NotCommitted("resolved: another record holds this record's seq")

    # --- retention -------------------------------------------------------------------------

    def seal(self) -> None:
        """Nothing to seal on a stream: every batch is a message of its own, and whole messages
        are what drop_prefix deletes, so what is appended after this call (in one append_many:
        one message) outlives a drop of everything before it. Writes what this handle buffered
        (so it does not share the next message) and checks that the handle can write."""
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("seal")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        self.flush()

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        """Delete the records before ``before_seq``, whole messages at a time (retention).

        Every message whose records all come before ``before_seq`` and that is followed by
        another message of records goes (never the last one: the writer's expected sequence is
        chained on it); the journal then begins at the first seq of the first message kept. A new
        metadata message naming that seq (and the message's stream sequence) is published first,
        chained on the last one: once it is acknowledged the drop is in effect, and readers skip
        whatever lies below (every handle: a read-only one reads the metadata again at each read,
        follow and point read). Then one STREAM.PURGE deletes the messages below it; a crash or a
        failure before that leaves messages no reader returns, which the next writer's open
        removes. Keys of dropped records are forgotten (a retry of one is written anew).
        ``bytes_dropped`` is not tracked (0). Exclusive writers only.
        """
        if isinstance(before_seq, bool) or not isinstance(before_seq, int) or before_seq < 1:
            raise InvalidArgumentError(f"before_seq must be an int >= 1, not {before_seq!r}")
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("drop_prefix")
        if self._shared:
            raise InvalidArgumentError("drop_prefix needs the journal opened with writer='exclusive' (the other "
                                       "shared writers chain their messages on the ones it would delete)")
        self.flush()
        with self._wmu:  # no batch on the wire meanwhile: the index holds every message
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            with self._mu:
                k = bisect.bisect_right(self._idx_first, before_seq) - 1
                if k <= 0 or self._idx_first[k] <= self._first_seq:
                    return PrefixDrop(self._first_seq)
                first, keep_sseq = int(self._idx_first[k]), int(self._idx_sseq[k])
            meta = {**self._meta, "first_seq": first, "first_sseq": keep_sseq}
            try:
                meta_sseq = self._publish_meta(meta, self._meta_sseq)
            except _Refused as exc:
                why = f"the journal's metadata changed under its writer ({exc.reason}): was it deleted?"
                if exc.err_code in ERR_WRONG_LAST_SEQ:
                    self._fail(why)
                raise _io_error(self._where, f"drop_prefix was refused, nothing was dropped: {why}", exc,
                                doing="dropping a prefix of") from exc
            except (_Lost, nats.errors.Error, OSError) as exc:
                self._fail(f"the ack of a drop_prefix's metadata was lost ({exc})")
                raise _io_error(self._where, "the ack of drop_prefix's metadata message was lost: whether the "
                                "drop is in effect is unknown (reopen the journal and read first_seq)", exc,
                                doing="dropping a prefix of") from exc
            # From here the drop is in effect.
            self._meta, self._meta_sseq = meta, meta_sseq
            self._advance_first(first)
            self._purge_below(keep_sseq)
        return PrefixDrop(first)

    def _purge_below(self, keep_sseq: int) -> None:
        """The deletes of a drop_prefix in effect: the messages below ``keep_sseq``, then the
        metadata messages before the last. A failure leaves them to the next writer's open."""
        try:
            self._purge(self._subject, before_sseq=keep_sseq)
            self._purge(self._meta_subject, keep=1)
        except (_Lost, _Refused):
            pass

    # --- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        failed_before = self._failed
        try:
            if not self._readonly and self._failed is None:
                try:
                    self._drain("flush")
                except JournalFailStoppedError:
                    pass
        finally:
            self._group.wait_idle()
            with self._wmu:
                self._closed = True
            if not self._readonly:
                self._release_claim(clean=self._failed is None)
            self._let_go_conn()
        if self._failed is not None and failed_before is None:
            raise JournalFailStoppedError(self._failed)

    def __del__(self) -> None:  # a handle dropped without close: let its claim expire, free the socket
        if not getattr(self, "_closed", True) and getattr(self, "_conn", None) is not None:
            task = self._claim_task
            if task is not None:
                task.cancel()


def _records_after(
    verified: list[tuple[_StoredMsg, list[Record]]], expect: int, after_seq: int
) -> Generator[Record, None, int]:
    """follow()'s records of ``verified`` past ``after_seq``; the seq expected after them."""
    for _m, recs in verified:
        for rec in recs:
            expect = rec.seq + 1
            if rec.seq > after_seq:
                yield rec
    return expect


class _OrderedReader:
    """An ordered push consumer on one subject from a stream sequence (nats-py's ordered mode:
    flow control, heartbeats, and a reset from the last sequence seen if delivery skips).

    It hands out the subject's messages from its start on, each once, in order, which the
    consumer alone does not promise. The consumer is ephemeral, of one replica, on any server of
    the stream, and nats-server 2.9 starts a consumer asked to begin past the last message its
    server has right after that message: on a replica behind the leader (whose acks and
    STREAM.MSG.GET told the reader where to start) it delivers messages from before the start
    (tests/test_remote_nats_race.py). nats-py's ordered mode, reset before its first message,
    starts again from stream sequence 1. A stream sequence names one message for good, so a
    message below the next one expected lies before the start or was handed out already: it is
    dropped here. Taken in, the first such message read as one that lost a race (``_lost_race``)
    and the next, chained on it, as a second copy of committed seqs (SequenceError)."""

    def __init__(self, conn: _Conn, stream: str, subject: str, start_sseq: int, timeout_s: float) -> None:
        self._conn = conn
        self._stream = stream
        self._subject = subject
        self._start = max(1, start_sseq)
        self._next = self._start  # the lowest stream sequence still to hand out
        self._timeout_s = timeout_s
        self._sub: Any = None

    async def start(self) -> None:
        js = self._conn.nc.jetstream(timeout=self._timeout_s)
        config = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self._start,
        )
        try:
            self._sub = await js.subscribe(self._subject, stream=self._stream, ordered_consumer=True, config=config,
                                           pending_bytes_limit=64 * 1024 * 1024)
        except nats.errors.TimeoutError as exc:
            raise _Lost(f"creating a consumer timed out ({exc})") from exc
        except nats.js.errors.APIError as exc:
            raise _Refused(f"creating a consumer was refused ({exc})", exc.code or 0, exc.err_code or 0) from exc

    async def next_chunk(
        self, end_sseq: int | None, max_msgs: int, max_bytes: int, wait_s: float | None = None
    ) -> list[_StoredMsg]:
        """Up to ``max_msgs`` messages (``max_bytes``), up to ``end_sseq``. With ``end_sseq`` it waits
        for the first one up to the read timeout (_Lost after); without (follow) up to ``wait_s``."""
        out: list[_StoredMsg] = []
        size = 0
        first_wait = self._timeout_s if end_sseq is not None else (wait_s or 0.02)
        while len(out) < max_msgs and size < max_bytes:
            try:
                msg = await self._sub.next_msg(timeout=first_wait if not out else 0.0005)
            except nats.errors.TimeoutError:
                if not out and end_sseq is not None:
                    raise _Lost(f"no message within {first_wait:g} s while reading up to {end_sseq}") from None
                break
            sseq = int(msg.metadata.sequence.stream)
            if sseq < self._next:
                continue  # before the start, or handed out already (see the class doc)
            self._next = sseq + 1
            headers = {k: str(v) for k, v in (msg.headers or {}).items()}
            out.append(_StoredMsg(sseq, msg.subject, headers, bytes(msg.data)))
            size += len(msg.data)
            if end_sseq is not None and sseq >= end_sseq:
                break
        return out

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except (nats.errors.Error, OSError):
                pass


def present(value: _T | None) -> _T:
    if value is None:
        raise InvariantError("a keyed record has a key")
    return value


def open_journal(
    parsed: RemoteURL,
    create: bool,
    readonly: bool,
    lock_timeout_s: float = 0.0,
    writer: str = "exclusive",
    **options: Any,
) -> JetStreamJournal:
    """Open (with ``create``, make) the journal a nats:// URL names; see docs/REMOTE.md.

    Options (URL parameters or keyword arguments; keywords win): ``stream`` (default JOURNAL),
    ``replicas`` (the stream's and the lock bucket's replicas when this call creates them),
    ``connect_timeout_s`` (10), ``ack_timeout_s`` (10: how long a publish's ack is awaited before
    its records are AckLost), ``claim_ttl_s`` (30: the lock bucket's max_age when this call creates
    it; a dead writer's claim expires that long after its last refresh), ``record_size_bytes_max``
    and ``compress`` (the encoding's, as the file engine takes them), ``shared_lock_timeout_s``
    (30: how long a shared writer's batch, refused because another writer appended first,
    catches up and tries again before its records are NotCommitted).

    ``writer="shared"``: several handles (processes) append to the journal; see the module doc.
    """
    settings = settings_of(parsed, options)
    if create and readonly:
        raise InvalidArgumentError("create=True needs a writable journal; drop readonly=True")
    if writer not in WRITER_MODES:
        raise InvalidArgumentError(f"writer must be 'exclusive' or 'shared', not {writer!r}")
    if isinstance(lock_timeout_s, bool) or not isinstance(lock_timeout_s, (int, float)) or lock_timeout_s < 0:
        raise InvalidArgumentError(f"lock_timeout_s must be a number >= 0, not {lock_timeout_s!r}")
    j = JetStreamJournal(parsed, readonly, settings, shared=writer == "shared")
    try:
        j._open(create, float(lock_timeout_s))
    except BaseException:
        j._abandon()
        raise
    return j


@dataclass(frozen=True)
class Settings:
    """The options of a journal (and of a store) on NATS, checked (``settings_of``)."""

    stream: str
    replicas: int
    connect_timeout_s: float
    ack_timeout_s: float
    claim_ttl_s: float
    options: Options
    shared_lock_timeout_s: float = SHARED_LOCK_TIMEOUT_S_DEFAULT


def settings_of(parsed: RemoteURL, options: dict[str, Any]) -> Settings:
    """The URL's options merged with ``options`` (keywords win), checked: InvalidArgumentError."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(unknown)} for a journal on NATS; it takes: {', '.join(OPTIONS)} "
            "(the file engine's storage options do not apply)"
        )
    merged: dict[str, Any] = {**parsed.options, **options}
    stream = _check_stream_name(merged.get("stream", STREAM_DEFAULT))
    replicas = _number(merged, "replicas", REPLICAS_DEFAULT, int, 1, 5)
    connect_timeout_s = _number(merged, "connect_timeout_s", CONNECT_TIMEOUT_S_DEFAULT, float, 0.1, 3600)
    ack_timeout_s = _number(merged, "ack_timeout_s", ACK_TIMEOUT_S_DEFAULT, float, 0.05, 3600)
    claim_ttl_s = _number(merged, "claim_ttl_s", CLAIM_TTL_S_DEFAULT, float, 1.0, 86400)
    shared_lock_timeout_s = _number(merged, "shared_lock_timeout_s", SHARED_LOCK_TIMEOUT_S_DEFAULT, float, 0.001,
                                    3600)
    size_max = merged.get("record_size_bytes_max", fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
    if isinstance(size_max, bool) or not isinstance(size_max, int):
        raise InvalidArgumentError(f"record_size_bytes_max must be an int, not {size_max!r}")
    try:
        opts = Options(record_size_bytes_max=size_max, compress=bool(merged.get("compress", True)))
        opts.check()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    return Settings(stream, int(replicas), connect_timeout_s, ack_timeout_s, claim_ttl_s, opts, shared_lock_timeout_s)


def _number(options: dict[str, Any], name: str, default: float, kind: type, low: float, high: float) -> Any:
    value = options.get(name, default)
    try:
        got = kind(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}") from None
    if isinstance(value, bool) or not low <= got <= high:
        raise InvalidArgumentError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}")
    return got


if TYPE_CHECKING:  # mypy holds this backend to journal.api's protocols

    def _conforms(j: JetStreamJournal) -> tuple[Journal, Retention]:
        return j, j


__all__ = ["JetStreamJournal", "Settings", "chain_id", "name_of_token", "open_journal", "settings_of", "subject_token"]
