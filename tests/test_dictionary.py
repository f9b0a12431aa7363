"""The dictionary file codec (journal/engine/dictionary.py): round trip, every defect of crafted
bytes, the size cap and links, and install's choice of id (reuse by digest, link, next free)."""

from __future__ import annotations

import json
import os
import random
import struct
import tracemalloc
from typing import Any

import pytest
import xxhash
import zstandard

from journal.engine import dictionary as dic
from journal.errors import CorruptionError, UnexpectedLinkError
from journal.fs import OsFileSystem


def samples(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    return [
        json.dumps(
            {
                "type": rng.choice(["message", "tool_call", "tool_result"]),
                "id": f"evt_{i:08d}",
                "role": rng.choice(["user", "assistant"]),
                "content": " ".join(rng.choice(["the", "file", "search", "result", "ok", "error"]) for _ in range(12)),
                "meta": {"tokens": rng.randint(1, 5000), "model": "m-1"},
            }
        ).encode()
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def trained() -> bytes:
    return zstandard.train_dictionary(16384, list[Any](samples(2000))).as_bytes()


def test_round_trip(trained: bytes) -> None:
    d = dic.Dictionary(3, trained)
    assert len(d.digest) == 16
    data = dic.encode_dictionary_file(d)
    got = dic.decode_dictionary_file(data, "dict-00003.zdict")
    assert got == d and got.digest == d.digest
    assert dic.dictionary_file_name(3) == "dict-00003.zdict"
    assert dic.parse_dictionary_file_name("dict-00003.zdict") == 3
    assert dic.parse_dictionary_file_name("dict-00000.zdict") is None
    assert dic.parse_dictionary_file_name("dict-3.zdict") is None


@pytest.mark.parametrize(
    ("dict_id", "size"), [(0, 300), (65536, 300), (1, dic.DICTIONARY_BYTES_MIN - 1), (1, dic.DICTIONARY_BYTES_MAX + 1)]
)
def test_out_of_range(dict_id: int, size: int) -> None:
    with pytest.raises(ValueError):
        dic.Dictionary(dict_id, bytes(size))


def _rechecksum(body: bytes) -> bytes:
    return body + struct.pack("<Q", xxhash.xxh64_intdigest(body, seed=0))


def test_defects(trained: bytes) -> None:
    good = dic.encode_dictionary_file(dic.Dictionary(1, trained))
    name = "dict-00001.zdict"
    head = dic.DICTIONARY_FILE_HEAD_BYTES

    def reason(data: bytes, file_name: str = name) -> str:
        with pytest.raises(CorruptionError) as err:
            dic.decode_dictionary_file(data, file_name)
        assert file_name in str(err.value)
        return err.value.reason

    assert "shorter" in reason(good[:20])
    assert "length" in reason(good[:-1])  # truncated
    assert "checksum" in reason(good[:-8] + bytes(8))
    assert "magic" in reason(b"X" + good[1:])
    # Another digest, checksummed again: only the digest check finds it.
    body = bytearray(good[:-8])
    body[16] ^= 0xFF
    assert "digest" in reason(_rechecksum(bytes(body)))
    # A whole, verified file under another id's name.
    assert "id" in reason(good, "dict-00002.zdict")
    # A length field of 2**32-1 on a small file: refused by the bytes there are, nothing sized by it.
    crafted = _rechecksum(good[:12] + struct.pack("<I", 2**32 - 1) + good[16:-8])
    tracemalloc.start()
    try:
        assert "length" in reason(crafted)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(good)
    assert len(good) == head + len(trained) + dic.DICTIONARY_FILE_TAIL_BYTES


def test_oversize_file_refused_before_read(tmp_path: str, trained: bytes) -> None:
    fs = OsFileSystem()
    path = os.path.join(tmp_path, "dict-00001.zdict")
    with open(path, "wb") as f:
        f.truncate(dic.DICTIONARY_FILE_BYTES_MAX + 1)  # sparse: a read of it whole would be 1 MiB
    reads: list[int] = []
    real_open = fs.open_read

    def open_read(p: str):  # type: ignore[no-untyped-def]
        f = real_open(p)
        real_pread = f.pread

        def pread(size: int, offset: int) -> bytes:
            reads.append(size)
            return real_pread(size, offset)

        f.pread = pread  # type: ignore[method-assign]
        return f

    fs.open_read = open_read  # type: ignore[method-assign,assignment]
    with pytest.raises(CorruptionError, match="more than a dictionary file holds"):
        dic.load_dictionary(fs, str(tmp_path), 1)
    assert reads == []


def test_symlink_refused(tmp_path: str, trained: bytes) -> None:
    real = os.path.join(tmp_path, "elsewhere.zdict")
    with open(real, "wb") as f:
        f.write(dic.encode_dictionary_file(dic.Dictionary(1, trained)))
    os.symlink(real, os.path.join(tmp_path, "dict-00001.zdict"))
    with pytest.raises(UnexpectedLinkError):
        dic.load_dictionary(OsFileSystem(), str(tmp_path), 1)


def test_install_reuses_links_and_takes_next_free(tmp_path: str, trained: bytes) -> None:
    fs = OsFileSystem()
    a, b = os.path.join(tmp_path, "a"), os.path.join(tmp_path, "b")
    os.mkdir(a)
    os.mkdir(b)
    d = dic.Dictionary(1, trained)
    assert dic.install_dictionary(fs, a, d) == 1
    assert dic.dictionary_ids(fs, a) == [1]
    # The same bytes under another preferred id: the file already there is reused.
    assert dic.install_dictionary(fs, a, dic.Dictionary(9, trained)) == 1
    assert dic.dictionary_ids(fs, a) == [1]
    # Loaded from a's file, installed in b: a hard link of that file.
    loaded = dic.load_dictionary(fs, a, 1)
    assert loaded.path == os.path.join(a, "dict-00001.zdict")
    assert dic.install_dictionary(fs, b, loaded) == 1
    assert os.stat(os.path.join(b, "dict-00001.zdict")).st_ino == os.stat(loaded.path).st_ino
    # Another dictionary wanting id 1: the next free id, written (not linked).
    other = zstandard.train_dictionary(8192, list[Any](samples(2000, seed=99))).as_bytes()
    assert dic.install_dictionary(fs, a, dic.Dictionary(1, other, loaded.path)) == 2
    assert dic.load_dictionary(fs, a, 2).data == other
    assert os.stat(os.path.join(a, "dict-00002.zdict")).st_nlink == 1
    # A path whose file holds other bytes is not linked.
    c = os.path.join(tmp_path, "c")
    os.mkdir(c)
    assert dic.install_dictionary(fs, c, dic.Dictionary(1, other, loaded.path)) == 1
    assert os.stat(os.path.join(c, "dict-00001.zdict")).st_nlink == 1
    assert dic.load_dictionary(fs, c, 1).data == other


def test_format_rules_for_dictionary_ids() -> None:
    from journal.engine import format as fmt

    assert dic.DICT_FORMAT_VERSION_MIN == fmt.DICT_FORMAT_VERSION_MIN == fmt.FORMAT_VERSION == 4
    zstd = fmt.CODEC_ZSTD
    assert fmt.flags_supported(fmt.KIND_DATA | zstd, 7)
    assert fmt.flags_supported(fmt.KIND_BLOCK | zstd, 0xFFFF)
    assert not fmt.flags_supported(fmt.KIND_DATA | fmt.CODEC_RAW, 7)  # a raw frame names none
    assert not fmt.flags_supported(fmt.KIND_SEAL, 7)
    assert not fmt.flags_supported(fmt.KIND_PADDING, 7)


@pytest.mark.parametrize(
    ("flags", "dict_id", "stop"),
    [
        (0x1, 5, "END"),  # zstd data frame
        (0x0, 5, "FLAGS"),  # raw data frame
        (0x8, 5, "FLAGS"),  # padding
        (0x4, 5, "FLAGS"),  # seal
    ],
)
def test_c_and_pure_scan_agree_on_dictionary_ids(flags: int, dict_id: int, stop: str) -> None:
    from journal.engine import format as fmt
    from journal.engine import native

    seq = 1 if flags & fmt.FLAG_KIND_MASK == fmt.KIND_DATA else 0
    frame = fmt.encode_frame(seq, flags, 3, b"abc", 99, dict_id)
    pure = fmt.py_scan(frame, 0, 99, 1)
    assert pure.stop.name == stop
    if native.native_available():
        assert fmt.c_scan(frame, 0, 99, 1) == pure
        assert fmt.c_verify_frame(frame, 0, 99) == fmt.py_verify_frame(frame, 0, 99)


def test_cache_loads_each_file_once(tmp_path: str, trained: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    fs = OsFileSystem()
    dic.install_dictionary(fs, str(tmp_path), dic.Dictionary(1, trained))
    loads: list[int] = []
    real = dic.load_dictionary

    def counting(fs_: Any, journal_dir: str, dict_id: int) -> dic.Dictionary:
        loads.append(dict_id)
        return real(fs_, journal_dir, dict_id)

    monkeypatch.setattr(dic, "load_dictionary", counting)
    cache = dic.DictionaryCache(fs, str(tmp_path))
    got: list[zstandard.ZstdDecompressor] = []
    for _ in range(3):  # threads one after another, each its own decompressor, one load in all
        t = threading.Thread(target=lambda: got.append(cache.decompressor(1, "seg", 64, 1)))
        t.start()
        t.join()
    assert cache.decompressor(1, "seg", 64, 1) is cache.decompressor(1, "seg", 64, 1)
    assert loads == [1] and len({id(d) for d in got}) == 3
    packed = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(trained), write_content_size=False)
    raw = samples(1)[0]
    assert got[0].decompress(packed.compress(raw), max_output_size=len(raw)) == raw
