"""The writer connection's group commit: one batch of records, of one journal or many, one transaction.

Life of an append. The caller's thread encodes the event (journal.engine.encoding) and submits
it to the group commit (journal/remote/group.py). The leader takes every queued caller's
records into one transaction on the writer's connection (``_Writer._write``): ``BEGIN`` and
``SET LOCAL synchronous_commit`` (``on`` for "sync", ``off`` for "flush"), one look-up of the
batch's idempotency keys in the table (with the records each journal still buffers), then one
multi-row ``INSERT`` (unnest of arrays) carrying ``pg_notify`` for followers, then ``COMMIT``.
A buffered batch is kept in the client (seqs handed out) until a flush, a sync, a read from
the handle, close, or BUFFER_BYTES_MAX / BUFFER_RECORDS_MAX.

A store's journals share a writer (``StoreWriter``, journal/remote/postgres_store.py): a batch
then holds records of many journals, planned journal by journal (each its own seqs, key
look-ups, buffered records, outcomes and fail-stop), written by one INSERT and one COMMIT.

The journals on a writer are seen through ``Member``: what a batch reads and changes of a
journal's state (state.py declares it; a PostgresJournal is one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from journal.engine import format as fmt
from journal.engine.dictionary import DictionaryCache
from journal.engine.encoding import Encoded
from journal.engine.options import Options
from journal.errors import CorruptionError, InvariantError, JournalError, JournalFailStoppedError
from journal.outcomes import Committed, Durability, NotCommitted, Outcome
from journal.record import Record
from journal.remote import records
from journal.remote.batching import BARRIER, DUP, NEW, Fate, Held, Step, outcomes_of, plan_group
from journal.remote.group import BATCH_BYTES_MAX_DEFAULT, BATCH_RECORDS_MAX_DEFAULT, GroupCommit
from journal.remote.postgres.client import psycopg
from journal.remote.postgres.connection import _BEGIN, _SET_COMMIT, Conn, _Queries, _unusable, reusable, unlock_all
from journal.remote.postgres.errors import CONNECT_ADVICE, ServerIOError, _words

# Buffered records kept in the client before they are written (at "flush") without being asked.
BUFFER_BYTES_MAX: Final = 1024 * 1024
BUFFER_RECORDS_MAX: Final = 4096
BATCH_RECORDS_MAX: Final = BATCH_RECORDS_MAX_DEFAULT  # one transaction; an unkeyed append_many is cut to fit
BATCH_BYTES_MAX: Final = BATCH_BYTES_MAX_DEFAULT


class Member(Protocol):
    """A journal on a writer connection, as its batches see it (state.py's JournalState is one)."""

    options: Options
    _name: str
    _schema: str
    _salt: int
    _channel: str
    _shared: bool
    _shared_lock_timeout_s: float
    _append_key: int
    _mu: threading.Lock
    _committed: int
    _buffer: list[tuple[int, Encoded]]
    _buffer_bytes: int
    _unsynced: bool
    _failed: str | None
    _detached: bool
    _first_seq: int
    _dicts: DictionaryCache

    @property
    def path(self) -> str: ...

    def _connect(self) -> Conn: ...

    def _fail_stop(self, why: str) -> None: ...


# --- the items the group commit carries --------------------------------------------------------


class _Item(Encoded):
    """An encoded record with the call it came from (a conflict refuses a whole call) and the
    journal it goes to (a store's journals share one writer: _Writer)."""

    __slots__ = ("call", "owner")

    def __init__(self, enc: Encoded, call: int, owner: Member) -> None:
        super().__init__(enc.spec, enc.raw, enc.key)
        self.call = call
        self.owner = owner


class _Barrier(Encoded):
    """No record: flush() and sync() queue one to have the buffer written (and synced)."""

    __slots__ = ("call", "owner")

    def __init__(self, call: int, owner: Member) -> None:
        super().__init__(fmt.FrameSpec(0, 0, b""), b"", None)
        self.call = call
        self.owner = owner


class _Op(_Barrier):
    """A barrier that runs ``fn`` on the writer's connection in the leader's turn, so nothing
    else uses the connection meanwhile: ``before`` the batch's transaction (a journal of a
    store taking its writer lock), or after it (drop_prefix, a store journal's unlock at
    close). ``result`` or ``error`` is set once the batch is done."""

    __slots__ = ("before", "error", "fn", "result")

    def __init__(self, call: int, owner: Member, fn: Callable[[Conn], Any], before: bool = False) -> None:
        super().__init__(call, owner)
        self.fn = fn
        self.before = before
        self.result: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(frozen=True)
class _Conflict(NotCommitted):
    """The leader found the call's key held by a different event: the caller raises."""

    key: str = ""
    holder: int | None = None


@dataclass(frozen=True)
class _Raised(NotCommitted):
    """The leader could not plan this journal's part of a batch (a stored row failed its
    check): nothing of it was written, and its callers raise ``error``; the other journals of
    the batch go on."""

    error: BaseException | None = None


@dataclass
class _Part:
    """One journal's records in a batch (positions in the batch, the plan for them)."""

    j: Member
    at: list[int]
    items: list[Encoded]
    base: int = 0
    level: Durability = "flush"
    steps: list[Step] = field(default_factory=list)
    rows: list[tuple[int, Encoded]] = field(default_factory=list)
    new_rows: list[tuple[int, Encoded]] = field(default_factory=list)
    carried: bool = False  # acknowledged buffered records are among rows

    def dup(self) -> bool:
        return any(s.kind == DUP for s in self.steps)


class _Writer:
    """A writer connection and its group commit, for one journal (``journal.open``) or for every
    journal a PostgresStore opens for writing (``shared``): a batch then holds records of many
    journals, planned journal by journal (seqs, idempotency keys, buffers, outcomes), written by
    one multi-row INSERT and one COMMIT (one WAL flush). Each journal's writer lock is held on
    this connection; a store journal lets go of it at close (pg_advisory_unlock).

    Failures. The connection lost (or left in a state it cannot be rolled back from): every
    journal on it fail-stops, since their locks went with it; reopening each tells (resolve()).
    A statement that fails before COMMIT with the connection alive (a constraint violation: a
    row a writer did not know of) is one journal's doing: the batch is rolled back and each
    journal's part is then written in a transaction of its own, so only the journal whose part
    is refused has NotCommitted (and fail-stops, as a lone journal would); the others commit.
    A key held by another event refuses only the call that carries it (IdempotencyConflictError),
    as for a lone journal; a stored row that fails its check refuses that journal's part.
    """

    def __init__(self, conn: Conn, schema: str, sync_setting: str, shared: bool, no_buffer: bool = False) -> None:
        self.conn = conn
        self.shared = shared
        self.no_buffer = no_buffer  # writer="shared": no buffered level
        self.sync_setting = sync_setting
        self.q = _Queries(schema)
        self.gc = GroupCommit(self._write, BATCH_RECORDS_MAX, BATCH_BYTES_MAX)
        self.mu = threading.Lock()
        self.members: set[Member] = set()
        self.failed: str | None = None
        self.retired = False  # no journal is attached any more, or it failed: the store makes another
        # Writer lock keys held on this connection: advisory locks are re-entrant within one
        # server session, so a second handle of a journal would get its lock again without this.
        # Read and changed only by the ops the leader runs one at a time (_take_lock..., _unlock).
        self.held_keys: set[int] = set()
        self.commits = 0  # COMMITs sent (the tests and the benchmark count them)

    def lose(self, why: str) -> None:
        """The connection is gone (or unusable): every journal on it fail-stops."""
        with self.mu:
            if self.failed is None:
                self.failed = why
            members = list(self.members)
        for m in members:
            m._fail_stop(why)

    def close(self) -> None:
        self.gc.wait_idle()
        try:
            # The server lets go of a session's advisory locks when its backend exits, and it
            # exits after the client's close has returned: a writer opening just after this
            # close could find the lock still held (JournalLockedError). Let go of them before
            # the close returns. A connection that is not idle (a failed writer's) is left to
            # the backend's exit, as before.
            if reusable(self.conn):
                unlock_all(self.conn)
        except (psycopg.Error, OSError, ValueError):
            pass
        finally:
            try:
                self.conn.close()
            except psycopg.Error:
                pass

    # --- the leader's side: one batch, one transaction (journal/remote/group.py calls this) --

    def _write(self, items: list[Encoded], level: Durability) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(items)
        after = [it for it in items if isinstance(it, _Op) and not it.before]
        try:
            self._batch(items, level, out)
        finally:
            self._run_after(after)
        return [o if o is not None else NotCommitted("not written") for o in out]

    def _batch(self, items: list[Encoded], level: Durability, out: list[Outcome | None]) -> None:
        conn = self.conn
        if self.failed is not None or conn.closed:
            why = self.failed or "the journal was closed before this record was written"
            for i in range(len(items)):
                out[i] = NotCommitted(f"journal fail-stopped before this record was written: {why}")
            return
        eff: Durability = "flush" if self.no_buffer and level == "buffered" else level
        for i, it in enumerate(items):
            if isinstance(it, _Op) and it.before:
                exc = self._run_op(it, conn)
                if exc is not None and not isinstance(exc, Exception):
                    raise exc  # an interrupt: every caller of the batch hears of it (group.py)
                out[i] = Committed(0, eff)
        groups: dict[int, tuple[Member, list[int]]] = {}
        for i, it in enumerate(items):
            if out[i] is None:
                if not isinstance(it, (_Item, _Barrier)):
                    raise InvariantError("a PostgreSQL batch holds this module's items only")
                groups.setdefault(id(it.owner), (it.owner, []))[1].append(i)
        parts: list[_Part] = []
        for j, at in groups.values():
            if j._failed is not None:
                for i in at:
                    out[i] = NotCommitted(f"journal fail-stopped before this record was written: {j._failed}")
            elif j._detached:
                for i in at:
                    out[i] = NotCommitted("the journal was closed before this record was written")
            else:
                p = _Part(j, at, [items[i] for i in at])
                if all(isinstance(it, _Barrier) for it in p.items) and not j._buffer and (
                    eff != "sync" or not j._unsynced
                ):
                    for i in at:
                        out[i] = Committed(0, eff)  # nothing to write, nothing to wait for
                else:
                    parts.append(p)
        if not parts:
            return
        begun = False
        try:
            # A batch without keys (on an exclusive writer) has nothing to look up: its BEGIN goes
            # out with the INSERT, in one round trip (_commit).
            if eff != "buffered" and (self.no_buffer or any(it.key is not None for p in parts for it in p.items)):
                self._begin(conn, eff)
                begun = True
            for p in parts:
                p.base = _table_last(conn, self.q, p.j) if p.j._shared else p.j._committed
            found = self._lookup(conn, parts)
        except BaseException as exc:
            reason = self._failed_before_commit(conn, exc, begun, parts)
            for p in parts:
                self._settle(p, "not", reason, out)
            if not isinstance(exc, Exception):
                raise
            return
        planned: list[_Part] = []
        for p in parts:
            try:
                got = _verify_found(p.j, found.get(p.j._name, []))
            except JournalError as exc:
                for i in p.at:
                    out[i] = _Raised(f"journal {p.j.path}: {exc}", error=exc)
                continue
            p.steps, p.new_rows = _plan(p.j, p.items, got, p.base)
            p.level = eff
            if eff == "buffered" and _buffer_new(p.j, p.new_rows):
                self._settle(p, "ok", "", out, kept=True)
                continue
            if eff == "buffered":
                p.level = "flush"  # the buffer is full: written now, and the outcomes say so
            p.rows = list(p.j._buffer) + p.new_rows
            p.carried = bool(p.j._buffer)
            planned.append(p)
        tx: Durability = "sync" if eff == "sync" else "flush"
        force_xid = tx == "sync" and not any(p.rows for p in planned) and any(
            p.j._unsynced or p.dup() for p in planned
        )
        if not begun and not force_xid and not any(p.rows for p in planned):
            for p in planned:
                self._settle(p, "ok", "", out)
            return
        status, why, err = self._commit(conn, planned, tx, begun, force_xid)
        if status == "not" and err is not None:
            why = self._failed_before_commit(conn, err, True, planned)
            if (len(planned) > 1 and isinstance(err, Exception) and self.failed is None
                    and not conn.broken and not conn.closed):
                self._one_by_one(conn, planned, tx, out)
                return
        for p in planned:
            self._settle(p, status, why, out)
        if err is not None and not isinstance(err, Exception):
            raise err

    def _one_by_one(self, conn: Conn, parts: list[_Part], tx: Durability, out: list[Outcome | None]) -> None:
        """The batch's transaction failed with the connection alive: each journal's part in a
        transaction of its own, so that one journal's refused part leaves the others committed."""
        for p in parts:
            if self.failed is not None:
                self._settle(p, "not", f"the connection to the server was lost before COMMIT ({self.failed}); "
                             "nothing was written", out)
                continue
            force_xid = tx == "sync" and not p.rows and (p.j._unsynced or p.dup())
            if not p.rows and not force_xid:
                self._settle(p, "ok", "", out)
                continue
            status, why, exc = self._commit(conn, [p], tx, False, force_xid)
            if status == "not" and exc is not None:
                why = self._failed_before_commit(conn, exc, True, [p])
            self._settle(p, status, why, out)
            if exc is not None and not isinstance(exc, Exception):
                raise exc

    def _settle(self, p: _Part, status: Fate, why: str, out: list[Outcome | None], kept: bool = False) -> None:
        """The part's outcomes, and the journal's state after its transaction."""
        j = p.j
        if status == "ok" and not kept:
            with j._mu:
                if p.rows:
                    j._committed = max(j._committed, p.rows[-1][0])
                elif j._shared:
                    j._committed = max(j._committed, p.base)
                j._buffer.clear()
                j._buffer_bytes = 0
                j._unsynced = p.level != "sync" and (j._unsynced or bool(p.rows))
        elif status == "lost":
            j._fail_stop(why + "; whether the batch is in the journal is known only to the server")
        level: Durability = "buffered" if kept else p.level
        if not p.steps:
            p.steps = [Step(BARRIER) if isinstance(it, _Barrier) else Step(NEW, 0, it.key) for it in p.items]
        for i, o in zip(p.at, outcomes_of(p.items, p.steps, status, level, why, _refused), strict=True):
            out[i] = o

    def _begin(self, conn: Conn, level: Durability) -> None:
        conn.execute(_BEGIN[self.sync_setting if level == "sync" else "off"])
        if self.no_buffer:  # writer="shared": one journal, the append lock in every transaction
            j = next(iter(self.members))
            ms = max(1, int(j._shared_lock_timeout_s * 1000))
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{ms}ms",))
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (j._append_key,))

    def _lookup(self, conn: Conn, parts: list[_Part]) -> dict[str, list[tuple[str, int, bytes]]]:
        """The stored rows holding the batch's keys, by journal: one query for every journal."""
        names: list[str] = []
        keys: list[str] = []
        for p in parts:
            for key in sorted({it.key for it in p.items if it.key is not None}):
                names.append(p.j._name)
                keys.append(key)
        found: dict[str, list[tuple[str, int, bytes]]] = {}
        if not keys:
            return found
        for name, key, seq, frame in conn.execute(self.q.keys_of, (names, keys)).fetchall():
            found.setdefault(str(name), []).append((str(key), int(seq), bytes(frame)))
        return found

    def _commit(
        self, conn: Conn, parts: list[_Part], level: Durability, begun: bool, force_xid: bool
    ) -> tuple[Fate, str, BaseException | None]:
        """Write the parts' rows in the transaction (begun here unless ``begun``) and COMMIT it:
        ("ok", ""), ("not", why): nothing written, or ("lost", why): the answer to COMMIT never came."""
        committing = False
        try:
            names: list[str] = []
            seqs: list[int] = []
            keys: list[str | None] = []
            frames: list[bytes] = []
            channels: list[str] = []
            lasts: list[str] = []
            for p in parts:
                for seq, enc in p.rows:
                    names.append(p.j._name)
                    seqs.append(seq)
                    keys.append(enc.key)
                    frames.append(records.frame_of(enc, seq, p.j._salt))
                if p.rows:
                    channels.append(p.j._channel)
                    lasts.append(str(p.rows[-1][0]))
            if not begun and not self.no_buffer and seqs:
                begun = True
                with conn.pipeline():  # BEGIN, the durability and the INSERT: one round trip
                    conn.execute("BEGIN")
                    conn.execute(_SET_COMMIT[self.sync_setting if level == "sync" else "off"])
                    conn.execute(self.q.insert, (names, seqs, keys, frames, channels, lasts))
                seqs = []
            if not begun:
                self._begin(conn, level)
                begun = True
            if seqs:
                conn.execute(self.q.insert, (names, seqs, keys, frames, channels, lasts))
            elif force_xid:
                conn.execute("SELECT txid_current()")  # a commit record: the COMMIT waits for the WAL flush
            committing = True
            self.commits += 1
            conn.execute("COMMIT")
            return "ok", "", None
        except BaseException as exc:
            if committing:
                why = f"the connection failed while COMMIT was on its way ({_words(exc)})"
                # Not idle (reusable) is lost too: still inside the transaction, the next batch's
                # COMMIT on this connection would commit this one's rows, reported AckLost.
                if not reusable(conn):
                    self.lose(_unusable(conn, exc))
                return "lost", why, exc
            return "not", "", exc

    def _failed_before_commit(self, conn: Conn, exc: BaseException, begun: bool, parts: list[_Part]) -> str:
        """Roll back after a failure before COMMIT; fail-stop where a journal cannot go on."""
        why = f"the transaction failed before COMMIT and was rolled back ({_words(exc)})"
        if conn.broken or conn.closed:
            self.lose(_unusable(conn, exc))
            return f"the connection to the server was lost before COMMIT ({_words(exc)}); nothing was written"
        rolled_back = True
        if begun:
            try:
                conn.execute("ROLLBACK")
            except BaseException:
                rolled_back = False
        if not rolled_back or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.lose(f"a transaction could not be rolled back cleanly ({_words(exc)})")
        elif not isinstance(exc, Exception):
            for p in parts:
                p.j._fail_stop(f"interrupted while writing ({type(exc).__name__})")
        elif len(parts) == 1 and isinstance(exc, psycopg.errors.IntegrityError):
            parts[0].j._fail_stop(
                f"the table holds a record this writer did not know of ({_words(exc)}): another writer "
                "bypassed the lock, or the journal was changed by hand"
            )
        elif len(parts) == 1 and parts[0].carried:
            parts[0].j._fail_stop(f"buffered records were lost with a failed transaction ({_words(exc)})")
        return why

    def _run_after(self, ops: list[_Op]) -> None:
        for op in ops:
            conn = self.conn
            if self.failed is not None or conn.closed or conn.broken:
                op.error = JournalFailStoppedError(self.failed or "the writer's connection is closed")
                continue
            self._run_op(op, conn)

    def _run_op(self, op: _Op, conn: Conn) -> BaseException | None:
        """Run ``op`` on the writer's connection: its result, or its error (returned too); a
        connection it leaves unusable fail-stops every journal on it."""
        try:
            op.result = op.fn(conn)
        except BaseException as exc:
            op.error = exc
            if not reusable(conn):
                self.lose(_unusable(conn, exc))
            return exc
        return None


