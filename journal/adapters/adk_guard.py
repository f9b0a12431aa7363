"""Crash-safe ADK tools: ``GuardPlugin(guard)`` (docs/ADAPTERS.md, "Crash-safe tools").

    from google.adk.apps import App
    from journal.adapters.adk import JournalSessionService
    from journal.adapters.adk_guard import GuardPlugin, guard_for

    service = JournalSessionService("sessions/")
    guard = guard_for(service)                       # its journals live in the service's store
    app = App(name="ops", root_agent=agent, plugins=[GuardPlugin(guard)])
    runner = Runner(app=app, session_service=service)

ADK appends the model's function-call event to the session before it runs the tool, and a crash
while the tool runs leaves that call in the session with no response. With the plugin, a
side-effecting tool's intent is synced (journal/session/toolguard.py) in ADK's
``before_tool_callback``, before the tool starts, and its result in ``after_tool_callback``
(``on_tool_error_callback`` records a failure). Then:

* a call that returned is never run again: asked for it again (a resumable app's replay), the
  plugin answers with the recorded result;
* a call that never started (no durable intent) runs;
* a call that started and has no result (its outcome is unknown) is never run again on its own:
  it is asked about through ADK's tool confirmation. The call gets a function response saying
  its outcome is unknown (the closer: ``{"error": ..., "status": "TOOL_OUTCOME_UNKNOWN"}``,
  with the guard's payload under ``"journal"``) and an ``adk_request_confirmation`` call whose
  ``toolConfirmation.payload`` holds the tool, its arguments, the resume gate's reasons and the
  three answers. The app answers as ADK expects, with a user ``FunctionResponse`` named
  ``adk_request_confirmation`` (``answer_message`` builds it) whose ToolConfirmation payload is
  ``{"answer": "happened", "result": <the tool's result>}``, ``"run_again"`` or ``"abandon"``
  (``confirmed: false`` with no payload also abandons). ADK then runs the call through the
  plugin again, which persists the answer (``scope.answer``) before acting on it: the recorded
  result is returned, the tool runs once more, or the model is told it was abandoned. If the
  process dies again while an answered call runs once more, the next message asks about that
  attempt the same way (a closer of its own, a new question); the answer given for the earlier
  attempt, which ADK hands a resumed invocation again, runs nothing.

Well-formed history. Who closes an orphaned call: the plugin, in ADK's own types. When a user
message arrives (``on_user_message_callback``, before ADK stores it), every function call of the
session that has no response and is not one ADK waits on by design (long-running calls,
confirmation and credential requests) gets one function-response event, written once, saying
what the guard knows: the recorded result (it returned; only its response was lost), that it
never started (``TOOL_NOT_STARTED``: reschedule it only if still needed), that it failed, or
that its outcome is unknown (then the confirmation request above follows). So the next model
request has no orphaned call (ADK would silently drop it, and the model would not know the tool
may have run), and every load gives the same history. While an unknown call waits for its
answer, a run whose message is not an answer stops before the model is called
(``before_run_callback``) with a text naming the calls: nothing runs until the user has said.
A resumable app resumed with ``invocation_id=`` and no message replays the orphaned call
itself; the plugin's ``before_tool_callback`` then answers it the same way.

Put the plugin first in ``plugins``: ADK stops at the first plugin whose callback returns a
value, and one before it that replaced a tool's result or the user's message would keep the
guard from recording that result (the call would then read as unknown after a crash: asked,
never re-run) or from closing orphans.

Keys. The scope is the session (app name, user id, session id); the call id is the model's
function-call id, which is stored with the call before the tool runs and so survives the crash
(an id over the guard's length limit, or holding its attempt separator, is hashed). An id that
comes again with another tool or other arguments (a model or provider reusing ids) is refused with
``CallIdReusedError``: the call neither runs nor gets the earlier call's recorded result.

Which tools are guarded: all, as ``external-write`` and ``unsafe``, unless declared otherwise
with ``side_effects={"lookup": "read"}`` (the session layer's sideEffect vocabulary: none, read
and pure skip the guard) or ``idempotent={"set_flag"}`` (they skip it too and run again on their
own). A tool that asks for its own confirmation (``require_confirmation``) is guarded from the
moment it is confirmed and runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
import weakref
from collections.abc import Collection, Mapping
from typing import Any, Final

from journal.errors import MissingExtraError

try:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.adk.events.event_actions import EventActions
    from google.adk.flows.llm_flows.functions import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.sessions.base_session_service import BaseSessionService
    from google.adk.sessions.session import Session
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_confirmation import ToolConfirmation
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
    from typing_extensions import override
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "Google ADK 2.11 or later (google-adk)", "adk", exc) from exc

from journal.adapters.adk import JournalSessionService
from journal.session.closers import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN
from journal.session.gate import GateDecision
from journal.session.state import SIDE_EFFECT_FREE
from journal.session.toolguard import (
    ABANDON,
    ANSWER_ABANDON,
    ANSWER_RUN_AGAIN,
    ATTEMPT_SEP,
    CALL_ID_BYTES_MAX,
    Answer,
    BadAnswerError,
    GuardScope,
    ToolGuard,
    ToolGuardError,
    UnknownCall,
    Verdict,
    args_digest,
    has_lone_surrogate,
)

PLUGIN_NAME: Final = "journal_tool_guard"
METADATA_KEY: Final = "journal_tool_guard"  # custom_metadata of the events the plugin writes
STATUS_ABANDONED: Final = "abandoned"
STATUS_FAILED: Final = "failed"
STATUS_INTERRUPTED: Final = "interrupted"
# ADK's function calls the user answers by design: never closed as orphans.
_ADK_WAITS_ON: Final = frozenset({REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, "adk_request_credential",
                                  "adk_request_input"})
_CONFIRMATION_IDS: Final = uuid.UUID("6b1f3c1e-5a0b-4f43-9d0e-6a7c2b8e5d10")  # namespace of uuid5 ids


class CallIdReusedError(ToolGuardError):
    """A function-call id the guard holds for one call came again with another tool or other arguments."""

    def __init__(self, function_call_id: str, recorded_tool: str | None, tool: str) -> None:
        super().__init__(
            f"function call id {function_call_id} is already the id of another call in this session "
            f"({recorded_tool} with other arguments); this call ({tool}) was not run and is not given that call's "
            "recorded result. The model or provider reuses function-call ids: have it give each call a unique id, "
            "or leave FunctionCall.id empty so that ADK assigns one")


def _refuse_reuse(scope: GuardScope, call_id: str, function_call_id: str, tool: str, args: Any) -> None:
    """Raise CallIdReusedError when ``call_id`` is recorded for another tool or other arguments. The
    core keys a call by its id alone (LangGraph relies on that), so without this a reused id got
    the earlier call's recorded result, or its unknown outcome's question, and never ran."""
    recorded = scope.state.tools.get(call_id)  # a call's first attempt has the call's own id
    if recorded is None:
        return
    stored = scope.digest_of(call_id) or args_digest(recorded.args)  # its intent's digest (args may be cut)
    if recorded.tool != tool or stored != args_digest(args):
        raise CallIdReusedError(function_call_id, recorded.tool, tool)


def guard_for(service: BaseSessionService, **options: Any) -> ToolGuard:
    """A guard whose journals live in ``service``'s store (a JournalSessionService: files, PostgreSQL
    or JetStream), beside its apps' journals under names no app's journal can have."""
    if not isinstance(service, JournalSessionService):
        raise TypeError(f"guard_for needs a journal.adapters.adk.JournalSessionService, not "
                        f"{type(service).__name__}: give other services a ToolGuard(journal.store(path)) of its own")
    return ToolGuard(service.store, **options)


def scope_id(app_name: str, user_id: str, session_id: str) -> str:
    """The guard scope of one ADK session (JSON, so no two sessions' ids can run together)."""
    return json.dumps([app_name, user_id, session_id], ensure_ascii=False, separators=(",", ":"))


def guard_call_id(function_call_id: str) -> str:
    """The guard's call id for an ADK function-call id: the id itself when the guard can hold it."""
    if (len(function_call_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX or ATTEMPT_SEP in function_call_id
            or has_lone_surrogate(function_call_id)):
        return "h" + hashlib.sha256(function_call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return function_call_id


def session_gate(guard: ToolGuard, app_name: str, user_id: str, session_id: str) -> GateDecision:
    """The resume gate of a session's guarded calls (its verdict, reasons and options)."""
    return guard.scope(scope_id(app_name, user_id, session_id)).gate()


def parse_answer(confirmation: ToolConfirmation) -> Answer:
    """The guard's answer from the user's ToolConfirmation (its payload; a rejection without one
    abandons the call, and one whose payload says run_again is refused with BadAnswerError)."""
    payload = confirmation.payload
    if payload is None and not confirmation.confirmed:
        return ABANDON
    given = Answer.parse(payload)
    if given.answer == ANSWER_RUN_AGAIN and not confirmation.confirmed:
        # ADK's confirmed=false is a rejection, which never runs a tool: the two disagree, so nothing
        # is recorded and the question stands.
        raise BadAnswerError({"confirmed": False, "payload": payload})
    return given


def answer_message(confirmation_call_id: str, answer: Answer | str | Mapping[str, Any]) -> types.Content:
    """The user message that answers an ``adk_request_confirmation`` call of the guard."""
    given = Answer.parse(answer)
    payload: Any = {"answer": given.answer, "result": given.result} if given.answer == "happened" else given.answer
    confirmation = ToolConfirmation(confirmed=given.answer != ANSWER_ABANDON, payload=payload)
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id=confirmation_call_id, name=REQUEST_CONFIRMATION_FUNCTION_CALL_NAME,
        response=confirmation.model_dump(by_alias=True, exclude_none=True)))])


