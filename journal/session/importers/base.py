"""Import a session log into a journal, and export it back: the part every format shares.

Each source line becomes one or more session events (journal.session's envelope). The first
event of a line carries the line itself in ``data.import``::

    "import": {"line": 12, "original": {...the parsed line...}, "raw": "...exact text..."}

``raw`` is stored only when re-serialising ``original`` compactly would not give the same bytes
back (key order is kept by the parser; number spellings, escapes and whitespace may differ), so
export writes every line byte for byte while a typical line is stored once. A value a journal
cannot store (a lone surrogate escape, a number past a double's range: lines.py) is replaced in
``original`` and ``raw`` keeps the line as written; a line nested deeper than lines.py's
NESTING_DEPTH_MAX is a malformed line. A line whose event the journal still refuses (one larger
than a record may be) stops the import with UnstorableLineError naming it. Events derived from
the same line (a tool call inside an assistant message, the start a tool result implies, a turn
boundary the importer infers) carry ``"import": {"line": N, "derived": true}``; export skips
them. A line the format mapper does not understand becomes an ``import.record`` event (marked
ignorable, so session readers skip it): nothing is dropped and unknown fields stay as written.

Inferred structure, said once here: a user prompt starts a turn and the next prompt (or an
explicit end in the source) ends it as completed; a tool call is recorded as requested and
started (the runtime ran it), so a call with no result in the log reads, after repair, as
TOOL_OUTCOME_UNKNOWN, the honest answer, and never as "not started". The last turn of a log
with no explicit end stays open: `journal repair` closes it as interrupted, as for any log that
stops mid-turn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from journal.api import (
    LOCK_FILE,
    EventNotSerializableError,
    InvariantError,
    JournalError,
    RecordTooLargeError,
    WriteFailedError,
)
from journal.fs import (
    FileSystem,
    OsFileSystem,
    discard_dir,
    follow_link,
    publish_dir,
    read_file,
    temp_dir_beside,
    write_atomic,
)
from journal.session.envelope import ID_BYTES_MAX, Event
from journal.session.importers.lines import MalformedLineError, SourceLine, read_source

RECORD_TYPE = "import.record"
FINISHED_TYPE = "import.finished"
WRITE_BATCH_RECORDS = 512
Progress = Callable[[int, int], None]

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode


_COMPACT_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=True).encode


def compact(obj: Any) -> str:
    return _COMPACT(obj)


def compact_line(obj: Any) -> str:
    """``compact``, as a line UTF-8 can write: a lone surrogate in a string (which a journal may
    hold, from a crafted file or another writer: json reads its escape) is written as JSON's
    escape, as ``journal cat`` prints it, the line's other text as well."""
    text = _COMPACT(obj)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _COMPACT_ASCII(obj)
    return text