class StoreWriter:
    """The writer a PostgresStore's journals share (journal/remote/postgres_store.py): made by the
    first journal opened for writing, ended when the last one closes; one that failed is
    replaced for the journals opened after."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._writer: _Writer | None = None

    def attach(self, j: Member) -> _Writer:
        with self._mu:
            w = self._writer
            if w is None or w.failed is not None or w.retired:
                conn = j._connect()
                try:
                    row = conn.execute("SHOW synchronous_commit").fetchone()
                except psycopg.Error as exc:
                    conn.close()
                    raise ServerIOError(j.path, "opening", exc, CONNECT_ADVICE) from exc
                setting = "remote_apply" if row is not None and row[0] == "remote_apply" else "on"
                w = self._writer = _Writer(conn, j._schema, setting, shared=True)
            with w.mu:
                w.members.add(j)
            return w

    def detach(self, j: Member, w: _Writer) -> None:
        with self._mu:
            with w.mu:
                w.members.discard(j)
                last = not w.members
                if last:
                    w.retired = True
            if last and self._writer is w:
                self._writer = None
        if last:
            w.close()

    @property
    def writer(self) -> _Writer | None:
        """The live writer (None before the first journal or after the last closed)."""
        return self._writer


def _buffer_new(j: Member, new_rows: list[tuple[int, Encoded]]) -> bool:
    """Keep a buffered part's records in the client; False if the buffer is full."""
    added = sum(len(enc.spec.stored) for _, enc in new_rows)
    with j._mu:
        if (len(j._buffer) + len(new_rows) > BUFFER_RECORDS_MAX
                or j._buffer_bytes + added > BUFFER_BYTES_MAX):
            return False
        j._buffer.extend(new_rows)
        j._buffer_bytes += added
    return True


