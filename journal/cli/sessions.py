"""`journal sessions ROOT`: list the sessions of a session store (journal.session.store), or of
one on a server (ROOT a postgresql:// or nats:// store URL: journal.session.catalog_store).

Reads the store's index only (rebuilt from the journals if it is missing or stale; on a server,
its catalog), so listing costs the same with ten sessions or ten thousand. ``--latest`` prints the active session
updated last.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from journal.cli.common import NOT_FOUND, OK, configure_common, emit, fail


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="the session store's root directory, or a server store URL")
    parser.add_argument("--status", choices=("active", "archived"), help="only sessions with this status")
    parser.add_argument("--workspace", metavar="PATH", help="only sessions of this workspace path")
    parser.add_argument("--latest", action="store_true", help="only the active session updated last")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.session.catalog_store import open_store
    from journal.session.store import INDEX_FILE, SESSIONS_DIR

    root = args.root
    remote = "://" in root
    if not remote and not (os.path.isfile(os.path.join(root, INDEX_FILE))
                           or os.path.isdir(os.path.join(root, SESSIONS_DIR))):
        why = f"{root!r} is not a session store (no {INDEX_FILE}, no {SESSIONS_DIR}/)"
        return fail(args, "sessions", NOT_FOUND, why)
    store = open_store(root)
    if args.latest:
        latest = store.latest(workspace=args.workspace)
        infos = [latest] if latest is not None else []
    else:
        infos = store.list(status=args.status, workspace=args.workspace)
    rows: list[dict[str, Any]] = [i.to_json() for i in infos]
    lines = [f"{'session':<24} {'status':<9} {'last seq':>8}  {'updated':<24} workspace"]
    for i in infos:
        parent = f"  (fork of {i.parent} at seq {i.fork_seq})" if i.parent else ""
        lines.append(f"{i.session_id:<24} {i.status:<9} {i.last_seq:>8}  {i.updated or '-':<24} "
                     f"{i.workspace.get('path', '-')}{parent}{'  [open]' if i.open else ''}")
    lines.append(f"{len(infos)} session(s)")
    emit(args, "\n".join(lines), rows)
    return OK
