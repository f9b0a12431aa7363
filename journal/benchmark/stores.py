"""The stores side by side: journal and the peers a user would otherwise pick, one adapter each.

Every adapter takes the same dict events and serializes them itself (journal does JSON inside
``append``; the peers get ``json.dumps`` with the same compact separators), so the cost of
turning an event into bytes is on both sides of every ratio. Keys of key-value peers are the
seq as 8 big-endian bytes, values the JSON bytes.

Durability of each adapter, as the table's "durable" column states it:

- journal sync: fdatasync per append (per group-commit batch with threads).
- JSONL write+fdatasync: os.write of one line, then fdatasync: the floor of a durable append.
- SQLite WAL synchronous=FULL: the WAL is fsync'd at every commit (durable).
  synchronous=NORMAL: the WAL is fsync'd only at checkpoints: a power loss can lose the last
  commits (not durable per event; shown because it is a common setting).
- LMDB sync: each write transaction's commit fsyncs (lmdb.open(sync=True, metasync=True)).
- RocksDB sync=True: the WAL is fsync'd per write (durable); sync=False: written to the OS
  only (survives a process crash, not a power loss).
- JSONL buffered: a Python file object; reaches the OS when its buffer fills (not durable).
  The decode scan also reads that file with orjson.loads instead of json.loads ("JSONL
  buffered, orjson.loads"): the fastest reading of JSONL a user could pick.

Peers are optional (``pip install 'journal-engine[bench]'``): an adapter whose package is missing
reports itself unavailable and the runner lists it as skipped.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import journal
from journal.engine import format as fmt

_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
Event = dict[str, Any]


def dumps(event: Event) -> bytes:
    return _DUMPS(event).encode("utf-8")


def optional_module(name: str) -> Any:
    """The peer's module, or None when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def dir_bytes(*paths: str) -> int:
    """The bytes of the files under ``paths``, each file counted once however many names it has:
    a file hard-linked into several journals (a fork's shared segments, a store-wide dictionary)
    takes its bytes on the disk once, as ``du`` counts it. Symbolic links are not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(p: str) -> None:
        nonlocal total
        st = os.lstat(p)
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size

    for path in paths:
        if not os.path.isdir(path):
            add(path)
            continue
        for root, _dirs, files in os.walk(path):
            for name in files:
                add(os.path.join(root, name))
    return total


def remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)
    for suffix in ("-wal", "-shm", "-journal"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)


def _key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


class Store:
    """One store at one durability. Write methods take events; read methods return counts."""

    name = ""
    durable = False
    package = ""  # the optional package it needs ("" for the standard library)
    concurrency = "one writer at a time"
    decode_only = False  # a peer of the decode scan alone (a reader of another store's files)

    def available(self) -> bool:
        return not self.package or optional_module(self.package) is not None

    def open(self, path: str) -> None:
        raise NotImplementedError

    def append(self, event: Event) -> None:
        """One event at this store's durability."""
        raise NotImplementedError

    def append_buffered(self, event: Event) -> None:
        """One event with no durability of its own (bulk loading)."""
        raise NotImplementedError

    def sync(self) -> None:
        """Make everything appended so far durable."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def open_read(self, path: str) -> None:
        self.open(path)

    def scan_bytes(self) -> int:
        """Read every record's stored bytes (checked where the store has checksums)."""
        raise NotImplementedError

    def scan_decode(self) -> int:
        """Read every record back as a dict."""
        raise NotImplementedError

    def get(self, seq: int) -> Event:
        raise NotImplementedError

    def files(self, path: str) -> int:
        return dir_bytes(path)


