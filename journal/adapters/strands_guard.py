"""Crash-safe Strands tools: ``GuardHooks`` (docs/ADAPTERS.md, "Crash-safe tools").

    from strands import Agent
    from journal.adapters.strands import JournalSessionManager
    from journal.adapters.strands_guard import guard_for

    manager = JournalSessionManager("user-42", "sessions/")
    guard = guard_for(manager)                   # its journals live in the manager's store
    agent = Agent(agent_id="ops", tools=[deploy], session_manager=manager, hooks=[guard])

Strands stores the model's assistant message (its ``toolUse`` blocks) before it runs the tools,
and their results only after, so a crash while a tool runs leaves that call in the session with
no result. With the hooks, a side-effecting tool's intent (tool, input and their digest, the
``toolUseId``) is synced (journal/session/toolguard.py) in Strands' ``BeforeToolCallEvent``,
before the tool starts, and its result in ``AfterToolCallEvent`` (a tool that raised is recorded
as failed, so the same call may run again). Then, for a call Strands runs again under the same
``toolUseId`` (a resumed ``agent()`` with no new prompt runs the pending ``toolUse`` of the last
message: how to resume after a crash):

* a call that returned is never run again: the hook puts a tool that hands back the recorded
  result in place of the real one (``selected_tool``);
* a call that never started (no durable intent) runs;
* a call that started and has no result (its outcome is unknown) is never run again on its own:
  the hook raises Strands' interrupt (``event.interrupt``), named ``journal.tool_outcome_unknown:``
  + the attempt's id, whose ``reason`` is the guard's payload (tool, input, the resume gate's
  reasons, the three answers). The agent stops with ``stop_reason == "interrupt"`` and the
  interrupt in ``result.interrupts``; the app answers as Strands expects,
  ``agent([{"interruptResponse": {"interruptId": i.id, "response": answer}}])`` with ``answer``
  ``{"answer": "happened", "result": ...}``, ``"run_again"`` or ``"abandon"``. The hook persists
  the answer (``scope.answer``) before acting on it: the given result becomes the call's result,
  the tool runs once more (a new attempt; if it dies too, the next resume asks about that attempt
  under a new name, so an old answer runs nothing), or the tool is cancelled with a result saying
  it was abandoned. If the process dies while an answered call runs once more, Strands restores
  the agent still inside its interrupt (it then takes only interrupt responses): send the same
  response again; it answered the earlier attempt, so nothing runs and the guard asks anew.

A new prompt instead of a resume. Strands answers the pending ``toolUse`` itself with a generic
"Tool was interrupted." result before any hook runs; the model, told only that, may ask for the
same tool again under a new id. So while a call of the session's agent is unknown and not
answered, an invocation with a new prompt is cancelled (``BeforeInvocationEvent.cancel``): the
agent answers with a text naming the calls and how to answer them (``answer(agent, tool_use_id,
answer)``, synced), and nothing runs until they are answered.

Keys. The scope is the Strands session and agent (``scope_id``); the call id is the
``toolUseId``, hashed when the guard cannot hold it as it is. A ``toolUseId`` that comes again
with another tool or other input (a provider reusing ids) is refused with ``CallIdReusedError``
(the invocation fails; the call neither runs nor gets the earlier call's result).

Which tools are guarded: all, as ``external-write`` and ``unsafe``, unless declared otherwise with
``side_effects={"lookup": "read"}`` (none, read and pure skip the guard) or
``idempotent={"set_flag"}`` (they skip it too and run again on their own). A cancelled tool
(``agent.cancel()``) stays started: it may have done anything, so the next process asks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Collection, Mapping
from typing import Any, Final

from journal.errors import MissingExtraError

try:
    from strands.hooks import (
        AfterToolCallEvent,
        BeforeInvocationEvent,
        BeforeToolCallEvent,
        HookProvider,
        HookRegistry,
    )
    from strands.tools._tool_helpers import generate_missing_tool_result_content
    from strands.tools.tools import PythonAgentTool
    from strands.types.tools import ToolResult, ToolSpec, ToolUse
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "Strands Agents 1.62 or later (strands-agents)", "strands", exc) from exc

from journal.adapters.strands import JournalSessionRepository
from journal.session.closers import TOOL_OUTCOME_UNKNOWN
from journal.session.gate import GateDecision
from journal.session.state import SIDE_EFFECT_FREE
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
    journal_name,
)

INTERRUPT_PREFIX: Final = "journal.tool_outcome_unknown:"


class CallIdReusedError(ToolGuardError):
    """A toolUseId the guard holds for one call came again with another tool or other input."""

    def __init__(self, tool_use_id: str, recorded_tool: str | None, tool: str) -> None:
        super().__init__(
            f"toolUseId {tool_use_id} is already the id of another call of this agent ({recorded_tool} with other "
            f"input); this call ({tool}) was not run and is not given that call's recorded result. The model "
            "provider reuses tool-use ids: use one that gives each call a unique id")


class NotUnknownCallError(ToolGuardError):
    def __init__(self, tool_use_id: str) -> None:
        super().__init__(f"tool call {tool_use_id} has no unknown outcome to answer: answer only a call that "
                         "GuardHooks.unknown(agent) lists")


def scope_id(session_id: str, agent_id: str) -> str:
    """The guard scope of one agent of a Strands session (JSON, so no two pairs run together)."""
    return json.dumps(["strands", session_id, agent_id], ensure_ascii=False, separators=(",", ":"))


def guard_call_id(tool_use_id: str) -> str:
    """The guard's call id for a toolUseId: the id itself when the guard can hold it."""
    if (not tool_use_id or len(tool_use_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX
            or ATTEMPT_SEP in tool_use_id or has_lone_surrogate(tool_use_id)):
        return "h" + hashlib.sha256(tool_use_id.encode("utf-8", "surrogatepass")).hexdigest()
    return tool_use_id


def _unknown_text(u: UnknownCall) -> str:
    return (f"{TOOL_OUTCOME_UNKNOWN}: the process stopped while {u.tool} ran, so it may or may not have changed the "
            "world. It is not run again on its own: answer whether it happened (and its result), to run it again, "
            "or to abandon it.")


def _recorded_tool(name: str, spec: Any, result: Any, tool_use_id: str) -> PythonAgentTool:
    """A tool that hands back a recorded result under the current toolUseId, running nothing."""
    given: ToolResult
    if isinstance(result, Mapping) and isinstance(result.get("content"), list) and "status" in result:
        given = {"toolUseId": tool_use_id, "status": result["status"], "content": list(result["content"])}
    else:  # an answer's result in the app's own form
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, sort_keys=True)
        given = {"toolUseId": tool_use_id, "status": "success", "content": [{"text": text}]}

    def replay(tool_use: ToolUse, **_: Any) -> ToolResult:
        return given

    tool_spec: ToolSpec = spec if spec is not None else {"name": name, "description": name,
                                                          "inputSchema": {"json": {}}}
    return PythonAgentTool(name, tool_spec, replay)


