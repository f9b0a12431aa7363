"""The crash model: which disk images a power loss at a given point of a recorded run can leave.

The log of a ``MemFileSystem`` is replayed from its base image. At any *crash point* k (after the
first k operations) each file has durable bytes (as of its last fsync/fdatasync) and a list of
pending data operations (writes, truncates) since then; each directory has durable entries (as of
its last fsync_dir) and pending entry operations (create, mkdir, rename, link, unlink). A crash state
picks, for every pending operation, one fate:

* ``keep`` -- it reached the disk; ``drop`` -- it did not;
* ``tear(lo, hi)`` -- only bytes [lo, hi) of a write reached the disk (a torn write: a prefix cut
  at a 512- or 4096-byte boundary or at any byte, or a later part without the earlier one);
* ``zeros`` / ``garbage`` -- the write's data did not reach the disk but the size it extended the
  file to did, so the new bytes read as zeros or as garbage.

Under the ``npsow`` model (no power-safe overwrite) a state may also *trash* whole sectors that a
pending write touched: the sector reads as garbage after the crash, including bytes in it that
were synced long before. With the default ``psow`` model a sector no pending write touched, and
the synced bytes of a touched one, are exactly as synced.

Nothing else changes: no synced byte flips, no synced directory entry disappears (that is media
corruption, not power loss).
"""

from __future__ import annotations

import hashlib
import posixpath
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from journal.crashsim.memfs import (
    CREATE,
    DIR_ENTRY,
    DIRSYNC,
    LINK,
    MKDIR,
    RENAME,
    SYNC,
    TRUNCATE,
    UNLINK,
    WRITE,
    Image,
    Op,
)

_V = TypeVar("_V")

MODELS = ("psow", "npsow")
SECTOR_SIZES = (512, 4096)
TEAR_POINTS_MAX = 6  # boundaries tried per torn write in an exhaustive sweep (first, last, spread)

KEEP = "keep"
DROP = "drop"
TEAR = "tear"
ZEROS = "zeros"
GARBAGE = "garbage"


@dataclass(frozen=True)
class Fate:
    how: str  # keep | drop | tear | zeros | garbage
    lo: int = 0  # tear: the persisted byte range of the write, relative to its offset
    hi: int = 0

    def __str__(self) -> str:
        return f"tear[{self.lo}:{self.hi}]" if self.how == TEAR else self.how


@dataclass(frozen=True)
class Trash:
    ino: int
    start: int
    end: int
    zeros: bool = False


@dataclass
class CrashState:
    """One power-loss outcome at crash point ``point``; ``fates`` default to drop."""

    point: int
    fates: dict[int, Fate] = field(default_factory=dict)
    trash: list[Trash] = field(default_factory=list)
    garbage_seed: int = 0
    label: str = ""

    def describe(self, log: list[Op]) -> list[str]:
        out = [f"crash after op {self.point} ({self.label})"]
        pend = _pending_ops(log[: self.point])
        for i in pend:
            out.append(f"  op {i}: {log[i].describe()} -> {self.fates.get(i, Fate(DROP))}")
        for t in self.trash:
            out.append(f"  trash inode {t.ino} bytes [{t.start}, {t.end}) with {'zeros' if t.zeros else 'garbage'}")
        return out


@dataclass
class Built:
    image: Image
    damaged_synced: bool  # a trashed sector overlapped bytes that were durable before the crash
    digest: str


