"""A LangGraph node with a side effect that survives a crash: never run twice behind your back.

    python examples/langgraph_crash_safe_tool.py demo /tmp/guard-demo

``demo`` runs the three steps below, each in a new process, and prints what each one saw:

    run DIR        the graph starts; ``deploy`` appends to DIR/deployed.log and the process is
                   killed (SIGKILL) inside it, before it returns
    resume DIR     the graph resumes: the guard does not run ``deploy`` again; it asks, through
                   LangGraph's interrupt(), with the tool, its arguments and the options
    answer DIR A   the app answers (A = happened | run_again | abandon) with
                   Command(resume=...) and the run finishes

The only lines that make the node crash-safe are ``guard = guard_for(saver)``,
``@guarded(guard, side_effect="external-write")`` and ``durability="sync"``.
"""

from __future__ import annotations

import operator
import os
import signal
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from journal.adapters.langgraph import JournalSaver
from journal.adapters.langgraph_guard import guard_for, guarded

CONFIG: Any = {"configurable": {"thread_id": "release-42"}}


class State(TypedDict, total=False):
    version: str
    log: Annotated[list[str], operator.add]


def build(directory: str, crash: bool) -> tuple[Any, JournalSaver, Any]:
    saver = JournalSaver(os.path.join(directory, "checkpoints"))
    guard = guard_for(saver)

    @guarded(guard, side_effect="external-write")
    def deploy(state: State) -> State:
        with open(os.path.join(directory, "deployed.log"), "a") as f:  # the world outside the journal
            f.write(f"deployed {state['version']} (pid {os.getpid()})\n")
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies before the node returns
        return {"log": [f"deployed {state['version']}"]}

    def announce(state: State) -> State:
        return {"log": ["announced"]}

    b = StateGraph(State)
    b.add_node("deploy", deploy)
    b.add_node("announce", announce)
    b.add_edge(START, "deploy")
    b.add_edge("deploy", "announce")
    b.add_edge("announce", END)
    return b.compile(checkpointer=saver), saver, guard


def step(directory: str, what: str, answer: str | None = None) -> dict[str, Any]:
    graph, saver, guard = build(directory, crash=what == "run")
    try:
        if what == "run":
            graph.invoke({"version": "v2"}, CONFIG, durability="sync")
        elif what == "resume":
            graph.invoke(None, CONFIG, durability="sync")
        else:
            resume: Any = {"answer": "happened", "result": {"log": ["deployed v2 (checked by hand)"]}} \
                if answer == "happened" else answer
            graph.invoke(Command(resume=resume), CONFIG, durability="sync")
        state = graph.get_state(CONFIG)
        return {"asks": [i.value for i in state.interrupts], "finished": not state.next,
                "log": state.values.get("log", [])}
    finally:
        guard.close()
        saver.close()


if __name__ == "__main__":
    from crash_demo import main  # examples/crash_demo.py: the demo's three lives, the same for every framework

    main(__file__, step, "log")
