"""Issue 29, defects 14-16: real logs' oddities on import, sessions created at once in a new
store, and the crash harness's ``check=``.

14. A line of a real log may hold a lone UTF-16 surrogate escape (``\\ud83d``: Node.js writes one
    when it cuts a string mid-emoji), a number JSON cannot hold as a float (``1e999``, Python's
    ``NaN``), or nesting 100,000 deep. Every importer keeps the first two exactly (export gives the
    source bytes back) and refuses the third with a typed error naming the line (kept verbatim
    under ``--skip-bad``); no advice about free space, no traceback.
15. Processes that create sessions (or journals of a DirectoryStore) in one new store at the same
    moment all succeed: the store's directories are made by whoever comes first.
16. A workload's ``check=`` is called for every crash state and its violations are reported;
    docs/CRASH-TESTING.md's example runs as written.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import pytest

from journal.errors import JournalError
from journal.fs import OsFileSystem, make_dirs
from journal.session import importers
from journal.session.importers import MalformedLineError
from tests.test_import_export import CORPUS, SOURCES, needs_corpus, roundtrip, write

REPO = pathlib.Path(__file__).resolve().parent.parent
DEEP = 100_000

# --- 14: real logs' oddities on import ----------------------------------------------------------

# One line per format, in that format's own shape, whose text is cut mid-emoji (the high half of
# U+1F600 with no low half), and a number spelled past a double's range.
CUT = "\\ud83d"
CUT_LINES = {
    "claude": '{"parentUuid":"u1","type":"user","message":{"role":"user","content":"smile ' + CUT
              + '"},"uuid":"u9","timestamp":"2025-12-10T19:38:00Z","sessionId":"4c2ddfdc-0000"}',
    "codex": '{"timestamp":"2026-01-02T16:39:46Z","type":"response_item","payload":{"type":"message",'
             '"role":"user","content":[{"type":"input_text","text":"smile ' + CUT + '"}]}}',
    "pi": '{"type":"message","id":"a9","parentId":"a6","timestamp":"2025-12-17T19:39:22Z","message":'
          '{"role":"user","content":[{"type":"text","text":"smile ' + CUT + '"}],"timestamp":3}}',
    "jsonl": '{"type":"user_message","text":"smile ' + CUT + '","sessionId":"plain-1"}',
}
ODD_NUMBERS = ['{"type":"metrics","tokens":1e999,"cost":-1e999}', '{"type":"metrics","loss":NaN,"gain":Infinity}']
KEY_CUT = '{"type":"metrics","' + CUT + '":1,"\\udc00x":"\\udfff"}'  # lone halves in keys too


def deep_line(depth: int) -> str:
    return '{"type":"user","x":' + "[" * depth + "]" * depth + "}"


def imported_texts(dest: pathlib.Path) -> list[Any]:
    from journal import session

    with session.open(dest, readonly=True) as s:
        return [e.data.get("text") for e in s.read() if e.type == "user.message"]


@pytest.mark.parametrize("fmt", sorted(SOURCES))
def test_a_lone_surrogate_is_kept_exactly_and_mapped_as_a_replacement_char(tmp_path: pathlib.Path, fmt: str) -> None:
    lines = [*SOURCES[fmt](), CUT_LINES[fmt], KEY_CUT, *ODD_NUMBERS]
    src = write(tmp_path / "src.jsonl", lines)
    rep, out = roundtrip(src, tmp_path / "j", fmt)  # no --skip-bad needed: every line is JSON
    assert out == src.read_bytes(), "export gives back the source bytes, escapes and all"
    assert not rep.skipped
    n = len(SOURCES[fmt]())
    assert rep.replaced == [n + 1, n + 2, n + 3, n + 4], "the report names the lines whose values were replaced"
    assert "smile \ufffd" in imported_texts(tmp_path / "j"), "the cut emoji reads as U+FFFD, as a UTF-8 decoder says"


@pytest.mark.parametrize("fmt", sorted(SOURCES))
@pytest.mark.parametrize("depth", [DEEP, 300])
def test_a_line_nested_too_deep_is_refused_by_number_and_kept_with_skip_bad(
    tmp_path: pathlib.Path, fmt: str, depth: int
) -> None:
    lines = [*SOURCES[fmt](), deep_line(depth), SOURCES[fmt]()[-1]]
    src = write(tmp_path / "src.jsonl", lines)
    bad = len(lines) - 1
    with pytest.raises(MalformedLineError) as err:
        importers.import_file(fmt, str(src), str(tmp_path / "refused"))
    assert isinstance(err.value, JournalError), "a typed error of the package"
    assert err.value.lineno == bad and err.value.defect == "malformed"
    assert "nested deeper than" in str(err.value)
    assert not (tmp_path / "refused").exists()
    rep, out = roundtrip(src, tmp_path / "j", fmt, skip_bad=True)
    assert [(s["line"], s["defect"]) for s in rep.skipped] == [(bad, "malformed")]
    assert out == src.read_bytes(), "the deep line is kept verbatim and written back as it was"


def test_joined_values_with_a_lone_surrogate_or_too_deep(tmp_path: pathlib.Path) -> None:
    one, two = '{"type":"user_message","text":"a ' + CUT + '"}', '{"type":"x","v":1.50}'
    src = write(tmp_path / "src.jsonl", [one + two, deep_line(DEEP) + two])
    with pytest.raises(MalformedLineError) as err:
        importers.import_file("jsonl", str(src), str(tmp_path / "refused"), split_joined=True)
    assert err.value.lineno == 2 and "nested deeper than" in str(err.value)
    rep, out = roundtrip(src, tmp_path / "j", "jsonl", split_joined=True, skip_bad=True)
    assert rep.split == [1] and [s["line"] for s in rep.skipped] == [2]
    assert out.decode().splitlines() == [one, two, deep_line(DEEP) + two], "each piece comes back as written"


def test_codex_arguments_nested_too_deep_stay_a_string(tmp_path: pathlib.Path) -> None:
    args = json.dumps(deep_line(DEEP))  # the arguments field is JSON text inside the line's JSON
    line = ('{"timestamp":"2026-01-02T16:39:46Z","type":"response_item","payload":{"type":"function_call",'
            '"name":"shell","call_id":"call_9","arguments":' + args + "}}")
    cut_args = json.dumps('{"cmd":"echo ' + CUT + '"}')
    line2 = line.replace(args, cut_args).replace("call_9", "call_10")
    src = write(tmp_path / "src.jsonl", [*SOURCES["codex"](), line, line2])
    _, out = roundtrip(src, tmp_path / "j", "codex")
    assert out == src.read_bytes()
    from journal import session

    with session.open(tmp_path / "j", readonly=True) as s:
        calls = {e.tool_call_id: e.data["args"] for e in s.read() if e.type == "tool.requested"}
    assert calls["call_9"] == deep_line(DEEP), "too deep to parse: kept as the string it is"
    assert calls["call_10"] == {"cmd": "echo \ufffd"}


def test_a_line_the_journal_cannot_store_is_named_not_blamed_on_free_space(tmp_path: pathlib.Path) -> None:
    """A content error while writing (here: a line over the record size limit) names its line."""
    big = '{"type":"user_message","text":"' + "x" * (17 * 1024 * 1024) + '"}'
    src = write(tmp_path / "src.jsonl", [*SOURCES["jsonl"](), big])
    with pytest.raises(importers.UnstorableLineError) as err:
        importers.import_file("jsonl", str(src), str(tmp_path / "j"))
    assert err.value.lineno == len(SOURCES["jsonl"]()) + 1
    assert "free space" not in str(err.value) and "line 6" in str(err.value)
    assert not (tmp_path / "j").exists() and not [p for p in tmp_path.iterdir() if ".import-" in p.name]


def test_an_integer_json_will_not_convert_is_a_malformed_line(tmp_path: pathlib.Path) -> None:
    """Python's json refuses an integer of more than 4,300 digits with a plain ValueError."""
    src = write(tmp_path / "src.jsonl", [*SOURCES["jsonl"](), '{"type":"x","n":1' + "0" * 5000 + "}"])
    with pytest.raises(MalformedLineError) as err:
        importers.import_file("jsonl", str(src), str(tmp_path / "refused"))
    assert err.value.lineno == len(SOURCES["jsonl"]()) + 1 and "digits" in err.value.reason
    _, out = roundtrip(src, tmp_path / "j", "jsonl", skip_bad=True)
    assert out == src.read_bytes()