def pending_unknown(session: Session) -> list[dict[str, Any]]:
    """The guard's confirmation requests the session still waits on: per request, the
    ``adk_request_confirmation`` call id (``confirmationCallId``, for ``answer_message``) and the
    guard's payload (tool, args, reasons, options, ``callId``), in the session's order."""
    answered = {fr.id for e in session.events for fr in e.get_function_responses() if fr.id}
    out: list[dict[str, Any]] = []
    for e in session.events:
        for fc in e.get_function_calls():
            if fc.name != REQUEST_CONFIRMATION_FUNCTION_CALL_NAME or not fc.id or fc.id in answered:
                continue
            payload = ((fc.args or {}).get("toolConfirmation") or {}).get("payload")
            if isinstance(payload, dict) and payload.get("kind") == "journal.tool_outcome_unknown":
                out.append({"confirmationCallId": fc.id, **payload})
    return out


def _unknown_text(u: UnknownCall) -> str:
    return (f"{TOOL_OUTCOME_UNKNOWN}: the process stopped while {u.tool} ran, so it may or may not have changed "
            "the world. It is not run again on its own: the user is asked whether it happened (and its result), "
            "to run it again, or to abandon it. Do not call it again yourself.")


def _unknown_response(u: UnknownCall) -> dict[str, Any]:
    return {"error": _unknown_text(u), "status": TOOL_OUTCOME_UNKNOWN, "journal": u.to_payload()}


