"""What the hostile-files fuzzer found (tests/test_hostile_fuzz.py, journal/crashsim/hostile.py),
held as plain tests: each crafts the input the fuzzer minimised with the harness's encoders (the
checksums stay genuine while a field lies) and failed on the code before its fix."""

from __future__ import annotations

import pathlib

import pytest

from journal.crashsim import hostile
from journal.engine import format as fmt


def _journal_with_sealed_segments(path: pathlib.Path) -> int:
    import journal

    with journal.open(path, create=True, segment_size_bytes=4096, index_interval_bytes=512) as j:
        for i in range(80):
            j.append({"type": "x", "n": i, "pad": hostile._noise(i, 20)})
        return j.last_seq


@pytest.mark.parametrize("where", ["inside the seal frame", "on the seal frame", "past the end",
                                   "on another record's frame", "inside a frame"])
def test_a_seal_index_entry_off_its_frame_is_refused_not_skipped(tmp_path: pathlib.Path, where: str) -> None:
    """Found by the fuzzer (seed 10, input 653): read() of a journal whose first footer's index
    entry named an offset inside the seal frame skipped that segment's records without a word;
    the cursor took the entry on trust. The checksum holds (the footer was re-sealed), so only
    checking the frame at the entry tells."""
    import journal

    path = tmp_path / "j"
    last = _journal_with_sealed_segments(path)
    name = hostile.segment_names(hostile.read_tree(str(path)))[0]
    seg = hostile.parse_segment((path / name).read_bytes())
    assert seg is not None and seg.sealed
    info = fmt.decode_seal_payload(seg.frames[-1].stored)
    offsets = seg.offsets()
    entries = list(info.entries)
    seq0, _ = entries[0]
    entries[0] = (seq0, {"inside the seal frame": info.seal_offset + 1, "on the seal frame": info.seal_offset,
                         "past the end": 1 << 40, "on another record's frame": offsets[3],
                         "inside a frame": offsets[1] + 5}[where])
    seg.frames[-1].stored = hostile.pack_seal(info.record_count, info.first_seq, info.last_seq,
                                              info.index_interval_bytes, entries, info.keys, info.seal_offset)
    (path / name).write_bytes(seg.encode())
    with journal.open(path, readonly=True) as j:
        try:
            seqs = [r.seq for r in j.read()]
        except journal.CorruptionError as exc:
            assert name in str(exc)
        else:
            assert seqs == list(range(1, last + 1)), f"read() skipped records: got {seqs[:5]}..."


