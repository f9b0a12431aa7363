"""The state one journal handle on NATS keeps, declared once for the parts that use it (the
stream, the claim, catch-up, the writers, the reader, retention: each a class of its own
file that JetStreamJournal composes), and the few calls every part makes.
"""

from __future__ import annotations

import concurrent.futures
import secrets
import threading
from array import array
from collections.abc import Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from journal.api import RecoveryReport
from journal.engine.dictionary import DictionaryCache
from journal.engine.encoding import Encoded
from journal.errors import (
    InvalidArgumentError,
    JournalClosedError,
)
from journal.outcomes import Durability, Outcome
from journal.record import Record
from journal.remote.dictionaries import ServerDictionaries
from journal.remote.group import GroupCommit
from journal.remote.handle import ServerHandle
from journal.remote.jetstream.connection import _T, _Conn, _Loop
from journal.remote.jetstream.headers import _StoredMsg, subject_base, subject_token
from journal.remote.jetstream.limits import RECOVERY_NOTES_MAX, SYNC_REPLICAS_MIN
from journal.remote.jetstream.settings import Settings
from journal.remote.url import RemoteURL


class _State(ServerHandle):
    """A journal handle's state; the parts of JetStreamJournal are its subclasses. readonly,
    recovery, writer_mode and ``with`` come from ServerHandle (both server backends' own)."""

    def __init__(
        self,
        parsed: RemoteURL,
        readonly: bool,
        settings: Settings,
        shared: bool = False,
    ) -> None:
        name = parsed.journal
        if name is None:
            raise InvalidArgumentError(f"{parsed.display()} names no journal: add ?journal=NAME")
        self._parsed = parsed
        self._where = parsed.display()
        self._readonly = readonly
        stream = settings.stream
        self._stream = stream
        self._replicas_asked = settings.replicas
        self._replicas_given = settings.replicas_given  # else a new stream may fall back (limits.py)
        self._connect_timeout_s = settings.connect_timeout_s
        self._ack_timeout_s = settings.ack_timeout_s
        self._claim_ttl_s = settings.claim_ttl_s
        self._name = name
        self._token = subject_token(name)
        base = subject_base(stream)
        self._subjects = [f"{base}.>", f"{base}-meta.>"]
        self._subject = f"{base}.{self._token}"
        self._meta_subject = f"{base}-meta.{self._token}"
        self._bucket = f"{stream}_LOCKS"
        self._claim_subject = f"$KV.{self._bucket}.{self._token}"
        self._options = settings.options
        # The journal's dictionaries, for every decode (dictionaries.py; loaded on first use).
        self._dicts: DictionaryCache = ServerDictionaries(self._where, self._dictionary_place, self._dictionary_body)
        self._recovery = RecoveryReport()
        self._conn: _Conn | None = None
        self._shares_conn = False  # a reference to a shared connection (_Conn.shared), given back at close
        self._replicas = 0
        # Whether the stream's server is part of a cluster (its STREAM.INFO names one): taken as
        # clustered until the stream says otherwise, so "sync" is refused rather than weakened.
        self._clustered = True
        self._single_node_meant = settings.replicas_given and settings.replicas == 1
        self._payload_max = 0
        self._journal_id = b""
        self._salt = 0
        self._first_seq = 1
        self._meta: dict[str, Any] = {}  # the journal's metadata message as read (or last written)
        self._meta_sseq = 0  # its stream sequence
        # Per message of the journal, in order: its first seq and its stream sequence.
        self._idx_first = array("Q")
        self._idx_sseq = array("Q")
        self._last_sseq = 0  # stream sequence of the journal's last message (a fence included)
        self._last_digest = ""  # its message_digest: the next message names it (Journal-Prev)
        self._disowned: set[int] = set()  # messages a read from the leader dropped (_LeaderCheck)
        self._stored_seq = 0  # the highest seq in the stream (as this handle knows)
        self._next_seq = 1
        self._keys: dict[str, tuple[int, int]] = {}  # idempotency key -> (seq, payload digest)
        self._inflight: dict[str, threading.Event] = {}  # keys of records on their way
        self._buffer: list[tuple[int, Encoded]] = []
        self._buffer_bytes = 0
        self._mu = threading.Lock()  # the state above
        self._wmu = threading.Lock()  # one write on the wire at a time (the chain of expected sequences)
        self._failed: str | None = None
        self._closed = False
        self._claim_rev = 0
        self._claim_token = secrets.token_hex(8)
        self._claim_lost = False
        self._claim_task: concurrent.futures.Future[None] | None = None
        # writer="shared": several handles append, each batch chained on what this one last saw
        # and, when another appended first, caught up and published again (_shared_write).
        self._shared = shared and not readonly
        self._shared_lock_timeout_s = settings.shared_lock_timeout_s
        self._claim_kind = ""  # the claim this handle holds now: "exclusive", "shared" or none
        self._live_subject = f"{self._claim_subject}.{self._claim_token}"  # a shared writer's presence
        self._opened = False  # the open is over: an exclusive writer's fence seen after it is a takeover
        self._fenced_out = 0  # stream sequence of such a fence (a shared writer then fail-stops)
        self._refusals = 0  # shared publishes refused: another writer had appended first
        self._lost_races = 0  # shared publishes stored after another chained on the same message
        self._group = GroupCommit(self._group_write)

    def _call(self, coro: Coroutine[Any, Any, _T], timeout_s: float) -> _T:
        return _Loop.call(coro, timeout_s + 5.0)

    def _api(self, subject: str, req: dict[str, Any] | None) -> dict[str, Any]:
        conn = self._c()
        return self._call(conn.api(subject, req, self._ack_timeout_s), self._ack_timeout_s)

    def _c(self) -> _Conn:
        if self._conn is None:
            raise JournalClosedError()
        return self._conn

    def _where_msg(self, sseq: int) -> str:
        return f"{self._where} (stream {self._stream}, message {sseq})"

    def _note(self, action: str) -> None:
        """Say ``action`` in the recovery report, once, and no more than RECOVERY_NOTES_MAX of them
        (a long-lived handle reads the same divergence again on every read)."""
        actions = self._recovery.actions
        if action not in actions and len(actions) < RECOVERY_NOTES_MAX:
            actions.append(action)

    def _fail(self, why: str) -> None:
        with self._mu:
            if self._failed is None:
                self._failed = why

    def _sync_ok(self) -> bool:
        """Whether "sync" is taken: a stream of SYNC_REPLICAS_MIN replicas or more on a cluster, or
        any stream of a server that is not clustered (there it means that server's disk)."""
        return self._replicas >= SYNC_REPLICAS_MIN or not self._clustered

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError()

    if TYPE_CHECKING:  # what one part calls of another, declared for mypy; each is defined in the file named

        # stream.py
        def _read_meta(self) -> tuple[dict[str, Any], int] | None: ...
        def _open_meta(self, create: bool) -> bool: ...
        def _set_meta(self, meta: dict[str, Any], sseq: int) -> None: ...
        def _publish_meta(self, meta: dict[str, Any], expect_sseq: int) -> int: ...
        def _purge(self, subject: str, before_sseq: int = 0, keep: int = 0) -> int: ...

        # dictionaries.py
        def _dictionary_place(self, dict_id: int) -> str: ...
        def _dictionary_body(self, dict_id: int) -> bytes | None: ...
        def _purge_dictionaries(self) -> int: ...

        # claim.py
        def _ensure_bucket(self) -> None: ...
        def _claim_value(self, state: str, clean: bool = True, **more: Any) -> bytes: ...
        def _take_claim(self, lock_timeout_s: float, open_deadline: float, creating: bool = False) -> bool: ...
        async def _claim_write(self, conn: _Conn, value: bytes, chained: int) -> int: ...
        def _release_claim(self, clean: bool) -> None: ...
        def _fence(self) -> None: ...
        async def _refresh_shared(self) -> None: ...
        def _leave_shared(self, clean: bool) -> None: ...

        # catch_up.py
        def _subject_last(self) -> _StoredMsg | None: ...
        def _messages(self, start_sseq: int, end_sseq: int | None = None) -> Iterator[_StoredMsg]: ...
        def _leader_messages(self, start_sseq: int, end_sseq: int, prev_sseq: int = 0,
                             prev_digest: str = "") -> Iterator[_StoredMsg]: ...
        def _leader_copy(self, sseq: int) -> _StoredMsg | None: ...
        def _known_before(self, start_sseq: int) -> tuple[int, str]: ...
        def _catch_up(self, start_sseq: int = 0) -> int: ...
        def _catch_up_shared(self) -> int: ...
        def _catch_up_io(self) -> None: ...
        def _verified(self, msgs: Iterable[_StoredMsg], expect: int,
                      prev_sseq: int | None = None) -> Iterator[tuple[_StoredMsg, list[Record]]]: ...
        def _refresh_first_io(self) -> None: ...
        def _advance_first(self, first_seq: int) -> None: ...
        def _won(self, sseq: int, chained: int) -> bool: ...
        def _peek(self, seq: int) -> Record | None: ...

        # writer.py and shared_writer.py
        def _reported(self, level: Durability) -> Durability: ...
        def _group_write(self, items: list[Encoded], level: Durability) -> list[Outcome]: ...
        def _publish_run(self, run: list[tuple[int, Encoded]], reported: Durability) -> list[Outcome] | None: ...
        def _shared_write(self, items: list[Encoded], level: Durability) -> list[Outcome]: ...
        def flush(self) -> None: ...

        # reader.py
        def get(self, seq: int) -> Record | None: ...
