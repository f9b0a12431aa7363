"""Crash-safe LangGraph nodes and tasks: ``@guarded(guard)`` (docs/ADAPTERS.md, "Crash-safe tools").

    from journal.adapters.langgraph import JournalSaver
    from journal.adapters.langgraph_guard import guard_for, guarded

    saver = JournalSaver("checkpoints")
    guard = guard_for(saver)                         # its journals live in the saver's store

    @guarded(guard, side_effect="external-write")
    def deploy(state: State) -> State:               # a node, or a @task function
        ...

LangGraph runs a node again from its start after a crash (from the last checkpoint); with the
guard, the node's intent is synced before its body runs (journal/session/toolguard.py), its
return value is recorded after, and a re-execution:

* returns the recorded value without running the body, when the body had returned;
* runs the body, when it never started (no durable intent);
* otherwise (it started and has no result: the outcome is unknown) calls LangGraph's
  ``interrupt()`` with the call's tool, arguments, the resume gate's reasons and the three
  answers; ``graph.invoke(Command(resume=...), config)`` continues with one of
  ``{"answer": "happened", "result": <what the node would have returned>}``, ``"run_again"``
  or ``"abandon"`` (the node then returns ``on_abandon``, None by default: no state update).
  The answer is persisted before it is acted on: asked once, answered once.

Durability. Run a guarded graph with ``durability="sync"``: a task's id derives from the
checkpoint it runs from, and with "async" or "exit" that checkpoint may not be saved when the
task runs, so after a crash the task would come back under another id (a guarded function
refuses to run otherwise, with ``GuardNeedsSyncDurabilityError``).

Keys. The scope is the thread id; the call id is the task's checkpoint namespace (node name and
task id, which LangGraph derives deterministically from the checkpoint and the node, and which
covers subgraphs) plus the function's name, and a counter when one task calls the same guarded
function more than once. A guarded function called outside a graph run raises.

Values. A return value that is JSON is stored as such (readable in ``journal cat``); any other is
stored with the saver's serde (``dumps_typed``), base64, and read back with it (a JournalSaver's
serde decodes only the types it allows: see "What each adapter decodes"). A guarded body should call
``interrupt()`` itself only before its side effect: an interrupt raised from inside the body
records the attempt as failed, and the body runs again on resume.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import inspect
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar, cast

from journal.errors import MissingExtraError

try:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.config import get_config
    from langgraph.errors import GraphBubbleUp
    from langgraph.types import interrupt
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "LangGraph 1.1 and langgraph-checkpoint 4.3 or later", "langgraph", exc) from exc

from journal.adapters.langgraph import JournalSaver
from journal.session.gate import GateDecision
from journal.session.toolguard import (
    ATTEMPT_SEP,
    CALL_ID_BYTES_MAX,
    Answer,
    Decision,
    GuardScope,
    ToolGuard,
    ToolGuardError,
    UnknownCall,
    Verdict,
    has_lone_surrogate,
)


class GuardNeedsSyncDurabilityError(ToolGuardError):
    def __init__(self, tool: str, durability: object) -> None:
        super().__init__(
            f"guarded {tool} runs with durability={durability!r}: the checkpoint a task's id derives from may not be "
            "saved yet when the task runs, so after a crash the task comes back under another id and the guard could "
            "not recognise it. Run the graph with durability=\"sync\" (graph.invoke(..., durability=\"sync\"))"
        )

F = TypeVar("F", bound=Callable[..., Any])

_SCRATCHPAD_KEY = "__pregel_scratchpad"  # langgraph._internal._constants.CONFIG_KEY_SCRATCHPAD
_DURABILITY_KEY = "__pregel_durability"  # langgraph._internal._constants.CONFIG_KEY_DURABILITY
_EXECUTIONS_MAX = 4096  # task executions whose call counters are remembered at once
_SERDE_KEY = "$serde"
_SERDES: weakref.WeakKeyDictionary[ToolGuard, SerializerProtocol] = weakref.WeakKeyDictionary()


def guard_for(saver: BaseCheckpointSaver[Any], **options: Any) -> ToolGuard:
    """A guard whose journals live in ``saver``'s store (a JournalSaver: files, PostgreSQL or JetStream),
    beside its threads' journals under names no thread's journal can have."""
    if not isinstance(saver, JournalSaver):
        raise TypeError(f"guard_for needs a journal.adapters.langgraph.JournalSaver, not {type(saver).__name__}: "
                        "give other savers a ToolGuard(journal.store(path)) of its own")
    guard = ToolGuard(saver.store, **options)
    _SERDES[guard] = saver.serde  # its values decode as strictly as the saver's own
    return guard


class _Codec:
    def __init__(self, serde: SerializerProtocol | None) -> None:
        self.serde: SerializerProtocol = serde or JsonPlusSerializer()

    def encode(self, value: Any) -> Any:
        try:
            if json.loads(json.dumps(value)) == value:
                return value
        except (TypeError, ValueError):
            pass
        kind, data = self.serde.dumps_typed(value)
        return {_SERDE_KEY: kind, "b64": base64.b64encode(data).decode("ascii")}

    def decode(self, stored: Any) -> Any:
        if isinstance(stored, dict) and set(stored) == {_SERDE_KEY, "b64"}:
            return self.serde.loads_typed((stored[_SERDE_KEY], base64.b64decode(stored["b64"])))
        return stored


class _Counters:
    """Per task execution, how often each guarded function was entered (LangGraph makes a new
    scratchpad for every execution of a task, so a re-execution counts from the start again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[int, tuple[object, dict[str, int]]] = OrderedDict()

    def next(self, scratchpad: object, name: str) -> int:
        with self._lock:
            entry = self._seen.get(id(scratchpad))
            if entry is None or entry[0] is not scratchpad:
                entry = (scratchpad, {})  # the scratchpad is held, so its id is not reused meanwhile
                self._seen[id(scratchpad)] = entry
                while len(self._seen) > _EXECUTIONS_MAX:
                    self._seen.popitem(last=False)
            n = entry[1].get(name, 0) + 1
            entry[1][name] = n
            return n


def _call_id(ns: str, name: str, n: int) -> str:
    call_id = f"{ns}/{name}" + (f"#{n}" if n > 1 else "")
    if (len(call_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX or ATTEMPT_SEP in call_id
            or has_lone_surrogate(call_id)):
        call_id = "h" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return call_id


def _resume_answer(value: object) -> Answer:
    return Answer.parse(value)


def guarded(
    guard: ToolGuard,
    *,
    side_effect: str = "external-write",
    idempotency: str = "unsafe",
    name: str | None = None,
    on_abandon: Any = None,
    serde: SerializerProtocol | None = None,
) -> Callable[[F], F]:
    """Guard a LangGraph node or ``@task`` function (plain or async): intent synced before it runs, result after,
    and an unknown outcome asked through ``interrupt()`` on resume, never run again on its own."""
    codec = _Codec(serde or _SERDES.get(guard))
    counters = _Counters()

    def wrap(fn: F) -> F:
        tool: str = name or str(getattr(fn, "__name__", "tool"))

        def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[GuardScope, str, Decision]:
            """The call's scope, id and what to do (it may ask through interrupt())."""
            try:
                conf = get_config().get("configurable", {})
            except RuntimeError as exc:
                raise RuntimeError(f"guarded {tool} ran outside a LangGraph run: a guarded function is a node or a "
                                   "task (its call id comes from the run's thread and task)") from exc
            thread_id = conf.get("thread_id")
            if thread_id is None:
                raise ValueError(f"guarded {tool} needs a thread_id in the run's config (a checkpointer run)")
            durability = conf.get(_DURABILITY_KEY, "async")
            if durability != "sync":
                raise GuardNeedsSyncDurabilityError(tool, durability)
            scope = guard.scope(str(thread_id))
            n = counters.next(conf.get(_SCRATCHPAD_KEY), tool)
            call_id = _call_id(str(conf.get("checkpoint_ns", "")), tool, n)
            shown = {"args": list(args), "kwargs": kwargs} if kwargs else (args[0] if len(args) == 1 else list(args))
            d = scope.before(call_id, tool, shown, side_effect=side_effect, idempotency=idempotency)
            if d.verdict is Verdict.UNKNOWN and d.unknown is not None:
                scope.answer(call_id, _answer(d.unknown, codec))
                d = scope.before(call_id, tool, shown, side_effect=side_effect, idempotency=idempotency)
            return scope, call_id, d

        def settled(d: Decision) -> Any:
            return codec.decode(d.result) if d.verdict is Verdict.DONE else on_abandon

        if inspect.iscoroutinefunction(fn):
            # An async node or task: called as a plain function it would return its coroutine unrun, and
            # the guard would record that as its result. The journal's work runs off the event loop
            # (the thread gets the run's context, which get_config and interrupt read).

            @functools.wraps(fn)
            async def arun(*args: Any, **kwargs: Any) -> Any:
                scope, call_id, d = await asyncio.to_thread(prepare, args, kwargs)
                if d.verdict in (Verdict.DONE, Verdict.ABANDONED):
                    return settled(d)
                try:
                    out = await fn(*args, **kwargs)
                except (Exception, GraphBubbleUp) as exc:
                    await asyncio.to_thread(scope.after, call_id, error=exc)
                    raise
                await asyncio.to_thread(scope.after, call_id, codec.encode(out))
                return out

            return cast(F, arun)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            scope, call_id, d = prepare(args, kwargs)
            if d.verdict in (Verdict.DONE, Verdict.ABANDONED):
                return settled(d)
            try:
                out = fn(*args, **kwargs)
            except (Exception, GraphBubbleUp) as exc:
                scope.after(call_id, error=exc)
                raise
            scope.after(call_id, codec.encode(out))
            return out

        return cast(F, run)

    return wrap


def _answer(unknown: UnknownCall, codec: _Codec) -> Answer:
    """Ask through LangGraph (the first time this raises GraphInterrupt), then the answer given."""
    given = _resume_answer(interrupt(unknown.to_payload()))
    if given.answer == "happened":
        return Answer(given.answer, codec.encode(given.result))
    return given


def thread_gate(guard: ToolGuard, thread_id: str) -> GateDecision:
    """The resume gate of a thread's guarded calls (its verdict, reasons and options)."""
    return guard.scope(thread_id).gate()


__all__ = ["GuardNeedsSyncDurabilityError", "guard_for", "guarded", "thread_gate"]
