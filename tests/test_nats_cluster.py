"""The test suite's NATS cluster (tests/nats_cluster.py) starts even when a port it picked is
taken by another process before its node binds it (two test runs side by side): the node
exits, and the cluster is made again on other ports."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tests import nats_cluster


def test_a_cluster_whose_port_was_taken_starts_again_on_other_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    binary = nats_cluster.server_binary()
    if binary is None:
        pytest.skip("nats-server is not installed")
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real = nats_cluster._free_ports
    calls: list[list[int]] = []

    def first_has_a_taken_port(n: int) -> Any:
        ports = real(n)
        if not calls:
            ports[0] = port  # the first node's client port, held open by ``taken``
        calls.append(ports)
        return ports

    monkeypatch.setattr(nats_cluster, "_free_ports", first_has_a_taken_port)
    try:
        c = nats_cluster.start_cluster(binary)
    finally:
        taken.close()
    try:
        assert len(calls) == 2, calls  # the first cluster failed, the second started
        assert port not in c.client_ports
        assert c.alive() == list(range(nats_cluster.NODES))
    finally:
        c.stop()
