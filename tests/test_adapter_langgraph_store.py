"""LangGraph's long-term store on journals (journal.adapters.langgraph_store) against InMemoryStore.

The differential: seeded random batches of puts (with TTLs, index settings), deletes, gets,
searches (filters with $eq $ne $gt $gte $lt $lte, nested and list values, pagination, semantic
queries), namespace listings (prefixes, suffixes, wildcards, depth, pagination), clock steps and
TTL sweeps, run on JournalStore and on InMemoryStore side by side, sync (batch) and async
(abatch), with reopens of the journal mid-sequence: every answer identical (values, timestamps,
scores, errors), and the whole state compared at each reopen. InMemoryStore reads the time with
``datetime.now(timezone.utc)`` in its module; the test replaces that module's ``datetime`` with one
whose ``now`` is the test's clock, and hands the same clock to JournalStore.

InMemoryStore keeps no TTL, so the reference adds the TTL rules the store documents (the base's
docs and the database stores: an expiry ``ttl`` minutes after a put, moved on by a read that
returns the item with ``refresh_ttl``, a sweep deleting what expired before now) around it, and
with ``omit_expired`` it hides an item whose expiry is not after now from every read (before any
filter looks at it), it lists a namespace only while it holds items (InMemoryStore also lists one a get looked into),
and gives a text indexed at two places of one batch its vector at both (InMemoryStore refuses such
a batch: it counts one vector per text against one per place).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import pathlib
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

import pytest

pytest.importorskip("langgraph.store.memory")

import langgraph.store.memory as lg_memory
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from journal.adapters.langgraph_store import JournalStore
from tests.backends import Backend, made_or_skipped
from tests.conftest import report_count

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Clock:
    """The one clock of a run: both stores read it; only the test moves it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now

    def us(self) -> int:
        return (self.now - _EPOCH) // timedelta(microseconds=1)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()

    class _Datetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return c.now if tz is not None else c.now.replace(tzinfo=None)

    monkeypatch.setattr(lg_memory, "datetime", _Datetime)
    return c


def embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder: letter counts, folded into 8 dimensions."""
    out = []
    for text in texts:
        v = [0.0] * 8
        for ch in text:
            v[ord(ch) % 8] += 1.0
        out.append(v)
    return out


INDEX: Any = {"dims": 8, "embed": embed, "fields": ["s", "tags[*]"]}


class _Pending(dict[str, Any]):
    """A namespace a read looked into: joins the store's map only when an item is put in it."""

    def __init__(self, parent: dict[Any, Any], ns: tuple[str, ...]) -> None:
        super().__init__()
        self.parent, self.ns = parent, ns

    def __setitem__(self, key: str, value: Any) -> None:
        if self.ns not in self.parent:
            dict.__setitem__(self.parent, self.ns, self)
        dict.__setitem__(self, key, value)


class _Namespaces(dict[Any, Any]):
    def __missing__(self, ns: tuple[str, ...]) -> _Pending:
        return _Pending(self, ns)


