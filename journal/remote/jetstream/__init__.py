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

The package's files, each with one job (CONTRIBUTING.md maps them): connection.py (the event
loop thread, the shared connection), stream.py (the stream and the journal's metadata),
claim.py (the writer's claim and the fence), catch_up.py (taking in what the subject holds,
verified), consumer.py (the ordered consumer and the check against the stream leader),
writer.py and shared_writer.py (the write paths), reader.py (read, follow, get, resolve),
retention.py (seal, drop_prefix), dictionaries.py (the writer's trained zstd dictionary, published at
open, and loaded for readers), journal.py (JetStreamJournal, which composes them, and
open_journal); state.py declares the state they share; headers.py, errors.py, limits.py and
settings.py hold the wire names, the typed errors, the named limits and the options.
"""

from __future__ import annotations

from journal.remote.jetstream.claim import _claim_of
from journal.remote.jetstream.connection import _ack_of, _Conn, _Loop, _servers_of, _Slot
from journal.remote.jetstream.consumer import _Diverged, _LeaderCheck, _OrderedReader, _records_after
from journal.remote.jetstream.errors import (
    ClaimHeldError,
    SingleNodeSyncWarning,
    SyncNeedsReplicasError,
    _io_error,
    _Lost,
    _Refused,
)
from journal.remote.jetstream.headers import (
    ERR_NO_MESSAGE,
    ERR_STREAM_NOT_FOUND,
    ERR_WRONG_LAST_SEQ,
    H_COUNT,
    H_EXPECT_LAST_SEQ,
    H_EXPECT_STREAM,
    H_EXPECT_SUBJECT_SEQ,
    H_KIND,
    H_MSG_ID,
    H_PREV,
    H_SEQ,
    H_WRITER,
    KIND_FENCE,
    PREV_NONE,
    WRITER_SHARED,
    _chained_on,
    _check_stream_name,
    _lost_race,
    _span_of,
    _StoredMsg,
    chain_headers,
    chain_id,
    message_digest,
    name_of_token,
    subject_base,
    subject_token,
)
from journal.remote.jetstream.journal import JetStreamJournal, open_journal
from journal.remote.jetstream.limits import (
    ACK_TIMEOUT_S_DEFAULT,
    CATCH_UP_GETS_MAX,
    CLAIM_CAS_TRIES_MAX,
    CLAIM_POLL_S,
    CLAIM_REFRESHES_PER_TTL,
    CLAIM_TTL_S_DEFAULT,
    CONNECT_TIMEOUT_S_DEFAULT,
    DUPLICATE_WINDOW_S,
    FENCE_TRIES_MAX,
    FOLLOW_POLL_INTERVAL_S,
    FORMAT,
    HEADERS_ROOM_BYTES,
    OPTIONS,
    RECOVERY_NOTES_MAX,
    REPLICAS_DEFAULT,
    SCAN_CHUNK_BYTES,
    SCAN_CHUNK_MSGS,
    SHARED_LOCK_TIMEOUT_S_DEFAULT,
    STREAM_DEFAULT,
    SYNC_REPLICAS_MIN,
    WRITER_MODES,
)
from journal.remote.jetstream.settings import Settings, _number, settings_of
from journal.remote.jetstream.writer import present

__all__ = [
    "ACK_TIMEOUT_S_DEFAULT", "CATCH_UP_GETS_MAX", "CLAIM_CAS_TRIES_MAX", "CLAIM_POLL_S",
    "CLAIM_REFRESHES_PER_TTL", "CLAIM_TTL_S_DEFAULT", "CONNECT_TIMEOUT_S_DEFAULT", "DUPLICATE_WINDOW_S",
    "ERR_NO_MESSAGE", "ERR_STREAM_NOT_FOUND", "ERR_WRONG_LAST_SEQ", "FENCE_TRIES_MAX", "FOLLOW_POLL_INTERVAL_S",
    "FORMAT", "HEADERS_ROOM_BYTES", "H_COUNT", "H_EXPECT_LAST_SEQ", "H_EXPECT_STREAM", "H_EXPECT_SUBJECT_SEQ",
    "H_KIND", "H_MSG_ID", "H_PREV", "H_SEQ", "H_WRITER", "KIND_FENCE", "OPTIONS", "PREV_NONE",
    "RECOVERY_NOTES_MAX", "REPLICAS_DEFAULT", "SCAN_CHUNK_BYTES", "SCAN_CHUNK_MSGS",
    "SHARED_LOCK_TIMEOUT_S_DEFAULT", "STREAM_DEFAULT", "SYNC_REPLICAS_MIN", "WRITER_MODES", "WRITER_SHARED",
    "ClaimHeldError", "JetStreamJournal", "Settings", "SingleNodeSyncWarning", "SyncNeedsReplicasError",
    "_Conn", "_Diverged", "_LeaderCheck", "_Loop", "_Lost", "_OrderedReader", "_Refused", "_Slot", "_StoredMsg",
    "_ack_of", "_chained_on", "_check_stream_name", "_claim_of", "_io_error", "_lost_race", "_number",
    "_records_after", "_servers_of", "_span_of", "chain_headers", "chain_id", "message_digest", "name_of_token",
    "open_journal", "present", "settings_of", "subject_base", "subject_token",
]