def test_damage_before_a_zero_filled_tail_is_corruption_not_a_torn_tail(tmp_path: pathlib.Path) -> None:
    """Found by the fuzzer (seed 10, inputs 7, 273, 522): verify called a live segment 'torn'
    (exit 7: nothing acknowledged is lost, `journal repair` cuts it) when it ended in reserved
    zeros and held, before them, a genuine frame whose record does not decode; after repair cut
    the zeros, verify called the same frame corrupt."""
    import journal
    from journal.engine.verify import verify

    path = tmp_path / "j"
    with journal.open(path, create=True, block_bytes=0) as j:
        for i in range(6):
            j.append({"type": "x", "n": i, "text": "compressible " * 40})
    live = path / hostile.segment_names(hostile.read_tree(str(path)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None
    victim = seg.frames[2]
    assert victim.flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_ZSTD
    victim.stored = b"\x28\xb5\x2f\xfd" + b"not a zstd frame" * 4  # genuine checksum, payload no zstd decodes
    live.write_bytes(seg.encode() + bytes(4096))  # the reserved space of a writer that did not close
    assert verify(str(path)).verdict == "corrupt"
    with journal.open(path, readonly=True) as j, pytest.raises(journal.CorruptionError):
        list(j.read())


def test_copy_keeps_the_seqs_of_a_journal_whose_prefix_was_dropped(tmp_path: pathlib.Path) -> None:
    """Found by the fuzzer on an untouched base (any seed): `journal copy` of a healthy journal
    after drop_prefix exited 1 with a bare OSError ("this version does not do it yet"); a new
    journal directory can begin at the source's first seq, so the copy keeps every seq."""
    from journal.cli import main

    src, dst = tmp_path / "src", tmp_path / "dst"
    last = _journal_with_sealed_segments(src)
    with hostile.open_file(src) as j:
        first = j.drop_prefix(last).first_seq
    assert first > 1
    code, _, err = hostile.capture(lambda: main(["copy", str(src), str(dst), "--json"]))
    assert code == 0, err
    with hostile.open_file(src, readonly=True) as a, hostile.open_file(dst, readonly=True) as b:
        assert b.first_seq == first and b.last_seq == last
        assert [(r.seq, r.payload) for r in a.read()] == [(r.seq, r.payload) for r in b.read()]


@pytest.mark.parametrize("kind", [{"x": []}, ["user"], 5, None])
def test_an_import_line_whose_type_is_not_a_string_is_kept_unmapped(tmp_path: pathlib.Path, kind: object) -> None:
    """Found by the fuzzer (seed 12, input 192): a JSONL line whose "type" was an object made
    `journal import jsonl` fail with a TypeError traceback (unhashable type: 'dict')."""
    import json

    from journal.cli import main

    src = tmp_path / "log.jsonl"
    src.write_text(json.dumps({"type": kind, "text": "odd"}) + "\n" + json.dumps({"type": "user_message", "text": "hi"})
                   + "\n")
    code, _, err = hostile.capture(lambda: main(["import", "jsonl", str(src), str(tmp_path / "s"), "--json"]))
    assert code == 0, err
    with hostile.open_file(tmp_path / "s", readonly=True) as j:
        types = [r.event["type"] for r in j.read()]
    assert "import.record" in types and "user.message" in types


@pytest.mark.parametrize("stored", [b'{"t":"\\ud83d"}', b'{"t":"a\\udfffb","e":"\\u00e9"}'])
def test_cat_prints_a_stored_lone_surrogate_as_an_escape(tmp_path: pathlib.Path, stored: bytes) -> None:
    """Found by the fuzzer (seed 10 input 345, seed 12 inputs 83 and 150): a record whose stored
    JSON holds a lone surrogate escape (the writer refuses such text; json reads it) made
    `journal cat` and `tail` exit 1 with a UnicodeEncodeError; they print it as JSON's escape."""
    import functools
    import json

    from journal.cli import main

    path = tmp_path / "j"
    with hostile.open_file(path, create=True, block_bytes=0) as j:
        j.append({"t": "placeholder"})
    live = path / hostile.segment_names(hostile.read_tree(str(path)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None
    seg.frames[0].stored, seg.frames[0].raw_len = stored, len(stored)
    live.write_bytes(seg.encode())
    for command in (["cat", str(path)], ["tail", str(path), "-n", "1"]):
        code, out, err = hostile.capture(functools.partial(main, command))
        assert code == 0, err
        assert json.loads(out)["event"] == json.loads(stored)


def test_a_keyed_frame_with_an_empty_key_is_corruption(tmp_path: pathlib.Path) -> None:
    """Found by the fuzzer (seed 10 input 224, seed 13 input 129): a keyed frame whose key length
    byte is 0 read as a record with the key "" (the format's keys are 1 to 255 bytes), verify
    called the journal clean, and `journal copy` then failed with exit 2 on that key."""
    import journal
    from journal.engine.verify import verify

    path = tmp_path / "j"
    with hostile.open_file(path, create=True, block_bytes=0) as j:
        j.append({"n": 1}, idempotency_key="k1")
        j.append({"n": 2})
    live = path / hostile.segment_names(hostile.read_tree(str(path)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None and seg.frames[0].flags & fmt.FLAG_KEYED
    seg.frames[0].stored = b"\x00" + seg.frames[0].stored[1 + seg.frames[0].stored[0] :]
    live.write_bytes(seg.encode())
    with hostile.open_file(path, readonly=True) as r, pytest.raises(journal.CorruptionError, match="empty key"):
        list(r.read())
    assert verify(str(path)).verdict == "corrupt"


ODD_PAYLOADS = [
    (b'{"x":1e400,"y":NaN,"z":-Infinity}', "floats the writer refuses"),
    (b'{"t":"\\ud83d"}', "a lone surrogate escape"),
    (b'{"a":1,"a":2}', "a repeated key"),
    (b'{"n":' + b"9" * 400 + b"}", "an int of 400 digits"),
    (b'{ "spaced" : [ 1 , 2 ] }', "another writer's spacing"),
]


@pytest.mark.parametrize("stored,what", ODD_PAYLOADS, ids=[w for _, w in ODD_PAYLOADS])
@pytest.mark.parametrize("command", ["salvage", "copy"])
def test_a_payload_the_writer_never_writes_is_copied_byte_for_byte(
    tmp_path: pathlib.Path, stored: bytes, what: str, command: str
) -> None:
    """Found by the fuzzer (seed 0 input 156, seeds 12 to 14): a record whose stored JSON the
    writer never writes (NaN, an infinity, a number past a double's range, a lone surrogate, a
    repeated key) reads as an event and verifies clean, but `salvage` copied nothing (exit 1,
    EventNotSerializableError: it re-encoded each decoded event) and `copy` stopped, or, for a
    repeated key, wrote other bytes and exited 3. Both now append each stored payload as it is."""
    from journal.cli import main
    from journal.engine.verify import verify

    src, dst = tmp_path / "src", tmp_path / "dst"
    with hostile.open_file(src, create=True, block_bytes=0) as j:
        for i in range(5):
            j.append({"type": "x", "n": i}, idempotency_key=f"k{i}" if i == 3 else None)
    live = src / hostile.segment_names(hostile.read_tree(str(src)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None
    for k in (1, 3):  # an unkeyed record and a keyed one
        fr = seg.frames[k]
        key = fr.stored[: 1 + fr.stored[0]] if fr.flags & fmt.FLAG_KEYED else b""
        fr.stored, fr.raw_len = key + stored, len(stored)
    live.write_bytes(seg.encode())
    assert verify(str(src)).verdict == "clean"
    argv = [command, str(src), str(dst), "--json"]
    code, _, err = hostile.capture(lambda: main(argv))
    assert code == 0, f"{command} of a journal holding {what}: exit {code}: {err}"
    with hostile.open_file(src, readonly=True) as a, hostile.open_file(dst, readonly=True) as b:
        want = [(r.seq, r.payload, r.key, r.is_bytes) for r in a.read()]
        assert [(r.seq, r.payload, r.key, r.is_bytes) for r in b.read()] == want
    assert want[1][1] == stored and want[3][1] == stored and want[3][2] == "k3"
    assert verify(str(dst)).verdict == "clean"


@pytest.mark.parametrize("payload,is_bytes", [(b"not json", False), (b"[1]", False), (b"\xff", False)])
def test_a_stored_payload_that_is_no_event_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, payload: bytes, is_bytes: bool
) -> None:
    """StoredPayload appends bytes as they are, so it checks that JSON ones are the JSON of an
    object (the rule every reader decodes by): no append writes a record that reads as corrupt."""
    import journal
    from journal.record import StoredPayload

    with pytest.raises(journal.EventNotSerializableError):
        StoredPayload(payload, is_bytes)
    with hostile.open_file(tmp_path / "j", create=True) as j:
        j.append(StoredPayload(b"\xff raw", True))
        j.append(StoredPayload(b'{"a":NaN}', False))
        got = [(r.payload, r.is_bytes) for r in j.read()]
    assert got == [(b"\xff raw", True), (b'{"a":NaN}', False)]


def test_export_writes_a_stored_lone_surrogate_as_an_escape(tmp_path: pathlib.Path) -> None:
    """Found by the fuzzer: `journal export` of a journal written through the API (plain JSONL,
    one event a line) whose stored JSON holds a lone surrogate escape failed with a
    UnicodeEncodeError traceback; the line now holds JSON's escape, and reads back as the event."""
    import json

    from journal.cli import main

    path, out = tmp_path / "j", tmp_path / "out.jsonl"
    stored = b'{"t":"a\\ud83db","e":"\\u00e9"}'
    with hostile.open_file(path, create=True, block_bytes=0) as j:
        j.append({"t": "placeholder"})
        j.append({"t": "caf\u00e9"})
    live = path / hostile.segment_names(hostile.read_tree(str(path)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None
    seg.frames[0].stored, seg.frames[0].raw_len = stored, len(stored)
    live.write_bytes(seg.encode())
    code, _, err = hostile.capture(lambda: main(["export", str(path), str(out)]))
    assert code == 0, err
    lines = [json.loads(line) for line in out.read_bytes().decode("utf-8").splitlines()]
    assert lines == [{"seq": 1, **json.loads(stored)}, {"seq": 2, "t": "caf\u00e9"}]
    assert "caf\u00e9" in out.read_text("utf-8")  # text UTF-8 can write stays as it is


@pytest.mark.parametrize("block", [{"raw": 5}, {"raw": "\ud83d"}, {"raw": "x\udcff"}, {"rawHex": "zz"},
                                   {"rawHex": ["00"]}, {"raw": "a\n{\"injected\":1}"}, {"rawHex": "610a62"}])
def test_export_of_an_import_block_no_importer_writes_is_corruption(
    tmp_path: pathlib.Path, block: dict[str, object]
) -> None:
    """An imported journal whose import block lies (a raw line that is no text or holds a lone
    surrogate, a rawHex that is no hex) made export fail with TypeError, UnicodeEncodeError or
    ValueError tracebacks, and one holding a newline wrote lines the source never had; it is
    CorruptionError naming the record (exit 3)."""
    import json

    from journal.cli import main
    from journal.record import StoredPayload

    src, imported, path = tmp_path / "log.jsonl", tmp_path / "imported", tmp_path / "s"
    out = tmp_path / "out.jsonl"
    src.write_text(json.dumps({"type": "user_message", "text": "hi"}) + "\n")
    code, _, err = hostile.capture(lambda: main(["import", "jsonl", str(src), str(imported)]))
    assert code == 0, err
    with hostile.open_file(imported, readonly=True) as j:
        events = [r.event for r in j.read()]
    victim = next(i for i, ev in enumerate(events) if "raw" in ev.get("data", {}).get("import", {}))
    block_now = events[victim]["data"]["import"]
    events[victim]["data"]["import"] = {k: v for k, v in block_now.items() if k not in ("raw", "rawHex")} | block
    with hostile.open_file(path, create=True) as j:  # the same events, one of them as no importer writes it
        for ev in events:
            j.append(StoredPayload(json.dumps(ev, ensure_ascii=True).encode(), False))
    code, _, err = hostile.capture(lambda: main(["export", str(path), str(out)]))
    assert code == 3, err
    assert "import block" in err and "re-import" in err
    assert not out.exists()


@pytest.mark.parametrize("key_len", [40, 255])
def test_a_key_longer_than_its_payload_is_no_key_for_the_writer(tmp_path: pathlib.Path, key_len: int) -> None:
    """A keyed frame whose key length byte runs past its payload (or is 0) under a genuine
    checksum: the writer's open indexed the bytes that were there as a key, so an append under
    that key was taken for a retry of the crafted record (a duplicate or a conflict) instead of
    being written. Such a frame names no key; reading it reports it."""
    import journal
    from journal.engine.verify import verify

    path = tmp_path / "j"
    with hostile.open_file(path, create=True, block_bytes=0) as j:
        j.append({"type": "x", "n": 0})
        j.append({"type": "x", "n": 1}, idempotency_key="abcdefgh")
    live = path / hostile.segment_names(hostile.read_tree(str(path)))[-1]
    seg = hostile.parse_segment(live.read_bytes())
    assert seg is not None
    fr = seg.frames[1]
    assert fr.flags & fmt.FLAG_KEYED and fr.stored[1:9] == b"abcdefgh"
    fr.stored = bytes([key_len]) + b"abcdefgh"  # the key is the whole payload, and more
    live.write_bytes(seg.encode())
    assert verify(str(path)).verdict == "corrupt"
    with hostile.open_file(path) as j:
        out = j.append({"type": "x", "n": 2}, idempotency_key="abcdefgh")
        assert isinstance(out, journal.Committed) and out.seq == 3, out
        got = j.get(3)
        assert got is not None and got.event == {"type": "x", "n": 2}


@pytest.mark.parametrize("target", ["an unkeyed record", "a record of another key", "a seq past the journal"])
def test_a_seal_key_table_that_lies_is_reported_and_acknowledges_nothing(tmp_path: pathlib.Path, target: str) -> None:
    """A sealed segment's footer whose key table names, for a key, a seq whose record has no
    such key (genuine checksum): verify called the journal clean, and a reopened writer took an
    append under that key for a retry of that record: Committed, and never written."""
    import journal
    from journal.engine.verify import verify

    path = tmp_path / "j"
    with hostile.open_file(path, create=True, segment_size_bytes=4096, index_interval_bytes=512) as j:
        for i in range(80):
            j.append({"type": "x", "n": i, "pad": hostile._noise(i, 20)}, idempotency_key="real" if i == 2 else None)
        last = j.last_seq
    name = hostile.segment_names(hostile.read_tree(str(path)))[0]
    seg = hostile.parse_segment((path / name).read_bytes())
    assert seg is not None and seg.sealed
    info = fmt.decode_seal_payload(seg.frames[-1].stored)
    assert info.keys == [(3, b"real")]
    seq = {"an unkeyed record": 5, "a record of another key": 3, "a seq past the journal": last + 50}[target]
    keys = [(3, b"real"), (seq, b"ghost")] if seq != 3 else [(3, b"ghost")]
    seg.frames[-1].stored = hostile.pack_seal(info.record_count, info.first_seq, info.last_seq,
                                              info.index_interval_bytes, info.entries, keys, info.seal_offset)
    (path / name).write_bytes(seg.encode())
    rep = verify(str(path))
    assert rep.verdict == "corrupt" and any("key table" in p.reason for p in rep.problems), rep.problems
    with hostile.open_file(path) as j:
        with pytest.raises(journal.CorruptionError, match="key index"):
            j.append({"type": "new"}, idempotency_key="ghost")
        assert j.last_seq == last
        assert isinstance(j.append({"type": "other"}, idempotency_key="fresh"), journal.Committed)


def test_the_fuzzer_makes_a_temp_file_after_the_largest_segment_name() -> None:
    """The fuzzer's own bug (seed 13): a temp file named after the last segment, when that one
    already had the largest name a segment can have, broke the name's invariant and stopped the
    campaign. Each tmp-* shape is tried over a tree whose last segment has that name."""
    import random

    largest = fmt.segment_name(10**fmt.SEGMENT_NAME_DIGITS - 1)
    shapes = set()
    for n in range(200):
        tree = {fmt.segment_name(1): hostile.Entry(b"x" * 80), largest: hostile.Entry(b"y" * 80)}
        what = hostile.m_odd_files(tree, random.Random(n))
        if what is not None and "tmp-" in what:
            shapes.add(what)
            assert largest + ".tmp" in tree
    assert len(shapes) == 3, shapes
