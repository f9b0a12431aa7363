"""Crash-safe function tools for the OpenAI Agents SDK: ``guarded_tool(guard, tool)`` (docs/ADAPTERS.md,
"Crash-safe tools").

    from journal.adapters.openai_agents import JournalSession
    from journal.adapters.openai_agents_guard import guard_for, guarded

    session = JournalSession("user-42", "sessions/")
    guard = guard_for(session)                  # its journal lives in the session's store

    @guarded(guard, side_effect="external-write")
    def deploy(version: str) -> str:            # becomes a FunctionTool, as with @function_tool
        ...

    agent = Agent(name="ops", tools=[deploy])   # or guarded_tool(guard, an_existing_function_tool)

Before a guarded tool runs, its intent (tool, arguments and their digest, the SDK's call id) is
synced to the guard's journal (journal/session/toolguard.py); its output is recorded after.

Why the keys are what they are. The SDK hands a turn's items to the session only at the end of
the turn, so after a crash the session has never heard of the call that was running: its history
holds no orphaned call (no closer is needed: a function_call the session stores comes with its
output; the one exception is a call held for an approval, which the SDK stores with the turn that
stopped for it: it never ran, and if the app drops that RunState the SDK leaves the call out of
the model's input), and on resume the model issues the call again, under a NEW call id. So the scope is the
session id, and a new call is matched to an earlier call the session never received by tool name
and the digest of its arguments (in the order the earlier calls were requested):

* the earlier call returned (its output is recorded): the new call gets that output, and the tool
  does not run again;
* the earlier call started and has no output (a crash during it: its outcome is unknown): the new
  call is held with the SDK's tool approval. ``Runner.run`` returns with ``result.interruptions``
  holding its ``ToolApprovalItem``; ``await guard.unknown_call(item)`` says which unknown call it
  stands for (tool, arguments, the resume gate's reasons, the three answers). Answer it with
  ``await guard.answer(state, item, ...)`` (``state = result.to_state()``), then
  ``Runner.run(agent, state, session=session)``:

  - ``"run_again"`` (or a plain ``state.approve(item)``, for the first attempt of a call the model
    issued anew): the tool runs once more, as a new attempt of the earlier call. An approval lives
    on in a saved RunState: resumed again after the attempt it allowed died too, it would allow a
    second run, so an unknown later attempt, or a call the SDK invokes again under the id it died
    with, runs only on an answer ``guard.answer`` synced (else the tool raises ``NotAnsweredError``
    and runs nothing);
  - ``"abandon"`` (what ``guard.answer`` records before it calls ``state.reject(item)``): the tool
    does not run and the model is told so;
  - ``happened(result)``: the tool does not run and the model gets ``result`` as the call's output
    (``guard.answer`` records it, then rejects the approval with the result as the message the
    model reads: the SDK's way to give a call an output without running it).

  The answer is synced before it is acted on. A plain ``state.reject(item)`` reaches no code of
  the tool (the SDK calls nothing), so it records nothing: the call stays unknown, and is asked
  about again if the model asks for it again. Use ``guard.answer`` to make "abandon" stick.
* no match: the call runs as usual, under the SDK's call id.

A call under an SDK call id the guard already holds for another tool or other arguments (a
provider reusing call ids) is refused with ``CallIdReusedError``: it neither runs nor gets the
earlier call's recorded output.

Earlier calls of this process are never matched (two identical calls in one turn are two calls);
an earlier call stops being matchable once the session holds its output, or the output of a call
that stood for it. A tool's own ``needs_approval`` is kept: a call is held when either asks.

Values. The output a tool returns is recorded as JSON when it is JSON, else as its ``str()``, and
given back as recorded. Tools declared free of side effects (``side_effect`` "none", "read",
"pure") or idempotent (``idempotency="safe"``) write nothing and run again on their own.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from journal.errors import MissingExtraError

try:
    from agents import function_tool
    from agents.items import ToolApprovalItem
    from agents.memory.session import Session
    from agents.run_context import RunContextWrapper
    from agents.run_state import RunState
    from agents.tool import FunctionTool
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "the Agents SDK 0.24 or later (openai-agents)", "openai-agents", exc) from exc

import journal
from journal.session.closers import TOOL_OUTCOME_UNKNOWN
from journal.session.gate import GateDecision
from journal.session.state import SIDE_EFFECT_FREE, ToolCall
from journal.session.toolguard import (
    ANSWER_HAPPENED,
    ANSWER_RUN_AGAIN,
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

SESSION_ITEMS_ALL = sys.maxsize  # items: a get_items limit that reads the whole session
ABANDONED_MESSAGE = ("{tool} was not run: an earlier identical call may have run before a crash, and the app "
                     "chose to abandon it")


class NotAnsweredError(ToolGuardError):
    def __init__(self, tool: str, call_id: str) -> None:
        super().__init__(f"tool call {call_id} ({tool}) stands for a call whose outcome is unknown and was not "
                         "answered; the tool was not run. Run the agent again (it asks, with a tool approval "
                         "interruption), answer with guard.answer(state, item, ...) and resume with "
                         "Runner.run(agent, state): a plain state.approve(item) answers only a call's first "
                         "unknown attempt")


class NotAnUnknownCallError(ToolGuardError):
    def __init__(self, call_id: str) -> None:
        super().__init__(f"approval item {call_id} does not stand for a call whose outcome is unknown: approve or "
                         "reject it with state.approve / state.reject as any other approval")


class CallIdReusedError(ToolGuardError):
    """An SDK call id the guard holds for one call came again with another tool or other arguments."""

    def __init__(self, call_id: str, recorded_tool: str | None, tool: str) -> None:
        super().__init__(f"tool call id {call_id} is already the id of another call in this session ({recorded_tool} "
                         f"with other arguments); this call ({tool}) was not run and is not given that call's "
                         "recorded output. The model or provider reuses call ids: use one that gives each call a "
                         "unique id (or a session per conversation that does)")


def _key_of(tool: str, args: Any) -> tuple[str, str]:
    return tool, args_digest(args)


def _call_id_of(sdk_call_id: str) -> str:
    """The guard's call id for the SDK's (the core takes at most CALL_ID_BYTES_MAX bytes, no "~")."""
    if (len(sdk_call_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX or ATTEMPT_SEP in sdk_call_id
            or not sdk_call_id or has_lone_surrogate(sdk_call_id)):
        return "h" + args_digest(sdk_call_id)
    return sdk_call_id


def _parse_args(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text  # the SDK reports arguments that are not JSON to the model; the guard keys them as text


@dataclass(frozen=True)
class _Earlier:
    call_id: str  # the guard's call id of the earlier call
    last: ToolCall  # its latest attempt


class SessionGuard:
    """The tool guard of one Agents SDK session: a ``ToolGuard`` scope named by the session id.

    Thread-safe; the methods that touch the journal are async and run it in a worker thread.
    """

    def __init__(self, guard: ToolGuard, session: Session) -> None:
        self.guard = guard
        self.session = session
        self.session_id = str(session.session_id)
        self._lock = threading.RLock()
        self._mine: set[str] = set()  # guard call ids first requested by this process
        self._claims: dict[str, str] = {}  # SDK call id of a new call -> guard call id it stands for
        self._digests: dict[str, str] = {}  # guard call id -> its arguments' digest, read once

    @property
    def scope(self) -> GuardScope:
        """The guard scope of the session (opened, and repaired, on first use)."""
        return self.guard.scope(self.session_id)

    # --- matching a new call to an earlier one ----------------------------------------------

    async def _delivered(self) -> tuple[set[str], dict[tuple[str, str], list[str]]]:
        """The call ids whose output the session holds, and those outputs' calls by key."""
        # An explicit limit: None would fall back to the settings' limit, which could hide an output.
        items: list[Any] = list(await self.session.get_items(limit=SESSION_ITEMS_ALL))
        calls: dict[str, tuple[str, str]] = {}
        outputs: list[str] = []
        for it in items:
            kind = it.get("type") if isinstance(it, Mapping) else None
            if kind == "function_call":
                name, cid = it.get("name"), it.get("call_id")
                if isinstance(name, str) and isinstance(cid, str):
                    calls[cid] = _key_of(name, _parse_args(str(it.get("arguments") or "")))
            elif kind == "function_call_output" and isinstance(it.get("call_id"), str):
                outputs.append(str(it["call_id"]))
        by_key: dict[tuple[str, str], list[str]] = {}
        for cid in outputs:
            if cid in calls:
                by_key.setdefault(calls[cid], []).append(cid)
        return {_call_id_of(c) for c in outputs}, by_key

    def _match(self, sdk_call_id: str, key: tuple[str, str], delivered: set[str],
               substitutes: dict[tuple[str, str], list[str]]) -> _Earlier | None:
        """The earlier call ``sdk_call_id`` stands for (claimed for it), or None. Under self._lock."""
        scope = self.scope
        tools = scope.state.tools
        claimed = self._claims.get(sdk_call_id)
        if claimed is not None:
            return self._earlier(claimed, tools)
        firsts = sorted((tc.request_seq, attempt, tc) for attempt, tc in self._earlier_calls(key))
        unanswered = {u.call_id for u in scope.unknown()}
        # A claim holds its call while its stand-in has no output, and after, unless the call is still
        # unknown and unanswered (a plain state.reject, or a NotAnsweredError, gives the stand-in an
        # output and records nothing): such a call is asked about again, never run on its own.
        taken = {c for s, c in self._claims.items() if _call_id_of(s) not in delivered or c not in unanswered}
        # Outputs the session holds for calls the guard never recorded under their own id stood for
        # earlier calls (answered, or given a recorded output): each one settles the oldest of those.
        # Not an unknown call no answer settled, though (as above).
        stood_for = [c for c in substitutes.get(key, []) if _call_id_of(c) not in tools and c not in self._claims]
        open_: list[str] = []
        settled: list[str] = []  # open calls an output of a stand-in may have settled
        for _, attempt, _tc in firsts:
            if attempt in delivered or attempt in self._mine or attempt in taken:
                continue
            last = self._earlier(attempt, tools)
            if last is None or not (self._done(last.last) or self._unknown(last.last)):
                continue  # it failed: an identical call is a retry, and runs
            open_.append(attempt)
            if attempt not in unanswered:
                settled.append(attempt)
        gone = set(settled[:len(stood_for)])
        open_ = [a for a in open_ if a not in gone]
        if not open_:
            return None
        self._claims[sdk_call_id] = open_[0]
        return self._earlier(open_[0], tools)

    def _earlier_calls(self, key: tuple[str, str]) -> list[tuple[str, ToolCall]]:
        """The guard's calls (first attempts) of ``key`` that this process did not request. Under self._lock."""
        out = []
        for attempt, tc in self.scope.state.tools.items():
            if ATTEMPT_SEP in attempt or tc.tool != key[0] or attempt in self._mine:
                continue
            digest = self._digests.get(attempt)
            if digest is None:  # the digest the intent stored (the args it shows may be truncated)
                digest = self.scope.digest_of(attempt) or _key_of(key[0], tc.args)[1]
                self._digests[attempt] = digest
            if digest == key[1]:
                out.append((attempt, tc))
        return out

    @staticmethod
    def _earlier(call_id: str, tools: Mapping[str, ToolCall]) -> _Earlier | None:
        attempts = [tc for a, tc in tools.items() if a == call_id or a.startswith(call_id + ATTEMPT_SEP)]
        if not attempts:
            return None
        return _Earlier(call_id, max(attempts, key=lambda tc: tc.request_seq))

    @staticmethod
    def _done(tc: ToolCall) -> bool:
        return tc.has_result and not tc.result_synthetic and tc.status == "ok"

    @staticmethod
    def _unknown(tc: ToolCall) -> bool:
        return tc.status == TOOL_OUTCOME_UNKNOWN or (not tc.has_result and tc.started_seq is not None)

    async def _resolve(self, sdk_call_id: str, tool: str, args: Any) -> _Earlier | None:
        key = _key_of(tool, args)

        def any_earlier() -> bool:
            with self._lock:
                return sdk_call_id in self._claims or bool(self._earlier_calls(key))

        # The common case, no earlier process asked for this call, reads no session items.
        if not await asyncio.to_thread(any_earlier):
            return None
        delivered, substitutes = await self._delivered()

        def work() -> _Earlier | None:
            with self._lock:
                return self._match(sdk_call_id, key, delivered, substitutes)

        return await asyncio.to_thread(work)

    # --- what the app sees and answers ------------------------------------------------------

    async def unknown_call(self, item: ToolApprovalItem) -> UnknownCall | None:
        """The call whose outcome is unknown that approval ``item`` stands for, or None (an approval
        the tool asked for itself). ``.to_payload()`` is its JSON: tool, args, reasons, options."""
        raw = item.raw_item
        get = raw.get if isinstance(raw, dict) else (lambda k, d=None: getattr(raw, k, d))
        sdk_call_id, name, arguments = get("call_id"), item.tool_name or get("name"), get("arguments")
        if not isinstance(sdk_call_id, str) or not isinstance(name, str):
            return None
        guard_id = _call_id_of(sdk_call_id)
        own = await asyncio.to_thread(self._own_unknown, guard_id)
        if own is not None:
            return own
        earlier = await self._resolve(sdk_call_id, name, _parse_args(str(arguments or "")))
        if earlier is None:
            return None
        return await asyncio.to_thread(self._unknown_of, earlier.call_id)

    def _own_unknown(self, guard_id: str) -> UnknownCall | None:
        with self._lock:
            for u in self.scope.unknown():
                if u.call_id == guard_id:
                    return u
            return None

    def _unknown_of(self, call_id: str) -> UnknownCall | None:
        for u in self.scope.unknown():
            if u.call_id == call_id:
                return u
        return None

    async def asks(self, interruptions: list[ToolApprovalItem]) -> list[tuple[ToolApprovalItem, UnknownCall]]:
        """The interruptions of a run that stand for calls whose outcome is unknown, with those calls."""
        out = []
        for item in interruptions:
            u = await self.unknown_call(item)
            if u is not None:
                out.append((item, u))
        return out

    async def answer(self, state: RunState[Any], item: ToolApprovalItem,
                     answer: Answer | str | Mapping[str, Any]) -> None:
        """Record the answer to the unknown call ``item`` stands for (synced), then tell the SDK:
        run_again approves ``item``; abandon and happened reject it, with the message the model reads
        (for happened, the result). Then resume with ``Runner.run(agent, state, session=session)``."""
        given = Answer.parse(answer)
        u = await self.unknown_call(item)
        if u is None:
            raise NotAnUnknownCallError(str(getattr(item.raw_item, "call_id", None) or item.raw_item))
        await asyncio.to_thread(self.scope.answer, u.call_id, given)
        if given.answer == ANSWER_RUN_AGAIN:
            state.approve(item)
        elif given.answer == ANSWER_HAPPENED:
            result = given.result
            state.reject(item, rejection_message=result if isinstance(result, str)
                         else json.dumps(result, ensure_ascii=False, sort_keys=True))
        else:
            state.reject(item, rejection_message=ABANDONED_MESSAGE.format(tool=u.tool))

    def gate(self) -> GateDecision:
        """The resume gate of the session's guarded calls (its verdict, reasons and options)."""
        return self.scope.gate()

    def close(self) -> None:
        self.guard.close()

    # --- the tool's side --------------------------------------------------------------------

    def _refuse_reuse(self, guard_id: str, sdk_call_id: str, tool: str, args: Any) -> bool:
        """Whether the guard holds a call under ``guard_id`` (the SDK's own id); CallIdReusedError when
        that call had another tool or other arguments. The core keys a call by its id alone, so
        without this a provider reusing call ids handed a new call an earlier one's recorded output
        (or its unknown outcome's question) and never ran it."""
        with self._lock:
            recorded = self.scope.state.tools.get(guard_id)  # a call's first attempt has the call's own id
            if recorded is None:
                return False
            digest = self._digests.get(guard_id)
            if digest is None:  # the digest the intent stored (the args it shows may be truncated)
                digest = self.scope.digest_of(guard_id) or _key_of(tool, recorded.args)[1]
                self._digests[guard_id] = digest
            if (recorded.tool, digest) != _key_of(tool, args):
                raise CallIdReusedError(sdk_call_id, recorded.tool, tool)
            return True

    async def _needs_approval(self, tool: str, args: Any, sdk_call_id: str) -> bool:
        guard_id = _call_id_of(sdk_call_id)
        await asyncio.to_thread(self._refuse_reuse, guard_id, sdk_call_id, tool, args)
        if await asyncio.to_thread(self._own_unknown, guard_id) is not None:
            return True
        earlier = await self._resolve(sdk_call_id, tool, args)
        if earlier is None:
            return False
        return self._unknown(earlier.last) and await asyncio.to_thread(self._unanswered, earlier.call_id)

    def _unanswered(self, call_id: str) -> bool:
        return self._unknown_of(call_id) is not None

    async def _invoke(self, ctx: ToolContext[Any], arguments: str, tool: str, side_effect: str, idempotency: str,
                      run: Callable[[ToolContext[Any], str], Awaitable[Any]]) -> Any:
        if side_effect in SIDE_EFFECT_FREE or idempotency == "safe":
            return await run(ctx, arguments)
        args = _parse_args(arguments)
        sdk_call_id = ctx.tool_call_id
        guard_id = _call_id_of(sdk_call_id)
        earlier = None

        # Opening the scope reads (and repairs) its journal: not on the event loop.
        if not await asyncio.to_thread(self._refuse_reuse, guard_id, sdk_call_id, tool, args):
            # A new call: may it stand for an earlier one?
            earlier = await self._resolve(sdk_call_id, tool, args)
        call_id = earlier.call_id if earlier is not None else guard_id

        def decide() -> tuple[Verdict, Any]:
            with self._lock:
                scope = self.scope
                d = scope.before(call_id, tool, args, side_effect=side_effect, idempotency=idempotency)
                if d.verdict is Verdict.UNKNOWN:
                    # The SDK invokes a held call only once the app approved it: approval is "run it again".
                    # Only for a call's first attempt: an approval lives on in a saved RunState, and one
                    # resumed again after the attempt it allowed died too would allow a second run; a later
                    # attempt needs the answer synced by guard.answer, which names the attempt it answers.
                    # And only for a new call standing for an earlier one: a call recorded under its own SDK
                    # id was invoked under that id before it died, so an approval the SDK holds for it (a
                    # saved RunState resumed again, the tool's own approval) is older than its unknown outcome.
                    if ctx.is_tool_approved(ctx.tool_name, sdk_call_id) is not True or d.attempt_id != call_id \
                            or earlier is None:
                        raise NotAnsweredError(tool, sdk_call_id)
                    scope.answer(call_id, ANSWER_RUN_AGAIN)
                    d = scope.before(call_id, tool, args, side_effect=side_effect, idempotency=idempotency)
                if d.run and earlier is None:
                    self._mine.add(call_id)
                return d.verdict, d.result

        verdict, recorded = await asyncio.to_thread(decide)
        if verdict is Verdict.DONE:
            return recorded
        if verdict is Verdict.ABANDONED:
            return ABANDONED_MESSAGE.format(tool=tool)
        # A cancelled (or interrupted) tool may have done anything: it is recorded as nothing, so it
        # stays started and the next process asks, where a failure would let the same call run again.
        try:
            out = await run(ctx, arguments)
        except Exception as exc:
            await asyncio.to_thread(self.scope.after, call_id, error=exc)
            raise
        await asyncio.to_thread(self.scope.after, call_id, _recordable(out))
        return out


