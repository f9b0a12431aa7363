"""`journal copy SRC DST`: every record of a journal into a new one, on any two backends.

SRC and DST are each a journal directory or a server URL (``postgresql://...?journal=NAME``,
``nats://...?journal=NAME``; docs/REMOTE.md). DST must not exist yet. Every record is read
through SRC's verifier (a changed record stops the copy with exit 3 and nothing reported as
copied past it), appended to DST with its payload, idempotency key and synthetic flag, in
batches of COPY_BATCH_RECORDS at "flush", DST synced at the end, then read back and compared
record by record with SRC (payload, key, flags, seq). Progress goes to stderr.

Dictionaries. The records are encoded again at DST, so no frame there names a dictionary DST
lacks: when SRC holds trained zstd dictionaries, DST is opened with the newest of them that
verifies (the highest id), and every record copied is compressed with it (docs/REMOTE.md,
"Dictionaries"). A record SRC compressed with an older one reads back the same.

A copy cut short (an error, Ctrl-C) leaves DST with a prefix of SRC's records: delete it and
copy again (DST must be new, so a half copy is never taken for a whole one by a second run).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from journal.cli.common import DAMAGED, OK, configure_common, emit, open_journal

COPY_BATCH_RECORDS = 512


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", help="the journal to copy: a directory or a server URL")
    parser.add_argument("dst", help="the new journal: a directory or a server URL (must not exist)")
    configure_common(parser)


def run(args: argparse.Namespace) -> int:
    import journal
    from journal.api import Committed, JournalError, JournalNotFoundError, NotAJournalError, Retention
    from journal.remote import is_url

    try:
        journal.open(args.dst, readonly=True).close()
    except (JournalNotFoundError, NotAJournalError):
        pass
    else:
        raise FileExistsError(f"{args.dst} exists; journal copy writes a new journal (delete it or pick another)")
    copied = 0
    with open_journal(args.src, readonly=True) as src:
        total = src.last_seq
        first: int | None = None
        # A journal whose prefix was dropped keeps its seqs: a new journal directory can begin
        # where it does (journal.open's first_seq); a server journal begins at seq 1.
        first_seq = src.first_seq if isinstance(src, Retention) else 1
        if first_seq != 1 and is_url(args.dst):
            raise JournalError(f"{args.src} begins at seq {first_seq} (a prefix was dropped) and a new server "
                               "journal begins at seq 1, so its seqs would not be kept; copy it to a directory")
        begin: dict[str, Any] = {"first_seq": first_seq} if first_seq != 1 else {}
        dictionary = _newest_dictionary(src, args.src)
        if dictionary is not None:
            begin["dictionary"] = dictionary
        with open_journal(args.dst, create=True, **begin) as dst:
            batch: list[Any] = []
            keys: list[str | None] = []
            flags: list[bool] = []

            def write() -> None:
                nonlocal copied
                # A batch is one synthetic value: split where the flag changes.
                start = 0
                while start < len(batch):
                    end = start
                    while end < len(batch) and flags[end] == flags[start]:
                        end += 1
                    outs = dst.append_many(batch[start:end], durability="flush", idempotency_keys=keys[start:end],
                                           synthetic=flags[start])
                    bad = [o for o in outs if not isinstance(o, Committed)]
                    if bad:
                        raise OSError(f"copying to {args.dst} failed: {bad[0]}")
                    copied += end - start
                    start = end
                batch.clear()
                keys.clear()
                flags.clear()
                _progress(copied, total)

            for rec in src.read():
                if first is None:
                    first = rec.seq
                    if first != first_seq:
                        raise JournalError(f"{args.src} begins at seq {first_seq} but its first record is seq "
                                           f"{first}; run `journal verify {args.src}`")
                batch.append(rec.stored())  # byte for byte, whatever its writer was: see StoredPayload
                keys.append(rec.key)
                flags.append(rec.synthetic)
                if len(batch) >= COPY_BATCH_RECORDS:
                    write()
            write()
            dst.sync()
        mismatch = _compare(journal, args.src, args.dst)
    if mismatch is not None:
        emit(args, f"copy differs from its source: {mismatch}", {"copied": copied, "mismatch": mismatch})
        return DAMAGED
    sys.stderr.write("\n" if copied else "")
    emit(args, f"copied {copied} records from {args.src} to {args.dst}, every one read back and compared",
         {"copied": copied, "src": args.src, "dst": args.dst})
    return OK


def _newest_dictionary(src: Any, target: str) -> Any:
    """The newest dictionary of the journal ``src`` (opened from ``target``) that verifies, or
    None: a server journal lists its own, a directory holds them as dict-<id>.zdict files."""
    from journal.remote import is_url

    if is_url(target):
        found: list[Any] = src.dictionaries()
        return found[-1] if found else None
    from journal.engine.dictionary import dictionary_ids, load_dictionary
    from journal.errors import CorruptionError, UnexpectedLinkError
    from journal.fs import OsFileSystem

    fs = OsFileSystem()
    for dict_id in reversed(dictionary_ids(fs, target)):
        try:
            return load_dictionary(fs, target, dict_id)
        except (CorruptionError, UnexpectedLinkError, FileNotFoundError):
            continue  # a record that names it stops the copy with its own error
    return None


def _compare(journal: Any, src_target: str, dst_target: str) -> str | None:
    with open_journal(src_target, readonly=True) as a, open_journal(dst_target, readonly=True) as b:
        left, right = a.read(), b.read()
        for ra in left:
            rb = next(right, None)
            if rb is None:
                return f"the copy ends before seq {ra.seq}"
            if (ra.seq, ra.payload, ra.key, ra.synthetic, ra.is_bytes) != (rb.seq, rb.payload, rb.key, rb.synthetic,
                                                                           rb.is_bytes):
                return f"seq {ra.seq} differs"
        extra = next(right, None)
        if extra is not None:
            return f"the copy holds seq {extra.seq}, which the source does not"
    return None


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"\rcopied {done} of {total} records")
        sys.stderr.flush()
