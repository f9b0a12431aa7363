"""The crash-safe tool guard: a side-effecting tool's intent is durable before it runs, and a call
whose outcome is unknown after a crash is never run again on its own.

Framework-neutral: the adapters (LangGraph, Agents SDK, ADK, Pydantic AI) only say where a tool
call starts and ends and how to ask a person; everything kept, and every decision, is here.

    guard = ToolGuard(journal.store("guards"))      # or the adapter's own store
    scope = guard.scope("thread-1")                  # a thread / session / conversation
    d = scope.before("call-7", "deploy", {"env": "prod"}, side_effect="external-write")
    if d.verdict is Verdict.UNKNOWN:                 # a crash left it started with no result:
        ask a person with d.unknown (tool, args, the gate's reasons, the three answers), then
        scope.answer("call-7", happened(result) | RUN_AGAIN | ABANDON) and call before() again
    elif d.verdict is Verdict.DONE: use d.result     # recorded already: never run again
    elif d.run: result = deploy(...); scope.after("call-7", result)

Storage. One journal per scope in the store the adapter uses (files, PostgreSQL, JetStream
alike), named ``guard.`` + sha256 of the scope id: no adapter's journal name holds a ".", so
the names cannot collide; the header (``session.started``) keeps the scope id, and opening a
journal whose header names another scope is refused. The journal is a session of the session
layer's vocabulary (``journal cat`` shows it): ``tool.requested`` (tool, args and their digest,
sideEffect, idempotency, the framework's ``callId``), ``tool.started``, ``tool.result``, and
``tool.reconciled`` for an answer. Opening a scope runs the session layer's repair, which closes
a started call without a result with ``TOOL_OUTCOME_UNKNOWN`` (persisted, deterministic), so the
gate and ``unknown()`` see it; loading twice gives the same answers.

Cost, and why requested and started share one batch. A guarded call costs one group-committed
fdatasync: ``tool.requested`` and ``tool.started`` are appended together at "sync" before the
tool runs. The guard stands right before the call, with no approval or wait between the two,
so splitting them would buy a second fdatasync only to tell "crashed in the microseconds before
the call" from "crashed during it"; together, a crash anywhere after the batch is durable reads
as TOOL_OUTCOME_UNKNOWN (the safe side: it asks), and a crash before it leaves no intent (or,
after a power loss that kept only the first record, TOOL_NOT_STARTED): the tool never ran then,
because it runs only once the batch is synced. The result is appended at "flush": a process
crash keeps it (page cache); a power loss may lose it, which makes the call UNKNOWN and asks,
never re-runs; the next intent's sync (or ``sync()``/``close()``) makes it durable.

Retries. A call whose attempt ended in an error (the tool raised) or was never started may run
again: the new attempt is recorded under the call id plus ``~n``. A call answered "run it again"
runs as such a new attempt too. Tools declared free of side effects (``sideEffect`` none, read,
pure) or idempotent (``idempotency`` safe) write nothing and run again on their own.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from journal.api import Committed, Durability, Journal, Store
from journal.session.artifacts import ArtifactStore
from journal.session.closers import TOOL_OUTCOME_UNKNOWN
from journal.session.envelope import Event, check_for_append
from journal.session.errors import SessionError
from journal.session.gate import GateDecision, Reason, ResumeChecks, evaluate
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry
from journal.session.repair import load, repair
from journal.session.state import SIDE_EFFECT_FREE, SessionState, ToolCall

JOURNAL_PREFIX = "guard."
RESULT_INLINE_BYTES_MAX = 64 * 1024  # a larger result goes to the artifact store, when there is one
ARGS_INLINE_BYTES_MAX = 64 * 1024  # larger arguments are kept as their digest and a prefix
ATTEMPT_SEP = "~"
# Open scopes a ToolGuard keeps (each an open journal): beyond it the least recently used idle
# ones are closed, and opened again from their journals when asked for.
SCOPES_OPEN_MAX = 128
SCOPE_IDLE_CLOSE_S = 60.0  # a scope handed out this recently is never closed (its caller is using it)
CALL_ID_BYTES_MAX = 160  # leaves room for the attempt suffix within the envelope's 180-byte ids
ARTIFACT_KEY = "$artifact"

ANSWER_HAPPENED = "happened"
ANSWER_RUN_AGAIN = "run_again"
ANSWER_ABANDON = "abandon"
ANSWER_OPTIONS: tuple[tuple[str, str], ...] = (
    (ANSWER_HAPPENED, "it happened, here is its result: the call is not run again"),
    (ANSWER_RUN_AGAIN, "run it again: the tool runs once more, as a new attempt"),
    (ANSWER_ABANDON, "abandon it: the tool is not run and the caller gets no result"),
)


def utc_now() -> str:
    """The display time of an event (journal.session.session's format; that module is not imported
    here because it opens journals through the root package, which the adapters may not reach)."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_OUTCOME_OF = {ANSWER_HAPPENED: "applied", ANSWER_RUN_AGAIN: "rerun", ANSWER_ABANDON: "abandoned"}


