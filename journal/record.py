"""Record: one record read back from a journal, the value every backend's readers yield.

It lives in a module of its own, below ``journal.api`` (which re-exports it), for two reasons:

* It is the one concrete class of the read path: every backend builds one per record, the file
  engine's reader in its innermost loop, so its construction and its lazy JSON decoding are
  performance code, kept here with the comments that say why they are written as they are.
  ``journal.api`` stays a contract a reader can take in at a glance: protocols, small reports.
* What a stored payload means (UTF-8 JSON of the appended dict, or the appended bytes) is one
  rule for every backend, so the decoding that turns a payload back into an event is written
  once, here, and not once per backend.

It imports nothing of the package but its own compiled leaf, ``journal._json_floats``
(native/json_floats.c, optional), so the engine's reader and any backend can use it freely.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from typing import Any

try:
    import orjson
except ImportError:  # no build of it for this interpreter: every payload takes the json path
    orjson = None  # type: ignore[assignment]

# Payloads of dict events are UTF-8 JSON from the writer's encoder (never a BOM, never another
# encoding): decoding the bytes once and handing a str to a prebuilt decoder skips json.loads'
# encoding detection and keyword handling, which cost a sixth of a decode.
_JSON_DECODE = json.JSONDecoder().decode
_ORJSON_LOADS = None if orjson is None else orjson.loads
# orjson reads an integer beyond 64 bits as the nearest float, where json reads the int; a float
# of at least this magnitude in orjson's value may be one, and the payload is read again by json.
_BIG_FLOAT = float(2**63)


def decode_json(payload: bytes) -> Any:
    """The value of a dict event's payload, exactly as json reads it; read by orjson, faster,
    where orjson reads the same.

    orjson reads JSON as json does (strings, escapes, ints, floats correctly rounded in every
    spelling, key order, the last of a repeated key), but for integers beyond 64 bits, which it
    reads as floats, and for what it refuses and json reads: NaN, Infinity, lone surrogates,
    nesting deeper than 1024. A payload with any of those is read by json, as every payload was
    before; the encoder writes the first kind only for such integers, and never the others.
    """
    if _ORJSON_LOADS is not None:
        try:
            value: Any = _ORJSON_LOADS(payload)
        except Exception:  # whatever orjson refuses, json decides (below)
            pass
        else:
            kind = type(value)
            try:
                if kind is dict or kind is list:
                    if _NO_BIG_FLOAT(value):
                        return value
                elif kind is not float or -_BIG_FLOAT < value < _BIG_FLOAT:
                    return value
            except RecursionError:  # the caller's stack is deep already: json decides
                pass
    return _JSON_DECODE(payload.decode("utf-8", "surrogatepass"))


def _no_big_float(value: dict[str, Any] | list[Any]) -> bool:
    """Whether no float in ``value`` (orjson's reading of a payload), at any depth, is as large
    as an integer beyond 64 bits read as a float. (A plain loop: on CPython 3.11 collecting the
    types in C, ``list(map(type, ...))`` and the like, costs more than looking at each value.)"""
    items: Any = value.values() if type(value) is dict else value
    for x in items:
        kind = type(x)
        if kind is str or kind is int:
            continue
        if kind is float:
            if not -_BIG_FLOAT < x < _BIG_FLOAT:
                return False
        elif kind is dict or kind is list:
            if not _no_big_float(x):
                return False
    return True


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
            self._event = decode_json(self.payload)
        return self._event

    def __repr__(self) -> str:
        return f"Record(seq={self.seq}, {len(self.payload)} bytes{', synthetic' if self.synthetic else ''})"


def _walk_in_c() -> Callable[[Any], bool] | None:
    """native/json_floats.c's twin of _no_big_float, where it was built. JOURNAL_PURE keeps the
    Python walk, read as journal/engine/native.py's forced_pure() reads it (that module is above
    this one; tests/test_native_build.py holds the two readings equal)."""
    if os.environ.get("JOURNAL_PURE", "") not in ("", "0"):
        return None
    try:
        # By name: the compiled leaf imports nothing, where ``from journal import`` would read as
        # an edge to the root package (above every layer) to the import contracts.
        mod = importlib.import_module("journal._json_floats")
    except ImportError:  # not built (no compiler): the Python walk
        return None
    walk: Callable[[Any], bool] = mod.no_big_float
    return walk


# The walk decode_json uses: in C where it was built (a tenth of a decode scan in Python).
_NO_BIG_FLOAT: Callable[[Any], bool] = _walk_in_c() or _no_big_float
