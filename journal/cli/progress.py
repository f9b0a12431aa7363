"""A one-line progress bar for long commands: drawn on a terminal, silent when output is piped.

    bar = Progress(sys.stderr, "verify")
    for done, total in work():
        bar(done, total)
    bar.end()

It writes to the stream it is given (the commands pass stderr, so stdout stays clean for
``--json`` and pipes) and only when that stream is a TTY: a script, a CI log or a file never
sees carriage returns. Redraws happen when the whole percent changes, so a bar costs nothing
in a tight loop. The calling convention, ``bar(done, total)`` then ``bar.end()``, is the one the
crash campaign's progress callbacks already use.
"""

from __future__ import annotations

import os
from typing import TextIO

BAR_WIDTH_CHARS = 30
LABEL_WIDTH_CHARS = 12
NO_PROGRESS_ENV = "JOURNAL_NO_PROGRESS"  # set to 1 to silence bars even on a terminal


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):  # a closed or exotic stream
        return False


class Progress:
    """A bar labelled ``label`` on ``out``; ``enabled=None`` means "only on a terminal"."""

    def __init__(self, out: TextIO, label: str, enabled: bool | None = None) -> None:
        self.out = out
        self.label = label
        if enabled is None:
            enabled = _is_tty(out) and os.environ.get(NO_PROGRESS_ENV, "") in ("", "0")
        self.live = enabled
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.live or total <= 0:
            return
        pct = max(0, min(100, done * 100 // total))
        if pct == self.shown:
            return
        self.shown = pct
        fill = BAR_WIDTH_CHARS * pct // 100
        bar = "#" * fill + "." * (BAR_WIDTH_CHARS - fill)
        self.out.write(f"\r{self.label:<{LABEL_WIDTH_CHARS}} [{bar}] {pct:3d}% {done}/{total}")
        self.out.flush()

    def end(self) -> None:
        """Finish the line (only if a bar was drawn)."""
        if self.live and self.shown >= 0:
            self.out.write("\n")
            self.out.flush()
        self.shown = -1

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()
