"""A zstd dictionary per session store, trained from the store's own records (docs/SESSIONS.md,
"Dictionaries").

Layout, beside the sessions::

    <root>/dictionaries/dict-<id:05d>.zdict   a trained dictionary (the engine's file format:
                                              magic, version, id, length, digest, data, XXH64)
    <root>/dictionaries/dict-<id:05d>.stats   what its training measured (informational only)
    <root>/dictionaries/TRAIN.lock            held while a training publishes its dictionary

Ids run from 1 and are never reused: a new one is the highest name listed plus one, whether that
file verifies or not, and the store never removes a dictionary file.

**The current dictionary is the one with the highest id.** No pointer file: a dictionary file is
written whole under a temp name, synced and renamed into place (its directory synced), so the
rename is the one durable step that makes it current. There is no state where a pointer names a
file that is missing or not yet whole, and no second file to agree with the first. A training
whose dictionary does not pay stores nothing, so the current one stays.

Every session the store opens for writing gets the current dictionary (``dictionary=`` of
``journal.open``, with ``path=`` the store's file so that the engine hard-links it into the
journal directory); the engine writes it durably there before any frame names it, so a journal
directory alone, copied anywhere, reads back. Sessions opened read-only get nothing: their
directory holds what their frames name. A session made before the dictionary keeps its frames
as they are and uses the dictionary for its new ones.

A dictionary file of the store that does not verify (damaged or crafted), or a symbolic link at
``dictionaries/`` or at the current file, is never used: sessions open for writing without a
dictionary (``SessionStore.dictionary_problem`` says why) rather than refuse, since the dictionary
only saves bytes and a session's writes must not stop on it; ``journal dictionary list`` and a
training report it (typed errors), and training again makes a new, whole, current one.

Training samples records read-only, in bounded memory: at most ``sample_bytes_max`` bytes in all,
at most SAMPLE_RECORDS_PER_SESSION_MAX records of a session, each cut to SAMPLE_RECORD_BYTES_MAX,
the byte budget shared evenly over the sessions (what one leaves unused goes to the next), and
the records of a session taken spread over it. One session in HELD_OUT_EVERY is held out whole
(one frame in HELD_OUT_EVERY when there are fewer sessions than that).

**A dictionary is kept only where it pays for its own bytes, the way the store writes.** The
held-out part is measured as the store wrote it: whole frames (``_session_frames``: records that
share a block frame were written together and are compressed together, at the engine's block
level; a record framed alone is compressed alone, at its level), read in runs spread over the
session, at most ``sample_bytes_max // HELD_OUT_EVERY`` bytes. A block already finds in itself
much of what a dictionary holds, so records written in blocks gain far less from one than
records compressed one by one (on real session files, 3-5% against 20-40%). Each frame is
compressed without and with the new dictionary, and the bytes it saves a record are scaled to
the records the store holds (``store_records``: the sampled sessions' records, times the
sessions listed over those read): the dictionary is kept only when that saving is more than the
dictionary file's own bytes (paid once per store: every journal holds it by hard link) and at
least DICTIONARY_SAVINGS_MIN of the held-out frames' stored bytes. The store's records so far
stand for what it will write; a store that grows trains again (``should_retrain``). Where the
size asked for does not pay, smaller ones (halves, down to DICTIONARY_BYTES_MIN, at most
SIZE_TRIES_MAX sizes in all) are trained and measured the same way, and the first that pays is
kept; when none does, nothing is stored and ``TrainReport.reason`` says why.

Drift: ``should_retrain`` samples the newest records (the last DRIFT_RECORDS_PER_SESSION of each
of the DRIFT_SESSIONS_MAX newest sessions), trains a
fresh dictionary of the current one's size on part of them, and compresses the rest with each;
it advises training again when the fresh one saves at least DRIFT_SAVINGS_MIN over the current
one (or when there is none and the store has enough records). Nothing runs in the background:
the caller (or ``journal dictionary train``) decides when.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import xxhash
import zstandard

import journal
from journal import (
    DICTIONARY_BYTES_MAX,
    DICTIONARY_BYTES_MIN,
    DICTIONARY_ID_MAX,
    Dictionary,
    api,
    dictionary_file_name,
    encode_dictionary_file,
    parse_dictionary_file_name,
    read_dictionary_file,
)
from journal.errors import CorruptionError, JournalError, UnexpectedFileError
from journal.fs import FileSystem, ensure_dir, read_all, refuse_link, take_lock, write_atomic
from journal.session.errors import StoreError

if TYPE_CHECKING:
    from journal.session.store import SessionStore

# The engine's dictionary API comes through the root package: the session layer imports nothing
# of journal.engine itself (pyproject.toml's layer contract).
DICTIONARIES_DIR = "dictionaries"
STATS_SUFFIX = ".stats"
TRAIN_LOCK = "TRAIN.lock"
TRAIN_LOCK_TIMEOUT_S = 10.0

# On the real logs of ../shared/corpus a 16 KiB dictionary saved within 2 points of what a larger
# one saves on records written one by one (bench/bench_store_dictionary.py); it is paid once per store.
DICTIONARY_SIZE_BYTES_DEFAULT = 16 * 1024
SAMPLE_BYTES_MAX_DEFAULT = 8 * 1024 * 1024  # the most a training holds in memory
SAMPLE_RECORDS_PER_SESSION_MAX = 2000  # no one long session fills the sample
# A dictionary helps a payload most in its first KiBs, where the payload has no history of its
# own to match; a record's head stands for it in the sample, and one huge record cannot fill it.
SAMPLE_RECORD_BYTES_MAX = 16 * 1024
SESSIONS_SAMPLED_MAX = 4096  # more sessions than this: an even spread of them by id (by creation)
HELD_OUT_EVERY = 5  # one sample in five is held out to measure what the dictionary saves
# Enough records: zstd's trainer needs several times the dictionary's size in samples to find
# what recurs, and one session's records make a dictionary of that session, not of the store.
TRAIN_SAMPLE_BYTES_MIN = 64 * 1024
TRAIN_SAMPLE_TO_DICTIONARY_MIN = 8  # the training sample is at least this many times the dictionary
TRAIN_SESSIONS_MIN = 2
TRAIN_RECORDS_MIN = 64
DICTIONARY_SAVINGS_MIN = 0.05  # stored only when it saves 5% of the held-out frames' stored bytes
DRIFT_SAVINGS_MIN = 0.05  # retrain when a fresh dictionary saves 5% over the current one on new records
DRIFT_RECORDS_PER_SESSION = 200  # the newest records of each session that stand for "recent"
DRIFT_SESSIONS_MAX = 64  # ... of the newest sessions (by id: by creation)
# How the engine stores a frame's records (journal/engine/encoding.py), repeated here because the
# session layer imports nothing of the engine; tests/test_dictionary_pays.py holds them equal.
MEASURE_ZSTD_LEVEL = 1  # a record framed alone (ZSTD_LEVEL)
MEASURE_BLOCK_ZSTD_LEVEL = 3  # the records of a block frame, compressed as one (BLOCK_ZSTD_LEVEL)
MEASURE_COMPRESS_MIN_BYTES = 256  # shorter is stored raw without a dictionary (COMPRESS_MIN_BYTES)
MEASURE_DICT_COMPRESS_MIN_BYTES = 64  # ... and with one (DICT_COMPRESS_MIN_BYTES)
# A frame measured whole is at most this many bytes of records (the engine's BLOCK_BYTES_LIMIT:
# no block holds more); a record framed alone that is longer is measured by its head.
MEASURE_FRAME_BYTES_MAX = 1024 * 1024
MEASURE_BLOCK_RECORDS_MAX = 4096  # the most records a block frame holds (BLOCK_RECORDS_MAX)
MEASURE_RUNS_PER_SESSION = 4  # a measured session is read in this many runs of whole frames, spread
# Sizes a training tries: the one asked for, then halves while the one before does not pay (each
# try is one zstd training on the sample: seconds for megabytes).
SIZE_TRIES_MAX = 4
STATS_BYTES_MAX = 64 * 1024  # a stats file is a few hundred bytes; a longer one is not read
_STATS_MAGIC = b"journal-store-dictionary-stats 1\n"

Progress = Callable[[int, int], None]

__all__ = [
    "DICTIONARIES_DIR",
    "DICTIONARY_SAVINGS_MIN",
    "SIZE_TRIES_MAX",
    "DriftReport",
    "NotEnoughRecordsError",
    "StoreDictionaryDamagedError",
    "StoreDictionaryError",
    "StoredDictionary",
    "TrainReport",
    "current_dictionary",
    "list_dictionaries",
    "should_retrain",
    "train_store_dictionary",
]


class StoreDictionaryError(StoreError):
    """Base class of the errors of a store's dictionaries."""


