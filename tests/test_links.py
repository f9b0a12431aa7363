"""Links: a symbolic link planted at every path the engine touches, for every command.

Whoever can write where a journal, a store or a destination lives (a shared directory, /tmp,
a journal handed over by someone else) can put a symbolic link where the engine expects a file
or a directory of its own. Each case here plants one, pointing into a victim tree outside
(files, a directory, a journal, dangling names that would be created), runs a command, and
checks that nothing in the victim tree changed (every name, kind, mode, byte and link target)
and that the command gave a correct result or a typed JournalError (the CLI: its documented
exit code with a JournalError's type). docs/GUARANTEES.md, "Links", states the rule: the paths
a caller gives are followed as the OS resolves them; nothing the engine names inside them is.

The journal's cases run every command on every site (sites x commands); the store's, the
destination's and the session store's run the operations that touch their site. In-process and
on small journals: the whole file takes seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pathlib
import shutil
import stat
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import journal
from journal.cli import main as cli_main
from journal.engine import format as fmt
from journal.engine.store import TRASH_DIR, DirectoryStore
from journal.errors import JournalError, UnexpectedFileError, UnexpectedLinkError
from journal.fs import LOCK_NOTE_BYTES, OsFileSystem, remove_tree, temp_dir_beside
from journal.session import snapshot
from journal.session.fork import ForkReducer
from journal.session.store import INDEX_FILE, INDEX_LOCK, SessionStore
from tests.conftest import segments
from tests.session_gen import write_session

TORN = b"torn bytes"  # appended to a live segment: a torn tail that a writer's open quarantines and cuts

# --- the victim tree -----------------------------------------------------------------------


def fingerprint(root: pathlib.Path) -> dict[str, tuple[Any, ...]]:
    """Every name under ``root`` (links not followed) with its kind, mode and content, and a
    file's link count (a hard link made to it elsewhere is a change too)."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                digest = hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_nlink, digest)
    return out


class Victim:
    """Files, a directory tree, a segment and a whole journal outside everything the engine
    was given, and names that do not exist yet (a link to one would create it)."""

    def __init__(self, root: pathlib.Path, journal_template: pathlib.Path) -> None:
        self.root = root
        root.mkdir()
        self.file = root / "file.txt"
        self.file.write_bytes(b"precious\n" * 100)  # longer than a lock note, so an overwrite shows
        self.dir = root / "dir"
        (self.dir / "sub").mkdir(parents=True)
        (self.dir / "a.txt").write_bytes(b"a" * 10)
        (self.dir / "sub" / "b.txt").write_bytes(b"b" * 10)
        segs = segments(journal_template)
        self.seg = root / "live.seg"  # the journal's live segment with its torn tail
        self.seg.write_bytes(segs[-1].read_bytes())
        self.sealed = root / "sealed.seg"
        self.sealed.write_bytes(segs[0].read_bytes())
        self.journal = root / "journal"  # a whole journal of the victim's
        shutil.copytree(journal_template, self.journal, symlinks=True)
        self.before = fingerprint(root)

    def new(self, name: str) -> pathlib.Path:
        """A name in the victim tree that does not exist: a link to it is dangling."""
        return self.root / f"new-{name}"

    def unchanged(self) -> None:
        after = fingerprint(self.root)
        changed = sorted(k for k in set(self.before) | set(after) if self.before.get(k) != after.get(k))
        assert not changed, f"outside the journal, changed: {changed}"


def plant(at: pathlib.Path, target: pathlib.Path) -> None:
    """Put a symbolic link to ``target`` at ``at``, in place of whatever was there."""
    if at.is_symlink() or at.is_file():
        at.unlink()
    elif at.is_dir():
        shutil.rmtree(at)
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(target)


# --- outcomes --------------------------------------------------------------------------------


