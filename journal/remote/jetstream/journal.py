"""The Journal on NATS JetStream: the class that composes the parts (stream, claim, catch-up,
writers, reader, retention), its open and close, and open_journal.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from journal.api import Journal, RecoveryReport, Retention
from journal.engine.dictionary import Dictionary
from journal.errors import (
    InvalidArgumentError,
    JournalFailStoppedError,
    JournalNotFoundError,
)
from journal.remote import dictionaries
from journal.remote.jetstream.catch_up import _CatchUp
from journal.remote.jetstream.claim import _Claim, _SharedClaim
from journal.remote.jetstream.connection import _Conn
from journal.remote.jetstream.dictionaries import _Dictionaries
from journal.remote.jetstream.errors import SingleNodeSyncWarning, _io_error, _Lost, _Refused
from journal.remote.jetstream.limits import HEADERS_ROOM_BYTES, WRITER_MODES
from journal.remote.jetstream.reader import _Reader
from journal.remote.jetstream.retention import _Retention
from journal.remote.jetstream.settings import Settings, settings_of
from journal.remote.jetstream.shared_writer import _SharedWriter
from journal.remote.jetstream.stream import _Stream
from journal.remote.jetstream.writer import _Writer
from journal.remote.url import RemoteURL


class JetStreamJournal(
    _Retention, _Reader, _SharedWriter, _Writer, _SharedClaim, _Claim, _CatchUp, _Dictionaries, _Stream
):
    """A journal.api.Journal on a JetStream stream; see journal/remote/jetstream/__init__.py and
    docs/REMOTE.md."""

    def _open(self, create: bool, lock_timeout_s: float, dictionary: Dictionary | None = None) -> None:
        deadline = time.monotonic() + self._connect_timeout_s
        self._connect()
        last: BaseException | None = None
        clean = created = True
        while True:
            try:
                self._open_stream(create)
                if self._shared:
                    created = self._open_shared(create, lock_timeout_s, deadline)
                else:
                    if not self._readonly:
                        # The claim first: a journal is made, copied onto, deleted and written only
                        # under its claim, so what the metadata says cannot change under this open.
                        clean = self._take_claim(lock_timeout_s, deadline)
                    try:
                        created = self._open_meta(create)
                    except JournalNotFoundError:
                        if self._claim_rev:
                            self._release_claim(clean=clean)  # nothing was touched: leave the claim as it was
                        raise
                self._scan_all()
                if not self._readonly:
                    self._purge_dropped()
                if not self._readonly and not self._shared and not created and not clean:
                    self._fence()
                if dictionary is not None:
                    # Acknowledged (on the replicas) before this writer publishes any frame.
                    dict_id = self._install_dictionary(dictionary)
                    self._options = dictionaries.options_with(self._options, dict_id, dictionary)
                    self._recovery.actions.append(f"compresses with dictionary {dict_id}")
                break
            except (_Refused, _Lost) as exc:
                # JetStream answers "temporarily unavailable" or nothing while a stream or the
                # cluster elects a leader: try again until connect_timeout_s.
                last = exc
                if time.monotonic() >= deadline:
                    raise _io_error(
                        self._where,
                        f"JetStream did not serve stream {self._stream!r} within {self._connect_timeout_s:g} s "
                        "(no leader, or JetStream not enabled on the server); check the cluster "
                        "(nats-server -js, a quorum of its servers up), or raise connect_timeout_s",
                        last,
                    ) from exc
                time.sleep(0.1)
        self._recovery = RecoveryReport(
            segments=0,
            last_seq=self._stored_seq,
            live_segment=None,
            live_records=self._stored_seq - self._first_seq + 1,
            tail="empty" if created else "clean",
            actions=self._recovery.actions,
        )
        if not self._readonly:
            self._keep_claim()
            if not self._clustered and not self._single_node_meant:
                warn_single_node(self._parsed.server, self._stream, self._name, self._where)
        self._opened = True

    def _abandon(self, clean: bool = False) -> None:
        """After a failed open: release what the open took (the claim, the connection)."""
        self._closed = True
        if self._claim_rev:
            self._release_claim(clean=clean)
        self._let_go_conn()

    @classmethod
    def _control(cls, parsed: RemoteURL, settings: Settings, conn: _Conn) -> JetStreamJournal:
        """A handle on one journal's place in the stream (its subjects, its claim) for a store's
        operation, on the store's connection: nothing is read or claimed yet. ``_detach`` ends it."""
        j = cls(parsed, False, settings)
        j._conn = conn
        j._payload_max = int(conn.nc.max_payload) - HEADERS_ROOM_BYTES
        return j

    def _detach(self, clean: bool) -> None:
        """The end of a ``_control`` handle: its claim released, the store's connection left open."""
        self._closed = True
        if self._claim_rev:
            self._release_claim(clean=clean)
        self._conn = None

    @property
    def path(self) -> str:
        return self._parsed.url

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def first_seq(self) -> int:
        return self._first_seq

    @property
    def replicas(self) -> int:
        """The stream's replica count (``"sync"`` needs 3 or more on a cluster)."""
        return self._replicas

    def close(self) -> None:
        if self._closed:
            return
        failed_before = self._failed
        try:
            if not self._readonly and self._failed is None:
                try:
                    self._drain("flush")
                except JournalFailStoppedError:
                    pass
        finally:
            self._group.wait_idle()
            with self._wmu:
                self._closed = True
            if not self._readonly:
                self._release_claim(clean=self._failed is None)
            self._let_go_conn()
        if self._failed is not None and failed_before is None:
            raise JournalFailStoppedError(self._failed)

    def __del__(self) -> None:  # a handle dropped without close: let its claim expire, free the socket
        if not getattr(self, "_closed", True) and getattr(self, "_conn", None) is not None:
            task = self._claim_task
            if task is not None:
                task.cancel()


