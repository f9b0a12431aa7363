"""journal.adapters.openai_agents.JournalSession: our behaviour tests, the SDK's own session tests
run against it, and a SIGKILL test of a child process using it."""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":  # CI: a framework missing is a failure
    importlib.import_module("agents")
else:
    pytest.importorskip("agents", reason="the openai-agents extra is not installed (pip install -e '.[openai-agents]')")

from agents.memory.session import Session

import journal
from journal.adapters.openai_agents import (
    ItemsNotSerializableError,
    ItemsTooLargeError,
    JournalSession,
    SessionClosedError,
    SessionFormatError,
    journal_dir_name,
)
from tests import openai_agents_child as child
from tests.conftest import report_count
from tests.fork_server import ForkedChild, PipeLines

SDK_VERSION = "0.24.0"
SDK_MODULES = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")
PLUGIN = "adapters_openai_agents_plugin"

# The SDK's tests left out of the run against JournalSession, with why. Each tests SQLite
# itself, not the Session contract; what it stands for in our store is tested here instead.
_CONNECTIONS = "SQLite's per-thread connection pool (session._connections); JournalSession has one journal handle"
_CORRUPT = (
    "writes a corrupt row through session._locked_connection(); a journal cannot hold a record that fails "
    "its checksum (recovery cuts a torn tail, refuses damage), so there is no corrupt item to skip"
)
_ROLLBACK = (
    "breaks the SQLite file (drops a table, fails rollback/commit on an injected sqlite3.Connection) and "
    "probes SQLite's write lock; the journal's failure paths are the engine's fault-injection tests, and "
    "an unserializable or oversized add is refused before anything is written (test_refused_add_writes_nothing)"
)
LEFT_OUT: dict[str, str] = {
    "test_session.py::test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    "test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    "test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    "test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    "test_session.py::test_sqlite_session_closed_rejects_empty_add_items": (
        "matches the message 'SQLiteSession is closed'; ours raises SessionClosedError (a RuntimeError) "
        "naming JournalSession (test_closed_session_refuses_everything)"
    ),
    "test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    "test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": (
        "SQLiteSession's process-wide lock per database file (_file_locks); each journal has its own flock"
    ),
    "test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": _ROLLBACK,
    "test_session.py::test_sqlite_session_failed_clear_session_rolls_back": _ROLLBACK,
    "test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": _ROLLBACK,
    "test_session.py::test_sqlite_session_rollback_failure_evicts_connection": _ROLLBACK,
    "test_session.py::test_sqlite_session_close_retries_quarantined_connection": _ROLLBACK,
    **{
        f"test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[{op}]": (
            "pauses inside sqlite3.Connection.commit via an injected connection; the same property (cancelled "
            "after the write started: CancelledError only once the outcome is known, and it stands) is "
            "test_cancel_after_write_started_waits_for_the_outcome"
        )
        for op in ("add", "pop", "clear")
    },
}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def item(text: str, **more: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **more}


def contents(items: list[Any]) -> list[str]:
    return [i["content"] for i in items]


# -- behaviour -----------------------------------------------------------------------------


def test_is_a_session_and_keeps_order_and_limit(tmp_path: Path) -> None:
    async def go() -> None:
        async with JournalSession("s1", tmp_path, session_settings={"limit": 3}) as s:
            assert isinstance(s, Session)
            for n in range(5):
                await s.add_items([item(f"m{n}a"), item(f"m{n}b")])
            assert contents(await s.get_items()) == ["m3b", "m4a", "m4b"]  # the settings' limit
            assert contents(await s.get_items(limit=1)) == ["m4b"]
            assert await s.get_items(limit=0) == []
            s.session_settings = None
            everything = contents(await s.get_items())
            assert everything == [f"m{n}{x}" for n in range(5) for x in "ab"]
            assert contents(await s.get_items(limit=100)) == everything

    run(go())


def test_order_is_the_order_written_never_timestamps(tmp_path: Path) -> None:
    # Items whose own timestamps run backwards come back as written.
    async def go() -> None:
        async with JournalSession("t", tmp_path) as s:
            for n in range(10):
                await s.add_items([item(str(n), created_at=1000 - n)])
        async with JournalSession("t", tmp_path) as s:
            assert contents(await s.get_items()) == [str(n) for n in range(10)]

    run(go())