class Replay:
    """Walk a log forward, keeping durable and current state and the pending operations."""

    def __init__(self, log: list[Op], base: Image, base_inodes: dict[str, int]) -> None:
        self.log = log
        files, dirs = base
        self.cur_dirs: dict[str, dict[str, int]] = {d: {} for d in dirs}
        for d in dirs:
            parent = posixpath.dirname(d)
            if parent != d and parent in self.cur_dirs:
                self.cur_dirs[parent][posixpath.basename(d)] = DIR_ENTRY
        self.cur_data: dict[int, bytearray] = {}
        for path, ino in base_inodes.items():
            self.cur_dirs[posixpath.dirname(path)][posixpath.basename(path)] = ino
            self.cur_data[ino] = bytearray(files[path])
        self.dur_dirs = {d: dict(e) for d, e in self.cur_dirs.items()}
        self.dur_data: dict[int, bytes] = {i: bytes(b) for i, b in self.cur_data.items()}
        # How far each file holds bytes that a write put there; past it, up to the size, only
        # zeros a size extension made (a writer's reserved space). Trash there harms nothing
        # synced, and a write landing there may leave zeros or stale garbage, as past the end.
        self.cur_written: dict[int, int] = {i: len(b) for i, b in self.cur_data.items()}
        self.dur_written: dict[int, int] = dict(self.cur_written)
        self.dir_pending: dict[str, list[int]] = {}
        self.ino_pending: dict[int, list[int]] = {}
        # Directory renames so far: (op index, old path, new path). The tables above are keyed
        # by a directory's path now; an op logged before a move names its old path (see _now).
        self.dir_moves: list[tuple[int, str, str]] = []
        self.point = 0

    def _now(self, path: str, i: int) -> str:
        """Where the directory ``path``, as named by op number ``i``, is now (after later moves)."""
        for r, src, dst in self.dir_moves:
            if r > i:
                path = _moved(path, src, dst)
        return path

    def advance(self) -> Op:
        """Apply op number ``point`` and move the crash point past it."""
        i = self.point
        op = self.log[i]
        self.point += 1
        k = op.kind
        if k == WRITE:
            buf = self.cur_data[op.ino]
            _write(buf, op.offset, op.data)
            self.cur_written[op.ino] = max(self.cur_written.get(op.ino, 0), op.offset + len(op.data))
            self.ino_pending.setdefault(op.ino, []).append(i)
        elif k == TRUNCATE:
            _truncate(self.cur_data[op.ino], op.offset)
            self.cur_written[op.ino] = min(self.cur_written.get(op.ino, 0), op.offset)
            self.ino_pending.setdefault(op.ino, []).append(i)
        elif k == SYNC:
            self.dur_data[op.ino] = bytes(self.cur_data[op.ino])
            self.dur_written[op.ino] = self.cur_written.get(op.ino, 0)
            self.ino_pending.pop(op.ino, None)
        elif k == CREATE:
            self.cur_dirs[op.path][op.name] = op.ino
            self.cur_data[op.ino] = bytearray()
            self.dur_data[op.ino] = b""
            self.cur_written[op.ino] = self.dur_written[op.ino] = 0
            self.dir_pending.setdefault(op.path, []).append(i)
        elif k == MKDIR:
            self.cur_dirs[op.path][op.name] = DIR_ENTRY
            new = posixpath.join(op.path, op.name)
            self.cur_dirs[new] = {}
            self.dur_dirs[new] = {}
            self.dir_pending.setdefault(op.path, []).append(i)
        elif k == RENAME:
            self.cur_dirs[op.path].pop(op.name, None)
            self.cur_dirs[op.dst_dir][op.dst] = op.ino
            if op.ino == DIR_ENTRY:  # a directory moves with everything under it
                src, dst = posixpath.join(op.path, op.name), posixpath.join(op.dst_dir, op.dst)
                _rekey(self.cur_dirs, src, dst)
                _rekey(self.dur_dirs, src, dst)
                _rekey(self.dir_pending, src, dst)
                self.dir_moves.append((i, src, dst))
            self.dir_pending.setdefault(op.path, []).append(i)
            if op.dst_dir != op.path:
                self.dir_pending.setdefault(op.dst_dir, []).append(i)
        elif k == LINK:  # a new entry of an existing file: pending in its directory, like a create
            self.cur_dirs[op.dst_dir][op.dst] = op.ino
            self.dir_pending.setdefault(op.dst_dir, []).append(i)
        elif k == UNLINK:
            self.cur_dirs[op.path].pop(op.name, None)
            self.dir_pending.setdefault(op.path, []).append(i)
        elif k == DIRSYNC:
            self.dur_dirs[op.path] = dict(self.cur_dirs[op.path])
            self.dir_pending.pop(op.path, None)
        return op

    def pending(self) -> list[int]:
        """Indexes of every operation a crash now could still keep, drop or tear, in order."""
        out: set[int] = set()
        for lst in self.dir_pending.values():
            out.update(lst)
        for lst in self.ino_pending.values():
            out.update(lst)
        return sorted(out)

    def build(self, state: CrashState) -> Built:
        assert state.point == self.point, "build a state at the replay's current point"
        dirs = {d: dict(e) for d, e in self.dur_dirs.items()}
        data_ops: dict[int, list[int]] = {}
        for i in self.pending():
            op = self.log[i]
            fate = state.fates.get(i, Fate(DROP))
            if op.kind in (WRITE, TRUNCATE):
                if fate.how != DROP:
                    data_ops.setdefault(op.ino, []).append(i)
                continue
            if fate.how != KEEP:
                continue
            where = self._now(op.path, i)
            if op.kind == CREATE:
                dirs.setdefault(where, {})[op.name] = op.ino
            elif op.kind == MKDIR:
                dirs.setdefault(where, {})[op.name] = DIR_ENTRY
                dirs.setdefault(self._now(posixpath.join(op.path, op.name), i), {})
            elif op.kind == RENAME:
                src = dirs.setdefault(where, {})
                if src.get(op.name) == op.ino:
                    del src[op.name]
                dirs.setdefault(self._now(op.dst_dir, i), {})[op.dst] = op.ino
            elif op.kind == LINK:
                dirs.setdefault(self._now(op.dst_dir, i), {})[op.dst] = op.ino
            elif op.kind == UNLINK:
                src = dirs.setdefault(where, {})
                if src.get(op.name) == op.ino:
                    del src[op.name]
        rng = random.Random(state.garbage_seed)
        files: dict[str, bytes] = {}
        reachable: set[str] = set()
        # (path in the image, key of its entries in ``dirs``): they differ for a directory whose
        # rename was lost: it keeps its old name, its entries are filed under the new one.
        stack = [(d, d) for d in dirs if posixpath.dirname(d) == d]
        damaged = False
        trash_by_ino: dict[int, list[Trash]] = {}
        for t in state.trash:
            trash_by_ino.setdefault(t.ino, []).append(t)
        while stack:
            d, key = stack.pop()
            reachable.add(d)
            for name, node in dirs.get(key, {}).items():
                path = posixpath.join(d, name)
                if node == DIR_ENTRY:
                    sub = posixpath.join(key, name)
                    sub = sub if sub in dirs else self._now(sub, -1)
                    if sub in dirs:
                        stack.append((path, sub))
                    continue
                buf = bytearray(self.dur_data.get(node, b""))
                durable_len = min(len(buf), self.dur_written.get(node, len(buf)))
                written = durable_len
                for i in data_ops.get(node, []):
                    written = _apply(buf, self.log[i], state.fates.get(i, Fate(KEEP)), rng, written)
                for t in trash_by_ino.get(node, []):
                    start, end = t.start, min(t.end, len(buf))
                    if start < end:
                        buf[start:end] = bytes(end - start) if t.zeros else rng.randbytes(end - start)
                        if start < durable_len:
                            damaged = True
                files[path] = bytes(buf)
        h = hashlib.blake2b(digest_size=16)
        for path in sorted(files):
            h.update(path.encode() + b"\0" + len(files[path]).to_bytes(8, "little") + files[path])
        for d in sorted(reachable):
            h.update(b"D" + d.encode() + b"\0")
        return Built((files, frozenset(reachable)), damaged, h.hexdigest())