class GuardHooks(HookProvider):
    """Strands hooks of the crash-safe tool guard (the module doc says what they do).

    ``session_id`` names the Strands session the guarded agents run in (``guard_for`` takes it
    from the session manager); each agent of it is a scope of its own, by its ``agent_id``."""

    def __init__(self, guard: ToolGuard, session_id: str, *, side_effect: str = "external-write",
                 idempotency: str = "unsafe", side_effects: Mapping[str, str] | None = None,
                 idempotent: Collection[str] = (), pause_while_unknown: bool = True) -> None:
        self.guard = guard
        self.session_id = session_id
        self.side_effect = side_effect
        self.idempotency = idempotency
        self.side_effects = dict(side_effects or {})
        self.idempotent = frozenset(idempotent)
        self.pause_while_unknown = pause_while_unknown
        self._lock = threading.Lock()
        # toolUseId -> (scope, guard call id) of the calls let run and not yet finished
        self._running: dict[str, tuple[GuardScope, str]] = {}

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
        registry.add_callback(AfterToolCallEvent, self._after_tool)
        registry.add_callback(BeforeInvocationEvent, self._before_invocation)

    # --- declarations -----------------------------------------------------------------------

    def declared(self, tool_name: str) -> tuple[str, str]:
        """(sideEffect, idempotency) of a tool."""
        return (self.side_effects.get(tool_name, self.side_effect),
                "safe" if tool_name in self.idempotent else self.idempotency)

    def guards(self, tool_name: str) -> bool:
        side_effect, idempotency = self.declared(tool_name)
        return side_effect not in SIDE_EFFECT_FREE and idempotency != "safe"

    def scope(self, agent: Any) -> GuardScope:
        """The guard scope of ``agent`` (opened, and repaired, on first use)."""
        agent_id = getattr(agent, "agent_id", None)
        if not isinstance(agent_id, str):
            raise TypeError(f"a guarded agent needs a str agent_id, not {agent_id!r}")
        return self.guard.scope(scope_id(self.session_id, agent_id))

    # --- the tool's side --------------------------------------------------------------------

    async def _before_tool(self, event: BeforeToolCallEvent) -> None:
        use = event.tool_use
        name = str(use.get("name"))
        if not self.guards(name):
            return
        tool_use_id = str(use.get("toolUseId"))
        call_id = guard_call_id(tool_use_id)
        args = use.get("input")
        side_effect, idempotency = self.declared(name)
        scope = await asyncio.to_thread(self.scope, event.agent)
        await asyncio.to_thread(self._refuse_reuse, scope, call_id, tool_use_id, name, args)
        d = await asyncio.to_thread(scope.before, call_id, name, args, side_effect=side_effect,
                                    idempotency=idempotency)
        if d.verdict is Verdict.UNKNOWN and d.unknown is not None:
            # Strands' interrupt: raises (the agent stops and asks) until the app's response is
            # here; then the answer is persisted before anything acts on it.
            response = event.interrupt(INTERRUPT_PREFIX + d.unknown.attempt_id, reason=d.unknown.to_payload())
            given = Answer.parse(response)
            await asyncio.to_thread(scope.answer, call_id, given)
            d = await asyncio.to_thread(scope.before, call_id, name, args, side_effect=side_effect,
                                        idempotency=idempotency)
        spec = event.selected_tool.tool_spec if event.selected_tool is not None else None
        if d.verdict is Verdict.DONE:
            event.selected_tool = _recorded_tool(name, spec, d.result, tool_use_id)
        elif d.verdict is Verdict.ABANDONED:
            event.cancel_tool = (f"{name} was abandoned: its outcome was unknown after a crash and the user chose not "
                                 "to run it again")
        elif d.run:
            with self._lock:
                self._running[tool_use_id] = (scope, call_id)
        else:  # still unknown (an answer that did not take): never run on a guess
            event.cancel_tool = _unknown_text(d.unknown) if d.unknown is not None else (
                f"{name} was not run: the guard gave {d.verdict.value}")

    @staticmethod
    def _refuse_reuse(scope: GuardScope, call_id: str, tool_use_id: str, tool: str, args: Any) -> None:
        recorded = scope.state.tools.get(call_id)  # a call's first attempt has the call's own id
        if recorded is None:
            return
        stored = scope.digest_of(call_id) or args_digest(recorded.args)  # its intent's digest (args may be cut)
        if recorded.tool != tool or stored != args_digest(args):
            raise CallIdReusedError(tool_use_id, recorded.tool, tool)

    async def _after_tool(self, event: AfterToolCallEvent) -> None:
        with self._lock:
            entry = self._running.pop(str(event.tool_use.get("toolUseId")), None)
        if entry is None:
            return
        scope, call_id = entry
        result = dict(event.result)
        if result.get("cancelled") is True:
            return  # a cancelled tool may have done anything: it stays started, so a new process asks
        if event.exception is not None:
            await asyncio.to_thread(scope.after, call_id, error=event.exception)
        else:
            result.pop("toolUseId", None)  # given back under the id of the call that asks again
            await asyncio.to_thread(scope.after, call_id, result)

    # --- a new prompt while a call is unknown -------------------------------------------------

    async def _before_invocation(self, event: BeforeInvocationEvent) -> None:
        if not self.pause_while_unknown:
            return
        agent = event.agent
        pending = await asyncio.to_thread(self.unknown, agent)
        if not pending:
            return
        state = getattr(agent, "_interrupt_state", None)
        if state is not None and getattr(state, "activated", False):
            return  # answering an interrupt: the tool hook acts on it
        # A call whose real result the conversation holds was delivered (only the guard's record of
        # it was lost, a result being written at "flush"): the model has it, nothing is pending.
        delivered = _delivered_tool_use_ids(agent.messages)
        pending = [u for u in pending if u.call_id not in delivered]
        waiting = _pending_tool_use_ids(agent.messages) if not event.messages else set()
        if all(u.call_id in waiting for u in pending):
            return  # a resume (no new prompt): Strands runs the calls again, and the tool hook asks
        names = ", ".join(f"{u.tool}({json.dumps(u.args, ensure_ascii=False)}) [toolUseId {u.call_id}]"
                          for u in pending)
        event.cancel = (f"Waiting for your answer: {len(pending)} tool call(s) may have run before the process "
                        f"stopped ({TOOL_OUTCOME_UNKNOWN}) and are not run again until answered: {names}. Answer "
                        "each with GuardHooks.answer(agent, tool_use_id, answer), answer being {\"answer\": "
                        "\"happened\", \"result\": ...}, \"run_again\" or \"abandon\".")

    # --- what the app sees and answers ------------------------------------------------------

    def unknown(self, agent: Any) -> list[UnknownCall]:
        """The agent's calls whose outcome is unknown and not answered, in the order they started.
        An agent that never ran a guarded tool has no guard journal, and none is made here."""
        agent_id = getattr(agent, "agent_id", None)
        if isinstance(agent_id, str) and not self.guard.store.exists(journal_name(scope_id(self.session_id, agent_id))):
            return []
        return self.scope(agent).unknown()

    def answer(self, agent: Any, tool_use_id: str, answer: Answer | str | Mapping[str, Any]) -> None:
        """Record (synced) the answer to an unknown call, outside an interrupt (after a new prompt
        was refused). A "happened" result is kept as the call's result; "run_again" lets the model
        ask for the tool again; "abandon" records that it is not to run."""
        scope = self.scope(agent)
        call_id = guard_call_id(tool_use_id)
        if not any(u.call_id == call_id for u in scope.unknown()):
            raise NotUnknownCallError(tool_use_id)
        scope.answer(call_id, Answer.parse(answer))

    def gate(self, agent: Any) -> GateDecision:
        """The resume gate of the agent's guarded calls (its verdict, reasons and options)."""
        return self.scope(agent).gate()

    def close(self) -> None:
        self.guard.close()