@dataclass
class Mapped:
    """One session event a format mapper derives from a line."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    turn_id: str | None = None
    starts_turn: bool = False  # a user prompt: close the open turn, open a new one before this event


class UnstorableLineError(JournalError):
    """A source line whose event the journal refuses (larger than a record may be): ``lineno``
    says which. Not a fault of the disk, and not skippable: skipping would drop the line."""

    def __init__(self, path: str, lineno: int, cause: JournalError) -> None:
        if isinstance(cause, RecordTooLargeError):
            why = (f"its event is {cause.size_bytes} bytes, over the journal's record limit of "
                   f"{cause.limit_bytes} bytes (the importer keeps each line whole in one record)")
        else:
            why = str(cause)
        super().__init__(f"{path}: line {lineno} cannot be stored in a journal: {why}. Nothing was written; "
                         "shorten that line in a copy of the source to import the rest")
        self.lineno = lineno


class Format(Protocol):
    name: str
    description: str

    def session_info(self, lines: list[SourceLine]) -> tuple[str | None, str | None]:
        """(session id, workspace path) found in the source, if any."""
        ...

    def map(self, obj: dict[str, Any], lineno: int) -> list[Mapped]:
        """The session events one source object stands for ([] means: keep it as import.record)."""
        ...


@dataclass
class ImportReport:
    source: str
    dest: str
    format: str
    lines: int = 0
    events: int = 0
    mapped: dict[str, int] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # defective lines kept unmapped
    split: list[int] = field(default_factory=list)  # line numbers of joined lines that were split
    replaced: list[int] = field(default_factory=list)  # lines with values stored as U+FFFD or null
    session_id: str = ""
    last_seq: int = 0
    # tool calls the source holds no result for, closed by the importer (whole documents:
    # documents.py): each with its call id, tool, place in the source and the closing status
    closed: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.mapped.items()))
        lines = [
            f"imported {self.lines} lines of {self.source} ({self.format}) into {self.dest}: "
            f"{self.events} events, last seq {self.last_seq}, session {self.session_id}",
            f"  events by type: {kinds}",
        ]
        for n in self.split:
            lines.append(f"  line {n}: several JSON objects joined on one line, imported as separate records")
        for n in self.replaced:
            lines.append(f"  line {n}: a lone surrogate escape (a string cut mid-character) or a number past a "
                         "double's range, mapped as U+FFFD or null (the exact line is kept)")
        for s in self.skipped:
            where = s.get("at") or f"line {s['line']}"
            lines.append(f"  {where}: {s['defect']}: {s['reason']} (skipped: kept verbatim, not mapped)")
        if self.skipped:
            lines.append(f"  {len(self.skipped)} line(s) skipped")
        for c in self.closed:
            lines.append(f"  {c['at']}: tool call {c['callId']} ({c['tool']}) has no result in the source: closed "
                         f"with a synthetic result, {c['status']}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "dest": self.dest, "format": self.format, "lines": self.lines,
            "events": self.events, "mapped": self.mapped, "skipped": self.skipped, "split": self.split,
            "replaced": self.replaced, "sessionId": self.session_id, "lastSeq": self.last_seq,
            "closed": self.closed,
        }


def _valid_id(value: Any) -> str | None:
    if isinstance(value, str) and value and len(value.encode("utf-8")) <= ID_BYTES_MAX:
        return value
    return None


def _carrier(line: SourceLine) -> dict[str, Any]:
    block: dict[str, Any] = {"line": line.lineno}
    if line.obj is not None:
        block["original"] = line.obj
        if line.text is not None and (line.replaced or (line.compact or compact(line.obj)) != line.text):
            block["raw"] = line.text
    elif line.text is not None:
        block["raw"] = line.text
    else:
        block["rawHex"] = line.raw.hex()
    if line.split_index is not None:
        block["split"] = {"index": line.split_index, "of": line.split_count}
    if line.blank:
        block["blank"] = True
    if line.defect is not None:
        block["defect"] = line.defect
        block["reason"] = line.reason
    return block


class _Builder:
    """Turns mapped lines into envelope events, inferring turn boundaries."""

    def __init__(self, session_id: str, time_of: Callable[[dict[str, Any]], str | None]) -> None:
        self.session_id = session_id
        self.events: list[Event] = []
        self.open_turn: str | None = None
        self.turns = 0
        self.time_of = time_of

    def add(self, type_: str, data: dict[str, Any], when: str | None, tool_call_id: str | None = None,
            ignorable: bool = False, turn_id: str | None = None) -> None:
        self.events.append(Event(type=type_, session_id=self.session_id, time=when, data=data,
                                 turn_id=turn_id if turn_id is not None else self.open_turn,
                                 tool_call_id=tool_call_id, ignorable=ignorable))

    def _derived(self, lineno: int, **extra: Any) -> dict[str, Any]:
        return {**extra, "import": {"line": lineno, "derived": True}}

    def close_turn(self, lineno: int, when: str | None, reason: str = "completed") -> None:
        if self.open_turn is not None:
            self.add("turn.ended", self._derived(lineno, reason=reason), when)
            self.open_turn = None

    def open_new_turn(self, lineno: int, when: str | None, turn_id: str | None) -> str:
        self.turns += 1
        self.open_turn = _valid_id(turn_id) or f"turn-{self.turns}"
        return self.open_turn

    def line(self, line: SourceLine, mapped: list[Mapped]) -> None:
        obj = line.obj or {}
        when = self.time_of(obj) if line.obj is not None else None
        carried = False
        if not mapped:
            self.add(RECORD_TYPE, {"import": _carrier(line)}, when, ignorable=True)
            return
        for m in mapped:
            if m.starts_turn or m.type == "turn.started":
                self.close_turn(line.lineno, when)
                tid = self.open_new_turn(line.lineno, when, m.turn_id)
                if m.type != "turn.started":
                    self.add("turn.started", self._derived(line.lineno), when)
                else:
                    m.turn_id = tid
            data = dict(m.data)
            if not carried:
                data["import"] = _carrier(line)
                carried = True
            else:
                data["import"] = {"line": line.lineno, "derived": True}
            call = _valid_id(m.tool_call_id)
            if m.type == RECORD_TYPE or (m.type.startswith("tool.") and call is None):
                self.add(RECORD_TYPE, data, when, ignorable=True)  # kept as is (a tool event needs an id)
                continue
            if m.type == "turn.ended":
                self.add(m.type, data, when, turn_id=self.open_turn or _valid_id(m.turn_id))
                self.open_turn = None
                continue
            self.add(m.type, data, when, tool_call_id=call)


def import_file(
    fmt: Format,
    source: str,
    dest: str,
    skip_bad: bool = False,
    split_joined: bool = False,
    progress: Progress | None = None,
    time_of: Callable[[dict[str, Any]], str | None] | None = None,
    fs: FileSystem | None = None,
) -> ImportReport:
    """Import ``source`` (a file in format ``fmt``) into a new session journal at ``dest``.

    The journal is built in a temporary directory beside ``dest`` and renamed into place when
    it is whole and synced, so an import that fails part way (a full disk) leaves nothing at
    ``dest`` and raises WriteFailedError; running it again starts afresh.
    """
    from journal.session.session import new_session_id

    fs = fs or OsFileSystem()  # the destination is a journal directory: looked at through the file layer
    if fs.exists(dest) and (not fs.is_dir(dest) or fs.listdir(dest)):
        raise JournalError(f"destination {dest!r} exists and is not empty; import writes a new journal")
    data = read_file(fs, follow_link(fs, source))  # the caller's file: a link to it is followed
    lines, final_newline = read_source(data, split_joined, progress)
    report = ImportReport(source, dest, fmt.name)
    report.lines = lines[-1].lineno if lines else 0
    hint = ("pass --split-joined to import each object as its own record, or --skip-bad to keep the line "
            "verbatim without mapping it" if any(ln.defect == "joined" for ln in lines)
            else "pass --skip-bad to keep such lines verbatim (unmapped) and go on")
    for ln in lines:
        if ln.defect is not None:
            if not skip_bad:
                raise MalformedLineError(source, ln, hint)
            report.skipped.append({"line": ln.lineno, "defect": ln.defect, "reason": ln.reason})
        if ln.split_index == 0:
            report.split.append(ln.lineno)
        if ln.replaced and ln.lineno not in report.replaced:
            report.replaced.append(ln.lineno)
    sid, cwd = fmt.session_info(lines)
    session_id = _valid_id(sid) or new_session_id()
    report.session_id = session_id
    b = _Builder(session_id, time_of or _timestamp)
    header_meta = {"format": fmt.name, "file": os.path.basename(source)}
    header_data: dict[str, Any] = {"workspace": {"path": cwd} if cwd else {}, "lineage": {"depth": 0},
                                   "importedFrom": header_meta}
    body = lines
    first = lines[0] if lines else None
    first_mapped = fmt.map(first.obj, first.lineno) if first is not None and first.obj is not None else []
    if first is not None and first_mapped and first_mapped[0].type == "session.started":
        header_data.update(first_mapped[0].data)
        header_data["importedFrom"] = header_meta
        b.line(first, [Mapped("session.started", header_data), *first_mapped[1:]])
        body = lines[1:]
    else:
        b.add("session.started", {**header_data, "import": {"line": 0, "derived": True}},
              _timestamp(first.obj) if first is not None and first.obj else None)
    for ln in body:
        mapped = fmt.map(ln.obj, ln.lineno) if ln.obj is not None else []
        b.line(ln, [m for m in mapped if m.type != "session.started"] or
               ([] if not mapped else [Mapped(RECORD_TYPE)]))
    b.add(FINISHED_TYPE, {"format": fmt.name, "lines": report.lines, "finalNewline": final_newline,
                          "skipped": len(report.skipped), "split": report.split,
                          "import": {"line": report.lines, "derived": True}}, None, ignorable=True)
    write_events(b.events, source, dest, fs, report)
    return report


def write_events(events: list[Event], source: str, dest: str, fs: FileSystem, report: ImportReport) -> None:
    """Check ``events`` and write them into a new journal at ``dest``, all or nothing: built in a
    temporary directory beside ``dest`` and renamed into place when whole and synced, so a
    failure part way (a full disk) leaves nothing at ``dest`` and raises WriteFailedError.
    Fills ``report``'s counts by type, ``events`` and ``last_seq``."""
    import journal
    from journal.api import Committed
    from journal.session.envelope import check_for_append
    from journal.session.registry import DurabilityClass, EventType, Registry

    registry = Registry()
    registry.register(EventType(RECORD_TYPE, DurabilityClass.TRANSIENT, ignorable=True,
                                doc="a source line kept verbatim"))
    registry.register(EventType(FINISHED_TYPE, DurabilityClass.TRANSIENT, ignorable=True,
                                doc="end of an import"))
    stored: list[dict[str, Any]] = []
    for ev in events:
        check_for_append(ev, registry.get(ev.type))
        stored.append(ev.to_stored())
        report.mapped[ev.type] = report.mapped.get(ev.type, 0) + 1
    tmp: str | None = None
    try:
        tmp = temp_dir_beside(fs, dest, "import", LOCK_FILE)
        with journal.open(tmp, create=True, fs=fs) as j:
            for start in range(0, len(stored), WRITE_BATCH_RECORDS):
                batch = stored[start : start + WRITE_BATCH_RECORDS]
                try:
                    outs = j.append_many(batch, durability="flush")
                except (EventNotSerializableError, RecordTooLargeError) as exc:
                    raise _unstorable(j, batch, source, exc) from None
                bad = [o for o in outs if not isinstance(o, Committed)]
                if bad:
                    raise OSError(getattr(bad[0], "errno", None), f"a batch was not written: {bad[0].reason}")
            j.sync()
            report.last_seq = j.last_seq
        publish_dir(fs, tmp, os.path.abspath(dest))
    except BaseException as exc:
        leftover = discard_dir(fs, tmp) if tmp is not None else None
        if isinstance(exc, (OSError, JournalError)) and not isinstance(exc, UnstorableLineError):
            raise WriteFailedError("import", dest, exc, leftover) from exc
        raise
    report.events = len(stored)


