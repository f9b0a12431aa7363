"""The dictionary workload for the crash harness: a power loss while a journal installs, uses and
switches trained zstd dictionaries (format version 4, docs/FORMAT.md "Dictionaries"; issue 33).

The built-in workload "dictionary" (journal/crashsim/workloads/__init__.py). Its starting image is
a first life written without a dictionary, with 4 KiB segments so that some are sealed. The
recorded run, on that image:

* open with dictionary D1 (installed: its file written whole, fsync'd, renamed and the directory
  fsync'd, then frames naming it), appends one at a time and in batches at mixed durabilities,
  large incompressible ones among them so the segment rolls over, close;
* reopen with dictionary D2 (a second id: a switch), more appends, close -- D2 either preferring
  id 1 (taken: it gets the next free id, written) or stored first in a file outside the journal
  (``/dicts``, written atomically in the run) and given as ``Dictionary(path=...)``, which
  install hard-links;
* sometimes reopen with D1 again under another preferred id (reused by its digest: no write).

Every crash image recovers through the engine's open (the core invariants hold on it), then
``recover_and_check`` adds, on the recovered image:

* every frame that names a dictionary id has that dictionary file whole: it decodes, and its
  digest is the one the writer used for that id (id 1 is D1, id 2 is D2); a frame naming a
  missing or partial file is a violation, as is any ``dict-*.zdict`` at its name that is not
  whole (the engine only ever renames or links a synced file there);
* ``verify`` of the recovered image is clean;
* reading with a fresh process-level table cache (no zstd tables kept from the run or an earlier
  check) gives the same records.

The checks only read; their verdict is kept per image, so the harness's second recovery of an
image that recovery left unchanged does not run them again.
"""

from __future__ import annotations

import functools
import json
import posixpath
import random
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zstandard

from journal.crashsim.memfs import MemFileSystem
from journal.crashsim.workloads.core import Ctx, Ledger, workload
from journal.crashsim.workloads.session_fork import CheckCache, image_key
from journal.engine import dictionary as D
from journal.engine import format as fmt
from journal.engine.core import Journal
from journal.engine.reader import Record
from journal.engine.segment import list_segments
from journal.engine.verify import CLEAN, verify
from journal.errors import CorruptionError, UnexpectedLinkError
from journal.fs import FileSystem, read_file, write_atomic

SEGMENT_BYTES = 4096  # small: the first life seals segments, the run rolls over
DICT_BYTES = 2048  # a trained dictionary small enough to copy into every crash image cheaply
OUTSIDE_DIR = "/dicts"  # where a dictionary is stored before a journal links it in
D1_ID = 1
D2_ID = 2  # the id D2 ends up with either way: the next free one, or its own through the link
WORDS = ("lorem", "ipsum", "event", "tool", "result", "message", "assistant", "user", "ok", "error")

_CHECKED = CheckCache()


class DictionaryViolation(AssertionError):
    """A dictionary invariant failed on a recovered crash image."""


def _samples(seed: int, kind: str) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(400):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        out.append(json.dumps({"type": kind, "id": f"sample-{i}", "text": text}, separators=(",", ":")).encode())
    return out


@functools.cache
def trained() -> tuple[bytes, bytes]:
    """D1 and D2: two dictionaries trained on the kind of event the run appends (zstd's training
    is deterministic for the same samples, so a replay in another process gets the same bytes)."""
    d1 = zstandard.train_dictionary(DICT_BYTES, _samples(1, "event")).as_bytes()  # type: ignore[arg-type]
    d2 = zstandard.train_dictionary(DICT_BYTES, _samples(2, "event")).as_bytes()  # type: ignore[arg-type]
    assert d1 != d2
    return d1, d2


def expected_digests() -> dict[int, bytes]:
    """The digest the writer used for each id a frame may name."""
    d1, d2 = trained()
    return {D1_ID: D.digest_of(d1), D2_ID: D.digest_of(d2)}


def _event(ctx: Ctx) -> dict[str, Any]:
    """A unique JSON event the dictionaries compress well (a frame that names the dictionary)."""
    text = " ".join(ctx.rng.choice(WORDS) for _ in range(ctx.rng.randint(8, 90)))
    ev: dict[str, Any] = ctx.payload(as_dict=True, size=16)
    ev["text"] = text
    return ev