def test_the_session_layer_refuses_an_id_cut_mid_character_with_a_typed_error(tmp_path: pathlib.Path) -> None:
    from journal import session
    from journal.session.errors import EnvelopeError

    with session.open(tmp_path / "s", create=True) as s:
        with pytest.raises(EnvelopeError, match="lone UTF-16 surrogate"):
            s.append("tool.requested", data={"tool": "t"}, tool_call_id="call-\ud83d")
        with pytest.raises(JournalError):  # the engine's EventNotSerializableError
            s.append("user.message", data={"text": "cut \ud83d"})


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "journal.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_import_of_the_odd_lines(tmp_path: pathlib.Path) -> None:
    src = write(tmp_path / "src.jsonl", [*SOURCES["claude"](), CUT_LINES["claude"]])
    p = cli("import", "claude", str(src), str(tmp_path / "a"))
    assert p.returncode == 0, p.stderr
    assert f"line {len(SOURCES['claude']()) + 1}: " in p.stdout and "U+FFFD" in p.stdout
    deep = write(tmp_path / "deep.jsonl", [*SOURCES["claude"](), deep_line(DEEP)])
    p = cli("import", "claude", str(deep), str(tmp_path / "b"))
    assert p.returncode == 3, p.stderr
    assert f"line {len(SOURCES['claude']()) + 1}: malformed: nested deeper than" in p.stderr
    assert "Traceback" not in p.stderr and "free space" not in p.stderr
    p = cli("import", "claude", str(deep), str(tmp_path / "c"), "--skip-bad", "--json")
    assert p.returncode == 0, p.stderr
    assert [s["line"] for s in json.loads(p.stdout)["skipped"]] == [len(SOURCES["claude"]()) + 1]


