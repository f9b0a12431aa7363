"""Whole-document sources (SWE-agent, mini-swe-agent, OpenHands, Gemini CLI, aider): import then
export gives the source's bytes back, and the journal holds the turns and tool calls the source
holds, counted here from the parsed JSON or the Markdown markers, not through the importer.

The real files come from ../shared/corpus when it exists; the formats with no sample there are
written here from the structures the runtimes write (the formats' module docs say which)."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import re
from typing import Any

import pytest

from journal import session
from journal.cli import main as cli_main
from journal.session import importers
from journal.session.closers import TOOL_OUTCOME_UNKNOWN

REPO = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"
SAMPLES = {
    "swe-agent": CORPUS / "swe-agent-traj" / "SWE-agent__SWE-agent__function_calling_simple.traj",
    "openhands": CORPUS / "openhands-trajectory" / "OpenHands__OpenHands__basic.json",
    "aider": CORPUS / "aider" / "AndrewJacop__Simple-Calulator__.aider.chat.history.md",
}


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def cli_roundtrip(tmp_path: pathlib.Path, fmt: str, src: pathlib.Path) -> tuple[dict[str, Any], bytes]:
    """`journal import --json` then `journal export`: (the import's report, the exported bytes)."""
    dest, out = tmp_path / "j", tmp_path / "out"
    code, stdout, err = run_cli("import", fmt, str(src), str(dest), "--json")
    assert code == 0, err
    code, _, err = run_cli("export", str(dest), str(out))
    assert code == 0, err
    return json.loads(stdout), out.read_bytes()


def events(path: pathlib.Path) -> list[dict[str, Any]]:
    import journal

    with journal.open(path, readonly=True) as j:
        return [r.event for r in j.read()]


def tally(evs: list[dict[str, Any]]) -> dict[str, int]:
    """Turns, calls, results the source holds and synthetic closers, from the journal's events."""
    return {
        "turns": sum(e["type"] == "turn.started" for e in evs),
        "calls": sum(e["type"] == "tool.requested" for e in evs),
        "results": sum(e["type"] == "tool.result" and not e["data"].get("synthetic") for e in evs),
        "closers": sum(e["type"] == "tool.result" and bool(e["data"].get("synthetic")) for e in evs),
    }


def every_call_closed(dest: pathlib.Path) -> None:
    with session.open(dest, readonly=True) as s:
        state = s.replay().state
    assert state.tools and all(c.has_result for c in state.tools.values())


# --- counting what a source holds, independently of the importer -------------------------------


def count_swe_agent(doc: dict[str, Any]) -> dict[str, int]:
    msgs = [m for m in doc["history"] if not m.get("is_demo")]
    calls = sum(len(m.get("tool_calls") or []) for m in msgs if m["role"] == "assistant")
    text_calls = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and not m.get("tool_calls")
                  and (m.get("action") or "").strip()]
    answered_text = sum(1 for i in text_calls if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user")
    results = sum(len(m.get("tool_call_ids", [])) for m in msgs if m["role"] == "tool") + answered_text
    return {"turns": 1 if any(m["role"] == "user" for m in msgs) else 0, "calls": calls + len(text_calls),
            "results": results, "closers": calls + len(text_calls) - results}


def count_openhands(doc: list[dict[str, Any]]) -> dict[str, int]:
    calls = [e for e in doc if "action" in e and e.get("tool_call_metadata") and e["action"] != "finish"]
    results = [e for e in doc if "observation" in e and e.get("tool_call_metadata")]
    turns = sum(1 for e in doc if e.get("action") == "message" and e.get("source") == "user")
    return {"turns": turns, "calls": len(calls), "results": len(results), "closers": len(calls) - len(results)}


def count_aider(text: str) -> dict[str, int]:
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    turns = sum(1 for i, ln in enumerate(lines)
                if ln.startswith("#### ") and (i == 0 or not lines[i - 1].startswith("#### ")))
    calls = 0
    marker = ""
    for ln in lines:  # an edit block counts unless aider's report of a failed match quotes it
        if ln.startswith(("#### ", "> ", "## SearchReplaceNoExactMatch")):
            marker = ln[:4]
        elif ln == "<<<<<<< SEARCH" and marker != "## S":
            calls += 1
    applied = sum(1 for ln in lines if ln.startswith("> Applied edit to "))
    return {"turns": turns, "calls": calls, "applied_lines": applied}


# --- the corpus ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_corpus_sample_roundtrips_byte_exact_with_its_counts(tmp_path: pathlib.Path, fmt: str) -> None:
    src = SAMPLES[fmt]
    if not src.is_file():
        pytest.skip(f"no corpus sample at {src}")
    data = src.read_bytes()
    report, out = cli_roundtrip(tmp_path, fmt, src)
    assert out == data
    got = tally(events(tmp_path / "j"))
    if fmt == "aider":
        want = count_aider(data.decode("utf-8"))
        assert (got["turns"], got["calls"]) == (want["turns"], want["calls"])
        assert got["results"] + got["closers"] == got["calls"]
        assert 0 < got["results"] and want["applied_lines"] <= got["results"]  # one line can close several edits
    else:
        want = (count_swe_agent if fmt == "swe-agent" else count_openhands)(json.loads(data))
        assert got == want
    assert len(report["closed"]) == got["closers"]
    every_call_closed(tmp_path / "j")


# --- documents written here from each runtime's structure ----------------------------------


def gemini_doc() -> dict[str, Any]:
    t = "2025-11-02T10:00:00.000Z"
    return {
        "sessionId": "4b1c0f3e-gemini", "projectHash": "ab12", "startTime": t, "lastUpdated": t,
        "messages": [
            {"id": "m1", "timestamp": t, "type": "user", "content": "list the files"},
            {"id": "m2", "timestamp": t, "type": "gemini", "content": "Listing.", "model": "gemini-2.5-pro",
             "thoughts": [{"subject": "plan", "description": "ls", "timestamp": t}],
             "tokens": {"input": 10, "output": 2, "cached": 0, "total": 12},
             "toolCalls": [
                 {"id": "ls-1", "name": "list_directory", "args": {"path": "."}, "status": "success",
                  "timestamp": t, "result": [{"functionResponse": {"id": "ls-1", "name": "list_directory",
                                                                  "response": {"output": "a\nb"}}}],
                  "resultDisplay": "a\nb"},
                 {"id": "sh-1", "name": "run_shell_command", "args": {"command": "false"}, "status": "error",
                  "timestamp": t, "result": None, "resultDisplay": "exit 1"},
             ]},
            {"id": "m3", "timestamp": t, "type": "info", "content": "saved"},
            {"id": "m4", "timestamp": t, "type": "user", "content": [{"text": "now write"}]},
            {"id": "m5", "timestamp": t, "type": "gemini", "content": "",
             "toolCalls": [{"id": "w-1", "name": "write_file", "args": {"file_path": "x"}, "status": "executing",
                            "timestamp": t}]},
        ],
    }


def mini_doc(toolcalls: bool = False) -> dict[str, Any]:
    if toolcalls:
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "Look first.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>\nsrc"},
            {"role": "exit", "content": "", "extra": {"exit_status": "Submitted", "submission": "diff"}},
        ]
        return {"info": {"exit_status": "Submitted", "submission": "diff", "mini_version": "2.0.0"},
                "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}
    msgs = [
        {"role": "system", "content": "Reply with one bash block."},
        {"role": "user", "content": "Please solve this issue: add 1 and 1."},
        {"role": "assistant", "content": "THOUGHT: look.\n\n```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nmain.py\n</output>"},
        {"role": "assistant", "content": "No block here."},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
        {"role": "assistant", "content": "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
    ]
    return {"info": {"exit_status": "Submitted", "submission": "", "model_stats": {"instance_cost": 0.01,
                                                                                   "api_calls": 3}},
            "messages": msgs, "trajectory_format": "mini-swe-agent-1"}


def swe_text_doc(history: bool = True) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [
        {"action": "find_file setup.py", "observation": "Found 1 matches", "response": "Find it.\n```\nfind_file "
         "setup.py\n```", "thought": "Find it.", "state": "{\"open_file\": \"n/a\"}", "execution_time": 0.4},
        {"action": "submit", "observation": "diff --git", "response": "Done.\n```\nsubmit\n```", "thought": "Done."},
    ]
    hist = [
        {"role": "system", "content": "SETTING: a shell.", "agent": "primary"},
        {"role": "user", "content": "demo task", "agent": "primary", "is_demo": True},
        {"role": "user", "content": "ISSUE: setup.py is wrong", "agent": "primary"},
        {"role": "assistant", "content": steps[0]["response"], "thought": "Find it.",
         "action": "find_file setup.py\n", "agent": "primary"},
        {"role": "user", "content": "Found 1 matches\n(Open file: n/a)", "agent": "primary"},
        {"role": "assistant", "content": steps[1]["response"], "thought": "Done.", "action": "submit\n",
         "agent": "primary"},
    ]
    doc: dict[str, Any] = {"environment": "swe_main", "trajectory": steps,
                           "info": {"exit_status": "submitted", "submission": "diff"}}
    if history:
        doc["history"] = hist
    return doc


def aider_text() -> str:
    return (
        "\n# aider chat started at 2025-01-01 10:00:00\n\n> Aider v0.82.2  \n> Main model: m  \n\n"
        "#### add a docstring  \n#### to main.py  \n\n"
        "Here is the edit:\n\nmain.py\n```python\n<<<<<<< SEARCH\ndef main():\n=======\ndef main():\n"
        "    \"\"\"Run.\"\"\"\n>>>>>>> REPLACE\n```\n\n"
        "> Tokens: 1k sent, 50 received.  \n> Applied edit to main.py  \n\n"
        "#### /run ls  \n\n> main.py  \n\n"
        "# aider chat started at 2025-01-02 09:00:00\n\n"
        "#### also in util.py\r\n\nutil.py\n```\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```\n"
    )


def swe_counts_text(doc: dict[str, Any]) -> dict[str, int]:
    if "history" in doc:
        return count_swe_agent(doc)
    steps = doc["trajectory"]
    calls = sum(1 for s in steps if s["action"].strip())
    results = sum(1 for s in steps if s["action"].strip() and "observation" in s)
    return {"turns": 0, "calls": calls, "results": results, "closers": calls - results}


def count_gemini(doc: dict[str, Any]) -> dict[str, int]:
    calls = [tc for m in doc["messages"] if m["type"] == "gemini" for tc in m.get("toolCalls", [])]
    results = sum(1 for tc in calls if tc["status"] in ("success", "error", "cancelled"))
    return {"turns": sum(m["type"] == "user" for m in doc["messages"]), "calls": len(calls), "results": results,
            "closers": len(calls) - results}


def count_mini(doc: dict[str, Any]) -> dict[str, int]:
    msgs = doc["messages"]
    calls = results = 0
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":
            n = len(m.get("tool_calls") or []) or len(re.findall(r"```bash\s*\n(.*?)\n```", m["content"], re.DOTALL))
            calls += n
            if m.get("tool_calls"):
                results += sum(1 for r in msgs if r["role"] == "tool")
            elif n and i + 1 < len(msgs) and msgs[i + 1]["role"] == "user":
                results += 1
    return {"turns": 1, "calls": calls, "results": results, "closers": calls - results}


DOCS: dict[str, tuple[str, Any, Any]] = {
    # name: (format, how it is written, how its counts are found)
    "gemini": ("gemini", lambda: json.dumps(gemini_doc(), indent=2), lambda t: count_gemini(json.loads(t))),
    "mini-text": ("mini-swe-agent", lambda: json.dumps(mini_doc(), indent=2), lambda t: count_mini(json.loads(t))),
    "mini-toolcalls": ("mini-swe-agent", lambda: json.dumps(mini_doc(True), indent=2) + "\n",
                       lambda t: count_mini(json.loads(t))),
    "mini-bare-array": ("mini-swe-agent", lambda: json.dumps(mini_doc()["messages"]),
                        lambda t: count_mini({"messages": json.loads(t)})),
    "swe-text-history": ("swe-agent", lambda: json.dumps(swe_text_doc(), indent=4),
                         lambda t: swe_counts_text(json.loads(t))),
    "swe-text-steps-only": ("swe-agent", lambda: json.dumps(swe_text_doc(False), indent=2),
                            lambda t: swe_counts_text(json.loads(t))),
}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_written_document_roundtrips_with_its_counts(tmp_path: pathlib.Path, name: str) -> None:
    fmt, write, count = DOCS[name]
    text = write()
    src = tmp_path / "src"
    src.write_text(text, encoding="utf-8", newline="")
    report, out = cli_roundtrip(tmp_path, fmt, src)
    assert out == src.read_bytes()
    got = tally(events(tmp_path / "j"))
    assert got == count(text), name
    assert [c["callId"] for c in report["closed"]] == [
        e["toolCallId"] for e in events(tmp_path / "j") if e["type"] == "tool.result" and e["data"].get("synthetic")]
    assert all(c["status"] == TOOL_OUTCOME_UNKNOWN and c["at"] for c in report["closed"])
    every_call_closed(tmp_path / "j")


def test_mapping_of_gemini_calls_and_results(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "s.json"
    src.write_text(json.dumps(gemini_doc(), indent=2))
    rep = importers.import_file("gemini", str(src), str(tmp_path / "j"))
    evs = events(tmp_path / "j")
    assert evs[0]["sessionId"] == "4b1c0f3e-gemini"
    results = {e["toolCallId"]: e["data"] for e in evs if e["type"] == "tool.result"}
    assert results["ls-1"]["status"] == "ok" and results["sh-1"]["status"] == "error"
    assert results["sh-1"]["output"] == "exit 1"  # no result parts: what the CLI showed
    assert results["w-1"]["synthetic"] and rep.closed == [
        {"callId": "w-1", "tool": "write_file", "at": "/messages/4/toolCalls/0", "status": TOOL_OUTCOME_UNKNOWN}]
    assert "w-1 (write_file) has no result in the source" in rep.summary()
    assert [e["data"]["text"] for e in evs if e["type"] == "user.message"] == ["list the files", "now write"]


def test_aider_file_of_several_chats(tmp_path: pathlib.Path) -> None:
    text = aider_text()
    src = tmp_path / ".aider.chat.history.md"
    src.write_bytes(text.encode())
    report, out = cli_roundtrip(tmp_path, "aider", src)
    assert out == text.encode()
    evs = events(tmp_path / "j")
    want = count_aider(text)
    got = tally(evs)
    assert (got["turns"], got["calls"]) == (want["turns"], want["calls"]) == (3, 2)
    users = [e["data"]["text"] for e in evs if e["type"] == "user.message"]
    assert users == ["add a docstring\nto main.py", "/run ls", "also in util.py"]
    edits = {e["toolCallId"]: e["data"]["args"] for e in evs if e["type"] == "tool.requested"}
    assert edits["line-14"] == {"path": "main.py", "search": "def main():",
                                "replace": "def main():\n    \"\"\"Run.\"\"\""}
    assert edits["line-35"]["path"] == "util.py"
    # the second chat's start ends the first chat's open turn; its edit got no outcome: closed, named
    assert [e["data"].get("chatStarted") for e in evs if e["type"] == "turn.ended"] == [None, "2025-01-02 09:00:00"]
    assert [c["callId"] for c in report["closed"]] == ["line-35"]


def test_odd_but_valid_documents_roundtrip(tmp_path: pathlib.Path) -> None:
    """A byte-order mark, CRLF line ends, a lone surrogate escape (a string cut mid-emoji), a
    number past a double's range and duplicate keys: the bytes come back; the mapping reads
    U+FFFD and null where a journal cannot store the value."""
    text = json.dumps(gemini_doc(), indent=2).replace('"content": "list the files"',
                                                       '"content": "cut \\ud83d", "content": "list \\ud83d"')
    text = "\ufeff" + text.replace('"total": 12', '"total": 1e999').replace("\n", "\r\n")
    src = tmp_path / "odd.json"
    src.write_bytes(text.encode("utf-8"))
    _, out = cli_roundtrip(tmp_path, "gemini", src)
    assert out == src.read_bytes()
    evs = events(tmp_path / "j")
    assert next(e["data"]["text"] for e in evs if e["type"] == "user.message") == "list \ufffd"


def test_swe_agent_history_without_actions_is_read_from_its_steps(tmp_path: pathlib.Path) -> None:
    doc = swe_text_doc()
    for m in doc["history"]:
        m.pop("action", None)
    src = tmp_path / "old.traj"
    src.write_text(json.dumps(doc))
    importers.import_file("swe-agent", str(src), str(tmp_path / "j"))
    calls = [e for e in events(tmp_path / "j") if e["type"] == "tool.requested"]
    assert [(c["toolCallId"], c["data"]["args"]) for c in calls] == [
        (f"trajectory-{i}", {"command": s["action"]}) for i, s in enumerate(doc["trajectory"])]
    every_call_closed(tmp_path / "j")
