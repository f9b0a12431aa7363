"""The JSON-document formats: what each element means in the session vocabulary.

Each is one JSON document, kept exactly by documents.py; these walk its value. The structures
followed are the ones each runtime writes:

* swe-agent: SWE-agent trajectories (``*.traj``): an object with ``history`` (chat messages:
  ``role`` system / user / assistant / tool, ``message_type``, ``is_demo`` for demonstrations),
  and in most files ``trajectory`` (steps: ``action``, ``observation``, ``thought``,
  ``response``) and ``info`` (``exit_status``, ``submission``). Function calling: an assistant
  message's ``tool_calls`` (``id``, ``function.name``, ``function.arguments`` as JSON text) and
  ``role: tool`` replies naming them in ``tool_call_ids``. The older text-action form: an
  assistant message's ``action`` (a command line) answered by the next user message, the
  observation; its call id is ``history-N`` (N the message's index). A file whose ``history``
  records no action (or that has none) is read from ``trajectory``: each step a call
  (``trajectory-N``) answered by its observation.
* mini-swe-agent: mini-swe-agent trajectories (``*.traj.json``): an object with ``messages``
  (and ``info``, ``trajectory_format``), or a bare array of messages. An assistant message's one
  ``bash`` code block is a call (``messages-N``) answered by the next user message; a
  tool-calling model's ``tool_calls`` and ``role: tool`` messages are read as in SWE-agent; a
  ``role: exit`` message ends the turn.
* openhands: OpenHands trajectory exports: an array of events (or ``{"trajectory": [...]}``),
  each an ``action`` or an ``observation`` with ``source``; an action with
  ``tool_call_metadata`` is a call under its ``tool_call_id``, and so is any other action but a
  message, think or finish (under ``event-ID``); an observation answers the call its
  ``tool_call_metadata`` or ``cause`` names. A user ``message`` starts a turn, ``finish`` ends it.
* gemini: Gemini CLI chat sessions (``~/.gemini/tmp/<project>/chats/session-*.json``):
  ``sessionId``, ``startTime``, ``messages`` of ``type`` user / gemini / info / error / warning;
  a gemini message's ``toolCalls`` carry their own ``result`` and ``status``: success is an ok
  result, error or cancelled an error result, any other status (scheduled, executing ...) no
  result yet, so the call is closed as unknown.

In every format the first user message (the task) starts a turn, and the document's end closes
its calls left without a result (documents.py); the turn ends where the source says the run
ended (``info.exit_status``, a finish action, an exit message), else it stays open, as base.py
says of every log that stops mid-turn.
"""

from __future__ import annotations

import re
from typing import Any

from journal.session.importers.documents import DocBuilder, Skip, parse_json
from journal.session.importers.formats import _text_of
from journal.session.importers.lines import load_json

_TEXTS = ("text", "input_text", "output_text")


def _args(raw: Any) -> Any:
    """A call's arguments: JSON text parsed where it is JSON (kept as the string otherwise)."""
    if isinstance(raw, str):
        try:
            return load_json(raw)
        except ValueError:
            return raw
    return raw


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _tool_calls(b: DocBuilder, calls: Any, at: str, when: Any) -> int:
    """OpenAI-style ``tool_calls`` of an assistant message, as calls; how many."""
    n = 0
    for j, tc in enumerate(b.want(calls, list, f"{at}/tool_calls", "tool_calls")):
        here = f"{at}/tool_calls/{j}"
        try:
            tc = b.want(tc, dict, here, "a tool call")
            fn = b.want(tc.get("function", {}), dict, f"{here}/function", "a tool call's function")
            b.call(tc.get("id"), fn.get("name"), _args(fn.get("arguments")), here, when)
            n += 1
        except Skip:
            continue
    return n


def _tool_reply(b: DocBuilder, msg: dict[str, Any], at: str, when: Any) -> None:
    """A ``role: tool`` message: the result of each call it names."""
    if "tool_call_ids" in msg:
        ids = b.want(msg["tool_call_ids"], list, f"{at}/tool_call_ids", "tool_call_ids")
        where = [f"{at}/tool_call_ids/{k}" for k in range(len(ids))]
    else:
        ids, where = [msg.get("tool_call_id")], [f"{at}/tool_call_id"]
    output = msg.get("content")
    for cid, here in zip(ids, where, strict=True):
        try:
            b.result(cid, output, False, here, when)
        except Skip:
            continue


def _acts(history: Any) -> bool:
    """Whether a SWE-agent history records the agent's actions (``tool_calls`` or ``action``)."""
    return isinstance(history, list) and any(
        isinstance(m, dict) and m.get("role") == "assistant" and (m.get("tool_calls") or m.get("action"))
        for m in history)


def _end_by_info(b: DocBuilder, doc: Any) -> None:
    info = doc.get("info") if isinstance(doc, dict) else None
    status = info.get("exit_status") if isinstance(info, dict) else None
    if isinstance(status, str):
        b.end_turn("completed", "/info/exit_status", None, exitStatus=status)