class ToolGuardError(SessionError):
    """Base class of the guard's refusals."""


class IntentNotSavedError(ToolGuardError):
    def __init__(self, call_id: str, why: str) -> None:
        super().__init__(f"the intent of tool call {call_id} was not made durable ({why}); the tool was not run: "
                         "check the store (disk full, server reachable) and call it again")


class CallRunningError(ToolGuardError):
    def __init__(self, call_id: str) -> None:
        super().__init__(f"tool call {call_id} started in this process and has no result yet: call after() for it "
                         "before running it again (one call id is one call)")


class NotUnknownError(ToolGuardError):
    def __init__(self, call_id: str) -> None:
        super().__init__(f"tool call {call_id} has no unknown outcome to answer: answer only a call that "
                         "unknown() lists")


class AnswerConflictError(ToolGuardError):
    def __init__(self, call_id: str, stored: str, given: str) -> None:
        super().__init__(f"tool call {call_id} was already answered {stored!r}; it cannot be answered {given!r}: "
                         "an answer is final (the stored one stands)")


class ScopeMismatchError(ToolGuardError):
    def __init__(self, name: str, stored: object, scope: str) -> None:
        super().__init__(f"guard journal {name} holds scope {stored!r}, not {scope!r}: it was not written by this "
                         "guard; move it aside")


class BadAnswerError(ToolGuardError, ValueError):
    def __init__(self, value: object) -> None:
        super().__init__(f"not an answer: {value!r}; give 'run_again', 'abandon' or "
                         "{'answer': 'happened', 'result': ...}")


class Verdict(enum.Enum):
    RUN = "run"  # the intent is synced (or the tool needs none): run it, then call after()
    DONE = "done"  # a result is recorded (by the tool or by an answer): return it, do not run
    UNKNOWN = "unknown"  # it started and has no result: ask (Decision.unknown), then answer()
    RUN_AGAIN = "run_again"  # answered "run it again": the new attempt's intent is synced, run it
    ABANDONED = "abandoned"  # answered "abandon it": do not run


@dataclass(frozen=True)
class Answer:
    answer: str  # ANSWER_HAPPENED | ANSWER_RUN_AGAIN | ANSWER_ABANDON
    result: Any = None

    @classmethod
    def parse(cls, value: object) -> Answer:
        """An answer from what a person or app gave back (a framework's resume value)."""
        if isinstance(value, Answer):
            return value
        if value in (ANSWER_RUN_AGAIN, ANSWER_ABANDON):
            return cls(str(value))
        if isinstance(value, Mapping):
            kind = value.get("answer")
            if kind == ANSWER_HAPPENED:
                return cls(ANSWER_HAPPENED, value.get("result"))
            if kind in (ANSWER_RUN_AGAIN, ANSWER_ABANDON) and set(value) <= {"answer"}:
                return cls(str(kind))
        raise BadAnswerError(value)


def happened(result: Any = None) -> Answer:
    return Answer(ANSWER_HAPPENED, result)


RUN_AGAIN = Answer(ANSWER_RUN_AGAIN)
ABANDON = Answer(ANSWER_ABANDON)


