"""Every constant of the C helper equals the Python constant of the same meaning.

The C file and journal/engine/format.py each name the format's numbers (docs/NATIVE.md: format.py
is the code of docs/FORMAT.md, the C helper its mirror). This test reads every ``#define NAME VALUE`` and
every enum value of native/journal_native.h and native/journal_native.c and compares it with the
constant the table below maps it to. A C constant missing from the table fails the test, so a
new one cannot go unchecked; a Python constant renamed or changed fails it too.
"""

from __future__ import annotations

import ast
import operator
import pathlib
import re
import struct
from collections.abc import Callable
from typing import Any

import pytest

from journal.engine import format as fmt
from journal.engine import native
from journal.engine.options import Options

NATIVE_DIR = pathlib.Path(__file__).resolve().parent.parent / "native"
C_FILES = ("journal_native.h", "journal_native.c")

# C name -> the Python constant of the same meaning, as "module.NAME" (module: fmt or native).
SAME_AS_PYTHON: dict[str, str] = {
    "JN_FRAME_HEADER_BYTES": "fmt.FRAME_HEADER_SIZE_BYTES",
    "JN_FRAME_CHECKSUMMED_FROM": "fmt.FRAME_CHECKSUMMED_FROM",
    "JN_FRAME_MARKER": "fmt.FRAME_MARKER",
    "JN_FRAME_MARKER_OFFSET": "fmt.FRAME_MARKER_OFFSET",
    "JN_FRAME_STORED_BYTES_LIMIT": "fmt.FRAME_STORED_BYTES_LIMIT",
    "JN_FLAG_CODEC_MASK": "fmt.FLAG_CODEC_MASK",
    "JN_FLAG_KIND_MASK": "fmt.FLAG_KIND_MASK",
    "JN_KIND_DATA": "fmt.KIND_DATA",
    "JN_KIND_SEAL": "fmt.KIND_SEAL",
    "JN_KIND_PADDING": "fmt.KIND_PADDING",
    "JN_KIND_BLOCK": "fmt.KIND_BLOCK",
    "JN_BLOCK_FRAME_FLAGS_REFUSED": "fmt.BLOCK_FRAME_FLAGS_REFUSED",
    "JN_BLOCK_RECORDS_MAX": "fmt.BLOCK_RECORDS_MAX",
    "JN_BLOCK_COUNT_BYTES": "fmt.BLOCK_COUNT_SIZE_BYTES",
    "JN_BLOCK_ENTRY_BYTES": "fmt.BLOCK_ENTRY_SIZE_BYTES",
    "JN_FLAG_COMMIT": "fmt.FLAG_COMMIT",
    "JN_FLAG_AFTER_SYNC": "fmt.FLAG_AFTER_SYNC",
    "JN_FLAGS_KNOWN": "fmt.FLAGS_KNOWN",
    "JN_STOP_END": "fmt.Stop.END",
    "JN_STOP_TRUNCATED": "fmt.Stop.TRUNCATED",
    "JN_STOP_ZEROS": "fmt.Stop.ZEROS",
    "JN_STOP_CHECKSUM": "fmt.Stop.CHECKSUM",
    "JN_STOP_SEQ": "fmt.Stop.SEQ",
    "JN_STOP_FLAGS": "fmt.Stop.FLAGS",
    "JN_STOP_SEALED": "fmt.Stop.SEALED",
    "JN_STOP_FULL": "native.STOP_FULL",  # the binding's "call again": never a format.Stop
}

_STOP_CODES = {int(s) for s in fmt.Stop} | {native.STOP_FULL}

# C constants with no Python twin: (the value, why there is none, a check of what it must be).
C_ONLY: dict[str, tuple[int, str, Callable[[int], bool]]] = {
    # XXH64's primes (the xxHash specification); Python uses the xxhash package, and
    # tests/test_native.py holds jn_xxh64 equal to it.
    "P64_1": (0x9E3779B185EBCA87, "XXH64 prime 1", lambda v: True),
    "P64_2": (0xC2B2AE3D27D4EB4F, "XXH64 prime 2", lambda v: True),
    "P64_3": (0x165667B19E3779F9, "XXH64 prime 3", lambda v: True),
    "P64_4": (0x85EBCA77C2B2AE63, "XXH64 prime 4", lambda v: True),
    "P64_5": (0x27D4EB2F165667C5, "XXH64 prime 5", lambda v: True),
    # check_frame's "the frame is genuine": must never be mistaken for a stop reason.
    "JN_GENUINE": (-1, "check_frame's answer for a genuine frame", lambda v: v not in _STOP_CODES),
}