class _Json:
    document = True

    def parse(self, data: bytes, source: str) -> Any:
        return parse_json(data, source)


class SweAgentFormat(_Json):
    name = "swe-agent"
    description = "SWE-agent trajectory (*.traj: function calling or text actions)"

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        return None, None, None

    def walk(self, doc: Any, b: DocBuilder) -> None:
        try:
            doc = b.want(doc, dict, "/", "the trajectory")
        except Skip:
            return
        if doc.get("trajectory") and not _acts(doc.get("history")):
            self._steps(doc["trajectory"], b)  # a history of messages only: the steps hold the actions
        elif doc.get("history") is not None:
            self._history(doc["history"], b)
        _end_by_info(b, doc)

    def _history(self, history: Any, b: DocBuilder) -> None:
        pending: str | None = None  # a text action's call, answered by the next user message
        asked = False
        try:
            items = b.want(history, list, "/history", "history")
        except Skip:
            return
        for i, msg in enumerate(items):
            at = f"/history/{i}"
            try:
                msg = b.want(msg, dict, at, "a history message")
                if msg.get("is_demo"):
                    continue  # a demonstration from the prompt, not this run
                role = msg.get("role")
                text = _text_of(msg.get("content"), _TEXTS)
                if role == "user":
                    if pending is not None:
                        b.result(pending, msg.get("content"), False, at, None)
                        pending = None
                    else:
                        b.user(text, at, None, starts_turn=not asked)
                        asked = True
                elif role == "assistant":
                    b.assistant(text, at, None, thought=_str(msg.get("thought")))
                    if msg.get("tool_calls") is not None:
                        _tool_calls(b, msg["tool_calls"], at, None)
                    elif isinstance(msg.get("action"), str) and msg["action"].strip():
                        action = msg["action"]
                        pending = b.call(f"history-{i}", action.split()[0], {"command": action}, at, None)
                elif role == "tool":
                    _tool_reply(b, msg, at, None)
            except Skip:
                continue

    def _steps(self, steps: Any, b: DocBuilder) -> None:
        try:
            items = b.want(steps, list, "/trajectory", "trajectory")
        except Skip:
            return
        for i, step in enumerate(items):
            at = f"/trajectory/{i}"
            try:
                step = b.want(step, dict, at, "a trajectory step")
                b.assistant(_str(step.get("response")), at, None, thought=_str(step.get("thought")))
                action = step.get("action")
                if isinstance(action, str) and action.strip():
                    cid = b.call(f"trajectory-{i}", action.split()[0], {"command": action}, at, None)
                    if "observation" in step:
                        b.result(cid, step["observation"], False, f"{at}/observation", None)
            except Skip:
                continue


_BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)
_CLOSE = "\n```"


def _bash_blocks(text: str) -> list[str]:
    """_BASH_BLOCK's blocks in ``text``, searched up to its last closing only: an opening after it
    cannot close, and each such opening scanned to the text's end (quadratic in a text of
    openings); every block ends at or before the last closing, so the blocks are the same."""
    end = text.rfind(_CLOSE)
    return _BASH_BLOCK.findall(text, 0, end + len(_CLOSE)) if end >= 0 else []


class MiniSweAgentFormat(_Json):
    name = "mini-swe-agent"
    description = "mini-swe-agent trajectory (*.traj.json, or a bare array of messages)"

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        return None, None, None

    def walk(self, doc: Any, b: DocBuilder) -> None:
        if isinstance(doc, dict):
            base, messages = "/messages", doc.get("messages")
        else:
            base, messages = "", doc
        try:
            items = b.want(messages, list, base or "/", "messages")
        except Skip:
            return
        pending: str | None = None
        asked = False
        for i, msg in enumerate(items):
            at = f"{base}/{i}"
            try:
                msg = b.want(msg, dict, at, "a message")
                role = msg.get("role")
                content = msg.get("content")
                text = _text_of(content, _TEXTS)
                if role == "user":
                    if pending is not None:
                        b.result(pending, content, False, at, None)
                        pending = None
                    else:
                        b.user(text, at, None, starts_turn=not asked)
                        asked = True
                elif role == "assistant":
                    b.assistant(text, at, None)
                    if msg.get("tool_calls"):
                        _tool_calls(b, msg["tool_calls"], at, None)
                    else:
                        blocks = _bash_blocks(text or "")
                        if len(blocks) == 1:  # the agent runs exactly one; another count is a format error
                            pending = b.call(f"messages-{i}", "bash", {"command": blocks[0]}, at, None)
                elif role == "tool":
                    _tool_reply(b, msg, at, None)
                elif role == "exit":
                    extra = msg.get("extra")
                    status = extra.get("exit_status") if isinstance(extra, dict) else None
                    b.end_turn("completed", at, None, exitStatus=_str(status))
            except Skip:
                continue
        _end_by_info(b, doc)


_NOT_TOOLS = frozenset({"message", "system", "think", "finish", "change_agent_state", "null", "recall",
                        "condensation", "reject"})


