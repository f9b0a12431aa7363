"""The agent story for `journal demo`: a tool starts, the process is killed, the session says what it knows.

A child process plays the runtime: it writes a turn that runs tests and reads a file, then a
second turn where the model asks to edit a file, the edit is approved and started, a shell call
is requested alongside it, and the model streams a few deltas. The parent SIGKILLs the child
the moment it reports the edit started, reopens the session (core recovery, then structural
repair), and prints the closers, the model-visible messages and the resume gate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import TextIO

from journal.session import ResumeChecks
from journal.session import open as open_session

CHILD_WAIT_S = 30.0
SESSION_DIR = "agent-session"
STORY_CLOCK_START = "2026-05-28T10:00:"


def _child(path: str) -> None:
    """The runtime: writes through the session API, announces the edit, then waits to be killed."""
    tick = iter(range(60))
    with open_session(path, create=True, session_id="s-demo", clock=lambda: f"{STORY_CLOCK_START}{next(tick):02d}Z",
                      workspace={"path": "/home/dev/project_A", "fingerprint": "git:4f2c9e1"}) as s:
        s.append("user.message", {"text": "pnpm test auth fails; fix it"})
        s.append("goal.updated", {"goal": {"text": "auth tests pass", "status": "active"},
                                  "budget": {"used": 1200, "limit": 50000}})
        s.append("turn.started", turn_id="t1")
        s.append("step.started", turn_id="t1", step_id="t1.1")
        s.append("model.requested", turn_id="t1", step_id="t1.1")
        s.append("assistant.message", {"text": "Let me run the failing tests."}, turn_id="t1", step_id="t1.1",
                 attempt_id="t1.1.a")
        for call, tool, args, effect, result in (
            ("call_1", "run_tests", {"cmd": "pnpm test auth"}, "process",
             "1 failed: TypeError: user.id should be string"),
            ("call_2", "read_file", {"path": "src/auth/session.ts"}, "read", "export function login(...)"),
        ):
            s.append("tool.requested", {"tool": tool, "args": args, "sideEffect": effect, "idempotency": "safe"},
                     turn_id="t1", step_id="t1.1", tool_call_id=call)
            s.append("tool.started", turn_id="t1", step_id="t1.1", tool_call_id=call)
            s.append("tool.result", {"status": "ok", "output": result}, turn_id="t1", step_id="t1.1",
                     tool_call_id=call)
        s.append("step.ended", {"reason": "completed"}, turn_id="t1", step_id="t1.1")
        s.append("turn.ended", {"reason": "completed"}, turn_id="t1")
        s.append("turn.started", turn_id="t2")
        s.append("step.started", turn_id="t2", step_id="t2.1")
        s.append("model.requested", turn_id="t2", step_id="t2.1")
        s.append("assistant.message", {"text": "I will change src/auth/session.ts."}, turn_id="t2",
                 step_id="t2.1", attempt_id="t2.1.a")
        s.append("tool.requested", {"tool": "edit_file", "args": {"path": "src/auth/session.ts"},
                                    "sideEffect": "workspace-write", "idempotency": "unsafe"},
                 turn_id="t2", step_id="t2.1", tool_call_id="call_3", approval_id="ap_1")
        s.append("approval.requested", {"prompt": "edit src/auth/session.ts?"}, turn_id="t2",
                 tool_call_id="call_3", approval_id="ap_1")
        s.append("approval.decided", {"decision": "allowed", "by": "user"}, turn_id="t2", approval_id="ap_1")
        s.append("tool.requested", {"tool": "bash", "args": {"cmd": "pnpm test auth"}, "sideEffect": "process",
                                    "idempotency": "safe"}, turn_id="t2", step_id="t2.1", tool_call_id="call_4")
        s.append("tool.started", turn_id="t2", step_id="t2.1", tool_call_id="call_3")
        for chunk in ("Editing ", "the session ", "check..."):
            s.append("assistant.delta", {"text": chunk}, turn_id="t2", step_id="t2.1", attempt_id="t2.1.b")
        s.journal.flush()  # the deltas reach the OS; the result of call_3 never will
        print("tool-started", flush=True)
        sys.stdin.read()  # wait for SIGKILL


def _kill_after_tool_started(path: str, out: TextIO) -> None:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    code = f"from journal.cli.demo_session import _child; _child({path!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline().strip()
        if line != "tool-started":
            raise RuntimeError(f"the runtime child stopped before the edit started (said {line!r})")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=CHILD_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out.write(f"runtime pid {proc.pid}: edit_file (call_3) started ... SIGKILL (exit {proc.returncode})\n")


def run_story(out: TextIO, workdir: str) -> None:
    path = os.path.join(workdir, SESSION_DIR)
    out.write("== the agent session story\n")
    out.write("turn t1 runs the tests and reads a file; in turn t2 the model asks to edit src/auth/session.ts,\n"
              "the user approves, the edit starts, a shell call waits, and the model is still streaming.\n")
    _kill_after_tool_started(path, out)
    out.write("\n== reopen: byte-level recovery, then structural repair\n")
    with open_session(path) as s:
        report = s.repair_report
        assert report is not None
        out.write(report.summary() + "\n")
        out.write("\nclosers as stored (synthetic, synced, derived only from the events they close):\n")
        for ev in report.closers:
            out.write(f"  {ev.to_dict()}\n")
        replayed = s.replay()
        state = replayed.state
        out.write(f"\n== replay (reducer {replayed.reducer} v{replayed.reducer_version}): "
                  f"{replayed.replayed} events replayed, {replayed.skipped} skipped, nothing executed\n")
        for turn_id, span in state.turns.items():
            out.write(f"  turn {turn_id}: {span.status}" + (" (closed by repair)" if span.synthetic_close else "")
                      + "\n")
        for call in state.tools.values():
            note = " (written by repair)" if call.result_synthetic else ""
            out.write(f"  tool {call.tool_call_id} {call.tool} [{call.side_effect}]: {call.status}{note}\n")
        out.write("  messages a model would see:\n")
        for m in state.messages():
            text = m.get("content") if "content" in m else f"call {m['toolCall']['name']}({m['toolCall']['args']})"
            out.write(f"    {m['role']:9} {str(text)[:110]}\n")
        out.write("\n== resume gate (workspace fingerprint checked now: git:4f2c9e1)\n")
        gate = s.resume_gate(ResumeChecks(workspace_fingerprint="git:4f2c9e1"))
        out.write(gate.explain() + "\n")
        out.write("\nThe runtime must check src/auth/session.ts (did the edit land?), record tool.reconciled,\n"
                  "and only then take the right to continue; the shell call may be rescheduled under a new id.\n")
    with open_session(path) as s:
        again = s.repair_report
        assert again is not None
        out.write(f"\nreopened once more: {len(again.closers)} closers appended (repair is idempotent)\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        run_story(sys.stdout, d)
