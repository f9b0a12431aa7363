"""A commit group's log bytes (journal/engine/group_log.py), driven with bytes: what a scan keeps,
what it calls a torn tail, what it refuses as corruption, and what crafted entries cannot do."""

from __future__ import annotations

import os
import pathlib
import struct

import pytest
import xxhash

from journal.engine import format as fmt
from journal.engine import group_log as glog

SALT = 0x1234_5678_9ABC_DEF0
JID = bytes(range(16))
OFFSET = fmt.SEGMENT_HEADER_SIZE_BYTES


def entry(
    number: int, data: bytes = b"frame-bytes", path: str = "a/b", offset: int = OFFSET, salt: int = SALT
) -> bytes:
    return glog.encode_entry(number, JID, 1, offset, path, data, salt)


def log(*entries: bytes, generation: int = 1, salt: int = SALT) -> bytes:
    return glog.encode_header(generation, salt) + b"".join(entries)


def crafted(
    number: int, body: bytes, salt: int = SALT, body_bytes: int | None = None, after_sync: bool = False
) -> bytes:
    """An entry with valid checks over any body: what an attacker who knows the salt writes."""
    n = len(body) if body_bytes is None else body_bytes
    head = struct.pack("<IIQI", glog.ENTRY_MAGIC, n, number, glog.ENTRY_AFTER_SYNC if after_sync else 0)
    head += struct.pack("<I", xxhash.xxh64_intdigest(head, salt) & 0xFFFFFFFF)
    digest = xxhash.xxh64(head, seed=salt)
    digest.update(body)
    raw = head + struct.pack("<Q", digest.intdigest()) + body
    return raw + bytes(-len(raw) % glog.ENTRY_ALIGN_BYTES)


def body(path: bytes, offset: int = OFFSET, data: bytes = b"x", path_bytes: int | None = None) -> bytes:
    n = len(path) if path_bytes is None else path_bytes
    return JID + struct.pack("<QQH", 1, offset, n) + path + data


def unpadded(raw_entry: bytes) -> int:
    """An encoded entry's length without its alignment zeros."""
    return glog.ENTRY_HEADER_SIZE_BYTES + int(struct.unpack_from("<I", raw_entry, 4)[0])


# --- round trip ------------------------------------------------------------------------------


def test_round_trip_keeps_every_field_in_order() -> None:
    datas = [b"", b"a", b"\x00" * 7, os.urandom(8), os.urandom(1000)]
    raw = log(*(glog.encode_entry(i + 1, JID, 7 + i, OFFSET + 8 * i, f"s/{i}", d, SALT) for i, d in enumerate(datas)))
    got = glog.scan(raw)
    assert got.header == glog.LogHeader(1, SALT)
    assert not got.torn and got.end == len(raw)
    assert [(e.number, e.journal_id, e.base_seq, e.offset, e.path, e.data) for e in got.entries] == [
        (i + 1, JID, 7 + i, OFFSET + 8 * i, f"s/{i}", d) for i, d in enumerate(datas)
    ]
    assert all(e.at % glog.ENTRY_ALIGN_BYTES == 0 for e in got.entries)


def test_empty_log_and_zero_tail_are_clean() -> None:
    assert glog.scan(log()) == glog.Scan(glog.LogHeader(1, SALT), [], glog.LOG_HEADER_SIZE_BYTES, False)
    raw = log(entry(1), entry(2))
    got = glog.scan(raw + bytes(4096))  # space a file system extended, never written
    assert [e.number for e in got.entries] == [1, 2] and not got.torn and got.end == len(raw)


def test_log_names_round_trip_and_refuse_others() -> None:
    assert glog.parse_log_name(glog.log_name(42)) == 42
    for bad in ("log-1.jgl", "log-0000000000000000000x.jgl", "log-00000000000000000001.jgl.tmp", "LOCK", "log-.jgl"):
        assert glog.parse_log_name(bad) is None


# --- torn tail versus corruption -------------------------------------------------------------


def test_every_cut_of_the_last_entry_is_a_torn_tail_that_keeps_the_earlier_ones() -> None:
    first = log(entry(1), entry(2, b"y" * 50))
    last = entry(3, b"z" * 37)
    full = first + last
    assert len(glog.scan(full).entries) == 3
    data_end = len(first) + unpadded(last)
    for cut in range(len(first) + 1, len(full)):
        got = glog.scan(full[:cut])
        if got.torn:
            assert [e.number for e in got.entries] == [1, 2], cut
            assert got.end == len(first), cut
        else:  # only its padding zeros are missing: the entry itself is whole
            assert cut >= data_end and len(got.entries) == 3, cut
    # every cut inside the entry's own bytes is torn
    for cut in range(len(first) + 1, len(first) + glog.ENTRY_HEADER_SIZE_BYTES + 60):
        assert glog.scan(full[:cut]).torn, cut
    assert not glog.scan(first).torn


