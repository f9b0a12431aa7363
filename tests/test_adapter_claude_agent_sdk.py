"""The Claude Agent SDK's SessionStore on journals (journal/adapters/claude_agent_sdk.py).

The SDK's own conformance harness (its 14 contracts, every optional method overridden and
called) on files, PostgreSQL and JetStream; a batch re-sent after a lost acknowledgement stored
once; the write and read paths under injected faults; corruption and foreign records refused;
listing that never opens a transcript (the SDK's list_sessions_from_store included); Claude Code
transcripts of the corpus exported byte for byte by ``journal export``, and imported ones loaded;
SIGKILL in the middle of appends, 20 rounds (a forked child, tests/test_adapter_claude_agent_sdk_child.py,
blocks a write at a barrier and the parent kills it there).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import SessionStore, list_sessions_from_store, project_key_for_directory
from claude_agent_sdk.testing import run_session_store_conformance

import journal
from journal.adapters.claude_agent_sdk import (
    JournalSessionStore,
    OutcomeUnknownError,
    TranscriptDamagedError,
    TranscriptFormatError,
    WriteNotCommittedError,
    journal_name,
)
from journal.api import Journal, Store
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from tests import test_adapter_claude_agent_sdk_child as child
from tests.backends import Backend, FileBackend, made_or_skipped
from tests.conftest import report_count
from tests.fork_server import PipeLines

CORPUS = pathlib.Path(__file__).resolve().parents[2] / "shared" / "corpus" / "claude-code"
OPTIONAL = ("list_sessions", "list_session_summaries", "delete", "list_subkeys")
KEY: Any = {"project_key": "proj", "session_id": "sess"}
REPO = "/work/example-repo"  # a workspace directory: the SDK's listing derives the project key from it


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def entry(n: int, **extra: Any) -> Any:
    return {"type": "user", "uuid": f"u{n}", "timestamp": "2026-01-01T00:00:00.000Z", "n": n, **extra}


@pytest.fixture(params=("file", "postgres", "nats"))
def backend(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


# --- the SDK's conformance harness ---------------------------------------------------------


class Counting(JournalSessionStore):
    """The store, counting calls of the optional methods: the harness runs a contract only for a
    method the store overrides, so every one being called shows that none was skipped."""

    calls: Counter[str] = Counter()

    async def list_sessions(self, project_key: str) -> Any:
        Counting.calls["list_sessions"] += 1
        return await super().list_sessions(project_key)

    async def list_session_summaries(self, project_key: str) -> Any:
        Counting.calls["list_session_summaries"] += 1
        return await super().list_session_summaries(project_key)

    async def delete(self, key: Any) -> None:
        Counting.calls["delete"] += 1
        await super().delete(key)

    async def list_subkeys(self, key: Any) -> Any:
        Counting.calls["list_subkeys"] += 1
        return await super().list_subkeys(key)


def test_conformance_all_14_contracts(backend: Backend) -> None:
    made: list[JournalSessionStore] = []
    prefix = f"cs{uuid.uuid4().hex[:6]}"
    template = getattr(backend, "store_template", None)  # servers: a schema or stream per store

    def make() -> SessionStore:
        where = template().replace("{store}", f"{prefix}{len(made)}") if template else backend.store_location()
        store = Counting(where)  # a store of its own per contract
        made.append(store)
        return store

    async def main() -> None:
        Counting.calls.clear()
        try:
            await run_session_store_conformance(make)
        finally:
            for store in made:
                await store.close()

    try:
        run(main())
    finally:
        if template:
            backend.drop_stores(prefix)  # type: ignore[attr-defined]
    for method in OPTIONAL:
        assert getattr(JournalSessionStore, method) is not getattr(SessionStore, method)
        assert Counting.calls[method] > 0, f"the contracts of {method} did not run"
    report_count(f"Claude Agent SDK conformance on {backend.name}", f"14 contracts, {len(made)} stores")


# --- idempotency, order, atomicity under faults --------------------------------------------


def test_batch_resent_after_lost_ack_is_stored_once(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JournalSessionStore(tmp_path, fs=fs) as store:
            await store.append(KEY, [entry(1), entry(2)])
            # The batch's bytes reach the OS, its fdatasync fails: the writer cannot know (AckLost).
            fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
            batch = [entry(3), entry(4), {"type": "custom-title", "customTitle": "t"}]
            with pytest.raises(OutcomeUnknownError, match="unknown") as info:
                await store.append(KEY, batch)
            assert isinstance(info.value.outcome, journal.AckLost)
            fs.clear()
            # The SDK retries the batch: the transcript is reopened (recovery) and read; the
            # entries whose uuid landed are not stored again.
            await store.append(KEY, [entry(3), entry(4), entry(5)])
            got = await store.load(KEY)
            assert got is not None
            assert [e.get("uuid") for e in got] == ["u1", "u2", "u3", "u4", None, "u5"]
            await store.append(KEY, [entry(5), entry(5)])  # re-sent, and twice in one batch: nothing new
            assert await store.load(KEY) == got
        async with JournalSessionStore(tmp_path) as store:
            assert await store.load(KEY) == got

    run(main())


def test_write_fault_not_committed_changes_nothing_and_retry_works(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JournalSessionStore(tmp_path, fs=fs) as store:
            await store.append(KEY, [entry(1)])
            before = await store.list_session_summaries("proj")
            fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
            with pytest.raises(WriteNotCommittedError, match="not stored") as info:
                await store.append(KEY, [entry(2, customTitle="new")])
            assert info.value.outcome is not None and info.value.outcome.errno == errno.ENOSPC
            assert await store.load(KEY) == [entry(1)]
            assert await store.list_session_summaries("proj") == before
            await store.append(KEY, [entry(2, customTitle="new")])  # the retry
            assert await store.load(KEY) == [entry(1), entry(2, customTitle="new")]
            summaries = await store.list_session_summaries("proj")
            assert summaries[0]["data"]["custom_title"] == "new"

    run(main())


def test_read_fault_raises_typed_error(tmp_path: pathlib.Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())

    async def main() -> None:
        async with JournalSessionStore(tmp_path) as store:
            await store.append(KEY, [entry(1), entry(2)])
        async with JournalSessionStore(tmp_path, fs=fs) as store:
            fs.fail("pread", errno.EIO, after=fs.calls["pread"], times=-1)
            with pytest.raises(journal.JournalIOError) as info:
                await store.load(KEY)
            assert info.value.errno == errno.EIO
            fs.clear()
            assert await store.load(KEY) == [entry(1), entry(2)]

    run(main())


def test_corrupt_record_raises_and_is_never_served(tmp_path: pathlib.Path) -> None:
    """A bit flipped in an acknowledged batch: the engine reports it (CorruptionError), or, where
    it cannot tell it from a torn write, cuts it and the store, whose index knows the later
    batches were acknowledged, refuses the shortened transcript (TranscriptDamagedError). Either
    way a typed error, on every call, and nothing served."""
    root = tmp_path / "store"

    async def write() -> None:
        async with JournalSessionStore(root) as store:
            for n in range(3):
                await store.append(KEY, [entry(n)])

    run(write())
    FileBackend(tmp_path).tamper(str(root / journal_name(KEY)), 2)

    async def read() -> None:
        for _ in range(2):  # and again after a reopen
            async with JournalSessionStore(root) as store:
                with pytest.raises((journal.CorruptionError, TranscriptDamagedError)):
                    await store.load(KEY)
                with pytest.raises((journal.CorruptionError, TranscriptDamagedError)):
                    await store.append(KEY, [entry(9)])

    run(read())


def test_transcript_shorter_than_its_acknowledged_batches_is_refused_until_accepted(tmp_path: pathlib.Path) -> None:
    """Recovery cut acknowledged batches (the transcript is a clean, shorter journal; here the
    key's journal is replaced by one holding only its first batch): TranscriptDamagedError on
    every call, after a reopen too, until rebuild_index accepts the loss."""
    ticks = iter(range(1_800_000_000_000, 1_900_000_000_000))

    def clock() -> int:
        return next(ticks)

    async def write(root: pathlib.Path, batches: int) -> None:
        async with JournalSessionStore(root, clock_ms=clock) as store:
            for n in range(batches):
                await store.append(KEY, [entry(n)])

    run(write(tmp_path / "short", 1))
    run(write(tmp_path / "store", 3))
    name = journal_name(KEY)
    journal.store(tmp_path / "store").delete(name)
    (tmp_path / "short" / name).rename(tmp_path / "store" / name)

    async def read() -> None:
        async with JournalSessionStore(tmp_path / "store") as store:
            with pytest.raises(TranscriptDamagedError, match="acknowledged"):
                await store.load(KEY)
            with pytest.raises(TranscriptDamagedError):
                await store.append(KEY, [entry(9)])
        async with JournalSessionStore(tmp_path / "store") as store:
            with pytest.raises(TranscriptDamagedError):
                await store.load(KEY)
            assert await store.rebuild_index("proj") == 1  # the operator accepts the loss
            assert await store.load(KEY) == [entry(0)]
            await store.append(KEY, [entry(9)])
            assert await store.load(KEY) == [entry(0), entry(9)]

    run(read())


def test_torn_tail_is_cut_and_reported_whole_batches_served(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"

    async def write() -> None:
        async with JournalSessionStore(root) as store:
            await store.append(KEY, [entry(1), entry(2)])
            await store.append(KEY, [entry(3)])

    run(write())
    seg = sorted((root / journal_name(KEY)).glob("*.seg"))[-1]
    data = seg.read_bytes()
    end = len(data.rstrip(b"\0"))
    with open(seg, "r+b") as f:  # half a frame after the last record: a write a crash cut
        f.seek(end)
        f.write(data[end - 40 : end - 10])

    async def read() -> None:
        async with JournalSessionStore(root) as store:
            assert await store.load(KEY) == [entry(1), entry(2), entry(3)]
            assert [name for name, _ in store.recovery_reports] == [journal_name(KEY)]
            assert store.recovery_reports[0][1].truncated_bytes > 0

    run(read())


def test_foreign_journal_under_a_transcript_name_is_refused(tmp_path: pathlib.Path) -> None:
    with journal.open(tmp_path / journal_name(KEY), create=True) as j:
        j.append({"type": "something else", "data": {}})
    other: Any = {"project_key": "proj", "session_id": "other"}
    with journal.open(tmp_path / journal_name(other), create=True) as j:  # our layout, another key's header
        j.append({"schemaVersion": 1, "sessionId": "x", "type": "session.started",
                  "data": {"importedFrom": {"format": "claude"}, "import": {"line": 1, "batch": [entry(1)]},
                           "claudeAgentSdk": {"v": 1, "mtime": 1, "summary": None,
                                              "key": {"project_key": "proj", "session_id": "x", "subpath": None}}}})

    async def main() -> None:
        async with JournalSessionStore(tmp_path) as store:
            with pytest.raises(TranscriptFormatError, match="not the header"):
                await store.load(KEY)
            with pytest.raises(TranscriptFormatError, match="of key"):
                await store.load(other)

    run(main())


# --- listing reads the index, never a transcript -------------------------------------------


class OpenCounting:
    """A journal.api.Store that records the name of every journal opened through it."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.opened: list[str] = []

    @property
    def location(self) -> str:
        return self.inner.location

    def open(self, name: str, create: bool = False, readonly: bool = False, **options: Any) -> Journal:
        self.opened.append(name)
        return self.inner.open(name, create=create, readonly=readonly, **options)

    def exists(self, name: str) -> bool:
        return self.inner.exists(name)

    def names(self) -> list[str]:
        return self.inner.names()

    def delete(self, name: str) -> None:
        self.inner.delete(name)

    def copy(self, source: str, target: str, *, upto_seq: int | None = None, append: Any = ()) -> None:
        self.inner.copy(source, target, upto_seq=upto_seq, append=append)


def test_listing_opens_only_the_index(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "store"
    sessions = [f"s{i}" for i in range(6)]
    project = project_key_for_directory(REPO)

    async def write() -> None:
        async with JournalSessionStore(root) as store:
            for i, sid in enumerate(sessions):
                await store.append({"project_key": project, "session_id": sid},
                                   [entry(i, message={"role": "user", "content": f"prompt {i}"}, cwd=REPO)])
                await store.append({"project_key": project, "session_id": sid, "subpath": "subagents/agent-1"},
                                   [entry(100 + i)])

    run(write())
    # Every transcript made unreadable: a listing that read one would fail.
    for sid in sessions:
        for sub in (None, "subagents/agent-1"):
            key: Any = {"project_key": project, "session_id": sid, **({"subpath": sub} if sub else {})}
            FileBackend(tmp_path).tamper(str(root / journal_name(key)), 1)

    async def read() -> None:
        counting = OpenCounting(journal.store(root))
        async with JournalSessionStore(counting) as store:
            listed = await store.list_sessions(project)
            summaries = await store.list_session_summaries(project)
            subkeys = await store.list_subkeys({"project_key": project, "session_id": "s0"})
            infos = await list_sessions_from_store(store, directory=REPO)  # the SDK's own listing
            assert sorted(e["session_id"] for e in listed) == sessions
            assert sorted(s["session_id"] for s in summaries) == sessions
            assert all(s["mtime"] == next(e["mtime"] for e in listed if e["session_id"] == s["session_id"])
                       for s in summaries)
            assert subkeys == ["subagents/agent-1"]
            assert sorted(i.session_id for i in infos) == sessions
            assert {i.first_prompt for i in infos} == {f"prompt {i}" for i in range(6)}
            assert counting.opened == [f"ci.{project}"], counting.opened  # the index only
            with pytest.raises((journal.CorruptionError, TranscriptDamagedError)):  # and loading one refuses
                await store.load({"project_key": project, "session_id": "s0"})

    run(read())


def test_list_sessions_from_store_uses_summaries_without_loading(tmp_path: pathlib.Path) -> None:
    project = project_key_for_directory(REPO)

    async def main() -> None:
        async with JournalSessionStore(tmp_path) as store:
            for i in range(3):
                await store.append({"project_key": project, "session_id": f"s{i}"},
                                   [entry(i, message={"role": "user", "content": f"hello {i}"})])
            loads = 0
            real_load = store.load

            async def counted_load(key: Any) -> Any:
                nonlocal loads
                loads += 1
                return await real_load(key)

            store.load = counted_load  # type: ignore[method-assign]
            infos = await list_sessions_from_store(store, directory=REPO)
            assert loads == 0
            assert sorted(i.first_prompt or "" for i in infos) == ["hello 0", "hello 1", "hello 2"]

    run(main())


def test_index_heals_after_a_crash_between_transcript_and_index(tmp_path: pathlib.Path) -> None:
    """A transcript the index lacks (its index record was never written) is listed; an entry
    whose transcript is gone (a crash inside delete) is dropped."""
    async def main() -> None:
        async with JournalSessionStore(tmp_path) as store:
            await store.append({"project_key": "p", "session_id": "a"}, [entry(1)])
            await store.append({"project_key": "p", "session_id": "b"}, [entry(2)])
        journal.store(tmp_path).delete("ci.p")  # the index lost: every transcript is a stray
        journal.store(tmp_path).delete(journal_name({"project_key": "p", "session_id": "b"}))
        async with JournalSessionStore(tmp_path) as store:
            assert [e["session_id"] for e in await store.list_sessions("p")] == ["a"]
            await store.append({"project_key": "p", "session_id": "c"}, [entry(3)])
        journal.store(tmp_path).delete(journal_name({"project_key": "p", "session_id": "c"}))
        async with JournalSessionStore(tmp_path) as store:
            assert [e["session_id"] for e in await store.list_sessions("p")] == ["a"]

    run(main())


# --- Claude Code transcripts: journal export and journal import -----------------------------


def corpus_files() -> list[pathlib.Path]:
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if not files:
        pytest.skip(f"no Claude Code corpus at {CORPUS}")
    return files


def journal_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "journal", *args], capture_output=True, timeout=120)