def test_pop_clear_replace_and_reopen(tmp_path: Path) -> None:
    async def go() -> None:
        async with JournalSession("p", tmp_path) as s:
            assert await s.pop_item() is None
            await s.add_items([item("a"), item("b"), item("c")])
            assert (await s.pop_item()) == item("c")
            await s.add_items([item("d")])
            assert contents(await s.get_items()) == ["a", "b", "d"]
        async with JournalSession("p", tmp_path) as s:  # the fold is rebuilt from the journal
            assert contents(await s.get_items()) == ["a", "b", "d"]
            await s.clear_session()
            assert await s.get_items() == []
            await s.add_items([item("e")])
            await s.replace_items([item("summary")])
            await s.add_items([item("f")])
            last = s.last_seq
        async with JournalSession("p", tmp_path) as s:
            assert contents(await s.get_items()) == ["summary", "f"]
            assert s.last_seq == last
        # Nothing was deleted: every op is a record after the history it hides.
        with journal.open(Path(s.path), readonly=True) as j:
            ops = [r.event["op"] for r in j.read()]
        assert ops == ["session", "add", "pop", "add", "clear", "add", "replace", "add"]

    run(go())


def test_sessions_are_separate_and_ids_map_one_to_one(tmp_path: Path) -> None:
    ids = ["a", "a/b", "a%2Fb", "..", "", "ü", "x" * 300, "x" * 301]
    names = [journal_dir_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all("/" not in n and n not in (".", "..") and len(n) <= 255 for n in names)

    async def go() -> None:
        for i in ids:
            async with JournalSession(i, tmp_path) as s:
                await s.add_items([item(i)])
        for i in ids:
            async with JournalSession(i, tmp_path) as s:
                assert contents(await s.get_items()) == [i]

    run(go())


def test_refused_add_writes_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        async with JournalSession("r", tmp_path, add_bytes_max=10_000) as s:
            await s.add_items([item("kept")])
            seq = s.last_seq
            with pytest.raises(ItemsNotSerializableError) as e1:
                await s.add_items([item("fine"), item("bad", obj=object())])
            assert isinstance(e1.value, TypeError)
            with pytest.raises(ItemsNotSerializableError):
                await s.add_items([item("fine"), {1: "non-string key"}])  # type: ignore[list-item]
            with pytest.raises(ItemsTooLargeError) as e2:
                await s.add_items([item("fine"), item("x" * 20_000)])
            assert e2.value.limit_bytes == 10_000 and "nothing was written" in str(e2.value)
            assert s.last_seq == seq
            assert contents(await s.get_items()) == ["kept"]

    run(go())


def test_closed_session_refuses_everything(tmp_path: Path) -> None:
    s = JournalSession("c", tmp_path)
    s.close()
    s.close()  # idempotent
    for call in (s.add_items([]), s.add_items([item("x")]), s.get_items(), s.pop_item(), s.clear_session()):
        with pytest.raises(SessionClosedError, match="JournalSession 'c' is closed") as e:
            run(call)
        assert isinstance(e.value, RuntimeError)


def test_one_open_session_per_id(tmp_path: Path) -> None:
    with JournalSession("one", tmp_path), pytest.raises(journal.JournalLockedError):
        JournalSession("one", tmp_path)


def test_a_journal_of_another_session_is_refused(tmp_path: Path) -> None:
    with JournalSession("mine", tmp_path):
        pass
    os.rename(tmp_path / "mine", tmp_path / "theirs")
    with pytest.raises(SessionFormatError, match="is session 'mine'"):
        JournalSession("theirs", tmp_path)


def test_open_off_the_loop(tmp_path: Path) -> None:
    async def go() -> None:
        s = await JournalSession.open("o", tmp_path)
        async with s:
            await s.add_items([item("a")])
            assert contents(await s.get_items()) == ["a"]

    run(go())


def test_cancel_after_write_started_waits_for_the_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The write is held inside the journal's append (in its worker thread) while the caller is
    # cancelled twice; CancelledError reaches the caller only after the write has finished, and
    # the write stands.
    import threading

    async def go(op: str) -> None:
        s = JournalSession(f"cancel-{op}", tmp_path)
        if op != "add":
            await s.add_items([item("once")])
        entered, release = threading.Event(), threading.Event()
        real_append = s._journal.append

        def held_append(*a: Any, **k: Any) -> Any:
            entered.set()
            assert release.wait(10)
            return real_append(*a, **k)

        monkeypatch.setattr(s._journal, "append", held_append)
        call = {"add": lambda: s.add_items([item("once")]), "pop": s.pop_item, "clear": s.clear_session}[op]
        task = asyncio.ensure_future(call())
        assert await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        assert not task.done()  # still waiting for the write
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert contents(await s.get_items()) == (["once"] if op == "add" else [])
        s.close()
        async with JournalSession(f"cancel-{op}", tmp_path) as again:
            assert contents(await again.get_items()) == (["once"] if op == "add" else [])

    for op in ("add", "pop", "clear"):
        run(go(op))


def test_cancel_many_adds_at_random_points(tmp_path: Path) -> None:
    """Thousands of add_items tasks on a few sessions, each cancelled after a random number of
    loop turns (or not at all): afterwards every add is whole or absent, the journal's seqs are
    contiguous, what the fold showed is what a reopen reads, and every add that returned is there."""
    rng = random.Random(14)
    sessions_n, tasks_n = 4, 1500

    async def go() -> tuple[dict[str, list[str]], set[str], int]:
        sessions = [JournalSession(f"c{n}", tmp_path) for n in range(sessions_n)]
        tasks: dict[str, asyncio.Task[None]] = {}
        sizes: dict[str, int] = {}
        for t in range(tasks_n):
            tag = f"t{t}"
            sizes[tag] = rng.randint(1, 5)
            items = [item(f"{tag}.{i}", n=sizes[tag]) for i in range(sizes[tag])]
            tasks[tag] = asyncio.ensure_future(sessions[t % sessions_n].add_items(items))  # type: ignore[arg-type]
        pending = dict.fromkeys(tasks, 0)
        when = {tag: rng.choice((None, 0, 1, 2, 5, 20, 80)) for tag in tasks}
        turn = 0
        last_turn = max(w for w in when.values() if w is not None)
        while pending and turn <= last_turn:
            for tag in list(pending):
                if tasks[tag].done():
                    del pending[tag]
                elif when[tag] is not None and turn >= when[tag]:  # type: ignore[operator]
                    tasks[tag].cancel()
            turn += 1
            await asyncio.sleep(0)
        # Every cancellation is made: wait for the rest instead of spinning the loop (which
        # would take the GIL from the writes' threads).
        if pending:
            await asyncio.wait([tasks[tag] for tag in pending])
        returned = {tag for tag, task in tasks.items() if not task.cancelled()}
        for task in tasks.values():
            if not task.cancelled():
                assert task.exception() is None
        folds = {s.session_id: contents(await s.get_items()) for s in sessions}
        for s in sessions:
            s.close()
        cancelled = sum(1 for task in tasks.values() if task.cancelled())
        return folds, returned, cancelled

    folds, returned, cancelled = run(go())
    present: set[str] = set()
    for sid, fold in folds.items():
        with journal.open(tmp_path / sid, readonly=True) as j:
            recs = list(j.read())
        assert [r.seq for r in recs] == list(range(1, len(recs) + 1))
        from_journal = []
        for r in recs[1:]:
            got = r.event["items"]
            tag = got[0]["content"].split(".")[0]
            assert [i["content"] for i in got] == [f"{tag}.{i}" for i in range(got[0]["n"])]  # whole
            assert tag not in present  # once
            present.add(tag)
            from_journal.extend(i["content"] for i in got)
        assert from_journal == fold
    assert returned <= present
    report_count(
        "openai-agents cancellation (tests/test_adapter_openai_agents.py)",
        f"{tasks_n} add_items, {cancelled} cancelled, {len(present)} whole, {tasks_n - len(present)} absent, 0 torn",
    )
    print(
        f"cancellation: {tasks_n} add_items tasks, {cancelled} cancelled, {len(present)} records whole, "
        f"{tasks_n - len(present)} absent, 0 torn, seqs contiguous"
    )
    assert cancelled > 0


def test_sigkill_rounds_keep_every_acknowledged_write(tmp_path: Path) -> None:
    """A child using JournalSession is SIGKILLed at a random point of its operations, 50 times,
    on one session: after each kill a reopen holds exactly the acknowledged operations, plus at
    most the one that was in flight (whole), never a torn or partial add."""
    rounds = 50
    rng = random.Random(1414)
    root = tmp_path / "sessions"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_agents_child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent.parent,
    )
    assert server.stdin is not None and server.stdout is not None
    model: list[dict[str, Any]] = []
    landed = {"in flight": 0, "between ops": 0, "after the end": 0}
    in_flight_taken = acked_total = 0

    line = PipeLines(server.stdout.fileno(), 120, "the kill-test server").line

    try:
        for r in range(rounds):
            seed = 1000 + r
            ops = child.plan(seed)
            kill_after = rng.randint(0, 25)
            server.stdin.write(f"run {root} {seed}\n".encode())
            server.stdin.flush()
            words = line().split()
            assert words[0] == "pid", words
            kid = ForkedChild(int(words[1]))
            acked, begun, ended, killed, tried = -1, -1, False, False, False
            while True:
                words = line().split()
                if words[0] == "begin":
                    begun = int(words[1])
                elif words[0] == "ack":
                    acked = int(words[1])
                    if acked + 1 >= kill_after and not tried:
                        tried = True
                        killed = kid.kill()  # False: it ended, and was reaped, before its last lines were read
                elif words[0] == "end":
                    ended = True
                elif words[0] == "reaped":
                    break
                else:
                    raise AssertionError(f"child: {' '.join(words)}")
                if kill_after == 0 and not tried:
                    tried = True
                    killed = kid.kill()
            kid.close()
            assert killed or ended, f"round {r}: the child neither ended nor was killed"
            landed["after the end" if ended else "in flight" if begun > acked else "between ops"] += 1
            for op, items in ops[: acked + 1]:
                child.apply(model, op, items)
            acked_total += acked + 1
            with JournalSession(child.SESSION_ID, root) as s:
                got = run(s.get_items())
            if got != model and begun > acked:  # the op in flight may have committed, whole
                child.apply(model, *ops[begun])
                in_flight_taken += 1
            assert got == model, f"round {r}: the journal does not hold what was acknowledged"
    finally:
        server.stdin.close()
        server.wait(30)
    report_count(
        "openai-agents SIGKILL rounds (tests/test_adapter_openai_agents.py)",
        f"{rounds} rounds, {acked_total} acknowledged ops all found, landed {landed}, {in_flight_taken} in flight",
    )
    print(
        f"kill test: {rounds} SIGKILL rounds, {acked_total} operations acknowledged and all found; kills landed "
        f"{landed}; {in_flight_taken} in-flight operations found committed (whole), the rest absent"
    )
    assert sum(landed.values()) == rounds