def _recordable(out: Any) -> Any:
    try:
        if json.loads(json.dumps(out)) == out:
            return out
    except (TypeError, ValueError):
        pass
    return str(out)


def guard_for(session: Session, **options: Any) -> SessionGuard:
    """The guard of ``session``, a ``JournalSession``: its journal lives in the session's store (files,
    PostgreSQL or JetStream), beside the sessions' journals under a name no session's can have.
    ``options`` go to ``ToolGuard`` (artifacts=, result_durability=). For another ``Session``, use
    ``SessionGuard(ToolGuard(journal.store(path)), session)``."""
    path = getattr(session, "path", None)
    if not isinstance(path, str) or type(session).__name__ != "JournalSession":
        raise TypeError(f"guard_for needs a journal.adapters.openai_agents.JournalSession, not "
                        f"{type(session).__name__}: give other sessions SessionGuard(ToolGuard(journal.store(path)), "
                        "session)")
    root = path.rsplit("#", 1)[0] if "://" in path else str(Path(path).parent)
    return SessionGuard(ToolGuard(journal.store(root), **options), session)


ToolFunction = Callable[..., Any]


def guarded_tool(guard: SessionGuard, tool: FunctionTool | ToolFunction, *, side_effect: str = "external-write",
                 idempotency: str = "unsafe") -> FunctionTool:
    """``tool`` (a FunctionTool, or a function made one with ``function_tool``) with its intent synced
    before it runs and its output after; a call standing for an earlier one whose outcome is unknown
    is held with the SDK's tool approval."""
    base = tool if isinstance(tool, FunctionTool) else function_tool(tool)
    if not isinstance(base, FunctionTool):  # pragma: no cover - function_tool(fn) returns a FunctionTool
        raise TypeError(f"not a function tool: {tool!r}")
    run = base.on_invoke_tool
    own = base.needs_approval
    name = base.name
    guarded_ = copy.copy(base)

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        return await guard._invoke(ctx, arguments, name, side_effect, idempotency, run)

    async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        if side_effect not in SIDE_EFFECT_FREE and idempotency != "safe" \
                and await guard._needs_approval(name, params, call_id):
            return True
        if callable(own):
            asked = own(ctx, params, call_id)
            return bool(await asked) if inspect.isawaitable(asked) else bool(asked)
        return bool(own)

    guarded_.on_invoke_tool = on_invoke_tool
    guarded_.needs_approval = needs_approval
    return guarded_


def guarded(guard: SessionGuard, *, side_effect: str = "external-write",
            idempotency: str = "unsafe") -> Callable[[FunctionTool | ToolFunction], FunctionTool]:
    """``guarded_tool`` as a decorator, in place of (or above) ``@function_tool``."""

    def wrap(tool: FunctionTool | ToolFunction) -> FunctionTool:
        return guarded_tool(guard, tool, side_effect=side_effect, idempotency=idempotency)

    return wrap


def session_gate(guard: SessionGuard) -> GateDecision:
    """The resume gate of the session ``guard`` guards."""
    return guard.gate()


__all__ = [
    "ABANDONED_MESSAGE", "CallIdReusedError", "NotAnUnknownCallError", "NotAnsweredError", "SessionGuard",
    "guard_for", "guarded", "guarded_tool", "session_gate",
]
