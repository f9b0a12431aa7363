"""An application's own types, and a graph of pydantic state, for tests/test_adapter_untrusted.py.

A module of its own, importable by name (LangGraph's serializer names a type by its module and
name), imported only by the tests that have LangGraph.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel


class Profile(BaseModel):
    name: str
    tags: list[str]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class GraphState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = []
    profile: Profile


def _start(state: GraphState) -> dict[str, Any]:
    return {"messages": [AIMessage("asked")], "profile": Profile(name=state.profile.name, tags=["asked"])}


def _ask(state: GraphState) -> dict[str, Any]:
    answer = interrupt("ok?")
    return {"messages": [AIMessage(answer)], "profile": Profile(name=state.profile.name,
                                                                 tags=[*state.profile.tags, answer])}


def build_pydantic_graph(checkpointer: Any) -> Any:
    """start, then ask (which waits at an interrupt for its answer)."""
    builder = StateGraph(GraphState)
    builder.add_node("start", _start)
    builder.add_node("ask", _ask)
    builder.add_edge(START, "start")
    builder.add_edge("start", "ask")
    return builder.compile(checkpointer=checkpointer)
