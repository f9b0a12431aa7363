"""A review, as an attacker would make it, of the lone durable record's one-call append
(native/zstd_held.c's frame_write_sync, writer._append_alone / _write_lone_synced) and of the event
walk in C (native/json_floats.c's json_like): each test pins one risky behaviour against its twin.

Two defects, since fixed, are pinned by tests that failed on the code they were written against
(431afb7; see each):
- a journal whose seqs pass 2**63 - 1 (journal.open(first_seq=...) takes up to 10**19 - 1, and
  the frame's seq is a u64) is fail-stopped by its first lone sync append: the C call refuses the
  seq with a ValueError, which the writer takes for a write interrupted part way;
- frame_write_sync's "checked" integer arguments are parsed without overflow checks (PyArg
  "I" and "K" mask), so a seq, flags or dictionary id out of its field's range is cut to its low
  bits and written as another value instead of being refused as the twin refuses it.
"""

from __future__ import annotations

import errno
import gc
import json
import math
import os
import random
import shutil
import struct
import tempfile
import threading
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.engine import encoding, native, writer
from journal.engine import format as fmt
from journal.engine.dictionary import Dictionary, DictionaryUse
from journal.engine.options import Options
from journal.engine.verify import verify
from journal.errors import InvariantError
from tests import lone_frame
from tests.native_modules import compiled

U64_MAX = 2**64 - 1
TEXT = b'{"type":"tool_result","content":"session log line ls -la /work","ok":true}'


_module = lone_frame.module


@pytest.fixture(scope="module")
def trained() -> bytes:
    return lone_frame.trained_dictionary()


def _options(kind: str, trained: bytes) -> Options:
    if kind == "dictionary":
        use = DictionaryUse(7, Dictionary(7, trained))
        use.active = True
        return Options(dictionary=use)
    return Options(compress=kind == "plain")


def _twin(raw: bytes, seq: int, flags: int, salt: int, options: Options) -> bytes:
    body, codec, dict_id = encoding._compressed(raw, options)
    return fmt.encode_frame(seq, flags | codec, len(raw), body, salt, dict_id)


def _written(tmp: Path, raw: bytes, seq: int, flags: int, salt: int, options: Options, offset: int = 0) -> bytes:
    lone = encoding.lone_compression(len(raw), options)
    assert lone is not None
    compress_min, cdict, dict_id = lone
    path = tmp / f"seg{random.random()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        rc, size = _module().frame_write_sync(fd, raw, offset, seq, flags, salt, compress_min, cdict, dict_id)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert rc == 0 and len(data) == offset + size and data[:offset] == b"\0" * offset
    return data[offset:]


# --- the bytes, at the edges the hypothesis test of test_frame_write_sync.py rarely draws ------

_RNG = random.Random(20261205)
EDGE_RECORDS = {
    "empty": b"",
    "one byte": b"{",
    "plain min - 1": b"a" * (encoding.COMPRESS_MIN_BYTES - 1),
    "plain min": b"a" * encoding.COMPRESS_MIN_BYTES,
    "dict min - 1": b"a" * (encoding.DICT_COMPRESS_MIN_BYTES - 1),
    "dict min": b"a" * encoding.DICT_COMPRESS_MIN_BYTES,
    "random at dict min": _RNG.randbytes(encoding.DICT_COMPRESS_MIN_BYTES),
    "random 300": _RNG.randbytes(300),
    "text 16 KiB": (TEXT * 300)[: encoding.HELD_COMPRESS_BYTES_MAX],
    "random 16 KiB": _RNG.randbytes(encoding.HELD_COMPRESS_BYTES_MAX),
}


