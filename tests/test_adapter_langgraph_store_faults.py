"""JournalStore's durability and its refusals: a batch is one record, a crash (a torn tail, a
kill -9) leaves whole batches, a reopen rebuilds the same store, injected I/O faults on the write
and read paths raise typed errors and change nothing, corrupt or foreign records are reported
and never served, values JSON cannot keep are refused, and the TTL rules (refresh, omit_expired,
sweep, the sweeper thread)."""

from __future__ import annotations

import asyncio
import errno
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

import journal
from journal.adapters.langgraph_store import (
    STORE_NAME_DEFAULT,
    BatchNotStoredError,
    BatchTooLargeError,
    JournalStore,
    OutcomeUnknownError,
    StoreClosedError,
    StoreFormatError,
    StoreValueError,
)
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from tests.backends import Backend, made_or_skipped
from tests.conftest import frames_of, segments


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def state(store: JournalStore) -> Any:
    """Everything a caller can see, without refreshing a TTL."""
    items, namespaces = store.batch([SearchOp((), None, 10**6, 0, None, False), ListNamespacesOp(None, None, 10**6)])
    assert isinstance(items, list) and isinstance(namespaces, list)
    return [i.dict() for i in items], namespaces  # type: ignore[union-attr]


def fill(store: JournalStore, batches: int, per_batch: int = 4, start: int = 0) -> None:
    for b in range(start, start + batches):
        store.batch([PutOp(("b", str(b % 3)), f"k{b}-{i}", {"batch": b, "i": i}) for i in range(per_batch)])


def journal_dir(root: pathlib.Path) -> pathlib.Path:
    return root / STORE_NAME_DEFAULT


def test_a_batch_is_one_record_and_a_reopen_rebuilds_the_same_store(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with JournalStore(tmp_path, clock=clock) as store:
        fill(store, 3)
        first = store.last_seq
        store.batch([PutOp(("a",), "x", {"v": 1}), PutOp(("c", "d"), "y", {"v": 2}), PutOp(("b", "0"), "k0-0", None),
                     GetOp(("a",), "x")])
        assert store.last_seq == first + 1  # puts in three namespaces and a delete: one record
        store.batch([GetOp(("a",), "x"), SearchOp(("b",))])
        assert store.last_seq == first + 1  # reads without a TTL write nothing
        before = state(store)
    with JournalStore(tmp_path, clock=clock) as store:
        assert state(store) == before


def _cut_last_record(root: pathlib.Path, keep_bytes_of_payload: int) -> None:
    seg = segments(journal_dir(root))[-1]
    last = frames_of(seg)[-1]
    with open(seg, "r+b") as f:
        f.truncate(last.payload_offset + keep_bytes_of_payload)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.99])
def test_a_torn_last_batch_is_gone_whole_and_the_earlier_ones_whole(tmp_path: pathlib.Path, fraction: float) -> None:
    with JournalStore(tmp_path) as store:
        fill(store, 5)
        before = state(store)
        store.batch([PutOp(("b", "9"), f"torn-{i}", {"big": "x" * 200, "i": i}) for i in range(6)])
        last = frames_of(segments(journal_dir(tmp_path))[-1])[-1]
    _cut_last_record(tmp_path, int(last.stored_len * fraction))
    with JournalStore(tmp_path) as store:
        assert state(store) == before  # none of the torn batch, all of the others
        store.put(("b", "9"), "after", {"ok": True})  # and the store goes on
        assert store.get(("b", "9"), "after") is not None


_CHILD = textwrap.dedent("""
    import sys
    from langgraph.store.base import PutOp
    from journal.adapters.langgraph_store import JournalStore
    store = JournalStore(sys.argv[1])
    b = int(sys.argv[2])
    while True:
        store.batch([PutOp(("kill", str(i % 3)), f"{b}-{i}", {"batch": b, "pad": "p" * (b % 50) * 40})
                     for i in range(7)])
        print(b, flush=True)
        b += 1
""")


