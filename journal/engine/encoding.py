"""Events to stored payloads: JSON or bytes, zstd when it pays, the idempotency key in front.

Runs in the caller's thread, outside every lock, so concurrent appenders encode in parallel
with the leader's I/O. Nothing here touches a file.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import xxhash
import zstandard

from journal.engine import format as fmt
from journal.engine.options import Options
from journal.errors import EventNotSerializableError, RecordTooLargeError

COMPRESS_MIN_BYTES = 256  # smaller events gain little (2% of bytes on real logs) and zstd costs ~10 µs each
ZSTD_LEVEL = 1  # on real session events within 2% of level 3's size, and faster

_local = threading.local()
# One encoder for every event: json.dumps with options builds a new encoder on each call.
_JSON_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _compressor() -> zstandard.ZstdCompressor:
    c: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if c is None:
        # No content size, checksum or dict id in the zstd frame: the journal frame has them.
        c = _local.cctx = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_content_size=False, write_checksum=False, write_dict_id=False
        )
    return c


class Encoded:
    """An event ready to frame: everything but its seq (assigned in order under the mutex)."""

    __slots__ = ("key", "raw", "spec")

    def __init__(self, spec: fmt.FrameSpec, raw: bytes, key: str | None) -> None:
        self.spec = spec
        self.raw = raw  # kept (not copied) so that an AckLost can carry the payload's digest
        self.key = key

    @property
    def digest(self) -> int:
        return xxhash.xxh64_intdigest(self.raw)


def encode_event(event: Any, key: str | None, synthetic: bool, options: Options) -> Encoded:
    """JSON (or bytes) -> stored payload. Raises typed errors; nothing is written."""
    if type(event) is dict or isinstance(event, dict):
        try:
            raw = _JSON_ENCODE(event).encode("utf-8")
        except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
            raise EventNotSerializableError(str(exc)) from None
        flags = 0
    elif isinstance(event, (bytes, bytearray, memoryview)):
        raw = bytes(event)
        flags = fmt.FLAG_BYTES
    else:
        raise EventNotSerializableError(f"events are dicts or bytes, not {type(event).__name__}")
    if len(raw) > options.record_size_bytes_max:
        raise RecordTooLargeError(len(raw), options.record_size_bytes_max)
    body = raw
    if options.compress and len(raw) >= COMPRESS_MIN_BYTES:
        packed = _compressor().compress(raw)
        if len(packed) < len(raw):
            body = packed
            flags |= fmt.CODEC_ZSTD
    if synthetic:
        flags |= fmt.FLAG_SYNTHETIC
    if key is not None:
        key_bytes = key.encode("utf-8", "surrogateescape")
        if not 1 <= len(key_bytes) <= fmt.IDEMPOTENCY_KEY_BYTES_MAX:
            raise ValueError(f"idempotency key must be 1..{fmt.IDEMPOTENCY_KEY_BYTES_MAX} bytes of UTF-8")
        body = bytes([len(key_bytes)]) + key_bytes + body
        flags |= fmt.FLAG_KEYED
    return Encoded(fmt.FrameSpec(flags, len(raw), body), raw, key)
