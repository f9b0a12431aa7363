"""A store keeps a trained dictionary only where it pays for its own bytes, measured the way the
store wrote its records: records written together share block frames (compressed as one, where a
dictionary gains little), records framed alone are compressed one by one
(journal/session/dictionaries.py, ``train_store_dictionary``; docs/SESSIONS.md)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.engine import encoding
from journal.engine import format as fmt
from journal.session import dictionaries as D
from journal.session.store import SessionStore

SIZE = 1024  # a small dictionary: the minimum sample is then TRAIN_SAMPLE_BYTES_MIN
WORDS = ["pytest", "failed", "passed", "assert", "traceback", "module", "import", "fixture", "error", "line"]


def _text(rng: random.Random) -> str:
    return "run the tool and report: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 90)))


def _store_in_blocks(root: Path, sessions: int, records: int, seed: int = 7) -> SessionStore:
    """Sessions whose records were written together (buffered: block frames), as an import or
    a bulk write stores them."""
    st = SessionStore(root)
    rng = random.Random(seed)
    for _ in range(sessions):
        s = st.create(workspace={"path": "/repo"})
        path = st.journal_path(s.session_id)
        s.close()
        with journal.open(path) as j:
            for i in range(records):
                j.append({"type": "user.message", "data": {"text": _text(rng), "n": i}}, durability="buffered")
            j.sync()
    return st


def _write_alone(st: SessionStore, sessions: int, records: int, rng: random.Random) -> list[str]:
    """Sessions written one durable append at a time: each record a frame of its own."""
    ids = []
    for _ in range(sessions):
        s = st.create(workspace={"path": "/repo"})
        try:
            for i in range(records):
                s.append("user.message", {"text": _text(rng), "n": i})
        finally:
            s.close()
        ids.append(s.session_id)
    return ids


def _bytes_of(st: SessionStore, ids: list[str]) -> int:
    """The bytes of these sessions' journal files, a hard-linked dictionary counted once."""
    seen: dict[tuple[int, int], int] = {}
    for sid in ids:
        for d, _, names in os.walk(st.journal_path(sid)):
            for n in names:
                info = os.lstat(os.path.join(d, n))
                seen[(info.st_dev, info.st_ino)] = info.st_size
    return sum(seen.values())


def _dictionary_files(st: SessionStore) -> list[str]:
    d = os.path.join(st.root, D.DICTIONARIES_DIR)
    return sorted(n for n in os.listdir(d) if n.endswith(".zdict")) if os.path.isdir(d) else []


def test_the_measure_compresses_as_the_engine_stores() -> None:
    # The session layer cannot import the engine: its copies of the engine's figures are held here.
    assert D.MEASURE_ZSTD_LEVEL == encoding.ZSTD_LEVEL
    assert D.MEASURE_BLOCK_ZSTD_LEVEL == encoding.BLOCK_ZSTD_LEVEL
    assert D.MEASURE_COMPRESS_MIN_BYTES == encoding.COMPRESS_MIN_BYTES
    assert D.MEASURE_DICT_COMPRESS_MIN_BYTES == encoding.DICT_COMPRESS_MIN_BYTES
    assert D.MEASURE_FRAME_BYTES_MAX == fmt.BLOCK_BYTES_LIMIT
    assert D.MEASURE_BLOCK_RECORDS_MAX == fmt.BLOCK_RECORDS_MAX


def test_a_small_store_written_in_blocks_declines_a_dictionary_that_cannot_pay(tmp_path: Path) -> None:
    st = _store_in_blocks(tmp_path / "store", 3, 120)
    rep = D.train_store_dictionary(st, size_bytes=SIZE)
    assert not rep.stored and rep.dictionary_id is None
    assert rep.held_out_block_frames >= 1 and rep.held_out_records > 1  # whole blocks, measured whole
    assert rep.net_bytes <= 0 or rep.savings < D.DICTIONARY_SAVINGS_MIN
    assert rep.reason.startswith("it does not pay") and "blocks" in rep.reason
    assert rep.sizes_tried == (1024, 512, 256)  # smaller sizes tried too, down to the minimum
    assert "no dictionary stored: it does not pay" in rep.summary()
    assert _dictionary_files(st) == [] and st.current_dictionary() is None
    # The ground truth behind the decline: a dictionary trained on the store's records, written
    # with into sessions like these, does not save its own file's bytes.
    sample = D._sample(st, D.SAMPLE_BYTES_MAX_DEFAULT, D.SAMPLE_RECORDS_PER_SESSION_MAX, False, None)
    data = D._train(sample.records, SIZE)
    assert data is not None
    events = [{"type": "user.message", "data": {"text": _text(random.Random(9)), "n": i}} for i in range(120)]
    sizes = []
    for name, dictionary in (("plain", None), ("dict", journal.Dictionary(1, data))):
        options: dict[str, Any] = {} if dictionary is None else {"dictionary": dictionary}
        with journal.open(str(tmp_path / name), create=True, **options) as j:
            for e in events:
                j.append(e, durability="buffered")
            j.sync()
        sizes.append(sum(f.stat().st_size for f in (tmp_path / name).rglob("*") if f.is_file()))
    assert sizes[1] >= sizes[0] - 64, sizes  # not more than noise saved; the dictionary file not yet paid


