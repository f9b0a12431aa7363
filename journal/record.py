"""Record: one record read back from a journal, the value every backend's readers yield.

It lives in a module of its own, below ``journal.api`` (which re-exports it), for two reasons:

* It is the one concrete class of the read path: every backend builds one per record, the file
  engine's reader in its innermost loop, so its construction and its lazy JSON decoding are
  performance code, kept here with the comments that say why they are written as they are.
  ``journal.api`` stays a contract a reader can take in at a glance: protocols, small reports.
* What a stored payload means (UTF-8 JSON of the appended dict, or the appended bytes) is one
  rule for every backend, so the decoding that turns a payload back into an event is written
  once, here, and not once per backend.

It imports nothing of the package, so the engine's reader and any backend can use it freely.
"""

from __future__ import annotations

import json
from typing import Any

# Payloads of dict events are UTF-8 JSON from the writer's encoder (never a BOM, never another
# encoding): decoding the bytes once and handing a str to a prebuilt decoder skips json.loads'
# encoding detection and keyword handling, which cost a sixth of a decode.
_JSON_DECODE = json.JSONDecoder().decode


class Record:
    """One record read back: its seq and the event exactly as it was appended."""

    __slots__ = ("_event", "is_bytes", "key", "payload", "seq", "synthetic")

    def __init__(self, seq: int, payload: bytes, is_bytes: bool, key: str | None, synthetic: bool) -> None:
        self.seq = seq
        self.payload = payload  # the uncompressed stored bytes (UTF-8 JSON, or the raw bytes)
        self.is_bytes = is_bytes
        self.key = key
        self.synthetic = synthetic
        self._event: Any = None

    @property
    def event(self) -> Any:
        """The appended dict (decoded from JSON) or the appended bytes."""
        if self.is_bytes:
            return self.payload
        if self._event is None:
            self._event = _JSON_DECODE(self.payload.decode("utf-8", "surrogatepass"))
        return self._event

    def __repr__(self) -> str:
        return f"Record(seq={self.seq}, {len(self.payload)} bytes{', synthetic' if self.synthetic else ''})"
