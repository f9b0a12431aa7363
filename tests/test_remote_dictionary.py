"""Trained zstd dictionaries on the server backends (docs/REMOTE.md, "Dictionaries"), on the real
servers: PostgreSQL (tests/backend_postgres.py: a schema of its own, dropped after) and the
single NATS server at 127.0.0.1:4222 (a stream of its own, deleted after).

A writer opened with ``dictionary=`` stores it on the server before any frame naming it; a
handle opened without it reads, gets, follows and resolves those records; a second dictionary
takes the next id and both stay readable; a damaged or missing stored dictionary is
CorruptionError naming the journal, the id and the seq; a writer SIGKILLed just before or just
after the dictionary is stored leaves a readable journal; ``journal copy`` carries it both ways.

The children of the kill test run this module: ``python -m tests.test_remote_dictionary child URL BARRIER``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import xxhash

import journal
from journal.engine.dictionary import Dictionary, dictionary_file_name
from journal.errors import CorruptionError
from journal.outcomes import AckLost, Committed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATS_SERVER = os.environ.get("JOURNAL_NATS_SINGLE", "127.0.0.1:4222")
WAIT_S = 60.0  # a dead client's lock (PostgreSQL session, NATS claim) is let go well within this


# --- dictionaries and events -------------------------------------------------------------------


def event(i: int) -> dict[str, Any]:
    return {
        "type": ("tool.call", "tool.result", "user.message")[i % 3],
        "name": f"tool-{i % 7}",
        "args": {"path": f"/work/project/src/module_{i % 11}.py", "mode": "read", "lines": [i, i + 40]},
        "text": "the quick brown fox jumps over the lazy dog " * (1 + i % 4),
    }


def trained(seed: int, size: int = 4096) -> Dictionary:
    import zstandard

    samples: list[bytes | bytearray | memoryview] = [
        json.dumps({**event(i), "seed": seed, "n": i * seed}).encode() for i in range(1500)
    ]
    return Dictionary(1, zstandard.train_dictionary(size, samples).as_bytes())


D1 = trained(1)
D2 = trained(2, 5000)


# --- the servers -------------------------------------------------------------------------------


class Server:
    """One backend's journals for a test, and what a test does to them behind the API's back."""

    name = ""

    def target(self) -> str:
        raise NotImplementedError

    def store_location(self) -> str:
        raise NotImplementedError

    def tamper_dictionary(self, target: str, dict_id: int) -> None:
        """Flip one bit in the middle of the stored dictionary ``dict_id``."""
        raise NotImplementedError

    def drop_dictionary(self, target: str, dict_id: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Postgres(Server):
    name = "postgres"

    def __init__(self) -> None:
        from tests.backend_postgres import PostgresBackend

        self.backend = PostgresBackend()

    def target(self) -> str:
        return self.backend.target(f"d-{uuid.uuid4().hex[:10]}")

    def store_location(self) -> str:
        return self.backend.store_location()

    def _change(self, target: str, dict_id: int, statement: str) -> None:
        from psycopg import sql

        from tests.backend_postgres import connect

        schema, name = self.backend._where(target)
        with connect() as conn:
            cur = conn.execute(sql.SQL(statement).format(sql.Identifier(schema, "dictionaries")), (name, dict_id))
            assert cur.rowcount == 1, f"no dictionary {dict_id} of {target}"

    def tamper_dictionary(self, target: str, dict_id: int) -> None:
        self._change(
            target,
            dict_id,
            "UPDATE {} SET body = set_byte(body, length(body) / 2, "
            "get_byte(body, length(body) / 2) # 1) WHERE journal = %s AND id = %s",
        )

    def drop_dictionary(self, target: str, dict_id: int) -> None:
        self._change(target, dict_id, "DELETE FROM {} WHERE journal = %s AND id = %s")

    def close(self) -> None:
        self.backend.close()


async def _nats(servers: list[str], work: Callable[[Any], Any]) -> Any:
    import nats

    nc = await nats.connect(servers=servers, connect_timeout=5)
    try:
        return await work(nc)
    finally:
        await nc.close()


async def _request(nc: Any, subject: str, req: dict[str, Any] | None) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(req).encode() if req is not None else b"", timeout=10)
    resp: dict[str, Any] = json.loads(msg.data)
    if "error" in resp:
        raise RuntimeError(f"{subject}: {resp['error']}")
    return resp


class Nats(Server):
    name = "nats"

    def __init__(self) -> None:
        self.stream = f"DICT{uuid.uuid4().hex[:8].upper()}"
        self.servers = [f"nats://{NATS_SERVER}"]

    def target(self) -> str:
        return f"nats://{NATS_SERVER}?journal=d-{uuid.uuid4().hex[:10]}&stream={self.stream}&replicas=1"

    def store_location(self) -> str:
        return f"nats://{NATS_SERVER}?stream={self.stream}&replicas=1"

    def _subject(self, target: str, dict_id: int) -> str:
        from journal.remote.jetstream import subject_base, subject_token

        name = parse_qs(urlsplit(target).query)["journal"][0]
        return f"{subject_base(self.stream)}-meta.{subject_token(name)}.dict.{dict_id}"

    def _take(self, target: str, dict_id: int, flip: bool) -> None:
        import base64

        subject = self._subject(target, dict_id)

        async def work(nc: Any) -> None:
            resp = await _request(nc, f"$JS.API.STREAM.MSG.GET.{self.stream}", {"last_by_subj": subject})
            m = resp["message"]
            await _request(nc, f"$JS.API.STREAM.MSG.DELETE.{self.stream}", {"seq": int(m["seq"])})
            if flip:
                body = bytearray(base64.b64decode(m.get("data") or ""))
                body[len(body) // 2] ^= 0x01
                ack = await nc.request(subject, bytes(body), timeout=10)
                assert b"error" not in ack.data, ack.data

        asyncio.run(_nats(self.servers, work))

    def tamper_dictionary(self, target: str, dict_id: int) -> None:
        self._take(target, dict_id, flip=True)

    def drop_dictionary(self, target: str, dict_id: int) -> None:
        self._take(target, dict_id, flip=False)

    def close(self) -> None:
        async def work(nc: Any) -> None:
            for name in (self.stream, f"KV_{self.stream}_LOCKS"):
                await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)

        try:
            asyncio.run(_nats(self.servers, work))
        except Exception:
            pass  # a server gone for good: nothing of ours is left to delete


def _unreachable(name: str) -> str | None:
    if name == "postgres":
        from tests.backend_postgres import unreachable

        return unreachable()
    import socket

    host, port = NATS_SERVER.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        import nats  # noqa: F401
    except (OSError, ImportError) as exc:
        return f"no nats-server at {NATS_SERVER} ({exc}); start one with `nats-server -js`"
    return None


@pytest.fixture(params=["postgres", "nats"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    from tests.backends import require_services

    why = _unreachable(request.param)
    if why is not None:
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {why}")
        pytest.skip(why)
    made: Server = Postgres() if request.param == "postgres" else Nats()
    try:
        yield made
    finally:
        made.close()


def _open(target: str, **options: Any) -> Any:
    import warnings

    if target.startswith("nats:"):
        # A short claim: a SIGKILLed writer's lapses in seconds (the lock bucket is the test stream's own).
        options.setdefault("claim_ttl_s", 2.0)
    with warnings.catch_warnings():  # the NATS server here is on its own: "sync" means its disk
        warnings.simplefilter("ignore")
        return journal.open(target, **options)


def _as_tuples(recs: list[Any]) -> list[tuple[int, bytes, str | None, bool]]:
    return [(r.seq, r.payload, r.key, r.is_bytes) for r in recs]


def _write(target: str, dictionary: Dictionary | None, start: int, count: int, create: bool = False) -> list[Any]:
    """``count`` events from ``event(start)`` on (every third keyed), at "sync"; their outcomes."""
    with _open(target, create=create, dictionary=dictionary) as j:
        events = [event(i) for i in range(start, start + count)]
        keys = [f"k{i}" if i % 3 == 0 else None for i in range(start, start + count)]
        outs = j.append_many(events, durability="sync", idempotency_keys=keys)
        assert all(isinstance(o, Committed) for o in outs), outs
        return list(outs)


# --- tests -------------------------------------------------------------------------------------


def test_records_written_with_a_dictionary_read_back_on_a_handle_opened_without_it(server: Server) -> None:
    target = server.target()
    with _open(target, create=True, dictionary=D1) as j:
        assert "compresses with dictionary 1" in j.recovery.actions
        outs = j.append_many(
            [event(i) for i in range(60)],
            durability="sync",
            idempotency_keys=[f"k{i}" if i % 3 == 0 else None for i in range(60)],
        )
        written = [j.get(o.seq) for o in outs]
    with _open(target, readonly=True) as r:
        assert r.dictionaries()[0].data == D1.data
        read = list(r.read())
        assert _as_tuples(read) == _as_tuples(written)
        assert [rec.event for rec in read] == [event(i) for i in range(60)]
        assert r.get(31).event == event(30)
        followed = []
        for rec in r.follow():
            followed.append(rec)
            if len(followed) == 60:
                break
        assert _as_tuples(followed) == _as_tuples(read)
    # A writer without the dictionary resolves a lost answer from the records written with it.
    with _open(target) as w:
        lost = AckLost(4, "the answer never came", xxhash.xxh64_intdigest(written[3].payload), "k3")
        got = w.resolve(lost)
        assert isinstance(got, Committed) and got.seq == 4, got
        out = w.append(event(0), idempotency_key="k0")  # a retry of a record written with the dictionary
        assert isinstance(out, Committed) and out.duplicate and out.seq == 1, out


def test_a_second_dictionary_takes_the_next_id_and_both_read(server: Server) -> None:
    target = server.target()
    _write(target, D1, 0, 30, create=True)
    with _open(target, dictionary=D1) as j:  # the same digest: reused, not stored twice
        assert "compresses with dictionary 1" in j.recovery.actions
    with _open(target, dictionary=D2) as j:  # prefers id 1, which is taken: the next free one
        assert "compresses with dictionary 2" in j.recovery.actions
    _write(target, D2, 30, 30)
    _write(target, None, 60, 9)
    with _open(target, readonly=True) as r:
        assert [d.id for d in r.dictionaries()] == [1, 2]
        assert [d.data for d in r.dictionaries()] == [D1.data, D2.data]
        assert [rec.event for rec in r.read()] == [event(i) for i in range(69)]
        assert r.get(45).event == event(44) and r.get(2).event == event(1)


@pytest.mark.parametrize("damage", ["flipped", "missing"])
def test_a_damaged_or_missing_stored_dictionary_is_corruption_naming_journal_id_and_seq(
    server: Server, damage: str
) -> None:
    target = server.target()
    _write(target, None, 0, 3, create=True)  # records 1..3 name no dictionary
    _write(target, D1, 3, 20)
    (server.tamper_dictionary if damage == "flipped" else server.drop_dictionary)(target, 1)
    with pytest.raises(CorruptionError) as caught:
        with _open(target, readonly=True) as r:  # JetStream reads every record at open
            assert r.get(2).event == event(1)  # a record that names no dictionary reads as before
            list(r.read())
    err = caught.value
    shown = target.split("?")[0]
    assert err.segment.startswith(shown) and "journal=" in err.segment, err.segment
    assert err.seq == 4, str(err)
    assert "needs dictionary 1 of the journal" in err.reason and "restore it" in err.reason, err.reason
    why = "checksum mismatch" if damage == "flipped" else "no such dictionary"
    assert why in err.reason, err.reason


def _child(target: str, barrier: str) -> None:
    """A writer that stops at ``barrier`` ("before" or "after" its dictionary is stored) until
    it is killed, then (were it not killed) appends records compressed with it."""
    from journal.remote import dictionaries

    real = dictionaries.install

    def install(d: Dictionary, ids: Any, load: Any, store: Callable[[int, bytes], None]) -> int:
        def stopping(dict_id: int, body: bytes) -> None:
            if barrier == "before":
                print("before", flush=True)
                sys.stdin.readline()
            store(dict_id, body)
            if barrier == "after":
                print("after", flush=True)
                sys.stdin.readline()

        return real(d, ids, load, stopping)

    dictionaries.install = install
    with _open(target, create=True, dictionary=D1) as j:
        j.append_many([event(i) for i in range(20)], durability="sync")
        print("appended", flush=True)


@pytest.mark.parametrize("barrier", ["before", "after"])
def test_a_writer_killed_around_storing_its_dictionary_leaves_a_readable_journal(server: Server, barrier: str) -> None:
    target = server.target()
    _open(target, create=True).close()
    p = subprocess.Popen(
        [sys.executable, "-m", "tests.test_remote_dictionary", "child", target, barrier],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None
        said = [p.stdout.readline().strip()]
        while said[-1] not in (barrier, ""):  # whatever it did before the barrier, then the barrier
            said.append(p.stdout.readline().strip())
        assert said[-1] == barrier, f"the child said {said!r} (exit {p.poll()})"
        p.kill()  # SIGKILL
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with _open(target, readonly=True) as r:
        assert list(r.read()) == []  # no frame came before the dictionary, nor was one left half-stored
        assert [d.data for d in r.dictionaries()] == ([D1.data] if barrier == "after" else [])
    with _open(target, dictionary=D1, lock_timeout_s=WAIT_S) as j:
        assert "compresses with dictionary 1" in j.recovery.actions
        j.append_many([event(i) for i in range(20)], durability="sync")
    with _open(target, readonly=True) as r:
        assert [rec.event for rec in r.read()] == [event(i) for i in range(20)]


def test_journal_copy_carries_the_dictionary_to_a_server_and_back(server: Server, tmp_path: Path) -> None:
    from journal.cli import main

    src = str(tmp_path / "src")
    with journal.open(src, create=True, dictionary=D1) as j:
        j.append_many([event(i) for i in range(40)], idempotency_keys=[f"k{i}" for i in range(40)])
        j.sync()
    with journal.open(src, readonly=True) as j:
        want = _as_tuples(list(j.read()))
    target = server.target()
    assert main(["copy", src, target, "--json"]) == 0
    with _open(target, readonly=True) as r:
        assert [d.data for d in r.dictionaries()] == [D1.data]
        assert _as_tuples(list(r.read())) == want
    back = tmp_path / "back"
    assert main(["copy", target, str(back), "--json"]) == 0
    assert (back / dictionary_file_name(1)).exists()
    with journal.open(str(back), readonly=True) as j:
        assert _as_tuples(list(j.read())) == want


def test_a_shared_writer_reads_the_keys_of_records_written_with_a_dictionary(server: Server) -> None:
    target = server.target()
    _write(target, D1, 0, 30, create=True)  # k0, k3, ... compressed with dictionary 1
    with pytest.raises(journal.InvalidArgumentError, match="writer='shared'"):
        _open(target, writer="shared", dictionary=D1)
    with _open(target, writer="shared") as w:  # its batches look the keys up in what is stored
        again = w.append_many([event(3), event(100)], durability="sync", idempotency_keys=["k3", "k100"])
        assert isinstance(again[0], Committed) and again[0].duplicate and again[0].seq == 4, again
        assert isinstance(again[1], Committed) and again[1].seq == 31, again
        with pytest.raises(journal.IdempotencyConflictError):
            w.append(event(7), idempotency_key="k6")  # k6 holds event(6)
        assert w.get(7).event == event(6)


def test_a_store_copy_carries_the_dictionaries_and_a_delete_takes_them(server: Server) -> None:
    store = journal.store(server.store_location())
    with _open_in(store, "src", create=True, dictionary=D1) as j:
        j.append_many([event(i) for i in range(30)], durability="sync")
    with _open_in(store, "src", dictionary=D2) as j:
        j.append_many([event(i) for i in range(30, 40)], durability="sync")
    store.copy("src", "fork", append=[event(40)])
    assert sorted(store.names()) == ["fork", "src"]  # a dictionary is no journal of the store
    with _open_in(store, "fork", readonly=True) as r:
        assert [d.data for d in r.dictionaries()] == [D1.data, D2.data]
        assert [rec.event for rec in r.read()] == [event(i) for i in range(41)]
    store.delete("src")
    with _open_in(store, "src", create=True) as j:  # a new journal under the name holds none of the old ones
        assert j.dictionaries() == []


def _open_in(store: Any, name: str, **options: Any) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return store.open(name, **options)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "child":
    _child(sys.argv[2], sys.argv[3])


def test_read_handles_on_a_server_share_the_process_tables_of_a_dictionary(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zstd's tables of a dictionary are the process's, whichever backend a handle reads: 8 read
    handles of one server journal make them once, not once a handle (a DDict weighs a few times
    the dictionary's bytes; 1,000 sessions' handles each with its own were ~100 KiB apiece)."""
    import zstandard

    target = server.target()
    _write(target, D1, 0, 12, create=True)
    made = {"dicts": 0}
    real_dict = zstandard.ZstdCompressionDict

    def counted(*a: Any, **k: Any) -> Any:
        made["dicts"] += 1
        return real_dict(*a, **k)

    from journal.engine import dictionary as engine_dictionary

    tables = engine_dictionary.decoding_tables(D1.data, D1.digest)  # held: the process's, made before counting
    monkeypatch.setattr(zstandard, "ZstdCompressionDict", counted)
    handles = [_open(target, readonly=True) for _ in range(8)]
    try:
        for h in handles:
            assert [r.event for r in h.read()] == [event(i) for i in range(12)]
    finally:
        for h in handles:
            h.close()
    assert made["dicts"] == 0, made
    assert tables.zdict is not None