class JournalStore(Store):
    def __init__(
        self, durability: str = "sync", compress: bool = True, block_bytes: int | None = None, block_cache: bool = True
    ) -> None:
        self.durability = durability
        self.compress = compress
        # False: reads with the process's cache of decoded blocks off (journal.set_block_cache_bytes(0)),
        # so that every point read into a block decodes it, as the first read of a block does.
        self.block_cache = block_cache
        self._budget_before: int | None = None
        # None: the default. 0: a frame for every record, as the records a runtime appends one
        # by one are stored (block frames hold records appended together: docs/FORMAT.md).
        self.block_bytes = fmt.BLOCK_BYTES_DEFAULT if block_bytes is None else block_bytes
        self.name = (
            f"journal {durability}"
            + ("" if compress else ", compress=False")
            + ("" if block_bytes is None else f", block_bytes={block_bytes}")
            + ("" if block_cache else ", block cache off")
        )
        self.durable = durability == "sync"
        self.concurrency = "group commit (one write + one fdatasync per batch)"
        self.j: journal.Journal | None = None
        self.path = ""

    def open(self, path: str) -> None:
        self.path = path
        self.j = journal.Journal.open(path, create=True, compress=self.compress, block_bytes=self.block_bytes)

    def open_read(self, path: str) -> None:
        self.path = path
        if not self.block_cache and self._budget_before is None:
            self._budget_before = journal.set_block_cache_bytes(0)
        self.j = journal.Journal.open(path, readonly=True)

    def append(self, event: Event) -> None:
        assert self.j is not None
        out = self.j.append(event, durability=self.durability)
        if not isinstance(out, journal.Committed):
            raise RuntimeError(f"append failed: {out}")

    def append_buffered(self, event: Event) -> None:
        assert self.j is not None
        self.j.append(event, durability="buffered")

    def append_many(self, events: list[Event]) -> None:
        assert self.j is not None
        self.j.append_many(events, durability="buffered")

    def sync(self) -> None:
        assert self.j is not None
        self.j.sync()

    def close(self) -> None:
        if self.j is not None:
            self.j.close()
            self.j = None
        if self._budget_before is not None:
            journal.set_block_cache_bytes(self._budget_before)
            self._budget_before = None

    def scan_bytes(self) -> int:
        """Every segment read whole and every frame's checksum verified by the C helper."""
        total = 0
        for name in sorted(os.listdir(self.path)):
            if not name.endswith(".seg"):
                continue
            with open(os.path.join(self.path, name), "rb") as f:
                data = f.read()
            header = fmt.decode_segment_header(data)
            res = fmt.verify_scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq)
            if res.stop not in (fmt.Stop.END, fmt.Stop.SEALED):
                raise RuntimeError(f"verify stopped at {res.stop.name} in {name}")
            total += len(data)
        return total

    def scan_decode(self) -> int:
        assert self.j is not None
        n = 0
        for rec in self.j.read():
            rec.event  # noqa: B018 - decoding is what is measured
            n += 1
        return n

    def get(self, seq: int) -> Event:
        assert self.j is not None
        rec = self.j.get(seq)
        assert rec is not None
        event: Event = rec.event
        return event


class JsonlStore(Store):
    def __init__(self, sync: bool) -> None:
        self.sync_each = sync
        self.name = "JSONL write+fdatasync" if sync else "JSONL buffered"
        self.durable = sync
        self.concurrency = "a lock around write+fdatasync (lines would interleave otherwise)"
        self.fd = -1
        self.f: Any = None
        self.path = ""
        self.offsets: list[int] = []
        self.lock = threading.Lock()

    def open(self, path: str) -> None:
        self.path = path
        if self.sync_each:
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        else:
            self.f = open(path, "ab")

    def append(self, event: Event) -> None:
        line = dumps(event) + b"\n"
        if self.sync_each:
            with self.lock:
                os.write(self.fd, line)
                os.fdatasync(self.fd)
        else:
            self.f.write(line)

    def append_buffered(self, event: Event) -> None:
        line = dumps(event) + b"\n"
        if self.f is None:
            os.write(self.fd, line)
        else:
            self.f.write(line)

    def sync(self) -> None:
        if self.f is not None:
            self.f.flush()
            os.fdatasync(self.f.fileno())
        else:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.f is not None:
            self.f.close()
            self.f = None

    def open_read(self, path: str) -> None:
        self.path = path
        self.offsets = []

    def scan_bytes(self) -> int:
        total = 0
        with open(self.path, "rb") as f:
            for line in f:  # no checksum to check: reading the lines is all a JSONL reader can do
                total += len(line)
        return total

    def scan_decode(self) -> int:
        n = 0
        with open(self.path, "rb") as f:
            for line in f:
                json.loads(line)
                n += 1
        return n

    def get(self, seq: int) -> Event:
        if not self.offsets:
            # A JSONL reader needs a line-offset index for random access: built once, untimed.
            pos = 0
            with open(self.path, "rb") as f:
                for line in f:
                    self.offsets.append(pos)
                    pos += len(line)
            self.offsets.append(pos)
            self.fd = os.open(self.path, os.O_RDONLY)
        start, end = self.offsets[seq - 1], self.offsets[seq]
        event: Event = json.loads(os.pread(self.fd, end - start, start))
        return event


