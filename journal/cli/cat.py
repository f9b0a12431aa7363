"""`journal cat PATH`: records as JSON lines, in seq order.

Each line is ``{"seq": N, "event": {...}}`` (``"bytes"`` in base64 for a bytes record), with
``"synthetic": true`` for a repair's closers and ``"key"`` for an idempotency key. The output
is JSON lines either way; ``--json`` is accepted for symmetry with the other commands.
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import OK, configure_common, dumps, event_type, int_at_least, open_journal, record_json


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory, or a server URL (docs/REMOTE.md)")
    parser.add_argument("--after-seq", type=int_at_least(0), default=0, metavar="N",
                        help="start after this seq (default 0)")
    parser.add_argument("--limit", type=int_at_least(0), metavar="N", help="print at most N records")
    parser.add_argument("--type", action="append", metavar="TYPE",
                        help="only events whose \"type\" is TYPE (repeatable)")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:

    types = set(args.type or ())
    left = args.limit
    out = sys.stdout
    with open_journal(args.path, readonly=True) as j:
        for rec in j.read(after_seq=args.after_seq):
            if left is not None and left <= 0:
                break
            if types and event_type(rec) not in types:
                continue
            out.write(dumps(record_json(rec)) + "\n")
            if left is not None:
                left -= 1
    return OK
