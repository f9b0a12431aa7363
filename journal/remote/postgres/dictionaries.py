"""A PostgreSQL journal's trained zstd dictionaries (docs/REMOTE.md, "Dictionaries").

They live in the schema's table ``dictionaries(journal text, id integer, body bytea, primary key
(journal, id))``, made on the first dictionary stored (under the schema's advisory lock, so two
first uses do not race). A row's ``body`` is the engine's dictionary file (its checksum and
digest verified on every load). A writer opened with ``dictionary=`` stores it at open, in a
transaction of its own committed with ``synchronous_commit = on``, before its connection writes
any frame: a frame naming the id is never committed without the row (not in the first frame's
transaction: that would put one journal's row into a batch the store's writer may share with
other journals, and the open would end before the dictionary is known to be stored). Which id,
and the readers' cache: journal/remote/dictionaries.py.
"""

from __future__ import annotations

from journal.engine.dictionary import Dictionary
from journal.remote import dictionaries
from journal.remote.dictionaries import STORED_DICTIONARY_BYTES_MAX, ServerDictionaries
from journal.remote.postgres.client import sql
from journal.remote.postgres.connection import Conn
from journal.remote.postgres.reader import ReaderPart

TABLE = "dictionaries"


class DictionaryPart(ReaderPart):
    """Storing the writer's dictionary at open; loading one for the readers' cache."""

    def _dictionary_cache(self) -> ServerDictionaries:
        return ServerDictionaries(self.path, self._dictionary_place, self._dictionary_body)

    def _dictionary_place(self, dict_id: int) -> str:
        return f"the row (journal {self._name!r}, id {dict_id}) of table {self._schema}.{TABLE}"

    def _dictionary_table(self) -> sql.Composed:
        return sql.SQL("{}").format(sql.Identifier(self._schema, TABLE))

    def _has_dictionary_table(self, rows: list[tuple[object, ...]]) -> bool:
        return bool(rows and rows[0][0])

    def _dictionary_body(self, dict_id: int, conn: Conn | None = None) -> bytes | None:
        """The stored body of dictionary ``dict_id`` (on the reader's connection, or ``conn``);
        None when there is none; a body too long to be one is left unread."""
        exists = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL"
        body = sql.SQL(
            "SELECT CASE WHEN length(body) <= %s THEN body END, length(body) FROM {} WHERE journal = %s AND id = %s"
        ).format(self._dictionary_table())
        if conn is None:
            if not self._has_dictionary_table(self._query(exists, (self._schema, TABLE))):
                return None
            rows = self._query(body, (STORED_DICTIONARY_BYTES_MAX, self._name, dict_id))
        else:
            if not self._has_dictionary_table(conn.execute(exists, (self._schema, TABLE)).fetchall()):
                return None
            rows = conn.execute(body, (STORED_DICTIONARY_BYTES_MAX, self._name, dict_id)).fetchall()
        if not rows:
            return None
        if rows[0][0] is None:
            raise dictionaries.too_large(dict_id, int(rows[0][1]))
        return bytes(rows[0][0])

    def dictionaries(self) -> list[Dictionary]:
        """The journal's stored dictionaries that verify, by id (``journal copy`` carries them)."""
        self._check_open()
        exists = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL"
        if not self._has_dictionary_table(self._query(exists, (self._schema, TABLE))):
            return []
        query = sql.SQL("SELECT id FROM {} WHERE journal = %s ORDER BY id").format(self._dictionary_table())
        ids = [int(r[0]) for r in self._query(query, (self._name,))]
        return dictionaries.verified(ids, self._dictionary_body)

    def _install_dictionary(self, conn: Conn, d: Dictionary) -> int:
        """Store ``d`` for this journal (unless it holds it: journal/remote/dictionaries.py's
        rule) on ``conn``, the open's connection, which holds the writer lock; the id its frames
        carry. Committed (and flushed to the WAL) when this returns."""
        table = self._dictionary_table()

        def ids() -> list[int]:
            exists = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL"
            if not self._has_dictionary_table(conn.execute(exists, (self._schema, TABLE)).fetchall()):
                return []
            rows = conn.execute(
                sql.SQL("SELECT id FROM {} WHERE journal = %s ORDER BY id").format(table), (self._name,)
            ).fetchall()
            return [int(r[0]) for r in rows]

        def store(dict_id: int, body: bytes) -> None:
            with conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = on")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._schema_key,))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (journal text NOT NULL, id integer NOT NULL, "
                        "body bytea NOT NULL, PRIMARY KEY (journal, id))"
                    ).format(table)
                )
                conn.execute(
                    sql.SQL("INSERT INTO {} (journal, id, body) VALUES (%s, %s, %s)").format(table),
                    (self._name, dict_id, body),
                )

        return dictionaries.install(d, ids, lambda i: self._dictionary_body(i, conn), store)
