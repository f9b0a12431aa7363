"""`journal info PATH`: segments, records, size, last seq, format version, native or pure path.

Reads only the segment headers, the sealed segments' footers and the live segment: as cheap as
opening the journal, whatever its history.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from journal.cli.common import OK, configure_common, emit, open_journal


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory, or a server URL (docs/REMOTE.md)")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    import journal
    from journal.engine import format as fmt
    from journal.engine.salvage import quarantine_files
    from journal.engine.segment import list_segments, read_header, read_seal
    from journal.fs import OsFileSystem
    from journal.remote import is_url

    with open_journal(args.path, readonly=True) as j:
        rep = j.recovery
        last_seq = j.last_seq
        where = j.path
    if is_url(args.path):  # a server's journal: no segments to show
        emit(args, f"journal    {where}\nrecords    last seq {last_seq}\nopened     {rep.summary()}",
             {"path": where, "lastSeq": last_seq, "recovery": rep.summary()})
        return OK
    fs = OsFileSystem()
    segs: list[dict[str, Any]] = []
    total_bytes = 0
    records = 0
    version = None
    journal_id = None
    listed = list_segments(fs, args.path)
    for i, seg in enumerate(listed):
        f = fs.open_read(os.path.join(args.path, seg.name))
        try:
            header = read_header(f, seg.name)
            size = f.size()
            seal = read_seal(f, header, seg.name, size) if i < len(listed) - 1 or rep.tail == "sealed" else None
        finally:
            f.close()
        version = header.version
        journal_id = header.journal_id.hex()
        total_bytes += size
        if seal is not None:
            count, first, last = seal.record_count, seal.first_seq, seal.last_seq
        else:
            count, first, last = rep.live_records, header.base_seq, header.base_seq + rep.live_records - 1
        records += count
        segs.append({"name": seg.name, "sizeBytes": size, "sealed": seal is not None, "records": count,
                     "firstSeq": first if count else None, "lastSeq": last if count else None})
    quarantined = quarantine_files(args.path)
    data = {
        "path": os.path.abspath(args.path),
        "journalId": journal_id,
        "formatVersion": version,
        "formatVersionSupported": fmt.FORMAT_VERSION,
        "framePath": "native" if journal.native_available() else "pure",
        "segments": segs,
        "records": records,
        "sizeBytes": total_bytes,
        "lastSeq": last_seq,
        "tail": rep.tail,
        "quarantined": quarantined,
    }
    lines = [
        f"journal    {data['path']}",
        f"id         {journal_id}",
        f"format     version {version} (this build reads {fmt.FORMAT_VERSION}); "
        f"{'native C helper' if data['framePath'] == 'native' else 'pure-Python'} frame path",
        f"records    {records} (last seq {last_seq})",
        f"size       {total_bytes} bytes in {len(segs)} segment(s); live tail: {rep.tail}",
    ]
    for s in segs:
        span = f"seqs {s['firstSeq']}-{s['lastSeq']}" if s["records"] else "no records"
        lines.append(f"  {s['name']}  {s['sizeBytes']:>12} bytes  {'sealed' if s['sealed'] else 'live  '}  "
                     f"{s['records']:>8} records  {span}")
    if quarantined:
        lines.append(f"quarantine {len(quarantined)} file(s) of bytes cut by recovery")
    emit(args, "\n".join(lines), data)
    return OK
