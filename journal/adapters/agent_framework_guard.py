"""Crash-safe tools for Microsoft Agent Framework agents: ``guard_for(history).middleware()``
(docs/ADAPTERS.md, "Crash-safe tools").

    from journal.adapters.agent_framework import JournalHistoryProvider
    from journal.adapters.agent_framework_guard import ToolOutcomeUnknownError, guard_for

    history = JournalHistoryProvider("store/")
    guard = guard_for(history, side_effects={"lookup": "read"})   # every other tool: external-write
    agent = Agent(client=..., tools=[deploy, lookup], context_providers=[history],
                  middleware=guard.middleware())
    try:
        await agent.run("ship v2", session=session)
    except ToolOutcomeUnknownError as err:        # a crash left a call started with no result
        show err.unknown.to_payload() (tool, args, reasons, the three answers), then
        guard.answer(session.session_id, err.unknown.call_id, "abandon" | "run_again" | happened(r))
        and run the agent again

A function middleware, so it decides before the tool runs: the intent (tool, arguments and
their digest, the framework's call id) is synced to the guard's journal (journal/session/
toolguard.py, one scope per agent session, beside the history in the same store), then the tool
runs, then its result is recorded.

Why calls are matched by tool and arguments. The framework hands a run's messages to the
history provider at the run's end, so after a crash the history has never heard of the call
that was running, and the model asked again issues the call anew, under a NEW call id. A new
call is therefore matched to an earlier call of the session by tool name and the digest of its
arguments: an earlier call requested by another process whose result the history does not hold
(under its own id, or under the id of a call that stood for it), oldest first:

* its result is recorded (it ran; the process died before the run's end): the new call gets that
  result, and the tool does not run again;
* it started and has no result (a crash during it: its outcome is unknown): the tool does not
  run; the run stops with ``ToolOutcomeUnknownError`` (a ``MiddlewareFailure``: the framework
  never turns it into a tool result, cancels the batch and raises it to the caller of
  ``Agent.run``). It carries the ``UnknownCall``. The answer is synced
  (``guard.answer``) and the next run acts on it: ``run_again`` runs the tool once more, as a
  new attempt of the earlier call; ``abandon`` gives the model a message saying it was not run;
  ``happened(result)`` gives the model ``result``;
* no match: the call runs under its own id.

When a new call has stood for an earlier one, it is recorded as a call of its own, with the
result the model got, under a tool name that holds the earlier call's id (``STAND_IN``): once the
history holds that result, the earlier call is settled. A call id the guard holds for another
tool or other arguments (a provider reusing ids) is refused with ``CallIdReusedError``.

Values. A tool's result is recorded as its contents' JSON (``Content.to_dict()``) and given back
as contents. Tools declared free of side effects ("none", "read", "pure") or idempotent
(``idempotency={"name": "safe"}``) write nothing and run again on their own.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from journal.errors import MissingExtraError

try:
    from agent_framework import (
        AgentContext,
        AgentMiddleware,
        Content,
        FunctionInvocationContext,
        FunctionMiddleware,
        HistoryProvider,
    )
    from agent_framework._middleware import MiddlewareFailure
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "Agent Framework 1.26 or later (agent-framework-core)", "agent-framework",
                            exc) from exc

from journal.api import Store
from journal.session.closers import TOOL_OUTCOME_UNKNOWN
from journal.session.gate import GateDecision
from journal.session.state import SIDE_EFFECT_FREE, ToolCall
from journal.session.toolguard import (
    ATTEMPT_SEP,
    CALL_ID_BYTES_MAX,
    Answer,
    GuardScope,
    ToolGuard,
    ToolGuardError,
    UnknownCall,
    Verdict,
    args_digest,
    has_lone_surrogate,
)

STAND_IN: Final = "$stands-for:"  # the tool name a stand-in is recorded under, + the earlier call's id
NO_SESSION_SCOPE: Final = "$no-session"  # the scope of calls made outside any agent session
ABANDONED_MESSAGE: Final = ("{tool} was not run: an earlier identical call may have run before a crash, and the app "
                            "chose to abandon it")


class ToolOutcomeUnknownError(MiddlewareFailure):
    """A call stands for an earlier one whose outcome is unknown and unanswered: the tool was not run.

    Raised out of ``Agent.run``. ``unknown`` is what to show (``.to_payload()``); answer with
    ``guard.answer(session_id, unknown.call_id, ...)`` and run the agent again."""

    def __init__(self, session_id: str, unknown: UnknownCall, framework_call_id: str) -> None:
        super().__init__(
            f"tool call {framework_call_id} ({unknown.tool}) stands for call {unknown.call_id} of session "
            f"{session_id}, which started before a crash and has no result: its outcome is unknown, and the tool was "
            "not run. Show err.unknown.to_payload() to a person, record the answer with guard.answer(session_id, "
            "err.unknown.call_id, 'run_again' | 'abandon' | happened(result)) and run the agent again")
        self.session_id = session_id
        self.unknown = unknown
        self.framework_call_id = framework_call_id


class CallIdReusedError(ToolGuardError):
    """A framework call id the guard holds for one call came again with another tool or other arguments."""

    def __init__(self, call_id: str, recorded_tool: str | None, tool: str) -> None:
        super().__init__(f"tool call id {call_id} is already the id of another call in this session ({recorded_tool} "
                         f"with other arguments); this call ({tool}) was not run and is not given that call's "
                         "recorded result. The model or provider reuses call ids: use one that gives each call a "
                         "unique id")


def _guard_id(framework_call_id: str) -> str:
    """The guard's call id for the framework's (at most CALL_ID_BYTES_MAX bytes, no "~")."""
    if not framework_call_id or ATTEMPT_SEP in framework_call_id or has_lone_surrogate(framework_call_id) \
            or len(framework_call_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX:
        return "h" + args_digest(framework_call_id)
    return framework_call_id


def _done(tc: ToolCall) -> bool:
    return tc.has_result and not tc.result_synthetic and tc.status == "ok"


def _unknown(tc: ToolCall) -> bool:
    return tc.status == TOOL_OUTCOME_UNKNOWN or (not tc.has_result and tc.started_seq is not None)


def _recordable(result: Any) -> Any:
    """A tool's result as JSON: its contents' dicts, else the value when it is JSON, else its str()."""
    if isinstance(result, list) and all(isinstance(c, Content) for c in result):
        return {"contents": [c.to_dict() for c in result]}
    try:
        if json.loads(json.dumps(result)) == result:
            return {"value": result}
    except (TypeError, ValueError):
        pass
    return {"value": str(result)}


def _given_back(recorded: Any) -> Any:
    """What the model gets for a recorded result (contents again when contents were recorded)."""
    if isinstance(recorded, dict) and isinstance(recorded.get("contents"), list):
        return [Content.from_dict(c) for c in recorded["contents"] if isinstance(c, dict)]
    if isinstance(recorded, dict) and "value" in recorded:
        return recorded["value"]
    return recorded  # an answer's happened(result): the app's value as given


@dataclass(frozen=True)
class _Earlier:
    call_id: str
    last: ToolCall


class AgentGuard:
    """The tool guard of an agent's sessions: one ``ToolGuard`` scope per session id. Thread-safe."""

    def __init__(self, guard: ToolGuard, history: HistoryProvider | None, *,
                 side_effects: Mapping[str, str] | None = None, idempotency: Mapping[str, str] | None = None) -> None:
        self.guard = guard
        self.history = history
        self.side_effects = dict(side_effects or {})
        self.idempotency = dict(idempotency or {})
        self._lock = threading.RLock()
        self._mine: set[tuple[str, str]] = set()  # (scope, guard call id) first requested by this process
        self._claimed: set[tuple[str, str]] = set()  # (scope, earlier call id) a call of this process stood for

    def middleware(self) -> list[AgentMiddleware | FunctionMiddleware]:
        """What goes in ``Agent(middleware=...)``: the function middleware that guards every tool call,
        and an agent middleware that starts each run afresh (see ``begin_run``)."""
        return [RunMiddleware(self), GuardMiddleware(self)]

    def begin_run(self, session_id: str) -> None:
        """Forget which calls of the session this process ran or matched in earlier runs.

        Within one run, a call this process ran, or an earlier call another call stood for, is never
        matched again (two identical calls in one run are two calls). A run that ended without its
        messages reaching the history (``ToolOutcomeUnknownError``, or any other failure) is, for the
        history, a crash: the model asked again issues those calls anew, and they must find what was
        recorded for them, exactly as after a crash, so each run starts with nothing held."""
        with self._lock:
            self._mine = {k for k in self._mine if k[0] != session_id}
            self._claimed = {k for k in self._claimed if k[0] != session_id}

    def scope(self, session_id: str) -> GuardScope:
        return self.guard.scope(session_id)

    # --- what the app sees and answers ------------------------------------------------------

    def unknown(self, session_id: str) -> list[UnknownCall]:
        """The session's calls whose outcome is unknown and unanswered (stand-ins left out: they ran nothing)."""
        return [u for u in self.scope(session_id).unknown() if not (u.tool or "").startswith(STAND_IN)]

    def answer(self, session_id: str, call_id: str, answer: Answer | str | Mapping[str, Any]) -> None:
        """Record (synced) the answer to an unknown call; the next run acts on it."""
        self.scope(session_id).answer(call_id, answer)

    def gate(self, session_id: str) -> GateDecision:
        return self.scope(session_id).gate()

    def close(self) -> None:
        self.guard.close()

    # --- deciding ------------------------------------------------------------------------------

    async def _delivered(self, session_id: str, state: Any) -> set[str]:
        """The framework call ids whose result the session's history holds."""
        if self.history is None:
            return set()
        messages = await self.history.get_messages(session_id, state=state)
        return {_guard_id(str(c.call_id)) for m in messages for c in m.contents
                if c.type == "function_result" and c.call_id is not None}

    def _candidates(self, scope_id: str, tool: str, digest: str) -> list[tuple[str, ToolCall]]:
        """First attempts of (tool, digest) requested by another process, oldest first. Under self._lock."""
        scope = self.scope(scope_id)
        out = []
        for attempt, tc in scope.state.tools.items():
            if ATTEMPT_SEP in attempt or tc.tool != tool or (scope_id, attempt) in self._mine:
                continue
            if scope.digest_of(attempt) == digest:
                out.append((tc.request_seq, attempt, tc))
        return [(a, tc) for _, a, tc in sorted(out)]

    def _any_earlier(self, scope_id: str, tool: str, digest: str) -> bool:
        with self._lock:
            return bool(self._candidates(scope_id, tool, digest))

    def _settled(self, scope_id: str, delivered: set[str]) -> set[str]:
        """Earlier call ids a delivered stand-in stood for. Under self._lock."""
        out = set()
        for attempt, tc in self.scope(scope_id).state.tools.items():
            if (tc.tool or "").startswith(STAND_IN) and attempt.split(ATTEMPT_SEP)[0] in delivered:
                out.add((tc.tool or "")[len(STAND_IN):])
        return out

    def _match(self, scope_id: str, tool: str, digest: str, delivered: set[str]) -> _Earlier | None:
        with self._lock:
            settled = self._settled(scope_id, delivered)
            tools = self.scope(scope_id).state.tools
            for call_id, _ in self._candidates(scope_id, tool, digest):
                if call_id in delivered or call_id in settled or (scope_id, call_id) in self._claimed:
                    continue
                attempts = [tc for a, tc in tools.items() if a == call_id or a.startswith(call_id + ATTEMPT_SEP)]
                last = max(attempts, key=lambda tc: tc.request_seq)
                if _done(last) or _unknown(last):  # a failed call is retried by an identical one: it runs
                    self._claimed.add((scope_id, call_id))
                    return _Earlier(call_id, last)
            return None

    def _refuse_reuse(self, scope_id: str, guard_id: str, fw_id: str, tool: str, digest: str) -> bool:
        """Whether the guard holds ``guard_id``; CallIdReusedError when for another tool or arguments."""
        with self._lock:
            scope = self.scope(scope_id)
            recorded = scope.state.tools.get(guard_id)
            if recorded is None:
                return False
            if recorded.tool != tool or scope.digest_of(guard_id) != digest:
                raise CallIdReusedError(fw_id, recorded.tool, tool)
            return True

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        tool = context.function.name
        side_effect = self.side_effects.get(tool, "external-write")
        idempotency = self.idempotency.get(tool, "unsafe")
        if side_effect in SIDE_EFFECT_FREE or idempotency == "safe":
            await call_next()
            return
        arguments = context.arguments
        args = arguments.model_dump(mode="json") if hasattr(arguments, "model_dump") else dict(arguments)
        digest = args_digest(args)
        session = context.session
        scope_id = session.session_id if session is not None else NO_SESSION_SCOPE
        fw_id = str(context.metadata.get("call_id") or "")
        guard_id = _guard_id(fw_id)
        earlier: _Earlier | None = None
        # Opening a scope reads (and repairs) its journal: never on the event loop.
        if not await asyncio.to_thread(self._refuse_reuse, scope_id, guard_id, fw_id, tool, digest):
            # The common case (no earlier process asked for this call) reads no history.
            if await asyncio.to_thread(self._any_earlier, scope_id, tool, digest):
                # The provider's own slice of the session state, as the agent hands it to the provider.
                state = session.state.get(self.history.source_id) if session is not None and self.history else None
                delivered = await self._delivered(scope_id, state if isinstance(state, dict) else None)
                earlier = await asyncio.to_thread(self._match, scope_id, tool, digest, delivered)
        call_id = earlier.call_id if earlier is not None else guard_id

        def decide() -> tuple[Verdict, Any, UnknownCall | None]:
            with self._lock:
                d = self.scope(scope_id).before(call_id, tool, args, side_effect=side_effect, idempotency=idempotency)
                if d.run and earlier is None:
                    self._mine.add((scope_id, call_id))
                return d.verdict, d.result, d.unknown

        verdict, recorded, unknown = await asyncio.to_thread(decide)
        if verdict is Verdict.UNKNOWN:
            with self._lock:
                self._claimed.discard((scope_id, call_id))
            raise ToolOutcomeUnknownError(scope_id, _present(unknown), fw_id)
        if verdict is Verdict.DONE:
            context.result = _given_back(recorded)
        elif verdict is Verdict.ABANDONED:
            context.result = ABANDONED_MESSAGE.format(tool=tool)
        else:
            # A cancelled tool may have done anything: nothing is recorded, so it stays started and the next
            # process asks, where a failure would let the same call run again.
            try:
                await call_next()
            except Exception as exc:
                await asyncio.to_thread(self.scope(scope_id).after, call_id, error=exc)
                raise
            await asyncio.to_thread(self.scope(scope_id).after, call_id, _recordable(context.result))
        if earlier is not None and guard_id != call_id:
            await asyncio.to_thread(self._record_stand_in, scope_id, guard_id, earlier.call_id, args,
                                    _recordable(context.result))

    def _record_stand_in(self, scope_id: str, guard_id: str, earlier_id: str, args: Any, result: Any) -> None:
        """Record the call that stood for ``earlier_id`` with what the model got: once the history holds
        its result, the earlier call is settled. It ran no tool, so an unknown stand-in is never asked about."""
        with self._lock:
            scope = self.scope(scope_id)
            d = scope.before(guard_id, STAND_IN + earlier_id, args)
            if d.run:
                scope.after(guard_id, result)


