"""Whole-document sources that cannot be read as they are: each refusal names the line (and
column) or the JSON path, exits with the import's code for a bad source (3; 1 for a source too
large), and leaves nothing at the destination; --skip-bad keeps the document exactly and reports
what it left unmapped. And a journal whose kept chunks do not add up is refused on export."""

from __future__ import annotations

import json
import pathlib
import types
from typing import Any

import pytest

import journal
from journal.api import CorruptionError, WriteFailedError
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from journal.session import importers
from journal.session.importers import DocumentError, DocumentTooLargeError, documents
from journal.session.importers.lines import NESTING_DEPTH_MAX
from tests.test_import_documents import aider_text, gemini_doc, mini_doc, run_cli, swe_text_doc


def fc_doc() -> dict[str, Any]:
    """A SWE-agent trajectory in the function-calling form."""
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}
    return {"history": [
        {"role": "system", "content": "SETTING", "agent": "main", "message_type": "system_prompt"},
        {"role": "user", "content": "ISSUE", "agent": "main", "message_type": "observation"},
        {"role": "assistant", "content": "look", "thought": "look", "action": "ls", "agent": "main",
         "tool_calls": [call], "message_type": "action"},
        {"role": "tool", "content": "a.py", "agent": "main", "message_type": "observation",
         "tool_call_ids": ["call_1"]},
    ]}


def openhands_doc() -> list[dict[str, Any]]:
    meta = {"function_name": "execute_bash", "tool_call_id": "toolu_1", "model_response": {},
            "total_calls_in_response": 1}
    return [
        {"id": 0, "timestamp": "2025-01-27T22:44:56", "source": "user", "message": "hi", "action": "message",
         "args": {"content": "run ls"}},
        {"id": 1, "timestamp": "2025-01-27T22:44:57", "source": "agent", "message": "", "action": "run",
         "tool_call_metadata": meta, "args": {"command": "ls"}},
        {"id": 2, "timestamp": "2025-01-27T22:44:58", "source": "agent", "message": "ran", "cause": 1,
         "observation": "run", "tool_call_metadata": meta, "content": "a.py", "extras": {"exit_code": 0}},
        {"id": 3, "timestamp": "2025-01-27T22:44:59", "source": "agent", "message": "done", "action": "finish",
         "args": {"outputs": {}}},
    ]


DOCS: dict[str, tuple[str, Any]] = {
    "gemini": ("gemini", gemini_doc),
    "swe-agent": ("swe-agent", fc_doc),
    "swe-agent-text": ("swe-agent", swe_text_doc),
    "mini-swe-agent": ("mini-swe-agent", mini_doc),
    "openhands": ("openhands", openhands_doc),
}


def refused(tmp_path: pathlib.Path, fmt: str, text: str | bytes, code: int = 3) -> dict[str, Any]:
    """Import ``text`` through the command: it must exit ``code``, write nothing, and say why in
    its --json document (returned)."""
    src = tmp_path / "src"
    src.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    dest = tmp_path / "dest"
    got, out, err = run_cli("import", fmt, str(src), str(dest), "--json")
    assert got == code, (got, out, err)
    assert not dest.exists() and [p.name for p in tmp_path.iterdir()] == ["src"]  # not even a temp dir
    doc: dict[str, Any] = json.loads(err)
    return doc


