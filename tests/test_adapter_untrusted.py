"""Each adapter reads a journal as data from elsewhere: a journal copied (``journal copy``),
imported or restored from a backup may hold records crafted to pass the engine's checksums.
Whatever such a record holds, an adapter decodes only what it could have written itself and
raises a typed ``journal.JournalError`` (``ForeignRecordError``, ``ForeignValueError`` for a
value of a type it does not decode) naming the journal and the seq; it never runs code the
bytes name, and never raises a KeyError, a TypeError, a pydantic ValidationError or a
RecursionError, nor loops. docs/ADAPTERS.md, "What each adapter decodes".

Each framework's tests are skipped without it (``pip install -e '.[langgraph,adk,...]'``).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.errors import ForeignRecordError, ForeignValueError, JournalError


def _need(module: str) -> None:
    """Skip the test without ``module`` (a failure in CI, where every framework is installed)."""
    if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":
        importlib.import_module(module)
    else:
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[...]')")


def _outcome(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except BaseException as e:  # the test looks at what it was
        return e
    return None


# ---- LangGraph: the saver decodes only what it writes


def _lg() -> Any:
    _need("langgraph.checkpoint.base")
    import ormsgpack
    from langgraph.checkpoint.base import empty_checkpoint

    from journal.adapters import langgraph as lg

    return ormsgpack, empty_checkpoint, lg


def _lg_thread(tmp_path: Path, events: list[Any], raw: Sequence[bytes] = ()) -> tuple[str, str]:
    """A saver directory holding thread "t": one genuine checkpoint put by the saver, then
    ``events`` appended as the saver's v2 records would be (msgpack, raw codec) and ``raw``
    payloads as they are: records whose checksums hold and whose content was crafted. The id of
    the genuine checkpoint and the thread journal's path."""
    ormsgpack, empty_checkpoint, lg = _lg()
    cp = empty_checkpoint()
    with lg.JournalSaver(tmp_path) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, {"source": "input"}, {})
    path = str(tmp_path / lg.THREADS_DIR / lg.thread_dir_name("t"))
    head = bytes([lg.RECORD_VERSION, lg.CODEC_RAW])
    with journal.open(path, compress=False) as j:
        for ev in events:
            j.append(head + ormsgpack.packb(ev), durability="sync")
        for payload in raw:
            j.append(payload, durability="sync")
    return cp["id"], path


def _later(checkpoint_id: str) -> str:
    """A checkpoint id after ``checkpoint_id`` (ids sort as strings): get_tuple picks it."""
    return "2" + checkpoint_id[1:]


def _cp_record(cp_id: str, *, cp: Any = None, md: Any = None, blobs: list[Any] | None = None) -> dict[str, Any]:
    ormsgpack, empty_checkpoint, _ = _lg()
    checkpoint = cp if cp is not None else {**empty_checkpoint(), "id": cp_id}
    checkpoint.pop("channel_values", None) if isinstance(checkpoint, dict) else None
    return {
        "k": "cp", "ns": "", "id": cp_id, "parent": None,
        "cp": ["msgpack", ormsgpack.packb(checkpoint)],
        "md": ["msgpack", ormsgpack.packb(md if md is not None else {"source": "loop"})],
        "blobs": blobs or [],
    }


def _mkdir_exts(marker: Path) -> dict[str, Any]:
    """Stored values that make LangGraph's default serializer call ``os.mkdir(marker)``, one per
    msgpack extension that names a callable (a directory is the harmless stand-in for
    ``os.system``: the test sees whether it was made)."""
    from ormsgpack import Ext, packb

    m = str(marker)
    call = Ext(0, packb(["os", "mkdir", m]))
    return {
        "single argument (ext 0)": call,
        "positional arguments (ext 1)": Ext(1, packb(["os", "mkdir", [m]])),
        "keyword arguments (ext 2)": Ext(2, packb(["os", "mkdir", {"path": m}])),
        "a method (ext 3)": Ext(3, packb(["shutil", "os", m, "mkdir"])),
        "a pydantic v1 model (ext 4)": Ext(4, packb(["os", "mkdir", {"path": m}])),
        "a pydantic v2 model (ext 5)": Ext(5, packb(["os", "mkdir", {"path": m}, "model_validate_json"])),
        "inside a type on LangGraph's safe list": Ext(0, packb(["builtins", "set", [call]])),
        "inside a map": {"deep": [1, {"x": call}]},
        "inside a delta snapshot (ext 7)": Ext(7, packb(call)),
    }


