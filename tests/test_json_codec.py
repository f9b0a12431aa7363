"""The JSON codec: orjson where it writes and reads what json does, json everywhere else.

journal/engine/encoding.py writes an event with orjson only where orjson writes what json
wrote, and journal/record.py keeps orjson's reading of a payload only where it is json's value;
everything else takes the json path the engine always had. The reference here is that old path,
written out again (``old_encode``, ``old_decode``), so the properties do not lean on the code
under test:

* every event gets the old outcome: the same error type and message, or the old bytes but for
  the spelling of floats in [1e-9, 1e-4) (orjson's 0.000015 for json's 1.5e-05), which both
  readers, old and new, read as the old value; the record size limit refuses what it refused;
* every payload the old encoder wrote reads back type-exactly as the old decoder read it (1, 1.0
  and True told apart, -0.0 from 0.0, key order kept), and so does every JSON text json reads;
* through a journal, an event appended and read back is the old path's value, and an idempotent
  retry of a record the old encoder wrote is recognised as the same event.

Each property fails when the json fallback it guards is taken away (the mutations and what
failed are in bench/README.md, "orjson in the codec"): orjson writes NaN as null, UUIDs and enums
as their values; it refuses integers beyond 64 bits, subclasses and keys json takes; it reads
integers beyond 64 bits as floats and refuses NaN, lone surrogates and deep nesting, which json
reads.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import enum
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson  # a dependency: its absence is a broken set-up, not a skip
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal.engine import encoding
from journal.engine.encoding import encode_event, same_event
from journal.errors import EventNotSerializableError, RecordTooLargeError
from journal.record import Record, _no_big_float, decode_json

EXAMPLES = int(os.environ.get("JOURNAL_CODEC_EXAMPLES", "400"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPTIONS = journal.Options()

# --- the old path, as journal/engine/encoding.py and journal/record.py had it -------------------

_OLD_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_OLD_DECODE = json.JSONDecoder().decode


def old_encode(event: Any) -> bytes:
    try:
        raw = _OLD_ENCODE(event).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError) as exc:
        raise EventNotSerializableError(str(exc)) from None
    if encoding._MAYBE_COERCED_KEY(raw) is not None:
        encoding._refuse_non_string_keys(event)
    return raw


def old_decode(payload: bytes) -> Any:
    return _OLD_DECODE(payload.decode("utf-8", "surrogatepass"))


def new_encode(event: Any) -> bytes:
    return encode_event(event, None, False, OPTIONS).raw


def outcome(fn: Callable[[Any], Any], arg: Any) -> tuple[str, Any]:
    """("ok", value) or ("error", (type, message)): what a call gave."""
    try:
        return "ok", fn(arg)
    except Exception as exc:
        return "error", (type(exc), str(exc))


def exact(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down: 1, 1.0 and True differ, so do -0.0 and 0.0
    (floats by their bits), and dicts in another key order. A loop, not recursion: some values
    are nested deeper than the recursion limit."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if type(x) is float:
            if struct.pack("<d", x) != struct.pack("<d", y) and not (math.isnan(x) and math.isnan(y)):
                return False
        elif type(x) is dict:
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif type(x) in (list, tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


def same_outcome(old: tuple[str, Any], new: tuple[str, Any]) -> bool:
    if old[0] != new[0]:
        return False
    return old[1] == new[1] if old[0] == "error" else exact(old[1], new[1])


@contextmanager
def recursion_limit(limit: int) -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


# --- values ---------------------------------------------------------------------------------------

SPECIAL_FLOATS = [
    0.0, -0.0, 1e16, 1e22, 1e-7, 5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1e-9,
    9.999999999999999e-10, 1e-4, 9.999999999999999e-05, 1e-05, 1.5e-06, 1.7976931348623157e308, 0.1, 100.0,
    123456789.12345679, 2.0**63, -(2.0**63), 2.0**64, 1e19, math.nan, math.inf, -math.inf,
]
SPECIAL_INTS = [0, -1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30)]

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),  # NaN and the infinities: in SPECIAL_FLOATS
    st.floats(min_value=1e-12, max_value=1e-3),  # the range orjson spells otherwise
    st.floats(min_value=-1e-300, max_value=1e-300),  # subnormals
    st.sampled_from(SPECIAL_FLOATS),
)
ints = st.one_of(
    st.integers(-1000, 1000),
    st.integers(-(2**65), 2**65),
    st.integers(-(2**200), 2**200),
    st.sampled_from(SPECIAL_INTS),
)
chars = st.one_of(
    st.characters(codec="utf-8"), st.sampled_from('"\\/\x00\x1f\x7f\b\f\n\r\t\u2028\u2029\ufeff\U0001f600\U0010ffff')
)
texts = st.text(chars, max_size=12)
# Lone surrogates: json refuses them at .encode("utf-8"). One string in a few hundred, or nearly
# every event would hold one (a draw of a middle value: hypothesis favours the ends of a range).
surrogate_texts = st.tuples(texts, st.integers(0xD800, 0xDFFF).map(chr), texts).map("".join)
plain_leaves = st.one_of(st.none(), st.booleans(), ints, floats, texts)
leaves = st.integers(0, 299).flatmap(lambda i: surrogate_texts if i == 137 else plain_leaves)
keys = st.integers(0, 299).flatmap(lambda i: surrogate_texts if i == 137 else texts)


class Color(enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    LOW = 1


class Name(str, enum.Enum):
    A = "a"


class Half(float, enum.Enum):
    HALF = 0.5
    SMALL = 1e-05


class Str(str):
    pass


class Int(int):
    pass


class Float(float):
    pass


class List(list):  # type: ignore[type-arg]
    pass


class Dict(dict):  # type: ignore[type-arg]
    pass


class ItemsDict(dict):  # type: ignore[type-arg]
    """json (3.11) writes a dict subclass from its items(): this one's are not its contents."""

    def items(self) -> Any:
        return [("items", "overridden")]


Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass
class Pair:
    a: int = 1


