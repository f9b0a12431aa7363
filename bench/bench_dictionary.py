"""What a trained zstd dictionary would do to the engine's per-record zstd: bytes, and
instructions per record both ways (a lever of issue 16, measured before the format carries it).

    .venv/bin/python bench/bench_dictionary.py                      # sizes, the benchmark's mix
    .venv/bin/python bench/bench_dictionary.py --corpus ../shared/corpus
    .venv/bin/python bench/bench_dictionary.py --callgrind          # and Ir per record

Records are the events as the engine stores them (compact JSON, journal.engine.encoding). The
dictionary (``--dict-kib``, default 64) is trained on the first ``--train-kib`` (default 512) of
them, as a journal would train one on its own first records; it is measured on the records after
those, each compressed alone at the engine's level, as the engine does, and only those of at least
``COMPRESS_MIN_BYTES`` (shorter ones are stored raw either way). Sizes count a 32-byte frame header
per record and, with the dictionary, the dictionary's own bytes once.

``--callgrind`` runs each op (compress, decompress; without and with the dictionary) under
callgrind with zero and with every record and reports the difference per record: set-up and
imports cancel out, and the counts repeat from run to run where times on this machine move ~20%.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # callgrind_ir, beside this script

from callgrind_ir import callgrind_ir  # noqa: E402

HEADER_BYTES = 32
COMPRESS_MIN_BYTES = 256  # below this the engine stores a record raw (encoding.py)


def records(corpus: str | None, count: int) -> list[bytes]:
    from journal.benchmark.events import make_events, real_session_events
    from journal.engine import encoding
    from journal.engine.options import Options

    events = make_events(count) if corpus is None else real_session_events(corpus)
    return [encoding.encode_event(e, None, False, Options(compress=False)).raw for e in events]


def split(raws: list[bytes], train_kib: int) -> tuple[list[bytes], list[bytes]]:
    seen = 0
    for i, r in enumerate(raws):
        if seen >= train_kib * 1024:
            return raws[:i], raws[i:]
        seen += len(r)
    return raws, []


def codecs(dict_path: str | None) -> tuple[object, object]:
    import zstandard

    from journal.engine.encoding import ZSTD_LEVEL

    d = None if dict_path is None else zstandard.ZstdCompressionDict(open(dict_path, "rb").read())
    c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, dict_data=d, write_content_size=False, write_checksum=False,
                                 write_dict_id=False)
    return c, zstandard.ZstdDecompressor(dict_data=d)


def one_run(args: argparse.Namespace) -> None:
    """The set-up, then ``--op`` on ``--ops`` records (the body callgrind counts)."""
    _, test = split(records(args.corpus, args.count), args.train_kib)
    test = [r for r in test if len(r) >= COMPRESS_MIN_BYTES]
    c, d = codecs(args.dict)
    # The same set-up whatever --ops is (every record compressed once), so that it cancels out.
    packed = [c.compress(r) for r in test]  # type: ignore[attr-defined]
    if args.op == "compress":
        for r in test[: args.ops]:
            c.compress(r)  # type: ignore[attr-defined]
    else:
        for x, r in zip(packed[: args.ops], test[: args.ops], strict=True):
            d.decompress(x, max_output_size=len(r))  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None, help="a folder of real session .jsonl files instead of the mix")
    ap.add_argument("--count", type=int, default=4000, help="events of the mix (default 4000)")
    ap.add_argument("--train-kib", type=int, default=512)
    ap.add_argument("--dict-kib", type=int, default=64)
    ap.add_argument("--callgrind", action="store_true", help="also instructions per record, each op")
    ap.add_argument("--op", choices=("compress", "decompress"), help=argparse.SUPPRESS)
    ap.add_argument("--ops", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dict", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.op is not None:
        one_run(args)
        return 0

    import zstandard

    from journal.engine.encoding import ZSTD_LEVEL

    raws = records(args.corpus, args.count)
    train, test = split(raws, args.train_kib)
    big = [r for r in test if len(r) >= COMPRESS_MIN_BYTES]
    if not big:
        print(f"nothing left after the first {args.train_kib} KiB to measure on: lower --train-kib")
        return 1
    trained = zstandard.train_dictionary(args.dict_kib * 1024, train, level=ZSTD_LEVEL)
    jsonl = sum(len(r) + 1 for r in test)
    small = sum(HEADER_BYTES + len(r) for r in test if len(r) < COMPRESS_MIN_BYTES)
    where = "the mix" if args.corpus is None else args.corpus
    print(f"{where}: {len(raws)} records, trained on the first {len(train)} ({args.train_kib} KiB), "
          f"measured on the other {len(test)} ({len(big)} of at least {COMPRESS_MIN_BYTES} B)")
    with tempfile.TemporaryDirectory() as tmp:
        dict_path = os.path.join(tmp, "dict")
        with open(dict_path, "wb") as f:
            f.write(trained.as_bytes())
        for label, path in (("no dictionary", None), (f"a {args.dict_kib} KiB dictionary", dict_path)):
            c, _ = codecs(path)
            stored = sum(HEADER_BYTES + min(len(c.compress(r)), len(r)) for r in big)  # type: ignore[attr-defined]
            extra = len(trained.as_bytes()) if path else 0
            line = f"  {label}: {(small + stored + extra) / jsonl:.3f} of the JSONL"
            if args.callgrind:
                script = os.path.abspath(__file__)
                for op in ("compress", "decompress"):
                    common = ["--op", op, "--count", str(args.count), "--train-kib", str(args.train_kib)]
                    common += ["--corpus", args.corpus] if args.corpus else []
                    common += ["--dict", path] if path else []
                    zero = callgrind_ir(script, [*common, "--ops", "0"], os.path.join(tmp, "cg0"))
                    full = callgrind_ir(script, [*common, "--ops", str(len(big))], os.path.join(tmp, "cg1"))
                    line += f", {op} {(full - zero) / len(big):,.0f} Ir/record"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
