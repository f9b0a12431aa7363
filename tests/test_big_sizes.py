"""Sizes: segments past 2 GiB, sparse live segments of many GiB, records at the largest size allowed.

Every reader of a segment (the writer's recovery, the read-only open, the shared writers'
catch-up, the cursor, fork's copy, verify, salvage and the commands) reads it a window at a
time (journal/engine/tail.py) through reads that loop on short ones (journal/fs.py): Linux
returns at most 0x7ffff000 bytes a pread, and a reader that took the first answer for the whole
file cut acknowledged records past 2 GiB. Each scenario runs in a child process under an address
space limit (RLIMIT_AS), so a reader that needed a buffer the size of the file fails here.

The journals are made cheaply: a live segment is carried past 2 GiB by padding frames of the
format's largest size whose payload is a hole (genuine frames, checksums and all, that cost 32
bytes of disk each; the format allows padding of any length up to the frame limit), and records
are appended after them through the API, so they sit beyond the 2 GiB offset. A zero tail of
many GiB is a hole made by ftruncate, as a writer's reserved space left by a crash is. The
largest record (record_size_bytes_max at the API's limit, ~256 MiB) is written for real.
JOURNAL_CAMPAIGN=1 adds a variant whose 2 GiB are real records of 100 MiB each (the review's
reproduction: 22 appends into a 4 GiB segment, all Committed, then a reopen), writing ~2.2 GB.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.engine import format as fmt
from journal.engine import tail
from journal.engine.options import RECORD_SIZE_BYTES_MAX_LIMIT
from journal.outcomes import Committed
from tests.conftest import live_segment, segments

ROOT = pathlib.Path(__file__).resolve().parent.parent
GiB = 1 << 30
# The address space a child may use: far below a buffer of the files read here (2.3 GiB, 64 GiB),
# far above a window and one frame of the largest size (256 MiB).
MEMORY_LIMIT_BYTES = 1536 * 1024 * 1024
# A record of the largest size is held by its reader as a frame, a payload and what is made of
# it (an event, a command's JSON line): a few times its 256 MiB, and still no file's size.
LARGEST_RECORD_MEMORY_LIMIT_BYTES = 3 * GiB
PAD_STORED_BYTES = fmt.FRAME_STORED_BYTES_LIMIT
PAD_FRAMES = 8  # 8 x (256 MiB + a header) after the first records: the next frame starts past 2 GiB
ZERO_TAIL_BYTES = 64 * GiB
SEGMENT_SIZE_BYTES = 64 * GiB  # the journals' live segments grow past 2 GiB without rolling over
TORN_HOLE_BYTES = 3 * GiB
CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN", "") not in ("", "0")


# --- building big journals cheaply ------------------------------------------------------------


def pad_header(seq: int, salt: int, stored_bytes: int = PAD_STORED_BYTES) -> bytes:
    """The 32-byte header of a padding frame of ``stored_bytes`` zero bytes, its checksum
    computed a window at a time (the payload is never held: on disk it is a hole)."""
    body = struct.pack("<IIQHHI", stored_bytes, stored_bytes, seq, fmt.KIND_PADDING, 0, fmt.FRAME_MARKER)
    h = xxhash.xxh64(body, seed=salt)
    zeros = bytes(8 << 20)
    left = stored_bytes
    while left:
        n = min(left, len(zeros))
        h.update(memoryview(zeros)[:n])
        left -= n
    return struct.pack("<Q", h.intdigest()) + body


def grow_past_2_gib(path: str | os.PathLike[str], frames: int = PAD_FRAMES) -> int:
    """Carry the live segment of the journal at ``path`` (no writer appending now; its file ends
    where its frames do) past 2 GiB with padding frames whose payload is a hole. Returns the
    offset where the next frame goes."""
    seg = live_segment(path)
    with open(seg, "r+b") as f:
        head = f.read(fmt.SEGMENT_HEADER_SIZE_BYTES)
        header = fmt.decode_segment_header(head)
        end = os.fstat(f.fileno()).st_size
        data = os.pread(f.fileno(), end, 0)
        res = fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        assert res.stop == fmt.Stop.END and res.stop_offset == end, "grow a segment whose file ends at its frames"
        last = res.frames[-1].seq if res.frames else header.base_seq - 1
        frame = pad_header(last, header.salt)
        for i in range(frames):
            os.pwrite(f.fileno(), frame, end + i * (fmt.FRAME_HEADER_SIZE_BYTES + PAD_STORED_BYTES))
        end += frames * (fmt.FRAME_HEADER_SIZE_BYTES + PAD_STORED_BYTES)
        os.ftruncate(f.fileno(), end)
    assert end > 2 * GiB
    return end


def events(j: Any, after: int = 0) -> list[Any]:
    return [r.payload if r.is_bytes else r.event for r in j.read(after_seq=after)]


def committed(outs: list[Any]) -> list[int]:
    assert all(isinstance(o, Committed) for o in outs), outs
    return [o.seq for o in outs]


def on_disk_bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


# --- the child: each scenario runs there, under the address space limit ----------------------


def run_limited(scenario: str, limit_bytes: int = MEMORY_LIMIT_BYTES, **kwargs: Any) -> dict[str, Any]:
    """Run ``CHILD[scenario](**kwargs)`` in a fresh interpreter whose address space is capped at
    ``limit_bytes`` (commands it starts inherit the cap). Returns what it returned."""
    code = (
        "import json, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit_bytes}, {limit_bytes}))\n"
        "from tests.test_big_sizes import CHILD\n"
        "print(json.dumps(CHILD[sys.argv[1]](**json.loads(sys.argv[2]))))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, scenario, json.dumps(kwargs)], cwd=ROOT, capture_output=True, text=True,
        timeout=900,
    )
    assert res.returncode == 0, f"{scenario} failed (exit {res.returncode}):\n{res.stderr[-6000:]}"
    out: dict[str, Any] = json.loads(res.stdout.splitlines()[-1])
    return out


def cli(*args: str) -> tuple[int, str, str]:
    """A command, run in this process (in a child: under its address space limit): (exit code,
    stdout, stderr)."""
    from journal.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def verify_and_salvage(path: str, dest: str, expected: list[Any] | None, records: int = 0) -> None:
    """verify says CLEAN with every record counted, and salvage copies every one (and nothing
    is lost or made up): ``expected``, the events, or their number."""
    from journal.engine.salvage import salvage
    from journal.engine.verify import verify

    n = len(expected) if expected is not None else records
    rep = verify(path)
    assert rep.verdict == "clean" and not rep.problems, rep.summary()
    assert rep.records == n and rep.last_seq == n, rep.summary()
    srep = salvage(path, dest)
    assert srep.copied == n and not srep.losses and srep.placeholders == 0, srep.summary()
    if expected is not None:
        with journal.open(dest, readonly=True, record_size_bytes_max=RECORD_SIZE_BYTES_MAX_LIMIT) as s:
            assert events(s) == expected


def child_past_2_gib(path: str, work: str) -> dict[str, Any]:
    """Every reader of a live segment past 2 GiB, each reading its 2 GiB once: a shared writer's
    recovery and another's catch-up, the reopen the review lost records on, the read-only open,
    fork's copy, verify and salvage. Records are read back by seq (get, and reads that start
    from the handle's index past the padding), so no reader goes over the 2 GiB more often than
    its own open or scan does (each pass costs seconds)."""
    # A handle's segment size is its own: every writer here lets the live segment grow past 2 GiB.
    opts: dict[str, Any] = {"writer": "shared", "reserve_bytes": 0, "segment_size_bytes": SEGMENT_SIZE_BYTES}
    with journal.open(path, readonly=True) as r:
        expected = events(r)
    assert len(expected) == 2
    b = journal.open(path, **opts)
    try:
        grow_past_2_gib(path)  # what other processes appended between b's batches
        with journal.open(path, **opts) as a:  # a's recovery reads the 2 GiB of frames
            assert a.recovery.tail == "clean" and not a.recovery.quarantined and a.last_seq == 2
            new: list[Any] = [{"i": i, "text": "x" * 2000} for i in range(3)]
            seqs = committed([a.append(e) for e in new])
            keyed = {"keyed": True}
            seqs += committed([a.append(keyed, idempotency_key="past-2-gib")])
            block = [{"b": i} for i in range(40)]  # appended together: a block frame
            seqs += committed(a.append_many(block))
            expected += [*new, keyed, *block]
            assert seqs == list(range(3, len(expected) + 1))
        # b catches up over the 2 GiB and a's frames: its record follows them, a's key is known.
        tail_event = {"from": "b"}
        assert committed([b.append(tail_event, durability="flush")]) == [len(expected) + 1]
        expected.append(tail_event)
        dup = b.append({"keyed": True}, idempotency_key="past-2-gib")
        assert isinstance(dup, Committed) and dup.duplicate and dup.seq == 6, dup
    finally:
        b.close()
    n = len(expected)

    def read_back(j: Any, upto: int) -> None:
        assert [j.get(seq).event for seq in (1, 2)] == expected[:2]
        assert events(j, after=2) == expected[2:upto]  # from the index: the cursor starts past the padding

    with journal.open(path, readonly=True) as r:
        assert r.recovery.tail == "clean" and r.last_seq == n
        read_back(r, n)
    with journal.open(path, segment_size_bytes=SEGMENT_SIZE_BYTES) as j:  # the reopen the review lost records on
        assert not j.recovery.quarantined and not j.recovery.truncated_bytes, j.recovery.summary()
        assert j.last_seq == n and len(segments(path)) == 1
        read_back(j, n)
        dst = os.path.join(work, "fork")
        os.mkdir(dst)
        j.copy_prefix(dst, 20)  # a record inside the block, past 2 GiB: the block is framed anew
    assert on_disk_bytes(pathlib.Path(dst)) < 64 * 1024 * 1024  # the padding's hole stayed a hole
    with journal.open(dst, segment_size_bytes=SEGMENT_SIZE_BYTES) as c:
        assert c.last_seq == 20 and not c.recovery.quarantined
        read_back(c, 20)
    verify_and_salvage(path, os.path.join(work, "salvaged"), expected)
    return {"records": n}


def child_sparse_zero_tail(path: str) -> dict[str, Any]:
    """A live segment whose last 64 GiB are a hole (a writer's reserved space, left by a crash)."""
    from journal.engine.verify import verify

    with journal.open(path, readonly=True) as r:
        assert r.recovery.tail == "zeros", r.recovery.summary()
        expected = events(r)  # the cursor reaches the tail and takes it for "not yet written"
        assert len(expected) == 3
    rep = verify(path)
    assert rep.verdict == "torn" and rep.torn_tail is not None and rep.torn_tail.reason == "zeros tail", rep.summary()
    assert rep.torn_tail.length_bytes == ZERO_TAIL_BYTES and rep.records == 3
    with journal.open(path) as j:
        rec = j.recovery
        assert rec.tail == "zeros" and rec.truncated_bytes == ZERO_TAIL_BYTES and not rec.quarantined, rec.summary()
        assert events(j) == expected
    return {"records": len(expected)}


def child_torn_then_hole(path: str, torn_hex: str, digest: str) -> dict[str, Any]:
    """A torn frame followed by a 3 GiB hole: recovery keeps exactly the bytes it cuts."""
    torn = bytes.fromhex(torn_hex)
    with journal.open(path, readonly=True) as r:
        assert r.recovery.tail == "torn"
        expected = events(r)
    with journal.open(path) as j:
        rec = j.recovery
        assert rec.tail == "torn" and rec.truncated_bytes == len(torn) + TORN_HOLE_BYTES, rec.summary()
        assert len(rec.quarantined) == 1 and rec.quarantined[0].split(".")[-2] == digest, rec.quarantined
        kept = os.path.join(path, rec.quarantined[0])
        assert os.path.getsize(kept) == len(torn) + TORN_HOLE_BYTES
        with open(kept, "rb") as f:
            assert f.read(len(torn)) == torn
        assert os.stat(kept).st_blocks * 512 < 64 * 1024 * 1024  # the hole was kept a hole
        assert events(j) == expected
    return {"records": len(expected)}


def child_largest_record(path: str, work: str) -> dict[str, Any]:
    """A record of the largest size the API allows, first in its journal, through every reader:
    a shared writer's catch-up over it, recovery, the read-only open, a point read, fork's copy,
    verify, salvage (whose new journal takes it), and ``journal verify``, whose session check
    reads the first record (tests/test_big_sizes.py's 17 MiB test runs every command)."""
    size = RECORD_SIZE_BYTES_MAX_LIMIT
    opts: dict[str, Any] = {"record_size_bytes_max": size, "compress": False}
    big_digest = xxhash.xxh64_hexdigest(b"\x5a" * size)

    def check(j: Any, n: int) -> None:
        got = [(r.seq, xxhash.xxh64_hexdigest(r.payload) if r.is_bytes else r.event) for r in j.read()]
        assert got == [(1, big_digest), (2, {"after": "big"})][:n], got

    b = journal.open(path, writer="shared", **opts)  # catches up over the big frame below
    try:
        with journal.open(path, writer="shared", **opts) as a:
            committed([a.append(b"\x5a" * size)])
        committed([b.append({"after": "big"}, idempotency_key="k")])
    finally:
        b.close()
    with journal.open(path, **opts) as j:  # recovery over it
        assert not j.recovery.quarantined and j.last_seq == 2
        check(j, 2)
        got = j.get(1)
        assert got is not None and xxhash.xxh64_hexdigest(got.payload) == big_digest
        del got
        dst = os.path.join(work, "fork")
        os.mkdir(dst)
        j.copy_prefix(dst, 1)
    with journal.open(path, readonly=True, record_size_bytes_max=size) as r:
        check(r, 2)
    with journal.open(dst, readonly=True, record_size_bytes_max=size) as c:
        check(c, 1)
    verify_and_salvage(path, os.path.join(work, "salvaged"), None, records=2)
    with journal.open(os.path.join(work, "salvaged"), readonly=True, record_size_bytes_max=size) as s:
        check(s, 2)
    code, out, err = cli("verify", path)
    assert code == 0 and "CLEAN" in out, (code, out, err[-2000:])
    return {"record_bytes": size}


def child_real_records_past_2_gib(path: str) -> dict[str, Any]:
    """The review's reproduction: 22 appends of 100 MiB into a 4 GiB segment, then a reopen."""
    record = 100 * 1024 * 1024
    opts: dict[str, Any] = {"segment_size_bytes": 4 * GiB, "record_size_bytes_max": record, "compress": False}
    with journal.open(path, create=True, **opts) as j:
        for i in range(22):
            committed([j.append(bytes([i + 1]) * record)])
    with journal.open(path, **opts) as j:
        assert j.last_seq == 22 and not j.recovery.quarantined and not j.recovery.truncated_bytes
        for rec in j.read():
            assert rec.payload == bytes([rec.seq]) * record
    return {"records": 22}


CHILD: dict[str, Callable[..., dict[str, Any]]] = {
    "past_2_gib": child_past_2_gib,
    "sparse_zero_tail": child_sparse_zero_tail,
    "torn_then_hole": child_torn_then_hole,
    "largest_record": child_largest_record,
    "real_records_past_2_gib": child_real_records_past_2_gib,
}


# --- the tests ---------------------------------------------------------------------------------


@pytest.fixture
def big_dir(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A directory whose big files go as soon as the test is done (pytest keeps the last runs')."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def small_journal(path: pathlib.Path, **options: Any) -> None:
    with journal.open(path, create=True, segment_size_bytes=SEGMENT_SIZE_BYTES, **options) as j:
        committed([j.append({"n": 1}, idempotency_key="first"), j.append({"n": 2})])


def test_the_padding_header_is_the_format_s_own() -> None:
    """The builder's padding frame (its payload never held) is byte for byte the encoder's."""
    salt = 0x1234_5678_9ABC_DEF0
    assert pad_header(7, salt, 4096) == fmt.encode_frame(7, fmt.KIND_PADDING, 4096, bytes(4096), salt)[:32]


def test_every_reader_keeps_records_past_2_gib(big_dir: pathlib.Path) -> None:
    path = big_dir / "j"
    small_journal(path, reserve_bytes=0)
    assert run_limited("past_2_gib", path=str(path), work=str(big_dir))["records"] == 47
    assert live_segment(path).stat().st_size > 2 * GiB and on_disk_bytes(path) < 16 * 1024 * 1024


def test_a_sparse_zero_tail_of_64_gib_is_cut_without_reading_it_into_memory(big_dir: pathlib.Path) -> None:
    path = big_dir / "j"
    with journal.open(path, create=True) as j:
        committed([j.append({"n": i}) for i in range(3)])
    seg = live_segment(path)
    os.truncate(seg, seg.stat().st_size + ZERO_TAIL_BYTES)
    assert run_limited("sparse_zero_tail", path=str(path))["records"] == 3
    assert seg.stat().st_size < 1024 * 1024


def test_a_torn_tail_followed_by_a_hole_is_kept_aside_exactly(big_dir: pathlib.Path) -> None:
    path = big_dir / "j"
    with journal.open(path, create=True) as j:
        committed([j.append({"n": i}) for i in range(3)])
    seg = live_segment(path)
    end = seg.stat().st_size
    # A frame header whose write was torn: the marker and a length, then garbage, then a hole.
    torn = struct.pack("<QIIQHHI", 1, 4096, 4096, 4, 0, 0, fmt.FRAME_MARKER) + b"\x07" * 100
    with open(seg, "r+b") as f:
        os.pwrite(f.fileno(), torn, end)
        os.ftruncate(f.fileno(), end + len(torn) + TORN_HOLE_BYTES)
    h = xxhash.xxh64(torn)
    zeros = bytes(8 << 20)
    for _ in range(TORN_HOLE_BYTES // len(zeros)):
        h.update(zeros)
    out = run_limited("torn_then_hole", path=str(path), torn_hex=torn.hex(), digest=h.hexdigest())
    assert out["records"] == 3
    assert seg.stat().st_size == end


def test_every_command_reads_and_copies_a_record_over_16_mib(tmp_path: pathlib.Path) -> None:
    """A record over the default 16 MiB limit, first in its journal (written with the limit raised,
    as the API allows): every command reads it, and the ones that write copy it."""
    path = tmp_path / "j"
    big = {"big": "y" * (17 << 20)}
    with journal.open(path, create=True, record_size_bytes_max=18 << 20) as j:
        committed([j.append(big), j.append({"small": 1})])
    for args in (["verify", str(path)], ["info", str(path)], ["cat", str(path)], ["tail", str(path), "-n", "2"],
                 ["repair", str(path), "--dry-run"], ["copy", str(path), str(tmp_path / "copy")],
                 ["salvage", str(path), str(tmp_path / "salvaged")]):
        code, out, err = cli(*args)
        assert code == 0, (args, code, err[-2000:])
        assert "record_size_bytes_max" not in out + err, args
        if args[0] == "verify":
            assert "CLEAN" in out
        if args[0] == "cat":
            assert [json.loads(line)["event"] for line in out.splitlines()] == [big, {"small": 1}]
    for made in ("copy", "salvaged"):
        with journal.open(tmp_path / made, readonly=True, record_size_bytes_max=RECORD_SIZE_BYTES_MAX_LIMIT) as m:
            assert events(m) == [big, {"small": 1}]


def test_fork_and_export_read_a_session_event_over_16_mib(tmp_path: pathlib.Path) -> None:
    """The session commands too: a session whose writer raised record_size_bytes_max forks (its
    clean points listed) and exports without being asked for a limit they have no option for."""
    import journal.session

    parent = tmp_path / "parent"
    text = "x" * (17 << 20)
    s = journal.session.open(parent, create=True, record_size_bytes_max=18 << 20)
    s.append("user.message", {"text": text})
    s.close()
    for args in (["fork", str(parent), "--points"], ["fork", str(parent), str(tmp_path / "child")],
                 ["export", str(parent), str(tmp_path / "out.jsonl")]):
        code, _out, err = cli(*args)
        assert code == 0, (args, code, err[-2000:])
    with journal.open(tmp_path / "child", readonly=True, record_size_bytes_max=18 << 20) as c:
        assert [r.event["data"].get("text") for r in c.read()][1] == text
    assert text in (tmp_path / "out.jsonl").read_text()


def test_a_record_of_the_largest_size_allowed_goes_through_every_reader_and_command(big_dir: pathlib.Path) -> None:
    path = big_dir / "j"
    with journal.open(path, create=True, compress=False):
        pass
    out = run_limited("largest_record", LARGEST_RECORD_MEMORY_LIMIT_BYTES, path=str(path), work=str(big_dir))
    assert out["record_bytes"] == RECORD_SIZE_BYTES_MAX_LIMIT


# --- the windows read what one buffer would: the same frames, stops and tail answers ---------


@functools.cache
def _live_segment_bytes() -> tuple[bytes, int, int]:
    """A live segment of a real journal (frames of one record, a keyed one, a block, commit
    marks, padding to 512-byte sectors): its bytes, salt and base seq."""
    with tempfile.TemporaryDirectory() as d:
        with journal.open(d, create=True, compress=False, sector_bytes=512) as j:
            committed([j.append({"n": i, "pad": "p" * (i * 37)}) for i in range(4)])
            committed([j.append({"keyed": 1}, idempotency_key="k")])
            committed(j.append_many([{"b": i} for i in range(6)], durability="flush"))
            committed([j.append({"last": True})])
        data = live_segment(d).read_bytes()
    header = fmt.decode_segment_header(data)
    return data, header.salt, header.base_seq


class _Sparse:
    """Bytes as a file system with ``block``-byte blocks would show them: a block of zeros only
    is a hole (SEEK_DATA and SEEK_HOLE answer by block, as ext4 does by its own)."""

    def __init__(self, data: bytes, block: int) -> None:
        self._data, self._block, self.size = data, block, len(data)

    def read(self, offset: int, size: int) -> bytes:
        return self._data[offset : offset + size]

    def _zero_block(self, i: int) -> bool:
        return not any(self._data[i * self._block : (i + 1) * self._block])

    def data_from(self, offset: int) -> int:
        i = offset // self._block
        while i * self._block < self.size and self._zero_block(i):
            i += 1
        return max(offset, min(i * self._block, self.size))

    def hole_from(self, offset: int) -> int:
        i = offset // self._block
        while i * self._block < self.size and not self._zero_block(i):
            i += 1
        return max(offset, min(i * self._block, self.size))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_windows_read_what_one_buffer_would(data: st.DataObject) -> None:
    """scan_segment, the zeros check, the durable-point search and the genuine-frame search over
    windows as small as a header (holes skipped as a file system reports them) agree with
    fmt.scan, fmt.zeros_from, fmt.find_durable_point and fmt.next_genuine_frame over the whole
    buffer, on a real segment damaged, cut, zeroed and extended at random."""
    base, salt, base_seq = _live_segment_bytes()
    seg = bytearray(base)
    for _ in range(data.draw(st.integers(0, 3))):
        what = data.draw(st.sampled_from(["flip", "zero", "cut", "zeros", "garbage", "again"]))
        at = data.draw(st.integers(fmt.SEGMENT_HEADER_SIZE_BYTES, max(fmt.SEGMENT_HEADER_SIZE_BYTES, len(seg))))
        if what == "flip" and at < len(seg):
            seg[at] ^= 0xFF
        elif what == "zero":
            end = at + data.draw(st.integers(1, 700))
            seg[at:end] = bytes(len(seg[at:end]))
        elif what == "cut":
            del seg[at:]
        elif what == "zeros":
            seg += bytes(data.draw(st.integers(1, 3000)))
        elif what == "garbage":
            seg += data.draw(st.binary(min_size=1, max_size=200))
        else:  # genuine frames again after what is there: a duplicate, or a durable point after damage
            seg += base[at:]
    raw = bytes(seg)
    window = data.draw(st.integers(fmt.FRAME_HEADER_SIZE_BYTES, 300))
    src = _Sparse(raw, data.draw(st.sampled_from([16, 64, 512])))
    old_window = tail.WINDOW_BYTES
    tail.WINDOW_BYTES = window
    try:
        start = fmt.SEGMENT_HEADER_SIZE_BYTES
        whole = fmt.scan(raw, start, salt, base_seq)
        windowed = tail.scan_segment(src, start, salt, base_seq)
        assert (windowed.frames, windowed.stop, windowed.stop_offset, windowed.stop_seq) == (
            whole.frames, whole.stop, whole.stop_offset, whole.stop_seq)
        stop = whole.stop_offset
        span = tail.Span(src, stop)
        assert tail.all_zeros(span) == fmt.zeros_from(raw, stop)
        last = tail.last_data_seq(whole, fmt.decode_segment_header(raw))
        expected = fmt.find_durable_point(raw[stop:], 0, salt, last)
        assert tail.durable_point(span, salt, last) == (None if expected is None else stop + expected)
        frames = tail.GenuineFrames(src, salt)
        for at in sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=4))):
            got = frames.next(at)
            want = fmt.next_genuine_frame(raw, at, salt)
            assert got == want, (at, got, want)
    finally:
        tail.WINDOW_BYTES = old_window


def test_a_window_that_ends_inside_a_header_starting_with_zeros_reads_on() -> None:
    """A window that ends a byte into a frame whose checksum starts with a zero byte shows a
    header of zeros cut short: the scan reads on from it, it is not a zero tail."""
    for salt in range(1, 1 << 16):  # a salt that gives the record's frame a checksum ending in 0x00
        frame = fmt.encode_frame(1, fmt.KIND_DATA, 2, b"{}", salt)
        if frame[0] == 0:
            break
    header = fmt.encode_segment_header(fmt.SegmentHeader(fmt.FORMAT_VERSION, bytes(16), 0, 1, salt))
    pad = fmt.encode_frame(0, fmt.KIND_PADDING, 40, bytes(40), salt)
    raw = header + pad + frame
    start = fmt.SEGMENT_HEADER_SIZE_BYTES
    windows = list(tail.scan_windows(tail.InMemory(raw), start, salt, 1, window_bytes=len(pad) + 1))
    assert [w.res.stop for w in windows] == [fmt.Stop.ZEROS, fmt.Stop.END] and not windows[0].last
    assert [fr.seq for w in windows for fr in w.res.frames] == [0, 1]


@pytest.mark.skipif(not CAMPAIGN, reason="writes ~2.2 GB of real records: JOURNAL_CAMPAIGN=1")
def test_real_records_of_100_mib_past_2_gib_survive_a_reopen(big_dir: pathlib.Path) -> None:
    assert run_limited("real_records_past_2_gib", path=str(big_dir / "j"))["records"] == 22