def test_a_flipped_byte_in_an_early_entry_followed_by_valid_ones_is_corruption() -> None:
    # Entries 3 and 4 were written after an fdatasync that covered entry 2 (ENTRY_AFTER_SYNC):
    # entry 2's bytes were synced, so damage to them is corruption, never a torn tail.
    entries = [
        glog.encode_entry(i, JID, 1, OFFSET, "a/b", bytes([i]) * 40, SALT, after_sync=i >= 3) for i in range(1, 5)
    ]
    raw = bytearray(log(*entries))
    start = glog.LOG_HEADER_SIZE_BYTES + len(entries[0])
    for at in range(start, start + len(entries[1])):
        if at - start >= unpadded(entries[1]):
            break  # the padding is not covered by the checksum
        damaged = bytearray(raw)
        damaged[at] ^= 0x40
        with pytest.raises(glog.LogError) as exc:
            glog.scan(bytes(damaged))
        assert exc.value.offset == start, at


def test_a_damaged_entry_followed_only_by_unmarked_ones_is_a_torn_tail() -> None:
    # The same damage with no later entry marked ENTRY_AFTER_SYNC: nothing proves entry 2 was
    # synced (a power loss may drop an unsynced page and keep a later one): a torn tail, kept aside.
    entries = [entry(i, bytes([i]) * 40) for i in range(1, 5)]
    raw = bytearray(log(*entries))
    start = glog.LOG_HEADER_SIZE_BYTES + len(entries[0])
    raw[start + glog.ENTRY_HEADER_SIZE_BYTES + 3] ^= 0x40
    got = glog.scan(bytes(raw))
    assert got.torn and got.end == start and [e.number for e in got.entries] == [1]


def test_a_damaged_last_entry_is_a_torn_tail() -> None:
    raw = bytearray(log(entry(1), entry(2)))
    raw[-12] ^= 0xFF
    got = glog.scan(bytes(raw))
    assert got.torn and [e.number for e in got.entries] == [1]


def test_an_unsynced_entry_lost_before_a_kept_unsynced_one_is_a_torn_tail() -> None:
    # Entry 1 was synced; 2 and 3 were written after it at flush level (no fdatasync), then the
    # power failed: 3's page reached the disk, 2's did not (it reads back as zeros).
    e1, e2, e3 = entry(1), entry(2, b"b" * 64), entry(3, b"c" * 64)
    raw = log(e1) + bytes(len(e2)) + e3
    got = glog.scan(raw)
    assert got.torn and [e.number for e in got.entries] == [1]


def test_numbers_out_of_order_are_corruption() -> None:
    with pytest.raises(glog.LogError, match="entry number 2 where 1"):
        glog.scan(log(entry(2)))
    with pytest.raises(glog.LogError, match="entry number 3 where 2"):
        glog.scan(log(entry(1), entry(3)))
    with pytest.raises(glog.LogError, match="entry number 1 where 2"):
        glog.scan(log(entry(1), entry(1)))


def test_an_entry_of_another_log_salt_is_not_this_logs() -> None:
    # A recycled block holding another log's entry verifies under that log's salt only.
    got = glog.scan(log(entry(1), entry(2, salt=SALT + 1)))
    assert got.torn and [e.number for e in got.entries] == [1]


# --- the header --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda h: b"NOTAGRP\x00" + h[8:], id="magic"),
        pytest.param(lambda h: h[:8] + struct.pack("<I", 2) + h[12:], id="version"),
        pytest.param(lambda h: h[:32] + bytes(8), id="checksum"),
        pytest.param(lambda h: h[:20], id="short"),
    ],
)
def test_a_bad_header_is_refused(change: object) -> None:
    header = glog.encode_header(1, SALT)
    assert callable(change)
    with pytest.raises(glog.LogError) as exc:
        glog.scan(change(header) + entry(1))
    assert exc.value.offset == 0


@pytest.mark.parametrize("field, value", [("magic", b"NOTAGRP\x00"), ("version", 2)])
def test_a_header_with_a_valid_checksum_and_a_wrong_magic_or_version_is_refused(field: str, value: object) -> None:
    magic, version = (value, 1) if field == "magic" else (glog.LOG_MAGIC, value)
    head = struct.pack("<8sIIQQ", magic, version, 0, 1, SALT)
    head += struct.pack("<Q", xxhash.xxh64_intdigest(head))
    with pytest.raises(glog.LogError, match="magic" if field == "magic" else "version 2"):
        glog.decode_header(head)


# --- crafted entries -------------------------------------------------------------------------


