"""`journal repair PATH`: byte-level recovery, then (for a session) structural repair.

Byte level: open the journal for writing, which runs recovery: a torn tail after the last
durable point is copied into ``quarantine/`` and cut; an unfinished segment file is removed.
Corruption of committed data is refused (exit 3): that is `journal salvage`'s job. A journal
written by a newer format is left as it is (exit 6): upgrade the journal package.
Structural (session journals): the session layer appends its deterministic synthetic closers
for every dangling tool call, approval, attempt, compaction, job, step and turn.
``--dry-run`` changes nothing and prints what each level would do. On a journal URL the byte
level is a writer's open on the server (a fence after a writer that did not close, the removal
of what a cut-short delete, copy or drop left), after every record was read and verified.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from journal.cli.common import DAMAGED, ERROR, NEWER_FORMAT, OK, configure_common, emit, is_session, open_journal


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the journal directory, or a journal URL")
    parser.add_argument("--dry-run", action="store_true", help="change nothing; say what would be done")
    parser.add_argument("--core-only", action="store_true", help="byte-level recovery only, no session closers")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.engine.verify import CORRUPT, NEWER, verify
    from journal.remote import is_url
    from journal.session import Registry, repair
    from journal.session.errors import SessionError

    bar = Progress(sys.stderr, "repair")
    if is_url(args.path):  # a server: no torn tail to cut; a writer's open does its recovery
        from journal.remote.check import verify_url

        check = verify_url(args.path, progress=bar)
    else:
        check = verify(args.path, progress=bar)
    bar.end()
    data: dict[str, Any] = {"dryRun": args.dry_run, "verdict": check.verdict, "byteLevel": [], "structural": None}
    lines: list[str] = []
    if check.verdict == NEWER:
        # Not damage: bytes this version cannot read, so it cannot tell what a repair would cut.
        emit(args, check.summary() + "\nrepair changed nothing: upgrade the journal package to repair it", data)
        return NEWER_FORMAT
    if check.verdict == CORRUPT:
        data["problems"] = [p.to_json() for p in check.problems]
        emit(args, check.summary() + "\nrepair refuses to cut committed data; run `journal salvage "
             f"{args.path} NEW_PATH` to copy what is recoverable", data)
        return DAMAGED
    if args.dry_run:
        if check.torn_tail is not None:
            t = check.torn_tail
            kept = "zero bytes only: nothing to keep" if t.reason == "zeros tail" else "keeping them in quarantine/"
            data["byteLevel"].append(
                f"would cut {t.length_bytes} bytes ({t.reason}) at {t.segment} offset {t.offset}, {kept}"
            )
        data["byteLevel"].extend(f"would remove unfinished segment file {n}" for n in check.temp_files)
        j = open_journal(args.path, readonly=True)
    else:
        j = open_journal(args.path)
        data["byteLevel"] = list(j.recovery.actions)
        data["quarantined"] = list(j.recovery.quarantined)
    try:
        lines.extend(f"byte-level: {a}" for a in data["byteLevel"] or ["nothing to do"])
        if not args.core_only and is_session(j):
            try:
                rep = repair(j, Registry(), dry_run=args.dry_run)
            except SessionError as exc:
                lines.append(f"structural: not done: {exc}")
                data["structural"] = {"error": str(exc)}
                emit(args, "\n".join(lines), data)
                return ERROR
            closers = [ln.strip() for ln in rep.summary().splitlines() if ln.startswith("  ")]
            data["structural"] = {"closers": closers, "count": len(rep.closers), "scanned": rep.events_scanned}
            verb = "would append" if args.dry_run else "appended"
            lines.append(f"structural: {verb} {len(rep.closers)} synthetic closer(s) after {rep.events_scanned} events")
            lines.extend(f"  {c}" for c in closers)
        elif not args.core_only:
            lines.append("structural: not a session journal")
    finally:
        j.close()
    emit(args, "\n".join(lines), data)
    return OK