@dataclass(frozen=True)
class UnknownCall:
    """A call that started and has no result: what to show the person who decides."""

    call_id: str
    tool: str | None
    args: Any
    args_digest: str | None
    side_effect: str
    idempotency: str
    attempt_id: str
    reasons: tuple[Reason, ...]
    options: tuple[tuple[str, str], ...] = ANSWER_OPTIONS

    def to_payload(self) -> dict[str, Any]:
        """JSON for a framework's human-in-the-loop value (LangGraph's ``interrupt``)."""
        return {
            "kind": "journal.tool_outcome_unknown",
            "callId": self.call_id,
            "tool": self.tool,
            "args": self.args,
            "argsDigest": self.args_digest,
            "sideEffect": self.side_effect,
            "idempotency": self.idempotency,
            "reasons": [{"code": r.code, "message": r.message, "options": list(r.options)} for r in self.reasons],
            "options": [{"answer": a, "means": m} for a, m in self.options],
        }


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    call_id: str
    attempt_id: str | None = None  # the toolCallId the run is recorded under (None: not recorded)
    result: Any = None  # DONE: the recorded result
    unknown: UnknownCall | None = None  # UNKNOWN: what to ask

    @property
    def run(self) -> bool:
        return self.verdict in (Verdict.RUN, Verdict.RUN_AGAIN)


def journal_name(scope_id: str) -> str:
    return JOURNAL_PREFIX + hashlib.sha256(scope_id.encode("utf-8")).hexdigest()


def _guarded(side_effect: str, idempotency: str) -> bool:
    return side_effect not in SIDE_EFFECT_FREE and idempotency != "safe"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str every surrogate is a lone one


def has_lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone UTF-16 surrogate (no UTF-8 form: an id the guard hashes)."""
    return _LONE_SURROGATE.search(text) is not None


def _canonical(value: Any) -> tuple[Any, str]:
    """``value`` as JSON (objects JSON cannot hold become their repr) and the sha256 of its text."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    # A lone surrogate (a model's output cut mid-emoji) is text no journal stores: the value kept
    # reads it as U+FFFD, as a UTF-8 decoder reads a cut character, while the digest is taken of
    # the exact text (surrogatepass), so two calls that differ only there still differ.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return json.loads(_LONE_SURROGATE.sub("\ufffd", text)), digest


def args_digest(args: Any) -> str:
    """The digest ``tool.requested`` keeps of a call's arguments (``argsDigest``): what an adapter
    compares a call with a recorded one by."""
    return _canonical(args)[1]


@dataclass
class _Call:
    """One framework call id: its attempts in order, and the answer to its unknown one."""

    attempts: list[str] = field(default_factory=list)
    answers: dict[str, tuple[str, Any]] = field(default_factory=dict)  # attempt id -> (answer, result)


