"""journal.adapters.strands: Strands' own session tests run against it (from its sdist), a
differential test against FileSessionManager, our behaviour tests (index reads, retries,
reopen, foreign and damaged journals) and injected I/O faults on the write and read paths."""

from __future__ import annotations

import copy
import errno
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
    importlib.import_module("strands")
else:
    pytest.importorskip("strands", reason="the strands extra is not installed (pip install -e '.[strands]')")

from strands.session.file_session_manager import FileSessionManager
from strands.session.session_repository import SessionRepository
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

import journal
import journal.adapters.strands as adapter
from journal.adapters.strands import (
    JournalSessionManager,
    JournalSessionRepository,
    NotFoundError,
    NotSerializableError,
    OutcomeUnknownError,
    SessionExistsError,
    SessionFormatError,
    WriteNotCommittedError,
    WriteTooLargeError,
    session_journal_name,
)
from journal.crashsim.faults import FaultyFileSystem
from journal.fs import OsFileSystem
from tests.conftest import report_count

STRANDS_VERSION = "1.62.0"
PLUGIN = "adapters_strands_plugin"
SDK_DIR = "tests/strands/session"
SDK_MODULES = (f"{SDK_DIR}/test_file_session_manager.py", f"{SDK_DIR}/test_repository_session_manager.py")

# Strands' session tests left out of the run against our repository, with why. Each looks at
# FileSessionManager's files (their paths and bytes), not at the SessionRepository contract;
# what it stands for in our store is tested in this file instead (named in the reason).
_FILES = ("reads the file store's own layout (_get_*_path, session.json, agent.json, message_<id>.json, "
          "multi_agents/) with open() and json.load; a journal has no such files: what was stored is read back "
          "through the repository in the tests that pass, and test_records_are_one_per_call_in_one_journal "
          "checks our layout")
_PATHS = ("calls the file store's private path helper (_get_session_path, _get_agent_path, _get_message_path); "
          "the same ids get the same ValueError, in the same words, from the public methods here "
          "(test_ids_are_checked_as_strands_checks_them)")
LEFT_OUT: dict[str, str] = {
    "test_file_session_manager.py::test_create_session": _FILES,
    "test_file_session_manager.py::test_delete_session": _FILES,
    "test_file_session_manager.py::test_create_agent": _FILES,
    "test_file_session_manager.py::test_create_message": _FILES,
    "test_file_session_manager.py::test_message_durable_id_persists": _FILES,
    "test_file_session_manager.py::test_create_multi_agent": _FILES,
    "test_file_session_manager.py::test_create_session_multi_agent_directory_structure": _FILES,
    "test_file_session_manager.py::test_corrupted_json_file": (
        "writes invalid JSON into session.json and calls the file store's _read_file; a journal's records are "
        "checksummed, so damage is CorruptionError and a record of another shape is SessionFormatError "
        "(test_damaged_journal_is_corruption_never_served, test_foreign_record_is_refused)"
    ),
    **{f"test_file_session_manager.py::test__get_session_path_invalid_session_id[{p}]": _PATHS
       for p in ("a/../b", "a/b")},
    **{f"test_file_session_manager.py::test__get_agent_path_invalid_agent_id[{p}]": _PATHS
       for p in ("a/../b", "a/b")},
    **{f"test_file_session_manager.py::test__get_message_path_invalid_message_id[{p}]": _PATHS
       for p in ("../../../secret", "../../attack", "../escape", "path/traversal", "not_an_int", "None",
                 "message_id6")},
}
# The whole module of symlink tests is left out: it plants symbolic links at the file store's own
# paths and checks its open() refuses them. The journal's file layer refuses a link where it
# expects its own file (UnexpectedLinkError, the engine's tests), and its default-directory tests
# are about FileSessionManager's constructor.
LEFT_OUT_MODULES = {
    "test_file_session_manager_symlink_protection.py": (
        "symlinks planted at FileSessionManager's file paths, and its default ~/.strands directory; the journal's "
        "own link refusals are the engine's tests"),
}
SDK_PASSED = 72  # every test of the two modules but the ones above


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": [{"text": text}]}


class Multi:
    """What a repository needs of a MultiAgentBase: an id and serialize_state()."""

    def __init__(self, id: str, state: dict[str, Any]) -> None:  # noqa: A002 - Strands' attribute name
        self.id = id
        self.state = state

    def serialize_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)


