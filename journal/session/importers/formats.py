"""The four source formats: what each line means in the session vocabulary.

Each mapper is a pure function from one parsed line to session events (``Mapped``); anything
it does not recognise maps to nothing and is kept as an ``import.record``. The structures
followed are the ones each runtime writes:

* jsonl: plain event logs, one object per line. Objects whose ``type`` is a session type, or a
  common alias (``user_message``, ``assistant``, ``tool_call``, ``tool_result`` ...), are mapped;
  the rest are kept.
* codex: OpenAI Codex rollout files (``rollout-*.jsonl``): ``{"timestamp", "type", "payload"}``
  with ``session_meta``, ``response_item`` (message, function_call, custom_tool_call,
  local_shell_call, *_output, reasoning), ``event_msg`` (user_message, task_started,
  task_complete, turn_aborted, token_count ...), ``turn_context`` and ``compacted``.
* pi: pi session files: a ``session`` header, then entries with ``id``/``parentId`` (a tree):
  ``message`` (role user, assistant with text / toolCall parts, toolResult), ``compaction``,
  ``model_change``, ``thinking_level_change``, ``branch_summary`` ...
* claude: Claude Code transcripts: ``user`` / ``assistant`` lines (Anthropic message content
  blocks: text, tool_use, tool_result, thinking) chained by ``uuid``/``parentUuid``, ``system``
  lines (``turn_duration`` ends a turn), ``summary`` and ``file-history-snapshot`` lines.
"""

from __future__ import annotations

from typing import Any

from journal.session.importers.base import Mapped
from journal.session.importers.lines import SourceLine, load_json


def _text_of(content: Any, kinds: tuple[str, ...] = ("text", "input_text", "output_text")) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") in kinds]
        texts = [p for p in parts if isinstance(p, str)]
        return "\n".join(texts) if texts else None
    return None


def _tool(call_id: Any, name: Any, args: Any) -> list[Mapped]:
    cid = call_id if isinstance(call_id, str) else None
    data = {"tool": name if isinstance(name, str) else None, "args": args, "sideEffect": "unknown",
            "idempotency": "unsafe"}
    return [Mapped("tool.requested", data, tool_call_id=cid), Mapped("tool.started", {}, tool_call_id=cid)]


def _result(call_id: Any, output: Any, is_error: bool) -> Mapped:
    cid = call_id if isinstance(call_id, str) else None
    return Mapped("tool.result", {"status": "error" if is_error else "ok", "output": output}, tool_call_id=cid)


def _compaction(cid: str, summary: Any) -> list[Mapped]:
    return [Mapped("compaction.started", {"compactionId": cid}),
            Mapped("compaction.ended", {"compactionId": cid, "summary": summary if isinstance(summary, str) else None})]


def _first(lines: list[SourceLine], *keys: str) -> str | None:
    for ln in lines:
        if ln.obj is None:
            continue
        for key in keys:
            v = ln.obj.get(key)
            if isinstance(v, str) and v:
                return v
    return None


class JsonlFormat:
    name = "jsonl"
    description = "plain JSONL event log, one object per line"

    USER = frozenset({"user.message", "user_message", "user"})
    ASSISTANT = frozenset({"assistant.message", "assistant_message", "assistant"})
    TOOL_CALL = frozenset({"tool.requested", "tool_requested", "tool_call", "tool_use", "function_call"})
    TOOL_RESULT = frozenset({"tool.result", "tool_result", "function_call_output"})

    def session_info(self, lines: list[SourceLine]) -> tuple[str | None, str | None]:
        return _first(lines, "sessionId", "session_id"), _first(lines, "cwd")

    def map(self, obj: dict[str, Any], lineno: int) -> list[Mapped]:
        t = obj.get("type")
        if not isinstance(t, str):  # a type of another JSON kind (a list, an object) names nothing mapped
            return []
        text = _text_of(obj.get("text", obj.get("content", obj.get("message"))))
        call = obj.get("toolCallId", obj.get("tool_call_id", obj.get("call_id", obj.get("id"))))
        if t in self.USER:
            return [Mapped("user.message", {"text": text}, starts_turn=True)]
        if t in self.ASSISTANT:
            return [Mapped("assistant.message", {"text": text})]
        if t in self.TOOL_CALL:
            args = obj.get("args", obj.get("arguments", obj.get("input")))
            return _tool(call, obj.get("tool", obj.get("name")), args)
        if t in self.TOOL_RESULT:
            return [_result(call, obj.get("output", obj.get("result", obj.get("content"))),
                            bool(obj.get("isError") or obj.get("is_error")))]
        return []


