"""A journal's options on NATS (URL parameters and keyword arguments), checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal.engine import format as fmt
from journal.engine.options import Options
from journal.errors import (
    InvalidArgumentError,
)
from journal.remote.jetstream.headers import _check_stream_name
from journal.remote.jetstream.limits import (
    ACK_TIMEOUT_S_DEFAULT,
    CLAIM_TTL_S_DEFAULT,
    CONNECT_TIMEOUT_S_DEFAULT,
    OPTIONS,
    REPLICAS_DEFAULT,
    SHARED_LOCK_TIMEOUT_S_DEFAULT,
    STREAM_DEFAULT,
)
from journal.remote.url import RemoteURL


@dataclass(frozen=True)
class Settings:
    """The options of a journal (and of a store) on NATS, checked (``settings_of``)."""

    stream: str
    replicas: int
    connect_timeout_s: float
    ack_timeout_s: float
    claim_ttl_s: float
    options: Options
    shared_lock_timeout_s: float = SHARED_LOCK_TIMEOUT_S_DEFAULT
    # ``replicas`` given (URL or keyword) rather than defaulted: replicas=1 given says that one
    # server is meant, which silences SingleNodeSyncWarning on a server that is not clustered.
    replicas_given: bool = False


def settings_of(parsed: RemoteURL, options: dict[str, Any]) -> Settings:
    """The URL's options merged with ``options`` (keywords win), checked: InvalidArgumentError."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown option(s) {', '.join(unknown)} for a journal on NATS; it takes: {', '.join(OPTIONS)} "
            "(the file engine's storage options do not apply)"
        )
    merged: dict[str, Any] = {**parsed.options, **options}
    stream = _check_stream_name(merged.get("stream", STREAM_DEFAULT))
    replicas = _number(merged, "replicas", REPLICAS_DEFAULT, int, 1, 5)
    connect_timeout_s = _number(merged, "connect_timeout_s", CONNECT_TIMEOUT_S_DEFAULT, float, 0.1, 3600)
    ack_timeout_s = _number(merged, "ack_timeout_s", ACK_TIMEOUT_S_DEFAULT, float, 0.05, 3600)
    claim_ttl_s = _number(merged, "claim_ttl_s", CLAIM_TTL_S_DEFAULT, float, 1.0, 86400)
    shared_lock_timeout_s = _number(merged, "shared_lock_timeout_s", SHARED_LOCK_TIMEOUT_S_DEFAULT, float, 0.001,
                                    3600)
    size_max = merged.get("record_size_bytes_max", fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)
    if isinstance(size_max, bool) or not isinstance(size_max, int):
        raise InvalidArgumentError(f"record_size_bytes_max must be an int, not {size_max!r}")
    try:
        opts = Options(record_size_bytes_max=size_max, compress=bool(merged.get("compress", True)))
        opts.check()
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    return Settings(stream, int(replicas), connect_timeout_s, ack_timeout_s, claim_ttl_s, opts, shared_lock_timeout_s,
                    replicas_given="replicas" in merged)


def _number(options: dict[str, Any], name: str, default: float, kind: type, low: float, high: float) -> Any:
    value = options.get(name, default)
    try:
        got = kind(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}") from None
    if isinstance(value, bool) or not low <= got <= high:
        raise InvalidArgumentError(f"{name} must be a number from {low:g} to {high:g}, not {value!r}")
    return got