def new_session(repo: SessionRepository, sid: str = "s", agent: str = "a") -> None:
    repo.create_session(Session(sid, SessionType.AGENT))
    repo.create_agent(sid, SessionAgent(agent, {"k": 1}, {}))


# -- Strands' own tests ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def strands_sdist() -> Path:
    """Strands' source distribution, downloaded from the package registry once and unpacked under
    the venv (never into this repo)."""
    cache = Path(sys.prefix) / "cache" / f"strands-agents-{STRANDS_VERSION}-sdist"
    root = cache / f"strands_agents-{STRANDS_VERSION}"
    if (root / SDK_MODULES[0]).exists():
        return root
    work = cache.with_name(cache.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
         f"strands-agents=={STRANDS_VERSION}", "-d", str(work)],
        capture_output=True, text=True,
    )
    assert got.returncode == 0, f"could not download the strands-agents sdist: {got.stderr[-2000:]}"
    (tarball,) = work.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        tar.extractall(work, filter="data")
    shutil.rmtree(cache, ignore_errors=True)
    os.rename(work, cache)  # whole or absent, for the next run and the other pass
    return root


def run_strands_suite(root: Path, report: Path, env_extra: dict[str, str]) -> tuple[int, dict[str, int], str]:
    """Strands' session tests on our repository; (passed, counts, output)."""
    # --noconftest: the sdist's conftest imports moto and boto fixtures the session tests do not use.
    cmd = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "--noconftest", "-o", "addopts=",
           "-q", f"--junitxml={report}", *SDK_MODULES]
    for nodeid in LEFT_OUT:
        cmd += ["--deselect", f"{SDK_DIR}/{nodeid}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parent.parent)]),
           **env_extra}
    got = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return passed, counts, got.stdout[-5000:] + got.stderr[-3000:] if got.returncode else ""


def test_strands_session_suite_passes_on_the_journal_repository(strands_sdist: Path, tmp_path: Path) -> None:
    passed, counts, out = run_strands_suite(strands_sdist, tmp_path / "strands.xml", {})
    print(f"strands-agents {STRANDS_VERSION} session tests on JournalSessionManager/JournalSessionRepository: "
          f"{passed} passed, {counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} skipped, "
          f"{len(LEFT_OUT)} left out, and the module(s) {', '.join(LEFT_OUT_MODULES)}:")
    for nodeid, why in {**LEFT_OUT, **LEFT_OUT_MODULES}.items():
        print(f"  left out {nodeid}: {why}")
    report_count(
        f"strands-agents {STRANDS_VERSION} session tests on the journal repository (tests/test_adapter_strands.py)",
        f"{passed} passed, {len(LEFT_OUT)} left out (the file store's own files, listed in LEFT_OUT)",
    )
    assert not out, out
    assert counts["failures"] == counts["errors"] == counts["skipped"] == 0
    assert passed == SDK_PASSED


# -- differential against FileSessionManager ----------------------------------------------------


SESSIONS = ("s1", "s2")
AGENTS = ("a", "b")
MESSAGE_IDS = range(6)


def _answer(call: Any) -> Any:
    """What a call gave back, comparable across the two stores: a value's to_dict(), or the kind
    of error (both raise SessionException for Strands' refusals, ValueError for bad ids)."""
    try:
        out = call()
    except SessionException:
        return "SessionException"
    except ValueError:
        return "ValueError"
    if isinstance(out, list):
        return [m.to_dict() for m in out]
    return out.to_dict() if hasattr(out, "to_dict") else out