def _table_last(conn: Conn, q: _Queries, j: Member) -> int:
    """The last seq the table holds for ``j`` (a shared writer's next seq follows it)."""
    row = conn.execute(q.last, (j._name,)).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else j._first_seq - 1


def _verify_found(j: Member, rows: list[tuple[str, int, bytes]]) -> dict[str, Record]:
    """The stored records holding a batch's keys (_Writer._lookup), verified."""
    found: dict[str, Record] = {}
    for key, seq, frame in rows:
        rec = records.record_of(frame, seq, j._salt, j.path, j.options.record_size_bytes_max, j._dicts)
        if rec.key != key:
            why = f"the row's key column says {key!r}, its frame {rec.key!r}"
            raise CorruptionError(j.path, 0, seq, why)
        found[key] = rec
    return found


def _plan(
    member: Member, items: list[Encoded], found: dict[str, Record], base: int
) -> tuple[list[Step], list[tuple[int, Encoded]]]:
    """Seqs for the new records; duplicates and refused calls (a key held by another event):
    the journal's keys are its buffered records' and the stored ones the look-up ``found``."""
    with member._mu:
        buffered = list(member._buffer)
    known = {enc.key: Held(seq, enc.raw, enc.is_bytes) for seq, enc in buffered if enc.key is not None}
    for key, rec in found.items():
        known.setdefault(key, Held(rec.seq, rec.payload, rec.is_bytes))
    return plan_group(items, known, base + len(buffered) + 1, lambda i, it: getattr(it, "call", -i - 1),
                      lambda it: isinstance(it, _Barrier))


def _refused(st: Step) -> Outcome:
    """A call whose key holds another event: its caller raises IdempotencyConflictError."""
    return _Conflict(f"idempotency key {st.key!r} holds another event", key=st.key or "", holder=st.seq)

def _raise_planned(outcomes: list[Outcome]) -> None:
    for out in outcomes:
        if isinstance(out, _Raised) and out.error is not None:
            raise out.error

