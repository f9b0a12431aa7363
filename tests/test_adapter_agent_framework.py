"""journal.adapters.agent_framework: Agent Framework's HistoryProvider and workflow CheckpointStorage.

What the framework gives to test a third-party store with: nothing in its package registry's
sdists (agent-framework-core, the agent-framework meta package, agent-framework-redis,
-azure-cosmos and -lab were looked at; none ships a test file), which the first test checks
of the pinned release, so that a release that ships its tests fails it and gets them run here.
So the contract is held three ways: a contract test written from the protocol's documented
behaviour, run on this adapter AND on the framework's own InMemoryCheckpointStorage and
FileCheckpointStorage (so a check that the framework's stores fail is not a check of the
contract); differential runs of random operation sequences against the framework's in-memory
checkpoint storage and its file history provider, with reopens between them, that must give
identical answers; and the durability, fault and corruption tests the framework's stores
cannot pass (an acknowledged checkpoint survives; a torn or corrupt journal is a typed error).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import random
import subprocess
import sys
import tarfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra is not installed "
                                              "(pip install -e '.[agent-framework]')")

from agent_framework import (
    FileCheckpointStorage,
    FileHistoryProvider,
    InMemoryCheckpointStorage,
    InMemoryHistoryProvider,
    Message,
    WorkflowCheckpoint,
    WorkflowCheckpointException,
)

import journal
from journal.adapters.agent_framework import (
    CheckpointFormatError,
    HistoryFormatError,
    JournalCheckpointStorage,
    JournalHistoryProvider,
    OutcomeUnknownError,
    WriteNotCommittedError,
    escaped_name,
)
from journal.api import CorruptionError, JournalIOError
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from tests.backends import FileBackend
from tests.conftest import frames_of, report_count

T = TypeVar("T")
DIFF_OPS = 1500  # random operations per differential run
PINNED = "1.26.0"  # constraints/ci.txt's agent-framework-core


def run(coro: Awaitable[T]) -> T:
    async def go() -> T:
        return await coro

    return asyncio.run(go())


def cp(workflow: str = "w", *, cid: str | None = None, previous: str | None = None, stamp: str | None = None,
       state: dict[str, Any] | None = None, iteration: int = 0) -> WorkflowCheckpoint:
    kw: dict[str, Any] = {}
    if cid is not None:
        kw["checkpoint_id"] = cid
    if stamp is not None:
        kw["timestamp"] = stamp
    return WorkflowCheckpoint(workflow_name=workflow, graph_signature_hash="g", previous_checkpoint_id=previous,
                              state=state or {}, iteration_count=iteration, **kw)


# -- the framework's own tests: none ship --------------------------------------------------------


def test_the_pinned_release_ships_no_tests_to_run(tmp_path: Path) -> None:
    """If this fails, the release now ships tests: run its checkpoint and history tests against the
    adapter here, as tests/test_adapter_openai_agents.py runs the Agents SDK's."""
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                          f"agent-framework-core=={PINNED}", "-d", str(tmp_path)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"the package registry is not reachable: {got.stderr[-300:]}")
    (tarball,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    tests = [n for n in names if "/tests/" in n or os.path.basename(n).startswith("test_")]
    report_count("agent-framework-core sdist files", f"{len(names)} ({len(tests)} tests)")
    assert names and tests == [], tests


# -- the contract, on ours and on the framework's own storages ------------------------------------

Storage = Any


@pytest.fixture(params=["journal", "in-memory", "file"])
def storages(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Storage]]:
    """A maker of storages over one place (a second one made sees what the first stored)."""
    made: list[Any] = []

    def make() -> Storage:
        s: Any
        if request.param == "journal":
            for old in made:
                old.close()
            s = JournalCheckpointStorage(tmp_path)
        elif request.param == "file":
            s = FileCheckpointStorage(tmp_path)
        else:
            s = made[0] if made else InMemoryCheckpointStorage()
        made.append(s)
        return s

    yield make
    for s in made:
        if isinstance(s, JournalCheckpointStorage):
            s.close()