def _value_record(cp_id: str, where: str, value: Any) -> list[dict[str, Any]]:
    """Records that put the crafted ``value`` at ``where`` of checkpoint ``cp_id``."""
    ormsgpack, empty_checkpoint, _ = _lg()
    packed = ["msgpack", ormsgpack.packb(value)]
    if where == "checkpoint":
        return [_cp_record(cp_id, cp={**empty_checkpoint(), "id": cp_id, "extra": value})]
    if where == "metadata":
        return [_cp_record(cp_id, md={"source": "loop", "extra": value})]
    if where == "channel value":
        cp = {**empty_checkpoint(), "id": cp_id, "channel_versions": {"messages": "1"}}
        return [_cp_record(cp_id, cp=cp, blobs=[["messages", "1", *packed]])]
    if where == "pending write":
        write = {"k": "w", "ns": "", "cp": cp_id, "task": "task", "path": "", "w": [[0, "c", *packed]]}
        return [_cp_record(cp_id), write]
    raise AssertionError(where)


def _reads(saver: Any) -> dict[str, Callable[[], Any]]:
    cfg = {"configurable": {"thread_id": "t"}}
    return {
        "get_tuple": lambda: saver.get_tuple(cfg),
        "list": lambda: list(saver.list(cfg)),
        "list of every thread": lambda: list(saver.list(None)),
        "list with a filter": lambda: list(saver.list(cfg, filter={"source": "loop"})),
        "aget_tuple": lambda: asyncio.run(saver.aget_tuple(cfg)),
        "alist": lambda: asyncio.run(_collect(saver.alist(cfg))),
    }


async def _collect(it: Any) -> list[Any]:
    return [x async for x in it]


@pytest.mark.parametrize("variant", list(_mkdir_exts(Path("m"))))
def test_langgraph_never_calls_what_a_stored_value_names(tmp_path: Path, variant: str) -> None:
    """Defect 4: a thread journal from elsewhere ran os.system on get_tuple. Every extension
    that names a callable is refused, with the type and the line that allows it, and the
    callable is not called."""
    _, _, lg = _lg()
    marker = tmp_path / "made-by-the-journal"
    cp_id, path = _lg_thread(tmp_path / "saver", [])
    _lg_thread_append(path, _value_record(_later(cp_id), "channel value", _mkdir_exts(marker)[variant]))
    with lg.JournalSaver(tmp_path / "saver") as saver:
        err = _outcome(lambda: saver.get_tuple({"configurable": {"thread_id": "t"}}))
    assert not marker.exists(), f"get_tuple called os.mkdir, named by the stored bytes ({variant})"
    assert isinstance(err, ForeignValueError), repr(err)
    assert err.path == path and err.seq == 2, (err.path, err.seq)
    if variant != "a method (ext 3)":  # LangGraph calls only its own few methods: not widenable
        assert err.type_name == "os.mkdir" and "allowed_types=[mkdir]" in str(err), str(err)


@pytest.mark.parametrize("where", ["checkpoint", "metadata", "channel value", "pending write"])
def test_langgraph_refuses_at_every_place_and_every_read(tmp_path: Path, where: str) -> None:
    _, _, lg = _lg()
    marker = tmp_path / "made-by-the-journal"
    cp_id, _ = _lg_thread(tmp_path / "saver", [])
    _lg_thread_append(str(tmp_path / "saver" / lg.THREADS_DIR / lg.thread_dir_name("t")),
                      _value_record(_later(cp_id), where, _mkdir_exts(marker)["single argument (ext 0)"]))
    with lg.JournalSaver(tmp_path / "saver") as saver:
        for name, read in _reads(saver).items():
            err = _outcome(read)
            assert not marker.exists(), f"{name} called os.mkdir from the {where}"
            assert isinstance(err, ForeignValueError), (name, repr(err))