CORPUS_DIRS = {"claude-code": "claude", "codex-rollout": "codex", "pi-session": "pi"}


def corpus_sources() -> list[tuple[str, pathlib.Path]]:
    if not CORPUS.is_dir():
        return []
    return [(fmt, p) for d, fmt in CORPUS_DIRS.items() for p in sorted((CORPUS / d).glob("*.jsonl"))
            if "pi-mono" not in p.name]  # that one has a joined line: tests/test_import_export.py


@needs_corpus
@pytest.mark.parametrize(("fmt", "path"), corpus_sources(), ids=lambda v: str(v)[-30:])
def test_real_logs_with_a_string_cut_mid_emoji_and_a_deep_line(tmp_path: pathlib.Path, fmt: str,
                                                                path: pathlib.Path) -> None:
    """The real corpus, with the two oddities put into real lines: the first string value of every
    tenth line gets a lone high surrogate; a line nested 100,000 deep is added at the end."""
    lines = path.read_bytes().split(b"\n")
    cut = [re.sub(rb'(:\s*")', lambda m: m.group(1) + CUT.encode(), ln, count=1) if i % 10 == 0 else ln
           for i, ln in enumerate(lines)]
    assert cut != lines
    src = tmp_path / "src.jsonl"
    src.write_bytes(b"\n".join(cut))
    rep, out = roundtrip(src, tmp_path / "j", fmt)
    assert out == src.read_bytes() and rep.replaced
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(src.read_bytes().rstrip(b"\n") + b"\n" + deep_line(DEEP).encode() + b"\n")
    with pytest.raises(MalformedLineError) as err:
        importers.import_file(fmt, str(deep), str(tmp_path / "no"))
    assert err.value.lineno == len(src.read_bytes().rstrip(b"\n").split(b"\n")) + 1
    rep, out = roundtrip(deep, tmp_path / "k", fmt, skip_bad=True)
    assert out == deep.read_bytes() and len(rep.skipped) == 1


# --- 15: sessions created at once in a new store ------------------------------------------------

CREATORS = 6
ROUNDS = 4