_warned_mu = threading.Lock()
_warned: set[tuple[str, str, str]] = set()  # (servers, stream, journal) a SingleNodeSyncWarning was given for


def warn_single_node(servers: str, stream: str, name: str, where: str) -> None:
    """SingleNodeSyncWarning for a writer's open of journal ``name`` of ``stream`` on ``servers``
    (a server that is not clustered), once per journal and process: a handle opened again, or a
    store's many opens of one journal, say it once."""
    with _warned_mu:
        if (servers, stream, name) in _warned:
            return
        _warned.add((servers, stream, name))
    warnings.warn(
        f"{where}: the NATS server is not clustered, so durability 'sync' on stream {stream!r} (1 replica) means "
        "this one server's disk: an ack says the server wrote the record to its operating system, which the "
        "server syncs to disk on its own policy, JetStream's sync_interval (2 minutes by default; nats-server "
        "2.10 and later take sync_interval: always). A crash of the server process loses nothing acknowledged; "
        "a power loss within that interval can. Fine for development; in production use a cluster of 3 and "
        "replicas=3. Pass replicas=1 (in the URL or as a keyword) to say one server is meant, which silences "
        "this warning",
        SingleNodeSyncWarning,
        stacklevel=3,
    )


def open_journal(
    parsed: RemoteURL,
    create: bool,
    readonly: bool,
    lock_timeout_s: float = 0.0,
    writer: str = "exclusive",
    **options: Any,
) -> JetStreamJournal:
    """Open (with ``create``, make) the journal a nats:// URL names; see docs/REMOTE.md.

    Options (URL parameters or keyword arguments; keywords win): ``stream`` (default JOURNAL),
    ``replicas`` (the stream's and the lock bucket's replicas when this call creates them; given as 1
    on a server that is not clustered, it says one server is meant: no SingleNodeSyncWarning),
    ``connect_timeout_s`` (10), ``ack_timeout_s`` (10: how long a publish's ack is awaited before
    its records are AckLost), ``claim_ttl_s`` (30: the lock bucket's max_age when this call creates
    it; a dead writer's claim expires that long after its last refresh), ``record_size_bytes_max``
    and ``compress`` (the encoding's, as the file engine takes them), ``shared_lock_timeout_s``
    (30: how long a shared writer's batch, refused because another writer appended first,
    catches up and tries again before its records are NotCommitted), ``dictionary`` (a trained
    zstd dictionary a writer publishes at open and compresses with: dictionaries.py; a read-only
    handle ignores it, a shared writer refuses it).

    ``writer="shared"``: several handles (processes) append to the journal; see the package doc
    (journal/remote/jetstream/__init__.py).
    """
    given = options.pop("dictionary", None)
    settings = settings_of(parsed, options)
    dictionary = dictionaries.checked(given, readonly, writer == "shared")
    if create and readonly:
        raise InvalidArgumentError("create=True needs a writable journal; drop readonly=True")
    if writer not in WRITER_MODES:
        raise InvalidArgumentError(f"writer must be 'exclusive' or 'shared', not {writer!r}")
    if isinstance(lock_timeout_s, bool) or not isinstance(lock_timeout_s, (int, float)) or lock_timeout_s < 0:
        raise InvalidArgumentError(f"lock_timeout_s must be a number >= 0, not {lock_timeout_s!r}")
    j = JetStreamJournal(parsed, readonly, settings, shared=writer == "shared")
    try:
        j._open(create, float(lock_timeout_s), dictionary)
    except BaseException:
        j._abandon()
        raise
    return j


if TYPE_CHECKING:  # mypy holds this backend to journal.api's protocols

    def _conforms(j: JetStreamJournal) -> tuple[Journal, Retention]:
        return j, j
