"""Crash-safe Pydantic AI tools: ``capabilities=[CrashSafeTools(guard)]`` (docs/ADAPTERS.md, "Crash-safe tools").

    from journal.adapters.pydantic_ai import JournalConversationStore
    from journal.adapters.pydantic_ai_guard import CrashSafeTools, answers, guard_for

    store = JournalConversationStore("conversations/")
    guard = guard_for(store)                          # its journals sit beside the store's
    agent = Agent(model, tools=[deploy], output_type=[str, DeferredToolRequests],
                  capabilities=[CrashSafeTools(guard)])

Every call of a side-effecting tool of the agent goes through the guard (journal/session/toolguard.py):
its intent is synced before the tool runs and its result recorded after. After a crash, a call of
the same tool with the same arguments at the same place of the conversation:

* returns the recorded result without running the tool, when the tool had returned;
* runs the tool, when it never started (no durable intent), or when its attempt raised;
* otherwise (it started and has no result: the outcome is unknown) raises Pydantic AI's
  ``ApprovalRequired`` with the call's tool, arguments, the resume gate's reasons and the three
  answers as its metadata, so the run ends with ``DeferredToolRequests`` (``output_type`` must
  allow it). The next run takes ``deferred_tool_results=``: ``ToolApproved`` (or ``True``) means
  "run it again", ``ToolDenied`` (or ``False``) "abandon it", and a ``calls`` entry holding a
  result "it happened, here is its result"; ``answers(requests, {...})`` builds them from the
  guard's own words. The answer is persisted before the run acts on it: asked once, answered once.
  An approval answers only the question about the attempt it was asked for (``attemptId`` in the
  question's metadata, handed back by ``answers``; none: the first attempt), so stored results
  applied again after the re-run they allowed died too run nothing: the call is asked again.

Keys. The scope is the run's conversation id (``ctx.conversation_id``: pass ``conversation=`` or
``conversation_id=``; without one, each run mints a new id and a crash cannot be recognised).
The call id is not the model's ``tool_call_id``: the app stores a conversation after a run, so a
run killed midway left no trace in the store and the model, asked again, issues the same call
under a new id. The call id is instead the tool's name, the sha256 of its arguments (canonical
JSON) and how many calls of that tool with those arguments the conversation holds before this
one: the same call at the same place gets the same id whether the model issued it again (a new
``tool_call_id``) or the run resumed a stored history that ends in it (the same one). A second,
later call with the same arguments is another call (its count is one more).

Which tools. Every tool of the agent's toolsets (not output tools) is guarded as
``external-write``/``unsafe`` unless ``side_effects={"name": "read"}`` / ``idempotent={"name"}``
or the tool's own ``metadata={"sideEffect": ..., "idempotency": ...}`` (``@agent.tool(metadata=...)``)
say otherwise; tools free of side effects or idempotent skip the sync and run again on their own.

Values. A tool's return value is recorded as JSON (``pydantic_core.to_jsonable_python``); a
recorded result comes back as that JSON, which is what the model would have been sent.

History. A stored conversation never holds a call the guard could let run twice: the app saves
after a run, and a history ending in open calls (a run paused for ``DeferredToolRequests``, or a
history the app saved midway) is the framework's live frontier: Pydantic AI refuses a new prompt
over it and, resumed without one, executes those calls, through this guard. Calls the history
closes otherwise are closed by Pydantic AI itself before every model request (a deterministic
"interrupted" return, ``messages.repair_messages``). An abandoned call is closed with
``ABANDONED_CONTENT`` (outcome unknown), never with success or failure. An app that would rather
move on with a new prompt than resume a history's open calls calls ``close_open_calls``: each gets
a persisted, deterministic return (the recorded result, or ``ABANDONED_CONTENT``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
from collections.abc import Collection, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from journal.errors import MissingExtraError

try:
    import pydantic_core
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
    from pydantic_ai._run_context import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.exceptions import ApprovalRequired
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        ToolCallPart,
        ToolReturn,
        ToolReturnPart,
    )
    from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise MissingExtraError(__name__, "Pydantic AI 2.66 or later (pydantic-ai-slim)", "pydantic-ai", exc) from exc

import journal
from journal.api import Store
from journal.session.gate import GateDecision
from journal.session.state import SIDE_EFFECT_FREE
from journal.session.toolguard import (
    ABANDON,
    ANSWER_ABANDON,
    ANSWER_HAPPENED,
    ANSWER_RUN_AGAIN,
    ATTEMPT_SEP,
    CALL_ID_BYTES_MAX,
    RUN_AGAIN,
    Answer,
    GuardScope,
    ToolGuard,
    ToolGuardError,
    Verdict,
    happened,
    has_lone_surrogate,
)

GUARDS_SUFFIX: Final = ".tool-guards"  # the guard's store beside a JournalConversationStore's directory
ABANDONED_CONTENT: Final = (
    "TOOL_OUTCOME_UNKNOWN: this call started before a crash and its outcome is unknown; it was abandoned "
    "and not run again (it may or may not have taken effect)"
)
CLOSER_METADATA_KEY: Final = "journal_closer"  # on a return close_open_calls wrote: "recorded" | "outcome_unknown"
DENIED_DEFAULT: Final = ToolDenied().message  # what ToolDenied() says when the app gave no message
_KEY_PREFIX: Final = "pai"
ATTEMPT_KEY: Final = "attemptId"  # in a question's metadata and its answer's: the attempt it is about


class NoConversationIdError(ToolGuardError):
    def __init__(self, tool: str) -> None:
        super().__init__(f"guarded tool {tool} ran in a run without a conversation id: pass conversation= or "
                         "conversation_id= to agent.run, so that a crashed run's calls are recognised when it resumes")


def guard_store(store: Any) -> Store:
    """The store of ``store``'s guard journals: beside its journal (``PATH.tool-guards`` for a
    directory; the same server, without ``journal=``, for a ``postgresql://`` or ``nats://`` URL,
    where ``guard.``-named journals cannot collide with a conversation journal's name)."""
    path = getattr(store, "path", None)
    if not isinstance(path, str):
        raise TypeError(f"guard_for needs a journal.adapters.pydantic_ai.JournalConversationStore, not "
                        f"{type(store).__name__}: give other stores a ToolGuard(journal.store(path)) of its own")
    if "://" in path:
        parts = urlsplit(path)
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "journal"])
        return journal.store(urlunsplit((parts.scheme, parts.netloc, parts.path, query, "")))
    return journal.store(os.path.abspath(path).rstrip(os.sep) + GUARDS_SUFFIX)


