"""zstd's tables of a dictionary are made once per process, not once per open handle.

A DDict weighs a few times the dictionary's bytes, a CDict more, and each (de)compression
context ~100 KiB. Made per handle, 1,000 journals open with one 32 KiB dictionary took ~100 KiB a
handle read-only and ~250 KiB writable (against ~5 KiB without a dictionary); with 1 MiB
dictionaries, gigabytes. Now every handle of the process shares the tables of a dictionary (by
digest) and each thread keeps a few contexts, each for one dictionary."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import zstandard

import journal
from journal.engine import dictionary as dic
from journal.engine import native
from journal.engine.dictionary import Dictionary
from tests.dictionary_samples import event, train


@pytest.fixture(scope="module")
def trained() -> bytes:
    return train()


HANDLES = 40


class Counted:
    """How many zstd dictionary objects, decompressors and held CDicts are made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dicts = self.dctx = self.held = 0
        real_dict, real_dctx = zstandard.ZstdCompressionDict, zstandard.ZstdDecompressor

        def make_dict(*a: Any, **k: Any) -> zstandard.ZstdCompressionDict:
            self.dicts += 1
            return real_dict(*a, **k)

        def make_dctx(*a: Any, **k: Any) -> zstandard.ZstdDecompressor:
            if k.get("dict_data") is not None:
                self.dctx += 1
            return real_dctx(*a, **k)

        monkeypatch.setattr(zstandard, "ZstdCompressionDict", make_dict)
        monkeypatch.setattr(zstandard, "ZstdDecompressor", make_dctx)
        real_held = native.held_make_cdict
        if real_held is not None:

            def make_held(data: bytes) -> object:
                self.held += 1
                assert real_held is not None
                return real_held(data)

            monkeypatch.setattr(native, "held_make_cdict", make_held)


def journals(tmp_path: Path, trained: bytes) -> list[Path]:
    out = []
    for i in range(HANDLES):
        p = tmp_path / f"j{i}"
        with journal.open(p, create=True, dictionary=Dictionary(1, trained)) as j:
            j.append(event(i))
        out.append(p)
    return out


def test_read_only_handles_share_one_ddict(tmp_path: Path, trained: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = journals(tmp_path, trained)
    made = Counted(monkeypatch)
    handles = [journal.open(p, readonly=True) for p in paths]
    try:
        for i, h in enumerate(handles):
            rec = h.get(1)
            assert rec is not None and rec.event == event(i)
    finally:
        for h in handles:
            h.close()
    assert made.dicts <= 2, made.dicts  # at most one made here (and kept across the handles)
    assert made.dctx <= 3, made.dctx  # this thread's decompressor, and the DDict's check


def test_writable_handles_share_their_cdicts(tmp_path: Path, trained: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = journals(tmp_path, trained)
    made = Counted(monkeypatch)
    handles = [journal.open(p, dictionary=Dictionary(1, trained)) for p in paths]
    try:
        for i, h in enumerate(handles):
            h.append(event(i + 100))
            h.append({"big": " ".join(json.dumps(event(k)) for k in range(200))})  # past the held limit
            rec = h.get(2)
            assert rec is not None and rec.event == event(i + 100)
    finally:
        for h in handles:
            h.close()
    assert made.dicts <= 4, made.dicts
    assert made.held <= 1, made.held


def test_a_thread_keeps_a_bounded_number_of_contexts(
    tmp_path: Path, trained: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread reading journals of many different dictionaries keeps a few contexts, not
    one per dictionary it ever read."""
    n = dic.CONTEXTS_PER_THREAD_MAX + 5
    paths = []
    for i in range(n):
        data = trained[:-8] + i.to_bytes(8, "little")  # a different dictionary each (same tables)
        p = tmp_path / f"d{i}"
        with journal.open(p, create=True, dictionary=Dictionary(1, data)) as j:
            j.append(event(i))
        paths.append(p)
    seen: list[int] = []

    def run() -> None:
        for i, p in enumerate(paths):
            with journal.open(p, readonly=True) as r:
                rec = r.get(1)
                assert rec is not None and rec.event == event(i)
        seen.append(len(getattr(dic._contexts, "by_digest", {})))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen and seen[0] <= dic.CONTEXTS_PER_THREAD_MAX