def _pending_ops(log: list[Op]) -> list[int]:
    """Indexes of operations not yet made durable by a later sync (for describing a state)."""
    ino_p: dict[int, list[int]] = {}
    dir_p: dict[str, list[int]] = {}
    for i, op in enumerate(log):
        if op.kind in (WRITE, TRUNCATE):
            ino_p.setdefault(op.ino, []).append(i)
        elif op.kind == SYNC:
            ino_p.pop(op.ino, None)
        elif op.kind in (CREATE, MKDIR, UNLINK):
            dir_p.setdefault(op.path, []).append(i)
        elif op.kind == LINK:
            dir_p.setdefault(op.dst_dir, []).append(i)
        elif op.kind == RENAME:
            if op.ino == DIR_ENTRY:
                _rekey(dir_p, posixpath.join(op.path, op.name), posixpath.join(op.dst_dir, op.dst))
            dir_p.setdefault(op.path, []).append(i)
            dir_p.setdefault(op.dst_dir, []).append(i)
        elif op.kind == DIRSYNC:
            dir_p.pop(op.path, None)
    return sorted({i for lst in (*ino_p.values(), *dir_p.values()) for i in lst})


def _moved(path: str, src: str, dst: str) -> str:
    """``path`` after the directory ``src`` was renamed to ``dst``."""
    if path == src:
        return dst
    if path.startswith(src + "/"):
        return dst + path[len(src) :]
    return path