def _unstorable(j: Any, batch: list[dict[str, Any]], source: str, exc: JournalError) -> JournalError:
    """The line of the first event of ``batch`` the journal refuses, found by appending them one
    by one (into the temporary journal the failure throws away): the engine's own judgment."""
    for ev in batch:
        try:
            j.append(ev, durability="buffered")
        except (EventNotSerializableError, RecordTooLargeError) as refused:
            block = ev.get("data", {}).get("import", {})
            return UnstorableLineError(source, int(block.get("line", 0)), refused)
    return exc


def _timestamp(obj: dict[str, Any] | None) -> str | None:
    if not obj:
        return None
    t = obj.get("timestamp")
    return t if isinstance(t, str) else None


# --- export ---------------------------------------------------------------------------------


@dataclass
class ExportReport:
    format: str
    lines: int = 0
    skipped_defective: int = 0
    native_events: int = 0  # events written natively (not imported), exported as plain JSONL

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "lines": self.lines, "skippedDefective": self.skipped_defective,
                "nativeEvents": self.native_events}


def export_lines(records: Iterable[Any], drop_defective: bool = False) -> tuple[list[str], bool, ExportReport]:
    """The source lines of an imported journal, in order; and whether the file ended with a newline.

    A journal that was not imported (written by a runtime through the API) exports as plain
    JSONL: one stored event per line.
    """
    out: list[str] = []
    final_newline = True
    fmt_name: str | None = None
    report = ExportReport("jsonl")
    it = iter(records)
    for rec in it:
        if rec.is_bytes or not isinstance(rec.event, dict):
            continue
        ev = rec.event
        data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        if not isinstance(data, dict):
            raise InvariantError("an import mapping produced a dict")
        if fmt_name is None:
            origin = data.get("importedFrom")
            fmt_name = origin.get("format") if isinstance(origin, dict) else ""
            report.format = fmt_name or "jsonl"
            if isinstance(origin, dict) and origin.get("document") is True:
                # A whole document (documents.py): its bytes are in chunks, not one per line.
                from journal.session.importers.documents import export_document

                return export_document(rec, origin, it, report)
        block = data.get("import")
        if not fmt_name:
            out.append(compact_line({"seq": rec.seq, **ev}))
            report.native_events += 1
            continue
        if ev.get("type") == FINISHED_TYPE:
            final_newline = bool(data.get("finalNewline", True))
            continue
        if not isinstance(block, dict) or block.get("derived"):
            continue  # inferred by the importer, or written after the import (a repair's closer)
        if block.get("defect") and drop_defective:
            report.skipped_defective += 1
            continue
        if "batch" in block:  # lines a store wrote as one record, whole or not at all (adapters.claude_agent_sdk)
            out.extend(_batch_lines(rec, block["batch"]))
        elif "raw" in block:
            out.append(_raw_line(rec, block["raw"]))
        elif "rawHex" in block:
            out.append(_raw_hex_line(rec, block["rawHex"]))
        elif "original" in block:
            out.append(compact_line(block["original"]))
    report.lines = len(out)
    return out, final_newline, report


