"""The artifact store: content-addressed, compressed, verified on every read, collected when unreferenced."""

from __future__ import annotations

import hashlib
import os
import pathlib

import pytest
import zstandard

from journal import session
from journal.session import artifacts as art
from journal.session.artifacts import ArtifactStore


def blob_path(store: ArtifactStore, ref: str) -> pathlib.Path:
    digest = art.digest_of(ref)
    return pathlib.Path(store.path) / digest[:2] / (digest + ".zst")


def test_put_get_roundtrip_dedupes_and_compresses(tmp_path: pathlib.Path) -> None:
    store = ArtifactStore(tmp_path / "a")
    data = b"PASS test_auth\n" * 10_000
    ref = store.put(data)
    assert ref == "artifact://" + hashlib.sha256(data).hexdigest()
    assert store.put(data) == ref and len(store.list()) == 1
    assert store.get(ref) == data
    assert blob_path(store, ref).stat().st_size < len(data) // 10
    assert os.stat(blob_path(store, ref)).st_mode & 0o777 == 0o600
    assert not os.listdir(tmp_path / "a" / "tmp")


def test_a_corrupted_artifact_is_refused(tmp_path: pathlib.Path) -> None:
    store = ArtifactStore(tmp_path / "a")
    ref = store.put(b"the full stdout of the test run" * 100)
    path = blob_path(store, ref)
    packed = bytearray(path.read_bytes())
    packed[len(packed) // 2] ^= 0xFF
    path.write_bytes(bytes(packed))
    with pytest.raises(art.ArtifactCorruptError):
        store.get(ref)
    # A well-formed blob with other content under the name: decompresses, fails the hash.
    path.write_bytes(zstandard.ZstdCompressor().compress(b"something else"))
    with pytest.raises(art.ArtifactCorruptError, match="does not match its hash"):
        store.get(ref)
    assert store.missing([ref], verify=True) == [ref]
    path.unlink()
    with pytest.raises(art.ArtifactMissingError):
        store.get(ref)
    with pytest.raises(ValueError):
        store.get("artifact://../../etc/passwd")


def test_large_outputs_move_out_of_the_event_with_a_bounded_preview(tmp_path: pathlib.Path) -> None:
    store = ArtifactStore(tmp_path / "a")
    small = store.offload("ok")
    assert small == {"output": "ok"}
    big = "line\n" * 100_000
    fields = store.offload(big, preview_bytes=100)
    assert fields["truncated"] and fields["outputBytes"] == len(big) and len(fields["output"]) == 100
    assert store.get(fields["outputRef"]).decode() == big


def test_gc_keeps_what_events_reference_and_drops_the_rest(tmp_path: pathlib.Path) -> None:
    store = ArtifactStore(tmp_path / "a")
    kept = store.put(b"kept")
    dropped = store.put(b"dropped")
    with session.open(tmp_path / "s", create=True) as s:
        s.append("tool.requested", {"tool": "bash"}, tool_call_id="c1")
        s.append("tool.result", {"status": "ok", **store.offload("z" * 10_000, inline_bytes_max=10)}, tool_call_id="c1")
        s.append("user.message", {"text": f"see {kept}"})
        refs = art.references([s.journal])
    assert kept in refs and len(refs) == 2
    young = store.put(b"just written, not referenced yet")
    assert store.gc(refs, grace_s=3600) == []  # everything is younger than the grace period
    assert sorted(store.gc(refs, grace_s=0)) == sorted([dropped, young])
    assert {i.ref for i in store.list()} == refs
    assert store.get(kept) == b"kept"
