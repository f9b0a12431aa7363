"""`journal export --format markdown`: a session as one document, read-only, secrets redacted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import journal
from journal.session import open as open_session
from journal.session.redact import RULES, Redactor

SECRETS = {
    "private-key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
    "anthropic-key": "sk-ant-api03-" + "A1b2C3d4" * 4,
    "openai-key": "sk-proj-" + "Zz09Yy18" * 4,
    "github-token": "ghp_" + "a1B2c3D4e5" * 4,
    "aws-access-key": "AKIA" + "ABCDEFGH23456789",
    "google-api-key": "AIza" + "Sy" + "x" * 33,
    "slack-token": "xoxb-" + "1234567890-abcdefghij",
    "stripe-key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "huggingface-token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "authorization": "Authorization: Basic dXNlcjpodW50ZXIy",
    "bearer-token": "curl -H 'x: Bearer abcdefghijklmnop0123456789'",
    "url-password": "postgres://app:s3cr3t-pass@db.internal:5432/prod",
    "env-assignment": "DATABASE_PASSWORD=correct-horse-battery",
}
# Words around secrets that must survive: prose that names secrets without holding one.
PROSE = ("Basic authentication and token validation are fine; the API key goes in the header. "
         "PATH=/usr/bin and HOME=/root are not secrets.")


def _hidden_part(rule: str, sample: str) -> str:
    """The part of a sample that must not appear after redaction."""
    cut = {"authorization": "dXNlcjpodW50ZXIy", "bearer-token": "abcdefghijklmnop0123456789",
           "url-password": "s3cr3t-pass", "env-assignment": "correct-horse-battery",
           "private-key": "b3BlbnNzaC1rZXktdjEAAAAA"}
    return cut.get(rule, sample)


def test_every_rule_has_a_sample_and_redacts_it() -> None:
    assert {r.name for r in RULES} == set(SECRETS)
    for rule, sample in SECRETS.items():
        r = Redactor()
        out = r.text(f"before {sample} after")
        assert _hidden_part(rule, sample) not in out, rule
        assert f"[REDACTED:{rule}]" in out, (rule, out)
        assert r.counts == {rule: 1}, (rule, r.counts)
        assert out.startswith("before ") and out.endswith(" after"), out


def test_prose_and_ordinary_assignments_are_left_alone() -> None:
    r = Redactor()
    assert r.text(PROSE) == PROSE
    assert r.total == 0


def test_a_private_key_without_its_end_line_is_redacted_to_the_end() -> None:
    r = Redactor()
    out = r.text("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + "A" * 100)
    assert out == "key:\n[REDACTED:private-key]"


def test_secret_named_fields_of_json_values_are_redacted() -> None:
    r = Redactor()
    got = r.value({"api_key": "abc", "nested": [{"Password": "p"}, {"n": 1, "cmd": "echo " + SECRETS["openai-key"]}]})
    assert got == {"api_key": "[REDACTED:secret-field]",
                   "nested": [{"Password": "[REDACTED:secret-field]"}, {"n": 1, "cmd": "echo [REDACTED:openai-key]"}]}
    assert r.counts == {"secret-field": 2, "openai-key": 1}


def test_disabled_redactor_changes_nothing() -> None:
    r = Redactor(enabled=False)
    text = " ".join(SECRETS.values())
    assert r.text(text) == text and r.value({"token": "x"}) == {"token": "x"} and r.total == 0


def _write(path: Path, crash_mid_tool: bool = True) -> None:
    """A session with a finished tool call holding secrets, and one cut off mid-tool (a crash)."""
    s = open_session(path, create=True, session_id="s-t", durability_floor="flush",
                     clock=lambda: "2026-01-01T00:00:00Z")
    s.append("user.message", {"text": "deploy it <script>alert(1)</script>\n```\n# not a heading"})
    s.append("turn.started", turn_id="t1")
    s.append("tool.requested", {"tool": "read_env", "args": {"file": ".env", "token": "tok-123"},
                                "sideEffect": "read", "idempotency": "safe"}, turn_id="t1", tool_call_id="c1")
    s.append("tool.started", turn_id="t1", tool_call_id="c1")
    s.append("tool.result", {"status": "ok", "output": "OPENAI_API_KEY=" + SECRETS["openai-key"] + "\n````x"},
             turn_id="t1", tool_call_id="c1")
    s.append("assistant.message", {"text": "Read it."}, turn_id="t1")
    if crash_mid_tool:
        s.append("tool.requested", {"tool": "deploy", "args": {}, "sideEffect": "external-write",
                                    "idempotency": "unsafe"}, turn_id="t1", tool_call_id="c2")
        s.append("tool.started", turn_id="t1", tool_call_id="c2")
    s.close()


def _export(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal", "export", *args], capture_output=True, text=True,
                          timeout=120)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for root, _dirs, files in sorted(os.walk(path)):
        for name in sorted(files):
            p = Path(root) / name
            h.update(str(p.relative_to(path)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_markdown_shows_closers_and_the_gate_and_redacts(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path)
    open_session(path).close()  # the next runtime's open repairs: closers for turn t1 and call c2
    before = _digest(path)
    out = tmp_path / "s.md"
    got = _export(str(path), str(out), "--format", "markdown", "--json")
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    md = out.read_text()
    assert _digest(path) == before  # read-only: not a byte changed
    assert SECRETS["openai-key"] not in md and "tok-123" not in md
    assert summary["redacted"] == 2 and summary["redactedByRule"] == {"openai-key": 1, "secret-field": 1}
    assert "secrets redacted: 2" in md
    assert md.startswith("# deploy it &lt;script&gt;")
    assert "<script>" not in md  # what a message says cannot become the document's markup
    assert "1 turns · 2 tool calls" in md
    assert "**Result** of `c2`: **TOOL_OUTCOME_UNKNOWN**" in md and "**written by repair**" in md
    assert "it may have run" in md
    assert "## Resume gate: paused" in md and "**TOOL_OUTCOME_UNKNOWN** [pause] (`c2`)" in md
    # The output holding four backticks is fenced with five: it cannot close its block early.
    assert "`````\nOPENAI_API_KEY=[REDACTED:openai-key]\n````x\n`````" in md


def test_no_redact_keeps_secrets_and_a_torn_tail_is_shown_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path, crash_mid_tool=False)
    seg = sorted(path.glob("*.seg"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x01\x02torn")  # a record's first bytes and no more: a torn tail
    out = tmp_path / "s.md"
    before = _digest(path)
    got = _export(str(path), str(out), "--format", "markdown", "--no-redact")
    assert got.returncode == 0, got.stderr
    md = out.read_text()
    assert _digest(path) == before  # the torn tail is reported, not cut: export never repairs
    assert SECRETS["openai-key"] in md and "tok-123" in md
    assert "secrets: not redacted" in md
    assert "**damage**: the tail of" in md and "torn" in md
    assert "## What a repair would close" in md


def test_export_needs_no_lock_and_runs_beside_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path, crash_mid_tool=False)
    with journal.open(path):  # a writer holds the journal's lock
        got = _export(str(path), "-", "--format", "markdown")
    assert got.returncode == 0, got.stderr
    assert "**Assistant**" in got.stdout


@pytest.mark.parametrize("args", [["--no-redact"], ["--no-redact", "--format", "jsonl"]])
def test_no_redact_without_a_rendered_format_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "s"
    _write(path, crash_mid_tool=False)
    got = _export(str(path), str(tmp_path / "o"), *args)
    assert got.returncode == 2 and "--no-redact goes with --format markdown" in got.stderr
    assert not (tmp_path / "o").exists()


def test_html_is_one_standalone_page_redacted_with_closers_and_damage(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _write(path)
    open_session(path).close()  # repaired: closers for turn t1 and call c2
    seg = sorted(path.glob("*.seg"))[-1]
    with open(seg, "ab") as f:
        f.write(b"\x01\x02torn")
    before = _digest(path)
    out = tmp_path / "s.html"
    got = _export(str(path), str(out), "--format", "html", "--json")
    assert got.returncode == 0, got.stderr
    page = out.read_text()
    assert _digest(path) == before  # read-only: the torn tail is shown, not cut
    summary = json.loads(got.stdout)
    assert summary["redactedByRule"] == {"openai-key": 1, "secret-field": 1}
    assert SECRETS["openai-key"] not in page and "tok-123" not in page and "[REDACTED:openai-key]" in page
    # Standalone: no script, nothing loaded from anywhere, every journal value escaped.
    assert "<script" not in page.lower() and "<link" not in page.lower() and " src=" not in page
    assert "&lt;script&gt;alert(1)" in page
    assert "TOOL_OUTCOME_UNKNOWN" in page and "Resume gate" in page
    assert "torn tail" in page and summary["damage"] and "torn tail" in summary["damage"][0]
    kept = _export(str(path), str(tmp_path / "k.html"), "--format", "html", "--no-redact")
    assert kept.returncode == 0 and SECRETS["openai-key"] in (tmp_path / "k.html").read_text()


def test_the_docs_list_every_redaction_rule() -> None:
    from journal.session.redact import rules_table

    docs = (Path(__file__).resolve().parent.parent / "docs" / "CLI.md").read_text()
    assert rules_table() in docs  # the docs say what the code does, rule for rule
