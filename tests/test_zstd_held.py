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
from journal.engine import encoding, native, writer
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


# --- a trained dictionary: make_cdict + compress_with ----------------------------------------


@pytest.fixture(scope="module")
def trained() -> bytes:
    from journal.benchmark.events import make_events

    opts = Options(compress=False)
    samples: list[bytes | bytearray | memoryview] = [
        encoding.encode_event(e, None, False, opts).raw for e in make_events(1500)
    ]
    return zstandard.train_dictionary(16 * 1024, samples, level=encoding.ZSTD_LEVEL).as_bytes()


def _package_compress_with(dictionary: bytes, data: bytes) -> bytes:
    c = zstandard.ZstdCompressor(
        dict_data=zstandard.ZstdCompressionDict(dictionary),
        level=encoding.ZSTD_LEVEL,
        write_content_size=False,
        write_checksum=True,  # with a dictionary, zstd's content checksum (docs/FORMAT.md)
        write_dict_id=False,
    )
    return c.compress(data)


def _decompress_with(dictionary: bytes, frame: bytes, size: int) -> bytes:
    d = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))
    return d.decompress(frame, max_output_size=max(1, size))


def test_its_dictionary_limit_is_the_dictionary_modules() -> None:
    from journal.engine import dictionary

    mod = _module()
    assert mod.DICT_BYTES_MAX == dictionary.DICTIONARY_BYTES_MAX
    src = (ROOT / "native" / "zstd_held.c").read_text()
    assert f"#define DICT_BYTES_MAX ({dictionary.DICTIONARY_BYTES_MAX // 1024} * 1024)" in src
    if not native.forced_pure():
        assert native.held_make_cdict is mod.make_cdict
        assert native.held_compress_with is mod.compress_with


