"""`journal import FORMAT SOURCE DEST`: a session log a runtime wrote -> a new session journal.

Every line is kept exactly (the parsed object, and its exact text when re-serialising would
differ) and mapped to the session vocabulary where it can be. A malformed or torn line stops
the import with its line number (exit 3) and nothing is written; ``--skip-bad`` keeps such
lines verbatim but unmapped, and counts them. A line too large for one record stops it too
(exit 1, naming the line; it cannot be kept, so ``--skip-bad`` does not pass it). A line
holding several JSON objects joined with no newline is refused the same way unless
``--split-joined`` imports each object as its own record (the report names the line).
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import DAMAGED, ERROR, OK, configure_common, emit, fail


def configure(parser: argparse.ArgumentParser) -> None:
    from journal.session.importers import FORMATS

    parser.add_argument("format", choices=sorted(FORMATS), help="the source format: "
                        + "; ".join(f"{n}: {f.description}" for n, f in sorted(FORMATS.items())))
    parser.add_argument("source", help="the session log file")
    parser.add_argument("dest", help="a new journal directory (must not exist, or be empty)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="keep malformed or torn lines verbatim (unmapped), count them, and go on")
    parser.add_argument("--split-joined", action="store_true",
                        help="import JSON objects joined on one line as separate records")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.session.importers import MalformedLineError, UnstorableLineError, import_file

    bar = Progress(sys.stderr, "import")
    try:
        rep = import_file(args.format, args.source, args.dest, skip_bad=args.skip_bad,
                          split_joined=args.split_joined, progress=bar)
    except MalformedLineError as exc:
        bar.end()
        return fail(args, "import", DAMAGED, f"{exc}; nothing was written", line=exc.lineno, defect=exc.defect,
                    reason=exc.reason, errorType=type(exc).__name__,
                    **({"at": at} if isinstance(at := getattr(exc, "at", None), str) else {}))
    except UnstorableLineError as exc:
        bar.end()
        return fail(args, "import", ERROR, str(exc), line=exc.lineno, errorType=type(exc).__name__)
    except BaseException:
        bar.end()
        raise
    bar.end()
    emit(args, rep.summary(), rep.to_json())
    return OK