@pytest.mark.parametrize("kind", ["plain", "raw", "dictionary"])
@pytest.mark.parametrize("name", sorted(EDGE_RECORDS))
def test_edge_records_are_the_twins_bytes(tmp_path: Path, trained: bytes, kind: str, name: str) -> None:
    """Empty records, the compression thresholds either side, incompressible records with a
    dictionary (stored raw: dictionary id 0), records of exactly INPUT_BYTES_MAX, bytes flags:
    the frame is the twin's, byte for byte, and never larger than what the writer reserves.
    (Checked to fail: with the C header's dictionary id written whenever a CDict is given, the
    dictionary rows of incompressible records fail.)"""
    _module()
    raw = EDGE_RECORDS[name]
    options = _options(kind, trained)
    for seq, flags, salt in [
        (1, fmt.FLAG_COMMIT, 0),
        (2**63 - 1, fmt.FLAG_BYTES | fmt.FLAG_COMMIT | fmt.FLAG_AFTER_SYNC, U64_MAX),
        (12345, fmt.FLAG_SYNTHETIC | fmt.FLAG_BYTES, 0x0123456789ABCDEF),
    ]:
        got = _written(tmp_path, raw, seq, flags, salt, options, offset=seq % 7)
        assert got == _twin(raw, seq, flags, salt, options)
        assert len(got) <= fmt.FRAME_HEADER_SIZE_BYTES + len(raw)
        genuine = fmt.verify_frame(got, 0, salt)
        assert genuine is not None
        _, _, raw_len, _, got_flags, dict_id, _ = fmt.read_frame_header(got, 0)
        assert raw_len == len(raw) and got_flags & ~fmt.FLAG_CODEC_MASK == flags
        if got_flags & fmt.FLAG_CODEC_MASK == fmt.CODEC_RAW:
            assert dict_id == 0 and got[fmt.FRAME_HEADER_SIZE_BYTES :] == raw


def test_a_record_one_byte_over_the_limit_takes_the_twin(trained: bytes) -> None:
    """lone_compression hands a record over INPUT_BYTES_MAX back to the twin, and the C call
    refuses one: the limit is the same number on both sides."""
    mod = _module()
    assert mod.INPUT_BYTES_MAX == encoding.HELD_COMPRESS_BYTES_MAX
    for kind in ("plain", "raw", "dictionary"):
        options = _options(kind, trained)
        assert encoding.lone_compression(encoding.HELD_COMPRESS_BYTES_MAX, options) is not None
        assert encoding.lone_compression(encoding.HELD_COMPRESS_BYTES_MAX + 1, options) is None


# --- seqs past 2**63 - 1: a journal may have them, and the frame's seq is a u64 ----------------


def test_a_journal_whose_seqs_pass_2_63_appends_durably(tmp_path: Path) -> None:
    """journal.open takes first_seq up to 10**19 - 1 (more than 2**63 - 1), and the twin writes
    those seqs. DEFECT (fails on 431afb7): frame_write_sync refuses seq > INT64_MAX with a
    ValueError, which _append_alone takes for "interrupted before the write finished": the first
    lone sync append raises ValueError and the journal is fail-stopped, though nothing was
    written. Fix: accept every u64 seq in the C call (the frame field is u64; parse seq, salt,
    flags and dict_id with overflow checks, below), and have _write_lone_synced answer a refusal
    raised before the write (ValueError, MemoryError: "an exception means nothing was") as
    rolled back, not failed."""
    _module()
    first = 2**63
    with journal.open(tmp_path / "j", create=True, first_seq=first) as j:
        outs = [j.append({"i": i, "text": "tool output line " * 20}, durability="sync") for i in range(3)]
        assert [o.seq for o in outs] == [first, first + 1, first + 2]
        assert all(isinstance(o, journal.Committed) for o in outs), outs
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event["i"] for r in j.read()] == [0, 1, 2]


