"""The test side of a fork server (the kill tests of the adapters): its lines and its children.

Lines. ``select`` on a pipe says whether the *pipe* holds bytes; a buffered ``readline()`` may
pull several lines out of it at once and keep the rest in its own buffer, where ``select``
cannot see them. A child that wrote its last lines in one burst then looks hung: the next
``select`` waits for bytes that already arrived. ``PipeLines`` keeps the one buffer itself and
calls ``select`` only when that buffer holds no whole line.

Children. The server reaps a child as soon as it ends, which may be before the test has read
the child's last lines; a ``kill(pid)`` sent then fails, or, once the pid is reused (pid_max
may be 32768), hits another process. ``ForkedChild`` holds a pidfd from the moment the pid is
read: a signal through it reaches that process or none.
"""

from __future__ import annotations

import os
import select
import signal


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


class ForkedChild:
    """A child of the fork server, by pidfd. Opened when its ``pid N`` line is read: the child
    has just written it, so it has not ended, let alone been reaped, unless it ran its whole
    round in between; then ``pidfd_open`` fails and the child counts as ended."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self.fd = None

    def kill(self) -> bool:
        """SIGKILL the child; False if it had already ended and been reaped (then its last
        lines, ``end`` among them, are still to be read)."""
        if self.fd is None:
            return False
        try:
            signal.pidfd_send_signal(self.fd, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
