"""Crafted journals whose frames are genuine (their checksums hold) but whose contents lie.

Issue 29, defects 5 to 8: a zstd header that declares a huge content size, a sequence gap of
2^62, zstd zeros that decode to GiBs, and payloads that are not what their flags say. Each
journal is built with the format's own functions (``fmt.encode_frame``: the checksums are
genuine, so nothing but the payload's meaning can refuse it) and read by every reader: read,
get, follow, ``journal cat``, verify, salvage, and the session layer through the api. A reader's
outcome must be a record, a typed ``CorruptionError`` naming segment, offset, seq and reason, or
a verdict: never a MemoryError, a UnicodeDecodeError, a RecursionError, a hang.

The readers run in a child process under ``RLIMIT_AS`` and a timeout, so a regression fails the
test instead of taking the machine's memory or time.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import resource
import struct
import subprocess
import sys
from typing import Any

import pytest
import zstandard

import journal
from journal.engine import format as fmt

ROOT = pathlib.Path(__file__).resolve().parent.parent
JOURNAL_ID = b"crafted-journal!"
SALT = fmt.segment_salt(JOURNAL_ID, 0, 1)
MEMORY_BYTES_MAX = 512 * 1024 * 1024  # a child's address space: far below what each defect took
CHILD_TIMEOUT_S = 120  # far beyond what a child takes (seconds); a hang fails instead of waiting


# --- crafting -----------------------------------------------------------------------------------


def segment(frames: list[bytes], base_seq: int = 1, number: int = 0) -> bytes:
    header = fmt.SegmentHeader(fmt.FORMAT_VERSION, JOURNAL_ID, number, base_seq,
                               fmt.segment_salt(JOURNAL_ID, number, base_seq))
    return fmt.encode_segment_header(header) + b"".join(frames)


def frame(
    seq: int, stored: bytes, raw_len: int | None = None, flags: int = 0, commit: bool = True, salt: int = SALT
) -> bytes:
    """A genuine data frame (its checksum holds with the salt of the segment it goes in)."""
    flags |= fmt.FLAG_COMMIT if commit else 0
    return fmt.encode_frame(seq, flags, len(stored) if raw_len is None else raw_len, stored, salt)


def block(first_seq: int, payloads: list[bytes], record_flags: list[int] | None = None) -> bytes:
    """A genuine, uncompressed block frame of ``payloads`` (its seq is its last record's)."""
    head = fmt.encode_block_head([len(p) for p in payloads], record_flags or [0] * len(payloads))
    body = b"".join(payloads)
    stored = head + body
    seq = first_seq + len(payloads) - 1
    return fmt.encode_frame(seq, fmt.KIND_BLOCK | fmt.FLAG_COMMIT, len(body), stored, SALT)


def write_journal(path: pathlib.Path, *segments: bytes) -> str:
    path.mkdir()
    base = 1
    for data in segments:
        base = fmt.decode_segment_header(data).base_seq
        (path / fmt.segment_name(base)).write_bytes(data)
    return str(path)


def zstd(data: bytes) -> bytes:
    """The writer's zstd: no content size, checksum or dict id in the frame."""
    return zstandard.ZstdCompressor(level=1, write_content_size=False, write_checksum=False).compress(data)


def zstd_declaring(declared: int, content: bytes = b"x" * 100) -> bytes:
    """A zstd frame that holds ``content`` (one RLE block of its first byte) and declares
    ``declared`` bytes in its header (Frame_Content_Size, 8 bytes)."""
    descriptor, window = 0xC0, 0x00  # an 8-byte content size, a 1 KiB window
    last_rle_block = 1 | (1 << 1) | (len(content) << 3)
    return (b"\x28\xb5\x2f\xfd" + bytes([descriptor, window]) + struct.pack("<Q", declared)
            + last_rle_block.to_bytes(3, "little") + content[:1])


def event(i: int) -> bytes:
    return json.dumps({"type": "note", "n": i}).encode()


# --- the child: every reader, under a memory limit ----------------------------------------------


def outcome(call: Any) -> dict[str, Any]:
    try:
        return {"ok": call()}
    except journal.CorruptionError as exc:
        return {"error": type(exc).__name__, "segment": exc.segment, "offset": exc.offset, "seq": exc.seq,
                "reason": exc.reason}
    except BaseException as exc:  # what the test refuses: anything but a record, a verdict or a typed error
        return {"error": type(exc).__name__, "message": str(exc)[:1000]}


def events_of(records: Any) -> list[Any]:
    return [[r.seq, len(r.payload) if r.is_bytes else r.event] for r in records]


def child_readers(path: str, seqs: list[int], dest: str) -> dict[str, Any]:
    """Every reader of the journal at ``path``: what each gave, as JSON."""
    from journal.cli import main as cli_main
    from journal.engine import salvage as S
    from journal.engine import verify as V

    out: dict[str, Any] = {}

    def read() -> Any:
        with journal.open(path, readonly=True) as j:
            return events_of(j.read())

    def follow() -> Any:
        with journal.open(path, readonly=True) as j:
            return events_of(j.follow(idle_timeout_s=0, poll_interval_s=0.001))

    def get(seq: int) -> Any:
        with journal.open(path, readonly=True) as j:
            rec = j.get(seq)
            return None if rec is None else events_of([rec])

    def cat() -> Any:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli_main(["cat", path])
        return {"exit": code, "stderr": err.getvalue()[:300]}

    def verify() -> Any:
        rep = V.verify(path)
        return {"verdict": rep.verdict, "records": rep.records, "problems": [p.to_json() for p in rep.problems]}

    def salvage() -> Any:
        rep = S.salvage(path, dest)
        with journal.open(dest, readonly=True) as j:
            copied = events_of(j.read())
        return {"losses": [loss.to_json() for loss in rep.losses], "copied": copied, "placeholders": rep.placeholders}

    out["read"] = outcome(read)
    out["follow"] = outcome(follow)
    for seq in seqs:
        out[f"get {seq}"] = outcome(lambda seq=seq: get(seq))
    out["cat"] = outcome(cat)
    out["verify"] = outcome(verify)
    out["salvage"] = outcome(salvage)
    return out


def child_call(name: str, *args: Any) -> None:
    """The child's entry point: run ``name`` of this module with ``args``, print its JSON."""
    result = globals()[name](*args)
    sys.stdout.write("\n" + json.dumps(result) + "\n")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES_MAX, MEMORY_BYTES_MAX))


