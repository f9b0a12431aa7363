"""journal bench --quick runs end to end and writes its table. It asserts no speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_bench(script: str, *args: str) -> str:
    """bench/<script> with ``args``: its output, once it has exited 0 (the end of its errors if not)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_bench_quick_completes_and_writes_its_table(tmp_path: Path) -> None:
    out = tmp_path / "results"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "journal.cli", "bench", "--quick", "--out", str(out), "--dir", str(scratch)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    table = (out / "quick.md").read_text()
    assert "## Targets" in table
    for workload in ("1 writer, durable per event", "16 threads, durable per event", "bytes on disk per event"):
        assert workload in table
    assert "JSONL write+fdatasync" in table and "SQLite WAL synchronous=FULL" in table
    # Issue 33's targets, each with its spread over the rounds; the fork chain is not in the
    # quick run and says so.
    assert "| target | needs | measured | spread | verdict |" in table
    for target in (
        "open a 50,000-event session read-write vs a 500-event one",
        "open a 50,000-event session read-only vs a 500-event one",
        "records written one at a time (a frame each)",
        "the 10,000th fork of a chain vs the first, time",
    ):
        assert target in table, target
    # CPU per event, journal against JSONL, for a durable append and a decoded read at least.
    assert "CPU per event, ms" in table
    section = table.split("CPU per event, ms", 1)[1].split("\n\n")[1]  # the table after its caption
    cpu_lines = [ln for ln in section.splitlines() if ln.startswith(("| 1 writer, durable", "| decode scan"))]
    assert len(cpu_lines) == 2, cpu_lines
    for ln in cpu_lines:
        journal_ms, jsonl_ms = (float(c) for c in ln.split("|")[2:4])
        assert journal_ms > 0 and jsonl_ms > 0
    data = json.loads((out / "quick.json").read_text())
    assert data["quick"] is True and data["rows"]
    # A missing peer is listed as skipped, never left out silently.
    for peer in ("LMDB sync", "RocksDB sync=True"):
        assert any(r["store"] == peer for r in data["rows"]) or peer in data["skipped"]
    assert os.listdir(scratch) == []  # the stores' files are removed


@pytest.mark.parametrize(
    "workload", ["one-writer", "decode", "random", "random-frames", "first-append", "new-sessions"]
)
def test_ab_compares_two_checkouts(tmp_path: Path, workload: str) -> None:
    """bench/ab.py runs each side from its own checkout and reports both medians and B/A, for an
    append workload and for the read ones (a journal written, then read every record or by
    random seq, each record decoded)."""
    lines = run_bench("ab.py", str(ROOT), str(ROOT), workload, "--rounds", "1", "--dir", str(tmp_path)).splitlines()
    assert lines[-1].startswith("B/A ") and f"({workload}, 1 rounds)" in lines[-1]
    rates = [float(ln.split("median ")[1].split()[0].replace(",", "")) for ln in lines if "median" in ln]
    assert len(rates) == 2 and all(r > 0 for r in rates), lines
    assert os.listdir(tmp_path) == []  # the scratch journals are removed
    if workload != "one-writer":
        return
    bad = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ab.py"), str(tmp_path), str(ROOT), workload],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "not a checkout of journal" in bad.stderr


def test_session_open_script_builds_and_opens_through_the_shared_module(tmp_path: Path) -> None:
    """bench/bench_session_open.py builds and opens its sessions with journal/benchmark/session_open.py,
    as journal bench does, and still prints its table and verdict."""
    out = run_bench("bench_session_open.py", "--big", "1000", "--runs", "1", "--dir", str(tmp_path))
    assert "| session ro | " in out and "| session ro, full replay | " in out
    assert out.rstrip().splitlines()[-1].startswith("target: session rw and ro big/small <= 2.0x: ")
    assert os.listdir(tmp_path) == []


def test_bench_blocks_sweeps_block_sizes(tmp_path: Path) -> None:
    """bench/bench_blocks.py writes the mix with each block size and reports a row each; blocks
    store the same events in fewer bytes than a frame per record (the figure it exists for)."""
    out = run_bench("bench_blocks.py", "--events", "400", "--sizes", "0,8192", "--rounds", "1", "--dir", str(tmp_path))
    rows = [ln.split("|")[1:-1] for ln in out.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r[0].strip() for r in rows] == ["0", "8,192"]
    frame_each, blocks = (float(r[2]) for r in rows)
    assert 0 < blocks < frame_each < 1
    assert os.listdir(tmp_path) == []  # the scratch journals are removed


@pytest.mark.parametrize(
    "op", ["sessions-sync", "sessions-sync-raw", "sessions-jsonl", "threads-sync", "get", "get-frames", "jsonl-get"]
)
def test_codec_cpu_runs_the_threaded_ops_and_point_reads(tmp_path: Path, op: str) -> None:
    """bench/bench_codec_cpu.py's ops with threads (the many-sessions and 16-thread workloads)
    and its reads by seq (the random-read bound), whose instructions bench/README.md quotes, run
    to the end and leave nothing behind; a read by seq that does not give back the event
    appended at that seq stops its run with an error."""
    out = run_bench("bench_codec_cpu.py", "--op", op, "--count", "160", "--dir", str(tmp_path))
    assert out.startswith(f"{op}: 160 of 160 events"), out
    assert os.listdir(tmp_path) == []