def _rekey(table: dict[str, _V], src: str, dst: str) -> None:
    """Move the entries of ``table`` for directory ``src`` and its subdirectories under ``dst``."""
    for path in [p for p in table if p == src or p.startswith(src + "/")]:
        table[_moved(path, src, dst)] = table.pop(path)


def _write(buf: bytearray, offset: int, data: bytes) -> None:
    if offset > len(buf):
        buf.extend(bytes(offset - len(buf)))
    buf[offset : offset + len(data)] = data


def _truncate(buf: bytearray, size: int) -> None:
    if size < len(buf):
        del buf[size:]
    else:
        buf.extend(bytes(size - len(buf)))


def _apply(buf: bytearray, op: Op, fate: Fate, rng: random.Random, written: int) -> int:
    """Apply one kept data operation; returns how far the file now holds written bytes."""
    if op.kind == TRUNCATE:
        _truncate(buf, op.offset)
        return min(written, op.offset)
    end = op.offset + len(op.data)
    if fate.how == KEEP:
        _write(buf, op.offset, op.data)
        return max(written, end)
    if fate.how == TEAR:
        _write(buf, op.offset + fate.lo, op.data[fate.lo : fate.hi])
        return max(written, op.offset + fate.hi)
    if fate.how in (ZEROS, GARBAGE):
        # The size (or the blocks of never-written space) got there, the data did not: from
        # the last written byte to the write's end (a gap before the write included) the file
        # reads as zeros or garbage.
        lo = min(written, len(buf))
        if end > lo:
            if end > len(buf):
                buf.extend(bytes(end - len(buf)))
            if fate.how == GARBAGE:
                buf[lo:end] = rng.randbytes(end - lo)
            return max(written, end)
    return written


# --- state generation -------------------------------------------------------------------------


