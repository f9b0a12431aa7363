"""The writer's claim and its fencing: an exclusive writer's claim key in the <stream>_LOCKS
bucket, the fence a writer publishes when it takes a claim not released cleanly, and the
claim shared writers hold together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from typing import Any

from journal.errors import (
    JournalNotFoundError,
)
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.connection import _Conn, _Loop
from journal.remote.jetstream.errors import ClaimHeldError, _io_error, _Lost, _Refused
from journal.remote.jetstream.headers import (
    ERR_STREAM_NOT_FOUND,
    ERR_WRONG_LAST_SEQ,
    H_EXPECT_LAST_SEQ,
    H_EXPECT_STREAM,
    H_EXPECT_SUBJECT_SEQ,
    H_KIND,
    H_MSG_ID,
    H_SEQ,
    H_WRITER,
    KIND_FENCE,
    WRITER_SHARED,
    _StoredMsg,
    chain_headers,
    chain_id,
    message_digest,
)
from journal.remote.jetstream.limits import (
    CLAIM_CAS_TRIES_MAX,
    CLAIM_POLL_S,
    CLAIM_REFRESHES_PER_TTL,
    DUPLICATE_WINDOW_S,
    FENCE_TRIES_MAX,
)
from journal.remote.jetstream.state import _State


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


class _Claim(_State):
    """An exclusive writer's claim, and the fence."""

    def _keep_claim(self) -> None:
        """Start refreshing the claim this handle holds (until _release_claim)."""
        refresh = self._refresh_shared() if self._claim_kind == "shared" else self._refresh_claim()
        self._claim_task = asyncio.run_coroutine_threadsafe(refresh, _Loop.get())

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


class _SharedClaim(_State):
    """The claim shared writers hold together."""

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

    async def _present(self, conn: _Conn, token: str) -> bool:
        """Whether the shared writer ``token`` refreshed its presence key within claim_ttl_s."""
        got = await conn.get_msg(f"KV_{self._bucket}", {"last_by_subj": f"{self._claim_subject}.{token}"},
                                 self._ack_timeout_s)
        return got is not None and got.headers.get("KV-Operation") not in ("DEL", "PURGE")
