"""The child of tests/test_adapter_claude_agent_sdk.py's kill rounds (no tests): forked by the
test (``main``), or run as a script::

    python test_adapter_claude_agent_sdk_child.py ROOT STOP_AT FRAC ROUND

Appends batches to one SessionKey of a JournalSessionStore on ROOT, printing ``acked B`` once
batch B's append returned. Its file system counts pwrites: the STOP_AT-th is the barrier. FRAC
says where in it the child stops: "0" before any byte, "0.5" after half, "1" after all (before
the fdatasync), "sync" after the fdatasync that follows. It prints ``barrier KIND PATH`` and
waits there for the parent's SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from typing import Any

from journal.fs import File, OsFileSystem

KEY: Any = {"project_key": "proj", "session_id": "sess"}


OUT_FD = [1]  # where the lines go: stdout, or the pipe of a forked child


def say(line: str) -> None:
    os.write(OUT_FD[0], (line + "\n").encode())  # one write per line: the parent reads whole lines


class BarrierFile:
    def __init__(self, fs: BarrierFs, inner: File) -> None:
        self._fs = fs
        self._inner = inner
        self.path = inner.path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pwrite(self, data: bytes | memoryview, offset: int) -> int:
        fs = self._fs
        fs.pwrites += 1
        if fs.pwrites != fs.stop_at:
            return self._inner.pwrite(data, offset)
        if fs.frac == "sync":
            fs.armed = True
            return self._inner.pwrite(data, offset)
        cut = {"0": 0, "0.5": len(data) // 2, "1": len(data)}[fs.frac]
        if cut:
            self._inner.pwrite(bytes(data[:cut]), offset)
        fs.wait_here(f"pwrite-{fs.frac}", self.path)
        raise AssertionError("unreachable: the parent kills the child at the barrier")

    def fdatasync(self) -> None:
        self._inner.fdatasync()
        if self._fs.armed:
            self._fs.wait_here("after-fdatasync", self.path)


class BarrierFs(OsFileSystem):
    def __init__(self, stop_at: int, frac: str) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.frac = frac
        self.pwrites = 0
        self.armed = False

    def open_write(self, path: str, create: bool) -> File:
        return BarrierFile(self, super().open_write(path, create))

    def wait_here(self, kind: str, path: str) -> None:
        which = "index" if os.sep + "ci." in path else "transcript"
        say(f"barrier {which}:{kind} {path}")
        while True:
            signal.pause()


async def main(root: str, stop_at: int, frac: str, round_: int, out_fd: int = 1) -> None:
    from journal.adapters.claude_agent_sdk import JournalSessionStore

    OUT_FD[0] = out_fd
    rng = random.Random(round_)
    async with JournalSessionStore(root) as store:
        stored: Any = await store.load(KEY) or []
        batch = max((e["batch"] for e in stored), default=-1) + 1
    store = JournalSessionStore(root, fs=BarrierFs(stop_at, frac))
    while True:
        n = rng.randint(1, 6)
        entries: Any = [{"type": "user", "uuid": f"b{batch}-{i}", "batch": batch, "i": i, "of": n,
                    "message": {"role": "user", "content": "x" * rng.randint(0, 3000)}} for i in range(n)]
        await store.append(KEY, entries)
        say(f"acked {batch}")
        batch += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
