"""The workload of the JournalConversationStore tests, and the fork server of its kill test.

    python -m tests.child_pydantic_ai

An operation is ``(kind, a, b, c, d)``: a kind and four small ints that ``run_op`` reads against
the store it is given (which conversation, the right revision or a wrong one, which stored entry
to point at ...). Since the choices are made by reading the store, the same operations applied to
two stores that behave alike do the same things to both; the tests apply them to
``InMemoryConversationStore`` and to ``JournalConversationStore`` and compare what comes back.

Time and ids: the framework mints revisions, entry ids and fork ids with ``uuid7()`` and stamps
records with ``now_utc()``. ``deterministic()`` replaces them by counters for as long as it is
entered: ``pydantic_ai.conversation_store.uuid7`` and ``.now_utc`` (what ``save``, ``branch``,
``fork`` and the dataclass defaults of ``ConversationEntry.id`` and ``ConversationRecord.revision``
call, looked up in that module at call time), ``pydantic_ai.conversation.uuid7`` (a
``Conversation``'s default id) and ``pydantic_ai._utils.datetime`` (``now_utc``'s clock, which is
also ``ConversationRecord.updated_at``'s default factory, bound at class definition, so the
function itself cannot be swapped). The clock only moves on a ``tick`` operation, so many records
share an ``updated_at`` and ``read_records``' order of ties is exercised. A test that runs one
operation on two stores saves the counters' state before the first and restores it before the
second, so both see the same ids and times.

The fork server (the kill test's child): importing Pydantic AI takes a while, so one process
imports it once and forks a child per round. It reads ``run PATH SEED ROUND`` lines; each child
writes ``pid N``, then ``begin K`` before and ``ack K`` after each operation of ``plan(SEED)``,
``synced`` after every fdatasync of its journal, and ``end`` if it finishes; the server writes
``reaped N`` once the child is gone. Lines go straight to fd 1 (os.write), so an ``ack`` read by
the parent was written after the operation returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pydantic_ai._utils as pai_utils
import pydantic_ai.conversation as pai_conversation
import pydantic_ai.conversation_store as pai_store
from pydantic_ai import DeferredToolRequests
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

Op = tuple[str, int, int, int, int]
KINDS = (
    "write", "write", "write", "delete_record", "read_record", "read_records", "read_entry", "read_history",
    "save", "save", "save", "load", "load_entries", "branch", "fork", "list", "delete", "tick",
)
CONVS = ("a", "b", "c")
SCOPES = (None, "u1", "u2")
EPOCH = datetime(2025, 1, 1, tzinfo=timezone.utc)
MESSAGE_TIME = datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
OPS_PER_ROUND = 30


class Clock:
    """The counters behind uuid7() and now_utc() while ``deterministic()`` is entered."""

    def __init__(self, ids: int = 0, seconds: int = 0) -> None:
        self.ids = ids
        self.seconds = seconds

    def uuid7(self) -> uuid.UUID:
        self.ids += 1
        return uuid.UUID(int=self.ids)

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.seconds)

    def state(self) -> tuple[int, int]:
        return self.ids, self.seconds

    def restore(self, state: tuple[int, int]) -> None:
        self.ids, self.seconds = state


_clocks: list[Clock] = []  # the clock of the innermost deterministic() entered


@contextlib.contextmanager
def deterministic(ids: int = 0, seconds: int = 0) -> Iterator[Clock]:
    clock = Clock(ids, seconds)

    class FrozenDatetime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # the only call of _utils' datetime we replace
            return clock.now().astimezone(tz) if tz is not None else clock.now().replace(tzinfo=None)

    # The names these modules call at run time (imported into them, so not re-exported: setattr).
    targets = ((pai_store, "uuid7", clock.uuid7), (pai_store, "now_utc", clock.now),
               (pai_conversation, "uuid7", clock.uuid7), (pai_utils, "datetime", FrozenDatetime))
    saved = [(module, name, getattr(module, name)) for module, name, _ in targets]
    for module, name, value in targets:
        setattr(module, name, value)
    _clocks.append(clock)
    try:
        yield clock
    finally:
        _clocks.pop()
        for module, name, value in saved:
            setattr(module, name, value)


def message(k: int) -> ModelMessage:
    """A hand-built message of one of several shapes; k picks the shape and the text."""
    shape = k % 4
    if shape == 0:
        return ModelRequest(parts=[UserPromptPart(f"question {k} é ☃", timestamp=MESSAGE_TIME)],
                            timestamp=MESSAGE_TIME, instructions="be brief" if k % 3 else None)
    if shape == 1:
        return ModelResponse(parts=[TextPart(f"answer {k}"), ToolCallPart("lookup", {"q": k, "x": [1.5, None]},
                                                                          tool_call_id=f"call-{k}")],
                             timestamp=MESSAGE_TIME, model_name="test-model")
    if shape == 2:
        return ModelRequest(parts=[ToolReturnPart("lookup", {"result": k}, tool_call_id=f"call-{k}",
                                                  timestamp=MESSAGE_TIME)], timestamp=MESSAGE_TIME)
    return ModelResponse(parts=[ThinkingPart(f"thinking {k}"), TextPart(f"done {k}")], timestamp=MESSAGE_TIME)


@dataclass
class Ctx:
    """What the caller of a store holds between operations: entry ids it has seen, conversations
    it loaded, and a counter for the ids and revisions it makes itself."""

    prefix: str
    n: int = 0
    seen: list[str] = field(default_factory=list)
    handles: dict[int, Conversation] = field(default_factory=dict)

    def new_id(self, what: str) -> str:
        self.n += 1
        return f"{self.prefix}{what}{self.n}"

    def see(self, ids: Any) -> None:
        for entry_id in ids:
            if entry_id not in self.seen:
                self.seen.append(entry_id)

    @classmethod
    async def of_store(cls, store: ConversationStore, prefix: str) -> Ctx:
        """A new caller of a store that already holds conversations: it has seen what they reach."""
        ctx = cls(prefix)
        for record in await store.read_records():
            for tip in [record.head_id, *record.branches]:
                ctx.see(e.id for e in await store.read_history(tip))
        return ctx


def _pick(items: list[Any], k: int) -> Any:
    return items[k % len(items)] if items else None


async def _live(store: ConversationStore, ctx: Ctx, k: int) -> str | None:
    """An entry the store holds now (found by asking it), or None: a parent or a branch that
    exists when written, so every chain the store walks ends at a first entry."""
    for i in range(len(ctx.seen)):
        entry_id = ctx.seen[(k + i) % len(ctx.seen)]
        try:
            await store.read_entry(entry_id)
        except KeyError:
            continue
        return entry_id
    return None


def norm(value: Any) -> Any:
    """A value to compare across stores: a Conversation with its new_message_index (which its
    == ignores), lists element-wise, everything else as it is."""
    if isinstance(value, Conversation):
        return ("conversation", value.messages, value.usage, value.conversation_id,
                value.deferred_tool_requests, value.revision, value.new_message_index)
    if isinstance(value, (list, tuple)):
        return [norm(v) for v in value]
    return value


def raised(exc: BaseException) -> tuple[str, str, str]:
    """An exception as the framework would name it: the first class of its type's MRO that is not
    ours (EntryNotFoundError is a KeyError, as InMemoryConversationStore raises), and its message
    (not for KeyError, whose text is each store's own)."""
    base = next(c for c in type(exc).__mro__ if not c.__module__.startswith("journal"))
    return "raised", base.__name__, "" if isinstance(exc, KeyError) else str(exc)


async def run_op(store: ConversationStore, ctx: Ctx, op: Op) -> Any:
    """Apply one operation; its result (normalised), or what it raised."""
    try:
        return norm(await _run(store, ctx, op))
    except Exception as exc:  # every outcome is compared across the two stores
        return raised(exc)


async def _run(store: ConversationStore, ctx: Ctx, op: Op) -> Any:  # one branch per kind
    kind, a, b, c, d = op
    conv = CONVS[a % 3]
    if kind == "tick":
        if _clocks:
            _clocks[-1].seconds += 1 + a % 2
        return None
    if kind == "write":
        current = await store.read_record(conv)
        mode = b % 5
        expected = (current.revision if current is not None else None) if mode < 3 else None if mode == 3 else "bogus"
        where = d % 3
        parent: str | None = None
        if where == 0 and current is not None:
            parent = current.head_id
        elif where == 1:
            parent = await _live(store, ctx, d)
        entries = []
        for i in range(c % 4):
            entry = ConversationEntry(id=ctx.new_id("e"), parent_id=parent, message=message(ctx.n + i))
            entries.append(entry)
            parent = entry.id
        head: str | None
        if entries:
            head = entries[-1].id
        else:
            head = [current.head_id if current is not None else None, await _live(store, ctx, b), None, "nope"][d % 4]
        branch = await _live(store, ctx, c) if (c // 4) % 2 else None
        record = ConversationRecord(
            conversation_id=conv,
            head_id=head,
            usage=RunUsage(requests=ctx.n, input_tokens=a, details={"k": b}),
            deferred_tool_requests=DeferredToolRequests(
                calls=[ToolCallPart("ask", {"n": c}, tool_call_id=f"d{ctx.n}")], metadata={f"d{ctx.n}": {"why": "test"}}
            ) if c % 5 == 0 else None,
            scope=SCOPES[(a // 3) % 3],
            branches=[branch] if branch is not None else [],
            revision=ctx.new_id("rev"),
        )
        await store.write_record(record, new_entries=entries, expected_revision=expected)
        ctx.see(e.id for e in entries)
        return None
    if kind == "delete_record":
        current = await store.read_record(conv)
        expected = current.revision if current is not None and b % 3 else "bogus"
        await store.delete_record(conv, expected_revision=expected)
        return None
    if kind == "read_record":
        return await store.read_record((*CONVS, "zz")[a % 4])
    if kind == "read_records":
        return await store.read_records(scope=(*SCOPES, "nobody")[b % 4], limit=(None, 0, 1, 2, -1)[c % 5])
    if kind == "read_entry":
        return await store.read_entry(_pick([*ctx.seen, "unknown"], d))
    if kind == "read_history":
        return await store.read_history(_pick([*ctx.seen, None, "unknown"], d), limit=(None, 0, 1, 2, 5)[c % 5])
    if kind == "save":
        slot = b % 3
        conversation = ctx.handles.get(slot)
        if conversation is None or c % 3 == 0:
            conversation = ctx.handles[slot] = Conversation(conversation_id=conv)
        for i in range(d % 3):
            conversation.messages.append(message(ctx.n + 7 * i + a))
        if (c // 3) % 4 == 0 and len(conversation.messages) > 1:
            conversation.messages[-2] = message(ctx.n + 1000)  # a rewritten history: a branch
        if (c // 12) % 5 == 0:
            conversation.new_message_index = None  # as after serializing: compare with the store
        if d % 4 == 0:
            conversation.usage = RunUsage(requests=a + 1, output_tokens=b)
        ctx.new_id("m")
        entries = await store.save(conversation, scope=SCOPES[(d // 3) % 3])
        ctx.see(e.id for e in entries)
        return entries, conversation
    if kind in ("load", "load_entries"):
        target = (*CONVS, "zz")[b % 4]
        limit = (None, None, 0, 1, 3)[c % 5]
        scope = (None, None, "u1", "u2")[d % 4]
        if kind == "load_entries":
            got_entries = await store.load_entries(target, limit=limit, scope=scope)
            if got_entries is not None:
                ctx.see(e.id for e in got_entries)
            return got_entries
        loaded = await store.load(target, limit=limit, scope=scope)
        if loaded is not None:
            ctx.handles[a % 3] = loaded
        return loaded
    if kind == "branch":
        current = await store.read_record(conv)
        handle = ctx.handles.get(a % 3)
        choices: list[str | None] = [current.revision if current is not None else None] * 2
        choices += [handle.revision if handle is not None else None, "bogus"]
        expected_revision = choices[b % 4]
        at = d % 3 if c % 5 < 3 else None  # c % 5 == 4: neither, a UserError
        from_entry = _pick([*ctx.seen, "unknown"], d) if c % 5 == 3 else None
        branched = await store.branch(conv, at=at, from_entry=from_entry, expected_revision=expected_revision,
                                      scope=(None, None, "u1")[(c // 3) % 3])
        ctx.handles[a % 3] = branched
        return branched
    if kind == "fork":
        at = d % 3 if c % 3 == 0 else None
        from_entry = _pick([*ctx.seen, "unknown"], d) if c % 3 == 1 else None
        new_id = (None, "a", "b", "f1", "f2")[b % 5]
        forked = await store.fork(conv, at=at, from_entry=from_entry, new_conversation_id=new_id,
                                  scope=(None, None, "u2")[(c // 3) % 3], source_scope=(None, None, "u1")[d % 3])
        ctx.handles[a % 3] = forked
        return forked
    if kind == "list":
        return await store.list_conversations(scope=(*SCOPES, "nobody")[b % 4], limit=(None, 0, 1, 2, -1)[c % 5])
    if kind == "delete":
        await store.delete((*CONVS, "f1")[b % 4], scope=(None, None, "u1", "u2")[c % 4])
        return None
    raise ValueError(f"unknown operation kind {kind!r}")


async def snapshot(store: ConversationStore, ids: list[str]) -> Any:
    """Everything observable: all records in read_records' order, each one's history, and each
    of ``ids`` read as an entry (or the error it raises)."""
    records = list(await store.read_records())
    histories = [await store.read_history(r.head_id) for r in records]
    entries: list[Any] = []
    for entry_id in ids:
        try:
            entries.append(await store.read_entry(entry_id))
        except KeyError:
            entries.append(("missing", entry_id))
    return records, histories, entries


def plan(seed: int, n: int = OPS_PER_ROUND) -> list[Op]:
    rng = random.Random(seed)
    return [(rng.choice(KINDS), *(rng.randrange(1 << 16) for _ in range(4))) for _ in range(n)]  # type: ignore[misc]


SERVER_ROUND_CLOCK = (9_000_000, 900_000)  # where server_round's counters start (past every round's)


async def _server_script(store: ConversationStore) -> list[str]:
    """server_round's writes: conversations saved in turns (two scopes), one branched and saved
    on from the branch, one written with entries by write_record, the clock moving between so
    that read_records' order is by time with ties. The ids of the entries written."""
    clock = _clocks[-1]
    ids: list[str] = []
    a, b = Conversation(conversation_id="a"), Conversation(conversation_id="b")
    for k in range(3):
        a.messages += [message(2 * k), message(2 * k + 1)]
        ids += [e.id for e in await store.save(a, scope="u1")]
        clock.seconds += 1
        b.messages.append(message(10 + k))
        ids += [e.id for e in await store.save(b)]
    current = await store.read_record("a")
    assert current is not None
    branched = await store.branch("a", at=2, expected_revision=current.revision, scope="u1")
    branched.messages += [message(20), message(21)]
    ids += [e.id for e in await store.save(branched, scope="u1")]
    clock.seconds += 1
    parent: str | None = None
    entries = []
    for i in range(4):
        entry = ConversationEntry(id=f"c-e{i}", parent_id=parent, message=message(30 + i))
        entries.append(entry)
        parent = entry.id
    record = ConversationRecord(conversation_id="c", head_id=parent, usage=RunUsage(requests=4, input_tokens=7),
                                scope="u2", branches=[ids[0]], revision="c-rev1")
    await store.write_record(record, new_entries=entries, expected_revision=None)
    ids += [e.id for e in entries]
    return ids


async def server_round(target: str, reopen: bool) -> None:
    """A round of writes through ``JournalConversationStore(target)`` (a server journal's URL),
    or (``reopen``) a new store on the same target that must read back everything that round
    wrote: records in read_records' order, every entry, every history. What it must read is
    the same writes applied to the framework's InMemoryConversationStore."""
    from pydantic_ai.conversation_store import InMemoryConversationStore

    from journal.adapters.pydantic_ai import JournalConversationStore

    with deterministic(*SERVER_ROUND_CLOCK):
        model = InMemoryConversationStore()
        ids = await _server_script(model)
        want = await snapshot(model, ids)
    store = JournalConversationStore(target)
    try:
        if not reopen:
            with deterministic(*SERVER_ROUND_CLOCK):
                assert await _server_script(store) == ids
        got = await snapshot(store, ids)
        assert got == want, (got, want)
        assert [r.conversation_id for r in got[0]] == [r.conversation_id for r in want[0]]
        assert all(not isinstance(e, tuple) for e in got[2]), "an entry written is missing"
        for record in await store.read_records():
            for tip in record.branches:
                assert await store.read_history(tip) == await model.read_history(tip)
    finally:
        await store.close()


def round_clock(round_no: int) -> tuple[int, int]:
    """Where a round's counters start: ids and time past every earlier round's."""
    return round_no * 1_000_000, round_no * 100_000


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _announcing_fs() -> Any:
    """The real file layer, writing ``synced`` after each fdatasync returns: a kill right after
    that line lands between a write's commit and its acknowledgement."""
    from journal.fs import File, OsFileSystem

    class AnnouncingFileSystem(OsFileSystem):
        def open_write(self, path: str, create: bool) -> File:
            f = super().open_write(path, create)
            inner = f.fdatasync

            def fdatasync() -> None:
                inner()
                _say("synced")

            f.fdatasync = fdatasync  # type: ignore[method-assign]
            return f

    return AnnouncingFileSystem()


async def _work(path: str, seed: int, round_no: int) -> None:
    from journal.adapters.pydantic_ai import JournalConversationStore

    store = JournalConversationStore(path, fs=_announcing_fs())
    ids, seconds = round_clock(round_no)
    with deterministic(ids, seconds):
        ctx = await Ctx.of_store(store, f"r{round_no}-")
        for k, op in enumerate(plan(seed)):
            _say(f"begin {k}")
            await run_op(store, ctx, op)
            _say(f"ack {k}")
    await store.close()


def main() -> None:
    import journal.adapters.pydantic_ai  # noqa: F401 - imported once, before the forks

    for line in sys.stdin:
        _, path, seed, round_no = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                _say(f"pid {os.getpid()}")
                asyncio.run(_work(path, int(seed), int(round_no)))
                _say("end")
            except BaseException as exc:
                _say(f"error {exc!r}")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        _say(f"reaped {pid}")


if __name__ == "__main__":
    main()