def _boundaries(op: Op, sector: int) -> list[int]:
    """Split points (relative to the write) where a tear at ``sector`` granularity can fall."""
    first = (op.offset // sector + 1) * sector
    return [b - op.offset for b in range(first, op.offset + len(op.data), sector)]


def _spread(points: list[int], n: int) -> list[int]:
    if len(points) <= n:
        return points
    step = (len(points) - 1) / (n - 1)
    return sorted({points[round(i * step)] for i in range(n)})


def touched_sectors(op: Op, sector: int) -> list[tuple[int, int]]:
    if not op.data:
        return []
    first = op.offset // sector
    last = (op.offset + len(op.data) - 1) // sector
    return [(s * sector, (s + 1) * sector) for s in range(first, last + 1)]


def exhaustive(replay: Replay, model: str, rng: random.Random) -> Iterator[CrashState]:
    """Every structured state at the replay's current point: cuts, omit-one, tears, extensions."""
    k = replay.point
    log = replay.log
    pend = replay.pending()

    def prefix(c: int) -> dict[int, Fate]:
        return {i: Fate(KEEP) for i in pend[:c]}

    def seed() -> int:
        return rng.getrandbits(32)

    for c in range(len(pend) + 1):
        yield CrashState(k, prefix(c), label=f"keep first {c} of {len(pend)} pending")
    if len(pend) > 1:
        for j in range(len(pend)):
            fates = {i: Fate(KEEP) for i in pend if i != pend[j]}
            yield CrashState(k, fates, label=f"omit pending #{j}")
    for c, i in enumerate(pend):
        op = log[i]
        if op.kind != WRITE or len(op.data) < 2:
            continue
        cuts: set[int] = set()
        for sector in SECTOR_SIZES:
            cuts.update(_spread(_boundaries(op, sector), TEAR_POINTS_MAX))
        cuts.add(rng.randrange(1, len(op.data)))
        for cut in sorted(cuts):
            f = prefix(c)
            f[i] = Fate(TEAR, 0, cut)
            yield CrashState(k, f, label=f"tear pending #{c} after {cut} bytes")
        sector_cuts = _boundaries(op, 512)
        if sector_cuts:
            cut = sector_cuts[len(sector_cuts) // 2]
            f = prefix(c)
            f[i] = Fate(TEAR, cut, len(op.data))
            yield CrashState(k, f, label=f"tear pending #{c}: only bytes from {cut} on")
        for how in (ZEROS, GARBAGE):
            f = prefix(c)
            f[i] = Fate(how)
            yield CrashState(k, f, garbage_seed=seed(), label=f"pending #{c} extends the size with {how}")
    if model == "npsow":
        seen: set[tuple[int, int]] = set()
        for i in pend:
            op = log[i]
            if op.kind != WRITE:
                continue
            for sector in SECTOR_SIZES:
                for start, end in touched_sectors(op, sector):
                    if (op.ino, start) in seen and sector == 512:
                        continue
                    seen.add((op.ino, start))
                    for c in (0, len(pend)):
                        yield CrashState(
                            k,
                            prefix(c),
                            [Trash(op.ino, start, end)],
                            garbage_seed=seed(),
                            label=f"trash {sector}-byte sector at {start}, keep first {c} pending",
                        )


def sample(replay: Replay, model: str, rng: random.Random) -> CrashState:
    """One random state at the replay's current point."""
    k = replay.point
    log = replay.log
    pend = replay.pending()
    fates: dict[int, Fate] = {}
    style = rng.random()
    cut = rng.randint(0, len(pend))
    for n, i in enumerate(pend):
        op = log[i]
        if style < 0.5:  # in order up to a cut
            keep = n < cut
        else:  # any subset
            keep = rng.random() < 0.5
        fate = Fate(KEEP if keep else DROP)
        if op.kind == WRITE and len(op.data) > 1 and (n == cut or rng.random() < 0.15):
            r = rng.random()
            if r < 0.5:
                sector = rng.choice((1, *SECTOR_SIZES))
                points = _boundaries(op, sector) if sector > 1 else [rng.randrange(1, len(op.data))]
                if points:
                    p = rng.choice(points)
                    fate = Fate(TEAR, 0, p) if rng.random() < 0.7 else Fate(TEAR, p, len(op.data))
            elif r < 0.75:
                fate = Fate(rng.choice((ZEROS, GARBAGE)))
        fates[i] = fate
    trash: list[Trash] = []
    if model == "npsow":
        writes = [log[i] for i in pend if log[i].kind == WRITE and log[i].data]
        for _ in range(rng.choice((0, 1, 1, 2))):
            if not writes:
                break
            op = rng.choice(writes)
            sector = rng.choice(SECTOR_SIZES)
            start, end = rng.choice(touched_sectors(op, sector))
            trash.append(Trash(op.ino, start, end, zeros=rng.random() < 0.2))
    return CrashState(k, fates, trash, rng.getrandbits(32), label=f"random ({'cut' if style < 0.5 else 'subset'})")


def crash_points(log: list[Op]) -> list[int]:
    """Points worth crashing at: after every operation that changed something (and at 0)."""
    pts = [0]
    for i, op in enumerate(log):
        if op.kind in (WRITE, TRUNCATE, CREATE, MKDIR, RENAME, LINK, UNLINK, SYNC, DIRSYNC):
            pts.append(i + 1)
    return pts
