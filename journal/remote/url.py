"""The URL forms of remote journals: one place that parses them and says what is wrong.

    postgresql://[user[:password]@]host[:port]/database?journal=NAME[&schema=S]
    nats://host[:port][,host[:port]...]?journal=NAME[&stream=S][&replicas=N]

``journal`` names the journal (1 to NAME_BYTES_MAX bytes of UTF-8, no control characters).
Without it the URL names a store of journals (``journal.remote`` stores, for the session layer
and the adapters). Every other query parameter is a backend option, listed in ``OPTIONS``; an
unknown one is refused rather than ignored, so a typo never silently changes behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from journal.errors import InvalidArgumentError

SCHEMES: Final = {"postgresql": "postgres", "postgres": "postgres", "nats": "nats"}
NAME_BYTES_MAX: Final = 200
# Query parameters each backend understands besides ``journal`` (docs/REMOTE.md says what each does).
OPTIONS: Final = {
    "postgres": frozenset({"schema", "connect_timeout_s"}),
    "nats": frozenset({"stream", "replicas", "connect_timeout_s"}),
}
# Parameters passed through to the client library untouched (libpq's own URL parameters).
PASSTHROUGH: Final = {"postgres": frozenset({"sslmode", "application_name", "options", "target_session_attrs"}),
                      "nats": frozenset()}


@dataclass(frozen=True)
class RemoteURL:
    backend: str  # "postgres" or "nats"
    url: str  # as given
    server: str  # the URL without our parameters: what the client library connects to
    journal: str | None  # the journal's name, or None for a store URL
    options: dict[str, str] = field(default_factory=dict)

    def with_journal(self, name: str) -> RemoteURL:
        check_name(name)
        return RemoteURL(self.backend, self.url, self.server, name, dict(self.options))

    def display(self) -> str:
        """The URL without a password or the client library's parameters, for messages (and to
        open it again)."""
        parts = urlsplit(self.server)
        netloc = parts.netloc
        if "@" in netloc:
            cred, host = netloc.rsplit("@", 1)
            user = cred.split(":", 1)[0]
            netloc = f"{user}@{host}"
        where = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        # Our own parameters (schema, stream, ...) stay: they say which journal or store it is,
        # and the text opens it again. The client library's are left out (they may hold secrets).
        params = ([("journal", self.journal)] if self.journal is not None else []) + sorted(self.options.items())
        return where + ("?" + "&".join(f"{k}={quote(v)}" for k, v in params) if params else "")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a journal name is a non-empty str, not {name!r}")
    if len(name.encode("utf-8", "surrogatepass")) > NAME_BYTES_MAX:
        raise InvalidArgumentError(f"a journal name is at most {NAME_BYTES_MAX} bytes of UTF-8: {name[:40]!r}...")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise InvalidArgumentError(f"a journal name holds no control characters: {name!r}")
    return name


def parse_url(url: str) -> RemoteURL:
    """Parse a remote journal or store URL; InvalidArgumentError says what is wrong with it."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgumentError(f"not a journal URL: {url!r} (postgresql://... or nats://..., see docs/REMOTE.md)")
    parts = urlsplit(url)
    backend = SCHEMES.get(parts.scheme.lower())
    if backend is None:
        raise InvalidArgumentError(
            f"unknown journal URL scheme {parts.scheme!r} in {url!r}: use postgresql:// or nats:// (docs/REMOTE.md)"
        )
    if not parts.hostname:
        raise InvalidArgumentError(f"{url!r} names no host")
    journal: str | None = None
    options: dict[str, str] = {}
    passthrough: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "journal":
            journal = check_name(value)
        elif key in OPTIONS[backend]:
            options[key] = value
        elif key in PASSTHROUGH[backend]:
            passthrough.append((key, value))
        else:
            known = ", ".join(sorted({"journal", *OPTIONS[backend], *PASSTHROUGH[backend]}))
            raise InvalidArgumentError(f"unknown parameter {key!r} in {url!r}; {backend} URLs take: {known}")
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in passthrough)
    server = urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    return RemoteURL(backend, url, server, journal, options)
