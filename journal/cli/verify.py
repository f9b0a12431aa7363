"""`journal verify PATH`: read-only check of every frame and structure; the exit code is the verdict.

0 clean, 7 torn tail only (`journal repair` cuts it), 3 corrupt (`journal salvage` copies what
is recoverable), 6 newer format. Nothing is written, no lock is taken: it is safe on a live
journal (a frame being written shows as a torn tail). A journal URL (postgresql://, nats://) is
checked by reading and verifying every record (journal/remote/check.py).

When the bytes are sound (clean, or only a torn tail) and the journal holds an agent session
(its first record is a ``session.started`` header), the session layer replays it read-only with
its own checks, the ones `journal repair` and every session reader apply. An event of a newer
schemaVersion, or of a type this version does not declare and its writer did not mark ignorable,
makes them refuse the session, so verify exits 6 (newer format or schema) and says what to do;
any other refusal (an event that is not a session envelope) exits 1. The structures a repair
would close (open tool calls, turns, ...) are listed as notes: they do not change the exit code,
since a live session always has an open turn. The engine's byte-level verdict is not changed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from journal.cli.common import (
    DAMAGED,
    ERROR,
    NEWER_FORMAT,
    OK,
    TORN,
    configure_common,
    emit,
    is_session,
    open_journal,
)

# The session verdicts (``session.verdict`` in --json; None when the journal is not a session).
SESSION_CLEAN = "clean"  # replay passes; open structures are notes
SESSION_NEWER_SCHEMA = "newer-schema"  # an event's schemaVersion is newer than this reader's
SESSION_UNKNOWN_TYPE = "unknown-type"  # an event type this version does not declare, not ignorable
SESSION_REFUSED = "refused"  # any other refusal of the session layer (not a session envelope ...)
SESSION_EXIT = {SESSION_CLEAN: OK, SESSION_NEWER_SCHEMA: NEWER_FORMAT, SESSION_UNKNOWN_TYPE: NEWER_FORMAT,
                SESSION_REFUSED: ERROR}
SESSION_ADVICE = {
    SESSION_NEWER_SCHEMA: "until then `journal repair` and every session reader refuse this session; its bytes "
                          "are sound (the verdict above)",
    SESSION_UNKNOWN_TYPE: "verify knows the built-in event types only: check the session with the runtime that "
                          "registers this type (journal.session.open(path, readonly=True, registry=...)), or "
                          "upgrade the journal package if it is a newer built-in type; until then `journal "
                          "repair` and every session reader refuse this session",
    SESSION_REFUSED: "`journal repair` and every session reader refuse it; `journal cat` shows the record, "
                     "`journal salvage` copies the journal's records into a new one",
}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory, or a journal URL (every record read and verified)")
    parser.add_argument("--no-session", action="store_true", help="skip the session-structure check")
    configure_common(parser)


def session_check(path: str) -> dict[str, Any]:
    """The session layer's verdict on the journal at ``path``, read-only (``--json``'s "session").

    Replays the session with the built-in registry and reducer, as a session reader opening it
    would (readonly: nothing is repaired), then plans the closers a repair would append.
    """
    from journal.session import Session
    from journal.session.errors import NewerSchemaError, SessionError, UnknownEventTypeError

    out: dict[str, Any] = {"verdict": None, "openStructures": [], "skipped": None, "error": None, "seq": None}
    with open_journal(path, readonly=True) as j:
        if not is_session(j):
            out["skipped"] = "not a session journal"
            return out
        try:
            s = Session.attach(j)  # replays with the session layer's checks; j stays ours to close
            rep = s.repair(dry_run=True)
        except SessionError as exc:
            kind = (SESSION_NEWER_SCHEMA if isinstance(exc, NewerSchemaError) else
                    SESSION_UNKNOWN_TYPE if isinstance(exc, UnknownEventTypeError) else SESSION_REFUSED)
            out.update(verdict=kind, error=str(exc), seq=getattr(exc, "seq", None))
            return out
    lines = rep.summary().splitlines()
    out.update(verdict=SESSION_CLEAN, openStructures=[ln.strip() for ln in lines if ln.startswith("  seq")])
    return out


def session_summary(check: dict[str, Any]) -> str:
    if check["verdict"] is None:
        return ""
    if check["verdict"] != SESSION_CLEAN:
        return (f"\nsession: {check['verdict'].upper()}: {check['error']}"
                f"\n  {SESSION_ADVICE[check['verdict']]}")
    closers = check["openStructures"]
    human = (f"\nsession: {len(closers)} open structure(s) a repair would close" if closers
             else "\nsession: every structure is closed")
    return human + "".join(f"\n  {c}" for c in closers)


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.engine.verify import CORRUPT, NEWER, verify
    from journal.engine.verify import TORN as V_TORN
    from journal.remote import is_url

    bar = Progress(sys.stderr, "verify")
    if is_url(args.path):
        from journal.remote.check import verify_url

        rep = verify_url(args.path, progress=bar)
    else:
        rep = verify(args.path, progress=bar)
    bar.end()
    data: dict[str, Any] = rep.to_json()
    human = rep.summary()
    session_code = OK
    if not args.no_session and rep.verdict in ("clean", V_TORN):
        check = session_check(args.path)
        data["session"] = check
        human += session_summary(check)
        if check["verdict"] is not None:
            session_code = SESSION_EXIT[check["verdict"]]
    emit(args, human, data)
    if session_code != OK:
        return session_code  # what stops every reader of the session, torn tail or not
    if rep.verdict == CORRUPT:
        return DAMAGED
    if rep.verdict == NEWER:
        return NEWER_FORMAT
    if rep.verdict == V_TORN:
        return TORN
    return OK
