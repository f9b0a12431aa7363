"""The GIL-holding zstd module (native/zstd_held.c): its frames are the ones the zstandard
package writes for a payload (no content size, checksum or dictionary id), every one decodes to
its input, and the encoder hands it exactly the payloads it is for.

Where the system has no libzstd the module does not import and journal compresses with the
zstandard package alone; CI's machines have it, and JOURNAL_REQUIRE_NATIVE=1 (set by .ci/run)
turns the skip into a failure so the module cannot quietly stop being used there.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as hs

import journal
from journal.engine import encoding, native
from journal.engine.options import Options
from tests.native_modules import compiled

ROOT = Path(__file__).resolve().parents[1]


def _module() -> Any:
    return compiled(native.HELD_MODULE_NAME, "the GIL-holding zstd module")


def _package_compress(data: bytes) -> bytes:
    c = zstandard.ZstdCompressor(
        level=encoding.ZSTD_LEVEL, write_content_size=False, write_checksum=False, write_dict_id=False
    )
    return c.compress(data)


def test_its_limits_and_level_are_the_encoders() -> None:
    mod = _module()
    assert mod.INPUT_BYTES_MAX == encoding.HELD_COMPRESS_BYTES_MAX
    assert mod.LEVEL == encoding.ZSTD_LEVEL
    src = (ROOT / "native" / "zstd_held.c").read_text()
    assert f"#define HELD_INPUT_BYTES_MAX ({encoding.HELD_COMPRESS_BYTES_MAX // 1024} * 1024)" in src
    if not native.forced_pure():
        # The encoder uses it wherever it imports: the loader's name and the encoder's own copy.
        assert native.held_compress is mod.compress
        assert encoding._HELD_COMPRESS is mod.compress


_TEXT = hs.text(alphabet=hs.characters(codec="utf-8"), max_size=3000).map(lambda t: t.encode("utf-8"))
_BYTES = hs.binary(max_size=encoding.HELD_COMPRESS_BYTES_MAX)
_REPEATS = hs.tuples(hs.binary(min_size=1, max_size=64), hs.integers(1, 250)).map(lambda p: (p[0] * p[1])[:16384])


@settings(max_examples=300, deadline=None)
@given(hs.one_of(_TEXT, _BYTES, _REPEATS))
def test_every_frame_decodes_to_its_input_and_has_the_packages_shape(data: bytes) -> None:
    mod = _module()
    out = mod.compress(data)
    assert zstandard.ZstdDecompressor().decompress(out, max_output_size=max(1, len(data))) == data
    got, want = zstandard.get_frame_parameters(out), zstandard.get_frame_parameters(_package_compress(data))
    assert (got.content_size, got.has_checksum, got.dict_id) == (want.content_size, want.has_checksum, want.dict_id)
    assert got.content_size == zstandard.CONTENTSIZE_UNKNOWN and not got.has_checksum and got.dict_id == 0
    # The same library at the same level: within a few bytes of the package's own frame.
    assert abs(len(out) - len(_package_compress(data))) <= max(16, len(data) // 20)


def test_bad_input_is_refused_with_a_typed_error() -> None:
    mod = _module()
    limit = encoding.HELD_COMPRESS_BYTES_MAX
    exact = bytes(range(256)) * (limit // 256)
    assert len(exact) == limit  # the largest input it takes
    assert zstandard.ZstdDecompressor().decompress(mod.compress(exact), max_output_size=limit) == exact
    with pytest.raises(ValueError, match="more than the 16384"):
        mod.compress(b"x" * (limit + 1))
    with pytest.raises(TypeError):
        mod.compress("not bytes")
    assert mod.compress(memoryview(b"abc" * 100)) == mod.compress(b"abc" * 100)


def test_the_encoder_sends_small_payloads_here_and_large_ones_to_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    _module()
    seen: list[int] = []
    real = native.held_compress
    assert real is not None or native.forced_pure()

    def recording(data: bytes) -> bytes:
        seen.append(len(data))
        return real(data) if real is not None else _package_compress(data)

    monkeypatch.setattr(encoding, "_HELD_COMPRESS", recording)
    opts = Options()
    limit = encoding.HELD_COMPRESS_BYTES_MAX
    overhead = len(encoding._encode_json({"t": ""}, opts.record_size_bytes_max))  # {"t":""}
    sizes = [encoding.COMPRESS_MIN_BYTES - 10, 1000, limit - 20, limit + 200, 5 * limit]
    sizes += [limit - overhead, limit - overhead + 1]  # payloads of exactly the limit and one byte over
    raw_lens = []
    for size in sizes:
        event = {"t": "x" * size}
        raw_len = len(encoding._encode_json(event, opts.record_size_bytes_max))
        raw_lens.append(raw_len)
        seen.clear()
        enc = encoding.encode_event(event, None, False, opts)
        expect = [raw_len] if encoding.COMPRESS_MIN_BYTES <= raw_len <= limit else []
        assert seen == expect, (size, raw_len, seen)
        assert enc.spec.flags & 0x3 == 1 or raw_len < encoding.COMPRESS_MIN_BYTES  # zstd either way
    assert limit in raw_lens and limit + 1 in raw_lens


def test_journals_written_with_it_read_back_event_for_event(tmp_path: Path) -> None:
    _module()
    limit = encoding.HELD_COMPRESS_BYTES_MAX
    events = [{"i": i, "text": (f"session log line {i} ") * (i * 97 % (2 * limit // 20) + 1)} for i in range(300)]
    with journal.open(tmp_path / "j", create=True) as j:
        for e in events:
            assert isinstance(j.append(e, durability="flush"), journal.Committed)
    sizes = [len(encoding._encode_json(e, Options().record_size_bytes_max)) for e in events]
    assert any(s <= limit for s in sizes) and any(s > limit for s in sizes)  # both compressors were used
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == events


def test_threads_compressing_at_once_each_get_their_own_frames() -> None:
    """The one context is shared by every thread and the GIL keeps their calls apart: many
    threads compressing different payloads at once get exactly the frames each would alone."""
    mod = _module()
    payloads = [(f"thread {t} payload {i} " * (40 + 13 * i + t)).encode() for t in range(8) for i in range(25)]
    alone = [mod.compress(p) for p in payloads]
    start = threading.Barrier(8)
    got: dict[int, list[bytes]] = {}

    def work(t: int) -> None:
        mine = payloads[t * 25 : (t + 1) * 25]
        start.wait()
        got[t] = [mod.compress(p) for _ in range(20) for p in mine][-25:]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [f for t in range(8) for f in got[t]] == alone
