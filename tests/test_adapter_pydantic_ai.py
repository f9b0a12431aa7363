"""journal.adapters.pydantic_ai.JournalConversationStore: the same observable behaviour as the
framework's InMemoryConversationStore (hypothesis, with and without a reopen after every
operation), a SIGKILLed child, group commit, and the failure paths with injected faults."""

from __future__ import annotations

import asyncio
import errno
import importlib
import os
import random
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from copy import deepcopy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":  # CI: a framework missing is a failure
    importlib.import_module("pydantic_ai")
else:
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is missing (pip install -e '.[pydantic-ai]')")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    InMemoryConversationStore,
)
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

import journal
from journal.adapters.pydantic_ai import (
    ConversationTooLargeError,
    EntryNotFoundError,
    JournalConversationStore,
    OutcomeUnknownError,
    StoreClosedError,
    StoreFormatError,
    WriteNotCommittedError,
)
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import File, OsFileSystem
from tests import child_pydantic_ai as child
from tests.conftest import report_count
from tests.fork_server import ForkedChild, PipeLines

OUTCOMES: Counter[str] = Counter()  # what the differential's operations did, reported once


def run(coro: Any) -> Any:
    return asyncio.run(coro)


OP = st.tuples(st.sampled_from(child.KINDS), *(st.integers(0, 1 << 16) for _ in range(4)))


async def _differential(ops: list[child.Op], reopen: bool) -> None:
    """Apply ``ops`` to both stores in lockstep; every result and the final state must be equal.

    Ids and time: ``child.deterministic()`` makes the framework's uuid7() and now_utc() counters;
    the counters' state is saved before an operation runs on InMemoryConversationStore and
    restored before it runs on ours, so both mint the same revisions, entry ids and timestamps
    (and must consume them alike: the state after both is compared too)."""
    with tempfile.TemporaryDirectory() as d, child.deterministic() as clock:
        path = os.path.join(d, "store")
        mem = InMemoryConversationStore()
        ours = JournalConversationStore(path)
        ctx_mem, ctx_ours = child.Ctx("x-"), child.Ctx("x-")
        try:
            for i, op in enumerate(ops):
                before = clock.state()
                want = await child.run_op(mem, ctx_mem, op)
                after = clock.state()
                clock.restore(before)
                got = await child.run_op(ours, ctx_ours, op)
                assert got == want, f"operation {i} {op}: InMemory gave {want!r}, the journal store {got!r}"
                assert clock.state() == after, f"operation {i} {op} minted other ids or times"
                OUTCOMES[f"{op[0]} {want[1] if isinstance(want, tuple) and want[:1] == ('raised',) else 'ok'}"] += 1
                if reopen:
                    await ours.close()
                    ours = JournalConversationStore(path)
                    assert await child.snapshot(ours, ctx_mem.seen) == await child.snapshot(mem, ctx_mem.seen)
            assert await child.snapshot(ours, ctx_mem.seen) == await child.snapshot(mem, ctx_mem.seen)
        finally:
            await ours.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=20, max_size=40))
def test_differential_against_in_memory_store(ops: list[child.Op]) -> None:
    run(_differential(ops, reopen=False))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=10, max_size=25))
def test_differential_with_a_reopen_after_every_operation(ops: list[child.Op]) -> None:
    run(_differential(ops, reopen=True))


def test_differential_covered_every_outcome() -> None:
    """The operations above did reach the paths that matter (runs after them, in file order)."""
    if not OUTCOMES:
        pytest.skip("run with the differential tests")
    for key in ("write ok", "write ConversationConflict", "delete_record ok", "delete_record ConversationConflict",
                "read_entry ok", "read_entry KeyError", "save ok", "save ConversationConflict", "branch ok",
                "fork ok", "delete ok", "load ok", "read_history ok"):
        assert OUTCOMES[key] > 0, (key, sorted(OUTCOMES.items()))
    report_count("pydantic-ai differential operations (kind outcome: count)",
                 ", ".join(f"{k}: {v}" for k, v in sorted(OUTCOMES.items())))


# -- round trip, layout, locking ------------------------------------------------------------


