"""The PostgreSQL client library (psycopg 3), imported once for the package: MissingExtraError,
which says how to install it, where it is missing (as jetstream/client.py does for nats-py)."""

from __future__ import annotations

from journal.errors import MissingExtraError

try:
    import psycopg
    from psycopg import sql
except ImportError as exc:  # the extra is not installed
    raise MissingExtraError("journal.remote.postgres", "psycopg 3.1.18 or later", "postgres", exc) from exc

__all__ = ["psycopg", "sql"]
