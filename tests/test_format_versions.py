"""Journals written by every earlier format version open and read with this one (issue 33).

tests/fixtures/format_v<N>/ holds a journal and a session written by the engine's own code of
format version N (the last commit of that version in this repository's history; the manifest
names it), made by scripts/make_format_fixtures: JSON, bytes, keyed and synthetic records, block
frames from version 2 on, sealed segments and a live one, a torn tail, and a session its layer
repaired. Each fixture is copied to a temporary directory before it is opened, and the manifest
written by the old code's reader says what every read must give. A new format version adds its
fixture by running the script; every ``format_v*`` folder is tested.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import xxhash

import journal
import journal.session
from journal import cli
from journal.engine import format as fmt
from journal.engine.salvage import salvage
from journal.engine.verify import CLEAN, TORN, verify

FIXTURES = Path(__file__).parent / "fixtures"
VERSIONS = sorted(int(p.name.removeprefix("format_v")) for p in FIXTURES.glob("format_v*") if p.is_dir())
SMALL_SEGMENT_BYTES = 4096  # the fixtures' size: a few appends roll a segment


def test_every_earlier_version_this_one_reads_has_a_fixture() -> None:
    # The current version's own fixture is made once a newer one lands (scripts/make_format_fixtures).
    assert set(range(fmt.FORMAT_VERSION_MIN, fmt.FORMAT_VERSION)) <= set(VERSIONS)
    assert VERSIONS[-1] <= fmt.FORMAT_VERSION


def _manifest(version: int) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((FIXTURES / f"format_v{version}" / "manifest.json").read_text())
    assert out["format_version"] == version
    return out


def _copy(version: int, tmp_path: Path) -> Path:
    dest = tmp_path / f"format_v{version}"
    shutil.copytree(FIXTURES / f"format_v{version}", dest)
    return dest


def _record(rec: journal.Record) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": rec.seq, "key": rec.key, "synthetic": bool(rec.synthetic)}
    if rec.is_bytes:
        out["bytes_hex"] = bytes(rec.event).hex()
    else:
        out["event"] = rec.event
    return out


def _read(path: Path) -> list[dict[str, Any]]:
    with journal.open(path, readonly=True) as j:
        return [_record(r) for r in j.read()]


def _segments(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.endswith(fmt.SEGMENT_SUFFIX))


def _versions(path: Path) -> list[int]:
    return [fmt.decode_segment_header(p.read_bytes()).version for p in _segments(path)]


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fixture_is_of_its_version(version: int) -> None:
    # What the test below relies on: every segment says its version, and the journal holds the
    # frames that version added (block frames from 2 on).
    path = FIXTURES / f"format_v{version}" / "journal"
    assert _versions(path) == [version] * len(_versions(path)) and len(_versions(path)) >= 2
    frames: list[fmt.Frame] = []
    for seg in _segments(path):
        data = seg.read_bytes()
        header = fmt.decode_segment_header(data)
        frames += fmt.record_frames(fmt.scan(data, fmt.SEGMENT_HEADER_SIZE_BYTES, header.salt, header.base_seq).frames)
    assert any(f.records > 1 for f in frames) == (version >= fmt.BLOCK_FORMAT_VERSION_MIN)
    assert any(f.flags & fmt.FLAG_AFTER_SYNC for f in frames) == (version >= fmt.AFTER_SYNC_FORMAT_VERSION_MIN)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_read_only_open_reads_every_record_and_changes_no_byte(tmp_path: Path, version: int) -> None:
    manifest = _manifest(version)["journal"]
    root = _copy(version, tmp_path)
    path = root / "journal"
    before = _hashes(root)
    with journal.open(path, readonly=True) as j:
        assert j.last_seq == manifest["last_seq"]
        assert [_record(r) for r in j.read()] == manifest["records"]
        assert _record(j.get(manifest["records"][0]["seq"])) == manifest["records"][0]  # type: ignore[arg-type]
    report = verify(str(path))
    assert report.verdict == TORN, report.summary()  # the fixture's torn tail, which a writer's open cuts
    assert report.last_seq == manifest["last_seq"]
    assert cli.main(["verify", str(path), "--json"]) == 7  # TORN: only a torn tail after the last durable point
    assert _hashes(root) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_a_writer_continues_the_old_live_segment_then_rolls_into_this_version(tmp_path: Path, version: int) -> None:
    manifest = _manifest(version)["journal"]
    path = _copy(version, tmp_path) / "journal"
    records = manifest["records"]
    last = manifest["last_seq"]
    live = _segments(path)[-1].name
    with journal.Journal.open(path, segment_size_bytes=SMALL_SEGMENT_BYTES) as j:
        assert j.last_seq == last
        assert [_record(r) for r in j.read()] == records
        # An old record's key is still known: the same event again is answered as a duplicate. (The
        # last keyed one: a writer loads the keys of the live segment and of the one before it.)
        keyed = [r for r in records if r["key"] is not None and "event" in r][-1]
        again = j.append(keyed["event"], idempotency_key=keyed["key"], durability="sync")
        assert isinstance(again, journal.Committed) and again.duplicate and again.seq == keyed["seq"]
        new = j.append({"type": "after the upgrade"}, durability="sync")
        assert isinstance(new, journal.Committed) and new.seq == last + 1
    assert verify(str(path)).verdict == CLEAN  # the writer's open cut the torn tail
    assert _segments(path)[-1].name == live and _versions(path)[-1] == version  # appended in the old live segment

    more = [{"type": "together", "i": i, "text": hashlib.sha256(bytes([i])).hexdigest()} for i in range(40)]
    with journal.Journal.open(path, segment_size_bytes=SMALL_SEGMENT_BYTES) as j:
        j.append_many(more[:20], durability="sync")
        j.seal()
        j.append_many(more[20:], durability="sync", idempotency_keys=[f"new-{i}" for i in range(20)])
        j.append(b"bytes after the upgrade", durability="sync")
    versions = _versions(path)
    assert versions[-1] == fmt.FORMAT_VERSION
    assert versions[: len(manifest["segments"])] == [version] * len(manifest["segments"])
    got = _read(path)
    assert got[: len(records)] == records
    assert [r.get("event") for r in got[len(records) :]] == [{"type": "after the upgrade"}, *more, None]
    assert got[-1]["bytes_hex"] == b"bytes after the upgrade".hex() and got[-1]["seq"] == last + 42
    assert verify(str(path)).verdict == CLEAN


@pytest.mark.parametrize("version", VERSIONS)
def test_copies_and_salvage_of_an_old_journal_read_the_same(tmp_path: Path, version: int) -> None:
    manifest = _manifest(version)["journal"]
    root = _copy(version, tmp_path)
    path = root / "journal"
    before = _hashes(root)

    assert cli.main(["copy", str(path), str(tmp_path / "cli-copy"), "--json"]) == 0
    assert _read(tmp_path / "cli-copy") == manifest["records"]

    store = journal.store(root)
    store.copy("journal", "store-copy")
    assert _read(root / "store-copy") == manifest["records"]

    (tmp_path / "prefix").mkdir()
    with journal.Journal.open(path, readonly=True) as j:
        j.copy_prefix(tmp_path / "prefix", manifest["last_seq"], link=False)
    assert _read(tmp_path / "prefix") == manifest["records"]

    report = salvage(str(path), str(tmp_path / "salvaged"))
    assert report.last_seq == manifest["last_seq"] and report.placeholders == 0
    assert _read(tmp_path / "salvaged") == manifest["records"]
    for copy in ("cli-copy", "prefix", "salvaged"):
        assert verify(str(tmp_path / copy)).verdict == CLEAN
    assert _hashes(root / "journal") == {
        k.removeprefix("journal/"): v for k, v in before.items() if k.startswith("journal/")
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_a_session_written_by_an_old_version_opens_and_goes_on(tmp_path: Path, version: int) -> None:
    manifest = _manifest(version)["session"]
    path = _copy(version, tmp_path) / "session"
    assert verify(str(path)).verdict == CLEAN
    with journal.session.open(path, readonly=True) as s:
        assert s.session_id == manifest["session_id"]
        assert s.journal.last_seq == manifest["last_seq"]
        assert [_record(r) for r in s.journal.read()] == manifest["records"]
    with journal.session.open(path, session_id=manifest["session_id"], segment_size_bytes=SMALL_SEGMENT_BYTES) as s:
        got = s.append("user.message", {"text": "and now?"})
        assert got.committed
    with journal.session.open(path, readonly=True) as s:
        events = list(s.read())
        assert events[-1].type == "user.message" and events[-1].data == {"text": "and now?"}
        assert [_record(r) for r in s.journal.read()][: len(manifest["records"])] == manifest["records"]


def _newer(seg: Path) -> None:
    """Rewrites a segment header's version to one this code does not know, its checksum to match."""
    data = bytearray(seg.read_bytes())
    struct.pack_into("<H", data, fmt.SEGMENT_VERSION_OFFSET, fmt.FORMAT_VERSION + 1)
    body = fmt.SEGMENT_HEADER_SIZE_BYTES - 8
    struct.pack_into("<Q", data, body, xxhash.xxh64_intdigest(bytes(data[:body]), seed=0))
    seg.write_bytes(bytes(data))


@pytest.mark.parametrize("readonly", [True, False])
def test_a_journal_of_a_newer_version_is_refused(tmp_path: Path, readonly: bool) -> None:
    path = _copy(VERSIONS[-1], tmp_path) / "journal"
    for seg in _segments(path):
        _newer(seg)
    with pytest.raises(journal.NewerFormatError):
        journal.open(path, readonly=readonly).close()
    assert verify(str(path)).verdict == "newer-format"