def test_transcripts_stored_through_the_sdk_export_byte_exact(tmp_path: pathlib.Path) -> None:
    rng = random.Random(31)
    checked = 0
    for path in corpus_files():
        data = path.read_bytes()
        lines: Any = [json.loads(line) for line in data.splitlines() if line.strip()]
        key: Any = {"project_key": "corpus", "session_id": path.stem}

        async def store_it(lines: Any = lines, key: Any = key) -> None:
            async with JournalSessionStore(tmp_path / "store") as store:
                at = 0
                while at < len(lines):  # batches of the sizes the SDK's mirror sends
                    n = rng.randint(1, 8)
                    await store.append(key, lines[at : at + n])
                    at += n

        run(store_it())
        out = tmp_path / f"{path.stem}.out"
        got = journal_cli("export", str(tmp_path / "store" / journal_name(key)), str(out), "--format", "claude")
        assert got.returncode == 0, got.stderr.decode()
        assert out.read_bytes() == data, path.name
        checked += 1
    report_count("Claude Code corpus transcripts exported byte-exact after the store", checked)


def test_imported_transcripts_load_through_the_store(tmp_path: pathlib.Path) -> None:
    checked = 0
    for path in corpus_files():
        lines = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        key: Any = {"project_key": "imported", "session_id": path.stem}
        got = journal_cli("import", "claude", str(path), str(tmp_path / journal_name(key)))
        assert got.returncode == 0, got.stderr.decode()

        async def main(lines: list[dict[str, Any]] = lines, key: Any = key) -> None:
            async with JournalSessionStore(tmp_path) as store:
                assert await store.load(key) == lines
                assert key["session_id"] in [e["session_id"] for e in await store.list_sessions("imported")]
                more: Any = {"type": "user", "uuid": str(uuid.uuid4()), "message": {"role": "user", "content": "more"}}
                stored: Any = next(e for e in lines if isinstance(e.get("uuid"), str))
                await store.append(key, [stored, more])  # `stored`'s uuid is in the transcript: only `more` is new
                assert await store.load(key) == [*lines, more]

        run(main())
        out = tmp_path / f"{path.stem}.out"
        assert journal_cli("export", str(tmp_path / journal_name(key)), str(out)).returncode == 0
        assert out.read_bytes().splitlines()[:-1] == path.read_bytes().splitlines()
        checked += 1
    report_count("imported Claude Code transcripts loaded through the store", checked)