class GuardScope:
    """The guard of one scope (a thread, a session, a conversation). Thread-safe."""

    def __init__(self, j: Journal, scope_id: str, artifacts: ArtifactStore | None = None,
                 result_durability: Durability = "flush", clock: Callable[[], str] = utc_now) -> None:
        self.journal = j
        self.clock = clock
        self.scope_id = scope_id
        self.session_id = "g" + hashlib.sha256(scope_id.encode("utf-8")).hexdigest()[:40]
        self.artifacts = artifacts
        self.result_durability: Durability = result_durability
        self.registry = Registry()
        self._reducer = SessionReducer()
        self._state = SessionState()
        self._calls: dict[str, _Call] = {}
        self._running: set[str] = set()  # attempt ids started by this process, no result yet
        self._lock = threading.RLock()
        if not j.readonly:
            repair(j, self.registry)
        self._load()
        if self._state.session_id is None and not j.readonly:
            self._append([Event(type="session.started", session_id=self.session_id, time=self.clock(),
                                data={"workspace": {"toolGuardScope": scope_id}, "lineage": {"depth": 0}})],
                         [None], "sync", "the guard journal's header")
        stored = self._state.workspace.get("toolGuardScope")
        if self._state.session_id is not None and stored != scope_id:
            raise ScopeMismatchError(j.path, stored, scope_id)

    # --- loading ---------------------------------------------------------------------------

    def _load(self) -> None:
        for event, spec in load(self.journal, self.registry).events:
            self._fold(event, spec)

    def _fold(self, event: Event, spec: Any) -> None:
        self._state = self._reducer.apply(self._state, event, spec)
        if event.type == "tool.requested" and event.tool_call_id:
            call_id = event.data.get("callId")
            if isinstance(call_id, str):
                call = self._calls.setdefault(call_id, _Call())
                if event.tool_call_id not in call.attempts:
                    call.attempts.append(event.tool_call_id)
        elif event.type == "tool.reconciled" and event.tool_call_id:
            call_id = event.data.get("callId")
            answer = event.data.get("answer")
            if isinstance(call_id, str) and isinstance(answer, str) and call_id in self._calls:
                self._calls[call_id].answers.setdefault(event.tool_call_id, (answer, event.data.get("output")))

    def _append(self, events: list[Event], keys: list[str | None], durability: Durability, what: str) -> None:
        for ev in events:
            check_for_append(ev, self.registry.get(ev.type))
        outs = self.journal.append_many([e.to_stored() for e in events], durability=durability,
                                        idempotency_keys=keys)
        for ev, out in zip(events, outs, strict=True):
            if not isinstance(out, Committed):
                raise IntentNotSavedError(ev.tool_call_id or what, out.reason or str(out))
            if not out.duplicate:
                spec = self.registry.get(ev.type)
                self._fold(ev.with_seq(out.seq, synthetic=False), spec)

    # --- the call's life -------------------------------------------------------------------

    def before(self, call_id: str, tool: str, args: Any = None, *, side_effect: str = "external-write",
               idempotency: str = "unsafe") -> Decision:
        """What to do with call ``call_id`` now; syncs its intent when it is to run."""
        if (not isinstance(call_id, str) or not call_id
                or len(call_id.encode("utf-8", "surrogatepass")) > CALL_ID_BYTES_MAX
                or ATTEMPT_SEP in call_id or has_lone_surrogate(call_id)):
            # "~" marks attempts: a call id holding it could name another call's attempt. A lone
            # surrogate is no UTF-8: the envelope could not keep the id as given.
            raise ValueError(f"call_id must be a non-empty UTF-8 string of at most {CALL_ID_BYTES_MAX} bytes "
                             f"without {ATTEMPT_SEP!r}, not {call_id!r} (hash a longer or other id)")
        with self._lock:
            call = self._calls.get(call_id)
            if call is None or not call.attempts:
                if not _guarded(side_effect, idempotency):
                    return Decision(Verdict.RUN, call_id)
                return self._start(call_id, tool, args, side_effect, idempotency, Verdict.RUN)
            last = call.attempts[-1]
            if last in self._running:
                raise CallRunningError(call_id)
            tc = self._state.tools[last]
            if tc.has_result and not tc.result_synthetic and tc.status == "ok":
                return Decision(Verdict.DONE, call_id, last, self._output(tc.output))
            if tc.status == TOOL_OUTCOME_UNKNOWN or (not tc.has_result and tc.started_seq is not None):
                answered = call.answers.get(last)
                if answered is None:
                    return Decision(Verdict.UNKNOWN, call_id, last, unknown=self._unknown(call_id, tc))
                kind, result = answered
                if kind == ANSWER_HAPPENED:
                    return Decision(Verdict.DONE, call_id, last, self._output(result))
                if kind == ANSWER_ABANDON:
                    return Decision(Verdict.ABANDONED, call_id, last)
                return self._start(call_id, tool, args, side_effect, idempotency, Verdict.RUN_AGAIN)
            # It failed (the tool raised) or never started: it may run again, as a new attempt.
            return self._start(call_id, tool, args, side_effect, idempotency, Verdict.RUN)

    def _start(self, call_id: str, tool: str, args: Any, side_effect: str, idempotency: str,
               verdict: Verdict) -> Decision:
        call = self._calls.get(call_id)
        n = len(call.attempts) + 1 if call is not None else 1
        attempt = call_id if n == 1 else f"{call_id}{ATTEMPT_SEP}{n}"
        shown, digest = _canonical(args)
        if len(json.dumps(shown, ensure_ascii=False).encode("utf-8", "surrogatepass")) > ARGS_INLINE_BYTES_MAX:
            shown = {"truncated": True, "prefix": json.dumps(shown, ensure_ascii=False)[:1024]}
        data = {"tool": tool, "args": shown, "argsDigest": digest, "sideEffect": side_effect,
                "idempotency": idempotency, "callId": call_id, "attempt": n}
        now = self.clock()
        events = [Event(type="tool.requested", session_id=self.session_id, time=now, tool_call_id=attempt, data=data),
                  Event(type="tool.started", session_id=self.session_id, time=now, tool_call_id=attempt,
                        data={"callId": call_id})]
        self._append(events, [f"tool.requested:{attempt}", f"tool.started:{attempt}"], "sync", attempt)
        self._running.add(attempt)
        return Decision(verdict, call_id, attempt)

    def after(self, call_id: str, result: Any = None, *, error: BaseException | str | None = None) -> None:
        """Record the result (or, with ``error``, the failure) of the call ``before`` let run."""
        with self._lock:
            call = self._calls.get(call_id)
            if call is None or not call.attempts or call.attempts[-1] not in self._running:
                return  # not guarded (free of side effects, idempotent) or not started here
            attempt = call.attempts[-1]
            if error is not None:
                data: dict[str, Any] = {"status": "error", "output": f"{type(error).__name__}: {error}"
                                        if isinstance(error, BaseException) else str(error)}
            else:
                data = {"status": "ok", "output": self._stored(result)}
            data["callId"] = call_id
            ev = Event(type="tool.result", session_id=self.session_id, time=self.clock(), tool_call_id=attempt,
                       data=data)
            self._append([ev], [f"tool.result:{attempt}"], self.result_durability, attempt)
            self._running.discard(attempt)

    def _stored(self, result: Any) -> Any:
        value, _ = _canonical(result)
        if self.artifacts is None:
            return value
        raw = json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8", "surrogatepass")
        if len(raw) <= RESULT_INLINE_BYTES_MAX:
            return value
        return {ARTIFACT_KEY: self.artifacts.put(raw)}

    def _output(self, stored: Any) -> Any:
        if isinstance(stored, dict) and set(stored) == {ARTIFACT_KEY} and self.artifacts is not None:
            return json.loads(self.artifacts.get(stored[ARTIFACT_KEY]))
        return stored

    # --- unknown outcomes and answers ------------------------------------------------------

    def _unknown(self, call_id: str, tc: ToolCall) -> UnknownCall:
        gate = evaluate(self._state, ResumeChecks(side_effect_sessions_paused=False))
        reasons = tuple(r for r in gate.reasons if r.subject == tc.tool_call_id)
        digest = self.digest_of(tc.tool_call_id)
        return UnknownCall(call_id, tc.tool, tc.args, digest, tc.side_effect, tc.idempotency, tc.tool_call_id,
                           reasons)

    def digest_of(self, attempt: str) -> str | None:
        tc = self._state.tools.get(attempt)
        if tc is None or tc.request_seq == 0:
            return None
        rec = self.journal.get(tc.request_seq)
        if rec is None or not isinstance(rec.event, dict):
            return None
        data = rec.event.get("data")
        digest = data.get("argsDigest") if isinstance(data, dict) else None
        return digest if isinstance(digest, str) else None

    def unknown(self) -> list[UnknownCall]:
        """Every call whose outcome is unknown and not yet answered, in the order they started."""
        with self._lock:
            out: list[UnknownCall] = []
            for call_id, call in self._calls.items():
                last = call.attempts[-1]
                tc = self._state.tools[last]
                if tc.status == TOOL_OUTCOME_UNKNOWN and last not in call.answers:
                    out.append(self._unknown(call_id, tc))
            return sorted(out, key=lambda u: self._state.tools[u.attempt_id].request_seq)

    def answer(self, call_id: str, answer: Answer | str | Mapping[str, Any]) -> None:
        """Record the answer to call ``call_id``'s unknown outcome (synced; the first answer stands)."""
        given = Answer.parse(answer)
        with self._lock:
            call = self._calls.get(call_id)
            if call is None:
                raise NotUnknownError(call_id)
            last = call.attempts[-1]
            stored = call.answers.get(last)
            if stored is not None:
                if stored[0] != given.answer:
                    raise AnswerConflictError(call_id, stored[0], given.answer)
                return
            if self._state.tools[last].status != TOOL_OUTCOME_UNKNOWN:
                raise NotUnknownError(call_id)
            data: dict[str, Any] = {"outcome": _OUTCOME_OF[given.answer], "answer": given.answer, "callId": call_id}
            if given.answer == ANSWER_HAPPENED:
                data["output"] = self._stored(given.result)
            ev = Event(type="tool.reconciled", session_id=self.session_id, time=self.clock(), tool_call_id=last,
                       data=data)
            self._append([ev], [f"tool.reconciled:{last}"], "sync", last)

    def gate(self, checks: ResumeChecks | None = None) -> GateDecision:
        """The resume gate of the scope. The guard's journal holds side effects by design, so unless
        ``checks`` say otherwise it does not ask for the grant to execute again: unknown outcomes pause."""
        with self._lock:
            return evaluate(self._state, checks or ResumeChecks(side_effect_sessions_paused=False))

    @property
    def state(self) -> SessionState:
        return self._state

    def history(self) -> list[dict[str, Any]]:
        """The scope's events as stored (for tests and ``journal cat``-like views)."""
        return [dict(rec.event) for rec in self.journal.read() if isinstance(rec.event, dict)]

    def busy(self) -> bool:
        """Whether a call this process started through this scope has no result yet."""
        with self._lock:
            return bool(self._running)

    def sync(self) -> None:
        self.journal.sync()

    def close(self) -> None:
        with self._lock:
            if not self.journal.readonly:
                self.journal.sync()
            self.journal.close()