def _big(ctx: Ctx) -> bytes:
    """An incompressible record: stored raw (no dictionary), it fills the segment to a roll-over."""
    raw: bytes = ctx.payload(size=ctx.rng.randint(900, 1600), as_dict=False)
    return raw.split(b"|", 1)[0] + b"|" + ctx.rng.randbytes(len(raw))


def _first_life(seed: int, options: dict[str, Any]) -> tuple[Any, Ledger]:
    fs = MemFileSystem()
    ctx = Ctx(fs, options, seed, fs.op_count, tag="first-life-")
    j = ctx.open()
    # Until a segment is sealed, then a few more in the live one.
    extra = ctx.rng.randint(0, 3)
    while len(list_segments(fs, ctx.path)) < 2 or extra > 0:
        extra -= len(list_segments(fs, ctx.path)) >= 2
        j.append(_big(ctx) if ctx.rng.random() < 0.6 else _event(ctx), durability=ctx.durability(0.8))
    j.close()
    for a in ctx.ledger.attempts:  # everything of the first life precedes every crash point
        a.start = a.end = a.t0 = a.t1 = 0
    ctx.ledger.created_at = 0
    return fs.snapshot(), ctx.ledger


def _life(ctx: Ctx, d: D.Dictionary, roll: bool = False) -> None:
    """One open with ``d``: single appends and batches at mixed durabilities, some large;
    ``roll``: until the segment rolls over, then frames naming ``d`` in the new one."""
    j = ctx.open(create=False, dictionary=d)
    rng = ctx.rng
    if roll:
        segments = len(list_segments(ctx.fs, ctx.path))
        j.append(_event(ctx), durability=ctx.durability())
        for _ in range(8):  # 4 KiB segments: a few large records are always enough
            if len(list_segments(ctx.fs, ctx.path)) > segments:
                break
            j.append(_big(ctx), durability=ctx.durability())
    for _ in range(rng.randint(3, 6)):
        r = rng.random()
        if r < 0.3:
            j.append_many([_event(ctx) for _ in range(rng.randint(2, 4))], durability=ctx.durability())
        elif r < 0.5:
            j.append(_big(ctx), durability=ctx.durability())
        else:
            j.append(_event(ctx), durability=ctx.durability())
    j.close()


def dictionary_lives(ctx: Ctx) -> None:
    """Install D1 and write with it, switch to D2 (written, or linked from a stored file), and
    sometimes back to D1 (reused by digest)."""
    d1, d2 = trained()
    _life(ctx, D.Dictionary(D1_ID, d1), roll=True)
    if ctx.rng.random() < 0.5:
        # Stored outside the journal first (what a store's training does), then linked in.
        stored = posixpath.join(OUTSIDE_DIR, D.dictionary_file_name(D2_ID))
        if not ctx.fs.exists(OUTSIDE_DIR):
            ctx.fs.mkdir(OUTSIDE_DIR)
            ctx.fs.fsync_dir("/")
        write_atomic(ctx.fs, stored, D.encode_dictionary_file(D.Dictionary(D2_ID, d2)))
        second = D.Dictionary(D2_ID, d2, path=stored)
    else:
        second = D.Dictionary(D1_ID, d2)  # id 1 is D1's: D2 takes the next free id
    _life(ctx, second)
    if ctx.rng.random() < 0.5:
        _life(ctx, D.Dictionary(9, d1))  # the same bytes as file 1: reused, nothing written


# --- the checks -------------------------------------------------------------------------------


@contextmanager
def fresh_tables() -> Iterator[None]:
    """The process's dictionary tables and this thread's (de)compressors as a new process has
    them (none), for the duration; the run's come back afterwards (open writers hold theirs)."""
    saved = (D._decodings, D._encodings, D._recent, D._contexts)
    D._decodings = weakref.WeakValueDictionary()
    D._encodings = weakref.WeakValueDictionary()
    D._recent = OrderedDict()
    D._contexts = threading.local()
    try:
        yield
    finally:
        D._decodings, D._encodings, D._recent, D._contexts = saved