@pytest.mark.parametrize(
    "field, value",
    [
        ("seq", 2**64 + 1),
        ("seq", -(2**64) + 1),
        ("flags", (1 << 32) | fmt.FLAG_COMMIT),
        ("dict_id", (1 << 32) | 7),
    ],
)
def test_an_integer_out_of_its_fields_range_is_refused(tmp_path: Path, trained: bytes, field: str, value: int) -> None:
    """The C call says its arguments are checked before anything is written, and the twin
    (format.encode_frame) refuses a seq, flags or dictionary id its field cannot hold.
    DEFECT (fails on 431afb7): PyArg_ParseTuple's "K" and "I" take any int and keep its low
    bits, so seq 2**64 + 1 is written as seq 1, flags 2**32 | COMMIT as COMMIT, dictionary id
    2**32 | 7 as 7: a frame a reader takes for another record. Fix: parse them as "O" and
    convert with PyLong_AsUnsignedLongLong and range checks (OverflowError or ValueError),
    before the write."""
    mod = _module()
    cdict = native.held_make_cdict(trained) if field == "dict_id" else None
    args = {"seq": 1, "flags": fmt.FLAG_COMMIT, "salt": 5, "dict_id": 7 if cdict is not None else 0}
    args[field] = value
    with pytest.raises((ValueError, OverflowError, struct.error, InvariantError)):  # the twin's refusal
        fmt.encode_frame(args["seq"], args["flags"], 2, b"{}", args["salt"], args["dict_id"])
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises((ValueError, OverflowError)):
            mod.frame_write_sync(fd, TEXT * 4, 0, args["seq"], args["flags"], args["salt"], 64, cdict, args["dict_id"])
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


# --- a dictionary's CDict freed while pooled contexts outlive it -------------------------------