@settings(max_examples=200, deadline=None)
@given(data=hs.one_of(_TEXT, _BYTES, _REPEATS))
def test_every_dictionary_frame_decodes_with_it_and_has_the_packages_shape(trained: bytes, data: bytes) -> None:
    mod = _module()
    out = mod.compress_with(mod.make_cdict(trained), data)
    assert _decompress_with(trained, out, len(data)) == data
    got = zstandard.get_frame_parameters(out)
    want = zstandard.get_frame_parameters(_package_compress_with(trained, data))
    assert (got.content_size, got.has_checksum, got.dict_id) == (want.content_size, want.has_checksum, want.dict_id)
    assert got.content_size == zstandard.CONTENTSIZE_UNKNOWN and got.has_checksum and got.dict_id == 0
    assert abs(len(out) - len(_package_compress_with(trained, data))) <= max(16, len(data) // 20)


def test_a_dictionary_makes_session_events_smaller(trained: bytes) -> None:
    """What it is for: the benchmark's events (not those it was trained on) come out smaller
    with it than without, each compressed alone."""
    from journal.benchmark.events import make_events

    mod = _module()
    cdict = mod.make_cdict(trained)
    opts = Options(compress=False)
    raws = [encoding.encode_event(e, None, False, opts).raw for e in make_events(3000)[1500:]]
    raws = [r for r in raws if encoding.COMPRESS_MIN_BYTES <= len(r) <= encoding.HELD_COMPRESS_BYTES_MAX]
    with_dict = sum(len(mod.compress_with(cdict, r)) for r in raws)
    without = sum(len(mod.compress(r)) for r in raws)
    assert with_dict < without * 0.85, (with_dict, without)


def test_calls_alternating_between_dictionaries_use_each_ones_own(trained: bytes) -> None:
    """The dictionary context follows the handle of each call (two journals with their own
    dictionaries, in one process), and a handle freed and a new one made in its place is used."""
    mod = _module()
    other = bytes(reversed(trained))  # another dictionary (raw content: zstd takes any bytes)
    a, b = mod.make_cdict(trained), mod.make_cdict(other)
    data = b'{"kind":"tool_result","text":"the test file passes now"}' * 5
    for _ in range(3):
        fa, fb = mod.compress_with(a, data), mod.compress_with(b, data)
        assert _decompress_with(trained, fa, len(data)) == data
        assert _decompress_with(other, fb, len(data)) == data
        assert fa == mod.compress_with(a, data)  # the same frame as after another dictionary's call
    del a
    c = mod.make_cdict(trained)
    assert _decompress_with(trained, mod.compress_with(c, data), len(data)) == data
    assert mod.compress(data) == _module().compress(data)  # the plain context is untouched by them


def test_bad_dictionary_input_is_refused_with_a_typed_error(trained: bytes) -> None:
    mod = _module()
    cdict = mod.make_cdict(trained)
    limit = encoding.HELD_COMPRESS_BYTES_MAX
    with pytest.raises(ValueError, match="more than the 16384"):
        mod.compress_with(cdict, b"x" * (limit + 1))
    with pytest.raises(TypeError, match="made by make_cdict"):
        mod.compress_with(trained, b"abc")
    with pytest.raises(TypeError):
        mod.compress_with(cdict)
    with pytest.raises(TypeError):
        mod.compress_with(cdict, "not bytes")
    with pytest.raises(ValueError, match="more than the 1048576"):
        mod.make_cdict(b"x" * (mod.DICT_BYTES_MAX + 1))
    exact = bytes(range(256)) * (limit // 256)
    assert _decompress_with(trained, mod.compress_with(cdict, exact), limit) == exact


def test_the_encoder_sends_small_payloads_to_it_with_the_dictionary(
    monkeypatch: pytest.MonkeyPatch, trained: bytes, tmp_path: Path
) -> None:
    """A handle opened with a dictionary compresses each payload of up to the limit here, with
    the dictionary's handle, and larger ones through the package; the journal reads back."""
    from journal.engine.dictionary import Dictionary, DictionaryUse

    _module()
    if native.forced_pure():
        pytest.skip("JOURNAL_PURE=1: the package compresses every payload")
    seen: list[int] = []
    real = native.held_compress_with
    assert real is not None

    def recording(handle: object, data: bytes) -> bytes:
        seen.append(len(data))
        return real(handle, data)

    monkeypatch.setattr(encoding, "_HELD_COMPRESS_WITH", recording)
    use = DictionaryUse(1, Dictionary(1, trained))
    use.active = True
    assert use.held is not None
    opts = Options(dictionary=use)
    limit = encoding.HELD_COMPRESS_BYTES_MAX
    overhead = len(encoding._encode_json({"t": ""}, opts.record_size_bytes_max))
    sizes = [encoding.DICT_COMPRESS_MIN_BYTES - 10, 300, limit - overhead, limit - overhead + 1, 3 * limit]
    decompress = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(trained))
    for size in sizes:
        event = {"t": "the test file passes " * (size // 21) + "x" * (size % 21)}
        seen.clear()
        enc = encoding.encode_event(event, None, False, opts)
        raw_len = len(enc.raw)
        expect = [raw_len] if encoding.DICT_COMPRESS_MIN_BYTES <= raw_len <= limit else []
        assert seen == expect, (size, raw_len, seen)
        if enc.spec.flags & 0x3:
            assert enc.spec.dict_id == 1
            assert decompress.decompress(enc.spec.stored, max_output_size=raw_len) == enc.raw
    seen.clear()
    # A lone durable append is compressed by the C call that also frames, writes and syncs it
    # (frame_write_sync), with the dictionary's same handle: counted as well.
    lone = writer.FRAME_WRITE_SYNC
    assert lone is not None

    def lone_recording(*args: Any) -> tuple[int, int]:
        raw, cdict = args[1], args[7]
        if cdict is not None and len(raw) >= encoding.DICT_COMPRESS_MIN_BYTES:
            assert cdict is use_held[0]
            seen.append(len(raw))
        result: tuple[int, int] = lone(*args)
        return result

    monkeypatch.setattr(writer, "FRAME_WRITE_SYNC", lone_recording)
    events = [{"i": i, "text": f"tool output line {i} " * (i % 40 + 1)} for i in range(200)]
    dictionary = Dictionary(1, trained)
    with journal.open(tmp_path / "j", create=True, dictionary=dictionary) as j:
        use_held = [j.options.dictionary.held]  # type: ignore[attr-defined]
        for e in events:
            assert isinstance(j.append(e, durability="sync"), journal.Committed)
    assert len(seen) >= 150  # the durable appends went through it
    with journal.open(tmp_path / "j", readonly=True) as j:
        assert [r.event for r in j.read()] == events


# --- a level: block frames at encoding.BLOCK_ZSTD_LEVEL ----------------------------------------

OTHER_LEVEL = 19  # far from ZSTD_LEVEL: its frames are several percent smaller on these payloads


def _level_payloads() -> list[bytes]:
    from journal.benchmark.events import make_events

    opts = Options(compress=False)
    raws = [encoding.encode_event(e, None, False, opts).raw for e in make_events(600)]
    joined = b"".join(raws)
    step = encoding.HELD_COMPRESS_BYTES_MAX
    return [joined[i : i + step] for i in range(0, min(len(joined), 12 * step), step)]


def _same_library(mod: Any) -> bool:
    major, minor, patch = zstandard.ZSTD_VERSION
    return bool(mod.LIBRARY_VERSION == major * 10000 + minor * 100 + patch)


def test_the_levels_are_the_encoders_and_the_dictionary_modules() -> None:
    from journal.engine import dictionary

    mod = _module()
    assert dictionary.ZSTD_LEVEL == encoding.ZSTD_LEVEL == mod.LEVEL
    assert dictionary.BLOCK_ZSTD_LEVEL == encoding.BLOCK_ZSTD_LEVEL
    assert mod.LEVEL_MIN <= encoding.BLOCK_ZSTD_LEVEL <= mod.LEVEL_MAX
    if not native.forced_pure():
        assert native.held_compress_at is mod.compress
        assert native.held_make_cdict_at is mod.make_cdict
        assert encoding._HELD_COMPRESS_AT is mod.compress


def test_a_level_given_is_the_level_of_the_frame() -> None:
    """compress(data, level) writes the package's frame at that level (byte for byte where the
    system's libzstd is the package's version; else within a few bytes, far from the default
    level's), and the next call without one is back at LEVEL."""
    mod = _module()
    payloads = _level_payloads()
    at = [mod.compress(p, OTHER_LEVEL) for p in payloads]
    package = [
        zstandard.ZstdCompressor(
            level=OTHER_LEVEL, write_content_size=False, write_checksum=False, write_dict_id=False
        ).compress(p)
        for p in payloads
    ]
    default = [mod.compress(p) for p in payloads]
    for p, frame in zip(payloads, at, strict=True):
        assert zstandard.ZstdDecompressor().decompress(frame, max_output_size=len(p)) == p
    if _same_library(mod):
        assert at == package
    assert abs(sum(map(len, at)) - sum(map(len, package))) <= sum(map(len, package)) // 100
    assert sum(map(len, at)) < sum(map(len, default)) * 0.95, (sum(map(len, at)), sum(map(len, default)))
    assert default == [_module().compress(p, mod.LEVEL) for p in payloads]  # LEVEL, again, once told another
    assert [mod.compress(p) for p in payloads] == default
    assert [mod.compress(p, OTHER_LEVEL) for p in payloads] == at


def test_a_dictionary_made_at_a_level_compresses_at_it(trained: bytes) -> None:
    mod = _module()
    payloads = _level_payloads()
    cdict_at, cdict = mod.make_cdict(trained, OTHER_LEVEL), mod.make_cdict(trained)
    at = [mod.compress_with(cdict_at, p) for p in payloads]
    zdict = zstandard.ZstdCompressionDict(trained)
    zdict.precompute_compress(level=OTHER_LEVEL)
    package = [
        zstandard.ZstdCompressor(
            dict_data=zdict, level=OTHER_LEVEL, write_content_size=False, write_checksum=True, write_dict_id=False
        ).compress(p)
        for p in payloads
    ]
    default = [mod.compress_with(cdict, p) for p in payloads]
    for p, frame in zip(payloads, at, strict=True):
        assert _decompress_with(trained, frame, len(p)) == p
    if _same_library(mod):
        assert at == package
    assert abs(sum(map(len, at)) - sum(map(len, package))) <= sum(map(len, package)) // 100
    assert sum(map(len, at)) < sum(map(len, default)) * 0.95, (sum(map(len, at)), sum(map(len, default)))
    assert [mod.compress_with(cdict, p) for p in payloads] == default  # each CDict keeps its level


def test_a_level_it_does_not_have_is_refused_with_a_typed_error(trained: bytes) -> None:
    mod = _module()
    data = b"abc" * 100
    before = mod.compress(data)
    for bad in (mod.LEVEL_MAX + 1, mod.LEVEL_MIN - 1, 2**40, 2**80):
        with pytest.raises((ValueError, OverflowError)):
            mod.compress(b"abc" * 100, bad)
        with pytest.raises((ValueError, OverflowError)):
            mod.make_cdict(trained, bad)
    with pytest.raises(TypeError):
        mod.compress(b"abc" * 100, "3")
    with pytest.raises(TypeError):
        mod.compress(b"abc" * 100, 3, 4)
    with pytest.raises(TypeError):
        mod.compress()
    with pytest.raises(TypeError):
        mod.make_cdict(trained, 1.5)
    assert mod.compress(data) == before  # a refused level leaves the context at its own
