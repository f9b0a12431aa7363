"""Reading a JSON-lines source: one value per line, every defect reported with its line number.

A line is kept as its exact text next to the parsed object, so that export can write it back
byte for byte. Defects are named, never guessed around:

* ``torn``: the last line has no newline and is not complete JSON (a writer died mid-line);
* ``joined``: several JSON values on one line with no newline between them (two writers, or
  a lost newline); with ``split_joined`` they become separate values, each remembering its line
  and its index on that line;
* ``malformed``: anything else that is not one JSON object (bad JSON, not UTF-8, an array...,
  or nesting deeper than NESTING_DEPTH_MAX).

Blank lines are kept as blank lines (not an error: many writers and editors leave them).

Two things valid JSON may hold that a journal cannot store are replaced in the parsed object
(``obj``), while the line's exact text stays the record of what was written: a lone UTF-16
surrogate escape (``"\\ud83d"``: Node.js writes one when it cuts a string in the middle of an
emoji) reads as U+FFFD, as a UTF-8 decoder reads a cut character; a number beyond a double's range
(``1e999``), or Python's ``NaN`` and ``Infinity``, reads as null. ``replaced`` says so.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from journal.errors import JournalError

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"
# Far deeper than real logs nest (the corpus's deepest lines, Claude Code's, have 6 levels), and
# far enough below the engine's limits that a stored event (a line sits 3 levels down in its
# carrier) is written and read back on every path: orjson writes 254 levels and reads 1024, and
# the json fallback needs a Python frame per level, so a line nested 100,000 deep is a defect of
# its own instead of a RecursionError wherever it is walked.
NESTING_DEPTH_MAX = 200
_TOO_DEEP = f"nested deeper than {NESTING_DEPTH_MAX} levels"
# A lone surrogate can only come from an escape in the surrogate range: a C-speed look at the
# text leaves every other line alone. A float that is not finite (1e999, Python's NaN) is found by
# the compact encoding every line gets anyway (the importer compares it with the text).
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]").search
_SURROGATE = re.compile("[\ud800-\udfff]")
_COMPACT_FINITE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

@dataclass
class SourceLine:
    lineno: int  # 1-based
    text: str | None  # the exact line without its newline (a joined line's piece: its own; None if not UTF-8)
    raw: bytes
    obj: dict[str, Any] | None = None
    defect: str | None = None  # "torn" | "joined" | "malformed", or None
    reason: str = ""
    blank: bool = False
    split_index: int | None = None  # index of this value on a joined line
    split_count: int = 1
    replaced: bool = False  # obj has U+FFFD or null where the text has a value a journal cannot store
    compact: str | None = None  # obj as compact JSON (None when replaced)


class MalformedLineError(JournalError, ValueError):
    """A source line that is not one JSON object; ``lineno`` says which."""

    def __init__(self, path: str, line: SourceLine, hint: str) -> None:
        super().__init__(f"{path}: line {line.lineno}: {line.defect}: {line.reason}. {hint}")
        self.lineno = line.lineno
        self.defect = line.defect
        self.reason = line.reason


class TooDeepError(ValueError):
    """JSON nested deeper than NESTING_DEPTH_MAX."""

    def __init__(self) -> None:
        super().__init__(_TOO_DEEP)


def _too_deep(value: Any, depth_max: int) -> bool:
    """Whether ``value`` (a parsed JSON value) nests containers deeper than ``depth_max``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > depth_max:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _storable(value: Any) -> Any:
    """``value`` with lone surrogates as U+FFFD and non-finite floats as None (depth is bounded)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def checked(value: Any, text: str) -> tuple[Any, bool, str | None]:
    """A value json parsed from ``text``, made storable: (the value, whether anything was
    replaced, its compact JSON unless it was).

    Raises TooDeepError when it nests deeper than NESTING_DEPTH_MAX (the count of brackets bounds
    the depth, so a line with few is never walked)."""
    if isinstance(value, (dict, list)) and text.count("[") + text.count("{") > NESTING_DEPTH_MAX:
        if _too_deep(value, NESTING_DEPTH_MAX):
            raise TooDeepError
    try:
        compact = _COMPACT_FINITE(value)
        if _MAYBE_SURROGATE(text):
            compact.encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # a float that is not finite, a lone surrogate
        return _storable(value), True, None
    return value, False, compact


def load_json(text: str) -> Any:
    """json.loads for JSON found inside a line (a tool call's arguments), made storable;
    ValueError (TooDeepError for nesting) for what it refuses."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeepError from None
    return checked(value, text)[0]


def _split_values(text: str) -> list[tuple[Any, str]] | None:
    """The JSON values on a line written back to back, each with its exact text; None if the
    line is not just that. Raises RecursionError for a value nested too deep."""
    values: list[tuple[Any, str]] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return values if len(values) > 1 else None
        try:
            value, end = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        values.append((value, text[pos:end]))
        pos = end


def parse_line(lineno: int, raw: bytes, last_without_newline: bool, split_joined: bool) -> list[SourceLine]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 ({exc.reason} at byte {exc.start})"
        return [SourceLine(lineno, None, raw, defect="malformed", reason=reason)]
    if not text.strip(_WS):
        return [SourceLine(lineno, text, raw, blank=True)]
    try:
        return _parse_text(lineno, text, raw, last_without_newline, split_joined)
    except (RecursionError, TooDeepError):
        return [SourceLine(lineno, text, raw, defect="malformed", reason=_TOO_DEEP)]
    except ValueError as exc:  # json's own refusals that are not syntax (an integer of 5,000 digits)
        return [SourceLine(lineno, text, raw, defect="malformed", reason=f"invalid JSON: {exc}")]


def _parse_text(lineno: int, text: str, raw: bytes, last_without_newline: bool, split_joined: bool) -> list[SourceLine]:
    try:
        obj = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        values = _split_values(text) if exc.msg == "Extra data" else None
        if values is not None and all(isinstance(v, dict) for v, _ in values):
            if not split_joined:
                return [SourceLine(lineno, text, raw, defect="joined",
                                   reason=f"{len(values)} JSON objects joined with no newline between them")]
            out = []
            for i, (v, piece) in enumerate(values):
                value, replaced, compact = checked(v, piece)
                out.append(SourceLine(lineno, piece, raw if i == 0 else b"", obj=value, split_index=i,
                                      split_count=len(values), replaced=replaced, compact=compact))
            return out
        if last_without_newline:
            return [SourceLine(lineno, text, raw, defect="torn",
                               reason=f"the last line ends without a newline inside a JSON value ({exc.msg})")]
        reason = f"invalid JSON: {exc.msg} at column {exc.colno}"
        return [SourceLine(lineno, text, raw, defect="malformed", reason=reason)]
    if not isinstance(obj, dict):
        return [SourceLine(lineno, text, raw, defect="malformed", reason=f"a JSON {type(obj).__name__}, not an object")]
    value, replaced, compact = checked(obj, text)
    return [SourceLine(lineno, text, raw, obj=value, replaced=replaced, compact=compact)]


def read_source(
    data: bytes, split_joined: bool, progress: Callable[[int, int], None] | None = None
) -> tuple[list[SourceLine], bool]:
    """Every line of ``data`` parsed; and whether the file ends with a newline."""
    final_newline = data.endswith(b"\n") or not data
    parts = data.split(b"\n")
    if final_newline:
        parts.pop()
    out: list[SourceLine] = []
    total = len(data) or 1
    done = 0
    for i, raw in enumerate(parts):
        last = i == len(parts) - 1 and not final_newline
        out.extend(parse_line(i + 1, raw, last, split_joined))
        done += len(raw) + 1
        if progress is not None and i % 64 == 0:
            progress(min(done, total), total)
    if progress is not None:
        progress(total, total)
    return out, final_newline


def iter_defects(lines: list[SourceLine]) -> Iterator[SourceLine]:
    return (ln for ln in lines if ln.defect is not None)
