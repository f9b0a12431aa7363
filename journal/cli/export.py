"""`journal export JOURNAL [OUT]`: write an imported journal back in its source format.

The lines are the imported ones, in order: byte for byte as they were read (JSON objects
that were joined on one line come out on lines of their own). Events the importer inferred and
events written after the import (a repair's closers, a runtime's new events) are not part of
the source and are left out. A journal written through the API, not imported, exports as plain
JSONL: one stored event per line with its seq. Writes OUT atomically (temp file, fsync,
rename, directory fsync; owner-only), or stdout when OUT is ``-`` or absent. ``--json`` prints
the summary on stdout, so it needs OUT.
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import OK, USAGE, configure_common, fail, record_size_limit


def configure(parser: argparse.ArgumentParser) -> None:
    from journal.session.importers import FORMATS

    parser.add_argument("path", help="the journal directory")
    parser.add_argument("out", nargs="?", default="-", help="output file (default: stdout)")
    parser.add_argument("--format", choices=sorted(FORMATS),
                        help="fail unless the journal was imported from this format")
    parser.add_argument("--drop-defective", action="store_true",
                        help="leave out lines an import kept verbatim with --skip-bad (malformed, torn)")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.cli.common import dumps
    from journal.session.importers import export_journal, write_export

    if args.json and args.out == "-":
        # The summary goes to stdout, as every --json document does: the export itself cannot.
        return fail(args, "export", USAGE, "--json prints the summary on stdout; give OUT, the file to export to")
    lines, final_newline, rep = export_journal(args.path, args.drop_defective, record_size_limit())
    if args.format is not None and args.format != rep.format:
        return fail(args, "export", USAGE, f"{args.path} holds a {rep.format} import, not {args.format}")
    write_export(args.out, lines, final_newline)
    if args.json:
        sys.stdout.write(dumps({**rep.to_json(), "out": args.out}) + "\n")
    elif args.out != "-":
        sys.stdout.write(f"exported {rep.lines} {rep.format} lines to {args.out}\n")
    return OK
