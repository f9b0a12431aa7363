"""What every subcommand shares: exit codes, the ``--json`` flag, output, and error mapping.

Exit codes are part of the command's interface (scripts branch on them); docs/CLI.md lists
them and every ``--help`` ends with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

OK = 0  # done; verify: clean
ERROR = 1  # an error not covered below (the message on stderr says what to do)
USAGE = 2  # bad arguments (argparse's own code)
DAMAGED = 3  # committed journal data is damaged, or an import source has a malformed line
NOT_FOUND = 4  # no such journal or file, or the directory is not a journal
LOCKED = 5  # another process holds the journal's writer lock
NEWER_FORMAT = 6  # written by a newer format or schema than this version reads
TORN = 7  # verify: only a torn tail after the last durable point (`journal repair` cuts it)
LOST = 8  # salvage: the copy is made, but some records could not be recovered (see the report)
INTERRUPTED = 130  # Ctrl-C

EXIT_CODES_EPILOG = """exit codes:
  0  success (verify: clean)
  1  other error (the message says what to do)
  2  bad arguments
  3  damaged: corruption in committed journal data, or a malformed line in an import source
  4  not found: no such journal or file, or not a journal
  5  locked: another process is the journal's writer
  6  newer format: written by a newer version of the format or schema
  7  verify: torn tail only (`journal repair` cuts it; nothing durable is lost)
  8  salvage: copy made, but records were lost (the report says which and where)
  130 interrupted"""


def configure_common(parser: argparse.ArgumentParser, json_flag: bool = True) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (parser.epilog + "\n\n" if parser.epilog else "") + EXIT_CODES_EPILOG
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print one JSON document for scripts")


def dumps(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (json reads one from a stored "\ud83d"; the writer never stores
            # one) is no UTF-8 text, and printing it raised: JSON's escapes say it exactly.
            return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), sort_keys=False)
    return text


def emit(args: argparse.Namespace, human: str, data: Any) -> None:
    """Human text by default; with --json, the JSON document instead."""
    if getattr(args, "json", False):
        sys.stdout.write(dumps(data) + "\n")
    else:
        sys.stdout.write(human.rstrip("\n") + "\n")


def fail(args: argparse.Namespace | None, command: str, code: int, message: str, **fields: Any) -> int:
    """Report an error on stderr and return its exit code: ``journal CMD: message`` by default;
    with --json one JSON object, ``{"error", "exitCode", "command", ...fields}`` (camelCase keys)."""
    if args is not None and getattr(args, "json", False):
        sys.stderr.write(dumps({"error": message, "exitCode": code, "command": command, **fields}) + "\n")
    else:
        sys.stderr.write(f"journal {command}: {message}\n")
    return code


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors (exit 2) as one JSON object on stderr when --json is given."""

    json_errors = False  # set by main() when the command line holds --json

    def error(self, message: str) -> Any:  # argparse's signature: it never returns
        if Parser.json_errors:
            command = self.prog.removeprefix("journal").strip() or "journal"
            sys.stderr.write(dumps({"error": message, "exitCode": USAGE, "command": command,
                                    "usage": self.format_usage().strip()}) + "\n")
            sys.exit(USAGE)
        super().error(message)


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``low`` (and at most ``high``), else exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, not {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, at least 0, else exit 2."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, at least 0, not {text}")
    return value


def exit_code_for(exc: BaseException) -> int:
    """Map a typed error to the documented exit code."""
    from journal.errors import (
        CorruptionError,
        InvalidArgumentError,
        JournalLockedError,
        JournalNotFoundError,
        NewerFormatError,
        NotAJournalError,
    )
    from journal.session.errors import InvalidSessionIdError

    if isinstance(exc, (InvalidArgumentError, InvalidSessionIdError)):
        return USAGE
    if isinstance(exc, CorruptionError):
        return DAMAGED
    if isinstance(exc, (JournalNotFoundError, NotAJournalError, FileNotFoundError)):
        return NOT_FOUND
    if isinstance(exc, JournalLockedError):
        return LOCKED
    if isinstance(exc, NewerFormatError):
        return NEWER_FORMAT
    from journal.session.errors import NewerSchemaError
    from journal.session.store import SessionNotFoundError

    if isinstance(exc, NewerSchemaError):
        return NEWER_FORMAT
    if isinstance(exc, SessionNotFoundError):
        return NOT_FOUND
    return ERROR


def record_json(rec: Any) -> dict[str, Any]:
    """A record as one JSON object: seq, the event (or base64 bytes), and its flags."""
    import base64

    out: dict[str, Any] = {"seq": rec.seq}
    if rec.is_bytes:
        out["bytes"] = base64.b64encode(rec.payload).decode("ascii")
    else:
        out["event"] = rec.event
    if rec.synthetic:
        out["synthetic"] = True
    if rec.key is not None:
        out["key"] = rec.key
    return out


def record_size_limit() -> int:
    """The largest ``record_size_bytes_max`` the API allows: what a command reads with."""
    from journal.engine.options import RECORD_SIZE_BYTES_MAX_LIMIT

    return RECORD_SIZE_BYTES_MAX_LIMIT


def open_journal(target: str, **options: Any) -> Any:
    """``journal.open`` for a command: with the largest ``record_size_bytes_max`` the API allows,
    so a command reads (and copies) any record a writer could have stored. The limit belongs to a
    handle, not to the journal (which does not record its writer's), and a command has no option
    for it: with the handle's default a record over 16 MiB was refused with advice to raise a
    limit the command could not take."""
    import journal

    return journal.open(target, record_size_bytes_max=record_size_limit(), **options)


def is_session(j: Any) -> bool:
    """A session journal starts with its ``session.started`` header (journal/session/session.py)."""
    first = next(iter(j.read()), None)
    return (first is not None and not first.is_bytes and isinstance(first.event, dict)
            and first.event.get("type") == "session.started")


def event_type(rec: Any) -> str | None:
    if rec.is_bytes:
        return None
    ev = rec.event
    t = ev.get("type") if isinstance(ev, dict) else None
    return t if isinstance(t, str) else None