def _lg_thread_append(path: str, events: list[Any]) -> None:
    ormsgpack, _, lg = _lg()
    head = bytes([lg.RECORD_VERSION, lg.CODEC_RAW])
    with journal.open(path, compress=False) as j:
        for ev in events:
            j.append(head + ormsgpack.packb(ev), durability="sync")


class _Pickled:
    def __reduce__(self) -> Any:
        return (os.mkdir, ("made-by-pickle",))


def _hostile_lg_records(cp_id: str) -> dict[str, tuple[list[Any], list[bytes]]]:
    """Records of the saver's format with a field of another shape, and payloads that are not
    the saver's: (events, raw payloads) appended after a genuine checkpoint."""
    ormsgpack, empty_checkpoint, lg = _lg()
    import zstandard

    later = _later(cp_id)
    good = _cp_record(later)
    lc2 = b'{"lc": 2, "type": "constructor", "id": ["os", "mkdir"]}'
    ext42 = ormsgpack.packb(ormsgpack.Ext(42, b""))
    big = zstandard.ZstdCompressor().compress(b"\0" * 4096)
    # A zstd frame: its magic, a header descriptor (single segment, an 8-byte content size),
    # the content size 2^40, then one last raw block of 3 bytes. A decoder that trusts the
    # declared size allocates 1 TiB.
    block = ((3 << 3) | 1).to_bytes(3, "little") + b"abc"
    lying_size = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + (2**40).to_bytes(8, "little") + block
    assert zstandard.frame_content_size(lying_size) == 2**40
    return {
        "not a map": ([[1, 2, 3]], []),
        "no kind": ([{"ns": ""}], []),
        "a namespace that is a list": ([{**good, "ns": []}], []),
        "an id that is a map": ([{**good, "id": {}}], []),
        "blobs that are a str": ([{**good, "blobs": "x"}], []),
        "a blob row too short": ([{**good, "blobs": [["c", "1"]]}], []),
        "a write row whose idx is a str": ([{"k": "w", "ns": "", "cp": later, "task": "t", "path": "",
                                             "w": [["0", "c", "null", b""]]}], []),
        "a checkpoint that is a list": ([_cp_record(later, cp=[1])], []),
        "a checkpoint without channel versions": ([_cp_record(later, cp={"id": later})], []),
        "a checkpoint of another id": ([_cp_record(later, cp={**empty_checkpoint(), "id": "other"})], []),
        "metadata that is a list": ([_cp_record(later, md=[1])], []),
        "a value stored as pickle": ([{**good, "md": ["pickle", pickle.dumps(_Pickled())]}], []),
        "a value stored as json": ([{**good, "md": ["json", lc2]}], []),
        "a value that is not msgpack": ([{**good, "md": ["msgpack", b"\xc1"]}], []),
        "a value nested 100,000 deep": ([{**good, "md": ["msgpack", b"\x91" * 100_000 + b"\xc0"]}], []),
        "a value declaring 4 G elements": ([{**good, "md": ["msgpack", b"\xdd\xff\xff\xff\xff"]}], []),
        "an extension LangGraph does not write": ([{**good, "md": ["msgpack", ext42]}], []),
        "an unknown record format": ([], [b"\x09\x00" + ormsgpack.packb(good)]),
        "a zstd frame that is not one": ([], [bytes([lg.RECORD_VERSION, lg.CODEC_ZSTD]) + b"not zstd"]),
        "a zstd frame declaring 1 TiB": ([], [bytes([lg.RECORD_VERSION, lg.CODEC_ZSTD]) + lying_size]),
        "zstd of zeros, not msgpack": ([], [bytes([lg.RECORD_VERSION, lg.CODEC_ZSTD]) + big]),
        "a v1 record with a value not in base64": ([], []),  # filled below: a JSON event
    }


