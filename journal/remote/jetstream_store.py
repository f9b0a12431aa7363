"""A stream of journals on NATS JetStream: the ``journal.api.Store`` of ``nats://...`` URLs.

    store = journal.store("nats://127.0.0.1:4222?stream=AGENTS&replicas=3")
    with store.open("t-42", create=True) as j: ...

The journals are those of one stream (``stream``, default JOURNAL; journal/remote/jetstream.py
says how a journal lies in it): a journal exists while its metadata subject holds a message, so
the metadata message is the commit point of every change to the set of journals, and each
operation is whole or absent after a crash:

- ``open(create=True)``: the writer's open takes the journal's claim, purges whatever a delete
  or a copy cut short left on its records subject, and only then publishes the metadata
  message (expected last subject sequence 0, so two makers cannot both succeed);
- ``delete``: under the journal's claim (``JournalLockedError`` while a writer holds it), the
  metadata subject is purged first (from then on the journal is gone), then the records
  subject. A crash between the two leaves records no journal names, which the next maker of
  that name purges before its metadata exists;
- ``copy``: under the target's claim, every record of the source (up to ``upto_seq``) is published on the target's
  subject, a message per message of the source, each frame sealed again under the target's
  own new journal id (``Nats-Msg-Id`` holds the journal id, so copies under the source's id
  would be dropped by the server's duplicate window as repeats), chained by expected subject
  sequence; the target's metadata message is published last, the commit point. Idempotency
  keys live in the frames, so they come along. The records to ``append`` (a fork's header) go
  in one message after them, before the metadata. The copy is the source's records as they
  were when it began to read them.

``catalog(name)`` (``JetStreamCatalog``): small JSON values by key, a subject each in the stream
``KV_<stream>_CATALOG``: the session store's index on this server.

``names()`` lists the metadata subjects (STREAM.INFO with a ``subjects_filter``, paged). Names
are checked as on files (``journal.engine.store.check_store_name``), so an adapter's names are
valid on every backend. Every operation retries what JetStream answers while a leader is being
elected, up to ``connect_timeout_s``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, TypeVar

from journal.errors import MissingExtraError

try:
    import nats.errors
except ImportError as exc:  # the extra is not installed
    raise MissingExtraError(__name__, "nats-py 2.6 or later", "nats", exc) from exc

from journal.api import CATALOG_VALUE_BYTES_MAX, Journal, JournalNotFoundError, Record
from journal.engine import format as fmt
from journal.engine.encoding import Encoded, encode_event
from journal.engine.store import check_store_name, check_upto
from journal.errors import InvalidArgumentError
from journal.remote import catalog_value, jetstream, records
from journal.remote.jetstream import (
    ERR_STREAM_NOT_FOUND,
    ERR_WRONG_LAST_SEQ,
    H_COUNT,
    H_EXPECT_STREAM,
    H_EXPECT_SUBJECT_SEQ,
    H_MSG_ID,
    H_SEQ,
    JetStreamJournal,
    _Conn,
    _io_error,
    _Loop,
    _Lost,
    _Refused,
    _servers_of,
    _StoredMsg,
    chain_headers,
    chain_id,
    message_digest,
    name_of_token,
    subject_base,
    subject_token,
)
from journal.remote.url import RemoteURL

if TYPE_CHECKING:
    from journal.api import Store

_T = TypeVar("_T")

CATALOG_UPDATE_TRIES: Final = 64  # updates of one key that lost the race to another updater, then an error
CATALOG_GETS_IN_FLIGHT: Final = 256  # a listing's reads of values, sent at once
RETRY_PAUSE_S: Final = 0.1  # between two tries of an operation JetStream did not serve (a leader election)
OPEN_KEYWORDS: Final = ("lock_timeout_s", "writer", "dictionary")  # open_journal's own, passed through by open()


def reframe(m: _StoredMsg, recs: list[Record], salt_from: int, salt_to: int) -> bytes:
    """The frames of ``recs`` (verified records of message ``m``) sealed again with ``salt_to``:
    the same seq, flags, lengths and stored payload, so the same bytes a reader gets back."""
    wanted = {r.seq for r in recs}
    out: list[bytes] = []
    pos = 0
    body = m.data
    while pos < len(body):
        got = fmt.verify_frame(body, pos, salt_from)
        if got is None:  # verified a moment ago by the source's reader
            raise InvalidArgumentError(f"message {m.sseq} changed while it was copied")
        if got.seq in wanted:
            stored = bytes(body[got.offset + fmt.FRAME_HEADER_SIZE_BYTES : got.end])
            out.append(fmt.encode_frame(got.seq, got.flags, got.raw_len, stored, salt_to, got.dict_id))
        pos = got.end
    return b"".join(out)


class JetStreamStore:
    """The journals of one JetStream stream; see the module doc."""

    def __init__(self, parsed: RemoteURL, **options: Any) -> None:
        self._url = parsed
        self._options = options
        self._settings = jetstream.settings_of(parsed, {k: v for k, v in options.items() if k not in OPEN_KEYWORDS})
        self._meta_prefix = f"{subject_base(self._settings.stream)}-meta."
        self._mu = threading.Lock()
        self._conn: _Conn | None = None

    @property
    def location(self) -> str:
        return self._url.display()

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
        target = self._url.with_journal(check_store_name(name))
        return jetstream.open_journal(target, create=create, readonly=readonly, **{**self._options, **options})

    def exists(self, name: str) -> bool:
        check_store_name(name)

        def look(j: JetStreamJournal) -> bool:
            return self._stream_there(j) and self._has_meta(j)

        return self._run(name, look, "looking up")

    def names(self) -> list[str]:
        def listing() -> list[str]:
            conn = self._connection()
            subjects: dict[str, int] = {}
            while True:
                req = {"subjects_filter": self._meta_prefix + ">", "offset": len(subjects)}
                try:
                    info = self._call(conn.api(f"$JS.API.STREAM.INFO.{self._settings.stream}", req,
                                               self._settings.ack_timeout_s))
                except _Refused as exc:
                    if exc.err_code == ERR_STREAM_NOT_FOUND:
                        return []
                    raise
                page = (info.get("state") or {}).get("subjects") or {}
                before = len(subjects)
                subjects.update(page)
                total = int(info.get("total", 0) or 0)
                if len(subjects) == before or len(subjects) >= total:
                    break
            out = []
            for subject in subjects:
                token = subject[len(self._meta_prefix) :]
                if "." in token:
                    continue  # a journal's dictionary (<meta subject>.dict.<id>): a token never holds a dot
                name = name_of_token(token)
                try:
                    out.append(check_store_name(name))
                except InvalidArgumentError:
                    continue  # a journal opened by URL under a name no store gives out
            return sorted(out)

        return self._retrying(listing, None, "listing the journals of")

    def delete(self, name: str) -> None:
        check_store_name(name)

        def deleting(j: JetStreamJournal) -> None:
            if not self._stream_there(j):
                return
            if not self._has_meta(j) and self._first_msg(j, j._subject) is None:
                return  # gone, and nothing left behind
            j._take_claim(0.0, time.monotonic())  # JournalLockedError while a writer holds it
            j._purge(j._meta_subject)  # the commit point: from here the journal is gone
            j._purge(j._subject)
            j._purge_dictionaries()

        self._run(name, deleting, "deleting")

    def copy(
        self, source: str, target: str, *, upto_seq: int | None = None, append: Sequence[Any] = ()
    ) -> None:
        check_store_name(source)
        check_store_name(target)
        where_source = self._url.with_journal(source).display()
        encoded = [encode_event(e, None, False, self._settings.options) for e in append]  # refused before any publish

        def copying(dst: JetStreamJournal) -> None:
            if not self._stream_there(dst):
                raise JournalNotFoundError(where_source)
            if self._has_meta(dst):
                raise FileExistsError(f"journal {target!r} exists in {self.location}; delete it before copying onto it")
            src = jetstream.open_journal(self._url.with_journal(source), create=False, readonly=True,
                                         **self._journal_options())
            with src:
                upto = check_upto(where_source, src.first_seq, src.last_seq, upto_seq)
                dst._take_claim(0.0, time.monotonic())  # JournalLockedError if the target is being made
                dst._keep_claim()  # a long copy keeps it
                if self._has_meta(dst):
                    raise FileExistsError(f"journal {target!r} was made in {self.location} while it was copied onto")
                dst._purge(dst._subject)  # what a copy or a delete cut short left there
                dst._purge_dictionaries()
                self._copy_records(src, dst, upto, encoded)

        self._run(target, copying, "copying onto")

    def catalog(self, name: str) -> JetStreamCatalog:
        return JetStreamCatalog(self, check_store_name(name))

    # --- helpers ---------------------------------------------------------------------------

    def _copy_records(self, src: JetStreamJournal, dst: JetStreamJournal, upto: int, appended: list[Encoded]) -> None:
        """The records of ``src`` up to seq ``upto`` onto ``dst``'s subject under a new journal
        id, then ``appended`` in one message after them, then ``dst``'s metadata message (the
        commit point)."""
        new_id = records.new_journal_id()
        salt = records.salt_of(new_id)
        start, expect = src._start_of(0)
        last_sseq = first_sseq = 0
        last_digest = ""
        conn = dst._c()
        timeout_s = self._settings.ack_timeout_s

        def publish(first: int, count: int, body: bytes) -> None:
            nonlocal last_sseq, first_sseq, last_digest
            headers = {
                H_SEQ: str(first),
                H_COUNT: str(count),
                H_MSG_ID: chain_id(new_id, last_sseq),
                H_EXPECT_STREAM: self._settings.stream,
                **chain_headers(last_sseq, last_digest),
            }
            ack = self._call(conn.publish(dst._subject, body, headers, timeout_s))
            last_sseq, last_digest = int(ack["seq"]), message_digest(headers, body)
            first_sseq = first_sseq or last_sseq

        if upto >= src.first_seq:
            for m, recs in src._verified(src._messages(start), expect):
                recs = [r for r in recs if r.seq <= upto]
                if recs:  # not a fence, nor a message below the source's first seq
                    publish(recs[0].seq, len(recs), reframe(m, recs, src._salt, salt))
                if recs and recs[-1].seq >= upto:
                    break
        if appended:
            body = b"".join(records.frame_of(enc, upto + i, salt) for i, enc in enumerate(appended, 1))
            publish(upto + 1, len(appended), body)
        for dict_id in src._dictionary_ids():  # the frames copied name them: stored before the commit point
            got = src._dictionary_body(dict_id)
            if got is not None:
                self._call(conn.publish(dst._dictionary_subject(dict_id), got,
                                        {H_EXPECT_SUBJECT_SEQ: "0", H_EXPECT_STREAM: self._settings.stream}, timeout_s))
        dst._publish_meta(dst._new_meta(new_id, src.first_seq, first_sseq), 0)

    def _journal_options(self) -> dict[str, Any]:
        return {k: v for k, v in self._options.items() if k not in OPEN_KEYWORDS}

    def _call(self, coro: Any) -> Any:
        return _Loop.call(coro, self._settings.ack_timeout_s + 5.0)

    def _connection(self) -> _Conn:
        with self._mu:
            conn = self._conn
            if conn is None or conn.nc.is_closed:
                timeout_s = self._settings.connect_timeout_s
                servers = _servers_of(self._url)
                try:
                    conn = _Conn.shared(servers, timeout_s)  # the one its journals' handles use too
                except (OSError, asyncio.TimeoutError, nats.errors.Error, _Lost) as exc:
                    raise _io_error(self.location, f"cannot reach a NATS server at {', '.join(servers)} within "
                                    f"{timeout_s:g} s; check that nats-server is running (with JetStream, -js)",
                                    exc) from exc
                self._conn = conn
                weakref.finalize(self, conn.release, False)  # without waiting: any thread, the loop's too
            return conn

    @contextmanager
    def _control(self, name: str) -> Iterator[JetStreamJournal]:
        j = JetStreamJournal._control(self._url.with_journal(name), self._settings, self._connection())
        done = False
        try:
            yield j
            done = True
        finally:
            j._detach(clean=done)

    def _run(self, name: str, op: Callable[[JetStreamJournal], _T], doing: str) -> _T:
        def once() -> _T:
            with self._control(name) as j:
                return op(j)

        return self._retrying(once, name, doing)

    def _retrying(self, fn: Callable[[], _T], name: str | None, doing: str, writes: bool = False) -> _T:
        """``fn()``, tried again while JetStream does not serve (no leader yet), up to connect_timeout_s.

        ``writes``: ``fn`` changes something, so a request whose answer was lost (``_Lost``) may
        have been applied, and the error says so rather than that nothing changed."""
        deadline = time.monotonic() + self._settings.connect_timeout_s
        lost = False
        while True:
            try:
                return fn()
            except (_Refused, _Lost) as exc:
                lost = lost or isinstance(exc, _Lost)
                if time.monotonic() >= deadline:
                    where = self._url.with_journal(name).display() if name is not None else self.location
                    advice = (
                        "The change may have been stored before its answer was lost, or not; read it "
                        "again, or repeat the call once the NATS servers answer (repeating it is safe)"
                        if writes and lost else None
                    )
                    raise _io_error(where, f"JetStream did not serve stream {self._settings.stream!r} within "
                                    f"{self._settings.connect_timeout_s:g} s", exc, doing=doing,
                                    advice=advice) from exc
                time.sleep(RETRY_PAUSE_S)

    @staticmethod
    def _stream_there(j: JetStreamJournal) -> bool:
        try:
            j._open_stream(False)
        except JournalNotFoundError:
            return False
        return True

    def _has_meta(self, j: JetStreamJournal) -> bool:
        return self._first_msg(j, j._meta_subject) is not None

    def _first_msg(self, j: JetStreamJournal, subject: str) -> _StoredMsg | None:
        got: _StoredMsg | None = self._call(
            j._c().get_msg(self._settings.stream, {"seq": 1, "next_by_subj": subject}, self._settings.ack_timeout_s)
        )
        return got


class JetStreamCatalog:
    """A ``journal.api.Catalog`` on JetStream: a subject per key in the stream
    ``KV_<stream>_CATALOG`` (one message per subject kept, the latest), a value per message.

    ``put`` publishes; ``update`` reads the key's last message and publishes the merged value
    with the expected last subject sequence of what it read and a message id made of it (see
    ``_publish`` for why both), reading again when another updater moved first; ``delete``
    purges the subject; ``items`` lists the subjects (STREAM.INFO with a
    filter, paged) and reads their values, up to CATALOG_GETS_IN_FLIGHT at once. Each change is
    acknowledged once the stream's replicas stored it.
    """

    def __init__(self, store: JetStreamStore, name: str) -> None:
        self._store = store
        settings = store._settings
        bucket = f"{settings.stream}_CATALOG"
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}.{subject_token(name)}."
        self._name = name
        self._made = False

    def get(self, key: str) -> dict[str, Any] | None:
        subject = self._subject(key)
        return self._retrying(lambda: self._read(subject)[0], key, "reading", writes=False)

    def put(self, key: str, value: dict[str, Any]) -> None:
        subject, body = self._subject(key), catalog_value.encode(value)
        self._retrying(lambda: self._publish(subject, body, None), key, "writing", writes=True)

    def update(self, key: str, fields: dict[str, Any]) -> bool:
        subject = self._subject(key)
        catalog_value.encode(fields)  # refused before anything is sent

        def updating() -> bool:
            for _ in range(CATALOG_UPDATE_TRIES):
                value, sseq = self._read(subject)
                if value is None:
                    return False
                try:
                    ack = self._publish(subject, catalog_value.encode({**value, **fields}), sseq)
                except _Refused as exc:
                    if exc.err_code in ERR_WRONG_LAST_SEQ:
                        continue  # another updater moved first: merge into what it wrote
                    raise
                if ack.get("duplicate"):
                    continue  # another updater that read the same value published first
                return True
            raise InvalidArgumentError(f"catalog {self._name!r} key {key!r} was updated by others "
                                       f"{CATALOG_UPDATE_TRIES} times while this update tried; try again")

        return self._retrying(updating, key, "updating", writes=True)

    def delete(self, key: str) -> None:
        subject = self._subject(key)

        def deleting() -> None:
            self._ensure()
            self._store._call(self._store._connection().api(
                f"$JS.API.STREAM.PURGE.{self._stream}", {"filter": subject}, self._store._settings.ack_timeout_s))

        self._retrying(deleting, key, "deleting from", writes=True)

    def items(self) -> list[tuple[str, dict[str, Any]]]:
        def listing() -> list[tuple[str, dict[str, Any]]]:
            self._ensure()
            conn = self._store._connection()
            timeout_s = self._store._settings.ack_timeout_s
            subjects: dict[str, int] = {}
            while True:
                req = {"subjects_filter": self._prefix + ">", "offset": len(subjects)}
                info = self._store._call(conn.api(f"$JS.API.STREAM.INFO.{self._stream}", req, timeout_s))
                page = (info.get("state") or {}).get("subjects") or {}
                before = len(subjects)
                subjects.update(page)
                if len(subjects) == before or len(subjects) >= int(info.get("total", 0) or 0):
                    break
            names = sorted(subjects)
            got: list[_StoredMsg | None] = []
            for i in range(0, len(names), CATALOG_GETS_IN_FLIGHT):
                chunk = names[i : i + CATALOG_GETS_IN_FLIGHT]

                async def reads(chunk: list[str] = chunk) -> list[_StoredMsg | None]:
                    return list(await asyncio.gather(*(
                        conn.get_msg(self._stream, {"last_by_subj": s}, timeout_s) for s in chunk)))

                got.extend(self._store._call(reads()))
            out = [(name_of_token(m.subject[len(self._prefix) :]), catalog_value.decode(m.data))
                   for m in got if m is not None]
            return sorted(out)

        return self._retrying(listing, None, "listing", writes=False)

    # --- helpers ---------------------------------------------------------------------------

    def _subject(self, key: str) -> str:
        return self._prefix + subject_token(check_store_name(key))

    def _read(self, subject: str) -> tuple[dict[str, Any] | None, int]:
        self._ensure()
        store = self._store
        m: _StoredMsg | None = store._call(store._connection().get_msg(
            self._stream, {"last_by_subj": subject}, store._settings.ack_timeout_s))
        return (None, 0) if m is None else (catalog_value.decode(m.data), m.sseq)

    def _publish(self, subject: str, body: bytes, expect_sseq: int | None) -> dict[str, Any]:
        """Publish a value; with ``expect_sseq``, only over the message at that stream sequence.

        The expected last subject sequence alone does not settle two updaters racing on a
        replicated stream: a 2.9 server checks it before the proposal, against what is applied,
        so two publishes in flight that read the same value can both be stored (seen here on a
        3-node cluster, every round of 8 racers). The message id made of the subject and the
        sequence read is checked by the stream leader in order, in flight included: the second
        racer's publish is answered as a duplicate and stores nothing."""
        self._ensure()
        store = self._store
        headers = {H_EXPECT_STREAM: self._stream}
        if expect_sseq is not None:
            headers[H_EXPECT_SUBJECT_SEQ] = str(expect_sseq)
            headers[H_MSG_ID] = f"{subject}@{expect_sseq}"
        ack: dict[str, Any] = store._call(store._connection().publish(subject, body, headers,
                                                                      store._settings.ack_timeout_s))
        return ack

    def _ensure(self) -> None:
        if self._made:
            return
        store = self._store
        conn = store._connection()
        timeout_s = store._settings.ack_timeout_s
        try:
            store._call(conn.api(f"$JS.API.STREAM.INFO.{self._stream}", None, timeout_s))
        except _Refused as exc:
            if exc.err_code != ERR_STREAM_NOT_FOUND:
                raise
            config = {
                "name": self._stream, "subjects": [f"$KV.{self._stream[3:]}.>"], "retention": "limits",
                "storage": "file", "num_replicas": max(store._settings.replicas, 1), "discard": "old",
                "max_msgs": -1, "max_bytes": -1, "max_age": 0, "max_msgs_per_subject": 1,
                "max_msg_size": CATALOG_VALUE_BYTES_MAX, "allow_rollup_hdrs": True, "deny_delete": True,
                "allow_direct": True,
            }
            try:
                store._call(conn.api(f"$JS.API.STREAM.CREATE.{self._stream}", config, timeout_s))
            except _Refused:
                store._call(conn.api(f"$JS.API.STREAM.INFO.{self._stream}", None, timeout_s))  # made meanwhile
        self._made = True

    def _retrying(self, fn: Callable[[], _T], key: str | None, doing: str, writes: bool) -> _T:
        return self._store._retrying(fn, None, f"{doing} catalog {self._name!r}{f' key {key!r}' if key else ''} of",
                                     writes=writes)


def open_store(parsed: RemoteURL, **options: Any) -> JetStreamStore:
    return JetStreamStore(parsed, **options)


if TYPE_CHECKING:  # mypy holds the store to journal.api's protocol

    def _conforms(s: JetStreamStore) -> Store:
        return s


__all__ = ["JetStreamCatalog", "JetStreamStore", "open_store", "reframe"]