# --- SIGKILL in the middle of appends -------------------------------------------------------

KILL_ROUNDS = 20
CHILD_LINE_TIMEOUT_S = 120.0  # a child that prints nothing for this long has hung: the test fails


def test_sigkill_mid_append_leaves_whole_batches_in_order(tmp_path: pathlib.Path) -> None:
    """Each round a child appends batches (``batch`` b holds entries (b, 0..n-1)) and stops at a
    barrier inside one write (a pwrite of a transcript or of the index, cut after some of its
    bytes, or before or after its fdatasync); the parent SIGKILLs it there. Then every stored
    batch must be whole and in order, every acknowledged one there, and the next round goes on."""
    rng = random.Random(2031)
    root = tmp_path / "store"
    acked_total = 0
    where: Counter[str] = Counter()
    for round_ in range(KILL_ROUNDS):
        stop_at = rng.randint(1, 12)  # the write (counted over pwrites) the child stops in
        frac = rng.choice(("0", "0.5", "1", "sync"))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            try:
                os.close(r)
                asyncio.run(child.main(str(root), stop_at, frac, round_, w))
            finally:
                os._exit(1)  # it returned or raised: the parent sees its pipe close without a barrier
        os.close(w)
        lines = PipeLines(r, CHILD_LINE_TIMEOUT_S, f"kill round {round_}'s child")
        acked: list[int] = []
        try:
            while True:
                line = lines.line()
                if line.startswith("acked "):
                    acked.append(int(line.split()[1]))
                elif line.startswith("barrier "):
                    where[line.split(maxsplit=1)[1].split()[0]] += 1
                    break
        finally:
            os.kill(pid, signal.SIGKILL)  # the child waits at its barrier (or is gone): never reaped before
            _, status = os.waitpid(pid, 0)
            os.close(r)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
        acked_total += len(acked)
        stored = run(_load(root))
        batches = _whole_batches(stored)
        assert batches == sorted(batches) and len(set(batches)) == len(batches), batches
        assert set(acked) <= set(batches), (acked, batches)
    assert acked_total > 0
    report_count("Claude Agent SDK store kill rounds (barrier in)", f"{KILL_ROUNDS}: {dict(sorted(where.items()))}")


