"""The three outcomes of an append, and what a caller must do after each (docs/GUARANTEES.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Durability = Literal["buffered", "flush", "sync"]
DURABILITY_LEVELS: tuple[Durability, ...] = ("buffered", "flush", "sync")
DURABILITY_RANK = {level: rank for rank, level in enumerate(DURABILITY_LEVELS)}


@dataclass(frozen=True)
class Committed:
    """The record is in the journal at ``seq``, at least at level ``durability``.

    ``duplicate`` is True when an idempotency key matched an existing record: nothing new was
    written and ``seq`` is that record's.
    """

    seq: int
    durability: Durability
    duplicate: bool = False
    reason: str = "committed"


@dataclass(frozen=True)
class NotCommitted:
    """Nothing of the record is or will ever be in the journal: it is safe to retry."""

    reason: str
    errno: int | None = None


@dataclass(frozen=True)
class AckLost:
    """The writer cannot know whether the record reached the journal.

    Reopen the journal and call ``resolve(outcome)`` before retrying anything. ``seq`` is the
    seq the record would have; ``digest`` identifies its payload; ``key`` its idempotency key.
    """

    seq: int
    reason: str
    digest: int
    key: str | None = None
    errno: int | None = None


Outcome = Committed | NotCommitted | AckLost
