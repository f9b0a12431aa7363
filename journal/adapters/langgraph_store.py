"""LangGraph's long-term memory store on journals: ``JournalStore(path)`` (docs/ADAPTERS.md).

    from journal.adapters.langgraph_store import JournalStore
    store = JournalStore("memories", ttl={"default_ttl": 60 * 24})
    graph = builder.compile(checkpointer=saver, store=store)

A ``langgraph.store.base.BaseStore``: ``batch`` and ``abatch`` of ``GetOp``, ``SearchOp``
(namespace prefix, filter with ``$eq $ne $gt $gte $lt $lte``, limit, offset, and a semantic
``query`` when the store has an ``index`` config), ``PutOp`` (a value, or None to delete; ``index``;
``ttl`` in minutes) and ``ListNamespacesOp`` (prefix and suffix conditions with ``*`` wildcards,
``max_depth``, limit, offset); so every method of the base (``get``, ``search``, ``put``,
``delete``, ``list_namespaces`` and their ``a`` twins) works. ``supports_ttl`` is True; expired
items go with ``sweep_ttl()`` (or ``start_ttl_sweeper()``).

Answers. A batch answers as ``InMemoryStore`` answers it (the tests run the two side by side on
random operations): every read of a batch sees the store as it was before the batch, then the
batch's puts and deletes apply, the last one of each (namespace, key) winning, in the order each
(namespace, key) first appears; search order is namespace by namespace in the order each came to
hold items, items in the order each key was first put (an update keeps its place); a put sets
both ``created_at`` and ``updated_at`` to the batch's time. One difference: a namespace is listed
while it holds an item, as the database stores list them (InMemoryStore also lists a namespace a
``get`` once looked into, or whose items were all deleted).

TTL, as the database stores and the base's documents define it: a put with ``ttl`` expires
``ttl`` minutes after the batch's time; a get or search with ``refresh_ttl`` (the base fills it in
from ``TTLConfig.refresh_on_read``, default True) moves the expiry of each item it returns with a
TTL to ``ttl`` minutes after that read; ``sweep_ttl()`` deletes the items whose expiry is before
now. Expired items not yet swept are still served, unless ``TTLConfig.omit_expired`` is set (then
they are neither returned, nor refreshed, nor listed). Time comes from ``clock`` (default
``datetime.now(timezone.utc)``), read once per batch.

Semantic search. With ``index={"dims", "embed", "fields"}`` a put's texts (the fields of the config
or of the put's ``index``, extracted by LangGraph's own path rules) are embedded by the user's
function when the put is made, and the vectors are stored in the put's record: a reopen never
calls the embedder again. A query is embedded at search time and items ranked by cosine
similarity, max-pooled per item, the items without a vector after them, as InMemoryStore does.

Storage. One journal holds the whole store (``<path>/<name>`` on files, ``name`` in the store a
server URL names), so a batch's writes across namespaces are one record, appended at "sync": it
is stored whole or not at all. Record 1 is ``{"op": "langgraph-store", "v": 1}``; every later one
``{"op": "batch", "t": T, "r": [[ns, key, expires], ...], "w": [[ns, key, value, ttl, vectors],
...]}`` (``T`` the batch's time and ``expires`` in microseconds since the epoch, ``value`` null
for a delete, ``vectors`` a map of field path to vector): ``r`` the TTL refreshes of its reads,
``w`` its puts and deletes in order. A batch of reads only that refreshes nothing writes nothing.
Values are stored as JSON: a value holding anything else (a tuple, a datetime, a non-str key, a
non-finite float, nesting deeper than ``VALUE_DEPTH_MAX``) is refused with ``StoreValueError``
and nothing is written.

The fold. The first call opens the journal (recovery runs) and replays it into memory; the same
``_fold`` that replays a record applies every committed batch, so what a running store answers is
what a reopen rebuilds. The whole store is held in memory, as InMemoryStore holds it; the journal
is its durable log and grows with every batch (no compaction yet). A record this module did not
write (another program's, a newer version's, a crafted one) raises ``StoreFormatError``;
corruption of committed data is the engine's ``CorruptionError``: neither is ever served.

Outcomes. NotCommitted raises ``BatchNotStoredError`` (nothing stored, nothing changed: retry);
AckLost raises ``OutcomeUnknownError`` and closes the journal, so the next call reopens it and
rebuilds the store from what is on disk, which shows whether the batch took. Calls are serialized
by one lock (reads too: a read may refresh TTLs); ``abatch`` embeds with the async embedder, then
runs the same code in a worker thread, so the event loop never waits on a file.

It uses only ``journal``, ``journal.api`` and the bottom layer; the session layer is not used.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import Any, Final

from journal.errors import MissingExtraError

try:  # the framework comes with the langgraph-store extra; without it, say so
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
    )
except ImportError as exc:
    raise MissingExtraError(__name__, "langgraph-checkpoint 4.3 or later", "langgraph-store", exc) from exc

import journal
from journal.api import (
    AckLost,
    Committed,
    EventNotSerializableError,
    Journal,
    JournalError,
    JournalFailStoppedError,
    JournalIOError,
    NotCommitted,
    RecordTooLargeError,
    Store,
    invariant,
)
from journal.errors import ForeignRecordError
from journal.fs import FileSystem

FORMAT_VERSION: Final = 1
DURABILITY: Final = "sync"
STORE_NAME_DEFAULT: Final = "langgraph-store"
# The engine's default cap on one record: one batch is one record, so this bounds a batch's
# puts (values and vectors as stored JSON).
RECORD_SIZE_BYTES_MAX_DEFAULT: Final = 16 * 1024 * 1024
# Values nested deeper than this are refused: they are copied on every read (a caller mutating
# what it got must not change the store), and that recursion stops near 1000 levels.
VALUE_DEPTH_MAX: Final = 100
_HEADER_OP: Final = "langgraph-store"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US: Final = timedelta(microseconds=1)
_US_PER_MINUTE: Final = 60_000_000
# The times a datetime can hold, in microseconds since the epoch: a record's time outside them
# could not be handed back as created_at (a crafted one is refused when read).
_T_MIN_US: Final = (datetime.min.replace(tzinfo=timezone.utc) - _EPOCH) // _US
_T_MAX_US: Final = (datetime.max.replace(tzinfo=timezone.utc) - _EPOCH) // _US

_Ns = tuple[str, ...]


class JournalStoreError(JournalError):
    """Base class of this adapter's errors."""


