"""``Record.segment`` and ``Record.offset``: where a record's frame is, read-only. Records of one
block frame share both; records framed alone each have their own; the header at that offset of
that segment is the frame's (its seq the record's, or the block's last); and a record's
CorruptionError names the same place."""

from __future__ import annotations

from pathlib import Path

import journal
from journal.engine import format as fmt


def _frame_seq(path: Path, segment: str, offset: int) -> int:
    data = (path / segment).read_bytes()
    fields = fmt.read_frame_header(data, offset)
    return fields[3]  # the frame's seq


def test_records_say_where_their_frame_is(tmp_path: Path) -> None:
    j_path = tmp_path / "j"
    with journal.open(j_path, create=True) as j:
        j.append_many([{"i": i, "text": "block member " * 20} for i in range(50)], durability="sync")
        for i in range(5):
            j.append({"lone": i, "text": "a frame of its own " * 10}, durability="sync")
    with journal.open(j_path, readonly=True) as j:
        recs = list(j.read())
    block, lone = recs[:50], recs[50:]
    assert len({(r.segment, r.offset) for r in block}) < len(block)  # they share frames
    assert len({(r.segment, r.offset) for r in lone}) == len(lone)
    assert [r.offset for r in lone] == sorted(r.offset for r in lone)
    for r in recs:
        assert r.segment.endswith(".seg") and r.offset >= fmt.SEGMENT_HEADER_SIZE_BYTES
        seq = _frame_seq(j_path, r.segment, r.offset)
        members = [x.seq for x in recs if (x.segment, x.offset) == (r.segment, r.offset)]
        assert seq == max(members)  # a block frame carries its last record's seq
        err = r.corrupt("why")
        assert (err.segment, err.offset, err.seq) == (r.segment, r.offset, r.seq)
