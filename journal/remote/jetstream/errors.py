"""The JetStream backend's typed errors, and the two ways a server call ends without an answer
the caller can use (_Refused: surely not done; _Lost: unknown).
"""

from __future__ import annotations

import errno
from typing import Any

from journal.errors import (
    DurabilityError,
    JournalError,
    JournalIOError,
    JournalLockedError,
)
from journal.remote.jetstream.headers import WRITER_SHARED
from journal.remote.jetstream.limits import SYNC_REPLICAS_MIN


class SyncNeedsReplicasError(DurabilityError):
    """``"sync"`` on a stream of fewer than 3 replicas of a cluster: JetStream 2.9 cannot make one
    server's store durable per write, so only a majority of 3 or more servers makes a record
    survive a power loss (docs/REMOTE.md, "Durability"). A server that is not clustered has no
    more to give, and takes "sync" as its one disk (SingleNodeSyncWarning)."""

    def __init__(self, stream: str, replicas: int) -> None:
        JournalError.__init__(
            self,
            f"durability 'sync' needs a stream of {SYNC_REPLICAS_MIN} or more replicas; stream {stream!r} has "
            f"{replicas}. nats-server 2.9 syncs its file store on an interval, so a single server's ack does not "
            f"survive a power loss: use replicas={SYNC_REPLICAS_MIN} on a cluster (a new stream, or update this "
            "one), or durability='flush'. (On a single server that is not clustered, 'sync' is accepted and "
            "means that server's disk.) Nothing was written",
        )
        self.durability = "sync"


class SingleNodeSyncWarning(UserWarning):
    """A writer opened on a NATS server that is not clustered, without ``replicas=1``: "sync" is
    accepted there, and means one server's disk (docs/REMOTE.md, "One server (development)").
    Given once per journal and process (``journal.warn_single_node``)."""


class ClaimHeldError(JournalLockedError):
    """Another writer holds the journal's claim (a key of the KV bucket <stream>_LOCKS): an
    exclusive writer, or (for an exclusive open) one or more shared writers."""

    def __init__(self, where: str, holder: dict[str, Any], ttl_s: float, shared: bool = False) -> None:
        if holder.get("state") == WRITER_SHARED:
            listed = holder.get("holders")
            holders: dict[str, Any] = listed if isinstance(listed, dict) else {}
            procs = sorted({(str(h.get("host", "?")), h.get("pid")) for h in holders.values() if isinstance(h, dict)},
                           key=str)
            pid = procs[0][1] if procs else None
            self.host = procs[0][0] if procs else "?"
            who = ", ".join(f"process {p} on host {h}" for h, p in procs[:8]) + (", ..." if len(procs) > 8 else "")
            message = (
                f"journal {where!r} is open for writing by {len(holders)} shared writer(s) ({who}); an exclusive "
                "writer needs the journal to itself. Open it with writer='shared' to append alongside them, with "
                "readonly=True to read, pass lock_timeout_s to wait until they close, or, if they are gone, wait for "
                f"their claim to expire (within {ttl_s:g} s of the last refresh)"
            )
        else:
            pid = holder.get("pid")
            self.host = str(holder.get("host", "?"))
            what = "being created" if holder.get("creating") else "claimed for writing"
            rule = ("an exclusive writer holds it, so shared writers wait" if shared
                    else "only one writer is allowed")
            message = (
                f"journal {where!r} is {what} by process {pid} on host {self.host}; {rule}. Open it with "
                "readonly=True to read, pass lock_timeout_s to wait for the claim, or, if that process is gone, "
                f"wait for its claim to expire (within {ttl_s:g} s of its last refresh)"
            )
        JournalError.__init__(self, message)
        self.path = where
        self.pid = pid if isinstance(pid, int) else None


def _io_error(where: str, what: str, exc: BaseException | None = None, doing: str = "opening",
              advice: str | None = None) -> JournalIOError:
    detail = f"{what}" + (f" ({type(exc).__name__}: {exc})" if exc is not None else "")
    err = JournalIOError(where, OSError(errno.EIO, detail), doing=doing, advice=advice)
    if exc is not None:
        err.__cause__ = exc
    return err


class _Refused(Exception):
    """The server answered and refused (an API error, no stream): nothing was stored."""

    def __init__(self, reason: str, code: int = 0, err_code: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.err_code = err_code


class _Lost(Exception):
    """No answer (a timeout, the connection lost): the server may or may not have it."""