def guard_for(store: Any, **options: Any) -> ToolGuard:
    """A guard whose journals live beside ``store``'s (a JournalConversationStore: files, PostgreSQL
    or JetStream); ``options`` go to ``ToolGuard``."""
    return ToolGuard(guard_store(store), **options)


def _digest(args: Any) -> str:
    text = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _raw_args(part: ToolCallPart) -> Any:
    try:
        return part.args_as_dict()
    except ValueError:  # args the model cut off mid-stream: their text is what identifies them
        return part.args


def call_key(messages: list[ModelMessage], tool_call_id: str) -> tuple[str, Any] | None:
    """The guard's call id of the call ``tool_call_id`` of ``messages`` (its last response holding
    that id) and the call's arguments as the model sent them; None if no response holds it."""
    where: tuple[int, int] | None = None
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, ModelResponse):
            for j, part in enumerate(msg.parts):
                if isinstance(part, ToolCallPart) and part.tool_call_id == tool_call_id:
                    where = (i, j)
            if where is not None:
                break
    if where is None:
        return None
    i, j = where
    target = messages[i].parts[j]
    assert isinstance(target, ToolCallPart)
    args = _raw_args(target)
    digest = _digest(args)
    earlier = 0
    for mi, msg in enumerate(messages[: i + 1]):
        if not isinstance(msg, ModelResponse):
            continue
        for pj, part in enumerate(msg.parts):
            if mi == i and pj >= j:
                break
            if isinstance(part, ToolCallPart) and part.tool_name == target.tool_name and \
                    _digest(_raw_args(part)) == digest:
                earlier += 1
    return _fit(f"{_KEY_PREFIX}:{target.tool_name}:{digest[:32]}:{earlier}"), args


