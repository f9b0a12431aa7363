"""The bytes of a record on a server: the file engine's frame, whole (docs/FORMAT.md, "Frame").

A row's ``frame`` column, or a message's body, is exactly the frame the file engine would write
for the record: the 32-byte header (seq, flags, lengths, XXH64 checksum) and the stored payload
(JSON or bytes, zstd when it pays, the idempotency key in front). The checksum is seeded with
the journal's salt, derived from a random 16-byte id the journal gets when it is created and
keeps on the server, so a frame that changed (bit rot, a hand edit), that belongs to another
journal (a bad restore) or that sits at another seq is told apart from a genuine one, and is
reported as corruption with the journal, the seq and the reason: never served, never skipped.

One encoding, one verifier: the engine's ``encode_event``, ``encode_frame``, ``verify_frame``
and ``decode_payload``, so a journal copied between backends keeps its bytes.
"""

from __future__ import annotations

import secrets
from typing import Final

from journal.engine import format as fmt
from journal.engine.dictionary import DictionaryCache
from journal.engine.encoding import Encoded
from journal.engine.reader import decode_payload
from journal.errors import CorruptionError
from journal.record import Record

JOURNAL_ID_BYTES: Final = 16


def new_journal_id() -> bytes:
    return secrets.token_bytes(JOURNAL_ID_BYTES)


def salt_of(journal_id: bytes) -> int:
    """A journal's checksum seed (the file engine's salt of segment 0 at seq 1)."""
    return fmt.segment_salt(journal_id, 0, 1)


def frame_of(enc: Encoded, seq: int, salt: int) -> bytes:
    """The frame that stores ``enc`` at ``seq`` in the journal whose salt is ``salt``."""
    return fmt.encode_frame(seq, enc.spec.flags, enc.spec.raw_len, enc.spec.stored, salt, enc.spec.dict_id)


def record_of(
    frame: bytes | memoryview,
    seq: int,
    salt: int,
    where: str,
    record_size_bytes_max: int,
    dicts: DictionaryCache | None = None,
) -> Record:
    """The record a stored frame holds, once it is verified to be ``seq`` of this journal.

    ``where`` names the journal in errors (its URL without a password); ``dicts``: the journal's
    dictionaries (journal/remote/dictionaries.py), for a frame that names one (every handle
    passes its own; without, such a frame is CorruptionError). Raises CorruptionError
    (NewerFormatError-like frames too: a flag this version does not know is refused, not read).
    """
    got = fmt.verify_frame(frame, 0, salt)
    if got is None:
        raise CorruptionError(where, 0, seq, "the stored frame fails its checksum (changed bytes, or a frame of "
                                             "another journal)")
    if got.end != len(frame):
        raise CorruptionError(where, 0, seq, f"the stored frame is {len(frame)} bytes, its header says {got.end}")
    if got.seq != seq:
        raise CorruptionError(where, 0, seq, f"the stored frame carries seq {got.seq}")
    if not got.supported or got.kind != fmt.KIND_DATA:
        raise CorruptionError(where, 0, seq, f"the stored frame has flags {got.flags:#x} this version cannot read "
                                             "(written by a newer format?)")
    frame_view = fmt.Frame(0, got.seq, got.flags, got.raw_len, got.stored_len)
    return decode_payload(frame_view, frame, 0, where, record_size_bytes_max, dicts)


def digest_of(enc: Encoded) -> int:
    """The digest an AckLost carries and resolve() compares (the engine's)."""
    return enc.digest
