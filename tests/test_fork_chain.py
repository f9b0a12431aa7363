"""A chain of forks (each fork of the previous child) stays flat in its depth (issue 33).

Counted, not timed: the bytes a fork copies, the files a child holds, the records it reads to
check its fork point; every child's records are its parent's prefix plus its own, the parent is
never changed; an I/O fault or a kill anywhere in a fork that merges segments leaves no child
or a whole one, and the chain goes on.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import struct
from dataclasses import dataclass

import pytest
import xxhash

import journal
from journal import session
from journal.crashsim.faults import OPERATIONS, FaultyFileSystem
from journal.engine import copy as prefix_copy
from journal.engine import format as fmt
from journal.errors import CorruptionError
from journal.fs import OsFileSystem
from journal.session import fork as forking
from journal.session.errors import SessionError

TIME = "2026-01-01T00:00:00.000Z"
DEPTH = 300
EVENTS_PER_STEP = 3
# What one fork may copy besides merges: the parent's own live segment (its header event and the
# few events appended since), a segment header, and slack for the frames' padding; no history.
CUT_BYTES_MAX = 4096
# Files in a child: the small segments a copy links as they are, one merge's worth more, the
# live segment, the fork snapshot and the lock (independent of the depth).
FILES_MAX = prefix_copy.SMALL_SEGMENTS_LINKED_MAX + prefix_copy.MERGE_FANIN + 4


def append(path: str, n: int, tag: str, create: bool = False) -> int:
    seq = 0
    with session.open(path, create=create, session_id="s-root" if create else None) as s:
        for k in range(n):
            seq = s.append("user.message", {"text": f"{tag} {k}"}, time=TIME).event.seq
    return seq


def records(path: str) -> list[bytes]:
    with journal.open(path, readonly=True) as j:
        return [r.payload for r in j.read()]


def digest(path: str) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.isfile(p) and not name.endswith(".lock"):
            with open(p, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


@dataclass
class Link:
    path: str
    at_seq: int
    got: forking.ForkResult


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> list[Link]:
    base = tmp_path_factory.mktemp("chain")
    prev = str(base / "c0")
    at = append(prev, 10, "root", create=True)
    out: list[Link] = []
    for d in range(1, DEPTH + 1):
        if d > 1:
            at = append(prev, EVENTS_PER_STEP, f"c{d - 1}")
        before, parent_recs = digest(prev), records(prev)
        child = str(base / f"c{d}")
        got = forking.fork(prev, child, at, origin="test", time=TIME)
        assert digest(prev) == before, f"fork {d} changed its parent"
        recs = records(child)
        assert recs[:at] == parent_recs[:at] and len(recs) == at + 1, f"fork {d}: not the parent's prefix + header"
        out.append(Link(child, at, got))
        prev = child
    return out


def test_a_fork_copies_no_history_and_a_child_holds_bounded_files(chain: list[Link]) -> None:
    for d, link in enumerate(chain, 1):
        st = link.got.storage
        merged = sum(os.path.getsize(os.path.join(link.path, g[0])) for g in st.segments_merged)
        assert st.bytes_copied - merged <= CUT_BYTES_MAX, f"fork {d} copied {st.bytes_copied - merged} B of history"
        files = [n for n in os.listdir(link.path) if not n.endswith(".lock")]
        assert len(files) <= FILES_MAX, f"child {d} holds {len(files)} files"
    assert any(link.got.storage.segments_merged for link in chain), "no fork merged small segments"


def test_merged_bytes_over_the_chain_are_bounded_by_the_tiers(chain: list[Link]) -> None:
    # Every record climbs one tier a merge: what the chain merged is at most its records'
    # bytes times the tiers, whatever the depth (amortized: flat per fork).
    tiers = prefix_copy._tier(prefix_copy.MERGE_SEGMENT_BYTES_MAX) + 1
    own = sum(os.path.getsize(os.path.join(chain[-1].path, n)) for n in os.listdir(chain[-1].path)
              if n.endswith(".seg"))
    merged = sum(os.path.getsize(os.path.join(link.path, g[0]))
                 for link in chain for g in link.got.storage.segments_merged)
    assert merged <= tiers * own


def test_every_child_checks_its_fork_point_from_its_parents_header(chain: list[Link]) -> None:
    for d, link in enumerate(chain[1:], 2):
        # The parent (child d-1) has its fork snapshot at its header: the check reads from there.
        assert link.got.checked_from_seq == chain[d - 2].got.header_seq, f"fork {d} replayed from seq 1"
        assert link.got.snapshot_reason is None
        assert link.got.depth == d


def test_the_deepest_child_reads_back_every_generation(chain: list[Link]) -> None:
    last = chain[-1]
    with session.open(last.path, readonly=True) as s:
        headers = [e for e in s.read() if e.type == "session.started"]
    assert len(headers) == DEPTH + 1
    assert [h.data["lineage"]["depth"] for h in headers[1:]] == list(range(1, DEPTH + 1))
    with journal.open(last.path) as j:  # opens for writing with nothing to recover
        assert j.recovery.actions == [] and j.recovery.quarantined == []


def test_a_crafted_frame_in_a_merged_segment_is_refused(chain: list[Link], tmp_path: pathlib.Path) -> None:
    # Find a fork that merged, damage one byte of a member in a copy of its parent: the merge
    # checks every frame against its own segment's salt and refuses it.
    d = next(i for i, link in enumerate(chain) if link.got.storage.segments_merged and i > 0)
    parent = chain[d - 1]
    src = str(tmp_path / "parent")
    os.mkdir(src)
    for name in os.listdir(parent.path):
        if not name.endswith(".lock") and os.path.isfile(os.path.join(parent.path, name)):
            with open(os.path.join(parent.path, name), "rb") as f:
                data = f.read()
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
    member = chain[d].got.storage.segments_merged[0][-1]
    p = os.path.join(src, member)
    with open(p, "r+b") as f:
        f.seek(64 + 40)  # inside the first frame's payload
        b = f.read(1)
        f.seek(64 + 40)
        f.write(bytes([b[0] ^ 0xFF]))
    dst = str(tmp_path / "dst")
    os.mkdir(dst)
    with pytest.raises(CorruptionError):
        prefix_copy.copy_prefix(OsFileSystem(), src, dst, chain[d].at_seq)
    with pytest.raises(CorruptionError):  # and the session layer's fork says so too
        forking.fork(src, str(tmp_path / "child"), chain[d].at_seq, origin="test", time=TIME)
    assert not os.path.exists(str(tmp_path / "child"))


def _merging_fork(chain: list[Link]) -> tuple[Link, Link]:
    d = next(i for i, link in enumerate(chain) if link.got.storage.segments_merged and i > 0)
    return chain[d - 1], chain[d]


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op not in ("short_write", "rmdir")])
def test_an_io_fault_in_a_merging_fork_leaves_no_child_and_a_retry_works(
    chain: list[Link], tmp_path: pathlib.Path, op: str
) -> None:
    parent, model = _merging_fork(chain)
    before = digest(parent.path)
    probe = FaultyFileSystem(OsFileSystem())
    forking.fork(parent.path, str(tmp_path / "probe"), parent_at(model), origin="test", time=TIME, fs=probe)
    for n in range(probe.calls[op]):
        fs = FaultyFileSystem(OsFileSystem())
        fs.fail(op, errno.EIO, after=n)
        target = str(tmp_path / f"x-{op}-{n}")
        try:
            got = forking.fork(parent.path, target, parent_at(model), origin="test", time=TIME, fs=fs)
        except (OSError, journal.JournalError, SessionError):
            # No child, or (the directory's fsync after the rename failed) a whole one.
            if not os.path.exists(target):
                # The retry into the same name clears what the failed one left and makes it whole.
                forking.fork(parent.path, target, parent_at(model), origin="test", time=TIME)
            got = forking.ForkResult(target, "", None, 0, 0, "", 0, prefix_copy.PrefixCopy(), 0, None)
            leftovers = [x for x in os.listdir(tmp_path) if x.startswith(f".x-{op}-{n}.fork-")]
            assert leftovers == [], f"{op} #{n}: {leftovers} left after the retry"
        # Faults a fork may meet and go past (a best-effort unlink) leave a whole child too.
        recs = records(got.path)
        assert recs[:-1] == records(parent.path)[: parent_at(model)] and len(recs) == parent_at(model) + 1
        assert digest(parent.path) == before


def parent_at(model: Link) -> int:
    return model.at_seq


class _Killer(FaultyFileSystem):
    """Dies (os._exit, no cleanup: as a SIGKILL) on its ``at``-th file system call."""

    def __init__(self, at: int) -> None:
        super().__init__(OsFileSystem())
        self.at = at

    def check(self, op: str, path: str) -> None:
        if len(self.trace) == self.at:
            os._exit(70)
        super().check(op, path)


def test_a_kill_anywhere_in_a_merging_fork_leaves_no_child_or_a_whole_one(
    chain: list[Link], tmp_path: pathlib.Path
) -> None:
    parent, model = _merging_fork(chain)
    at = model.at_seq
    before, want = digest(parent.path), records(parent.path)[:at]
    probe = FaultyFileSystem(OsFileSystem())
    forking.fork(parent.path, str(tmp_path / "probe"), at, origin="test", time=TIME, fs=probe)
    total = len(probe.trace)
    assert total > 20
    for k in range(total + 1):
        target = str(tmp_path / f"k{k}")
        pid = os.fork()
        if pid == 0:  # the process that is killed mid-fork
            try:
                forking.fork(parent.path, target, at, origin="test", time=TIME, fs=_Killer(k))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 70)
        if os.path.exists(target):
            recs = records(target)
            assert recs[:at] == want and len(recs) == at + 1, f"kill at call {k}: a partial child"
            with journal.open(target) as j:
                assert j.recovery.actions == [], f"kill at call {k}: the child needed recovery"
        assert digest(parent.path) == before
        # The chain goes on: a fork into the same name clears what the killed one left.
        if not os.path.exists(target):
            got = forking.fork(parent.path, target, at, origin="test", time=TIME)
            assert records(got.path)[:at] == want


def _as_version_1(seg: pathlib.Path) -> None:
    """Make ``seg`` the version 1 segment an earlier version wrote (its frames are the same bytes)."""
    data = bytearray(seg.read_bytes())
    struct.pack_into("<H", data, 8, 1)
    struct.pack_into("<Q", data, 56, xxhash.xxh64_intdigest(bytes(data[:56])))
    seg.write_bytes(bytes(data))


def test_a_chain_goes_on_from_journals_an_earlier_version_wrote(tmp_path: pathlib.Path) -> None:
    # The root: a version 1 segment (frames of one record each). Its first child is built as
    # forks were before chains stayed flat: the cut left live, no fork snapshot.
    root = tmp_path / "root"
    with session.open(root, create=True, session_id="s-old", block_bytes=0) as s:
        for k in range(6):
            top = s.append("user.message", {"text": f"old {k}"}, time=TIME).event.seq
    (seg,) = sorted(root.glob("*.seg"))
    _as_version_1(seg)
    old = tmp_path / "old-child"
    with journal.open(root, readonly=True) as pj:
        plan = forking.plan_fork(pj, top, origin="test", time=TIME)
        os.mkdir(old)
        assert isinstance(pj, journal.PrefixCopier)
        pj.copy_prefix(old, top)
    with journal.open(old, reserve_bytes=0) as cj:
        cj.append(plan.header.to_stored(), durability="sync")
    prev = str(old)
    for d in range(prefix_copy.SMALL_SEGMENTS_LINKED_MAX + 3 * prefix_copy.MERGE_FANIN):
        at = append(prev, 2, f"g{d}")
        parent_recs = records(prev)
        got = forking.fork(prev, str(tmp_path / f"g{d}"), at, origin="test", time=TIME)
        if d == 0:
            assert got.checked_from_seq == 0  # no snapshot there: checked from seq 1
        assert records(got.path)[:at] == parent_recs[:at]
        for group in got.storage.segments_merged:  # never across format versions
            vs = {fmt.decode_segment_header((pathlib.Path(prev) / n).read_bytes()[:64]).version for n in group}
            assert len(vs) == 1
        prev = got.path
    segs = sorted(pathlib.Path(prev).glob("*.seg"))
    versions = [fmt.decode_segment_header(p.read_bytes()[:64]).version for p in segs]
    assert versions[0] == 1 and versions[-1] == fmt.FORMAT_VERSION
    with session.open(prev, readonly=True) as s:
        texts = [e.data.get("text") for e in s.read() if e.type == "user.message"]
    assert texts[:6] == [f"old {k}" for k in range(6)] and len(texts) == 6 + 2 * (d + 1)
    with journal.open(prev) as j:
        assert j.recovery.actions == []


def test_the_bench_runs_a_short_chain(tmp_path: pathlib.Path) -> None:
    # CI's quick look at bench/bench_fork_chain.py: it builds, measures and prints every figure;
    # the verdict (timing) is the bench's, not this test's.
    import subprocess
    import sys

    bench = pathlib.Path(__file__).resolve().parent.parent / "bench" / "bench_fork_chain.py"
    got = subprocess.run([sys.executable, str(bench), "--depth", "40", "--runs", "1", "--window", "5",
                          "--pairs", "3", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert got.returncode in (0, 1), got.stderr
    for figure in ("time x", "bytes x", "fork B x", "files max"):
        assert f"\n{figure} " in got.stdout, got.stdout
    assert os.listdir(tmp_path) == []  # the chains are removed


def test_a_fork_at_the_last_clean_point_does_not_scan_the_chain(
    chain: list[Link], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = chain[-1].path
    at = append(deep, 2, "tail")
    want = forking.fork_points(deep)[-1].last_seq
    assert want == at

    def no_scan(*_: object) -> list[forking.ForkPoint]:
        raise AssertionError("the whole log was scanned for the last clean point")

    monkeypatch.setattr(forking, "scan_points", no_scan)
    got = forking.fork(deep, str(tmp_path / "next"), None, origin="test", time=TIME)
    assert got.fork_seq == at and got.checked_from_seq == chain[-1].got.header_seq