class StoreDictionaryDamagedError(StoreDictionaryError, CorruptionError):
    """A dictionary file of the store does not verify (or the store's choice cannot be read)."""

    def __init__(self, path: str, reason: str) -> None:
        JournalError.__init__(
            self,
            f"the store's dictionary file {path!r} cannot be used ({reason}); sessions open for writing without "
            "a dictionary meanwhile. Train again (`journal dictionary train STORE`) to make a new current one; "
            "journals that already hold it keep their own copy",
        )
        self.segment, self.offset, self.seq, self.reason = path, 0, None, reason
        self.path = path


class NotEnoughRecordsError(StoreDictionaryError):
    """The store has too few records (or sessions) for a dictionary to be worth training."""

    def __init__(
        self,
        have_bytes: int,
        need_bytes: int,
        have_sessions: int,
        need_sessions: int,
        have_records: int,
        need_records: int,
    ) -> None:
        more = []
        if have_bytes < need_bytes:
            more.append(f"{need_bytes - have_bytes} more bytes of records (have {have_bytes} of {need_bytes})")
        if have_sessions < need_sessions:
            more.append(
                f"{need_sessions - have_sessions} more session(s) with records "
                f"(have {have_sessions} of {need_sessions})"
            )
        if have_records < need_records:
            more.append(f"{need_records - have_records} more records (have {have_records} of {need_records})")
        super().__init__(
            "not enough records to train a dictionary: the store needs "
            + "; ".join(more or ["more records"])
            + ". Write more sessions and train again; nothing was stored"
        )
        self.have_bytes, self.need_bytes = have_bytes, need_bytes
        self.have_sessions, self.need_sessions = have_sessions, need_sessions
        self.have_records, self.need_records = have_records, need_records


# --- the store's files ------------------------------------------------------------------------


def dictionaries_dir(store: SessionStore) -> str:
    """``<root>/dictionaries`` (a symbolic link there is refused: UnexpectedLinkError; anything
    else but a directory, UnexpectedFileError: never listed, written or descended into)."""
    d = refuse_link(store.fs, os.path.join(store.root, DICTIONARIES_DIR))
    if store.fs.exists(d) and not store.fs.is_dir(d):
        raise UnexpectedFileError(d, "not a directory", errno.ENOTDIR)
    return d


def dictionary_ids(fs: FileSystem, d: str) -> list[int]:
    """Every id a dictionary file name in ``d`` takes, ascending (contents unread)."""
    if not fs.exists(d):
        return []
    got = [parse_dictionary_file_name(n) for n in fs.listdir(d)]
    return sorted(i for i in got if i is not None)


