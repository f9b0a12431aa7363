"""journal.adapters.langgraph.JournalSaver: LangGraph's conformance suite, a real StateGraph, kill -9.

Skipped without LangGraph (``pip install -e '.[langgraph]'``; scripts/test installs it).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import copy
import importlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":  # CI: a framework missing is a failure
    importlib.import_module("langgraph.checkpoint.conformance")
else:
    pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install -e '.[langgraph-test]' to run these")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    empty_checkpoint,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

import journal
from journal.adapters.langgraph import (
    CODEC_RAW,
    CODEC_ZSTD,
    COMPRESS_MIN_BYTES,
    RECORD_VERSION,
    THREADS_DIR,
    CheckpointTooLargeError,
    JournalSaver,
    ThreadExistsError,
    record_event,
    thread_dir_name,
    thread_id_of,
)
from tests.child_langgraph import build_graph, expected_log
from tests.conftest import report_count

REPO = Path(__file__).resolve().parent.parent


def _cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def _exec_counts(path: Path) -> collections.Counter[str]:
    if not path.exists():
        return collections.Counter()
    return collections.Counter(path.read_text().split())


# ---- (a) the conformance suite


def test_conformance_suite(tmp_path: Path) -> None:
    made = []

    @checkpointer_test(name="JournalSaver")
    async def factory() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        saver = JournalSaver(tmp_path / f"saver{len(made)}")
        made.append(saver)
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(factory))
    counts = {name: (r["tests_passed"], r["tests_failed"]) for name, r in report.to_dict()["results"].items()}
    print("\nLangGraph conformance (passed, failed):", counts)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base()
    base = sum(counts[c][0] for c in ("put", "put_writes", "get_tuple", "list", "delete_thread"))
    assert base == 58, counts
    extended = sum(counts[c][0] for c in ("delete_for_runs", "copy_thread", "prune"))
    assert extended == 23, counts
    report_count("LangGraph conformance checks passed (base, extended)", f"{base}, {extended}")


# ---- storage details the suite does not look at


def test_thread_names_are_safe_and_reversible(tmp_path: Path) -> None:
    for tid in ["t1", "../../etc", "a/b", ".", "..", "A", "a", "ü\u2603", "x" * 150]:
        name = thread_dir_name(tid)
        assert "/" not in name and name not in (".", "..") and name == name.lower()
        assert thread_id_of(name) == tid
    assert thread_dir_name("A") != thread_dir_name("a")
    assert thread_id_of("not-ours") is None
    saver = JournalSaver(tmp_path)
    for tid in ["../../escape", "a/b"]:
        cfg: RunnableConfig = {"configurable": {"thread_id": tid, "checkpoint_ns": "", "checkpoint_id": "1"}}
        saver.put_writes(cfg, [("c", 1)], "t")
    assert sorted(os.listdir(tmp_path / THREADS_DIR)) == sorted(thread_dir_name(t) for t in ["../../escape", "a/b"])
    saver.close()
    assert sorted(os.listdir(tmp_path)) == [THREADS_DIR]


def test_too_large_is_refused_and_nothing_written(tmp_path: Path) -> None:
    saver = JournalSaver(tmp_path, record_size_bytes_max=64 * 1024)
    cfg: RunnableConfig = {"configurable": {"thread_id": "big", "checkpoint_ns": "", "checkpoint_id": "1"}}
    with pytest.raises(CheckpointTooLargeError, match="too large"):
        saver.put_writes(cfg, [("c", "x" * 200_000)], "task")
    saver.put_writes(cfg, [("c", "small")], "task")
    saver.close()
    saver = JournalSaver(tmp_path, record_size_bytes_max=64 * 1024)
    with journal.open(tmp_path / THREADS_DIR / thread_dir_name("big"), readonly=True) as j:
        assert j.last_seq == 1
    saver.close()


# ---- (b) a real StateGraph: parallel branches, interrupt() and resume, each durability mode


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_state_graph_interrupt_resume_and_reopen(tmp_path: Path, durability: str) -> None:
    exec_path = tmp_path / "exec.txt"
    loops = 3
    saver = JournalSaver(tmp_path / "cp")
    graph = build_graph(saver, str(exec_path), loops, ask_at=2)
    first = graph.invoke({"n": 0}, _cfg("t"), durability=durability)
    assert "__interrupt__" in first
    saver.close()  # the process goes away while the graph waits for a human

    saver = JournalSaver(tmp_path / "cp")  # a new process: everything comes from the journal
    graph = build_graph(saver, str(exec_path), loops, ask_at=2)
    waiting = graph.get_state(_cfg("t"))
    assert waiting.next == ("join",)
    assert waiting.interrupts and waiting.interrupts[0].value == {"question": "continue after loop 2?"}
    done = graph.invoke(Command(resume="yes"), _cfg("t"), durability=durability)
    assert done["log"] == expected_log(loops) and done["answer"] == "yes"
    # Each node ran once, the interrupted join included (it logs after interrupt() returned), and
    # the parallel branches finished before the interrupt were not run again.
    counts = _exec_counts(exec_path)
    assert counts == collections.Counter(expected_log(loops)), counts
    history = list(saver.list(_cfg("t")))
    assert history[0].checkpoint["id"] == graph.get_state(_cfg("t")).config["configurable"]["checkpoint_id"]
    ids = [h.checkpoint["id"] for h in history]
    assert ids == sorted(ids, reverse=True)
    saver.close()

    # Per-channel blobs: a checkpoint record holds values only for the channels in new_versions
    # ("exit" saves only two checkpoints, each after several steps' changes).
    with journal.open(tmp_path / "cp" / THREADS_DIR / thread_dir_name("t"), readonly=True) as j:
        events = [record_event(r) for r in j.read()]
        sizes = [len(e["blobs"]) for e in events if e["k"] == "cp"]
    if durability != "exit":
        assert min(sizes[1:]) < max(sizes), sizes


# ---- (c) kill -9 at random points, then reopen and resume


def _on_disk(thread_dir: Path) -> tuple[set[str], set[tuple[str, str]]]:
    cps: set[str] = set()
    writes: set[tuple[str, str]] = set()
    if not thread_dir.exists():
        return cps, writes
    with journal.open(thread_dir, readonly=True) as j:
        for rec in j.read():
            e = record_event(rec)
            if e["k"] == "cp":
                cps.add(e["id"])
            else:
                writes.add((e["cp"], e["task"]))
    return cps, writes


KILL_ROUNDS = 80
LOOPS = 3


def test_kill_9_then_resume_reuses_pending_writes(tmp_path: Path) -> None:
    started = time.monotonic()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.child_langgraph"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None

    def run(cmd: dict[str, Any]) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(cmd) + "\n")
        server.stdin.flush()
        answer: dict[str, Any] = json.loads(server.stdout.readline())
        return answer

    store = tmp_path / "cp"
    stats: collections.Counter[str] = collections.Counter()
    try:
        # A whole run first: how many saver calls and how long one takes, to spread the kills.
        t0 = time.monotonic()
        whole = run({"dir": str(store), "thread": "whole", "loops": LOOPS, "durability": "sync",
                     "acked": str(tmp_path / "whole.acked"), "exec": str(tmp_path / "whole.exec")})
        run_s = time.monotonic() - t0
        assert whole == {"pid": whole["pid"], "killed": False, "code": 0}
        calls = len((tmp_path / "whole.acked").read_text().splitlines())
        assert calls > 10

        for i in range(KILL_ROUNDS):
            rng = random.Random(i)
            thread = f"r{i}"
            acked_path, exec_path = tmp_path / f"{thread}.acked", tmp_path / f"{thread}.exec"
            cmd: dict[str, Any] = {"dir": str(store), "thread": thread, "loops": LOOPS,
                                   "durability": rng.choice(["sync", "async"]),
                                   "acked": str(acked_path), "exec": str(exec_path)}
            if i % 3 == 0:  # anywhere, in the middle of a write too
                cmd["kill_delay_s"] = rng.uniform(0, 0.7 * run_s)
                stats["kill by delay"] += 1
            else:  # at the k-th saver call, just before it or just after it returned
                cmd["kill_at"] = rng.randint(1, calls)
                cmd["kill_after"] = rng.random() < 0.5
                stats["kill at a call"] += 1
            got = run(cmd)
            assert got["killed"] or got["code"] == 0, got
            stats["killed" if got["killed"] else "finished before the kill"] += 1

            # Everything the graph was told was saved is in the journal (which reopens: nothing torn).
            acked = [json.loads(line) for line in acked_path.read_text().splitlines()] if acked_path.exists() else []
            cps, writes = _on_disk(store / THREADS_DIR / thread_dir_name(thread))
            assert {a["cp"] for a in acked if "cp" in a} <= cps, thread
            assert {tuple(a["w"]) for a in acked if "w" in a} <= writes, thread
            stats["acknowledged calls checked"] += len(acked)

            # Resume: tasks whose writes are pending at the last checkpoint are not run again.
            saver = JournalSaver(store)
            try:
                last = saver.get_tuple(_cfg(thread))
                pending = (last.pending_writes or []) if last else []
                finished = [label for _, ch, v in pending if ch == "log" for label in v]
                stats["finished tasks reused"] += len(finished)
                graph = build_graph(saver, str(exec_path), LOOPS)
                done = graph.invoke(None if last else {"n": 0}, _cfg(thread))
                counts = _exec_counts(exec_path)
                for label in finished:
                    assert counts[label] == 1, (thread, label, counts)
                if cmd["durability"] == "sync":
                    # Not under "async": LangGraph 1.2 saves a checkpoint there in the background
                    # while the next step mutates a barrier channel's set in place, so a slow
                    # put stores the later value (InMemorySaver with a 5 ms put does it too); a
                    # resume from that checkpoint can skip the join. LangGraph's bug, not the store's.
                    assert done["log"] == expected_log(LOOPS), (thread, done["log"])
                    assert set(counts) == set(expected_log(LOOPS))
                    stats["sync rounds resumed to the whole log"] += 1
            finally:
                saver.close()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    print(f"\nLangGraph kill -9: {KILL_ROUNDS} rounds, {dict(stats)}, {time.monotonic() - started:.1f} s")
    assert stats["killed"] >= 50, stats


PRUNE_KILL_ROUNDS = 50
PRUNE_LOOPS = 6
PRUNE_STEPS = ("seal", "append_many", "drop_prefix", "reindex")


def test_kill_9_during_prune_never_breaks_the_thread(tmp_path: Path) -> None:
    """A graph that prunes its thread after every loop, SIGKILLed inside the compaction's steps
    (just before each of them) and at random moments: the thread always resumes to the right log."""
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.child_langgraph"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None

    def run(cmd: dict[str, Any]) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(cmd) + "\n")
        server.stdin.flush()
        answer: dict[str, Any] = json.loads(server.stdout.readline())
        return answer

    store = tmp_path / "cp"
    stats: collections.Counter[str] = collections.Counter()
    try:
        t0 = time.monotonic()
        whole = run({"mode": "prune", "dir": str(store), "thread": "whole", "loops": PRUNE_LOOPS,
                     "acked": str(tmp_path / "whole.acked"), "exec": str(tmp_path / "whole.exec")})
        run_s = time.monotonic() - t0
        assert whole["code"] == 0, whole
        thread_dir = store / THREADS_DIR / thread_dir_name("whole")
        assert len([p for p in thread_dir.iterdir() if p.suffix == ".seg"]) == 1  # pruned: one segment left
        with JournalSaver(store) as s:
            assert s.get_tuple(_cfg("whole")) is not None
        for i in range(PRUNE_KILL_ROUNDS):
            rng = random.Random(1000 + i)
            thread = f"p{i}"
            acked_path, exec_path = tmp_path / f"{thread}.acked", tmp_path / f"{thread}.exec"
            cmd: dict[str, Any] = {"mode": "prune", "dir": str(store), "thread": thread, "loops": PRUNE_LOOPS,
                                   "acked": str(acked_path), "exec": str(exec_path)}
            if i % 5 == 4:
                cmd["kill_delay_s"] = rng.uniform(0, 0.8 * run_s)
                stats["kill by delay"] += 1
            else:
                cmd["kill_at"] = rng.randint(1, PRUNE_LOOPS)
                cmd["kill_in_prune"] = PRUNE_STEPS[i % len(PRUNE_STEPS)]
                stats[f"kill before {cmd['kill_in_prune']}"] += 1
            got = run(cmd)
            assert got["killed"] or got["code"] == 0, got
            stats["killed" if got["killed"] else "finished before the kill"] += 1
            acked = [json.loads(line) for line in acked_path.read_text().splitlines()] if acked_path.exists() else []
            rounds = sum(1 for a in acked if "ran" in a)
            saver = JournalSaver(store)
            try:
                # Finish the loop that was running (if any), then check the whole log and go on.
                graph = build_graph(saver, str(exec_path), rounds + 1)
                last = saver.get_tuple(_cfg(thread))
                state = graph.invoke(None, _cfg(thread)) if last is not None else graph.invoke({}, _cfg(thread))
                n = state["n"]
                assert n in (rounds, rounds + 1), (thread, n, rounds, acked[-2:])
                assert state["log"] == expected_log(n), (thread, state["log"])
                for tup in saver.list(_cfg(thread)):  # every checkpoint left loads whole
                    assert tup.checkpoint["channel_values"] is not None
                after = build_graph(saver, str(exec_path), n + 1).invoke({}, _cfg(thread))
                assert after["log"] == expected_log(n + 1), (thread, after["log"])
                saver.prune([thread])
                assert len(list(saver.list(_cfg(thread)))) == 1
                stats["resumed and pruned again"] += 1
            finally:
                saver.close()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
    print(f"\nLangGraph prune kill -9: {PRUNE_KILL_ROUNDS} rounds, {dict(stats)}")
    report_count("LangGraph prune kill -9 rounds (killed)", stats["killed"])
    assert stats["killed"] >= 40 and stats["resumed and pruned again"] == PRUNE_KILL_ROUNDS, stats


def test_copy_thread_shares_the_sealed_history_and_then_goes_its_own_way(tmp_path: Path) -> None:
    with JournalSaver(tmp_path / "cp", segment_size_bytes=4096) as saver:
        build_graph(saver, str(tmp_path / "exec"), 4).invoke({}, _cfg("src"))
        saver.copy_thread("src", "dst")
        src_dir = tmp_path / "cp" / THREADS_DIR / thread_dir_name("src")
        dst_dir = tmp_path / "cp" / THREADS_DIR / thread_dir_name("dst")
        src_segs = sorted(p for p in src_dir.iterdir() if p.suffix == ".seg")
        assert len(src_segs) >= 3
        linked = [p.name for p in src_segs[:-1] if (dst_dir / p.name).stat().st_ino == p.stat().st_ino]
        assert linked == [p.name for p in src_segs[:-1]]  # every sealed segment shared, not copied
        src_state = saver.get_tuple(_cfg("src"))
        dst_state = saver.get_tuple(_cfg("dst"))
        assert src_state is not None and dst_state is not None
        assert dst_state.checkpoint == src_state.checkpoint
        assert dst_state.config["configurable"]["thread_id"] == "dst"
        # The copy goes on alone; the source is untouched.
        done = build_graph(saver, str(tmp_path / "exec"), 5).invoke({}, _cfg("dst"))
        assert done["log"] == expected_log(5)
        assert saver.get_tuple(_cfg("src")) == src_state
        with pytest.raises(ThreadExistsError):
            saver.copy_thread("src", "dst")


def test_open_threads_stay_within_their_bound_under_parallel_use(tmp_path: Path) -> None:
    import concurrent.futures

    bound = 2
    fds_before = len(os.listdir("/proc/self/fd"))
    with JournalSaver(tmp_path / "cp", threads_open_max=bound) as saver:
        threads = [f"t{i}" for i in range(8)]

        def run(thread: str) -> list[str]:
            out: list[str] = build_graph(saver, str(tmp_path / f"{thread}.exec"), 3).invoke({}, _cfg(thread))["log"]
            return out

        # Eight graphs at once (each with parallel branches) on two open journals at most: the
        # saver closes idle threads and reopens them, and no write goes to a closed journal.
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            logs = list(pool.map(run, threads))
        assert logs == [expected_log(3)] * len(threads)
        assert len(saver._threads) <= bound  # threads in use may exceed it; idle ones never stay
        assert len(os.listdir("/proc/self/fd")) <= fds_before + 2 * bound
        for thread in threads:  # and every one reads back whole after being closed and reopened
            tup = saver.get_tuple(_cfg(thread))
            assert tup is not None and tup.checkpoint["channel_values"]["log"] == expected_log(3)
            assert len(saver._threads) <= bound


# ---- (d) the record format: v2 (msgpack, raw bytes, the saver's zstd) and v1 journals read back


class _RecordingSaver(InMemorySaver):
    """An InMemorySaver that also keeps deep copies of every put and put_writes it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        self.calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = "") -> None:
        self.calls.append(("put_writes", copy.deepcopy((config, writes, task_id, task_path))))
        super().put_writes(config, writes, task_id, task_path)


