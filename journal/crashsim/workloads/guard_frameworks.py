"""Crash workloads of the framework guards: a power loss over a real framework run's guarded tool.

``register()`` registers, for each framework that imports, one workload (skipping the others):

    guard-langgraph       a StateGraph on a JournalSaver, its node wrapped in ``@guarded(guard_for(saver))``
    guard-openai-agents   an Agent (the SDK's ScriptedModel) on a JournalSession, its tool wrapped in
                          guarded_tool(guard_for(session)); resumed with "continue"
    guard-adk             an LlmAgent (a scripted BaseLlm) run by ADK's Runner on a JournalSessionService
                          with GuardPlugin(guard_for(service)); unknown calls asked by confirmation
    guard-pydantic-ai     an Agent (scripted FunctionModel) on a JournalConversationStore with
                          CrashSafeTools(guard_for(store)); the conversation is saved after the run

Neither importing this module nor importing ``journal.crashsim.workloads`` registers them (the
built-in set must not depend on which frameworks are installed, and a command that runs every
registered workload must not start running these): a caller that wants them calls ``register()``
(tests/test_guard_crash_frameworks.py does).

Where the framework's storage lives. The harness records one file system and checks one journal
against its ledger, ``/j``. Each adapter builds its stores with ``journal.store(path)`` (the
LangGraph saver and the Agents SDK session take no ``fs=``; ``guard_for`` of the Agents SDK and
of Pydantic AI build a store of their own), so the lives of a run build them while
``journal.store`` gives a ``HarnessStore`` (``stores_on``): a directory store on the harness's
file system in which the guard's journal (``guard.<sha256>``, one scope per run) *is* ``/j``,
opened through ``Ctx.open`` in the recorded run so that every intent and result the guard
appends is on the ledger. The framework's own journals (threads, sessions, conversations) are
directories beside it on the same file system, so every crash state cuts both at once, as a
power loss does; they get the run's sector padding option too (``journal.open(path, fs=)``,
which Pydantic AI's store calls, is wrapped for that). The adapters are untouched and used as an
application uses them (``guard_for``, the framework's own runner).

The tool's side effect is the world outside the journals: in the recorded run each execution
writes ``/world/<n>`` atomically (temp file, fsync, rename, directory fsync), so a crash image
says which calls surely ran before the power went: a call whose file is there ran.

What each crash state is checked for (``recover_and_check``): the harness's core invariants on
``/j`` (an intent acknowledged at "sync" is never lost), then, on copies of the recovered image:

* the framework's stored history, and the guard's, load the same twice;
* the guard's journal: every call whose intent is durable and has no result is listed by
  ``unknown()`` and ``before()`` says UNKNOWN for it (never RUN: never reported not-started);
  no call is both unknown and DONE; a call with a durable result is DONE with that result;
* a second life of the framework run on the image (resend or continue, answer "happened" to
  every call the framework surfaces, until the run ends): the tool never runs for a call whose
  intent was durable, nor for one whose ``/world`` file is there (no call runs twice without an
  answer); every call surfaced as of unknown outcome (interrupt, approval, confirmation,
  deferred request) has a durable intent and no result, and is surfaced once; the run ends.

A crash image is checked once: the harness recovers the recovered image again, and that second
recovery finds the same image and its remembered verdict (a framework run per image is the bulk
of the cost).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import importlib.util
import operator
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict, cast
from unittest import mock

import journal
from journal.crashsim.campaign import SECTOR_OPTIONS
from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, WORKLOADS, Ctx, workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.engine.store import DirectoryStore
from journal.fs import FileSystem, make_dirs, write_atomic
from journal.session.toolguard import JOURNAL_PREFIX, GuardScope, Verdict

FIXED_TIME = "2026-01-01T00:00:00Z"
WORLD_DIR = "/world"  # the tool's side effect in the first life: one file per call, whole or absent
SECOND_LIFE_ROUNDS_MAX = 8  # resumes of the second life (one unknown call is answered per resume)


class GuardFrameworkViolation(AssertionError):
    """A framework guard's promise failed on a recovered crash image."""


