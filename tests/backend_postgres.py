"""The PostgreSQL backend of the contract suite (tests/backends.py): journals in a schema of their own.

The server is PG_URL (default postgresql://postgres@127.0.0.1:5432/test). Each backend made here
gets a schema no other run or test uses (the pid, a counter and random bits), and dropping it is
what close() does, so runs never see each other's journals and nothing is left behind.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

PG_URL = os.environ.get("JOURNAL_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
_counter = itertools.count(1)
SESSION = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"


def connect(autocommit: bool = True) -> Any:
    """A plain psycopg connection to the test server (for the tests' own look and tamper)."""
    import psycopg

    return psycopg.connect(PG_URL, autocommit=autocommit, connect_timeout=5)


def unreachable() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc}): pip install 'journal-engine[postgres]'"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {PG_URL} is not reachable: {str(exc).strip()}"
    return None


def new_schema() -> str:
    return f"jt_{SESSION}_{next(_counter)}"


class PostgresBackend:
    name = "postgres"
    sync_durable = True

    def __init__(self, schema: str | None = None) -> None:
        self.schema = schema or new_schema()

    def target(self, name: str | None = None) -> str:
        return f"{PG_URL}?journal={name or uuid.uuid4().hex[:12]}&schema={self.schema}"

    def store_location(self) -> str:
        """A store of journals (journal.store) in this backend's schema."""
        return f"{PG_URL}?schema={self.schema}"

    def store_template(self) -> str:
        """A store URL with a ``{store}`` placeholder for its name (a schema)."""
        return f"{PG_URL}?schema={{store}}"

    def drop_stores(self, prefix: str) -> None:
        """Drop every store whose name starts with ``prefix`` (what a test made from the template)."""
        from psycopg import sql

        with connect() as conn:
            names = [r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)",
                                                (prefix,)).fetchall()]
            for name in names:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

    def _where(self, target: str) -> tuple[str, str]:
        q = parse_qs(urlsplit(target).query)
        return q.get("schema", ["journal"])[0], q["journal"][0]

    def tamper(self, target: str, seq: int) -> None:
        """Flip one bit in the middle of the stored frame of record ``seq``."""
        from psycopg import sql

        schema, name = self._where(target)
        with connect() as conn:
            cur = conn.execute(
                sql.SQL(
                    "UPDATE {} SET frame = set_byte(frame, length(frame) / 2, get_byte(frame, length(frame) / 2) # 1) "
                    "WHERE journal = %s AND seq = %s"
                ).format(sql.Identifier(schema, "records")),
                (name, seq),
            )
            if cur.rowcount != 1:
                raise LookupError(f"no record {seq} in {target}")

    def rows(self, target: str) -> list[tuple[int, str | None, bytes]]:
        """(seq, key, frame) of every row of the journal, in seq order."""
        from psycopg import sql

        schema, name = self._where(target)
        with connect() as conn:
            got = conn.execute(
                sql.SQL("SELECT seq, key, frame FROM {} WHERE journal = %s ORDER BY seq").format(
                    sql.Identifier(schema, "records")
                ),
                (name,),
            ).fetchall()
        return [(int(s), k, bytes(f)) for s, k, f in got]

    def close(self) -> None:
        from psycopg import sql

        try:
            with connect() as conn:
                conn.execute("SET lock_timeout = '10s'")
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
        except Exception:
            pass  # a server gone for good: nothing of ours is left to drop


def make_backend(tmp_root: pathlib.Path) -> PostgresBackend | str:
    why = unreachable()
    if why is not None:
        return why
    return PostgresBackend()
