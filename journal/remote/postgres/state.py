"""A PostgreSQL journal's state, declared once: what its parts (claim, writer, reader, retention) share.

PostgresJournal (journal.py) is this class with the parts' methods mixed in; each part is a
file of its own that reads and changes the attributes declared here. The few helpers every part
calls (connecting, the checks that the handle is open or writable, fail-stop) are here too.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from urllib.parse import parse_qsl, urlsplit

from journal.api import RecoveryReport
from journal.engine.dictionary import DictionaryCache
from journal.engine.encoding import Encoded
from journal.engine.options import Options
from journal.errors import InvalidArgumentError, JournalClosedError, JournalFailStoppedError, ReadOnlyError
from journal.remote.group import GroupCommit
from journal.remote.handle import ServerHandle
from journal.remote.postgres.commit import StoreWriter, _Writer
from journal.remote.postgres.connection import Conn, _hash64, _Queries, connect, writer_lock_key
from journal.remote.postgres.errors import _words
from journal.remote.url import RemoteURL


class JournalState(ServerHandle):
    """The state of a journal in a PostgreSQL table (journal.py composes the parts over it)."""

    _dicts: DictionaryCache  # the journal's dictionaries, for every decode (dictionaries.py; set by open)

    def __init__(
        self,
        parsed: RemoteURL,
        schema: str,
        readonly: bool,
        shared: bool,
        options: Options,
        connect_timeout_s: float,
        shared_lock_timeout_s: float,
        store_writer: StoreWriter | None = None,
    ) -> None:
        if parsed.journal is None:
            raise InvalidArgumentError("a journal URL names its journal (?journal=NAME)")
        self._url = parsed
        self._name: str = parsed.journal
        self._schema = schema
        self._path = parsed.display()  # its schema among its parameters
        self._readonly = readonly
        self._shared = shared
        self.options = options
        self._connect_timeout_s = connect_timeout_s
        self._shared_lock_timeout_s = shared_lock_timeout_s
        self._q = _Queries(schema)
        self._lock_key = writer_lock_key(schema, self._name)
        self._append_key = _hash64("journal-append", schema, self._name)
        self._schema_key = _hash64("journal-schema", schema)
        self._channel = "journal_" + hashlib.blake2b(f"{schema}\x00{self._name}".encode(), digest_size=8).hexdigest()
        query = dict(parse_qsl(urlsplit(parsed.server).query))
        self._app_name_given = "application_name" in query
        self._mu = threading.Lock()
        # The writer's connection and group commit (every write, and the writer lock): this
        # handle's own, or the one its store's journals share (``store_writer``).
        self._writer: _Writer | None = None
        self._store_writer = store_writer
        self._detached = False  # a store journal that let go of its lock: nothing more is written
        self._reader: Conn | None = None  # reads, point reads, resolve
        self._reader_mu = threading.Lock()
        self._calls = itertools.count(1)
        self._journal_id = b""
        self._salt = 0
        self._first_seq = 1
        self._committed = 0  # the last seq in the table as this handle knows it
        self._buffer: list[tuple[int, Encoded]] = []  # buffered records, in seq order
        self._buffer_bytes = 0
        self._unsynced = True  # commits at "flush" (here, or by the writer before) may await the WAL flush
        self._failed: str | None = None
        self._holds_lock = False  # a store journal: its lock on the shared writer connection
        self._closed = False
        self._fsync_on = True
        self._sync_setting = "on"
        self._recovery = RecoveryReport(tail="clean")

    @property
    def path(self) -> str:
        """The journal's URL, without a password."""
        return self._path

    def _connect(self) -> Conn:
        return connect(self._url.server, self._connect_timeout_s, self._app_name_given, self.path)

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    def _check_writable(self, what: str = "append") -> None:
        if self._closed:
            raise JournalClosedError()
        if self._readonly:
            raise ReadOnlyError(what)
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)

    def _lose_writer(self, exc: BaseException) -> None:
        why = f"the connection to the server was lost, and this writer's lock with it ({_words(exc)})"
        if self._writer is not None:
            self._writer.lose(why)
        else:
            self._fail_stop(why)

    def _gc(self) -> GroupCommit:
        w = self._writer
        if w is None:
            raise JournalClosedError()
        return w.gc

    def _fail_stop(self, why: str) -> None:
        with self._mu:
            if self._failed is None:
                self._failed = why