class _FrozenV1Writer:
    """The v1 write path (JournalSaver.put and put_writes before format v2), frozen here: JSON
    records, each value's serde output in base64, appended at "sync" with the engine's default
    options (zstd on). Only the writing: it keeps just what put_writes' first-one-wins needs."""

    def __init__(self, path: Path) -> None:
        self.serde = JsonPlusSerializer()
        self._store = journal.store(path / THREADS_DIR)
        self._journals: dict[str, Any] = {}
        self._stored: set[tuple[str, str, str, str, int]] = set()

    @staticmethod
    def _b64(typed: tuple[str, bytes]) -> list[str]:
        return [typed[0], base64.b64encode(typed[1]).decode("ascii")]

    def _append(self, thread_id: str, event: dict[str, Any]) -> None:
        j = self._journals.get(thread_id)
        if j is None:
            j = self._journals[thread_id] = self._store.open(thread_dir_name(thread_id), create=True)
        assert isinstance(j.append(event, durability="sync"), journal.Committed)

    def put(self, config: RunnableConfig, checkpoint: Any, metadata: Any, new_versions: Any) -> None:
        configurable = config["configurable"]
        c = dict(checkpoint)
        values = c.pop("channel_values", {})
        blobs = []
        for channel, version in new_versions.items():
            typed = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            blobs.append([channel, str(version), *self._b64(typed)])
        self._append(configurable["thread_id"], {
            "k": "cp",
            "ns": configurable.get("checkpoint_ns", ""),
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "cp": self._b64(self.serde.dumps_typed(c)),
            "md": self._b64(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "blobs": blobs,
        })

    def put_writes(self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = "") -> None:
        configurable = config["configurable"]
        thread_id, cid = configurable["thread_id"], configurable["checkpoint_id"]
        ns = configurable.get("checkpoint_ns", "")
        batch = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            if idx >= 0 and (thread_id, ns, cid, task_id, idx) in self._stored:
                continue
            self._stored.add((thread_id, ns, cid, task_id, idx))
            batch.append([idx, channel, *self._b64(self.serde.dumps_typed(value))])
        if batch:
            self._append(thread_id, {"k": "w", "ns": ns, "cp": cid, "task": task_id, "path": task_path, "w": batch})

    def close(self) -> None:
        for j in self._journals.values():
            j.close()


def _graph_calls(tmp_path: Path, thread: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The saver calls of a real graph run: parallel branches, an interrupt, a resume."""
    rec = _RecordingSaver()
    graph = build_graph(rec, str(tmp_path / f"{thread}.exec"), 3, ask_at=2)
    assert "__interrupt__" in graph.invoke({"n": 0}, _cfg(thread))
    assert graph.invoke(Command(resume="yes"), _cfg(thread))["log"] == expected_log(3)
    assert any(name == "put_writes" and any(ch == "__interrupt__" for ch, _ in args[1]) for name, args in rec.calls)
    return rec.calls


def _replay(saver: Any, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
    for name, args in calls:
        getattr(saver, name)(*args)


def _payloads(thread_dir: Path) -> list[tuple[bool, bytes]]:
    with journal.open(thread_dir, readonly=True) as j:
        return [(r.is_bytes, r.payload) for r in j.read()]


def test_v1_journals_written_before_read_back_exactly(tmp_path: Path) -> None:
    """A journal of v1 records (written by the frozen v1 code path) reads back as the same
    calls stored by this version do; the saver then appends v2 records to it, and a prune
    rewrites it in v2, all of it still reading back the same."""
    calls = _graph_calls(tmp_path, "t")
    old = _FrozenV1Writer(tmp_path / "v1")
    _replay(old, calls)
    old.close()
    v1_dir = tmp_path / "v1" / THREADS_DIR / thread_dir_name("t")
    assert all(not is_bytes for is_bytes, _ in _payloads(v1_dir))  # JSON: v1, every record
    with JournalSaver(tmp_path / "v2") as new:
        _replay(new, calls)
    assert all(is_bytes and p[0] == RECORD_VERSION for is_bytes, p in _payloads(tmp_path / "v2" / THREADS_DIR
                                                                               / thread_dir_name("t")))

    with JournalSaver(tmp_path / "v1") as a, JournalSaver(tmp_path / "v2") as b:
        from_v1, from_v2 = list(a.list(None)), list(b.list(None))
        assert len(from_v1) == sum(1 for name, _ in calls if name == "put")
        assert from_v1 == from_v2  # checkpoints, channel values, metadata, parents, pending writes
        assert list(a.list(_cfg("t"), filter={"source": "loop", "step": 3})) == list(
            b.list(_cfg("t"), filter={"source": "loop", "step": 3}))
        assert a.get_tuple(_cfg("t")) == b.get_tuple(_cfg("t"))
        latest = a.get_tuple(_cfg("t"))
        assert latest is not None and latest.checkpoint["channel_values"]["log"] == expected_log(3)
        with journal.open(v1_dir, readonly=True) as j:
            v1_records = [record_event(r) for r in j.read()]
        assert all(isinstance(e["cp"][1], bytes) for e in v1_records if e["k"] == "cp")  # v1 shown as v2

        # The old journal goes on in v2: a mixed journal reads whole, then a prune rewrites it.
        done = build_graph(a, str(tmp_path / "more.exec"), 5).invoke({}, _cfg("t"))
        assert done["log"] == expected_log(5)
        kinds = [is_bytes for is_bytes, _ in _payloads(v1_dir)]
        assert not kinds[0] and kinds[-1], kinds
        before = a.get_tuple(_cfg("t"))
        mixed = list(a.list(_cfg("t")))
        assert len(mixed) > len(from_v1) and [x for x in mixed if x in from_v1] == from_v1
        a.prune(["t"])
        assert a.get_tuple(_cfg("t")) == before
    assert all(is_bytes for is_bytes, _ in _payloads(v1_dir))  # the prune's copies are v2
    with JournalSaver(tmp_path / "v1") as a:
        assert a.get_tuple(_cfg("t")) == before
        assert len(list(a.list(_cfg("t")))) == 1


class _EveryTypeSerde(JsonPlusSerializer):
    """LangGraph's serializer, plus "json" for dicts marked so (JsonPlusSerializer reads "json",
    as older LangGraph versions wrote it, but no longer writes it)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, dict) and obj.get("as") == "json":
            return "json", json.dumps(obj).encode()
        return super().dumps_typed(obj)