@pytest.mark.parametrize("name", sorted(DOCS))
def test_truncated_document_names_the_line_and_column_where_it_stops(tmp_path: pathlib.Path, name: str) -> None:
    fmt, make = DOCS[name]
    text = json.dumps(make(), indent=2)
    cut = text[: len(text) * 2 // 3]
    doc = refused(tmp_path, fmt, cut)
    line = cut.count("\n") + 1
    assert doc["line"] == line and doc["defect"] == "torn"
    assert f"line {line}, column " in doc["error"] and "ends inside a JSON value" in doc["error"]


@pytest.mark.parametrize(("fmt", "doc", "path", "what"), [
    ("swe-agent", lambda: {**fc_doc(), "history": {"0": {}}}, "/history", "history is a JSON object"),
    ("gemini", lambda: {**gemini_doc(), "messages": "none"}, "/messages", "messages is a JSON string"),
    ("swe-agent", lambda: {"history": [*fc_doc()["history"][:2], {**fc_doc()["history"][2], "tool_calls": "ls"}]},
     "/history/2/tool_calls", "tool_calls is a JSON string"),
    ("openhands", lambda: [openhands_doc()[0], {**openhands_doc()[1], "tool_call_metadata": [1]}],
     "/1/tool_call_metadata", "tool_call_metadata is a JSON array"),
    ("gemini", lambda: {**gemini_doc(), "messages": [{"type": "gemini", "toolCalls": [{"id": 7, "name": "x"}]}]},
     "/messages/0/toolCalls/0", "id is a JSON number"),
    ("mini-swe-agent", lambda: {"messages": [{"role": "user", "content": "x"}, "text"]}, "/messages/1",
     "a message is a JSON string"),
])
def test_a_wrong_type_at_a_path_is_named(tmp_path: pathlib.Path, fmt: str, doc: Any, path: str, what: str) -> None:
    got = refused(tmp_path, fmt, json.dumps(doc(), indent=2))
    assert got["defect"] == "wrong-type"
    assert f": {path}: wrong-type: " in got["error"] and what in got["error"], got["error"]
    assert got["at"] == path  # the place as a field of its own, not only inside the message


ORPHANS: list[tuple[str, Any, str]] = [
    ("swe-agent", lambda: {"history": [*fc_doc()["history"], {"role": "tool", "content": "?", "tool_call_ids": ["x"]}]},
     "/history/4/tool_call_ids/0"),
    ("swe-agent", lambda: {"history": [*fc_doc()["history"], fc_doc()["history"][3]]}, "/history/4/tool_call_ids/0"),
    ("mini-swe-agent", lambda: {"messages": [{"role": "user", "content": "x"},
                                             {"role": "tool", "tool_call_id": "c9", "content": "out"}]},
     "/messages/1/tool_call_id"),
    ("openhands", lambda: [openhands_doc()[0], {**openhands_doc()[2], "tool_call_metadata": None, "cause": 99}],
     "/1/cause"),
    ("openhands", lambda: [openhands_doc()[0], openhands_doc()[2]], "/1"),
]


@pytest.mark.parametrize(("fmt", "doc", "path"), ORPHANS)
def test_a_tool_result_with_no_call_is_refused_or_kept_unmapped(tmp_path: pathlib.Path, fmt: str, doc: Any,
                                                                path: str) -> None:
    text = json.dumps(doc(), indent=2)
    got = refused(tmp_path, fmt, text)
    assert got["defect"] == "orphan-result" and f": {path}: orphan-result: " in got["error"], got["error"]
    rep = importers.import_file(fmt, str(tmp_path / "src"), str(tmp_path / "kept"), skip_bad=True)
    assert [(s["at"], s["defect"]) for s in rep.skipped] == [(path, "orphan-result")]
    assert f"{path}: orphan-result:" in rep.summary()
    lines, final_newline, _ = importers.export_journal(str(tmp_path / "kept"))
    assert ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode() == text.encode()


def test_aider_file_cut_mid_block_names_the_blocks_line(tmp_path: pathlib.Path) -> None:
    text = aider_text()
    cut = text[: text.index("x = 1\n") + len("x = 1\n")]
    got = refused(tmp_path, "aider", cut)
    assert got["line"] == 35 and got["defect"] == "torn" and "SEARCH/REPLACE block" in got["error"]
    # a block a new prompt interrupts is the model's malformed edit, not a cut file: imported, no call
    src = tmp_path / "interrupted.md"
    src.write_text(cut + "#### try again  \n")
    importers.import_file("aider", str(src), str(tmp_path / "j"))
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event["toolCallId"] for r in j.read() if r.event["type"] == "tool.requested"] == ["line-14"]


def test_a_document_over_the_size_limit_is_refused_before_it_is_read_whole(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "DOCUMENT_BYTES_MAX", 4096)
    monkeypatch.setattr(documents, "READ_BYTES", 512)
    big = json.dumps({**gemini_doc(), "pad": "x" * 100_000})
    got = refused(tmp_path, "gemini", big, code=1)
    assert "larger than 4096 bytes" in got["error"]
    fs = FaultyFileSystem(OsFileSystem())
    with pytest.raises(DocumentTooLargeError):
        importers.import_file("gemini", str(tmp_path / "src"), str(tmp_path / "d"), fs=fs)
    assert fs.calls["pread"] <= 4096 // 512 + 1  # stopped at the limit: never read the 100 KB


def test_a_number_of_thousands_of_digits_is_refused_with_its_line(tmp_path: pathlib.Path) -> None:
    doc = json.dumps(gemini_doc(), indent=2).replace('"total": 12', '"total": ' + "9" * 5000)
    got = refused(tmp_path, "gemini", doc)
    line = doc[: doc.index("9" * 5000)].count("\n") + 1
    assert got["line"] == line and "invalid JSON" in got["error"]


def test_deep_nesting_is_refused_with_its_place(tmp_path: pathlib.Path) -> None:
    got = refused(tmp_path, "openhands", "[" * 100_000)  # past the parser's own recursion limit
    assert got["line"] == 1 and f"line 1, column {NESTING_DEPTH_MAX + 1}" in got["error"]
    assert "nested deeper" in got["error"]
    deep: Any = "x"
    for _ in range(NESTING_DEPTH_MAX + 5):  # within the parser's limit, past ours
        deep = [deep]
    doc = gemini_doc()
    doc["messages"][0]["extra"] = deep
    got = refused(tmp_path, "gemini", json.dumps(doc))
    assert ": JSON path /messages/0/extra/0/0/" in got["error"] and "nested deeper" in got["error"]


