"""The session layer, unchanged, on the server backends: a session cut mid-turn is repaired on
open (its closers appended on the server), replays to a closed state, and moves between backends
with `journal copy` keeping every event; `journal verify` and `journal repair` take the URL.
The session store, forks and snapshots on servers: tests/test_session_store_on_servers.py."""

from __future__ import annotations

import pathlib
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import journal
from journal import session as S
from tests.backends import Backend, made_or_skipped
from tests.test_session_repair import SESSION_ID, assert_closed, write_session

SERVERS = ("postgres", "nats")


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Backend]:
    yield from made_or_skipped(request.param, tmp_path)


def test_a_session_cut_mid_turn_is_repaired_on_the_server(server: Backend, tmp_path: pathlib.Path) -> None:
    full = tmp_path / "full"
    total = write_session(full, random.Random(7))
    target = server.target()
    # The session as a crashed runtime left it: its events up to a point inside a turn, written
    # to the server by `journal copy` of a prefix (a file journal cut there, then copied).
    with journal.open(full, readonly=True) as j:
        events = [r.event for r in j.read()]
    cut = next(i for i in range(len(events) // 2, len(events)) if events[i]["type"] == "tool.requested") + 1
    with journal.open(target, create=True) as j:
        j.append_many(events[:cut], durability="sync" if server.sync_durable else "flush")
    with S.open(target, session_id=SESSION_ID) as s:
        report = s.repair_report
        assert report is not None and report.changed and report.closers
        assert_closed(s.replay().state)
        repaired = s.journal.last_seq
    with S.open(target) as s:  # repairing again changes nothing
        assert s.repair_report is not None and not s.repair_report.changed
        assert s.journal.last_seq == repaired
    assert total > cut


def test_a_session_moves_between_backends_with_every_event(server: Backend, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    write_session(src, random.Random(3))
    target = server.target()
    back = tmp_path / "back"
    for a, b in ((str(src), target), (target, str(back))):
        got = subprocess.run([sys.executable, "-m", "journal.cli", "copy", a, b], capture_output=True, text=True,
                             timeout=120)
        assert got.returncode == 0, got.stderr
    with journal.open(src, readonly=True) as x, journal.open(back, readonly=True) as y:
        assert [(r.seq, r.payload, r.key, r.synthetic) for r in x.read()] == [
            (r.seq, r.payload, r.key, r.synthetic) for r in y.read()
        ]
    with S.open(target, readonly=True) as s:
        assert_closed(s.replay().state)


def _cli(*argv: str) -> tuple[int, dict[str, Any]]:
    import json

    got = subprocess.run([sys.executable, "-m", "journal.cli", *argv, "--json"], capture_output=True, text=True,
                         timeout=120)
    return got.returncode, json.loads(got.stdout or got.stderr)


def test_verify_and_repair_take_a_url(server: Backend, tmp_path: pathlib.Path) -> None:
    """`journal verify URL` reads and verifies every record and checks the session; `journal
    repair URL` closes what a crash left open; a changed record makes both exit 3."""
    full = tmp_path / "full"
    write_session(full, random.Random(11))
    with journal.open(full, readonly=True) as j:
        events = [r.event for r in j.read()]
    cut = next(i for i in range(len(events) // 2, len(events)) if events[i]["type"] == "tool.requested") + 1
    target = server.target()
    with journal.open(target, create=True) as j:
        j.append_many(events[:cut], durability="flush")
    code, rep = _cli("verify", target)
    assert code == 0 and rep.get("verdict") == "clean" and rep["records"] == cut and rep["lastSeq"] == cut, rep
    assert rep["session"]["verdict"] == "clean" and rep["session"]["openStructures"]  # the crash's open turn
    code, dry = _cli("repair", target, "--dry-run")
    assert code == 0 and dry["structural"]["count"] > 0
    with journal.open(target, readonly=True) as j:
        assert j.last_seq == cut  # a dry run wrote nothing
    code, done = _cli("repair", target)
    assert code == 0 and done["structural"]["count"] == dry["structural"]["count"]
    code, rep = _cli("verify", target)
    assert code == 0 and rep["session"]["openStructures"] == []
    with S.open(target, readonly=True) as s:
        assert_closed(s.replay().state)
    server.tamper(target, 3)
    code, rep = _cli("verify", target)
    assert code == 3 and rep.get("verdict") == "corrupt", rep
    # PostgreSQL: the row of seq 3 changed. JetStream: the message holding seq 3 (one batch from
    # seq 1) was deleted and published again at the end, so seq 1 is where the gap shows.
    assert rep["problems"][0]["seqFirst"] == (3 if server.name == "postgres" else 1), rep["problems"]
    code, refused = _cli("repair", target)
    assert code == 3 and refused["verdict"] == "corrupt"
