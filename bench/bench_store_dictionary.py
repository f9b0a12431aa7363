"""What a store's dictionary saves on disk: real session logs imported into a session store with a
dictionary trained on other logs, against the same logs imported with none (issue 33).

    .venv/bin/python bench/bench_store_dictionary.py --corpus ../shared/corpus [--size-bytes N]

The corpus's JSONL files are split in two halves of about equal bytes (largest first, each to the
lighter half), and each half trains once while the other is measured. The training half is
imported into a store (``journal import``'s code, then put under the store's ``sessions/``) and
``train_store_dictionary`` trains the store's dictionary. The other half is imported into that
store with the dictionary (each import's new journal opened with ``dictionary=``, as the store
opens its sessions for writing), and into a fresh store without one. Bytes on disk are the files
under each store's ``sessions/`` and ``dictionaries/`` counted once per inode (a journal's
dictionary is a hard link to the store's file), apparent (st_size) and allocated (st_blocks); both
against the JSONL files' own bytes. Only the measured half's sessions are counted on the
dictionary side (the training half's are subtracted by inode); the dictionary file is counted
once, and the figures are given with and without it (it is paid once per store). "One record per
append" writes the measured sessions' records again one append at "sync" each (a live session's
frames, none sharing a block), with the dictionary and without.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

FORMAT_OF_DIR = {"claude-code": "claude", "codex-rollout": "codex", "pi-session": "pi"}


def jsonl_files(corpus: str) -> list[tuple[str, str]]:
    out = []
    for d in sorted(os.listdir(corpus)):
        if d in FORMAT_OF_DIR:
            for n in sorted(os.listdir(os.path.join(corpus, d))):
                if n.endswith(".jsonl"):
                    out.append((FORMAT_OF_DIR[d], os.path.join(corpus, d, n)))
    return out


@contextmanager
def with_dictionary(d: Any) -> Iterator[None]:
    """Every journal created meanwhile (the importer's) is opened with ``dictionary=d``."""
    import journal

    real = journal.open

    def opening(target: Any, create: bool = False, readonly: bool = False, **options: Any) -> Any:
        if create and not readonly and d is not None:
            options.setdefault("dictionary", d)
        return real(target, create=create, readonly=readonly, **options)

    journal.open = opening
    try:
        yield
    finally:
        journal.open = real


def import_into(store: Any, files: list[tuple[str, str]], dictionary: Any = None) -> list[str]:
    """Import each file into ``store`` as a session of its own; the sessions' ids."""
    from journal.session.importers import import_file

    ids = []
    for n, (fmt, path) in enumerate(files):
        tmp = os.path.join(store.root, "sessions", f".import-{n}")
        with with_dictionary(dictionary):
            import_file(fmt, path, tmp, split_joined=True)
        # The store lists a session by its directory's name; two logs may hold one session (turn-1
        # and turn-2 of the corpus), so each import gets a name of its own.
        sid = f"import-{os.path.basename(store.root)}-{len(os.listdir(os.path.join(store.root, 'sessions')))}"
        os.mkdir(os.path.join(store.root, "sessions", sid))
        os.rename(tmp, os.path.join(store.root, "sessions", sid, "journal"))
        ids.append(sid)
    return ids


def inodes(paths: list[str]) -> dict[tuple[int, int], tuple[int, int]]:
    """(dev, ino) -> (st_size, allocated bytes) of every file under ``paths``."""
    out = {}
    for top in paths:
        for d, _, names in os.walk(top):
            for n in names:
                st = os.lstat(os.path.join(d, n))
                out[(st.st_dev, st.st_ino)] = (st.st_size, st.st_blocks * 512)
    return out


def fold(
    train: list[tuple[str, str]], measure: list[tuple[str, str]], size_bytes: int, sessions_min: int, work: str
) -> dict[str, Any]:
    from journal.session.dictionaries import current_dictionary, train_store_dictionary
    from journal.session.store import SessionStore

    with_d = SessionStore(os.path.join(work, "with"))
    trained_ids = import_into(with_d, train)
    rep = train_store_dictionary(with_d, size_bytes=size_bytes, sessions_min=sessions_min)
    before = inodes([os.path.join(with_d.root, "sessions", s) for s in trained_ids])
    d = current_dictionary(with_d)
    measured = import_into(with_d, measure, d)
    dict_side = inodes(
        [os.path.join(with_d.root, "sessions", s) for s in measured] + [os.path.join(with_d.root, "dictionaries")]
    )
    dict_side = {k: v for k, v in dict_side.items() if k not in before or k[1] == _ino(d)}
    plain = SessionStore(os.path.join(work, "plain"))
    plain_ids = import_into(plain, measure)
    plain_side = inodes([os.path.join(plain.root, "sessions", s) for s in plain_ids])
    src = sum(os.path.getsize(p) for _, p in measure)
    live_plain = one_by_one(plain, plain_ids, None, work)
    live_dict = one_by_one(plain, plain_ids, d, work)
    return {
        "train": [os.path.basename(p) for _, p in train],
        "measure": [os.path.basename(p) for _, p in measure],
        "stored": rep.stored,
        "savings_held_out": rep.savings,
        "dictionary_bytes": rep.size_bytes,
        "jsonl_bytes": src,
        "plain_bytes": sum(v[0] for v in plain_side.values()),
        "plain_alloc": sum(v[1] for v in plain_side.values()),
        "dict_bytes": sum(v[0] for v in dict_side.values()),
        "dict_alloc": sum(v[1] for v in dict_side.values()),
        "live_plain": live_plain[0],
        "live_dict": live_dict[0],
        "dict_file_bytes": os.lstat(d.path).st_size if d is not None and d.path else 0,
    }


def _ino(d: Any) -> int:
    return os.lstat(d.path).st_ino if d is not None and d.path else -1


def one_by_one(store: Any, ids: list[str], dictionary: Any, work: str) -> tuple[int, int]:
    """(bytes, allocated) of the sessions ``ids`` of ``store`` written again one record per append
    at "sync" (a live session's frames: no record shares a block), with ``dictionary`` or none."""
    import journal

    sizes: dict[tuple[int, int], tuple[int, int]] = {}
    for sid in ids:
        dest = os.path.join(work, f"{sid}-{'d' if dictionary is not None else 'p'}")
        opts = {"dictionary": dictionary} if dictionary is not None else {}
        with (
            journal.open(os.path.join(store.root, "sessions", sid, "journal"), readonly=True) as src,
            journal.open(dest, create=True, **opts) as j,
        ):
            for rec in src.read():
                j.append(rec.payload if rec.is_bytes else rec.event, durability="sync")
        sizes.update(inodes([dest]))
    if dictionary is not None:
        sizes.update(inodes([os.path.dirname(dictionary.path)]))
    return sum(v[0] for v in sizes.values()), sum(v[1] for v in sizes.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "corpus"))
    ap.add_argument("--size-bytes", type=int, default=4 * 1024)
    ap.add_argument(
        "--sessions-min",
        type=int,
        default=1,
        help="the training's minimum of sessions (the store's default is 2; one log may be one half)",
    )
    args = ap.parse_args()
    from journal.session.dictionaries import NotEnoughRecordsError

    files = jsonl_files(args.corpus)
    if len(files) < 4:
        print(f"need at least 4 JSONL files under {args.corpus}", file=sys.stderr)
        return 1
    halves: tuple[list[tuple[str, str]], list[tuple[str, str]]] = ([], [])
    for f in sorted(files, key=lambda f: -os.path.getsize(f[1])):
        lighter = min(halves, key=lambda h: sum(os.path.getsize(p) for _, p in h))
        lighter.append(f)
    print(
        f"{len(files)} JSONL files, {sum(os.path.getsize(p) for _, p in files)} bytes; dictionary "
        f"{args.size_bytes} bytes"
    )
    totals = {"jsonl": 0, "plain": 0, "dict": 0, "plain_alloc": 0, "dict_alloc": 0, "live_plain": 0, "live_dict": 0}
    for n, (train, measure) in enumerate((halves, halves[::-1])):
        work = tempfile.mkdtemp(prefix="bench-store-dict-")
        try:
            r = fold(train, measure, args.size_bytes, args.sessions_min, work)
        except NotEnoughRecordsError as exc:
            print(f"fold {n + 1}: trained on {[os.path.basename(p) for _, p in train]}: {exc}")
            continue
        finally:
            shutil.rmtree(work)
        print(
            f"fold {n + 1}: trained on {r['train']}, stored={r['stored']} (held-out savings "
            f"{r['savings_held_out']:.1%}, {r['dictionary_bytes']} bytes); measured on {r['measure']}"
        )
        print(
            f"  JSONL {r['jsonl_bytes']:>9}  no dictionary {r['plain_bytes']:>9} "
            f"({r['plain_bytes'] / r['jsonl_bytes']:.3f})"
            f"  dictionary {r['dict_bytes']:>9} ({r['dict_bytes'] / r['jsonl_bytes']:.3f})"
            f"  dictionary/none {r['dict_bytes'] / r['plain_bytes']:.3f}"
        )
        nd = r["dict_bytes"] - r["dict_file_bytes"]
        print(
            f"  without the dictionary file ({r['dict_file_bytes']} bytes, once per store): {nd:>9} "
            f"({nd / r['jsonl_bytes']:.3f})  dictionary/none {nd / r['plain_bytes']:.3f}"
        )
        print(
            f"  one record per append: no dictionary {r['live_plain']:>9} ({r['live_plain'] / r['jsonl_bytes']:.3f})"
            f"  dictionary {r['live_dict']:>9} ({r['live_dict'] / r['jsonl_bytes']:.3f})  dictionary/none "
            f"{r['live_dict'] / r['live_plain']:.3f}, without its file "
            f"{(r['live_dict'] - r['dict_file_bytes']) / r['live_plain']:.3f}"
        )
        print(
            f"  allocated:        no dictionary {r['plain_alloc']:>9}  dictionary {r['dict_alloc']:>9}"
            f"  dictionary/none {r['dict_alloc'] / r['plain_alloc']:.3f}"
        )
        totals["jsonl"] += r["jsonl_bytes"]
        totals["live_plain"] += r["live_plain"]
        totals["live_dict"] += r["live_dict"]
        for k in ("plain", "dict"):
            totals[k] += r[f"{k}_bytes"]
            totals[f"{k}_alloc"] += r[f"{k}_alloc"]
    print(
        f"both folds: JSONL {totals['jsonl']}, no dictionary {totals['plain']} "
        f"({totals['plain'] / totals['jsonl']:.3f}), dictionary {totals['dict']} "
        f"({totals['dict'] / totals['jsonl']:.3f}); "
        f"dictionary/none {totals['dict'] / totals['plain']:.3f} apparent, "
        f"{totals['dict_alloc'] / totals['plain_alloc']:.3f} allocated; one record per append: "
        f"{totals['live_dict'] / totals['live_plain']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