def test_skip_bad_keeps_a_document_it_cannot_parse_exactly(tmp_path: pathlib.Path) -> None:
    text = json.dumps(fc_doc(), indent=2)[:-40]
    src = tmp_path / "cut.traj"
    src.write_text(text)
    rep = importers.import_file("swe-agent", str(src), str(tmp_path / "j"), skip_bad=True)
    assert rep.skipped[0]["defect"] == "torn" and rep.mapped.get("tool.requested") is None
    lines, final_newline, _ = importers.export_journal(str(tmp_path / "j"))
    assert "\n".join(lines) + ("\n" if final_newline and lines else "") == text


def test_a_write_failure_part_way_leaves_nothing(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "s.json"
    src.write_text(json.dumps(gemini_doc(), indent=2))
    fs = FaultyFileSystem(OsFileSystem())
    fs.fail("fdatasync")  # the records' sync: after the journal is created, before it is published
    with pytest.raises(WriteFailedError):
        importers.import_file("gemini", str(src), str(tmp_path / "out" / "j"), fs=fs)
    assert fs.injected
    assert not (tmp_path / "out" / "j").exists()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # no temporary build left


# --- many chunks, and chunks that do not add up ------------------------------------------------


def multi_chunk_journal(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, list[dict[str, Any]]]:
    """An aider file with bytes that are not UTF-8 and characters across chunk bounds, imported
    in chunks of 64 bytes: (its bytes, the journal's events)."""
    monkeypatch.setattr(documents, "CHUNK_BYTES", 64)
    data = aider_text().encode() + "é€😀".encode() * 30 + b"\xff\xfe bad bytes\n" + "ü".encode() * 100
    src = tmp_path / "h.md"
    src.write_bytes(data)
    importers.import_file("aider", str(src), str(tmp_path / "j"))
    with journal.open(tmp_path / "j", readonly=True) as j:
        return data, [r.event for r in j.read()]


def exported(path: pathlib.Path) -> bytes:
    lines, final_newline, _ = importers.export_journal(str(path))
    return ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode("utf-8", "surrogateescape")


def rewrite(tmp_path: pathlib.Path, evs: list[dict[str, Any]]) -> pathlib.Path:
    dest = tmp_path / "crafted"
    with journal.open(dest, create=True) as j:
        j.append_many(evs)
    return dest


def test_many_chunks_roundtrip_and_each_is_below_the_limit(tmp_path: pathlib.Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    data, evs = multi_chunk_journal(tmp_path, monkeypatch)
    chunks = [e["data"]["import"] for e in evs if "chunk" in e["data"].get("import", {})]
    assert len(chunks) > 10 and any("hex" in c for c in chunks)
    assert all(len(c.get("text", "").encode()) <= 64 and len(c.get("hex", "")) <= 128 for c in chunks)
    assert exported(tmp_path / "j") == data


@pytest.mark.parametrize("fault", ["drop", "swap", "edit", "declared"])
def test_chunks_that_do_not_add_up_are_corruption(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                  fault: str) -> None:
    _, evs = multi_chunk_journal(tmp_path, monkeypatch)
    at = [i for i, e in enumerate(evs) if "chunk" in e["data"].get("import", {})]
    if fault == "drop":
        del evs[at[3]]
    elif fault == "swap":
        evs[at[2]], evs[at[3]] = evs[at[3]], evs[at[2]]
    elif fault == "edit":
        block = evs[at[0]]["data"]["import"]
        block["text"] = block["text"].replace("a", "b")
    else:  # a crafted size: compared, never used to allocate
        evs[-1]["data"]["bytes"] = 10**18
    with pytest.raises(CorruptionError) as err:
        exported(rewrite(tmp_path, evs))
    # a chunk out of its place is found by its index and offset, before the digest would find it
    assert ("comes next" if fault in ("drop", "swap") else "do not match") in str(err.value)


def test_a_refusal_is_a_document_error_with_its_place(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "s.json"
    src.write_text('{"messages": [\n  {"type": "user",, }\n]}')
    with pytest.raises(DocumentError) as err:
        importers.import_file("gemini", str(src), str(tmp_path / "j"))
    assert err.value.lineno == 2 and err.value.at == "line 2, column 19" and err.value.defect == "malformed"


def test_a_document_of_too_many_values_is_refused_before_it_is_parsed(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "VALUES_MAX", 1000)
    parsed: list[str] = []
    monkeypatch.setattr(documents, "json", types.SimpleNamespace(loads=parsed.append,
                                                                 JSONDecodeError=json.JSONDecodeError))
    got = refused(tmp_path, "openhands", "[" + ",".join(["[]"] * 600) + "," + ",".join(['""'] * 900) + "]", code=1)
    assert "holds up to 1501 JSON containers and strings" in got["error"] and parsed == []
