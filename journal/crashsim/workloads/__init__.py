"""The workloads the crash harness runs, all of them registered by importing this package.

    core              single, batch, group, rollover, recovery: the engine's own
    session_repair    session-repair: a power loss inside a structural repair
    session_fork      session-fork: a power loss inside a fork
    session_snapshot  session-snapshot: a power loss inside a snapshot save
    shared_writers    shared-writers: two shared-mode handles taking turns (journal/engine/shared.py)
    retention         retention: seal, append what stays, drop the prefix before it
    toolguard         toolguard: a power loss over the tool guard's intent and result writes

Importing any module of the package (``journal.crashsim.workloads.core`` included) runs this
file first, so the set of workloads a campaign sees never depends on which other modules
happened to be imported before (a test module, the command). ``BUILTIN`` names them; a new
built-in workload goes in a module listed here and in ``BUILTIN``, and ``builtin()`` refuses to
run if the two disagree. Your own workloads join with ``@workload`` (docs/CRASH-TESTING.md, 5).
"""

from __future__ import annotations

from journal.crashsim.workloads import (
    core,
    retention,
    session_fork,
    session_repair,
    session_snapshot,
    shared_writers,
    toolguard,
)
from journal.crashsim.workloads.core import WORKLOADS, Ctx, Ledger, RecordingJournal, Workload, workload

ENGINE = ("single", "batch", "group", "rollover", "recovery", "shared-writers", "retention")
SESSION = ("session-repair", "session-fork", "session-snapshot", "toolguard")
BUILTIN = ENGINE + SESSION
MODULES = (core, shared_writers, retention, session_repair, session_fork, session_snapshot, toolguard)


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
