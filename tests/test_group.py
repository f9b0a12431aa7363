"""Commit groups (journal/engine/group.py): the life of a group, what a recovery of a dead group
writes and what it refuses to touch, threads through one group, and power losses simulated in a
child process (it keeps only what was fdatasync'd of each segment, then dies without closing)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import journal
from journal.engine import format as fmt
from journal.engine import group as grp
from journal.engine import group_log as glog
from journal.fs import OsFileSystem, pread_upto
from tests.conftest import frames_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEG_SUFFIX = fmt.segment_name(1)[20:]

# A child process: a commit group under argv[2] and journals in it. "powerloss" appends, then
# rewrites every segment and log file as only its fdatasync'd bytes (a power loss: the page
# cache is gone; a file never synced since its creation keeps its synced header), then dies
# without closing anything. "hold" appends, says "ready", and waits on its stdin with the group live;
# then dies without closing (a kill, not a power loss).
CHILD = r"""
import json, os, sys, types
import journal
from journal import fs as jfs
from journal.engine import format as fmt
from journal.engine import group_log as glog

mode, root, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
synced = {}

def _recorded(orig):
    def call(self):
        orig(self)
        synced[self.path] = os.pread(self.fileno(), 1 << 30, 0)  # the bytes this sync made durable
    return call

_init = jfs.OsFile.__init__

def _init_recorded(self, path, fd):
    _init(self, path, fd)
    # Wrapped on the instance: the file layer then makes every durable write through these
    # methods (its one-call C paths are for files nothing wraps), so each sync is recorded.
    self.fdatasync = types.MethodType(_recorded(jfs.OsFile.fdatasync), self)
    self.fsync = types.MethodType(_recorded(jfs.OsFile.fsync), self)

jfs.OsFile.__init__ = _init_recorded
if spec.get("rotate_bytes"):
    glog.LOG_ROTATE_BYTES = spec["rotate_bytes"]

g = journal.open_group(root)
if spec.get("close_each"):  # a long-lived group, sessions opened and closed one after another
    for n, name in enumerate(spec["journals"]):
        with journal.open(os.path.join(root, name), create=True, group=g) as j:
            for i in range(spec["records"]):
                assert isinstance(j.append({"j": n, "i": i}, durability="sync"), journal.Committed)
    spec["records"] = 0
opts = {"segment_size_bytes": spec["segment_bytes"]} if spec.get("segment_bytes") else {}
js = [] if spec.get("close_each") else [
    journal.open(os.path.join(root, name), create=True, group=g, **opts) for name in spec["journals"]
]
for i in range(spec["records"]):
    for n, j in enumerate(js):
        out = j.append({"j": n, "i": i}, durability=spec.get("durability", "sync"))
        assert isinstance(out, journal.Committed), out
if spec.get("durability") == "flush":
    for j in js:
        j.sync()
if spec.get("close_group"):  # a clean close of everything, then the power loss
    for j in js:
        j.close()
    g.close()
gdir = os.path.join(root, ".journal-group")
listing = {n: sorted(os.listdir(os.path.join(gdir, n))) for n in os.listdir(gdir) if n.startswith("g-")}
print(json.dumps(listing), flush=True)
if mode == "powerloss":
    made = {fmt.segment_name(1)[20:]: fmt.SEGMENT_HEADER_SIZE_BYTES, ".jgl": glog.LOG_HEADER_SIZE_BYTES}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            suffix = os.path.splitext(name)[1]
            if suffix in made:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    now = f.read()
                # a file synced whole under its temporary name when it was made keeps its header
                keep = synced.get(path, now[: made[suffix]])
                with open(path, "r+b") as f:
                    f.truncate(0)
                    f.write(keep)
else:
    sys.stdin.readline()
