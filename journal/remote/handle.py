"""What every server journal handle answers the same way: readonly, recovery, writer_mode, `with`.

The plain parts of the journal.api protocol that do not depend on where the records are: a base
of both backends' journal classes (journal/remote/postgres/state.py, journal/remote/jetstream/).
Each backend sets the attributes declared here when it opens, and implements ``close``.
"""

from __future__ import annotations

import abc
from typing import TypeVar

from journal.api import RecoveryReport

_H = TypeVar("_H", bound="ServerHandle")


class ServerHandle(abc.ABC):
    """readonly, recovery and writer_mode from the handle's state; a context manager that closes."""

    _readonly: bool
    _shared: bool  # writer="shared"
    _recovery: RecoveryReport

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def recovery(self) -> RecoveryReport:
        return self._recovery

    @property
    def writer_mode(self) -> str:
        return "shared" if self._shared else "exclusive"

    @abc.abstractmethod
    def close(self) -> None:
        """Write what the handle buffers and end its connections (each backend's own)."""

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