def in_child(name: str, *args: Any) -> Any:
    """``name(*args)`` of this module in a child process under MEMORY_BYTES_MAX of address space
    and CHILD_TIMEOUT_S: its JSON result. A child that dies or hangs fails the test."""
    code = "import sys, json; from tests.test_crafted_payloads import child_call; child_call(*json.loads(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, json.dumps([name, *args])], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=CHILD_TIMEOUT_S, preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}{args} did not finish in {CHILD_TIMEOUT_S} s")
    assert proc.returncode == 0, f"{name}{args} died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_corrupt(got: dict[str, Any], seq: int, offset: int, words: str) -> None:
    assert got.get("error") == "CorruptionError", got
    assert got["seq"] == seq and got["offset"] == offset and got["segment"] == fmt.segment_name(1), got
    assert words in got["reason"], got


def assert_readers_refuse(res: dict[str, Any], seq: int, offset: int, words: str, good: list[int]) -> None:
    """Every reader reports the record at ``seq`` (frame at ``offset``) as corrupt; verify says so;
    salvage copies the records ``good`` and reports ``seq`` lost."""
    for reader in ("read", "follow", f"get {seq}"):
        assert_corrupt(res[reader], seq, offset, words)
    for other in good:
        got = res.get(f"get {other}")
        if got is not None:
            assert "ok" in got and got["ok"][0][0] == other, got
    cat = res["cat"]["ok"]
    assert cat["exit"] == 3 and "corruption of committed data" in cat["stderr"] and f"seq {seq}" in cat["stderr"], cat
    verdict = res["verify"]["ok"]
    assert verdict["verdict"] == "corrupt", verdict
    assert any(p["seqFirst"] == seq and p["offset"] == offset and words in p["reason"] for p in verdict["problems"])
    salvaged = res["salvage"]["ok"]
    assert [s for s, _ in salvaged["copied"] if s != seq] == good, salvaged
    lost = [c for c in salvaged["copied"] if c[0] == seq]
    assert lost and lost[0][1]["type"] == "journal.lost", salvaged  # the seq kept, as a placeholder
    assert any(loss["seqFirst"] == seq and words in loss["reason"] for loss in salvaged["losses"]), salvaged