def test_codec_cpu_compress_op_reports_what_a_faster_zstd_level_gives_up(tmp_path: Path) -> None:
    """The compress op (what a lone durable append's zstd costs, bench/README.md's bound for many
    sessions) reports the stored share of the bytes it compresses; --zstd-level really changes
    the compressor: zstd's fast level -5 stores more of the bytes than the engine's level 1."""

    def share(*level: str) -> float:
        out = run_bench("bench_codec_cpu.py", "--op", "compress", "--count", "400", "--dir", str(tmp_path), *level)
        assert out.startswith("compress: 400 of 400 events; zstd "), out
        return float(out.split(" stored at ")[1].split()[0])

    engine, fast = share(), share("--zstd-level", "-5")
    assert 0 < engine < fast < 1
    assert os.listdir(tmp_path) == []


def test_sessions_cpu_reports_user_and_system_apart(tmp_path: Path) -> None:
    out = run_bench(
        "bench_sessions_cpu.py", "--sessions", "4", "--events", "40", "--rounds", "1", "--dir", str(tmp_path)
    )
    rounds = [ln for ln in out.splitlines() if ln.startswith("round 1:")]
    assert len(rounds) == 5 and all("(user " in ln and ", system " in ln for ln in rounds), out
    assert [ln.split(":")[0] for ln in out.splitlines() if "median ÷ JSONL" in ln] == [
        "journal, a journal per session",
        "journal, compress=False",
        "journal, a trained dictionary",
        "a reserved file per session (pwrite+fdatasync)",
    ], out  # not --shared-syncs: a syncfs of the whole file system, under the suite's load
    # The bytes each side's files hold: the dictionary's sessions hold the fewest, and a journal
    # without compression holds about what JSONL does (a frame header per event more, a newline less).
    stored = {
        ln.split(":")[0]: float(ln.split(": ")[1].split(" B/event")[0].replace(",", ""))
        for ln in out.splitlines()
        if "B/event on disk (" in ln
    }
    assert len(stored) == 4, out
    jsonl = stored["JSONL, a file per session (write+fdatasync)"]
    assert stored["journal, a trained dictionary"] < stored["journal, a journal per session"] < jsonl, out
    assert jsonl < stored["journal, compress=False"] < jsonl * 1.5, out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="syncfs is Linux's")
def test_reserved_files_synced_together_share_their_syncs(tmp_path: Path) -> None:
    """The floor with shared syncs (bench/README.md's bound for 1,000 sessions): every event is
    in its session's file, an append returns only after a syncfs begun after its write, the
    events written while one syncfs runs share the next, and a failed syncfs raises."""
    import ctypes
    import errno
    import threading

    from journal.benchmark import sessions as sess
    from journal.benchmark.stores import dumps

    store = sess._ReservedFilesSyncedTogether(str(tmp_path), 4)
    calls: list[int] = []  # events written when each syncfs began
    first_running = threading.Event()
    release = threading.Event()

    def syncfs(fd: int) -> int:
        calls.append(store._written)
        if len(calls) == 1:
            first_running.set()
            assert release.wait(60)  # the others write while the first sync runs
        # Not the real syncfs: it flushes the whole file system, which under a busy test run
        # can take minutes. What is tested is when an append returns, not the flush.
        return 0

    store._syncfs = syncfs
    waiting = threading.Semaphore(0)  # released by each append that waits for a sync

    class Watched(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waiting.release()
            return super().wait(timeout)

    store._cv = Watched()
    returned: list[int] = []
    events = [{"n": t, "text": "x" * (10 + t)} for t in range(4)]

    def append(t: int) -> None:
        store.append(t, events[t])
        returned.append(t)

    first = threading.Thread(target=append, args=(0,))
    first.start()
    assert first_running.wait(60)
    others = [threading.Thread(target=append, args=(t,)) for t in (1, 2, 3)]
    for th in others:
        th.start()
    for _ in range(3):  # all three written, each waiting for a sync begun after its write
        assert waiting.acquire(timeout=60)
    with store._cv:
        assert store._written == 4
    assert returned == []
    release.set()
    for th in (first, *others):
        th.join(60)
    assert sorted(returned) == [0, 1, 2, 3]
    assert calls == [1, 4]  # one sync for the first event, one for the three written meanwhile
    for t in range(4):
        line = dumps(events[t]) + b"\n"
        with open(tmp_path / f"s{t}.floor", "rb") as f:
            assert f.read(len(line)) == line

    def failing(fd: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    store._syncfs = failing
    with pytest.raises(OSError, match="syncfs failed") as err:
        store.append(0, events[0])
    assert err.value.errno == errno.EIO
    assert store._synced == 4  # the failed call covered nothing

    def raising(fd: int) -> int:
        raise KeyboardInterrupt

    store._syncfs = raising
    with pytest.raises(KeyboardInterrupt):
        store.append(1, events[1])
    assert store._synced == 4 and not store._leading  # nor did one that raised
    store.close()


def test_cold_reads_report_bytes_and_reads_by_block_size(tmp_path: Path) -> None:
    """bench_cold_reads.py (bench/README.md's bound for point reads with the block cache off):
    a row per block size and dictionary, and a frame each reads faster than the biggest blocks."""
    out = run_bench(
        "bench_cold_reads.py", "--sizes", "0,131072", "--events", "3000", "--reads", "300", "--rounds", "1",
        "--dir", str(tmp_path),
    )
    rows = [ln for ln in out.splitlines() if "cold point read" in ln]
    assert len(rows) == 4, out
    read = {ln.split(":")[0].strip(): float(ln.split("cold point read")[1].split("µs")[0]) for ln in rows}
    assert read["no dictionary, block_bytes       0"] < read["no dictionary, block_bytes 131,072"], out
    assert os.listdir(tmp_path) == []
