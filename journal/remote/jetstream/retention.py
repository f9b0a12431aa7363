"""Retention on a stream: seal, and drop_prefix (whole messages, the metadata first).
"""

from __future__ import annotations

import bisect

from journal.api import PrefixDrop
from journal.errors import (
    InvalidArgumentError,
    JournalFailStoppedError,
    ReadOnlyError,
)
from journal.remote.jetstream.client import nats
from journal.remote.jetstream.errors import _io_error, _Lost, _Refused
from journal.remote.jetstream.headers import ERR_WRONG_LAST_SEQ
from journal.remote.jetstream.state import _State


class _Retention(_State):
    """seal and drop_prefix."""

    def seal(self) -> None:
        """Nothing to seal on a stream: every batch is a message of its own, and whole messages
        are what drop_prefix deletes, so what is appended after this call (in one append_many:
        one message) outlives a drop of everything before it. Writes what this handle buffered
        (so it does not share the next message) and checks that the handle can write."""
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("seal")
        if self._failed is not None:
            raise JournalFailStoppedError(self._failed)
        self.flush()

    def drop_prefix(self, before_seq: int) -> PrefixDrop:
        """Delete the records before ``before_seq``, whole messages at a time (retention).

        Every message whose records all come before ``before_seq`` and that is followed by
        another message of records goes (never the last one: the writer's expected sequence is
        chained on it); the journal then begins at the first seq of the first message kept. A new
        metadata message naming that seq (and the message's stream sequence) is published first,
        chained on the last one: once it is acknowledged the drop is in effect, and readers skip
        whatever lies below (every handle: a read-only one reads the metadata again at each read,
        follow and point read). Then one STREAM.PURGE deletes the messages below it; a crash or a
        failure before that leaves messages no reader returns, which the next writer's open
        removes. Keys of dropped records are forgotten (a retry of one is written anew).
        ``bytes_dropped`` is not tracked (0). Exclusive writers only.
        """
        if isinstance(before_seq, bool) or not isinstance(before_seq, int) or before_seq < 1:
            raise InvalidArgumentError(f"before_seq must be an int >= 1, not {before_seq!r}")
        self._check_open()
        if self._readonly:
            raise ReadOnlyError("drop_prefix")
        if self._shared:
            raise InvalidArgumentError("drop_prefix needs the journal opened with writer='exclusive' (the other "
                                       "shared writers chain their messages on the ones it would delete)")
        self.flush()
        with self._wmu:  # no batch on the wire meanwhile: the index holds every message
            if self._failed is not None:
                raise JournalFailStoppedError(self._failed)
            with self._mu:
                k = bisect.bisect_right(self._idx_first, before_seq) - 1
                if k <= 0 or self._idx_first[k] <= self._first_seq:
                    return PrefixDrop(self._first_seq)
                first, keep_sseq = int(self._idx_first[k]), int(self._idx_sseq[k])
            meta = {**self._meta, "first_seq": first, "first_sseq": keep_sseq}
            try:
                meta_sseq = self._publish_meta(meta, self._meta_sseq)
            except _Refused as exc:
                why = f"the journal's metadata changed under its writer ({exc.reason}): was it deleted?"
                if exc.err_code in ERR_WRONG_LAST_SEQ:
                    self._fail(why)
                raise _io_error(self._where, f"drop_prefix was refused, nothing was dropped: {why}", exc,
                                doing="dropping a prefix of") from exc
            except (_Lost, nats.errors.Error, OSError) as exc:
                self._fail(f"the ack of a drop_prefix's metadata was lost ({exc})")
                raise _io_error(self._where, "the ack of drop_prefix's metadata message was lost: whether the "
                                "drop is in effect is unknown (reopen the journal and read first_seq)", exc,
                                doing="dropping a prefix of") from exc
            # From here the drop is in effect.
            self._meta, self._meta_sseq = meta, meta_sseq
            self._advance_first(first)
            self._purge_below(keep_sseq)
        return PrefixDrop(first)

    def _purge_below(self, keep_sseq: int) -> None:
        """The deletes of a drop_prefix in effect: the messages below ``keep_sseq``, then the
        metadata messages before the last. A failure leaves them to the next writer's open."""
        try:
            self._purge(self._subject, before_sseq=keep_sseq)
            self._purge(self._meta_subject, keep=1)
        except (_Lost, _Refused):
            pass