class JsonlOrjsonStore(JsonlStore):
    """The same JSONL file read back with orjson.loads: the best a JSONL reader could do. A
    peer of the decode scan only (its writes, scan and bytes on disk are JSONL's)."""

    package = "orjson"
    decode_only = True

    def __init__(self) -> None:
        super().__init__(sync=False)
        self.name = "JSONL buffered, orjson.loads"

    def scan_decode(self) -> int:
        loads = optional_module("orjson").loads
        n = 0
        with open(self.path, "rb") as f:
            for line in f:
                loads(line)
                n += 1
        return n


class GroupCommitFloor(Store):
    """Not a store: the least a Python group commit can do, to say what threads can reach here.

    json.dumps in the caller's thread, one lock, a list as the queue; the first caller leads,
    writes every queued line with one pwrite and one fdatasync, wakes the others and hands
    leadership to the first one still waiting. No framing, checksums, compression, outcomes,
    roll-over or error handling. What it reaches with many threads is the ceiling that
    CPython's GIL puts on any design of this kind on this machine; journal's figure over it
    says how much of that ceiling the real writer keeps.
    """

    name = "minimal Python group commit (reference, not a store)"
    durable = True
    concurrency = "leader/follower queue: one pwrite + one fdatasync per batch"

    def __init__(self) -> None:
        self.fd = -1
        self.offset = 0
        self.lock = threading.Lock()
        self.queue: list[list[Any]] = []  # [line, wake lock, done]
        self.leading = False

    def open(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self.offset = 0

    def append(self, event: Event) -> None:
        wake = threading.Lock()
        wake.acquire()
        item = [dumps(event) + b"\n", wake, False]
        with self.lock:
            self.queue.append(item)
            lead = not self.leading
            self.leading = True
        if not lead:
            wake.acquire()  # released when written, or when made leader
            if item[2]:
                return
        with self.lock:
            batch, self.queue = self.queue, []  # holds this caller's line: leaders lead once
        data = b"".join(b[0] for b in batch)
        os.pwrite(self.fd, data, self.offset)
        os.fdatasync(self.fd)
        self.offset += len(data)
        with self.lock:
            for b in batch:
                b[2] = True
                if b[1] is not wake:
                    b[1].release()
            nxt = self.queue[0] if self.queue else None
            self.leading = nxt is not None
        if nxt is not None:
            nxt[1].release()  # the next leader

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class SqliteStore(Store):
    def __init__(self, synchronous: str) -> None:
        self.synchronous = synchronous
        self.name = f"SQLite WAL synchronous={synchronous}"
        self.durable = synchronous == "FULL"
        self.concurrency = "one shared connection behind a lock (per-thread connections busy-wait in SQLite)"
        self.conn: sqlite3.Connection | None = None
        self.lock = threading.Lock()
        self.seq = 0

    def open(self, path: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        self.conn = conn
        self.seq = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]

    def append(self, event: Event) -> None:
        body = dumps(event)
        assert self.conn is not None
        with self.lock:
            self.seq += 1
            self.conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (self.seq, body))

    def append_buffered(self, event: Event) -> None:
        assert self.conn is not None
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN")
        self.seq += 1
        self.conn.execute("INSERT INTO events (seq, body) VALUES (?, ?)", (self.seq, dumps(event)))

    def sync(self) -> None:
        assert self.conn is not None
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def scan_bytes(self) -> int:
        assert self.conn is not None
        total = 0
        for (body,) in self.conn.execute("SELECT body FROM events ORDER BY seq"):
            total += len(body)
        return total

    def scan_decode(self) -> int:
        assert self.conn is not None
        n = 0
        for (body,) in self.conn.execute("SELECT body FROM events ORDER BY seq"):
            json.loads(body)
            n += 1
        return n

    def get(self, seq: int) -> Event:
        assert self.conn is not None
        row = self.conn.execute("SELECT body FROM events WHERE seq = ?", (seq,)).fetchone()
        event: Event = json.loads(row[0])
        return event

    def files(self, path: str) -> int:
        if self.conn is not None:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