class SecondGuardJournalError(RuntimeError):
    def __init__(self, name: str, first: str) -> None:
        super().__init__(f"the run opened guard journal {name} after {first}: the harness checks one guard scope per "
                         "run against its ledger; give the workload one thread/session/conversation")


def _clock() -> str:
    return FIXED_TIME


class HarnessStore:
    """A ``journal.api.Store`` on the harness's file system whose guard journal is ``/j``.

    ``open_guard(create, options)`` opens ``/j`` (through ``Ctx.open`` in the recorded run, so its
    appends are on the ledger; plainly when a crash image is checked)."""

    def __init__(self, root: str, fs: FileSystem, open_guard: Callable[[bool, dict[str, Any]], Any],
                 guard_name: list[str], engine_options: dict[str, Any]) -> None:
        self._dirs = DirectoryStore(root, fs=fs)
        self._engine_options = engine_options
        self._fs = fs
        self._open_guard = open_guard
        self._guard_name = guard_name  # shared by every store of one life: the one guard scope

    @property
    def location(self) -> str:
        return self._dirs.location

    def _is_guard(self, name: str) -> bool:
        if not name.startswith(JOURNAL_PREFIX):
            return False
        if not self._guard_name:
            self._guard_name.append(name)
        elif self._guard_name[0] != name:
            raise SecondGuardJournalError(name, self._guard_name[0])
        return True

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Any:
        if self._is_guard(name):
            if readonly:
                return Journal.open(JOURNAL_PATH, readonly=True, fs=self._fs, **options)
            return self._open_guard(create, options)
        return self._dirs.open(name, create=create, readonly=readonly, **{**self._engine_options, **options})

    def exists(self, name: str) -> bool:
        if self._is_guard(name):
            return self._fs.exists(JOURNAL_PATH)
        return self._dirs.exists(name)

    def names(self) -> list[str]:
        return sorted(self._dirs.names() + (self._guard_name[:1] if self._fs.exists(JOURNAL_PATH) else []))

    def delete(self, name: str) -> None:
        if self._is_guard(name):
            raise PermissionError("the harness's guard journal is not deleted by a workload")
        self._dirs.delete(name)

    def copy(self, source: str, target: str, **kw: Any) -> None:
        self._dirs.copy(source, target, **kw)


@contextlib.contextmanager
def stores_on(fs: FileSystem, open_guard: Callable[[bool, dict[str, Any]], Any],
              options: dict[str, Any]) -> Iterator[None]:
    """While active, ``journal.store(dir)`` (what every adapter calls) is a ``HarnessStore`` on ``fs``,
    and ``journal.open(path, fs=fs)`` opens with the run's engine options.

    The framework's journals get the run's sector padding option (the harness turns it on under
    the npsow model, where an unpadded journal may lose synced bytes to a torn neighbour write:
    a deployment on such a disk turns it on for every journal, not only the guard's)."""
    guard_name: list[str] = []
    engine_options = {k: v for k, v in options.items() if k in SECTOR_OPTIONS}

    def store(target: Any, **options: Any) -> HarnessStore:
        if isinstance(target, str) and "://" in target:
            raise ValueError(f"the harness has no server: {target!r}")
        return HarnessStore(os.fspath(target), fs, open_guard, guard_name, engine_options)

    real_open = journal.open

    def open_journal(path: Any, create: bool = False, **options: Any) -> Any:
        # An adapter that opens its journal by path with fs= (Pydantic AI's conversation store).
        if options.get("fs") is fs:
            options = {**engine_options, **options}
        return real_open(path, create=create, **options)

    with mock.patch.object(journal, "store", store), mock.patch.object(journal, "open", open_journal):
        yield


@dataclass
class SecondLife:
    """What a second life of the framework run did on a crash image."""

    ran: list[int]  # the n of every tool execution, in order
    surfaced: list[int]  # the n of every call the framework surfaced as of unknown outcome
    finished: bool  # the run ended (nothing left to ask)


