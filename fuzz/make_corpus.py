"""Write seed inputs for fuzz/fuzz_scan.c, made by the pure-Python encoder.

    python fuzz/make_corpus.py DIR

Each input is: salt u64 | expected seq u64 | start u16 | mode u8 | arg u8 | body (the layout
fuzz_scan.c reads). Raw-mode seeds hold genuine frames (clean, torn, zero-filled, sealed,
padded, with a bad seq, with unknown flags) so that mutations start from deep inside the
scanner instead of at the marker check; structured-mode seeds drive the encoder.
"""

from __future__ import annotations

import os
import random
import struct
import sys

import xxhash

from journal.engine import format as fmt

PARAMS = struct.Struct("<QQHBB")


def _frame(seq: int, flags: int, stored: bytes, salt: int, dict_id: int = 0) -> bytes:
    tail = struct.pack("<IIQHHI", len(stored), len(stored), seq, flags, dict_id, fmt.FRAME_MARKER) + stored
    return struct.pack("<Q", xxhash.xxh64_intdigest(tail, seed=salt)) + tail


def _block(after_seq: int, lengths: list[int], salt: int) -> bytes:
    """A genuine raw block frame of records of the given lengths after seq ``after_seq``."""
    stored = fmt.encode_block_head(lengths, [0] * len(lengths)) + bytes(sum(lengths))
    return fmt.encode_frame(after_seq + len(lengths), fmt.KIND_BLOCK, sum(lengths), stored, salt)


def seeds() -> dict[str, bytes]:
    rng = random.Random(7)
    salt, base = 0x5EED5A17, 100
    specs = [fmt.FrameSpec(fmt.FLAG_BYTES, n, rng.randbytes(n)) for n in (0, 1, 7, 31, 64, 200)]
    batch = fmt.py_encode_batch(base, specs, salt, commit_last=True)
    last = base + len(specs) - 1
    seal = fmt.encode_frame(last, fmt.KIND_SEAL, 16, b"\x00" * 16, salt)
    padding = _frame(last, fmt.KIND_PADDING, b"\x00" * 8, salt)
    bodies = {
        "clean": batch,
        "sealed": batch + seal,
        "padded": batch + padding + fmt.py_encode_batch(last + 1, specs[:2], salt, commit_last=False),
        "torn": batch[: len(batch) - 5],
        "zero_tail": batch + bytes(100),
        "short_zero_tail": batch + bytes(7),
        "bad_seq": batch + fmt.py_encode_batch(last + 3, specs[:1], salt, commit_last=True),
        "unknown_flags": batch + _frame(last + 1, 0x0100, b"new", salt),
        "dict_id": batch + _frame(last + 1, 0, b"dict", salt, dict_id=3),
        "damage_then_commit": batch[:40] + b"\xff" + batch[41:],
        # Block frames (format version 2): a good one, then a gap, a count out of range, a cut table.
        "block": batch + _block(last, [3, 0, 9], salt),
        "block_seq_gap": batch + _block(last + 2, [1, 1], salt),
        "block_bad_count": batch + _frame(last + 2, fmt.KIND_BLOCK, struct.pack("<I", 1) + bytes(9), salt),
        "block_cut_table": batch + _frame(last + 3, fmt.KIND_BLOCK, struct.pack("<I", 3) + bytes(8), salt),
    }
    out = {f"raw_{name}": PARAMS.pack(salt, base, 0, 0, 0) + body for name, body in bodies.items()}
    for arg in range(0, 256, 37):
        body = rng.randbytes(rng.randrange(8, 200))
        out[f"structured_{arg}"] = (
            PARAMS.pack(rng.getrandbits(64), rng.getrandbits(40), rng.getrandbits(16), 1, arg) + body
        )
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    os.makedirs(argv[1], exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(argv[1], name), "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
