"""Import then export gives the source back: on files written here to each format's published
structure, and on the real session logs in ../shared/corpus when that folder exists."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from journal import session
from journal.session import importers
from journal.session.importers import MalformedLineError

REPO = pathlib.Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"
JOINED_FILE = "badlogic__pi-mono__session.jsonl"
JOINED_LINE = 440


def dump(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# --- sources that follow each format's structure ----------------------------------------------


def codex_lines() -> list[str]:
    t = "2026-01-02T16:39:45.349Z"
    rows: list[dict[str, Any]] = [
        {"timestamp": t, "type": "session_meta", "payload": {"id": "019b7f94-0000", "cwd": "/repo",
                                                             "cli_version": "0.77.0", "originator": "codex_exec"}},
        {"timestamp": t, "type": "event_msg", "payload": {"type": "task_started", "turn_id": "t1"}},
        {"timestamp": t, "type": "response_item", "payload": {"type": "message", "role": "user",
                                                              "content": [{"type": "input_text", "text": "list"}]}},
        {"timestamp": t, "type": "event_msg", "payload": {"type": "user_message", "message": "list", "images": []}},
        {"timestamp": t, "type": "turn_context", "payload": {"cwd": "/repo", "model": "gpt-5"}},
        {"timestamp": t, "type": "response_item", "payload": {"type": "reasoning", "summary": [], "content": None,
                                                              "encrypted_content": "gAAA"}},
        {"timestamp": t, "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "call_id": "call_1",
            "arguments": "{\"command\":[\"bash\",\"-lc\",\"ls\"]}"}},
        {"timestamp": t, "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "call_1", "output": "{\"output\":\"a\\nb\\n\"}"}},
        {"timestamp": t, "type": "compacted", "payload": {"message": "listed the repo", "replacement_history": []}},
        {"timestamp": t, "type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                              "content": [{"type": "output_text", "text": "a, b"}]}},
        {"timestamp": t, "type": "event_msg", "payload": {"type": "task_complete", "last_agent_message": "a, b"}},
        {"timestamp": t, "type": "event_msg", "payload": {"type": "token_count", "info": {"total": 1.5e-05}}},
    ]
    return [dump(r) for r in rows]


def pi_lines() -> list[str]:
    t = "2025-12-17T19:39:21.535Z"
    rows: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "5fd1e58c-0000", "timestamp": t, "cwd": "/repo"},
        {"type": "model_change", "id": "a1", "parentId": None, "timestamp": t, "provider": "x", "modelId": "m"},
        {"type": "message", "id": "a2", "parentId": "a1", "timestamp": t,
         "message": {"role": "user", "content": [{"type": "text", "text": "read it"}], "timestamp": 1}},
        {"type": "message", "id": "a3", "parentId": "a2", "timestamp": t, "message": {
            "role": "assistant", "content": [{"type": "text", "text": "reading"},
                                             {"type": "toolCall", "id": "toolu_1", "name": "read",
                                              "arguments": {"path": "README.md"}}],
            "usage": {"cost": {"input": 0.000015000000000000002}}, "stopReason": "toolUse"}},
        {"type": "message", "id": "a4", "parentId": "a3", "timestamp": t, "message": {
            "role": "toolResult", "toolCallId": "toolu_1", "toolName": "read",
            "content": [{"type": "text", "text": "# readme"}], "isError": False}},
        {"type": "compaction", "id": "a5", "parentId": "a4", "timestamp": t, "summary": "read the readme",
         "firstKeptEntryId": "a2", "tokensBefore": 19},
        {"type": "message", "id": "a6", "parentId": "a5", "timestamp": t,
         "message": {"role": "user", "content": [{"type": "text", "text": "thanks"}], "timestamp": 2}},
    ]
    return [dump(r) for r in rows]


def claude_lines() -> list[str]:
    base = {"isSidechain": False, "userType": "external", "cwd": "/tmp/p", "sessionId": "4c2ddfdc-0000",
            "version": "2.0.64"}
    rows: list[dict[str, Any]] = [
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {"trackedFileBackups": {}},
         "isSnapshotUpdate": False},
        {**base, "parentUuid": None, "type": "user", "message": {"role": "user", "content": "create hello.py"},
         "uuid": "u1", "timestamp": "2025-12-10T19:37:45.343Z"},
        {**base, "parentUuid": "u1", "type": "assistant", "uuid": "u2", "timestamp": "2025-12-10T19:37:46Z",
         "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}},
        {**base, "parentUuid": "u2", "type": "assistant", "uuid": "u3", "timestamp": "2025-12-10T19:37:47Z",
         "message": {"id": "msg_1", "role": "assistant", "content": [
             {"type": "tool_use", "id": "toolu_9", "name": "Write", "input": {"file_path": "hello.py"}}]}},
        {**base, "parentUuid": "u3", "type": "user", "uuid": "u4", "timestamp": "2025-12-10T19:37:48Z",
         "message": {"role": "user", "content": [{"tool_use_id": "toolu_9", "type": "tool_result",
                                                   "content": "File created"}]}},
        {**base, "parentUuid": "u4", "type": "assistant", "uuid": "u5", "timestamp": "2025-12-10T19:37:49Z",
         "message": {"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": "Done"}]}},
        {**base, "parentUuid": "u5", "type": "system", "subtype": "compact_boundary", "uuid": "u6",
         "content": "Conversation compacted"},
        {**base, "parentUuid": "u6", "type": "user", "uuid": "u7", "isCompactSummary": True,
         "message": {"role": "user", "content": "Summary: created hello.py"}},
        {**base, "parentUuid": "u7", "type": "system", "subtype": "turn_duration", "durationMs": 1200, "uuid": "u8"},
        {"type": "summary", "summary": "Create hello.py", "leafUuid": "u8"},
    ]
    return [dump(r) for r in rows]


def jsonl_lines() -> list[str]:
    rows: list[dict[str, Any]] = [
        {"type": "user_message", "text": "hi", "sessionId": "plain-1"},
        {"type": "tool_call", "id": "c1", "name": "ls", "args": {"path": "."}},
        {"type": "tool_result", "id": "c1", "output": "a b"},
        {"type": "assistant_message", "text": "a and b", "extra": {"kept": [1, 2.50, None]}},
        {"type": "metrics", "tokens": 12},
    ]
    return [dump(r) for r in rows]


SOURCES = {"codex": codex_lines, "pi": pi_lines, "claude": claude_lines, "jsonl": jsonl_lines}
TORN_TAIL = '{"type":"message","timestamp":"2025-12-17T19:39:2'


def write(path: pathlib.Path, lines: list[str], final_newline: bool = True) -> pathlib.Path:
    path.write_bytes(("\n".join(lines) + ("\n" if final_newline else "")).encode("utf-8"))
    return path


def roundtrip(src: pathlib.Path, dest: pathlib.Path, fmt: str, **kw: Any) -> tuple[importers.ImportReport, bytes]:
    rep = importers.import_file(fmt, str(src), str(dest), **kw)
    lines, final_newline, _ = importers.export_journal(str(dest))
    out = dest.parent / (dest.name + ".out.jsonl")
    importers.write_export(str(out), lines, final_newline)
    return rep, out.read_bytes()


def json_values(data: bytes) -> list[Any]:
    out: list[Any] = []
    dec = json.JSONDecoder()
    for line in data.decode("utf-8").splitlines():
        pos, text = 0, line.strip()
        while pos < len(text):
            value, pos = dec.raw_decode(text, pos)
            out.append(value)
            while pos < len(text) and text[pos] in " \t\r":
                pos += 1
    return out


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_roundtrip_is_byte_identical(tmp_path: pathlib.Path, fmt: str) -> None:
    src = write(tmp_path / "src.jsonl", SOURCES[fmt]())
    rep, out = roundtrip(src, tmp_path / "j", fmt)
    assert out == src.read_bytes()
    assert rep.lines == len(SOURCES[fmt]()) and not rep.skipped


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_mapping_to_the_session_vocabulary(tmp_path: pathlib.Path, fmt: str) -> None:
    src = write(tmp_path / "src.jsonl", SOURCES[fmt]())
    importers.import_file(fmt, str(src), str(tmp_path / "j"))
    with session.open(tmp_path / "j", readonly=True) as s:
        types = [e.type for e in s.read()]
        state = s.replay().state
        sid = s.session_id
    assert types[0] == "session.started"
    assert "tool.requested" in types and "tool.started" in types and "tool.result" in types
    assert "user.message" in types
    assert all(call.has_result for call in state.tools.values()) and state.tools
    if fmt != "jsonl":
        assert "compaction.started" in types and "compaction.ended" in types
        assert any(c.status == "applied" for c in state.compactions.values())
    assert "turn.started" in types
    assert sid != ""


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_torn_last_line_is_refused_with_its_number_or_kept_with_the_flag(tmp_path: pathlib.Path, fmt: str) -> None:
    lines = [*SOURCES[fmt](), TORN_TAIL]
    src = write(tmp_path / "src.jsonl", lines, final_newline=False)
    with pytest.raises(MalformedLineError) as err:
        importers.import_file(fmt, str(src), str(tmp_path / "refused"))
    assert err.value.lineno == len(lines) and err.value.defect == "torn"
    assert not (tmp_path / "refused").exists(), "a refused import writes nothing"
    rep, out = roundtrip(src, tmp_path / "j", fmt, skip_bad=True)
    assert rep.skipped == [{"line": len(lines), "defect": "torn", "reason": rep.skipped[0]["reason"]}]
    assert out == src.read_bytes(), "the torn line is kept verbatim and written back as it was"
    dropped, _, report = importers.export_journal(str(tmp_path / "j"), drop_defective=True)
    assert report.skipped_defective == 1 and len(dropped) == len(lines) - 1


def test_joined_records_are_refused_by_default_and_split_on_request(tmp_path: pathlib.Path) -> None:
    lines = pi_lines()
    joined = [*lines[:3], lines[3] + lines[4], *lines[5:]]
    src = write(tmp_path / "src.jsonl", joined)
    with pytest.raises(MalformedLineError) as err:
        importers.import_file("pi", str(src), str(tmp_path / "refused"))
    assert err.value.lineno == 4 and err.value.defect == "joined"
    assert "--split-joined" in str(err.value)
    rep, out = roundtrip(src, tmp_path / "j", "pi", split_joined=True)
    assert rep.split == [4]
    assert json_values(out) == json_values(src.read_bytes())
    assert out.decode().splitlines() == lines, "each joined object comes back on a line of its own"


def test_odd_lines_survive_exactly(tmp_path: pathlib.Path) -> None:
    raw = (b'{"type":"x","n":1.0,"e":1E5,"s":"\\u00e9"}\r\n'
           b"\n"
           b'{ "type" : "spaced" }\n'
           b'{"type":"dup","k":1,"k":2}\n'
           b'{"type":"last"}')
    src = tmp_path / "src.jsonl"
    src.write_bytes(raw)
    _, out = roundtrip(src, tmp_path / "j", "jsonl")
    assert out == raw


def test_malformed_lines_are_reported_by_number(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src.jsonl"
    src.write_bytes(b'{"type":"a"}\n[1,2]\n{"type":\n\xff\xfe\n{"type":"b"}\n')
    with pytest.raises(MalformedLineError) as err:
        importers.import_file("jsonl", str(src), str(tmp_path / "no"))
    assert err.value.lineno == 2
    rep, out = roundtrip(src, tmp_path / "j", "jsonl", skip_bad=True)
    assert [s["line"] for s in rep.skipped] == [2, 3, 4]
    assert out == src.read_bytes()


def test_native_journal_exports_as_plain_jsonl(tmp_path: pathlib.Path) -> None:
    import journal

    with journal.open(tmp_path / "j", create=True) as j:
        j.append_many([{"type": "a", "i": 1}, {"type": "b", "i": 2}])
    lines, _, rep = importers.export_journal(str(tmp_path / "j"))
    assert [json.loads(x) for x in lines] == [{"seq": 1, "type": "a", "i": 1}, {"seq": 2, "type": "b", "i": 2}]
    assert rep.format == "jsonl" and rep.native_events == 2


# --- the real corpus --------------------------------------------------------------------------

CORPUS_FORMATS = {"codex-rollout": "codex", "pi-session": "pi", "claude-code": "claude"}


def corpus_files() -> list[pathlib.Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for d in CORPUS_FORMATS for p in (CORPUS / d).glob("*.jsonl"))


needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")


@needs_corpus
@pytest.mark.parametrize("src", corpus_files(), ids=lambda p: p.name[:40])
def test_corpus_roundtrip(tmp_path: pathlib.Path, src: pathlib.Path) -> None:
    fmt = CORPUS_FORMATS[src.parent.name]
    if src.name == JOINED_FILE:
        with pytest.raises(MalformedLineError) as err:
            importers.import_file(fmt, str(src), str(tmp_path / "refused"))
        assert err.value.lineno == JOINED_LINE and err.value.defect == "joined"
        rep, out = roundtrip(src, tmp_path / "j", fmt, split_joined=True)
        assert rep.split == [JOINED_LINE]
        assert json_values(out) == json_values(src.read_bytes())
        assert len(out.splitlines()) == len(src.read_bytes().splitlines()) + 1
    else:
        rep, out = roundtrip(src, tmp_path / "j", fmt)
        assert out == src.read_bytes()
    with session.open(tmp_path / "j", readonly=True) as s:
        replayed = s.replay()
    assert replayed.replayed > 0
    assert all(c.has_result for c in replayed.state.tools.values())


@needs_corpus
def test_corpus_incremental_prefix(tmp_path: pathlib.Path) -> None:
    """turn-1 is a byte prefix of turn-2 (the same live session read twice): their imports agree."""
    one = CORPUS / "claude-code" / "codemie-ai__codemie-code__turn-1.jsonl"
    two = CORPUS / "claude-code" / "codemie-ai__codemie-code__turn-2.jsonl"
    _, out1 = roundtrip(one, tmp_path / "a", "claude")
    _, out2 = roundtrip(two, tmp_path / "b", "claude")
    assert out2.startswith(out1)