class LmdbStore(Store):
    package = "lmdb"

    def __init__(self) -> None:
        self.name = "LMDB sync"
        self.durable = True
        self.concurrency = "one write transaction at a time (LMDB's writer lock; a Python lock in front)"
        self.env: Any = None
        self.seq = 0
        self.lock = threading.Lock()
        self.txn: Any = None

    def open(self, path: str) -> None:
        lmdb = optional_module("lmdb")
        self.env = lmdb.open(path, map_size=1 << 34, sync=True, metasync=True, writemap=False, max_dbs=0)
        self.seq = self.env.stat()["entries"]

    def append(self, event: Event) -> None:
        body = dumps(event)
        with self.lock:
            self.seq += 1
            with self.env.begin(write=True) as txn:
                txn.put(_key(self.seq), body, append=True)

    def append_buffered(self, event: Event) -> None:
        if self.txn is None:
            self.txn = self.env.begin(write=True)
        self.seq += 1
        self.txn.put(_key(self.seq), dumps(event), append=True)

    def sync(self) -> None:
        if self.txn is not None:
            self.txn.commit()  # a commit of an env opened with sync=True fsyncs
            self.txn = None
        self.env.sync(True)

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def scan_bytes(self) -> int:
        total = 0
        with self.env.begin(buffers=True) as txn:
            for _k, v in txn.cursor():
                total += len(v)
        return total

    def scan_decode(self) -> int:
        n = 0
        with self.env.begin() as txn:
            for _k, v in txn.cursor():
                json.loads(v)
                n += 1
        return n

    def get(self, seq: int) -> Event:
        with self.env.begin() as txn:
            event: Event = json.loads(txn.get(_key(seq)))
        return event


class RocksStore(Store):
    package = "rocksdict"

    def __init__(self, sync: bool) -> None:
        self.sync_each = sync
        self.name = f"RocksDB sync={sync}"
        self.durable = sync
        self.concurrency = "puts from every thread (RocksDB's own write group commit)"
        self.db: Any = None
        self.seq = 0
        self.lock = threading.Lock()
        self.wo: Any = None
        self.wo_nosync: Any = None

    def open(self, path: str) -> None:
        rd = optional_module("rocksdict")
        opts = rd.Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = rd.Rdict(path, options=opts)
        self.wo = rd.WriteOptions()
        self.wo.sync = self.sync_each
        self.wo_nosync = rd.WriteOptions()
        self.wo_nosync.sync = False
        self.seq = 0

    def _next(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq

    def append(self, event: Event) -> None:
        body = dumps(event)
        self.db.put(_key(self._next()), body, self.wo)

    def append_buffered(self, event: Event) -> None:
        self.seq += 1
        self.db.put(_key(self.seq), dumps(event), self.wo_nosync)

    def sync(self) -> None:
        self.db.flush_wal(True)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def scan_bytes(self) -> int:
        total = 0
        for v in self.db.values():  # block checksums are verified on read (RocksDB's default)
            total += len(v)
        return total

    def scan_decode(self) -> int:
        n = 0
        for v in self.db.values():
            json.loads(v)
            n += 1
        return n

    def get(self, seq: int) -> Event:
        event: Event = json.loads(self.db[_key(seq)])
        return event


def all_stores() -> list[Store]:
    """journal first, then the peers, durable ones before their non-durable settings."""
    return [
        JournalStore("sync"),
        JsonlStore(sync=True),
        SqliteStore("FULL"),
        LmdbStore(),
        RocksStore(sync=True),
        SqliteStore("NORMAL"),
        RocksStore(sync=False),
        JsonlStore(sync=False),
    ]


def iter_chunks(events: list[Event], parts: int) -> Iterator[list[Event]]:
    for i in range(parts):
        yield events[i::parts]
