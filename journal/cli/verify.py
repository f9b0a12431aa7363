"""`journal verify PATH`: read-only check of every frame and structure; the exit code is the verdict.

0 clean, 7 torn tail only (`journal repair` cuts it), 3 corrupt (`journal salvage` copies what
is recoverable), 6 newer format. Nothing is written, no lock is taken: it is safe on a live
journal (a frame being written shows as a torn tail). When the journal holds an agent session,
the structures a repair would close (open tool calls, turns, ...) are listed as well; they do
not change the exit code, since a live session always has an open turn.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from journal.cli.common import DAMAGED, NEWER_FORMAT, OK, TORN, configure_common, emit


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory")
    parser.add_argument("--no-session", action="store_true", help="skip the session-structure check")
    configure_common(parser)


def session_plan(path: str) -> tuple[list[str], str | None]:
    """Closers a structural repair would append (dry run on a read-only open), or why none apply."""
    import journal
    from journal.session import Registry, repair
    from journal.session.errors import SessionError

    with journal.open(path, readonly=True) as j:
        first = next(iter(j.read()), None)
        if first is None or first.is_bytes or not isinstance(first.event, dict) or \
                first.event.get("type") != "session.started":
            return [], "not a session journal"
        try:
            rep = repair(j, Registry(), dry_run=True)
        except SessionError as exc:
            return [], f"session check skipped: {exc}"
    lines = rep.summary().splitlines()
    return [ln.strip() for ln in lines if ln.startswith("  seq")], None


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.engine.verify import CORRUPT, NEWER, verify
    from journal.engine.verify import TORN as V_TORN

    bar = Progress(sys.stderr, "verify")
    rep = verify(args.path, progress=bar)
    bar.end()
    data: dict[str, Any] = rep.to_json()
    human = rep.summary()
    if not args.no_session and rep.verdict in ("clean", V_TORN):
        closers, why = session_plan(args.path)
        data["session"] = {"openStructures": closers, "skipped": why}
        if why is None:
            human += (f"\nsession: {len(closers)} open structure(s) a repair would close" if closers
                      else "\nsession: every structure is closed")
            human += "".join(f"\n  {c}" for c in closers)
    emit(args, human, data)
    if rep.verdict == CORRUPT:
        return DAMAGED
    if rep.verdict == NEWER:
        return NEWER_FORMAT
    if rep.verdict == V_TORN:
        return TORN
    return OK