class Reference(InMemoryStore):
    """InMemoryStore with the documented TTL rules around it, listing only namespaces with items."""

    supports_ttl = True
    __slots__ = ("clock", "expiry", "omit_expired")

    def __init__(self, clock: Clock, omit_expired: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._data = _Namespaces()
        self.clock = clock
        self.omit_expired = omit_expired
        self.expiry: dict[tuple[tuple[str, ...], str], tuple[float, int]] = {}  # (ns, key) -> (ttl, expires)

    # omit_expired: an item whose expiry is not after now is hidden from every read.
    def _hidden(self, ns: tuple[str, ...], key: str) -> bool:
        got = self.expiry.get((ns, key))
        return self.omit_expired and got is not None and got[1] <= self.clock.us()

    def _filter_items(self, op: SearchOp) -> Any:
        if not self.omit_expired:
            return super()._filter_items(op)
        with self._only_visible():  # a hidden item is neither filtered (a filter may raise on it) nor counted
            return super()._filter_items(op)

    def _handle_list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        if not self.omit_expired:
            return super()._handle_list_namespaces(op)
        with self._only_visible():
            return super()._handle_list_namespaces(op)

    @contextlib.contextmanager
    def _only_visible(self) -> Iterator[None]:
        saved = self._data
        visible = {ns: {k: item for k, item in items.items() if not self._hidden(ns, k)} for ns, items in saved.items()}
        self._data = {ns: items for ns, items in visible.items() if items}
        try:
            yield
        finally:
            self._data = saved

    def _hide_gets(self, ops: list[Op], results: list[Result]) -> list[Result]:
        return [None if isinstance(op, GetOp) and isinstance(r, Item) and self._hidden(r.namespace, r.key) else r
                for op, r in zip(ops, results, strict=True)]

    def _insertinmem_store(self, to_embed: dict[str, list[tuple[tuple[str, ...], str, str]]],
                           embeddings: list[list[float]]) -> None:
        # InMemoryStore pairs one vector per text with one place per text and refuses a batch
        # where a text is indexed at two places; JournalStore gives every place its text's vector.
        for vector, places in zip(embeddings, to_embed.values(), strict=True):
            for ns, key, path in places:
                self._vectors[ns][key][path] = vector

    def _after(self, ops: list[Op], results: list[Result]) -> None:
        now = self.clock.us()
        for op, result in zip(ops, results, strict=True):
            returned: list[Item] = []
            if isinstance(op, GetOp) and op.refresh_ttl and isinstance(result, Item):
                returned = [result]
            elif isinstance(op, SearchOp) and op.refresh_ttl and isinstance(result, list):
                returned = [r for r in result if isinstance(r, Item)]
            for item in returned:
                got = self.expiry.get((item.namespace, item.key))
                if got is not None:
                    self.expiry[(item.namespace, item.key)] = (got[0], now + round(got[0] * 60_000_000))
        for op in ops:
            if isinstance(op, PutOp):
                if op.value is None or op.ttl is None:
                    self.expiry.pop((op.namespace, op.key), None)
                else:
                    self.expiry[(op.namespace, op.key)] = (op.ttl, now + round(op.ttl * 60_000_000))
        for ns in [ns for ns, items in self._data.items() if not items]:
            del self._data[ns]

    def batch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        results = self._hide_gets(ops, super().batch(ops))
        self._after(ops, results)
        return results

    async def abatch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        results = self._hide_gets(ops, await super().abatch(ops))
        self._after(ops, results)
        return results

    def sweep_ttl(self) -> int:
        now = self.clock.us()
        expired = [k for k, (_, exp) in self.expiry.items() if exp < now]
        if expired:
            self.batch([PutOp(ns, key, None) for ns, key in expired])
        return len(expired)


# -- the random operations ------------------------------------------------------------------------

LABELS = ("a", "b", "c", "docs", "users")
STRINGS = ("red apple", "blue car", "green apple", "zz", "")


def rand_ns(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice(LABELS) for _ in range(rng.randint(1, 3)))


def rand_value(rng: random.Random) -> dict[str, Any]:
    v: dict[str, Any] = {"s": rng.choice(STRINGS)}
    if rng.random() < 0.92:  # some values lack n: a numeric filter on them raises, in both stores
        v["n"] = rng.choice([rng.randint(0, 9), rng.randint(0, 9) + 0.5])
    if rng.random() < 0.5:
        v["nested"] = {"a": rng.randint(0, 2)}
    if rng.random() < 0.4:
        v["tags"] = [rng.choice(STRINGS) for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.2:
        v["flag"] = rng.random() < 0.5
    return v


def rand_filter(rng: random.Random) -> dict[str, Any] | None:
    kind = rng.randrange(9)
    if kind == 0:
        return None
    if kind == 1:
        return {"s": rng.choice(STRINGS)}
    if kind == 2:
        return {"nested": {"a": rng.randint(0, 2)}}
    if kind == 3:
        return {"tags": [rng.choice(STRINGS)]}
    if kind == 4:
        return {"flag": rng.random() < 0.5}
    ops = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
    cond = {rng.choice(ops): rng.choice([rng.randint(0, 9), 4.5]) for _ in range(rng.randint(1, 2))}
    f: dict[str, Any] = {"n": cond}
    if kind == 8:
        f["s"] = rng.choice(STRINGS)
    return f


def rand_pattern(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.choice((*LABELS, "*")) for _ in range(rng.randint(1, 2)))


def rand_op(rng: random.Random, keys: list[tuple[tuple[str, ...], str]]) -> Op:
    r = rng.random()
    if keys and r < 0.25:
        ns, key = rng.choice(keys)
    else:
        ns, key = rand_ns(rng), f"k{rng.randrange(4)}"
    if r < 0.30:
        ttl = rng.choice([None, None, 1.0, 2.5, 10.0])
        index: Literal[False] | list[str] | None = rng.choice([None, None, False, ["s"]])
        return PutOp(ns, key, rand_value(rng), index=index, ttl=ttl)
    if r < 0.40:
        return PutOp(ns, key, None)
    if r < 0.55:
        return GetOp(ns, key, refresh_ttl=rng.random() < 0.7)
    if r < 0.82:
        prefix = ns[: rng.randint(0, len(ns))]
        query = rng.choice(STRINGS[:4]) if rng.random() < 0.25 else None
        return SearchOp(prefix, rand_filter(rng), rng.randint(1, 6), rng.choice([0, 0, 1, 2, 4]), query,
                        rng.random() < 0.7)
    conditions = []
    if rng.random() < 0.6:
        conditions.append(MatchCondition("prefix", rand_pattern(rng)))
    if rng.random() < 0.4:
        conditions.append(MatchCondition("suffix", rand_pattern(rng)))
    return ListNamespacesOp(tuple(conditions), rng.choice([None, None, 1, 2, 3]), rng.randint(1, 8),
                            rng.choice([0, 0, 1, 3]))


def answer(result: Any) -> Any:
    """A result as plain data: items with their timestamps and scores."""
    if isinstance(result, Item):
        return result.dict()
    if isinstance(result, list):
        return [answer(r) for r in result]
    return result


def full_state(store: Any) -> Any:
    return answer(store.batch([SearchOp((), None, 10**6, 0, None, False), ListNamespacesOp(None, None, 10**6, 0)]))


def our_expiry(store: JournalStore) -> dict[tuple[tuple[str, ...], str], tuple[float, int]]:
    return {(ns, key): (e.ttl_minutes, e.expires_us) for ns, items in store._data.items()
            for key, e in items.items() if e.expires_us is not None and e.ttl_minutes is not None}


def run_differential(location: str, clock: Clock, seed: int, steps: int, use_async: bool,
                     omit_expired: bool = False) -> dict[str, int]:
    rng = random.Random(seed)

    def make() -> JournalStore:
        return JournalStore(location, index=INDEX, clock=clock, ttl={"refresh_on_read": True,
                                                                     "omit_expired": omit_expired})

    ours, ref = make(), Reference(clock, omit_expired=omit_expired, index=INDEX)
    counts = {"ops": 0, "batches": 0, "errors": 0, "reopens": 0, "sweeps": 0, "swept": 0, "nonempty_reads": 0}
    keys: list[tuple[tuple[str, ...], str]] = []

    async def call(store: Any, ops: list[Op]) -> tuple[str, Any]:
        try:
            got = await store.abatch(ops) if use_async else store.batch(ops)
        except (TypeError, ValueError) as exc:
            return "error", type(exc).__name__
        return "ok", answer(got)

    async def main() -> None:
        nonlocal ours
        for step in range(steps):
            r = rng.random()
            if r < 0.06:
                clock.now += timedelta(minutes=rng.choice([0.5, 1, 2, 3, 7]))
                continue
            if r < 0.09:
                swept, want = ours.sweep_ttl(), ref.sweep_ttl()
                assert swept == want, (step, swept, want)
                counts["sweeps"] += 1
                counts["swept"] += swept
                continue
            if r < 0.095:
                ours.close()
                ours = make()
                counts["reopens"] += 1
                assert full_state(ours) == full_state(ref), step
                assert our_expiry(ours) == ref.expiry, step
                continue
            ops = [rand_op(rng, keys) for _ in range(rng.choice([1, 1, 1, 2, 3, 5]))]
            answered, wanted = await call(ours, ops), await call(ref, ops)
            assert answered == wanted, (step, ops, answered, wanted)
            counts["ops"] += len(ops)
            counts["batches"] += 1
            counts["errors"] += answered[0] == "error"
            counts["nonempty_reads"] += sum(1 for x in (answered[1] if answered[0] == "ok" else []) if x)
            keys.extend((op.namespace, op.key) for op in ops if isinstance(op, PutOp) and op.value is not None)
            del keys[:-40]
        assert full_state(ours) == full_state(ref)
        assert our_expiry(ours) == ref.expiry
        ours.close()
        reopened = make()
        assert full_state(reopened) == full_state(ref)
        assert our_expiry(reopened) == ref.expiry
        reopened.close()

    asyncio.run(main())
    return counts


@pytest.mark.parametrize("use_async", [False, True], ids=["batch", "abatch"])
def test_differential_against_in_memory_store_on_files(tmp_path: pathlib.Path, clock: Clock, use_async: bool) -> None:
    counts = run_differential(str(tmp_path / "store"), clock, seed=31 + use_async, steps=3000, use_async=use_async)
    report_count(f"LangGraph store differential on files ({'abatch' if use_async else 'batch'})",
                 ", ".join(f"{k} {v}" for k, v in counts.items()))
    # The run reached what it claims to test: many ops, errors, sweeps that removed items, reopens.
    assert counts["ops"] >= 3000 and counts["errors"] > 0 and counts["swept"] > 0 and counts["reopens"] >= 5
    assert counts["nonempty_reads"] > 500


def test_differential_with_omit_expired(tmp_path: pathlib.Path, clock: Clock) -> None:
    """TTLConfig.omit_expired: expired items, until swept, are neither returned, nor refreshed,
    nor listed (the reference hides them from InMemoryStore's reads)."""
    counts = run_differential(str(tmp_path / "store"), clock, seed=5, steps=2000, use_async=False, omit_expired=True)
    report_count("LangGraph store differential with omit_expired (files)",
                 ", ".join(f"{k} {v}" for k, v in counts.items()))
    assert counts["ops"] >= 2000 and counts["swept"] > 0 and counts["reopens"] >= 2


@pytest.fixture(params=("postgres", "nats"))
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


@pytest.mark.parametrize("use_async", [False, True], ids=["batch", "abatch"])
def test_differential_against_in_memory_store_on_servers(server: Backend, clock: Clock, use_async: bool) -> None:
    counts = run_differential(server.store_location(), clock, seed=7 + use_async, steps=1000, use_async=use_async)
    report_count(f"LangGraph store differential on {server.name} ({'abatch' if use_async else 'batch'})",
                 ", ".join(f"{k} {v}" for k, v in counts.items()))
    assert counts["ops"] >= 1000 and counts["reopens"] >= 1 and counts["swept"] > 0


def test_float_scores_are_finite_in_the_run(clock: Clock, tmp_path: pathlib.Path) -> None:
    """The semantic part of the differential ranks by real scores, not all-None ones."""
    with JournalStore(tmp_path / "s", index=INDEX, clock=clock) as store:
        store.put(("d",), "1", {"s": "red apple"})
        store.put(("d",), "2", {"s": "blue car"})
        store.put(("d",), "3", {"s": "blue car"}, index=False)
        got = store.search(("d",), query="red apple", limit=3)
        assert [r.key for r in got] == ["1", "2", "3"]
        assert got[0].score is not None and math.isclose(got[0].score, 1.0) and got[2].score is None