def notes(salvaged: dict[str, Any]) -> list[int]:
    """The seqs of the application's records a salvage copied (not its placeholders)."""
    return [seq for seq, ev in salvaged["copied"] if isinstance(ev, dict) and ev.get("type") == "note"]


HEADER = fmt.SEGMENT_HEADER_SIZE_BYTES


def offsets(frames: list[bytes]) -> list[int]:
    out, at = [], HEADER
    for f in frames:
        out.append(at)
        at += len(f)
    return out


# --- 5. a zstd header that declares a huge content size -----------------------------------------


@pytest.mark.parametrize("declared", [6 << 30, 1 << 63])
def test_a_zstd_frame_that_declares_a_huge_content_size_is_refused_before_it_is_allocated(
    tmp_path: pathlib.Path, declared: int
) -> None:
    """Was: zstandard allocates the declared size whatever max_output_size says: a 158-byte
    journal ended in MemoryError (here, under the child's limit) in every reader."""
    frames = [frame(1, event(1)), frame(2, zstd_declaring(declared), raw_len=100, flags=fmt.CODEC_ZSTD),
              frame(3, event(3))]
    path = write_journal(tmp_path / "j", segment(frames))
    res = in_child("child_readers", path, [1, 2, 3], str(tmp_path / "out"))
    assert_readers_refuse(res, 2, offsets(frames)[1], f"declares {declared} bytes", [1, 3])


def test_a_zstd_frame_that_decodes_to_more_than_its_record_is_refused_without_decoding_it(
    tmp_path: pathlib.Path,
) -> None:
    """An honest zstd frame of 640 MiB of zeros (its header says so) in a record whose frame says
    100 bytes: refused by the header, never decoded. Was: 640 MiB decoded (MemoryError here)."""
    honest = 640 << 20
    with_size = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(bytes(honest))
    keyed = bytes([3]) + b"key" + with_size
    frames = [frame(1, event(1)), frame(2, with_size, raw_len=100, flags=fmt.CODEC_ZSTD | fmt.FLAG_BYTES),
              frame(3, keyed, raw_len=100, flags=fmt.CODEC_ZSTD | fmt.FLAG_KEYED | fmt.FLAG_BYTES), frame(4, event(4))]
    path = write_journal(tmp_path / "j", segment(frames))
    res = in_child("child_readers", path, [2, 3, 4], str(tmp_path / "out"))
    assert_corrupt(res["read"], 2, offsets(frames)[1], f"declares {honest} bytes")
    assert_corrupt(res["get 3"], 3, offsets(frames)[2], f"declares {honest} bytes")
    assert res["get 4"]["ok"] == [[4, {"type": "note", "n": 4}]]
    assert res["verify"]["ok"]["verdict"] == "corrupt"
    assert notes(res["salvage"]["ok"]) == [1, 4], res["salvage"]


def test_a_zstd_block_that_declares_a_huge_content_size_is_refused(tmp_path: pathlib.Path) -> None:
    payloads = [event(2), event(3)]
    head = fmt.encode_block_head([len(p) for p in payloads], [0, 0])
    raw_len = sum(map(len, payloads))
    lying = fmt.encode_frame(3, fmt.KIND_BLOCK | fmt.CODEC_ZSTD | fmt.FLAG_COMMIT, raw_len,
                             head + zstd_declaring(1 << 40, b"y" * raw_len), SALT)
    frames = [frame(1, event(1)), lying, frame(4, event(4))]
    path = write_journal(tmp_path / "j", segment(frames))
    res = in_child("child_readers", path, [1, 2, 4], str(tmp_path / "out"))
    assert_corrupt(res["read"], 2, offsets(frames)[1], f"declares {1 << 40} bytes")
    assert_corrupt(res["get 2"], 2, offsets(frames)[1], f"declares {1 << 40} bytes")
    assert res["verify"]["ok"]["verdict"] == "corrupt"
    assert notes(res["salvage"]["ok"]) == [1, 4], res["salvage"]


