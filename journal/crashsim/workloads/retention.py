"""retention: seal, append what must stay, drop the prefix before it (Journal.drop_prefix).

What LangGraph's prune and a session's compaction do: the live segment is sealed, the records
to keep are appended again (they land in a new segment), and every segment before them is
dropped, the start marker made durable before any unlink. Between the drops, more records at
mixed durability and the odd roll-over. A power loss anywhere must leave every acknowledged
record at or after where the journal begins; it begins at 1 or where a drop that had started
made it begin, never earlier than a drop that had returned (the checker's invariant 3); and the
next writer's open removes what a cut-short drop left.
"""

from __future__ import annotations

from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, Ctx, workload
from journal.outcomes import Committed


@workload("retention", segment_size_bytes=4096, reserve_bytes=CRASH_RESERVE_BYTES)
def retention(ctx: Ctx) -> None:
    j = ctx.open()
    for _ in range(ctx.rng.randint(2, 3)):
        for _ in range(ctx.rng.randint(3, 7)):
            j.append(ctx.payload(ctx.rng.choice((100, 400, 900))), durability=ctx.durability(0.6))
        if ctx.rng.random() < 0.75:
            j.seal()
            kept = j.append(ctx.payload(200), durability="sync")
            if isinstance(kept, Committed):
                j.drop_prefix(kept.seq)
        else:
            # A drop that reaches into the live segment: only whole sealed segments go.
            j.drop_prefix(j.last_seq)
    j.append(ctx.payload(), durability="sync")
    j.close()
