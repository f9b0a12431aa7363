"""Every example in README.md and docs/*.md runs, so the docs cannot drift from the code.

- A fenced ``python`` block runs: the blocks of one document in order, in one process, in a
  temporary directory (a later block may use what an earlier one made), with top-level await.
  A block that needs what no test has here (a model to call, an application's graph, a server
  named by a deployment) is marked below, with why: its import lines run and the rest compiles.
- A shell example (an indented block whose first word is a command: ``journal``, ``pip``,
  ``python3``, ``bash`` ...) is checked line by line: each ``journal`` command parses with the
  command's own parser (its subcommand and options exist), each install line names this
  package and extras it has, each script it runs exists.

A block is named by its document and the start of its first line, so that edits elsewhere in
a document do not move it; a mark that names no block fails, so that none goes stale.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DISTRIBUTION = "journal-engine"

# (document, start of the block's first line) -> why only its imports run (the rest compiles).
IMPORTS_ONLY: dict[tuple[str, str], str] = {
    ("docs/ADAPTERS.md", 'saver = JournalSaver("postgresql://'): "names a deployment's servers",
    ("docs/ADAPTERS.md", "from journal.adapters.openai_agents import"): "needs an agent and a model to call",
    ("docs/ADAPTERS.md", "from journal.adapters.langgraph import JournalSaver\ngraph"): "needs the application's graph",
    ("docs/ADAPTERS.md", "saver = JournalSaver(\"checkpoints/\", allowed_types"): "names the application's types",
    ("docs/ADAPTERS.md", "from journal.adapters.adk import"): "needs an agent and a model to call",
    ("docs/ADAPTERS.md", "from journal.adapters.pydantic_ai import"): "needs an agent and a model to call",
    ("docs/ADAPTERS.md", "from strands import Agent"): (
        "needs the application's tools and a model; examples/strands_crash_safe_tool.py runs an agent with the guard"
    ),
    ("docs/ADAPTERS.md", "from journal.adapters.agent_framework import JournalCheckpointStorage"): (
        "needs a chat client and the application's workflow; tests/test_adapter_agent_framework.py runs both stores"
    ),
    ("docs/ADAPTERS.md", "from journal.adapters.agent_framework import JournalHistoryProvider\nfrom"): (
        "needs a chat client and the application's tools; examples/agent_framework_crash_safe_tool.py runs the guard"
    ),
    ("docs/ADAPTERS.md", "from claude_agent_sdk import ClaudeAgentOptions"): (
        "needs the Claude Code CLI and a model; examples/claude_agent_sdk_store.py runs the store through the SDK"
    ),
    ("docs/ADAPTERS.md", "from journal.adapters.langgraph import JournalSaver\nfrom journal.adapters.langgraph_"): (
        "needs the application's graph; tests/test_guard_langgraph.py runs the guard"
    ),
    ("docs/REMOTE.md", "import journal\nj = journal.open(\"postgresql://"): (
        "needs PostgreSQL and NATS; tests/test_remote_postgres.py and tests/test_remote_nats.py open these URLs"
    ),
}
# (document, start of the first line) -> why a shell example is not checked.
SHELL_SKIPPED: dict[tuple[str, str], str] = {
    ("docs/CLI.md", "journal COMMAND [options]"): "the synopsis of every command, not a command",
}
# Paths an example writes to outside its directory, and where they go instead (under the
# temporary directory it runs in); a placeholder a shell example leaves for the reader to fill.
REWRITES: dict[str, str] = {
    "/var/lib/agent/": "var/lib/agent/",
    "--model M ": "--model psow ",
    "--seed S ": "--seed 1 ",
}
SHELL_FIRST_WORDS = ("journal", "pip", "python", "python3", "bash", ".venv/bin/", "scripts/")


@dataclass
class Block:
    doc: str  # relative to the root of the tree
    line: int  # of its first line, 1-based
    kind: str  # "python" or "shell"
    code: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    def starts(self, prefix: str) -> bool:
        return self.code.lstrip().startswith(prefix)


def _blocks(path: Path) -> list[Block]:
    doc = str(path.relative_to(ROOT))
    lines = path.read_text(encoding="utf-8").split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            lang = line[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if lang == "python":
                out.append(Block(doc, i + 2, "python", "\n".join(lines[i + 1 : j]) + "\n"))
            elif lang in ("sh", "shell", "bash", "console"):
                out.append(Block(doc, i + 2, "shell", "\n".join(lines[i + 1 : j]) + "\n"))
            i = j + 1
            continue
        if line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            code = textwrap.dedent("\n".join(lines[i:j])).strip("\n") + "\n"
            if code.lstrip().startswith(SHELL_FIRST_WORDS):
                out.append(Block(doc, i + 1, "shell", code))
            i = j
            continue
        i += 1
    return out


BLOCKS = [b for path in DOCS for b in _blocks(path)]


def _marked(block: Block, marks: dict[tuple[str, str], str]) -> str | None:
    return next((why for (doc, prefix), why in marks.items() if doc == block.doc and block.starts(prefix)), None)


def test_every_mark_names_a_block() -> None:
    for marks in (IMPORTS_ONLY, SHELL_SKIPPED):
        for doc, prefix in marks:
            assert any(b.doc == doc and b.starts(prefix) for b in BLOCKS), f"no block of {doc} starts {prefix!r}"
    assert sum(b.kind == "python" for b in BLOCKS) >= 10 and sum(b.kind == "shell" for b in BLOCKS) >= 5


# -- Python ------------------------------------------------------------------------------------

# Runs the blocks it is given as JSON on stdin, in order, in one namespace; prints one JSON line
# per block: its name and the error it raised (None when it ran).
RUNNER = r"""
import ast, asyncio, json, sys, traceback
ns = {"__name__": "__doc_example__"}
for block in json.load(sys.stdin):
    try:
        code = compile(block["code"], block["name"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        if block["imports_only"]:
            tree = ast.parse(block["code"])
            imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            code = compile(ast.Module(body=imports, type_ignores=[]), block["name"], "exec")
        result = eval(code, ns)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
        error = None
    except BaseException:
        error = traceback.format_exc(limit=-3)
    print(json.dumps({"name": block["name"], "error": error}), flush=True)
"""

FRAMEWORKS = {"journal.adapters.openai_agents": "agents", "journal.adapters.langgraph": "langgraph",
              "journal.adapters.adk": "google.adk", "journal.adapters.pydantic_ai": "pydantic_ai"}


def _needs_missing_framework(code: str) -> str | None:
    import importlib.util

    for module, framework in FRAMEWORKS.items():
        if module in code and importlib.util.find_spec(framework.split(".")[0]) is None:
            return framework
    return None


@pytest.mark.parametrize("doc", sorted({b.doc for b in BLOCKS if b.kind == "python"}))
def test_python_examples_run(doc: str, tmp_path: Path) -> None:
    blocks = [b for b in BLOCKS if b.doc == doc and b.kind == "python"]
    missing = {m for b in blocks if (m := _needs_missing_framework(b.code))}
    if missing:
        if os.environ.get("JOURNAL_REQUIRE_FRAMEWORKS") == "1":
            pytest.fail(f"JOURNAL_REQUIRE_FRAMEWORKS=1 but {', '.join(sorted(missing))} is not installed")
        pytest.skip(f"{', '.join(sorted(missing))} not installed (the adapters' extras)")
    payload = []
    for b in blocks:
        code = b.code
        for old, new in REWRITES.items():
            code = code.replace(old, new)
        payload.append({"name": b.name, "code": code, "imports_only": _marked(b, IMPORTS_ONLY) is not None})
    got = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(payload), capture_output=True,
                         text=True, cwd=tmp_path, timeout=300, env={**os.environ, "JOURNAL_NO_PROGRESS": "1"})
    results = [json.loads(line) for line in got.stdout.splitlines() if line.startswith('{"name"')]
    assert [r["name"] for r in results] == [b.name for b in blocks], got.stdout[-3000:] + got.stderr[-3000:]
    failed = [f"{r['name']}:\n{r['error']}" for r in results if r["error"]]
    assert not failed, "examples that no longer run (fix the doc, or mark the block with why):\n" + "\n".join(failed)


# -- shell ---------------------------------------------------------------------------------------


def _commands(code: str) -> list[str]:
    """The commands of a shell block: one per line and per `&&` or `;`, comments left out."""
    out = []
    for line in code.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        out.extend(part.strip() for part in re.split(r"&&|;", line) if part.strip())
    return out


def _check_journal_command(argv: list[str]) -> str | None:
    from journal.cli import build_parser
    from journal.cli.common import Parser

    Parser.json_errors = False
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help and --version exit 0 once they have printed
        return None if exc.code in (0, None) else f"the command's parser refused it (exit {exc.code})"
    if unknown:
        return f"unknown arguments {unknown}"
    return None if args.command else "no subcommand"


def _check_install(argv: list[str]) -> str | None:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    for arg in argv[2:]:
        if arg.startswith("-"):
            continue
        m = re.fullmatch(r"(?:(?P<dist>[\w.-]+)|\.)\[(?P<extras>[\w,-]+)\]", arg)
        if m is None:
            if arg not in (".", DISTRIBUTION):
                return f"installs {arg!r}, not {DISTRIBUTION} or this tree"
            continue
        if m["dist"] not in (None, DISTRIBUTION):
            return f"installs {m['dist']!r}, not {DISTRIBUTION}"
        unknown = set(m["extras"].split(",")) - extras
        if unknown:
            return f"names extras pyproject.toml does not have: {sorted(unknown)}"
    return None


def _check_command(command: str) -> str | None:
    argv = shlex.split(command)
    exe = argv[0].removeprefix(".venv/bin/")
    if exe == "journal":
        return _check_journal_command(argv[1:])
    if exe == "pip" and argv[1:2] == ["install"]:
        return _check_install(argv)
    if exe == "bash":
        return None if (ROOT / argv[1]).is_file() else f"{argv[1]} does not exist"
    if exe.startswith(("python", "python3")):
        if argv[1:3] == ["-m", "venv"]:
            return None
        if argv[1:3] == ["-m", "journal"]:
            return _check_journal_command(argv[3:])
    return f"a command this test does not know how to check: {command!r} (add it here, or mark the block)"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.kind == "shell"], ids=lambda b: b.name)
def test_shell_examples_parse(block: Block) -> None:
    why = _marked(block, SHELL_SKIPPED)
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("tomllib")  # Python 3.11+: the tree's checks run on the suite's Python
    code = block.code
    for old, new in REWRITES.items():
        code = code.replace(old, new)
    problems = [f"{c}: {p}" for c in _commands(code) if (p := _check_command(c)) is not None]
    assert not problems, f"{block.name}: " + "\n".join(problems)