def test_a_server_record_and_an_artifact_that_declare_a_huge_size_are_refused(tmp_path: pathlib.Path) -> None:
    got = in_child("child_remote_and_artifact", str(tmp_path / "artifacts"))
    assert got["record"]["error"] == "CorruptionError" and "declares" in got["record"]["reason"], got
    assert got["artifact"]["error"] == "ArtifactCorruptError" and "declares" in got["artifact"]["message"], got
    # Within the limit, but far more than its bytes hold: decoded a chunk at a time, refused.
    small = got["artifact within the limit"]
    assert small["error"] == "ArtifactCorruptError" and "damaged" in small["message"], got


def child_remote_and_artifact(store: str) -> dict[str, Any]:
    from journal.remote import records
    from journal.session.artifacts import ArtifactStore

    salt = records.salt_of(JOURNAL_ID)
    stored = zstd_declaring(1 << 40)
    data = fmt.encode_frame(7, fmt.CODEC_ZSTD | fmt.FLAG_BYTES, 100, stored, salt)
    out = {"record": outcome(lambda: len(records.record_of(data, 7, salt, "postgres://crafted", 1 << 20).payload))}
    artifacts = ArtifactStore(store)
    ref = artifacts.put(b"evidence")
    blob = artifacts._blob(ref.removeprefix("artifact://"))
    pathlib.Path(blob).write_bytes(zstd_declaring(1 << 40, b"e" * 8))
    out["artifact"] = outcome(lambda: len(artifacts.get(ref)))
    pathlib.Path(blob).write_bytes(zstd_declaring(1 << 32, b"e" * 8))
    out["artifact within the limit"] = outcome(lambda: len(artifacts.get(ref)))
    return out


# --- 8. a genuine frame whose payload is not what its flags say ---------------------------------


LYING_PAYLOADS = {
    # name: (stored payload, flags, what the reason says)
    "not UTF-8": (b'{"text": "\xff\xfe"}', 0, "does not decode"),
    "not JSON": (b'{"type": "note", "n": ', 0, "does not decode"),
    "not an object": (b'[1, 2, 3]', 0, "not an object"),
    "nested past the recursion limit": (b"[" * 100_000 + b"]" * 100_000, 0, "recursion limit"),
    "a key longer than the payload": (bytes([200]) + b"short", fmt.FLAG_KEYED, "shorter than its key"),
}


@pytest.mark.parametrize("kind", sorted(LYING_PAYLOADS))
def test_a_payload_that_is_not_what_its_flags_say_is_corruption_for_every_reader(
    tmp_path: pathlib.Path, kind: str
) -> None:
    """Was: ValueError, UnicodeDecodeError, JSONDecodeError or RecursionError from the readers,
    CLEAN from verify, and a salvage that stopped instead of copying the other records."""
    stored, flags, words = LYING_PAYLOADS[kind]
    frames = [frame(1, event(1), commit=False), frame(2, stored, flags=flags, commit=False), frame(3, event(3))]
    path = write_journal(tmp_path / "j", segment(frames))
    res = in_child("child_readers", path, [1, 2, 3], str(tmp_path / "out"))
    assert_readers_refuse(res, 2, offsets(frames)[1], words, [1, 3])


def test_a_lying_record_in_a_block_is_lost_alone(tmp_path: pathlib.Path) -> None:
    """A block's records are cut from one decoded body: the one that is no JSON is reported
    (its seq, the block's offset) and its neighbours in the block are read and salvaged."""
    frames = [frame(1, event(1)), block(2, [event(2), b"\xff not json", event(4)]), frame(5, event(5))]
    path = write_journal(tmp_path / "j", segment(frames))
    res = in_child("child_readers", path, [2, 3, 4], str(tmp_path / "out"))
    assert res["get 2"]["ok"] == [[2, {"type": "note", "n": 2}]]
    assert_corrupt(res["get 3"], 3, offsets(frames)[1], "does not decode")
    assert res["get 4"]["ok"] == [[4, {"type": "note", "n": 4}]]
    assert_corrupt(res["read"], 3, offsets(frames)[1], "does not decode")
    verdict = res["verify"]["ok"]
    assert verdict["verdict"] == "corrupt" and [p["seqFirst"] for p in verdict["problems"]] == [3], verdict
    salvaged = res["salvage"]["ok"]
    assert notes(salvaged) == [1, 2, 4, 5], salvaged
    assert [(loss["seqFirst"], loss["seqLast"]) for loss in salvaged["losses"]] == [(3, 3)], salvaged


