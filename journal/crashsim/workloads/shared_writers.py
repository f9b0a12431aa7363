"""shared-writers: two shared-mode handles taking turns on one journal (journal/engine/shared.py).

Each batch takes the lock, catches up with the other handle's records (across roll-overs, which
the small segments force), appends and syncs as asked; some records are tried on both handles
under one idempotency key, so the second is a duplicate found through the catch-up. A power
loss anywhere must leave what any shared writer acknowledged, with contiguous seqs.
"""

from __future__ import annotations

from journal.crashsim.workloads.core import CRASH_RESERVE_BYTES, Ctx, workload
from journal.outcomes import Committed


@workload("shared-writers", segment_size_bytes=4096, reserve_bytes=CRASH_RESERVE_BYTES)
def shared_writers(ctx: Ctx) -> None:
    a = ctx.open(writer="shared")
    b = ctx.open(create=False, writer="shared")
    handles = (a, b)
    for n in range(ctx.rng.randint(6, 12)):
        h = handles[ctx.rng.randrange(2)]
        level = ctx.durability(0.6)
        if n % 4 == 3:
            # The same record offered through both handles: one write, one duplicate.
            event = ctx.payload(ctx.rng.choice((30, 300)))
            key = f"k{ctx.seed}-{n}"
            first = h.append(event, durability=level, idempotency_key=key)
            if isinstance(first, Committed):  # a retry of what was not written would be a new record
                handles[1 - handles.index(h)].append(event, durability="sync", idempotency_key=key)
        elif ctx.rng.random() < 0.3:
            h.append_many([ctx.payload() for _ in range(ctx.rng.randint(2, 4))], durability=level)
        else:
            h.append(ctx.payload(), durability=level)
    a.close()
    b.close()
