"""A scripted Strands model for the tests: each call to the model streams the next scripted
assistant message (text, or tool uses), so a real ``strands.Agent`` runs without a provider."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from strands.models import Model


def text_reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"text": text}]}


def tool_reply(*uses: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """An assistant message asking for tools: (toolUseId, name, input) each."""
    return {"role": "assistant", "content": [{"toolUse": {"toolUseId": i, "name": n, "input": a}} for i, n, a in uses]}


class ScriptedModel(Model):
    """Streams ``replies`` in order, one per model call (past the end it answers "done"), or, given
    a function, its reply to the messages of each call."""

    def __init__(self, replies: Sequence[dict[str, Any]] | Callable[[list[dict[str, Any]]], dict[str, Any]]) -> None:
        self.replies = list(replies) if not callable(replies) else []
        self.respond = replies if callable(replies) else None
        self.calls = 0
        self.seen: list[list[dict[str, Any]]] = []  # the messages each call was given

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None,
                                **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError("the scripted model gives no structured output")
        yield  # pragma: no cover

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None,
                     **kwargs: Any) -> AsyncGenerator[Any, None]:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        if self.respond is not None:
            reply = self.respond(self.seen[-1])
        else:
            reply = self.replies[self.calls] if self.calls < len(self.replies) else text_reply("done")
        self.calls += 1
        stop = "end_turn"
        yield {"messageStart": {"role": "assistant"}}
        for block in reply["content"]:
            if "text" in block:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": block["text"]}}}
                yield {"contentBlockStop": {}}
            if "toolUse" in block:
                stop = "tool_use"
                use = block["toolUse"]
                start = {"toolUse": {"name": use["name"], "toolUseId": use["toolUseId"]}}
                yield {"contentBlockStart": {"start": start}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(use["input"])}}}}
                yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}