def test_every_field_round_trips_through_the_journal(tmp_path: Path) -> None:
    plus2 = timezone(timedelta(hours=2))
    messages = [child.message(k) for k in range(8)]
    image = BinaryContent(b"\x00\xff\xfe", media_type="image/png")
    messages.append(ModelRequest(parts=[UserPromptPart(["a file:", image], timestamp=child.MESSAGE_TIME)],
                                 timestamp=child.MESSAGE_TIME))
    entries, parent = [], None
    for m in messages:
        entries.append(ConversationEntry(parent_id=parent, message=m))
        parent = entries[-1].id
    record = ConversationRecord(
        conversation_id="c/1 é",
        head_id=parent,
        usage=RunUsage(requests=3, tool_calls=2, input_tokens=10, output_tokens=7, details={"reasoning": 4}),
        deferred_tool_requests=DeferredToolRequests(
            calls=[ToolCallPart("run", {"cmd": "ls"}, tool_call_id="t1")],
            approvals=[ToolCallPart("rm", '{"path": "/"}', tool_call_id="t2")],
            metadata={"t2": {"why": "dangerous", "n": [1, 2]}},
        ),
        scope="user-42",
        forked_from="c/0",
        forked_at=entries[2].id,
        branches=[entries[3].id, entries[5].id],
        revision="rev-1",
        updated_at=datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=plus2),
    )

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s") as s:
            await s.write_record(record, new_entries=entries, expected_revision=None)
            live = await s.read_record(record.conversation_id), await s.read_history(record.head_id)
        async with JournalConversationStore(tmp_path / "s") as s:
            got = await s.read_record(record.conversation_id)
            history = await s.read_history(record.head_id)
            assert (got, history) == live  # memory held exactly what a reopen reads
        assert got == record
        assert got is not None and got.updated_at.utcoffset() == timedelta(hours=2)
        assert got.updated_at.tzinfo == plus2 and got.deferred_tool_requests == record.deferred_tool_requests
        # Messages come back as the framework's own serialization gives them back ...
        assert [e.message for e in history] == ModelMessagesTypeAdapter.validate_json(
            ModelMessagesTypeAdapter.dump_json(messages))
        # ... which for these shapes is the message itself (a BinaryContent of an image comes back
        # as the framework's BinaryImage, with the same bytes).
        assert [e.message for e in history[:8]] == messages[:8]
        assert [(e.id, e.parent_id, e.kind) for e in history] == [(e.id, e.parent_id, e.kind) for e in entries]
        part = history[8].message.parts[0]
        assert isinstance(part, UserPromptPart) and not isinstance(part.content, str)
        assert isinstance(part.content[1], BinaryContent) and part.content[1].data == b"\x00\xff\xfe"

    run(main())
    with journal.open(tmp_path / "s", readonly=True) as j:
        events = [r.event for r in j.read()]
    assert events[0] == {"op": "pydantic-ai", "v": 1}
    assert events[1]["op"] == "write" and len(events[1]["entries"]) == 9
    assert events[1]["record"]["updated_at"] == "2025-03-04T05:06:07.891011+02:00"
    assert len(events) == 2


def test_one_store_per_path_and_closed_store(tmp_path: Path) -> None:
    async def main() -> None:
        store = await JournalConversationStore(tmp_path / "s").open()
        with pytest.raises(journal.JournalLockedError):
            await JournalConversationStore(tmp_path / "s").open()
        await store.close()
        await store.close()  # idempotent
        with pytest.raises(StoreClosedError):
            await store.read_record("a")
        async with JournalConversationStore(tmp_path / "s") as again:  # the lock went with close()
            assert await again.read_records() == []

    run(main())


def test_a_journal_of_something_else_is_refused(tmp_path: Path) -> None:
    with journal.open(tmp_path / "other", create=True) as j:
        j.append({"op": "session", "v": 1})

    async def main() -> None:
        with pytest.raises(StoreFormatError, match="not a Pydantic AI"):
            await JournalConversationStore(tmp_path / "other").open()

    run(main())
    with journal.open(tmp_path / "other") as j:  # refused, nothing written, and the lock let go
        assert j.last_seq == 1