class OpenHandsFormat(_Json):
    name = "openhands"
    description = "OpenHands trajectory export (a JSON array of events)"

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        events = doc.get("trajectory") if isinstance(doc, dict) else doc
        first = events[0] if isinstance(events, list) and events and isinstance(events[0], dict) else {}
        return None, None, _str(first.get("timestamp"))

    def walk(self, doc: Any, b: DocBuilder) -> None:
        base, events = ("/trajectory", doc.get("trajectory")) if isinstance(doc, dict) else ("", doc)
        try:
            items = b.want(events, list, base or "/", "the events")
        except Skip:
            return
        call_of_event: dict[Any, str] = {}  # an action's id -> its call id
        known: set[Any] = set()
        for i, ev in enumerate(items):
            at = f"{base}/{i}"
            try:
                ev = b.want(ev, dict, at, "an event")
                self._event(ev, at, b, call_of_event, known)
            except Skip:
                continue
            finally:
                if isinstance(ev, dict) and isinstance(ev.get("id"), (int, str)):
                    known.add(ev["id"])

    def _event(self, ev: dict[str, Any], at: str, b: DocBuilder, call_of_event: dict[Any, str],
               known: set[Any]) -> None:
        when = ev.get("timestamp")
        meta = ev.get("tool_call_metadata")
        if meta is not None:
            meta = b.want(meta, dict, f"{at}/tool_call_metadata", "tool_call_metadata")
        raw_args = ev.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        if "action" in ev:
            action = ev["action"]
            if action == "message":
                text = _str(args.get("content")) or _str(ev.get("message"))
                if ev.get("source") == "user":
                    b.user(text, at, when)
                else:
                    b.assistant(text, at, when)
            elif action == "finish":
                b.assistant(_str(ev.get("message")), at, when)
                b.end_turn("completed", at, when)
            elif meta is not None or action not in _NOT_TOOLS:
                cid = meta.get("tool_call_id") if meta is not None else f"event-{ev.get('id')}"
                name = meta.get("function_name") if meta is not None else action
                cid = b.call(cid, name if isinstance(name, str) else action, ev.get("args"), at, when)
                call_of_event[ev.get("id")] = cid
            return
        if "observation" not in ev:
            return
        output = ev.get("content")
        failed = ev.get("observation") == "error"
        if meta is not None:
            b.result(meta.get("tool_call_id"), output, failed, at, when, observation=ev.get("observation"))
        elif ev.get("cause") in call_of_event:
            b.result(call_of_event[ev["cause"]], output, failed, at, when, observation=ev.get("observation"))
        elif "cause" in ev and ev["cause"] is not None and ev["cause"] not in known:
            b.defect(f"{at}/cause", "orphan-result", f"an observation caused by event {ev['cause']!r}, which is not "
                     "an event before it")


def _parts_text(content: Any) -> str | None:
    """A Gemini message's text: a string, or parts (``{"text": ...}``, one or a list)."""
    if isinstance(content, str):
        return content
    parts = [content] if isinstance(content, dict) else content if isinstance(content, list) else []
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts) if texts else None


class GeminiFormat(_Json):
    name = "gemini"
    description = "Gemini CLI chat session (chats/session-*.json)"

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        if not isinstance(doc, dict):
            return None, None, None
        return _str(doc.get("sessionId")), None, _str(doc.get("startTime"))

    def walk(self, doc: Any, b: DocBuilder) -> None:
        try:
            doc = b.want(doc, dict, "/", "the session")
            items = b.want(doc.get("messages"), list, "/messages", "messages")
        except Skip:
            return
        for i, msg in enumerate(items):
            at = f"/messages/{i}"
            try:
                msg = b.want(msg, dict, at, "a message")
                kind = msg.get("type")
                when = msg.get("timestamp")
                text = _parts_text(msg.get("content"))
                if kind == "user":
                    b.user(text, at, when, turn_id=None)
                elif kind == "gemini":
                    b.assistant(text, at, when, model=_str(msg.get("model")))
                    if msg.get("toolCalls") is not None:
                        self._calls(b, msg["toolCalls"], at, when)
            except Skip:
                continue

    def _calls(self, b: DocBuilder, calls: Any, at: str, when: Any) -> None:
        for j, tc in enumerate(b.want(calls, list, f"{at}/toolCalls", "toolCalls")):
            here = f"{at}/toolCalls/{j}"
            try:
                tc = b.want(tc, dict, here, "a tool call")
                t = tc.get("timestamp", when)
                cid = b.call(tc.get("id"), tc.get("name"), tc.get("args"), here, t)
                status = tc.get("status")
                if status in ("success", "error", "cancelled"):
                    output = tc["result"] if tc.get("result") is not None else tc.get("resultDisplay")
                    b.result(cid, output, status != "success", here, t, outcome=status)
            except Skip:
                continue


DOCUMENT_FORMATS: dict[str, Any] = {
    f.name: f for f in (GeminiFormat(), SweAgentFormat(), MiniSweAgentFormat(), OpenHandsFormat())
}