def test_binary_records_round_trip_every_serde_type(tmp_path: Path) -> None:
    rng = random.Random(7)
    noise = bytes(rng.getrandbits(8) for _ in range(4000))  # over COMPRESS_MIN_BYTES, incompressible
    values: dict[str, Any] = {
        "bytes": b"\x00\xff\x02\x00 raw",
        "noise": noise,
        "null": None,
        "bytearray": bytearray(b"\x01\x02"),
        "json": {"as": "json", "n": 1, "s": "\u2603"},
        "msgpack": {"x": [1, 2.5, "three", {"four": None}], "t": (1, 2)},
        "big": {"text": "compressible " * 500},  # well over COMPRESS_MIN_BYTES: a zstd record
    }
    serde = _EveryTypeSerde()
    typed = {k: serde.dumps_typed(v)[0] for k, v in values.items()}
    assert set(typed.values()) == {"bytes", "null", "bytearray", "json", "msgpack"}, typed
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {k: "1" for k in [*values, "gone"]}
    new_versions = dict(checkpoint["channel_versions"])  # "gone": a version with no value, stored "empty"
    writes = [(k, v) for k, v in values.items()]
    cfg: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def check(saver: JournalSaver) -> None:
        tup = saver.get_tuple(_cfg("t"))
        assert tup is not None
        got = tup.checkpoint["channel_values"]
        assert got == {k: v if k != "msgpack" else {**v, "t": [1, 2]} for k, v in values.items()}
        assert {k: type(v) for k, v in got.items()} == {
            k: type(v) if k != "msgpack" else dict for k, v in values.items()}
        assert "gone" not in got and tup.checkpoint["channel_versions"]["gone"] == "1"
        assert tup.metadata == {"source": "loop", "step": 1, "parents": {}, "note": b"md bytes"}
        assert [(task, ch) for task, ch, _ in tup.pending_writes] == [("task", k) for k in values]
        assert [v for _, _, v in tup.pending_writes] == [got[k] for k in values]
        assert type(tup.pending_writes[3][2]) is bytearray

    with JournalSaver(tmp_path, serde=serde) as saver:
        stored = saver.put(cfg, checkpoint, {"source": "loop", "step": 1, "parents": {}, "note": b"md bytes"},
                           new_versions)
        saver.put_writes(stored, writes, "task")
        check(saver)  # from the index and the records this handle wrote
    heads = {p[:2] for _, p in _payloads(tmp_path / THREADS_DIR / thread_dir_name("t"))}
    assert heads == {bytes([RECORD_VERSION, CODEC_ZSTD])}, heads
    with JournalSaver(tmp_path, serde=serde) as saver:
        check(saver)  # from disk

    # A record over COMPRESS_MIN_BYTES that zstd cannot shrink is stored raw; a small one too.
    with JournalSaver(tmp_path, serde=serde) as saver:
        saver.put_writes(stored, [("noise", noise)], "task2")
        saver.put_writes(stored, [("small", 1)], "task3")
        last = _payloads(tmp_path / THREADS_DIR / thread_dir_name("t"))[-2:]
        assert [p[:2] for _, p in last] == [bytes([RECORD_VERSION, CODEC_RAW])] * 2
        assert len(last[0][1]) > COMPRESS_MIN_BYTES
        tup = saver.get_tuple(_cfg("t"))
        assert tup is not None and ("task2", "noise", noise) in tup.pending_writes
        assert ("task3", "small", 1) in tup.pending_writes


def test_a_record_of_an_unknown_format_is_refused(tmp_path: Path) -> None:
    with JournalSaver(tmp_path) as saver:
        saver.put_writes({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}},
                         [("c", 1)], "task")
    with journal.open(tmp_path / THREADS_DIR / thread_dir_name("t")) as j:
        j.append(bytes([RECORD_VERSION + 1, 0]) + b"from a later version", durability="sync")
    with JournalSaver(tmp_path) as saver, pytest.raises(journal.JournalError, match="unknown format"):
        saver.get_tuple(_cfg("t"))