def current_dictionary(store: SessionStore) -> Dictionary | None:
    """The store's current dictionary (the highest id), verified, with ``path`` its file; None when
    the store has none. StoreDictionaryDamagedError when that file does not verify,
    UnexpectedLinkError for a symbolic link at ``dictionaries/`` or at the file."""
    d = dictionaries_dir(store)
    ids = dictionary_ids(store.fs, d)
    if not ids:
        return None
    return load(store.fs, d, ids[-1])


def load(fs: FileSystem, d: str, dict_id: int) -> Dictionary:
    """The store's dictionary ``dict_id`` in ``d``, verified, with ``path`` its file."""
    # A link there was planted: never read through, whatever it points at.
    path = refuse_link(fs, os.path.join(d, dictionary_file_name(dict_id)))
    try:
        got = read_dictionary_file(fs, path)
    except CorruptionError as exc:
        raise StoreDictionaryDamagedError(path, exc.reason) from None
    except (IsADirectoryError, FileNotFoundError) as exc:  # crafted, or removed since it was listed
        raise StoreDictionaryDamagedError(path, exc.strerror or type(exc).__name__) from None
    return Dictionary(got.id, got.data, path)


@dataclass(frozen=True)
class StoredDictionary:
    """One dictionary file of the store as ``journal dictionary list`` shows it."""

    id: int
    path: str
    size_bytes: int | None  # the dictionary's bytes; None when the file does not verify
    digest: str | None  # hex of its blake2b-128
    current: bool
    problem: str | None  # why it cannot be used (damaged, a link), else None
    stats: dict[str, Any] | None  # what its training measured (TrainReport.to_json), if readable

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "sizeBytes": self.size_bytes,
            "digest": self.digest,
            "current": self.current,
            "problem": self.problem,
            "training": self.stats,
        }


def list_dictionaries(store: SessionStore) -> list[StoredDictionary]:
    """Every dictionary file of the store, each verified (read-only)."""
    d = dictionaries_dir(store)
    ids = dictionary_ids(store.fs, d)
    out = []
    for i in ids:
        path = os.path.join(d, dictionary_file_name(i))
        size: int | None = None
        digest: str | None = None
        problem: str | None = None
        try:
            got = load(store.fs, d, i)
            size, digest = len(got.data), got.digest.hex()
        except StoreDictionaryDamagedError as exc:
            problem = exc.reason
        except JournalError as exc:  # a link
            problem = str(exc)
        out.append(StoredDictionary(i, path, size, digest, i == ids[-1], problem, _read_stats(store.fs, d, i)))
    return out


def _stats_path(d: str, dict_id: int) -> str:
    return os.path.join(d, dictionary_file_name(dict_id).removesuffix(".zdict") + STATS_SUFFIX)


def _encode_stats(stats: dict[str, Any]) -> bytes:
    body = _STATS_MAGIC + json.dumps(stats, sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n"
    return body + b"xxh64 %016x\n" % xxhash.xxh64_intdigest(body)


def _read_stats(fs: FileSystem, d: str, dict_id: int) -> dict[str, Any] | None:
    """The training figures of ``dict_id``, or None when the file is missing, a link, too long,
    torn or crafted (they are shown, never trusted for anything)."""
    path = _stats_path(d, dict_id)
    if not fs.exists(path) or fs.is_link(path) or fs.is_dir(path):
        return None
    try:
        f = fs.open_read(path)
    except (FileNotFoundError, UnexpectedFileError):  # removed meanwhile; a FIFO, a device: crafted
        return None
    try:
        if f.size() > STATS_BYTES_MAX:
            return None
        data = read_all(f)[: STATS_BYTES_MAX + 1]
    finally:
        f.close()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    if not data.startswith(_STATS_MAGIC) or data[cut:] != b"xxh64 %016x\n" % xxhash.xxh64_intdigest(data[:cut]):
        return None
    try:
        got = json.loads(data[len(_STATS_MAGIC) : cut - 1])
    except ValueError:
        return None
    return got if type(got) is dict else None


def _publish(store: SessionStore, data: bytes, report: TrainReport) -> Dictionary:
    """Store ``data`` as the store's next dictionary, durably, and return it (with its path).

    Under TRAIN.lock, so that two trainings never take one id. The stats go first: a dictionary
    file at its name always has its figures beside it. The dictionary file is written under a
    temp name, synced, renamed and its directory synced (write_atomic): once at its name it is
    whole, and that rename is what makes it current. A crash before leaves a temp file (never
    read, replaced by the next training) or stats of an id no file has yet (overwritten)."""
    fs = store.fs
    d = dictionaries_dir(store)
    if ensure_dir(fs, d):
        fs.fsync_dir(store.root)
    lock = take_lock(fs, os.path.join(d, TRAIN_LOCK), TRAIN_LOCK_TIMEOUT_S)
    if lock is None:
        raise StoreDictionaryError(
            f"another training of {store.root!r} held {TRAIN_LOCK} for "
            f"{TRAIN_LOCK_TIMEOUT_S}s; try again when it is done"
        )
    try:
        ids = dictionary_ids(fs, d)
        dict_id = (ids[-1] if ids else 0) + 1
        if dict_id > DICTIONARY_ID_MAX:
            raise StoreDictionaryError(
                f"the store at {store.root!r} has used every dictionary id (up to "
                f"{DICTIONARY_ID_MAX}); ids are never reused"
            )
        path = os.path.join(d, dictionary_file_name(dict_id))
        stats_path = _stats_path(d, dict_id)
        refuse_link(fs, stats_path)
        write_atomic(fs, stats_path, _encode_stats(replace(report, stored=True, dictionary_id=dict_id).to_json()))
        dictionary = Dictionary(dict_id, data, path)
        write_atomic(
            fs,
            path,
            encode_dictionary_file(dictionary),
            tmp_path=os.path.join(d, "." + os.path.basename(path) + ".tmp"),
        )
        return dictionary
    finally:
        lock.release()


# --- sampling ---------------------------------------------------------------------------------


def _spread(n: int) -> list[int]:
    """0..n-1 in an order whose every prefix is spread evenly over the range (bit-reversed
    order): a sample that stops early on its byte budget still covers the whole session."""
    if n <= 1:
        return list(range(n))
    bits = (n - 1).bit_length()
    return sorted(range(n), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))


