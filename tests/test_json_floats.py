"""The big-float walk in C (native/json_floats.c, ``journal._json_floats``) against its twin,
journal/record.py's ``_no_big_float``: the same answer for every value (hypothesis), the same
error for a nesting too deep, and the record's decoding uses it wherever it imports.

What the walk guards (orjson's reading of an integer beyond 64 bits as a float) is held end to
end by tests/test_json_codec.py, whose payloads then go through the C walk; here the two walks
are held to each other on values orjson never makes too (subclasses, tuples, NaN), so that the
C one cannot answer differently wherever it is called.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from journal import record
from journal.engine import encoding, native
from tests.native_modules import compiled

ROOT = Path(__file__).resolve().parents[1]
BIG = float(2**63)


def _module() -> Any:
    return compiled("journal._json_floats", "the big-float walk in C")


class Dict(dict):  # type: ignore[type-arg]
    pass


class List(list):  # type: ignore[type-arg]
    pass


class Float(float):
    pass


class Str(str):
    pass


class Int(int):
    pass


def test_its_bound_and_its_use_are_the_records() -> None:
    mod = _module()
    assert mod.BIG_FLOAT == record._BIG_FLOAT == BIG
    assert "#define BIG_FLOAT 9223372036854775808.0" in (ROOT / "native" / "json_floats.c").read_text()
    assert native.PURE_ENV == "JOURNAL_PURE"  # the switch record.py reads by name
    if native.forced_pure():
        assert record._NO_BIG_FLOAT is record._no_big_float
    else:
        assert record._NO_BIG_FLOAT is mod.no_big_float


# Floats at and around the bound, both signs, and the ones no JSON text holds.
_EDGE_FLOATS = hs.sampled_from([
    BIG, -BIG, math.nextafter(BIG, 0.0), -math.nextafter(BIG, 0.0), math.nextafter(BIG, math.inf), 1e300, -1e300,
    math.inf, -math.inf, math.nan, 0.0, -0.0, 1.5, 5e-324,
])
_SCALARS = hs.one_of(
    hs.floats(allow_nan=True, allow_infinity=True), _EDGE_FLOATS, hs.integers(), hs.integers(-(2**80), 2**80),
    hs.booleans(), hs.none(), hs.text(max_size=8), _EDGE_FLOATS.map(Float), hs.text(max_size=4).map(Str),
    hs.integers().map(Int), hs.binary(max_size=4),
)


def _containers(children: Any) -> Any:
    keys = hs.one_of(hs.text(max_size=6), _EDGE_FLOATS)  # a key is never looked at, by either
    return hs.one_of(
        hs.lists(children, max_size=6),
        hs.dictionaries(keys, children, max_size=6),
        hs.lists(children, max_size=4).map(List),  # not looked into, by either
        hs.dictionaries(keys, children, max_size=4).map(Dict),
        hs.lists(children, max_size=4).map(tuple),
    )


_VALUES = hs.recursive(_SCALARS, _containers, max_leaves=40)
_TOP = hs.one_of(hs.lists(_VALUES, max_size=8), hs.dictionaries(hs.text(max_size=6), _VALUES, max_size=8))


@settings(max_examples=2000, deadline=None)
@given(_TOP)
def test_the_walk_in_c_answers_as_its_twin(value: Any) -> None:
    mod = _module()
    assert mod.no_big_float(value) is record._no_big_float(value)


@pytest.mark.parametrize("x", [BIG, -BIG, math.inf, -math.inf, math.nan, 1e19])
@pytest.mark.parametrize("where", ["top", "deep in lists", "deep in dicts", "after others"])
def test_a_big_float_anywhere_is_found(x: float, where: str) -> None:
    mod = _module()
    value: Any = {"x": x}
    if where == "deep in lists":
        value = [[[1, "a", [value]]]]
    elif where == "deep in dicts":
        value = {"a": {"b": {"c": [None, True, value]}}}
    elif where == "after others":
        value = {"n": 1, "s": "t", "f": 1.5, "l": [1, 2.5], "d": {"k": -0.0}, "last": [x]}
    assert mod.no_big_float(value) is False and record._no_big_float(value) is False
    if abs(x) == BIG:  # the float just inside the bound is kept
        assert mod.no_big_float({"x": [math.nextafter(x, 0.0)]}) is True


def test_keys_are_never_looked_at() -> None:
    mod = _module()
    value: Any = {BIG: 1, "a": [{math.inf: 0, math.nan: [1.5]}]}
    assert mod.no_big_float(value) is True and record._no_big_float(value) is True


@pytest.mark.parametrize("walk", ["no_big_float", "json_like"])
def test_a_nesting_too_deep_raises_recursion_error_as_the_twin_does(walk: str) -> None:
    """On 3.11 both walks count depth against the interpreter's recursion limit; from 3.12 C
    code has a limit of its own (a fixed count, then the stack), well below a million. The same
    for the encoder's walk (json_like, whose twin is encoding._json_like)."""
    in_c = getattr(_module(), walk)
    twin = record._no_big_float if walk == "no_big_float" else encoding._json_like
    depth = sys.getrecursionlimit() * 4 if sys.version_info < (3, 12) else 1_000_000
    deep: Any = [1.0]
    for _ in range(depth):
        deep = [deep]
    with pytest.raises(RecursionError):
        in_c(deep)
    if sys.version_info < (3, 12):
        with pytest.raises(RecursionError):
            twin(deep)
    assert in_c([[[[1.0]]]]) is True  # it goes on after one