os._exit(0)
"""


def run_child(mode: str, root: pathlib.Path, **spec: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(root), json.dumps(spec)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, list[str]]:
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    listing: dict[str, list[str]] = json.loads(out.splitlines()[0])
    return listing


def events(path: str | os.PathLike[str]) -> list[object]:
    with journal.open(path, readonly=True) as j:
        return [r.event for r in j.read()]


def group_dirs(root: pathlib.Path) -> list[str]:
    gdir = root / grp.GROUP_DIR
    return sorted(n for n in os.listdir(gdir) if n.startswith(grp.INSTANCE_PREFIX)) if gdir.exists() else []


def tree(path: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    r = tmp_path / "store"
    r.mkdir()
    return r


# --- crafting a dead group -------------------------------------------------------------------


def segment(jdir: pathlib.Path, base_seq: int = 1) -> pathlib.Path:
    return jdir / fmt.segment_name(base_seq)


def journal_id(seg: pathlib.Path) -> bytes:
    return fmt.decode_segment_header(seg.read_bytes()[: fmt.SEGMENT_HEADER_SIZE_BYTES]).journal_id


def make_journal(jdir: pathlib.Path, records: int = 3, up: int | None = 1) -> bytes:
    """A closed journal with ``records`` records and (unless up is None) a GROUP marker; its
    first segment's bytes after the header (what a crafted entry writes back)."""
    with journal.open(jdir, create=True) as j:
        for i in range(records):
            assert isinstance(j.append({"i": i}, durability="sync"), journal.Committed)
    if up is not None:
        (jdir / grp.MARKER_FILE).write_bytes(f"journal-group 1 up={up}\n".encode())
    return segment(jdir).read_bytes()[fmt.SEGMENT_HEADER_SIZE_BYTES :]


def dead_group(
    root: pathlib.Path, entries: list[bytes] | None = None, salt: int = 7, tail: bytes = b""
) -> pathlib.Path:
    """A group directory under ``root`` whose process is gone (its LOCK not held), holding one
    log with ``entries`` (each from entry())."""
    inst = root / grp.GROUP_DIR / f"{grp.INSTANCE_PREFIX}999999-dead"
    inst.mkdir(parents=True)
    (inst / grp.INSTANCE_LOCK).write_bytes(b"")
    body = b"".join(entries or [])
    (inst / glog.log_name(1)).write_bytes(glog.encode_header(1, salt) + body + tail)
    return inst


def entry(
    number: int, jid: bytes, path: str, data: bytes, base_seq: int = 1, salt: int = 7, after_sync: bool = False
) -> bytes:
    return glog.encode_entry(number, jid, base_seq, fmt.SEGMENT_HEADER_SIZE_BYTES, path, data, salt, after_sync)


def lose_frames(jdir: pathlib.Path) -> None:
    """What a power loss leaves of a segment never synced since its header: the header."""
    seg = segment(jdir)
    seg.write_bytes(seg.read_bytes()[: fmt.SEGMENT_HEADER_SIZE_BYTES])


# --- recovery: what it writes back -----------------------------------------------------------


