"""The workloads the crash harness runs, all of them registered by importing this package.

    core              single, batch, group, rollover, recovery: the engine's own
    session_repair    session-repair: a power loss inside a structural repair
    session_fork      session-fork: a power loss inside a fork
    session_snapshot  session-snapshot: a power loss inside a snapshot save
    session_open      session-open: a power loss while a session opens from its snapshot,
                      repairs, appends and saves snapshots
    session_fork_chain  session-fork-chain: a power loss inside a fork deep in a chain of forks,
                      one that merges small sealed segments
    shared_writers    shared-writers: two shared-mode handles taking turns (journal/engine/shared.py)
    retention         retention: seal, append what stays, drop the prefix before it
    toolguard         toolguard: a power loss over the tool guard's intent and result writes
    dictionary        dictionary: a power loss while a journal installs, writes with, switches and
                      reuses trained zstd dictionaries (written, or hard-linked from a stored file)

Importing any module of the package (``journal.crashsim.workloads.core`` included) runs this
file first, so the set of workloads a campaign sees never depends on which other modules
happened to be imported before (a test module, the command). ``BUILTIN`` names them; a new
built-in workload goes in a module listed here and in ``BUILTIN``, and ``builtin()`` refuses to
run if the two disagree. Your own workloads join with ``@workload`` (docs/CRASH-TESTING.md, 5).

The workloads over an optional framework are not built in (the default run is the built-in set,
and the frameworks may be missing): each lives in a module of ``ON_DEMAND``, whose ``register()``
adds its workloads when its framework imports, and ``register_on_demand`` is the one place the
command asks for them (when it lists, replays or is named one).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from journal.crashsim.workloads import (
    core,
    dictionary,
    retention,
    session_fork,
    session_fork_chain,
    session_open,
    session_repair,
    session_snapshot,
    shared_writers,
    toolguard,
)
from journal.crashsim.workloads.core import WORKLOADS, Ctx, Ledger, RecordingJournal, Workload, workload

ENGINE = ("single", "batch", "group", "rollover", "recovery", "shared-writers", "retention", "dictionary")
SESSION = (
    "session-repair",
    "session-fork",
    "session-snapshot",
    "session-open",
    "session-fork-chain",
    "toolguard",
)
BUILTIN = ENGINE + SESSION
MODULES = (
    core,
    shared_writers,
    retention,
    session_repair,
    session_fork,
    session_snapshot,
    session_open,
    session_fork_chain,
    toolguard,
    dictionary,
)


# Modules of workloads over optional frameworks: each has NAME (or NAMES) and register().
ON_DEMAND = ("guard_frameworks", "guard_strands", "guard_agent_framework", "claude_sdk")


def _on_demand_modules() -> list[Any]:
    return [importlib.import_module(f"{__name__}.{m}") for m in ON_DEMAND]


def register_on_demand(names: Iterable[str] | None = None) -> None:
    """Register the on-demand workloads among ``names`` (all of them for None) whose framework
    is installed; a name of no on-demand module is left to the caller's own check."""
    wanted = None if names is None else set(names)
    for m in _on_demand_modules():
        own = set(getattr(m, "NAMES", (getattr(m, "NAME", ""),)))
        if wanted is None or own & wanted:
            m.register()


def builtin() -> dict[str, Workload]:
    """The built-in workloads by name, in a fixed order; raises if one is not registered."""
    missing = [name for name in BUILTIN if name not in WORKLOADS]
    if missing:
        raise LookupError(f"built-in workload(s) not registered: {', '.join(missing)} (see {__name__})")
    return {name: WORKLOADS[name] for name in BUILTIN}


__all__ = [
    "BUILTIN",
    "ENGINE",
    "MODULES",
    "SESSION",
    "WORKLOADS",
    "Ctx",
    "Ledger",
    "RecordingJournal",
    "Workload",
    "builtin",
    "workload",
]
