"""A zstd dictionary per session store (journal/session/dictionaries.py): trained from the store's
records, stored durably, given to every session opened for writing, carried by the journal
directory (a hard link to the store's file), refused when linked or crafted."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import journal
from journal.errors import CorruptionError, UnexpectedFileError, UnexpectedLinkError
from journal.fs import OsFileSystem
from journal.session import dictionaries as D
from journal.session.store import SessionStore

SIZE = 1024  # small dictionaries: the minimum sample is then TRAIN_SAMPLE_BYTES_MIN

WORDS_A = ["pytest", "failed", "passed", "assert", "traceback", "module", "import", "fixture", "error", "line"]
WORDS_B = ["kubectl", "pod", "deployment", "namespace", "restart", "helm", "chart", "ingress", "node", "yaml"]


def _text(rng: random.Random, words: list[str]) -> str:
    return "run the tool and report: " + " ".join(rng.choice(words) for _ in range(rng.randint(40, 90)))


def _write(store: SessionStore, n: int, rng: random.Random, words: list[str] = WORDS_A) -> str:
    s = store.create(workspace={"path": "/repo"})
    try:
        for i in range(n):
            s.append("user.message", {"text": _text(rng, words), "n": i})
    finally:
        s.close()
    return s.store_id


def _events(path: str) -> list[Any]:
    with journal.open(path, readonly=True) as j:
        return [r.event for r in j.read()]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    st = SessionStore(tmp_path / "store")
    rng = random.Random(7)
    for _ in range(3):
        _write(st, 120, rng)
    return st


def _dict_dir(st: SessionStore) -> str:
    return os.path.join(st.root, D.DICTIONARIES_DIR)


# --- training --------------------------------------------------------------------------------


def test_training_refuses_below_the_minimum_and_says_how_much_more(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    _write(st, 20, random.Random(1))
    with pytest.raises(D.NotEnoughRecordsError) as e:
        D.train_store_dictionary(st, size_bytes=SIZE)
    err = e.value
    assert err.have_bytes < err.need_bytes == D.TRAIN_SAMPLE_BYTES_MIN
    assert (err.have_sessions, err.need_sessions) == (1, D.TRAIN_SESSIONS_MIN)
    assert "more bytes of records" in str(err) and "more session(s)" in str(err)
    assert not os.path.exists(_dict_dir(st)) or not os.listdir(_dict_dir(st))
    assert st.current_dictionary() is None


def test_training_stores_durably_and_the_choice_survives_reopen(store: SessionStore) -> None:
    rep = D.train_store_dictionary(store, size_bytes=SIZE)
    assert rep.stored and rep.dictionary_id == 1 and rep.savings >= D.DICTIONARY_SAVINGS_MIN
    assert rep.held_out_dictionary_bytes < rep.held_out_plain_bytes < rep.held_out_bytes
    assert rep.sessions_sampled == 3 and rep.records_sampled == 3 * 121
    path = os.path.join(_dict_dir(store), "dict-00001.zdict")
    d = journal.read_dictionary_file(OsFileSystem(), path)  # the engine's reader: whole, verified
    assert d.id == 1 and 256 <= len(d.data) <= SIZE
    again = SessionStore(store.root).current_dictionary()
    assert again is not None and again.id == 1 and again.data == d.data and again.path == path
    listed = D.list_dictionaries(SessionStore(store.root))
    assert [(x.id, x.current, x.problem) for x in listed] == [(1, True, None)]
    assert listed[0].stats is not None and listed[0].stats["ratio"] == pytest.approx(rep.ratio)
    # A second training takes the next id and becomes current; the first stays.
    rep2 = D.train_store_dictionary(store, size_bytes=SIZE)
    assert rep2.dictionary_id == 2 and SessionStore(store.root).current_dictionary().id == 2  # type: ignore[union-attr]
    assert sorted(n for n in os.listdir(_dict_dir(store)) if n.endswith(".zdict")) == [
        "dict-00001.zdict",
        "dict-00002.zdict",
    ]


def test_a_dictionary_that_does_not_pay_is_not_stored(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    rng = random.Random(3)
    for _ in range(3):  # random bytes as hex: nothing recurs that a dictionary could hold
        s = st.create()
        for _ in range(100):
            s.append("user.message", {"text": rng.randbytes(3000).hex()})
        s.close()
    rep = D.train_store_dictionary(st, size_bytes=SIZE)
    assert not rep.stored and rep.dictionary_id is None and rep.savings < D.DICTIONARY_SAVINGS_MIN
    assert "no dictionary stored" in rep.summary()
    assert st.current_dictionary() is None
    assert (
        not [n for n in os.listdir(_dict_dir(st)) if n.startswith("dict-")] if os.path.exists(_dict_dir(st)) else True
    )


def test_the_sample_is_bounded_and_spread_over_sessions(store: SessionStore) -> None:
    sample = D._sample(store, 30_000, D.SAMPLE_RECORDS_PER_SESSION_MAX, False, None)
    assert sample.bytes <= 30_000 and sample.sessions == 3
    per = [sum(1 for r in sample.records if sid.encode() in r) for sid in sorted(store._ids("sessions"))]
    assert max(per) - min(per) <= 2, per  # each session gives its even share
    seqs = [json.loads(r)["data"].get("n", -1) for r in sample.records[: per[0]] if r.endswith(b"}")]
    assert max(seqs) - min(seqs) > 60  # spread over the session, not its first records


# --- sessions with the dictionary -------------------------------------------------------------


_CHILD = """
import sys, json, random
from journal.session.store import SessionStore
st = SessionStore(sys.argv[1])
s = st.create(workspace={"path": "/w"})
rng = random.Random(5)
for i in range(40):
    s.append("user.message", {"text": "run the tool and report: " + " ".join(rng.choice(%r) for _ in range(60))})