def test_langgraph_refuses_records_of_another_shape(tmp_path: Path) -> None:
    """Crafted records with valid checksums: every read raises ForeignRecordError naming the
    journal and the seq, never KeyError, TypeError, ValueError, RecursionError or MemoryError."""
    _, _, lg = _lg()
    cp_id, _ = _lg_thread(tmp_path / "probe", [])
    failures = []
    for i, (name, (events, raw)) in enumerate(_hostile_lg_records(cp_id).items()):
        where = tmp_path / f"case{i}"
        _, path = _lg_thread(where, events, raw)
        if name.startswith("a v1 record"):
            with journal.open(path) as j:  # v1: a JSON event, values in base64
                j.append({"k": "cp", "ns": "", "id": _later(cp_id), "parent": None, "cp": ["msgpack", "!!"],
                          "md": ["msgpack", "!!"], "blobs": []}, durability="sync")
        with lg.JournalSaver(where) as saver:
            for read, call in _reads(saver).items():
                err = _outcome(call)
                if not isinstance(err, ForeignRecordError) or err.path != path or err.seq != 2:
                    failures.append(f"{name}, {read}: {err!r}")
    assert not failures, "\n".join(failures)


def test_langgraph_real_state_round_trips_with_the_defaults(tmp_path: Path) -> None:
    """What LangGraph itself stores (messages, Send, Interrupt, Command, datetimes, sets, ...)
    reads back with the default serializer, and nothing else needs allowing."""
    _need("langgraph.types")
    import datetime
    import decimal
    import uuid
    from collections import deque

    from langchain_core.documents import Document
    from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.types import Command, Interrupt, Send

    from journal.adapters.langgraph import JournalSaver

    values: dict[str, Any] = {
        "messages": [
            SystemMessage("be brief"), HumanMessage("hi", id="h1"),
            AIMessage("", id="a1", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1", "type": "tool_call"}]),
            ToolMessage("42", tool_call_id="c1", id="t1"), RemoveMessage(id="h1"),
        ],
        "send": Send("node", {"arg": 1}),
        "interrupt": Interrupt(value={"ask": "ok?"}, id="i1"),
        "command": Command(resume="yes", goto="next", update={"k": 1}),
        "time": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc),
        "date": datetime.date(2024, 5, 6),
        "delta": datetime.timedelta(seconds=5),
        "id": uuid.UUID(int=7),
        "money": decimal.Decimal("1.10"),
        "set": {1, 2},
        "frozen": frozenset({"a"}),
        "queue": deque([1, 2]),
        "path": Path("/x/y"),
        "doc": Document(page_content="text", metadata={"s": 1}),
    }
    cp = empty_checkpoint()
    cp["channel_versions"] = {name: "1" for name in values}
    with JournalSaver(tmp_path) as saver:
        cfg = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, {**cp, "channel_values": values},
                        {"source": "loop", "step": 1}, {name: "1" for name in values})
        saver.put_writes(cfg, [("__interrupt__", [Interrupt(value="q", id="i2")]), ("c", Send("n", 1))], "task")
    with JournalSaver(tmp_path) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t"}})
    assert got is not None and got.pending_writes is not None
    assert got.checkpoint["channel_values"] == values
    assert [w[2] for w in got.pending_writes] == [[Interrupt(value="q", id="i2")], Send("n", 1)]


