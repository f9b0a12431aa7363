"""The JetStream backend's named limits and defaults (each with its unit), and its option names.
"""

from __future__ import annotations

from typing import Final

FORMAT: Final = 1
STREAM_DEFAULT: Final = "JOURNAL"
# A new stream asks for SYNC_REPLICAS_MIN replicas unless ``replicas`` is given: a cluster that
# has the servers gets a stream "sync" works on, and a server that is not clustered (it refuses
# more than one replica) or a cluster short of servers gets REPLICAS_FALLBACK.
REPLICAS_DEFAULT: Final = 3
REPLICAS_FALLBACK: Final = 1
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