def _create(kind: str, root: str, barrier: Any, results: Any, i: int) -> None:
    from journal.engine.store import DirectoryStore
    from journal.session.store import SessionStore

    barrier.wait()
    try:
        if kind == "sessions":
            SessionStore(root).create(workspace={"i": i}).close()
        elif kind == "one-id":
            SessionStore(root).create(workspace={"i": i}, session_id="s-one").close()
        else:
            DirectoryStore(root).open(f"j{i}", create=True).close()
        results.put("ok")
    except BaseException as exc:  # reported to the parent, which fails the test with it
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("kind", ["sessions", "directory-store"])
def test_processes_creating_at_once_in_a_new_store_all_succeed(tmp_path: pathlib.Path, kind: str) -> None:
    ctx = multiprocessing.get_context("fork")
    for r in range(ROUNDS):
        # A session store's root is made in an existing parent; a DirectoryStore makes its parents.
        root = tmp_path / f"store{r}" if kind == "sessions" else tmp_path / f"store{r}" / "a" / "b"
        barrier, results = ctx.Barrier(CREATORS), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(kind, str(root), barrier, results, i)) for i in range(CREATORS)]
        for p in procs:
            p.start()
        got = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert got == ["ok"] * CREATORS, got
    if kind == "sessions":
        from journal.session.store import SessionStore

        assert len(SessionStore(tmp_path / "store0").list()) == CREATORS


