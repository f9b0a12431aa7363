"""What a journal's messages say on the wire: header names, subject tokens, and the chain
(each message's expected last subject sequence, its message id, the digest it names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import xxhash

from journal.engine import format as fmt
from journal.engine.encoding import Encoded
from journal.errors import (
    InvalidArgumentError,
)
from journal.remote.jetstream.limits import STREAM_DEFAULT

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
ERR_REPLICAS_NOT_SUPPORTED: Final = 10074  # "replicas > 1 not supported in non-clustered mode"
ERR_INSUFFICIENT_RESOURCES: Final = 10023  # a cluster without servers enough for the replicas asked


ERR_NO_MESSAGE: Final = 10037


_NAME_OK: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


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


def frame_size(item: Encoded) -> int:
    """The bytes record ``item``'s frame takes in a message's body (the frames, one after the other)."""
    return fmt.FRAME_HEADER_SIZE_BYTES + len(item.spec.stored)


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