def test_a_freed_cdict_leaves_no_pooled_context_pointing_at_it(tmp_path: Path, trained: bytes) -> None:
    """Threads fill the dictionary pool with contexts that referred to a CDict; the CDict is then
    freed and another dictionary's made (zstd may put it at the same address). Every later frame,
    plain or against the new dictionary, is the twin's. A pooled context that kept the freed
    tables, or a plain context given a CDict (or a dictionary one used plain), shows as bytes that
    differ. (Checked to fail: with one pool for both kinds of call, the dictionary frames lose
    zstd's content checksum and differ.)"""
    mod = _module()
    import zstandard

    other = zstandard.train_dictionary(
        4096, [b'{"k":%d,"v":"%s"}' % (i, b"other words here %d " % (i * 7) * (i % 20 + 1)) for i in range(400)]
    ).as_bytes()
    record = b'{"i":3,"text":"' + b"tool output line 3 " * 12 + b'"}'

    def burst(cdict: object, dict_id: int, n: int) -> None:
        def one(t: int) -> None:
            fd = os.open(tmp_path / f"b{dict_id}-{t}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                for i in range(n):
                    assert mod.frame_write_sync(fd, record, i * 400, i, 0, 1, 64, cdict, dict_id)[0] == 0
            finally:
                os.close(fd)

        ts = [threading.Thread(target=one, args=(t,)) for t in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    first = mod.make_cdict(trained)
    burst(first, 1, 5)
    del first
    gc.collect()
    second = mod.make_cdict(other)
    burst(second, 2, 5)
    want_use = DictionaryUse(2, Dictionary(2, other))
    want_use.active = True
    options = Options(dictionary=want_use)
    for raw in (record, b'{"k":5,"v":"' + b"other words here 35 " * 6 + b'"}'):
        got = _written(tmp_path, raw, 9, fmt.FLAG_COMMIT, 3, options)
        assert got == _twin(raw, 9, fmt.FLAG_COMMIT, 3, options)
    plain = Options()
    assert _written(tmp_path, record, 9, 0, 3, plain) == _twin(record, 9, 0, 3, plain)


# --- threads: the pools shared by plain and dictionary calls, the bytes still the twin's -------


def test_threads_mixing_plain_and_dictionary_calls_write_the_twins_bytes(tmp_path: Path, trained: bytes) -> None:
    """16 threads, half against a dictionary, half plain, some storing raw, call at once while the
    main thread runs the GIL-held compressors (compress, compress_with): each file holds exactly
    the twin's frames. A context handed to two calls at once, or a plain context given a CDict,
    shows as bytes that differ. The files are on tmpfs where there is one, so the fdatasyncs are
    short and the compressions overlap. (Checked to fail: with pool_take handing a context out
    without taking it off the pool, two calls share one and frames differ.)"""
    mod = _module()
    where = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.access("/dev/shm", os.W_OK) else tmp_path
    kinds = ["plain", "dictionary", "raw", "dictionary"]
    opts = {k: _options(k, trained) for k in set(kinds)}
    per = 30
    rng = random.Random(7)
    plans = []
    for t in range(16):
        recs = []
        for _ in range(per):
            body = rng.choice([TEXT * rng.randint(1, 200), TEXT * 200, rng.randbytes(rng.randint(0, 500)), b""])
            recs.append((body, rng.choice([0, fmt.FLAG_BYTES | fmt.FLAG_COMMIT])))
        plans.append((kinds[t % 4], recs))
    errors: list[BaseException] = []
    go = threading.Barrier(17)

    def work(t: int) -> None:
        try:
            kind, recs = plans[t]
            compress_min, cdict, dict_id = encoding.lone_compression(0, opts[kind]) or (0, None, 0)
            fd = os.open(where / f"t{t}", os.O_RDWR | os.O_CREAT, 0o600)
            go.wait()
            try:
                offset = 0
                for i, (raw, flags) in enumerate(recs):
                    rc, size = mod.frame_write_sync(fd, raw, offset, i + 1, flags, t, compress_min, cdict, dict_id)
                    assert rc == 0
                    offset += size
            finally:
                os.close(fd)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for w in workers:
        w.start()
    go.wait()
    use = opts["dictionary"].dictionary
    assert use is not None and use.held is not None
    for _ in range(300):
        mod.compress(TEXT * 5, encoding.BLOCK_ZSTD_LEVEL)
        mod.compress_with(use.held, TEXT * 5)
    for w in workers:
        w.join()
    assert not errors, errors
    try:
        for t, (kind, recs) in enumerate(plans):
            want = b"".join(_twin(raw, i + 1, flags, t, opts[kind]) for i, (raw, flags) in enumerate(recs))
            assert (where / f"t{t}").read_bytes() == want, (t, kind)
    finally:
        if where != tmp_path:
            shutil.rmtree(where)


# --- outcomes of the lone path: the twin's ----------------------------------------------------


def _through_the_call(monkeypatch: pytest.MonkeyPatch, answer: str) -> list[int]:
    """Replace the writer's C call by one that fails as ``answer`` says: "write" runs the real call
    on a read-only descriptor of the file (a real failed pwrite: EBADF), "sync" runs it for real
    and then answers as a failed fdatasync would (EIO). Returns the calls seen."""
    real = writer.FRAME_WRITE_SYNC
    assert real is not None
    calls: list[int] = []

    def failing(fd: int, raw: bytes, offset: int, *rest: Any) -> tuple[int, int]:
        calls.append(offset)
        if answer == "write":
            ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
            try:
                result: tuple[int, int] = real(ro, raw, offset, *rest)
            finally:
                os.close(ro)
            return result
        rc, size = real(fd, raw, offset, *rest)
        assert rc == 0
        return -errno.EIO, size

    monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", failing)
    return calls


def test_a_failed_write_of_the_lone_frame_is_not_committed_and_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pwrite failure in the C call: NotCommitted, the file cut back to where the frame began,
    the journal goes on (the next append commits, the seq given back is reused). (Checked to
    fail: with _failed_synced_write answering every OSError as a failed fdatasync, the outcome
    is AckLost and the next append raises JournalFailStoppedError.)"""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd")
    _module()
    with journal.open(tmp_path / "j", create=True) as j:
        assert isinstance(j.append({"first": 1}, durability="sync"), journal.Committed)
        calls = _through_the_call(monkeypatch, "write")
        out = j.append({"text": "tool output line " * 30}, durability="sync")
        assert calls, "the lone path was not taken"
        assert isinstance(out, journal.NotCommitted), out
        monkeypatch.undo()
        again = j.append({"after": 1}, durability="sync")
        assert isinstance(again, journal.Committed) and again.seq == 2, again
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == [{"first": 1}, {"after": 1}]
    assert verify(str(tmp_path / "j")).verdict == "clean"


def test_a_failed_fdatasync_of_the_lone_frame_is_ack_lost_and_fail_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fdatasync failure in the C call: AckLost, and the journal fail-stops (a retried
    fdatasync could report success for pages the kernel dropped). (Checked to fail: with
    _failed_synced_write rolling every OSError back, the outcome is NotCommitted.)"""
    _module()
    with journal.open(tmp_path / "j", create=True) as j:
        calls = _through_the_call(monkeypatch, "sync")
        out = j.append({"text": "tool output line " * 30}, durability="sync")
        assert calls and isinstance(out, journal.AckLost), out
        with pytest.raises(journal.JournalFailStoppedError):
            j.append({"after": 1}, durability="sync")


# --- the roll-over decision when the record is stored raw -------------------------------------


def test_an_incompressible_lone_record_never_overfills_its_segment(tmp_path: Path) -> None:
    """The roll-over decision for a deferred record is taken on its raw size, which the C call may
    store as it is: no segment passes segment_size_bytes, whatever the records compress to.
    (Checked to fail: with _append_alone's roll-over test measuring 32 + len(stored) // 4, a
    segment of random records grows past its size.)"""
    _module()
    size = 8192
    rng = random.Random(3)
    events: list[Any] = [
        rng.randbytes(rng.randint(500, 1500)) if i % 2 else {"text": "x" * rng.randint(400, 1400)} for i in range(60)
    ]
    with journal.open(tmp_path / "j", create=True, segment_size_bytes=size, reserve_bytes=0) as j:
        for e in events:
            assert isinstance(j.append(e, durability="sync"), journal.Committed)
    segs = sorted((tmp_path / "j").glob("*.seg"))
    assert len(segs) > 3
    for seg in segs[:-1]:
        assert seg.stat().st_size <= size, (seg.name, seg.stat().st_size)
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == events


# --- json_like against _json_like ---------------------------------------------------------------


class _Int(int):
    pass


class _Float(float):
    pass


class _Str(str):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _List(list):  # type: ignore[type-arg]
    pass


class _Tuple(tuple):  # type: ignore[type-arg]
    pass


class _Color(IntEnum):
    RED = 1


def _nested(depth: int) -> list[Any]:
    v: list[Any] = []
    for _ in range(depth):
        v = [v]
    return v


JSON_LIKE_CASES: list[Any] = [
    {"a": True, "b": False, "c": None, "d": 0, "e": -(2**70), "f": "s", "g": 1.5, "h": -0.0},
    {"i": _Int(3)},
    {"i": _Color.RED},
    {"f": _Float(1.5)},
    {"s": _Str("x")},
    {"d": _Dict(a=1)},
    {"l": _List([1])},
    {"t": _Tuple((1,))},
    {"n": math.nan},
    {"n": [1, (2, {"x": math.inf})]},
    {"n": -math.inf},
    {"t": (1, 2, (3, [4, {"y": 5e-7}]))},
    {1: 1, "k": 2},
    {"deep": _nested(200)},
    {"deep": [*_nested(200), math.nan]},
    [1, 2, {"b": b"bytes"}],
    (1, 2.5, None),
    [],
    {},
]


@pytest.mark.parametrize("i", range(len(JSON_LIKE_CASES)))
def test_json_like_in_c_answers_as_its_twin(i: int) -> None:
    """Subclasses of int, float, str, dict, list and tuple, bools, an IntEnum, NaN and the
    infinities at depth, -0.0, tuples, nesting of 200: the C walk answers as encoding._json_like.
    (Checked to fail: with like_value's PyLong_CheckExact made PyLong_Check, the int subclass and
    IntEnum rows answer True in C.)"""
    like = compiled("journal._json_floats", "the event walk in C").json_like
    value = JSON_LIKE_CASES[i]
    assert like(value) is encoding._json_like(value)


def test_the_encoder_keeps_json_s_bytes_for_what_json_like_refuses() -> None:
    """What the walk refuses, json writes: a subclass's value and a NaN take json's answer (a
    NaN is refused with a typed error, never written as null). (Checked to fail: with like_value
    taking every float, the NaN event is written as null and no error is raised.)"""
    limit = Options().record_size_bytes_max
    assert json.loads(encoding._encode_json({"i": _Int(3), "f": _Float(0.5), "c": _Color.RED}, limit)) == {
        "i": 3,
        "f": 0.5,
        "c": 1,
    }
    with pytest.raises(journal.EventNotSerializableError):
        encoding._encode_json({"n": [math.nan]}, limit)
