"""Lines from a child's pipe, each within a deadline: the reader of the fork-server kill tests.

``select`` on a pipe says whether the *pipe* holds bytes; a buffered ``readline()`` may pull
several lines out of it at once and keep the rest in its own buffer, where ``select`` cannot
see them. A child that wrote its last lines in one burst then looks hung: the next ``select``
waits for bytes that already arrived. This reader keeps the one buffer itself and calls
``select`` only when that buffer holds no whole line.
"""

from __future__ import annotations

import os
import select


class PipeLines:
    """Whole lines from the read end ``fd``; each ``line()`` waits at most ``timeout_s``."""

    def __init__(self, fd: int, timeout_s: float, what: str) -> None:
        self.fd = fd
        self.timeout_s = timeout_s
        self.what = what  # who is on the other end, for the failure message
        self.buf = bytearray()

    def line(self) -> str:
        while b"\n" not in self.buf:
            ready, _, _ = select.select([self.fd], [], [], self.timeout_s)  # a hung child fails, not stalls
            assert ready, f"{self.what} stopped answering: no whole line in {self.timeout_s} s"
            chunk = os.read(self.fd, 65536)
            assert chunk, f"{self.what} died: its pipe closed after {bytes(self.buf)!r}"
            self.buf += chunk
        end = self.buf.index(b"\n")
        text = self.buf[:end].decode()
        del self.buf[: end + 1]
        return text.strip()