def _pending_tool_use_ids(messages: list[Any]) -> set[str]:
    """The guard call ids of the last message's toolUse blocks when it is an assistant message
    asking for tools (what a resumed agent runs again)."""
    if not messages or not isinstance(messages[-1], Mapping) or messages[-1].get("role") != "assistant":
        return set()
    return {guard_call_id(str(block["toolUse"].get("toolUseId"))) for block in messages[-1].get("content") or []
            if isinstance(block, Mapping) and isinstance(block.get("toolUse"), Mapping)}


def _delivered_tool_use_ids(messages: list[Any]) -> set[str]:
    """The guard call ids of the toolResults the conversation holds, but Strands' own closers of
    calls it found without a result (its "Tool was interrupted." error: nothing was delivered)."""
    out: set[str] = set()
    for m in messages:
        for block in m.get("content") or [] if isinstance(m, Mapping) else []:
            res = block.get("toolResult") if isinstance(block, Mapping) else None
            if not isinstance(res, Mapping):
                continue
            tool_use_id = str(res.get("toolUseId"))
            if dict(res) != generate_missing_tool_result_content([tool_use_id])[0]["toolResult"]:
                out.add(guard_call_id(tool_use_id))
    return out


def guard_for(manager: Any, **options: Any) -> GuardHooks:
    """The guard hooks of a ``JournalSessionManager``'s session: its journals live in the manager's
    store (files, PostgreSQL or JetStream), beside the sessions' journals under names no session's
    can have. ``options`` go to ``GuardHooks`` (side_effects=, idempotent=, ...). For another
    session manager, use ``GuardHooks(ToolGuard(journal.store(path)), session_id)``."""
    session_id = getattr(manager, "session_id", None)
    if not isinstance(manager, JournalSessionRepository) or not isinstance(session_id, str):
        raise TypeError(f"guard_for needs a journal.adapters.strands.JournalSessionManager, not "
                        f"{type(manager).__name__}: give other managers GuardHooks(ToolGuard(journal.store(path)), "
                        "session_id)")
    guard_options = {k: options.pop(k) for k in ("artifacts", "result_durability") if k in options}
    return GuardHooks(ToolGuard(manager.store, **guard_options), session_id, **options)


__all__ = [
    "INTERRUPT_PREFIX", "CallIdReusedError", "GuardHooks", "NotUnknownCallError",
    "guard_call_id", "guard_for", "scope_id",
]