def test_a_store_of_records_framed_alone_keeps_a_dictionary_that_pays(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    _write_alone(st, 3, 120, random.Random(7))
    rep = D.train_store_dictionary(st, size_bytes=SIZE)
    assert rep.stored and rep.dictionary_id == 1 and rep.held_out_block_frames == 0
    assert rep.saved_bytes > rep.dictionary_file_bytes > rep.size_bytes and rep.net_bytes > 0
    assert rep.sizes_tried == (SIZE,) and "more than its own file's" in rep.reason
    stats = D.list_dictionaries(st)[0].stats
    assert stats is not None and stats["reason"] == rep.reason and stats["netBytes"] == rep.net_bytes
    # It still pays: as many sessions again, written with it, take fewer bytes with its file (a
    # hard link in each journal directory, counted once) than the same in a store without one.
    with_ids = _write_alone(st, 3, 120, random.Random(8))
    twin = SessionStore(tmp_path / "twin")
    twin_ids = _write_alone(twin, 3, 120, random.Random(8))
    assert twin.current_dictionary() is None
    with_bytes, twin_bytes = _bytes_of(st, with_ids), _bytes_of(twin, twin_ids)
    assert with_bytes < twin_bytes, (with_bytes, twin_bytes)


def test_a_smaller_size_is_kept_where_the_one_asked_for_does_not_pay(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    rng = random.Random(11)
    for _ in range(3):  # few long records: what a dictionary saves each is its fixed share
        s = st.create()
        for _ in range(22):
            s.append("tool.result", {"tool": "shell", "status": "ok", "output": rng.randbytes(2000).hex()})
        s.close()
    rep = D.train_store_dictionary(st, size_bytes=16384)
    # The size asked for does not pay; a smaller one does (which one can move with the order the
    # sessions' ids give them, two made in one millisecond sorting by their random part).
    assert rep.stored and rep.sizes_tried[0] == 16384 and len(rep.sizes_tried) >= 2
    assert rep.size_bytes <= rep.sizes_tried[-1] < 16384
    assert rep.saved_bytes > rep.dictionary_file_bytes
    got = st.current_dictionary()
    assert got is not None and len(got.data) == rep.size_bytes


def test_sizes_tried_halve_down_to_the_minimum() -> None:
    assert D._sizes(16384) == [16384, 8192, 4096, 2048][: D.SIZE_TRIES_MAX]
    assert D._sizes(512) == [512, 256]
    assert D._sizes(D.DICTIONARY_SIZE_BYTES_DEFAULT)[0] == D.DICTIONARY_SIZE_BYTES_DEFAULT


def test_held_out_frames_are_whole_blocks_and_left_out_of_the_training(tmp_path: Path) -> None:
    st = _store_in_blocks(tmp_path / "store", 3, 400)
    sample = D._sample(st, D.SAMPLE_BYTES_MAX_DEFAULT, D.SAMPLE_RECORDS_PER_SESSION_MAX, False, None)
    train, frames = D._held_out(st, sample, D.SAMPLE_BYTES_MAX_DEFAULT // D.HELD_OUT_EVERY)
    blocks = [f for f in frames if len(f) > 1]
    assert blocks and all(json.loads(f[0])["data"]["n"] + len(f) - 1 == json.loads(f[-1])["data"]["n"] for f in blocks)
    held = {r for f in frames for r in f}
    assert train and not held & set(train)
    assert 0 < sum(len(r) for r in held) < sum(len(r) for r in sample.records)


def test_the_command_says_why_the_store_declined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from journal import cli

    st = _store_in_blocks(tmp_path / "store", 3, 120)
    assert cli.main(["dictionary", "train", st.root, "--size-bytes", str(SIZE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("no dictionary stored: it does not pay") and "blocks" in out
    assert cli.main(["dictionary", "train", st.root, "--size-bytes", str(SIZE), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert not rep["stored"] and rep["reason"].startswith("it does not pay") and rep["heldOutBlockFrames"] >= 1


@pytest.mark.parametrize("room", [40_000, 150_000, 400_000])
def test_held_out_frames_never_go_over_their_budget(tmp_path: Path, room: int) -> None:
    st = _store_in_blocks(tmp_path / "store", 6, 400)  # blocks of ~128 KiB
    sid = sorted(st._ids("sessions"))[0]
    got, where = D._session_frames(st, sid, room, room, lambda _: True)
    assert D._size(got) <= room and len(where) == len(got)
    assert all(len(f) > 1 for f in got[1:])  # whole blocks (the session's first record is framed alone)
    if room >= 140_000:
        assert any(len(f) > 1 for f in got)
    # With enough sessions whole ones are held out, within the budget, none of theirs trained on.
    sample = D._sample(st, 600_000, D.SAMPLE_RECORDS_PER_SESSION_MAX, False, None)
    assert sample.sessions == 6 >= D.HELD_OUT_EVERY
    train, frames = D._held_out(st, sample, 400_000)
    assert frames and D._size(frames) <= 400_000 and any(len(f) > 1 for f in frames)
    assert not {r for f in frames for r in f} & set(train)


def test_a_store_whose_training_declined_is_not_advised_to_train_again(tmp_path: Path) -> None:
    """should_retrain measures as the training does where the store has no dictionary: the store
    above, whose training declines, is told a training would keep none (and why); a store whose
    records make one pay is told to train, and its training then keeps one."""
    st = _store_in_blocks(tmp_path / "declines", 3, 120)
    assert not D.train_store_dictionary(st, size_bytes=SIZE).stored
    advice = D.should_retrain(st, size_bytes=SIZE)
    assert not advice.retrain and advice.current_id is None
    assert "a training now would keep none" in advice.reason and "does not pay" in advice.reason
    assert _dictionary_files(st) == []  # advising stores nothing
    pays = SessionStore(tmp_path / "pays")
    _write_alone(pays, 3, 120, random.Random(7))
    advice = D.should_retrain(pays, size_bytes=SIZE)
    assert advice.retrain and "would be kept" in advice.reason, advice
    assert _dictionary_files(pays) == []
    assert D.train_store_dictionary(pays, size_bytes=SIZE).stored