def _present(unknown: UnknownCall | None) -> UnknownCall:
    if unknown is None:  # pragma: no cover - the core's UNKNOWN decision always carries it
        raise ToolGuardError("an unknown verdict without its call")
    return unknown


class RunMiddleware(AgentMiddleware):
    """The agent middleware that tells the guard a run of a session begins."""

    def __init__(self, guard: AgentGuard) -> None:
        self.guard = guard

    async def process(self, context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        session = context.session
        self.guard.begin_run(session.session_id if session is not None else NO_SESSION_SCOPE)
        await call_next()


class GuardMiddleware(FunctionMiddleware):
    """The framework's function middleware that runs the guard around every tool call."""

    def __init__(self, guard: AgentGuard) -> None:
        self.guard = guard

    async def process(self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]) -> None:
        await self.guard.process(context, call_next)


def guard_for(history: HistoryProvider, *, store: Store | None = None, side_effects: Mapping[str, str] | None = None,
              idempotency: Mapping[str, str] | None = None, **options: Any) -> AgentGuard:
    """The guard of an agent whose history ``history`` keeps: its journals live in the history's
    store (a ``JournalHistoryProvider``'s: files, PostgreSQL or JetStream) under names no history
    journal has, or in ``store`` for another provider. ``options`` go to ``ToolGuard``."""
    if store is None:
        store = getattr(history, "store", None)
        if store is None:
            raise TypeError(f"guard_for needs store= for a {type(history).__name__}: give it journal.store(path)")
    return AgentGuard(ToolGuard(store, **options), history, side_effects=side_effects, idempotency=idempotency)


__all__ = [
    "ABANDONED_MESSAGE",
    "STAND_IN",
    "AgentGuard",
    "CallIdReusedError",
    "GuardMiddleware",
    "RunMiddleware",
    "ToolOutcomeUnknownError",
    "guard_for",
]
