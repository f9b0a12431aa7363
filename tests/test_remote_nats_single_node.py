"""One NATS server for development (docs/REMOTE.md, "One server (development)"): a journal
opens on a server that is not clustered with the defaults, warns once (SingleNodeSyncWarning)
what "sync" means there, and ``replicas=1`` says the one server is meant (no warning). On a
cluster "sync" still needs a stream of 3 replicas (SyncNeedsReplicasError).

The single server is the one at 127.0.0.1:4222 (JOURNAL_NATS_SINGLE overrides it), which must
not be clustered; the cluster is the test session's 3-node one (tests/nats_cluster.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import uuid
import warnings
from collections.abc import Iterator

import pytest

import journal
from journal.outcomes import Committed
from tests.nats_cluster import Cluster

SINGLE_ENV = "JOURNAL_NATS_SINGLE"
SINGLE_DEFAULT = "127.0.0.1:4222"


def _single_server() -> str:
    return os.environ.get(SINGLE_ENV, SINGLE_DEFAULT)


async def _server_info(hostport: str) -> tuple[dict[str, object], dict[str, object]]:
    """(the server's INFO, $JS.API.INFO's answer) of the server at ``hostport``."""
    import nats as nats_py

    nc = await nats_py.connect(servers=[f"nats://{hostport}"], connect_timeout=2, allow_reconnect=False)
    try:
        js = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
        return dict(nc._server_info), js
    finally:
        await nc.close()


async def _delete_stream(servers: list[str], stream: str) -> None:
    import nats as nats_py

    nc = await nats_py.connect(servers=servers, connect_timeout=5)
    try:
        for name in (stream, f"KV_{stream}_LOCKS"):
            await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=10)
    finally:
        await nc.close()


@pytest.fixture(scope="module")
def single() -> str:
    """host:port of a single nats-server with JetStream that is not part of a cluster."""
    from tests.backends import require_services

    hostport = _single_server()
    host, port = hostport.rsplit(":", 1)
    why = None
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        info, js = asyncio.run(_server_info(hostport))
        if info.get("cluster"):
            why = f"the nats-server at {hostport} is clustered; these tests need a single server"
        elif "error" in js:
            why = f"the nats-server at {hostport} has no JetStream (-js): {js['error']}"
    except (OSError, ImportError) as exc:
        why = f"no nats-server at {hostport} ({exc}); start one with `nats-server -js` or set {SINGLE_ENV}"
    if why is not None:
        if require_services():
            pytest.fail(f"JOURNAL_REQUIRE_SERVICES=1 but {why}")
        pytest.skip(why)
    return hostport


@pytest.fixture
def single_stream(single: str) -> Iterator[str]:
    """A stream of its own on the single server (deleted after the test), for tests that do not
    need the default stream."""
    stream = f"SINGLE{uuid.uuid4().hex[:8].upper()}"
    yield stream
    asyncio.run(_delete_stream([f"nats://{single}"], stream))


def _single_node_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    from journal.remote.jetstream import SingleNodeSyncWarning

    return [w for w in caught if issubclass(w.category, SingleNodeSyncWarning)]


def test_a_session_opens_on_one_server_with_the_defaults(single: str) -> None:
    """What a new user tries: the default stream, the default durability, the session layer."""
    from journal import session
    from journal.remote.jetstream import SingleNodeSyncWarning

    name = f"s1-{uuid.uuid4().hex[:8]}"
    url = f"nats://{single}?journal={name}"
    try:
        with pytest.warns(SingleNodeSyncWarning, match=r"sync_interval") as caught:
            s = session.open(url, create=True)
        assert len(_single_node_warnings(list(caught))) == 1
        message = str(_single_node_warnings(list(caught))[0].message)
        assert "not clustered" in message and "replicas=1" in message and name in message
        with s:
            s.append("user.message", {"text": "hello"})
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")  # Python's own once-per-place filter is not what hides it
            with journal.open(url) as j:
                out = j.append({"more": 1})  # durability "sync", the default
                assert isinstance(out, Committed) and out.durability == "sync"
                j.sync()
        assert _single_node_warnings(again) == [], "warned a second time for the same journal"
    finally:
        journal.store(f"nats://{single}").delete(name)


def test_replicas_1_says_one_server_is_meant(single: str, single_stream: str) -> None:
    url = f"nats://{single}?journal=r1-{uuid.uuid4().hex[:8]}&stream={single_stream}&replicas=1"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with journal.open(url, create=True) as j:
            out = j.append({"a": 1}, durability="sync")
            assert isinstance(out, Committed) and out.durability == "sync"
            assert j.replicas == 1
        with journal.open(url, replicas=1) as j:  # the keyword states it as well as the URL does
            assert [r.event for r in j.read()] == [{"a": 1}]
    assert _single_node_warnings(caught) == []


def test_a_reader_is_not_warned(single: str, single_stream: str) -> None:
    """The warning is about what an append's "sync" means: a read-only handle appends nothing."""
    base = f"nats://{single}?journal=ro-{uuid.uuid4().hex[:8]}&stream={single_stream}"
    with journal.open(base + "&replicas=1", create=True) as j:
        j.append({"a": 1}, durability="flush")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with journal.open(base, readonly=True) as r:
            assert [x.event for x in r.read()] == [{"a": 1}]
    assert _single_node_warnings(caught) == []