class CodexFormat:
    name = "codex"
    description = "OpenAI Codex rollout file (rollout-*.jsonl)"

    def session_info(self, lines: list[SourceLine]) -> tuple[str | None, str | None]:
        for ln in lines:
            if ln.obj is not None and ln.obj.get("type") == "session_meta" and isinstance(ln.obj.get("payload"), dict):
                p = ln.obj["payload"]
                sid, cwd = p.get("id"), p.get("cwd")
                return (sid if isinstance(sid, str) else None, cwd if isinstance(cwd, str) else None)
        return None, None

    def map(self, obj: dict[str, Any], lineno: int) -> list[Mapped]:
        t = obj.get("type")
        p = obj.get("payload")
        if not isinstance(p, dict):
            return []
        pt = p.get("type")
        if t == "session_meta":
            cwd = p.get("cwd")
            return [Mapped("session.started", {"workspace": {"path": cwd} if isinstance(cwd, str) else {}})]
        if t == "compacted":
            return _compaction(f"line-{lineno}", p.get("message"))
        if t == "event_msg":
            if pt == "task_started":
                return [Mapped("turn.started", {}, turn_id=p.get("turn_id") if isinstance(p.get("turn_id"), str)
                               else None)]
            if pt == "task_complete":
                return [Mapped("turn.ended", {"reason": "completed"})]
            if pt == "turn_aborted":
                return [Mapped("turn.ended", {"reason": "cancelled"})]
            if pt == "user_message":
                return [Mapped("import.record", starts_turn=True)]  # the UI's copy of the prompt
            return []
        if t != "response_item":
            return []
        if pt == "message":
            role = p.get("role")
            text = _text_of(p.get("content"))
            if role == "user":
                return [Mapped("user.message", {"text": text})]
            if role == "assistant":
                return [Mapped("assistant.message", {"text": text})]
            return []
        if pt in ("function_call", "custom_tool_call"):
            raw_args = p.get("arguments", p.get("input"))
            args: Any = raw_args
            if isinstance(raw_args, str):
                try:
                    args = load_json(raw_args)
                except ValueError:  # not JSON, or nested too deep to store: kept as the string it is
                    args = raw_args
            return _tool(p.get("call_id"), p.get("name"), args)
        if pt == "local_shell_call":
            return _tool(p.get("call_id") or p.get("id"), "local_shell", p.get("action"))
        if pt in ("function_call_output", "custom_tool_call_output"):
            return [_result(p.get("call_id"), p.get("output"), False)]
        return []


class PiFormat:
    name = "pi"
    description = "pi session file (id/parentId entries)"

    def session_info(self, lines: list[SourceLine]) -> tuple[str | None, str | None]:
        for ln in lines:
            if ln.obj is not None and ln.obj.get("type") == "session":
                sid, cwd = ln.obj.get("id"), ln.obj.get("cwd")
                return (sid if isinstance(sid, str) else None, cwd if isinstance(cwd, str) else None)
        return None, None

    def map(self, obj: dict[str, Any], lineno: int) -> list[Mapped]:
        t = obj.get("type")
        if t == "session":
            cwd = obj.get("cwd")
            return [Mapped("session.started", {"workspace": {"path": cwd} if isinstance(cwd, str) else {}})]
        if t == "compaction":
            pid = obj.get("id")
            return _compaction(pid if isinstance(pid, str) else f"line-{lineno}", obj.get("summary"))
        if t != "message" or not isinstance(obj.get("message"), dict):
            return []
        m = obj["message"]
        role = m.get("role")
        content = m.get("content")
        if role == "user":
            return [Mapped("user.message", {"text": _text_of(content)}, starts_turn=True)]
        if role == "assistant":
            out: list[Mapped] = []
            text = _text_of(content)
            if text is not None:
                out.append(Mapped("assistant.message", {"text": text}))
            for part in content if isinstance(content, list) else []:
                if isinstance(part, dict) and part.get("type") == "toolCall":
                    out.extend(_tool(part.get("id"), part.get("name"), part.get("arguments")))
            return out
        if role == "toolResult":
            return [_result(m.get("toolCallId"), content, bool(m.get("isError")))]
        return []


class ClaudeFormat:
    name = "claude"
    description = "Claude Code transcript (~/.claude/projects/*/SESSION.jsonl)"

    def session_info(self, lines: list[SourceLine]) -> tuple[str | None, str | None]:
        return _first(lines, "sessionId"), _first(lines, "cwd")

    def map(self, obj: dict[str, Any], lineno: int) -> list[Mapped]:
        t = obj.get("type")
        msg = obj.get("message")
        if t == "system":
            if obj.get("subtype") == "turn_duration":
                return [Mapped("turn.ended", {"reason": "completed"})]
            return []
        if t not in ("user", "assistant") or not isinstance(msg, dict):
            return []
        content = msg.get("content")
        if t == "user":
            if obj.get("isCompactSummary"):
                uid = obj.get("uuid")
                return _compaction(uid if isinstance(uid, str) else f"line-{lineno}", _text_of(content))
            if isinstance(content, str):
                return [Mapped("user.message", {"text": content}, starts_turn=not obj.get("isMeta"))]
            out: list[Mapped] = []
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append(_result(block.get("tool_use_id"), block.get("content"), bool(block.get("is_error"))))
            text = _text_of(content)
            if text is not None:
                out.append(Mapped("user.message", {"text": text}, starts_turn=not obj.get("isMeta")))
            return out
        out = []
        text = _text_of(content)
        if text is not None:
            out.append(Mapped("assistant.message", {"text": text}))
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                out.extend(_tool(block.get("id"), block.get("name"), block.get("input")))
        return out


FORMATS: dict[str, Any] = {f.name: f for f in (JsonlFormat(), CodexFormat(), PiFormat(), ClaudeFormat())}
