"""The `journal` command run for real, in a subprocess: exit codes, --json output, piped output
without progress bars, and verify/salvage on journals damaged in each way docs/FORMAT.md lists."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

import journal
from journal.cli import common
from journal.cli.progress import Progress
from journal.engine import format as fmt
from tests.conftest import segments, snapshot_files

SEGMENT_BYTES = 8192
RECORDS = 450  # five segments of about a hundred records


def cli(*args: str, check: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_NO_PROGRESS"}
    proc = subprocess.run([sys.executable, "-m", "journal.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)
    assert "\r" not in proc.stderr and "\r" not in proc.stdout, "piped output must not carry progress bars"
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def cli_json(*args: str, check: int = 0) -> Any:
    return json.loads(cli(*args, "--json", check=check).stdout)


def make(path: pathlib.Path, n: int = RECORDS) -> list[pathlib.Path]:
    # A frame per record, so that a flipped byte costs exactly one record (a damaged block frame
    # costs all of its records: tests/test_format_v2.py salvages one).
    with journal.open(path, create=True, segment_size_bytes=SEGMENT_BYTES, block_bytes=0) as j:
        for i in range(0, n, 10):
            j.append_many([{"type": "tick" if k % 2 else "tock", "i": i + k, "pad": "x" * 40} for k in range(10)],
                          durability="sync")
    return segments(path)


def flip(p: pathlib.Path, offset: int) -> None:
    b = bytearray(p.read_bytes())
    b[offset] ^= 0x04
    p.write_bytes(bytes(b))


@pytest.fixture
def jdir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "j"
    make(path)
    return path


# --- reading ----------------------------------------------------------------------------------


def test_info_human_and_json(jdir: pathlib.Path) -> None:
    human = cli("info", str(jdir), check=0).stdout
    assert "records    450 (last seq 450)" in human and "frame path" in human
    data = cli_json("info", str(jdir))
    assert data["records"] == 450 and data["lastSeq"] == 450 and data["formatVersion"] == fmt.FORMAT_VERSION
    assert data["framePath"] == ("native" if journal.native_available() else "pure")
    assert len(data["segments"]) == len(segments(jdir)) >= 3
    assert all(s["sealed"] for s in data["segments"][:-1]) and not data["segments"][-1]["sealed"]
    assert sum(s["records"] for s in data["segments"]) == 450


def test_cat_filters(jdir: pathlib.Path) -> None:
    out = cli("cat", str(jdir), "--after-seq", "100", "--limit", "5", "--type", "tick", check=0).stdout
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["seq"] for r in rows] == [102, 104, 106, 108, 110]
    assert all(r["event"]["type"] == "tick" for r in rows)
    assert len(cli("cat", str(jdir), check=0).stdout.splitlines()) == 450


def test_tail_and_follow(jdir: pathlib.Path) -> None:
    rows = [json.loads(x) for x in cli("tail", str(jdir), "-n", "3", check=0).stdout.splitlines()]
    assert [r["seq"] for r in rows] == [448, 449, 450]
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_NO_PROGRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "journal.cli", "tail", "-f", "-n", "1", "--idle-timeout", "2",
                             str(jdir)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    assert first["seq"] == 450
    got = []
    with journal.open(jdir) as j:
        for i in range(3):  # each live record reaches the follower before the next is appended
            j.append({"type": "live", "i": i}, durability="flush")
            got.append(json.loads(proc.stdout.readline())["seq"])
    assert got == [451, 452, 453]
    assert proc.wait(timeout=30) == 0


def test_help_lists_exit_codes() -> None:
    for name in ("info", "cat", "tail", "verify", "repair", "salvage", "import", "export"):
        out = cli(name, "--help", check=0).stdout
        assert "exit codes:" in out and "7  verify: torn tail" in out
    top = cli("--help", check=0).stdout
    for name in ("info", "cat", "tail", "verify", "repair", "salvage", "import", "export", "demo"):
        assert name in top


def test_missing_journal_and_usage_errors(tmp_path: pathlib.Path) -> None:
    p = cli("verify", str(tmp_path / "nope"), check=common.NOT_FOUND)
    assert "no journal" in p.stderr
    cli("info", str(tmp_path / "nope"), check=common.NOT_FOUND)
    cli("cat", check=common.USAGE)


def test_progress_draws_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Tty(), io.StringIO()
    for out in (tty, pipe):
        bar = Progress(out, "verify")
        for i in range(101):
            bar(i, 100)
        bar.end()
    assert "\r" in tty.getvalue() and "100%" in tty.getvalue() and tty.getvalue().endswith("\n")
    assert pipe.getvalue() == ""


# --- verify and salvage on each kind of damage ------------------------------------------------


def damage(path: pathlib.Path, kind: str) -> None:
    segs = segments(path)
    live = segs[-1]
    if kind == "torn":
        with open(live, "ab") as f:
            f.write(b"\x17" * 20)
    elif kind == "zeros":
        with open(live, "ab") as f:
            f.write(bytes(4096))
    elif kind == "flip-sealed":
        flip(segs[1], fmt.SEGMENT_HEADER_SIZE_BYTES + 200)
    elif kind == "flip-committed":
        flip(live, fmt.SEGMENT_HEADER_SIZE_BYTES + 40)  # inside the first frame; later frames are synced
    elif kind == "missing-segment":
        segs[1].unlink()
    elif kind == "seq-gap":
        data = bytearray(live.read_bytes())
        header = fmt.decode_segment_header(bytes(data))
        fr = fmt.scan(bytes(data), fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames[1]
        stored = bytes(data[fr.payload_offset : fr.end])
        data[fr.offset : fr.end] = fmt.encode_frame(fr.seq + 5, fr.flags, fr.raw_len, stored, header.salt)
        live.write_bytes(bytes(data))
    else:
        raise AssertionError(kind)


CASES = {
    # kind: (verify exit code, salvage exit code, seqs a salvage cannot recover)
    "torn": (common.TORN, common.LOST, 0),
    "zeros": (common.TORN, common.LOST, 0),
    "flip-sealed": (common.DAMAGED, common.LOST, 1),
    "flip-committed": (common.DAMAGED, common.LOST, 1),
    "missing-segment": (common.DAMAGED, common.LOST, None),
    "seq-gap": (common.DAMAGED, common.LOST, 1),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_verify_and_salvage_each_damage(tmp_path: pathlib.Path, jdir: pathlib.Path, kind: str) -> None:
    verify_code, salvage_code, lost = CASES[kind]
    damage(jdir, kind)
    before = snapshot_files(jdir)
    rep = cli_json("verify", str(jdir), check=verify_code)
    assert rep["verdict"] == {common.TORN: "torn", common.DAMAGED: "corrupt"}[verify_code]
    if verify_code == common.TORN:
        assert rep["tornTail"]["segment"] == segments(jdir)[-1].name and not rep["problems"]
    else:
        assert rep["problems"] and all("segment" in p and "offset" in p for p in rep["problems"])
    human = cli("verify", str(jdir), check=verify_code).stdout
    assert rep["verdict"].upper() in human
    if kind == "zeros":  # said for what it is: reserved space that holds nothing
        assert "zero-filled tail" in human and "holds nothing" in human
    out = tmp_path / "salvaged"
    report = cli_json("salvage", str(jdir), str(out), check=salvage_code)
    assert snapshot_files(jdir) == before, "verify and salvage never modify the source"
    assert report["losses"], "the report says what was lost and where"
    for loss in report["losses"]:
        assert loss["segment"].endswith(".seg") and loss["offset"] >= 0
    with journal.open(out, readonly=True) as j:
        recs = list(j.read())
    copied = [r for r in recs if r.event.get("type") != "journal.lost"]
    assert [r.seq for r in recs] == list(range(1, len(recs) + 1)), "seqs are kept, gaps filled"
    if lost is not None:
        assert RECORDS - len(copied) == lost
        assert len(recs) == RECORDS
    else:
        assert report["placeholders"] > 50 and len(recs) == RECORDS
    assert all(r.event["i"] == r.seq - 1 for r in copied), "every record keeps its own seq"
    cli("verify", str(out), check=common.OK)


def test_salvage_renumber_and_refuses_to_overwrite(tmp_path: pathlib.Path, jdir: pathlib.Path) -> None:
    damage(jdir, "flip-sealed")
    out = tmp_path / "packed"
    report = cli_json("salvage", str(jdir), str(out), "--renumber", check=common.LOST)
    assert report["renumbered"] and report["placeholders"] == 0 and report["lastSeq"] == RECORDS - 1
    p = cli("salvage", str(jdir), str(out), check=common.ERROR)
    assert "not empty" in p.stderr


def test_repair_dry_run_then_repair(jdir: pathlib.Path) -> None:
    damage(jdir, "torn")
    before = snapshot_files(jdir)
    dry = cli_json("repair", str(jdir), "--dry-run", check=0)
    assert dry["byteLevel"] and dry["byteLevel"][0].startswith("would cut 20 bytes")
    assert snapshot_files(jdir) == before
    done = cli_json("repair", str(jdir), check=0)
    assert any("cut" in a for a in done["byteLevel"]) and done["quarantined"]
    cli("verify", str(jdir), check=common.OK)


def test_repair_refuses_corruption(jdir: pathlib.Path) -> None:
    damage(jdir, "flip-committed")
    before = snapshot_files(jdir)
    p = cli("repair", str(jdir), check=common.DAMAGED)
    assert "journal salvage" in p.stdout
    assert snapshot_files(jdir) == before


def test_structural_repair_of_a_session(tmp_path: pathlib.Path) -> None:
    from journal import session

    path = tmp_path / "s"
    with session.open(path, create=True) as s:
        s.append("turn.started", turn_id="t1")
        s.append("tool.requested", {"tool": "edit", "sideEffect": "workspace-write", "idempotency": "unsafe"},
                 turn_id="t1", tool_call_id="c1")
        s.append("tool.started", turn_id="t1", tool_call_id="c1")
    rep = cli_json("verify", str(path), check=0)
    assert len(rep["session"]["openStructures"]) == 2
    dry = cli_json("repair", str(path), "--dry-run", check=0)
    assert dry["structural"]["count"] == 2
    done = cli_json("repair", str(path), check=0)
    assert done["structural"]["count"] == 2 and any("TOOL_OUTCOME_UNKNOWN" in c for c in done["structural"]["closers"])
    assert cli_json("verify", str(path), check=0)["session"]["openStructures"] == []


def session_with(path: pathlib.Path, extra: dict[str, Any] | None = None) -> str:
    """A healthy session journal with an open turn and tool call, then ``extra`` appended raw
    (fields of the envelope of the session: a newer schemaVersion, an undeclared type ...)."""
    from journal import session

    with session.open(path, create=True) as s:
        s.append("user.message", {"text": "fix the tests"})
        s.append("turn.started", turn_id="t1")
        s.append("tool.requested", {"tool": "edit", "sideEffect": "workspace-write", "idempotency": "unsafe"},
                 turn_id="t1", tool_call_id="c1")
        sid = s.session_id
    if extra is not None:
        with journal.open(path) as j:
            j.append({"schemaVersion": 1, "sessionId": sid, "data": {}, **extra}, durability="sync")
    return sid


REFUSED_SESSIONS: dict[str, tuple[dict[str, Any], str, int, tuple[str, ...]]] = {
    # name: (extra event, session verdict, exit code, words the message must say)
    "newer-schema": ({"schemaVersion": 2, "type": "user.message"}, "newer-schema", common.NEWER_FORMAT,
                     ("schemaVersion 2", "Upgrade")),
    "undeclared-type": ({"type": "myrt.cache_hit"}, "unknown-type", common.NEWER_FORMAT,
                        ("'myrt.cache_hit'", "Registry.register")),
    "not-an-envelope": ({"schemaVersion": 0, "type": "user.message"}, "refused", common.ERROR,
                        ("not a valid session envelope", "schemaVersion is 0")),
}


@pytest.mark.parametrize("name", sorted(REFUSED_SESSIONS))
def test_verify_runs_the_session_checks(tmp_path: pathlib.Path, name: str) -> None:
    """Was a bug: verify said CLEAN (exit 0) for a session journal that repair and replay refuse."""
    extra, verdict, code, words = REFUSED_SESSIONS[name]
    path = tmp_path / "s"
    session_with(path, extra)
    before = snapshot_files(path)
    rep = cli_json("verify", str(path), check=code)
    assert rep["verdict"] == "clean", "the byte-level verdict is the engine's own"
    got = rep["session"]
    assert got["verdict"] == verdict and got["seq"] == 5 and got["openStructures"] == []
    assert all(w in got["error"] for w in words), got
    human = cli("verify", str(path), check=code).stdout
    assert "CLEAN" in human and all(w in human for w in words) and "journal repair" in human
    # repair and replay refuse the same journal, so verify agrees with them.
    from journal import session

    assert cli("repair", str(path), "--dry-run").returncode != 0
    with pytest.raises(journal.JournalError):
        session.open(path, readonly=True).close()
    # With a torn tail as well, what stops a reader is still the session's refusal.
    with open(segments(path)[-1], "ab") as f:
        f.write(b"\x17" * 20)
    torn = cli_json("verify", str(path), check=code)
    assert torn["verdict"] == "torn" and torn["session"]["verdict"] == verdict
    assert cli_json("verify", str(path), "--no-session", check=common.TORN)["verdict"] == "torn"
    assert snapshot_files(path) == {**before, segments(path)[-1].name: segments(path)[-1].read_bytes()}


def test_verify_of_a_healthy_session_and_a_plain_journal(tmp_path: pathlib.Path, jdir: pathlib.Path) -> None:
    healthy = tmp_path / "ok"
    session_with(healthy)
    rep = cli_json("verify", str(healthy), check=common.OK)
    assert rep["session"]["verdict"] == "clean" and rep["session"]["error"] is None
    assert len(rep["session"]["openStructures"]) == 2, "an open turn and tool call are notes, not damage"
    human = cli("verify", str(healthy), check=common.OK).stdout
    assert "2 open structure(s) a repair would close" in human
    # An unknown type its writer marked ignorable is skipped by every session reader: not refused.
    ignorable = tmp_path / "ignorable"
    session_with(ignorable, {"type": "myrt.cache_hit", "ignorable": True})
    assert cli_json("verify", str(ignorable), check=common.OK)["session"]["verdict"] == "clean"
    # A plain journal is not a session: its verdict and exit code are the engine's alone.
    plain = cli_json("verify", str(jdir), check=common.OK)
    assert plain["verdict"] == "clean" and plain["session"]["verdict"] is None
    assert plain["session"]["skipped"] == "not a session journal"
    odd = tmp_path / "odd"
    with journal.open(odd, create=True) as j:
        j.append({"schemaVersion": 99, "type": "anything"})
    assert cli_json("verify", str(odd), check=common.OK)["session"]["verdict"] is None


# --- import / export through the command ------------------------------------------------------


def test_import_export_commands(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "log.jsonl"
    src.write_text('{"type":"user_message","text":"hi"}\n{"type":"assistant_message","text":"yo"}\n{"type":"us')
    p = cli("import", "jsonl", str(src), str(tmp_path / "j"), check=common.DAMAGED)
    assert "line 3" in p.stderr and "torn" in p.stderr and not (tmp_path / "j").exists()
    bad = json.loads(cli("import", "jsonl", str(src), str(tmp_path / "j"), "--json", check=common.DAMAGED).stderr)
    assert bad["line"] == 3 and bad["defect"] == "torn" and bad["exitCode"] == common.DAMAGED
    rep = cli_json("import", "jsonl", str(src), str(tmp_path / "j"), "--skip-bad")
    assert rep["skipped"][0]["line"] == 3 and rep["mapped"]["user.message"] == 1
    out = cli("export", str(tmp_path / "j"), check=0).stdout
    assert out == src.read_text()
    cli("export", str(tmp_path / "j"), str(tmp_path / "back.jsonl"), "--format", "jsonl", check=0)
    assert (tmp_path / "back.jsonl").read_bytes() == src.read_bytes()
    cli("export", str(tmp_path / "j"), "--format", "pi", check=common.USAGE)
    cli("import", "pi", str(tmp_path / "missing.jsonl"), str(tmp_path / "k"), check=common.NOT_FOUND)


# --- sessions and fork ------------------------------------------------------------------------


def test_sessions_and_fork(tmp_path: pathlib.Path) -> None:
    from journal.session.store import SessionStore

    root = tmp_path / "store"
    store = SessionStore(root)
    s = store.create(workspace={"path": "/repo"})
    s.append("user.message", {"text": "hi"})
    s.append("turn.started", turn_id="t1")
    s.append("assistant.message", {"text": "hello"}, turn_id="t1", attempt_id="a1")
    s.append("turn.ended", {"reason": "completed"}, turn_id="t1")
    sid, last = s.session_id, s.journal.last_seq
    s.close()
    rows = cli_json("sessions", str(root))
    assert [r["sessionId"] for r in rows] == [sid] and rows[0]["lastSeq"] == last
    assert sid in cli("sessions", str(root), check=0).stdout
    cli("sessions", str(tmp_path / "none"), check=common.NOT_FOUND)
    parent = store.journal_path(sid)
    points = cli_json("fork", parent, "--points")
    assert points and points[-1]["lastSeq"] == last
    before = snapshot_files(parent)
    got = cli_json("fork", parent, str(tmp_path / "child"), "--at-seq", "2")
    assert got["forkSeq"] == 2 and got["parentSessionId"] == sid and got["headerSeq"] == 3
    assert snapshot_files(parent) == before, "the parent is untouched"
    p = cli("fork", parent, str(tmp_path / "bad"), "--at-seq", "3", check=common.ERROR)
    assert "not a clean fork point" in p.stderr
    child = cli_json("fork", "--store", str(root), sid)
    assert child["parentSessionId"] == sid and child["forkSeq"] == last
    assert len(cli_json("sessions", str(root))) == 2
    cli("fork", "--store", str(root), "s-nope", check=common.NOT_FOUND)


# --- copy ------------------------------------------------------------------------------------


def test_copy_keeps_every_record_and_refuses_an_existing_target(jdir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    with journal.open(jdir) as j:
        j.append(b"\x00raw", idempotency_key="k-raw")
        j.append({"closer": True}, synthetic=True)
    dst = tmp_path / "copy"
    out = cli_json("copy", str(jdir), str(dst))
    assert out["copied"] == RECORDS + 2
    with journal.open(jdir, readonly=True) as a, journal.open(dst, readonly=True) as b:
        assert [(r.seq, r.payload, r.key, r.synthetic, r.is_bytes) for r in a.read()] == [
            (r.seq, r.payload, r.key, r.synthetic, r.is_bytes) for r in b.read()
        ]
    before = snapshot_files(dst)
    proc = cli("copy", str(jdir), str(dst), check=1)
    assert "exists" in proc.stderr and snapshot_files(dst) == before


def test_copy_stops_at_a_damaged_record(jdir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    seg = segments(jdir)[1]
    flip(seg, 200)
    proc = cli("copy", str(jdir), str(tmp_path / "copy"), check=3)
    assert "corruption" in proc.stderr
