"""A catalog value's bytes (journal.api.Catalog), one rule for every server: a JSON object,
compact UTF-8, no NaN, at most CATALOG_VALUE_BYTES_MAX bytes; anything else is refused before a
byte is sent."""

from __future__ import annotations

import json
from typing import Any

from journal.api import CATALOG_VALUE_BYTES_MAX
from journal.errors import InvalidArgumentError


def encode(value: dict[str, Any]) -> bytes:
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"a catalog value is a JSON object, not {type(value).__name__}")
    try:
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise InvalidArgumentError(f"a catalog value must be JSON: {exc}") from None
    if len(body) > CATALOG_VALUE_BYTES_MAX:
        raise InvalidArgumentError(f"a catalog value is at most {CATALOG_VALUE_BYTES_MAX} bytes of JSON")
    return body


def decode(data: bytes | str) -> dict[str, Any]:
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("a catalog value that is not a JSON object")
    return value


__all__ = ["decode", "encode"]
