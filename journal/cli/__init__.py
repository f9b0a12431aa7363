"""The `journal` command. Each subcommand lives in its own module with configure() and run().

A subcommand module keeps heavy imports inside run(), so building the parser stays fast and
a missing optional dependency of one subcommand never breaks another. Typed errors become the
documented exit codes here (journal/cli/common.py, docs/CLI.md), with the error's own
message, which says what to do, on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

# name -> (module, one-line help). The module defines configure(parser) and run(args) -> int.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "info": ("journal.cli.info", "segments, records, size, last seq, format version, frame path"),
    "cat": ("journal.cli.cat", "print records as JSON lines (--after-seq, --limit, --type)"),
    "tail": ("journal.cli.tail", "print the last records; -f follows a live journal"),
    "verify": ("journal.cli.verify", "read-only check of every frame and structure; exit code = verdict"),
    "repair": ("journal.cli.repair", "byte-level recovery and session closers (--dry-run shows them)"),
    "salvage": ("journal.cli.salvage", "copy what is recoverable from a damaged journal into a new one"),
    "import": ("journal.cli.import_", "import another runtime's session log or trajectory (--help lists the formats)"),
    "export": ("journal.cli.export", "an imported journal back in its source format, or any session as Markdown"),
    "sessions": ("journal.cli.sessions", "list the sessions of a session store"),
    "dictionary": ("journal.cli.dictionary", "train and list the zstd dictionary of a session store"),
    "fork": ("journal.cli.fork", "fork a session at a clean boundary into a new session journal"),
    "copy": ("journal.cli.copy", "copy a journal to a new one on any backend (directory or server URL), verified"),
    "view": ("journal.cli.view", "a local read-only web page over a session store, a journal or a server store"),
    "demo": ("journal.cli.demo", "write, kill -9 a writer mid-batch, recover, and explain the outcomes"),
}


def _optional(name: str, module: str, help_text: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is absent
        found = False
    if found:
        SUBCOMMANDS[name] = (module, help_text)


_optional("crash-test", "journal.cli.crash_test", "run the crash-injection campaign")
_optional("bench", "journal.cli.bench", "throughput against the stores a user would otherwise pick")
_optional("hostile-test", "journal.cli.hostile_test", "every reader and command on crafted journal directories")


def version_line() -> str:
    """What ``journal --version`` prints: the release, where the package was imported from (a
    checkout in the current directory shadows an installed package), the Python, the frame path."""
    from importlib import metadata

    import journal
    from journal.errors import DISTRIBUTION_NAME

    try:
        release = metadata.version(DISTRIBUTION_NAME)
    except metadata.PackageNotFoundError:
        release = f"(not installed as {DISTRIBUTION_NAME})"
    where = os.path.dirname(os.path.abspath(journal.__file__))
    frame_path = "C helper" if journal.native_available() else "pure Python (no C helper)"
    return f"journal {release} from {where}, Python {sys.version.split()[0]}, frame path: {frame_path}"


class _VersionAction(argparse.Action):
    """--version, worked out only when asked (it imports the engine, which --help does not need)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="print the version, the Python and the frame path, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    from journal.cli.common import Parser

    parser = Parser(
        prog="journal",
        description="A crash-safe append-only journal for agent session event logs. See docs/CLI.md.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        # _parser: the subcommand's own parser, which reports arguments it does not know (main)
        p.set_defaults(_module=module, _parser=p)
        importlib.import_module(module).configure(p)
    return parser


def _cli_message(exc: BaseException) -> str:
    """The error's message for someone at the command line: where the library's message tells a
    Python caller what to call (journal.open(..., create=True)), what to type instead."""
    from journal.errors import JournalLockedError, JournalNotFoundError, NotAJournalError

    if isinstance(exc, JournalNotFoundError):
        return (f"no journal at {exc.path!r}: check the path (`journal import`, `journal copy` and "
                "`journal salvage` write a new journal)")
    if isinstance(exc, NotAJournalError):
        return f"{exc.path!r} is not a journal ({exc.why}): give the command a journal directory"
    if isinstance(exc, JournalLockedError):
        holder = f"process {exc.pid}" if exc.pid is not None else "another process"
        return (f"journal {exc.path!r} is locked for writing by {holder}: wait for it to finish; "
                "info, cat, tail and verify read it meanwhile without the lock")
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    from journal.cli.common import INTERRUPTED, Parser, exit_code_for, fail
    from journal.errors import JournalError

    argv = list(sys.argv[1:] if argv is None else argv)
    Parser.json_errors = "--json" in argv  # usage errors too are one JSON object then
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # The subcommand's own parser says so, with its usage line, not the top level's.
        (getattr(args, "_parser", None) or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code: int = importlib.import_module(args._module).run(args)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # `journal cat ... | head`: the reader left; that is not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (JournalError, OSError, ValueError) as exc:  # OSError: FileNotFoundError, PermissionError ...
        return fail(args, args.command, exit_code_for(exc), _cli_message(exc), errorType=type(exc).__name__)
    return code


if __name__ == "__main__":
    sys.exit(main())