@dataclass(frozen=True)
class Driver:
    """One framework: its first life (recorded), its history load and its second life (checked).

    ``first(ctx, calls, effect)`` runs ``calls`` guarded tool calls, the tool calling ``effect(n)``;
    ``load(fs)`` returns the framework's stored history (comparable); ``second(fs)`` resumes,
    answering every surfaced call "happened";
    ``n_of(args)`` names a call by the ``n`` of its recorded arguments; ``scope`` is the guard scope."""

    name: str
    scope: Callable[[], str]  # the guard scope id (the adapter's own function, imported on use)
    first: Callable[[Ctx, int, Callable[[int], None]], None]
    load: Callable[[FileSystem], Any]
    second: Callable[[FileSystem], SecondLife]
    n_of: Callable[[Any], int]


def _plain_guard(fs: FileSystem, options: dict[str, Any]) -> Callable[[bool, dict[str, Any]], Any]:
    def open_guard(create: bool, kw: dict[str, Any]) -> Any:
        return Journal.open(JOURNAL_PATH, create=create, fs=fs, **{**options, **kw})
    return open_guard


def _facts(recs: list[Record], n_of: Callable[[Any], int]) -> tuple[dict[int, str], set[int], dict[int, Any]]:
    """From the guard journal: n -> call id of every call with a durable intent (tool.started),
    and the n of those with a durable own result (ok), with that result."""
    args_of: dict[str, Any] = {}  # attempt id -> (call id, args)
    intent: dict[int, str] = {}
    done: dict[int, Any] = {}
    for r in recs:
        ev = cast(dict[str, Any], r.event)
        data = ev.get("data") or {}
        aid = str(ev.get("toolCallId"))
        if ev["type"] == "tool.requested":
            args_of[aid] = (data["callId"], data.get("args"))
        elif ev["type"] == "tool.started" and aid in args_of:
            call_id, args = args_of[aid]
            intent[n_of(args)] = call_id
        elif ev["type"] == "tool.result" and not r.synthetic and data.get("status") == "ok" and aid in args_of:
            done[n_of(args_of[aid][1])] = data.get("output")
    return intent, set(done), done


