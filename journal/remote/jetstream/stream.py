"""The journal's place in the stream: connecting, the stream itself (made or checked), the
journal's metadata message (its id, first seq and creation), and purges of a subject.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from journal.errors import (
    CorruptionError,
    InvalidArgumentError,
    JournalNotFoundError,
    NewerFormatError,
)
from journal.remote import records
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.connection import _Conn, _servers_of
from journal.remote.jetstream.errors import _io_error, _Lost, _Refused
from journal.remote.jetstream.headers import (
    ERR_INSUFFICIENT_RESOURCES,
    ERR_REPLICAS_NOT_SUPPORTED,
    ERR_STREAM_NOT_FOUND,
    ERR_WRONG_LAST_SEQ,
    H_EXPECT_STREAM,
    H_EXPECT_SUBJECT_SEQ,
)
from journal.remote.jetstream.limits import DUPLICATE_WINDOW_S, FORMAT, HEADERS_ROOM_BYTES, REPLICAS_FALLBACK
from journal.remote.jetstream.state import _State


class _Stream(_State):
    """Connecting, the stream, and the journal's metadata message."""

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

    def _let_go_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and self._shares_conn:
            self._shares_conn = False
            conn.release()

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
        # A server in a cluster names it in every stream's info; a server on its own gives none.
        cluster = info.get("cluster")
        self._clustered = isinstance(cluster, dict) and bool(cluster.get("name"))

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
        except _Refused as exc:
            # The default asks for the replicas "sync" needs; a server on its own (or a cluster
            # short of servers) refuses them and gets a stream of one instead. Replicas the caller
            # named are never lowered: that refusal is theirs to see.
            if self._replicas_given or exc.err_code not in (ERR_REPLICAS_NOT_SUPPORTED, ERR_INSUFFICIENT_RESOURCES):
                return self._api(f"$JS.API.STREAM.INFO.{self._stream}", None)  # made meanwhile, or INFO says why
        try:
            return self._api(f"$JS.API.STREAM.CREATE.{self._stream}", {**config, "num_replicas": REPLICAS_FALLBACK})
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
            left = self._purge(self._subject) + self._purge_dictionaries()
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