def test_it_takes_a_dict_or_a_list_only() -> None:
    mod = _module()
    for bad in (1.5, "x", (1,), Dict(), List(), None):
        with pytest.raises(TypeError, match="a dict or a list"):
            mod.no_big_float(bad)
    assert mod.no_big_float({}) is True and mod.no_big_float([]) is True


# --- json_like: the encoder's walk of an event (encoding._json_like's twin) --------------------


class Tuple(tuple):  # type: ignore[type-arg]
    pass


_LIKE_SCALARS = hs.one_of(
    _SCALARS, hs.uuids(), hs.datetimes(), hs.sampled_from([True, False, None, Tuple((1,)), object()])
)


def _like_containers(children: Any) -> Any:
    return hs.one_of(_containers(children), hs.lists(children, max_size=4).map(Tuple))


_LIKE_VALUES = hs.recursive(_LIKE_SCALARS, _like_containers, max_leaves=40)
_LIKE_TOP = hs.one_of(
    hs.lists(_LIKE_VALUES, max_size=8),
    hs.lists(_LIKE_VALUES, max_size=8).map(tuple),
    hs.dictionaries(hs.text(max_size=6), _LIKE_VALUES, max_size=8),
)


def test_the_encoder_takes_the_event_walk_in_c_where_it_was_built() -> None:
    mod = _module()
    if native.forced_pure():
        assert encoding._JSON_LIKE is encoding._json_like
    else:
        assert encoding._JSON_LIKE is mod.json_like is record.JSON_LIKE_IN_C


@settings(max_examples=2000, deadline=None)
@given(_LIKE_TOP)
def test_the_event_walk_in_c_answers_as_its_twin(value: Any) -> None:
    mod = _module()
    assert mod.json_like(value) is encoding._json_like(value)


@pytest.mark.parametrize(
    "bad", [math.nan, math.inf, -math.inf, Float(1.0), Str("s"), Int(1), Dict(), List(), Tuple(), b"x", object()]
)
def test_one_value_json_would_write_otherwise_anywhere_is_found(bad: Any) -> None:
    mod = _module()
    for value in ({"x": bad}, [[1, "a", ({"k": [bad]},)]], {"a": 1, "b": [2.5, None, True], "z": (bad,)}):
        assert mod.json_like(value) is False and encoding._json_like(value) is False
    ok: Any = {"s": "t", "n": -(2**70), "f": 1e308, "b": False, "none": None, "l": [1, (2.5, {"d": []})]}
    assert mod.json_like(ok) is True and encoding._json_like(ok) is True


def test_the_event_walk_takes_a_dict_a_list_or_a_tuple_only() -> None:
    mod = _module()
    for bad in (1.5, "x", Dict(), List(), Tuple(), None):
        with pytest.raises(TypeError, match="a dict, a list or a tuple"):
            mod.json_like(bad)