@dataclass
class _Sample:
    records: list[bytes]
    owners: list[int]  # per record, the rank of its session among those that gave records
    sessions: int  # sessions that gave at least one record
    skipped: int  # sessions whose journal could not be read (damaged, a link): left out
    total_sessions: int
    frames: list[tuple[str, int]] = field(default_factory=list)  # per record, where its frame is
    sids: list[str] = field(default_factory=list)  # per rank, the session's id
    sessions_read: int = 0  # sessions opened (the byte budget may stop before the last)
    records_read: int = 0  # ... and the records they hold
    sessions_listed: int = 0  # sessions of the store, before SESSIONS_SAMPLED_MAX thins them

    @property
    def bytes(self) -> int:
        return sum(len(r) for r in self.records)

    @property
    def store_records(self) -> int:
        """The records the store holds: those of the sessions read, scaled to every session listed."""
        if self.sessions_read == 0:
            return 0
        return (self.records_read * max(self.sessions_listed, self.sessions_read)) // self.sessions_read


def _frame_of(rec: journal.Record, sid: str) -> tuple[str, int]:
    """Where the frame holding ``rec`` of the session ``sid`` is (session and segment, offset):
    the records of one block frame share it. A segment's name is the same in every journal,
    hence the session's id."""
    return f"{sid}/{rec.segment}", rec.offset


def _session_ids(store: SessionStore) -> list[str]:
    """The ids of the sessions a sample reads, by name alone (``_listed_session_ids``)."""
    return _listed_session_ids(store)[0]


def _listed_session_ids(store: SessionStore) -> tuple[list[str], int]:
    """(the ids of the sessions a sample reads, how many the store lists), by name alone. The
    store's own listing stats each entry (to leave out a link), which with 10^6 sessions took
    ~25 s before the first progress call, to sample 4,096 of them; a link among those sampled is
    refused when it is opened (``journal_path``), and the session skipped."""
    from journal.session.store import ARCHIVE_DIR, SESSION_ID_RE, SESSIONS_DIR

    names: set[str] = set()
    for where in (SESSIONS_DIR, ARCHIVE_DIR):
        names.update(n for n in store.fs.listdir(os.path.join(store.root, where)) if SESSION_ID_RE.fullmatch(n))
    ids = sorted(n for n in names if ".." not in n)
    listed = len(ids)
    if len(ids) > SESSIONS_SAMPLED_MAX:
        step = len(ids) / SESSIONS_SAMPLED_MAX
        ids = [ids[int(i * step)] for i in range(SESSIONS_SAMPLED_MAX)]
    return ids, listed


def _sample(
    store: SessionStore, sample_bytes_max: int, per_session: int, recent: bool, progress: Progress | None
) -> _Sample:
    """Records of the store's sessions, read-only: see the module doc. ``recent``: the newest
    sessions first and the last ``per_session`` records of each, instead of a spread."""
    ids, listed = _listed_session_ids(store)
    if recent:
        ids = ids[::-1][:DRIFT_SESSIONS_MAX]
    out = _Sample([], [], 0, 0, len(ids), sessions_listed=listed)
    left = sample_bytes_max
    for n, sid in enumerate(ids):
        if progress is not None:
            progress(n, len(ids))
        if left <= 0:
            break
        budget = left // (len(ids) - n)  # what earlier sessions left unused goes to the later ones
        try:
            got, held = _session_records(store, sid, budget, per_session, recent)
        except JournalError:
            out.skipped += 1  # a damaged or refused session says nothing about the others
            continue
        out.sessions_read += 1
        out.records_read += held
        if got:
            out.records.extend(r for r, _ in got)
            out.frames.extend(f for _, f in got)
            out.owners.extend([out.sessions] * len(got))
            out.sids.append(sid)
            out.sessions += 1
            left -= sum(len(r) for r, _ in got)
    if progress is not None:
        progress(len(ids), len(ids))
    return out


