"""`journal dictionary train|list STORE`: the zstd dictionary of a session store (docs/CLI.md).

``train`` samples the store's records (read-only, bounded memory), trains a dictionary and stores
it as the store's current one only if it pays: measured on held-out frames as the store wrote
them (blocks of records written together, records framed alone), it saves more than its own
file's bytes on the store's records and at least the named share of those frames' stored bytes;
where the size asked for does not pay, smaller ones are tried. It prints the figures and the
reason either way (exit 0: a declined dictionary is an answer, not an error), and exits 1 with
how much more is needed when the store has too few records. Sessions opened for writing afterwards compress their
new frames with it (journal/session/dictionaries.py). ``list`` shows each dictionary file: id,
bytes, digest, how many journal directories link it, the ratio its training measured.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from journal.cli.common import ERROR, NOT_FOUND, OK, configure_common, emit, fail, int_at_least


def configure(parser: argparse.ArgumentParser) -> None:
    from journal.session.dictionaries import DICTIONARY_SIZE_BYTES_DEFAULT, SAMPLE_BYTES_MAX_DEFAULT

    configure_common(parser, json_flag=False)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = sub.add_parser(
        "train",
        help="train the store's dictionary from its records and keep it only if it saves more than its own bytes",
    )
    train.add_argument("store", help="the session store's root directory")
    train.add_argument(
        "--size-bytes",
        type=int_at_least(256),
        default=DICTIONARY_SIZE_BYTES_DEFAULT,
        help=(
            f"the dictionary's size (default {DICTIONARY_SIZE_BYTES_DEFAULT}); smaller ones are tried where it "
            "does not pay"
        ),
    )
    train.add_argument(
        "--sample-bytes-max",
        type=int_at_least(1),
        default=SAMPLE_BYTES_MAX_DEFAULT,
        help=f"the most bytes of records sampled (default {SAMPLE_BYTES_MAX_DEFAULT})",
    )
    configure_common(train)
    lst = sub.add_parser("list", help="the store's dictionaries: id, bytes, digest, journals linking it, ratio")
    lst.add_argument("store", help="the session store's root directory")
    configure_common(lst)


def _store(args: argparse.Namespace) -> Any:
    from journal.session.store import INDEX_FILE, SESSIONS_DIR, SessionStore

    root = args.store
    if not (os.path.isfile(os.path.join(root, INDEX_FILE)) or os.path.isdir(os.path.join(root, SESSIONS_DIR))):
        return None
    return SessionStore(root)


def run(args: argparse.Namespace) -> int:
    from journal.cli.progress import Progress
    from journal.session.dictionaries import NotEnoughRecordsError, list_dictionaries, train_store_dictionary

    command = f"dictionary {args.action}"
    store = _store(args)
    if store is None:
        return fail(args, command, NOT_FOUND, f"{args.store!r} is not a session store (no index.json, no sessions/)")
    if args.action == "train":
        bar = Progress(sys.stderr, "train")
        try:
            rep = train_store_dictionary(
                store, size_bytes=args.size_bytes, sample_bytes_max=args.sample_bytes_max, progress=bar
            )
        except NotEnoughRecordsError as exc:
            bar.end()
            return fail(
                args,
                command,
                ERROR,
                str(exc),
                errorType=type(exc).__name__,
                haveBytes=exc.have_bytes,
                needBytes=exc.need_bytes,
                haveSessions=exc.have_sessions,
                needSessions=exc.need_sessions,
            )
        finally:
            bar.end()
        emit(args, rep.summary(), rep.to_json())
        return OK
    rows = []
    lines = [f"{'id':>5} {'bytes':>8}  {'digest':<32} {'linked':>6} {'ratio':>6}  note"]
    for d in list_dictionaries(store):
        linked = _links(d.path) if d.problem is None else None
        stats = d.stats or {}
        ratio = stats.get("ratio")
        ratio = ratio if type(ratio) in (int, float) else None
        rows.append({**d.to_json(), "journalsLinking": linked, "ratio": ratio})
        note = ("current" if d.current else "") + (f" cannot be used: {d.problem}" if d.problem else "")
        lines.append(
            f"{d.id:>5} {d.size_bytes if d.size_bytes is not None else '-':>8}  {d.digest or '-':<32} "
            f"{linked if linked is not None else '-':>6} {f'{ratio:.2f}' if ratio is not None else '-':>6}  "
            f"{note.strip()}"
        )
    lines.append(f"{len(rows)} dictionar{'y' if len(rows) == 1 else 'ies'}")
    emit(args, "\n".join(lines), rows)
    return OK


def _links(path: str) -> int | None:
    """How many journal directories hold the file by hard link (its link count but the store's
    own name): one stat. A journal that holds a copy (another file system) is not counted."""
    try:
        return os.lstat(path).st_nlink - 1
    except OSError:
        return None
