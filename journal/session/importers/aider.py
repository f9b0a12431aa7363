"""aider chat histories (``.aider.chat.history.md``): Markdown, kept exactly by documents.py.

aider appends every chat to one file, so one file holds several sessions, each opening with a
``# aider chat started at ...`` line; the journal is one session and each chat start ends the
open turn. What the file's lines mean:

* ``#### `` lines: the user's input (a message of several lines has the prefix on each); one
  run of them is one user message and starts a turn (commands such as ``/code`` included);
* ``> `` lines: what aider printed (token counts, questions and answers, ``Applied edit to
  PATH``); they are not mapped, except that ``Applied edit to PATH`` is the ok result of the
  reply's edits to PATH and ``Did not apply edit to PATH`` their error result;
* every other line belongs to the assistant's reply (one message per run of them), except
  aider's own report of an edit that failed to match (``## SearchReplaceNoExactMatch``, which
  quotes the block back), left unmapped; a
  ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` block in it is a tool call ``edit``
  (call id ``line-N``, N the SEARCH line) with its path (the line before the block, or before
  its opening fence), search and replace text. An edit that aider printed no outcome for is
  closed at the end (documents.py) and the report names it.

A file that ends inside a SEARCH/REPLACE block was cut mid-block: DocumentError naming the
SEARCH line (exit 3). A block that a new prompt or chat interrupts is left as text, unmapped (the
model wrote a malformed edit, which aider did not apply either). A reply may quote with ``> ``
too; the file does not tell such a line from aider's own, so it is read as aider's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journal.session.importers.documents import DocBuilder, DocumentError, Skip

CHAT_START = "# aider chat started at "
PROMPT = "#### "
NOTE = "> "
SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
APPLIED, NOT_APPLIED = "Applied edit to ", "Did not apply edit to "
FAILED_REPORT = "## SearchReplaceNoExactMatch"


@dataclass
class _Edit:
    lineno: int
    path: str | None
    search: list[str] = field(default_factory=list)
    replace: list[str] = field(default_factory=list)
    in_replace: bool = False


@dataclass
class _Reply:
    lineno: int
    lines: list[str] = field(default_factory=list)
    edits: list[_Edit] = field(default_factory=list)
    block: _Edit | None = None
    report: bool = False  # aider's own report of an edit that failed to match, not the model's reply


def _clean(line: str) -> str:
    """A line without its carriage return and Markdown's hard-break spaces (aider ends each
    printed line with two)."""
    return line.rstrip("\r").rstrip(" ")


def _edit_path(reply: list[str]) -> str | None:
    """The path an edit block names: the line before it, or before its opening fence."""
    for line in reversed(reply[-2:]):
        s = line.strip()
        if s.startswith("```"):
            continue
        s = s.strip("`*# ").strip()
        return s if s and not any(c.isspace() for c in s) else None  # prose before a block names no path
    return None


class AiderFormat:
    name = "aider"
    description = "aider chat history (.aider.chat.history.md; several chats appended)"
    document = True

    def parse(self, data: bytes, source: str) -> Any:
        text = data.decode("utf-8", "replace")  # the exact bytes are in the chunks; this is for reading
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        block_at = 0
        for n, line in enumerate(lines, 1):
            s = _clean(line)
            if s.startswith((PROMPT, CHAT_START)) or s == PROMPT.strip():
                block_at = 0  # a block a prompt interrupts is a malformed edit, not a cut file
            elif s == SEARCH:
                block_at = n
            elif s == REPLACE:
                block_at = 0
        if block_at:
            raise DocumentError(source, "torn", "the file ends inside a SEARCH/REPLACE block (no "
                                f"'{REPLACE}' line after it)", f"line {block_at}", block_at)
        return lines

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        return None, None, None

    def walk(self, doc: Any, b: DocBuilder) -> None:
        lines: list[str] = doc
        reply: _Reply | None = None
        prompt: list[str] = []
        prompt_at = 0
        # the last reply's edit calls by path: what aider's next notes report on (by path, so a
        # note is matched without looking through every edit of a reply of thousands)
        recent: dict[str | None, list[str]] = {}

        def flush_prompt() -> None:
            nonlocal prompt
            if prompt:
                recent.clear()  # a new prompt: later notes are about its own replies
                b.user("\n".join(prompt), f"line {prompt_at}", None)
                prompt = []

        def flush_reply() -> None:
            nonlocal reply
            if reply is None:
                return
            if reply.report:
                reply = None  # aider quoting the failed block back: kept in the chunks, not a call
                return
            body = list(reply.lines)
            while body and not body[-1].strip():
                body.pop()
            if body:
                b.assistant("\n".join(body), f"line {reply.lineno}", None)
            if reply.edits:
                recent.clear()
            for e in reply.edits:
                try:
                    recent.setdefault(e.path, []).append(
                        b.call(f"line-{e.lineno}", "edit", {"path": e.path, "search": "\n".join(e.search),
                                                            "replace": "\n".join(e.replace)}, f"line {e.lineno}", None))
                except Skip:
                    continue
            reply = None

        for n, raw in enumerate(lines, 1):
            line = raw.rstrip("\r")
            s = _clean(line)
            if s.startswith(CHAT_START):
                flush_prompt()
                flush_reply()
                b.end_turn("completed", f"line {n}", None, chatStarted=s[len(CHAT_START):])
            elif s.startswith(PROMPT) or s == PROMPT.strip():
                flush_reply()
                if not prompt:
                    prompt_at = n
                prompt.append(s[len(PROMPT):])
            elif (s.startswith(NOTE) or s == NOTE.strip()) and (reply is None or reply.block is None):
                flush_prompt()
                flush_reply()
                self._note(s[len(NOTE):], n, b, recent)
            else:
                flush_prompt()
                if reply is None:
                    if not s:
                        continue  # the blank line after a prompt or a note
                    reply = _Reply(n, report=s.startswith(FAILED_REPORT))
                self._reply_line(reply, line, s, n)
        flush_prompt()
        flush_reply()

    def _reply_line(self, reply: _Reply, line: str, s: str, n: int) -> None:
        block = reply.block
        if block is None:
            if s == SEARCH:
                reply.block = _Edit(n, _edit_path(reply.lines))
            reply.lines.append(line)
            return
        reply.lines.append(line)
        if s == REPLACE:
            reply.edits.append(block)
            reply.block = None
        elif s == DIVIDER and not block.in_replace:
            block.in_replace = True
        else:
            (block.replace if block.in_replace else block.search).append(line)

    def _note(self, note: str, n: int, b: DocBuilder, recent: dict[str | None, list[str]]) -> None:
        for prefix, failed in ((APPLIED, False), (NOT_APPLIED, True)):
            if note.startswith(prefix):
                path = note[len(prefix):].strip()
                for cid in recent.pop(path, []):  # each gets its result here, or has one: none is looked at again
                    call = b.open_calls.get(cid)
                    if call is not None and isinstance(call.args, dict) and call.args.get("path") == path:
                        b.result(cid, note, failed, f"line {n}", None)
