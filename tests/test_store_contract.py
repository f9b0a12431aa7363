"""journal.api.Store on every backend: what the adapters rely on to keep their journals.

Open with create (whole or not at all), exists, names, copy (a fork: every record, the source
untouched, the target going its own way), delete (gone, and refused under an open writer on a
server), and refusal of names that no backend can hold as they are.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

import journal
from journal.api import Store
from tests.backends import BACKENDS, Backend, made_or_skipped


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_open_list_copy_delete(backend: Backend) -> None:
    store = journal.store(backend.store_location())
    assert isinstance(store, Store)
    assert store.names() == [] and not store.exists("a")
    with pytest.raises(journal.JournalNotFoundError):
        store.open("a")
    with store.open("a", create=True) as a:
        a.append_many([{"n": i} for i in range(1, 21)], durability="flush")
        a.append({"k": 1}, durability="flush", idempotency_key="key-1")
    assert store.exists("a") and store.names() == ["a"]
    store.copy("a", "b")
    with pytest.raises(FileExistsError):
        store.copy("a", "b")
    with pytest.raises(journal.JournalNotFoundError):
        store.copy("missing", "c")
    assert store.names() == ["a", "b"]
    with store.open("b") as b:
        assert [r.event for r in b.read()] == [{"n": i} for i in range(1, 21)] + [{"k": 1}]
        again = b.append({"k": 1}, durability="flush", idempotency_key="key-1")  # keys come along
        assert isinstance(again, journal.Committed) and again.duplicate and again.seq == 21
        assert b.append({"b": "own"}, durability="flush") == journal.Committed(22, "flush")
    with store.open("a", readonly=True) as a:
        assert a.last_seq == 21  # the source is untouched by what the copy did
    store.delete("a")
    store.delete("a")  # already gone: nothing to do
    assert store.names() == ["b"] and not store.exists("a")
    with pytest.raises(journal.JournalNotFoundError):
        store.open("a")


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "sp ace", "x" * 201])
def test_names_no_backend_can_hold_as_they_are_are_refused(backend: Backend, name: str) -> None:
    store = journal.store(backend.store_location())
    with pytest.raises(journal.InvalidArgumentError):
        store.open(name, create=True)
    assert store.names() == []


def test_one_writer_per_journal_through_one_store(backend: Backend) -> None:
    """A second writer of a journal through the same store is refused (on PostgreSQL the writer
    lock of every journal of a store is on one connection, where advisory locks are
    re-entrant), and once the first closes, the journal opens for writing again."""
    store = journal.store(backend.store_location())
    first = store.open("w", create=True)
    with pytest.raises(journal.JournalLockedError):
        store.open("w", lock_timeout_s=0.0)
    first.append({"n": 1}, durability="flush")
    first.close()
    with store.open("w", lock_timeout_s=0.0) as again:
        assert again.last_seq == 1


def test_a_copy_up_to_a_seq_with_records_appended(backend: Backend) -> None:
    """copy(upto_seq=, append=): a fork's prefix and its own first records, in one copy."""
    store = journal.store(backend.store_location())
    with store.open("src", create=True) as src:
        src.append_many([{"n": i} for i in range(1, 11)], durability="flush")
        src.append({"k": 1}, durability="flush", idempotency_key="key-1")
    store.copy("src", "fork", upto_seq=4, append=[{"own": 1}, b"\x00raw"])
    with store.open("fork") as f:
        got = list(f.read())
        assert [r.event if not r.is_bytes else r.payload for r in got] == [
            {"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"own": 1}, b"\x00raw"]
        assert f.append({"next": 1}, durability="flush") == journal.Committed(7, "flush")
    store.copy("src", "empty-prefix", upto_seq=0, append=[{"own": 1}])
    with store.open("empty-prefix", readonly=True) as e:
        assert [(r.seq, r.event) for r in e.read()] == [(1, {"own": 1})]
    for bad in (12, -1):
        with pytest.raises(ValueError):
            store.copy("src", f"bad{bad}".replace("-", "m"), upto_seq=bad)
        assert not store.exists(f"bad{bad}".replace("-", "m"))
    with pytest.raises(journal.EventNotSerializableError):
        store.copy("src", "refused", upto_seq=2, append=[{"x": object()}])
    assert not store.exists("refused")
    with store.open("src", readonly=True) as src:
        assert src.last_seq == 11  # the source is untouched
