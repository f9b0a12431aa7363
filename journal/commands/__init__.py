"""The `journal` subcommands: one small module each, with ``configure(parser)`` and ``run(args)``.

journal/cli.py holds the registry. Shared pieces (exit codes, ``--json``, output) live in
``common``; see docs/CLI.md for the commands, their output and their exit codes.
"""
