"""Reading a JSON-lines source: one value per line, every defect reported with its line number.

A line is kept as its exact text next to the parsed object, so that export can write it back
byte for byte. Defects are named, never guessed around:

* ``torn``: the last line has no newline and is not complete JSON (a writer died mid-line);
* ``joined``: several JSON values on one line with no newline between them (two writers, or
  a lost newline); with ``split_joined`` they become separate values, each remembering its line
  and its index on that line;
* ``malformed``: anything else that is not one JSON object (bad JSON, not UTF-8, an array...).

Blank lines are kept as blank lines (not an error: many writers and editors leave them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


@dataclass
class SourceLine:
    lineno: int  # 1-based
    text: str | None  # the exact line without its newline (None if not UTF-8)
    raw: bytes
    obj: dict[str, Any] | None = None
    defect: str | None = None  # "torn" | "joined" | "malformed", or None
    reason: str = ""
    blank: bool = False
    split_index: int | None = None  # index of this value on a joined line
    split_count: int = 1


class MalformedLineError(ValueError):
    """A source line that is not one JSON object; ``lineno`` says which."""

    def __init__(self, path: str, line: SourceLine, hint: str) -> None:
        super().__init__(f"{path}: line {line.lineno}: {line.defect}: {line.reason}. {hint}")
        self.lineno = line.lineno
        self.defect = line.defect
        self.reason = line.reason


def _split_values(text: str) -> list[Any] | None:
    """The JSON values on a line written back to back, or None if it is not just that."""
    values: list[Any] = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos] in _WS:
            pos += 1
        if pos == n:
            return values if len(values) > 1 else None
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        values.append(value)


def parse_line(lineno: int, raw: bytes, last_without_newline: bool, split_joined: bool) -> list[SourceLine]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 ({exc.reason} at byte {exc.start})"
        return [SourceLine(lineno, None, raw, defect="malformed", reason=reason)]
    if not text.strip(_WS):
        return [SourceLine(lineno, text, raw, blank=True)]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        values = _split_values(text) if exc.msg == "Extra data" else None
        if values is not None and all(isinstance(v, dict) for v in values):
            if not split_joined:
                return [SourceLine(lineno, text, raw, defect="joined",
                                   reason=f"{len(values)} JSON objects joined with no newline between them")]
            return [SourceLine(lineno, None, raw if i == 0 else b"", obj=v, split_index=i,
                               split_count=len(values)) for i, v in enumerate(values)]
        if last_without_newline:
            return [SourceLine(lineno, text, raw, defect="torn",
                               reason=f"the last line ends without a newline inside a JSON value ({exc.msg})")]
        reason = f"invalid JSON: {exc.msg} at column {exc.colno}"
        return [SourceLine(lineno, text, raw, defect="malformed", reason=reason)]
    if not isinstance(obj, dict):
        return [SourceLine(lineno, text, raw, defect="malformed", reason=f"a JSON {type(obj).__name__}, not an object")]
    return [SourceLine(lineno, text, raw, obj=obj)]


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