def named_ids(fs: FileSystem, path: str) -> list[tuple[str, int, int]]:
    """(segment, seq, dictionary id) of every record frame of the journal that names one."""
    out = []
    for seg in list_segments(fs, path):
        data = read_file(fs, posixpath.join(path, seg.name))
        try:
            header = fmt.decode_segment_header(data)
        except (CorruptionError, ValueError):
            continue  # the engine's recovery judges a segment without a whole header
        res = fmt.py_scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
        for fr in fmt.record_frames(res.frames):
            dict_id = fmt.read_frame_header(data, fr.offset)[5]
            if dict_id:
                out.append((seg.name, fr.seq, dict_id))
    return out


def check_files(fs: FileSystem, path: str) -> list[str]:
    """Every dictionary file at its name is whole and the writer's for its id, and every frame
    that names an id has that file. Run on the image as the crash left it, before recovery: the
    engine writes no frame naming a dictionary before its file is durable, so not even a frame
    recovery would cut off may name a missing one (and the engine's open would refuse the image
    for the frames it reads, hiding which order was broken)."""
    out: list[str] = []
    want = expected_digests()
    whole: dict[int, bool] = {}
    for dict_id in D.dictionary_ids(fs, path):
        name = D.dictionary_file_name(dict_id)
        try:
            got = D.load_dictionary(fs, path, dict_id)
        except (CorruptionError, UnexpectedLinkError, FileNotFoundError) as exc:
            out.append(f"{name} is at its name but not whole: {exc}")
            whole[dict_id] = False
            continue
        whole[dict_id] = got.digest == want.get(dict_id)
        if not whole[dict_id]:
            out.append(f"{name} holds a dictionary other than the one the writer gave id {dict_id}")
    for seg, seq, dict_id in named_ids(fs, path):
        if dict_id not in whole:
            out.append(f"{seg} seq {seq} names dictionary {dict_id}, whose file is missing")
        elif not whole[dict_id]:
            out.append(f"{seg} seq {seq} names dictionary {dict_id}, whose file is not the writer's whole")
    return out


def check_recovered(fs: FileSystem, path: str, records: list[Record]) -> list[str]:
    """On the recovered image: the files again, ``verify`` is clean, and a read with fresh
    dictionary tables gives ``records``."""
    out = check_files(fs, path)
    report = verify(path, fs=fs)
    if report.verdict != CLEAN:
        out.append(f"verify of the recovered image says {report.verdict}: {report.summary()}")
    with fresh_tables():
        j = Journal.open(path, fs=fs, readonly=True)
        try:
            again = [(r.seq, r.payload) for r in j.read()]
        finally:
            j.close()
    if again != [(r.seq, r.payload) for r in records]:
        out.append(f"a read with fresh dictionary tables gives other records ({len(again)} for {len(records)})")
    return out


def _checked(fs: FileSystem, path: str, stage: bytes, check: Any) -> None:
    """``check``'s violations on this image at ``stage``, raised; kept by image and stage."""
    if not isinstance(fs, MemFileSystem) or not fs.exists(path):
        return
    key = stage + image_key(fs)
    problems = _CHECKED.get(key)
    if problems is None:
        problems = check()
        _CHECKED.put(key, problems)
    if problems:
        raise DictionaryViolation("; ".join(problems))


def recover_and_check(fs: FileSystem, path: str, options: dict[str, Any], create: bool) -> list[Record]:
    """The files and frames as the crash left them, then the engine's recovery (open, read
    everything, close), then the checks of the recovered image."""
    _checked(fs, path, b"crashed", lambda: check_files(fs, path))
    j = Journal.open(path, create=create, fs=fs, **options)
    try:
        recs = list(j.read())
    finally:
        j.close()
    _checked(fs, path, b"recovered", lambda: check_recovered(fs, path, recs))
    return recs


workload("dictionary", recover=recover_and_check, prepare=_first_life, segment_size_bytes=SEGMENT_BYTES)(
    dictionary_lives
)

__all__ = [
    "DictionaryViolation",
    "check_files",
    "check_recovered",
    "dictionary_lives",
    "expected_digests",
    "fresh_tables",
    "named_ids",
    "recover_and_check",
    "trained",
]