def _odd_values() -> list[Any]:
    """Values orjson and json see differently: some json writes (subclasses, float enums), some it
    refuses (the rest); orjson writes several of each kind without a word."""
    return [
        uuid.UUID(int=7), Color.RED, Level.LOW, Name.A, Half.HALF, Half.SMALL, Str("s"), Int(5), Float(1.5),
        Float(1e-05), Float("nan"), Point(1, 2), List([1, "x"]), Dict(a=1), ItemsDict(a=1), Pair(),
        datetime.datetime(2026, 1, 2, 3, 4, 5), datetime.date(2026, 1, 2), datetime.time(1, 2),
        decimal.Decimal("1.5"), 1 + 2j, b"bytes", bytearray(b"x"), {1, 2}, frozenset(), object(),
        orjson.Fragment(b'{"raw":1}'), orjson.Fragment(b"[1,2]"), range(3), len,
    ]


odd_leaves = st.sampled_from(_odd_values())
odd_keys = st.one_of(ints, floats, st.booleans(), st.none(), st.tuples(st.integers(0, 3)), texts.map(Str))
some_odd_keys = st.integers(0, 9).flatmap(lambda i: odd_keys if i == 7 else keys)


def trees(leaf: st.SearchStrategy[Any], key: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(key, inner, max_size=4),
        ),
        max_leaves=16,
    )


def deep(depth: int) -> dict[str, Any]:
    value: Any = [1]
    for _ in range(depth):
        value = [value]
    return {"deep": value}


# Events of JSON values, some refused (NaN, lone surrogates); events with odd keys or odd values,
# most of them refused; nesting below orjson's limit (254), above it, and beyond json's.
json_events = st.dictionaries(keys, trees(leaves, keys), max_size=6)
odd_events = st.dictionaries(some_odd_keys, trees(st.one_of(leaves, odd_leaves), some_odd_keys), max_size=5)
deep_events = st.sampled_from([100, 253, 254, 255, 256, 400, 5000]).map(deep)
events = st.integers(0, 19).flatmap(lambda i: deep_events if i == 7 else odd_events if 10 <= i < 16 else json_events)


# --- the encoder ------------------------------------------------------------------------------------


def small_floats(value: Any) -> bool:
    """Whether ``value`` holds a float of magnitude in [1e-9, 1e-4): the one place orjson's bytes
    differ from json's (0.000015 or 1.5e-6 for 1.5e-05 or 1.5e-06, the same float)."""
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, float) and 1e-9 <= abs(x) < 1e-4:
            return True
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
    return False


