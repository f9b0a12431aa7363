"""Importers and exporters for the session logs runtimes already write.

    from journal.session import importers
    report = importers.import_file("pi", "session.jsonl", "journals/s1")
    lines, final_newline, _ = importers.export_journal("journals/s1")

Line formats: ``jsonl`` (plain event logs), ``codex`` (OpenAI Codex rollouts), ``pi`` (pi
sessions), ``claude`` (Claude Code transcripts). Whole-document formats: ``gemini`` (Gemini CLI
chat sessions), ``swe-agent`` (SWE-agent .traj), ``mini-swe-agent``, ``openhands`` (trajectory
exports), ``aider`` (chat histories). See base.py for how a line is kept and formats.py for how
each line format maps to the session vocabulary; documents.py for how a document is kept and
trajectories.py and aider.py for how each maps; docs/CLI.md for the commands.
"""

from __future__ import annotations

from typing import Any

from journal.fs import FileSystem
from journal.session.importers.aider import AiderFormat
from journal.session.importers.base import (
    ExportReport,
    ImportReport,
    Mapped,
    Progress,
    UnstorableLineError,
    export_lines,
    write_export,
)
from journal.session.importers.base import import_file as _import_file
from journal.session.importers.documents import DocumentError, DocumentTooLargeError, import_document
from journal.session.importers.formats import FORMATS as LINE_FORMATS
from journal.session.importers.lines import MalformedLineError, SourceLine, read_source
from journal.session.importers.trajectories import DOCUMENT_FORMATS

FORMATS: dict[str, Any] = {**LINE_FORMATS, **DOCUMENT_FORMATS, "aider": AiderFormat()}


def import_file(
    format_name: str,
    source: str,
    dest: str,
    skip_bad: bool = False,
    split_joined: bool = False,
    progress: Progress | None = None,
    fs: FileSystem | None = None,
) -> ImportReport:
    """Import ``source`` into a new journal at ``dest``; raises MalformedLineError on a bad line
    (DocumentError, a subclass, on a document's defect, naming its line or JSON path),
    UnstorableLineError on a line too large for a record (DocumentTooLargeError on a document
    too large to read), and WriteFailedError (leaving nothing at ``dest``) when writing fails
    part way. ``split_joined`` is for line formats only (a document has no joined lines)."""
    if format_name not in FORMATS:
        raise ValueError(f"unknown format {format_name!r}; one of {', '.join(FORMATS)}")
    fmt = FORMATS[format_name]
    if getattr(fmt, "document", False):
        return import_document(fmt, source, dest, skip_bad, progress, fs=fs)
    return _import_file(fmt, source, dest, skip_bad, split_joined, progress, fs=fs)


def export_journal(
    path: str, drop_defective: bool = False, record_size_bytes_max: int | None = None
) -> tuple[list[str], bool, ExportReport]:
    """The source lines stored in the journal at ``path`` (read-only, with ``record_size_bytes_max``:
    the handle's default if None)."""
    import journal

    limit: dict[str, Any] = {} if record_size_bytes_max is None else {"record_size_bytes_max": record_size_bytes_max}
    with journal.open(path, readonly=True, **limit) as j:
        records: list[Any] = list(j.read())
    return export_lines(records, drop_defective)


__all__ = [
    "FORMATS",
    "DocumentError",
    "DocumentTooLargeError",
    "ExportReport",
    "ImportReport",
    "MalformedLineError",
    "Mapped",
    "SourceLine",
    "UnstorableLineError",
    "export_journal",
    "export_lines",
    "import_file",
    "read_source",
    "write_export",
]
