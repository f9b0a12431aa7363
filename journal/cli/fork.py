"""`journal fork PARENT CHILD`: fork a session at a clean boundary into a new session journal.

The child gets the parent's records up to the fork seq, with the same seqs, then its own
``session.started`` header naming its parent (lineage). The parent is not touched. A seq inside
a tool call, a compaction or an open turn is refused with the nearest clean points; ``--points``
lists them all. With ``--store ROOT``, PARENT is a session id of that store and the child is
created in the store (CHILD, if given, is its id); ROOT may be a server store URL, where the
prefix is copied on the server.
"""

from __future__ import annotations

import argparse
from typing import Any

from journal.cli.common import OK, configure_common, emit, int_at_least, record_size_limit


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parent", help="the parent session's journal directory (a session id with --store)")
    parser.add_argument("child", nargs="?", help="the new journal directory (with --store: the new session id)")
    parser.add_argument("--at-seq", type=int_at_least(1), metavar="N",
                        help="fork after this seq (default: the last clean point)")
    parser.add_argument("--origin", default="user", help="why the fork is made: user, subagent, eval (default user)")
    parser.add_argument("--store", metavar="ROOT",
                        help="PARENT and CHILD are ids in this session store (a directory or a server URL)")
    parser.add_argument("--points", action="store_true", help="list the clean fork points and exit")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    from journal.session.catalog_store import open_store
    from journal.session.fork import fork, fork_points

    store = open_store(args.store) if args.store else None
    parent_path = store.journal_path(args.parent) if store is not None else args.parent
    if args.points:
        points = fork_points(parent_path, record_size_bytes_max=record_size_limit())
        rows: Any = [{"seq": p.seq, "lastSeq": p.last_seq, "kind": p.kind, "messageSeq": p.message_seq,
                      "preview": p.preview} for p in points]
        emit(args, "\n".join([f"{len(points)} clean fork point(s):", *(f"  {p.describe()}" for p in points)]), rows)
        return OK
    if store is not None:
        got = store.fork(args.parent, at_seq=args.at_seq, session_id=args.child, origin=args.origin)
    else:
        if not args.child:
            raise ValueError("give the new journal directory CHILD (or use --store ROOT)")
        got = fork(parent_path, args.child, args.at_seq, origin=args.origin, record_size_bytes_max=record_size_limit())
    data = {"path": got.path, "sessionId": got.session_id, "parentSessionId": got.parent_session_id,
            "forkSeq": got.fork_seq, "depth": got.depth, "origin": got.origin, "headerSeq": got.header_seq}
    emit(args, f"forked session {got.parent_session_id} after seq {got.fork_seq} into {got.session_id} at "
         f"{got.path} (depth {got.depth}, header at seq {got.header_seq}); the parent is unchanged", data)
    return OK