def test_processes_creating_one_id_at_once_one_wins_the_others_are_told(tmp_path: pathlib.Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for r in range(ROUNDS):
        barrier, results = ctx.Barrier(CREATORS), ctx.Queue()
        procs = [ctx.Process(target=_create, args=("one-id", str(tmp_path / f"s{r}"), barrier, results, i))
                 for i in range(CREATORS)]
        for p in procs:
            p.start()
        got = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        assert got.count("ok") == 1, got
        assert all(g.startswith("SessionExistsError") for g in got if g != "ok"), got


def test_a_build_under_way_is_left_alone_a_leftover_is_removed(tmp_path: pathlib.Path) -> None:
    """The forced interleaving of the race above: another creator of the same id is building
    (it holds its build's lock) while this one looks for leftovers of that id."""
    from journal.session.store import SessionExistsError, SessionStore

    store = SessionStore(tmp_path / "s")
    new = tmp_path / "s" / "sessions" / ".new"
    new.mkdir(exist_ok=True)
    leftover, busy = new / "s-one.new-0000dead", new / "s-one.new-0000beef"
    leftover.mkdir()
    (leftover / "f").write_bytes(b"x")
    busy.mkdir()
    held = OsFileSystem().try_lock(str(busy) + ".lock")
    assert held is not None
    try:
        store.create(session_id="s-one").close()
        assert busy.is_dir() and not leftover.exists(), "the build under way stays, the leftover goes"
    finally:
        held.release()
    # That creator publishes a moment later, onto the session this one made: it is told so.
    (busy / "journal").mkdir()
    with pytest.raises(SessionExistsError):
        store._publish(str(busy), "s-one")


class LateFS(OsFileSystem):
    """Another creator makes each shared directory (one every creator in a new store makes, not
    a build's own temporary one) between our look and our mkdir: forced, no timing. Records
    each directory fsync."""

    def __init__(self, shared: set[pathlib.Path]) -> None:
        super().__init__()
        self.shared = {str(p) for p in shared}
        self.raced: set[str] = set()
        self.synced: list[str] = []

    def mkdir(self, path: str) -> None:
        if path in self.shared and path not in self.raced:
            self.raced.add(path)
            os.mkdir(path, 0o700)  # the other creator wins
        super().mkdir(path)

    def fsync_dir(self, path: str) -> None:
        self.synced.append(path)
        super().fsync_dir(path)


def test_make_dirs_takes_a_directory_made_meanwhile_and_syncs_it(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "x" / "y"
    fs = LateFS({tmp_path / "x", target})
    make_dirs(fs, str(target))
    assert target.is_dir() and fs.raced == fs.shared
    assert fs.synced == [str(tmp_path), str(tmp_path / "x")], "each entry is made durable either way"


def test_make_dirs_refuses_a_file_made_meanwhile(tmp_path: pathlib.Path) -> None:
    class FileFirst(OsFileSystem):
        def mkdir(self, path: str) -> None:
            pathlib.Path(path).write_bytes(b"")
            super().mkdir(path)

    with pytest.raises(FileExistsError):
        make_dirs(FileFirst(), str(tmp_path / "x"))


def test_session_store_and_directory_store_take_directories_made_meanwhile(tmp_path: pathlib.Path) -> None:
    from journal.engine.store import DirectoryStore
    from journal.session.store import SessionStore

    root = tmp_path / "s"
    fs = LateFS({root, root / "sessions", root / "archive", root / "sessions" / ".new"})
    store = SessionStore(root, fs=fs)
    store.create().close()
    assert len(store.list()) == 1 and fs.raced == fs.shared
    assert {str(root), str(root / "sessions"), str(tmp_path)} <= set(fs.synced)
    fs2 = LateFS({tmp_path / "d", tmp_path / "d" / "e"})
    DirectoryStore(tmp_path / "d" / "e", fs=fs2).open("j", create=True).close()
    assert fs2.raced == fs2.shared


# --- 16: the crash harness calls check= ---------------------------------------------------------


@pytest.fixture
def scratch_workloads() -> Any:
    from journal.crashsim.workloads import WORKLOADS

    before = dict(WORKLOADS)
    yield WORKLOADS
    WORKLOADS.clear()
    WORKLOADS.update(before)


def test_a_workload_check_is_called_for_every_crash_state_and_reported(scratch_workloads: Any) -> None:
    from journal.crashsim import campaign
    from journal.crashsim.workloads import Ctx, Ledger, workload
    from journal.engine.reader import Record

    calls: list[tuple[int, int]] = []

    def always(records: list[Record], ledger: Ledger) -> list[str]:
        calls.append((len(records), len(ledger.attempts)))
        return ["the check says no"]

    @workload("review29-always-fails", check=always)
    def run(ctx: Ctx) -> None:
        j = ctx.open()
        for _ in range(3):
            j.append(ctx.payload(), durability="sync")
        j.close()

    tallies = campaign.run_campaign(["review29-always-fails"], ["psow"], 30, seed=0)
    t = tallies[0]
    assert t.states == 30
    assert len(calls) == t.states, "called once for every crash state"
    assert t.violations == t.states
    assert all(f.violations == ["workload check: the check says no"] for f in t.failures)


def test_the_command_reports_a_failing_check_and_replays_it(scratch_workloads: Any, tmp_path: pathlib.Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from journal.cli import main
    from journal.crashsim.workloads import Ctx, Ledger, workload
    from journal.engine.reader import Record

    def no_turn_ends(records: list[Record], ledger: Ledger) -> list[str]:
        return [f"{len(records)} record(s) read back, {len(ledger.attempts)} appended: never enough"]

    @workload("review29-never-enough", check=no_turn_ends)
    def run(ctx: Ctx) -> None:
        with ctx.open() as j:
            j.append(ctx.payload(), durability="sync")

    code = main(["crash-test", "--workload", "review29-never-enough", "--model", "psow", "--states", "5",
                 "--no-faults", "--kill-rounds", "0", "--save-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "FAILED: 5 violation(s)" in out and "workload check: " in out, out
    saved = sorted(tmp_path.glob("review29-never-enough-*.json"))
    assert len(saved) == 5
    assert main(["crash-test", "--replay", str(saved[-1])]) == 1
    assert "still failing:\n  - workload check: " in capsys.readouterr().out


def test_a_check_sees_the_ledger_as_it_stood_at_the_crash(scratch_workloads: Any) -> None:
    """Records acknowledged after the crash point are not in the check's ledger as acknowledged."""
    from journal.crashsim import campaign
    from journal.crashsim.workloads import Ctx, Ledger, workload
    from journal.engine.reader import Record
    from journal.outcomes import Committed

    problems: list[str] = []

    def every_ack_is_there(records: list[Record], ledger: Ledger) -> list[str]:
        read = {r.payload for r in records}
        missing = [a for a in ledger.attempts if isinstance(a.outcome, Committed) and a.outcome.durability == "sync"
                   and a.payload not in read]
        problems.extend(f"missing {a.payload[:20]!r}" for a in missing)
        return [f"{len(missing)} acknowledged record(s) missing"] if missing else []

    @workload("review29-acks", check=every_ack_is_there)
    def run(ctx: Ctx) -> None:
        j = ctx.open()
        for _ in range(4):
            j.append(ctx.payload(), durability="sync")
        j.close()

    tallies = campaign.run_campaign(["review29-acks"], ["psow", "npsow"], 60, seed=1)
    assert [t.violations for t in tallies] == [0, 0], (problems[:3], tallies[0].failures[:1])


def crash_testing_example() -> str:
    text = (REPO / "docs" / "CRASH-TESTING.md").read_text()
    section = text[text.index("## 5. Pointing the harness at your own code"):]
    blocks: list[str] = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "section 5 holds one example"
    return blocks[0]


def test_the_crash_testing_doc_example_runs_and_its_check_is_called(scratch_workloads: Any) -> None:
    """docs/CRASH-TESTING.md's example, extracted from the markdown and run as written."""
    from journal.crashsim import campaign

    steps: list[int] = []
    namespace: dict[str, Any] = {"run_my_agent_step": lambda j: steps.append(j.append(
        {"type": "agent_step", "n": len(steps)}, durability="sync").seq)}
    exec(compile(crash_testing_example(), "docs/CRASH-TESTING.md", "exec"), namespace)
    wl = scratch_workloads["my-runtime"]
    assert wl.check is not None, "the example shows check="
    calls: list[int] = []
    real = wl.check

    def counted(records: Any, ledger: Any) -> list[str]:
        calls.append(1)
        found: list[str] = real(records, ledger)
        return found

    scratch_workloads["my-runtime"] = type(wl)(wl.name, wl.run, wl.options, wl.recover, counted, wl.prepare)
    tallies = campaign.run_campaign(["my-runtime"], ["psow", "npsow"], 40, seed=0)
    assert [t.violations for t in tallies] == [0, 0], tallies[0].failures[:1]
    assert steps and len(calls) == sum(t.states for t in tallies) == 80


def test_a_lock_file_unlinked_before_it_is_locked_is_not_held(tmp_path: pathlib.Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by CI (the race above, 1 run in 2): a creator opened its new build's lock file,
    another creator's sweep of leftovers locked that file first, found no build yet, let it go and
    unlinked it; the first then took the flock on an inode no name led to, built its session, and
    a third creator's sweep, finding a build with no lock file beside it, made a new one, locked it
    and removed the build under its creator (JournalIOError: No such file). The lock that counts
    is the one at the name: try_lock says "not held" when the file it locked is gone."""
    import fcntl

    from journal import fs as fs_mod

    path = str(tmp_path / "x.lock")
    real = fcntl.flock

    def unlinked_first(fd: int, op: int) -> None:
        monkeypatch.setattr(fs_mod.fcntl, "flock", real)
        os.unlink(path)  # the sweep's unlink lands between this open and this flock
        real(fd, op)

    monkeypatch.setattr(fs_mod.fcntl, "flock", unlinked_first)
    assert fs_mod.OsFileSystem().try_lock(path) is None
    held = fs_mod.OsFileSystem().try_lock(path)  # the file at the name now
    assert held is not None
    held.release()


def test_a_build_lock_is_unlinked_while_it_is_held(tmp_path: pathlib.Path) -> None:
    """Once a build's lock is let go its file must no longer be at its name, or a sweep of
    leftovers could lock it and take the build for a leftover (see the test above)."""
    from journal.fs import OsFileSystem
    from journal.session.store import BUILD_LOCK_SUFFIX, SessionStore

    events: list[str] = []

    class Recording(OsFileSystem):
        def try_lock(self, path: str) -> Any:
            lock = super().try_lock(path)
            if lock is None or not path.endswith(BUILD_LOCK_SUFFIX) or "/.new/" not in path:
                return lock
            release = lock.release

            def recorded() -> None:
                events.append("release")
                release()

            lock.release = recorded
            return lock

        def unlink(self, path: str) -> None:
            if path.endswith(BUILD_LOCK_SUFFIX) and "/.new/" in path:
                events.append("unlink")
            super().unlink(path)

    store = SessionStore(tmp_path / "s", fs=Recording())
    store.create(session_id="s-one").close()
    assert events == ["unlink", "release"], events


def test_a_failing_look_at_the_lock_files_name_releases_the_lock(tmp_path: pathlib.Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """try_lock's look at the name after the flock (the check above) may fail (EIO, EACCES): the
    error goes to the caller and the descriptor, and with it the flock, is let go, so the next
    try takes the lock."""
    import errno

    from journal import fs as fs_mod

    path = str(tmp_path / "x.lock")
    real = os.stat

    def failing(p: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(p) == path:
            raise OSError(errno.EIO, "injected")
        return real(p, *args, **kwargs)

    monkeypatch.setattr(fs_mod.os, "stat", failing)
    with pytest.raises(OSError, match="injected"):
        fs_mod.OsFileSystem().try_lock(path)
    monkeypatch.setattr(fs_mod.os, "stat", real)
    held = fs_mod.OsFileSystem().try_lock(path)
    assert held is not None  # the failed try held nothing
    held.release()
