"""`journal tail PATH`: the last N records; with ``-f``, keep printing records as they are committed.

Output lines are the same JSON lines as `journal cat`. Following takes no lock and never
changes the journal; it crosses segment roll-overs and stops on Ctrl-C (exit 0) or after
``--idle-timeout`` seconds without a new record.
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import (
    OK,
    configure_common,
    dumps,
    event_type,
    int_at_least,
    open_journal,
    record_json,
    seconds,
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory, or a server URL (docs/REMOTE.md)")
    parser.add_argument("-n", "--lines", type=int_at_least(0), default=10, metavar="N",
                        help="how many last records (default 10; 0 with -f: only new ones)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new records as they are committed")
    parser.add_argument("--type", action="append", metavar="TYPE", help="only events of this type (repeatable)")
    parser.add_argument("--idle-timeout", type=seconds, metavar="SECONDS",
                        help="with -f: stop after this long without a new record")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:

    types = set(args.type or ())
    out = sys.stdout
    with open_journal(args.path, readonly=True) as j:
        start = max(0, j.last_seq - max(0, args.lines))
        if types:
            # The last N of a type may lie anywhere: read them all, keep the last N.
            matching = [r for r in j.read() if event_type(r) in types]
            shown = matching[-args.lines:] if args.lines > 0 else []
            start = j.last_seq
        else:
            shown = list(j.read(after_seq=start))
        last = start
        for rec in shown:
            out.write(dumps(record_json(rec)) + "\n")
            last = max(last, rec.seq)
        out.flush()
        if not args.follow:
            return OK
        try:
            for rec in j.follow(after_seq=last, idle_timeout_s=args.idle_timeout):
                if types and event_type(rec) not in types:
                    continue
                out.write(dumps(record_json(rec)) + "\n")
                out.flush()
        except KeyboardInterrupt:
            pass
    return OK