class ToolGuard:
    """Guards of scopes, kept in ``store`` (a ``journal.api.Store``: ``journal.store(dir_or_url)``, or
    the adapter's own, which ``journal.adapters.langgraph_guard.guard_for`` takes from a saver)."""

    def __init__(self, store: Store, *, artifacts: ArtifactStore | None = None,
                 result_durability: Durability = "flush", clock: Callable[[], str] = utc_now,
                 scopes_open_max: int = SCOPES_OPEN_MAX, monotonic: Callable[[], float] = time.monotonic,
                 **journal_options: Any) -> None:
        self.clock = clock
        self.store = store
        self.artifacts = artifacts
        self.result_durability: Durability = result_durability
        self._options = journal_options
        if scopes_open_max < 1:
            raise ValueError(f"scopes_open_max must be at least 1, not {scopes_open_max}")
        self._open_max = scopes_open_max
        self._monotonic = monotonic
        # Open scopes, least recently used first, with when each was last handed out.
        self._scopes: OrderedDict[str, tuple[GuardScope, float]] = OrderedDict()
        self._lock = threading.Lock()

    def scope(self, scope_id: str) -> GuardScope:
        """The guard of ``scope_id``; opened (and repaired) on first use, then kept open while it is
        among the ``scopes_open_max`` most recently used (see ``_close_idle``)."""
        if not isinstance(scope_id, str) or not scope_id:
            raise ValueError(f"scope_id must be a non-empty string, not {scope_id!r}")
        with self._lock:
            now = self._monotonic()
            got = self._scopes.pop(scope_id, None)
            if got is None:
                j = self.store.open(journal_name(scope_id), create=True, **self._options)
                try:
                    s = GuardScope(j, scope_id, self.artifacts, self.result_durability, self.clock)
                except BaseException:
                    j.close()
                    raise
            else:
                s = got[0]
            self._scopes[scope_id] = (s, now)
            idle = self._close_idle(now)
        for old in idle:
            old.close()
        return s

    def _close_idle(self, now: float) -> list[GuardScope]:
        """Take out of the open set, for closing, the least recently used scopes beyond
        ``scopes_open_max`` (each an open journal: a file descriptor and a writer's lock) that are
        safe to close: no call of theirs is running in this process, and none was handed out in
        the last ``SCOPE_IDLE_CLOSE_S`` (a caller uses a scope right after ``scope()`` returns
        it). Where none is, the set stays over the limit until one is. A scope closed so is
        opened again, from its journal, when next asked for."""
        out: list[GuardScope] = []
        over = len(self._scopes) - self._open_max
        if over <= 0:
            return out
        for scope_id, (s, used) in list(self._scopes.items()):
            if over <= 0 or now - used < SCOPE_IDLE_CLOSE_S:
                break  # in order of use: every later one was used more recently
            if not s.busy():
                del self._scopes[scope_id]
                out.append(s)
                over -= 1
        return out

    def close(self) -> None:
        with self._lock:
            scopes, self._scopes = self._scopes, OrderedDict()
        for s, _ in scopes.values():
            s.close()

    def open_scopes(self) -> int:
        """How many scopes' journals are open now."""
        with self._lock:
            return len(self._scopes)

    def __enter__(self) -> ToolGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "ABANDON", "ANSWER_OPTIONS", "RUN_AGAIN", "Answer", "AnswerConflictError", "CallRunningError", "Decision",
    "GuardScope", "IntentNotSavedError", "NotUnknownError", "ScopeMismatchError", "ToolGuard", "ToolGuardError",
    "UnknownCall", "Verdict", "args_digest", "happened", "has_lone_surrogate", "journal_name",
]