class StoreClosedError(JournalStoreError, RuntimeError):
    def __init__(self, where: str) -> None:
        super().__init__(f"JournalStore({where!r}) is closed; make a new one to go on")


class StoreValueError(JournalStoreError, ValueError):
    """A put this store cannot keep as JSON (or a namespace or key that is not str); nothing was written."""


class BatchTooLargeError(JournalStoreError, ValueError):
    """One batch's writes are one record, over the record size limit; nothing was written."""

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"the batch's puts are {size_bytes} bytes as stored JSON, over the {limit_bytes}-byte limit of one "
            "record (one batch is one record, so that it is stored whole or not at all); nothing was written. "
            "Split the batch, keep large payloads elsewhere and reference them, or make the store with a larger "
            "record_size_bytes_max"
        )
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class BatchNotStoredError(JournalStoreError):
    """The journal answered NotCommitted (or refused the append): nothing of the batch is stored."""

    def __init__(self, reason: str, outcome: NotCommitted | None = None) -> None:
        super().__init__(f"the batch was not stored ({reason}); the store is unchanged, and the batch may be retried")
        self.outcome = outcome


class OutcomeUnknownError(JournalStoreError):
    """The journal answered AckLost: the batch may or may not be stored."""

    def __init__(self, outcome: AckLost) -> None:
        super().__init__(
            f"the outcome of the batch is unknown ({outcome.reason}); do not retry blindly: the store's journal was "
            "closed, and the next call reopens it (recovery runs) and reads what is on disk, so a get shows "
            "whether the batch took; then retry it if it did not"
        )
        self.outcome = outcome


class VectorDimsError(JournalStoreError, ValueError):
    """A query's vector and a stored one differ in length: they were made by other embedders."""

    def __init__(self, query_dims: int, stored_dims: int) -> None:
        super().__init__(
            f"the query is embedded in {query_dims} dimensions and a stored item's vector has {stored_dims} "
            "dimensions: the store's vectors were made by another embedder (vectors are kept with the puts, never "
            "made again). "
            "Open the store with the index config its vectors were made with, or put the items again to re-embed them"
        )


