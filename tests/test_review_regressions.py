"""Regressions from a review of retention (drop_prefix, the START marker), the point reads'
dense index and DirectoryStore. Each test failed on the reviewed code (a defect shown by a
forced interleaving, with file-layer hooks, never with timing) and passes on the fix."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.api import LOCK_FILE
from journal.engine import format as fmt
from journal.engine.core import Journal
from journal.engine.segment import list_segments, read_header, read_seal
from journal.engine.store import DirectoryStore
from journal.errors import CorruptionError, JournalError
from journal.fs import LOCK_NOTE_BYTES, OsFile, OsFileSystem, temp_dir_beside  # noqa: F401
from tests.conftest import segments


class HookFS(OsFileSystem):
    """OsFileSystem with optional hooks before a call (hook returns nothing) and a byte counter."""

    def __init__(self) -> None:
        super().__init__()
        self.before: dict[str, Callable[..., None]] = {}
        self.after: dict[str, Callable[..., None]] = {}
        self.bytes_read = 0
        self.listdir_order: Callable[[str, list[str]], list[str]] | None = None

    def _call(self, name: str, *args: Any) -> Any:
        hook = self.before.get(name)
        if hook is not None:
            hook(*args)
        out = getattr(super(), name)(*args)
        hook = self.after.get(name)
        if hook is not None:
            hook(*args)
        return out

    def open_read(self, path: str) -> Any:
        f = self._call("open_read", path)
        fs = self
        orig = f.pread

        def pread(size: int, offset: int) -> bytes:
            data = orig(size, offset)
            fs.bytes_read += len(data)
            return data

        f.pread = pread
        return f

    def open_write(self, path: str, create: bool) -> Any:
        return self._call("open_write", path, create)

    def rename(self, src: str, dst: str) -> None:
        self._call("rename", src, dst)

    def unlink(self, path: str) -> None:
        self._call("unlink", path)

    def listdir(self, path: str) -> list[str]:
        names = super().listdir(path)
        if self.listdir_order is not None:
            names = self.listdir_order(path, names)
        return names


def _fill(path: str, n: int, fs: Any = None, **opts: Any) -> Journal:
    j = journal.open(path, create=True, segment_size_bytes=4096, fs=fs, **opts)
    for i in range(1, n + 1):
        j.append({"i": i, "pad": "x" * 120}, "flush", idempotency_key=f"k{i}")
    j.sync()
    return j


# --- 1. a foreign / mismatched START makes the writer's open unlink segments, then refuse ------


def test_mismatched_start_marker_deletes_segments_before_the_open_refuses(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    _fill(path, 100).close()
    before = [p.name for p in segments(path)]
    assert len(before) >= 3
    live_base = fmt.parse_segment_name(before[-1])
    assert live_base is not None
    # A START of another journal (copied in, restored from another backup...) whose first seq
    # happens to be this journal's live segment base: verifies on its own, names another journal.
    foreign = fmt.StartMarker(os.urandom(16), 5, live_base)
    Path(path, fmt.START_FILE).write_bytes(fmt.encode_start(foreign))
    with pytest.raises(CorruptionError):
        journal.open(path)  # refused (good) ...
    # ... but only after it unlinked every earlier segment, without quarantine: data loss.
    assert [p.name for p in segments(path)] == before


# --- 2. two drop_prefix calls on one handle: START regresses, the journal no longer opens -----


def test_concurrent_drop_prefix_calls_leave_a_start_that_names_a_deleted_segment(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    fs = HookFS()
    j = _fill(path, 200, fs=fs)
    bases = [s.base_seq for s in list_segments(fs, path)]
    assert len(bases) >= 5
    outer_before, inner_before = bases[2], bases[3]
    armed = [True]

    def interleave(p: str, create: bool) -> None:
        # Thread A (drop_prefix(bases[2])) has listed and chosen its START; thread B's
        # drop_prefix(bases[3]) runs whole before A writes START.tmp.
        if armed[0] and p.endswith(fmt.START_FILE + ".tmp"):
            armed[0] = False
            started.append(threading.Thread(target=j.drop_prefix, args=(inner_before,)))
            started[0].start()  # B's drop waits for A's (one drop at a time)

    started: list[threading.Thread] = []
    fs.before["open_write"] = interleave
    j.drop_prefix(outer_before)
    fs.before.clear()
    started[0].join(30)
    assert not started[0].is_alive() and j.first_seq == inner_before
    j.close()
    # Every acknowledged record from bases[3] on is still there; the journal must open.
    with journal.open(path) as j2:
        assert j2.first_seq == inner_before


# --- 3. a crash between a create(first_seq=N)'s START and its first segment ----------------


def test_create_after_a_crash_between_start_and_first_segment_bricks_the_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    fs = HookFS()

    def crash(src: str, dst: str) -> None:
        if src.endswith(".seg.tmp"):
            raise OSError(errno.EIO, "power loss here (simulated)")

    fs.before["rename"] = crash
    with pytest.raises(JournalError):
        journal.open(path, create=True, first_seq=10, fs=fs)
    assert os.path.exists(os.path.join(path, fmt.START_FILE))
    # The next run opens it the usual way (create=True: make it if it is not there yet).
    with journal.open(path, create=True) as j:
        out = j.append({"a": 1})
        assert isinstance(out, journal.Committed)
        seq = out.seq
    # The acknowledged record must be readable after a reopen.
    with journal.open(path) as j:
        rec = j.get(seq)
        assert rec is not None and rec.event == {"a": 1}


def test_that_stale_start_then_makes_an_open_delete_acknowledged_records(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    fs = HookFS()

    def crash(src: str, dst: str) -> None:
        if src.endswith(".seg.tmp"):
            raise OSError(errno.EIO, "power loss here (simulated)")

    fs.before["rename"] = crash
    with pytest.raises(JournalError):
        journal.open(path, create=True, first_seq=10, fs=fs)
    with journal.open(path, create=True) as j:  # begins at 1: the stale START(10) stays
        for i in range(1, 10):
            assert isinstance(j.append({"i": i}), journal.Committed)
        j.seal()
        assert j.append({"i": 10}) == journal.Committed(10, "sync")  # segment 10 is live
    names = [p.name for p in segments(path)]
    assert names == [fmt.segment_name(1), fmt.segment_name(10)]
    try:
        journal.open(path).close()
    except CorruptionError:
        pass
    # Records 1..9 were acknowledged at "sync"; no open may delete them.
    assert [p.name for p in segments(path)] == names


# --- 4. the dense index makes point reads read whole segments -------------------------------


def _big_journal(path: str, segment_bytes: int, n_segments: int) -> list[tuple[int, int]]:
    """(first, last) seq of each sealed segment, 1 KiB incompressible records."""
    with journal.open(path, create=True, segment_size_bytes=segment_bytes, compress=False) as j:
        while len(list_segments(OsFileSystem(), path)) <= n_segments:
            j.append_many([os.urandom(1000) for _ in range(256)], durability="flush")
    fs = OsFileSystem()
    out = []
    for s in list_segments(fs, path)[:n_segments]:
        f = fs.open_read(os.path.join(path, s.name))
        try:
            h = read_header(f, s.name)
            seal = read_seal(f, h, s.name, f.size())
        finally:
            f.close()
        assert seal is not None
        out.append((seal.first_seq, seal.last_seq))
    return out


def test_a_cold_point_read_reads_its_whole_segment(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    spans = _big_journal(path, 4 * 1024 * 1024, 1)
    fs = HookFS()
    with journal.open(path, readonly=True, fs=fs) as j:
        fs.bytes_read = 0
        rec = j.get(spans[0][1] - 1)  # a record near the end of a sealed 4 MiB segment
        assert rec is not None
        # The footer's sparse index (64 KiB) bounds this to ~128 KiB; the dense scan reads ~4 MiB.
        assert fs.bytes_read < 1024 * 1024, f"one get() read {fs.bytes_read} bytes"


def test_point_reads_over_more_than_eight_segments_rescan_a_segment_each(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    spans = _big_journal(path, 1024 * 1024, 10)
    fs = HookFS()
    with journal.open(path, readonly=True, fs=fs) as j:
        for _ in range(2):
            fs.bytes_read = 0
            for _first, last in spans:
                assert j.get(last) is not None
        per_get = fs.bytes_read / len(spans)
        # The cache holds 8 segments; with 10 each get evicts one and rebuilds its index by
        # reading its segment from the start: O(segment_size_bytes) per get, every time.
        assert per_get < 512 * 1024, f"{per_get:.0f} bytes read per get() on the second round"


# --- 5. a shared writer open across another writer's drop keeps dropped keys ----------------


def test_shared_writer_retry_of_a_dropped_key_is_a_duplicate_of_a_dropped_seq(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    s = journal.open(path, create=True, writer="shared", segment_size_bytes=4096)
    first = s.append({"i": 1, "pad": "x" * 120}, idempotency_key="k1")
    assert isinstance(first, journal.Committed) and first.seq == 1
    for i in range(2, 80):
        s.append({"i": i, "pad": "x" * 120})
    # An exclusive writer takes the lock between the shared one's batches and compacts.
    with journal.open(path, segment_size_bytes=4096) as e:
        e.seal()
        kept = e.append({"keep": True})
        assert isinstance(kept, journal.Committed)
        e.drop_prefix(kept.seq)
    try:
        # The shared handle learns of the drop at its next batch (its catch-up reads START):
        # from then on it begins where the drop left the journal and has forgotten the keys.
        s.append({"after": True})
        assert s.first_seq == kept.seq
        again = s.append({"i": 1, "pad": "x" * 120}, idempotency_key="k1")
        assert isinstance(again, journal.Committed)
        assert not again.duplicate and again.seq > kept.seq, again
    finally:
        s.close()


# --- 6. drop_prefix racing the leader's seal: the footer's key walk meets a deletion --------


class _KeysHookDict(dict):  # type: ignore[type-arg]
    hook: Callable[[], None] | None = None

    def items(self):  # type: ignore[no-untyped-def, override]
        it = iter(super().items())
        for n, kv in enumerate(it):
            if n == 0 and self.hook is not None:
                h, self.hook = self.hook, None
                h()  # another thread runs here (the leader holds no mutex while it seals)
            yield kv


def test_drop_prefix_while_the_leader_seals_fail_stops_the_journal(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    j = _fill(path, 120)
    bases = [s.base_seq for s in list_segments(OsFileSystem(), path)]
    keys = _KeysHookDict(j._keys)
    j._keys = keys

    dropper: list[threading.Thread] = []

    def other_thread_drops() -> None:
        # The drop starts while the leader walks the keys (it takes the mutex the walk holds
        # now, so it runs once the walk's copy is made).
        dropper.append(threading.Thread(target=j.drop_prefix, args=(bases[2],)))
        dropper[0].start()
        if not j._mu.locked():  # a walk without the mutex: the drop runs now, in the middle of it
            dropper[0].join(30)

    keys.hook = other_thread_drops
    try:
        j.seal()  # the leader builds the footer's key table from self._keys
        dropper[0].join(30)
        assert not dropper[0].is_alive()
    finally:
        failed = j._failed
        j.close()
    assert failed is None, f"the journal fail-stopped: {failed}"


# --- 7. DirectoryStore: a concurrent maker of the same name removes the other's build --------


def test_store_create_racing_another_creator_leaves_a_name_that_never_opens(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    fs = HookFS()
    store = DirectoryStore(root, fs=fs)
    where = store.path_of("t")

    class Preempted(Exception):
        pass

    other = HookFS()  # process B: store.open("t", create=True) at the same moment

    def b_preempted_after_first_unlink(p: str) -> None:
        raise Preempted()

    other.after["unlink"] = b_preempted_after_first_unlink
    armed = [True]

    def at_publish(src: str, dst: str) -> None:
        # A has closed its build (the LOCK is free) and is about to rename it into place; B's
        # temp_dir_beside sees an unlocked build of the same name and starts removing it.
        if armed[0] and os.path.basename(src).startswith(".t.new-"):
            armed[0] = False
            # A holds its build's lock until the rename: B makes its own build beside it.
            mine = temp_dir_beside(other, where, "new", LOCK_FILE)
            assert os.path.exists(src) and mine != src
            os.rmdir(mine)

    fs.before["rename"] = at_publish
    store.open("t", create=True).close()
    fs.before.clear()
    # Whatever happened to that call, the name must now be usable ("whole or not at all").
    with store.open("t", create=True) as j:
        assert isinstance(j.append({"a": 1}), journal.Committed)


def test_store_copy_racing_another_copy_publishes_a_shorter_journal(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    fs = HookFS()
    store = DirectoryStore(root, fs=fs)
    with store.open("src", create=True, segment_size_bytes=4096) as j:
        for i in range(1, 120):
            j.append({"i": i, "pad": "x" * 120}, "flush")
        last = j.last_seq
    dst = store.path_of("dst")

    class Preempted(Exception):
        pass

    other = HookFS()  # process B: store.copy("src", "dst") at the same moment
    # listdir order is the file system's: here B happens to meet the newest segment first.
    other.listdir_order = lambda p, names: sorted(names, reverse=True)

    def b_stops(p: str) -> None:
        if p.endswith(fmt.SEGMENT_SUFFIX):
            raise Preempted()

    other.after["unlink"] = b_stops
    armed = [True]

    def at_publish(src: str, d: str) -> None:
        if armed[0] and os.path.basename(src).startswith(".dst.copy-"):
            armed[0] = False
            mine = temp_dir_beside(other, dst, "copy", LOCK_FILE)  # the copy's build holds its LOCK
            assert os.path.exists(src) and mine != src
            os.rmdir(mine)

    fs.before["rename"] = at_publish
    store.copy("src", "dst")
    fs.before.clear()
    assert store.exists("dst")
    if store.exists("dst"):
        with store.open("dst", readonly=True) as c:
            # "whole or not at all": a published copy holds every record of its source.
            assert c.last_seq == last, f"copy published with last_seq {c.last_seq}, source has {last}"


# --- 8. a footer that disagrees with its segment: the cursor refuses, the dense index serves -


def test_dense_get_serves_from_a_segment_whose_footer_disagrees(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    _fill(path, 100).close()
    seg = segments(path)[0]
    data = bytearray(seg.read_bytes())
    h = fmt.decode_segment_header(bytes(data))
    fs = OsFileSystem()
    f = fs.open_read(str(seg))
    try:
        info = read_seal(f, h, seg.name, f.size())
    finally:
        f.close()
    assert info is not None
    # A genuine seal frame whose payload says the segment begins one seq later (a writer bug,
    # or a footer from another build): read_seal raises "seal footer disagrees with its segment".
    payload = fmt.encode_seal_payload(
        info.record_count - 1, info.first_seq + 1, info.last_seq, info.index_interval_bytes,
        [(max(q, info.first_seq + 1), o) for q, o in info.entries], info.seal_offset,
        [(max(q, info.first_seq + 1), k) for q, k in info.keys],  # same sizes: same seal offset
    )
    frame = fmt.encode_frame(info.last_seq, fmt.KIND_SEAL, len(payload), payload, h.salt)
    assert info.seal_offset + len(frame) == len(data)
    data[info.seal_offset :] = frame
    seg.write_bytes(bytes(data))
    with journal.open(path, readonly=True) as ro:
        with pytest.raises(CorruptionError):
            list(ro.read(0))  # the sequential read refuses the segment
        with pytest.raises(CorruptionError):
            ro.get(info.first_seq + 1)  # a point read must refuse it too (before 8b45422 it did)


# --- 9. a reader open across a drop: get() raises a bare FileNotFoundError -------------------


def test_readonly_get_after_another_handles_drop_raises_a_typed_error_or_none(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    w = _fill(path, 100)
    with journal.open(path, readonly=True) as ro:
        assert ro.get(100) is not None  # the point-read cache lists the segments now
        w.seal()
        kept = w.append({"keep": True})
        assert isinstance(kept, journal.Committed)
        w.drop_prefix(kept.seq)
        try:
            got = ro.get(5)  # a seq the drop removed; ro.first_seq is still 1
        except JournalError:
            got = None  # a typed error that says what to do is fine (docs: JournalIOError)
        except OSError as exc:
            pytest.fail(f"get() raised a bare {type(exc).__name__}: {exc}")
        assert got is None or got.seq == 5
    w.close()
