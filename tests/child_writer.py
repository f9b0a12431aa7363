"""A child process for the process tests: appends through the public API and reports outcomes.

    python -m tests.child_writer PATH MODE [ARGS]

Each outcome is printed (and flushed) only after the append call has returned, so the parent
knows exactly what was acknowledged before it sent SIGKILL. A child that holds the lock keeps it
until the parent writes a line (or closes) on its stdin: the parent decides when, not a timer.
"""

from __future__ import annotations

import sys

import journal


def main() -> int:
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "hold":  # take the writer lock, say so, keep it until told to let go
        with journal.open(path, create=True, lock_timeout_s=float(sys.argv[3]) if len(sys.argv) > 3 else 0.0) as j:
            print(f"locked {j.last_seq}", flush=True)
            sys.stdin.readline()
        return 0
    if mode == "race":  # say "ready", wait for "go", try the lock once; the winner holds it until told
        print("ready", flush=True)
        sys.stdin.readline()
        try:
            with journal.open(path, create=True):
                print("won", flush=True)
                sys.stdin.readline()
        except journal.JournalLockedError as exc:
            print(f"lost {exc.pid}", flush=True)
        return 0
    if mode == "append":  # append forever at the given durability, in batches
        durability = sys.argv[3]
        batch = int(sys.argv[4])
        with journal.open(path, create=True, segment_size_bytes=int(sys.argv[5])) as j:
            i = j.last_seq
            while True:
                outs = j.append_many([{"i": i + k, "pad": "x" * (i % 300)} for k in range(batch)], durability)
                for o in outs:
                    assert isinstance(o, journal.Committed), o
                    print(f"{o.seq}", flush=True)
                i += batch
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