def test_each_journal_is_warned_once(single: str, single_stream: str) -> None:
    from journal.remote.jetstream import SingleNodeSyncWarning

    urls = [f"nats://{single}?journal=w{k}-{uuid.uuid4().hex[:8]}&stream={single_stream}" for k in range(2)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for url in urls + urls:
            with journal.open(url, create=True):
                pass
    got = _single_node_warnings(caught)
    assert len(got) == 2 and all(w.category is SingleNodeSyncWarning for w in got)
    assert {str(w.message) for w in got} != {str(got[0].message)}, "one warning per journal, each naming its own"


# --- a cluster: "sync" still needs three replicas ----------------------------------------------


def test_on_a_cluster_sync_needs_three_replicas(nats: Cluster) -> None:
    from journal.remote.jetstream import SyncNeedsReplicasError

    stream = f"FEW{uuid.uuid4().hex[:8].upper()}"
    try:
        url = nats.url(f"journal=few-{uuid.uuid4().hex[:8]}&stream={stream}&replicas=1")  # named: never raised
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with journal.open(url, create=True) as j:
                assert j.replicas == 1
                with pytest.raises(SyncNeedsReplicasError):
                    j.append({"a": 1}, durability="sync")
                with pytest.raises(SyncNeedsReplicasError):
                    j.sync()
                out = j.append({"a": 1}, durability="flush")
                assert isinstance(out, Committed) and out.durability == "flush"
        assert _single_node_warnings(caught) == [], "a cluster is not one server"
    finally:
        asyncio.run(_delete_stream([f"nats://{hp}" for hp in nats.servers().split(",")], stream))


def test_on_a_cluster_the_default_stream_has_the_replicas_sync_needs(nats: Cluster) -> None:
    stream = f"DEF{uuid.uuid4().hex[:8].upper()}"
    url = nats.url(f"journal=default-{uuid.uuid4().hex[:8]}&stream={stream}")  # replicas not given
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with journal.open(url, create=True) as j:
                assert j.replicas == 3
                out = j.append({"a": 1})  # durability "sync", the default
                assert isinstance(out, Committed) and out.durability == "sync"
        assert _single_node_warnings(caught) == []
    finally:
        asyncio.run(_delete_stream([f"nats://{hp}" for hp in nats.servers().split(",")], stream))


def test_on_a_cluster_three_replicas_sync(nats: Cluster) -> None:
    stream = f"THREE{uuid.uuid4().hex[:8].upper()}"
    url = nats.url(f"journal=three-{uuid.uuid4().hex[:8]}&stream={stream}&replicas=3")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with journal.open(url, create=True) as j:
                assert j.replicas == 3
                out = j.append({"a": 1}, durability="sync")
                assert isinstance(out, Committed) and out.durability == "sync"
        assert _single_node_warnings(caught) == []
    finally:
        asyncio.run(_delete_stream([f"nats://{hp}" for hp in nats.servers().split(",")], stream))


def test_a_new_stream_on_one_server_falls_back_to_one_replica(single: str) -> None:
    """The default asks for the three replicas "sync" needs on a cluster; a server on its own
    refuses more than one, and the stream is made with one (and the open warns what that means)."""
    from journal.remote.jetstream import SingleNodeSyncWarning

    stream = f"NEW{uuid.uuid4().hex[:8].upper()}"
    url = f"nats://{single}?journal=fresh-{uuid.uuid4().hex[:8]}&stream={stream}"
    try:
        with pytest.warns(SingleNodeSyncWarning):
            with journal.open(url, create=True) as j:
                assert j.replicas == 1
                out = j.append({"a": 1})
                assert isinstance(out, Committed) and out.durability == "sync"
    finally:
        asyncio.run(_delete_stream([f"nats://{single}"], stream))
