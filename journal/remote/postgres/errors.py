"""The PostgreSQL backend's typed errors, in its own words, and how a failure is put in one line.

Each says what failed, whether anything was written, and what to do next. The writer lock's
error (ServerJournalLockedError, with who holds the lock) is the claim's: claim.py.
"""

from __future__ import annotations

from typing import Final

from journal.errors import DurabilityError, InvalidArgumentError, JournalIOError


class SyncNotDurableError(DurabilityError):
    """"sync" was asked of a server running with fsync = off."""

    def __init__(self, path: str) -> None:
        InvalidArgumentError.__init__(
            self,
            f"durability 'sync' is refused on {path}: the server runs with fsync = off, so no commit "
            "survives a crash of the server or its machine, and 'sync' would be a lie. Turn fsync on "
            "(postgresql.conf, then reload) or append at 'flush'; nothing was written",
        )
        self.durability = "sync"


class ServerIOError(JournalIOError):
    """The server could not be reached or refused us (not an append's outcome)."""

    def __init__(self, path: str, doing: str, cause: BaseException, advice: str) -> None:
        OSError.__init__(self, f"{doing} journal {path} failed: {str(cause).strip()}. {advice}")
        self.path = path


CONNECT_ADVICE: Final = (
    "Check that the server is running and reachable from here (host, port, firewall, pg_hba.conf) and "
    "that the user, password and database in the URL are right; nothing was written"
)



def _words(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