s.close()
print(s.store_id)
"""


def test_a_session_written_after_training_reads_back_from_the_store_and_from_its_directory_alone(
    store: SessionStore, tmp_path: Path
) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD % WORDS_A, store.root], capture_output=True, text=True, check=True
    )
    sid = out.stdout.strip()
    st = SessionStore(store.root)  # a new process's view: the store reopened
    path = st.journal_path(sid)
    s = st.open(sid, readonly=True)
    try:
        got = [r.event for r in s.journal.read()]
    finally:
        s.close()
    assert len(got) == 41 and got[-1]["type"] == "user.message"
    assert _events(path) == got
    # The journal directory alone, copied elsewhere, reads back equal: it holds the dictionary.
    copy = tmp_path / "elsewhere"
    shutil.copytree(path, copy)
    assert _events(str(copy)) == got
    # ... and its frames do name it: without the file they cannot be read.
    os.unlink(copy / "dict-00001.zdict")
    with pytest.raises(CorruptionError):
        _events(str(copy))


def test_the_journal_directory_holds_a_hard_link_to_the_stores_file(store: SessionStore) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    sid = _write(store, 10, random.Random(2))
    mine = os.stat(os.path.join(store.journal_path(sid), "dict-00001.zdict"))
    theirs = os.stat(os.path.join(_dict_dir(store), "dict-00001.zdict"))
    assert mine.st_ino == theirs.st_ino and theirs.st_nlink == 2


def test_a_session_made_before_the_dictionary_keeps_its_frames_and_uses_it_for_new_ones(
    store: SessionStore, tmp_path: Path
) -> None:
    sid = sorted(store._ids("sessions"))[0]
    path = store.journal_path(sid)
    before = _events(path)
    D.train_store_dictionary(store, size_bytes=SIZE)
    s = store.open(sid, readonly=True)  # a reader installs nothing
    s.close()
    assert "dict-00001.zdict" not in os.listdir(path)
    s = store.open(sid)
    try:
        for i in range(20):
            s.append("user.message", {"text": _text(random.Random(i), WORDS_A)})
    finally:
        s.close()
    after = _events(path)
    assert after[: len(before)] == before and len(after) == len(before) + 20
    assert "dict-00001.zdict" in os.listdir(path)
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    assert _events(str(copy)) == after


# --- what may be planted or crafted ------------------------------------------------------------


def test_a_link_at_the_dictionaries_directory_is_refused(store: SessionStore, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, _dict_dir(store))
    with pytest.raises(UnexpectedLinkError):
        D.train_store_dictionary(store, size_bytes=SIZE)
    with pytest.raises(UnexpectedLinkError):
        D.list_dictionaries(store)
    assert os.listdir(elsewhere) == []  # nothing written through it
    sid = _write(store, 5, random.Random(4))  # sessions still open and write, without a dictionary
    assert isinstance(store.dictionary_problem, UnexpectedLinkError)
    assert not [n for n in os.listdir(store.journal_path(sid)) if n.startswith("dict-")]
    assert len(_events(store.journal_path(sid))) == 6


def test_a_link_at_a_dictionary_file_is_refused(store: SessionStore, tmp_path: Path) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    # A whole, valid dictionary file elsewhere, linked in as the next id: never read through.
    other = tmp_path / "dict-00002.zdict"
    shutil.copy(os.path.join(_dict_dir(store), "dict-00001.zdict"), other)
    os.symlink(other, os.path.join(_dict_dir(store), "dict-00002.zdict"))
    st = SessionStore(store.root)
    with pytest.raises(UnexpectedLinkError):
        D.current_dictionary(st)
    sid = _write(st, 5, random.Random(4))
    assert isinstance(st.dictionary_problem, UnexpectedLinkError)
    assert not [n for n in os.listdir(st.journal_path(sid)) if n.startswith("dict-")]
    assert [x.problem is not None for x in D.list_dictionaries(st)] == [False, True]


@pytest.mark.parametrize("damage", ["flip", "cut", "directory", "huge"])
def test_a_crafted_dictionary_file_is_a_typed_error_and_sessions_open_without_it(
    store: SessionStore, damage: str
) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    path = os.path.join(_dict_dir(store), "dict-00002.zdict")
    good = open(os.path.join(_dict_dir(store), "dict-00001.zdict"), "rb").read()
    if damage == "directory":
        os.mkdir(path)
    else:
        data = {
            "flip": good[:40] + bytes([good[40] ^ 1]) + good[41:],
            "cut": good[:-3],
            "huge": good[:14] + (2**32 - 1).to_bytes(4, "little") + good[18:],
        }[damage]
        data = data.replace(b"\x01\x00", b"\x02\x00", 1) if damage == "flip" else data  # id 2, as named
        with open(path, "wb") as f:
            f.write(data)
    st = SessionStore(store.root)
    with pytest.raises(D.StoreDictionaryDamagedError) as e:
        D.current_dictionary(st)
    assert isinstance(e.value, CorruptionError) and "train again" in str(e.value).lower()
    sid = _write(st, 5, random.Random(4))
    assert isinstance(st.dictionary_problem, D.StoreDictionaryDamagedError)
    assert not [n for n in os.listdir(st.journal_path(sid)) if n.startswith("dict-")]
    assert len(_events(st.journal_path(sid))) == 6
    # Training again makes a new current one past the damaged id (ids are never reused).
    assert D.train_store_dictionary(st, size_bytes=SIZE).dictionary_id == 3
    sid = _write(st, 5, random.Random(4))
    assert st.dictionary_problem is None and "dict-00003.zdict" in os.listdir(st.journal_path(sid))


# --- drift -----------------------------------------------------------------------------------


def test_should_retrain_when_the_newest_records_drift(store: SessionStore) -> None:
    assert D.should_retrain(store, size_bytes=SIZE).retrain  # no dictionary and enough records
    D.train_store_dictionary(store, size_bytes=SIZE)
    same = D.should_retrain(store)
    assert not same.retrain and same.current_id == 1, same
    rng = random.Random(9)
    for _ in range(3):
        _write(store, 120, rng, WORDS_B)
    drift = D.should_retrain(store)
    assert drift.retrain and drift.fresh_bytes < drift.current_bytes, drift


# --- the command -----------------------------------------------------------------------------


def test_the_command_trains_and_lists(store: SessionStore, capsys: pytest.CaptureFixture[str]) -> None:
    from journal import cli

    assert cli.main(["dictionary", "train", store.root, "--size-bytes", str(SIZE), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["stored"] and rep["dictionaryId"] == 1
    _write(store, 3, random.Random(1))
    assert cli.main(["dictionary", "list", store.root, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == 1 and row["current"] and row["journalsLinking"] == 1 and row["ratio"] == rep["ratio"]
    assert cli.main(["dictionary", "list", store.root]) == 0
    assert "current" in capsys.readouterr().out


def test_the_command_says_how_much_more_is_needed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from journal import cli

    st = SessionStore(tmp_path / "store")
    _write(st, 5, random.Random(1))
    assert cli.main(["dictionary", "train", st.root, "--json"]) == 1
    err = json.loads(capsys.readouterr().err)
    assert err["errorType"] == "NotEnoughRecordsError" and err["needBytes"] > err["haveBytes"]
    assert cli.main(["dictionary", "list", str(tmp_path / "nothing")]) == 4


def test_a_session_opened_read_only_does_not_even_look_at_the_stores_dictionary(store: SessionStore) -> None:
    sid = sorted(store._ids("sessions"))[0]
    D.train_store_dictionary(store, size_bytes=SIZE)
    with open(os.path.join(_dict_dir(store), "dict-00002.zdict"), "wb") as f:
        f.write(b"crafted")
    st = SessionStore(store.root)
    st.open(sid, readonly=True).close()
    assert st.dictionary_problem is None  # not read: its journal directory holds what it needs
    st.open(sid).close()
    assert isinstance(st.dictionary_problem, D.StoreDictionaryDamagedError)


def test_with_enough_sessions_whole_sessions_are_held_out() -> None:
    records = [f"{s}:{i}".encode() for s in range(10) for i in range(7)]
    owners = [s for s in range(10) for _ in range(7)]
    train, held = D._split(D._Sample(records, owners, 10, 0, 10))
    held_sessions = {r.split(b":")[0] for r in held}
    assert held_sessions == {b"4", b"9"} and not held_sessions & {r.split(b":")[0] for r in train}
    few = D._Sample(records[:21], owners[:21], 3, 0, 3)  # fewer sessions: records spread over them
    train, held = D._split(few)
    assert len(held) == 4 and len({r.split(b":")[0] for r in held}) == 3


def test_a_fork_carries_the_dictionary_and_the_child_writes_with_it(store: SessionStore, tmp_path: Path) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    parent = _write(store, 30, random.Random(6))
    got = store.fork(parent)
    child = store.journal_path(got.session_id)
    s = store.open(got.session_id)
    try:
        s.append("user.message", {"text": _text(random.Random(8), WORDS_A)})
    finally:
        s.close()
    events = _events(child)
    assert events[:31] == _events(store.journal_path(parent))[:31] and events[-1]["type"] == "user.message"
    copy = tmp_path / "child"
    shutil.copytree(child, copy)  # the child's directory alone reads back
    assert _events(str(copy)) == events
    assert [n for n in os.listdir(copy) if n.endswith(".zdict")] == ["dict-00001.zdict"]


def test_a_shared_writer_gets_no_dictionary(store: SessionStore) -> None:
    sid = sorted(store._ids("sessions"))[0]
    D.train_store_dictionary(store, size_bytes=SIZE)
    s = store.open(sid, writer="shared")  # the engine refuses a dictionary with writer="shared"
    s.close()
    assert "dict-00001.zdict" not in os.listdir(store.journal_path(sid))


def test_a_link_at_the_dictionaries_directory_is_refused_before_sampling(tmp_path: Path) -> None:
    st = SessionStore(tmp_path / "store")
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", _dict_dir(st))
    with pytest.raises(UnexpectedLinkError):  # not NotEnoughRecordsError: the link is what is wrong
        D.train_store_dictionary(st, size_bytes=SIZE)


def test_a_training_waits_for_another_ones_lock_and_gives_up_typed(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.makedirs(_dict_dir(store), exist_ok=True)
    held = store.fs.try_lock(os.path.join(_dict_dir(store), D.TRAIN_LOCK))  # another training's
    assert held is not None
    monkeypatch.setattr(D, "TRAIN_LOCK_TIMEOUT_S", 0.0)
    try:
        with pytest.raises(D.StoreDictionaryError, match=r"held TRAIN\.lock"):
            D.train_store_dictionary(store, size_bytes=SIZE)
    finally:
        held.release()
    assert D.train_store_dictionary(store, size_bytes=SIZE).dictionary_id == 1


def test_a_file_at_the_dictionaries_directory_is_refused_and_sessions_still_write(store: SessionStore) -> None:
    with open(_dict_dir(store), "wb") as f:
        f.write(b"crafted")
    with pytest.raises(UnexpectedFileError):
        D.train_store_dictionary(store, size_bytes=SIZE)
    sid = _write(store, 3, random.Random(4))
    assert isinstance(store.dictionary_problem, UnexpectedFileError)
    assert len(_events(store.journal_path(sid))) == 4


def test_a_crafted_stats_file_is_shown_as_no_figures(store: SessionStore) -> None:
    D.train_store_dictionary(store, size_bytes=SIZE)
    stats = os.path.join(_dict_dir(store), "dict-00001.stats")
    data = open(stats, "rb").read()
    with open(stats, "wb") as f:
        f.write(data.replace(b'"stored":true', b'"stored":fals'))
    (row,) = D.list_dictionaries(store)
    assert row.stats is None and row.problem is None and row.current
    os.unlink(stats)
    os.mkdir(stats)
    assert D.list_dictionaries(store)[0].stats is None