def test_recovery_writes_back_what_a_power_loss_dropped(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    jid = journal_id(segment(root / "j"))
    lose_frames(root / "j")
    inst = dead_group(root, [entry(1, jid, "j", frames)])
    assert events(root / "j") == [{"i": i} for i in range(3)]
    assert not inst.exists()


def test_recovery_skips_an_entry_naming_another_journal_id(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    lose_frames(root / "j")
    before = tree(root / "j")
    dead_group(root, [entry(1, b"\x55" * 16, "j", frames)])
    assert events(root / "j") == []
    assert tree(root / "j") == before
    assert group_dirs(root) == []


def test_recovery_skips_a_sealed_segment(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    jid = journal_id(segment(root / "j"))
    with journal.Journal.open(root / "j") as j:
        j.seal()
    before = tree(root / "j")
    # An entry that would overwrite the sealed segment's frames with other bytes.
    dead_group(root, [entry(1, jid, "j", b"\xee" * len(frames))])
    assert events(root / "j") == [{"i": i} for i in range(3)]
    assert tree(root / "j") == before


def test_recovery_skips_a_missing_segment_and_makes_no_file(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    jid = journal_id(segment(root / "j"))
    dead_group(root, [entry(1, jid, "j", frames, base_seq=500), entry(2, jid, "nowhere/x", frames)])
    assert events(root / "j") == [{"i": i} for i in range(3)]
    assert not segment(root / "j", 500).exists()
    assert not (root / "nowhere").exists()


def test_recovery_never_writes_through_a_directory_link_out_of_the_root(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # A journal outside the root, and a directory under the root replaced by a link to it: an
    # entry naming that journal (its real id, its real segment) must not reach it.
    outside = tmp_path / "outside"
    outside.mkdir()
    frames = make_journal(outside / "victim", up=None)
    jid = journal_id(segment(outside / "victim"))
    lose_frames(outside / "victim")
    before = tree(outside)
    (root / "a").symlink_to(outside)
    make_journal(root / "k")
    dead_group(root, [entry(1, jid, "a/victim", frames)])
    assert events(root / "k") == [{"i": i} for i in range(3)]
    assert tree(outside) == before
    assert group_dirs(root) == []


def test_recovery_never_writes_through_a_segment_link_out_of_the_root(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    frames = make_journal(outside / "victim", up=None)
    jid = journal_id(segment(outside / "victim"))
    lose_frames(outside / "victim")
    before = tree(outside)
    (root / "v").mkdir()
    segment(root / "v").symlink_to(segment(outside / "victim"))
    make_journal(root / "k")
    dead_group(root, [entry(1, jid, "v", frames)])
    try:
        assert events(root / "k") == [{"i": i} for i in range(3)]
    except journal.JournalError:
        pass  # a refusal is allowed; a write out of the root is not
    assert tree(outside) == before


def test_a_corrupt_log_is_refused_and_nothing_changes(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    jid = journal_id(segment(root / "j"))
    lose_frames(root / "j")
    e1 = bytearray(entry(1, jid, "j", frames))
    e1[40] ^= 1  # damage to entry 1, which entry 2 after it (written after a sync) proves was synced
    inst = dead_group(root, [bytes(e1), entry(2, jid, "j", frames, after_sync=True)])
    before, log = tree(root / "j"), (inst / glog.log_name(1)).read_bytes()
    with pytest.raises(journal.GroupLogCorruptionError):
        journal.open(root / "j", readonly=True)
    with pytest.raises(journal.GroupLogCorruptionError):
        journal.open(root / "j")
    with pytest.raises(journal.GroupLogCorruptionError):
        journal.open_group(root)
    assert tree(root / "j") == before and (inst / glog.log_name(1)).read_bytes() == log
    assert group_dirs(root) == [inst.name]


def test_a_log_over_its_size_limit_is_refused_without_being_read(
    root: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_journal(root / "j")
    inst = dead_group(root)
    log = inst / glog.log_name(1)
    with open(log, "r+b") as f:
        f.truncate(glog.LOG_FILE_BYTES_MAX + 1)  # sparse: costs nothing on disk
    asked: list[int] = []

    def counted(f: object, size: int, offset: int) -> bytes:
        asked.append(size)
        return pread_upto(f, size, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(grp, "pread_upto", counted)
    with pytest.raises(journal.GroupLogCorruptionError, match="more than a log file ever holds"):
        journal.open(root / "j", readonly=True)
    assert all(size <= glog.LOG_FILE_BYTES_MAX for size in asked), asked
    assert log.stat().st_size == glog.LOG_FILE_BYTES_MAX + 1


def test_a_torn_log_tail_is_kept_in_quarantine_and_the_rest_applied(root: pathlib.Path) -> None:
    frames = make_journal(root / "j")
    jid = journal_id(segment(root / "j"))
    lose_frames(root / "j")
    torn = entry(2, jid, "j", frames)[:-20]
    dead_group(root, [entry(1, jid, "j", frames)], tail=torn)
    assert events(root / "j") == [{"i": i} for i in range(3)]
    kept = list((root / grp.GROUP_DIR / grp.QUARANTINE_DIR).iterdir())
    assert [p.read_bytes() for p in kept] == [torn]
    assert group_dirs(root) == []


def test_an_empty_dead_group_is_removed(root: pathlib.Path) -> None:
    make_journal(root / "j")
    inst = dead_group(root)
    with journal.open_group(root) as g:
        assert g.recovery.groups == [inst.name]
    assert group_dirs(root) == []


# --- the GROUP marker ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "marker",
    [b"garbage", b"journal-group 1 up=0\n", b"journal-group 1 up=99\n", b"journal-group 2 up=1\n", b"x" * 500, b""],
)
def test_a_bad_marker_is_a_group_error_that_says_what_to_do(root: pathlib.Path, marker: bytes) -> None:
    make_journal(root / "j", up=None)
    (root / "j" / grp.MARKER_FILE).write_bytes(marker)
    for readonly in (True, False):
        with pytest.raises(journal.GroupError, match="remove the file"):
            journal.open(root / "j", readonly=readonly)


def test_a_marker_whose_root_never_had_a_group_opens(root: pathlib.Path) -> None:
    make_journal(root / "j", up=1)
    assert not (root / grp.GROUP_DIR).exists()
    assert events(root / "j") == [{"i": i} for i in range(3)]
    with journal.open(root / "j") as j:
        assert j.last_seq == 3


# --- the life of a group ---------------------------------------------------------------------


def test_close_with_a_journal_open_is_refused_and_changes_nothing(root: pathlib.Path) -> None:
    g = journal.open_group(root)
    j = journal.open(root / "j", create=True, group=g)
    assert isinstance(j.append({"i": 0}, durability="sync"), journal.Committed)
    (inst,) = group_dirs(root)
    logs = sorted(os.listdir(root / grp.GROUP_DIR / inst))
    with pytest.raises(journal.GroupError, match="close them first"):
        g.close()
    assert group_dirs(root) == [inst] and sorted(os.listdir(root / grp.GROUP_DIR / inst)) == logs
    assert isinstance(j.append({"i": 1}, durability="sync"), journal.Committed)
    j.close()
    g.close()
    g.close()  # idempotent
    assert group_dirs(root) == []
    assert (root / "j" / grp.MARKER_FILE).read_bytes() == b"journal-group 1 up=1\n"
    assert events(root / "j") == [{"i": 0}, {"i": 1}]
    with journal.open(root / "j") as again:  # without any group
        assert isinstance(again.append({"i": 2}, durability="sync"), journal.Committed)
    assert events(root / "j") == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_an_append_after_the_group_closed_is_not_committed(root: pathlib.Path) -> None:
    g = journal.open_group(root)
    j = journal.Journal.open(root / "j", create=True, group=g)
    g.leave(j)  # as if its close had been missed: the group closes under it
    g.close()
    out = j.append({"i": 0}, durability="sync")
    assert not isinstance(out, journal.Committed)
    j.close()
    assert events(root / "j") == []


def test_nested_journals_carry_their_depth(root: pathlib.Path) -> None:
    with journal.open_group(root) as g:
        for name in ("a/b/c", "a/b/d", "x"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            with journal.open(root / name, create=True, group=g) as j:
                assert isinstance(j.append({"n": name}, durability="sync"), journal.Committed)
    assert (root / "a/b/c" / grp.MARKER_FILE).read_bytes() == b"journal-group 1 up=3\n"
    assert (root / "x" / grp.MARKER_FILE).read_bytes() == b"journal-group 1 up=1\n"
    for name in ("a/b/c", "a/b/d", "x"):
        assert events(root / name) == [{"n": name}]


@pytest.mark.parametrize(
    "options",
    [{"readonly": True}, {"writer": "shared"}, {"sector_bytes": 4096}, {"outside": True}],
    ids=["readonly", "shared", "sector_bytes", "outside_root"],
)
def test_invalid_arguments(root: pathlib.Path, tmp_path: pathlib.Path, options: dict[str, Any]) -> None:
    make_journal(tmp_path / "elsewhere", up=None)
    make_journal(root / "j", up=None)
    with journal.open_group(root) as g:
        target = tmp_path / "elsewhere" if options.get("outside") else root / "j"
        kwargs = {k: v for k, v in options.items() if k != "outside"}
        with pytest.raises(journal.InvalidArgumentError):
            journal.open(target, group=g, **kwargs)
        # Nothing was left held: the journal opens as a writer at once, in the group.
        with journal.open(root / "j", group=g) as j:
            assert isinstance(j.append({"i": 9}, durability="sync"), journal.Committed)
    assert not (tmp_path / "elsewhere" / grp.MARKER_FILE).exists()
    with journal.open(tmp_path / "elsewhere") as j:
        assert j.last_seq == 3


def test_open_group_refuses_a_root_that_is_not_a_directory(tmp_path: pathlib.Path) -> None:
    with pytest.raises(journal.InvalidArgumentError):
        journal.open_group(tmp_path / "missing")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(journal.InvalidArgumentError):
        journal.open_group(tmp_path / "file")


def test_rotation_keeps_only_the_current_log(root: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(glog, "LOG_ROTATE_BYTES", 512)
    with journal.open_group(root) as g:
        (inst,) = group_dirs(root)
        js = [journal.open(root / f"j{n}", create=True, group=g) for n in range(3)]
        for i in range(40):
            for j in js:
                assert isinstance(j.append({"i": i, "pad": "x" * 40}, durability="sync"), journal.Committed)
        generations = [gen for n in os.listdir(root / grp.GROUP_DIR / inst) if (gen := glog.parse_log_name(n))]
        assert len(generations) == 1  # only the current log
        assert generations[0] > 10  # and it did rotate, many times
        for j in js:
            j.close()
    for n in range(3):
        assert events(root / f"j{n}") == [{"i": i, "pad": "x" * 40} for i in range(40)]


# --- power losses (a child process keeps only its synced bytes, then dies) ---------------------


def test_sync_appends_survive_a_power_loss(root: pathlib.Path) -> None:
    names = ["s1", "s2", "deep/er/s3"]
    (root / "deep/er").mkdir(parents=True)
    finish(run_child("powerloss", root, journals=names, records=5))
    # the child's segments hold only their headers now: every record is in the group's log
    for name in names:
        assert len(segment(root / name).read_bytes()) == fmt.SEGMENT_HEADER_SIZE_BYTES
    for n, name in enumerate(names):
        assert events(root / name) == [{"j": n, "i": i} for i in range(5)]
    assert group_dirs(root) == []


def test_records_survive_a_power_loss_after_rotation(root: pathlib.Path) -> None:
    names = [f"s{n}" for n in range(4)]
    listing = finish(run_child("powerloss", root, journals=names, records=60, rotate_bytes=1024))
    ((_inst, files),) = listing.items()
    logs = [n for n in files if glog.parse_log_name(n) is not None]
    assert len(logs) == 1 and (glog.parse_log_name(logs[0]) or 0) > 2, files
    for n, name in enumerate(names):
        assert events(root / name) == [{"j": n, "i": i} for i in range(60)]


def test_records_survive_a_power_loss_across_segment_roll_overs(root: pathlib.Path) -> None:
    names = ["r1", "r2"]
    finish(run_child("powerloss", root, journals=names, records=120, segment_bytes=4096))
    assert all(len(list((root / name).glob("*" + SEG_SUFFIX))) >= 2 for name in names)  # it rolled over
    for n, name in enumerate(names):
        assert events(root / name) == [{"j": n, "i": i} for i in range(120)]


def test_a_clean_close_leaves_every_record_in_the_segments(root: pathlib.Path) -> None:
    # After journal.close and group.close, the group's log is gone: a power loss then keeps the
    # records only if the closes fdatasync'd the segments.
    names = ["c1", "c2", "a/b/c3"]
    (root / "a/b").mkdir(parents=True)
    assert finish(run_child("powerloss", root, journals=names, records=4, close_group=True)) == {}
    for n, name in enumerate(names):
        assert events(root / name) == [{"j": n, "i": i} for i in range(4)]


def test_flush_then_sync_is_durable_through_the_group(root: pathlib.Path) -> None:
    names = ["f1", "f2"]
    finish(run_child("powerloss", root, journals=names, records=7, durability="flush"))
    for n, name in enumerate(names):
        assert events(root / name) == [{"j": n, "i": i} for i in range(7)]


# --- live and dead groups ----------------------------------------------------------------------


@pytest.fixture
def holder(root: pathlib.Path) -> Iterator[subprocess.Popen[str]]:
    proc = run_child("hold", root, journals=["h"], records=3)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_a_live_group_is_not_recovered_and_a_dead_one_is_by_a_reader(
    root: pathlib.Path, holder: subprocess.Popen[str]
) -> None:
    assert holder.stdout is not None
    listing = json.loads(holder.stdout.readline())
    ((inst, _files),) = listing.items()
    # live: a reader's open and a new group leave it alone
    assert events(root / "h") == [{"j": 0, "i": i} for i in range(3)]
    with journal.open_group(root) as g:
        assert g.recovery.groups == []
    assert inst in group_dirs(root)
    # dead (the process is gone, its LOCK free): the next reader's open recovers it, and keeps
    # a torn tail of its log aside
    holder.communicate("\n", timeout=60)
    (log,) = [p for p in (root / grp.GROUP_DIR / inst).iterdir() if glog.parse_log_name(p.name)]
    with open(log, "ab") as f:
        f.write(b"\x45\x52\x47\x4a torn write")
    assert events(root / "h") == [{"j": 0, "i": i} for i in range(3)]
    assert group_dirs(root) == []
    kept = list((root / grp.GROUP_DIR / grp.QUARANTINE_DIR).iterdir())
    assert [p.read_bytes() for p in kept] == [b"\x45\x52\x47\x4a torn write"]


def test_a_dead_group_is_recovered_by_open_group(root: pathlib.Path, holder: subprocess.Popen[str]) -> None:
    assert holder.stdout is not None
    ((inst, _files),) = json.loads(holder.stdout.readline()).items()
    holder.communicate("\n", timeout=60)
    with journal.open_group(root) as g:
        assert g.recovery.groups == [inst]
        assert inst not in group_dirs(root)
    assert events(root / "h") == [{"j": 0, "i": i} for i in range(3)]


# --- threads -------------------------------------------------------------------------------------


@pytest.mark.parametrize("rotate_bytes", [glog.LOG_ROTATE_BYTES, 4096], ids=["one_log", "rotating"])
def test_eight_journals_four_threads_each_through_one_group(
    root: pathlib.Path, monkeypatch: pytest.MonkeyPatch, rotate_bytes: int
) -> None:
    monkeypatch.setattr(glog, "LOG_ROTATE_BYTES", rotate_bytes)  # retirements among the appends
    journals_n, threads_n, rounds = 8, 4, 20
    g = journal.open_group(root)
    js = [journal.open(root / f"t{n}", create=True, group=g) for n in range(journals_n)]
    barrier = threading.Barrier(journals_n * threads_n)
    outcomes: list[list[object]] = [[] for _ in range(journals_n * threads_n)]
    errors: list[BaseException] = []

    def work(slot: int) -> None:
        j = js[slot // threads_n]
        try:
            for r in range(rounds):
                barrier.wait()  # every thread's append of round r meets the others'
                outcomes[slot].append(j.append({"slot": slot, "r": r}, durability="sync"))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(s,)) for s in range(journals_n * threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(isinstance(o, journal.Committed) for outs in outcomes for o in outs)
    for j in js:
        j.close()
    g.close()
    for n in range(journals_n):
        got = events(root / f"t{n}")
        want = [{"slot": s, "r": r} for s in range(n * threads_n, (n + 1) * threads_n) for r in range(rounds)]
        assert sorted(got, key=lambda e: (e["slot"], e["r"])) == want  # type: ignore[index]


# --- defects a review found, each fixed (the tests failed before) ---------------------------------


def test_a_record_at_the_default_size_limit_commits_through_a_group(root: pathlib.Path) -> None:
    big = os.urandom(fmt.RECORD_SIZE_BYTES_MAX_DEFAULT)  # incompressible: stored as it is
    with journal.open(root / "alone", create=True) as j:
        assert isinstance(j.append(big, durability="sync"), journal.Committed)  # what the limit allows
    g = journal.open_group(root)
    j = journal.open(root / "big", create=True, group=g)
    k = journal.open(root / "other", create=True, group=g)
    try:
        assert isinstance(j.append(big, durability="sync"), journal.Committed)
        assert isinstance(k.append({"after": 1}, durability="sync"), journal.Committed)
    finally:
        for each in (j, k):
            try:
                each.close()
            except journal.JournalError:
                pass
        try:
            g.close()
        except (journal.JournalError, AssertionError):
            pass


RECOVER_WITH_FEW_FILES = r"""
import json, os, resource, sys
import journal
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), hard))
with journal.open(sys.argv[1], readonly=True) as j:
    print(json.dumps([r.event for r in j.read()]))
"""


def test_recovery_of_a_group_that_touched_many_sessions_needs_few_open_files(root: pathlib.Path) -> None:
    sessions = 150
    names = [f"s{n}" for n in range(sessions)]
    finish(run_child("powerloss", root, journals=names, records=1, close_each=True))
    got = subprocess.run(
        [sys.executable, "-c", RECOVER_WITH_FEW_FILES, str(root / "s0"), "64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr[-400:]
    assert json.loads(got.stdout) == [{"j": 0, "i": 0}]
    assert events(root / names[-1]) == [{"j": sessions - 1, "i": 0}]


def test_a_power_loss_that_keeps_a_later_unsynced_entry_does_not_block_the_store(root: pathlib.Path) -> None:
    make_journal(root / "j", records=3)
    seg = segment(root / "j")
    f1, f2, f3 = frames_of(seg)
    raw = seg.read_bytes()
    jid = journal_id(seg)

    def at(offset: int, end: int, number: int) -> bytes:
        return glog.encode_entry(number, jid, 1, offset, "j", raw[offset:end], 7)

    e1 = at(f1.offset, f2.offset, 1)  # synced (a sync append)
    e2 = at(f2.offset, f3.offset, 2)  # flush-level: its page never reached the disk
    e3 = at(f3.offset, len(raw), 3)  # flush-level: its page did
    seg.write_bytes(raw[: f2.offset])  # the segment kept what the power loss left of it
    make_journal(root / "k", records=1)
    dead_group(root, [e1, bytes(len(e2)), e3])
    assert events(root / "k") == [{"i": 0}]
    assert events(root / "j")[:1] == [{"i": 0}]


class _PausingFs(OsFileSystem):
    """The real file layer, pausing a group's close just after it unlinked its LOCK (before it
    removes its directory), so that a reader's open runs at that very point."""

    def __init__(self) -> None:
        super().__init__()
        self.unlinked = threading.Event()
        self.go = threading.Event()

    def unlink(self, path: str) -> None:
        super().unlink(path)
        if os.path.basename(path) == grp.INSTANCE_LOCK:
            self.unlinked.set()
            assert self.go.wait(120), "the test never let the close go on"


def test_a_reader_opening_while_the_group_closes_does_not_fail_the_close(root: pathlib.Path) -> None:
    fs = _PausingFs()
    g = journal.open_group(root, fs=fs)
    with journal.open(root / "j", create=True, group=g) as j:
        assert isinstance(j.append({"i": 0}, durability="sync"), journal.Committed)
    raised: list[BaseException] = []

    def close() -> None:
        try:
            g.close()
        except BaseException as exc:
            raised.append(exc)

    closer = threading.Thread(target=close)
    closer.start()
    try:
        assert fs.unlinked.wait(120)
        assert events(root / "j") == [{"i": 0}]
    finally:
        fs.go.set()
        closer.join()
    assert raised == [] and group_dirs(root) == []


@pytest.mark.parametrize("kind", ["link", "fifo", "directory"])
def test_a_segment_that_is_not_a_file_in_one_journal_does_not_block_the_others(root: pathlib.Path, kind: str) -> None:
    frames = make_journal(root / "src", up=None)
    jid = journal_id(segment(root / "src"))
    (root / "v").mkdir()
    odd = segment(root / "v")
    if kind == "link":
        odd.symlink_to(segment(root / "src"))
    elif kind == "fifo":
        os.mkfifo(odd)
    else:
        odd.mkdir()
    make_journal(root / "k")
    dead_group(root, [entry(1, jid, "v", frames)])
    assert events(root / "k") == [{"i": i} for i in range(3)]