def check_image(driver: Driver, recs: list[Record], fs: MemFileSystem, options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    intent, done, results = _facts(recs, driver.n_of)
    ran_first = {int(name) for name in fs.listdir(WORLD_DIR) if name.isdigit()} if fs.exists(WORLD_DIR) else set()
    open_unknown = {n for n in intent if n not in done}
    # The stored histories load the same twice (the first load may repair; the second must not change it).
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    loads = []
    for _ in range(2):
        with stores_on(clone, _plain_guard(clone, options), options):
            loads.append(driver.load(clone))
        s = GuardScope(Journal.open(JOURNAL_PATH, fs=clone, **options), driver.scope(), clock=_clock)
        loads.append(s.history())
        s.close()
    if loads[0] != loads[2]:
        out.append(f"{driver.name}: the framework's stored history loads differently the second time")
    if loads[1] != loads[3]:
        out.append(f"{driver.name}: the guard's history loads differently the second time")
    # The guard's own view of every call with a durable intent.
    s = GuardScope(Journal.open(JOURNAL_PATH, fs=clone, **options), driver.scope(), clock=_clock)
    try:
        listed = {u.call_id for u in s.unknown()}
        for n, call_id in sorted(intent.items()):
            d = s.before(call_id, "deploy", {"n": n})
            if n in open_unknown:
                if call_id not in listed:
                    out.append(f"{driver.name}: call {n} has a durable intent and no result, unknown() omits it")
                if d.verdict is not Verdict.UNKNOWN:
                    out.append(f"{driver.name}: call {n} has a durable intent and no result, the guard says "
                               f"{d.verdict.value}")
            elif d.verdict is not Verdict.DONE or call_id in listed:
                out.append(f"{driver.name}: call {n} has a durable result, the guard says {d.verdict.value}"
                           + (" and lists it unknown" if call_id in listed else ""))
            elif d.result != results[n]:
                out.append(f"{driver.name}: call {n} is DONE with {d.result!r}, the journal holds {results[n]!r}")
    finally:
        s.close()
    # A second life of the framework run.
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    with stores_on(clone, _plain_guard(clone, options), options):
        life = driver.second(clone)
    again = sorted(set(life.ran) & set(intent))
    if again:
        out.append(f"{driver.name}: call(s) {again} ran again on the second life without an answer (intent durable)")
    twice = sorted(set(life.ran) & ran_first)
    if twice:
        out.append(f"{driver.name}: call(s) {twice} ran in the first life and again in the second without an answer")
    wrong = sorted(set(life.surfaced) - open_unknown)
    if wrong:
        out.append(f"{driver.name}: call(s) {wrong} surfaced as unknown, the guard journal says done or never started")
    if len(life.surfaced) != len(set(life.surfaced)):
        out.append(f"{driver.name}: a call was surfaced again after its answer: {life.surfaced}")
    if not life.finished:
        out.append(f"{driver.name}: the second life did not finish after answering {life.surfaced}")
    return out


def _is_event(r: Record) -> bool:
    return not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event


CHECKED_IMAGES_MAX = 64  # recent images whose check is remembered


def _image_key(fs: MemFileSystem) -> str:
    files, dirs = fs.snapshot()
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    h.update("\0".join(sorted(dirs)).encode())
    return h.hexdigest()


def _workload(driver: Driver) -> None:
    # The harness recovers every crash image, then recovers the recovered image again (which must
    # change nothing): the second time the image is the one checked already, so its check is not
    # run twice (a framework run per image is the bulk of the cost).
    checked: dict[str, list[str]] = {}

    def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
        """Core recovery of ``/j``, then the guard's and the framework's checks -- unless the harness
        appended its own records after recovery (invariant 6): those images get the core checks only."""
        j = Journal.open(path, create=create, fs=fs, **options)
        try:
            recs = list(j.read())
        finally:
            j.close()
        if isinstance(fs, MemFileSystem) and all(_is_event(r) for r in recs):
            key = f"{_image_key(fs)}/{sorted(options.items())!r}"
            problems = checked.get(key)
            if problems is None:
                problems = check_image(driver, recs, fs, options)
                if len(checked) >= CHECKED_IMAGES_MAX:
                    checked.pop(next(iter(checked)))
                checked[key] = problems
            if problems:
                raise GuardFrameworkViolation("; ".join(problems))
        return recs

    def run(ctx: Ctx) -> None:
        def open_guard(create: bool, kw: dict[str, Any]) -> Any:
            return ctx.open(create=create, **kw)
        def effect(n: int) -> None:
            write_atomic(ctx.fs, f"{WORLD_DIR}/{n}", b"ran")

        make_dirs(ctx.fs, WORLD_DIR)
        with stores_on(ctx.fs, open_guard, ctx.options):
            driver.first(ctx, ctx.rng.randint(2, 3), effect)

    run.__name__ = run.__qualname__ = driver.name.replace("-", "_")
    workload(driver.name, recover=recover_and_check, reserve_bytes=CRASH_RESERVE_BYTES)(run)


# ---- LangGraph --------------------------------------------------------------------------------

LG_THREAD = "t-crash"
LG_PATH = "/langgraph"


class LgState(TypedDict, total=False):
    n: int
    loops: int
    log: Annotated[list[str], operator.add]


def _lg_graph(saver: Any, guard: Any, effect: Callable[[int], None], loops: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    from journal.adapters.langgraph_guard import guarded

    def prep(s: LgState) -> LgState:
        return {"n": s.get("n", 0) + 1}

    def deploy(s: LgState) -> LgState:
        effect(s["n"])
        return {"log": [f"deployed:{s['n']}"]}

    def finish(s: LgState) -> LgState:
        return {"log": [f"finish:{s['n']}"]}

    b: Any = StateGraph(LgState)  # Any: LangGraph's add_node overloads do not take a TypedDict node under mypy
    b.add_node("prep", prep)
    b.add_node("deploy", guarded(guard)(deploy))
    b.add_node("finish", finish)
    b.add_edge(START, "prep")
    b.add_edge("prep", "deploy")
    b.add_edge("deploy", "finish")
    b.add_conditional_edges("finish", lambda s: "prep" if s["n"] < s["loops"] else END)
    return b.compile(checkpointer=saver)


def _lg_config() -> Any:  # a RunnableConfig
    return {"configurable": {"thread_id": LG_THREAD}}


def _lg_first(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    from journal.adapters.langgraph import JournalSaver
    from journal.adapters.langgraph_guard import guard_for

    saver = JournalSaver(LG_PATH)
    guard = guard_for(saver, clock=_clock)
    try:
        _lg_graph(saver, guard, effect, calls).invoke({"n": 0, "loops": calls}, _lg_config(), durability="sync")
    finally:
        guard.close()
        saver.close()


def _lg_load(fs: FileSystem) -> Any:
    from journal.adapters.langgraph import JournalSaver

    saver = JournalSaver(LG_PATH)
    try:
        return [(t.checkpoint["id"], t.checkpoint["channel_values"], t.pending_writes)
                for t in saver.list(_lg_config())]
    finally:
        saver.close()


def _lg_second(fs: FileSystem) -> SecondLife:
    from langgraph.types import Command

    from journal.adapters.langgraph import JournalSaver
    from journal.adapters.langgraph_guard import guard_for

    saver = JournalSaver(LG_PATH)
    guard = guard_for(saver, clock=_clock)
    ran: list[int] = []
    surfaced: list[int] = []
    try:
        state = saver.get_tuple(_lg_config())
        loops = state.checkpoint["channel_values"].get("loops", 2) if state is not None else 2
        graph = _lg_graph(saver, guard, ran.append, loops)
        inp: Any = {"n": 0, "loops": loops} if state is None else None
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            graph.invoke(inp, _lg_config(), durability="sync")
            st = graph.get_state(_lg_config())
            if not st.interrupts:
                return SecondLife(ran, surfaced, not st.next)
            (i,) = st.interrupts
            n = int(i.value["args"]["n"])
            surfaced.append(n)
            inp = Command(resume={"answer": "happened", "result": {"log": [f"deployed:{n}"]}})
        return SecondLife(ran, surfaced, False)
    finally:
        guard.close()
        saver.close()


LANGGRAPH = Driver("guard-langgraph", lambda: LG_THREAD, _lg_first, _lg_load, _lg_second, lambda args: int(args["n"]))


# ---- Pydantic AI ------------------------------------------------------------------------------

PA_CONVERSATION = "conv-crash"
PA_PATH = "/pydantic-ai/conversations"


def _pa_agent(guard: Any, effect: Callable[[int], None]) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from journal.adapters.pydantic_ai_guard import CrashSafeTools

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Calls deploy(n=k+1) until it has ``calls`` returns (the prompt says how many), then says so."""
        prompt = next(str(p.content) for m in messages for p in m.parts if isinstance(p, UserPromptPart))
        calls = int(prompt.split()[-1])
        k = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == "deploy")
        if k >= calls:
            return ModelResponse(parts=[TextPart(f"finished:{k}")])
        return ModelResponse(parts=[ToolCallPart("deploy", {"n": k + 1}, tool_call_id=f"call-{k + 1}")])

    agent = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests], capabilities=[CrashSafeTools(guard)])

    @agent.tool_plain
    def deploy(n: int) -> str:
        effect(n)
        return f"deployed:{n}"

    return agent


async def _pa_first_async(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    from pydantic_ai.conversation import Conversation

    from journal.adapters.pydantic_ai import JournalConversationStore
    from journal.adapters.pydantic_ai_guard import guard_for

    store = JournalConversationStore(PA_PATH, fs=ctx.fs)
    guard = guard_for(store, clock=_clock)
    try:
        result = await _pa_agent(guard, effect).run(f"deploy {calls}",
                                                    conversation=Conversation(conversation_id=PA_CONVERSATION))
        await store.save(result)
    finally:
        guard.close()
        await store.close()


def _pa_first(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    asyncio.run(_pa_first_async(ctx, calls, effect))


async def _pa_load_async(fs: FileSystem) -> Any:
    from journal.adapters.pydantic_ai import JournalConversationStore

    store = JournalConversationStore(PA_PATH, fs=fs)
    try:
        conv = await store.load(PA_CONVERSATION)
        return None if conv is None else repr([m.parts for m in conv.messages])
    finally:
        await store.close()


def _pa_load(fs: FileSystem) -> Any:
    return asyncio.run(_pa_load_async(fs))


async def _pa_second_async(fs: FileSystem) -> SecondLife:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.conversation import Conversation

    from journal.adapters.pydantic_ai import JournalConversationStore
    from journal.adapters.pydantic_ai_guard import answers, guard_for

    store = JournalConversationStore(PA_PATH, fs=fs)
    guard = guard_for(store, clock=_clock)
    ran: list[int] = []
    surfaced: list[int] = []
    try:
        agent = _pa_agent(guard, ran.append)
        conv = await store.load(PA_CONVERSATION)
        if conv is not None:
            return SecondLife(ran, surfaced, True)  # saved after the run, so it finished: nothing to resume
        # Nothing stored (the conversation is saved after a run): the app sends the request again
        # (for 3 deploys: a first life of 2 leaves the third never started, free to run).
        result = await agent.run("deploy 3", conversation=Conversation(conversation_id=PA_CONVERSATION))
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            out = result.output
            if not isinstance(out, DeferredToolRequests):
                await store.save(result)
                return SecondLife(ran, surfaced, True)
            asked = {c.tool_call_id: out.metadata[c.tool_call_id] for c in out.approvals}
            surfaced.extend(int(m["args"]["n"]) for m in asked.values())
            given = {tid: {"answer": "happened", "result": f"deployed:{m['args']['n']}"} for tid, m in asked.items()}
            result = await agent.run(conversation=result.conversation, deferred_tool_results=answers(out, given))
        return SecondLife(ran, surfaced, False)
    finally:
        guard.close()
        await store.close()


def _pa_second(fs: FileSystem) -> SecondLife:
    return asyncio.run(_pa_second_async(fs))


PYDANTIC_AI = Driver("guard-pydantic-ai", lambda: PA_CONVERSATION, _pa_first, _pa_load, _pa_second,
                     lambda args: int(args["n"]))


# ---- OpenAI Agents SDK ------------------------------------------------------------------------

OA_SESSION = "ops-crash"
OA_PATH = "/openai-agents/sessions"
OA_MODEL_CALLS_MAX = 32  # scripted model responses one life may ask for (two per deploy at most)
OA_DEPLOYS_DEFAULT = 3  # deploys asked for when the session lost the request saying how many


def _oa_agent(guard: Any, effect: Callable[[int], None], life: str) -> Any:
    from agents import Agent, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message
    from agents.testing import function_call as model_call

    from journal.adapters.openai_agents_guard import guarded_tool

    counter = iter(range(1_000_000))

    def respond(call: Any) -> Any:
        """Deploys v1..vN (N from the first request); its call ids are new in every life, as a real
        model's are, so the guard must know a call again by its tool and arguments."""
        items = list(call.input) if isinstance(call.input, list) else []
        asked = [str(i.get("content")) for i in items if isinstance(i, dict) and i.get("role") == "user"]
        total = next((int(t.split()[-1]) for t in asked if t.startswith("deploy ")), OA_DEPLOYS_DEFAULT)
        calls = {i["call_id"] for i in items if isinstance(i, dict) and i.get("type") == "function_call"}
        done = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
                   and i.get("call_id") in calls)
        if done < total:
            return [model_call("deploy", {"version": f"v{done + 1}"}, call_id=f"call_{life}_{next(counter)}")]
        return [assistant_message(f"deployed {done}")]

    def deploy(version: str) -> str:
        """Deploy a version."""
        effect(int(version[1:]))
        return f"deployed {version}"

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(OA_MODEL_CALLS_MAX)])
    return Agent(name="ops", instructions="deploy", model=model, tools=[guarded_tool(guard, function_tool(deploy))])