def test_checkpoint_contract(storages: Callable[[], Storage]) -> None:
    async def main() -> None:
        s = storages()
        a = cp("w", cid="a", stamp="2026-01-01T00:00:00+00:00", state={"x": [1, 2], "s": {3}})
        b = cp("w", cid="b", previous="a", stamp="2026-01-01T00:00:01+00:00")
        c = cp("other", cid="c")
        assert await s.save(a) == "a" and await s.save(b) == "b" and await s.save(c) == "c"
        loaded = await s.load("a")
        assert loaded.to_dict() == a.to_dict() and loaded is not a  # a copy, sets and all
        assert await s.list_checkpoint_ids(workflow_name="w") == ["a", "b"]
        assert [x.checkpoint_id for x in await s.list_checkpoints(workflow_name="w")] == ["a", "b"]
        assert await s.list_checkpoint_ids(workflow_name="nobody") == []
        latest = await s.get_latest(workflow_name="w")
        assert latest is not None and latest.checkpoint_id == "b"
        assert await s.get_latest(workflow_name="nobody") is None
        with pytest.raises(WorkflowCheckpointException):
            await s.load("missing")
        # Same timestamp: the one no other names as previous wins, whatever the save order.
        t = "2026-02-01T00:00:00+00:00"
        await s.save(cp("tie", cid="z1", stamp=t, previous="y"))
        await s.save(cp("tie", cid="y", stamp=t))
        got = await s.get_latest(workflow_name="tie")
        assert got is not None and got.checkpoint_id == "z1"
        assert await s.delete("a") is True and await s.delete("a") is False
        with pytest.raises(WorkflowCheckpointException):
            await s.load("a")
        # Another storage over the same place sees what is stored.
        again = storages()
        assert await again.list_checkpoint_ids(workflow_name="w") == ["b"]
        assert (await again.load("c")).workflow_name == "other"

    run(main())


def test_a_checkpoint_that_would_not_load_is_refused_by_save(tmp_path: Path) -> None:
    class Opaque:
        pass

    async def main() -> None:
        s = JournalCheckpointStorage(tmp_path)
        with pytest.raises(WorkflowCheckpointException, match="refusing to save"):
            await s.save(cp(state={"o": Opaque()}))
        assert await s.list_checkpoint_ids(workflow_name="w") == []
        s.close()

    run(main())


# -- differential: random operations, identical answers -------------------------------------------


def _answer(call: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
    async def go() -> Any:
        try:
            got = await call()
        except WorkflowCheckpointException:
            return "error"
        if isinstance(got, WorkflowCheckpoint):
            return got.to_dict()
        if isinstance(got, list) and got and isinstance(got[0], WorkflowCheckpoint):
            return [x.to_dict() for x in got]
        return got

    return go()


def _op(s: Storage, op: str, wf: str, cid: str, prev: str | None, stamp: str, n: int
        ) -> Callable[[], Awaitable[Any]]:
    if op == "save":
        return lambda: s.save(cp(wf, cid=cid, previous=prev, stamp=stamp, state={"n": n}))
    if op == "load":
        return lambda: s.load(cid)
    if op == "list":
        return lambda: s.list_checkpoints(workflow_name=wf)
    if op == "ids":
        return lambda: s.list_checkpoint_ids(workflow_name=wf)
    if op == "latest":
        return lambda: s.get_latest(workflow_name=wf)
    return lambda: s.delete(cid)


def test_checkpoints_differential_against_the_in_memory_storage(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "0")) + 31)
    ids = [f"c{i}" for i in range(12)]
    workflows = ["w1", "w2", "w/3"]
    stamps = [f"2026-01-01T00:00:0{i}+00:00" for i in range(4)]

    async def main() -> int:
        ref = InMemoryCheckpointStorage()
        ours = JournalCheckpointStorage(tmp_path)
        compared = 0
        try:
            for _ in range(DIFF_OPS):
                op = rng.choice(["save", "save", "load", "list", "ids", "latest", "delete", "reopen"])
                if op == "reopen":
                    ours.close()
                    ours = JournalCheckpointStorage(tmp_path)
                    continue
                wf = rng.choice(workflows)
                cid = rng.choice(ids)
                prev, stamp, n = rng.choice([None, *ids]), rng.choice(stamps), rng.randint(0, 3)
                want = await _answer(_op(ref, op, wf, cid, prev, stamp, n))
                got = await _answer(_op(ours, op, wf, cid, prev, stamp, n))
                assert got == want, (op, wf, cid)
                compared += 1
        finally:
            ours.close()
        return compared

    compared = run(main())
    report_count("agent-framework checkpoint differential", f"{compared} answers identical")


