"""`journal crash-test`: power-loss states, kill -9 rounds and injected I/O errors, with a summary.

Exit status 0 when no invariant broke, 1 otherwise. Failures are saved (``--save-dir``) as JSON
that ``--replay FILE`` checks again; ``--seed`` makes a run repeat.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from typing import TextIO

from journal.cli.common import USAGE, fail, int_at_least
from journal.cli.progress import Progress

MODEL_CHOICES = ("psow", "npsow", "both")
NAME_WIDTH = 17


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--states", type=int_at_least(1), default=2000,
                        help="crash states per workload and model (default 2000)")
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="first seed; run i of a pair uses seed+i (default 0)")
    parser.add_argument(
        "--model",
        choices=MODEL_CHOICES,
        default="both",
        help="psow: sectors not written survive; npsow: no powersafe overwrite (default both)",
    )
    parser.add_argument("--workload", action="append", help="only this workload (repeatable; default all)")
    parser.add_argument("--kill-rounds", type=int_at_least(0), default=50,
                        help="kill -9 rounds of a real writer (default 50; 0 skips them)")
    parser.add_argument("--no-faults", action="store_true", help="skip the injected I/O error sweep")
    parser.add_argument("--runs", type=int_at_least(1),
                        help="at most this many workload runs per pair (with --seed: repeat one)")
    parser.add_argument("--save-dir", default="crash-failures", help="where failing states are saved as JSON")
    parser.add_argument("--replay", metavar="FILE", help="check one saved failure again and exit")
    parser.add_argument("--list", action="store_true", help="list the registered workloads and exit")


def run(args: argparse.Namespace) -> int:
    from journal.crashsim import campaign, faultsweep, killtest

    # The package registers every built-in workload when it is imported (its __init__ imports
    # them all), so --list, --workload and --replay know the same set wherever they run.
    from journal.crashsim.workloads import WORKLOADS, register_on_demand

    out = sys.stdout
    # The framework workloads are not built in (the frameworks are optional, and the default run
    # is the built-in set): listed, replayed or named, those whose framework is installed are
    # registered first.
    if args.list or args.replay:
        register_on_demand()
    elif args.workload:
        register_on_demand(args.workload)
    if args.list:
        for name, wl in WORKLOADS.items():
            out.write(f"{name:<{NAME_WIDTH}} {_summary(name, wl.run)}\n")
        return 0
    if args.replay:
        failure, violations = campaign.replay_failure(args.replay)
        out.write(f"{failure.workload} / {failure.model} / seed {failure.seed} / op {failure.point}\n")
        out.write("\n".join(failure.state) + "\n")
        if violations:
            out.write("still failing:\n" + "".join(f"  - {v}\n" for v in violations))
            return 1
        out.write("passes now\n")
        return 0
    names = args.workload or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        return fail(None, "crash-test", USAGE, f"unknown workload(s): {', '.join(unknown)}; --list shows them")
    models = ["psow", "npsow"] if args.model == "both" else [args.model]
    bar = Progress(sys.stderr, "power loss")
    tallies = campaign.run_campaign(
        names, models, args.states, args.seed, save_dir=args.save_dir, progress=bar, runs_max=args.runs
    )
    bar.end()
    sites: list[faultsweep.SiteResult] = []
    if not args.no_faults:
        sites = faultsweep.sweep(names, args.seed) + faultsweep.random_faults(
            [n for n in names if n == "group"] or names, 20, args.seed
        )
    kills = None
    if args.kill_rounds > 0:
        bar = Progress(sys.stderr, "kill -9")
        with tempfile.TemporaryDirectory(prefix="journal-kill-") as d:
            kills = killtest.run_kill_rounds(args.kill_rounds, args.seed, d, progress=bar)
        bar.end()
    return report(out, tallies, sites, kills, campaign.sector_option())


def report(
    out: TextIO,
    tallies: Sequence[object],
    sites: Sequence[object],
    kills: object | None,
    sector_option: str | None,
) -> int:
    from journal.crashsim.campaign import Tally
    from journal.crashsim.faultsweep import SiteResult
    from journal.crashsim.killtest import KillStats

    bad = 0
    out.write(
        f"\n{'workload':<{NAME_WIDTH}} {'model':<6} {'runs':>5} {'states':>7} {'detected':>8} "
        f"{'violations':>10}  seeds of failures\n"
    )
    states = 0
    for t in tallies:
        assert isinstance(t, Tally)
        states += t.states
        seeds = sorted({f.seed for f in t.failures})
        bad += t.violations
        out.write(
            f"{t.workload:<{NAME_WIDTH}} {t.model:<6} {t.runs:>5} {t.states:>7} {t.detected_damage:>8} "
            f"{t.violations:>10}  {', '.join(map(str, seeds[:8]))}\n"
        )
    out.write(f"{'total':<{NAME_WIDTH}} {'':<6} {'':>5} {states:>7}\n")
    out.write("states: distinct crash states checked per workload and model (a disk image with what the ledger\n"
              "expects of it; one seen before is not checked again)\n")
    if any(t.model == "npsow" for t in tallies if isinstance(t, Tally)):
        how = f"with {sector_option}=4096" if sector_option else "the engine offers no sector padding option"
        out.write(f"npsow ran {how}\n")
    site_bad = [s for s in sites if isinstance(s, SiteResult) and s.violations]
    if sites:
        out.write(f"injected I/O errors: {len(sites)} sites, {len(site_bad)} with violations\n")
        for s in site_bad[:10]:
            out.write(f"  {s.name()}: {s.violations[0]}\n")
        bad += len(site_bad)
    if isinstance(kills, KillStats):
        out.write(
            f"kill -9: {kills.rounds} rounds ({kills.killed_before_ready} killed during open, "
            f"{kills.killed_in_flight} with an append in flight), {kills.acked} records acknowledged, "
            f"{kills.records_checked} records read back, {len(kills.violations)} violations\n"
        )
        for msg in kills.violations[:10]:
            out.write(f"  {msg}\n")
        bad += len(kills.violations)
    for t in tallies:
        if isinstance(t, Tally):
            for f in t.failures[:3]:
                out.write(f"\nFAIL {f.workload}/{f.model} seed {f.seed}: {f.violations[0]}\n")
                out.write("".join(f"  {line}\n" for line in f.state[:12]))
                if f.saved_to:
                    out.write(f"  saved: {f.saved_to}  (journal crash-test --replay {f.saved_to})\n")
    verdict = "OK" if bad == 0 else "FAILED"
    out.write(f"\n{verdict}: {bad} violation(s)\n")
    return 0 if bad == 0 else 1


def _summary(name: str, run: object) -> str:
    """One line on what a workload does: its function's docstring, or else its module's, whose
    first line reads ``name: what it does``."""
    doc = (getattr(run, "__doc__", None) or "").strip()
    if not doc:
        module = sys.modules.get(getattr(run, "__module__", ""))
        doc = (getattr(module, "__doc__", None) or "").strip().removeprefix(f"{name}: ")
        doc = doc[:1].upper() + doc[1:]
    return doc.splitlines()[0] if doc else ""
