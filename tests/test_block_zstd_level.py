"""A block frame's records are compressed at encoding.BLOCK_ZSTD_LEVEL on every path (the
zstandard package for a block of more than HELD_COMPRESS_BYTES_MAX, the GIL-held compressor for a
smaller one, and both again with a trained dictionary, whose CDict fixes the level), while a
record framed alone stays at ZSTD_LEVEL.

The level is set here to one far from ZSTD_LEVEL, so that a frame made at the wrong one differs.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import zstandard

import journal
from journal.engine import dictionary, encoding, native
from journal.engine import format as fmt
from journal.engine.dictionary import Dictionary, DictionaryUse
from journal.engine.options import Options
from tests.dictionary_samples import train

LEVEL = 19  # the block level under test: far from ZSTD_LEVEL (1)
HELD_MAX = encoding.HELD_COMPRESS_BYTES_MAX


@pytest.fixture
def block_level(monkeypatch: pytest.MonkeyPatch) -> int:
    assert encoding.ZSTD_LEVEL != LEVEL
    monkeypatch.setattr(encoding, "BLOCK_ZSTD_LEVEL", LEVEL)
    monkeypatch.setattr(dictionary, "BLOCK_ZSTD_LEVEL", LEVEL)
    return LEVEL


def _events(total_bytes: int, seed: int) -> list[dict[str, Any]]:
    """Session-like events whose JSON adds up to about ``total_bytes``."""
    rng = random.Random(seed)
    words = ["tool_result", "assistant", "the test passes", "src/journal/engine.py", "ok", "line 42", "def main():"]
    out: list[dict[str, Any]] = []
    size = 0
    while size < total_bytes:
        e = {"type": rng.choice(words[:2]), "n": len(out), "text": " ".join(rng.choice(words) for _ in range(60))}
        out.append(e)
        size += len(encoding._encode_json(e, Options().record_size_bytes_max))
    return out


def _one_block(events: list[dict[str, Any]], opts: Options) -> tuple[bytes, bytes, fmt.FrameSpec]:
    """(the records' joined JSON, the block's zstd body, its frame): the events packed as one
    block frame, as an append_many packs them."""
    items = [encoding.encode_event(e, None, False, opts, together=True) for e in events]
    encoding.pack(items, opts, blocks=True)
    block = items[0].block
    assert block is not None and all(it.block is block for it in items), "the events make one block"
    raw = b"".join(it.raw for it in items)
    head = fmt.encode_block_head([len(it.raw) for it in items], [it.spec.flags for it in items])
    assert block.spec.stored.startswith(head) and block.spec.flags & fmt.CODEC_ZSTD
    return raw, block.spec.stored[len(head) :], block.spec


def _package(level: int, data: bytes, zdict: zstandard.ZstdCompressionDict | None = None) -> bytes:
    if zdict is None:
        c = zstandard.ZstdCompressor(level=level, write_content_size=False, write_checksum=False, write_dict_id=False)
    else:
        c = zstandard.ZstdCompressor(
            dict_data=zdict, level=level, write_content_size=False, write_checksum=True, write_dict_id=False
        )
    return c.compress(data)


def _zdict(data: bytes, level: int) -> zstandard.ZstdCompressionDict:
    d = zstandard.ZstdCompressionDict(data)
    d.precompute_compress(level=level)
    return d


def _held() -> Any:
    if native.held_compress_at is None or native.held_make_cdict_at is None:
        pytest.skip(f"no GIL-held compressor that takes a level: {native.held_status}")
    return native


def test_a_large_block_is_compressed_by_the_package_at_the_block_level(block_level: int) -> None:
    opts = Options()
    raw, body, _ = _one_block(_events(HELD_MAX + 4000, 1), opts)
    assert HELD_MAX < len(raw) <= opts.block_bytes
    assert body == _package(block_level, raw)
    assert body != _package(encoding.ZSTD_LEVEL, raw)


def test_a_small_block_is_compressed_by_the_held_compressor_at_the_block_level(block_level: int) -> None:
    held = _held()
    opts = Options()
    raw, body, _ = _one_block(_events(HELD_MAX - 4000, 2), opts)
    assert len(raw) <= HELD_MAX
    assert body == held.held_compress_at(raw, block_level)
    assert held.held_compress is not None and body != held.held_compress(raw)


def test_without_the_held_compressor_a_small_block_is_the_packages_at_the_block_level(
    block_level: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoding, "_HELD_COMPRESS_AT", None)
    raw, body, _ = _one_block(_events(HELD_MAX - 4000, 3), Options())
    assert body == _package(block_level, raw)


def test_a_record_framed_alone_stays_at_the_record_level(block_level: int) -> None:
    opts = Options()
    for size in (HELD_MAX - 4000, HELD_MAX + 4000):
        (event,) = _events(1, 4)
        event["text"] = (event["text"] + " ") * (size // len(event["text"]))
        enc = encoding.encode_event(event, None, False, opts, together=True)
        spec = encoding.alone_spec(enc, opts)
        assert spec.flags & fmt.CODEC_ZSTD and not spec.flags & fmt.KIND_BLOCK
        assert len(spec.stored) != len(_package(block_level, enc.raw))
        if native.held_compress is not None and len(enc.raw) <= HELD_MAX:
            assert spec.stored == native.held_compress(enc.raw)
        else:
            assert spec.stored == _package(encoding.ZSTD_LEVEL, enc.raw)


@pytest.fixture
def own_dictionary(block_level: int) -> bytes:
    """A dictionary no other test of the process used: the process keeps a dictionary's tables
    by digest, and these must be made at the block level set here."""
    return train()[:-8] + b"blocklvl"


def _dict_options(data: bytes) -> Options:
    use = DictionaryUse(1, Dictionary(1, data))
    use.active = True
    return Options(dictionary=use)


def test_a_large_block_with_a_dictionary_is_at_the_block_level(block_level: int, own_dictionary: bytes) -> None:
    opts = _dict_options(own_dictionary)
    raw, body, spec = _one_block(_events(HELD_MAX + 4000, 5), opts)
    assert len(raw) > HELD_MAX and spec.dict_id == 1
    assert body == _package(block_level, raw, _zdict(own_dictionary, block_level))
    assert body != _package(encoding.ZSTD_LEVEL, raw, _zdict(own_dictionary, encoding.ZSTD_LEVEL))


def test_a_small_block_with_a_dictionary_is_at_the_block_level(block_level: int, own_dictionary: bytes) -> None:
    held = _held()
    opts = _dict_options(own_dictionary)
    raw, body, spec = _one_block(_events(HELD_MAX - 4000, 6), opts)
    assert len(raw) <= HELD_MAX and spec.dict_id == 1
    assert held.held_compress_with is not None
    assert body == held.held_compress_with(held.held_make_cdict_at(own_dictionary, block_level), raw)
    assert body != held.held_compress_with(held.held_make_cdict_at(own_dictionary, encoding.ZSTD_LEVEL), raw)
    # A record alone, with the same handle's dictionary, at the record level.
    enc = encoding.encode_event(_events(2000, 7)[0], None, False, opts)
    record_cdict = held.held_make_cdict_at(own_dictionary, encoding.ZSTD_LEVEL)
    assert enc.spec.stored == held.held_compress_with(record_cdict, enc.raw)


def test_journals_with_blocks_at_another_level_read_back(block_level: int, tmp_path: Path) -> None:
    events = _events(200_000, 8)
    with journal.open(tmp_path / "j", create=True) as j:
        j.append_many(events)
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == events
