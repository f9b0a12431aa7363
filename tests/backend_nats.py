"""The JetStream backend of the contract suite (tests/backends.py): journals on a 3-node cluster.

Targets are ``nats://P1,P2,P3?journal=NAME&stream=CONTRACT&replicas=3`` on the session's cluster
(tests/nats_cluster.py), so "sync" is what the backend gives (an R3 stream). ``tamper`` changes
one bit of a stored record: JetStream messages are immutable, so the message holding the record
is deleted and a copy with the bit flipped is published again with its headers (it lands at the
end of the subject, which a reader must refuse either way: a gap, or a bad checksum).
"""

from __future__ import annotations

import asyncio
import base64
import json
import pathlib
import uuid
from collections.abc import Callable
from typing import Any

from journal.engine import format as fmt
from journal.remote.jetstream import subject_base, subject_token
from journal.remote.url import parse_url
from tests.nats_cluster import Cluster, cluster, skip_reason

STREAM = "CONTRACT"


async def _request(nc: Any, subject: str, req: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(req).encode(), timeout=10)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        raise RuntimeError(f"{subject}: {resp['error']}")
    return resp


def _headers_of(raw: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in base64.b64decode(raw or "").split(b"\r\n")[1:]:
        if b":" in line:
            k, v = line.split(b":", 1)
            out[k.decode()] = v.strip().decode()
    return out


async def chain_of(servers: list[str], stream: str, subject: str, upto_sseq: int, last: int = 16) -> str:
    """The last ``last`` messages of ``subject`` up to stream message ``upto_sseq``, a line each:
    stream seq, kind, first seq and count, the stream seq it was chained on, its message id.
    For a failure's report: which messages hold which seqs, and what each was chained on."""
    import nats

    nc = await nats.connect(servers=servers)
    try:
        rows: list[str] = []
        at = max(1, upto_sseq - 40 * last)
        while at <= upto_sseq:
            try:
                resp = await _request(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": at, "next_by_subj": subject})
            except RuntimeError:
                break  # no message of the subject from ``at`` on
            m = resp["message"]
            sseq = int(m["seq"])
            if sseq > upto_sseq:
                break
            h = _headers_of(m.get("hdrs"))
            rows.append(f"  message {sseq}: kind {h.get('Journal-Kind', 'records')}, seqs {h.get('Journal-Seq')}"
                        f" +{h.get('Journal-Count')}, chained on {h.get('Nats-Expected-Last-Subject-Sequence')},"
                        f" id {h.get('Nats-Msg-Id')}, prev {h.get('Journal-Prev')}")
            at = sseq + 1
        return f"stream {stream}, subject {subject}:\n" + "\n".join(rows[-last:])
    finally:
        await nc.close()


async def tamper_message(servers: list[str], stream: str, subject: str, seq: int, republish: bool = True) -> int:
    """Flip one bit of record ``seq``'s payload in the message holding it (delete + publish again).
    The stream sequence of the original message."""
    import nats

    nc = await nats.connect(servers=servers)
    try:
        at = 1
        while True:
            resp = await _request(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": at, "next_by_subj": subject})
            m = resp["message"]
            headers = _headers_of(m.get("hdrs"))
            first, count = int(headers.get("Journal-Seq", 0)), int(headers.get("Journal-Count", 0))
            if first <= seq < first + count:
                break
            at = int(m["seq"]) + 1
        body = bytearray(base64.b64decode(m.get("data") or ""))
        pos = 0
        for s in range(first, first + count):
            stored_len = int.from_bytes(body[pos + 8 : pos + 12], "little")
            if s == seq:
                body[pos + fmt.FRAME_HEADER_SIZE_BYTES + stored_len // 2] ^= 0x01
                break
            pos += fmt.FRAME_HEADER_SIZE_BYTES + stored_len
        await _request(nc, f"$JS.API.STREAM.MSG.DELETE.{stream}", {"seq": int(m["seq"])})
        if republish:
            keep = {k: v for k, v in headers.items() if not k.startswith("Nats-")}
            keep["Nats-Msg-Id"] = f"tampered-{uuid.uuid4().hex}"
            ack = await nc.request(subject, bytes(body), timeout=10, headers=keep)
            if b"error" in ack.data:
                raise RuntimeError(f"republishing the tampered copy failed: {ack.data!r}")
        return int(m["seq"])
    finally:
        await nc.close()


async def drop_streams(servers: list[str], which: Callable[[str], bool]) -> list[str]:
    """Delete every stream of the stores ``which`` names (by stream name) with its lock bucket
    (``KV_<stream>_LOCKS``) and its catalog (``KV_<stream>_CATALOG``); the stores' names."""
    import nats

    nc = await nats.connect(servers=servers)
    try:
        names: list[str] = []
        offset = 0
        while True:
            resp = await _request(nc, "$JS.API.STREAM.NAMES", {"offset": offset})
            page = resp.get("streams") or []
            names += page
            offset += len(page)
            if not page or offset >= int(resp.get("total", 0)):
                break
        stores = sorted({n for n in names if which(n)})
        for n in names:
            owner = n
            for suffix in ("_LOCKS", "_CATALOG"):  # a store's lock bucket and its catalog
                if n.startswith("KV_") and n.endswith(suffix):
                    owner = n[len("KV_") : -len(suffix)]
            if owner in stores:
                await _request(nc, f"$JS.API.STREAM.DELETE.{n}", {})
        return stores
    finally:
        await nc.close()


class NatsBackend:
    name = "nats"
    sync_durable = True

    def __init__(self, c: Cluster) -> None:
        self.cluster = c
        self._made: list[str] = []

    def target(self, name: str | None = None) -> str:
        return self.cluster.url(f"journal={name or uuid.uuid4().hex[:12]}&stream={STREAM}&replicas=3")

    def tamper(self, target: str, seq: int) -> None:
        parsed = parse_url(target)
        assert parsed.journal is not None
        stream = parsed.options.get("stream", STREAM)
        subject = f"{subject_base(stream)}.{subject_token(parsed.journal)}"
        servers = [f"nats://127.0.0.1:{p}" for p in self.cluster.client_ports]
        asyncio.run(tamper_message(servers, stream, subject, seq))

    def store_location(self) -> str:
        """A store of journals (journal.store) of its own: a fresh R3 stream on the cluster.
        close() deletes it."""
        stream = f"ST{uuid.uuid4().hex[:12].upper()}"
        self._made.append(stream)
        return self.cluster.url(f"stream={stream}&replicas=3")

    def store_template(self) -> str:
        """A store URL with a ``{store}`` placeholder for its name (a stream)."""
        return self.cluster.url("stream={store}&replicas=3")

    def drop_stores(self, prefix: str) -> None:
        """Delete every stream whose name starts with ``prefix`` and its lock bucket (what a test
        made from the template)."""
        asyncio.run(drop_streams(self.servers(), lambda name: name.startswith(prefix)))

    def servers(self) -> list[str]:
        return [f"nats://127.0.0.1:{p}" for p in self.cluster.client_ports]

    def close(self) -> None:
        # The cluster serves the whole session (tests/nats_cluster.py stops it at exit); the
        # stores this backend handed out go now.
        made, self._made = set(self._made), []
        if made:
            asyncio.run(drop_streams(self.servers(), lambda name: name in made))


def make_backend(tmp_root: pathlib.Path) -> NatsBackend | str:
    why = skip_reason()
    if why is not None:
        return why
    return NatsBackend(cluster())