def test_the_session_layer_and_a_server_record_report_a_lying_payload_as_corruption(tmp_path: pathlib.Path) -> None:
    from journal import session

    path = tmp_path / "s"
    with session.open(path, create=True) as s:
        s.append("user.message", {"text": "hi"})
    live = sorted(p for p in path.iterdir() if p.name.endswith(".seg"))[-1]
    data = live.read_bytes()
    header = fmt.decode_segment_header(data)
    last = fmt.scan(data, HEADER, header.salt, header.base_seq).frames[-1]
    at = len(data)
    live.write_bytes(data + fmt.encode_frame(last.seq + 1, fmt.FLAG_COMMIT, 4, b"\xff\xfe{}", header.salt))
    for readonly in (True, False):
        with pytest.raises(journal.CorruptionError) as got:
            with session.open(path, readonly=readonly) as s:
                list(s.journal.read())
        assert (got.value.segment, got.value.offset, got.value.seq) == (live.name, at, last.seq + 1), got.value
        assert "does not decode" in got.value.reason

    from journal.remote import records

    salt = records.salt_of(JOURNAL_ID)
    rec = records.record_of(fmt.encode_frame(9, 0, 2, b"[]", salt), 9, salt, "postgres://host/db", 1 << 20)
    with pytest.raises(journal.CorruptionError) as got:
        rec.event  # noqa: B018 - the decoding is what is tested
    assert (got.value.segment, got.value.seq) == ("postgres://host/db", 9) and "not an object" in got.value.reason


# --- 6. a sequence gap of 2^62 --------------------------------------------------------------------


def child_gap(path: str, dest: str, renumbered: str) -> dict[str, Any]:
    from journal.engine import salvage as S
    from journal.engine import verify as V

    def verify() -> Any:
        rep = V.verify(path)
        return {"verdict": rep.verdict, "problems": [p.to_json() for p in rep.problems], "summary": rep.summary()}

    def salvage(dest: str, renumber: bool) -> Any:
        rep = S.salvage(path, dest, renumber=renumber)
        with journal.open(dest, readonly=True) as j:
            return {"copied": events_of(j.read()), "placeholders": rep.placeholders}

    return {"verify": outcome(verify), "salvage": outcome(lambda: salvage(dest, False)),
            "renumbered": outcome(lambda: salvage(renumbered, True)),
            "dest exists": os.path.exists(dest)}


def test_a_gap_of_2_to_the_62_is_reported_as_a_range_and_salvage_refuses_to_fill_it(tmp_path: pathlib.Path) -> None:
    """Was: verify listed every missing seq and salvage wrote a placeholder for each, both
    growing without bound (here: MemoryError under the child's limit, or the timeout)."""
    far = 1 << 62
    frames = [frame(1, event(1), commit=False), frame(far, event(2))]
    path = write_journal(tmp_path / "j", segment(frames))
    assert sum(p.stat().st_size for p in (tmp_path / "j").iterdir()) < 200  # the reviewer's 142 bytes
    got = in_child("child_gap", path, str(tmp_path / "out"), str(tmp_path / "renumbered"))
    verdict = got["verify"]["ok"]
    assert verdict["verdict"] == "corrupt", verdict
    assert (2, far - 1) in [(p["seqFirst"], p["seqLast"]) for p in verdict["problems"]], verdict
    assert f"seqs 2-{far - 1}" in verdict["summary"]
    refused = got["salvage"]
    assert refused["error"] == "JournalError", refused
    assert f"need {far - 2} placeholders" in refused["message"] and f"seqs 2-{far - 1}" in refused["message"]
    assert "Nothing was written; run `journal salvage --renumber`" in refused["message"], refused
    assert not got["dest exists"]
    assert got["renumbered"]["ok"]["copied"] == [[1, {"type": "note", "n": 1}], [2, {"type": "note", "n": 2}]]


# --- 7. verify and salvage hold one record at a time ------------------------------------------------


def child_zeros(path: str, dest: str) -> dict[str, Any]:
    from journal.engine import salvage as S
    from journal.engine import verify as V

    def salvage() -> Any:
        rep = S.salvage(path, dest)
        return {"copied": rep.copied, "losses": len(rep.losses)}

    def verify() -> Any:
        rep = V.verify(path)
        return {"verdict": rep.verdict, "records": rep.records}

    return {"verify": outcome(verify), "salvage": outcome(salvage)}