# -- the SDK's own tests -------------------------------------------------------------------


@pytest.fixture(scope="session")
def sdk_sdist() -> Path:
    """The SDK's source distribution, downloaded from the package registry once and unpacked
    under the venv (never into this repo)."""
    cache = Path(sys.prefix) / "cache" / f"openai-agents-{SDK_VERSION}-sdist"
    root = cache / f"openai_agents-{SDK_VERSION}"
    if (root / SDK_MODULES[0]).exists():
        return root
    work = cache.with_name(cache.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
         f"openai-agents=={SDK_VERSION}", "-d", str(work)],
        capture_output=True, text=True,
    )
    assert got.returncode == 0, f"could not download the openai-agents sdist: {got.stderr[-2000:]}"
    (tarball,) = work.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        tar.extractall(work, filter="data")
    shutil.rmtree(cache, ignore_errors=True)
    os.rename(work, cache)  # whole or absent, for the next run and the other pass
    return root


def test_sdk_session_suite_passes_on_journal_session(sdk_sdist: Path, tmp_path: Path) -> None:
    report = tmp_path / "sdk.xml"
    cmd = [
        sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q",
        f"--junitxml={report}", *SDK_MODULES,
    ]
    for nodeid in LEFT_OUT:
        cmd += ["--deselect", f"tests/memory/{nodeid}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    got = subprocess.run(cmd, cwd=sdk_sdist, env=env, capture_output=True, text=True, timeout=600)
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    print(f"openai-agents {SDK_VERSION} session tests on JournalSession: {passed} passed, {counts['failures']} "
          f"failed, {counts['errors']} errors, {counts['skipped']} skipped, {len(LEFT_OUT)} left out:")
    for nodeid, why in LEFT_OUT.items():
        print(f"  left out {nodeid}: {why}")
    report_count(
        f"openai-agents {SDK_VERSION} sdk session tests on JournalSession (tests/test_adapter_openai_agents.py)",
        f"{passed} passed, {len(LEFT_OUT)} left out (SQLite internals, listed in LEFT_OUT)",
    )
    assert got.returncode == 0, got.stdout[-5000:] + got.stderr[-3000:]
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0
    assert passed == 53  # every test of the Session contract in the two modules


def test_compaction_replaces_history_in_one_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK's compaction session takes our _atomic_replace_items hook: one "replace" record,
    # never clear_session followed by add_items (which a crash between them would leave empty).
    from agents.memory.openai_responses_compaction_session import OpenAIResponsesCompactionSession

    async def go() -> None:
        async with JournalSession("compact", tmp_path) as s:
            await s.add_items([item("a"), item("b"), item("c")])

            async def no_clear() -> None:
                raise AssertionError("compaction must not clear then re-add")

            monkeypatch.setattr(s, "clear_session", no_clear)
            comp = OpenAIResponsesCompactionSession("compact", s, client=object())  # type: ignore[arg-type]
            await comp._replace_underlying_session_items(output_items=[item("summary")], previous_items=[])
            assert contents(await s.get_items()) == ["summary"]
            with journal.open(Path(s.path), readonly=True) as j:
                assert [r.event["op"] for r in j.read()] == ["session", "add", "replace"]

    run(go())
