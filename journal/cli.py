"""The `journal` command. Each subcommand lives in its own module with configure() and run().

A subcommand module keeps heavy imports inside run(), so building the parser stays fast and
a missing optional dependency of one subcommand never breaks another.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

# name -> (module, one-line help). The module defines configure(parser) and run(args) -> int.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("journal.demo", "write, kill -9 a writer mid-batch, recover, and explain the outcomes"),
}


def _optional(name: str, module: str, help_text: str) -> None:
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is absent
        found = False
    if found:
        SUBCOMMANDS[name] = (module, help_text)


_optional("crash-test", "journal.crashsim.command", "run the crash-injection campaign")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="journal", description="A crash-safe append-only journal.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    code: int = importlib.import_module(args._module).run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
