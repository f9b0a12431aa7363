"""The event mix the benchmark appends: agent-session events shaped like real session logs.

The shares and sizes come from the real session files this project is tested against (a pi
session of 460 records, a Codex rollout, Claude Code transcripts): assistant messages and tool
results dominate, tool results have a long tail (median ~1.1 KB, p95 ~6 KB, p99 ~22 KB, max
~100 KB), user messages and turn boundaries are a few hundred bytes. Runtimes that persist
streaming output add many small deltas (tens of bytes). The text is generated from a fixed seed
out of English words, code, paths, test output and hex ids, so that it compresses about as well
as real session text does (zstd level 1 per record: real files 0.49x of JSONL with a 32-byte
frame header; this mix is within a few points of that, see ``compression_check``).

| kind | share | serialized size |
|---|---:|---|
| assistant_delta | 20% | 60-200 B |
| assistant_message | 15% | 300 B - 8 KB, median ~1.2 KB |
| tool_intent | 13% | 250-450 B |
| tool_started | 5% | ~200 B |
| tool_result | 15% | 200 B - 64 KB, median ~1.2 KB, p99 ~25 KB |
| user_message | 7% | 150-1000 B |
| turn_started / turn_ended | 5% + 5% | ~200 B |
| usage | 10% | ~350 B |
| approval | 5% | ~250 B |
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

Event = dict[str, Any]

KINDS: list[tuple[str, int]] = [
    ("assistant_delta", 20),
    ("assistant_message", 15),
    ("tool_intent", 13),
    ("tool_started", 5),
    ("tool_result", 15),
    ("user_message", 7),
    ("turn_started", 5),
    ("turn_ended", 5),
    ("usage", 10),
    ("approval", 5),
]

_WORDS = (
    "the a to of and in is it that for on this with be we as not you are can if an or at by from "
    "test file function error value return call fix change should will need let me check now first "
    "then update run build module import class config path line output result failing passes bug "
    "because instead using read write append event session journal record segment index tool turn "
    "step approval model reply message user assistant context token cache request response status "
    "install package version python async await yield self args kwargs none true false default"
).split()
_CODE = [
    "def {w}_{n}(self, {w2}: int) -> bool:",
    "    return self._{w}[{n}] == {w2}",
    "    if not {w}:",
    '        raise ValueError(f"{w} {w2} {{n}}")',
    "import {w}",
    "from .{w} import {w2}_{n}",
    "class {W}{W2}:",
    "    {w}_{w2} = {n}",
    "// {w} {w2} {w}",
    "const {w} = await {w2}({n});",
]
_TOOLS = ["bash", "read", "edit", "write", "grep", "glob", "web_fetch", "apply_patch"]


class _Text:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        # A Zipf-like choice: common words far more often than rare ones, as in real text.
        self.weights = [1.0 / (i + 1) for i in range(len(_WORDS))]
        self.phrases: list[str] = []

    def words(self, size: int) -> str:
        # Real prose repeats itself (names, phrases, quoted code): a third of the phrases are
        # drawn again from the ones already written, which is what makes it compress.
        rng = self.rng
        out: list[str] = []
        n = 0
        while n < size:
            if self.phrases and rng.random() < 0.35:
                phrase = rng.choice(self.phrases)
            else:
                phrase = " ".join(rng.choices(_WORDS, self.weights, k=rng.randrange(4, 12)))
                if len(self.phrases) < 400:
                    self.phrases.append(phrase)
            out.append(phrase)
            n += len(phrase) + 1
        return " ".join(out)[:size]

    def code(self, size: int) -> str:
        rng = self.rng
        lines: list[str] = []
        n = 0
        while n < size:
            kind = rng.random()
            if kind < 0.55:
                w, w2 = rng.choice(_WORDS), rng.choice(_WORDS)
                line = rng.choice(_CODE).format(w=w, w2=w2, W=w.capitalize(), W2=w2.capitalize(), n=rng.randrange(1000))
            elif kind < 0.75:
                line = (
                    f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)}_{rng.randrange(99)} "
                    f"{rng.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED'])}"
                )
            elif kind < 0.85:
                line = (
                    f"-rw-r--r-- 1 dev dev {rng.randrange(100, 99999):>6} Nov {rng.randrange(1, 30):>2} "
                    f"{rng.randrange(24):02}:{rng.randrange(60):02} src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py"
                )
            elif kind < 0.92:
                line = f"{rng.randbytes(20).hex()} {rng.choice(_WORDS)}: {self.words(40)}"
            else:
                line = self.words(rng.randrange(30, 120))
            lines.append(line)
            n += len(line) + 1
        return "\n".join(lines)

    def long_tail(self, median: int, cap: int) -> int:
        """A log-normal size: most near ``median``, a few up to ``cap``."""
        return int(min(cap, max(40, self.rng.lognormvariate(0, 1.1) * median)))


def make_events(count: int, seed: int = 7) -> list[Event]:
    """``count`` events of the documented mix, the same for a given seed on every machine."""
    rng = random.Random(seed)
    text = _Text(rng)
    names = [k for k, _ in KINDS]
    weights = [w for _, w in KINDS]
    session = "s-01JDX7Q4ZC5N8W3Y2K1M0P9R6T"
    out: list[Event] = []
    turn = 0
    for i, kind in enumerate(rng.choices(names, weights, k=count)):
        base: Event = {
            "schemaVersion": 1,
            "sessionId": session,
            "time": 1_766_000_000_000 + i * 37,
            "type": kind,
            "turnId": f"t-{turn:04d}",
        }
        call = f"call_{rng.randbytes(6).hex()}"
        if kind == "assistant_delta":
            base["text"] = text.words(rng.randrange(10, 120))
        elif kind == "assistant_message":
            base["content"] = [{"type": "text", "text": text.words(text.long_tail(1100, 10_000))}]
            base["usage"] = {"input": rng.randrange(9999), "output": rng.randrange(999), "cacheRead": 0}
        elif kind == "tool_intent":
            tool = rng.choice(_TOOLS)
            base.update(
                toolCallId=call, tool=tool, args={"path": f"src/{rng.choice(_WORDS)}.py", "cmd": text.words(80)}
            )
        elif kind == "tool_started":
            base.update(toolCallId=call, attemptId=f"a-{rng.randrange(9)}")
        elif kind == "tool_result":
            base.update(toolCallId=call, status="ok", exitCode=0, output=text.code(text.long_tail(1000, 100_000)))
        elif kind == "user_message":
            base["text"] = text.words(rng.randrange(60, 900))
        elif kind == "turn_started":
            turn += 1
            base["turnId"] = f"t-{turn:04d}"
            base["goal"] = text.words(40)
        elif kind == "turn_ended":
            base["reason"] = rng.choice(["completed", "completed", "interrupted"])
        elif kind == "usage":
            base["tokens"] = {
                "input": rng.randrange(1, 200_000),
                "cachedInput": rng.randrange(100_000),
                "output": rng.randrange(9999),
                "reasoning": rng.randrange(9999),
                "total": rng.randrange(300_000),
            }
            base["rateLimits"] = {"primary": {"usedPercent": rng.random() * 100, "windowMinutes": 300}}
        else:
            base.update(toolCallId=call, decision=rng.choice(["approved", "denied"]), by="user", scope="once")
        out.append(base)
    return out


def size_summary(sizes: list[int]) -> dict[str, int]:
    s = sorted(sizes)
    n = len(s)
    return {
        "count": n,
        "mean": sum(s) // max(1, n),
        "p50": s[n // 2] if n else 0,
        "p95": s[int(n * 0.95)] if n else 0,
        "p99": s[int(n * 0.99)] if n else 0,
        "max": s[-1] if n else 0,
    }


def real_session_events(root: str) -> list[Event]:
    """The dict lines of every ``*.jsonl`` file under ``root`` (real session logs, read in
    place), in name order; a line that is not JSON (damage in a real file) is not an event."""
    return [e for path in session_files(root) for e in file_events(path)]


# --- the second mix: a tool loop ------------------------------------------------------------------

TOOLS_MIX_EVENTS = 4000  # the mix is these events; a workload that needs more goes round them again
TOOLS_MIX_SEED = 13
TOOLS_KINDS: list[tuple[str, int]] = [
    ("assistant_delta", 45),
    ("tool_intent", 15),
    ("tool_result", 25),
    ("assistant_message", 10),
    ("user_message", 5),
]
DELTA_TEXT_BYTES = 40
TOOL_RESULT_BYTES_MIN = 300
TOOL_RESULT_BYTES_MAX = 12 * 1024


def make_tool_events(count: int = TOOLS_MIX_EVENTS, seed: int = TOOLS_MIX_SEED) -> list[Event]:
    """A coding agent's tool loop, unlike the default mix in every size: tool results of 300 B to
    12 KB (log-uniform: as many of 300-600 B as of 6-12 KB), streamed deltas of 40 bytes of
    text, and short messages (20-200 B of text); no usage, approval or turn records."""
    rng = random.Random(seed)
    text = _Text(rng)
    names = [k for k, _ in TOOLS_KINDS]
    weights = [w for _, w in TOOLS_KINDS]
    out: list[Event] = []
    call = ""
    for i, kind in enumerate(rng.choices(names, weights, k=count)):
        base: Event = {"type": kind, "sessionId": "s-tools-01", "time": 1_766_000_000_000 + i * 11}
        if kind == "assistant_delta":
            base["text"] = text.words(DELTA_TEXT_BYTES + 1)[:DELTA_TEXT_BYTES]  # words() may end a byte short
        elif kind == "tool_intent":
            call = f"call_{rng.randbytes(6).hex()}"
            base.update(toolCallId=call, tool=rng.choice(_TOOLS), args={"cmd": text.words(rng.randrange(20, 120))})
        elif kind == "tool_result":
            size = int(TOOL_RESULT_BYTES_MIN * (TOOL_RESULT_BYTES_MAX / TOOL_RESULT_BYTES_MIN) ** rng.random())
            base.update(toolCallId=call or "call_none", status="ok", output=text.code(size + 1)[:size])
        else:
            base["text"] = text.words(rng.randrange(20, 200))
        out.append(base)
    return out


def make_mix(name: str, count: int, corpus: str | None = None) -> list[Event]:
    """``count`` events of the mix ``name`` (MIXES), the same on every machine; the corpus mix is
    the real session files under ``corpus``, in file order, gone round again as ``count`` needs."""
    if name == "agent":
        return make_events(count)
    if name == "tools":
        base = make_tool_events()
    elif name == CORPUS_MIX:
        if corpus is None:
            raise ValueError("the corpus mix is the real session files: give their folder (journal bench --corpus DIR)")
        base = real_session_events(corpus)
        if not base:
            raise ValueError(f"no session events in the .jsonl files under {corpus}: the corpus mix has none")
    else:
        raise ValueError(f"no event mix {name!r}; one of {', '.join(MIXES)}")
    return [base[i % len(base)] for i in range(count)]


CORPUS_MIX = "corpus"
# name -> (kinds, what it is)
MIXES: dict[str, tuple[list[tuple[str, int]], str]] = {
    "agent": (KINDS, "agent sessions: the shares and sizes of real session logs"),
    "tools": (TOOLS_KINDS, "a tool loop: results 300 B-12 KB, 40-byte deltas, short messages; 4,000 events"),
    CORPUS_MIX: ([], "the real session files of --corpus, in file order, gone round again as a workload needs"),
}
DEFAULT_MIX = "agent"


def session_files(root: str) -> list[str]:
    """Every ``*.jsonl`` file under ``root``, in path order."""
    out: list[str] = []
    for dirpath, _dirs, files in sorted(os.walk(root)):
        out += [os.path.join(dirpath, n) for n in sorted(files) if n.endswith(".jsonl")]
    return out


def file_events(path: str) -> list[Event]:
    """The dict lines of one session file; a line that is not JSON (damage in a real file) is
    not an event."""
    events: list[Event] = []
    with open(path, "rb") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                events.append(obj)
    return events