def test_a_body_length_of_2_to_the_32_minus_1_is_never_trusted() -> None:
    # The length field claims 4 GiB; no allocation or read follows it: the entry does not
    # verify (the bytes are not there), so it is a torn tail.
    raw = log(entry(1)) + crafted(2, body(b"a/b"), body_bytes=2**32 - 1)
    got = glog.scan(raw)
    assert got.torn and [e.number for e in got.entries] == [1]


def test_a_path_length_past_the_body_is_corruption() -> None:
    raw = log(crafted(1, body(b"a", path_bytes=0xFFFF)))
    with pytest.raises(glog.LogError, match="path runs past its body"):
        glog.scan(raw)


@pytest.mark.parametrize(
    "path",
    [b"..", b"a/../../etc", b"/etc/x", b"a//b", b"a/", b"./a", b"a/.", b"a\x00b", b"a\\..\\b", b""],
)
def test_a_verified_entry_naming_a_path_out_of_the_root_is_refused(path: bytes) -> None:
    with pytest.raises(glog.LogError, match="not a journal path"):
        glog.scan(log(crafted(1, body(path))))
    with pytest.raises(ValueError):
        glog.check_path(path.decode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError):
        glog.encode_entry(1, JID, 1, OFFSET, path.decode("utf-8", "surrogateescape"), b"x", SALT)


def test_a_path_over_its_byte_limit_is_refused() -> None:
    with pytest.raises(ValueError):
        glog.check_path("a/" * (glog.PATH_BYTES_MAX // 2) + "b")


@pytest.mark.parametrize("offset", [0, 1, fmt.SEGMENT_HEADER_SIZE_BYTES - 1, fmt.SEGMENT_SIZE_BYTES_MAX, 2**64 - 1])
def test_an_offset_outside_a_segments_frames_is_refused(offset: int) -> None:
    with pytest.raises(glog.LogError, match="outside a segment"):
        glog.scan(log(crafted(1, body(b"a", offset=offset))))


def test_the_first_frame_offset_is_accepted() -> None:
    assert glog.scan(log(crafted(1, body(b"a", offset=OFFSET)))).entries[0].offset == OFFSET


def test_an_entry_over_the_body_limit_is_refused_at_encoding() -> None:
    big = memoryview(bytearray(glog.ENTRY_BODY_BYTES_MAX))
    with pytest.raises(ValueError, match="over"):
        glog.entry_pieces(1, JID, 1, OFFSET, b"a", big, SALT)


def test_a_log_over_its_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(glog, "LOG_FILE_BYTES_MAX", 1024)
    with pytest.raises(glog.LogError, match="more than a log file ever holds"):
        glog.scan(log(entry(1, b"x" * 1100)))


def test_relative_path_refuses_what_is_not_under_the_root(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path / "root")
    assert glog.relative_path(root, os.path.join(root, "a", "b")) == "a/b"
    for outside in (root, str(tmp_path), str(tmp_path / "rootx" / "a"), "/"):
        with pytest.raises(ValueError):
            glog.relative_path(root, outside)


class _Counted:
    """xxhash as group_log uses it, counting the bytes hashed."""

    def __init__(self) -> None:
        self.hashed = 0

    def xxh64(self, data: bytes | memoryview = b"", seed: int = 0) -> _CountedDigest:
        return _CountedDigest(self, data, seed)

    def xxh64_intdigest(self, data: bytes | memoryview, seed: int = 0) -> int:
        self.hashed += len(data)
        return xxhash.xxh64_intdigest(data, seed=seed)


class _CountedDigest:
    def __init__(self, owner: _Counted, data: bytes | memoryview, seed: int) -> None:
        self._owner = owner
        self._digest = xxhash.xxh64(seed=seed)
        self.update(data)

    def update(self, data: bytes | memoryview) -> None:
        self._owner.hashed += len(data)
        self._digest.update(data)

    def intdigest(self) -> int:
        return self._digest.intdigest()


def test_the_scan_of_a_torn_tail_hashes_each_byte_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    tail_bytes = 256 * 1024
    tail = bytearray(tail_bytes)
    for at in range(0, tail_bytes - glog.ENTRY_HEADER_SIZE_BYTES - 64, glog.ENTRY_ALIGN_BYTES):
        # a header whose body would run to the end of the data
        body_bytes = tail_bytes - at - glog.ENTRY_HEADER_SIZE_BYTES
        struct.pack_into("<IIQI", tail, at, glog.ENTRY_MAGIC, body_bytes, 2**40, glog.ENTRY_AFTER_SYNC)
    raw = log(entry(1)) + bytes(tail)
    counted = _Counted()
    monkeypatch.setattr(glog, "xxhash", counted)
    got = glog.scan(raw)
    assert got.torn and [e.number for e in got.entries] == [1]
    assert counted.hashed <= 4 * len(raw), f"{counted.hashed} bytes hashed for a log of {len(raw)}"