def _fit(key: str) -> str:
    """``key``, or its sha256 when the guard could not take it (too long, or holding the attempt mark)."""
    if len(key.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX or ATTEMPT_SEP in key or has_lone_surrogate(key):
        return f"{_KEY_PREFIX}:h" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return key


@dataclasses.dataclass
class _Policy:
    side_effects: Mapping[str, str]
    idempotent: Collection[str]
    default_side_effect: str

    def of(self, name: str, metadata: Mapping[str, Any] | None) -> tuple[str, str]:
        meta = metadata or {}
        side_effect = self.side_effects.get(name) or meta.get("sideEffect") or self.default_side_effect
        idempotency = "safe" if name in self.idempotent else str(meta.get("idempotency") or "unsafe")
        return str(side_effect), idempotency

    def guarded(self, name: str, metadata: Mapping[str, Any] | None) -> bool:
        side_effect, idempotency = self.of(name, metadata)
        return side_effect not in SIDE_EFFECT_FREE and idempotency != "safe"


async def _scope(guard: ToolGuard, conversation_id: str) -> GuardScope:
    # Opening a scope reads (and may repair) its journal: off the event loop.
    return await asyncio.to_thread(guard.scope, conversation_id)


@dataclasses.dataclass
class GuardedToolset(WrapperToolset[Any]):
    """The wrapped toolset's calls, through the guard. ``CrashSafeTools`` wraps the agent's
    toolset in one; used alone (``Agent(toolsets=[GuardedToolset(ts, guard)])``) it persists only
    the "run it again" answer (``ToolApproved``): denials and results for a call never reach a
    toolset, so ``CrashSafeTools`` is what persists those."""

    guard: ToolGuard = dataclasses.field(kw_only=True)
    side_effects: Mapping[str, str] = dataclasses.field(default_factory=dict, kw_only=True)
    idempotent: Collection[str] = dataclasses.field(default_factory=frozenset, kw_only=True)
    default_side_effect: str = dataclasses.field(default="external-write", kw_only=True)

    def _policy(self) -> _Policy:
        return _Policy(self.side_effects, self.idempotent, self.default_side_effect)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        policy = self._policy()
        if not policy.guarded(name, tool.tool_def.metadata):
            return await super().call_tool(name, tool_args, ctx, tool)
        if not ctx.conversation_id:
            raise NoConversationIdError(name)
        side_effect, idempotency = policy.of(name, tool.tool_def.metadata)
        found = call_key(ctx.messages, ctx.tool_call_id) if ctx.tool_call_id else None
        # A call no response of the history holds (a toolset called outside the agent's loop): its own id.
        call_id, args = found if found is not None else (_fit(f"{_KEY_PREFIX}:id:{ctx.tool_call_id}"), tool_args)
        scope = await _scope(self.guard, ctx.conversation_id)
        d = await asyncio.to_thread(scope.before, call_id, name, args, side_effect=side_effect,
                                    idempotency=idempotency)
        if d.verdict is Verdict.UNKNOWN and d.unknown is not None and ctx.tool_call_approved and \
                approves_attempt(ctx.tool_call_metadata, call_id, d.unknown.attempt_id):
            # ToolApproved for the question about this attempt: "run it again", persisted before it runs.
            # An approval of an earlier attempt (an app re-applying stored results after the re-run it
            # let run died too) is no answer: the call is asked again, naming its new attempt.
            await asyncio.to_thread(scope.answer, call_id, RUN_AGAIN)
            d = await asyncio.to_thread(scope.before, call_id, name, args, side_effect=side_effect,
                                        idempotency=idempotency)
        if d.verdict is Verdict.UNKNOWN and d.unknown is not None:
            raise ApprovalRequired(metadata={**d.unknown.to_payload(), ATTEMPT_KEY: d.unknown.attempt_id,
                                             "toolCallId": ctx.tool_call_id, "conversationId": ctx.conversation_id})
        if d.verdict is Verdict.DONE:
            return d.result
        if d.verdict is Verdict.ABANDONED:
            return ABANDONED_CONTENT
        try:
            out = await super().call_tool(name, tool_args, ctx, tool)
        except Exception as exc:  # the tool raised (ModelRetry too): this attempt may run again
            await asyncio.to_thread(scope.after, call_id, error=exc)
            raise
        await asyncio.to_thread(scope.after, call_id, pydantic_core.to_jsonable_python(out, fallback=repr))
        return out


@dataclasses.dataclass
class CrashSafeTools(AbstractCapability[Any]):
    """The one-line opt-in: ``Agent(..., capabilities=[CrashSafeTools(guard)])`` guards every tool
    of the agent and persists the app's answers (``deferred_tool_results``) before the run acts on them."""

    guard: ToolGuard
    side_effects: Mapping[str, str] = dataclasses.field(default_factory=dict)
    idempotent: Collection[str] = dataclasses.field(default_factory=frozenset)
    default_side_effect: str = "external-write"

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return GuardedToolset(toolset, guard=self.guard, side_effects=self.side_effects, idempotent=self.idempotent,
                              default_side_effect=self.default_side_effect)

    async def before_node_run(self, ctx: RunContext[Any], *, node: Any) -> Any:
        results = getattr(node, "tool_call_results", None)
        response = getattr(node, "model_response", None)
        if not results or not isinstance(response, ModelResponse) or not ctx.conversation_id:
            return node
        scope = await _scope(self.guard, ctx.conversation_id)
        unknown = {u.call_id: u.attempt_id for u in await asyncio.to_thread(scope.unknown)}
        if not unknown:
            return node
        metadata = getattr(node, "tool_call_metadata", None) or {}
        changed = dict(results)
        for part in response.tool_calls:
            given = results.get(part.tool_call_id)
            found = call_key(ctx.messages, part.tool_call_id)
            if given is None or given == "skip" or found is None or found[0] not in unknown:
                continue
            answer = _answer_of(given)
            if answer is None:
                continue  # a retry or a failure for the model: not an answer; asked again if issued again
            if answer.answer == ANSWER_RUN_AGAIN and not approves_attempt(metadata.get(part.tool_call_id), found[0],
                                                                          unknown[found[0]]):
                continue  # approved an earlier attempt: not an answer; the toolset asks about this one
            await asyncio.to_thread(scope.answer, found[0], answer)
            if answer.answer == ANSWER_ABANDON and isinstance(given, ToolDenied) and given.message == DENIED_DEFAULT:
                changed[part.tool_call_id] = ToolDenied(ABANDONED_CONTENT)
        if changed != results:
            node.tool_call_results = changed
        return node


def approves_attempt(metadata: Any, call_id: str, attempt_id: str) -> bool:
    """Whether an approval whose ``DeferredToolResults.metadata`` entry is ``metadata`` answers the
    question about attempt ``attempt_id`` of call ``call_id``: the question names its attempt
    (``ATTEMPT_KEY`` in the request's metadata, which ``answers`` hands back); an approval naming
    none (a bare ``True`` or ``ToolApproved()``) is taken for the call's first attempt only, so an
    approval stored and applied again after the re-run it allowed died too never runs the tool a
    third time."""
    named = metadata.get(ATTEMPT_KEY) if isinstance(metadata, Mapping) else None
    return named == attempt_id if named is not None else attempt_id == call_id


def _answer_of(given: Any) -> Answer | None:
    if isinstance(given, ToolApproved):
        return RUN_AGAIN
    if isinstance(given, ToolDenied):
        return ABANDON
    if isinstance(given, ToolReturn):
        value = given.return_value
        return happened(pydantic_core.to_jsonable_python(value, fallback=repr))
    return None


def answers(requests: DeferredToolRequests,
            given: Mapping[str, Answer | str | Mapping[str, Any]]) -> DeferredToolResults:
    """The ``deferred_tool_results`` for the guard's answers, keyed by ``tool_call_id``: ``"run_again"``,
    ``"abandon"`` or ``{"answer": "happened", "result": ...}`` (or ``journal.session.toolguard``'s
    ``RUN_AGAIN``, ``ABANDON``, ``happened(result)``)."""
    asked = {c.tool_call_id for c in requests.approvals}
    out = DeferredToolResults()
    for tool_call_id, value in given.items():
        if tool_call_id not in asked:
            raise ValueError(f"{tool_call_id!r} is not a call these requests ask to approve: answer one of "
                             f"{sorted(asked)}")
        a = Answer.parse(value)
        attempt = (requests.metadata.get(tool_call_id) or {}).get(ATTEMPT_KEY)
        if attempt is not None:  # the answer names the attempt it was asked about (see approves_attempt)
            out.metadata[tool_call_id] = {ATTEMPT_KEY: attempt}
        if a.answer == ANSWER_HAPPENED:
            out.calls[tool_call_id] = a.result
        elif a.answer == ANSWER_RUN_AGAIN:
            out.approvals[tool_call_id] = ToolApproved()
        else:
            out.approvals[tool_call_id] = ToolDenied(ABANDONED_CONTENT)
    return out


async def close_open_calls(conversation: Conversation, guard: ToolGuard) -> Conversation:
    """Close the calls a stored history ends with (its last response's calls without a return), for
    an app that moves on with a new prompt rather than resume them (Pydantic AI refuses a prompt
    over open calls). Each gets a ToolReturnPart, appended in one new request: the recorded result
    of a call whose tool returned; for any other, ``ABANDONED_CONTENT`` (its outcome is unknown;
    one the guard holds unknown is answered "abandon", persisted first). Deterministic (the
    response's timestamp, no clock), so closing a loaded history twice gives the same messages.
    Changes ``conversation`` in place (and drops its ``deferred_tool_requests``) and returns it: save it."""
    messages = conversation.messages
    last = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], ModelResponse)), None)
    if last is None:
        return conversation
    response = messages[last]
    assert isinstance(response, ModelResponse)
    answered = {p.tool_call_id for m in messages[last + 1:] for p in m.parts
                if isinstance(p, (ToolReturnPart, RetryPromptPart))}
    open_calls = [c for c in response.tool_calls if c.tool_call_id not in answered]
    if not open_calls:
        return conversation
    scope = await _scope(guard, conversation.conversation_id)
    unknown = {u.call_id for u in await asyncio.to_thread(scope.unknown)}
    recorded = _recorded_results(await asyncio.to_thread(scope.history))
    closers: list[ToolReturnPart] = []
    for call in open_calls:
        found = call_key(messages, call.tool_call_id)
        key = found[0] if found is not None else None
        if key is not None and key in unknown:
            await asyncio.to_thread(scope.answer, key, ABANDON)
        if key is not None and key not in unknown and key in recorded:
            closers.append(ToolReturnPart(call.tool_name, recorded[key], call.tool_call_id,
                                          timestamp=response.timestamp, metadata={CLOSER_METADATA_KEY: "recorded"}))
        else:
            closers.append(ToolReturnPart(call.tool_name, ABANDONED_CONTENT, call.tool_call_id,
                                          timestamp=response.timestamp,
                                          metadata={CLOSER_METADATA_KEY: "outcome_unknown"}, outcome="interrupted"))
    messages.append(ModelRequest(parts=closers, timestamp=response.timestamp))
    conversation.deferred_tool_requests = None
    return conversation


def _recorded_results(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Per guard call id, the result its tool returned or an answer said it had (the last one)."""
    out: dict[str, Any] = {}
    for ev in history:
        data = ev.get("data")
        if not isinstance(data, dict) or not isinstance(data.get("callId"), str):
            continue
        if ev.get("type") == "tool.result" and data.get("status") == "ok":
            out[data["callId"]] = data.get("output")
        elif ev.get("type") == "tool.reconciled" and data.get("answer") == ANSWER_HAPPENED:
            out[data["callId"]] = data.get("output")
    return out


def conversation_gate(guard: ToolGuard, conversation_id: str) -> GateDecision:
    """The resume gate of a conversation's guarded calls (its verdict, reasons and options)."""
    return guard.scope(conversation_id).gate()


__all__ = [
    "ABANDONED_CONTENT", "ATTEMPT_KEY", "CLOSER_METADATA_KEY", "CrashSafeTools", "GuardedToolset",
    "NoConversationIdError",
    "answers", "approves_attempt", "call_key", "close_open_calls", "conversation_gate", "guard_for", "guard_store",
]