def _oa_run_config() -> Any:
    from agents import RunConfig

    return RunConfig(tracing_disabled=True)


async def _oa_first_async(calls: int, effect: Callable[[int], None]) -> None:
    from agents import Runner

    from journal.adapters.openai_agents import JournalSession
    from journal.adapters.openai_agents_guard import guard_for

    session = await JournalSession.open(OA_SESSION, OA_PATH)
    guard = guard_for(session, clock=_clock)
    try:
        await Runner.run(_oa_agent(guard, effect, "first"), f"deploy {calls}", session=session,
                         run_config=_oa_run_config())
    finally:
        guard.close()
        session.close()


def _oa_first(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    asyncio.run(_oa_first_async(calls, effect))


async def _oa_load_async() -> Any:
    from journal.adapters.openai_agents import JournalSession

    session = await JournalSession.open(OA_SESSION, OA_PATH)
    try:
        return await session.get_items()
    finally:
        session.close()


def _oa_load(fs: FileSystem) -> Any:
    return asyncio.run(_oa_load_async())


async def _oa_second_async() -> SecondLife:
    from agents import Runner

    from journal.adapters.openai_agents import JournalSession
    from journal.adapters.openai_agents_guard import guard_for

    session = await JournalSession.open(OA_SESSION, OA_PATH)
    guard = guard_for(session, clock=_clock)
    ran: list[int] = []
    surfaced: list[int] = []
    try:
        agent = _oa_agent(guard, ran.append, "second")
        result = await Runner.run(agent, "continue", session=session, run_config=_oa_run_config())
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            if not result.interruptions:
                return SecondLife(ran, surfaced, True)
            state = result.to_state()
            for item, u in await guard.asks(result.interruptions):
                n = int(str(u.args["version"])[1:])
                surfaced.append(n)
                await guard.answer(state, item, {"answer": "happened", "result": f"deployed v{n}"})
            result = await Runner.run(agent, state, session=session, run_config=_oa_run_config())
        return SecondLife(ran, surfaced, False)
    finally:
        guard.close()
        session.close()


def _oa_second(fs: FileSystem) -> SecondLife:
    return asyncio.run(_oa_second_async())


OPENAI_AGENTS = Driver("guard-openai-agents", lambda: OA_SESSION, _oa_first, _oa_load, _oa_second,
                       lambda args: int(str(args["version"])[1:]))


# ---- Google ADK --------------------------------------------------------------------------------

ADK_APP, ADK_USER, ADK_SESSION = "ops", "u-crash", "s-crash"
ADK_PATH = "/adk"
ADK_DEPLOYS_DEFAULT = 3  # deploys asked for when the session lost the request saying how many


@functools.cache
def _adk_model_class() -> Any:
    """A scripted ADK model (made once, on first use: ADK is optional)."""
    from collections.abc import AsyncGenerator

    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class ScriptedAdkModel(BaseLlm):
        """Calls deploy(n) for the first n of 1..N (N from the first request) its request shows
        unanswered, then says "finished". ADK sends the model no client-made call ids, so responses
        pair with the calls of the model turn before them, in order, as with Gemini."""

        model: str = "scripted"

        async def generate_content_async(self, llm_request: LlmRequest,
                                         stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            contents = list(llm_request.contents)
            texts = [p.text for c in contents if c.role == "user" for p in (c.parts or []) if p.text]
            total = next((int(t.split()[-1]) for t in texts if t.startswith("deploy ")), ADK_DEPLOYS_DEFAULT)
            done: set[int] = set()
            calls: list[Any] = []
            for c in contents:
                parts = c.parts or []
                if any(p.function_call is not None for p in parts):
                    calls = [p.function_call for p in parts if p.function_call is not None]
                    continue
                responses = [p.function_response for p in parts if p.function_response is not None]
                for fc, fr in zip(calls, responses, strict=False):
                    if fr.name == "deploy" and (fr.response or {}).get("status") != "TOOL_NOT_STARTED":
                        done.add(int((fc.args or {})["n"]))
            todo = [n for n in range(1, total + 1) if n not in done][:1]
            part = (types.Part(function_call=types.FunctionCall(name="deploy", args={"n": todo[0]})) if todo
                    else types.Part(text="finished"))
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    return ScriptedAdkModel


def _adk_runner(service: Any, guard: Any, effect: Callable[[int], None]) -> Any:
    from google.adk.agents.llm_agent import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import Runner

    from journal.adapters.adk_guard import GuardPlugin

    def deploy(n: int) -> dict[str, Any]:
        """Deploys release n."""
        effect(n)
        return {"deployed": n}

    agent = LlmAgent(name="ops", model=_adk_model_class()(), tools=[deploy])
    return Runner(app=App(name=ADK_APP, root_agent=agent, plugins=[GuardPlugin(guard)]), session_service=service)


def _adk_text(text: str) -> Any:
    from google.genai import types

    return types.Content(role="user", parts=[types.Part(text=text)])


async def _adk_send(runner: Any, message: Any) -> None:
    async for _ in runner.run_async(user_id=ADK_USER, session_id=ADK_SESSION, new_message=message):
        pass


async def _adk_first_async(calls: int, effect: Callable[[int], None]) -> None:
    from journal.adapters.adk import JournalSessionService
    from journal.adapters.adk_guard import guard_for

    service = JournalSessionService(ADK_PATH)
    guard = guard_for(service, clock=_clock)
    try:
        await service.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SESSION)
        await _adk_send(_adk_runner(service, guard, effect), _adk_text(f"deploy {calls}"))
    finally:
        guard.close()
        await service.close()


def _adk_first(ctx: Ctx, calls: int, effect: Callable[[int], None]) -> None:
    asyncio.run(_adk_first_async(calls, effect))


async def _adk_load_async() -> Any:
    from journal.adapters.adk import JournalSessionService

    service = JournalSessionService(ADK_PATH)
    try:
        session = await service.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SESSION)
        return None if session is None else [e.model_dump(mode="json") for e in session.events]
    finally:
        await service.close()