def sized(encode: Callable[[Any], bytes], limit: int) -> Callable[[Any], bytes]:
    """``encode`` with a record size limit, refusing as encode_event does."""

    def run(event: Any) -> bytes:
        if encode is new_encode:
            return encode_event(event, None, False, journal.Options(record_size_bytes_max=limit)).raw
        raw = encode(event)
        if len(raw) > limit:
            raise RecordTooLargeError(len(raw), limit)
        return raw

    return run


@SETTINGS
@given(event=events)
def test_every_event_gets_the_old_outcome(event: dict[Any, Any]) -> None:
    """Refused with the old error type and message, or accepted with the old bytes (but for
    the spelling of small floats) that both readers, old and new, read as the old value; and
    at a record size limit just at or just under the old length, the old outcome again."""
    old = outcome(old_encode, event)
    new = outcome(new_encode, event)
    assert old[0] == new[0], (old, new)
    if old[0] == "error":
        assert old[1] == new[1]  # the same error type, the same message
        return
    assert new[1] == old[1] or small_floats(event)
    with recursion_limit(20_000):
        assert exact(decode_json(new[1]), old_decode(old[1]))
        assert exact(old_decode(new[1]), old_decode(old[1]))  # what a journal before this reads
    for limit in (len(old[1]), len(old[1]) - 1):
        at_old, at_new = outcome(sized(old_encode, limit), event), outcome(sized(new_encode, limit), event)
        assert at_old[0] == at_new[0] and (at_old[0] == "ok" or at_old[1] == at_new[1]), (limit, at_old, at_new)


@SETTINGS
@given(event=json_events, bad=st.sampled_from([
    math.nan, math.inf, -math.inf, "\ud800", "a\udfffb", Float("inf"), uuid.UUID(int=1), Color.RED, Pair(),
    datetime.date(2026, 1, 1), orjson.Fragment(b"null"), object(), {1: "a"}, {True: 1}, {None: 1}, {1.5: 2},
    {(1,): 2}, {math.nan: 1}, {1: math.nan},
]), where=st.integers(0, 1 << 30))
def test_what_the_old_path_refused_is_refused_alike(event: dict[str, Any], bad: Any, where: int) -> None:
    """A value the old path refuses, put anywhere in a valid event, is refused by the new one
    with the same error type and message (NonStringKeyError for a key json would coerce)."""
    containers: list[Any] = []

    def collect(v: Any) -> None:
        if type(v) in (dict, list):
            containers.append(v)
            for x in v.values() if type(v) is dict else v:
                collect(x)

    collect(event)
    target = containers[where % len(containers)]
    if type(target) is dict:
        target[f"k{where}"] = bad
    else:
        target.insert(where % (len(target) + 1), bad)
    old = outcome(old_encode, event)
    assert old[0] == "error", old  # the reference refuses it
    assert outcome(new_encode, event) == old


def test_events_that_json_refuses_by_shape() -> None:
    """Cycles and nesting past the recursion limit: refused, as before."""
    cyclic: dict[str, Any] = {"a": []}
    cyclic["a"].append(cyclic)
    self_list: list[Any] = []
    self_list.append(self_list)
    # 100,000 levels: Python 3.13's json encodes 5,000 (its C encoder no longer stops at the
    # recursion limit), and the property is that both encoders refuse what json refuses.
    for event in (cyclic, {"l": self_list}, deep(100_000)):
        old = outcome(old_encode, event)
        assert old[0] == "error"
        assert outcome(new_encode, event) == old


def test_the_orjson_path_is_taken() -> None:
    """The properties above compare something: orjson is loaded, and an ordinary event goes
    through it (its bytes come from orjson.dumps; json would make a new bytes object)."""
    assert encoding.JSON_CODEC.startswith("orjson")
    event = {"type": "message", "text": "héllo", "n": 1, "x": 0.5, "ok": True, "none": None, "l": [1, (2, 3)]}
    assert encoding._json_like(event)
    assert new_encode(event) == old_encode(event)


# --- the decoder ------------------------------------------------------------------------------------


@SETTINGS
@given(event=st.one_of(events, deep_events))
def test_every_payload_the_old_encoder_wrote_reads_back_as_before(event: dict[Any, Any]) -> None:
    with recursion_limit(20_000):  # the old encoder wrote nesting as deep as the limit let it
        got = outcome(old_encode, event)
        if got[0] == "error":
            return
        payload = got[1]
        old = old_decode(payload)
        assert exact(decode_json(payload), old)
        assert exact(Record(1, payload, False, None, False).event, old)