class StoreFormatError(JournalStoreError, ForeignRecordError):
    """The store's journal holds a record this adapter did not write; nothing of it was served."""

    def __init__(self, path: str, seq: int | None, why: str) -> None:
        ForeignRecordError.__init__(self, path, seq, why)


@dataclass(slots=True)
class _Entry:
    value: dict[str, Any]  # JSON as stored; never handed out (callers get copies)
    created_us: int
    updated_us: int
    ttl_minutes: float | None
    expires_us: int | None
    vectors: dict[str, list[float]] = field(default_factory=dict)  # field path -> vector


def _us_of(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError(f"the store's clock gave a naive datetime ({when!r}); give an aware one (UTC)")
    return (when - _EPOCH) // _US


def _dt_of(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class _NotJSON(Exception):
    pass


def _json_copy(value: Any, depth: int) -> Any:
    """A copy of ``value`` made only of what JSON keeps exactly (so what a reopen reads back is
    equal to what was put); _NotJSON says what is not."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        if not math.isfinite(value):
            raise _NotJSON(f"the float {value!r} (JSON has no non-finite numbers)")
        return value
    if t is dict or t is list:
        if depth > VALUE_DEPTH_MAX:
            raise _NotJSON(f"nesting deeper than {VALUE_DEPTH_MAX} levels")
        if t is list:
            return [_json_copy(v, depth + 1) for v in value]
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _NotJSON(f"the key {k!r} of type {type(k).__name__} (JSON keys are str)")
            out[k] = _json_copy(v, depth + 1)
        return out
    raise _NotJSON(f"a value of type {t.__name__} (store JSON values: dict, list, str, int, float, bool, None)")


def _is_number(v: Any) -> bool:
    return (type(v) is int or type(v) is float) and math.isfinite(v)


def _check_ns_key(namespace: Any, key: Any) -> tuple[_Ns, str]:
    if not isinstance(namespace, tuple) or not all(type(label) is str for label in namespace):
        raise StoreValueError(f"a namespace must be a tuple of str, not {namespace!r}; nothing was written")
    if type(key) is not str:
        raise StoreValueError(f"a key must be a str, not {key!r}; nothing was written")
    return namespace, key


# -- the answers: filters, matching, similarity -------------------------------------------------


def _matches(item_value: Any, wanted: Any) -> bool:
    """Whether a stored value matches a filter value: maps match key by key, sequences item by
    item, a map of ``$`` operators applies each; anything else is equality."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(item_value, op, operand) for op, operand in wanted.items())
        if not isinstance(item_value, dict):
            return False
        return all(_matches(item_value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(wanted)
            and all(_matches(iv, fv) for iv, fv in zip(item_value, wanted, strict=False))
        )
    return bool(item_value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    # Comparisons are numeric (float of both sides), as the database stores compare JSON numbers;
    # a value that is no number raises, as it does there.
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op == "$gt":
        return float(value) > float(operand)
    if op == "$gte":
        return float(value) >= float(operand)
    if op == "$lt":
        return float(value) < float(operand)
    if op == "$lte":
        return float(value) <= float(operand)
    raise ValueError(f"Unsupported operator: {op}")


def _ns_matches(condition: MatchCondition, ns: _Ns) -> bool:
    path = condition.path
    if len(ns) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(ns, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(ns), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(p == "*" or label == p for label, p in pairs)


def _cosine(query: list[float], vectors: list[list[float]]) -> list[float]:
    """Cosine similarity of ``query`` with each vector (0 for a zero vector)."""
    if not vectors:
        return []
    for y in vectors:  # else numpy's bare shape error, or (without numpy) a score of truncated vectors
        if len(y) != len(query):
            raise VectorDimsError(len(query), len(y))
    try:  # numpy when it is there (one matrix product), the same sums in Python otherwise
        np: Any = importlib.import_module("numpy")
    except ImportError:
        sims = []
        for y in vectors:
            dot = sum(a * b for a, b in zip(query, y, strict=False))
            n1 = sum(a * a for a in query) ** 0.5
            n2 = sum(a * a for a in y) ** 0.5
            sims.append(dot / (n1 * n2) if n1 > 0 and n2 > 0 else 0.0)
        return sims
    x, ys = np.array(query), np.array(vectors)
    x_norm, y_norms = np.linalg.norm(x), np.linalg.norm(ys, axis=1)
    nonzero = y_norms != 0
    sims_arr = np.zeros_like(y_norms)
    sims_arr[nonzero] = np.dot(ys[nonzero], x) / (y_norms[nonzero] * x_norm)
    out: list[float] = sims_arr.tolist()
    return out


# -- the store -------------------------------------------------------------------------------------


@dataclass
class _Plan:
    """What a batch asks for, before any state is read: its ops, its writes (one per key, the
    last winning, in first-appearance order), the texts to embed and the queries."""

    ops: list[Op]
    writes: dict[tuple[_Ns, str], PutOp]
    values: dict[tuple[_Ns, str], dict[str, Any] | None]
    to_embed: dict[str, list[tuple[_Ns, str, str]]]
    queries: list[str]


class JournalStore(BaseStore):
    """LangGraph's ``BaseStore`` in one journal under ``path`` (a directory, or a server URL).

    The journal is opened (and locked against other writers, in this process or another) at the
    first call and stays open until ``close()`` or the end of ``with``: one store per journal at
    a time. ``name`` is the journal's name in the store of journals at ``path`` (letters, digits
    and ``._%-``). ``index`` enables semantic search (see the module doc); ``ttl`` is LangGraph's
    ``TTLConfig``; ``clock`` gives the time (an aware datetime).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = STORE_NAME_DEFAULT,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        clock: Callable[[], datetime] | None = None,
        record_size_bytes_max: int = RECORD_SIZE_BYTES_MAX_DEFAULT,
        lock_timeout_s: float = 0.0,
        fs: FileSystem | None = None,
    ) -> None:
        if isinstance(path, str) and "://" in path:
            if fs is not None:
                raise ValueError("fs= is for a directory of journals, not a server URL")
            self.path = path
            self._store: Store = journal.store(path)
        else:
            self.path = os.path.abspath(os.fspath(path))
            self._store = journal.store(self.path, **({"fs": fs} if fs is not None else {}))
        self.name = name
        self.ttl_config = ttl
        self.index_config: dict[str, Any] | None = None
        self.embeddings: Embeddings | None = None
        if index:
            config: dict[str, Any] = dict(index)
            self.embeddings = ensure_embeddings(config.get("embed"))
            config["__tokenized_fields"] = [
                (p, tokenize_path(p)) if p != "$" else (p, p) for p in (config.get("fields") or ["$"])
            ]
            self.index_config = config
        self._clock = clock or _utc_now
        self.record_size_bytes_max = record_size_bytes_max
        self._options: dict[str, Any] = {"record_size_bytes_max": record_size_bytes_max,
                                         "lock_timeout_s": lock_timeout_s}
        self._lock = threading.Lock()
        self._journal: Journal | None = None
        self._data: dict[_Ns, dict[str, _Entry]] = {}
        self._closed = False
        self._sweeper: threading.Thread | None = None
        self._sweeper_stop = threading.Event()

    # -- the journal ---------------------------------------------------------------------------

    @property
    def where(self) -> str:
        """The store's journal: its directory, or its name in the server's store."""
        return f"{self.path}#{self.name}" if "://" in self.path else os.path.join(self.path, self.name)

    @property
    def last_seq(self) -> int:
        """The seq of the journal's last record (0 before the first call opens it)."""
        j = self._journal
        return j.last_seq if j is not None else 0

    def _open(self) -> Journal:
        """The open journal, replayed into ``_data``; called with the lock held."""
        if self._closed:
            raise StoreClosedError(self.where)
        if self._journal is not None:
            return self._journal
        j = self._store.open(self.name, create=True, **self._options)
        data: dict[_Ns, dict[str, _Entry]] = {}
        try:
            if j.last_seq == 0:
                out = j.append({"op": _HEADER_OP, "v": FORMAT_VERSION}, DURABILITY)
                if not isinstance(out, Committed):
                    raise BatchNotStoredError(f"creating the store's journal: {out.reason}")
            else:
                for rec in j.read():
                    if rec.seq == 1:
                        self._check_header(rec.event)
                    else:
                        self._fold(data, rec.seq, rec.event, check=True)
        except OSError as exc:
            j.close()
            if isinstance(exc, JournalError):
                raise
            # A reader's file-system error that reached us untyped: the replay stopped, nothing
            # of it is served, and the next call tries again.
            raise JournalIOError(self.where, exc, "replaying") from exc
        except BaseException:
            j.close()
            raise
        self._journal, self._data = j, data
        return j

    def _check_header(self, ev: Any) -> None:
        if not isinstance(ev, dict) or ev.get("op") != _HEADER_OP:
            raise StoreFormatError(self.where, 1, "not a LangGraph store journal (no langgraph-store header)")
        if type(ev.get("v")) is not int or ev["v"] > FORMAT_VERSION:
            raise StoreFormatError(self.where, 1, f"format version {ev.get('v')!r} is newer than {FORMAT_VERSION}; "
                                                  "upgrade journal to read it")

    def _forget(self) -> None:
        """Close a journal whose last write's outcome is unknown: the next call reads the disk again."""
        j, self._journal, self._data = self._journal, None, {}
        if j is not None:
            try:
                j.close()
            except JournalError:
                pass  # the journal's failure is what the caller is being told about

    def _append(self, record: dict[str, Any]) -> None:
        """Append ``record`` at "sync" and fold it. Raises this module's typed errors; after any
        of them the state is as it was (or, after AckLost, is read again from the disk)."""
        j = self._journal
        invariant(j is not None, "a batch is appended to an open journal")
        assert j is not None  # for mypy; invariant() above is the check
        try:
            out = j.append(record, DURABILITY)
        except RecordTooLargeError as exc:
            raise BatchTooLargeError(exc.size_bytes, exc.limit_bytes) from exc
        except EventNotSerializableError as exc:  # _json_copy refused these already; kept as a guard
            raise StoreValueError(f"the batch cannot be stored as JSON ({exc}); nothing was written") from exc
        except JournalFailStoppedError as exc:
            self._forget()
            raise BatchNotStoredError(str(exc)) from exc
        if isinstance(out, NotCommitted):
            raise BatchNotStoredError(out.reason, out)
        if isinstance(out, AckLost):
            self._forget()
            raise OutcomeUnknownError(out)
        self._fold(self._data, out.seq, record, check=False)

    # -- the fold --------------------------------------------------------------------------------

    def _fold(self, data: dict[_Ns, dict[str, _Entry]], seq: int, ev: Any, check: bool) -> None:
        """Apply batch record ``seq`` to ``data``: the one function for replay and for live
        writes. With ``check`` (a record read from the journal, which may be crafted) a record
        not of the shape this module writes raises StoreFormatError, and ``data`` is then left as
        it was; a live write's record was made by ``_execute`` from checked values."""
        why = self._record_error(ev) if check else None
        if why is not None:
            raise StoreFormatError(self.where, seq, why)
        t: int = ev["t"]
        for ns_list, key, expires in ev["r"]:
            entry = data.get(tuple(ns_list), {}).get(key)
            if entry is not None and entry.ttl_minutes is not None:
                entry.expires_us = expires
        emptied: list[_Ns] = []
        for ns_list, key, value, ttl, vectors in ev["w"]:
            ns = tuple(ns_list)
            items = data.get(ns)
            if value is None:
                if items is not None:
                    items.pop(key, None)
                    emptied.append(ns)
                continue
            if items is None:
                items = data[ns] = {}
            old = items.get(key)
            # Vectors of fields the new value does not index again are kept, as the database
            # stores keep them (a put upserts the fields it embeds); a delete drops them all.
            kept = dict(old.vectors) if old is not None else {}
            kept.update(vectors)
            expires = t + round(ttl * _US_PER_MINUTE) if ttl is not None else None
            items[key] = _Entry(value, t, t, ttl, expires, kept)
        # A namespace goes from the listing once the batch leaves it empty (not mid-batch: a
        # delete and a put in one namespace keep its place).
        for ns in emptied:
            if ns in data and not data[ns]:
                del data[ns]

    @staticmethod
    def _record_error(ev: Any) -> str | None:
        """Why ``ev`` is not a batch record of the shape this module writes, or None."""
        if not isinstance(ev, dict) or ev.get("op") != "batch":
            return f"not a batch record (op {ev.get('op') if isinstance(ev, dict) else type(ev).__name__!r})"
        if type(ev.get("t")) is not int or not isinstance(ev.get("r"), list) or not isinstance(ev.get("w"), list):
            return "a batch record without its time, refreshes or writes"
        if not _T_MIN_US <= ev["t"] <= _T_MAX_US:
            return f"a batch time ({ev['t']} us) no datetime can hold"

        def ns_key_ok(ns: Any, key: Any) -> bool:
            return isinstance(ns, list) and all(type(label) is str for label in ns) and type(key) is str

        for r in ev["r"]:
            if not (isinstance(r, list) and len(r) == 3 and ns_key_ok(r[0], r[1]) and type(r[2]) is int):
                return "a malformed TTL refresh"
        for w in ev["w"]:
            if not (isinstance(w, list) and len(w) == 5 and ns_key_ok(w[0], w[1])):
                return "a malformed write"
            _, _, value, ttl, vectors = w
            if value is None:
                continue
            if not isinstance(value, dict):
                return "a put whose value is not a JSON object"
            try:
                _json_copy(value, 1)
            except _NotJSON as exc:
                return f"a put whose value holds {exc}"
            except RecursionError:
                return "a put whose value is nested too deep"
            if ttl is not None and not _is_number(ttl):
                return "a put whose ttl is not a finite number"
            if not isinstance(vectors, dict) or not all(
                isinstance(v, list) and all(_is_number(x) for x in v) for v in vectors.values()
            ):
                return "a put whose vectors are not lists of finite numbers"
        return None

    # -- the batch -------------------------------------------------------------------------------

    def _plan(self, ops: Iterable[Op]) -> _Plan:
        """Check a batch's ops and gather its writes and what it needs embedded; reads no state."""
        plan = _Plan(list(ops), {}, {}, {}, [])
        for op in plan.ops:
            if isinstance(op, PutOp):
                where = _check_ns_key(op.namespace, op.key)
                if op.value is not None and not isinstance(op.value, Mapping):
                    raise StoreValueError(f"a put's value must be a mapping or None, not {type(op.value).__name__}")
                if op.ttl is not None and (type(op.ttl) not in (int, float) or not math.isfinite(op.ttl)):
                    raise StoreValueError(f"a put's ttl must be a finite number of minutes or None, not {op.ttl!r}")
                try:
                    value = None if op.value is None else _json_copy(dict(op.value), 1)
                except _NotJSON as exc:
                    raise StoreValueError(
                        f"the value of {op.key!r} in {op.namespace!r} holds {exc}; nothing was written"
                    ) from None
                plan.writes[where] = op  # the last put of a key wins, at its first place
                plan.values[where] = value
            elif isinstance(op, SearchOp):
                if op.query and self.embeddings is not None and op.query not in plan.queries:
                    plan.queries.append(op.query)
            elif not isinstance(op, (GetOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
        if self.index_config is not None and self.embeddings is not None:
            for (ns, key), op in plan.writes.items():
                value = plan.values[(ns, key)]
                if value is None or op.index is False:
                    continue
                paths = self.index_config["__tokenized_fields"] if op.index is None else [
                    (ix, tokenize_path(ix)) for ix in op.index
                ]
                for path, tokens in paths:
                    texts = get_text_at_path(value, tokens)
                    if len(texts) > 1:
                        for i, text in enumerate(texts):
                            plan.to_embed.setdefault(text, []).append((ns, key, f"{path}.{i}"))
                    elif texts:
                        plan.to_embed.setdefault(texts[0], []).append((ns, key, path))
        return plan

    @staticmethod
    def _vectors_of(plan: _Plan, vectors: list[list[float]]) -> dict[tuple[_Ns, str], dict[str, list[float]]]:
        """Each indexed place's vector: one per distinct text, given to every place holding it."""
        if len(vectors) != len(plan.to_embed):
            raise ValueError(f"the embedder gave {len(vectors)} vectors for {len(plan.to_embed)} texts")
        out: dict[tuple[_Ns, str], dict[str, list[float]]] = {}
        for vector, places in zip(vectors, plan.to_embed.values(), strict=True):
            clean = [float(x) for x in vector]
            if not all(math.isfinite(x) for x in clean):
                raise StoreValueError("the embedder gave a non-finite number; nothing was written")
            for ns, key, path in places:
                out.setdefault((ns, key), {})[path] = clean
        return out

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(ops)
        queries: dict[str, list[float]] = {}
        docs: list[list[float]] = []
        if self.embeddings is not None:
            queries = {q: self.embeddings.embed_query(q) for q in plan.queries}
            if plan.to_embed:
                docs = self.embeddings.embed_documents(list(plan.to_embed))
        return self._execute(plan, queries, docs)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        plan = self._plan(ops)
        queries: dict[str, list[float]] = {}
        docs: list[list[float]] = []
        if self.embeddings is not None:
            got = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in plan.queries))
            queries = dict(zip(plan.queries, got, strict=True))
            if plan.to_embed:
                docs = await self.embeddings.aembed_documents(list(plan.to_embed))
        # A worker thread: the journal's fdatasync never blocks the loop. A cancelled caller
        # does not cut the write: the thread runs the batch to its end under the lock.
        return await asyncio.to_thread(self._execute, plan, queries, docs)

    def _execute(self, plan: _Plan, queries: dict[str, list[float]], docs: list[list[float]]) -> list[Result]:
        vectors = self._vectors_of(plan, docs) if plan.to_embed else {}
        with self._lock:
            self._open()
            now_us = _us_of(self._clock())
            refresh: dict[tuple[_Ns, str], int] = {}
            results: list[Result] = []
            for op in plan.ops:
                if isinstance(op, GetOp):
                    results.append(self._get(op, now_us, refresh))
                elif isinstance(op, SearchOp):
                    results.append(self._search(op, queries, now_us, refresh))
                elif isinstance(op, ListNamespacesOp):
                    results.append(self._list_namespaces(op, now_us))
                else:
                    results.append(None)
            if refresh and not plan.writes:  # reads only: each refresh stands on its own, as a sweep's delete
                self._append_split(now_us, "r", [[list(ns), key, exp] for (ns, key), exp in refresh.items()])
            elif plan.writes:
                writes = [
                    [list(ns), key, plan.values[(ns, key)], op.ttl if plan.values[(ns, key)] is not None else None,
                     vectors.get((ns, key), {})]
                    for (ns, key), op in plan.writes.items()
                ]
                self._append({"op": "batch", "t": now_us, "r": [[list(ns), key, exp] for (ns, key), exp in
                                                                  refresh.items()], "w": writes})
            return results

    # -- reads (with the lock held) ----------------------------------------------------------------

    def _live(self, entry: _Entry, now_us: int) -> bool:
        """Whether reads serve ``entry``: always, unless omit_expired hides it once expired."""
        if entry.expires_us is None or not (self.ttl_config and self.ttl_config.get("omit_expired")):
            return True
        return entry.expires_us > now_us

    @staticmethod
    def _refresh(refresh: dict[tuple[_Ns, str], int], ns: _Ns, key: str, entry: _Entry, now_us: int) -> None:
        if entry.ttl_minutes is not None:
            refresh[(ns, key)] = now_us + round(entry.ttl_minutes * _US_PER_MINUTE)

    def _get(self, op: GetOp, now_us: int, refresh: dict[tuple[_Ns, str], int]) -> Item | None:
        ns = tuple(op.namespace)
        entry = self._data.get(ns, {}).get(op.key)
        if entry is None or not self._live(entry, now_us):
            return None
        if op.refresh_ttl:
            self._refresh(refresh, ns, op.key, entry, now_us)
        return Item(value=copy.deepcopy(entry.value), key=op.key, namespace=ns,
                    created_at=_dt_of(entry.created_us), updated_at=_dt_of(entry.updated_us))

    def _search(
        self, op: SearchOp, queries: dict[str, list[float]], now_us: int, refresh: dict[tuple[_Ns, str], int]
    ) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        n = len(prefix)
        ranked = bool(op.query) and bool(queries)
        candidates: list[tuple[_Ns, str, _Entry]] = []
        for ns, items in self._data.items():
            if ns[:n] != prefix:
                continue
            for key, entry in items.items():
                if not self._live(entry, now_us):
                    continue
                if op.filter and not all(_matches(entry.value.get(k), v) for k, v in op.filter.items()):
                    continue
                candidates.append((ns, key, entry))
        kept: list[tuple[float | None, _Ns, str, _Entry]] = []
        if ranked and candidates:
            flat: list[tuple[_Ns, str, _Entry]] = []
            flat_vectors: list[list[float]] = []
            unranked: list[tuple[_Ns, str, _Entry]] = []
            for ns, key, entry in candidates:
                for vector in entry.vectors.values():
                    flat.append((ns, key, entry))
                    flat_vectors.append(vector)
                if not entry.vectors:
                    unranked.append((ns, key, entry))
            scores = _cosine(queries[op.query or ""], flat_vectors)
            order = sorted(zip(scores, flat, strict=True), key=lambda x: x[0], reverse=True)
            seen: set[tuple[_Ns, str]] = set()
            for score, (ns, key, entry) in order:  # an item ranks by its best vector
                if (ns, key) in seen:
                    continue
                rank = len(seen)
                seen.add((ns, key))
                if rank >= op.offset + op.limit:
                    break
                if rank >= op.offset:
                    kept.append((score, ns, key, entry))
            if unranked and len(kept) < op.limit:  # items without a vector fill the page after the ranked
                kept.extend((None, ns, key, entry) for ns, key, entry in unranked[: op.limit - len(kept)])
        else:
            kept = [(None, ns, key, entry) for ns, key, entry in candidates[op.offset : op.offset + op.limit]]
        out = []
        for got_score, ns, key, entry in kept:
            if op.refresh_ttl:
                self._refresh(refresh, ns, key, entry, now_us)
            out.append(SearchItem(namespace=ns, key=key, value=copy.deepcopy(entry.value),
                                  created_at=_dt_of(entry.created_us), updated_at=_dt_of(entry.updated_us),
                                  score=float(got_score) if got_score is not None else None))
        return out

    def _list_namespaces(self, op: ListNamespacesOp, now_us: int) -> list[_Ns]:
        namespaces = [ns for ns, items in self._data.items() if any(self._live(e, now_us) for e in items.values())]
        if op.match_conditions:
            namespaces = [ns for ns in namespaces if all(_ns_matches(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        else:
            namespaces = sorted(namespaces)
        return namespaces[op.offset : op.offset + op.limit]

    # -- TTL -----------------------------------------------------------------------------------------

    def sweep_ttl(self) -> int:
        """Delete every item whose expiry is before now (in as many records as the deletes need); how many went."""
        with self._lock:
            self._open()
            now_us = _us_of(self._clock())
            expired: list[list[Any]] = [
                [list(ns), key, None, None, {}]
                for ns, items in self._data.items()
                for key, entry in items.items()
                if entry.expires_us is not None and entry.expires_us < now_us
            ]
            # Several records when one cannot hold them all (each delete stands on its own): a sweep
            # in one record past the record limit failed every time, and expired items stayed forever.
            self._append_split(now_us, "w", expired)
            return len(expired)

    def _append_split(self, now_us: int, field: str, rows: list[list[Any]]) -> None:
        """Append ``rows`` (refreshes "r" or writes "w" that each stand on their own) in as many
        batch records as the record limit needs. Under self._lock."""
        part: list[list[Any]] = []
        part_bytes = 0
        for row in rows:
            size = len(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if part and part_bytes + size > self.record_size_bytes_max // 2:  # half: room for the envelope
                self._append({"op": "batch", "t": now_us, "r": [], "w": [], field: part})
                part, part_bytes = [], 0
            part.append(row)
            part_bytes += size
        if part:
            self._append({"op": "batch", "t": now_us, "r": [], "w": [], field: part})

    async def asweep_ttl(self) -> int:
        return await asyncio.to_thread(self.sweep_ttl)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> threading.Event:
        """Sweep every ``sweep_interval_minutes`` (default: the TTL config's, else 5) in a daemon
        thread until ``stop_ttl_sweeper()`` or ``close()``; returns the event that stops it.
        A sweep that fails is tried again at the next interval."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return self._sweeper_stop
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        self._sweeper_stop.clear()

        def loop() -> None:
            while not self._sweeper_stop.wait(minutes * 60):
                try:
                    self.sweep_ttl()
                except StoreClosedError:
                    return
                except JournalError:
                    continue  # reported to the next caller of the store; the sweep runs again later

        self._sweeper = threading.Thread(target=loop, name="journal-store-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return self._sweeper_stop

    def stop_ttl_sweeper(self) -> None:
        self._sweeper_stop.set()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join()

    # -- life ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the journal (after any batch in flight). Idempotent."""
        self.stop_ttl_sweeper()
        with self._lock:
            self._closed = True
            j, self._journal, self._data = self._journal, None, {}
            if j is not None:
                j.close()

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JournalStore({self.where!r})"


__all__ = [
    "BatchNotStoredError",
    "BatchTooLargeError",
    "JournalStore",
    "JournalStoreError",
    "OutcomeUnknownError",
    "StoreClosedError",
    "StoreFormatError",
    "StoreValueError",
    "VectorDimsError",
]