def _random_ops(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """Operations in the contract both stores share: agents only in sessions created (and not
    deleted), messages only of agents created. Where the file store makes directories for a
    session or an agent never created, ours refuses (docs/ADAPTERS.md), so those are left out."""
    ops: list[tuple[Any, ...]] = []
    sessions: set[str] = set()
    agents: set[tuple[str, str]] = set()
    for n in range(count):
        sid, aid, mid = rng.choice(SESSIONS), rng.choice(AGENTS), rng.choice(MESSAGE_IDS)
        kind = rng.choice(("create_session", "read_session", "create_agent", "read_agent", "update_agent",
                           "create_message", "create_message", "create_message", "read_message", "update_message",
                           "list_messages", "list_messages", "multi", "read_multi", "delete_session", "reopen",
                           "retry"))
        if kind == "create_session":
            sessions.add(sid)
            ops.append((kind, Session(sid, SessionType.AGENT)))
        elif kind == "create_agent":
            if sid not in sessions:
                continue
            agents.add((sid, aid))
            ops.append((kind, sid, SessionAgent(aid, {"n": n}, {"removed": rng.randrange(3)})))
        elif kind == "update_agent":
            ops.append((kind, sid, SessionAgent(aid, {"n": n, "u": True}, {})))
        elif kind in ("create_message", "update_message", "retry"):
            if kind != "update_message" and (sid, aid) not in agents:
                continue
            if kind == "update_message" and sid not in sessions:
                continue
            ops.append((kind, sid, aid, SessionMessage(msg(f"m{n}", rng.choice(("user", "assistant"))), mid)))
        elif kind == "list_messages":
            limit = rng.choice((None, 0, 1, 2, 5))
            ops.append((kind, sid, aid, limit, rng.randrange(7)))
        elif kind == "multi":
            if sid not in sessions:
                continue
            ops.append((rng.choice(("create_multi", "update_multi")), sid, Multi("m", {"n": n})))
        elif kind == "delete_session":
            sessions.discard(sid)
            agents = {(s, a) for s, a in agents if s != sid}
            ops.append((kind, sid))
        elif kind == "reopen":
            ops.append((kind,))
        else:
            ops.append((kind, sid, aid, mid))
    return ops


def _apply(repo: Any, op: tuple[Any, ...]) -> Any:
    kind, *args = op
    a = copy.deepcopy(args)  # each store gets its own objects (update_* writes created_at into them)
    if kind == "create_session":
        return _answer(lambda: repo.create_session(a[0]))
    if kind == "read_session":
        return _answer(lambda: repo.read_session(a[0]))
    if kind == "create_agent":
        return _answer(lambda: repo.create_agent(a[0], a[1]))
    if kind == "read_agent":
        return _answer(lambda: repo.read_agent(a[0], a[1]))
    if kind == "update_agent":
        return _answer(lambda: repo.update_agent(a[0], a[1])), a[1].to_dict()
    if kind == "create_message":
        return _answer(lambda: repo.create_message(a[0], a[1], a[2]))
    if kind == "retry":  # the same create twice: stored once
        return _answer(lambda: repo.read_message(a[0], a[1], a[2]))
    if kind == "update_message":
        return _answer(lambda: repo.update_message(a[0], a[1], a[2])), a[2].to_dict()
    if kind == "read_message":
        return _answer(lambda: repo.read_message(a[0], a[1], a[2]))
    if kind == "list_messages":
        return _answer(lambda: repo.list_messages(a[0], a[1], limit=a[2], offset=a[3]))
    if kind == "create_multi":
        return _answer(lambda: repo.create_multi_agent(a[0], a[1]))
    if kind == "update_multi":
        return _answer(lambda: repo.update_multi_agent(a[0], a[1]))
    if kind == "read_multi":
        return _answer(lambda: repo.read_multi_agent(a[0], "m"))
    if kind == "delete_session":
        return _answer(lambda: repo.delete_session(a[0]))
    raise AssertionError(kind)


class _Pair:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.file = FileSessionManager("zz-made-by-the-constructor", storage_dir=str(root / "files"))
        self.ours = JournalSessionRepository(root / "journals")

    def reopen(self) -> None:
        self.ours.close()
        self.file = FileSessionManager("zz-made-by-the-constructor", storage_dir=str(self.root / "files"))
        self.ours = JournalSessionRepository(self.root / "journals")


@pytest.mark.parametrize("seed", range(6))
def test_differential_against_file_session_manager(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    pair = _Pair(tmp_path)
    ops = _random_ops(rng, 400)
    try:
        for i, op in enumerate(ops):
            if op[0] == "reopen":
                pair.reopen()
                continue
            if op[0] == "retry":  # create_message twice with one object, then read it
                m = op[3]
                for repo in (pair.file, pair.ours):
                    for _ in range(2):
                        _answer(lambda r=repo, o=op, x=m: r.create_message(o[1], o[2], copy.deepcopy(x)))
            want, got = _apply(pair.file, op), _apply(pair.ours, op)
            assert got == want, f"seed {seed}, op {i} {op[0]}{op[1:]}: file store {want!r}, journal {got!r}"
        # Every session, agent and message both hold, read at the end after a reopen.
        pair.reopen()
        for sid in SESSIONS:
            assert _answer(lambda s=sid: pair.ours.read_session(s)) == _answer(lambda s=sid: pair.file.read_session(s))
            for aid in AGENTS:
                for call in ("read_agent", "list_messages"):
                    assert _answer(lambda c=call, s=sid, a=aid: getattr(pair.ours, c)(s, a)) == \
                        _answer(lambda c=call, s=sid, a=aid: getattr(pair.file, c)(s, a))
    finally:
        pair.ours.close()
    report_count(f"strands differential vs FileSessionManager, seed {seed}", f"{len(ops)} operations, identical")


def test_a_retried_create_is_stored_once(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        m = SessionMessage(msg("hi"), 0)
        repo.create_message("s", "a", m)
        entry = adapter._REGISTRY[repo._key("s")]
        last = entry.journal.last_seq
        repo.create_message("s", "a", m)  # the same call again (its answer was lost): no record
        repo.create_agent("s", SessionAgent("a", {"k": 1}, {}, created_at=repo.read_agent("s", "a").created_at,
                                            updated_at=repo.read_agent("s", "a").updated_at))
        assert entry.journal.last_seq == last
        changed = SessionMessage(msg("other"), 0)
        repo.create_message("s", "a", changed)  # another message under the id replaces it (the file store's rule)
        assert entry.journal.last_seq == last + 1
        assert [x.message for x in repo.list_messages("s", "a")] == [msg("other")]


# -- our behaviour ------------------------------------------------------------------------------


def test_records_are_one_per_call_in_one_journal(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo, "user/42"[:4] + "-42")
        repo.create_message("user-42", "a", SessionMessage(msg("one"), 0))
        repo.update_message("user-42", "a", SessionMessage(msg("one, redacted"), 0))
        repo.create_multi_agent("user-42", Multi("m", {"x": 1}))
    with journal.open(tmp_path / "sessions" / session_journal_name("user-42")) as j:
        ops = [r.event["op"] for r in j.read()]
    assert ops == ["strands", "agent", "message", "message", "multi_agent"]
    assert os.listdir(tmp_path / "sessions") == ["user-42"]


def test_list_messages_reads_only_the_records_it_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        for i in range(20):
            repo.create_message("s", "a", SessionMessage(msg(f"m{i}"), i))
        new_session(repo, "other")  # another session's journal is never opened by this listing
    with JournalSessionRepository(tmp_path) as repo:
        assert repo.read_session("s") is not None  # open and index it
        entry = adapter._REGISTRY[repo._key("s")]
        gets: list[int] = []
        real_get = entry.journal.get

        def counting_get(seq: int) -> Any:
            gets.append(seq)
            return real_get(seq)

        def no_scan(*a: Any, **k: Any) -> Any:
            raise AssertionError("list_messages scanned the journal")

        monkeypatch.setattr(entry.journal, "get", counting_get)
        monkeypatch.setattr(entry.journal, "read", no_scan)
        got = repo.list_messages("s", "a", limit=3, offset=5)
        assert [m.message_id for m in got] == [5, 6, 7] and len(gets) == 3
        assert not any(k[1] == "other" for k in adapter._REGISTRY)


def test_messages_are_ordered_by_id_whatever_the_write_order(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        for i in (3, 0, 2, -1, 1):
            repo.create_message("s", "a", SessionMessage(msg(f"m{i}"), i))
        assert [m.message_id for m in repo.list_messages("s", "a")] == [-1, 0, 1, 2, 3]
    with JournalSessionRepository(tmp_path) as repo:  # the same order from the journal
        assert [m.message_id for m in repo.list_messages("s", "a", offset=1, limit=2)] == [0, 1]


def test_ids_are_checked_as_strands_checks_them(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        for bad in ("a/../b", "a/b"):
            with pytest.raises(ValueError, match=f"session_id={bad} | id cannot contain path separators"):
                repo.read_session(bad)
            with pytest.raises(ValueError, match=f"agent_id={bad} | id cannot contain path separators"):
                repo.read_agent("s", bad)
        for bad_id in ("../escape", "not_an_int", None, [], True):
            with pytest.raises(ValueError, match=r"message_id=<.*> \| message id must be an integer"):
                repo.read_message("s", "a", bad_id)  # type: ignore[arg-type]
        for odd in ("..", ".", "", "é/".rstrip("/"), "x" * 300):  # safe names all, one journal each
            repo.create_session(Session(odd, SessionType.AGENT))
            assert repo.read_session(odd) is not None and repo.read_session(odd).session_id == odd
        assert all("." not in n or n == n for n in repo.store.names())
        assert not any(n.startswith(".") for n in repo.store.names())


def test_refusals_are_session_exceptions(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        with pytest.raises(SessionExistsError, match="already exists"):
            repo.create_session(Session("s", SessionType.AGENT))
        with pytest.raises(NotFoundError, match="does not exist"):
            repo.create_agent("nope", SessionAgent("a", {}, {}))
        with pytest.raises(NotFoundError, match="create it first"):
            repo.create_message("s", "ghost", SessionMessage(msg("x"), 0))
        with pytest.raises(NotFoundError):
            repo.list_messages("s", "ghost")
        with pytest.raises(NotFoundError):
            repo.update_multi_agent("s", Multi("m", {}))
        with pytest.raises(NotFoundError, match="does not exist"):
            repo.delete_session("nope")
        assert isinstance(NotFoundError("x"), SessionException) and isinstance(NotFoundError("x"), journal.JournalError)
        with pytest.raises(NotSerializableError):
            repo.create_message("s", "a", SessionMessage({"role": "user", "content": [{"text": object()}]}, 1))
        assert repo.read_message("s", "a", 1) is None


def test_a_message_over_the_record_limit_is_refused_whole(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path, record_size_bytes_max=4096) as repo:
        new_session(repo)
        with pytest.raises(WriteTooLargeError) as info:
            repo.create_message("s", "a", SessionMessage(msg("x" * 10_000), 0))
        assert info.value.limit_bytes == 4096
        assert repo.list_messages("s", "a") == []
        repo.create_message("s", "a", SessionMessage(msg("small"), 0))


def test_two_managers_of_one_session_in_one_process_share_it(tmp_path: Path) -> None:
    one = JournalSessionRepository(tmp_path)
    two = JournalSessionRepository(tmp_path)
    new_session(one)
    one.create_message("s", "a", SessionMessage(msg("from one"), 0))
    assert [m.message for m in two.list_messages("s", "a")] == [msg("from one")]
    one.close()
    two.create_message("s", "a", SessionMessage(msg("from two"), 1))  # still open: two holds it
    two.close()
    assert adapter._REGISTRY == {} or all(k[0] != str(tmp_path / "sessions") for k in adapter._REGISTRY)
    with JournalSessionRepository(tmp_path) as again:
        assert [m.message_id for m in again.list_messages("s", "a")] == [0, 1]


def test_delete_then_create_again(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo, JournalSessionRepository(tmp_path) as other:
        new_session(repo)
        assert other.read_agent("s", "a") is not None
        repo.delete_session("s")
        assert other.read_session("s") is None and repo.read_agent("s", "a") is None
        new_session(other, agent="b")
        assert repo.read_agent("s", "a") is None and repo.read_agent("s", "b") is not None


def test_manager_with_a_real_agent_restores_in_a_new_manager(tmp_path: Path) -> None:
    from strands import Agent
    from strands.agent.conversation_manager.null_conversation_manager import NullConversationManager

    from tests.strands_app import ScriptedModel, text_reply

    sm = JournalSessionManager("conv", tmp_path)
    agent = Agent(agent_id="a", model=ScriptedModel([text_reply("hello back")]), session_manager=sm,
                  conversation_manager=NullConversationManager(), callback_handler=None)
    agent("hello")
    agent.state.set("mood", "fine")
    sm.sync_agent(agent)
    sm.close()
    sm2 = JournalSessionManager("conv", tmp_path)
    restored = Agent(agent_id="a", model=ScriptedModel([]), session_manager=sm2,
                     conversation_manager=NullConversationManager(), callback_handler=None)
    assert [m["role"] for m in restored.messages] == ["user", "assistant"]
    assert restored.messages[1]["content"][0]["text"] == "hello back"
    assert restored.state.get("mood") == "fine"
    sm2.close()


# -- foreign and damaged journals -----------------------------------------------------------------


def _segment(root: Path, sid: str) -> Path:
    (seg,) = (root / "sessions" / session_journal_name(sid)).glob("*.seg")
    return seg


def test_foreign_record_is_refused(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
    with journal.open(tmp_path / "sessions" / "s") as j:
        j.append({"op": "message", "agent_id": "a", "message": {"message_id": "0", "message": {}}})
    with JournalSessionRepository(tmp_path) as repo, pytest.raises(SessionFormatError, match="message_id") as info:
        repo.read_session("s")
    assert isinstance(info.value, SessionException) and info.value.seq == 3
    with journal.open(tmp_path / "sessions" / "x", create=True) as j:
        j.append({"op": "adk", "v": 1})
    with JournalSessionRepository(tmp_path) as repo, pytest.raises(SessionFormatError, match="header"):
        repo.read_session("x")


def test_damaged_journal_is_corruption_never_served(tmp_path: Path) -> None:
    # Small segments, so the damaged record is in a sealed one (in the live segment, damage reads
    # as a torn tail: recovery cuts it and keeps the bytes in quarantine/, as the next test shows).
    with JournalSessionRepository(tmp_path, segment_size_bytes=4096) as repo:
        new_session(repo)
        for i in range(40):
            repo.create_message("s", "a", SessionMessage(msg(f"secret-{i:02}"), i))
    segs = sorted((tmp_path / "sessions" / "s").glob("*.seg"))
    assert len(segs) > 2
    data = bytearray(segs[0].read_bytes())
    data[data.index(b"secret-01")] ^= 0x20  # one bit of a committed record of a sealed segment
    segs[0].write_bytes(bytes(data))
    with JournalSessionRepository(tmp_path) as repo, pytest.raises(journal.CorruptionError):
        repo.list_messages("s", "a")


def test_torn_tail_is_cut_and_the_rest_is_served(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        repo.create_message("s", "a", SessionMessage(msg("kept"), 0))
    seg = _segment(tmp_path, "s")
    whole = seg.read_bytes()
    with JournalSessionRepository(tmp_path) as repo:
        repo.create_message("s", "a", SessionMessage(msg("torn"), 1))
    longer = seg.read_bytes()
    seg.write_bytes(longer[: len(whole) + (len(longer) - len(whole)) // 2])  # the last record half-written
    with JournalSessionRepository(tmp_path) as repo:
        assert [m.message for m in repo.list_messages("s", "a")] == [msg("kept")]
        assert repo.read_message("s", "a", 1) is None
        assert list((tmp_path / "sessions" / "s" / "quarantine").iterdir())  # the cut bytes, kept aside
        repo.create_message("s", "a", SessionMessage(msg("after"), 1))
        assert [m.message_id for m in repo.list_messages("s", "a")] == [0, 1]


# -- injected I/O faults ------------------------------------------------------------------------


def test_not_committed_write_raises_and_changes_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with JournalSessionRepository(tmp_path, fs=fs) as repo:
        new_session(repo)
        repo.create_message("s", "a", SessionMessage(msg("one"), 0))
        fs.fail("pwrite", errno.ENOSPC, after=fs.calls["pwrite"])
        with pytest.raises(WriteNotCommittedError, match="not stored") as info:
            repo.create_message("s", "a", SessionMessage(msg("two"), 1))
        assert info.value.outcome is not None and info.value.outcome.errno == errno.ENOSPC
        assert [m.message_id for m in repo.list_messages("s", "a")] == [0]
        fs.fail("pwrite", errno.EIO, after=fs.calls["pwrite"])
        agent = SessionAgent("a", {"k": 2}, {})
        with pytest.raises(WriteNotCommittedError):
            repo.update_agent("s", agent)
        assert repo.read_agent("s", "a").state == {"k": 1}
        repo.create_message("s", "a", SessionMessage(msg("two"), 1))  # the retry
    with JournalSessionRepository(tmp_path) as repo:
        assert [m.message_id for m in repo.list_messages("s", "a")] == [0, 1]


def test_ack_lost_raises_and_the_next_call_reads_the_disk(tmp_path: Path) -> None:
    fs = FaultyFileSystem(OsFileSystem())
    with JournalSessionRepository(tmp_path, fs=fs) as repo:
        new_session(repo)
        m = SessionMessage(msg("one"), 0)
        fs.fail("fdatasync", errno.EIO, after=fs.calls["fdatasync"])
        with pytest.raises(OutcomeUnknownError, match="unknown") as info:
            repo.create_message("s", "a", m)
        assert isinstance(info.value.outcome, journal.AckLost)
        fs.clear()
        # The journal was closed: this call reopens it (recovery) and indexes the disk, where the
        # bytes did arrive (only the fdatasync failed); the retry of the same call is stored once.
        assert [x.message for x in repo.list_messages("s", "a")] == [msg("one")]
        repo.create_message("s", "a", m)
        entry = adapter._REGISTRY[repo._key("s")]
        assert sum(1 for r in entry.journal.read() if r.event["op"] == "message") == 1


def test_read_faults_are_typed_errors(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        repo.create_message("s", "a", SessionMessage(msg("one"), 0))
    fs = FaultyFileSystem(OsFileSystem())
    fs.fail("pread", errno.EIO, after=0, times=-1)
    with JournalSessionRepository(tmp_path, fs=fs) as repo, pytest.raises(journal.JournalError) as info:
        repo.read_session("s")  # opening reads the journal
    assert isinstance(info.value, journal.JournalError)
    fs.clear()
    with JournalSessionRepository(tmp_path, fs=fs) as repo:
        assert repo.read_session("s") is not None  # opened and indexed
        fs.fail("pread", errno.EIO, after=fs.calls["pread"], times=-1)
        with pytest.raises(journal.JournalError):
            repo.list_messages("s", "a")
        fs.clear()
        assert [m.message_id for m in repo.list_messages("s", "a")] == [0]
    for op in ("open_read", "listdir"):
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(op, errno.EIO, after=0, times=-1)
        with JournalSessionRepository(tmp_path, fs=fs) as repo, pytest.raises(journal.JournalError):
            repo.read_session("s")


def test_opening_one_session_never_holds_up_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal is opened (recovery, the index read, a wait for another process's lock) under its
    own session's lock: a slow open of one session leaves every other session usable."""
    import threading

    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo, "slow")
        new_session(repo, "quick")
    entered, release = threading.Event(), threading.Event()
    real_open = JournalSessionRepository._open

    def held_open(self: JournalSessionRepository, key: Any, session_id: str, create: bool) -> Any:
        if session_id == "slow":
            entered.set()
            assert release.wait(60), "the test never released the slow open"
        return real_open(self, key, session_id, create)

    monkeypatch.setattr(JournalSessionRepository, "_open", held_open)
    with JournalSessionRepository(tmp_path) as repo:
        got: list[Any] = []
        slow = threading.Thread(target=lambda: got.append(repo.read_agent("slow", "a")))
        slow.start()
        assert entered.wait(60)
        assert repo.read_agent("quick", "a") is not None  # while "slow" is still being opened
        second = threading.Thread(target=lambda: got.append(repo.read_session("slow")))
        second.start()  # waits for the one open of "slow", never opens it a second time
        release.set()
        slow.join(60)
        second.join(60)
        assert len(got) == 2 and all(g is not None for g in got)
        entry = adapter._REGISTRY[repo._key("slow")]
        assert entry.users == 1  # one repository, one use, whatever the threads


def test_another_process_gets_a_typed_lock_error(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        assert repo.read_session("s") is not None  # this process holds the session's journal
        code = ("import sys, journal\nfrom journal.adapters.strands import JournalSessionRepository\n"
                f"repo = JournalSessionRepository({str(tmp_path)!r})\n"
                "try:\n    repo.read_session('s')\nexcept journal.JournalLockedError as exc:\n"
                "    print('locked', isinstance(exc, journal.JournalError))\nelse:\n    print('opened')\n")
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert got.stdout.split() == ["locked", "True"], got.stdout + got.stderr
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert got.stdout.split() == ["opened"], got.stdout + got.stderr  # closed here: the other process may open it


@pytest.mark.parametrize("crafted", [
    {"op": "message", "agent_id": "a", "message": {"message_id": 0, "message": {"role": "user", "content": "x"}}},
    {"op": "message", "agent_id": "a", "message": {"message_id": 0, "message": {"role": 1, "content": []}}},
    {"op": "message", "agent_id": "a", "message": {"message_id": 0, "message": {"role": "user", "content": [1]}}},
    {"op": "message", "agent_id": "a", "message": {"message_id": 0, "message": {"role": "user", "content": []},
                                                   "redact_message": "gone"}},
    {"op": "message", "agent_id": "ghost", "message": {"message_id": 0, "message": {"role": "user", "content": []}}},
    {"op": "message", "agent_id": "a", "message": {"message_id": True, "message": {"role": "user", "content": []}}},
    {"op": "agent", "agent": {"agent_id": "a", "state": [], "conversation_manager_state": {}}},
    {"op": "agent", "agent": {"agent_id": 7}},
    {"op": "multi_agent", "id": "m", "state": "x"},
    {"op": "strands", "v": 1, "session_id": "s", "session": {}},
    {"op": "delete"},
])
def test_crafted_records_are_refused_whole(tmp_path: Path, crafted: Any) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
    with journal.open(tmp_path / "sessions" / "s") as j:
        j.append(crafted)
    with JournalSessionRepository(tmp_path) as repo, pytest.raises(SessionFormatError) as info:
        repo.read_session("s")
    assert isinstance(info.value, SessionException) and isinstance(info.value, journal.JournalError)


@pytest.mark.parametrize("field,value,refused", [
    ("message", {"role": "user", "content": [{"image": {"__bytes_encoded__": True, "data": "%%%not base64"}}]},
     True),
    ("created_at", {"not": "a str, but Strands' dataclass takes it"}, False),
    ("extra", 1, False),
])
def test_a_record_strands_cannot_read_is_refused_when_read(tmp_path: Path, field: str, value: Any,
                                                           refused: bool) -> None:
    """A record whose shape the index accepts but Strands' from_dict refuses (bytes that are not
    base64) is SessionFormatError when read, never a stray exception; what from_dict takes (it
    ignores unknown fields and checks no types) is served as it reads it."""
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
    body: dict[str, Any] = {"message_id": 0, "message": {"role": "user", "content": []}, field: value}
    with journal.open(tmp_path / "sessions" / "s") as j:
        j.append({"op": "message", "agent_id": "a", "message": body})
    with JournalSessionRepository(tmp_path) as repo:
        if refused:
            with pytest.raises(SessionFormatError, match="Strands cannot read it"):
                repo.read_message("s", "a", 0)
            with pytest.raises(SessionFormatError):
                repo.list_messages("s", "a")
        else:
            got = repo.read_message("s", "a", 0)
            assert got is not None and got.message_id == 0


def test_a_session_journal_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path / "elsewhere") as repo:
        new_session(repo)
    with JournalSessionRepository(tmp_path / "here") as repo:
        new_session(repo, "other")
    os.symlink(tmp_path / "elsewhere" / "sessions" / "s", tmp_path / "here" / "sessions" / "s")
    with JournalSessionRepository(tmp_path / "here") as repo:
        with pytest.raises(journal.JournalError):
            repo.read_session("s")
        assert repo.read_session("other") is not None  # the store goes on


def test_reads_of_a_session_never_written_make_nothing(tmp_path: Path) -> None:
    with JournalSessionRepository(tmp_path) as repo:
        new_session(repo)
        assert repo.read_session("nope") is None and repo.read_agent("nope", "a") is None
        assert repo.read_message("nope", "a", 0) is None and repo.read_multi_agent("nope", "m") is None
        assert repo.store.names() == ["s"]


def test_a_real_graph_keeps_its_multi_agent_state(tmp_path: Path) -> None:
    from strands import Agent
    from strands.multiagent.graph import GraphBuilder

    from tests.strands_app import ScriptedModel, text_reply

    manager = JournalSessionManager("g1", tmp_path)
    builder = GraphBuilder()
    for name in ("a", "b"):
        builder.add_node(Agent(name=name, agent_id=name, model=ScriptedModel([text_reply(f"from {name}")]),
                               callback_handler=None), name)
    builder.add_edge("a", "b")
    builder.set_entry_point("a")
    builder.set_session_manager(manager)
    builder.set_max_node_executions(4)
    graph = builder.build()
    graph("go")
    state = manager.read_multi_agent("g1", graph.id)
    assert state is not None and state["status"] == "completed" and sorted(state["completed_nodes"]) == ["a", "b"]
    manager.close()
    with JournalSessionRepository(tmp_path) as again:
        assert again.read_multi_agent("g1", graph.id) == state
