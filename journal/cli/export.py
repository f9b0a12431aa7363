"""`journal export JOURNAL [OUT]`: write an imported journal back in its source format.

The lines are the imported ones, in order: byte for byte as they were read (JSON objects
that were joined on one line come out on lines of their own). Events the importer inferred and
events written after the import (a repair's closers, a runtime's new events) are not part of
the source and are left out. A journal written through the API, not imported, exports as plain
JSONL: one stored event per line with its seq. Writes OUT atomically (temp file, fsync,
rename, directory fsync; owner-only), or stdout when OUT is ``-`` or absent. ``--json`` prints
the summary on stdout, so it needs OUT.

``--format markdown`` (or ``html``, one standalone page: journal/view/export_html.py) writes any
session, imported or not, as one document to read
or share instead (journal/session/transcript.py): opened read-only, secrets redacted unless
``--no-redact`` (the rules: docs/CLI.md, "A session as a document").
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import OK, USAGE, configure_common, fail, record_size_limit

RENDERED = ("markdown", "html")


def configure(parser: argparse.ArgumentParser) -> None:
    from journal.session.importers import FORMATS

    parser.add_argument("path", help="the journal directory")
    parser.add_argument("out", nargs="?", default="-", help="output file (default: stdout)")
    parser.add_argument("--format", choices=[*sorted(FORMATS), *RENDERED],
                        help="markdown or html: the session as one document to read or share; an import "
                             "format: fail unless the journal was imported from it")
    parser.add_argument("--no-redact", action="store_true",
                        help="with --format markdown or html: keep secrets as written (redacted by default)")
    parser.add_argument("--drop-defective", action="store_true",
                        help="leave out lines an import kept verbatim with --skip-bad (malformed, torn)")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.cli.common import dumps
    from journal.session.importers import export_journal, write_export

    if args.json and args.out == "-":
        # The summary goes to stdout, as every --json document does: the export itself cannot.
        return fail(args, "export", USAGE, "--json prints the summary on stdout; give OUT, the file to export to")
    if args.format in RENDERED:
        return _rendered(args)
    if args.no_redact:
        return fail(args, "export", USAGE, "--no-redact goes with --format markdown or html")
    lines, final_newline, rep = export_journal(args.path, args.drop_defective, record_size_limit())
    if args.format is not None and args.format != rep.format:
        return fail(args, "export", USAGE, f"{args.path} holds a {rep.format} import, not {args.format}")
    write_export(args.out, lines, final_newline)
    if args.json:
        sys.stdout.write(dumps({**rep.to_json(), "out": args.out}) + "\n")
    elif args.out != "-":
        sys.stdout.write(f"exported {rep.lines} {rep.format} lines to {args.out}\n")
    return OK


def _rendered(args: argparse.Namespace) -> int:
    from journal.cli.common import dumps
    from journal.session.importers import write_export
    from journal.session.redact import Redactor
    from journal.session.transcript import load, render_markdown

    redactor = Redactor(enabled=not args.no_redact)
    if args.format == "markdown":
        src = load(args.path)
        text, events, damage = render_markdown(src, redactor), len(src.events), src.damage
    else:
        from journal.view.export_html import export_html

        page = export_html(args.path, redactor)
        text, events, damage = page.html, page.events, page.damage
    write_export(args.out, [text.rstrip("\n")], True)
    summary = {"format": args.format, "events": events, "redacted": redactor.total,
               "redactedByRule": dict(sorted(redactor.counts.items())), "damage": damage}
    if args.json:
        sys.stdout.write(dumps({**summary, "out": args.out}) + "\n")
    elif args.out != "-":
        sys.stdout.write(f"exported the session as {args.format} to {args.out} "
                         f"({redactor.total} secrets redacted)\n")
    return OK