async def _load(root: pathlib.Path) -> Any:
    async with JournalSessionStore(root) as store:
        got = await store.load(KEY)
        listed = await store.list_sessions("proj")
        if got:
            assert [e["session_id"] for e in listed] == ["sess"]
        return got or []


def _whole_batches(entries: list[dict[str, Any]]) -> list[int]:
    """The batch numbers of ``entries``, checking each batch is whole and contiguous."""
    out: list[int] = []
    i = 0
    while i < len(entries):
        b, n = entries[i]["batch"], entries[i]["of"]
        part = entries[i : i + n]
        assert [(e["batch"], e["i"]) for e in part] == [(b, k) for k in range(n)], f"batch {b} is not whole: {part}"
        out.append(b)
        i += n
    return out


def test_layout_names_are_the_importers() -> None:
    from journal.adapters import claude_agent_sdk as adapter
    from journal.session.importers import base
    from journal.session.importers.formats import FORMATS

    assert (adapter.RECORD_TYPE, adapter.FINISHED_TYPE) == (base.RECORD_TYPE, base.FINISHED_TYPE)
    assert adapter.SOURCE_FORMAT in FORMATS


def test_export_refuses_a_crafted_batch(tmp_path: pathlib.Path) -> None:
    """A batch that is not a list of objects is no store's: export reports damage (exit 3) and
    writes nothing, rather than lines the transcript never had."""
    with journal.open(tmp_path / "j", create=True) as j:
        j.append({"schemaVersion": 1, "sessionId": "s", "type": "session.started",
                  "data": {"importedFrom": {"format": "claude"}, "import": {"line": 1, "batch": [entry(1)]}}})
        j.append({"schemaVersion": 1, "sessionId": "s", "type": "import.record", "ignorable": True,
                  "data": {"import": {"line": 2, "batch": ["not an object"]}}})
    got = journal_cli("export", str(tmp_path / "j"), str(tmp_path / "out"))
    assert got.returncode == 3, got
    assert b"batch is not a list of JSON objects" in got.stderr
    assert not (tmp_path / "out").exists()


