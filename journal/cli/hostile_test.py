"""`journal hostile-test`: every reader, every command, on crafted journal directories.

The fuzzer is journal/crashsim/hostile.py; this module adds the command's own readers (``cat``,
``info``, ``verify``, ``repair``, ``salvage``, ``copy``, ``fork``, ``tail``, ``export``,
``import``), each run in the worker process through ``journal.cli.main`` as a user runs it, and
is the worker's entry point. Exit status 0 when no reader failed, 1 otherwise. ``--replay FILE``
runs a saved failing input again; ``--seed`` and ``--index`` make a run repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from journal.cli.common import configure_common, int_at_least, seconds
from journal.crashsim import hostile
from journal.crashsim.hostile import COPIER, READ_ONLY, WRITER, Paths, Reader, Violation

SAVE_DIR_DEFAULT = "hostile-failures"
CHECKED = {0, 1, 3, 4, 6}  # what a command may answer about any directory: docs/CLI.md, "Exit codes"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=seconds, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="the seed; inputs repeat with it (default 0)")
    parser.add_argument("--index", type=int_at_least(0), default=0, help="the first input's index (default 0)")
    parser.add_argument("--inputs", type=int_at_least(1), help="stop after this many inputs")
    parser.add_argument("--memory-mib", type=int_at_least(64), default=hostile.MEMORY_BYTES_DEFAULT >> 20,
                        help="address-space limit of the worker process (default 768)")
    parser.add_argument("--timeout", type=seconds, default=hostile.RUN_TIMEOUT_S_DEFAULT,
                        help="wall-clock limit of one reader on one input (default 10)")
    parser.add_argument("--save-dir", default=SAVE_DIR_DEFAULT, help="where failing inputs are saved as JSON")
    parser.add_argument("--no-minimise", action="store_true", help="save failing inputs as found")
    parser.add_argument("--replay", metavar="FILE", help="run one saved failing input again and exit")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    configure_common(parser, json_flag=False)


def run(args: argparse.Namespace) -> int:
    if args.worker:
        worker(args.memory_mib << 20)
        return 0
    argv = worker_argv(args.memory_mib << 20)
    if args.replay:
        results = hostile.replay(args.replay, READERS, argv, timeout_s=args.timeout)
        bad = 0
        for res in results:
            bad += res["status"] == "fail"
            what = res.get("failure") or res.get("error") or json.dumps(res.get("facts"))[:200]
            sys.stdout.write(f"{res['reader']:<16} {res['status']:<6} {what}\n")
            if res.get("traceback"):
                sys.stdout.write(res["traceback"] + "\n")
        return 1 if bad else 0
    summary = hostile.campaign(READERS, argv, args.seconds, seed=args.seed, save_dir=args.save_dir,
                               memory_bytes=args.memory_mib << 20, timeout_s=args.timeout,
                               minimise=not args.no_minimise, inputs_max=args.inputs,
                               out=_say, first_index=args.index)
    sys.stdout.write("\n".join(summary.lines()) + "\n")
    return 1 if summary.failures else 0


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def worker_argv(memory_bytes: int) -> list[str]:
    """The command line of a worker process (journal.crashsim.hostile.Worker starts it)."""
    return [sys.executable, "-c", f"from journal.cli.hostile_test import worker; worker({memory_bytes})"]


def worker(memory_bytes: int = hostile.MEMORY_BYTES_DEFAULT) -> None:
    hostile.worker_loop(READERS, memory_bytes)


# --- the command's readers ------------------------------------------------------------------------------

_JOURNAL_ERRORS: set[str] = set()


def _journal_error_names() -> set[str]:
    """The names of every JournalError subclass (what a --json error's errorType may be)."""
    if not _JOURNAL_ERRORS:
        import journal.session.importers
        import journal.session.store  # noqa: F401
        from journal.errors import InvariantError, JournalError

        todo: list[type[BaseException]] = [JournalError]
        while todo:
            cls = todo.pop()
            if cls is not InvariantError:
                _JOURNAL_ERRORS.add(cls.__name__)
            todo.extend(cls.__subclasses__())
    return _JOURNAL_ERRORS


def cli(argv: list[str], allowed: set[int], verdicts: frozenset[int] = frozenset()) -> tuple[int, str]:
    """Run ``journal ARGV`` here; its exit code and stdout, once the oracle accepts them.

    An exit outside ``allowed``, an error whose type is not a JournalError, an error without a
    message, or a non-zero exit with neither an error nor a verdict (``verdicts``: the codes the
    command reports on stdout) is a Violation."""
    from journal.cli import main

    def call() -> int:
        try:
            return main(argv)
        except SystemExit as exc:  # argparse: a usage error on arguments that are fine
            return exc.code if isinstance(exc.code, int) else 1

    code, out, err = hostile.capture(call)
    if code not in allowed:
        raise Violation(f"exit {code} from {argv[0]}: {err.strip()[-300:] or out.strip()[-300:]}")
    if code == 0:
        return code, out
    lines = err.strip().splitlines()
    if lines:
        try:
            doc = json.loads(lines[-1])
        except ValueError:
            raise Violation(f"exit {code} from {argv[0]} with stderr that is not its --json error: "
                            f"{err.strip()[-300:]}") from None
        if not isinstance(doc, dict) or not str(doc.get("error", "")).strip():
            raise Violation(f"exit {code} from {argv[0]} with an error without a message: {lines[-1][:300]}")
        etype = doc.get("errorType")
        if etype is not None and etype not in _journal_error_names():
            raise Violation(f"exit {code} from {argv[0]} with {etype}: {str(doc['error'])[:300]}")
        return code, out
    if code in verdicts and out.strip():
        return code, out
    raise Violation(f"exit {code} from {argv[0]} with no error and no verdict")


def _doc(out: str) -> dict[str, Any]:
    try:
        doc = json.loads(out)
    except ValueError:
        raise Violation(f"--json output that is not one JSON document: {out[:200]!r}") from None
    if not isinstance(doc, dict):
        raise Violation(f"--json output that is not an object: {out[:200]!r}")
    return doc


def _lines(out: str) -> int:
    n = 0
    for line in out.splitlines():
        try:
            json.loads(line)
        except ValueError:
            raise Violation(f"a line of output that is not JSON: {line[:200]!r}") from None
        n += 1
    return n


def r_cat(p: Paths) -> dict[str, Any]:
    code, out = cli(["cat", p.journal, "--json"], CHECKED)
    return {"code": code, "lines": _lines(out)}


def r_tail(p: Paths) -> dict[str, Any]:
    code, out = cli(["tail", p.journal, "-n", "3", "--json"], CHECKED)
    return {"code": code, "lines": _lines(out)}


def r_info(p: Paths) -> dict[str, Any]:
    code, out = cli(["info", p.journal, "--json"], CHECKED)
    if code == 0:
        _doc(out)
    return {"code": code}


def r_verify(p: Paths) -> dict[str, Any]:
    code, out = cli(["verify", p.journal, "--json"], CHECKED | {7}, frozenset({1, 3, 6, 7}))
    verdict = _doc(out).get("verdict") if out.strip() else None
    expected = {"clean": {0, 1, 6}, "torn": {7, 1, 6}, "corrupt": {3}, "newer-format": {6}}
    if verdict is not None and code not in expected.get(verdict, {code}):
        raise Violation(f"verify verdict {verdict} with exit {code}")
    return {"code": code, "verdict": verdict}


def r_repair_dry_run(p: Paths) -> dict[str, Any]:
    code, _ = cli(["repair", p.journal, "--dry-run", "--json"], CHECKED, frozenset({1, 3, 6}))
    return {"code": code}


def r_repair(p: Paths) -> dict[str, Any]:
    from journal.engine.verify import verify

    code, _ = cli(["repair", p.journal, "--json"], CHECKED, frozenset({1, 3, 6}))
    if code == 0:
        rep = verify(p.journal)
        if rep.verdict != "clean":
            raise Violation(f"after repair exit 0 the journal verifies {rep.verdict}: {rep.summary()[:300]}")
    return {"code": code}


def r_salvage(p: Paths) -> dict[str, Any]:
    code, _ = cli(["salvage", p.journal, p.dest, "--json"], CHECKED | {8}, frozenset({8}))
    facts: dict[str, Any] = {"code": code, "made": code in (0, 8)}
    if code in (0, 8):
        facts.update(hostile.check_copy(p.dest))
    return facts


def r_copy(p: Paths) -> dict[str, Any]:
    code, _ = cli(["copy", p.journal, p.dest, "--json"], CHECKED, frozenset({3}))  # 3: a copy that differs
    facts: dict[str, Any] = {"code": code, "made": code == 0}
    if code == 0:
        facts.update(hostile.check_copy(p.dest))
    return facts


def r_fork(p: Paths) -> dict[str, Any]:
    import journal

    code, _ = cli(["fork", p.journal, p.dest, "--json"], CHECKED | {2})
    if code == 0:
        with journal.open(p.dest, readonly=True) as j:
            return {"code": code, "made": True, "records": hostile._count_read(j.read())}
    return {"code": code}


def r_export(p: Paths) -> dict[str, Any]:
    code, _ = cli(["export", p.journal, p.dest, "--json"], CHECKED)
    return {"code": code, "made": code == 0}


def _import(p: Paths, *flags: str) -> dict[str, Any]:
    with open(os.path.join(p.box, "format")) as f:
        form = f.read()
    code, _ = cli(["import", form, p.source, p.dest, "--json", *flags], CHECKED)
    facts: dict[str, Any] = {"code": code, "made": code == 0}
    if code == 0:
        facts.update(hostile.check_copy(p.dest))
    return facts


def r_import(p: Paths) -> dict[str, Any]:
    return _import(p)


def r_import_skip_bad(p: Paths) -> dict[str, Any]:
    return _import(p, "--skip-bad", "--split-joined")


READERS: list[Reader] = [
    *hostile.ENGINE_READERS[:-2],  # the writers' opens go last among the journal's own readers
    Reader("info", READ_ONLY, r_info),
    Reader("cat", READ_ONLY, r_cat),
    Reader("tail", READ_ONLY, r_tail),
    Reader("verify", READ_ONLY, r_verify),
    Reader("repair-dry-run", READ_ONLY, r_repair_dry_run),
    Reader("salvage", COPIER, r_salvage),
    Reader("copy", COPIER, r_copy),
    Reader("export", COPIER, r_export),
    Reader("fork", COPIER, r_fork, sessions_only=True),
    *hostile.ENGINE_READERS[-2:],
    Reader("repair", WRITER, r_repair),
    Reader("import", COPIER, r_import, imports=True),
    Reader("import-skip-bad", COPIER, r_import_skip_bad, imports=True),
]