@pytest.mark.parametrize("record_bytes, records", [(64 << 20, 9), (16 << 20, 36)])
def test_verify_and_salvage_of_zstd_zeros_hold_one_record_at_a_time(
    tmp_path: pathlib.Path, record_bytes: int, records: int
) -> None:
    """Genuine records of zstd zeros: a few KiB of journal that decode to far more than the
    child's 512 MiB. Was: verify and salvage held every decoded record (MemoryError here)."""
    stored = zstd(bytes(record_bytes))
    flags = fmt.CODEC_ZSTD | fmt.FLAG_BYTES
    frames = [frame(i, stored, raw_len=record_bytes, flags=flags, commit=i == records) for i in range(1, records + 1)]
    path = write_journal(tmp_path / "j", segment(frames))
    assert records * record_bytes > MEMORY_BYTES_MAX
    got = in_child("child_zeros", path, str(tmp_path / "out"))
    assert got["verify"]["ok"] == {"verdict": "clean", "records": records}, got
    if record_bytes <= fmt.RECORD_SIZE_BYTES_MAX_DEFAULT:  # what the new journal takes
        assert got["salvage"]["ok"] == {"copied": records, "losses": 0}, got


# --- which copy salvage keeps, and in which order it reads them ------------------------------------


def tagged(seq: int, tag: str) -> bytes:
    return json.dumps({"type": "note", "n": seq, "copy": tag}).encode()


def test_of_two_copies_of_a_seq_the_one_in_its_place_is_kept_and_a_stale_segment_is_reported(
    tmp_path: pathlib.Path,
) -> None:
    """A segment holding a stale copy of seqs 6-10 (its header says it starts at 6) after one
    holding 1-10: the first copies are kept, the second ones reported as one stretch, and every
    seq is copied once, in order, from the segment that holds the kept copy."""
    first = segment([frame(s, tagged(s, "a"), commit=s == 10) for s in range(1, 11)])
    salt = fmt.segment_salt(JOURNAL_ID, 1, 6)
    stale = segment([frame(s, tagged(s, "b"), commit=s == 15, salt=salt) for s in range(6, 16)], base_seq=6, number=1)
    path = write_journal(tmp_path / "j", first, stale)
    got = in_child("child_readers", path, [], str(tmp_path / "out"))
    salvaged = got["salvage"]["ok"]
    assert [(s, ev["copy"]) for s, ev in salvaged["copied"]] == [(s, "a") for s in range(1, 11)] + [
        (s, "b") for s in range(11, 16)], salvaged
    dups = [loss for loss in salvaged["losses"] if "second copy" in loss["reason"]]
    assert len(dups) == 1 and "seqs 6-10" in dups[0]["reason"] and dups[0]["segment"] == fmt.segment_name(6), dups
    assert got["verify"]["ok"]["verdict"] == "corrupt"


def test_a_record_found_out_of_sequence_is_copied_in_seq_order_and_gives_way_to_one_in_its_place(
    tmp_path: pathlib.Path,
) -> None:
    """Frames 1-3, a stray frame of seq 9 (out of sequence), 4-5, no 6, a stray 7, then 8-9 in
    their place: salvage copies 1-5, a placeholder for 6, the stray 7 (read back from before the
    frames it comes after in seq order), 8 and the 9 in its place (not the stray one)."""
    seqs = [(1, "a"), (2, "a"), (3, "a"), (9, "stray"), (4, "a"), (5, "a"), (7, "stray"), (8, "a"), (9, "a")]
    frames = [frame(s, tagged(s, tag), commit=i == len(seqs) - 1) for i, (s, tag) in enumerate(seqs)]
    path = write_journal(tmp_path / "j", segment(frames))
    got = in_child("child_readers", path, [], str(tmp_path / "out"))
    salvaged = got["salvage"]["ok"]
    assert [(s, ev.get("copy", ev["type"])) for s, ev in salvaged["copied"]] == [
        (1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "a"), (6, "journal.lost"), (7, "stray"), (8, "a"), (9, "a")
    ], salvaged
    assert any("second copy of seq 9" in loss["reason"] for loss in salvaged["losses"]), salvaged
    assert any(loss["seqFirst"] == 6 and loss["seqLast"] == 6 for loss in salvaged["losses"]), salvaged
    assert got["verify"]["ok"]["verdict"] == "corrupt"