def _raw_line(rec: Any, raw: Any) -> str:
    """A line an import kept as its text. An importer keeps text that UTF-8 wrote (a line that
    is not UTF-8 is kept as ``rawHex``), so other text is no import's: CorruptionError."""
    if not isinstance(raw, str):
        raise rec.corrupt(f"its import block's raw line is a JSON {type(raw).__name__}, not text; an importer "
                          "writes text; re-import the source")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise rec.corrupt("its import block's raw line holds a lone surrogate, which no source line can hold "
                          "(an importer keeps a line that is not UTF-8 as rawHex); re-import the source") from None
    return _one_line(rec, raw)


def _one_line(rec: Any, line: str) -> str:
    """A source is split at each newline, so no kept line holds one: a crafted block's would
    write lines into the export that the source never had."""
    if "\n" in line:
        raise rec.corrupt("its import block's line holds a newline, which no source line can hold (the source is "
                          "split at each); re-import the source")
    return line


def _raw_hex_line(rec: Any, raw_hex: Any) -> str:
    """A line an import kept as its bytes, in hex (it was not UTF-8), as text whose
    surrogateescape encoding (write_export) is those bytes again."""
    try:
        line = bytes.fromhex(raw_hex).decode("utf-8", "surrogateescape")
    except (TypeError, ValueError):
        raise rec.corrupt("its import block's rawHex is not hex text, which an importer writes; "
                          "re-import the source") from None
    return _one_line(rec, line)


def _batch_lines(rec: Any, batch: Any) -> list[str]:
    """The lines of a record holding several parsed lines (one append call of a store, one record
    so that it is stored whole or not at all), each as compact JSON, as the runtime wrote them."""
    if not isinstance(batch, list) or not all(isinstance(obj, dict) for obj in batch):
        raise rec.corrupt("its import block's batch is not a list of JSON objects, which a store writes; "
                          "read it with the program that wrote it")
    return [compact_line(obj) for obj in batch]


def write_export(path: str | None, lines: list[str], final_newline: bool, fs: FileSystem | None = None) -> None:
    import sys

    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    payload = text.encode("utf-8", "surrogateescape")
    if path is None or path == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return
    # Temp file, fsync, rename, then the directory's fsync: the file is the old one or the new one,
    # whole, and the new name survives a power loss. A temp file left by a failure is removed.
    fs = fs or OsFileSystem()
    tmp = path + ".tmp"
    try:
        write_atomic(fs, path, payload, tmp)
    except BaseException:
        if fs.exists(tmp):
            try:
                fs.unlink(tmp)
            except OSError:
                pass  # the next export replaces it
        raise
