"""What the tests of the crash workloads over optional frameworks share: registering a module's
workloads for one test module only (other tests' runs of every registered workload must not pick
them up), and the first failures of a campaign, for an assertion's message."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from journal.crashsim import campaign
from journal.crashsim.workloads import WORKLOADS


def registered_for_module(register: Callable[[], tuple[str, ...]]) -> Iterator[tuple[str, ...]]:
    """Body of a module-scoped fixture: ``register()``'s names while the module runs, then gone."""
    names = register()
    try:
        yield names
    finally:
        for name in names:
            WORKLOADS.pop(name, None)


def failures(tally: campaign.Tally) -> str:
    return "\n".join(f"seed {f.seed} ({f.saved_to}): {f.violations[:2]}" for f in tally.failures[:3])
