"""Journals on servers: PostgreSQL and NATS JetStream backends of ``journal.api`` (docs/REMOTE.md).

    import journal
    j = journal.open("postgresql://127.0.0.1:5432/test?journal=s-42", create=True)
    j = journal.open("nats://127.0.0.1:4222?journal=s-42", create=True)

``journal.open`` sends a string with a scheme here; ``open_url`` picks the backend by the
scheme. Each backend is a package whose files mirror each other and the engine's
(``postgres/`` and ``jetstream/``: the connection, the claim, the writer, the reader, retention
and the journal that composes them; CONTRIBUTING.md maps them), and imports its client library
(psycopg, nats-py, the optional extras ``journal-engine[postgres]`` and ``journal-engine[nats]``)
only when it is used.

What both backends do the same way is here, once: the URL grammar (``url.py``); the bytes of a
record (``records.py``: the engine's frame, checksum and payload encoding, so a row or a message
whose bytes changed is corruption with journal, seq and reason, never served); a call's records
cut into runs and its keys checked (``batching.py``); the answer to a lost acknowledgement from
what the server holds (``resolution.py``); group commit over a network (``group.py``); a
writer's trained zstd dictionary, which id it takes and the readers' cache of what the server
holds (``dictionaries.py``); and the parts of the protocol every server journal answers alike
(``handle.py``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from journal.api import Journal, Store
from journal.errors import InvalidArgumentError, MissingExtraError, install_line
from journal.remote.url import SCHEMES, RemoteURL, parse_url


def open_url(url: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
    """Open the journal a URL names (see docs/REMOTE.md for the forms and their options)."""
    parsed = parse_url(url)
    if parsed.journal is None:
        raise InvalidArgumentError(f"{parsed.display()} names no journal: add ?journal=NAME (or use journal.store)")
    opened: Journal = _backend(parsed).open_journal(parsed, create=create, readonly=readonly, **options)
    return opened


def open_store(url: str, **options: Any) -> Store:
    """The store of journals a URL without ``journal=`` names (a schema, a stream)."""
    parsed = parse_url(url)
    if parsed.journal is not None:
        raise InvalidArgumentError(f"{parsed.display()} names one journal; a store URL has no journal= parameter")
    name = {"postgres": "postgres_store", "nats": "jetstream_store"}[parsed.backend]
    try:
        module = importlib.import_module(f"journal.remote.{name}")
    except ImportError as exc:
        raise InvalidArgumentError(f"{parsed.display()} needs the {parsed.backend} backend's client library: "
                                   f"{install_line(parsed.backend)} ({_why(exc)})") from exc
    opened: Store = module.open_store(parsed, **options)
    return opened


def _backend(parsed: RemoteURL) -> ModuleType:
    """The backend's module, imported on first use (it imports its client library)."""
    name = {"postgres": "postgres", "nats": "jetstream"}[parsed.backend]
    try:
        return importlib.import_module(f"journal.remote.{name}")
    except ImportError as exc:
        extra = {"postgres": "postgres", "nats": "nats"}[parsed.backend]
        raise InvalidArgumentError(
            f"{parsed.display()} needs the {parsed.backend} backend's client library: {install_line(extra)} "
            f"({_why(exc)})"
        ) from exc


def _why(exc: ImportError) -> BaseException:
    """What failed to import: a backend's MissingExtraError already carries the install line."""
    return exc.__cause__ if isinstance(exc, MissingExtraError) and exc.__cause__ is not None else exc


def is_url(target: object) -> bool:
    """Whether ``journal.open`` should treat ``target`` as a server URL rather than a path."""
    return isinstance(target, str) and "://" in target and target.split("://", 1)[0].lower() in SCHEMES


__all__ = ["SCHEMES", "RemoteURL", "is_url", "open_store", "open_url", "parse_url"]