def _message(rng: random.Random, n: int) -> Message:
    role = rng.choice(["user", "assistant"])
    with_id = rng.random() < 0.6
    return Message(role=role, contents=[f"text {rng.randint(0, 4)}"], message_id=f"m{n}" if with_id else None)


@pytest.mark.parametrize("reference", ["file", "in-memory"])
def test_history_differential_against_the_frameworks_providers(tmp_path: Path, reference: str) -> None:
    rng = random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "0")) + 32)
    sessions = ["s1", "s 2/..", None]

    async def main() -> int:
        ref: Any = FileHistoryProvider(tmp_path / "ref") if reference == "file" else InMemoryHistoryProvider()
        states: dict[Any, dict[str, Any]] = {sid: {} for sid in sessions}
        ours = JournalHistoryProvider(tmp_path / "ours")
        sent: list[list[Message]] = []
        compared = 0
        counter = 0
        try:
            for _ in range(DIFF_OPS // 3):
                sid = rng.choice(sessions)
                op = rng.choice(["save", "save", "resend", "get", "reopen"])
                if op == "reopen":
                    ours.close()
                    ours = JournalHistoryProvider(tmp_path / "ours")
                    continue
                if op == "get":
                    want = [m.to_dict() for m in await ref.get_messages(sid, state=states[sid])]
                    got = [m.to_dict() for m in await ours.get_messages(sid)]
                    assert got == want, sid
                    compared += 1
                    continue
                if op == "resend" and sent:
                    batch = rng.choice(sent)  # a save sent again (after a lost acknowledgement)
                else:
                    batch = []
                    for _ in range(rng.randint(1, 3)):
                        counter += 1
                        batch.append(_message(rng, counter))
                    sent.append(batch)
                await ref.save_messages(sid, batch, state=states[sid])
                await ours.save_messages(sid, batch)
        finally:
            ours.close()
        return compared

    compared = run(main())
    report_count(f"agent-framework history differential vs {reference}", f"{compared} answers identical")


# -- durability, idempotence, faults, corruption --------------------------------------------------


def test_history_survives_a_reopen_and_a_resent_save_is_stored_once(tmp_path: Path) -> None:
    msgs = [Message(role="user", contents=["hi"], message_id="u1"),
            Message(role="assistant", contents=["hello"], message_id="a1")]

    async def main() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            await p.save_messages("s", msgs)
            await p.save_messages("s", msgs)
        async with JournalHistoryProvider(tmp_path) as p:
            await p.save_messages("s", msgs[1:])
            got = await p.get_messages("s")
            assert [(m.message_id, m.text) for m in got] == [("u1", "hi"), ("a1", "hello")]
        j = journal.store(str(tmp_path)).open(JournalHistoryProvider.journal_name("s"))
        assert j.last_seq == 2  # the header and one save: the re-sends wrote nothing
        j.close()

    run(main())


def test_history_write_faults_are_typed_and_change_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    first = [Message(role="user", contents=["a"], message_id="1")]
    second = [Message(role="assistant", contents=["b"], message_id="2")]

    async def main() -> None:
        p = JournalHistoryProvider(tmp_path, fs=fs)
        await p.save_messages("s", first)
        fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
        with pytest.raises(WriteNotCommittedError, match="not stored"):
            await p.save_messages("s", second)
        assert [m.message_id for m in await p.get_messages("s")] == ["1"]
        fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
        with pytest.raises(OutcomeUnknownError, match="unknown"):
            await p.save_messages("s", second)
        fs.clear()
        # The session was closed: this call reads the journal again (recovery), where the bytes are.
        assert [m.message_id for m in await p.get_messages("s")] == ["1", "2"]
        await p.save_messages("s", second)  # the retry the error allows: stored once
        assert [m.message_id for m in await p.get_messages("s")] == ["1", "2"]
        p.close()

    run(main())


def test_checkpoint_write_faults_are_typed_and_an_acknowledged_checkpoint_is_kept(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        s = JournalCheckpointStorage(tmp_path, fs=fs)
        await s.save(cp(cid="a"))
        fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
        with pytest.raises(WriteNotCommittedError):
            await s.save(cp(cid="b"))
        assert await s.list_checkpoint_ids(workflow_name="w") == ["a"]
        fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
        with pytest.raises(OutcomeUnknownError):
            await s.delete("a")
        fs.clear()
        assert await s.list_checkpoint_ids(workflow_name="w") == []  # reread: the delete had arrived
        await s.save(cp(cid="b"))
        s.close()
        again = JournalCheckpointStorage(tmp_path)
        assert await again.list_checkpoint_ids(workflow_name="w") == ["b"]
        again.close()

    run(main())


@pytest.mark.parametrize("kind", ["history", "checkpoints"])
def test_read_faults_are_typed(tmp_path: Path, kind: str) -> None:
    async def fill() -> None:
        if kind == "history":
            async with JournalHistoryProvider(tmp_path) as p:
                await p.save_messages("s", [Message(role="user", contents=["a"])])
        else:
            async with JournalCheckpointStorage(tmp_path) as s:
                await s.save(cp(cid="a"))

    run(fill())
    fs = FaultyFileSystem(OsFileSystem())
    fs.fail("pread", errno.EIO, after=0, times=-1)

    async def read() -> None:
        if kind == "history":
            async with JournalHistoryProvider(tmp_path, fs=fs) as p:
                await p.get_messages("s")
        else:
            async with JournalCheckpointStorage(tmp_path, fs=fs) as s:
                await s.load("a")

    with pytest.raises(JournalIOError, match="injected"):
        run(read())
    assert fs.injected, "no read reached the file layer"


def test_a_read_fault_after_opening_is_typed(tmp_path: Path) -> None:
    """load reads the checkpoint's record by seq after the index was built: a failed read there too."""
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        s = JournalCheckpointStorage(tmp_path, fs=fs)
        await s.save(cp(cid="a", state={"k": 1}))
        s.close()
        s = JournalCheckpointStorage(tmp_path, fs=fs)
        fs.fail("pread", errno.EIO, after=fs.calls["pread"], times=-1)
        with pytest.raises(JournalIOError):
            await s.load("a")
        fs.clear()
        assert (await s.load("a")).state == {"k": 1}
        s.close()

    run(main())


def _segment(tmp_path: Path, name: str) -> Path:
    (seg,) = sorted((tmp_path / name).glob("*.seg"))
    return seg


@pytest.mark.parametrize("kind", ["history", "checkpoints"])
def test_a_corrupt_journal_is_a_typed_error(tmp_path: Path, kind: str) -> None:
    async def fill() -> str:
        if kind == "history":
            async with JournalHistoryProvider(tmp_path) as p:
                for n in range(4):
                    await p.save_messages("s", [Message(role="user", contents=[f"{n} " * 200])])
            return JournalHistoryProvider.journal_name("s")
        async with JournalCheckpointStorage(tmp_path) as s:
            for n in range(4):
                await s.save(cp(cid="ab"[n % 2] + str(n), state={"pad": f"{n} " * 200}))
            return s.journal_name

    name = run(fill())
    # One bit of record 2's payload, with a later record after it: corruption, not a torn tail.
    FileBackend(tmp_path).tamper(str(tmp_path / name), 2)

    async def read() -> None:
        if kind == "history":
            async with JournalHistoryProvider(tmp_path) as p:
                await p.get_messages("s")
        else:
            async with JournalCheckpointStorage(tmp_path) as s:
                await s.load("a0")

    with pytest.raises(CorruptionError):
        run(read())


def test_a_foreign_record_is_a_typed_error(tmp_path: Path) -> None:
    store = journal.store(str(tmp_path))
    j = store.open(JournalHistoryProvider.journal_name("s"), create=True)
    j.append({"op": "af-history", "v": 1, "session_id": "s"})
    j.append({"op": "save", "messages": [{"role": {"nested": True}, "contents": 5}]})
    j.close()
    j = store.open("af-checkpoints-" + escaped_name("checkpoints"), create=True)
    j.append({"op": "af-checkpoints", "v": 1, "name": "checkpoints"})
    j.append({"op": "save", "id": "a", "workflow": "w", "timestamp": "not a time", "previous": None,
              "checkpoint": {}})
    j.close()

    async def read() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            await p.get_messages("s")

    with pytest.raises(HistoryFormatError, match="seq 2"):
        run(read())
    with pytest.raises(CheckpointFormatError, match="ISO 8601"):
        JournalCheckpointStorage(tmp_path)


def test_a_torn_tail_loses_only_the_unacknowledged_write(tmp_path: Path) -> None:
    async def fill() -> None:
        async with JournalCheckpointStorage(tmp_path) as s:
            await s.save(cp(cid="a"))
            await s.save(cp(cid="b"))

    run(fill())
    seg = _segment(tmp_path, "af-checkpoints-checkpoints")
    # Cut into the last record: what a crash mid-write leaves (its save was never acknowledged).
    last = max(frames_of(seg), key=lambda f: f.seq)
    assert last.seq == 3
    os.truncate(seg, last.payload_offset + last.stored_len // 2)

    async def read() -> list[str]:
        async with JournalCheckpointStorage(tmp_path) as s:
            return list(await s.list_checkpoint_ids(workflow_name="w"))

    assert run(read()) == ["a"]


def test_the_store_names_hold_no_dot_and_are_one_to_one() -> None:
    names = {escaped_name(x) for x in ["a", "a.b", "a/b", "", "%", "a%2Eb", "é", "x" * 500, "y" * 500]}
    assert len(names) == 9 and not any("." in n or "/" in n for n in names)
    assert json.dumps(sorted(names))  # all str


def test_every_acknowledged_write_was_fdatasynced_and_a_resent_checkpoint_writes_nothing(tmp_path: Path) -> None:
    """What FileCheckpointStorage does not do: a save returns only after its record is on disk."""
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        s = JournalCheckpointStorage(tmp_path / "c", fs=fs)
        p = JournalHistoryProvider(tmp_path / "h", fs=fs)
        a = cp(cid="a", state={"k": 1})
        for call in (lambda: s.save(a), lambda: s.delete("a"), lambda: s.save(a),
                     lambda: p.save_messages("s", [Message(role="user", contents=["x"])])):
            synced = fs.calls["fdatasync"]
            await call()
            assert fs.calls["fdatasync"] > synced
        writes = fs.calls["pwrite"]
        assert await s.save(a) == "a"  # the same checkpoint again: nothing written
        assert fs.calls["pwrite"] == writes
        changed = cp(cid="a", state={"k": 2})
        await s.save(changed)  # another checkpoint under the id: overwritten, in its place
        assert (await s.load("a")).state == {"k": 2}
        s.close()
        p.close()

    run(main())


def test_concurrent_saves_are_each_whole_and_in_seq_order(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            await asyncio.gather(*(p.save_messages("s", [Message(role="user", contents=[f"{k}:{i}"]) for i in range(5)])
                                   for k in range(20)))
            texts = [m.text for m in await p.get_messages("s")]
        assert len(texts) == 100
        for start in range(0, 100, 5):  # each call's five messages together, in their order
            (k,) = {t.split(":")[0] for t in texts[start:start + 5]}
            assert [t.split(":")[1] for t in texts[start:start + 5]] == ["0", "1", "2", "3", "4"], k
        async with JournalHistoryProvider(tmp_path) as p:
            assert [m.text for m in await p.get_messages("s")] == texts  # the order is the stored one

    run(main())


def test_a_cancelled_save_still_completes_before_the_caller_hears(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            task = asyncio.ensure_future(p.save_messages("s", [Message(role="user", contents=["x"], message_id="1")]))
            await asyncio.sleep(0)  # the save has started in its worker thread
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert [m.message_id for m in await p.get_messages("s")] == ["1"]

    run(main())


_HISTORY_HEADER = {"op": "af-history", "v": 1, "session_id": "s"}
_CHECKPOINTS_HEADER = {"op": "af-checkpoints", "v": 1, "name": "checkpoints"}
_DEEP: Any = {}
for _ in range(500):
    _DEEP = {"x": _DEEP}
_CRAFTED_HISTORY = [
    [{"op": "af-history", "v": 2, "session_id": "s"}],
    [{"op": "af-history", "v": 1, "session_id": "other"}],
    [{"op": "ledger"}],
    [_HISTORY_HEADER, b"raw bytes"],
    [_HISTORY_HEADER, {"op": "pop"}],
    [_HISTORY_HEADER, {"op": "save", "messages": {"role": "user"}}],
    [_HISTORY_HEADER, {"op": "save", "messages": ["text"]}],
    [_HISTORY_HEADER, {"op": "save", "messages": [{"role": 10**30, "contents": []}]}],
    [_HISTORY_HEADER, {"op": "save", "messages": [{"role": "user", "contents": _DEEP}]}],
    [_HISTORY_HEADER, {"op": "save", "messages": [{"role": "user", "contents": [{"type": "os.system"}]}]}],
]
_GOOD_SAVE: dict[str, Any] = {"op": "save", "id": "a", "workflow": "w", "timestamp": "2026-01-01T00:00:00+00:00",
                              "previous": None, "checkpoint": {}}
_CRAFTED_CHECKPOINTS = [
    [{"op": "af-checkpoints", "v": 9, "name": "checkpoints"}],
    [{"op": "af-checkpoints", "v": 1, "name": "another"}],
    [_CHECKPOINTS_HEADER, b"raw"],
    [_CHECKPOINTS_HEADER, {"op": "save"}],
    [_CHECKPOINTS_HEADER, {**_GOOD_SAVE, "id": 7}],
    [_CHECKPOINTS_HEADER, {**_GOOD_SAVE, "workflow": ["w"]}],
    [_CHECKPOINTS_HEADER, {**_GOOD_SAVE, "timestamp": 1.5}],
    [_CHECKPOINTS_HEADER, {**_GOOD_SAVE, "previous": {"id": "x"}}],
    [_CHECKPOINTS_HEADER, {**_GOOD_SAVE, "checkpoint": "pickle"}],
    [_CHECKPOINTS_HEADER, {"op": "rewrite", "id": "a"}],
]


@pytest.mark.parametrize("records", _CRAFTED_HISTORY, ids=range(len(_CRAFTED_HISTORY)))
def test_a_crafted_history_journal_is_refused_with_the_typed_error(tmp_path: Path, records: list[Any]) -> None:
    j = journal.store(str(tmp_path)).open(JournalHistoryProvider.journal_name("s"), create=True)
    for r in records:
        j.append(r)
    j.close()

    async def read() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            await p.get_messages("s")

    with pytest.raises(HistoryFormatError):
        run(read())


@pytest.mark.parametrize("records", _CRAFTED_CHECKPOINTS, ids=range(len(_CRAFTED_CHECKPOINTS)))
def test_a_crafted_checkpoint_journal_is_refused_with_the_typed_error(tmp_path: Path, records: list[Any]) -> None:
    j = journal.store(str(tmp_path)).open("af-checkpoints-checkpoints", create=True)
    for r in records:
        j.append(r)
    j.close()
    with pytest.raises(CheckpointFormatError):
        JournalCheckpointStorage(tmp_path)


def test_a_crafted_checkpoint_value_is_a_typed_error_on_load(tmp_path: Path) -> None:
    """The record's shape is right but the value is not a checkpoint: refused when loaded, not served."""
    j = journal.store(str(tmp_path)).open("af-checkpoints-checkpoints", create=True)
    j.append(_CHECKPOINTS_HEADER)
    j.append({**_GOOD_SAVE, "checkpoint": {"unexpected": "fields"}})
    j.append({**_GOOD_SAVE, "id": "b", "checkpoint": {"__pickled__": "not base64 !", "__type__": "builtins:int"}})
    j.close()

    async def main() -> None:
        async with JournalCheckpointStorage(tmp_path) as s:
            for cid in ("a", "b"):
                with pytest.raises((CheckpointFormatError, WorkflowCheckpointException)):
                    await s.load(cid)

    run(main())


def test_open_sessions_are_bounded_and_an_evicted_one_reads_back(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalHistoryProvider(tmp_path, sessions_open_max=2) as p:
            for k in range(5):
                await p.save_messages(f"s{k}", [Message(role="user", contents=[f"m{k}"], message_id=f"{k}")])
                assert p.open_sessions() <= 2
            for k in range(5):  # the closed ones are read again from their journals
                assert [m.text for m in await p.get_messages(f"s{k}")] == [f"m{k}"]
                await p.save_messages(f"s{k}", [Message(role="user", contents=[f"m{k}"], message_id=f"{k}")])
                assert p.open_sessions() <= 2
        async with JournalHistoryProvider(tmp_path) as p:
            assert [[m.text for m in await p.get_messages(f"s{k}")] for k in range(5)] == [[f"m{k}"] for k in range(5)]

    run(main())


def test_a_second_writer_of_a_session_is_refused_with_the_lock_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalHistoryProvider(tmp_path) as first, JournalHistoryProvider(tmp_path) as second:
            await first.save_messages("s", [Message(role="user", contents=["a"])])
            with pytest.raises(journal.JournalLockedError):
                await second.get_messages("s")
        held = JournalCheckpointStorage(tmp_path / "c")
        try:
            with pytest.raises(journal.JournalLockedError):
                JournalCheckpointStorage(tmp_path / "c")
        finally:
            held.close()

    run(main())


KILL_ROUNDS = int(os.environ.get("JOURNAL_GUARD_ROUNDS", "20"))
BATCHES = 6  # save calls per round's child, three messages (or one checkpoint) each


class _KillingFileSystem(FaultyFileSystem):
    """Its ``at``-th pwrite of a segment writes half its bytes, then the process is SIGKILLed: a torn write."""

    def __init__(self, at: int) -> None:
        super().__init__(OsFileSystem())
        self.at, self.seen = at, 0

    def _wrap(self, f: Any) -> Any:
        fs = self
        inner = super()._wrap(f)

        class Killing:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def pwrite(self, data: bytes | memoryview, offset: int) -> int:
                if f.path.endswith(".seg"):
                    fs.seen += 1
                    if fs.seen == fs.at:
                        inner.pwrite(memoryview(data)[: max(1, len(data) // 2)], offset)
                        os.kill(os.getpid(), 9)
                return int(inner.pwrite(data, offset))

        return Killing()


def _acked(where: Path) -> list[int]:
    path = where / "acked"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _saving_child(where: Path, kind: str, at: int) -> dict[str, Any]:
    async def main() -> None:
        fs = _KillingFileSystem(at)
        store: Any = JournalHistoryProvider(where / "s", fs=fs) if kind == "history" else \
            JournalCheckpointStorage(where / "s", fs=fs)
        for b in range(BATCHES):
            if kind == "history":
                await store.save_messages("s", [Message(role="user", contents=[f"{b}.{i}"], message_id=f"{b}.{i}")
                                                for i in range(3)])
            else:
                await store.save(cp(cid=f"c{b}", state={"b": b, "pad": "x" * 300}))
            with open(where / "acked", "a") as f:  # after the call returned: acknowledged
                f.write(f"{b}\n")
        store.close()

    asyncio.run(main())
    return {}


@pytest.mark.parametrize("kind", ["history", "checkpoints"])
def test_sigkill_mid_append_leaves_whole_calls_in_order(tmp_path: Path, kind: str) -> None:
    from tests.guard_harness import crash_rng, in_child

    rng = crash_rng(33)
    killed_rounds = 0
    for r in range(KILL_ROUNDS):
        where = tmp_path / f"r{r}"
        where.mkdir()
        killed, _ = in_child(_saving_child, where, kind, rng.randint(1, BATCHES + 1))
        killed_rounds += killed

        async def read(where: Path) -> list[int]:
            if kind == "history":
                async with JournalHistoryProvider(where / "s") as p:
                    ids = [str(m.message_id) for m in await p.get_messages("s")]
                batches = sorted({int(i.split(".")[0]) for i in ids})
                assert ids == [f"{b}.{i}" for b in batches for i in range(3)], ids  # whole calls, in order
                return batches
            async with JournalCheckpointStorage(where / "s") as s:
                got = list(await s.list_checkpoint_ids(workflow_name="w"))
                for cid in got:
                    assert (await s.load(cid)).state["b"] == int(cid[1:])
                return [int(c[1:]) for c in got]

        batches = run(read(where))
        acked = _acked(where)
        assert batches == list(range(len(batches))), batches  # a prefix: nothing after a lost call
        assert batches == acked, (acked, batches)  # the call torn mid-write was never acknowledged: gone whole
    assert killed_rounds >= KILL_ROUNDS // 2, killed_rounds
    report_count(f"agent-framework {kind} SIGKILL mid-append rounds", f"{killed_rounds} killed of {KILL_ROUNDS}")


def test_a_read_of_a_session_never_written_makes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalHistoryProvider(tmp_path) as p:
            assert await p.get_messages("nobody") == [] and await p.get_messages(None) == []
            assert p.store.names() == [] and p._opening == {}  # nothing kept for a session read and not there
            await p.save_messages("somebody", [Message(role="user", contents=["a"])])
            assert p.store.names() == [JournalHistoryProvider.journal_name("somebody")]

    run(main())
