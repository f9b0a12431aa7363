"""`journal verify URL` and `journal repair URL`: the byte-level check of a journal on a server.

A server journal has no segment files, torn tails or unfinished files: its records are rows or
messages, each the engine's frame, verified by checksum, seq and journal id as they are read
(journal/remote/records.py). So the check is one read-only pass over every record, which
either reads them all (clean) or stops at the first that fails (corrupt: the seq and the
reason; a newer format: newer). Nothing is written and no lock is taken. The report is the
file engine's ``VerifyReport``, with the journal's URL (without password) where a segment's
name would be, so the commands print and exit the same way for both.
"""

from __future__ import annotations

from journal.api import CorruptionError, NewerFormatError, Retention
from journal.engine.salvage import Loss, Progress
from journal.engine.verify import CORRUPT, NEWER, VerifyReport

PROGRESS_EVERY_RECORDS = 4096
CORRUPT_ADVICE = "`journal copy` refuses it too; restore the changed rows or messages from a backup"


def verify_url(url: str, progress: Progress | None = None) -> VerifyReport:
    """Read every record of the journal at ``url``; the verdict (clean, corrupt, newer-format)."""
    import journal

    try:
        j = journal.open(url, readonly=True)
    except NewerFormatError as exc:
        rep = VerifyReport(url, verdict=NEWER)
        rep.notes.append(str(exc))
        return rep
    except CorruptionError as exc:  # an open reads the whole journal on some servers (JetStream)
        rep = VerifyReport(url, verdict=CORRUPT)
        rep.problems.append(Loss(url, exc.offset, 0, exc.reason, exc.seq, exc.seq, True))
        rep.notes.append(CORRUPT_ADVICE)
        return rep
    with j:
        where = getattr(j, "path", url)
        rep = VerifyReport(where, first_seq=j.first_seq if isinstance(j, Retention) else 1)
        total = max(0, j.last_seq - rep.first_seq + 1)
        try:
            for rec in j.read():
                if not rec.is_bytes:
                    rec.event  # noqa: B018 - a JSON record must decode (CorruptionError, below)
                rep.records += 1
                rep.last_seq = rec.seq
                rep.size_bytes += len(rec.payload)
                if progress is not None and rep.records % PROGRESS_EVERY_RECORDS == 0:
                    progress(rep.records, total)
        except NewerFormatError as exc:
            rep.verdict = NEWER
            rep.notes.append(str(exc))
        except CorruptionError as exc:
            rep.verdict = CORRUPT
            rep.problems.append(Loss(where, exc.offset, 0, exc.reason, exc.seq, exc.seq, True))
        if progress is not None:
            progress(rep.records, total)
        rep.notes.append("a journal on a server: its records were read and verified one by one (no segments)")
        if rep.verdict == CORRUPT:
            rep.notes.append(CORRUPT_ADVICE)
    return rep


__all__ = ["verify_url"]