@st.composite
def json_texts(draw: st.DrawFn) -> bytes:
    """JSON texts json reads, written every way JSON allows and a few ways only json takes:
    NaN and Infinity, lone surrogates (escaped, or raw as the old decoder's surrogatepass reads
    them), integers of any size, floats in long and exponent forms, duplicate keys, whitespace,
    nesting deeper than orjson reads."""

    def ws() -> str:
        return draw(st.sampled_from(["", "", "", "", "", "", "", "", "", "", " ", "\n", "\t ", "\r\n"]))

    def string(s: str) -> str:
        out = ['"']
        for ch in s:
            code = ord(ch)
            how = draw(st.integers(0, 15))
            if ch in '"\\' or code < 0x20 or how == 0:
                short = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\b": "\\b", "\f": "\\f", "\r": "\\r"}
                if ch in short and how != 0:
                    out.append(short[ch])
                elif code > 0xFFFF:
                    hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
                    out.append(f"\\u{hi:04x}\\u{lo:04X}")
                else:
                    out.append(f"\\u{code:04x}" if how % 2 else f"\\u{code:04X}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)

    def number(v: float | int) -> str:
        if isinstance(v, int):
            return draw(st.sampled_from([str(v), "-0" if v == 0 else str(v)]))
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        fixed = f"{v:.25f}" if abs(v) < 1e30 else repr(v)
        forms = [repr(v), repr(v), repr(v), f"{v:.17g}", f"{v:.30e}", f"{v:E}", fixed]
        return draw(st.sampled_from(forms))

    def write(v: Any) -> str:
        if v is None:
            return "null"
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, (int, float)):
            return number(v)
        if isinstance(v, str):
            return string(v)
        if isinstance(v, (list, tuple)):
            return "[" + ws() + ",".join(ws() + write(x) + ws() for x in v) + "]"
        names = list(v)
        twice: bool = draw(st.booleans())
        if names and twice:
            names.append(draw(st.sampled_from(names)))  # a key twice: json keeps the last value
        return "{" + ",".join(ws() + string(k) + ws() + ":" + ws() + write(v[k]) for k in names) + ws() + "}"

    value = draw(st.one_of(json_events, json_events, trees(leaves, keys)))
    text = write(value)
    depth = draw(st.sampled_from([0, 0, 0, 0, 1023, 1024, 1025, 1500]))
    if depth:
        text = '{"deep":' + "[" * depth + text + "]" * depth + "}"
    return (ws() + text + ws()).encode("utf-8", "surrogatepass")


@SETTINGS
@given(payload=json_texts())
def test_any_json_text_reads_as_json_reads_it(payload: bytes) -> None:
    with recursion_limit(20_000):
        old = outcome(old_decode, payload)
        assert same_outcome(old, outcome(decode_json, payload)), payload[:200]
        event = outcome(lambda p: Record(1, p, False, None, False).event, payload)
        if old[0] == "ok" and type(old[1]) is dict:
            assert same_outcome(old, event)
        else:  # no event (the writer writes objects only): the typed error of every reader
            assert event[0] == "error" and event[1][0] is journal.CorruptionError, event


def test_payloads_orjson_reads_otherwise() -> None:
    """The cases the decoder's check exists for, one by one."""
    for payload in (
        b'{"big":18446744073709551616}', b'{"neg":-9223372036854775809}', b'{"n":[123456789012345678901234567890]}',
        b'{"small":1e-05}', b'{"nan":NaN,"inf":[Infinity,-Infinity]}', b'{"s":"\\ud800"}',
        '{"s":"\udc00"}'.encode("utf-8", "surrogatepass"), b'{"d":' + b"[" * 1100 + b"]" * 1100 + b"}",
    ):
        with recursion_limit(20_000):
            old = outcome(old_decode, payload)
            assert old[0] == "ok"
            assert same_outcome(old, outcome(decode_json, payload)), payload[:60]


# --- through a journal --------------------------------------------------------------------------------

