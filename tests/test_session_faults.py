"""Every file-layer call of the session layer's own writes, failed in turn, keeps what a user is promised.

The core's call sites are swept in tests/test_faults.py and journal/crashsim/faultsweep.py; this
file sweeps the writes the session layer makes itself: snapshot files (snapshot.take), the
artifact store (put, gc), the session store (create, index writes, archive), fork (temp
directory, copy or link, header, rename, stale temp cleanup) and quarantine during recovery.

Each operation runs once over a fault-free FaultyFileSystem to count its calls; then, in a fresh
copy of the same starting directory, every (operation, call number) it made fails in turn (EIO;
ENOSPC too for pwrite; a short write) and the test checks that

* the operation reports the failure (raises a JournalError or an OSError), unless the call was
  a read or a best-effort cleanup that the operation is documented to absorb, and then its
  result is correct;
* nothing already committed is damaged (per operation, see each test);
* after clearing the fault, retrying succeeds; and across the failed run and the retry every
  name made (mkdir, rename, link) that still exists was followed by a successful fsync of its
  directory: a retry that finds a name the failed run made must not skip making it durable.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import random
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import journal
from journal.crashsim.faults import ADVISORY_NAMES, FaultyFileSystem, _Rule
from journal.fs import OsFileSystem
from journal.session import artifacts as art
from journal.session import fork as forking
from journal.session import snapshot
from journal.session.reducer import SessionReducer
from journal.session.registry import Registry
from journal.session.session import Appended
from journal.session.store import SessionStore
from tests.conftest import live_segment, snapshot_files
from tests.session_gen import FIXED_TIME, add_turns, write_session

REG = Registry()
SWEPT_OPS = (
    "open_read",
    "open_write",
    "pwrite",
    "short_write",
    "fsync",
    "fdatasync",
    "truncate",
    "rename",
    "unlink",
    "mkdir",
    "fsync_dir",
    "listdir",
    "link",
)
READ_OPS = frozenset({"open_read", "listdir"})
# Appends grow the live segment's reserved space ahead of the data, and close cuts it off: both
# are truncates that may fail without harm (the write grows the file itself; recovery cuts the
# zeros). The quarantine sweep, whose truncate is recovery's cut, keeps truncate unabsorbable.
ABSORBABLE = READ_OPS | {"truncate"}
FAILED = (journal.JournalError, OSError)

Site = tuple[str, int, int]  # (operation, call number, errno)


class LoggingFS(FaultyFileSystem):
    """FaultyFileSystem over the real one that also logs, with paths, what reached the disk.

    ``log`` holds (what, path): ``made`` (mkdir), ``renamed`` (the rename's target), ``linked``,
    ``synced`` (a directory fsync that succeeded), ``truncate`` (a truncate about to run). It
    offers ``link`` so a fork links sealed segments through it, as it does on OsFileSystem.
    """

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.log: list[tuple[str, str]] = []

    def fail(self, op: str, err: int = errno.EIO, after: int = 0, times: int = 1) -> None:
        if op == "link":
            self._rules.append(_Rule(op, err, after, times))
        else:
            super().fail(op, err, after, times)

    def check(self, op: str, path: str) -> None:
        super().check(op, path)
        if op == "truncate":
            self.log.append(("truncate", path))

    def mkdir(self, path: str) -> None:
        super().mkdir(path)
        self.log.append(("made", os.path.abspath(path)))

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.log.append(("renamed", os.path.abspath(dst)))

    def link(self, src: str, dst: str) -> None:
        self.check("link", src)
        os.link(src, dst)
        self.log.append(("linked", os.path.abspath(dst)))

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        self.log.append(("synced", os.path.abspath(path)))


def unsynced(log: list[tuple[str, str]], upto: int | None = None) -> list[str]:
    """Names made in ``log[:upto]`` that exist now and whose directory was not fsync'd after."""
    pending: dict[str, int] = {}
    for what, path in log[:upto]:
        if what in ("made", "renamed", "linked"):
            pending[path] = 1
        elif what == "synced":
            for name in [n for n in pending if os.path.dirname(n) == path]:
                del pending[name]
    # Names under a dot-prefixed temp directory were never published: nothing ever reads them
    # as durable (a later attempt removes or ignores them), so they need no directory fsync.
    # The engine's advisory files (LIVE.hint) are never made durable, by design: a lost one is no hint.
    return sorted(
        n
        for n in pending
        if os.path.lexists(n)
        and not any(p.startswith(".") for p in n.split(os.sep))
        and os.path.basename(n) not in ADVISORY_NAMES
    )


def sites_of(counting: FaultyFileSystem) -> list[Site]:
    """Every call site a fault-free run made: each (op, call number), EIO, plus ENOSPC for pwrite."""
    out: list[Site] = []
    for op in SWEPT_OPS:
        for n in range(counting.calls[op]):
            out.append((op, n, errno.EIO))
            if op == "pwrite":
                out.append((op, n, errno.ENOSPC))
    return out


def sweep(
    template: pathlib.Path,
    work: pathlib.Path,
    run: Callable[[LoggingFS, pathlib.Path], Any],
    after_failure: Callable[[LoggingFS, pathlib.Path, Site, bool], None],
    retry: Callable[[LoggingFS, pathlib.Path], None],
    absorbable: frozenset[str] = ABSORBABLE,
) -> list[Site]:
    """Count ``run``'s calls on a copy of ``template``, then fail each in turn on a fresh copy.

    ``after_failure(fs, dir, site, raised)`` checks the promises on the directory the failed run
    left; ``retry(fs, dir)`` runs the operation again with the fault cleared and checks it
    worked. A run that returns although its fault was injected fails the test unless the
    faulted operation is in ``absorbable``.
    """
    counting = LoggingFS()
    shutil.copytree(template, work / "count", symlinks=True)
    run(counting, work / "count")
    assert counting.injected == []
    sites = sites_of(counting)
    violations: list[str] = []
    for site in sites:
        op, n, err = site
        d = work / f"{op}-{n}-{errno.errorcode[err]}"
        shutil.copytree(template, d, symlinks=True)
        fs = LoggingFS()
        fs.fail(op, err, after=n)
        try:
            raised = False
            try:
                run(fs, d)
            except FAILED:
                raised = True
            assert fs.injected, "the fault was never hit (the run is not deterministic)"
            if not raised:
                assert op in absorbable, f"the operation returned success although {op} #{n} failed"
            after_failure(fs, d, site, raised)
            fs.clear()
            retry(fs, d)
            left = unsynced(fs.log)
            assert left == [], f"made, never made durable, even by the retry: {[os.path.relpath(p, d) for p in left]}"
        except Exception as exc:  # every broken promise is reported, site by site
            violations.append(f"{op}#{n} {errno.errorcode[err]}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    assert violations == [], f"{len(violations)} of {len(sites)} sites broke a promise:\n" + "\n".join(violations)
    return sites


@pytest.fixture(scope="module")
def session_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """A session with a snapshot taken part way, and turns appended after it."""
    root = tmp_path_factory.mktemp("snap-template")
    s = write_session(str(root / "s"), seed=3, turns=4)
    snapshot.take(s.journal, REG, SessionReducer(), str(root / "snaps" / "journal.session.snap"))
    add_turns(s, random.Random(9), 2, 40)
    s.close()
    yield root


def full_state(path: pathlib.Path) -> dict[str, Any]:
    red = SessionReducer()
    with journal.open(str(path), readonly=True) as j:
        return red.dump(snapshot.resume(j, REG, red, None).state)


# --- snapshot files -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["over-previous", "new-directory"])
def test_snapshot_take_fault_sites(session_template: pathlib.Path, tmp_path: pathlib.Path, where: str) -> None:
    want = full_state(session_template / "s")
    name = "snaps" if where == "over-previous" else "fresh"
    previous = (session_template / "snaps" / "journal.session.snap").read_bytes()

    def run(fs: LoggingFS, d: pathlib.Path) -> None:
        with journal.open(str(d / "s"), readonly=True) as j:
            snapshot.take(j, REG, SessionReducer(), str(d / name / "journal.session.snap"), fs=fs)

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        snap = d / name / "journal.session.snap"
        if where == "over-previous" and snap.exists() and snap.read_bytes() != previous:
            snapshot.read(str(snap))  # a new snapshot: whole, never a mix
        with journal.open(str(d / "s"), readonly=True) as j:
            got = snapshot.resume(j, REG, SessionReducer(), str(snap))
        assert SessionReducer().dump(got.state) == want, site
        assert got.from_snapshot or got.rebuild_reason, site

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        run(fs, d)
        with journal.open(str(d / "s"), readonly=True) as j:
            got = snapshot.resume(j, REG, SessionReducer(), str(d / name / "journal.session.snap"))
            assert got.from_snapshot and got.snapshot_seq == j.last_seq
        assert SessionReducer().dump(got.state) == want

    sites = sweep(session_template, tmp_path, run, after_failure, retry)
    assert len(sites) >= 8


# --- the artifact store ---------------------------------------------------------------------

OLD = b"old evidence " * 500
DATA = bytes(range(256)) * 80


def _same_shard_as(ref: str) -> bytes:
    """Content whose blob lands in the shard directory ``ref``'s blob is in (it exists)."""
    for i in range(100_000):
        data = b"same shard %d " % i * 300
        if hashlib.sha256(data).hexdigest()[:2] == art.digest_of(ref)[:2]:
            return data
    raise AssertionError("no content found for the shard")


@pytest.fixture(scope="module")
def artifact_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("art-template")
    store = art.ArtifactStore(root / "a")
    old = store.put(OLD)
    assert art.digest_of(old)[:2] != art.digest_of(art.SCHEME + hashlib.sha256(DATA).hexdigest())[:2]
    store.put(b"unreferenced one " * 100)
    store.put(b"unreferenced two " * 100)
    return root


@pytest.mark.parametrize("case", ["new-shard", "existing-shard", "new-store"])
def test_artifact_put_fault_sites(artifact_template: pathlib.Path, tmp_path: pathlib.Path, case: str) -> None:
    old_ref = art.SCHEME + hashlib.sha256(OLD).hexdigest()
    data = _same_shard_as(old_ref) if case == "existing-shard" else DATA
    ref = art.SCHEME + hashlib.sha256(data).hexdigest()
    where = "fresh" if case == "new-store" else "a"

    def run(fs: LoggingFS, d: pathlib.Path) -> None:
        assert art.ArtifactStore(d / where, fs).put(data) == ref

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        assert art.ArtifactStore(d / "a").get(old_ref) == OLD, site
        if (d / where).exists():
            try:
                got = art.ArtifactStore(d / where).get(ref)
            except art.ArtifactError:
                return
            assert got == data, site

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        run(fs, d)
        assert art.ArtifactStore(d / where).get(ref) == data

    sites = sweep(artifact_template, tmp_path, run, after_failure, retry)
    assert len(sites) >= 8


def test_artifact_gc_fault_sites(artifact_template: pathlib.Path, tmp_path: pathlib.Path) -> None:
    old_ref = art.SCHEME + hashlib.sha256(OLD).hexdigest()
    others = [i.ref for i in art.ArtifactStore(artifact_template / "a").list() if i.ref != old_ref]
    assert len(others) == 2

    def run(fs: LoggingFS, d: pathlib.Path) -> None:
        art.ArtifactStore(d / "a", fs).gc({old_ref}, grace_s=0)

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        store = art.ArtifactStore(d / "a")
        assert store.get(old_ref) == OLD, site
        for ref in others:
            try:
                store.get(ref)
            except art.ArtifactMissingError:
                pass

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        run(fs, d)
        store = art.ArtifactStore(d / "a")
        assert [i.ref for i in store.list()] == [old_ref] and store.get(old_ref) == OLD

    sites = sweep(artifact_template, tmp_path, run, after_failure, retry)
    assert len(sites) >= 4


# --- the session store ----------------------------------------------------------------------


def events_of(path: pathlib.Path) -> list[bytes]:
    with journal.open(str(path), readonly=True) as j:
        return [r.payload for r in j.read()]


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("store-template")
    store = SessionStore(root / "r")
    with store.create({"path": "/w"}, session_id="a", clock=lambda: FIXED_TIME) as s:
        add_turns(s, random.Random(4), 2, 0)
        s.append("user.message", {"text": "fork here"})
    with store.create({"path": "/w"}, session_id="b", clock=lambda: FIXED_TIME) as s:
        s.append("user.message", {"text": "b"})
    return root


def _committed(got: Appended) -> None:
    """Session.append returns a NotCommitted or AckLost outcome rather than raising: a caller checks."""
    if not got.committed:
        raise journal.JournalError(f"the append was not committed: {got.outcome}")


def _check_store(d: pathlib.Path, template: pathlib.Path, site: object) -> dict[str, Any]:
    """list() works, the template's sessions are listed and their journals hold what they held."""
    store = SessionStore(d / "r")
    listed = {i.session_id: i for i in store.list()}
    for sid in ("a", "b"):
        assert sid in listed, (site, sorted(listed))
        before = events_of(template / "r" / "sessions" / sid / "journal")
        with store.open(sid, readonly=True) as s:
            now = [r.payload for r in s.journal.read()]
        assert now[: len(before)] == before, site
        assert listed[sid].last_seq == len(now), site
    for sid, info in listed.items():
        if sid not in ("a", "b"):  # what the failed operation made is a whole session or nothing
            with store.open(sid, readonly=True) as s:
                assert s.journal.last_seq == info.last_seq >= 1, (site, sid)
    return listed


@pytest.mark.parametrize(
    "op",
    [
        "create",
        "open-append-close",
        "rebuild-index",
        "archive",
        "fork",
    ],
)
def test_store_fault_sites(store_template: pathlib.Path, tmp_path: pathlib.Path, op: str) -> None:
    def run(fs: LoggingFS, d: pathlib.Path, new: str = "new") -> None:
        store = SessionStore(d / "r", fs)
        if op == "create":
            with store.create({"path": "/w"}, session_id=new) as s:
                _committed(s.append("user.message", {"text": "hi"}))
        elif op == "open-append-close":
            with store.open("a") as s:
                _committed(s.append("user.message", {"text": "more"}))
        elif op == "rebuild-index":
            store.rebuild_index()
        elif op == "archive":
            store.archive("a")
        else:
            store.fork("a", session_id=new)

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        _check_store(d, store_template, site)

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        if op in ("create", "fork"):
            run(fs, d, "new" if not (d / "r" / "sessions" / "new").exists() else "new2")
        else:
            run(fs, d)  # archive too: archiving an archived session finishes the move
        listed = _check_store(d, store_template, "retry")
        if op == "archive":
            assert listed["a"].status == "archived"
        if op in ("create", "fork"):
            assert {"new", "new2"} & set(listed)

    sites = sweep(store_template, tmp_path, run, after_failure, retry)
    assert len(sites) >= 4


# --- fork -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, int]:
    root = tmp_path_factory.mktemp("fork-template")
    write_session(str(root / "parent"), seed=7, turns=6).close()
    points = forking.fork_points(str(root / "parent"))
    stale = root / ".child.fork-0badc0de"  # a crashed earlier fork of the same child
    stale.mkdir()
    (stale / "00000000000000000001.seg").write_bytes(b"half a copy")
    return root, points[len(points) // 2].last_seq


def _check_child(path: pathlib.Path, parent: pathlib.Path, at: int, sid: str) -> None:
    with journal.open(str(path), readonly=True) as j:
        recs = list(j.read())
    assert [r.seq for r in recs] == list(range(1, at + 2))
    with journal.open(str(parent), readonly=True) as pj:
        assert [r.payload for r in recs[:at]] == [r.payload for r in pj.read() if r.seq <= at]
    header = recs[-1].event
    assert isinstance(header, dict) and header["type"] == "session.started" and header["sessionId"] == sid
    with journal.open(str(path)) as j:
        assert j.recovery.actions == [] and j.recovery.quarantined == []


@pytest.mark.parametrize("link", [True, False])
def test_fork_fault_sites(fork_template: tuple[pathlib.Path, int], tmp_path: pathlib.Path, link: bool) -> None:
    template, at = fork_template
    parent_files = snapshot_files(template / "parent")

    def run(fs: LoggingFS, d: pathlib.Path, child: str = "child") -> None:
        forking.fork(d / "parent", d / child, at, session_id=child, fs=fs, link=link, time=FIXED_TIME)

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        assert snapshot_files(d / "parent") == parent_files, site
        if (d / "child").exists():
            _check_child(d / "child", d / "parent", at, "child")

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        child = "child2" if (d / "child").exists() else "child"
        run(fs, d, child)
        _check_child(d / child, d / "parent", at, child)
        assert snapshot_files(d / "parent") == parent_files

    sites = sweep(template, tmp_path, run, after_failure, retry, absorbable=ABSORBABLE | {"unlink"})
    assert len(sites) >= 10


# --- quarantine during recovery -------------------------------------------------------------


@pytest.fixture(scope="module")
def torn_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, bytes, int]:
    root = tmp_path_factory.mktemp("torn-template")
    with journal.open(str(root / "j"), create=True) as j:
        j.append_many([{"n": i} for i in range(5)])
    seg = live_segment(root / "j")
    valid = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\x01" * 50)
    return root, seg.read_bytes(), valid


def test_quarantine_fault_sites(torn_template: tuple[pathlib.Path, bytes, int], tmp_path: pathlib.Path) -> None:
    template, seg_bytes, valid = torn_template
    cut = seg_bytes[valid:]

    def run(fs: LoggingFS, d: pathlib.Path) -> None:
        journal.open(str(d / "j"), fs=fs).close()

    def truncations_wait_for_the_copy(fs: LoggingFS, site: object) -> None:
        for i, (what, _path) in enumerate(fs.log):
            if what == "truncate":
                assert unsynced(fs.log, i) == [], f"{site}: truncated before the copy was durable"

    def quarantined(d: pathlib.Path) -> list[bytes]:
        q = d / "j" / "quarantine"
        return [p.read_bytes() for p in q.iterdir() if p.name.endswith(".torn")] if q.exists() else []

    def after_failure(fs: LoggingFS, d: pathlib.Path, site: Site, raised: bool) -> None:
        now = live_segment(d / "j").read_bytes()
        if now != seg_bytes:
            assert now == seg_bytes[:valid] and quarantined(d) == [cut], site
        truncations_wait_for_the_copy(fs, site)

    def retry(fs: LoggingFS, d: pathlib.Path) -> None:
        with journal.open(str(d / "j"), fs=fs) as j:
            assert j.last_seq == 5
        truncations_wait_for_the_copy(fs, "retry")
        assert live_segment(d / "j").read_bytes() == seg_bytes[:valid] and quarantined(d) == [cut]
        with journal.open(str(d / "j")) as j:
            assert j.last_seq == 5 and [r.event for r in j.read()] == [{"n": i} for i in range(5)]

    sites = sweep(template, tmp_path, run, after_failure, retry, absorbable=READ_OPS)
    assert len(sites) >= 8


def test_quarantine_retry_truncates_before_the_copy_is_durable(
    torn_template: tuple[pathlib.Path, bytes, int], tmp_path: pathlib.Path
) -> None:
    """Was a bug in journal/recovery.py ``quarantine``: a retry truncated before the copy was durable.

    Recovery fails at the fsync of quarantine/ right after the copy's rename (or at the fsync of
    the journal directory right after mkdir quarantine/). The open raises, the segment is
    untouched: so far so good. But the next open finds the quarantine file (or directory)
    already there, returns early without fsyncing it, and truncates the segment: a power loss
    then could lose both the cut bytes in the segment and their only copy. Fixed: the
    directories are fsync'd on the ``fs.exists(final)`` / ``is_dir`` paths too.
    """
    template, _seg_bytes, _valid = torn_template
    d = tmp_path / "d"
    shutil.copytree(template, d)
    fs = LoggingFS()
    fs.fail("fsync_dir", errno.EIO, after=1)  # #0: the journal dir after mkdir; #1: quarantine/ after the rename
    with pytest.raises(OSError):
        journal.open(str(d / "j"), fs=fs)
    fs.clear()
    journal.open(str(d / "j"), fs=fs).close()
    truncated_at = next(i for i, (what, _p) in enumerate(fs.log) if what == "truncate")
    assert unsynced(fs.log, truncated_at) == []
