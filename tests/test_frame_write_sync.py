"""A lone durable record's append in one C call (native/zstd_held.c, ``frame_write_sync``): the
record compressed, framed, written and synced under one release of the GIL.

Its twin is what the writer does with the GIL held (encoding._compressed, format.encode_frame,
fs.write_all_synced): the file holds the same bytes for any record, flags, seq and salt, with
and without a dictionary (hypothesis). Its answers for a failed write and a failed fdatasync are
write_all_sync's (tests/test_write_sync.py runs a journal's faults through both paths), its
refusals leave the file untouched, and a journal's lone sync appends take it and read back.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import journal
from journal import fs
from journal.engine import encoding, native, writer
from journal.engine import format as fmt
from journal.engine.dictionary import Dictionary, DictionaryUse
from journal.engine.options import Options
from journal.engine.verify import verify
from tests import lone_frame

LLONG_MAX = 2**63 - 1
TEXT = [b'{"type":"tool_result","content":"', b"session log line ", b"ls -la /work", b'","ok":true}', b"\n  "]


_module = lone_frame.module


@pytest.fixture(scope="module")
def trained() -> bytes:
    return lone_frame.trained_dictionary()


def _twin(raw: bytes, seq: int, flags: int, salt: int, options: Options) -> bytes:
    body, codec, dict_id = encoding._compressed(raw, options)
    return fmt.encode_frame(seq, flags | codec, len(raw), body, salt, dict_id)


def _call(fd: int, raw: bytes, offset: int, seq: int, flags: int, salt: int, options: Options) -> tuple[int, int]:
    lone = encoding.lone_compression(len(raw), options)
    assert lone is not None
    compress_min, cdict, dict_id = lone
    rc, size = _module().frame_write_sync(fd, raw, offset, seq, flags, salt, compress_min, cdict, dict_id)
    return int(rc), int(size)


records = hs.lists(hs.sampled_from(TEXT) | hs.binary(max_size=40), max_size=600).map(b"".join).filter(
    lambda b: len(b) <= encoding.HELD_COMPRESS_BYTES_MAX
)
frame_flags = hs.sets(hs.sampled_from([fmt.FLAG_BYTES, fmt.FLAG_SYNTHETIC, fmt.FLAG_COMMIT, fmt.FLAG_AFTER_SYNC])).map(
    sum
)


@settings(max_examples=300, deadline=None)
@given(
    raw=records,
    seq=hs.integers(0, 2**64 - 1),
    flags=frame_flags,
    salt=hs.integers(0, 2**64 - 1),
    kind=hs.sampled_from(["plain", "raw", "dictionary"]),
    offset=hs.integers(0, 5000),
)
def test_it_writes_the_bytes_of_its_twin(
    tmp_path_factory: pytest.TempPathFactory,
    trained: bytes,
    raw: bytes,
    seq: int,
    flags: int,
    salt: int,
    kind: str,
    offset: int,
) -> None:
    _module()
    if kind == "dictionary":
        use = DictionaryUse(7, Dictionary(7, trained))
        use.active = True
        options = Options(dictionary=use)
    else:
        options = Options(compress=kind == "plain")
    path = tmp_path_factory.mktemp("f") / "seg"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        rc, size = _call(fd, raw, offset, seq, flags, salt, options)
    finally:
        os.close(fd)
    want = _twin(raw, seq, flags, salt, options)
    assert rc == 0 and size == len(want)
    data = path.read_bytes()
    assert data[:offset] == b"\0" * offset and data[offset:] == want
    assert size <= fmt.FRAME_HEADER_SIZE_BYTES + len(raw)  # what the writer reserves ahead


def test_refusals_write_nothing(tmp_path: Path, trained: bytes) -> None:
    mod = _module()
    cdict = native.held_make_cdict(trained) if native.held_make_cdict is not None else None
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT, 0o600)
    big = b"x" * (mod.INPUT_BYTES_MAX + 1)
    try:
        for args, match in [
            ((fd, big, 0, 1, 0, 5, 256, None, 0), "longer than INPUT_BYTES_MAX"),
            ((fd, b"{}", 0, 1, fmt.CODEC_ZSTD, 5, 256, None, 0), "without a codec"),
            ((fd, b"{}", 0, 1, 0x8000, 5, 256, None, 0), "known frame flags"),
            ((fd, b"{}", 0, 1, 0, 5, -1, None, 0), "out of range"),
            ((fd, b"{}", 0, 1, 0, 5, 256, "not a dictionary", 1), "make_cdict capsule"),
            ((fd, b"{}", 0, 1, 0, 5, 256, cdict, 0), "make_cdict capsule"),
            ((fd, b"{}", 0, 1, 0, 5, 256, None, 0x10000), "out of range"),
        ]:
            with pytest.raises(ValueError, match=match):
                mod.frame_write_sync(*args)
        for seq, salt in [(2**64, 5), (-1, 5), (1, 2**64), (1, -1)]:  # past what the u64 fields hold
            with pytest.raises(OverflowError):
                mod.frame_write_sync(fd, b"{}", 0, seq, 0, salt, 256, None, 0)
        with pytest.raises(TypeError):
            mod.frame_write_sync(fd, "text", 0, 1, 0, 5, 256, None, 0)
        with pytest.raises(TypeError):
            mod.frame_write_sync(fd, b"{}", 0, 1.0, 0, 5, 256, None, 0)
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


def test_it_answers_a_failed_write_and_a_failed_sync_apart(tmp_path: Path) -> None:
    mod = _module()
    (tmp_path / "ro").write_bytes(b"kept")
    ro = os.open(tmp_path / "ro", os.O_RDONLY)
    rw = os.open(tmp_path / "rw", os.O_RDWR | os.O_CREAT, 0o600)
    null = os.open(os.devnull, os.O_RDWR)
    record = b'{"text":"' + b"compressible " * 100 + b'"}'
    try:
        assert mod.frame_write_sync(ro, record, 0, 1, 0, 5, 256, None, 0)[0] == errno.EBADF  # a write: positive
        assert mod.frame_write_sync(null, record, 0, 1, 0, 5, 256, None, 0)[0] == -errno.EINVAL  # synced: negative
        assert mod.frame_write_sync(rw, record, -1, 1, 0, 5, 256, None, 0)[0] == errno.EINVAL
        assert mod.frame_write_sync(rw, record, LLONG_MAX - 10, 1, 0, 5, 256, None, 0)[0] == errno.EFBIG
        assert os.fstat(rw).st_size == 0
        assert mod.NO_PROGRESS == fs._NO_PROGRESS  # the answer fs.raise_for_write_sync reads
    finally:
        for fd in (ro, rw, null):
            os.close(fd)
    assert (tmp_path / "ro").read_bytes() == b"kept"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = writer.FRAME_WRITE_SYNC
    assert real is not None

    def counted(*args: Any) -> tuple[int, int]:
        calls.append(len(args[1]))
        result: tuple[int, int] = real(*args)
        return result

    monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", counted)
    return calls


@pytest.mark.parametrize("with_dictionary", [False, True])
def test_lone_sync_appends_take_it_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trained: bytes, with_dictionary: bool
) -> None:
    _module()
    calls = _counting(monkeypatch)
    events: list[Any] = [{"i": i, "text": f"tool output line {i} " * (i % 40 + 1)} for i in range(150)]
    events += [b"opaque bytes " * 50, {"big": "y" * (encoding.HELD_COMPRESS_BYTES_MAX + 10)}, {}]
    kw: dict[str, Any] = {"dictionary": Dictionary(1, trained)} if with_dictionary else {}
    with journal.open(tmp_path / "j", create=True, **kw) as j:
        outs = [j.append(e, durability="sync") for e in events]
        assert all(isinstance(o, journal.Committed) for o in outs)
        flushed = j.append({"flush": 1}, durability="flush")  # not "sync": the twin path
    # Every sync record but the one longer than the held compressor takes went through it.
    assert len(calls) == len(events) - 1
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == [*events, {"flush": 1}] and isinstance(flushed, journal.Committed)
    report = verify(str(tmp_path / "j"))
    assert report.verdict == "clean", report
    # Compressed, not only written: the segments hold well under the records' JSON.
    json_bytes = sum(len(encoding._encode_json(e, Options().record_size_bytes_max)) for e in events[:150])
    on_disk = sum(p.stat().st_size for p in (tmp_path / "j").glob("*.seg"))
    assert on_disk < 0.6 * json_bytes, (on_disk, json_bytes)


def test_threads_appending_at_once_each_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trained: bytes
) -> None:
    """Many threads in the call at once share its pools of zstd contexts: every journal reads back."""
    _module()
    calls = _counting(monkeypatch)
    threads_n, per = 12, 40
    start = threading.Barrier(threads_n)
    errors: list[BaseException] = []
    dictionary = Dictionary(1, trained)

    def work(t: int) -> None:
        try:
            kw: dict[str, Any] = {"dictionary": dictionary} if t % 2 else {}
            with journal.open(tmp_path / f"j{t}", create=True, **kw) as j:
                start.wait()
                for i in range(per):
                    out = j.append({"t": t, "i": i, "text": f"line {i} of {t} " * (i % 25 + 1)}, durability="sync")
                    assert isinstance(out, journal.Committed)
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert len(calls) == threads_n * per
    for t in range(threads_n):
        with journal.open(tmp_path / f"j{t}", readonly=True) as j:
            want = [{"t": t, "i": i, "text": f"line {i} of {t} " * (i % 25 + 1)} for i in range(per)]
            assert [r.event for r in j.read()] == want


def test_a_child_forked_while_threads_append_appends_too(tmp_path: Path) -> None:
    """The pool's mutex is taken around a fork (pthread_atfork) and let go on both sides: a child
    forked while other threads are in the call finds it free and appends durably itself, every
    time. (A fork that fell while another thread held the mutex would otherwise leave the child a
    mutex locked for ever; the handlers make that window empty.)"""
    _module()
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    stop = threading.Event()
    started = threading.Barrier(5)
    errors: list[BaseException] = []

    def append_on(t: int) -> None:
        try:
            with journal.open(tmp_path / f"p{t}", create=True) as j:
                started.wait()
                i = 0
                while not stop.is_set():
                    out = j.append({"t": t, "i": i, "text": "durable line " * 30}, durability="sync")
                    assert isinstance(out, journal.Committed)
                    i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=append_on, args=(t,)) for t in range(4)]
    for w in workers:
        w.start()
    started.wait()
    try:
        for k in range(20):
            pid = os.fork()
            if pid == 0:  # the child: one lone durable append through the call, then out
                code = 1
                try:
                    with journal.open(tmp_path / f"c{k}", create=True) as j:
                        out = j.append({"child": k, "text": "child line " * 30}, durability="sync")
                        code = 0 if isinstance(out, journal.Committed) else 2
                finally:
                    os._exit(code)
            waited: list[int] = []
            reaper = threading.Thread(target=lambda p=pid, into=waited: into.append(os.waitpid(p, 0)[1]))
            reaper.start()
            reaper.join(timeout=60)
            if reaper.is_alive():
                os.kill(pid, 9)
                reaper.join()
                pytest.fail(f"child {k} hung in its append (the pool's mutex held across the fork?)")
            assert waited == [0], (k, waited)
    finally:
        stop.set()
        for w in workers:
            w.join()
    assert not errors, errors
    for k in range(20):
        with journal.open(tmp_path / f"c{k}", readonly=True) as j:
            assert [r.event["child"] for r in j.read()] == [k]


def test_a_refusal_by_the_call_rolls_the_append_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The call checks its arguments before it writes anything: a refusal (ValueError and the
    like) is NotCommitted, and the journal goes on; anything else it raises leaves the write's fate
    unknown: it reaches the caller and the journal stops."""
    _module()
    real = writer.FRAME_WRITE_SYNC
    assert real is not None
    raising: list[BaseException] = []

    def refusing(*args: Any) -> tuple[int, int]:
        if raising:
            raise raising.pop()
        result: tuple[int, int] = real(*args)
        return result

    monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", refusing)
    with journal.open(tmp_path / "j", create=True) as j:
        assert isinstance(j.append({"n": 1}, durability="sync"), journal.Committed)
        raising.append(ValueError("refused"))
        out = j.append({"n": 2}, durability="sync")
        assert isinstance(out, journal.NotCommitted) and "refused before its write" in out.reason, out
        assert isinstance(j.append({"n": 3}, durability="sync"), journal.Committed)
        raising.append(MemoryError())
        with pytest.raises(MemoryError):  # raised to the caller, the write's fate unknown: fail-stop
            j.append({"n": 4}, durability="sync")
        with pytest.raises(journal.JournalFailStoppedError):
            j.append({"n": 5}, durability="sync")
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event["n"] for r in j.read()] == [1, 3]