def _adk_load(fs: FileSystem) -> Any:
    return asyncio.run(_adk_load_async())


async def _adk_second_async() -> SecondLife:
    from journal.adapters.adk import JournalSessionService
    from journal.adapters.adk_guard import answer_message, guard_for, pending_unknown

    service = JournalSessionService(ADK_PATH)
    guard = guard_for(service, clock=_clock)
    ran: list[int] = []
    surfaced: list[int] = []
    try:
        runner = _adk_runner(service, guard, ran.append)
        if await service.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SESSION) is None:
            await service.create_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SESSION)
        message = _adk_text("continue")
        for _ in range(SECOND_LIFE_ROUNDS_MAX):
            await _adk_send(runner, message)
            session = await service.get_session(app_name=ADK_APP, user_id=ADK_USER, session_id=ADK_SESSION)
            assert session is not None
            pending = pending_unknown(session)
            if not pending:
                texts = [p.text for e in session.events if e.content for p in (e.content.parts or []) if p.text]
                return SecondLife(ran, surfaced, texts[-1:] == ["finished"])
            n = int(pending[0]["args"]["n"])
            surfaced.append(n)
            message = answer_message(pending[0]["confirmationCallId"],
                                     {"answer": "happened", "result": {"deployed": n}})
        return SecondLife(ran, surfaced, False)
    finally:
        guard.close()
        await service.close()


def _adk_second(fs: FileSystem) -> SecondLife:
    return asyncio.run(_adk_second_async())


def _adk_scope() -> str:
    from journal.adapters.adk_guard import scope_id

    return scope_id(ADK_APP, ADK_USER, ADK_SESSION)


ADK = Driver("guard-adk", _adk_scope, _adk_first, _adk_load, _adk_second,
             lambda args: int(args["n"]))


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
        return False


# Each driver and the module its framework needs.
DRIVERS: tuple[tuple[Driver, str], ...] = (
    (LANGGRAPH, "langgraph"), (OPENAI_AGENTS, "agents"), (ADK, "google.adk"), (PYDANTIC_AI, "pydantic_ai"),
)
NAMES: tuple[str, ...] = tuple(d.name for d, _ in DRIVERS)


def available() -> tuple[str, ...]:
    """The workloads whose framework is installed."""
    return tuple(d.name for d, module in DRIVERS if _importable(module))


def register() -> tuple[str, ...]:
    """Register the workloads whose framework is installed (again: a no-op); their names."""
    names = available()
    for d, _ in DRIVERS:
        if d.name in names and d.name not in WORKLOADS:
            _workload(d)
    return names
