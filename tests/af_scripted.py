"""A scripted chat client for Agent Framework agents (no network), shared by the Agent Framework tests.

The framework ships no fake client in its package, so this is the smallest real one: a
``BaseChatClient`` with the framework's own function-invocation layer (so tools, function
middleware and the tool loop run as with any provider), whose answers come from a function of
the messages it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_framework import BaseChatClient, ChatResponse, Content, Message
from agent_framework._tools import FunctionInvocationLayer

Respond = Callable[[list[Message]], list[Message]]


class ScriptedClient(FunctionInvocationLayer[Any], BaseChatClient[Any]):
    """Answers every request with ``respond(messages)``."""

    def __init__(self, respond: Respond, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.respond = respond
        self.requests = 0

    async def _answer(self, messages: Sequence[Message]) -> ChatResponse[Any]:
        self.requests += 1
        return ChatResponse(messages=self.respond(list(messages)))

    def _inner_get_response(self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any],
                            **kwargs: Any) -> Any:
        return self._answer(messages)


def function_call(name: str, args: dict[str, Any], call_id: str) -> Message:
    return Message(role="assistant", contents=[Content.from_function_call(call_id=call_id, name=name,
                                                                          arguments=json.dumps(args))])


def text(value: str) -> Message:
    return Message(role="assistant", contents=[value])


def results_of(messages: Sequence[Message], name: str) -> list[dict[str, Any]]:
    """The arguments of every ``name`` call that has a result in ``messages``, in result order."""
    calls = {c.call_id: json.loads(c.arguments) if isinstance(c.arguments, str) else dict(c.arguments or {})
             for m in messages for c in m.contents if c.type == "function_call" and c.name == name}
    return [calls[c.call_id] for m in messages for c in m.contents
            if c.type == "function_result" and c.call_id in calls]
