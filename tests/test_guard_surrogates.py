"""A tool call whose arguments or id hold a lone surrogate (a model's output cut mid-emoji, read
from JSON's \\ud83d escape) is guarded like any other: no bare UnicodeEncodeError."""

from __future__ import annotations

import pathlib

import pytest

import journal
from journal.session.toolguard import ToolGuard, Verdict


def test_args_with_a_lone_surrogate_are_guarded(tmp_path: pathlib.Path) -> None:
    g = ToolGuard(journal.store(str(tmp_path)))
    try:
        d = g.scope("s").before("c1", "deploy", {"msg": "half an emoji \ud83d"})
        assert d.verdict is Verdict.RUN and d.run
    finally:
        g.close()


def test_the_digest_keeps_what_the_stored_copy_cannot(tmp_path: pathlib.Path) -> None:
    from journal.session.toolguard import args_digest

    # Stored, the lone surrogate reads as U+FFFD; the digest still tells the two calls apart.
    assert args_digest({"msg": "\ud83d"}) != args_digest({"msg": "\ufffd"})
    assert args_digest({"msg": "caf\u00e9"}) == args_digest({"msg": "caf\u00e9"})
    g = ToolGuard(journal.store(str(tmp_path)))
    try:
        s = g.scope("s")
        with pytest.raises(ValueError, match="UTF-8"):
            s.before("c\ud83d", "deploy", {})  # an id the envelope cannot keep as given: refused, typed
        d = s.before("c1", "deploy", {"msg": "\ud83d"})
        assert d.verdict is Verdict.RUN
        s.after("c1", {"out": "done \udc00"})
    finally:
        g.close()
    g = ToolGuard(journal.store(str(tmp_path)))
    try:
        again = g.scope("s").before("c1", "deploy", {"msg": "\ud83d"})
        assert again.verdict is Verdict.DONE and again.result == {"out": "done \ufffd"}
    finally:
        g.close()


def test_each_adapter_gives_a_framework_id_with_a_lone_surrogate_a_guard_id_it_can_keep() -> None:
    """A framework's call id cut mid-character is hashed into an id the envelope keeps, as an
    over-long one is; an ordinary id is kept as it is, so no recorded call changes its id."""
    from journal.session.toolguard import has_lone_surrogate

    makers = []
    for module, name in (("journal.adapters.adk_guard", "guard_call_id"),
                         ("journal.adapters.agent_framework_guard", "_guard_id"),
                         ("journal.adapters.strands_guard", "guard_call_id")):
        makers.append(getattr(pytest.importorskip(module), name))
    for make in makers:
        got = make("call_\ud83d")
        assert not has_lone_surrogate(got) and got != "call_\ud83d"
        assert make("call_1") == "call_1"