def _session_records(
    store: SessionStore, sid: str, budget: int, per_session: int, recent: bool
) -> tuple[list[tuple[bytes, tuple[str, int]]], int]:
    """(records of the session, each with where its frame is; the records the session holds)."""
    got: list[tuple[bytes, tuple[str, int]]] = []
    used = 0
    with journal.open(store.journal_path(sid), readonly=True, fs=store.fs) as j:
        last = j.last_seq
        k = min(per_session, last)
        if k == 0:
            return got, last
        if recent:
            seqs = list(range(last, last - k, -1))
        else:
            seqs = [1 + (i * last) // k for i in _spread(k)]
        for seq in seqs:
            rec = j.get(seq)
            if rec is None:
                continue  # dropped with a prefix
            payload = rec.payload[: min(SAMPLE_RECORD_BYTES_MAX, budget - used)]
            if payload:
                got.append((bytes(payload), _frame_of(rec, sid)))
                used += len(payload)
            if used >= budget:
                break
    return got, last


def _session_frames(
    store: SessionStore, sid: str, share_bytes: int, room_bytes: int, pick: Callable[[int], bool]
) -> tuple[list[list[bytes]], set[tuple[str, int]]]:
    """Whole frames of the session ``sid`` as the store wrote them, each the payloads of its
    records in order, read in MEASURE_RUNS_PER_SESSION runs spread over the session, each from
    the first record of the frame it starts in: (the frames kept, where each is).

    A frame is kept when ``pick(its bytes)`` takes it, the run's kept bytes stay within its part
    of ``share_bytes`` (a run's first kept frame may go over it: a block is measured whole or not
    at all) and the bytes kept in all within ``room_bytes``, which nothing goes over (a record
    framed alone is cut to MEASURE_FRAME_BYTES_MAX). A run reads at most HELD_OUT_EVERY times its
    part, kept or not, so a session is never read whole to hold out one frame in HELD_OUT_EVERY."""
    kept: list[list[bytes]] = []
    where: set[tuple[str, int]] = set()
    seen: set[tuple[str, int]] = set()
    room = room_bytes
    with journal.open(store.journal_path(sid), readonly=True, fs=store.fs) as j:
        last = j.last_seq
        runs = max(1, min(MEASURE_RUNS_PER_SESSION, last))
        share = max(1, share_bytes // runs)
        for r in range(runs):
            if room <= 0:
                break
            start, end = (r * last) // runs, ((r + 1) * last) // runs
            head = j.get(start + 1)
            if head is not None:
                if _frame_of(head, sid) in seen:
                    continue  # the run before read on into this one
                start = _frame_start(j, sid, head.seq, _frame_of(head, sid)) - 1
            frame: list[bytes] = []
            key: tuple[str, int] | None = None
            used = read = 0
            for rec in j.read(start):
                at = _frame_of(rec, sid)
                if at != key:
                    if frame and key is not None:
                        took = _take_frame(frame, key, kept, where, seen, used, share, room, pick)
                        used, room = used + took, room - took
                    frame, key = [], at
                    if rec.seq > end or used >= share or room <= 0 or read >= share * HELD_OUT_EVERY or at in seen:
                        break
                frame.append(bytes(rec.payload))
                read += len(rec.payload)
            else:
                if frame and key is not None:
                    room -= _take_frame(frame, key, kept, where, seen, used, share, room, pick)
    return kept, where


def _frame_start(j: api.Journal, sid: str, seq: int, at: tuple[str, int]) -> int:
    """The first seq of the frame ``at`` that holds ``seq``. A frame's records are consecutive
    and at most MEASURE_BLOCK_RECORDS_MAX: a binary search over the seqs before it."""
    lo, hi = max(1, seq - MEASURE_BLOCK_RECORDS_MAX + 1), seq
    while lo < hi:
        mid = (lo + hi) // 2
        rec = j.get(mid)
        if rec is not None and _frame_of(rec, sid) == at:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _take_frame(
    frame: list[bytes],
    key: tuple[str, int],
    kept: list[list[bytes]],
    where: set[tuple[str, int]],
    seen: set[tuple[str, int]],
    used: int,
    share: int,
    room: int,
    pick: Callable[[int], bool],
) -> int:
    """One whole frame met by ``_session_frames``: kept if it fits the run's share (or is the
    run's first) and the room left, and ``pick`` takes it. The bytes kept (0 when left out)."""
    seen.add(key)
    size = sum(len(p) for p in frame)
    if len(frame) == 1:  # a record framed alone is measured by its head where it is longer
        size = min(size, MEASURE_FRAME_BYTES_MAX, room)
    if size <= 0 or size > room or (used > 0 and used + size > share) or not pick(size):
        return 0
    kept.append([frame[0][:size]] if len(frame) == 1 else frame)
    where.add(key)
    return size


class _HoldOutByBytes:
    """Frames met in order, one byte in HELD_OUT_EVERY held out: a frame is held out when the
    bytes held out so far are under 1/HELD_OUT_EVERY of those met before it (so that a store of
    a few large blocks still holds out one, and not only a short record between them)."""

    def __init__(self) -> None:
        self.met = 0
        self.held = 0

    def __call__(self, size: int) -> bool:
        hold = self.held * HELD_OUT_EVERY < self.met
        self.met += size
        if hold:
            self.held += size
        return hold


# --- measuring and training ---------------------------------------------------------------------


def _split(sample: _Sample, by_session: bool = True) -> tuple[list[bytes], list[bytes]]:
    """(training, held out). With at least HELD_OUT_EVERY sessions, one session in HELD_OUT_EVERY
    is held out whole: the dictionary is for sessions written later, and records of the sessions
    it was trained on flatter it (a session repeats itself). With fewer, one record in
    HELD_OUT_EVERY, spread over the sample (always, without ``by_session``)."""
    if by_session and sample.sessions >= HELD_OUT_EVERY:
        keys = sample.owners
    else:
        keys = list(range(len(sample.records)))
    held = [r for k, r in zip(keys, sample.records, strict=True) if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
    train = [r for k, r in zip(keys, sample.records, strict=True) if k % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
    return train, held


def _stored_bytes(records: list[bytes], data: bytes | None) -> int:
    """What ``records`` take compressed one by one (raw where zstd does not pay, as the engine
    stores them), with the dictionary ``data`` or without one."""
    return _frames_stored_bytes([[r] for r in records], data)


def _frames_stored_bytes(frames: list[list[bytes]], data: bytes | None) -> int:
    """What ``frames`` take as the engine stores them, with the dictionary ``data`` or without
    one: a frame of one record compressed alone at MEASURE_ZSTD_LEVEL, a block frame's records
    compressed as one at MEASURE_BLOCK_ZSTD_LEVEL; raw where zstd does not make them smaller or
    they are shorter than the engine compresses. Frame headers and a block's table of lengths
    are the same either way and are left out."""
    dict_data = zstandard.ZstdCompressionDict(data) if data is not None else None
    at_least = MEASURE_COMPRESS_MIN_BYTES if data is None else MEASURE_DICT_COMPRESS_MIN_BYTES
    by_level: dict[int, zstandard.ZstdCompressor] = {}
    total = 0
    for frame in frames:
        raw = frame[0] if len(frame) == 1 else b"".join(frame)
        level = MEASURE_ZSTD_LEVEL if len(frame) == 1 else MEASURE_BLOCK_ZSTD_LEVEL
        c = by_level.get(level)
        if c is None:
            c = by_level[level] = zstandard.ZstdCompressor(
                level=level,
                dict_data=dict_data,
                write_content_size=False,
                write_checksum=False,
                write_dict_id=False,
            )
        total += min(len(raw), len(c.compress(raw))) if len(raw) >= at_least else len(raw)
    return total


def _train(samples: list[bytes], size_bytes: int) -> bytes | None:
    """A dictionary of at most ``size_bytes`` from ``samples`` (deterministic: one thread), or
    None when zstd's trainer finds too little to work with."""
    pieces: list[bytes | bytearray | memoryview] = list(samples)
    try:
        return bytes(zstandard.train_dictionary(size_bytes, pieces, threads=0).as_bytes())
    except zstandard.ZstdError:
        return None


@dataclass(frozen=True)
class TrainReport:
    """What a training measured, and whether it stored a dictionary (``reason`` says why)."""

    stored: bool
    dictionary_id: int | None  # the new current dictionary's id when stored
    size_bytes: int  # the last trained dictionary's bytes (0 when zstd could not train one)
    sessions_sampled: int
    sessions_skipped: int  # sessions whose journal could not be read
    records_sampled: int
    sample_bytes: int
    held_out_records: int
    held_out_bytes: int  # the held-out frames' records' bytes, uncompressed
    held_out_plain_bytes: int  # ... stored as the store wrote them, without a dictionary
    held_out_dictionary_bytes: int  # ... and with the trained one
    savings: float  # 1 - dictionary / plain: the share of stored bytes the dictionary saves
    savings_min: float
    held_out_frames: int = 0  # whole frames measured
    held_out_block_frames: int = 0  # ... of them block frames (records written together)
    store_records: int = 0  # the records the store holds (scaled from the sessions read)
    saved_bytes: int = 0  # what the dictionary would save on that many records, as the store writes
    dictionary_file_bytes: int = 0  # the dictionary file's own bytes, paid once per store
    sizes_tried: tuple[int, ...] = ()  # the sizes trained, in order
    reason: str = ""  # why it was stored, or not

    @property
    def ratio(self) -> float:
        """Uncompressed over stored bytes of the held-out frames with the dictionary."""
        return self.held_out_bytes / self.held_out_dictionary_bytes if self.held_out_dictionary_bytes else 0.0

    @property
    def net_bytes(self) -> int:
        """What the dictionary saves on the store's records less its own file: > 0 where it pays."""
        return self.saved_bytes - self.dictionary_file_bytes

    def to_json(self) -> dict[str, Any]:
        out = {
            "".join(w if k == 0 else w.capitalize() for k, w in enumerate(name.split("_"))): value
            for name, value in asdict(self).items()
        }
        out["sizesTried"] = list(self.sizes_tried)
        out["ratio"] = self.ratio
        out["plainRatio"] = self.held_out_bytes / self.held_out_plain_bytes if self.held_out_plain_bytes else 0.0
        out["netBytes"] = self.net_bytes
        return out

    def summary(self) -> str:
        head = (
            f"dictionary {self.dictionary_id} stored ({self.size_bytes} bytes): {self.reason}"
            if self.stored
            else f"no dictionary stored: {self.reason}"
        )
        return (
            f"{head}\n"
            f"sample: {self.records_sampled} records, {self.sample_bytes} bytes from {self.sessions_sampled} "
            f"session(s) ({self.sessions_skipped} unreadable, left out)\n"
            f"held out: {self.held_out_records} records in {self.held_out_frames} frames "
            f"({self.held_out_block_frames} of them blocks), {self.held_out_bytes} bytes -> "
            f"{self.held_out_plain_bytes} stored without a dictionary, {self.held_out_dictionary_bytes} "
            f"with it ({self.size_bytes}-byte dictionary): saves {self.savings:.1%}, ratio {self.ratio:.2f}\n"
            f"the store's {self.store_records} records: saves about {self.saved_bytes} bytes, against the "
            f"dictionary file's {self.dictionary_file_bytes} (sizes tried: "
            f"{', '.join(str(n) for n in self.sizes_tried) or 'none'})"
        )


def _enough(sample: _Sample, size_bytes: int, sessions_min: int, sample_bytes_min: int) -> None:
    need_bytes = max(sample_bytes_min, size_bytes * TRAIN_SAMPLE_TO_DICTIONARY_MIN)
    if sample.bytes < need_bytes or sample.sessions < sessions_min or len(sample.records) < TRAIN_RECORDS_MIN:
        raise NotEnoughRecordsError(
            sample.bytes, need_bytes, sample.sessions, sessions_min, len(sample.records), TRAIN_RECORDS_MIN
        )


def _check_size(size_bytes: int) -> None:
    if isinstance(size_bytes, bool) or not DICTIONARY_BYTES_MIN <= size_bytes <= DICTIONARY_BYTES_MAX:
        raise ValueError(f"a dictionary is {DICTIONARY_BYTES_MIN} to {DICTIONARY_BYTES_MAX} bytes, not {size_bytes!r}")


def _held_out(store: SessionStore, sample: _Sample, budget: int) -> tuple[list[bytes], list[list[bytes]]]:
    """(the records to train on, the held-out frames to measure on), as the module doc says:
    with at least HELD_OUT_EVERY sessions, the held-out sessions' whole frames; with fewer, one
    frame in HELD_OUT_EVERY of every session, its records left out of the training. Where no
    whole frame could be read, the held-out records of ``_split`` each stand for a frame."""
    frames: list[list[bytes]] = []
    if sample.sessions >= HELD_OUT_EVERY:
        train, _ = _split(sample)
        held = [sid for rank, sid in enumerate(sample.sids) if rank % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
        for n, sid in enumerate(held):
            left = budget - _size(frames)
            if left <= 0:
                break
            try:
                got, _ = _session_frames(store, sid, left // (len(held) - n), left, lambda _: True)
            except JournalError:
                continue  # unreadable since it was sampled: the others still measure
            frames.extend(got)
    else:
        where: set[tuple[str, int]] = set()
        pick = _HoldOutByBytes()  # across sessions, so that a session of few frames still gives some
        for n, sid in enumerate(sample.sids):
            left = budget - _size(frames)
            if left <= 0:
                break
            try:
                got, at = _session_frames(store, sid, left // (len(sample.sids) - n), left, pick)
            except JournalError:
                continue
            frames.extend(got)
            where |= at
        train = [r for r, at in zip(sample.records, sample.frames, strict=True) if at not in where]
    if not frames or not train:
        train, held_records = _split(sample)
        frames = [[r] for r in held_records]
    return train, frames


def _size(frames: list[list[bytes]]) -> int:
    return sum(len(p) for f in frames for p in f)


def _sizes(size_bytes: int) -> list[int]:
    """The sizes a training tries: ``size_bytes``, then halves down to DICTIONARY_BYTES_MIN."""
    out = [size_bytes]
    while len(out) < SIZE_TRIES_MAX and out[-1] // 2 >= DICTIONARY_BYTES_MIN:
        out.append(out[-1] // 2)
    return out


def _decide(
    store: SessionStore,
    size_bytes: int,
    sample_bytes_max: int,
    progress: Progress | None,
    savings_min: float,
    sessions_min: int,
    sample_bytes_min: int,
) -> tuple[TrainReport, bytes | None]:
    """What a training would do now, storing nothing: its report (``stored``: a dictionary pays)
    and the bytes of the one that pays, or None. train_store_dictionary stores those bytes;
    should_retrain asks this where the store has no dictionary, so that a store whose training
    declined is not told to train again until its records would make one pay."""
    _check_size(size_bytes)
    dictionaries_dir(store)  # a link there is refused before any sampling, not after it
    if sample_bytes_max < 1:
        raise ValueError(f"sample_bytes_max is at least 1, not {sample_bytes_max}")
    sample = _sample(store, sample_bytes_max, SAMPLE_RECORDS_PER_SESSION_MAX, False, progress)
    _enough(sample, size_bytes, sessions_min, sample_bytes_min)
    train, frames = _held_out(store, sample, max(1, sample_bytes_max // HELD_OUT_EVERY))
    held_records = sum(len(f) for f in frames)
    plain = _frames_stored_bytes(frames, None)
    base = TrainReport(
        False,
        None,
        0,
        sample.sessions,
        sample.skipped,
        len(sample.records),
        sample.bytes,
        held_records,
        _size(frames),
        plain,
        plain,
        0.0,
        savings_min,
        held_out_frames=len(frames),
        held_out_block_frames=sum(1 for f in frames if len(f) > 1),
        store_records=sample.store_records,
    )
    first: TrainReport | None = None
    report, data = base, None
    tried: list[int] = []
    for size in _sizes(size_bytes):
        tried.append(size)
        report, data = _try(base, train, frames, size, tuple(tried))
        if report.stored:
            break
        first = first or report
    if not report.stored or data is None:
        # The size asked for tells what declined it; the smaller ones are named.
        said = first or report
        if len(tried) > 1:
            smaller = ", ".join(str(n) for n in tried[1:])
            said = replace(said, reason=f"{said.reason}; smaller sizes ({smaller} bytes) did not pay either")
        return replace(said, sizes_tried=tuple(tried)), None
    return report, data


def train_store_dictionary(
    store: SessionStore,
    size_bytes: int = DICTIONARY_SIZE_BYTES_DEFAULT,
    sample_bytes_max: int = SAMPLE_BYTES_MAX_DEFAULT,
    progress: Progress | None = None,
    savings_min: float = DICTIONARY_SAVINGS_MIN,
    sessions_min: int = TRAIN_SESSIONS_MIN,
    sample_bytes_min: int = TRAIN_SAMPLE_BYTES_MIN,
) -> TrainReport:
    """Train a dictionary of at most ``size_bytes`` from the store's records and store it as the
    current one if it pays (see the module doc): it saves more than its own file's bytes on the
    store's records, measured on held-out frames as the store wrote them, and at least
    ``savings_min`` of their stored bytes; else smaller sizes are tried, and when none pays
    nothing is stored (``TrainReport.reason``). NotEnoughRecordsError, saying how much more is
    needed, below the minimum; ``progress(done, total)`` is called per session sampled."""
    report, data = _decide(store, size_bytes, sample_bytes_max, progress, savings_min, sessions_min, sample_bytes_min)
    if data is None:
        return report
    got = _publish(store, data, report)
    store.dictionary_problem = None
    return replace(report, dictionary_id=got.id)


def _try(
    base: TrainReport, train: list[bytes], frames: list[list[bytes]], size: int, tried: tuple[int, ...]
) -> tuple[TrainReport, bytes | None]:
    """One size's dictionary trained on ``train`` and measured on ``frames``: the report, with
    ``stored`` saying whether it pays, and its bytes (None when zstd could not train one)."""
    data = _train(train, size)
    if data is None or len(data) < DICTIONARY_BYTES_MIN:
        why = f"zstd could not train a dictionary of {DICTIONARY_BYTES_MIN} to {size} bytes from the sample"
        return replace(base, size_bytes=len(data or b""), sizes_tried=tried, reason=why), None
    plain = base.held_out_plain_bytes
    with_dict = _frames_stored_bytes(frames, data)
    savings = 1 - with_dict / plain if plain else 0.0
    per_record = (plain - with_dict) / base.held_out_records if base.held_out_records else 0.0
    saved = int(per_record * base.store_records)
    file_bytes = len(encode_dictionary_file(Dictionary(1, data)))
    written = f"{base.held_out_block_frames} of {base.held_out_frames} held-out frames are blocks"
    share_ok, bytes_ok = savings >= base.savings_min, saved > file_bytes
    figures = (
        f"a {len(data)}-byte dictionary saves {savings:.1%} of the held-out frames' stored bytes "
        f"({'at least' if share_ok else 'less than'} {base.savings_min:.0%}), about {saved} bytes on the "
        f"store's {base.store_records} records ({'more' if bytes_ok else 'not more'} than its own file's "
        f"{file_bytes}; {written})"
    )
    why = figures if share_ok and bytes_ok else f"it does not pay: {figures}"
    stored = share_ok and bytes_ok
    report = replace(
        base,
        stored=stored,
        size_bytes=len(data),
        held_out_dictionary_bytes=with_dict,
        savings=savings,
        saved_bytes=saved,
        dictionary_file_bytes=file_bytes,
        sizes_tried=tried,
        reason=why,
    )
    return report, data


@dataclass(frozen=True)
class DriftReport:
    """Whether the store's current dictionary still fits its newest records."""

    retrain: bool
    reason: str
    current_id: int | None
    records: int  # recent records sampled
    held_out_bytes: int
    current_bytes: int  # the held-out recent records compressed with the current dictionary
    fresh_bytes: int  # ... with one trained now on the other recent records
    savings: float  # 1 - fresh / current

    def to_json(self) -> dict[str, Any]:
        return {
            "retrain": self.retrain,
            "reason": self.reason,
            "currentId": self.current_id,
            "records": self.records,
            "heldOutBytes": self.held_out_bytes,
            "currentBytes": self.current_bytes,
            "freshBytes": self.fresh_bytes,
            "savings": self.savings,
        }


def should_retrain(
    store: SessionStore,
    sample_bytes_max: int = SAMPLE_BYTES_MAX_DEFAULT,
    records_per_session: int = DRIFT_RECORDS_PER_SESSION,
    savings_min: float = DRIFT_SAVINGS_MIN,
    sessions_min: int = TRAIN_SESSIONS_MIN,
    sample_bytes_min: int = TRAIN_SAMPLE_BYTES_MIN,
    size_bytes: int = DICTIONARY_SIZE_BYTES_DEFAULT,
) -> DriftReport:
    """Compare the current dictionary with a fresh one on the store's newest records (read-only;
    nothing is trained into the store). Advises a retrain when the fresh one, trained on part of
    the newest records, compresses the rest at least ``savings_min`` smaller than the current
    one does; when the store's dictionary is damaged; or when the store has none and a training
    now would keep one of ``size_bytes`` or a smaller size (it measures as the training does, so
    a store whose training declined is not advised to train again until its records would make
    one pay). With a current one, a fresh one is of its size."""
    try:
        current = current_dictionary(store)
        problem = None
    except JournalError as exc:  # damaged or a link: a new one replaces it
        current, problem = None, str(exc)
    sample = _sample(store, sample_bytes_max, records_per_session, True, None)
    size = len(current.data) if current is not None else size_bytes
    cid = current.id if current is not None else None
    try:
        _enough(sample, size, sessions_min, sample_bytes_min)
    except NotEnoughRecordsError as exc:
        return DriftReport(False, str(exc), cid, len(sample.records), 0, 0, 0, 0.0)
    train, held = _split(sample, by_session=False)  # the newest records all stand for what comes next
    held_bytes = sum(len(r) for r in held)
    if current is None:
        if problem is not None:  # damaged or a link: a training replaces it
            return DriftReport(True, problem, None, len(sample.records), held_bytes, 0, 0, 0.0)
        # Whether a training now would keep one (it keeps one only where it pays): a store whose
        # training declined is not told to train again until its records would make one pay.
        try:
            trial, _ = _decide(
                store, size_bytes, sample_bytes_max, None, DICTIONARY_SAVINGS_MIN, sessions_min, sample_bytes_min
            )
        except NotEnoughRecordsError as exc:
            return DriftReport(False, str(exc), None, len(sample.records), held_bytes, 0, 0, 0.0)
        why = (
            f"the store has no dictionary, and one trained now would be kept: {trial.reason}"
            if trial.stored
            else f"the store has no dictionary, and a training now would keep none: {trial.reason}"
        )
        return DriftReport(trial.stored, why, None, len(sample.records), held_bytes, 0, 0, 0.0)
    fresh = _train(train, size)
    cur = _stored_bytes(held, current.data)
    new = _stored_bytes(held, fresh) if fresh is not None and len(fresh) >= DICTIONARY_BYTES_MIN else cur
    savings = 1 - new / cur if cur else 0.0
    retrain = savings >= savings_min
    why = (
        f"a fresh dictionary saves {savings:.1%} of the newest records' compressed bytes over dictionary "
        f"{current.id} ({'at least' if retrain else 'less than'} {savings_min:.0%})"
    )
    return DriftReport(retrain, why, current.id, len(sample.records), held_bytes, cur, new, savings)
