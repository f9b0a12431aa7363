"""What the four framework tool-guard tests (tests/test_guard_*.py) share: killing a tool's life.

Each of those tests runs a real agent framework whose guarded ``deploy`` tool appends a line to a
side file outside the journal, kills the app with SIGKILL at a chosen point of that tool's life,
resumes it in a new process, answers the guard's question, and checks that the tool ran at most
once unless the answer was "run_again". The framework files keep what differs (the app, its
scripted model, how the framework surfaces and answers an unknown call); this module holds what is
the same for all of them, so a change to the kill points, the side file or the random rounds is
made once:

- ``KillPlan`` and ``kill_hooks``: where the process dies, forced by hooks, never by sleeps;
- ``deploy_side_effect`` and ``tool_runs``: the tool's effect outside the journal, and its count;
- ``in_child``: one life of the app in a forked child (the framework is imported once, here);
- ``GUARD_ON``: ``JOURNAL_GUARD_OFF=1`` runs the same tests without the guard, and they must fail;
- ``assert_asks_about_unknown_call``, ``truthful_answer``, ``same_on_every_load``: the checks;
- ``random_kill_rounds``: the random-kill rounds (``JOURNAL_GUARD_ROUNDS``, ``JOURNAL_CRASH_SEED``);
- ``missing_framework_reason``, ``run_example_demo``: the framework's presence, and its example's demo.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# JOURNAL_GUARD_OFF=1 builds every app without the guard (the plain tool), to show the tests catch
# the failure the guard exists for: they must fail then (the tool runs twice, nothing is asked).
GUARD_ON = os.environ.get("JOURNAL_GUARD_OFF") != "1"
ROUNDS = int(os.environ.get("JOURNAL_GUARD_ROUNDS", "20"))  # random-kill rounds per test

# The points of a guarded tool's life a test can kill the process at, in the order they happen.
POINTS = ("before_intent", "after_intent", "mid_tool", "before_result", "after_result", "after")
# Whether a kill at that point leaves a call whose outcome is unknown (the guard must ask): only
# between a durable intent and a durable result can the tool have run without the journal knowing.
EXPECT_UNKNOWN = {"before_intent": False, "after_intent": True, "mid_tool": True, "before_result": True,
                  "after_result": False, "after": False}
TOOL = "deploy"  # the guarded tool every framework test's app calls
ANSWERS = ("happened", "run_again", "abandon")  # the guard's options, in the order it offers them
UNKNOWN_KIND = "journal.tool_outcome_unknown"  # the payload kind of the guard's question
SIDE_FILE = "side.log"  # under a test's directory: one line per tool run, outside every journal
CHILD_READ_BYTES = 65536  # one read of a child's answer from its pipe
EXAMPLE_TIMEOUT_S = 300  # an example's whole demo: several processes, each importing its framework
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

T = TypeVar("T")


def missing_framework_reason(module: str, extra: str) -> str:
    """The skip reason for ``pytest.importorskip(module, reason=...)`` (the one call ruff lets stand
    before a test module's framework imports). In CI (``JOURNAL_REQUIRE_FRAMEWORKS=1``) the guard's
    suites must run, not skip: there it imports ``module`` first, so a missing one fails the module."""
    if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":
        importlib.import_module(module)
    return f"the {extra} extra is not installed (pip install -e '.[{extra}]')"


def kill_this_process() -> None:
    """SIGKILL: no handler, no flush, no atexit -- what a crash leaves is what the next life sees."""
    os.kill(os.getpid(), signal.SIGKILL)


class KillPlan:
    """Kill this process the ``at``-th time ``point`` is reached; ``KillPlan(None)`` never kills."""

    def __init__(self, point: str | None, at: int = 1) -> None:
        self.point, self.at, self.seen = point, at, 0

    def reached(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.at:
                kill_this_process()


class _KillHookedJournal:
    """A guard journal whose intent and result batches reach the plan's points around the append:
    before it (nothing durable yet) and after it (durable, the caller not yet told)."""

    def __init__(self, inner: Any, plan: KillPlan) -> None:
        self._inner, self._plan = inner, plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def append_many(self, events: Any, *args: Any, **kw: Any) -> Any:
        events = list(events)
        types = {e.get("type") for e in events}
        kind = "intent" if "tool.requested" in types else "result" if "tool.result" in types else None
        if kind is not None:
            self._plan.reached(f"before_{kind}")
        out = self._inner.append_many(events, *args, **kw)
        if kind is not None:
            self._plan.reached(f"after_{kind}")
        return out


class _KillHookedStore:
    """A store whose journals are ``_KillHookedJournal``s: the guard opens its journal through it."""

    def __init__(self, inner: Any, plan: KillPlan) -> None:
        self._inner, self._plan = inner, plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open(self, name: str, **kw: Any) -> Any:
        return _KillHookedJournal(self._inner.open(name, **kw), self._plan)


def kill_hooks(store: T, plan: KillPlan) -> T:
    """``store`` (what a ToolGuard is built on) with the plan's kill points on its journals' appends."""
    return _KillHookedStore(store, plan)  # type: ignore[return-value]  # a proxy: the same interface


def side_file(tmp: Path) -> Path:
    return tmp / SIDE_FILE


def append_line(path: Path, text: str) -> None:
    # One write of one line with O_APPEND: a whole line even from concurrent tools; the page
    # cache keeps it through a SIGKILL of this process, as a real side effect would stay done.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def deploy_side_effect(tmp: Path, plan: KillPlan, unit: object, guarded: bool) -> None:
    """The body of every app's ``deploy`` tool: record one run of ``unit`` in the side file, and
    reach "mid_tool" after it. Without the guard there is no intent or result batch to hook, so
    the tool reaches those points itself at the same moments (before / after its effect), so that
    each kill point also exists with ``JOURNAL_GUARD_OFF=1``."""
    if not guarded and plan.point in ("before_intent", "after_intent"):
        plan.reached(plan.point)
    append_line(side_file(tmp), f"{TOOL}:{unit}:{os.getpid()}")
    plan.reached("mid_tool")
    if not guarded and plan.point in ("before_result", "after_result"):
        plan.reached(plan.point)


def tool_runs(tmp: Path, unit: Callable[[str], Hashable] = int) -> dict[Any, int]:
    """How often ``deploy`` ran for each unit (its argument, read back with ``unit``), across lives."""
    path = side_file(tmp)
    counts: dict[Any, int] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith(f"{TOOL}:"):
            key = unit(line.split(":")[1])
            counts[key] = counts.get(key, 0) + 1
    return counts


def in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> tuple[bool, dict[str, Any]]:
    """Run ``fn(*args)`` in a forked child: (killed by SIGKILL, what it returned, through JSON;
    ``{}`` if it was killed). An exception in the child fails the test here, with its repr."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            try:
                payload = json.dumps(fn(*args))
            except BaseException as exc:
                payload = json.dumps({"error": repr(exc)})
            os.write(w, payload.encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, CHILD_READ_BYTES):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    out: dict[str, Any] = json.loads(b"".join(chunks)) if chunks else {}
    assert "error" not in out, out["error"]
    return killed, out


def assert_asks_about_unknown_call(ask: dict[str, Any], args: Any) -> None:
    """``ask`` (the guard's payload, as the framework surfaced it) asks about ``deploy(**args)``
    because its outcome is unknown, and offers the three answers."""
    assert ask["kind"] == UNKNOWN_KIND and ask["tool"] == TOOL and ask["args"] == args, ask
    assert [r["code"] for r in ask["reasons"]] == ["TOOL_OUTCOME_UNKNOWN"], ask
    assert [o["answer"] for o in ask["options"]] == list(ANSWERS), ask


def as_unknown_entry(ask: dict[str, Any]) -> list[Any]:
    """The entry of the guard journal's unknown calls ``ask`` stands for: ``[call id, tool, args]``
    (the journal, read by a fresh process, must hold exactly the calls the app was asked about)."""
    return [ask["callId"], ask["tool"], ask["args"]]


def truthful_answer(ran: bool, result: Any) -> Any:
    """The answer a person who checked would give: "happened" with its result if the tool's effect
    is there, else "run_again" -- either way the tool has then run exactly once."""
    return {"answer": "happened", "result": result} if ran else "run_again"


def same_on_every_load(load: Callable[[], T]) -> T:
    """Load twice (each a full open, read and close): the same history both times; the first."""
    first = load()
    again = load()
    assert first == again, f"a second load differs from the first:\n{first!r}\n{again!r}"
    return first


def run_example_demo(script: str, tmp: Path) -> str:
    """Run ``examples/<script> demo <tmp>`` as the docs show it and check the story every crash-safe
    tool example tells: killed inside deploy, asked, answered, finished, deployed once. Its output."""
    out = subprocess.run([sys.executable, str(EXAMPLES / script), "demo", str(tmp)], capture_output=True,
                         text=True, check=True, timeout=EXAMPLE_TIMEOUT_S).stdout
    assert "run: the process was killed inside deploy" in out, out
    assert "resume: deploy(" in out and "run_again: run it again" in out, out
    assert "answer happened: finished=True" in out, out
    assert "deployed.log has 1 line(s)" in out, out
    return out


@dataclass(frozen=True)
class GuardedApp:
    """What ``random_kill_rounds`` needs of a framework's app; each callable runs one whole life
    (in a child) or one check, so the rounds never see the framework itself.

    ``start(tmp, plan)``: the first life, asked to deploy ``units`` units: (killed, its outcome).
    ``resume(tmp, given)``: a later life; ``given`` answers the one ask the last life surfaced.
    ``asks(outcome)``: the guard's payloads the life surfaced. ``finished(outcome)``: the run is
    done (every unit deployed or abandoned, nothing waiting). ``unit_of(ask)``: the unit an ask is
    about, as ``tool_runs`` keys it. ``result_of(unit)``: what the tool returns for it (a
    "happened" answer's result). ``journal_unknown(tmp, outcome)``: ``[call id, tool, args]`` of the
    calls the guard's journal holds as unknown. ``check_history(tmp)``: well formed and the same
    on every load. ``tool_unit``: how ``tool_runs`` reads a unit back."""

    units: int
    start: Callable[[Path, KillPlan], tuple[bool, dict[str, Any]]]
    resume: Callable[[Path, Any], dict[str, Any]]
    asks: Callable[[dict[str, Any]], list[dict[str, Any]]]
    finished: Callable[[dict[str, Any]], bool]
    unit_of: Callable[[dict[str, Any]], Hashable]
    result_of: Callable[[Any], Any]
    journal_unknown: Callable[[Path, dict[str, Any]], list[Any]]
    check_history: Callable[[Path], object]
    tool_unit: Callable[[str], Hashable] = int


def crash_rng(seed_offset: int) -> random.Random:
    """The rounds' randomness: ``JOURNAL_CRASH_SEED`` (0) plus the test's own offset, so a failing
    round is replayed with the same seed."""
    return random.Random(int(os.environ.get("JOURNAL_CRASH_SEED", "0")) + seed_offset)


def random_kill_rounds(tmp_path: Path, app: GuardedApp, seed_offset: int, steps_max: int) -> None:
    """``ROUNDS`` rounds, each in its own directory: kill the first life at a random point of a
    random unit's deploy, then resume, answering each unknown call at random, until the run
    finishes (at most ``steps_max`` later lives). Checks: every ask is the one unknown call the
    journal holds, the run finishes, each unit ran at most once plus once per "run_again", and the
    history is well formed and the same on every load."""
    rng = crash_rng(seed_offset)
    for r in range(ROUNDS):
        tmp = tmp_path / f"r{r}"
        tmp.mkdir()
        point, at = rng.choice(POINTS), rng.randint(1, app.units)
        killed, out = app.start(tmp, KillPlan(point, at))
        reruns: dict[Hashable, int] = {}
        given: Any = None
        for _ in range(steps_max):  # bounded: a kill leaves at most one unknown call
            if app.finished(out) and not app.asks(out):
                break
            out = app.resume(tmp, given)
            given = None
            if not app.asks(out):
                continue
            (ask,) = app.asks(out)
            unit = app.unit_of(ask)
            assert killed and ask["tool"] == TOOL, (r, point, at, out)
            assert app.journal_unknown(tmp, out) == [as_unknown_entry(ask)], (r, point, at, out)
            answer = rng.choice(ANSWERS)
            reruns[unit] = reruns.get(unit, 0) + (answer == "run_again")
            given = {"answer": "happened", "result": app.result_of(unit)} if answer == "happened" else answer
        assert app.finished(out) and not app.asks(out), (r, point, at, out)
        for unit, count in tool_runs(tmp, app.tool_unit).items():
            assert count <= 1 + reruns.get(unit, 0), (r, point, at, unit, count, reruns)
        app.check_history(tmp)

