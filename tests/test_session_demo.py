"""The demo story runs end to end: a real SIGKILL after a tool started, then repair, replay and the gate."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from journal.cli.demo_session import run_story


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_story_shows_unknown_outcome_and_a_paused_gate(tmp_path: Path) -> None:
    out = io.StringIO()
    run_story(out, str(tmp_path))
    text = out.getvalue()
    assert "SIGKILL (exit -9)" in text
    assert "tool.result [TOOL_OUTCOME_UNKNOWN] closes tool.started" in text
    assert "tool.result [TOOL_NOT_STARTED] closes tool.requested" in text
    assert "resume gate: PAUSED" in text and "pause TOOL_OUTCOME_UNKNOWN [call_3]" in text
    assert "reopened once more: 0 closers appended" in text