def test_langgraph_the_application_types_take_one_line(tmp_path: Path) -> None:
    """A pydantic model, a dataclass and an enum of the application's are refused by default,
    naming the line that allows them; with ``allowed_types`` they round-trip; a compiled graph
    under LANGGRAPH_STRICT_MSGPACK widens the saver itself (LangGraph's with_allowlist)."""
    _need("langgraph.graph")
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from journal.adapters.langgraph import JournalSaver
    from tests.untrusted_types import Colour, Point, Profile

    values = {"profile": Profile(name="x", tags=["a"]), "point": Point(1, 2), "colour": Colour.RED}
    cp = empty_checkpoint()
    cp["channel_versions"] = {name: "1" for name in values}
    cfg: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with JournalSaver(tmp_path) as saver:
        saver.put(cfg, {**cp, "channel_values": values}, {}, {name: "1" for name in values})
    with JournalSaver(tmp_path) as saver:
        err = _outcome(lambda: saver.get_tuple({"configurable": {"thread_id": "t"}}))
    assert isinstance(err, ForeignValueError), repr(err)
    assert err.type_name.startswith("tests.untrusted_types.") and "allowed_types=[" in str(err)
    with JournalSaver(tmp_path, allowed_types=[Profile, Point, Colour]) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert got is not None and got.checkpoint["channel_values"] == values
    with JournalSaver(tmp_path, allowed_types=[("tests.untrusted_types", n) for n in ("Profile", "Point", "Colour")]) \
            as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert got is not None and got.checkpoint["channel_values"] == values
        assert saver.with_allowlist([("tests.untrusted_types", "Other")]) is saver  # widened in place
    with JournalSaver(tmp_path, serde=JsonPlusSerializer(allowed_msgpack_modules=[Profile, Point, Colour])) as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert got is not None and got.checkpoint["channel_values"] == values
    with pytest.raises(JournalError, match="allowed_types widens"):
        JournalSaver(tmp_path, serde=JsonPlusSerializer(), allowed_types=[Profile])


