"""Import a whole-document session source (one JSON document, or one Markdown file) and export
it back byte for byte: the part the document formats share (trajectories.py, aider.py).

A line format (base.py) keeps each line in the event it maps to. A document is one value whose
parts are not lines, so its bytes are kept apart from what they map to:

* right after the ``session.started`` header come the document's bytes, in order, in
  ``import.record`` events (ignorable), each ``{"import": {"chunk": i, "offset": o, "text": ...}}``
  (``"hex"`` instead of ``"text"`` for a piece that is not UTF-8) of at most CHUNK_BYTES, cut at
  a newline where one falls in the window, else at a character boundary;
* the mapped events (turns, messages, tool calls and results) follow, each derived:
  ``{"import": {"derived": true, "at": "/history/3"}}``, ``at`` being the JSON Pointer of the
  element it comes from (``line 12`` for Markdown);
* ``import.finished`` says the document's byte count and SHA-256.

Export concatenates the chunks and checks their indexes, offsets, count and digest against the
finished event: a journal whose chunks were lost, reordered or changed is CorruptionError,
never a different file. The declared count is compared, never used to size anything.

A tool call the document holds no result for (the run stopped after it, or the runtime
records none for it) is closed by the importer with a synthetic ``tool.result`` (status
TOOL_OUTCOME_UNKNOWN, ``synthetic: true``), and the import report names each one: a reader of
the journal never meets an open call it cannot tell from a crash. A result whose call the
document never made, a value of the wrong JSON type where the format needs a container or an
id, a document cut short or nested too deep is a DocumentError naming the JSON path or the
line (exit 3, nothing written); with ``skip_bad`` the element is left unmapped and reported
(its bytes are in the chunks either way). A document over DOCUMENT_BYTES_MAX is refused before
it is read whole (DocumentTooLargeError, exit 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from journal.api import CorruptionError
from journal.errors import JournalError
from journal.fs import FileSystem, OsFileSystem, follow_link
from journal.session.closers import TOOL_OUTCOME_UNKNOWN
from journal.session.envelope import ID_BYTES_MAX, Event
from journal.session.importers.base import (
    FINISHED_TYPE,
    RECORD_TYPE,
    ExportReport,
    ImportReport,
    Progress,
    UnstorableLineError,
    _valid_id,
    compact,
    write_events,
)
from journal.session.importers.lines import NESTING_DEPTH_MAX, MalformedLineError, TooDeepError, checked

# Far above any real session document (the largest trajectories are tens of MiB) and below what
# the importer can hold at once: the bytes, the parsed value and the events are all in memory.
DOCUMENT_BYTES_MAX = 256 * 1024 * 1024
# Parsed JSON costs far more than its text where values are tiny (``[]`` is 2 bytes of source
# and 56 of Python list; ``{}`` over 200): a document may hold at most this many containers and
# strings (counted from its brackets and quotes before it is parsed, an upper bound), about
# 2 GiB of Python objects at worst and thousands of times what a real session holds.
VALUES_MAX = 8_000_000
# A chunk's JSON escape is at most 6 bytes per source byte (a control character as \u0001), so a
# chunk of 1 MiB stays under the journal's default record limit (16 MiB) whatever it holds.
CHUNK_BYTES = 1024 * 1024
# A mapped field larger than this (a tool's output of many MiB) is left out of its event, which
# says so: the exact value is in the chunks, and the event stays well under a record's limit.
MAPPED_VALUE_BYTES_MAX = 1024 * 1024
# The mapped values of a document together hold at most this many times its bytes (plus one
# value's limit): one value may be mapped into many events (a tool message naming thousands of
# calls gives each its content), which made journals of hundreds of times the document's size.
# A real document maps each value once, or twice (aider's edits are in the reply's text too).
MAPPED_BYTES_PER_DOCUMENT_BYTE = 4
READ_BYTES = 1024 * 1024  # one pread while reading a source
# An ISO 8601 time with nanoseconds and an offset is 35 characters; a longer "time" is no time,
# and one of megabytes made its event too large for a record.
TIME_CHARS_MAX = 64
# A string field this short (a status, a reason, a tool's name) is always kept and not counted
# against the mapped bytes' bound: it costs no more than the event's envelope.
FIELD_CHARS_ALWAYS_KEPT = 256

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_BIG_INT = re.compile(r"(?<!\d)\d{4000,}")  # from a run's first digit only: linear, not a rescan at each


class DocumentError(MalformedLineError):
    """A document a format cannot read: ``at`` says where (a JSON Pointer, or ``line N,
    column C``), ``lineno`` the line when known (0 when the place is a path)."""

    def __init__(self, source: str, defect: str, reason: str, at: str, lineno: int = 0) -> None:
        JournalError.__init__(self, f"{source}: {at}: {defect}: {reason}. Nothing was written; fix the source, or "
                                    "pass --skip-bad to keep the document exactly but leave what is wrong unmapped")
        self.lineno = lineno
        self.defect = defect
        self.reason = reason
        self.at = at


class DocumentTooLargeError(UnstorableLineError):
    """A document larger than the importer reads whole (DOCUMENT_BYTES_MAX), or holding more
    JSON values than it builds at once (VALUES_MAX)."""

    def __init__(self, source: str, limit_bytes: int, values: int = 0) -> None:
        what = (f"holds up to {values} JSON containers and strings, more than the {VALUES_MAX} the importer builds"
                if values else f"is larger than {limit_bytes} bytes, the largest document the importer reads whole")
        JournalError.__init__(self, f"{source} {what}; nothing was written. Split the session, or import a copy cut "
                                    "at a message boundary")
        self.lineno = 0
        self.limit_bytes = limit_bytes


def read_bounded(fs: FileSystem, path: str, limit_bytes: int, source: str) -> bytes:
    """The file at ``path``, refused once it is found to exceed ``limit_bytes``: it is read in
    pieces until it ends, so a file that lies about its size (or grows) is never read past the
    limit plus one piece, whatever its size says."""
    f = fs.open_read(path)
    try:
        parts: list[bytes] = []
        total = 0
        while True:
            piece = f.pread(READ_BYTES, total)
            if not piece:
                return b"".join(parts)
            total += len(piece)
            if total > limit_bytes:
                raise DocumentTooLargeError(source, limit_bytes)
            parts.append(piece)
    finally:
        f.close()


def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _where(text: str, pos: int) -> tuple[str, int]:
    line, col = _line_col(text, pos)
    return f"line {line}, column {col}", line


def _too_deep_at(text: str) -> int:
    """Where ``text`` first opens a container deeper than NESTING_DEPTH_MAX (0 if it does not):
    strings are skipped whole, so a bracket inside one does not count."""
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > NESTING_DEPTH_MAX:
                return m.start()
        elif c in "]}":
            depth -= 1
    return 0


def _deep_path(value: Any) -> str | None:
    """The JSON Pointer of the first container nested deeper than NESTING_DEPTH_MAX (iterative:
    no recursion however deep the value)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > NESTING_DEPTH_MAX:
            return path or "/"
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            if isinstance(v, (dict, list)):
                stack.append((v, f"{path}/{_escape(str(k))}", depth + 1))
    return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _ends_open(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether ``text`` stops inside a JSON value (a writer cut short) rather than holding a
    mistake: the parser wanted more where the text ends, a string runs to the end (a string
    cannot hold a raw newline, so one that does not end on its line ends at the text's end), or
    the text ends in the first letters of a literal."""
    rest = text[exc.pos:].strip()
    if not rest or exc.msg.startswith("Unterminated string"):
        return True
    return any(word.startswith(rest) for word in ("true", "false", "null"))


def parse_json(data: bytes, source: str) -> Any:
    """The one JSON value ``data`` holds, made storable (lines.checked); DocumentError naming
    the line and column, or the JSON path, of what it refuses; DocumentTooLargeError for more
    values than VALUES_MAX."""
    values = data.count(b"{") + data.count(b"[") + data.count(b'"') // 2
    if values > VALUES_MAX:
        raise DocumentTooLargeError(source, len(data), values)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DocumentError(source, "malformed", f"not UTF-8 ({exc.reason} at byte {exc.start})",
                            f"line {line}", line) from None
    # A byte-order mark (some editors write one) is not JSON; the parse starts after it, and a
    # place on line 1 is counted from the text after it.
    text = text.removeprefix("\ufeff")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        at, line = _where(text, exc.pos)
        if _ends_open(text, exc):
            raise DocumentError(source, "torn", f"the document ends inside a JSON value ({exc.msg})", at,
                                line) from None
        raise DocumentError(source, "malformed", f"invalid JSON: {exc.msg}", at, line) from None
    except RecursionError:
        at, line = _where(text, _too_deep_at(text))
        raise DocumentError(source, "malformed", f"nested deeper than {NESTING_DEPTH_MAX} levels", at, line) from None
    except ValueError as exc:  # json's refusals that are not syntax: an integer of thousands of digits
        m = _BIG_INT.search(text)
        at, line = _where(text, m.start()) if m else ("the document", 0)
        raise DocumentError(source, "malformed", f"invalid JSON: {exc}", at, line) from None
    if isinstance(value, (dict, list)):
        deep = _deep_path(value)
        if deep is not None:
            raise DocumentError(source, "malformed", f"nested deeper than {NESTING_DEPTH_MAX} levels",
                                f"JSON path {deep}")
    try:
        return checked(value, text)[0]
    except TooDeepError:  # _deep_path found none: cannot happen, but never store what checked refuses
        raise DocumentError(source, "malformed", f"nested deeper than {NESTING_DEPTH_MAX} levels",
                            "the document") from None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "number"


class Skip(Exception):
    """Raised by a builder in skip_bad mode to leave the current element unmapped."""


@dataclass
class _Call:
    tool: str | None
    at: str
    turn: str | None
    args: Any


@dataclass
class DocBuilder:
    """The mapped events of a document, with the state every format needs: the open turn and
    the calls still waiting for a result."""

    session_id: str
    source: str
    report: ImportReport
    skip_bad: bool
    events: list[Event] = field(default_factory=list)
    open_turn: str | None = None
    turns: int = 0
    open_calls: dict[str, _Call] = field(default_factory=dict)
    seen_calls: set[str] = field(default_factory=set)
    mapped_left: int = MAPPED_VALUE_BYTES_MAX  # bytes the mapped values may still hold (import_document sets it)

    # -- defects ----------------------------------------------------------------------------

    def defect(self, at: str, defect: str, reason: str) -> None:
        """Refuse the document, or (skip_bad) report the element and skip it: raises either way."""
        if not self.skip_bad:
            raise DocumentError(self.source, defect, reason, at, _line_of(at))
        self.report.skipped.append({"line": _line_of(at), "at": at, "defect": defect, "reason": reason})
        raise Skip

    def want(self, value: Any, kind: type, at: str, what: str) -> Any:
        """``value`` when it is of JSON kind ``kind`` (dict, list, str); else a defect."""
        if isinstance(value, kind):
            return value
        name = "an object" if kind is dict else "an array" if kind is list else "a string"
        self.defect(at, "wrong-type", f"{what} is a JSON {json_type(value)}, where the format has {name}")
        raise Skip  # unreachable: defect raises

    # -- events -----------------------------------------------------------------------------

    def add(self, type_: str, data: dict[str, Any], at: str, when: Any, call: str | None = None,
            turn: str | None = None, ignorable: bool = False) -> None:
        data, self.mapped_left = _clipped(data, self.mapped_left)
        data["import"] = {"derived": True, "at": at}
        time = when if isinstance(when, str) and len(when) <= TIME_CHARS_MAX else None
        self.events.append(Event(type=type_, session_id=self.session_id, time=time,
                                 data=data, turn_id=turn if turn is not None else self.open_turn,
                                 tool_call_id=call, ignorable=ignorable))

    def user(self, text: Any, at: str, when: Any, starts_turn: bool = True, turn_id: Any = None) -> None:
        if starts_turn:
            self.end_turn("completed", at, when)
            self.turns += 1
            self.open_turn = _valid_id(turn_id) or f"turn-{self.turns}"
            self.add("turn.started", {}, at, when)
        self.add("user.message", {"text": text}, at, when)

    def assistant(self, text: Any, at: str, when: Any, **extra: Any) -> None:
        self.add("assistant.message", {"text": text, **extra}, at, when)

    def call(self, call_id: Any, name: Any, args: Any, at: str, when: Any) -> str:
        cid = _valid_id(call_id)
        if cid is None:
            got = f"a string of {len(call_id.encode('utf-8', 'replace'))} bytes" if isinstance(call_id, str) \
                else f"a JSON {json_type(call_id)}"
            self.defect(at, "wrong-type", f"a tool call's id is {got}, where the format has an id (a non-empty "
                                          f"string of at most {ID_BYTES_MAX} bytes)")
            raise Skip
        if cid in self.seen_calls:
            self.defect(at, "duplicate-call", f"tool call id {cid!r} is used by an earlier call")
        self.seen_calls.add(cid)
        tool = name if isinstance(name, str) else None
        self.open_calls[cid] = _Call(tool, at, self.open_turn, args)
        self.add("tool.requested", {"tool": tool, "args": args, "sideEffect": "unknown", "idempotency": "unsafe"},
                 at, when, call=cid)
        self.add("tool.started", {}, at, when, call=cid)
        return cid

    def result(self, call_id: Any, output: Any, is_error: bool, at: str, when: Any, **extra: Any) -> None:
        cid = _valid_id(call_id)
        if cid is None or cid not in self.open_calls:
            said = "no id" if cid is None else f"call id {cid!r}"
            why = "whose call already has a result" if cid in self.seen_calls else "with no call before it"
            self.defect(at, "orphan-result", f"a tool result ({said}) {why}")
            raise Skip
        call = self.open_calls.pop(cid)
        self.add("tool.result", {"status": "error" if is_error else "ok", "output": output, **extra}, at, when,
                 call=cid, turn=call.turn)

    def end_turn(self, reason: str, at: str, when: Any, **extra: Any) -> None:
        if self.open_turn is not None:
            self.add("turn.ended", {"reason": reason, **extra}, at, when)
            self.open_turn = None

    def close_open_calls(self, at: str) -> None:
        """A synthetic result for each call the document holds no result for, named in the report."""
        for cid, call in list(self.open_calls.items()):
            data = {"status": TOOL_OUTCOME_UNKNOWN, "synthetic": True, "tool": call.tool,
                    "reason": "the source holds no result for this call",
                    "mustCheck": "the tool may have changed the world: check its target before running it again"}
            self.add("tool.result", data, at, None, call=cid, turn=call.turn)
            self.report.closed.append({"callId": cid, "tool": call.tool, "at": call.at, "status": TOOL_OUTCOME_UNKNOWN})
        self.open_calls.clear()


def _line_of(at: str) -> int:
    m = re.match(r"line (\d+)", at)
    return int(m.group(1)) if m else 0


def _clipped(data: dict[str, Any], left: int) -> tuple[dict[str, Any], int]:
    """``data`` with each value over a mapped value's limit, or past the ``left`` bytes the
    document's mapped values may still hold, left out; and the bytes left after it."""
    out = dict(data)
    for key in list(out):  # every field: thought, observation, a tool's name may be as large as a text
        value = out.get(key)
        if not isinstance(value, (str, dict, list)):
            continue
        if isinstance(value, str) and len(value) <= FIELD_CHARS_ALWAYS_KEPT:
            continue
        # a string this short cannot reach the limit, escaped (6 bytes per character at most)
        small = isinstance(value, str) and len(value) <= MAPPED_VALUE_BYTES_MAX // 6
        if left <= 0 and not small:  # not measured: measuring a value shared by many events is the cost
            out[key] = None
            out.setdefault("clipped", {})[key] = {"why": "the document's mapped values are past their bound; "
                                                         "kept exactly in the source chunks"}
            continue
        size = len(value) if small else len(compact(value).encode("utf-8", "surrogatepass"))  # len: O(1)
        left -= size  # charged when clipped too: what was measured is spent
        if size > MAPPED_VALUE_BYTES_MAX or left < 0:
            out[key] = None
            out.setdefault("clipped", {})[key] = {"bytes": size, "why": "kept exactly in the source chunks"}
    return out, left


class DocumentFormat(Protocol):
    name: str
    description: str
    document: bool  # True: imported by import_document

    def parse(self, data: bytes, source: str) -> Any:
        """The document's value (DocumentError for what cannot be read)."""
        ...

    def session_info(self, doc: Any) -> tuple[str | None, str | None, str | None]:
        """(session id, workspace path, start time) found in the document, if any."""
        ...

    def walk(self, doc: Any, b: DocBuilder) -> None:
        """Map the document into ``b``'s events."""
        ...


def chunks(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(offset, piece) covering ``data`` in order, each at most CHUNK_BYTES, cut after a newline
    where the window holds one, else at a UTF-8 character boundary."""
    start = 0
    n = len(data)
    while start < n:
        end = min(start + CHUNK_BYTES, n)
        if end < n:
            nl = data.rfind(b"\n", start, end)
            if nl >= start:
                end = nl + 1
            else:
                back = end
                while back > start and back > end - 4 and (data[back] & 0xC0) == 0x80:
                    back -= 1
                end = back if back > start else end
        yield start, data[start:end]
        start = end


def import_document(fmt: DocumentFormat, source: str, dest: str, skip_bad: bool = False,
                    progress: Progress | None = None, fs: FileSystem | None = None,
                    size_max_bytes: int | None = None) -> ImportReport:
    """Import the document ``source`` into a new session journal at ``dest`` (all or nothing:
    base.write_events); a document over ``size_max_bytes`` (DOCUMENT_BYTES_MAX if None) is refused."""
    from journal.session.session import new_session_id

    fs = fs or OsFileSystem()
    if fs.exists(dest) and (not fs.is_dir(dest) or fs.listdir(dest)):
        raise JournalError(f"destination {dest!r} exists and is not empty; import writes a new journal")
    limit = DOCUMENT_BYTES_MAX if size_max_bytes is None else size_max_bytes
    data = read_bounded(fs, follow_link(fs, source), limit, source)
    report = ImportReport(source, dest, fmt.name)
    report.lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    doc: Any = None
    parsed = True
    try:
        doc = fmt.parse(data, source)
    except DocumentError as exc:
        if not skip_bad:
            raise
        parsed = False
        report.skipped.append({"line": exc.lineno, "at": exc.at, "defect": exc.defect, "reason": exc.reason})
    sid, cwd, when = fmt.session_info(doc) if parsed else (None, None, None)
    session_id = _valid_id(sid) or new_session_id()
    report.session_id = session_id
    b = DocBuilder(session_id, source, report, skip_bad,
                   mapped_left=MAPPED_BYTES_PER_DOCUMENT_BYTE * len(data) + MAPPED_VALUE_BYTES_MAX)
    header = {"workspace": {"path": cwd} if cwd else {}, "lineage": {"depth": 0},
              "importedFrom": {"format": fmt.name, "file": os.path.basename(source), "document": True}}
    b.add("session.started", header, "/", when)
    for i, (offset, piece) in enumerate(chunks(data)):
        try:
            kept: dict[str, Any] = {"chunk": i, "offset": offset, "text": piece.decode("utf-8")}
        except UnicodeDecodeError:
            kept = {"chunk": i, "offset": offset, "hex": piece.hex()}
        b.events.append(Event(type=RECORD_TYPE, session_id=session_id, data={"import": kept}, ignorable=True))
    if parsed:
        fmt.walk(doc, b)
    b.close_open_calls("end of the document")
    b.add(FINISHED_TYPE, {"format": fmt.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "lines": report.lines, "skipped": len(report.skipped), "closed": len(report.closed)},
          "end of the document", None, ignorable=True)
    write_events(b.events, source, dest, fs, report)
    if progress is not None:
        progress(len(data) or 1, len(data) or 1)
    return report


def export_document(first: Any, origin: dict[str, Any], records: Iterator[Any],
                    report: ExportReport) -> tuple[list[str], bool, ExportReport]:
    """The document an import kept in chunks (``first`` is its header record), as export_lines
    returns a source: its lines, and whether it ends with a newline."""
    parts: list[bytes] = []
    offset = 0
    finished: dict[str, Any] | None = None
    last = first
    for rec in records:
        if rec.is_bytes or not isinstance(rec.event, dict):
            continue
        last = rec
        ev = rec.event
        data = ev.get("data")
        if not isinstance(data, dict):
            continue
        if ev.get("type") == FINISHED_TYPE and finished is None:
            finished = data
            continue
        block = data.get("import")
        if ev.get("type") != RECORD_TYPE or not isinstance(block, dict) or "chunk" not in block:
            continue
        if finished is not None:
            raise rec.corrupt("a document chunk after the import's end; re-import the source")
        if block.get("chunk") != len(parts) or block.get("offset") != offset or isinstance(block.get("offset"), bool):
            raise rec.corrupt(f"document chunk {block.get('chunk')!r} at offset {block.get('offset')!r} where chunk "
                              f"{len(parts)} at offset {offset} comes next; re-import the source")
        piece = _chunk_bytes(rec, block)
        parts.append(piece)
        offset += len(piece)
    if finished is None:
        raise CorruptionError("the journal", 0, getattr(last, "seq", None),
                              "an imported document without its import.finished event: its chunks cannot be "
                              "known whole; re-import the source")
    data = b"".join(parts)
    if finished.get("bytes") != len(data) or finished.get("sha256") != hashlib.sha256(data).hexdigest():
        raise CorruptionError("the journal", 0, getattr(last, "seq", None),
                              f"the document's chunks hold {len(data)} bytes that do not match the "
                              f"{finished.get('bytes')!r} bytes and digest the import recorded; re-import the source")
    text = data.decode("utf-8", "surrogateescape")
    final_newline = text.endswith("\n") or not text
    body = text[:-1] if text.endswith("\n") else text
    lines = body.split("\n") if text else []
    report.lines = len(lines)
    return lines, final_newline, report


def _chunk_bytes(rec: Any, block: dict[str, Any]) -> bytes:
    if isinstance(block.get("text"), str):
        try:
            return bytes(block["text"].encode("utf-8"))
        except UnicodeEncodeError:
            raise rec.corrupt("a document chunk holds a lone surrogate, which no imported text holds; "
                              "re-import the source") from None
    if isinstance(block.get("hex"), str):
        try:
            return bytes.fromhex(block["hex"])
        except ValueError:
            raise rec.corrupt("a document chunk's hex is not hex; re-import the source") from None
    raise rec.corrupt("a document chunk holds neither text nor hex; re-import the source")