def test_bench_workload_stores_what_it_claims(tmp_path: pathlib.Path) -> None:
    """bench/bench_adapters.py's Claude Agent SDK workload at a small size, on the store and on
    the JSONL peer: every entry stored, in order (it asserts no speed)."""
    import importlib.util

    name = "bench_adapters_claude_sdk"
    spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).resolve().parents[1] / "bench" /
                                                  "bench_adapters.py")
    assert spec is not None and spec.loader is not None
    ba = importlib.util.module_from_spec(spec)
    sys.modules[name] = ba  # dataclasses look their module up while the file runs
    spec.loader.exec_module(ba)
    for store in ("ours", ba.SHIPPED):
        where = tmp_path / store
        where.mkdir()
        run_ = ba.cas_sequential(store, str(where), 7)
        ba.check_cas(run_, 7)
        assert run_.ops == 7 and run_.bytes > 0
    wrong = ba.Run(1, 1.0, 1, "", {"uuids": ["e0-1", "e0-0"]})
    with pytest.raises(AssertionError):
        ba.check_cas(wrong, 1)


def test_example_plays_a_corpus_transcript_through_the_sdk(tmp_path: pathlib.Path) -> None:
    """examples/claude_agent_sdk_store.py, as its doc shows it: the SDK's import, twice (lines with
    a uuid stored once), its listing from the index, its messages, and the export it names is the
    file byte for byte once the uuid-less lines the second import appended are left aside."""
    path = corpus_files()[0]
    lines = path.read_bytes().splitlines()
    with_uuid = sum(1 for line in lines if "uuid" in json.loads(line))
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "claude_agent_sdk_store.py"
    env = {**os.environ, "PYTHONPATH": str(example.parents[1])}
    got = subprocess.run([sys.executable, str(example), str(path), str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path, env=env)
    assert got.returncode == 0, got.stderr
    out = got.stdout.splitlines()
    assert out[0] == f"import 1: {len(lines)} entries stored"
    assert out[1] == f"import 2: {2 * len(lines) - with_uuid} entries stored"
    assert out[2].startswith(f"listed: {json.loads(lines[-1])['sessionId']} ")
    exported = tmp_path / "out.jsonl"
    target = out[-1].split()[3]
    assert journal_cli("export", str(tmp_path / target), str(exported)).returncode == 0
    assert exported.read_bytes().splitlines()[: len(lines)] == lines


def test_index_is_compacted_and_reads_its_entries_not_its_history(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hundreds of appends to a few sessions: the index journal is snapshotted and its older
    records dropped, so a new store reads a few records to list; what it lists is unchanged."""
    from journal.adapters import claude_agent_sdk as adapter

    monkeypatch.setattr(adapter, "INDEX_COMPACT_RECORDS_MIN", 16)
    where = backend.store_location()

    async def main() -> list[Any]:
        async with JournalSessionStore(where) as store:
            for n in range(120):
                await store.append({"project_key": "p", "session_id": f"s{n % 3}"}, [entry(n, customTitle=f"t{n}")])
            listed = sorted((e["session_id"], e["mtime"]) for e in await store.list_sessions("p"))
            summaries = sorted((s["session_id"], s["data"]["custom_title"]) for s in
                               await store.list_session_summaries("p"))
        assert summaries == [("s0", "t117"), ("s1", "t118"), ("s2", "t119")]
        with journal.store(where).open("ci.p", readonly=True) as j:
            held = list(j.read())
        assert len(held) < 40, len(held)  # the 120 puts are not all there: a snapshot and what came after
        async with JournalSessionStore(where) as store:
            assert sorted((e["session_id"], e["mtime"]) for e in await store.list_sessions("p")) == listed
            got: Any = await store.load({"project_key": "p", "session_id": "s1"})
            assert got is not None and [e["n"] for e in got] == list(range(1, 120, 3))
        return listed

    assert len(run(main())) == 3


class BlockingFs(OsFileSystem):
    """Blocks the first pwrite after ``armed`` is set until ``release`` is: a write in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def open_write(self, path: str, create: bool) -> Any:
        inner = super().open_write(path, create)
        fs = self

        class File:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def pwrite(self, data: Any, offset: int) -> int:
                if fs.armed.is_set() and not fs.entered.is_set():
                    fs.entered.set()
                    assert fs.release.wait(60), "the test never released the write"
                return inner.pwrite(data, offset)

        return File()


def test_a_cancelled_append_waits_for_its_write_and_calls_keep_their_order(tmp_path: pathlib.Path) -> None:
    """The SDK cancels an append that outlives its send timeout and never retries it: the write
    in flight is not cut, the caller gets CancelledError once it has ended, and the batch is
    stored; calls made together run in the order they were made."""
    fs = BlockingFs()

    async def main() -> None:
        async with JournalSessionStore(tmp_path, fs=fs) as store:
            await store.append(KEY, [entry(0)])
            fs.armed.set()
            task = asyncio.ensure_future(store.append(KEY, [entry(1), entry(2)]))
            assert await asyncio.to_thread(fs.entered.wait, 60)  # the write is in its pwrite, held there
            later = [asyncio.ensure_future(store.append(KEY, [entry(n)])) for n in range(3, 9)]
            task.cancel()
            await asyncio.sleep(0)
            assert not task.done()  # still waiting for the write's outcome
            fs.release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.gather(*later)
            got: Any = await store.load(KEY)
            assert got is not None and [e["n"] for e in got] == list(range(9))

    run(main())


def test_the_sdks_fork_and_delete_via_the_store(tmp_path: pathlib.Path) -> None:
    from claude_agent_sdk import delete_session_via_store, fork_session_via_store

    project = project_key_for_directory(REPO)
    sid = str(uuid.uuid4())
    lines = [json.loads(line) for line in corpus_files()[0].read_bytes().splitlines()]
    for e in lines:
        if "sessionId" in e:
            e["sessionId"] = sid

    async def main() -> None:
        async with JournalSessionStore(tmp_path) as store:
            key: Any = {"project_key": project, "session_id": sid}
            await store.append(key, lines)
            forked = await fork_session_via_store(store, sid, directory=REPO, title="fork")
            child: Any = await store.load({"project_key": project, "session_id": forked.session_id})
            assert child and len(child) >= len([e for e in lines if e.get("type") in ("user", "assistant")])
            listed = {e["session_id"] for e in await store.list_sessions(project)}
            assert listed == {sid, forked.session_id}
            await delete_session_via_store(store, sid, directory=REPO)
            assert await store.load(key) is None
            assert {e["session_id"] for e in await store.list_sessions(project)} == {forked.session_id}

    run(main())


class IndexFaultFs(OsFileSystem):
    """Fails every pwrite to an index journal (``ci.*``) with ENOSPC while ``failing`` is set."""

    failing = False

    def open_write(self, path: str, create: bool) -> Any:
        inner = super().open_write(path, create)
        fs = self

        class File:
            def __getattr__(self, name: str) -> Any:
                return getattr(inner, name)

            def pwrite(self, data: Any, offset: int) -> int:
                if fs.failing and f"{os.sep}ci." in path:
                    raise OSError(errno.ENOSPC, "injected ENOSPC on the index", path)
                return inner.pwrite(data, offset)

        return File()


def test_index_write_fault_after_the_batch_is_stored(tmp_path: pathlib.Path) -> None:
    """The batch is synced, its index record fails (NotCommitted): the call raises, saying the
    call may be retried; the batch is stored once; the SDK's retry stores nothing again and
    writes the index record, so the listing and the summary catch up."""
    fs = IndexFaultFs()

    async def main() -> None:
        async with JournalSessionStore(tmp_path, fs=fs) as store:
            await store.append(KEY, [entry(1, customTitle="one")])
            before = await store.list_sessions("proj")
            fs.failing = True
            batch = [entry(2, customTitle="two")]
            with pytest.raises(WriteNotCommittedError, match="index record") as info:
                await store.append(KEY, batch)
            assert info.value.outcome is not None and info.value.outcome.errno == errno.ENOSPC
            fs.failing = False
            assert await store.load(KEY) == [entry(1, customTitle="one"), entry(2, customTitle="two")]
            assert await store.list_sessions("proj") == before  # the index lags ...
            await store.append(KEY, batch)  # ... until the retry
            assert await store.load(KEY) == [entry(1, customTitle="one"), entry(2, customTitle="two")]
            (after,) = await store.list_sessions("proj")
            assert after["mtime"] > before[0]["mtime"]
            (summary,) = await store.list_session_summaries("proj")
            assert summary["data"]["custom_title"] == "two" and summary["mtime"] == after["mtime"]

    run(main())