def test_langgraph_a_graph_of_pydantic_state_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A StateGraph whose state is a pydantic model holding messages and a model of the
    application's: run, interrupted, and resumed on a new saver. With LANGGRAPH_STRICT_MSGPACK
    (LangGraph's own switch) the compiled graph passes its state's types to the saver; without
    it, the one line ``allowed_types=[...]`` does."""
    _need("langgraph.graph")
    from langgraph import _internal
    from langgraph.types import Command

    from journal.adapters.langgraph import JournalSaver
    from tests.untrusted_types import Profile, build_pydantic_graph

    cfg: Any = {"configurable": {"thread_id": "t"}}
    for strict in (False, True):
        monkeypatch.setattr(_internal._serde, "STRICT_MSGPACK_ENABLED", strict)
        where = tmp_path / f"strict-{strict}"
        saver = JournalSaver(where, allowed_types=() if strict else [Profile])
        graph = build_pydantic_graph(saver)
        first = graph.invoke({"messages": [("user", "hi")], "profile": Profile(name="p", tags=[])}, cfg)
        assert "__interrupt__" in first
        saver.close()
        saver = JournalSaver(where, allowed_types=() if strict else [Profile])
        out = build_pydantic_graph(saver).invoke(Command(resume="yes"), cfg)
        saver.close()
        assert out["profile"] == Profile(name="p", tags=["asked", "yes"])
        assert [m.content for m in out["messages"]] == ["hi", "asked", "yes"]


# ---- JSON adapters: records appended to a journal the adapter made, as another program could


def _nested(depth: int) -> Any:
    """A JSON value ``depth`` maps deep (within what the engine stores and reads: ~1,000)."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def _append(path: str, records: Sequence[dict[str, Any]]) -> None:
    with journal.open(path) as j:
        for record in records:
            j.append(record, durability="sync")


def _first_records(path: str) -> list[Any]:
    with journal.open(path, readonly=True) as j:
        return [rec.event for rec in j.read()]


def _report(failures: list[str]) -> None:
    assert not failures, "\n".join(failures)


# ---- OpenAI Agents SDK: items are JSON objects, kept and given back as they are


def test_openai_agents_refuses_records_of_another_shape(tmp_path: Path) -> None:
    _need("agents")
    from journal.adapters.openai_agents import JournalSession, SessionFormatError, journal_dir_name

    cases: dict[str, dict[str, Any]] = {
        "an add without items": {"op": "add"},
        "an add whose items are a str": {"op": "add", "items": "ab"},
        "an add whose items are a map": {"op": "add", "items": {"a": 1}},
        "an add of a number": {"op": "add", "items": [1]},
        "a replace whose items are null": {"op": "replace", "items": None},
        "an op that is a list": {"op": [1]},
        "a pop without its fields": {"op": "pop"},
        "a pop of a huge seq": {"op": "pop", "seq": 10**100, "index": 0},
        "a pop whose fields are maps": {"op": "pop", "seq": {}, "index": {}},
    }
    failures = []
    for i, (name, record) in enumerate(cases.items()):
        where = tmp_path / f"case{i}"
        with JournalSession("s", where) as session:
            asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
        path = str(where / journal_dir_name("s"))
        _append(path, [record])
        err = _outcome(lambda: JournalSession("s", where).close())  # noqa: B023 - called at once
        if not (isinstance(err, SessionFormatError) and isinstance(err, ForeignRecordError)
                and err.path == path and err.seq == 3):
            failures.append(f"{name}: {err!r}")
    _report(failures)


def test_openai_agents_deep_items_read_back(tmp_path: Path) -> None:
    """Items are JSON the SDK gives back as stored: nesting the engine stores reads back."""
    _need("agents")
    from journal.adapters.openai_agents import JournalSession, journal_dir_name

    with JournalSession("s", tmp_path) as session:
        asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    _append(str(tmp_path / journal_dir_name("s")), [{"op": "add", "items": [{"deep": _nested(900)}]}])
    with JournalSession("s", tmp_path) as session:
        items = asyncio.run(session.get_items())
    assert len(items) == 2


# ---- Google ADK: records of the service's shape; events are ADK's pydantic model


def _adk_app(where: Path) -> tuple[str, list[Any]]:
    """An app journal with one session ("u", "s") and one event; its path and its records."""
    from google.adk.events.event import Event
    from google.genai import types

    from journal.adapters.adk import JournalSessionService

    async def main() -> None:
        async with JournalSessionService(where) as service:
            session = await service.create_session(app_name="app", user_id="u", session_id="s", state={"k": 1})
            event = Event(author="user", invocation_id="i1",
                          content=types.Content(role="user", parts=[types.Part(text="hi")]))
            await service.append_event(session, event)

    asyncio.run(main())
    from journal.adapters.adk import app_dir_name

    path = str(where / "apps" / app_dir_name("app"))
    return path, _first_records(path)


def test_adk_refuses_records_of_another_shape(tmp_path: Path) -> None:
    _need("google.adk")
    from journal.adapters.adk import STATE_DEPTH_MAX, AppFormatError, JournalSessionService

    _, (_, create, event) = _adk_app(tmp_path / "probe")
    create2 = {**create, "session_id": "s2"}
    too_deep = _nested(5 * STATE_DEPTH_MAX)  # copy.deepcopy's recursion stops near 330 levels
    cases: dict[str, dict[str, Any]] = {
        "an op that is a map": {**create2, "op": {}},
        "a user_id that is a number": {**create2, "user_id": 1},
        "a session_id that is a list": {**create2, "session_id": ["s"]},
        "state that is a list": {**create2, "state": ["ab"]},
        "app state that is a list of pairs": {**create2, "state": {**create["state"], "app": ["ab"]}},
        "a time beyond any float": {**create2, "time": 10**400},
        "a time that is a str": {**create2, "time": "1.5"},
        "a time that is true": {**create2, "time": True},
        "state nested too deep": {**create2, "state": {**create["state"], "session": {"k": too_deep}}},
        "an event that is a list": {**event, "event": [1]},
        "an event timestamp that is a str": {**event, "event": {**event["event"], "timestamp": "x"}},
        "an event id that is a number": {**event, "event": {**event["event"], "id": 7}},
        "a delta whose user part is a str": {**event, "delta": {**event["delta"], "user": "ab"}},
        "an event ADK's model refuses": {**event, "event": {**event["event"], "author": {"not": "a str"}}},
        "an event whose parts are a str": {**event, "event": {**event["event"], "content": {"parts": "x"}}},
    }

    async def reads(service: Any) -> None:
        await service.list_sessions(app_name="app")
        await service.get_session(app_name="app", user_id="u", session_id="s")
        await service.get_user_state(app_name="app", user_id="u")

    failures = []
    for i, (name, record) in enumerate(cases.items()):
        where = tmp_path / f"case{i}"
        path, _ = _adk_app(where)
        _append(path, [record])
        service = JournalSessionService(where)
        err = _outcome(lambda: asyncio.run(reads(service)))  # noqa: B023 - called at once
        asyncio.run(service.close())
        if not (isinstance(err, AppFormatError) and isinstance(err, ForeignRecordError)
                and err.path == path and err.seq == 4):
            failures.append(f"{name}: {err!r}")
    _report(failures)


def test_adk_refuses_to_write_state_it_would_refuse_to_read(tmp_path: Path) -> None:
    _need("google.adk")
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions

    from journal.adapters.adk import STATE_DEPTH_MAX, JournalSessionService, StateNotSerializableError

    async def main() -> None:
        async with JournalSessionService(tmp_path) as service:
            deep = _nested(STATE_DEPTH_MAX + 5)
            with pytest.raises(StateNotSerializableError, match="nested more than"):
                await service.create_session(app_name="app", user_id="u", state={"k": deep})
            session = await service.create_session(app_name="app", user_id="u", session_id="s")
            seq = service.last_seq("app")
            with pytest.raises(StateNotSerializableError, match="nested more than"):
                await service.append_event(session, Event(author="a", invocation_id="i",
                                                          actions=EventActions(state_delta={"user:k": deep})))
            assert service.last_seq("app") == seq  # nothing written
            fine = _nested(STATE_DEPTH_MAX - 5)
            await service.append_event(session, Event(author="a", invocation_id="i",
                                                      actions=EventActions(state_delta={"k": fine})))
        async with JournalSessionService(tmp_path) as service:
            got = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert got is not None and got.state["k"] == fine

    asyncio.run(main())


# ---- Pydantic AI: records and messages through the framework's own TypeAdapters


def _pai_store(where: Path) -> list[Any]:
    """A store with one conversation "c" of two entries; the journal's records."""
    from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord

    from journal.adapters.pydantic_ai import JournalConversationStore
    from tests.child_pydantic_ai import message

    async def main() -> None:
        async with JournalConversationStore(where) as store:
            e0 = ConversationEntry(id="e0", parent_id=None, message=message(0))
            e1 = ConversationEntry(id="e1", parent_id="e0", message=message(1))
            await store.write_record(ConversationRecord(conversation_id="c", head_id="e1", revision="r1"),
                                     new_entries=[e0, e1], expected_revision=None)

    asyncio.run(main())
    return _first_records(str(where))


def test_pydantic_ai_refuses_records_of_another_shape(tmp_path: Path) -> None:
    _need("pydantic_ai")
    from journal.adapters.pydantic_ai import JournalConversationStore, StoreFormatError

    _, write = _pai_store(tmp_path / "probe")
    entries = write["entries"]
    cases: dict[str, dict[str, Any]] = {
        "a write without its record": {"op": "write", "entries": []},
        "a record Pydantic AI refuses": {**write, "record": {**write["record"], "conversation_id": 5}},
        "a record nested past pydantic's limit": {**write, "record": {**write["record"], "scope": _nested(900)}},
        "a record updated in the year 99999": {**write, "record": {**write["record"], "updated_at": "99999-01-01"}},
        "entries that are a map": {**write, "entries": {}},
        "an entry without an id": {**write, "entries": [{k: v for k, v in entries[0].items() if k != "id"}]},
        "an entry whose id is a number": {**write, "entries": [{**entries[0], "id": 1}]},
        "an entry whose parent is a list": {**write, "entries": [{**entries[0], "parent_id": ["e"]}]},
        "a delete without its fields": {"op": "delete"},
        "a delete of a conversation that is a list": {"op": "delete", "conversation_id": ["c"], "revision": "r1"},
        "an op that is a list": {"op": ["write"]},
    }
    failures = []
    for i, (name, record) in enumerate(cases.items()):
        where = tmp_path / f"case{i}"
        _pai_store(where)
        _append(str(where), [record])
        err = _outcome(lambda: asyncio.run(JournalConversationStore(where).open()))  # noqa: B023 - called at once
        if not (isinstance(err, StoreFormatError) and isinstance(err, ForeignRecordError)
                and err.path == str(where) and err.seq == 3):
            failures.append(f"{name}: {err!r}")
    _report(failures)


def test_pydantic_ai_refuses_messages_it_cannot_read(tmp_path: Path) -> None:
    """A stored message is decoded when it is read: one Pydantic AI refuses is named by its
    record, whichever read meets it."""
    _need("pydantic_ai")
    from journal.adapters.pydantic_ai import JournalConversationStore, StoreFormatError

    _, write = _pai_store(tmp_path / "probe")
    entries = write["entries"]
    bad_messages = {
        "a message of no known kind": {"kind": "not-a-kind", "parts": []},
        "a message that is a str": "hello",
        "a part whose content is nested past pydantic's limit": {
            **entries[0]["message"], "parts": [{**entries[0]["message"]["parts"][0], "content": _nested(900)}]},
    }
    failures = []
    for i, (name, bad) in enumerate(bad_messages.items()):
        where = tmp_path / f"case{i}"
        _pai_store(where)
        record = {**write["record"], "conversation_id": "d", "head_id": "x1", "revision": "r"}
        _append(str(where), [{"op": "write", "record": record,
                              "entries": [{**entries[0], "id": "x0", "parent_id": None},
                                          {**entries[1], "id": "x1", "parent_id": "x0", "message": bad}]}])

        async def reads(where: Path = where) -> list[BaseException | None]:
            async with JournalConversationStore(where) as store:
                errs: list[BaseException | None] = []
                for read in (store.read_entry("x1"), store.read_history("x1"), store.load("d")):
                    try:
                        await read
                        errs.append(None)
                    except Exception as e:  # the test looks at what it was
                        errs.append(e)
                return errs

        for err in asyncio.run(reads()):
            if not (isinstance(err, StoreFormatError) and err.path == str(where) and err.seq == 3):
                failures.append(f"{name}: {err!r}")
    _report(failures)


def test_pydantic_ai_a_loop_of_parents_is_refused(tmp_path: Path) -> None:
    """Crafted entries whose parents loop (x0 -> x1 -> x0): reading the history raises
    StoreFormatError, where it returned the loop again and again up to ``limit`` (and without a
    limit never returned)."""
    _need("pydantic_ai")
    from journal.adapters.pydantic_ai import JournalConversationStore, StoreFormatError

    _, write = _pai_store(tmp_path)
    entries = write["entries"]
    record = {**write["record"], "conversation_id": "d", "head_id": "x1", "revision": "r"}
    _append(str(tmp_path), [{"op": "write", "record": record,
                             "entries": [{**entries[0], "id": "x0", "parent_id": "x1"},
                                         {**entries[1], "id": "x1", "parent_id": "x0"}]}])

    async def main() -> None:
        async with JournalConversationStore(tmp_path) as store:
            with pytest.raises(StoreFormatError, match="its own ancestor"):
                await store.read_history("x1", limit=10)
            with pytest.raises(StoreFormatError, match="its own ancestor"):
                await store.read_history("x1")

    asyncio.run(main())