def test_kill_9_mid_batches_leaves_whole_batches(tmp_path: pathlib.Path) -> None:
    """A writer killed at a point that varies per round (after a number of acknowledged batches
    the parent counts, while it is writing on): every batch acknowledged is there, every batch
    there is whole, and they are the first ones, with no gap."""
    start = 0
    for round_ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])})
        assert proc.stdout is not None
        acked = -1
        for _ in range(3 + round_ % 5):
            acked = int(proc.stdout.readline())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with JournalStore(tmp_path) as store:
            by_batch: dict[int, int] = {}
            for item in store.search(("kill",), limit=10**6, refresh_ttl=False):
                by_batch[item.value["batch"]] = by_batch.get(item.value["batch"], 0) + 1
        assert all(n == 7 for n in by_batch.values()), by_batch  # no batch in part
        # Batches are written one after another: what is there is every batch up to some last
        # one, at least the last acknowledged (the child may have run on before the kill landed).
        assert sorted(by_batch) == list(range(max(by_batch) + 1)) and max(by_batch) >= acked, (acked, sorted(by_batch))
        start = max(by_batch) + 1


def test_a_write_fault_raises_typed_and_changes_nothing(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with JournalStore(tmp_path, fs=fs) as store:
        fill(store, 3)
        before, last = state(store), store.last_seq
        fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
        with pytest.raises(BatchNotStoredError, match="not stored") as info:
            store.batch([PutOp(("b", "0"), "new", {"v": 1}), PutOp(("b", "1"), "k1-0", None)])
        assert info.value.outcome is not None
        assert state(store) == before and store.last_seq == last
        store.batch([PutOp(("b", "0"), "new", {"v": 1}), PutOp(("b", "1"), "k1-0", None)])  # the retry
        after = state(store)
        assert after != before
    with JournalStore(tmp_path) as store:
        assert state(store) == after


def test_a_lost_ack_raises_typed_and_the_next_call_reads_the_disk(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with JournalStore(tmp_path, fs=fs) as store:
        fill(store, 2)
        fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
        with pytest.raises(OutcomeUnknownError, match="unknown"):
            store.put(("a",), "maybe", {"v": 1})
        fs.clear()
        # The journal was closed; this call reopens it (recovery) and folds what is on disk,
        # where the bytes did arrive (only the fdatasync failed).
        got = store.get(("a",), "maybe")
        assert got is not None and got.value == {"v": 1}
        after = state(store)
    with JournalStore(tmp_path) as store:
        assert state(store) == after


@pytest.mark.parametrize("op", ["pread", "open_read"])
def test_a_read_fault_on_reopen_raises_typed_and_serves_nothing(tmp_path: pathlib.Path, op: str) -> None:
    with JournalStore(tmp_path) as store:
        fill(store, 4)
        before = state(store)
    fs = FaultyFileSystem(OsFileSystem())
    fs.fail(op, errno.EIO, after=0, times=-1)
    store = JournalStore(tmp_path, fs=fs)
    with pytest.raises(journal.JournalIOError):
        store.get(("b", "0"), "k0-0")
    with pytest.raises(journal.JournalIOError):  # still nothing served, no half-read store
        store.search(("b",))
    assert store._data == {} and store.last_seq == 0
    fs.clear()
    assert state(store) == before  # the fault gone, the same store
    store.close()


def test_corrupt_committed_data_is_reported_never_served(tmp_path: pathlib.Path) -> None:
    with JournalStore(tmp_path) as store:
        fill(store, 4)
    seg = segments(journal_dir(tmp_path))[0]
    frame = frames_of(seg)[2]  # a batch in the middle, committed and synced
    data = bytearray(seg.read_bytes())
    data[frame.payload_offset + frame.stored_len // 2] ^= 0x01
    seg.write_bytes(bytes(data))
    store = JournalStore(tmp_path)
    for _ in range(2):
        with pytest.raises(journal.CorruptionError):
            store.search(("b",))
    store.close()


@pytest.fixture(params=("file", "postgres", "nats"))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_a_tampered_batch_is_reported_on_every_backend(backend: Backend) -> None:
    """One bit flipped in a committed batch's stored bytes, behind the store's back (a file, a
    row, a stream message): the store refuses to serve, on every call."""
    name = f"lgs{uuid.uuid4().hex[:10]}"
    target = backend.target(name)
    where = re.sub(r"journal=[^&]*&?", "", target) if "://" in target else str(pathlib.Path(target).parent)
    with JournalStore(where, name=name) as store:
        fill(store, 4)
    backend.tamper(target, 3)
    store = JournalStore(where, name=name)
    for _ in range(2):
        with pytest.raises(journal.CorruptionError):
            store.search(("b",))
    store.close()


@pytest.mark.parametrize("record", [
    {"op": "batch", "t": 1, "r": [], "w": [[["a"], "k", {"v": 1}, None, {}]], "extra": 1} | {"t": "1"},
    {"op": "batch", "t": 1, "r": [], "w": [[["a"], 7, {"v": 1}, None, {}]]},
    {"op": "batch", "t": 1, "r": [], "w": [[["a"], "k", [1], None, {}]]},
    {"op": "batch", "t": 1, "r": [], "w": [[["a"], "k", {"v": 1}, "10", {}]]},
    {"op": "batch", "t": 1, "r": [], "w": [[["a"], "k", {"v": 1}, None, {"$": ["x"]}]]},
    {"op": "batch", "t": 1, "r": [["a", "k", 5]], "w": []},
    {"op": "batch", "t": 10**19, "r": [], "w": [[["a"], "k", {"v": 1}, None, {}]]},
    {"op": "unknown"},
    b"not json",
], ids=["time", "key", "value", "ttl", "vector", "refresh", "time-range", "op", "bytes"])
def test_a_foreign_record_is_reported_and_nothing_of_it_served(tmp_path: pathlib.Path, record: Any) -> None:
    with JournalStore(tmp_path) as store:
        fill(store, 2)
    with journal.open(journal_dir(tmp_path)) as j:
        j.append(record)
        seq = j.last_seq
    store = JournalStore(tmp_path)
    with pytest.raises(StoreFormatError) as info:
        store.get(("b", "0"), "k0-0")
    assert info.value.seq == seq and store._data == {}
    store.close()


def test_a_journal_that_is_not_a_store_is_refused(tmp_path: pathlib.Path) -> None:
    with journal.open(journal_dir(tmp_path), create=True) as j:
        j.append({"op": "adk", "v": 1})
    with pytest.raises(StoreFormatError, match="no langgraph-store header"):
        JournalStore(tmp_path).get(("a",), "k")


@pytest.mark.parametrize("value", [
    {"t": (1, 2)}, {"f": float("nan")}, {"f": float("inf")}, {1: "int key"}, {"d": datetime(2026, 1, 1)},
    {"deep": [[[[[[[[[[[[]]]]]]]]]]]] * 1} | {"deeper": eval("[" * 120 + "]" * 120)},
], ids=["tuple", "nan", "inf", "int-key", "datetime", "too-deep"])
def test_values_json_cannot_keep_are_refused_and_nothing_is_written(tmp_path: pathlib.Path, value: Any) -> None:
    with JournalStore(tmp_path) as store:
        fill(store, 1)
        before, last = state(store), store.last_seq
        with pytest.raises(StoreValueError, match="nothing was written"):
            store.batch([PutOp(("a",), "ok", {"v": 1}), PutOp(("a",), "bad", value)])
        assert state(store) == before and store.last_seq == last


def test_a_batch_over_the_record_limit_is_refused_whole(tmp_path: pathlib.Path) -> None:
    with JournalStore(tmp_path, record_size_bytes_max=4096) as store:
        fill(store, 1)
        before, last = state(store), store.last_seq
        with pytest.raises(BatchTooLargeError):
            store.batch([PutOp(("a",), f"k{i}", {"pad": "x" * 1000}) for i in range(8)])
        assert state(store) == before and store.last_seq == last


def test_one_store_per_journal_and_close(tmp_path: pathlib.Path) -> None:
    first = JournalStore(tmp_path)
    first.put(("a",), "k", {"v": 1})
    second = JournalStore(tmp_path)
    with pytest.raises(journal.JournalLockedError):
        second.get(("a",), "k")
    first.close()
    with pytest.raises(StoreClosedError):
        first.get(("a",), "k")
    got = second.get(("a",), "k")
    assert got is not None and got.value == {"v": 1}
    second.close()


def test_concurrent_abatch_calls_each_land_whole(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        with JournalStore(tmp_path) as store:
            await asyncio.gather(*(store.abatch([PutOp(("c", str(i % 4)), f"k{i}-{j}", {"i": i, "j": j})
                                                 for j in range(3)]) for i in range(40)))
            assert store.last_seq == 1 + 40  # the header, then one record per batch

    asyncio.run(main())
    with JournalStore(tmp_path) as store:
        items = store.search(("c",), limit=1000)
        assert sorted((i.value["i"], i.value["j"]) for i in items) == [(i, j) for i in range(40) for j in range(3)]


def test_returned_values_are_copies(tmp_path: pathlib.Path) -> None:
    with JournalStore(tmp_path) as store:
        store.put(("a",), "k", {"list": [1]})
        got = store.get(("a",), "k")
        assert got is not None
        got.value["list"].append(2)
        again = store.get(("a",), "k")
        assert again is not None and again.value == {"list": [1]}


# -- TTL ---------------------------------------------------------------------------------------------


def test_ttl_refresh_on_read_is_durable_and_sweep_deletes_what_expired(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with JournalStore(tmp_path, clock=clock, ttl={"default_ttl": 10}) as store:
        store.put(("a",), "read", {"v": 1})
        store.put(("a",), "unread", {"v": 2})
        store.put(("a",), "forever", {"v": 3}, ttl=None)
        clock.now += timedelta(minutes=8)
        assert store.get(("a",), "read") is not None  # its expiry moves to 18 minutes
        assert store.get(("a",), "unread", refresh_ttl=False) is not None
    clock.now += timedelta(minutes=5)  # 13: "unread" expired at 10, "read" lives to 18
    with JournalStore(tmp_path, clock=clock, ttl={"default_ttl": 10}) as store:
        assert store.get(("a",), "unread", refresh_ttl=False) is not None  # expired, not swept: served
        assert store.sweep_ttl() == 1
        assert store.get(("a",), "unread") is None
        assert store.get(("a",), "read", refresh_ttl=False) is not None
        clock.now += timedelta(minutes=6)  # 19
        assert store.sweep_ttl() == 1
        assert [i.key for i in store.search(("a",))] == ["forever"]
    with JournalStore(tmp_path, clock=clock) as store:
        assert [i.key for i in store.search(("a",))] == ["forever"]


def test_omit_expired_hides_expired_items_from_every_read(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    with JournalStore(tmp_path, clock=clock, ttl={"omit_expired": True}) as store:
        store.put(("gone",), "k", {"v": 1}, ttl=1)
        store.put(("mixed",), "old", {"v": 1}, ttl=1)
        store.put(("mixed",), "new", {"v": 2})
        clock.now += timedelta(minutes=1)  # exactly at the expiry: expired for reads
        assert store.get(("gone",), "k") is None
        assert [i.key for i in store.search(())] == ["new"]
        assert store.list_namespaces() == [("mixed",)]
        last = store.last_seq
        assert store.get(("mixed",), "old") is None and store.last_seq == last  # nothing refreshed
        assert store.sweep_ttl() == 0  # expiry not before now yet
        clock.now += timedelta(microseconds=1)
        assert store.sweep_ttl() == 2


def test_the_sweeper_thread_sweeps_and_stops(tmp_path: pathlib.Path) -> None:
    clock = Clock()
    swept = threading.Event()
    with JournalStore(tmp_path, clock=clock) as store:
        store.put(("a",), "k", {"v": 1}, ttl=1)
        clock.now += timedelta(minutes=2)
        sweep = store.sweep_ttl

        def sweep_and_tell() -> int:
            n = sweep()
            if n:
                swept.set()
            return n

        store.sweep_ttl = sweep_and_tell  # type: ignore[method-assign]
        stop = store.start_ttl_sweeper(sweep_interval_minutes=1e-6)
        assert swept.wait(60), "the sweeper never swept"
        store.stop_ttl_sweeper()
        assert stop.is_set() and store._sweeper is None
        assert store.get(("a",), "k") is None
