"""A 3-node nats-server cluster with JetStream, for the JetStream backend's tests.

    from tests.nats_cluster import cluster, skip_reason
    c = cluster()            # started once per test session (cached), torn down at exit
    c.url("journal=x&stream=S&replicas=3")
    c.kill(i); c.restart(i)  # SIGKILL a node, start it again on the same ports and store
    c.stream_leader("S")     # the index of the node leading stream S

Every node listens on free loopback ports (client, cluster routes, monitoring) and keeps its
store in its own directory under one temporary directory. Readiness is polled from the nodes'
monitoring endpoints (``/healthz``, ``/jsz``), never waited for with a fixed sleep.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

NATS_SERVER_ENV = "JOURNAL_NATS_SERVER"
NODES = 3
READY_TIMEOUT_S = 60.0
POLL_S = 0.02  # between two looks at a node's monitoring endpoint (polling, not synchronization)


def server_binary() -> str | None:
    """The nats-server executable ($JOURNAL_NATS_SERVER, PATH, /usr/sbin), or None."""
    given = os.environ.get(NATS_SERVER_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    found = shutil.which("nats-server")
    if found:
        return found
    return "/usr/sbin/nats-server" if os.access("/usr/sbin/nats-server", os.X_OK) else None


def skip_reason() -> str | None:
    """Why the cluster cannot run here, or None."""
    if server_binary() is None:
        return "nats-server not found (install it or set JOURNAL_NATS_SERVER)"
    try:
        import nats  # noqa: F401
    except ImportError:
        return "nats-py not installed (pip install 'journal-engine[nats]')"
    return None


def _free_ports(n: int) -> list[int]:
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _http_json(port: int, path: str, timeout_s: float = 1.0) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as resp:
        return json.loads(resp.read())


class NodeDiedError(RuntimeError):
    """A node of a cluster being started exited: started again on other ports (``cluster``)."""


START_TRIES = 3  # fresh ports each time: a port taken by another process costs one try


class Cluster:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="journal-nats-")
        ports = _free_ports(3 * NODES)
        self.client_ports = ports[0:NODES]
        self.route_ports = ports[NODES : 2 * NODES]
        self.http_ports = ports[2 * NODES : 3 * NODES]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * NODES
        self._mu = threading.Lock()
        routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.route_ports)
        self.confs: list[str] = []
        for i in range(NODES):
            store = os.path.join(self.root, f"n{i}")
            os.makedirs(store)
            conf = os.path.join(self.root, f"n{i}.conf")
            with open(conf, "w") as f:
                f.write(
                    f"server_name: n{i}\n"
                    f"listen: 127.0.0.1:{self.client_ports[i]}\n"
                    f"http: 127.0.0.1:{self.http_ports[i]}\n"
                    f'jetstream {{ store_dir: "{store}", max_memory_store: 256MB, max_file_store: 4GB }}\n'
                    f"cluster {{ name: jtest, listen: 127.0.0.1:{self.route_ports[i]}, routes: [{routes}] }}\n"
                )
            self.confs.append(conf)

    # --- life ------------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(NODES):
            self._spawn(i)
        # A node that exits at once has most often lost one of its ports to another process
        # between _free_ports and its bind (two test runs side by side): NodeDiedError.
        try:
            self.wait_ready()
        except TimeoutError as exc:
            dead = [i for i in range(NODES) if i not in self.alive()]
            if dead:
                raise NodeDiedError(f"nats nodes {dead} exited at start; logs in {self.root}") from exc
            raise
        dead = [i for i in range(NODES) if i not in self.alive()]
        if dead:
            raise NodeDiedError(f"nats nodes {dead} exited at start; logs in {self.root}")

    def _spawn(self, i: int) -> None:
        log = open(os.path.join(self.root, f"n{i}.log"), "ab")  # the child keeps its own copy
        try:
            self.procs[i] = subprocess.Popen(
                [self.binary, "-c", self.confs[i]], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` and reap it."""
        with self._mu:
            p = self.procs[i]
            self.procs[i] = None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
        if p is not None:
            p.wait(30)

    def restart(self, i: int, wait: bool = True) -> None:
        """Start node ``i`` again (same ports, same store) and, with ``wait``, until it is ready."""
        with self._mu:
            if self.procs[i] is not None:
                raise RuntimeError(f"node {i} is running")
            self._spawn(i)
        if wait:
            self.wait_ready()

    def stop(self) -> None:
        for i in range(NODES):
            self.kill(i)
        shutil.rmtree(self.root, ignore_errors=True)

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    # --- looks -----------------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every running node answers /healthz and the cluster has a JetStream meta leader."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                ok = True
                for i in self.alive():
                    health = _http_json(self.http_ports[i], "/healthz")
                    if health.get("status") != "ok":
                        ok, last = False, (i, health)
                        break
                    jsz = _http_json(self.http_ports[i], "/jsz")
                    if not (jsz.get("meta_cluster") or {}).get("leader"):
                        ok, last = False, (i, "no meta leader")
                        break
                if ok:
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
            time.sleep(POLL_S)
        raise TimeoutError(f"nats cluster in {self.root} not ready after {timeout_s} s: {last}")

    def _stream_detail(self, stream: str) -> tuple[int, dict[str, Any]] | None:
        """(node, that node's view of ``stream``) for the live node that says it leads it."""
        for i in self.alive():
            try:
                jsz = _http_json(self.http_ports[i], "/jsz?accounts=true&streams=true")
            except (OSError, urllib.error.URLError, ValueError):
                continue
            for acc in jsz.get("account_details") or []:
                for sd in acc.get("stream_detail") or []:
                    if sd.get("name") == stream and (sd.get("cluster") or {}).get("leader") == f"n{i}":
                        return i, sd
        return None

    def stream_leader(self, stream: str, timeout_s: float = READY_TIMEOUT_S) -> int:
        """The index of the node that leads ``stream`` now (polls until it has a leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self._stream_detail(stream)
            if found is not None:
                return found[0]
            time.sleep(POLL_S)
        raise TimeoutError(f"stream {stream} has no leader after {timeout_s} s")

    def wait_stream_current(self, stream: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until ``stream`` has a live leader that reports every other replica current."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self._stream_detail(stream)
            if found is not None:
                i, sd = found
                others = [r for r in (sd["cluster"].get("replicas") or []) if r.get("name") != f"n{i}"]
                if len(others) == NODES - 1 and all(r.get("current") for r in others):
                    return
            time.sleep(POLL_S)
        raise TimeoutError(f"stream {stream} replicas not current after {timeout_s} s")

    def servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def url(self, query: str) -> str:
        return f"nats://{self.servers()}?{query}"


def start_cluster(binary: str) -> Cluster:
    """A new cluster, started and ready; tried again on fresh ports when a node exits at start."""
    for attempt in range(1, START_TRIES + 1):
        c = Cluster(binary)
        atexit.register(c.stop)
        try:
            c.start()
        except NodeDiedError:
            c.stop()
            if attempt == START_TRIES:
                raise
            continue
        except BaseException:
            c.stop()
            raise
        return c
    raise AssertionError("unreachable: the last try returns or raises")


_CLUSTER: Cluster | None = None
_CLUSTER_MU = threading.Lock()


def cluster() -> Cluster:
    """The session's cluster, started on first use (RuntimeError if nats-server is missing)."""
    global _CLUSTER
    with _CLUSTER_MU:
        if _CLUSTER is None:
            binary = server_binary()
            if binary is None:
                raise RuntimeError("nats-server not found")
            _CLUSTER = start_cluster(binary)
        return _CLUSTER


def shutdown() -> None:
    """Stop the session's cluster now (atexit does it too)."""
    global _CLUSTER
    with _CLUSTER_MU:
        if _CLUSTER is not None:
            _CLUSTER.stop()
            _CLUSTER = None