def _journal_error_names() -> set[str]:
    names: set[str] = set()
    todo: list[type] = [JournalError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def cli(*argv: str) -> tuple[int, str]:
    """``journal ARGV --json`` in this process: (exit code, stdout). A failure must be a typed
    JournalError: the error document's type is checked here."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([*argv, "--json"]) if argv[0] != "cat" else cli_main(list(argv))
    lines = err.getvalue().strip().splitlines()
    if code != 0 and lines:  # an error (a verdict, such as verify's, is stdout's document)
        if argv[0] == "cat":
            assert lines[-1].startswith("journal cat: "), err.getvalue()
        else:
            doc = json.loads(lines[-1])
            assert doc.get("errorType") in _journal_error_names(), f"journal {argv[0]}: untyped failure {doc}"
    return code, out.getvalue()


@contextlib.contextmanager
def typed() -> Iterator[list[BaseException]]:
    """Run an API call: it returns, or raises a JournalError (kept in the list); anything else
    is a failure of the test."""
    caught: list[BaseException] = []
    try:
        yield caught
    except JournalError as exc:
        caught.append(exc)


# --- the journal: every site x every command -------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A session's journal over several segments, its live segment ending in a torn tail."""
    path = tmp_path_factory.mktemp("links") / "template"
    write_session(str(path), seed=3, turns=4).close()
    with open(segments(path)[-1], "ab") as f:
        f.write(TORN)
    return path


@pytest.fixture(scope="module")
def expected(template: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a clean run learns of the template: its records, and the name recovery gives the
    bytes it cuts (for the quarantine-file site)."""
    copy = tmp_path_factory.mktemp("links-expected") / "j"
    shutil.copytree(template, copy)
    with journal.open(str(copy), readonly=True) as r:
        records = [(rec.seq, rec.payload) for rec in r.read()]
    with journal.open(str(copy)) as w:
        quarantined = list(w.recovery.quarantined)
    assert len(quarantined) == 1 and len(segments(template)) >= 3
    return {"records": records, "quarantined": quarantined[0], "last_seq": records[-1][0]}


def _live(j: pathlib.Path) -> pathlib.Path:
    return segments(j)[-1]


# Each site: (where, relative to the journal) -> the victim it points at.
JOURNAL_SITES: dict[str, Callable[[pathlib.Path, Victim, dict[str, Any]], None]] = {
    "LOCK": lambda j, v, e: plant(j / "LOCK", v.file),
    "LOCK-dangling": lambda j, v, e: plant(j / "LOCK", v.new("lock")),
    "live-segment": lambda j, v, e: plant(_live(j), v.seg),
    "sealed-segment": lambda j, v, e: plant(segments(j)[0], v.sealed),
    "segment-name-dangling": lambda j, v, e: plant(j / fmt.segment_name(e["last_seq"] + 1), v.new("seg")),
    "segment-tmp": lambda j, v, e: plant(j / (_live(j).name + ".tmp"), v.seg),
    "next-segment-tmp": lambda j, v, e: plant(j / (fmt.segment_name(e["last_seq"] + 1) + ".tmp"), v.new("tmp")),
    "quarantine-dir": lambda j, v, e: plant(j / "quarantine", v.dir),
    "quarantine-file": lambda j, v, e: plant(j / e["quarantined"], v.file),
    "START": lambda j, v, e: plant(j / fmt.START_FILE, v.file),
    "START.tmp": lambda j, v, e: plant(j / (fmt.START_FILE + ".tmp"), v.file),
    "journal-dir-file": lambda j, v, e: plant(j / "notes.txt", v.file),  # a stranger's link: never touched
}


def _open_writer(j: str, out: pathlib.Path, e: dict[str, Any]) -> None:
    with typed(), journal.open(j) as w:
        assert w.last_seq == e["last_seq"]


def _append_and_roll(j: str, out: pathlib.Path, e: dict[str, Any]) -> None:
    with typed(), journal.open(j) as w:
        for i in range(12):  # past a 4 KiB segment: a roll-over onto a new segment
            assert isinstance(w.append({"i": i, "pad": "p" * 400}), journal.Committed)


def _readonly(j: str, out: pathlib.Path, e: dict[str, Any]) -> None:
    with typed(), journal.open(j, readonly=True) as r:
        assert [(rec.seq, rec.payload) for rec in r.read()] == e["records"]
        assert r.get(1) is not None


def _drop_prefix(j: str, out: pathlib.Path, e: dict[str, Any]) -> None:
    with typed(), journal.Journal.open(j) as w:  # the file engine's class: it has drop_prefix
        w.drop_prefix(e["last_seq"] // 2)


def _command(name: str, dest: str | None = None) -> Callable[[str, pathlib.Path, dict[str, Any]], None]:
    """``journal NAME JOURNAL [out/DEST]``; cli() checks that a failure is typed."""

    def run(j: str, out: pathlib.Path, e: dict[str, Any]) -> None:
        cli(name, j, *([str(out / dest)] if dest else []))

    return run


JOURNAL_COMMANDS: dict[str, Callable[[str, pathlib.Path, dict[str, Any]], None]] = {
    "open": _open_writer,
    "append": _append_and_roll,
    "readonly": _readonly,
    "drop_prefix": _drop_prefix,
    "repair": _command("repair"),
    "verify": _command("verify"),
    "salvage": _command("salvage", "salvaged"),
    "cat": _command("cat"),
    "info": _command("info"),
    "copy": _command("copy", "copied"),
    "fork": _command("fork", "child"),
}


@pytest.mark.parametrize("command", sorted(JOURNAL_COMMANDS))
@pytest.mark.parametrize("site", sorted(JOURNAL_SITES))
def test_a_link_in_a_journal_reaches_nothing_outside(
    site: str, command: str, template: pathlib.Path, expected: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    victim = Victim(tmp_path / "victim", template)
    j = tmp_path / "j"
    shutil.copytree(template, j)
    JOURNAL_SITES[site](j, victim, expected)
    out = tmp_path / "out"
    out.mkdir()
    JOURNAL_COMMANDS[command](str(j), out, expected)
    victim.unchanged()


def test_a_refusal_names_the_link_and_says_what_to_do(template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    victim = Victim(tmp_path / "victim", template)
    j = tmp_path / "j"
    shutil.copytree(template, j)
    plant(j / "LOCK", victim.file)
    with pytest.raises(UnexpectedLinkError) as info:
        journal.open(str(j))
    assert info.value.path == str(j / "LOCK") and "symbolic link" in str(info.value)
    assert "move it away" in str(info.value) and isinstance(info.value, OSError)
    os.unlink(j / "LOCK")
    plant(j / "quarantine", victim.dir)
    with pytest.raises(UnexpectedLinkError, match="quarantine"):
        journal.open(str(j))
    victim.unchanged()


def test_a_link_at_a_quarantine_name_is_not_taken_for_the_bytes_kept_aside(
    template: pathlib.Path, expected: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """Recovery keeps cut bytes in quarantine/ before it cuts them; a name there that is a link
    (to anything) holds none of them, so the segment must not be cut on the strength of it."""
    victim = Victim(tmp_path / "victim", template)
    j = tmp_path / "j"
    shutil.copytree(template, j)
    plant(j / expected["quarantined"], victim.file)
    with pytest.raises(UnexpectedLinkError):
        journal.open(str(j))
    assert _live(j).read_bytes().endswith(TORN)  # nothing cut
    victim.unchanged()


def test_a_fifo_where_a_segment_is_expected_is_refused_not_waited_on(
    template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    j = tmp_path / "j"
    shutil.copytree(template, j)
    live = _live(j)
    live.unlink()
    os.mkfifo(live)  # an open to read it would wait for a writer forever
    for readonly in (True, False):
        with pytest.raises(UnexpectedFileError, match="FIFO"):
            journal.open(str(j), readonly=readonly)


def test_the_journal_directory_itself_may_be_a_link(template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """/var/lib/agent -> /data/agent: the path the caller gives is followed, links and all."""
    real = tmp_path / "data" / "agent"
    shutil.copytree(template, real)
    (tmp_path / "var").mkdir()
    link = tmp_path / "var" / "agent"
    link.symlink_to(real)
    through = tmp_path / "via" / "agent"  # a link above it too
    (tmp_path / "via").symlink_to(tmp_path / "data")
    for path in (link, through):
        with journal.open(str(path)) as w:
            assert isinstance(w.append({"x": 1}), journal.Committed)
        with journal.open(str(path), readonly=True) as r:
            assert r.last_seq == w.last_seq
    code, _ = cli("verify", "--no-session", str(link))
    assert code == 0
    new = tmp_path / "new-link"
    (tmp_path / "new-target").mkdir()
    new.symlink_to(tmp_path / "new-target")
    with journal.open(str(new), create=True) as w:  # an empty directory, through a link
        w.append({"y": 1})
    assert segments(tmp_path / "new-target")


# --- a store ---------------------------------------------------------------------------------


def _store(root: pathlib.Path) -> DirectoryStore:
    s = DirectoryStore(str(root))
    with s.open("a", create=True, segment_size_bytes=4096) as j:
        j.append_many([{"i": i} for i in range(20)])
    return s


STORE_SITES: dict[str, Callable[[pathlib.Path, Victim], None]] = {
    ".trash": lambda s, v: plant(s / TRASH_DIR, v.dir),
    ".trash/entry": lambda s, v: plant(s / TRASH_DIR / "a.0badf00d", v.dir),
    ".trash/entry/sub": lambda s, v: plant(s / TRASH_DIR / "a.0badf00d" / "sub", v.dir),
    ".trash/entry/LOCK": lambda s, v: plant(s / TRASH_DIR / "a.0badf00d" / "LOCK", v.file),
    "build-leftover": lambda s, v: plant(s / ".b.new-0badf00d", v.dir),
    "build-leftover/sub": lambda s, v: plant(s / ".b.new-0badf00d" / "sub", v.dir),
    "build-leftover/LOCK": lambda s, v: plant(s / ".b.new-0badf00d" / "LOCK", v.file),
    "copy-leftover": lambda s, v: plant(s / ".b.copy-0badf00d", v.dir),
    "copy-leftover/LOCK": lambda s, v: plant(s / ".b.copy-0badf00d" / "LOCK", v.file),
    "journal/LOCK": lambda s, v: plant(s / "a" / "LOCK", v.file),
    "journal": lambda s, v: plant(s / "a", v.journal),
    "target": lambda s, v: plant(s / "b", v.journal),
}


def _store_ops(root: str) -> None:
    with typed():
        s = DirectoryStore(root)  # empties .trash
        s.names()
        s.exists("a")
    with typed(), DirectoryStore(root).open("a") as j:
        j.append({"more": 1})
    with typed():
        DirectoryStore(root).open("b", create=True).close()
    with typed():
        DirectoryStore(root).delete("b")
    with typed():
        DirectoryStore(root).copy("a", "b")
    with typed():
        DirectoryStore(root).delete("a")


@pytest.mark.parametrize("site", sorted(STORE_SITES))
def test_a_link_in_a_store_reaches_nothing_outside(site: str, template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    victim = Victim(tmp_path / "victim", template)
    root = tmp_path / "store"
    _store(root)
    STORE_SITES[site](root, victim)
    _store_ops(str(root))
    victim.unchanged()


def test_a_store_deletes_a_link_itself_and_never_what_it_points_to(
    template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    victim = Victim(tmp_path / "victim", template)
    root = tmp_path / "store"
    s = _store(root)
    plant(root / "b", victim.journal)
    assert s.names() == ["a"] and not s.exists("b")
    with pytest.raises(UnexpectedLinkError):
        s.open("b")
    s.delete("b")
    assert not (root / "b").is_symlink()
    victim.unchanged()


# --- a destination: salvage's and import's leftovers beside it --------------------------------


def _leftover(parent: pathlib.Path, tag: str) -> pathlib.Path:
    return parent / f".dest.{tag}-0badf00d"


DEST_SITES: dict[str, Callable[[pathlib.Path, str, Victim], None]] = {
    "leftover": lambda p, tag, v: plant(_leftover(p, tag), v.dir),
    "leftover/sub": lambda p, tag, v: plant(_leftover(p, tag) / "sub", v.dir),
    "leftover/LOCK": lambda p, tag, v: plant(_leftover(p, tag) / "LOCK", v.file),
    "leftover/LOCK-dangling": lambda p, tag, v: plant(_leftover(p, tag) / "LOCK", v.new("lock")),
}


def _jsonl(path: pathlib.Path) -> pathlib.Path:
    path.write_text("".join(json.dumps({"type": "message", "role": "user", "content": f"hi {i}"}) + "\n"
                            for i in range(5)))
    return path


@pytest.mark.parametrize("tag", ["salvage", "import"])
@pytest.mark.parametrize("site", sorted(DEST_SITES))
def test_a_link_beside_a_destination_reaches_nothing_outside(
    site: str, tag: str, template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    victim = Victim(tmp_path / "victim", template)
    parent = tmp_path / "shared"  # /tmp, say: anyone may write here
    parent.mkdir()
    DEST_SITES[site](parent, tag, victim)
    if tag == "salvage":
        code, _ = cli("salvage", str(template), str(parent / "dest"))
    else:
        code, _ = cli("import", "jsonl", str(_jsonl(tmp_path / "log.jsonl")), str(parent / "dest"))
    assert code in (0, 8)
    assert segments(parent / "dest")
    victim.unchanged()


def test_an_import_source_and_a_destination_given_as_links_are_followed(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "link.jsonl"
    source.symlink_to(_jsonl(tmp_path / "log.jsonl"))
    (tmp_path / "real-dest").mkdir()
    (tmp_path / "dest").symlink_to(tmp_path / "real-dest")
    code, _ = cli("import", "jsonl", str(source), str(tmp_path / "dest"))
    assert code == 0
    with journal.open(str(tmp_path / "dest"), readonly=True) as r:
        assert r.last_seq >= 5


def test_remove_tree_unlinks_a_link_met_anywhere_and_never_follows_it(tmp_path: pathlib.Path) -> None:
    victim = Victim(tmp_path / "victim", _fake_journal(tmp_path / "tpl"))
    tree = tmp_path / "tree"
    (tree / "d" / "e").mkdir(parents=True)
    (tree / "d" / "e" / "f").write_bytes(b"f")
    (tree / "to-dir").symlink_to(victim.dir)
    (tree / "d" / "to-file").symlink_to(victim.file)
    (tree / "d" / "e" / "dangling").symlink_to(victim.new("x"))
    remove_tree(OsFileSystem(), str(tree))
    assert not tree.exists()
    top = tmp_path / "top"
    top.symlink_to(victim.dir)
    remove_tree(OsFileSystem(), str(top))  # the link itself goes
    assert not top.is_symlink()
    victim.unchanged()


def test_remove_tree_by_path_on_another_file_layer_never_follows_a_link(tmp_path: pathlib.Path) -> None:
    """A file layer whose calls are wrapped (a test's hooks, the fault injector) is walked call by
    call through its own methods: the same rule."""
    from journal.crashsim.faults import FaultyFileSystem

    victim = Victim(tmp_path / "victim", _fake_journal(tmp_path / "tpl"))
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "to-dir").symlink_to(victim.dir)
    (tree / "to-file").symlink_to(victim.file)
    fs = FaultyFileSystem(OsFileSystem())
    remove_tree(fs, str(tree))
    assert not tree.exists() and fs.calls["unlink"] == 2 and fs.calls["rmdir"] == 2
    victim.unchanged()


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_followed(tmp_path: pathlib.Path) -> None:
    """The race a hostile leftover's owner can run: a directory already checked is replaced by a
    link before the walk enters it. On a real file system the walk goes by descriptors."""
    victim = Victim(tmp_path / "victim", _fake_journal(tmp_path / "tpl"))
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "x").write_bytes(b"x")
    real_stat = os.stat

    def swapping_stat(path: Any, *args: Any, **kw: Any) -> os.stat_result:
        st = real_stat(path, *args, **kw)
        if path == "d" and kw.get("dir_fd") is not None and (tree / "d").is_dir() and not (tree / "d").is_symlink():
            shutil.rmtree(tree / "d")
            (tree / "d").symlink_to(victim.dir)  # after the stat said "a directory"
        return st

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "stat", swapping_stat)
        remove_tree(OsFileSystem(), str(tree))
    assert not tree.exists()
    victim.unchanged()


def test_temp_dir_beside_skips_a_link_of_a_builds_name(tmp_path: pathlib.Path) -> None:
    victim = Victim(tmp_path / "victim", _fake_journal(tmp_path / "tpl"))
    parent = tmp_path / "shared"
    parent.mkdir()
    plant(parent / ".dest.salvage-0badf00d", victim.dir)
    tmp = temp_dir_beside(OsFileSystem(), str(parent / "dest"), "salvage", "LOCK")
    assert os.path.isdir(tmp) and not os.path.islink(tmp)
    assert (parent / ".dest.salvage-0badf00d").is_symlink()  # not ours: left where it is
    victim.unchanged()


def _fake_journal(path: pathlib.Path) -> pathlib.Path:
    with journal.open(str(path), create=True, segment_size_bytes=4096) as j:
        j.append_many([{"i": i, "pad": "x" * 200} for i in range(40)])
    return path


# --- a session store -------------------------------------------------------------------------


@pytest.fixture
def sstore(tmp_path: pathlib.Path) -> tuple[pathlib.Path, str, str]:
    """A session store with one closed session holding one artifact: (root, session id, the
    artifact's reference)."""
    root = tmp_path / "ss"
    st = SessionStore(str(root))
    s = st.create(workspace={"path": "/w"})
    sid = str(s.store_id)
    s.append("user.message", {"text": "hi"})
    s.close()
    ref = st.artifacts.put(b"artifact bytes")
    return root, sid, ref


def _session_ops(root: str, sid: str, ref: str) -> None:
    with typed():
        SessionStore(root).list()
    with typed():
        SessionStore(root).create(workspace={"path": "/w2"}).close()
    with typed(), SessionStore(root).open(sid) as s:
        s.append("user.message", {"text": "again"})
    with typed():
        st = SessionStore(root)
        assert st.artifacts.get(ref) == b"artifact bytes"
        st.artifacts.put(b"other bytes")
    with typed():
        st = SessionStore(root)
        with st.open(sid) as s:
            red = ForkReducer()
            snapshot.take(s.journal, st.registry, red, snapshot.snapshot_path(st.snapshots_dir(sid), red))
    with typed():
        SessionStore(root).fork(sid)
    with typed():
        SessionStore(root).archive(sid)
    with typed():
        SessionStore(root).rebuild_index()


def _artifact(root: pathlib.Path, ref: str) -> pathlib.Path:
    digest = ref.removeprefix("artifact://")
    return root / "artifacts" / digest[:2] / f"{digest}.zst"


SESSION_SITES: dict[str, Callable[[pathlib.Path, str, str, Victim], None]] = {
    "INDEX.lock": lambda r, sid, ref, v: plant(r / INDEX_LOCK, v.file),
    "INDEX.lock-dangling": lambda r, sid, ref, v: plant(r / INDEX_LOCK, v.new("index-lock")),
    "index.json": lambda r, sid, ref, v: plant(r / INDEX_FILE, v.file),
    "index-log": lambda r, sid, ref, v: plant(r / "index.log-0000000001", v.journal),
    "index-log-next": lambda r, sid, ref, v: plant(r / "index.log-0000000002", v.journal),
    "index-log/LOCK": lambda r, sid, ref, v: plant(r / "index.log-0000000001" / "LOCK", v.file),
    "sessions/.new": lambda r, sid, ref, v: plant(r / "sessions" / ".new", v.dir),
    "session-dir": lambda r, sid, ref, v: plant(r / "sessions" / sid, v.dir),
    "session-journal": lambda r, sid, ref, v: plant(r / "sessions" / sid / "journal", v.journal),
    "session-LOCK": lambda r, sid, ref, v: plant(r / "sessions" / sid / "journal" / "LOCK", v.file),
    "session-live-segment": lambda r, sid, ref, v: plant(_live(r / "sessions" / sid / "journal"), v.seg),
    "snapshots": lambda r, sid, ref, v: plant(r / "sessions" / sid / "snapshots", v.dir),
    "artifact-file": lambda r, sid, ref, v: plant(_artifact(r, ref), v.file),
    "artifact-shard": lambda r, sid, ref, v: plant(_artifact(r, ref).parent, v.dir),
    "artifacts/tmp": lambda r, sid, ref, v: plant(r / "artifacts" / "tmp", v.dir),
}


@pytest.mark.parametrize("site", sorted(SESSION_SITES))
def test_a_link_in_a_session_store_reaches_nothing_outside(
    site: str, sstore: tuple[pathlib.Path, str, str], template: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    root, sid, ref = sstore
    victim = Victim(tmp_path / "victim", template)
    SESSION_SITES[site](root, sid, ref, victim)
    _session_ops(str(root), sid, ref)
    victim.unchanged()


def test_a_lock_note_is_never_written_through_a_link(template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Defect 3 as the review found it: `journal repair` overwrote a file elsewhere with its pid."""
    victim = Victim(tmp_path / "victim", template)
    j = tmp_path / "j"
    shutil.copytree(template, j)
    plant(j / "LOCK", victim.file)
    code, _ = cli("repair", str(j))
    assert code != 0
    assert victim.file.read_bytes()[:LOCK_NOTE_BYTES] == b"precious\n" * 7 + b"p"
    victim.unchanged()
