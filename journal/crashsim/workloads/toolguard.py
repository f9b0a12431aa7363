"""The toolguard workload for the crash harness: a power loss over the tool guard's intent and result writes.

Importing this module registers the workload "toolguard". The run is two lives of one guard
scope (journal/session/toolguard.py) over the harness's journal: the first makes guarded calls
(intent synced as one batch, then the tool, then its result at "flush"), some left without a
result as a kill mid-tool leaves them, some ending in an error; the second reopens the scope
(repair closes the started calls as TOOL_OUTCOME_UNKNOWN), answers each unknown call (happened,
run again, abandon) and runs what may run. The harness cuts the power at every point it can;
``recover_and_check`` then holds the core invariants and the guard's own, derived from the
records alone, on a copy of each recovered image:

* a ``tool.started`` is never read back without its ``tool.requested`` before it;
* opening the scope twice gives the same history (the second open writes nothing);
* for every call, what ``before`` decides is what the records say: a call whose last attempt
  started and has neither a result of its own nor an answer is UNKNOWN (never run again on its
  own); one with a result is DONE with exactly that result; an answer is followed (happened:
  DONE with the answered result; abandon: ABANDONED; run again: RUN_AGAIN); only a call whose
  last attempt never started, or failed, may RUN.
"""

from __future__ import annotations

from typing import Any, cast

from journal.api import Journal as ApiJournal
from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, JOURNAL_PATH, Ctx, workload
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.fs import FileSystem
from journal.session.toolguard import ABANDON, RUN_AGAIN, GuardScope, Verdict, happened

SCOPE = "thread-crash"
FIXED_TIME = "2026-01-01T00:00:00Z"


class ToolGuardViolation(AssertionError):
    """A guard invariant failed on a recovered crash image."""


def _clock() -> str:
    return FIXED_TIME


def _is_event(r: Record) -> bool:
    return not r.is_bytes and isinstance(r.event, dict) and "schemaVersion" in r.event


def _expected(recs: list[Record]) -> dict[str, tuple[str, Any]]:
    """Per call id, the verdict the records call for (and the result a DONE must return)."""
    last: dict[str, str] = {}
    started: set[str] = set()
    ok: dict[str, Any] = {}
    failed: set[str] = set()
    answers: dict[str, tuple[str, Any]] = {}
    for r in recs:
        ev = cast(dict[str, Any], r.event)
        data = ev.get("data") or {}
        aid = str(ev.get("toolCallId"))
        if ev["type"] == "tool.requested":
            last[data["callId"]] = aid
        elif ev["type"] == "tool.started":
            started.add(aid)
        elif ev["type"] == "tool.result" and not r.synthetic:
            if data.get("status") == "ok":
                ok[aid] = data.get("output")
            else:
                failed.add(aid)
        elif ev["type"] == "tool.reconciled":
            answers.setdefault(aid, (data["answer"], data.get("output")))
    out: dict[str, tuple[str, Any]] = {}
    for call_id, aid in last.items():
        if aid in ok:
            out[call_id] = (Verdict.DONE.value, ok[aid])
        elif aid in answers:
            kind, result = answers[aid]
            verdict = {"happened": Verdict.DONE, "abandon": Verdict.ABANDONED, "run_again": Verdict.RUN_AGAIN}[kind]
            out[call_id] = (verdict.value, result)
        elif aid in started and aid not in failed:
            out[call_id] = (Verdict.UNKNOWN.value, None)
        else:
            out[call_id] = (Verdict.RUN.value, None)
    return out


def check_guard(recs: list[Record], fs: FileSystem, options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    requested: set[str] = set()
    for r in recs:
        ev = cast(dict[str, Any], r.event)
        if ev["type"] == "tool.requested":
            requested.add(ev["toolCallId"])
        elif ev["type"] == "tool.started" and ev["toolCallId"] not in requested:
            out.append(f"tool.started of {ev['toolCallId']} read back without its tool.requested")
    if not isinstance(fs, MemFileSystem):
        return out
    clone = MemFileSystem.from_image(fs.snapshot())
    clone.record_reads = False
    histories = []
    for _ in range(2):
        s = GuardScope(Journal.open(JOURNAL_PATH, fs=clone, **options), SCOPE, clock=_clock)
        histories.append(s.history())
        s.close()
    if histories[0] != histories[1]:
        out.append("opening the scope a second time changed its history")
    s = GuardScope(Journal.open(JOURNAL_PATH, fs=clone, **options), SCOPE, clock=_clock)
    try:
        repaired = list(s.journal.read())
        for call_id, (verdict, result) in sorted(_expected(repaired).items()):
            d = s.before(call_id, "deploy", {})
            if d.verdict.value != verdict:
                out.append(f"call {call_id}: the guard says {d.verdict.value}, the records say {verdict}")
            elif verdict == Verdict.DONE.value and d.result != result:
                out.append(f"call {call_id}: DONE with {d.result!r}, the records hold {result!r}")
    finally:
        s.close()
    return out


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """Core recovery, then the guard checks -- unless the harness appended its own records after
    recovery (invariant 6), which are not session events: those images get the core checks only."""
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        recs = list(j.read())
    finally:
        j.close()
    if recs and all(_is_event(r) for r in recs):
        problems = check_guard(recs, fs, options)
        if problems:
            raise ToolGuardViolation("; ".join(problems))
    return recs


@workload("toolguard", recover=recover_and_check, reserve_bytes=CRASH_RESERVE_BYTES)
def toolguard_calls(ctx: Ctx) -> None:
    """Two lives of a guarded scope: calls (some cut mid-tool, some failing), then the answers."""
    rng = ctx.rng
    s = GuardScope(cast(ApiJournal, ctx.open()), SCOPE, clock=_clock)
    calls = [f"c{i}" for i in range(rng.randint(3, 5))]
    for i, call_id in enumerate(calls):
        d = s.before(call_id, "deploy", {"n": i, "seed": ctx.seed})
        if not d.run:
            continue
        fate = rng.random()
        if fate < 0.35:
            continue  # killed mid-tool: the intent is durable, there is no result
        if fate < 0.5:
            s.after(call_id, error=RuntimeError(f"failed {i}"))
        else:
            s.after(call_id, {"deployed": i, "seed": ctx.seed})
    s.journal.close()  # the process dies: no sync of the flushed results, no close of the scope
    s = GuardScope(cast(ApiJournal, ctx.open(create=False)), SCOPE, clock=_clock)
    for n, u in enumerate(s.unknown()):
        answer = (happened({"checked": u.call_id}), RUN_AGAIN, ABANDON)[(n + ctx.seed) % 3]
        s.answer(u.call_id, answer)
    for call_id in calls:
        d = s.before(call_id, "deploy", {"again": call_id})
        if d.run:
            s.after(call_id, {"second": call_id})
    s.close()