def test_unknown_entry_is_a_key_error_like_in_memory(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s") as s:
            with pytest.raises(KeyError) as got:
                await s.read_entry("nope")
            assert isinstance(got.value, EntryNotFoundError) and "nope" in str(got.value)
            with pytest.raises(KeyError):
                await s.read_history("nope")
            with pytest.raises(KeyError):
                await InMemoryConversationStore().read_entry("nope")

    run(main())


# -- SIGKILL ----------------------------------------------------------------------------------


def test_sigkill_rounds_keep_every_acknowledged_operation(tmp_path: Path) -> None:
    """A child runs random operations on one store and is SIGKILLed after a random line it
    printed (a ``begin``: mid-operation, perhaps mid-write; a ``synced``: a write durable but not
    acknowledged; an ``ack``: between operations), 60 rounds on one journal. After each, the
    reopened store equals InMemoryConversationStore after the same operations up to the last
    acknowledged one, or up to the one in flight."""
    rounds = 60
    rng = random.Random(2718)
    path = str(tmp_path / "store")
    server = subprocess.Popen([sys.executable, "-m", "tests.child_pydantic_ai"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent)
    assert server.stdin is not None and server.stdout is not None
    stdout = server.stdout
    model = InMemoryConversationStore()
    landed: Counter[str] = Counter()
    acked_total = 0

    line = PipeLines(stdout.fileno(), 120, "the kill-test server").line

    async def replay(round_no: int, ops: list[child.Op]) -> tuple[InMemoryConversationStore, list[str]]:
        store = deepcopy(model)
        with child.deterministic(*child.round_clock(round_no)):
            ctx = await child.Ctx.of_store(store, f"r{round_no}-")
            for op in ops:
                await child.run_op(store, ctx, op)
        return store, ctx.seen

    async def check(
        round_no: int, ops: list[child.Op], acked: int, begun: int
    ) -> tuple[InMemoryConversationStore, bool]:
        async with JournalConversationStore(path) as ours:
            want, seen = await replay(round_no, ops[: acked + 1])
            got = await child.snapshot(ours, seen)
            if got == await child.snapshot(want, seen):
                return want, False
            assert begun == acked + 1, f"round {round_no}: the store does not hold what was acknowledged"
            want, seen = await replay(round_no, ops[: begun + 1])  # the one in flight took, whole
            assert await child.snapshot(ours, seen) == await child.snapshot(want, seen), (
                f"round {round_no}: the store holds neither the acknowledged operations nor them and the one in flight")
            return want, True

    try:
        in_flight_took = 0
        for r in range(rounds):
            seed = 5000 + r
            ops = child.plan(seed)
            kill_at = rng.randint(1, 3 * len(ops))  # the line after which to kill (1: pid)
            server.stdin.write(f"run {path} {seed} {r}\n".encode())
            server.stdin.flush()
            words = line().split()
            assert words[0] == "pid", words
            kid, lines, acked, begun, ended, killed, tried = ForkedChild(int(words[1])), 1, -1, -1, False, False, False
            while True:
                if lines >= kill_at and not tried and not ended:
                    tried = True
                    killed = kid.kill()  # False: it ended, and was reaped, before its last lines were read
                words = line().split()
                lines += 1
                if words[0] == "begin":
                    begun = int(words[1])
                elif words[0] == "ack":
                    acked = int(words[1])
                elif words[0] == "synced":  # a write is durable, its caller not yet told
                    pass
                elif words[0] == "end":
                    ended = True
                elif words[0] == "reaped":
                    break
                else:
                    raise AssertionError(f"child: {' '.join(words)}")
            kid.close()
            assert killed or ended, f"round {r}: the child neither ended nor was killed"
            landed["after the end" if ended else "mid-operation" if begun > acked else "between operations"] += 1
            acked_total += acked + 1
            model, took = run(check(r, ops, acked, begun))
            in_flight_took += took
    finally:
        server.stdin.close()
        server.wait(30)
    report_count("pydantic-ai kill -9 rounds", rounds)
    report_count("pydantic-ai kill -9 detail (tests/test_adapter_pydantic_ai.py)",
                 f"{acked_total} acknowledged operations all found, kills landed {dict(landed)}, "
                 f"{in_flight_took} in-flight operations found whole")
    assert rounds >= 50 and landed["mid-operation"] > 0 and landed["between operations"] > 0
    assert in_flight_took > 0  # some kills landed after a commit, before its acknowledgement


# -- group commit and concurrency --------------------------------------------------------------


class CountingFileSystem(OsFileSystem):
    """The real file layer, counting fdatasyncs; ``gate``, when set, holds each fdatasync until
    the test opens it (tests/test_aio.py's)."""

    def __init__(self) -> None:
        self.fdatasyncs = 0
        self.mu = threading.Lock()
        self.gate: threading.Event | None = None
        self.in_sync = threading.Event()

    def open_write(self, path: str, create: bool) -> File:
        f = super().open_write(path, create)
        inner = f.fdatasync

        def fdatasync() -> None:
            with self.mu:
                self.fdatasyncs += 1
            if self.gate is not None:
                self.in_sync.set()
                self.gate.wait()
            inner()

        f.fdatasync = fdatasync  # type: ignore[method-assign]
        return f


def _record(conversation_id: str, head_id: str | None, revision: str, **kw: Any) -> ConversationRecord:
    return ConversationRecord(conversation_id=conversation_id, head_id=head_id, revision=revision, **kw)


def _entries(prefix: str, n: int, parent: str | None = None) -> list[ConversationEntry]:
    out = []
    for k in range(n):
        out.append(ConversationEntry(id=f"{prefix}-{k}", parent_id=parent, message=child.message(k)))
        parent = out[-1].id
    return out


def test_concurrent_writes_share_fdatasyncs(tmp_path: Path) -> None:
    n = 64
    fs = CountingFileSystem()

    async def main() -> tuple[int, Any]:
        async with JournalConversationStore(tmp_path / "s", fs=fs) as s:
            before = fs.fdatasyncs
            es = [_entries(f"c{i}", 2) for i in range(n)]
            await asyncio.gather(*(
                s.write_record(_record(f"c{i}", es[i][-1].id, f"r{i}"), new_entries=es[i], expected_revision=None)
                for i in range(n)))
            syncs = fs.fdatasyncs - before
            live = await child.snapshot(s, [e.id for batch in es for e in batch])
        async with JournalConversationStore(tmp_path / "s") as s:
            assert await child.snapshot(s, [e.id for batch in es for e in batch]) == live
        return syncs, live

    syncs, live = run(main())
    assert len(live[0]) == n
    report_count("pydantic-ai group commit", f"{n} concurrent write_record calls, {syncs} fdatasyncs")
    assert syncs < n / 4, syncs


def test_concurrent_compare_and_swap_on_one_conversation_lets_one_win(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s") as s:
            results = await asyncio.gather(*(
                s.write_record(_record("same", None, f"r{i}"), expected_revision=None) for i in range(20)),
                return_exceptions=True)
            winners = [i for i, r in enumerate(results) if r is None]
            assert len(winners) == 1 and all(isinstance(r, ConversationConflict) for r in results if r is not None)
            stored = await s.read_record("same")
            assert stored is not None and stored.revision == f"r{winners[0]}"
            # Saves racing deletes and forks over several conversations: whatever interleaving,
            # memory equals what a reopen reads.
            for i in range(6):
                await s.save(Conversation(conversation_id=f"k{i}", messages=[child.message(i)]))

            async def churn(i: int) -> None:
                conversation = await s.load(f"k{i % 6}")
                if conversation is None:
                    return
                conversation.messages.append(child.message(100 + i))
                for op in (s.save(conversation), s.delete(f"k{(i + 3) % 6}"), s.fork(f"k{i % 6}", at=1)):
                    try:
                        await op
                    except (ConversationConflict, journal.JournalError):
                        pass
                    except Exception as exc:  # a UserError: the conversation went meanwhile
                        assert "not in the store" in str(exc)

            await asyncio.gather(*(churn(i) for i in range(30)))
            ids = [e.id for r in await s.read_records() for e in await s.read_history(r.head_id)]
            live = await child.snapshot(s, ids)
        async with JournalConversationStore(tmp_path / "s") as s:
            assert await child.snapshot(s, ids) == live

    run(main())


def test_a_cancelled_caller_waits_for_its_write(tmp_path: Path) -> None:
    fs = CountingFileSystem()

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", fs=fs) as s:
            fs.gate = threading.Event()
            try:
                task = asyncio.create_task(s.write_record(_record("a", None, "r1"), expected_revision=None))
                await asyncio.to_thread(fs.in_sync.wait, 30)
                task.cancel()  # while the write waits in fdatasync
                for _ in range(5):
                    await asyncio.sleep(0)  # let the cancellation reach the caller (no time passes)
                assert not task.done()  # it waits for the outcome through the cancellation
            finally:
                fs.gate.set()  # a failed check must not leave the writer held (close waits for it)
            with pytest.raises(asyncio.CancelledError):
                await task
            stored = await s.read_record("a")  # the write's outcome is known and applied
            assert stored is not None and stored.revision == "r1"
            fs.gate = None

    run(main())


# -- failure paths ------------------------------------------------------------------------------


async def _seeded(s: JournalConversationStore) -> tuple[ConversationRecord, list[ConversationEntry]]:
    es = _entries("a", 2)
    rec = _record("a", es[-1].id, "r1", scope="u")
    await s.write_record(rec, new_entries=es, expected_revision=None)
    return rec, es


def test_conflict_writes_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s") as s:
            _, es = await _seeded(s)
            before, seq = await child.snapshot(s, [e.id for e in es] + ["a-new"]), s.last_seq
            new = _entries("a-new", 1, es[-1].id)
            for expected in (None, "wrong"):
                with pytest.raises(ConversationConflict):
                    await s.write_record(_record("a", new[0].id, "r2"), new_entries=new, expected_revision=expected)
            with pytest.raises(ConversationConflict):  # a head that nobody stored
                await s.write_record(_record("a", "ghost", "r2"), expected_revision="r1")
            with pytest.raises(ConversationConflict):
                await s.delete_record("a", expected_revision="wrong")
            with pytest.raises(ConversationConflict):
                await s.delete_record("absent", expected_revision="r1")
            assert s.last_seq == seq
            assert await child.snapshot(s, [e.id for e in es] + ["a-new"]) == before
        async with JournalConversationStore(tmp_path / "s") as s:
            assert await child.snapshot(s, [e.id for e in es] + ["a-new"]) == before

    run(main())


def test_too_large_a_write_is_refused_whole(tmp_path: Path) -> None:
    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", record_size_bytes_max=8192) as s:
            _, es = await _seeded(s)
            before, seq = await child.snapshot(s, [e.id for e in es] + ["big"]), s.last_seq
            big = ConversationEntry(id="big", parent_id=es[-1].id,
                                    message=ModelRequest(parts=[UserPromptPart("x" * 20_000)]))
            with pytest.raises(ConversationTooLargeError, match="nothing was written") as got:
                await s.write_record(_record("a", "big", "r2"), new_entries=[big], expected_revision="r1")
            assert got.value.limit_bytes == 8192 and got.value.size_bytes > 20_000
            assert isinstance(got.value, ValueError)
            assert s.last_seq == seq
            assert await child.snapshot(s, [e.id for e in es] + ["big"]) == before
            await s.write_record(_record("a", es[0].id, "r2"), expected_revision="r1")  # the store goes on
        async with JournalConversationStore(tmp_path / "s") as s:
            stored = await s.read_record("a")
            assert stored is not None and stored.revision == "r2"
            with pytest.raises(KeyError):
                await s.read_entry("big")

    run(main())


def test_not_committed_raises_and_leaves_memory_unchanged(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", fs=fs) as s:
            _, es = await _seeded(s)
            ids = [e.id for e in es] + ["n-0"]
            before, seq = await child.snapshot(s, ids), s.last_seq
            new = _entries("n", 1, es[-1].id)
            fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
            with pytest.raises(WriteNotCommittedError, match="may be retried") as got:
                await s.write_record(_record("a", "n-0", "r2"), new_entries=new, expected_revision="r1")
            assert got.value.outcome is not None and got.value.outcome.errno == errno.EIO
            assert s.last_seq == seq and await child.snapshot(s, ids) == before
            fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
            with pytest.raises(WriteNotCommittedError):
                await s.delete_record("a", expected_revision="r1")
            assert s.last_seq == seq and await child.snapshot(s, ids) == before
            # Retrying is safe, and takes.
            await s.write_record(_record("a", "n-0", "r2"), new_entries=new, expected_revision="r1")
            after = await child.snapshot(s, ids)
        async with JournalConversationStore(tmp_path / "s") as s:
            assert await child.snapshot(s, ids) == after

    run(main())


def test_ack_lost_raises_and_the_next_call_reads_the_disk(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JournalConversationStore(tmp_path / "s", fs=fs) as s:
            _, es = await _seeded(s)
            fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
            with pytest.raises(OutcomeUnknownError, match="unknown") as got:
                await s.write_record(_record("a", es[0].id, "r2"), expected_revision="r1")
            assert isinstance(got.value.outcome, journal.AckLost)
            fs.clear()
            # The next call reopens the journal (recovery runs) and rebuilds the index from disk:
            # the bytes reached the OS, so the write is there.
            stored = await s.read_record("a")
            assert stored is not None and stored.revision == "r2" and stored.head_id == es[0].id
            await s.write_record(_record("a", es[1].id, "r3"), expected_revision="r2")  # and it goes on
            after = await child.snapshot(s, [e.id for e in es])
        async with JournalConversationStore(tmp_path / "s") as s:
            assert await child.snapshot(s, [e.id for e in es]) == after

    run(main())