def _hint(u: UnknownCall) -> str:
    return (f"{u.tool} may have run before the process stopped ({TOOL_OUTCOME_UNKNOWN}). Answer with a "
            "ToolConfirmation whose payload is {\"answer\": \"happened\", \"result\": ...}, \"run_again\" or "
            "\"abandon\".")


def _as_response(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else {"result": result}


class GuardPlugin(BasePlugin):
    """ADK's plugin for the crash-safe tool guard (the module doc says what it does)."""

    def __init__(self, guard: ToolGuard, *, side_effect: str = "external-write", idempotency: str = "unsafe",
                 side_effects: Mapping[str, str] | None = None, idempotent: Collection[str] = (),
                 pause_while_unknown: bool = True, name: str = PLUGIN_NAME) -> None:
        super().__init__(name=name)
        self.guard = guard
        self.side_effect = side_effect
        self.idempotency = idempotency
        self.side_effects = dict(side_effects or {})
        self.idempotent = frozenset(idempotent)
        self.pause_while_unknown = pause_while_unknown
        # The calls let run, by their tool context: (its scope, its call id). Weakly keyed, so an
        # entry goes with its context: ADK tells no callback of a call cancelled before the tool ran
        # (say in an agent's own before_tool_callback), and a kept entry would grow the map per
        # cancellation and make seal() take that call for running (never closed) in this process.
        # No result is recorded for it: a cancelled call stays started, so a new process asks.
        self._running: weakref.WeakKeyDictionary[ToolContext, tuple[GuardScope, str]] = weakref.WeakKeyDictionary()

    # --- declarations -----------------------------------------------------------------------

    def declared(self, tool_name: str) -> tuple[str, str]:
        """(sideEffect, idempotency) of a tool."""
        return (self.side_effects.get(tool_name, self.side_effect),
                "safe" if tool_name in self.idempotent else self.idempotency)

    def guards(self, tool_name: str) -> bool:
        side_effect, idempotency = self.declared(tool_name)
        return side_effect not in SIDE_EFFECT_FREE and idempotency != "safe"

    def _scope(self, session: Session) -> GuardScope:
        return self.guard.scope(scope_id(session.app_name, session.user_id, session.id))

    # --- a tool's life ---------------------------------------------------------------------

    @override
    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        if not self.guards(tool.name) or not tool_context.function_call_id:
            return None
        confirmation = tool_context.tool_confirmation
        if (confirmation is None or not confirmation.confirmed) and \
                await tool.check_require_confirmation(tool_args, tool_context) is True:
            return None  # ADK's own gate asks (or refuses): the tool does not run now
        scope = await asyncio.to_thread(self._scope, tool_context.session)
        call_id = guard_call_id(tool_context.function_call_id)
        side_effect, idempotency = self.declared(tool.name)
        await asyncio.to_thread(_refuse_reuse, scope, call_id, tool_context.function_call_id, tool.name, tool_args)
        d = await asyncio.to_thread(scope.before, call_id, tool.name, tool_args, side_effect=side_effect,
                                    idempotency=idempotency)
        if d.verdict is Verdict.UNKNOWN and d.unknown is not None:
            # A confirmation is an answer only to the question about this attempt: resumed after the
            # attempt an answer let run died too, ADK hands the tool that answer again (a response to
            # the call consumes it, and none came), and taken for the new attempt's it would run again.
            if confirmation is None or not _asked_about(tool_context.session, tool_context.function_call_id,
                                                        call_id, d.unknown.attempt_id):
                # Ask through ADK's tool confirmation (naming the attempt); nothing runs. (ADK emits
                # no question from a confirmed re-run: the model is told the outcome is unknown, and
                # the next message asks, through seal.)
                tool_context.request_confirmation(hint=_hint(d.unknown),
                                                  payload={**d.unknown.to_payload(), "attemptId": d.unknown.attempt_id})
                return _unknown_response(d.unknown)
            await asyncio.to_thread(scope.answer, call_id, parse_answer(confirmation))  # persisted, then acted on
            d = await asyncio.to_thread(scope.before, call_id, tool.name, tool_args, side_effect=side_effect,
                                        idempotency=idempotency)
        if d.verdict is Verdict.DONE:
            return _as_response(d.result)
        if d.verdict is Verdict.ABANDONED:
            return {"error": f"{tool.name} was abandoned: its outcome was unknown after a crash and the user chose "
                             "not to run it again", "status": STATUS_ABANDONED}
        if not d.run:  # still unknown (an answer that did not take): never run on a guess
            return _unknown_response(d.unknown) if d.unknown is not None else {
                "error": f"{tool.name} was not run: the guard gave {d.verdict.value}", "status": d.verdict.value}
        self._running[tool_context] = (scope, call_id)
        return None

    @override
    async def after_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                  result: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._running.pop(tool_context, None)
        if entry is not None:
            scope, call_id = entry
            await asyncio.to_thread(scope.after, call_id, result)
        return None

    @override
    async def on_tool_error_callback(self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext,
                                     error: Exception) -> dict[str, Any] | None:
        entry = self._running.pop(tool_context, None)
        if entry is not None and not isinstance(error, asyncio.CancelledError):
            # A cancelled tool may have done anything: it stays started, so a new process asks.
            scope, call_id = entry
            await asyncio.to_thread(scope.after, call_id, error=error)
        return None

    # --- orphaned calls: closers and the pause ----------------------------------------------

    @override
    async def on_user_message_callback(self, *, invocation_context: InvocationContext,
                                       user_message: types.Content) -> types.Content | None:
        await self.seal(invocation_context)
        return None

    @override
    async def before_run_callback(self, *, invocation_context: InvocationContext) -> types.Content | None:
        if not self.pause_while_unknown:
            return None
        message = invocation_context.user_content
        if message is not None and any(p.function_response for p in message.parts or []):
            return None  # an answer (or a tool's long-running result): ADK acts on it
        pending = pending_unknown(invocation_context.session)
        if not pending:
            return None
        names = ", ".join(f"{p['tool']}({json.dumps(p['args'], ensure_ascii=False)})" for p in pending)
        return types.Content(role="model", parts=[types.Part(text=(
            f"Waiting for your answer: {len(pending)} tool call(s) may have run before the process stopped and "
            f"are not run again until you answer their adk_request_confirmation: {names}."))])

    async def seal(self, invocation_context: InvocationContext) -> list[Event]:
        """Close every orphaned function call of the session and ask about every unknown call that
        waits for no question (written once; see the module doc); the events appended, in order."""
        session = invocation_context.session
        running = {ctx.function_call_id for ctx in list(self._running)}
        view = _SessionView(session, running)
        if not view.orphans and not view.guard_asked and not any(self.guards(str(fc.name))
                                                                 for _, fc in view.calls.values()):
            return []  # no guarded call here: the guard's journal need not even be opened
        # A call with a response can be unknown too: ADK runs a confirmed call again after the
        # user's answer, and a crash then leaves the earlier response (the question) its last.
        scope = await asyncio.to_thread(self._scope, session)
        unknown = {u.call_id: u for u in await asyncio.to_thread(scope.unknown)}
        written: list[Event] = []
        orphan_ids = {fc.id for _, fc in view.orphans}
        # Closers go one event per call event (ADK answers parallel calls in one event too, and
        # builds the model's request from the latest response event of a call event).
        closers: dict[str, tuple[Event, list[_Closed]]] = {}
        for call_event, fc in view.orphans:
            response, status = await asyncio.to_thread(self._closer, scope, fc, unknown)
            u = unknown.get(guard_call_id(str(fc.id)))
            closers.setdefault(call_event.id, (call_event, []))[1].append((fc, response, status, u))
        asks: list[tuple[Event, types.FunctionCall, UnknownCall]] = []
        for u in unknown.values():  # unknown: each gets a closer of its attempt, then its question
            found = view.calls.get(u.call_id)
            if found is None or u.call_id in view.waiting:
                continue  # not this session's call, or its question is asked and unanswered
            call_event, fc = found
            if u.attempt_id not in view.closed_attempts and fc.id not in orphan_ids:
                # The attempt an answer let run died too: its response never came, so say so again.
                closers.setdefault(call_event.id, (call_event, []))[1].append(
                    (fc, _unknown_response(u), TOOL_OUTCOME_UNKNOWN, u))
            if _request_id(u.attempt_id) not in view.requests:  # a crash after the closer is mended here
                asks.append((call_event, fc, u))
        for call_event, closed in closers.values():
            written.append(await invocation_context.session_service.append_event(
                session, _closer_event(call_event, closed)))
        for call_event, fc, u in asks:
            written.append(await invocation_context.session_service.append_event(
                session, _confirmation_request(call_event, fc, u)))
        return written

    def _closer(self, scope: GuardScope, fc: types.FunctionCall,
                unknown: Mapping[str, UnknownCall]) -> tuple[dict[str, Any], str]:
        """The function response closing orphaned call ``fc``, and its status."""
        call_id = guard_call_id(str(fc.id))
        name = str(fc.name)
        u = unknown.get(call_id)
        if u is not None:
            return _unknown_response(u), TOOL_OUTCOME_UNKNOWN
        tools = scope.state.tools
        last = call_id if call_id in tools else None
        n = 2
        while f"{call_id}{ATTEMPT_SEP}{n}" in tools:
            last, n = f"{call_id}{ATTEMPT_SEP}{n}", n + 1
        tc = tools.get(last) if last is not None else None
        if tc is not None and tc.has_result and not tc.result_synthetic and tc.status == "ok":
            side_effect, idempotency = self.declared(name)
            d = scope.before(call_id, name, fc.args or {}, side_effect=side_effect, idempotency=idempotency)
            if d.verdict is Verdict.DONE:  # it returned; only its response was lost
                return _as_response(d.result), "ok"
        if tc is not None and tc.has_result and tc.status == "error":
            return ({"error": f"{name} failed: {tc.output}", "status": STATUS_FAILED}, STATUS_FAILED)
        if tc is not None and tc.outcome_unknown is False and tc.status == TOOL_OUTCOME_UNKNOWN:
            # Answered already, and its response lost with the crash: say what the answer left.
            return ({"error": f"{name}: its outcome was unknown after a crash and it was answered "
                              f"{tc.reconciled}", "status": TOOL_OUTCOME_UNKNOWN}, TOOL_OUTCOME_UNKNOWN)
        if self.guards(name):
            return ({"error": f"{TOOL_NOT_STARTED}: the process stopped before {name} started; it never ran. Call "
                              "it again only if the goal still needs it.", "status": TOOL_NOT_STARTED},
                    TOOL_NOT_STARTED)
        return ({"error": f"the process stopped before {name} returned; it is declared free of side effects, so it "
                          "may be called again", "status": STATUS_INTERRUPTED}, STATUS_INTERRUPTED)

    async def close(self) -> None:
        self._running.clear()


class _SessionView:
    """What the plugin needs of a session's events: its calls (by the guard's call id), the
    orphans (calls with no response, ADK's waits and calls running here left out), the guard's
    questions (asked, and still waiting for an answer), the attempts a closer was written for, and
    whether the guard ever asked here (then an unknown call may still need its question)."""

    def __init__(self, session: Session, running: set[str | None]) -> None:
        events = session.events
        answered = {fr.id for e in events for fr in e.get_function_responses() if fr.id}
        self.calls: dict[str, tuple[Event, types.FunctionCall]] = {}
        self.orphans: list[tuple[Event, types.FunctionCall]] = []
        self.requests: set[str] = set()  # ids of the guard's adk_request_confirmation calls
        self.waiting: set[str] = set()  # guard call ids whose question is not answered yet
        self.closed_attempts: set[str] = set()
        self.guard_asked = False
        for e in events:
            meta = (e.custom_metadata or {}).get(METADATA_KEY)
            closes = meta.get("closes") if isinstance(meta, dict) else None
            for closed in closes.values() if isinstance(closes, dict) else ():
                if isinstance(closed, dict) and isinstance(closed.get("attempt"), str):
                    self.closed_attempts.add(closed["attempt"])
                    self.guard_asked = True  # a closer of an unknown call: its question may be missing
            if e.author == "user":
                continue
            waits = e.long_running_tool_ids or set()
            for fc in e.get_function_calls():
                if not fc.id:
                    continue
                if fc.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME:
                    payload = ((fc.args or {}).get("toolConfirmation") or {}).get("payload")
                    if isinstance(payload, dict) and payload.get("kind") == "journal.tool_outcome_unknown":
                        self.guard_asked = True
                        self.requests.add(fc.id)
                        if fc.id not in answered and isinstance(payload.get("callId"), str):
                            self.waiting.add(payload["callId"])
                    continue
                self.calls[guard_call_id(fc.id)] = (e, fc)
                if fc.id in answered or fc.id in waits or fc.id in running or fc.name in _ADK_WAITS_ON:
                    continue
                self.orphans.append((e, fc))


_Closed = tuple[types.FunctionCall, dict[str, Any], str, "UnknownCall | None"]  # call, response, status, unknown


def _closer_event(call_event: Event, closed: list[_Closed]) -> Event:
    """The function-response event closing calls of ``call_event``, in ADK's shape for the call's
    agent and branch; an unknown call's response carries its confirmation request, as a tool that
    asks does. Its metadata names each call closed, its status and (unknown) its attempt."""
    actions = EventActions()
    parts: list[types.Part] = []
    meta: dict[str, Any] = {}
    for fc, response, status, u in closed:
        parts.append(types.Part(function_response=types.FunctionResponse(id=fc.id, name=fc.name, response=response)))
        meta[str(fc.id)] = {"status": status} if u is None else {"status": status, "attempt": u.attempt_id}
        if u is not None:
            actions.requested_tool_confirmations[str(fc.id)] = ToolConfirmation(hint=_hint(u), payload=u.to_payload())
    return Event(invocation_id=call_event.invocation_id, author=call_event.author, branch=call_event.branch,
                 content=types.Content(role="user", parts=parts), actions=actions,
                 custom_metadata={METADATA_KEY: {"closes": meta}})


def _asked_about(session: Session, function_call_id: str, call_id: str, attempt_id: str) -> bool:
    """Whether the latest confirmation the user gave for function call ``function_call_id``
    answers the question about attempt ``attempt_id``: a question the plugin asked names it (by
    its id, ``_request_id``, or its payload's ``attemptId``); any other (ADK's own, one asked
    before questions named attempts) is taken for the call's first attempt only."""
    asked: dict[str, object] = {}  # adk_request_confirmation id -> the attempt its payload names
    for e in session.events:
        for fc in e.get_function_calls():
            args = fc.args or {}
            original = args.get("originalFunctionCall")
            if fc.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME and fc.id and isinstance(original, dict) \
                    and original.get("id") == function_call_id:
                payload = (args.get("toolConfirmation") or {}).get("payload")
                asked[fc.id] = payload.get("attemptId") if isinstance(payload, dict) else None
    for e in reversed(session.events):
        if e.author != "user":
            continue
        for fr in e.get_function_responses():
            if fr.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME and fr.id in asked:
                named = asked[fr.id]
                return fr.id == _request_id(attempt_id) or named == attempt_id or (
                    named is None and attempt_id == call_id)
    return attempt_id == call_id


def _request_id(attempt_id: str) -> str:
    """The id of the question about an attempt: derived from it, so a mended request has the id
    the lost one would have had."""
    return f"adk-{uuid.uuid5(_CONFIRMATION_IDS, attempt_id)}"


def _confirmation_request(call_event: Event, fc: types.FunctionCall, u: UnknownCall) -> Event:
    """ADK's ``adk_request_confirmation`` call for unknown call ``fc``, as ADK's flow makes it for a
    tool that asks, with an id derived from the unknown attempt's."""
    request_id = _request_id(u.attempt_id)
    confirmation = ToolConfirmation(hint=_hint(u), payload=u.to_payload())
    call = types.FunctionCall(name=REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, id=request_id, args={
        "originalFunctionCall": fc.model_dump(exclude_none=True, by_alias=True),
        "toolConfirmation": confirmation.model_dump(by_alias=True, exclude_none=True)})
    return Event(invocation_id=call_event.invocation_id, author=call_event.author, branch=call_event.branch,
                 content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                 long_running_tool_ids={request_id}, custom_metadata={METADATA_KEY: {"asks": fc.id}})


__all__ = [
    "METADATA_KEY", "PLUGIN_NAME", "BadAnswerError", "CallIdReusedError", "GuardPlugin", "answer_message",
    "guard_call_id", "guard_for",
    "parse_answer", "pending_unknown", "scope_id", "session_gate",
]
