"""`journal salvage SRC DEST`: copy everything recoverable from a damaged journal into a new one.

The source is only read. The report lists every place something was lost: segment, offset,
bytes and the seqs that went with it. Seqs are kept (lost ones become ``journal.lost``
placeholders) unless ``--renumber``. Exit 0 when nothing was lost, 8 when the copy is made but
records were lost, 6 (nothing made) when the source holds bytes of a newer format: they are not
damage, and the newer version reads them.
"""

from __future__ import annotations

import argparse
import sys

from journal.cli.common import LOST, OK, configure_common, emit


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="the damaged journal directory (never modified)")
    parser.add_argument("dest", help="a new journal directory (must not exist, or be empty)")
    parser.add_argument("--renumber", action="store_true",
                        help="pack records from seq 1 instead of keeping seqs with placeholders")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.engine.salvage import salvage

    read_bar = Progress(sys.stderr, "read")
    write_bar = Progress(sys.stderr, "write")

    def writing(done: int, total: int) -> None:
        read_bar.end()  # finish the read bar's line before the write bar starts
        write_bar(done, total)

    try:
        rep = salvage(args.source, args.dest, renumber=args.renumber, progress=read_bar, write_progress=writing)
    finally:
        read_bar.end()
        write_bar.end()
    emit(args, rep.summary(), rep.to_json())
    return LOST if rep.lost_anything else OK