# Macros that are not constants: function-like ones, and the include guard (no value).
NOT_CONSTANTS = {"JN_LE64", "JN_LE32", "JOURNAL_NATIVE_H"}


# --- reading the C files ------------------------------------------------------------------


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\()?[ \t]*(.*)$", re.M)
_ENUM = re.compile(r"\benum\b\s*\w*\s*\{([^}]*)\}", re.S)
_INT = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_OPS: dict[type, Callable[..., int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
    ast.USub: operator.neg, ast.Invert: operator.invert, ast.UAdd: operator.pos,
}


def c_int(expr: str, known: dict[str, int]) -> int:
    """The value of a C integer constant expression (literals with suffixes, + - * << >> | & ^ ~,
    parentheses, names of constants already read). ValueError for anything else."""
    py = _INT.sub(lambda m: str(int(m.group(1), 0)), expr.strip())

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not an integer constant expression: {expr!r}")

    try:
        return ev(ast.parse(py, mode="eval"))
    except SyntaxError as exc:
        raise ValueError(f"not an integer constant expression: {expr!r}") from exc


def parse_c(text: str) -> tuple[dict[str, int], set[str]]:
    """(constants: #define NAME VALUE and enum members, by name; names of the other macros)."""
    text = _strip_comments(text.replace("\\\n", " "))
    consts: dict[str, int] = {}
    others: set[str] = set()
    for name, paren, value in _DEFINE.findall(text):
        if paren or not value.strip():
            others.add(name)
            continue
        got = c_int(value, consts)
        assert consts.setdefault(name, got) == got, f"{name} is defined twice with different values"
    for body in _ENUM.findall(text):
        nxt = 0
        for item in (x.strip() for x in body.split(",")):
            if not item:
                continue
            name, _, value = (p.strip() for p in item.partition("="))
            nxt = c_int(value, consts) if value else nxt
            assert consts.setdefault(name, nxt) == nxt, f"{name} is defined twice with different values"
            nxt += 1
    return consts, others


def c_constants() -> tuple[dict[str, int], set[str]]:
    consts: dict[str, int] = {}
    others: set[str] = set()
    for name in C_FILES:
        c, o = parse_c((NATIVE_DIR / name).read_text())
        for k, v in c.items():
            assert consts.setdefault(k, v) == v, f"{k} differs between the C files"
        others |= o
    return consts, others


def python_value(ref: str) -> Any:
    module, _, attr = ref.partition(".")
    obj: Any = {"fmt": fmt, "native": native}[module]
    for part in attr.split("."):
        assert hasattr(obj, part), f"{ref} does not exist (renamed?): update SAME_AS_PYTHON"
        obj = getattr(obj, part)
    return obj


# --- the comparison ------------------------------------------------------------------------


def test_the_parser_reads_defines_expressions_and_enums() -> None:
    consts, others = parse_c(
        "#ifndef G\n#define G\n#define A 0x10u /* x */\n#define B (A * 2u + 1) // y\n"
        "#define F(v) ((v) + 1)\n# define LONG \\\n  (1ull << 40)\n"
        "enum stop { S0, S1 = 5, S2 };\n"
    )
    assert consts == {"A": 16, "B": 33, "LONG": 1 << 40, "S0": 0, "S1": 5, "S2": 6}
    assert others == {"G", "F"}
    with pytest.raises(ValueError):
        c_int("sizeof(jn_frame)", {})


def test_every_c_constant_equals_its_python_twin() -> None:
    consts, others = c_constants()
    assert len(consts) >= 20, "the parser found too few constants: is it still reading the files?"
    unmapped = sorted(set(consts) - set(SAME_AS_PYTHON) - set(C_ONLY))
    assert not unmapped, (
        f"C constants with no entry in tests/test_constants.py: {unmapped}; map each to the Python "
        "constant of the same meaning (SAME_AS_PYTHON) or, if it has none, to its value and why (C_ONLY)"
    )
    assert others <= NOT_CONSTANTS, f"macros that are not integer constants, unexpected: {others - NOT_CONSTANTS}"
    wrong = {
        name: (consts[name], ref, int(python_value(ref)))
        for name, ref in SAME_AS_PYTHON.items()
        if name in consts and consts[name] != int(python_value(ref))
    }
    assert not wrong, f"C and Python disagree (C value, Python name, Python value): {wrong}"
    for name, (value, why, check) in C_ONLY.items():
        if name in consts:
            assert consts[name] == value, f"{name} ({why}) is {consts[name]:#x}, expected {value:#x}"
            assert check(consts[name]), f"{name} ({why}) = {consts[name]} breaks its rule"
    stops = {name: consts[name] for name in consts if name.startswith("JN_STOP_")}
    assert len(set(stops.values())) == len(stops), f"two stop reasons share a value: {stops}"
    # A name in the table that the C files no longer define is stale: the table must say what
    # the C side holds, not what it once did.
    stale = sorted((set(SAME_AS_PYTHON) | set(C_ONLY)) - set(consts))
    assert not stale, f"entries of tests/test_constants.py that the C files do not define: {stale}"


# --- the Python side's named offsets and sizes -------------------------------------------


def test_segment_header_offsets_name_the_encoded_bytes() -> None:
    jid = bytes(range(1, 17))
    header = fmt.SegmentHeader(fmt.FORMAT_VERSION, jid, 7, 123, 0x1234_5678_9ABC_DEF0)
    data = fmt.encode_segment_header(header)

    def field(offset: int, size: int) -> bytes:
        return data[offset : offset + size]

    u16, u32, u64 = (struct.Struct(f).unpack for f in ("<H", "<I", "<Q"))
    assert field(fmt.SEGMENT_MAGIC_OFFSET, fmt.SEGMENT_MAGIC_SIZE_BYTES) == fmt.SEGMENT_MAGIC
    assert u16(field(fmt.SEGMENT_VERSION_OFFSET, 2)) == (fmt.FORMAT_VERSION,)
    assert u16(field(fmt.SEGMENT_HEADER_SIZE_OFFSET, 2)) == (fmt.SEGMENT_HEADER_SIZE_BYTES,)
    assert u32(field(fmt.SEGMENT_HEADER_FLAGS_OFFSET, 4)) == (0,)
    assert field(fmt.SEGMENT_JOURNAL_ID_OFFSET, fmt.SEGMENT_JOURNAL_ID_SIZE_BYTES) == jid
    assert u64(field(fmt.SEGMENT_NUMBER_OFFSET, 8)) == (7,)
    assert u64(field(fmt.SEGMENT_BASE_SEQ_OFFSET, 8)) == (123,)
    assert u64(field(fmt.SEGMENT_SALT_OFFSET, fmt.SEGMENT_SALT_SIZE_BYTES)) == (header.salt,)
    assert fmt.SEGMENT_HEADER_CHECKSUM_OFFSET + fmt.SEGMENT_HEADER_CHECKSUM_SIZE_BYTES == len(data)


def test_option_limits_are_the_named_sizes() -> None:
    assert fmt.RECORD_STORED_OVERHEAD_BYTES_MAX >= 1 + fmt.IDEMPOTENCY_KEY_BYTES_MAX, "a key prefix fits"
    assert fmt.SEGMENT_SIZE_BYTES_MIN > fmt.SEGMENT_HEADER_SIZE_BYTES + fmt.FRAME_HEADER_SIZE_BYTES
    assert fmt.RESERVE_ROUND_BYTES & (fmt.RESERVE_ROUND_BYTES - 1) == 0
    Options(sector_bytes=fmt.SECTOR_BYTES_MIN).check()
    Options(record_size_bytes_max=fmt.FRAME_STORED_BYTES_LIMIT - fmt.RECORD_STORED_OVERHEAD_BYTES_MAX).check()
    Options(index_interval_bytes=fmt.INDEX_INTERVAL_BYTES_MIN, segment_size_bytes=fmt.SEGMENT_SIZE_BYTES_MIN,
            reserve_bytes=fmt.RESERVE_BYTES_MAX).check()
    Options(segment_size_bytes=fmt.SEGMENT_SIZE_BYTES_MAX).check()
    for bad in (
        Options(sector_bytes=fmt.SECTOR_BYTES_MIN // 2),
        Options(record_size_bytes_max=fmt.FRAME_STORED_BYTES_LIMIT - fmt.RECORD_STORED_OVERHEAD_BYTES_MAX + 1),
        Options(index_interval_bytes=fmt.INDEX_INTERVAL_BYTES_MIN - 1),
        Options(segment_size_bytes=fmt.SEGMENT_SIZE_BYTES_MIN - 1),
        Options(segment_size_bytes=fmt.SEGMENT_SIZE_BYTES_MAX + 1),
        Options(reserve_bytes=fmt.RESERVE_BYTES_MAX + 1),
    ):
        with pytest.raises(ValueError):
            bad.check()