# Deeper than orjson writes (json does), and deeper than orjson reads (json does, the limit raised).
deep_appends = st.sampled_from([deep(400), deep(1100)])


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(st.one_of(json_events, odd_events, deep_appends), min_size=1, max_size=8))
def test_appended_events_read_back_as_the_old_path_gave_them(batch: list[dict[Any, Any]]) -> None:
    with tempfile.TemporaryDirectory() as d, recursion_limit(20_000):  # json writes deep(1100) then
        path = os.path.join(d, "j")
        kept = []
        with journal.open(path, create=True) as j:
            for event in batch:
                old = outcome(old_encode, event)
                new = outcome(lambda e: j.append(e, durability="buffered"), event)
                assert old[0] == new[0], (old, new)
                if old[0] == "error":
                    assert old[1] == new[1]
                else:
                    kept.append(old_decode(old[1]))
        with journal.open(path, readonly=True) as j:
            got = [rec.event for rec in j.read()]
        assert len(got) == len(kept)
        assert all(exact(a, b) for a, b in zip(got, kept, strict=True))


@SETTINGS
@given(event=json_events)
def test_a_retry_of_a_record_the_old_encoder_wrote_is_the_same_event(event: dict[str, Any]) -> None:
    got = outcome(old_encode, event)
    if got[0] == "error":
        return
    stored = got[1]
    retry = encode_event(event, "key", False, OPTIONS)
    assert retry.raw == stored or small_floats(event)  # the bytes differ only in that spelling
    assert same_event(stored, False, retry)
    reordered = dict(reversed(list(event.items())))
    assert same_event(stored, False, encode_event(reordered, "key", False, OPTIONS))
    if event:
        changed = {**event, next(iter(event)): "another value"}
        if old_decode(old_encode(changed)) != old_decode(stored):
            assert not same_event(stored, False, encode_event(changed, "key", False, OPTIONS))
    # A retry the old path refused is refused still, never taken for the stored record its
    # bytes would look like if orjson wrote them (NaN as null, a UUID or an enum as its value).
    for stored_value, retried in ((None, math.nan), (str(uuid.UUID(int=7)), uuid.UUID(int=7)), (1, Color.RED)):
        with_stored = outcome(old_encode, {**event, "retried": stored_value})
        if with_stored[0] == "ok":
            retry_event = {**event, "retried": retried}
            assert outcome(old_encode, retry_event)[0] == "error"
            assert outcome(lambda e: encode_event(e, "key", False, OPTIONS), retry_event)[0] == "error"


def test_without_orjson_every_event_takes_the_json_path() -> None:
    """Where orjson cannot be imported (no build for the interpreter), the engine encodes and
    decodes with json alone, as it always did."""
    code = (
        "import sys; sys.modules['orjson'] = None\n"
        "import journal, tempfile, os\n"
        "from journal.engine import encoding\n"
        "from journal import record\n"
        "assert encoding.JSON_CODEC == 'json', encoding.JSON_CODEC\n"
        "ev = {'a': [1, 2.5, 1e-05, None, True, 'h\\u00e9'], 'big': 2**70}\n"
        "raw = encoding.encode_event(ev, None, False, journal.Options()).raw\n"
        "assert raw == b'{\"a\":[1,2.5,1e-05,null,true,\"h\\xc3\\xa9\"],\"big\":1180591620717411303424}', raw\n"
        "assert record.decode_json(raw) == ev\n"
        "d = tempfile.mkdtemp()\n"
        "with journal.open(os.path.join(d, 'j'), create=True) as j:\n"
        "    j.append(ev)\n"
        "    assert [r.event for r in j.read()] == [ev]\n"
        "print('ok')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


CORPUS = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_the_real_session_files_encode_and_decode_as_before() -> None:
    """Every line of the real session files (../shared/corpus), as an event: the old bytes (but
    for the spelling of small floats: the costs in pi sessions), read back as before, and every
    one of them through orjson on both sides."""
    fast = total = 0
    for path in sorted(CORPUS.rglob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            total += 1
            raw, new = old_encode(event), new_encode(event)
            assert new == raw or small_floats(event), path.name
            assert exact(decode_json(raw), old_decode(raw)), path.name
            assert exact(decode_json(new), old_decode(raw)), path.name
            fast += encoding._json_like(event) and _no_big_float(orjson.loads(raw))
    assert total > 100, total
    assert fast == total, (fast, total)  # orjson on both sides for every one of them
